/* Python's json.dumps(obj) for a jansson value (see pyjson.h).
 *
 * OCR-D's worker runs a processor with `--parameter json.dumps(parameters)`, and a processor
 * must get the same text from mqproc. json_dumps() differs in reals (0.1 comes out as
 * 0.10000000000000001) and escapes (uppercase hex, 0x7f left raw), so this follows
 * CPython's Lib/json/encoder.py and float_repr (format_float_short) instead.
 *
 * Locale: the server never calls setlocale(), so the "C" locale is in effect, but an
 * embedding program might switch LC_NUMERIC. The only locale-dependent character of
 * "%.*e" is its decimal point, which shortest_digits() skips, and the text it hands to
 * strtod() has none ("31e-2"), so a comma locale changes nothing (checked with de_DE).
 */
#include "codec/pyjson.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

typedef struct buf {
  char *s;     /* NUL-terminated once anything was written */
  size_t len;  /* bytes in s, the NUL excluded */
  size_t cap;  /* bytes allocated */
  bool failed; /* out of memory: later writes do nothing */
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
  if (b->failed)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap == 0 ? 64 : b->cap;
    char *grown;
    while (cap < b->len + n + 1)
      cap *= 2; /* doubling keeps long strings linear */
    if ((grown = mqproc__realloc(b->s, cap)) == NULL) {
      b->failed = true;
      return;
    }
    b->s = grown;
    b->cap = cap;
  }
  memcpy(b->s + b->len, s, n);
  b->len += n;
  b->s[b->len] = '\0';
}

static void put_str(buf_t *b, const char *s) {
  put(b, s, strlen(s));
}

/* ---------------------------------------------------------------------------------------
 * Reals: float.__repr__.
 * ------------------------------------------------------------------------------------- */

/* Whether digits[0..n) times 10^(decpt - n) reads back as x. */
static bool reads_back(const char *digits, size_t n, int decpt, double x) {
  char probe[48];
  snprintf(probe, sizeof(probe), "%.*se%d", (int)n, digits, decpt - (int)n); /* "31e-2" */
  return strtod(probe, NULL) == x;
}

/* The shortest digits that read back as x (finite, >= 0), and decpt, where the decimal
 * point sits relative to them (0.0123: "123", -1); among the shortest, the nearest to x,
 * as Python's (David Gay's) repr picks them. For each length, the correctly rounded
 * digits are the nearest; when they miss, the next ones up may still hit, because just
 * below a power of two doubles lie twice as densely (2^-1017 is 7.120236347223045e-307:
 * the nearest 16 digits, ...044e-307, miss). 17 digits always hit. */
static void shortest_digits(double x, char digits[20], int *decpt) {
  char text[40];
  for (int prec = 1; prec <= 17; prec++) {
    size_t n = 0;
    const char *p;
    snprintf(text, sizeof(text), "%.*e", prec - 1, x);
    for (p = text; *p != 'e'; p++)
      if (*p >= '0' && *p <= '9') /* the decimal point, the locale's character, is skipped */
        digits[n++] = *p;
    digits[n] = '\0';
    *decpt = (int)strtol(p + 1, NULL, 10) + 1;
    if (reads_back(digits, n, *decpt, x))
      return;
    if (digits[n - 1] == '9') /* the next ones up carry into a shorter string, tried already */
      continue;
    digits[n - 1]++;
    if (reads_back(digits, n, *decpt, x))
      return;
  }
}

/* Python's repr: exponent form when decpt <= -4 or decpt > 16 (1e-05, 1.5e+20), else fixed
 * notation that always has a fraction (100.0, 0.0001). */
