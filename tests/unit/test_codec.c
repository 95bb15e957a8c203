/* Unit tests for the codec: JSON/YAML parsing, YAML 1.1 typing, PyYAML-exact dumping,
 * schema validation and result encoding.
 *
 * Expected YAML bytes, resolver types and constructed values were produced once with
 * PyYAML 6.0 (/usr/bin/python3: yaml.dump(obj), Resolver.resolve(), yaml.safe_load()) and
 * are recorded here as literals; the tests never run Python. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "base/util.h"

#ifndef MQPROC_TEST_DATA
#error "MQPROC_TEST_DATA must name the tests/data directory"
#endif

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

static char *read_data(const char *name, size_t *len) {
  char path[1024];
  FILE *f;
  char *buf;
  long n;
  snprintf(path, sizeof(path), "%s/%s", MQPROC_TEST_DATA, name);
  f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf = malloc((size_t)n + 1);
  cr_assert_not_null(buf);
  cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  buf[n] = '\0';
  *len = (size_t)n;
  return buf;
}

/* Parses a data file with mqproc__codec_parse() and checks the detected format. */
static json_t *parse_data(const char *name, mqproc__format_t want) {
  char err[MQPROC_ERR_LEN] = "";
  size_t len;
  char *body = read_data(name, &len);
  json_t *doc = NULL;
  mqproc__format_t fmt = (mqproc__format_t)-1;
  int rc = mqproc__codec_parse(body, len, &doc, &fmt, err);
  free(body);
  cr_assert_eq(rc, MQPROC_OK, "%s: %s", name, err);
  cr_assert_eq(fmt, want, "%s: format %d", name, (int)fmt);
  return doc;
}

static json_t *parse_ok(const char *text, mqproc__format_t want) {
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = NULL;
  mqproc__format_t fmt = (mqproc__format_t)-1;
  int rc = mqproc__codec_parse(text, strlen(text), &doc, &fmt, err);
  cr_assert_eq(rc, MQPROC_OK, "parse of <%s> failed: %s", text, err);
  cr_assert_eq(fmt, want, "<%s>: format %d", text, (int)fmt);
  return doc;
}

/* json_loads() of an expectation written as JSON (NUL escapes allowed). */
static json_t *jload(const char *text) {
  json_error_t jerr;
  json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
  cr_assert_not_null(v, "bad expectation <%s>: %s", text, jerr.text);
  return v;
}

