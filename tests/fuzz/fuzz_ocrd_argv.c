/* Fuzz target: OCR-D's processor argv (runner/ocrd_argv.c), built from a message and the
 * --exec words. Input: a flags byte, then lines:
 *   METS path, page id, input groups (A,B), output groups, parameters (a JSON object; any
 *   other text becomes {"value": text}), METS server URL, then one base word per line.
 * Flags: bit 0 page id, 1 output groups, 2 parameters, 3 METS server (else the line is
 * left out); bits 4-5 the log level; bits 6-7 the base words repeated 1, 8, 64 or 200
 * times. Inputs the codec refuses end there (fuzz_message covers them).
 * Properties: the argv is the base words, then exactly the options ocrd_argv.h lists in its
 * order (each optional one present just when its part is), then NULL; --parameter is
 * json.dumps()'s text, ASCII only, which parses back equal to the parameters. */
#include <string.h>

#include "base/argv.h"
#include "codec/codec.h"
#include "codec/pyjson.h"
#include "fuzz.h"
#include "mqproc/mqproc.h"
#include "runner/ocrd_argv.h"

#define LINES 6       /* the message's lines before the base words */
#define BASE_MAX 4096 /* base words at most, repeats included */

/* The C string of n bytes at s (not NUL-terminated: the input's end may follow), cut at a
 * NUL: an option's value is a C string. malloc()ed. */
static char *cstr(const char *s, size_t n) {
  const char *nul = memchr(s, '\0', n);
  size_t len = nul != NULL ? (size_t)(nul - s) : n;
  char *out = malloc(len + 1);
  if (out == NULL)
    abort();
  memcpy(out, s, len);
  out[len] = '\0';
  return out;
}

/* A JSON string of line (NULL when it is not UTF-8). */
static json_t *str(const char *line, size_t len) {
  return json_stringn(line, len);
}

/* An array of the comma-separated names of line; NULL when one is not UTF-8. */
static json_t *groups(const char *line, size_t len) {
  json_t *arr = json_array();
  for (size_t at = 0; arr != NULL;) {
    const char *comma = memchr(line + at, ',', len - at);
    size_t n = comma != NULL ? (size_t)(comma - line - at) : len - at;
    json_t *g = str(line + at, n);
    if (g == NULL || json_array_append_new(arr, g) != 0) {
      json_decref(arr);
      return NULL;
    }
    if (comma == NULL)
      break;
    at += n + 1;
  }
  return arr;
}

/* The message's document from the lines; NULL when a line is not UTF-8. */
static json_t *document(const char **line, const size_t *len, unsigned flags) {
  json_t *doc = json_pack("{s:s, s:s, s:i}", "job_id", "j", "processor_name", "ocrd-x",
                          "created_time", 1),
         *p = NULL;
  int bad = doc == NULL;
  bad = bad || json_object_set_new(doc, "path_to_mets", str(line[0], len[0])) != 0;
  if (!bad && (flags & 1))
    bad = json_object_set_new(doc, "page_id", str(line[1], len[1])) != 0;
  bad = bad || json_object_set_new(doc, "input_file_grps", groups(line[2], len[2])) != 0;
  if (!bad && (flags & 2))
    bad = json_object_set_new(doc, "output_file_grps", groups(line[3], len[3])) != 0;
  if (!bad && (flags & 4)) {
    p = json_loadb(line[4], len[4], JSON_DECODE_ANY, NULL);
    if (!json_is_object(p)) {
      json_decref(p);
      p = json_pack("{s:o?}", "value", str(line[4], len[4]));
    }
    bad = json_object_set_new(doc, "parameters", p) != 0;
  }
  if (bad) {
    json_decref(doc);
    return NULL;
  }
  return doc;
}

/* "A,B": the groups joined as OCR-D's worker joins them. */
static char *joined(const json_t *arr) {
  size_t len = 1;
  char *out;
  for (size_t i = 0; i < json_array_size(arr); i++)
    len += json_string_length(json_array_get(arr, i)) + 1;
  if ((out = calloc(1, len)) == NULL)
    abort();
  for (size_t i = 0; i < json_array_size(arr); i++) {
    if (i > 0)
      strcat(out, ",");
    strcat(out, json_string_value(json_array_get(arr, i)));
  }
  return out;
}

/* argv[*at] is flag and argv[*at + 1] is value; moves past them. */
static void expect_opt(char **argv, size_t *at, const char *flag, const char *value) {
  FUZZ_CHECK(argv[*at] != NULL && strcmp(argv[*at], flag) == 0, "word %zu: '%s', want %s", *at,
             argv[*at] != NULL ? argv[*at] : "(NULL)", flag);
  FUZZ_CHECK(argv[*at + 1] != NULL && strcmp(argv[*at + 1], value) == 0, "%s: '%s', want '%s'",
             flag, argv[*at + 1] != NULL ? argv[*at + 1] : "(NULL)", value);
  *at += 2;
}

