/* Unit: OCR-D's processor argv (runner/ocrd_argv.c) for every combination of its optional
 * parts (page id, output groups, parameters, METS server, log level, METS path, base
 * words), compared word by word with the order ocrd_argv.h documents. Issue 37: a page
 * id, output groups and a METS server together wrote the NULL past the array's end
 * (ASan: heap-buffer-overflow), so every combination is built here, under ASan in CI. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/argv.h"
#include "base/util.h"
#include "codec/codec.h"
#include "runner/ocrd_argv.h"

#define LONG_BASE 200 /* words of the longest --exec */
#define WANT_MAX 256  /* the words one expected argv can have here */

typedef struct {
  const char *w[WANT_MAX];
  size_t n;
} want_t;

static void want(want_t *v, const char *s) {
  cr_assert_lt(v->n, WANT_MAX, "the test's expected argv is too small");
  v->w[v->n++] = s;
}

/* A validated message with these parts (NULL: the key is left out). */
static mqproc__msg_t *msg_of(const char *mets, const char *page_id, const char *const *ins,
                             const char *const *outs, const char *params) {
  char err[MQPROC_ERR_LEN];
  json_t *doc = json_pack("{s:s, s:s, s:i, s:s}", "job_id", "j", "processor_name", "ocrd-x",
                          "created_time", 1, "path_to_mets", mets);
  json_t *arr;
  mqproc__msg_t *m = NULL;
  cr_assert_not_null(doc);
  if (page_id != NULL)
    json_object_set_new(doc, "page_id", json_string(page_id));
  for (int k = 0; k < 2; k++) {
    const char *const *grps = k == 0 ? ins : outs;
    if (grps == NULL)
      continue;
    arr = json_array();
    for (size_t i = 0; grps[i] != NULL; i++)
      json_array_append_new(arr, json_string(grps[i]));
    json_object_set_new(doc, k == 0 ? "input_file_grps" : "output_file_grps", arr);
  }
  if (params != NULL) {
    json_error_t je;
    json_t *p = json_loads(params, JSON_DECODE_ANY, &je);
    cr_assert_not_null(p, "%s: %s", params, je.text);
    json_object_set_new(doc, "parameters", p);
  }
  cr_assert_eq(mqproc__msg_validate(doc, MQPROC__FMT_JSON, NULL, &m, err), MQPROC_OK, "%s", err);
  return m;
}

/* got is want, word by word, NULL-terminated right after the last. */
static void expect_exact(char **got, const want_t *w, const char *what) {
  size_t n = 0;
  cr_assert_not_null(got, "%s: no argv", what);
  while (got[n] != NULL && n <= w->n)
    n++;
  cr_assert_eq(n, w->n, "%s: %zu words, want %zu", what, n, w->n);
  for (size_t i = 0; i < w->n; i++)
    cr_assert_str_eq(got[i], w->w[i], "%s: word %zu", what, i);
  cr_assert_null(got[w->n], "%s: not NULL-terminated", what);
}

/* The base words: one program, a program with an option, and a long --exec. */
static char long_words[LONG_BASE][16];
static char *bases[3][LONG_BASE + 1] = {
    {"ocrd-dummy", NULL},
    {"/opt/venv/bin/ocrd-x", "--fast", NULL},
};

static void make_long_base(void) {
  for (int i = 0; i < LONG_BASE; i++) {
    snprintf(long_words[i], sizeof(long_words[i]), i == 0 ? "ocrd-wrap" : "--w%03d", i);
    bases[2][i] = long_words[i];
  }
  bases[2][LONG_BASE] = NULL;
}

static const struct {
  const char *mets, *dir;
} metses[] = {{"/data/ws1/mets.xml", "/data/ws1"}, {"mets.xml", "."}, {"/mets.xml", "/"}};

/* "" is an absent page id (OCR-D core leaves it out) */
static const struct {
  const char *given, *passed;
} pages[] = {{NULL, NULL}, {"", NULL}, {"PHYS_0001..PHYS_0003", "PHYS_0001..PHYS_0003"}};

static const char *const in_one[] = {"OCR-D-IMG", NULL};
static const char *const in_two[] = {"OCR-D-IMG", "OCR-D-SEG", NULL};
static const char *const out_one[] = {"OCR-D-OUT", NULL};
static const char *const out_three[] = {"OUT-A", "OUT-B", "OUT-C", NULL};
static const struct {
  const char *const *grps;
  const char *joined;
} inputs[] = {{in_one, "OCR-D-IMG"}, {in_two, "OCR-D-IMG,OCR-D-SEG"}},
  outputs[] = {{NULL, NULL}, {out_one, "OCR-D-OUT"}, {out_three, "OUT-A,OUT-B,OUT-C"}};

