/* YAML <-> json_t bridge on libyaml: PyYAML's YAML 1.1 typing, safe loading, yaml.dump output.
 *
 * Sections: the plain-scalar resolver (PyYAML's implicit resolver regexes, hand-compiled),
 * scalar construction (ints, floats, bools as PyYAML's SafeConstructor builds them), the
 * loader (libyaml parser events -> json_t) and the dumper (json_t -> libyaml emitter events,
 * configured like PyYAML's default Dumper).
 *
 * Choices worth knowing:
 * - TIMESTAMP plain scalars (2024-01-01, 2001-12-14 21:59:43.10 -5) load as JSON strings with
 *   their source text: JSON has no date type and every message field that could hold one is a
 *   string (PyYAML would build a datetime, which the OCR-D schema then rejects).
 * - .inf/.nan and floats beyond double range are errors: JSON cannot carry them.
 * - Integers beyond long long are errors (PyYAML has big ints).
 * - Non-string scalar keys (`1: x`, `yes: x`) are taken by their source text.
 * - Anchors, aliases, merge keys (<<) and tags other than !!str/int/float/bool/null/map/seq
 *   are rejected; so are duplicate keys (PyYAML keeps the last one) and a second document.
 * - The dumper matches PyYAML byte for byte except where libyaml's emitter differs from
 *   PyYAML's pure-Python one: double-quoted scalars wider than 80 columns (libyaml folds only
 *   at spaces), the empty key (PyYAML writes `? ''`), and keys of 123..128 characters (PyYAML
 *   switches to `? key` earlier). All of these still load to the same value.
 */
#include "codec.h"

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "util.h"

/* Nesting limit for loading and dumping (jansson's own parser stops at 2048). */
#define MAX_DEPTH 128
#define TAG_PREFIX "tag:yaml.org,2002:"
#define DEC "0123456789"
#define DEC_ "0123456789_"

/* ---------------------------------------------------------------------------------------
 * The YAML 1.1 resolver. Each matcher implements one of PyYAML's resolver regexes
 * (yaml/resolver.py) on s[0..n); they are deterministic because every optional digit group
 * is followed by a non-digit.
 * ------------------------------------------------------------------------------------- */

static int in_set(const char *set, char c) {
  return c != '\0' && strchr(set, c) != NULL;
}

static int is_dec(char c) {
  return c >= '0' && c <= '9';
}

/* Index of the first byte at or after i that is not in set. */
static size_t span_set(const char *s, size_t i, size_t n, const char *set) {
  while (i < n && in_set(set, s[i]))
    i++;
  return i;
}

static size_t skip_sign(const char *s, size_t n) {
  return n > 0 && (s[0] == '-' || s[0] == '+') ? 1 : 0;
}

/* Matches [0-9]{min,max} (greedy) at i; returns the end, or 0 when fewer than min. */
static size_t digits(const char *s, size_t i, size_t n, size_t min, size_t max) {
  size_t j = i;
  while (j < n && j - i < max && is_dec(s[j]))
    j++;
  return j - i < min ? 0 : j;
}

static int match_word(const char *s, size_t n, const char *const *words) {
  for (; *words != NULL; words++)
    if (strlen(*words) == n && memcmp(s, *words, n) == 0)
      return 1;
  return 0;
}

/* (?::[0-5]?[0-9])+ at i; returns the end or 0. */
static size_t sexagesimal_tail(const char *s, size_t i, size_t n) {
  size_t groups = 0;
  while (i < n && s[i] == ':') {
    size_t j = span_set(s, i + 1, n, DEC);
    size_t k = j - (i + 1);
    if (k == 0 || k > 2 || (k == 2 && s[i + 1] > '5'))
      return 0;
    i = j;
    groups++;
  }
  return groups > 0 ? i : 0;
}

/* (?:[eE][-+][0-9]+)? at i; returns the end (i when absent). */
static size_t exponent_tail(const char *s, size_t i, size_t n) {
  if (i + 2 < n && (s[i] == 'e' || s[i] == 'E') && (s[i + 1] == '-' || s[i + 1] == '+') &&
      is_dec(s[i + 2]))
    return span_set(s, i + 2, n, DEC);
  return i;
}

static int match_bool(const char *s, size_t n) {
  static const char *const words[] = {"yes",  "Yes",  "YES",   "no",    "No",    "NO", "true",
                                      "True", "TRUE", "false", "False", "FALSE", "on", "On",
                                      "ON",   "off",  "Off",   "OFF",   NULL};
  return match_word(s, n, words);
}

static int match_null(const char *s, size_t n) {
  static const char *const words[] = {"~", "null", "Null", "NULL", "", NULL};
  return match_word(s, n, words);
}

