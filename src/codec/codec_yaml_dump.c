/* YAML dumper: json_t -> libyaml emitter events, configured like PyYAML's default Dumper.
 *
 * The dumper matches PyYAML byte for byte except where libyaml's emitter differs from
 * PyYAML's pure-Python one: double-quoted scalars wider than 80 columns (libyaml folds only
 * at spaces), the empty key (PyYAML writes `? ''`), and keys of 123..128 characters (PyYAML
 * switches to `? key` earlier). All of these still load to the same value.
 */
#include "codec/codec.h"
#include "codec/codec_yaml.h"

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/util.h"

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
  int plain =
      mqproc__yaml_plain_type(s, n) == MQPROC__YAML_STR && !mqproc__yaml_is_merge_or_value(s, n);
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
    if (mqproc__yaml_is_dec(*p) && nd < sizeof(digs) - 1)
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