/* parameters as the message has them, and as Python's json.dumps() passes them */
static const struct {
  const char *given, *passed;
} params[] = {
    {NULL, "{}"},
    {"{}", "{}"},
    {"{\"copy_files\": true, \"level\": \"line\"}", "{\"copy_files\": true, \"level\": \"line\"}"},
    {"{\"name\": \"F\xc3\xbcr \xe6\x97\xa5\xe6\x9c\xac\", \"x\": 0.1, \"y\": [3.0, 1e-07, 2.5e+20],"
     " \"n\": {\"k\": null, \"i\": -7}}",
     "{\"name\": \"F\\u00fcr \\u65e5\\u672c\", \"x\": 0.1, \"y\": [3.0, 1e-07, 2.5e+20],"
     " \"n\": {\"k\": null, \"i\": -7}}"},
};

static const char *const mets_servers[] = {NULL, "/tmp/ocrd_network_sockets/_data_ws1.sock",
                                           "http://ps.example:8000/tcp_mets"};
static const char *const levels[] = {"DEBUG", "INFO", "ERROR"};

/* What ocrd_argv.h says the argv is, built from the parts alone. */
static void expected(want_t *w, char *const *base, size_t mi, size_t pi, size_t ii, size_t oi,
                     size_t qi, size_t si, size_t li) {
  w->n = 0;
  for (size_t i = 0; base[i] != NULL; i++)
    want(w, base[i]);
  want(w, "--working-dir");
  want(w, metses[mi].dir);
  want(w, "--mets");
  want(w, metses[mi].mets);
  want(w, "--log-level");
  want(w, levels[li]);
  if (pages[pi].passed != NULL) {
    want(w, "--page-id");
    want(w, pages[pi].passed);
  }
  want(w, "--input-file-grp");
  want(w, inputs[ii].joined);
  if (outputs[oi].joined != NULL) {
    want(w, "--output-file-grp");
    want(w, outputs[oi].joined);
  }
  want(w, "--parameter");
  want(w, params[qi].passed);
  if (mets_servers[si] != NULL) {
    want(w, "--mets-server-url");
    want(w, mets_servers[si]);
  }
}

#define N(a) MQPROC__ARRAY_LEN(a)

Test(ocrd_argv, every_combination_of_the_optional_parts_is_exact) {
  size_t built = 0;
  make_long_base();
  for (size_t mi = 0; mi < N(metses); mi++)
    for (size_t pi = 0; pi < N(pages); pi++)
      for (size_t ii = 0; ii < N(inputs); ii++)
        for (size_t oi = 0; oi < N(outputs); oi++)
          for (size_t qi = 0; qi < N(params); qi++) {
            mqproc__msg_t *m = msg_of(metses[mi].mets, pages[pi].given, inputs[ii].grps,
                                      outputs[oi].grps, params[qi].given);
            for (size_t bi = 0; bi < N(bases); bi++)
              for (size_t si = 0; si < N(mets_servers); si++)
                for (size_t li = 0; li < N(levels); li++) {
                  char **argv = NULL, err[MQPROC_ERR_LEN] = "", what[160];
                  want_t w;
                  snprintf(what, sizeof(what),
                           "mets %zu, page %zu, in %zu, out %zu, params %zu, base %zu, mets "
                           "server %zu, level %zu",
                           mi, pi, ii, oi, qi, bi, si, li);
                  expected(&w, bases[bi], mi, pi, ii, oi, qi, si, li);
                  cr_assert_eq(mqproc__ocrd_argv(bases[bi], m, metses[mi].mets, levels[li],
                                                 mets_servers[si], &argv, err),
                               MQPROC_OK, "%s: %s", what, err);
                  expect_exact(argv, &w, what);
                  mqproc__argv_free(argv);
                  built++;
                }
            mqproc__msg_free(m);
          }
  cr_expect_eq(built, N(metses) * N(pages) * N(inputs) * N(outputs) * N(params) * N(bases) *
                          N(mets_servers) * N(levels));
}

/* The case of issue 37 alone, the most words OCR-D's part can have: 16 after the base. */
Test(ocrd_argv, page_id_output_groups_and_mets_server_together) {
  mqproc__msg_t *m =
      msg_of("/data/ws1/mets.xml", "PHYS_0001", in_one, out_one, "{\"level\": \"line\"}");
  char *base[] = {"ocrd-dummy", NULL}, **argv = NULL, err[MQPROC_ERR_LEN];
  want_t w = {.n = 0};
  const char *const words[] = {"ocrd-dummy",
                               "--working-dir",
                               "/data/ws1",
                               "--mets",
                               "/data/ws1/mets.xml",
                               "--log-level",
                               "DEBUG",
                               "--page-id",
                               "PHYS_0001",
                               "--input-file-grp",
                               "OCR-D-IMG",
                               "--output-file-grp",
                               "OCR-D-OUT",
                               "--parameter",
                               "{\"level\": \"line\"}",
                               "--mets-server-url",
                               "/s/_data_ws1.sock"};
  for (size_t i = 0; i < N(words); i++)
    want(&w, words[i]);
  cr_assert_eq(
      mqproc__ocrd_argv(base, m, "/data/ws1/mets.xml", "DEBUG", "/s/_data_ws1.sock", &argv, err),
      MQPROC_OK, "%s", err);
  expect_exact(argv, &w, "issue 37");
  cr_expect_eq(w.n, 1 + 16);
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}