/* 0b[0-1_]+ | 0[0-7_]+ | 0 | [1-9][0-9_]* | 0x[0-9a-fA-F_]+ | [1-9][0-9_]*(:[0-5]?[0-9])+ */
static int match_int(const char *s, size_t n) {
  size_t i = skip_sign(s, n);
  size_t j;
  if (i >= n)
    return 0;
  if (s[i] == '0' && i + 1 < n && (s[i + 1] == 'b' || s[i + 1] == 'x')) {
    j = span_set(s, i + 2, n, s[i + 1] == 'b' ? "01_" : DEC_ "abcdefABCDEF");
    return j > i + 2 && j == n;
  }
  if (s[i] == '0')
    return span_set(s, i + 1, n, "01234567_") == n;
  if (!is_dec(s[i]))
    return 0;
  j = span_set(s, i + 1, n, DEC_);
  return j == n || sexagesimal_tail(s, j, n) == n;
}

/* [-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)? | \.[0-9][0-9_]*([eE][-+][0-9]+)?
 * | [-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\.[0-9_]* | [-+]?\.(inf|Inf|INF) | \.(nan|NaN|NAN) */
static int match_float(const char *s, size_t n) {
  static const char *const nan_words[] = {".nan", ".NaN", ".NAN", NULL};
  static const char *const inf_words[] = {".inf", ".Inf", ".INF", NULL};
  size_t i = skip_sign(s, n);
  size_t j;
  if (match_word(s, n, nan_words) || match_word(s + i, n - i, inf_words))
    return 1;
  if (i == 0 && n >= 2 && s[0] == '.' && is_dec(s[1]))
    return exponent_tail(s, span_set(s, 2, n, DEC_), n) == n;
  if (i >= n || !is_dec(s[i]))
    return 0;
  j = span_set(s, i + 1, n, DEC_);
  if (j < n && s[j] == ':') {
    j = sexagesimal_tail(s, j, n);
    return j != 0 && j < n && s[j] == '.' && span_set(s, j + 1, n, DEC_) == n;
  }
  if (j >= n || s[j] != '.')
    return 0;
  return exponent_tail(s, span_set(s, j + 1, n, DEC_), n) == n;
}

/* The time and zone part of the long timestamp form, from i (after the date). */
static int match_time(const char *s, size_t i, size_t n) {
  size_t j = span_set(s, i, n, " \t");
  if (i < n && (s[i] == 'T' || s[i] == 't'))
    i++;
  else if (j > i)
    i = j;
  else
    return 0;
  if (!(i = digits(s, i, n, 1, 2)) || i >= n || s[i] != ':')
    return 0;
  if (!(i = digits(s, i + 1, n, 2, 2)) || i >= n || s[i] != ':')
    return 0;
  if (!(i = digits(s, i + 1, n, 2, 2)))
    return 0;
  if (i < n && s[i] == '.')
    i = span_set(s, i + 1, n, DEC);
  if (i == n)
    return 1;
  i = span_set(s, i, n, " \t");
  if (i < n && s[i] == 'Z')
    return i + 1 == n;
  if (i >= n || (s[i] != '-' && s[i] != '+') || !(i = digits(s, i + 1, n, 1, 2)))
    return 0;
  if (i == n)
    return 1;
  return s[i] == ':' && digits(s, i + 1, n, 2, 2) == n;
}

/* [0-9]{4}-[0-9]{2}-[0-9]{2} | [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}(T|t|[ \t]+)<time>[<zone>] */
static int match_timestamp(const char *s, size_t n) {
  size_t i;
  if (n == 10 && digits(s, 0, n, 4, 4) == 4 && s[4] == '-' && digits(s, 5, n, 2, 2) == 7 &&
      s[7] == '-' && digits(s, 8, n, 2, 2) == 10)
    return 1;
  if (!(i = digits(s, 0, n, 4, 4)) || i >= n || s[i] != '-')
    return 0;
  if (!(i = digits(s, i + 1, n, 1, 2)) || i >= n || s[i] != '-')
    return 0;
  if (!(i = digits(s, i + 1, n, 1, 2)))
    return 0;
  return match_time(s, i, n);
}

mqproc__yaml_type_t mqproc__yaml_plain_type(const char *s, size_t n) {
  char c;
  size_t m = n;
  if (n == 0)
    return MQPROC__YAML_NULL;
  c = s[0]; /* PyYAML picks the candidate resolvers by the first character */
  if (s[m - 1] == '\n')
    m--; /* Python's `$` also matches before one final newline */
  if (in_set("yYnNtTfFoO", c) && match_bool(s, m))
    return MQPROC__YAML_BOOL;
  if (in_set("-+0123456789.", c) && match_float(s, m))
    return MQPROC__YAML_FLOAT;
  if (in_set("-+0123456789", c) && match_int(s, m))
    return MQPROC__YAML_INT;
  if (in_set("~nN", c) && match_null(s, m))
    return MQPROC__YAML_NULL;
  if (is_dec(c) && match_timestamp(s, m))
    return MQPROC__YAML_TIMESTAMP;
  return MQPROC__YAML_STR;
}

/* PyYAML also resolves plain `<<` (merge) and `=` (value) to tags no safe constructor
 * handles; such strings must be quoted on output and are refused on input. */
static int is_merge_or_value(const char *s, size_t n) {
  return (n == 1 && s[0] == '=') || (n == 2 && s[0] == '<' && s[1] == '<');
}