static void check(char *const *base, size_t nb, const mqproc__msg_t *m, const char *level,
                  const char *server, char **argv) {
  const char *mets = m->path_to_mets, *slash = strrchr(mets, '/');
  char *dir = slash == NULL   ? strdup(".")
              : slash == mets ? strdup("/")
                              : strndup(mets, (size_t)(slash - mets));
  char *grps, *params = mqproc__json_python(m->parameters);
  json_t *back;
  size_t at = 0;
  if (dir == NULL || params == NULL)
    abort();
  for (; at < nb; at++)
    FUZZ_CHECK(argv[at] != NULL && strcmp(argv[at], base[at]) == 0, "base word %zu", at);
  expect_opt(argv, &at, "--working-dir", dir);
  expect_opt(argv, &at, "--mets", mets);
  expect_opt(argv, &at, "--log-level", level);
  if (m->page_id != NULL)
    expect_opt(argv, &at, "--page-id", m->page_id);
  expect_opt(argv, &at, "--input-file-grp", grps = joined(m->input_file_grps));
  free(grps);
  if (m->output_file_grps != NULL) {
    expect_opt(argv, &at, "--output-file-grp", grps = joined(m->output_file_grps));
    free(grps);
  }
  expect_opt(argv, &at, "--parameter", params);
  if (server != NULL)
    expect_opt(argv, &at, "--mets-server-url", server);
  FUZZ_CHECK(argv[at] == NULL, "%zu words, then '%s'", at, argv[at]);
  /* json.dumps() with ensure_ascii: ASCII, and the same value again */
  for (const char *c = params; *c != '\0'; c++)
    FUZZ_CHECK((unsigned char)*c < 0x80, "--parameter is not ASCII: %s", params);
  back = json_loads(params, 0, NULL);
  FUZZ_CHECK(back != NULL && json_equal(back, m->parameters), "--parameter %s", params);
  json_decref(back);
  free(params);
  free(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const levels[] = {"DEBUG", "INFO", "WARN", "ERROR"};
  static const size_t repeats[] = {1, 8, 64, 200};
  const char *line[LINES + 1], *text;
  size_t len[LINES + 1], nlines = 0, nwords = 0, nb = 0, at = 0, repeat;
  char **words, **base, **argv = NULL, *server = NULL, err[MQPROC_ERR_LEN];
  unsigned flags;
  mqproc__msg_t *m = NULL;
  json_t *doc;
  if (size < 1 || size > 65536)
    return 0;
  flags = data[0];
  text = (const char *)data + 1;
  size--;
  /* the message's lines, then the base words (C strings: a NUL ends one) */
  if ((words = calloc(size + 2, sizeof(char *))) == NULL)
    abort();
  while (at <= size && (nlines < LINES || at < size)) {
    const char *nl = memchr(text + at, '\n', size - at);
    size_t n = nl != NULL ? (size_t)(nl - text - at) : size - at;
    if (nlines < LINES) {
      line[nlines] = text + at;
      len[nlines++] = n;
    } else {
      words[nwords++] = cstr(text + at, n);
    }
    at += n + 1;
  }
  if (nwords == 0 && (words[nwords++] = strdup("ocrd-x")) == NULL)
    abort();
  if (nlines < LINES || (doc = document(line, len, flags)) == NULL ||
      mqproc__msg_validate(doc, MQPROC__FMT_JSON, NULL, &m, err) != MQPROC_OK) {
    mqproc__argv_free(words);
    return 0;
  }
  if (flags & 8)
    server = cstr(line[5], len[5]);
  /* the base words, repeated (a long --exec; at most BASE_MAX words) */
  repeat = repeats[flags >> 6];
  if (nwords * repeat > BASE_MAX)
    repeat = nwords < BASE_MAX ? BASE_MAX / nwords : 1;
  if ((base = calloc(nwords * repeat + 1, sizeof(char *))) == NULL)
    abort();
  for (size_t r = 0; r < repeat; r++)
    for (size_t i = 0; i < nwords; i++)
      base[nb++] = words[i];
  FUZZ_CHECK(mqproc__ocrd_argv(base, m, m->path_to_mets, levels[(flags >> 4) & 3], server, &argv,
                               err) == MQPROC_OK,
             "%s", err);
  check(base, nb, m, levels[(flags >> 4) & 3], server, argv);
  mqproc__argv_free(argv);
  free(base);
  free(server);
  mqproc__argv_free(words);
  mqproc__msg_free(m);
  return 0;
}