static void assert_json_eq(json_t *got, json_t *want, const char *what) {
  char *g = json_dumps(got, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
  char *w = json_dumps(want, JSON_ENCODE_ANY | JSON_SORT_KEYS | JSON_COMPACT);
  int same = json_equal(got, want) && json_typeof(got) == json_typeof(want);
  cr_assert(same, "%s: got %s, want %s", what, g ? g : "(null)", w ? w : "(null)");
  free(g);
  free(w);
}

/* Parses text as a message body and compares it with the JSON expectation. */
static void assert_parses_to(const char *text, const char *want_json) {
  json_t *got = parse_ok(text, MQPROC__FMT_YAML);
  json_t *want = jload(want_json);
  assert_json_eq(got, want, text);
  json_decref(got);
  json_decref(want);
}

/* The body (len bytes) must fail with MQPROC_ECODEC_SYNTAX and an error containing needle. */
static void assert_syntax(const void *body, size_t len, const char *needle) {
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = (json_t *)(uintptr_t)1;
  int rc = mqproc__codec_parse(body, len, &doc, NULL, err);
  cr_assert_eq(rc, MQPROC_ECODEC_SYNTAX, "expected a syntax error for <%.*s>, got %d", (int)len,
               (const char *)body, rc);
  cr_assert_null(doc);
  cr_assert_not_null(strstr(err, needle), "error <%s> lacks <%s>", err, needle);
}

static void assert_syntax_str(const char *text, const char *needle) {
  assert_syntax(text, strlen(text), needle);
}

static char *dump(const json_t *v) {
  char err[MQPROC_ERR_LEN] = "";
  char *out = NULL;
  size_t len = 0;
  int rc = mqproc__yaml_dump(v, &out, &len, err);
  cr_assert_eq(rc, MQPROC_OK, "dump failed: %s", err);
  cr_assert_not_null(out);
  cr_assert_eq(strlen(out), len);
  return out;
}

/* dump -> load must give back v. */
static void assert_round_trip(json_t *v, const char *what) {
  char err[MQPROC_ERR_LEN] = "";
  char *yaml = dump(v);
  json_t *back = NULL;
  int rc = mqproc__yaml_load(yaml, strlen(yaml), &back, err);
  cr_assert_eq(rc, MQPROC_OK, "%s: reload of <%s> failed: %s", what, yaml, err);
  assert_json_eq(back, v, what);
  json_decref(back);
  free(yaml);
}

/* The valid example message (tests/data/ocrd_message.json) to be broken by a test. */
static json_t *valid_doc(void) {
  return parse_data("ocrd_message.json", MQPROC__FMT_JSON);
}

static mqproc__msg_t *assert_valid(json_t *doc, const char *processor) {
  char err[MQPROC_ERR_LEN] = "";
  mqproc__msg_t *m = NULL;
  int rc = mqproc__msg_validate(doc, MQPROC__FMT_JSON, processor, &m, err);
  cr_assert_eq(rc, MQPROC_OK, "validation failed: %s", err);
  cr_assert_not_null(m);
  return m;
}

static void assert_invalid(json_t *doc, const char *processor, const char *reason) {
  char err[MQPROC_ERR_LEN] = "";
  mqproc__msg_t *m = (mqproc__msg_t *)(uintptr_t)1;
  int rc = mqproc__msg_validate(doc, MQPROC__FMT_JSON, processor, &m, err);
  cr_assert_eq(rc, MQPROC_ECODEC_INVALID, "expected <%s>, got rc %d", reason, rc);
  cr_assert_null(m);
  cr_assert_str_eq(err, reason);
}

/* valid_doc() with key set to the JSON value json (or removed when json is NULL). */
static json_t *doc_with(const char *key, const char *json) {
  json_t *doc = valid_doc();
  if (json == NULL)
    cr_assert_eq(json_object_del(doc, key), 0);
  else
    cr_assert_eq(json_object_set_new(doc, key, jload(json)), 0);
  return doc;
}

/* ---------------------------------------------------------------------------------------
 * Tables from PyYAML
 * ------------------------------------------------------------------------------------- */

struct plain_case {
  const char *text;
  mqproc__yaml_type_t type;
};

struct value_case {
  const char *yaml;
  const char *json;
};

struct dump_case {
  const char *json;
  const char *yaml;
};

static const struct plain_case plain_cases[] = {
    {"", MQPROC__YAML_NULL},
    {"~", MQPROC__YAML_NULL},
    {"null", MQPROC__YAML_NULL},
    {"Null", MQPROC__YAML_NULL},
    {"NULL", MQPROC__YAML_NULL},
    {"nULL", MQPROC__YAML_STR},
    {"none", MQPROC__YAML_STR},
    {"yes", MQPROC__YAML_BOOL},
    {"Yes", MQPROC__YAML_BOOL},
    {"YES", MQPROC__YAML_BOOL},
    {"yEs", MQPROC__YAML_STR},
    {"no", MQPROC__YAML_BOOL},
    {"No", MQPROC__YAML_BOOL},
    {"NO", MQPROC__YAML_BOOL},
    {"true", MQPROC__YAML_BOOL},
    {"True", MQPROC__YAML_BOOL},
    {"TRUE", MQPROC__YAML_BOOL},
    {"tRUE", MQPROC__YAML_STR},
    {"false", MQPROC__YAML_BOOL},
    {"False", MQPROC__YAML_BOOL},
    {"FALSE", MQPROC__YAML_BOOL},
    {"on", MQPROC__YAML_BOOL},
    {"On", MQPROC__YAML_BOOL},
    {"ON", MQPROC__YAML_BOOL},
    {"off", MQPROC__YAML_BOOL},
    {"Off", MQPROC__YAML_BOOL},
    {"OFF", MQPROC__YAML_BOOL},
    {"y", MQPROC__YAML_STR},
    {"n", MQPROC__YAML_STR},
    {"Y", MQPROC__YAML_STR},
    {"N", MQPROC__YAML_STR},
    {"0", MQPROC__YAML_INT},
    {"-0", MQPROC__YAML_INT},
    {"+0", MQPROC__YAML_INT},
    {"7", MQPROC__YAML_INT},
    {"123", MQPROC__YAML_INT},
    {"-123", MQPROC__YAML_INT},
    {"1_000", MQPROC__YAML_INT},
    {"1__", MQPROC__YAML_INT},
    {"_1", MQPROC__YAML_STR},
    {"0b101", MQPROC__YAML_INT},
    {"-0b1_0", MQPROC__YAML_INT},
    {"0b", MQPROC__YAML_STR},
    {"0b2", MQPROC__YAML_STR},
    {"0b_", MQPROC__YAML_INT},
    {"0x1F", MQPROC__YAML_INT},
    {"0x", MQPROC__YAML_STR},
    {"0xg", MQPROC__YAML_STR},
    {"-0x_1f", MQPROC__YAML_INT},
    {"0777", MQPROC__YAML_INT},
    {"0_7", MQPROC__YAML_INT},
    {"08", MQPROC__YAML_STR},
    {"0789", MQPROC__YAML_STR},
    {"00", MQPROC__YAML_INT},
    {"0_", MQPROC__YAML_INT},
    {"0o17", MQPROC__YAML_STR},
    {"1:59", MQPROC__YAML_INT},
    {"1:60", MQPROC__YAML_STR},
    {"1:5:3", MQPROC__YAML_INT},
    {"190:20:30", MQPROC__YAML_INT},
    {"12:345", MQPROC__YAML_STR},
    {"0:20", MQPROC__YAML_STR},
    {"1.5", MQPROC__YAML_FLOAT},
    {"1.", MQPROC__YAML_FLOAT},
    {".5", MQPROC__YAML_FLOAT},
    {"-.5", MQPROC__YAML_STR},
    {"+.5", MQPROC__YAML_STR},
    {".", MQPROC__YAML_STR},
    {"1.e+5", MQPROC__YAML_FLOAT},
    {"1.5e3", MQPROC__YAML_STR},
    {"1.5e+3", MQPROC__YAML_FLOAT},
    {"1.5E-3", MQPROC__YAML_FLOAT},
    {"1e3", MQPROC__YAML_STR},
    {"1.0e400", MQPROC__YAML_STR},
    {"+1_0.5", MQPROC__YAML_FLOAT},
    {"1:20.", MQPROC__YAML_FLOAT},
    {"190:20:30.15", MQPROC__YAML_FLOAT},
    {"0:20.5", MQPROC__YAML_FLOAT},
    {".inf", MQPROC__YAML_FLOAT},
    {"-.inf", MQPROC__YAML_FLOAT},
    {"+.Inf", MQPROC__YAML_FLOAT},
    {".INF", MQPROC__YAML_FLOAT},
    {"inf", MQPROC__YAML_STR},
    {".nan", MQPROC__YAML_FLOAT},
    {".NaN", MQPROC__YAML_FLOAT},
    {".NAN", MQPROC__YAML_FLOAT},
    {"-.nan", MQPROC__YAML_STR},
    {"1.0.0", MQPROC__YAML_STR},
    {"1,000", MQPROC__YAML_STR},
    {"v1.2", MQPROC__YAML_STR},
    {"2024-01-01", MQPROC__YAML_TIMESTAMP},
    {"2024-1-1", MQPROC__YAML_STR},
    {"2024-01-01T10:00:00", MQPROC__YAML_TIMESTAMP},
    {"2001-12-14t21:59:43.10-05:00", MQPROC__YAML_TIMESTAMP},
    {"2001-12-14 21:59:43.10 -5", MQPROC__YAML_TIMESTAMP},
    {"2001-12-14  21:59:43.10 Z", MQPROC__YAML_TIMESTAMP},
    {"2024-01-01 10:00:00 ", MQPROC__YAML_STR},
    {"2024-01-01 10:00", MQPROC__YAML_STR},
    {"2024-001-01", MQPROC__YAML_STR},
    {"yes\n", MQPROC__YAML_BOOL},
    {"123\n", MQPROC__YAML_INT},
    {"\n", MQPROC__YAML_STR},
    {"a", MQPROC__YAML_STR},
    {"ocrd-dummy", MQPROC__YAML_STR},
    {"PHYS_0001..PHYS_0003", MQPROC__YAML_STR},
    {"0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a", MQPROC__YAML_STR},
    {"/data/ws1/mets.xml", MQPROC__YAML_STR},
    {"http://x:80/a", MQPROC__YAML_STR},
};
static const struct value_case value_cases[] = {
    {"v: 0777\n", "511"},
    {"v: 0b1010\n", "10"},
    {"v: -0x1F\n", "-31"},
    {"v: 0x_1F\n", "31"},
    {"v: 190:20:30\n", "685230"},
    {"v: -1:30\n", "-90"},
    {"v: 1_000\n", "1000"},
    {"v: +12\n", "12"},
    {"v: -0\n", "0"},
    {"v: 0_\n", "0"},
    {"v: 9223372036854775807\n", "9223372036854775807"},
    {"v: -9223372036854775808\n", "-9223372036854775808"},
    {"v: 0x7FFFFFFFFFFFFFFF\n", "9223372036854775807"},
    {"v: 190:20:30.15\n", "685230.15"},
    {"v: 1.e+5\n", "100000.0"},
    {"v: +1_0.5\n", "10.5"},
    {"v: 0.1\n", "0.1"},
    {"v: 1:20.\n", "80.0"},
    {"v: 6.8523015e+5\n", "685230.15"},
    {"v: -0.0\n", "-0.0"},
    {"v: .5\n", "0.5"},
    {"v: 1.5E-3\n", "0.0015"},
    {"v: yes\n", "true"},
    {"v: No\n", "false"},
    {"v: ON\n", "true"},
    {"v: off\n", "false"},
    {"v: ~\n", "null"},
    {"v: NULL\n", "null"},
    {"v: \n", "null"},
    {"v: 1e3\n", "\"1e3\""},
    {"v: 1.5e3\n", "\"1.5e3\""},
    {"v: 2024-01-01\n", "\"2024-01-01\""},
    {"v: 0o17\n", "\"0o17\""},
    {"v: 08\n", "\"08\""},
};
static const struct dump_case dump_cases[] = {
    {"{\"k\": \"yes\"}", "k: 'yes'\n"},
    {"{\"k\": \"123\"}", "k: '123'\n"},
    {"{\"k\": \"1_000\"}", "k: '1_000'\n"},
    {"{\"k\": \"0x1F\"}", "k: '0x1F'\n"},
    {"{\"k\": \"1e3\"}", "k: 1e3\n"},
    {"{\"k\": \"2024-01-01\"}", "k: '2024-01-01'\n"},
    {"{\"k\": \"~\"}", "k: '~'\n"},
    {"{\"k\": \"null\"}", "k: 'null'\n"},
    {"{\"k\": \"\"}", "k: ''\n"},
    {"{\"k\": \"a: b\"}", "k: 'a: b'\n"},
    {"{\"k\": \"#c\"}", "k: '#c'\n"},
    {"{\"k\": \"a#c\"}", "k: a#c\n"},
    {"{\"k\": \"- a\"}", "k: '- a'\n"},
    {"{\"k\": \"-a\"}", "k: -a\n"},
    {"{\"k\": \":a\"}", "k: :a\n"},
    {"{\"k\": \"a:\"}", "k: 'a:'\n"},
    {"{\"k\": \"it's\"}", "k: it's\n"},
    {"{\"k\": \"'a\"}", "k: '''a'\n"},
    {"{\"k\": \"\\\"a\"}", "k: '\"a'\n"},
    {"{\"k\": \"=\"}", "k: '='\n"},
    {"{\"k\": \"<<\"}", "k: '<<'\n"},
    {"{\"k\": \"08\"}", "k: 08\n"},
    {"{\"k\": \".5\"}", "k: '.5'\n"},
    {"{\"k\": \".\"}", "k: .\n"},
    {"{\"k\": \"---\"}", "k: '---'\n"},
    {"{\"k\": \"1:20\"}", "k: '1:20'\n"},
    {"{\"k\": \"0:20\"}", "k: 0:20\n"},
    {"{\"k\": \"\\u00fc\"}", "k: \"\\xFC\"\n"},
    {"{\"k\": \"/data/\\u00fc.xml\"}", "k: \"/data/\\xFC.xml\"\n"},
    {"{\"k\": \"a\\tb\"}", "k: \"a\\tb\"\n"},
    {"{\"k\": \"a\\nb\"}", "k: 'a\n\n  b'\n"},
    {"{\"k\": \"a\\n\"}", "k: 'a\n\n  '\n"},
    {"{\"k\": \" a\"}", "k: ' a'\n"},
    {"{\"k\": \"a \"}", "k: 'a '\n"},
    {"{\"k\": \"\\u0000\"}", "k: \"\\0\"\n"},
    {"{\"k\": \"\\u007f\"}", "k: \"\\x7F\"\n"},
    {"{\"k\": \"\\u2028\"}", "k: \"\\L\"\n"},
    {"{\"k\": \"\\ufeff\"}", "k: \"\\uFEFF\"\n"},
    {"{\"k\": \"\\ud83d\\ude00\"}", "k: \"\\U0001F600\"\n"},
    {"{\"k\": \"PHYS_0001..PHYS_0003\"}", "k: PHYS_0001..PHYS_0003\n"},
    {"{\"k\": \"http://ps-host:8000/result_callback\"}",
     "k: http://ps-host:8000/result_callback\n"},
    {"{\"k\": \"0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a\"}",
     "k: 0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a\n"},
    {"{\"k\": \"This parameter value is deliberately longer than eighty characters so that PyYAML "
     "folds it onto continuation lines\"}",
     "k: This parameter value is deliberately longer than eighty characters so that PyYAML\n  "
     "folds it onto continuation lines\n"},
    {"{\"k\": \"it's a long single quoted string: with a colon and more than eighty characters in "
     "total, folded by the emitter\"}",
     "k: 'it''s a long single quoted string: with a colon and more than eighty characters\n  in "
     "total, folded by the emitter'\n"},
    {"{\"k\": "
     "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxx\"}",
     "k: "
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxx\n"},
    {"{\"parameters\": {\"b\": {\"c\": {}}, \"a\": [{\"x\": 1, \"y\": [1, 2]}], \"empty_list\": "
     "[], \"f\": 0.5, \"t\": true, \"n\": null, \"neg\": -7}}",
     "parameters:\n  a:\n  - x: 1\n    y:\n    - 1\n    - 2\n  b:\n    c: {}\n  empty_list: []\n  "
     "f: 0.5\n  n: null\n  neg: -7\n  t: true\n"},
    {"{\"yes\": 1, \"Zeta\": \"A\", \"alpha\": [\"no\", \"on\", 3], \"\\u00fc\": \"key order by "
     "code point\"}",
     "Zeta: A\nalpha:\n- 'no'\n- 'on'\n- 3\n'yes': 1\n\"\\xFC\": key order by code point\n"},
    {"{\"floats\": [1.0, 0.1, 1e+16, 1000000000000000.0, 1.5e-05, 0.0001, 1e-05, -0.0, "
     "123456789.123, 1e+300, 2.5e-300, 0.3333333333333333]}",
     "floats:\n- 1.0\n- 0.1\n- 1.0e+16\n- 1000000000000000.0\n- 1.5e-05\n- 0.0001\n- 1.0e-05\n- "
     "-0.0\n- 123456789.123\n- 1.0e+300\n- 2.5e-300\n- 0.3333333333333333\n"},
    {"{\"ints\": [0, -1, 9223372036854775807, -9223372036854775808]}",
     "ints:\n- 0\n- -1\n- 9223372036854775807\n- -9223372036854775808\n"},
    {"[1, [2, 3], {\"a\": []}, [], {}]", "- 1\n- - 2\n  - 3\n- a: []\n- []\n- {}\n"},
    {"{\"m\": [[1, 2], [{\"a\": 1}]]}", "m:\n- - 1\n  - 2\n- - a: 1\n"},
    {"{}", "{}\n"},
    {"[]", "[]\n"},
};

/* ---------------------------------------------------------------------------------------
 * Parsing: formats and the OCR-D wire examples
 * ------------------------------------------------------------------------------------- */

Test(parse, ocrd_example_yaml_equals_json) {
  json_t *y = parse_data("ocrd_message.yaml", MQPROC__FMT_YAML);
  json_t *j = parse_data("ocrd_message.json", MQPROC__FMT_JSON);
  assert_json_eq(y, j, "ocrd_message.yaml");
  cr_assert(json_is_integer(json_object_get(y, "created_time")));
  cr_assert_eq(json_integer_value(json_object_get(y, "created_time")), 1718000000);
  cr_assert(json_is_true(json_object_get(json_object_get(y, "parameters"), "copy_files")));
  json_decref(y);
  json_decref(j);
}

Test(parse, full_message_yaml_equals_json) {
  /* written by PyYAML: folded parameter, "\xFC" escape, '0123456789' plain string,
   * 'no' and '' quoted, a float, an empty mapping */
  json_t *y = parse_data("ocrd_message_full.yaml", MQPROC__FMT_YAML);
  json_t *j = parse_data("ocrd_message_full.json", MQPROC__FMT_JSON);
  json_t *params = json_object_get(y, "parameters");
  assert_json_eq(y, j, "ocrd_message_full.yaml");
  cr_assert_str_eq(json_string_value(json_object_get(y, "workspace_id")), "M\xc3\xbcller-Nachlass");
  cr_assert_str_eq(json_string_value(json_object_get(params, "char_whitelist")), "0123456789");
  cr_assert_str_eq(json_string_value(json_object_get(params, "comment")),
                   "A deliberately long free-text parameter value that exceeds the eighty "
                   "column limit and is folded by PyYAML");
  json_decref(y);
  json_decref(j);
}

Test(parse, json_is_detected_after_whitespace) {
  json_t *doc = parse_ok(" \r\n\t{\"job_id\": \"x\", \"n\": 1}", MQPROC__FMT_JSON);
  cr_assert_eq(json_integer_value(json_object_get(doc, "n")), 1);
  json_decref(doc);
}

Test(parse, flow_yaml_falls_back_from_json) {
  json_t *doc = parse_ok("{job_id: x, n: 0x10, ok: yes}", MQPROC__FMT_YAML);
  json_t *want = jload("{\"job_id\": \"x\", \"n\": 16, \"ok\": true}");
  assert_json_eq(doc, want, "flow YAML");
  json_decref(doc);
  json_decref(want);
}

Test(parse_errors, json_that_json_cannot_hold_is_a_json_error_not_yaml) {
  /* read as YAML flow text, each would parse (1e400 as the string "1e400") */
  assert_syntax_str("{\"job_id\": \"x\", \"n\": 1e400}",
                    "JSON: line 1, column 26: real number overflow near '1e400'");
  assert_syntax_str("{\"n\": 123456789012345678901234567890}",
                    "JSON: line 1, column 36: too big integer");
  assert_syntax_str("{\"s\": \"a\\u0000b\"}", "JSON: line 1, column 16: \\u0000 is not allowed");
  assert_syntax_str("{\"a\": 1, \"a\": 2}", "JSON: line 1, column 12: duplicate object key near");
}

Test(parse, body_is_not_nul_terminated) {
  static const char body[] = {'a', ':', ' ', '1', '2', 'x', 'y', 'z'};
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = NULL;
  cr_assert_eq(mqproc__codec_parse(body, 5, &doc, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(json_integer_value(json_object_get(doc, "a")), 12);
  json_decref(doc);
}

Test(parse, scalar_and_sequence_documents_parse) {
  json_t *s = parse_ok("hello", MQPROC__FMT_YAML);
  json_t *i = parse_ok("42\n", MQPROC__FMT_YAML);
  json_t *a = parse_ok("- a\n- 1\n", MQPROC__FMT_YAML);
  cr_assert_str_eq(json_string_value(s), "hello");
  cr_assert_eq(json_integer_value(i), 42);
  cr_assert_eq(json_array_size(a), 2);
  json_decref(s);
  json_decref(i);
  json_decref(a);
}

Test(parse, explicit_document_markers_are_fine) {
  assert_parses_to("%YAML 1.1\n---\na: 1\n...\n", "{\"a\": 1}");
}

/* ---------------------------------------------------------------------------------------
 * Parsing: errors
 * ------------------------------------------------------------------------------------- */

Test(parse_errors, empty_and_blank_bodies) {
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = NULL;
  cr_assert_eq(mqproc__codec_parse(NULL, 0, &doc, NULL, err), MQPROC_ECODEC_SYNTAX);
  cr_assert_str_eq(err, "empty message");
  assert_syntax("", 0, "empty message");
  assert_syntax_str(" \n\t\r\n ", "empty message");
  assert_syntax_str("# only a comment\n", "empty message (no YAML document)");
}

Test(parse_errors, garbage_reports_line_and_column) {
  assert_syntax_str("job_id: x\nfoo: bar: baz\n",
                    "YAML: line 2, column 9: mapping values are not allowed in this context");
  assert_syntax_str("a: 1\nb: [x, y\n", "YAML: line 3, column 1: did not find expected ',' or ']'");
  assert_syntax_str("@@@\n", "found character that cannot start any token");
  assert_syntax_str("a: \"unterminated\n", "found unexpected end of stream");
  assert_syntax_str("a: 1\n\x01\n", "control characters are not allowed");
}

Test(parse_errors, unbalanced_json_reports_both_syntaxes) {
  assert_syntax_str(
      "{\"job_id\": \"x\", \"input_file_grps\": [\"A\"}",
      "JSON: line 1, column 40: ']' expected near '}'; YAML: line 1, column 40: did not find "
      "expected ',' or ']' (while parsing a flow sequence)");
  assert_syntax_str("[1, 2", "JSON: line 1, column 5: ']' expected near end of file; YAML: ");
}

Test(parse_errors, nul_bytes) {
  static const char body[] = "job_id: x\npath: a\0b\n";
  assert_syntax(body, sizeof(body) - 1,
                "message contains a NUL byte at line 2, column 8 (offset 17)");
  assert_syntax("\0", 1, "NUL byte at line 1, column 1");
  assert_syntax("{\"a\": \"\0\"}", 10, "NUL byte");
}

Test(parse_errors, invalid_utf8) {
  assert_syntax_str("a: \xc3\x28\n", "not valid UTF-8 at line 1, column 4 (offset 3, byte 0xC3)");
  assert_syntax_str("a: b\nc: \xc0\xaf\n", "not valid UTF-8 at line 2, column 4"); /* overlong */
  assert_syntax_str("a: \xed\xa0\x80\n", "not valid UTF-8");                       /* surrogate */
  assert_syntax_str("a: \xf4\x90\x80\x80\n", "not valid UTF-8");                   /* > U+10FFFF */
  assert_syntax_str("a: \xe2\x82", "not valid UTF-8");                             /* truncated */
  assert_syntax_str("{\"a\": \"\xff\"}", "not valid UTF-8");
  assert_syntax_str("\xc3\xbc: \xc3\xbc\xff", "not valid UTF-8 at line 1, column 5 (offset 6");
}

Test(parse_errors, second_document) {
  assert_syntax_str("a: 1\n---\nb: 2\n",
                    "YAML: line 2, column 1: only one YAML document is allowed");
  assert_syntax_str("--- a\n--- b\n", "only one YAML document is allowed");
}

Test(parse_errors, aliases_and_anchors) {
  assert_syntax_str("a: 1\nb: *x\n", "YAML: line 2, column 4: aliases are not supported");
  assert_syntax_str("a: &x 1\nb: *x\n", "line 1, column 4: anchors and aliases are not supported");
  assert_syntax_str("a: &x [1]\n", "aliases are not supported");
  assert_syntax_str("? *x\n: 1\n", "aliases are not supported");
  assert_syntax_str("&k a: 1\n", "aliases are not supported");
}

Test(parse_errors, unsupported_tags) {
  assert_syntax_str("a: !!python/object/apply:os.system [\"ls\"]\n",
                    "line 1, column 4: tag 'tag:yaml.org,2002:python/object/apply:os.system' is "
                    "not supported");
  assert_syntax_str("a: !!python/name:os.system x\n", "is not supported");
  assert_syntax_str("a: !custom x\n", "tag '!custom' is not supported");
  assert_syntax_str("a: !!timestamp 2024-01-01\n", "tag 'tag:yaml.org,2002:timestamp'");
  assert_syntax_str("a: !!binary aGVsbG8=\n", "tag 'tag:yaml.org,2002:binary'");
  assert_syntax_str("a: !!set {x: null}\n", "tag 'tag:yaml.org,2002:set'");
  assert_syntax_str("a: !!seq {x: 1}\n", "tag 'tag:yaml.org,2002:seq' is not supported");
  assert_syntax_str("!!python/str k: 1\n", "is not supported");
  /* %TAG cannot smuggle another namespace in under !! */
  assert_syntax_str("%TAG !! tag:evil.org,2002:\n---\na: !!str x\n",
                    "tag 'tag:evil.org,2002:str' is not supported");
}

Test(parse_errors, keys) {
  assert_syntax_str("a: 1\nb: 2\na: 3\n", "line 3, column 1: duplicate key 'a'");
  assert_syntax_str("{\"a\": 1, \"a\": 2}", "JSON: line 1, column 12: duplicate object key near "
                                            "'\"a\"'");
  assert_syntax_str("{a: 1, a: 2}", "duplicate key 'a'");
  assert_syntax_str("? [a]\n: 1\n", "line 1, column 3: mapping keys must be scalars");
  assert_syntax_str("{[a]: 1}", "mapping keys must be scalars");
  assert_syntax_str("<<: {b: 1}\n", "merge keys ('<<') are not supported");
  assert_syntax_str("\"a\\0b\": 1\n", "mapping key contains a NUL character");
}

Test(parse_errors, unrepresentable_numbers) {
  assert_syntax_str("v: 9223372036854775808\n",
                    "line 1, column 4: integer 9223372036854775808 is out of range");
  assert_syntax_str("v: -9223372036854775809\n", "is out of range");
  assert_syntax_str("v: 0x1_0000_0000_0000_0000\n", "is out of range");
  assert_syntax_str("v: 3000000000:00:00:00:00:00:00\n", "is out of range");
  assert_syntax_str("v: .inf\n", "float .inf cannot be represented in JSON");
  assert_syntax_str("v: -.Inf\n", "cannot be represented");
  assert_syntax_str("v: .NaN\n", "cannot be represented");
  assert_syntax_str("v: 1.0e+999\n", "cannot be represented");
  assert_syntax_str("v: =\n", "plain '=' must be quoted");
  assert_syntax_str("v: <<\n", "plain '<<' must be quoted");
}

Test(parse_errors, bad_explicit_values) {
  assert_syntax_str("v: !!int abc\n", "invalid !!int value 'abc'");
  assert_syntax_str("v: !!int 0b\n", "invalid !!int value '0b'");
  assert_syntax_str("v: !!float x1\n", "invalid !!float value 'x1'");
  assert_syntax_str("v: !!bool maybe\n", "invalid !!bool value 'maybe'");
}

Test(parse_errors, nesting_limit) {
  char buf[2 * 200 + 8];
  size_t i;
  for (i = 0; i < 200; i++) {
    buf[2 * i] = '-';
    buf[2 * i + 1] = ' ';
  }
  memcpy(buf + 400, "x\n", 3);
  assert_syntax(buf, strlen(buf), "nesting deeper than 128 levels");
}

/* ---------------------------------------------------------------------------------------
 * YAML 1.1 typing
 * ------------------------------------------------------------------------------------- */

Test(yaml_types, plain_type_table_matches_pyyaml) {
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(plain_cases); i++) {
    const struct plain_case *c = &plain_cases[i];
    cr_expect_eq(mqproc__yaml_plain_type(c->text, strlen(c->text)), c->type, "<%s>: got %d want %d",
                 c->text, (int)mqproc__yaml_plain_type(c->text, strlen(c->text)), (int)c->type);
  }
}

Test(yaml_types, plain_type_uses_length_not_nul) {
  cr_assert_eq(mqproc__yaml_plain_type("123abc", 3), MQPROC__YAML_INT);
  cr_assert_eq(mqproc__yaml_plain_type("yes!", 3), MQPROC__YAML_BOOL);
  cr_assert_eq(mqproc__yaml_plain_type("1\0002", 3), MQPROC__YAML_STR);
  cr_assert_eq(mqproc__yaml_plain_type(NULL, 0), MQPROC__YAML_NULL);
}

Test(yaml_types, constructed_values_match_pyyaml) {
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(value_cases); i++) {
    json_t *got = parse_ok(value_cases[i].yaml, MQPROC__FMT_YAML);
    json_t *want = jload(value_cases[i].json);
    assert_json_eq(json_object_get(got, "v"), want, value_cases[i].yaml);
    json_decref(got);
    json_decref(want);
  }
}

Test(yaml_types, quoted_and_block_scalars_are_strings) {
  assert_parses_to("a: '123'\nb: \"yes\"\nc: |\n  123\nd: >-\n  true\ne: 'null'\nf: ''\n",
                   "{\"a\": \"123\", \"b\": \"yes\", \"c\": \"123\\n\", \"d\": \"true\", "
                   "\"e\": \"null\", \"f\": \"\"}");
  assert_parses_to("a: 'it''s'\nb: \"say \\\"hi\\\"\"\n",
                   "{\"a\": \"it's\", \"b\": \"say \\\"hi\\\"\"}");
}

Test(yaml_types, explicit_tags_are_honoured) {
  assert_parses_to("a: !!str 123\nb: !!int \"12\"\nc: !!float 1\nd: ! 12\ne: !!bool \"YES\"\n"
                   "f: !!null x\ng: !!str yes\nh: !!map {x: 1}\ni: !!seq [1]\nj: !!str\n"
                   "k: !!float '1_0.5'\nl: !<tag:yaml.org,2002:int> 0x10\n",
                   "{\"a\": \"123\", \"b\": 12, \"c\": 1.0, \"d\": 12, \"e\": true, \"f\": null, "
                   "\"g\": \"yes\", \"h\": {\"x\": 1}, \"i\": [1], \"j\": \"\", \"k\": 10.5, "
                   "\"l\": 16}");
}

Test(yaml_types, timestamps_stay_strings) {
  assert_parses_to("d: 2024-01-01\nt: 2001-12-14 21:59:43.10 -5\n",
                   "{\"d\": \"2024-01-01\", \"t\": \"2001-12-14 21:59:43.10 -5\"}");
}

Test(yaml_types, non_string_keys_use_their_text) {
  assert_parses_to("1: a\nyes: b\n~: c\n0x10: d\n",
                   "{\"1\": \"a\", \"yes\": \"b\", \"~\": \"c\", \"0x10\": \"d\"}");
}

Test(yaml_types, folded_scalars_join_with_spaces) {
  /* PyYAML's folding of plain, single- and double-quoted scalars at width 80 */
  assert_parses_to(
      "comment: A deliberately long free-text parameter value that exceeds the eighty column\n"
      "  limit and is folded by PyYAML\n",
      "{\"comment\": \"A deliberately long free-text parameter value that exceeds the "
      "eighty column limit and is folded by PyYAML\"}");
  assert_parses_to("s: 'it''s it''s it''s\n  it''s '\n", "{\"s\": \"it's it's it's it's \"}");
  assert_parses_to("v: \"abc abc\\\n  \\ abc \\xFC\"\n", "{\"v\": \"abc abc abc \\u00fc\"}");
  assert_parses_to("v: 'a\n\n  b'\n", "{\"v\": \"a\\nb\"}");
  assert_parses_to("v: >\n  folded\n  text\n\n  para\n", "{\"v\": \"folded text\\npara\\n\"}");
}

Test(yaml_types, unicode_escapes) {
  assert_parses_to("path_to_mets: \"/data/\\xFC.xml\"\n",
                   "{\"path_to_mets\": \"/data/\\u00fc.xml\"}");
  assert_parses_to("path_to_mets: \"/data/\\u00FC.xml\"\n",
                   "{\"path_to_mets\": \"/data/\\u00fc.xml\"}");
  assert_parses_to("path_to_mets: /data/\xc3\xbc.xml\n",
                   "{\"path_to_mets\": \"/data/\\u00fc.xml\"}");
  assert_parses_to("e: \"\\U0001F600\\L\\N\\_\\t\"\n",
                   "{\"e\": \"\\ud83d\\ude00\\u2028\\u0085\\u00a0\\t\"}");
}

/* ---------------------------------------------------------------------------------------
 * Dumping: byte-exact PyYAML
 * ------------------------------------------------------------------------------------- */

Test(yaml_dump, matches_pyyaml_bytes) {
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(dump_cases); i++) {
    json_t *v = jload(dump_cases[i].json);
    char *out = dump(v);
    cr_expect_str_eq(out, dump_cases[i].yaml, "%s", dump_cases[i].json);
    free(out);
    json_decref(v);
  }
}

Test(yaml_dump, ocrd_example_is_reproduced_exactly) {
  size_t len;
  char *want = read_data("ocrd_message.yaml", &len);
  json_t *doc = parse_data("ocrd_message.json", MQPROC__FMT_JSON);
  char *got = dump(doc);
  cr_assert_str_eq(got, want);
  free(got);
  free(want);
  json_decref(doc);
}

Test(yaml_dump, full_message_is_reproduced_exactly) {
  size_t len;
  char *want = read_data("ocrd_message_full.yaml", &len);
  json_t *doc = parse_data("ocrd_message_full.json", MQPROC__FMT_JSON);
  char *got = dump(doc);
  cr_assert_str_eq(got, want);
  free(got);
  free(want);
  json_decref(doc);
}

Test(yaml_dump, root_scalars_end_like_pyyaml) {
  static const struct dump_case roots[] = {
      {"\"plain\"", "plain\n...\n"}, {"12", "12\n...\n"},     {"null", "null\n...\n"},
      {"1e16", "1.0e+16\n...\n"},    {"\"yes\"", "'yes'\n"},  {"\"\\u00fc\"", "\"\\xFC\"\n"},
      {"true", "true\n...\n"},       {"-0.0", "-0.0\n...\n"},
  };
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(roots); i++) {
    json_t *v = jload(roots[i].json);
    char *out = dump(v);
    cr_expect_str_eq(out, roots[i].yaml, "%s", roots[i].json);
    free(out);
    json_decref(v);
  }
}