/* ---------------------------------------------------------------------------------------
 * Scalar construction, as PyYAML's SafeConstructor does it.
 * ------------------------------------------------------------------------------------- */

/* Accumulates the digits of s[i..end) in base (skipping '_') into *mag.
 * Returns the number of digits, or -1 on overflow. */
static long add_digits(const char *s, size_t i, size_t end, unsigned base,
                       unsigned long long *mag) {
  long count = 0;
  for (; i < end; i++) {
    unsigned d;
    if (s[i] == '_')
      continue;
    d = is_dec(s[i]) ? (unsigned)(s[i] - '0') : (unsigned)((s[i] | 0x20) - 'a' + 10);
    if (*mag > (ULLONG_MAX - d) / base)
      return -1;
    *mag = *mag * base + d;
    count++;
  }
  return count;
}

/* Magnitude of a base-60 integer: a decimal head, then :NN groups. -1 on overflow. */
static int sexagesimal_int(const char *s, size_t i, size_t n, unsigned long long *mag) {
  const char *colon = memchr(s + i, ':', n - i);
  size_t end = colon != NULL ? (size_t)(colon - s) : n;
  if (add_digits(s, i, end, 10, mag) < 0)
    return -1;
  while (end < n) {
    unsigned long long group = 0;
    i = end + 1;
    colon = memchr(s + i, ':', n - i);
    end = colon != NULL ? (size_t)(colon - s) : n;
    add_digits(s, i, end, 10, &group); /* one or two digits, cannot overflow */
    if (*mag > (ULLONG_MAX - group) / 60)
      return -1;
    *mag = *mag * 60 + group;
  }
  return 0;
}

/* Results of int_value() besides 0. */
enum { INT_OUT_OF_RANGE = 1, INT_MALFORMED = 2 };

/* Value of an int scalar (s matched match_int): 0, INT_OUT_OF_RANGE or INT_MALFORMED. */
static int int_value(const char *s, size_t n, long long *out) {
  size_t i = skip_sign(s, n);
  int neg = i > 0 && s[0] == '-';
  unsigned long long mag = 0;
  unsigned long long limit =
      neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
  long count;
  if (n - i > 1 && s[i] == '0' && (s[i + 1] == 'b' || s[i + 1] == 'x'))
    count = add_digits(s, i + 2, n, s[i + 1] == 'b' ? 2 : 16, &mag);
  else if (s[i] == '0')
    count = add_digits(s, i, n, 8, &mag);
  else if (memchr(s + i, ':', n - i) != NULL)
    count = sexagesimal_int(s, i, n, &mag) < 0 ? -1 : 1;
  else
    count = add_digits(s, i, n, 10, &mag);
  if (count == 0)
    return INT_MALFORMED;
  if (count < 0 || mag > limit)
    return INT_OUT_OF_RANGE;
  *out = neg ? (mag == limit ? LLONG_MIN : -(long long)mag) : (long long)mag;
  return 0;
}

/* Results of the float helpers besides 0 and MQPROC_ENOMEM. */
enum { FLOAT_MALFORMED = 1, FLOAT_UNREPRESENTABLE = 2 };

/* strtod in the C locale, whatever LC_NUMERIC the process uses. The whole of p must be
 * a decimal number. 0, FLOAT_MALFORMED, FLOAT_UNREPRESENTABLE or MQPROC_ENOMEM. */
static int c_strtod(const char *p, double *out) {
  locale_t loc;
  char *end = NULL;
  if ((!is_dec(p[0]) && p[0] != '.') || strspn(p, DEC ".e+-") != strlen(p))
    return FLOAT_MALFORMED;
  loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
  if (loc == (locale_t)0)
    return MQPROC_ENOMEM;
  *out = strtod_l(p, &end, loc);
  freelocale(loc);
  if (end == p || *end != '\0')
    return FLOAT_MALFORMED;
  return isfinite(*out) ? 0 : FLOAT_UNREPRESENTABLE;
}

/* a:b:c.d = ((a*60)+b)*60+c.d, summed the way PyYAML does (last part first). */
static int sexagesimal_float(char *p, double *out) {
  double value = 0.0;
  double base = 1.0;
  char *end = p + strlen(p);
  for (;;) {
    char *colon = memrchr(p, ':', (size_t)(end - p));
    char *part = colon != NULL ? colon + 1 : p;
    double d;
    int rc;
    *end = '\0';
    if ((rc = c_strtod(part, &d)) != 0)
      return rc;
    value += d * base;
    base *= 60.0;
    if (colon == NULL)
      break;
    end = colon;
  }
  *out = value;
  return isfinite(value) ? 0 : FLOAT_UNREPRESENTABLE;
}

/* Value of a float scalar: underscores dropped, case folded, like construct_yaml_float.
 * 0, FLOAT_MALFORMED, FLOAT_UNREPRESENTABLE (inf, nan, overflow) or MQPROC_ENOMEM. */
