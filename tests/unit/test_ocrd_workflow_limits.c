/* Unit: the bounds of a workflow script (ops/ocrd_workflow.c) at their edge, on an SQLite
 * job store in a temporary file: 256 tasks are stored and read back; a 257th line is
 * refused with "too many tasks" (it used to free one task past the array's end: ASan's
 * heap-buffer-overflow), and so is a line that does not parse, right below the bound. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "ops/ocrd.h"
#include "store/odb.h"
#include "store/store.h"

#define TASKS_MAX 256 /* ocrd_workflow.c's */

static mqproc__odb_t *db;
static char dir[] = "/tmp/mqproc-wf-limits-XXXXXX";

/* A fresh job store: sqlite:///<tmp>/jobs.db, migrated. */
static void open_store(void) {
  char url[160], err[MQPROC_ERR_LEN];
  mqproc__store_t *s = NULL;
  cr_assert_not_null(mkdtemp(dir));
  snprintf(url, sizeof(url), "sqlite://%s/jobs.db", dir);
  cr_assert_eq(mqproc__store_new(&s, url, NULL, 0, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_migrate(s, err), MQPROC_OK, "%s", err);
  mqproc__store_destroy(s);
  cr_assert_not_null(db = mqproc__odb_open(url, 5000, err), "%s", err);
}

static void close_store(void) {
  char path[160];
  mqproc__odb_close(db);
  for (const char *const *f = (const char *const[]){"jobs.db", "jobs.db-wal", "jobs.db-shm",
                                                    "jobs.db-journal", "notice", NULL};
       *f != NULL; f++) {
    snprintf(path, sizeof(path), "%s/%s", dir, *f);
    unlink(path);
  }
  rmdir(dir);
}

TestSuite(ocrd_workflow_limits, .init = open_store, .fini = close_store);

/* n task lines ("ocrd-dummy -I IN -O OUT<i>"), then last (NULL: none); malloc()ed. */
static char *script(int n, const char *last) {
  size_t cap = (size_t)n * 40 + (last != NULL ? strlen(last) : 0) + 2, at = 0;
  char *s = malloc(cap);
  cr_assert_not_null(s);
  for (int i = 0; i < n; i++)
    at += (size_t)snprintf(s + at, cap - at, "ocrd-dummy -I IN -O OUT%d\n", i);
  snprintf(s + at, cap - at, "%s", last != NULL ? last : "");
  return s;
}

/* Stores text as a new workflow: the answer (status, detail, body). */
static mqproc__ocrd_answer_t store(const char *text) {
  mqproc__ocrd_env_t e = {.db = db, .actor = "test"};
  mqproc__ocrd_answer_t a = {0};
  mqproc__ocrd_wf_store(&e, NULL, text, strlen(text), &a);
  return a;
}

Test(ocrd_workflow_limits, the_most_tasks_are_stored_and_read_back) {
  char *text = script(TASKS_MAX, NULL);
  mqproc__ocrd_answer_t a = store(text), got = {0};
  mqproc__ocrd_env_t e = {.db = db};
  const char *id;
  cr_assert_eq(a.status, 201, "%d: %s", a.status, a.detail);
  cr_assert_not_null(id = json_string_value(json_object_get(a.body, "workflow_id")));
  mqproc__ocrd_wf_get(&e, id, &got);
  cr_assert_eq(got.status, 200, "%d: %s", got.status, got.detail);
  cr_assert_eq(got.text_len, strlen(text));
  cr_expect_eq(memcmp(got.text, text, got.text_len), 0);
  mqproc__ocrd_answer_free(&got);
  mqproc__ocrd_answer_free(&a);
  free(text);
}

Test(ocrd_workflow_limits, one_task_more_is_refused) {
  /* a 257th task, a 257th line that does not parse, and far more */
  const char *lasts[] = {"ocrd-dummy -I IN -O LAST\n", "ocrd-dummy -I 'unclosed\n", NULL};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(lasts); i++) {
    char *text = i < 2 ? script(TASKS_MAX, lasts[i]) : script(4 * TASKS_MAX, NULL);
    mqproc__ocrd_answer_t a = store(text);
    cr_expect_eq(a.status, 422, "case %zu: %d: %s", i, a.status, a.detail);
    cr_expect(strstr(a.detail, "too many tasks") != NULL, "case %zu: %s", i, a.detail);
    mqproc__ocrd_answer_free(&a);
    free(text);
  }
}

Test(ocrd_workflow_limits, a_bad_line_below_the_bound_is_refused_with_its_reason) {
  char *text = script(TASKS_MAX - 1, "ocrd-dummy -I 'unclosed\n");
  mqproc__ocrd_answer_t a = store(text);
  cr_expect_eq(a.status, 422, "%d: %s", a.status, a.detail);
  cr_expect(strstr(a.detail, "unclosed") != NULL || strstr(a.detail, "quote") != NULL, "%s",
            a.detail);
  cr_expect(strstr(a.detail, "too many tasks") == NULL, "%s", a.detail);
  mqproc__ocrd_answer_free(&a);
  free(text);
}
