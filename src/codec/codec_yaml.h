/* YAML codec internals: what codec_yaml.c, codec_yaml_load.c and codec_yaml_dump.c share.
 *
 * The YAML <-> json_t bridge on libyaml (PyYAML's YAML 1.1 typing, safe loading, yaml.dump
 * output) behind codec.h's mqproc__yaml_*() API is split in three:
 * - codec_yaml.c: the plain-scalar resolver (PyYAML's implicit resolver regexes,
 *   hand-compiled; used both ways) and scalar construction (ints, floats, bools as PyYAML's
 *   SafeConstructor builds them);
 * - codec_yaml_load.c: the loader (libyaml parser events -> json_t);
 * - codec_yaml_dump.c: the dumper (json_t -> libyaml emitter events, configured like
 *   PyYAML's default Dumper).
 */
#ifndef MQPROC_CODEC_YAML_H
#define MQPROC_CODEC_YAML_H

#include <stddef.h>

/* Nesting limit for loading and dumping (jansson's own parser stops at 2048). */
#define MAX_DEPTH 128

static inline int mqproc__yaml_is_dec(char c) {
  return c >= '0' && c <= '9';
}

/* Whether s[0..n) matches PyYAML's int resolver regex. */
int mqproc__yaml_match_int(const char *s, size_t n);

/* Whether s[0..n) is plain `<<` or `=`, which must be quoted (see the definition). */
int mqproc__yaml_is_merge_or_value(const char *s, size_t n);

/* Results of mqproc__yaml_int_value() besides 0. */
enum { INT_OUT_OF_RANGE = 1, INT_MALFORMED = 2 };

int mqproc__yaml_int_value(const char *s, size_t n, long long *out);

/* Results of the float helpers besides 0 and MQPROC_ENOMEM. */
enum { FLOAT_MALFORMED = 1, FLOAT_UNREPRESENTABLE = 2 };

int mqproc__yaml_float_value(const char *s, size_t n, double *out);

/* Value of a bool scalar (yes/no/true/false/on/off, any case); -1 if it is none of them. */
int mqproc__yaml_bool_value(const char *s, size_t n, int *out);

#endif