static int float_value(const char *s, size_t n, double *out) {
  char *buf = mqproc__malloc(n + 1);
  char *p;
  size_t i;
  size_t j = 0;
  int neg;
  int rc;
  if (buf == NULL)
    return MQPROC_ENOMEM;
  for (i = 0; i < n; i++)
    if (s[i] != '_')
      buf[j++] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] | 0x20 : s[i]);
  buf[j] = '\0';
  neg = buf[0] == '-';
  p = buf + skip_sign(buf, j);
  if (strcmp(p, ".inf") == 0 || strcmp(p, ".nan") == 0)
    rc = FLOAT_UNREPRESENTABLE;
  else if (strchr(p, ':') != NULL)
    rc = sexagesimal_float(p, out);
  else
    rc = c_strtod(p, out);
  if (rc == 0 && neg)
    *out = -*out;
  free(buf);
  return rc;
}

static int bool_value(const char *s, size_t n, int *out) {
  static const char *const words[] = {"yes", "no", "true", "false", "on", "off"};
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(words); i++) {
    if (strlen(words[i]) == n && strncasecmp(s, words[i], n) == 0) {
      *out = i % 2 == 0;
      return 0;
    }
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------
 * Loader: libyaml parser events -> json_t, one document, depth-limited.
 * ------------------------------------------------------------------------------------- */

struct loader {
  yaml_parser_t parser;
  const char *buf;
  size_t len;
  char *err;
};

static int mark_err(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int mark_err(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...) {
  char reason[MQPROC_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  return mqproc__err(ld->err, MQPROC_ECODEC_SYNTAX, "line %zu, column %zu: %s", mark->line + 1,
                     mark->column + 1, reason);
}

/* Reader errors carry a byte offset only: turn it into a line and a character column. */
static int reader_err(struct loader *ld) {
  yaml_mark_t mark = {0, 0, 0};
  size_t off = ld->parser.problem_offset;
  size_t i;
  for (i = 0; i < off && i < ld->len; i++) {
    if (ld->buf[i] == '\n') {
      mark.line++;
      mark.column = 0;
    } else if (((unsigned char)ld->buf[i] & 0xC0) != 0x80) {
      mark.column++;
    }
  }
  return mark_err(ld, &mark, "%s (byte 0x%02X at offset %zu)",
                  ld->parser.problem ? ld->parser.problem : "unreadable input",
                  (unsigned)ld->parser.problem_value & 0xFF, off);
}

static int parser_err(struct loader *ld) {
  const yaml_parser_t *p = &ld->parser;
  if (p->error == YAML_MEMORY_ERROR)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory while parsing YAML");
  if (p->error == YAML_READER_ERROR)
    return reader_err(ld);
  if (p->context != NULL)
    return mark_err(ld, &p->problem_mark, "%s (%s)", p->problem ? p->problem : "invalid YAML",
                    p->context);
  return mark_err(ld, &p->problem_mark, "%s", p->problem ? p->problem : "invalid YAML");
}

static int next_event(struct loader *ld, yaml_event_t *ev) {
  if (!yaml_parser_parse(&ld->parser, ev))
    return parser_err(ld);
  return 0;
}

/* Maps an explicit scalar tag to the type it forces; -1 for unsupported tags. */
static int scalar_tag_type(const char *tag, mqproc__yaml_type_t *type) {
  static const struct {
    const char *name;
    mqproc__yaml_type_t type;
  } tags[] = {{TAG_PREFIX "str", MQPROC__YAML_STR},
              {TAG_PREFIX "int", MQPROC__YAML_INT},
              {TAG_PREFIX "float", MQPROC__YAML_FLOAT},
              {TAG_PREFIX "bool", MQPROC__YAML_BOOL},
              {TAG_PREFIX "null", MQPROC__YAML_NULL}};
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(tags); i++) {
    if (strcmp(tag, tags[i].name) == 0) {
      *type = tags[i].type;
      return 0;
    }
  }
  return -1;
}

/* How a scalar event is typed: implicit resolution for plain (or `!`-tagged) scalars,
 * string for quoted/block ones, else its explicit tag. */
static int scalar_type(struct loader *ld, const yaml_event_t *ev, mqproc__yaml_type_t *type) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  const char *tag = (const char *)ev->data.scalar.tag;
  if (ev->data.scalar.plain_implicit) {
    if (is_merge_or_value(v, n))
      return mark_err(ld, &ev->start_mark, "plain '%s' must be quoted (YAML 1.1 %s key)", v,
                      v[0] == '=' ? "value" : "merge");
    *type = mqproc__yaml_plain_type(v, n);
    return 0;
  }
  *type = MQPROC__YAML_STR;
  if (tag != NULL && scalar_tag_type(tag, type) != 0)
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported", tag);
  return 0;
}

static int number_to_json(struct loader *ld, const yaml_event_t *ev, mqproc__yaml_type_t type,
                          json_t **out) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  long long i = 0;
  double d = 0.0;
  int rc;
  if (type == MQPROC__YAML_INT) {
    rc = match_int(v, n) ? int_value(v, n, &i) : INT_MALFORMED;
    if (rc == INT_OUT_OF_RANGE)
      return mark_err(ld, &ev->start_mark, "integer %.60s is out of range", v);
    if (rc != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!int value '%.60s'", v);
    *out = json_integer(i);
  } else {
    rc = float_value(v, n, &d);
    if (rc == MQPROC_ENOMEM)
      return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
    if (rc == FLOAT_UNREPRESENTABLE)
      return mark_err(ld, &ev->start_mark, "float %.60s cannot be represented in JSON", v);
    if (rc != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!float value '%.60s'", v);
    *out = json_real(d);
  }
  return *out == NULL ? mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory") : 0;
}

static int scalar_to_json(struct loader *ld, const yaml_event_t *ev, json_t **out) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  mqproc__yaml_type_t type;
  int b;
  int rc = scalar_type(ld, ev, &type);
  if (rc != 0)
    return rc;
  switch (type) {
  case MQPROC__YAML_INT:
  case MQPROC__YAML_FLOAT:
    return number_to_json(ld, ev, type, out);
  case MQPROC__YAML_BOOL:
    if (bool_value(v, n, &b) != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!bool value '%.60s'", v);
    *out = json_boolean(b);
    break;
  case MQPROC__YAML_NULL:
    *out = json_null();
    break;
  case MQPROC__YAML_STR:
  case MQPROC__YAML_TIMESTAMP: /* kept as text, see the file comment */
  default:
    *out = json_stringn(v, n);
    break;
  }
  return *out == NULL ? mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory") : 0;
}

static int load_node(struct loader *ld, yaml_event_t *ev, int depth, json_t **out);

static int load_sequence(struct loader *ld, int depth, json_t **out) {
  json_t *arr = json_array();
  json_t *item;
  yaml_event_t ev;
  int rc = 0;
  if (arr == NULL)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  for (;;) {
    if ((rc = next_event(ld, &ev)) != 0)
      break;
    if (ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if ((rc = load_node(ld, &ev, depth + 1, &item)) != 0)
      break;
    if (json_array_append_new(arr, item) != 0) {
      rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
      break;
    }
  }
  if (rc != 0)
    json_decref(arr);
  else
    *out = arr;
  return rc;
}

/* Checks a mapping key event (a scalar, allowed tag, no merge, no NUL, not yet in obj). */
static int check_key(struct loader *ld, const yaml_event_t *ev, const json_t *obj) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  mqproc__yaml_type_t type;
  if (ev->type == YAML_ALIAS_EVENT)
    return mark_err(ld, &ev->start_mark, "aliases are not supported");
  if (ev->type != YAML_SCALAR_EVENT)
    return mark_err(ld, &ev->start_mark, "mapping keys must be scalars");
  if (ev->data.scalar.anchor != NULL)
    return mark_err(ld, &ev->start_mark, "anchors and aliases are not supported");
  if (ev->data.scalar.plain_implicit && n == 2 && memcmp(v, "<<", 2) == 0)
    return mark_err(ld, &ev->start_mark, "merge keys ('<<') are not supported");
  if (!ev->data.scalar.plain_implicit && ev->data.scalar.tag != NULL &&
      scalar_tag_type((const char *)ev->data.scalar.tag, &type) != 0)
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported",
                    (const char *)ev->data.scalar.tag);
  if (memchr(v, '\0', n) != NULL)
    return mark_err(ld, &ev->start_mark, "mapping key contains a NUL character");
  if (json_object_get(obj, v) != NULL)
    return mark_err(ld, &ev->start_mark, "duplicate key '%.100s'", v);
  return 0;
}

/* Loads one key (*kev, consumed) and its value into obj. */
static int load_pair(struct loader *ld, json_t *obj, yaml_event_t *kev, int depth) {
  char *key = NULL;
  json_t *val = NULL;
  yaml_event_t vev;
  int rc = check_key(ld, kev, obj);
  if (rc == 0 && (key = mqproc__strdup((const char *)kev->data.scalar.value)) == NULL)
    rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  yaml_event_delete(kev);
  if (rc == 0)
    rc = next_event(ld, &vev);
  if (rc == 0)
    rc = load_node(ld, &vev, depth + 1, &val);
  if (rc == 0 && json_object_set_new(obj, key, val) != 0)
    rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  free(key);
  return rc;
}

static int load_mapping(struct loader *ld, int depth, json_t **out) {
  json_t *obj = json_object();
  yaml_event_t ev;
  int rc = 0;
  if (obj == NULL)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  for (;;) {
    if ((rc = next_event(ld, &ev)) != 0)
      break;
    if (ev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if ((rc = load_pair(ld, obj, &ev, depth)) != 0)
      break;
  }
  if (rc != 0)
    json_decref(obj);
  else
    *out = obj;
  return rc;
}

/* The tag of a collection start event must be absent, `!`, or the standard one. */
static int collection_tag_ok(const yaml_char_t *tag, const char *standard) {
  return tag == NULL || strcmp((const char *)tag, "!") == 0 ||
         strcmp((const char *)tag, standard) == 0;
}

static int check_node(struct loader *ld, const yaml_event_t *ev, int depth) {
  const yaml_char_t *anchor = NULL;
  const yaml_char_t *tag = NULL;
  const char *standard = NULL;
  if (ev->type == YAML_ALIAS_EVENT)
    return mark_err(ld, &ev->start_mark, "aliases are not supported");
  if (ev->type == YAML_SCALAR_EVENT)
    anchor = ev->data.scalar.anchor;
  if (ev->type == YAML_SEQUENCE_START_EVENT) {
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
    standard = TAG_PREFIX "seq";
  }
  if (ev->type == YAML_MAPPING_START_EVENT) {
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
    standard = TAG_PREFIX "map";
  }
  if (anchor != NULL)
    return mark_err(ld, &ev->start_mark, "anchors and aliases are not supported");
  if (standard != NULL && !collection_tag_ok(tag, standard))
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported", (const char *)tag);
  if (depth > MAX_DEPTH)
    return mark_err(ld, &ev->start_mark, "nesting deeper than %d levels", MAX_DEPTH);
  return 0;
}

/* Loads the node that starts with *ev (consumed) into *out (a new reference). */
static int load_node(struct loader *ld, yaml_event_t *ev, int depth, json_t **out) {
  int rc = check_node(ld, ev, depth);
  if (rc == 0) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
      rc = scalar_to_json(ld, ev, out);
      break;
    case YAML_SEQUENCE_START_EVENT:
      rc = load_sequence(ld, depth, out);
      break;
    case YAML_MAPPING_START_EVENT:
      rc = load_mapping(ld, depth, out);
      break;
    default:
      rc = mark_err(ld, &ev->start_mark, "unexpected YAML event");
      break;
    }
  }
  yaml_event_delete(ev);
  return rc;
}