Test(yaml_dump, bad_arguments) {
  char err[MQPROC_ERR_LEN] = "";
  char *out = NULL;
  cr_assert_eq(mqproc__yaml_dump(NULL, &out, NULL, err), MQPROC_EINVAL);
  cr_assert_null(out);
}

Test(yaml_dump, deep_nesting_is_refused) {
  char err[MQPROC_ERR_LEN] = "";
  char *out = NULL;
  json_t *root = json_array();
  json_t *cur = root;
  int i;
  for (i = 0; i < 200; i++) {
    json_t *next = json_array();
    json_array_append_new(cur, next);
    cur = next;
  }
  cr_assert_eq(mqproc__yaml_dump(root, &out, NULL, err), MQPROC_EINVAL);
  cr_assert_null(out);
  cr_assert_str_eq(err, "nesting deeper than 128 levels");
  json_decref(root);
}

/* ---------------------------------------------------------------------------------------
 * Round trips: dump -> load gives the original back
 * ------------------------------------------------------------------------------------- */

Test(round_trip, dump_cases) {
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(dump_cases); i++) {
    json_t *v = jload(dump_cases[i].json);
    assert_round_trip(v, dump_cases[i].json);
    json_decref(v);
  }
}

Test(round_trip, every_typed_lookalike_string_stays_a_string) {
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(plain_cases); i++) {
    json_t *v = json_pack("{s:s, s:[s], s:{s:s}}", "k", plain_cases[i].text, "l",
                          plain_cases[i].text, plain_cases[i].text, "x", plain_cases[i].text);
    cr_assert_not_null(v);
    assert_round_trip(v, plain_cases[i].text);
    json_decref(v);
  }
}

