/* YAML 1.1 scalar typing as PyYAML does it: the plain-scalar resolver, scalar construction. */
#include "codec/codec.h"
#include "codec/codec_yaml.h"

#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/util.h"

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
  while (j < n && j - i < max && mqproc__yaml_is_dec(s[j]))
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
      mqproc__yaml_is_dec(s[i + 2]))
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
int mqproc__yaml_match_int(const char *s, size_t n) {
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
  if (!mqproc__yaml_is_dec(s[i]))
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
  if (i == 0 && n >= 2 && s[0] == '.' && mqproc__yaml_is_dec(s[1]))
    return exponent_tail(s, span_set(s, 2, n, DEC_), n) == n;
  if (i >= n || !mqproc__yaml_is_dec(s[i]))
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
  if (in_set("-+0123456789", c) && mqproc__yaml_match_int(s, m))
    return MQPROC__YAML_INT;
  if (in_set("~nN", c) && match_null(s, m))
    return MQPROC__YAML_NULL;
  if (mqproc__yaml_is_dec(c) && match_timestamp(s, m))
    return MQPROC__YAML_TIMESTAMP;
  return MQPROC__YAML_STR;
}

/* PyYAML also resolves plain `<<` (merge) and `=` (value) to tags no safe constructor
 * handles; such strings must be quoted on output and are refused on input. */
int mqproc__yaml_is_merge_or_value(const char *s, size_t n) {
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
    d = mqproc__yaml_is_dec(s[i]) ? (unsigned)(s[i] - '0') : (unsigned)((s[i] | 0x20) - 'a' + 10);
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

/* Value of an int scalar (s matched mqproc__yaml_match_int): 0, INT_OUT_OF_RANGE or
 * INT_MALFORMED. */
int mqproc__yaml_int_value(const char *s, size_t n, long long *out) {
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

/* strtod in the C locale, whatever LC_NUMERIC the process uses. The whole of p must be
 * a decimal number. 0, FLOAT_MALFORMED, FLOAT_UNREPRESENTABLE or MQPROC_ENOMEM. */
static int c_strtod(const char *p, double *out) {
  locale_t loc;
  char *end = NULL;
  if ((!mqproc__yaml_is_dec(p[0]) && p[0] != '.') || strspn(p, DEC ".e+-") != strlen(p))
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
int mqproc__yaml_float_value(const char *s, size_t n, double *out) {
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

int mqproc__yaml_bool_value(const char *s, size_t n, int *out) {
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