/* Reads the next event and requires it to be of type want (then deletes it).
 * Returns 1 (event kept in *ev) when it is of another type. */
static int expect_event(struct loader *ld, yaml_event_t *ev, yaml_event_type_t want) {
  int rc = next_event(ld, ev);
  if (rc != 0)
    return rc;
  if (ev->type != want)
    return 1;
  yaml_event_delete(ev);
  return 0;
}

/* stream-start document-start node document-end stream-end, nothing else. */
static int load_stream(struct loader *ld, json_t **out) {
  yaml_event_t ev;
  json_t *root = NULL;
  int rc = expect_event(ld, &ev, YAML_STREAM_START_EVENT);
  if (rc == 0 && (rc = expect_event(ld, &ev, YAML_STREAM_END_EVENT)) == 0)
    return mqproc__err(ld->err, MQPROC_ECODEC_SYNTAX, "empty message (no YAML document)");
  if (rc == 1) /* the document start */
    yaml_event_delete(&ev);
  if (rc == 1 && (rc = next_event(ld, &ev)) == 0)
    rc = load_node(ld, &ev, 1, &root);
  if (rc == 0)
    rc = expect_event(ld, &ev, YAML_DOCUMENT_END_EVENT);
  if (rc == 0 && (rc = expect_event(ld, &ev, YAML_STREAM_END_EVENT)) == 1) {
    rc = mark_err(ld, &ev.start_mark, "only one YAML document is allowed");
    yaml_event_delete(&ev);
  }
  if (rc == 1) { /* cannot happen with libyaml's grammar; be safe */
    rc = mark_err(ld, &ev.start_mark, "unexpected YAML event");
    yaml_event_delete(&ev);
  }
  if (rc != 0)
    json_decref(root);
  else
    *out = root;
  return rc;
}