Test(round_trip, numbers_and_tricky_values) {
  static const char *const values[] = {
      "[0, -1, 9223372036854775807, -9223372036854775808, 511, 1000]",
      "[0.1, 0.2, 0.30000000000000004, 1e16, 1e15, 1.5e-05, 1e-05, 1e-300, 5e-324, "
      "1.7976931348623157e308, 2.2250738585072014e-308, 123456789.123, 3.141592653589793, "
      "9007199254740993.0, 100.0, 1e22, 1e21, 0.5, 1234.5e-10]",
      "{\"\": \"\", \"~\": \"~\", \"-\": \"-\", \"?\": \"?\", \":\": \":\", \"a b\": \"a  b\"}",
      "[\"\\u0000\", \"\\u0001\\u001f\", \"\\r\\n\", \"\\r\", \" \", \"  \", \"\\t\", \"\\n\\n\", "
      "\"a\\n \", \"a \\nb\", \"\\n a\", \"\\u0085\", \"\\u2029\", \"\\ufffe\", \"\\uffff\"]",
      "{\"long\": \"abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc abc "
      "abc abc abc abc \\u00fc abc abc abc\", \"nospace\": "
      "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
      "xxxxxxxxxxxxxxx\\u00fc\", \"spaces\": \"a  b  c  d  e  f  g  h  i  j  k  l  m  n  o  p "
      " q  r  s  t  u  v  w  x  y  z  a  b  c  d\"}",
      "[[], {}, [[]], [{}], {\"a\": {}}, {\"a\": []}, [[1, [2, [3]]]], [null, true, false]]",
      "{\"x\": {\"y\": {\"z\": [{\"a\": [1, {\"b\": [\"c\", {}]}]}]}}}",
  };
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(values); i++) {
    json_t *v = jload(values[i]);
    assert_round_trip(v, values[i]);
    json_decref(v);
  }
}