static void put_real(buf_t *b, double x) {
  static const char zeros[] = "0000000000000000"; /* fixed form pads at most 16 */
  char digits[20];
  char out[48];
  int decpt;
  int n;
  if (signbit(x))
    put(b, "-", 1);
  shortest_digits(fabs(x), digits, &decpt);
  n = (int)strlen(digits);
  if (decpt <= -4 || decpt > 16)
    snprintf(out, sizeof(out), "%.1s%s%se%+03d", digits, n > 1 ? "." : "", digits + 1, decpt - 1);
  else if (decpt <= 0)
    snprintf(out, sizeof(out), "0.%.*s%s", -decpt, zeros, digits);
  else if (decpt < n)
    snprintf(out, sizeof(out), "%.*s.%s", decpt, digits, digits + decpt);
  else
    snprintf(out, sizeof(out), "%s%.*s.0", digits, decpt - n, zeros);
  put_str(b, out);
}

/* ---------------------------------------------------------------------------------------
 * Strings: ensure_ascii, everything outside ' '..'~' escaped.
 * ------------------------------------------------------------------------------------- */

/* One escape for the character at s; returns the bytes it took. */
static size_t put_escape(buf_t *b, const unsigned char *s) {
  static const char special[] = "\"\\\n\r\t\b\f";
  static const char letter[] = "\"\\nrtbf"; /* what Python writes after the backslash */
  const char *hit = s[0] != '\0' ? strchr(special, s[0]) : NULL;
  char esc[24]; /* room for two "\\u%04x" of any unsigned, as the compiler counts */
  size_t used = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 1;
  unsigned cp = used == 1 ? s[0] : s[0] & (0x3Fu >> (used - 1));
  if (hit != NULL) {
    esc[0] = '\\';
    esc[1] = letter[hit - special];
    put(b, esc, 2);
    return 1;
  }
  for (size_t i = 1; i < used; i++) /* jansson holds only valid UTF-8: no checks */
    cp = cp << 6 | (s[i] & 0x3F);
  if (cp > 0xFFFF) /* a UTF-16 surrogate pair, as Python writes it */
    snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xD800 | (cp - 0x10000) >> 10,
             0xDC00 | (cp & 0x3FF));
  else
    snprintf(esc, sizeof(esc), "\\u%04x", cp);
  put_str(b, esc);
  return used;
}

static void put_string(buf_t *b, const char *str, size_t n) {
  const unsigned char *s = (const unsigned char *)str;
  size_t i = 0;
  put(b, "\"", 1);
  while (i < n) {
    size_t plain = i;
    while (plain < n && s[plain] >= ' ' && s[plain] <= '~' && s[plain] != '"' && s[plain] != '\\')
      plain++;
    put(b, str + i, plain - i); /* copied in runs, not byte by byte */
    if (plain == n)
      break;
    i = plain + put_escape(b, s + plain);
  }
  put(b, "\"", 1);
}

static void put_value(buf_t *b, const json_t *v);

static void put_object(buf_t *b, const json_t *o) {
  json_t *obj = (json_t *)o; /* jansson's iterators take non-const objects, read only */
  const char *sep = "";
  put(b, "{", 1);
  for (void *it = json_object_iter(obj); it != NULL; it = json_object_iter_next(obj, it)) {
    put_str(b, sep);
    put_string(b, json_object_iter_key(it), json_object_iter_key_len(it));
    put(b, ": ", 2);
    put_value(b, json_object_iter_value(it));
    sep = ", ";
  }
  put(b, "}", 1);
}

static void put_value(buf_t *b, const json_t *v) {
  char num[32];
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    put_object(b, v);
    break;
  case JSON_ARRAY:
    put(b, "[", 1);
    for (size_t i = 0; i < json_array_size(v); i++) {
      put_str(b, i > 0 ? ", " : "");
      put_value(b, json_array_get(v, i));
    }
    put(b, "]", 1);
    break;
  case JSON_STRING:
    put_string(b, json_string_value(v), json_string_length(v));
    break;
  case JSON_INTEGER:
    snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    put_str(b, num);
    break;
  case JSON_REAL:
    put_real(b, json_real_value(v));
    break;
  default:
    put_str(b, json_is_true(v) ? "true" : json_is_false(v) ? "false" : "null");
  }
}

char *mqproc__json_python(const json_t *v) {
  buf_t b = {0};
  put_value(&b, v);
  if (b.failed) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