int mqproc__yaml_load(const char *buf, size_t len, json_t **out, char *err) {
  struct loader ld;
  int rc;
  if (out == NULL || (buf == NULL && len > 0))
    return mqproc__err(err, MQPROC_EINVAL, "invalid argument");
  *out = NULL;
  memset(&ld, 0, sizeof(ld));
  if (!yaml_parser_initialize(&ld.parser))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  ld.buf = buf != NULL ? buf : "";
  ld.len = len;
  ld.err = err;
  yaml_parser_set_input_string(&ld.parser, (const unsigned char *)ld.buf, len);
  yaml_parser_set_encoding(&ld.parser, YAML_UTF8_ENCODING);
  rc = load_stream(&ld, out);
  yaml_parser_delete(&ld.parser);
  return rc;
}

/* ---------------------------------------------------------------------------------------
 * Dumper: json_t -> libyaml emitter set up like PyYAML's yaml.dump() defaults.
 * ------------------------------------------------------------------------------------- */

struct outbuf {
  char *data;
  size_t len;
  size_t cap;
};

/* libyaml write handler: appends to the buffer, keeping room for a final NUL. */
static int out_write(void *data, unsigned char *bytes, size_t size) {
  struct outbuf *ob = data;
  if (size > ((size_t)-1) / 4 - ob->len)
    return 0;
  if (ob->cap - ob->len < size + 1) {
    size_t cap = ob->cap != 0 ? ob->cap : 256;
    char *p;
    while (cap - ob->len < size + 1)
      cap *= 2;
    if ((p = mqproc__realloc(ob->data, cap)) == NULL)
      return 0;
    ob->data = p;
    ob->cap = cap;
  }
  memcpy(ob->data + ob->len, bytes, size);
  ob->len += size;
  ob->data[ob->len] = '\0';
  return 1;
}