Test(round_trip, long_keys) {
  char key[300];
  size_t n;
  for (n = 110; n < 140; n++) {
    json_t *v;
    memset(key, 'k', n);
    key[n] = '\0';
    v = json_pack("{s:i, s:s}", key, 1, "a", key);
    assert_round_trip(v, key);
    json_decref(v);
  }
}

/* ---------------------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------------------- */

Test(validate, example_message_fields) {
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = parse_data("ocrd_message.yaml", MQPROC__FMT_YAML);
  mqproc__msg_t *m = NULL;
  cr_assert_eq(mqproc__msg_validate(doc, MQPROC__FMT_YAML, "ocrd-dummy", &m, err), MQPROC_OK, "%s",
               err);
  cr_assert_eq(m->doc, doc);
  cr_assert_eq(m->format, MQPROC__FMT_YAML);
  cr_assert_str_eq(m->job_id, "0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a");
  cr_assert_str_eq(m->processor_name, "ocrd-dummy");
  cr_assert_eq(m->created_time, 1718000000LL);
  cr_assert_eq(json_array_size(m->input_file_grps), 1);
  cr_assert_str_eq(json_string_value(json_array_get(m->input_file_grps, 0)), "OCR-D-IMG");
  cr_assert_str_eq(json_string_value(json_array_get(m->output_file_grps, 0)), "OCR-D-DUMMY");
  cr_assert_str_eq(m->path_to_mets, "/data/ws1/mets.xml");
  cr_assert_null(m->workspace_id);
  cr_assert_str_eq(m->page_id, "PHYS_0001..PHYS_0003");
  cr_assert(json_is_true(json_object_get(m->parameters, "copy_files")));
  cr_assert_null(m->result_queue_name);
  cr_assert_null(m->callback_url);
  cr_assert_str_eq(m->internal_callback_url, "http://ps-host:8000/result_callback");
  mqproc__msg_free(m);
}

