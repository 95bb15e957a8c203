/* Unit tests for the operators' notices of an SQLite store (store/sqlite/notice.c), on a
 * real file and a real loop: a watching server hears each line appended after it started
 * watching (not the older ones), in order, also after the sender started the file again;
 * a payload that is no single line is refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loop/loop.h"
#include "store/sqlite/notice.h"
#include "base/util.h"

typedef struct {
  mqproc__loop_t *loop;
  char heard[8][64];
  int n, want;
} ear_t;

static void on_notice(void *ud, const char *payload) {
  ear_t *e = ud;
  if (e->n < 8)
    snprintf(e->heard[e->n], sizeof(e->heard[0]), "%s", payload);
  if (++e->n >= e->want)
    mqproc__loop_stop(e->loop);
}

static void on_deadline(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mqproc__loop_stop(loop); /* the test then sees what was heard so far: too few */
}

/* Runs the loop until want notices were heard (or 10 s passed: a failure). */
static void hear(ear_t *e, int want) {
  uint64_t t = mqproc__loop_timer(e->loop, 10000, on_deadline, NULL);
  e->want = want;
  if (e->n < want)
    mqproc__loop_run(e->loop);
  mqproc__loop_timer_cancel(e->loop, t);
}

static long it_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static char *db_path(void) {
  static char dir[] = "/tmp/mqproc-notice-XXXXXX";
  static char path[128];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/jobs.db", dir);
  return path;
}

Test(sqlite_notice, a_server_hears_each_line_appended_after_it_started_in_order) {
  char err[MQPROC_ERR_LEN], *db = db_path();
  ear_t e = {0};
  mqproc__sq_notice_t *n;
  cr_assert_eq(mqproc__sq_notice_send(db, "before-the-server"), 0);
  cr_assert_eq(mqproc__loop_new(&e.loop, err), MQPROC_OK, "%s", err);
  cr_assert_not_null(n = mqproc__sq_notice_watch(db, e.loop, on_notice, &e));
  cr_assert_eq(mqproc__sq_notice_send(db, "ocrd-a"), 0);
  cr_assert_eq(mqproc__sq_notice_send(db, "ocrd-b"), 0);
  hear(&e, 2);
  cr_assert_eq(e.n, 2);
  cr_expect_str_eq(e.heard[0], "ocrd-a", "the old line is not heard again");
  cr_expect_str_eq(e.heard[1], "ocrd-b");
  mqproc__sq_notice_free(n);
  mqproc__loop_free(e.loop);
}

Test(sqlite_notice, a_file_started_again_by_the_sender_is_read_from_its_start) {
  char err[MQPROC_ERR_LEN], *db = db_path(), big[400], file[160];
  ear_t e = {0};
  mqproc__sq_notice_t *n;
  FILE *f;
  cr_assert_eq(mqproc__loop_new(&e.loop, err), MQPROC_OK, "%s", err);
  cr_assert_not_null(n = mqproc__sq_notice_watch(db, e.loop, on_notice, &e));
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  snprintf(file, sizeof(file), "%s-control", db);
  cr_assert_not_null(f = fopen(file, "a")); /* past the 64 KiB the sender starts again at */
  for (int i = 0; i < 200; i++)
    fprintf(f, "%s\n", big);
  fclose(f);
  hear(&e, 200);
  e.n = 0;
  cr_assert_eq(mqproc__sq_notice_send(db, "ocrd-after"), 0);
  cr_expect_eq(it_size(file), (long)strlen("ocrd-after\n"), "the sender started it again");
  hear(&e, 1);
  cr_assert_eq(e.n, 1);
  cr_expect_str_eq(e.heard[0], "ocrd-after");
  mqproc__sq_notice_free(n);
  mqproc__loop_free(e.loop);
}

static void on_flood(void *ud, const char *payload) {
  ear_t *e = ud;
  e->n++;
  if (!strcmp(payload, "ocrd-last")) {
    e->want = 1; /* heard */
    mqproc__loop_stop(e->loop);
  }
}

/* Issue 38, F17: megabytes appended at once (no sender writes that) are not all read in
 * one wake: the last part is, so the newest line is still heard. */
Test(sqlite_notice, a_flood_appended_at_once_is_read_only_in_its_last_part) {
  char err[MQPROC_ERR_LEN], *db = db_path(), big[400], file[160];
  ear_t e = {0};
  mqproc__sq_notice_t *n;
  uint64_t t;
  FILE *f;
  cr_assert_eq(mqproc__loop_new(&e.loop, err), MQPROC_OK, "%s", err);
  cr_assert_not_null(n = mqproc__sq_notice_watch(db, e.loop, on_flood, &e));
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  snprintf(file, sizeof(file), "%s-control", db);
  cr_assert_not_null(f = fopen(file, "a"));
  for (int i = 0; i < 20000; i++) /* 8 MB */
    fprintf(f, "%s\n", big);
  fprintf(f, "ocrd-last\n");
  fclose(f);
  t = mqproc__loop_timer(e.loop, 10000, on_deadline, NULL);
  mqproc__loop_run(e.loop);
  mqproc__loop_timer_cancel(e.loop, t);
  cr_expect_eq(e.want, 1, "the newest line was not heard");
  cr_expect_leq(e.n, 4 * 65536 / 400 + 1, "%d lines read in one wake", e.n);
  mqproc__sq_notice_free(n);
  mqproc__loop_free(e.loop);
}

Test(sqlite_notice, a_payload_that_is_not_one_line_is_refused) {
  char *db = db_path();
  errno = 0;
  cr_expect_eq(mqproc__sq_notice_send(db, "two\nlines"), -1);
  cr_expect_eq(errno, EINVAL);
  cr_expect_eq(mqproc__sq_notice_send(db, ""), -1);
}