/* Emits ev (libyaml owns it from here on). */
static int emit(yaml_emitter_t *em, yaml_event_t *ev, char *err) {
  if (yaml_emitter_emit(em, ev))
    return 0;
  if (em->error == YAML_MEMORY_ERROR || em->error == YAML_WRITER_ERROR)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory while writing YAML");
  return mqproc__err(err, MQPROC_EINVAL, "YAML emitter: %s",
                     em->problem != NULL ? em->problem : "unknown error");
}

static int emit_scalar(yaml_emitter_t *em, const char *s, size_t n, int plain_implicit, char *err) {
  yaml_event_t ev;
  if (n > INT_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "string too long for YAML");
  /* Strings: tagless with quoted_implicit, so libyaml may pick plain only when
   * plain_implicit says YAML 1.1 reads it back as a string; otherwise single quotes, or
   * double quotes where the analysis demands it. Other scalars are always plain. */
  if (!yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)(uintptr_t)s, (int)n,
                                    plain_implicit, 1, YAML_ANY_SCALAR_STYLE))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  return emit(em, &ev, err);
}

static int emit_string(yaml_emitter_t *em, const char *s, size_t n, char *err) {
  int plain = mqproc__yaml_plain_type(s, n) == MQPROC__YAML_STR && !is_merge_or_value(s, n);
  return emit_scalar(em, s, n, plain, err);
}

/* Lays out the digits of a float like Python's repr: decpt is where the decimal point
 * goes relative to the digits (0.DIGITS x 10^decpt). */
static int format_py_float(int neg, const char *digs, size_t nd, int decpt, char *out,
                           size_t size) {
  char body[48];
  size_t k = 0;
  size_t i;
  if (neg)
    body[k++] = '-';
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      body[k++] = '0';
      body[k++] = '.';
      for (i = 0; i < (size_t)-decpt; i++)
        body[k++] = '0';
    }
    for (i = 0; i < nd; i++) {
      if (decpt > 0 && i == (size_t)decpt)
        body[k++] = '.';
      body[k++] = digs[i];
    }
    for (i = nd; decpt > 0 && i < (size_t)decpt; i++)
      body[k++] = '0';
    if (decpt > 0 && (size_t)decpt >= nd) {
      body[k++] = '.';
      body[k++] = '0';
    }
    body[k] = '\0';
    return snprintf(out, size, "%s", body) < 0 ? -1 : 0;
  }
  /* 1e+16 -> 1.0e+16: PyYAML inserts ".0" so that its float regex matches */
  return snprintf(out, size, "%s%c.%se%+03d", neg ? "-" : "", digs[0], nd > 1 ? digs + 1 : "0",
                  decpt - 1) < 0
             ? -1
             : 0;
}

/* Python's repr(float) (shortest round-trip digits; exponent form when the decimal
 * exponent is < -4 or >= 16), fixed up as PyYAML's represent_float does. */
static int py_float_repr(double d, char *out, size_t size) {
  char tmp[40];
  char digs[20];
  int prec;
  int exp10;
  size_t nd = 0;
  locale_t loc;
  locale_t old;
  const char *p;
  if (isnan(d) || isinf(d))
    return snprintf(out, size, "%s", isnan(d) ? ".nan" : d > 0 ? ".inf" : "-.inf") < 0 ? -1 : 0;
  if (d == 0.0)
    return snprintf(out, size, "%s", signbit(d) ? "-0.0" : "0.0") < 0 ? -1 : 0;
  if ((loc = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0)) == (locale_t)0)
    return -1;
  old = uselocale(loc);
  for (prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, d);
    if (strtod(tmp, NULL) == d)
      break;
  }
  uselocale(old);
  freelocale(loc);
  for (p = tmp; *p != 'e'; p++)
    if (is_dec(*p) && nd < sizeof(digs) - 1)
      digs[nd++] = *p;
  while (nd > 1 && digs[nd - 1] == '0')
    nd--;
  digs[nd] = '\0';
  exp10 = atoi(p + 1);
  return format_py_float(d < 0, digs, nd, exp10 + 1, out, size);
}

static int emit_value(yaml_emitter_t *em, const json_t *v, int depth, char *err);

static int cmp_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int emit_end(yaml_emitter_t *em, int mapping, char *err) {
  yaml_event_t ev;
  int ok =
      mapping ? yaml_mapping_end_event_initialize(&ev) : yaml_sequence_end_event_initialize(&ev);
  return ok ? emit(em, &ev, err) : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
}