Test(validate, full_message_with_workspace_and_https_callback) {
  json_t *doc = parse_data("ocrd_message_full.yaml", MQPROC__FMT_YAML);
  mqproc__msg_t *m = assert_valid(doc, "ocrd-tesserocr-recognize");
  cr_assert_str_eq(m->workspace_id, "M\xc3\xbcller-Nachlass");
  cr_assert_null(m->path_to_mets);
  cr_assert_str_eq(m->callback_url, "https://client.example.org/jobs/callback");
  cr_assert_str_eq(m->result_queue_name, "ocrd-tesserocr-recognize-result");
  cr_assert_eq(json_array_size(m->input_file_grps), 2);
  mqproc__msg_free(m);
}

Test(validate, processor_null_accepts_any_ocrd_name) {
  mqproc__msg_t *m = assert_valid(valid_doc(), NULL);
  mqproc__msg_free(m);
}

Test(validate, missing_required_keys) {
  assert_invalid(doc_with("job_id", NULL), NULL, "job_id: required key missing");
  assert_invalid(doc_with("processor_name", NULL), NULL, "processor_name: required key missing");
  assert_invalid(doc_with("created_time", NULL), NULL, "created_time: required key missing");
  assert_invalid(doc_with("input_file_grps", NULL), NULL, "input_file_grps: required key missing");
}

Test(validate, job_id) {
  assert_invalid(doc_with("job_id", "\"\""), NULL, "job_id: must be a non-empty string");
  assert_invalid(doc_with("job_id", "42"), NULL, "job_id: must be a string, got an integer");
  assert_invalid(doc_with("job_id", "null"), NULL, "job_id: must be a string, got null");
}

Test(validate, wrong_processor) {
  assert_invalid(valid_doc(), "ocrd-tesserocr-recognize",
                 "processor_name: message is for 'ocrd-dummy', this server runs "
                 "'ocrd-tesserocr-recognize'");
  /* any name, not only OCR-D's, as long as it is the server's own */
  mqproc__msg_free(assert_valid(doc_with("processor_name", "\"thumbnails\""), "thumbnails"));
  assert_invalid(doc_with("processor_name", "\"thumbnails\""), "ocrd-dummy",
                 "processor_name: message is for 'thumbnails', this server runs 'ocrd-dummy'");
}

Test(validate, path_and_workspace_one_of) {
  json_t *both = doc_with("workspace_id", "\"ws1\"");
  assert_invalid(both, NULL, "path_to_mets and workspace_id are mutually exclusive");
  assert_invalid(doc_with("path_to_mets", NULL), NULL,
                 "one of path_to_mets or workspace_id is required");
  assert_invalid(doc_with("path_to_mets", "\"\""), NULL,
                 "path_to_mets: must be a non-empty string");
}

Test(validate, workspace_only_is_valid) {
  json_t *doc = doc_with("path_to_mets", NULL);
  mqproc__msg_t *m;
  json_object_set_new(doc, "workspace_id", json_string("ws1"));
  m = assert_valid(doc, "ocrd-dummy");
  cr_assert_str_eq(m->workspace_id, "ws1");
  cr_assert_null(m->path_to_mets);
  mqproc__msg_free(m);
}

