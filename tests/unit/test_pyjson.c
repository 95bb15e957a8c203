/* Unit: Python's json.dumps() for jansson values (pyjson.c). Every expected string was
 * printed by Python 3.11's json.dumps() on the same value; tests/data/pyjson_floats.txt
 * holds 2000 more doubles (made by tests/data/pyjson_floats.py). */
#include <criterion/criterion.h>
#include <float.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/pyjson.h"
#include "base/util.h"

#ifndef MQPROC_TEST_DATA
#error "MQPROC_TEST_DATA must name the tests/data directory"
#endif

/* Dumps v (taking the reference) and compares with want. */
static void expect_dump(json_t *v, const char *want, const char *what) {
  char *got;
  cr_assert_not_null(v, "%s: no value", what);
  got = mqproc__json_python(v);
  cr_assert_not_null(got, "%s", what);
  cr_expect_str_eq(got, want, "%s", what);
  free(got);
  json_decref(v);
}

Test(pyjson, reals_as_float_repr) {
  static const struct {
    double x;
    const char *want;
  } cases[] = {
      {0.1, "0.1"},
      {1.5, "1.5"},
      {-0.0, "-0.0"},
      {0.0, "0.0"},
      {1e20, "1e+20"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {1e-5, "1e-05"},
      {0.0001, "0.0001"},
      {1e300, "1e+300"},
      {5e-324, "5e-324"},
      {2.5e-07, "2.5e-07"},
      {1.0 / 3, "0.3333333333333333"},
      {100.0, "100.0"},
      {1.0, "1.0"},
      {-2.5, "-2.5"},
      {123.456, "123.456"},
      {0.00012345, "0.00012345"},
      {9999999999999998.0, "9999999999999998.0"},
      {1e22, "1e+22"},
      {1.5e20, "1.5e+20"},
      {DBL_MAX, "1.7976931348623157e+308"},
      {DBL_MIN, "2.2250738585072014e-308"},
      {0x1p-1017, "7.120236347223045e-307"}, /* not the nearest 16 digits: ...044e-307 */
      {-1.5e-7, "-1.5e-07"},
      {0.3, "0.3"},
      {2.0 / 3, "0.6666666666666666"},
      {1e-4 * 0.99, "9.900000000000001e-05"},
      {12345678901234567890.0, "1.2345678901234567e+19"},
      {4.35, "4.35"},
      {0.001, "0.001"},
  };
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(cases); i++)
    expect_dump(json_real(cases[i].x), cases[i].want, cases[i].want);
}

Test(pyjson, integers_over_the_full_range) {
  static const struct {
    json_int_t i;
    const char *want;
  } cases[] = {
      {0, "0"},
      {-1, "-1"},
      {42, "42"},
      {4294967296, "4294967296"},
      {INT64_MAX, "9223372036854775807"},
      {INT64_MIN, "-9223372036854775808"},
  };
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(cases); i++)
    expect_dump(json_integer(cases[i].i), cases[i].want, cases[i].want);
}

#define S(lit) lit, sizeof(lit) - 1

Test(pyjson, strings_escaped_as_ensure_ascii) {
  static const struct {
    const char *s;
    size_t n;
    const char *want;
  } cases[] = {
      {S(""), "\"\""},
      {S("plain text"), "\"plain text\""},
      {S("say \"hi\""), "\"say \\\"hi\\\"\""},
      {S("back\\slash"), "\"back\\\\slash\""},
      {S("a/b"), "\"a/b\""},
      {S("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\""},
      {S("\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"),
       "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\\u000e"
       "\\u000f\""},
      {S("\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f"),
       "\"\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019\\u001a\\u001b"
       "\\u001c\\u001d\\u001e\\u001f\""},
      {S("\x7f"), "\"\\u007f\""},
      {S(" ~"), "\" ~\""},
      {S("\u00e9"), "\"\\u00e9\""},
      {S("\u6f22"), "\"\\u6f22\""},
      {S("\U0001F600"), "\"\\ud83d\\ude00\""},
      {S("a\0b"), "\"a\\u0000b\""},
      {S("F\u00fcr \u6f22\u5b57 \U0001F600!"), "\"F\\u00fcr \\u6f22\\u5b57 \\ud83d\\ude00!\""},
      /* the first and last code point of each UTF-8 length (C has no \u0080) */
      {S("\xc2\x80\u07ff\u0800\uffff\U00010000\U0010FFFF"),
       "\"\\u0080\\u07ff\\u0800\\uffff\\ud800\\udc00\\udbff\\udfff\""},
  };
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(cases); i++)
    expect_dump(json_stringn(cases[i].s, cases[i].n), cases[i].want, cases[i].want);
}