/* A block mapping with keys in code point order (PyYAML's sort_keys=True). */
static int emit_object(yaml_emitter_t *em, const json_t *obj, int depth, char *err) {
  json_t *o = (json_t *)(uintptr_t)obj; /* jansson's iterators are not const-correct */
  size_t n = json_object_size(obj);
  size_t i = 0;
  const char **keys = mqproc__calloc(n, sizeof(*keys));
  const char *key;
  json_t *val;
  yaml_event_t ev;
  int rc;
  if (keys == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  json_object_foreach(o, key, val) {
    if (i < n)
      keys[i++] = key;
  }
  qsort(keys, i, sizeof(*keys), cmp_keys);
  if (!yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE))
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  else
    rc = emit(em, &ev, err);
  for (n = i, i = 0; rc == 0 && i < n; i++) {
    rc = emit_string(em, keys[i], strlen(keys[i]), err);
    if (rc == 0)
      rc = emit_value(em, json_object_get(obj, keys[i]), depth + 1, err);
  }
  if (rc == 0)
    rc = emit_end(em, 1, err);
  free(keys);
  return rc;
}

/* A block sequence (libyaml makes it indentless under a mapping key, as PyYAML does). */
static int emit_array(yaml_emitter_t *em, const json_t *arr, int depth, char *err) {
  yaml_event_t ev;
  size_t i;
  int rc;
  if (!yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  rc = emit(em, &ev, err);
  for (i = 0; rc == 0 && i < json_array_size(arr); i++)
    rc = emit_value(em, json_array_get(arr, i), depth + 1, err);
  if (rc == 0)
    rc = emit_end(em, 0, err);
  return rc;
}

static int emit_value(yaml_emitter_t *em, const json_t *v, int depth, char *err) {
  char num[48];
  if (depth > MAX_DEPTH)
    return mqproc__err(err, MQPROC_EINVAL, "nesting deeper than %d levels", MAX_DEPTH);
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return emit_object(em, v, depth, err);
  case JSON_ARRAY:
    return emit_array(em, v, depth, err);
  case JSON_STRING:
    return emit_string(em, json_string_value(v), json_string_length(v), err);
  case JSON_INTEGER:
    snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return emit_scalar(em, num, strlen(num), 1, err);
  case JSON_REAL:
    if (py_float_repr(json_real_value(v), num, sizeof(num)) != 0)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return emit_scalar(em, num, strlen(num), 1, err);
  case JSON_TRUE:
  case JSON_FALSE:
  case JSON_NULL:
  default:
    snprintf(num, sizeof(num), "%s",
             json_is_true(v)    ? "true"
             : json_is_false(v) ? "false"
                                : "null");
    return emit_scalar(em, num, strlen(num), 1, err);
  }
}

/* One implicit document: no `---`, no `...` (but see open_ended()). */
static int emit_stream(yaml_emitter_t *em, const json_t *v, char *err) {
  yaml_event_t ev;
  int rc = 0;
  if (!yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = emit(em, &ev, err)) != 0)
    return rc;
  if (!yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = emit(em, &ev, err)) != 0 || (rc = emit_value(em, v, 1, err)) != 0)
    return rc;
  if (!yaml_document_end_event_initialize(&ev, 1))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = emit(em, &ev, err)) != 0)
    return rc;
  if (!yaml_stream_end_event_initialize(&ev))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  return emit(em, &ev, err);
}

/* PyYAML ends a document whose root is a plain scalar with `...` (its "open ended" state);
 * libyaml does not. A root scalar is written at column 0, quoted ones start with a quote. */
static int open_ended(struct outbuf *ob, const json_t *v) {
  static const unsigned char dots[] = "...\n";
  if (json_is_object(v) || json_is_array(v) || ob->len == 0 || ob->data[0] == '\'' ||
      ob->data[0] == '"')
    return 1;
  return out_write(ob, (unsigned char *)(uintptr_t)dots, sizeof(dots) - 1);
}

int mqproc__yaml_dump(const json_t *v, char **out, size_t *len, char *err) {
  yaml_emitter_t em;
  struct outbuf ob = {NULL, 0, 0};
  int rc;
  if (v == NULL || out == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "invalid argument");
  *out = NULL;
  if (!yaml_emitter_initialize(&em))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  yaml_emitter_set_output(&em, out_write, &ob);
  yaml_emitter_set_encoding(&em, YAML_UTF8_ENCODING);
  yaml_emitter_set_unicode(&em, 0); /* allow_unicode=False: non-ASCII is escaped */
  yaml_emitter_set_width(&em, 80);
  yaml_emitter_set_indent(&em, 2);
  yaml_emitter_set_break(&em, YAML_LN_BREAK);
  rc = emit_stream(&em, v, err);
  if (rc == 0 && !yaml_emitter_flush(&em))
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory while writing YAML");
  yaml_emitter_delete(&em);
  if (rc == 0 && ob.data == NULL)
    rc = mqproc__err(err, MQPROC_EINVAL, "YAML emitter wrote nothing");
  if (rc == 0 && !open_ended(&ob, v))
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory while writing YAML");
  if (rc != 0) {
    free(ob.data);
    return rc;
  }
  *out = ob.data;
  if (len != NULL)
    *len = ob.len;
  return 0;
}