Test(validate, created_time) {
  assert_invalid(doc_with("created_time", "\"1718000000\""), NULL,
                 "created_time: must be an integer >= 0, got a string");
  assert_invalid(doc_with("created_time", "1718000000.0"), NULL,
                 "created_time: must be an integer >= 0, got a float");
  assert_invalid(doc_with("created_time", "-1"), NULL,
                 "created_time: must be an integer >= 0, got -1");
  assert_invalid(doc_with("created_time", "true"), NULL,
                 "created_time: must be an integer >= 0, got a boolean");
}

Test(validate, created_time_quoted_in_yaml) {
  /* what PyYAML writes when a producer wrongly sends the time as a string */
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = parse_ok("created_time: '1718000000'\ninput_file_grps:\n- IN\njob_id: j\n"
                         "path_to_mets: /m.xml\nprocessor_name: ocrd-dummy\n",
                         MQPROC__FMT_YAML);
  mqproc__msg_t *m = NULL;
  cr_assert_eq(mqproc__msg_validate(doc, MQPROC__FMT_YAML, NULL, &m, err), MQPROC_ECODEC_INVALID);
  cr_assert_str_eq(err, "created_time: must be an integer >= 0, got a string");
}

Test(validate, file_groups) {
  assert_invalid(doc_with("input_file_grps", "[]"), NULL,
                 "input_file_grps: must be a non-empty sequence of strings, got an empty sequence");
  assert_invalid(doc_with("input_file_grps", "\"OCR-D-IMG\""), NULL,
                 "input_file_grps: must be a non-empty sequence of strings, got a string");
  assert_invalid(doc_with("input_file_grps", "[\"A\", 1]"), NULL,
                 "input_file_grps: item 2 must be a non-empty string without NUL, got an integer");
  assert_invalid(
      doc_with("output_file_grps", "[]"), NULL,
      "output_file_grps: must be a non-empty sequence of strings, got an empty sequence");
  assert_invalid(doc_with("output_file_grps", "[\"\"]"), NULL,
                 "output_file_grps: item 1 must be a non-empty string without NUL, got a string");
}

Test(validate, unknown_key) {
  assert_invalid(doc_with("foo", "1"), NULL, "unknown key 'foo'");
  assert_invalid(doc_with("status", "\"SUCCESS\""), NULL, "unknown key 'status'");
}

Test(validate, callback_urls) {
  mqproc__msg_t *m =
      assert_valid(doc_with("callback_url", "\"https://client.example.org/cb\""), NULL);
  cr_assert_str_eq(m->callback_url, "https://client.example.org/cb");
  mqproc__msg_free(m);
  m = assert_valid(doc_with("internal_callback_url", "\"https://ps:8000/result_callback\""), NULL);
  mqproc__msg_free(m);
  assert_invalid(doc_with("callback_url", "\"ftp://client/cb\""), NULL,
                 "callback_url: must be an http:// or https:// URL, got 'ftp://client/cb'");
  assert_invalid(doc_with("internal_callback_url", "\"htt://ps\""), NULL,
                 "internal_callback_url: must be an http:// or https:// URL, got 'htt://ps'");
  assert_invalid(doc_with("callback_url", "[]"), NULL,
                 "callback_url: must be a string, got a sequence");
}

Test(validate, optional_keys) {
  mqproc__msg_t *m = assert_valid(doc_with("agent_type", "\"worker\""), NULL);
  mqproc__msg_free(m);
  assert_invalid(doc_with("agent_type", "\"client\""), NULL,
                 "agent_type: must be 'worker' or 'server'");
  assert_invalid(doc_with("parameters", "[]"), NULL,
                 "parameters: must be a mapping, got a sequence");
  assert_invalid(doc_with("page_id", "1"), NULL, "page_id: must be a string, got an integer");
  assert_invalid(doc_with("result_queue_name", "\"\""), NULL,
                 "result_queue_name: must be a non-empty string");
}

Test(validate, parameters_default_to_empty_object) {
  json_t *doc = doc_with("parameters", NULL);
  mqproc__msg_t *m = assert_valid(doc, NULL);
  cr_assert_not_null(m->parameters);
  cr_assert(json_is_object(m->parameters));
  cr_assert_eq(json_object_size(m->parameters), 0);
  cr_assert_eq(json_object_get(m->doc, "parameters"), m->parameters);
  mqproc__msg_free(m);
}

Test(validate, empty_page_id_is_absent) {
  mqproc__msg_t *m = assert_valid(doc_with("page_id", "\"\""), NULL);
  cr_assert_null(m->page_id);
  mqproc__msg_free(m);
}

Test(validate, nul_inside_strings) {
  assert_invalid(doc_with("path_to_mets", "\"/data/a\\u0000b\""), NULL,
                 "path_to_mets: must not contain NUL characters");
  assert_invalid(doc_with("input_file_grps", "[\"A\\u0000\"]"), NULL,
                 "input_file_grps: item 1 must be a non-empty string without NUL, got a string");
}

Test(validate, what_amqp_and_postgresql_cannot_carry_is_refused_at_decode) {
  char big[300], *json = NULL;
  mqproc__msg_t *m;
  memset(big, 'a', 255);
  big[255] = '\0';
  cr_assert(asprintf(&json, "\"%s\"", big) > 0);
  m = assert_valid(doc_with("job_id", json), NULL); /* 255 bytes: the AMQP limit, still fine */
  mqproc__msg_free(m);
  free(json);
  big[255] = 'a';
  big[256] = '\0';
  cr_assert(asprintf(&json, "\"%s\"", big) > 0);
  assert_invalid(doc_with("job_id", json), NULL,
                 "job_id: must be at most 255 bytes (it is the AMQP message_id of the result), "
                 "got 256");
  assert_invalid(doc_with("result_queue_name", json), NULL,
                 "result_queue_name: must be at most 255 bytes (an AMQP queue name), got 256");
  free(json);
  assert_invalid(doc_with("created_time", "1718000000000000"), NULL,
                 "created_time: must be Unix time in seconds, at most 253402300799 (9999-12-31), "
                 "got 1718000000000000 (milliseconds or microseconds?)");
  m = assert_valid(doc_with("created_time", "253402300799"), NULL);
  mqproc__msg_free(m);
  assert_invalid(doc_with("time_limit", "9223372036854775807"), NULL,
                 "time_limit: must be at most 31536000 seconds, got 9223372036854775807");
  assert_invalid(doc_with("parameters", "{\"a\": {\"b\": [\"x\", \"y\\u0000z\"]}}"), NULL,
                 "parameters.a.b[1]: must not contain NUL characters");
}