Test(pyjson, documents_with_separators_and_key_order) {
  static const struct {
    const char *json;
    const char *want;
  } cases[] = {
      {"{\"b\": [1, 2.5, {\"c\": null, \"a\": true}], \"a\": {}, \"z\": [], \"\\u00e9\": false}",
       "{\"b\": [1, 2.5, {\"c\": null, \"a\": true}], \"a\": {}, \"z\": [], \"\\u00e9\": false}"},
      {"[]", "[]"},
      {"{}", "{}"},
      {"[[[]], {}, [{}]]", "[[[]], {}, [{}]]"},
      {"{\"k\\\"ey\\n\": 1, \"x\": [true, false, null, \"s\", -0.0, 1e-07]}",
       "{\"k\\\"ey\\n\": 1, \"x\": [true, false, null, \"s\", -0.0, 1e-07]}"},
      {"{\"zeta\":1,\"alpha\":2,\"mid\":3}", "{\"zeta\": 1, \"alpha\": 2, \"mid\": 3}"},
      {"true", "true"},
      {"false", "false"},
      {"null", "null"},
      {"\"s\"", "\"s\""},
      {"-5", "-5"},
      {"[0.1,0.2,0.30000000000000004]", "[0.1, 0.2, 0.30000000000000004]"},
  };
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(cases); i++) {
    json_error_t error;
    json_t *v = json_loads(cases[i].json, JSON_DECODE_ANY, &error);
    cr_assert_not_null(v, "%s: %s", cases[i].json, error.text);
    expect_dump(v, cases[i].want, cases[i].json);
  }
}

/* Python's dict keeps a key's first place when its value is replaced; so does jansson. */
Test(pyjson, keys_in_insertion_order) {
  json_t *o = json_object();
  cr_assert_not_null(o);
  cr_assert_eq(json_object_set_new(o, "z", json_integer(1)), 0);
  cr_assert_eq(json_object_set_new(o, "a", json_integer(2)), 0);
  cr_assert_eq(json_object_set_new(o, "m", json_integer(3)), 0);
  cr_assert_eq(json_object_set_new(o, "z", json_integer(4)), 0);
  expect_dump(o, "{\"z\": 4, \"a\": 2, \"m\": 3}", "d = {'z': 1, 'a': 2, 'm': 3}; d['z'] = 4");
}

/* Keys may hold NUL (json_object_setn) and need escapes like any string. */
Test(pyjson, keys_are_escaped_strings) {
  json_t *o = json_object();
  cr_assert_not_null(o);
  cr_assert_eq(json_object_setn_new(o, "a\0b", 3, json_integer(1)), 0);
  cr_assert_eq(json_object_set_new(o, "\u00e9", json_string("\x7f")), 0);
  expect_dump(o, "{\"a\\u0000b\": 1, \"\\u00e9\": \"\\u007f\"}", "{'a\\x00b': 1, 'é': '\\x7f'}");
}

/* A long string grows the buffer many times over. */
Test(pyjson, long_strings) {
  const char unit[] = "a\u00e9\n\x01";           /* 5 bytes */
  const char unit_want[] = "a\\u00e9\\n\\u0001"; /* json.dumps("a\u00e9\n\x01") */
  const size_t reps = 100000, n = sizeof(unit) - 1, n_want = sizeof(unit_want) - 1;
  char *s = malloc(reps * n);
  char *want = malloc(reps * n_want + 3);
  json_t *v;
  char *got;
  cr_assert(s != NULL && want != NULL);
  want[0] = '"';
  for (size_t i = 0; i < reps; i++) {
    memcpy(s + i * n, unit, n);
    memcpy(want + 1 + i * n_want, unit_want, n_want);
  }
  memcpy(want + 1 + reps * n_want, "\"", 2);
  cr_assert_not_null(v = json_stringn(s, reps * n));
  cr_assert_not_null(got = mqproc__json_python(v));
  cr_expect(strcmp(got, want) == 0, "differs (%zu bytes, want %zu)", strlen(got), strlen(want));
  free(got);
  json_decref(v);
  free(s);
  free(want);
}

/* Each line of the file: the double's bits in hex, a tab, Python's json.dumps() of it. */
Test(pyjson, two_thousand_doubles_as_python_prints_them) {
  char line[128];
  int checked = 0;
  FILE *f = fopen(MQPROC_TEST_DATA "/pyjson_floats.txt", "r");
  cr_assert_not_null(f, "tests/data/pyjson_floats.txt");
  while (fgets(line, sizeof(line), f) != NULL) {
    char *tab = strchr(line, '\t');
    uint64_t bits;
    double x;
    if (line[0] == '#')
      continue;
    cr_assert_not_null(tab, "bad line: %s", line);
    line[strcspn(line, "\n")] = '\0';
    bits = strtoull(line, NULL, 16);
    memcpy(&x, &bits, sizeof(x));
    expect_dump(json_real(x), tab + 1, line);
    checked++;
  }
  fclose(f);
  cr_expect_eq(checked, 2000, "%d doubles in the file", checked);
}