Test(validate, file_group_lists_are_bounded) {
  json_t *many = json_array(), *doc;
  for (int i = 0; i < 257; i++)
    json_array_append_new(many, json_string("G"));
  doc = valid_doc();
  json_object_set_new(doc, "input_file_grps", many);
  assert_invalid(doc, NULL, "input_file_grps: at most 256 file groups, got 257");
  many = json_array();
  for (int i = 0; i < 100; i++) {
    char name[1000];
    memset(name, 'g', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    json_array_append_new(many, json_string(name));
  }
  doc = valid_doc();
  json_object_set_new(doc, "output_file_grps", many);
  assert_invalid(doc, NULL,
                 "output_file_grps: the file group names take 100000 bytes, at most 65536 are "
                 "allowed");
}

Test(validate, document_must_be_a_mapping) {
  char err[MQPROC_ERR_LEN] = "";
  mqproc__msg_t *m = NULL;
  cr_assert_eq(mqproc__msg_validate(jload("[1]"), MQPROC__FMT_YAML, NULL, &m, err),
               MQPROC_ECODEC_INVALID);
  cr_assert_str_eq(err, "message must be a mapping, got a sequence");
  cr_assert_eq(mqproc__msg_validate(jload("\"x\""), MQPROC__FMT_YAML, NULL, &m, err),
               MQPROC_ECODEC_INVALID);
  cr_assert_str_eq(err, "message must be a mapping, got a string");
  cr_assert_eq(mqproc__msg_validate(NULL, MQPROC__FMT_YAML, NULL, &m, err), MQPROC_EINVAL);
  cr_assert_null(m);
}

Test(validate, doc_job_id_is_best_effort) {
  json_t *doc = doc_with("created_time", "\"bad\"");
  json_t *other = jload("[\"job_id\"]");
  json_t *num = jload("{\"job_id\": 7}");
  json_t *empty = jload("{\"job_id\": \"\"}");
  cr_assert_str_eq(mqproc__doc_job_id(doc), "0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a");
  cr_assert_null(mqproc__doc_job_id(other));
  cr_assert_null(mqproc__doc_job_id(num));
  cr_assert_null(mqproc__doc_job_id(empty));
  cr_assert_null(mqproc__doc_job_id(NULL));
  json_decref(doc);
  json_decref(other);
  json_decref(num);
  json_decref(empty);
}

/* ---------------------------------------------------------------------------------------
 * Result messages
 * ------------------------------------------------------------------------------------- */

Test(result, yaml_success_with_path) {
  mqproc__msg_t *m = assert_valid(valid_doc(), NULL);
  char *out = NULL;
  size_t len = 0;
  cr_assert_eq(mqproc__result_encode(m, "SUCCESS", MQPROC__FMT_YAML, &out, &len), MQPROC_OK);
  cr_assert_str_eq(out, "job_id: 0b3f6a0e-5d7c-4c3e-9a51-2f1c8e7d6b4a\n"
                        "path_to_mets: /data/ws1/mets.xml\nstate: SUCCESS\nworkspace_id: ''\n");
  cr_assert_eq(len, strlen(out));
  free(out);
  mqproc__msg_free(m);
}

Test(result, yaml_failed_with_unicode_workspace) {
  mqproc__msg_t *m = assert_valid(parse_data("ocrd_message_full.yaml", MQPROC__FMT_YAML), NULL);
  char *out = NULL;
  cr_assert_eq(mqproc__result_encode(m, "FAILED", MQPROC__FMT_YAML, &out, NULL), MQPROC_OK);
  cr_assert_str_eq(out, "job_id: 5c2a9e4f-1b7d-4f3a-8e6c-9d0b1a2c3e4f\npath_to_mets: ''\n"
                        "state: FAILED\nworkspace_id: \"M\\xFCller-Nachlass\"\n");
  free(out);
  mqproc__msg_free(m);
}

Test(result, json_encoding) {
  mqproc__msg_t *m = assert_valid(parse_data("ocrd_message_full.yaml", MQPROC__FMT_YAML), NULL);
  char *out = NULL;
  size_t len = 0;
  cr_assert_eq(mqproc__result_encode(m, "SUCCESS", MQPROC__FMT_JSON, &out, &len), MQPROC_OK);
  cr_assert_str_eq(out,
                   "{\"job_id\":\"5c2a9e4f-1b7d-4f3a-8e6c-9d0b1a2c3e4f\",\"path_to_mets\":\"\","
                   "\"state\":\"SUCCESS\",\"workspace_id\":\"M\\u00FCller-Nachlass\"}");
  cr_assert_eq(len, strlen(out));
  free(out);
  mqproc__msg_free(m);
}

Test(result, bad_state_or_arguments) {
  mqproc__msg_t *m = assert_valid(valid_doc(), NULL);
  char *out = (char *)(uintptr_t)1;
  cr_assert_eq(mqproc__result_encode(m, "DONE", MQPROC__FMT_YAML, &out, NULL), MQPROC_EINVAL);
  cr_assert_null(out);
  cr_assert_eq(mqproc__result_encode(m, NULL, MQPROC__FMT_YAML, &out, NULL), MQPROC_EINVAL);
  cr_assert_eq(mqproc__result_encode(NULL, "SUCCESS", MQPROC__FMT_YAML, &out, NULL), MQPROC_EINVAL);
  mqproc__msg_free(m);
}

/* ---------------------------------------------------------------------------------------
 * Robustness: mutated and random bodies never crash, and whatever loads round-trips
 * ------------------------------------------------------------------------------------- */

static uint32_t rng_next(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

/* One random edit of buf (len bytes, capacity cap): insert a token, delete or copy a slice. */
static size_t mutate(char *buf, size_t len, size_t cap, uint32_t *rng) {
  static const char *const toks[] = {
      "-",      ":",    " ",        "\n",      "[",
      "]",      "{",    "}",        ",",       "\"",
      "'",      "#",    "&a ",      "*a",      "!",
      "!!int ", "|",    ">",        "---",     "...",
      "\t",     "?",    "0x",       "1e3",     "\\",
      "\0",     "\xff", "\xc3\xbc", "<<",      "9999999999999999999999",
      ".inf",   "yes",  "~",        "\"\\0\"", "!!python/none ",
      "\r"};
  size_t pos = len == 0 ? 0 : rng_next(rng) % (len + 1);
  uint32_t op = rng_next(rng) % 3;
  if (op == 0) {
    const char *t = toks[rng_next(rng) % MQPROC__ARRAY_LEN(toks)];
    size_t tl = t[0] == '\0' ? 1 : strlen(t);
    if (len + tl > cap)
      return len;
    memmove(buf + pos + tl, buf + pos, len - pos);
    memcpy(buf + pos, t, tl);
    return len + tl;
  }
  if (op == 1) {
    size_t n = rng_next(rng) % 6;
    n = n > len - pos ? len - pos : n;
    memmove(buf + pos, buf + pos + n, len - pos - n);
    return len - n;
  }
  {
    size_t from = len == 0 ? 0 : rng_next(rng) % len;
    size_t n = rng_next(rng) % 12;
    n = n > len - from ? len - from : n;
    if (len + n > cap)
      return len;
    memmove(buf + pos + n, buf + pos, len - pos);
    memmove(buf + pos, buf + (from >= pos ? from + n : from), n);
    return len + n;
  }
}

/* Parses body; on success also validates it and checks the YAML round trip. */
static void check_body(const char *body, size_t len) {
  char err[MQPROC_ERR_LEN] = "";
  json_t *doc = NULL;
  mqproc__msg_t *m = NULL;
  int rc = mqproc__codec_parse(body, len, &doc, NULL, err);
  cr_assert(rc == MQPROC_OK || rc == MQPROC_ECODEC_SYNTAX, "rc %d for <%.*s>", rc, (int)len, body);
  if (rc != MQPROC_OK) {
    cr_assert_null(doc);
    cr_assert_neq(err[0], '\0');
    return;
  }
  assert_round_trip(doc, "mutated message");
  (void)mqproc__doc_job_id(doc);
  rc = mqproc__msg_validate(doc, MQPROC__FMT_YAML, "ocrd-dummy", &m, err);
  cr_assert(rc == MQPROC_OK || rc == MQPROC_ECODEC_INVALID, "validate rc %d", rc);
  mqproc__msg_free(m);
}

Test(robustness, mutated_messages) {
  static const char *const seeds[] = {"ocrd_message.yaml", "ocrd_message.json",
                                      "ocrd_message_full.yaml"};
  uint32_t rng = 12345;
  size_t s;
  for (s = 0; s < MQPROC__ARRAY_LEN(seeds); s++) {
    size_t seed_len;
    char *seed = read_data(seeds[s], &seed_len);
    char buf[4096];
    int iter;
    for (iter = 0; iter < 700; iter++) {
      size_t len = seed_len;
      int edits = 1 + (int)(rng_next(&rng) % 4);
      memcpy(buf, seed, seed_len);
      while (edits-- > 0)
        len = mutate(buf, len, sizeof(buf), &rng);
      check_body(buf, len);
    }
    free(seed);
  }
}

Test(robustness, random_bytes) {
  static const char alphabet[] = "{}[]:,-?#&*!|>'\"%@` \t\n\r\\0aZ9.~=<\xc3\xbc\xff";
  uint32_t rng = 777;
  char buf[64];
  int iter;
  for (iter = 0; iter < 3000; iter++) {
    size_t len = rng_next(&rng) % sizeof(buf);
    size_t i;
    for (i = 0; i < len; i++)
      buf[i] = alphabet[rng_next(&rng) % (sizeof(alphabet) - 1)];
    check_body(buf, len);
  }
}
