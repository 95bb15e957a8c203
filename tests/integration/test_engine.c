/* The PostgreSQL store's engine (store/pg/engine.c, issue 30 "an engine that never waits
 * on itself"), driven through the store API on a loop of the test's own, against the
 * test's schema on the real PostgreSQL:
 * - the requests of one loop turn go out as one round (one transaction), even when nothing
 *   was in flight: the first is not sent alone;
 * - a batched statement's requests are in key order (the claims' rows are inserted in job
 *   id order, whatever order they were asked in);
 * - with two rounds in flight a job's requests stay in order: a round that fails (rolled
 *   back, its requests run again alone) is not overtaken by a later request of its job;
 * - what queued while both rounds were in flight is sent before the finished round's
 *   requests are called back.
 * Rounds are held in flight by a row lock the test takes on a connection of its own, and
 * each step happens in a loop turn of its own (0 ms timers run in the turn after the one
 * that made them, after the turn's requests went out): no step depends on timing. What the
 * engine sent is read off its DEBUG lines ("round of N request(s) ... sent, K in flight").
 * PostgreSQL only: skipped on an SQLite pair. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "harness.h"
#include "loop/loop.h"
#include "store/store.h"

#define WAIT_MS 30000

TestSuite(engine, .fini = it_cleanup);

/* One request and its answer. */
typedef struct call {
  const char *tag; /* what the test calls it */
  mqproc__claim_t claim;
  int rc;
  int done;
} call_t;

static struct {
  mqproc__loop_t *loop;
  mqproc__store_t *store;
  int pending; /* requests not answered yet: the loop stops at 0 */
  int timed_out;
  char order[16][32]; /* the tags, in the order they were called back */
  int norder;
  PGconn *locker; /* holds a job's row locked: a round that writes it waits */
  int saved_stderr;
  char *log_path;
} fx;

static void on_done(void *ud, int rc, const char *err) {
  call_t *c = ud;
  (void)err;
  c->rc = rc;
  c->done = 1;
  if (fx.norder < 16)
    snprintf(fx.order[fx.norder++], sizeof(fx.order[0]), "%s", c->tag);
  MQPROC__INFO("test: %s called back", c->tag);
  if (--fx.pending == 0)
    mqproc__loop_stop(fx.loop);
}

static void on_deadline(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  fx.timed_out = 1;
  mqproc__loop_stop(loop);
}

/* Runs the loop until every request made so far was answered (WAIT_MS at most). */
static void run(void) {
  uint64_t deadline = mqproc__loop_timer(fx.loop, WAIT_MS, on_deadline, NULL);
  if (fx.pending > 0)
    mqproc__loop_run(fx.loop);
  mqproc__loop_timer_cancel(fx.loop, deadline);
  cr_assert_not(fx.timed_out, "%d request(s) not answered within %d ms", fx.pending, WAIT_MS);
}

static void setup(void) {
  char err[MQPROC_ERR_LEN];
  const char *url;
  if (it_store_is_sqlite())
    cr_skip_test("the PostgreSQL engine (MQPROC_TEST_STORE is sqlite)");
  url = it_db_url();
  memset(&fx, 0, sizeof(fx));
  fx.saved_stderr = -1;
  cr_assert_eq(mqproc__loop_new(&fx.loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_pg_new(&fx.store, url, fx.loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_open(fx.store, err), MQPROC_OK, "open: %s", err);
}

static void teardown(void) {
  if (fx.saved_stderr >= 0) {
    dup2(fx.saved_stderr, STDERR_FILENO);
    close(fx.saved_stderr);
  }
  if (fx.locker != NULL)
    PQfinish(fx.locker);
  mqproc__store_destroy(fx.store);
  if (fx.loop != NULL)
    mqproc__loop_free(fx.loop);
}

/* A claim of job (priority -1: none; out of smallint's range: the statement fails). */
static void claim(call_t *c, const char *job, int priority) {
  c->tag = job;
  c->claim = (mqproc__claim_t){.job_id = job,
                               .processor = "engine-test",
                               .worker_id = "engine-test-worker",
                               .request_json = "{}",
                               .request_format = "json",
                               .request_body = "{}",
                               .request_body_len = 2,
                               .priority = priority,
                               .created_time = -1,
                               .log_path = "/dev/null",
                               .lease_ms = 60000,
                               .max_attempts = 5};
  cr_assert_eq(mqproc__store_claim(fx.store, &c->claim, on_done, c), MQPROC_OK);
  fx.pending++;
}

/* mark_published(job, error): not fenced, so the last one run sets last_error. */
static void mark(call_t *c, const char *tag, const char *job, const char *error) {
  mqproc__store_mark_published_t a = {.job_id = job, .error = error};
  c->tag = tag;
  cr_assert_eq(mqproc__store_mark_published(fx.store, &a, on_done, c), MQPROC_OK);
  fx.pending++;
}

/* The test's own connection takes job's row lock in an open transaction. */
static void lock_row(const char *job) {
  const char *vals[1] = {job};
  PGresult *res;
  fx.locker = PQconnectdb(it_db_url());
  cr_assert_eq(PQstatus(fx.locker), CONNECTION_OK, "%s", PQerrorMessage(fx.locker));
  PQclear(PQexec(fx.locker, "BEGIN"));
  res = PQexecParams(fx.locker, "SELECT 1 FROM mqproc_jobs WHERE job_id = $1 FOR UPDATE", 1, NULL,
                     vals, NULL, NULL, 0);
  cr_assert_eq(PQntuples(res), 1, "no row for %s to lock", job);
  PQclear(res);
}

static void unlock_row(mqproc__loop_t *loop, void *ud) {
  (void)loop;
  (void)ud;
  PQclear(PQexec(fx.locker, "COMMIT"));
}

/* The engine's DEBUG lines from now on go to a file (read by sent_lines()). */
static void capture_log(void) {
  int fd;
  fx.log_path = it_fmt("%s/engine.log", it_tmpdir());
  fd = open(fx.log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  cr_assert_geq(fd, 0);
  fx.saved_stderr = dup(STDERR_FILENO);
  dup2(fd, STDERR_FILENO);
  close(fd);
  mqproc__log_set_level(MQPROC__LOG_DEBUG);
}

static void end_capture(void) {
  mqproc__log_set_level(MQPROC__LOG_WARN);
  dup2(fx.saved_stderr, STDERR_FILENO);
  close(fx.saved_stderr);
  fx.saved_stderr = -1;
}

/* The captured lines that contain needle, in order (at most max), as their line numbers;
 * returns how many. */
static int lines_with(const char *needle, int *at, int max) {
  char *text = it_read_file(fx.log_path), *line, *save = NULL;
  int n = 0, no = 0;
  cr_assert_not_null(text);
  for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save), no++)
    if (strstr(line, needle) != NULL && n < max)
      at[n++] = no;
  return n;
}

/* The first captured line that contains needle, -1 when none does. */
static int line_of(const char *needle) {
  int at[1];
  return lines_with(needle, at, 1) >= 1 ? at[0] : -1;
}

/* ---- one loop turn, one round ------------------------------------------------------- */

/* 30 claims asked in one turn, in descending job order, once the connection is up and
 * idle: one round (every row has the same xmin, one transaction), and the batch sorted
 * by job id (the rows were inserted in ascending order: ctid order). */
Test(engine, turn_is_one_round_sorted_by_key, .init = setup, .fini = teardown) {
  static call_t ping, calls[30];
  static char jobs[30][64];
  char *want = it_fmt("%s", ""), *got;
  mqproc__store_req_t req = {.op = MQPROC__STORE_PING, .done = on_done, .ud = &ping};
  ping.tag = "ping";
  cr_assert_eq(mqproc__store_submit(fx.store, &req), MQPROC_OK);
  fx.pending++;
  run(); /* connected, set up, idle */
  for (int i = 0; i < 30; i++)
    snprintf(jobs[i], sizeof(jobs[i]), "%s-%02d", it_name("job"), i);
  for (int i = 29; i >= 0; i--)
    claim(&calls[i], jobs[i], -1);
  cr_assert_eq(fx.norder, 1, "a request was called back inside the submit that made it");
  run();
  for (int i = 0; i < 30; i++) {
    cr_assert_eq(calls[i].rc, MQPROC_OK, "claim %s: %d", jobs[i], calls[i].rc);
    cr_assert(calls[i].claim.claimed, "%s not claimed", jobs[i]);
    want = it_fmt("%s%s%s", want, i > 0 ? "," : "", jobs[i]);
  }
  cr_assert_eq(it_sql_long("SELECT count(DISTINCT xmin::text) FROM mqproc_jobs", 0), 1,
               "the turn's claims went out in more than one round");
  got = it_sql("SELECT string_agg(job_id, ',' ORDER BY ctid) FROM mqproc_jobs", 0);
  cr_assert_str_eq(got, want, "the batch was not in job id order");
}

/* ---- two rounds in flight ----------------------------------------------------------- */

static call_t e1, bad, z, e2, w;
static char jx[64], jy[64], jz[64], jw[64];

/* Turn B of job_order_two_rounds: round 1 (e1 on X, the bad claim) waits for X's lock;
 * X's second mark must not go in the round sent now beside Z's. */
static void turn_b(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mark(&z, "z", jz, "z");
  mark(&e2, "e2", jx, "e2");
  mqproc__loop_timer(loop, 0, unlock_row, NULL); /* turn C, after this turn's round left */
}

/* Job X's marks e1 and e2 asked one turn apart; e1 shares its round with a claim that
 * fails (priority out of smallint's range) after e1 ran, so that round is rolled back and
 * e1 runs again alone. The row lock holds that round in flight while the next turn's
 * round (Z's mark) is sent. X's last_error must be e2's: e2 was not sent before e1 ran
 * again, and e1 was called back first. */
Test(engine, job_order_two_rounds, .init = setup, .fini = teardown) {
  static call_t cx;
  int at[8];
  snprintf(jx, sizeof(jx), "%s", it_name("x"));
  snprintf(jy, sizeof(jy), "%s", it_name("y"));
  snprintf(jz, sizeof(jz), "%s", it_name("z"));
  claim(&cx, jx, -1);
  run();
  cr_assert_eq(cx.rc, MQPROC_OK);
  fx.norder = 0;
  lock_row(jx);
  capture_log();
  mark(&e1, "e1", jx, "e1"); /* turn A: these go out before the loop first sleeps */
  claim(&bad, jy, 70000);
  bad.tag = "bad";
  mqproc__loop_timer(fx.loop, 0, turn_b, NULL);
  run();
  end_capture();
  cr_assert_eq(e1.rc, MQPROC_OK);
  cr_assert_eq(e2.rc, MQPROC_OK);
  cr_assert_eq(z.rc, MQPROC_OK);
  cr_assert_eq(bad.rc, MQPROC_ESTORE_DATA, "the bad claim: %d", bad.rc);
  cr_assert_str_eq(it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = $1", 1, jx), "e2",
                   "job X's marks ran out of order");
  for (int i = 0, seen_e1 = 0; i < fx.norder; i++) {
    seen_e1 |= strcmp(fx.order[i], "e1") == 0;
    if (strcmp(fx.order[i], "e2") == 0)
      cr_assert(seen_e1, "e2 was called back before e1");
  }
  cr_assert_geq(lines_with("in flight", at, 8), 2);
  cr_assert_geq(line_of("sent, 2 in flight"), 0, "never two rounds in flight");
}

/* Turns of sends_before_callbacks: A (X's mark) is held by the lock, B (Z's) is the second
 * round in flight, C (W's) waits for a place; then the lock goes. */
static void turn_c(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mark(&w, "c", jw, NULL);
  mqproc__loop_timer(loop, 0, unlock_row, NULL);
}

static void turn_b2(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mark(&z, "b", jz, NULL);
  mqproc__loop_timer(loop, 0, turn_c, NULL);
}

/* When round A's answer comes, C (queued while A and B were in flight) is sent before A's
 * request is called back: the database works while the loop runs the callbacks. */
Test(engine, sends_before_callbacks, .init = setup, .fini = teardown) {
  static call_t cx, a;
  int at[8], n, c_sent, a_back;
  snprintf(jx, sizeof(jx), "%s", it_name("x"));
  snprintf(jz, sizeof(jz), "%s", it_name("z"));
  snprintf(jw, sizeof(jw), "%s", it_name("w"));
  claim(&cx, jx, -1);
  run();
  lock_row(jx);
  capture_log();
  mark(&a, "a", jx, NULL);
  mqproc__loop_timer(fx.loop, 0, turn_b2, NULL);
  run();
  end_capture();
  cr_assert_eq(a.rc, MQPROC_OK);
  cr_assert_eq(z.rc, MQPROC_OK);
  cr_assert_eq(w.rc, MQPROC_OK);
  n = lines_with("request(s) in", at, 8);
  cr_assert_eq(n, 3, "%d rounds sent, not A, B and C", n);
  c_sent = at[2];
  a_back = line_of("test: a called back");
  cr_assert_geq(a_back, 0);
  cr_assert_lt(c_sent, a_back, "C was sent only after A's callback ran (line %d, %d)", c_sent,
               a_back);
}

/* ---- the outbox mark ---------------------------------------------------------------- */

static call_t later;

static void write_later(mqproc__loop_t *loop, void *ud) {
  (void)loop;
  (void)ud;
  mark(&later, "later", it_name("m"), NULL);
}

/* outbox_done shares the next round of other writes: asked alone, it waits for company
 * (10 ms later here, inside the engine's 25 ms linger), so the two are one round, one
 * commit; with nothing else to come it goes alone once the linger ran out. Either way
 * the outcome does not depend on timing: the test's timer is due before the linger's,
 * and a late loop runs due timers in order. (Before: a 5 ms linger, so below ~200 jobs/s
 * the mark waited and then committed alone anyway.) */
Test(engine, outbox_done_shares_the_next_round, .init = setup, .fini = teardown) {
  static call_t ping, alone, done;
  mqproc__store_req_t req = {.op = MQPROC__STORE_PING, .done = on_done, .ud = &ping};
  mqproc__store_outbox_done_t a = {.job_id = it_name("o"), .attempt = 1, .result_sent = 1};
  int at[8], n;
  ping.tag = "ping";
  cr_assert_eq(mqproc__store_submit(fx.store, &req), MQPROC_OK);
  fx.pending++;
  run();
  cr_assert_eq(ping.rc, MQPROC_OK);
  capture_log();
  alone.tag = "alone";
  cr_assert_eq(mqproc__store_outbox_done(fx.store, &a, on_done, &alone), MQPROC_OK);
  fx.pending++;
  run(); /* nothing else: it goes after the linger */
  a.job_id = it_name("p");
  done.tag = "outbox";
  cr_assert_eq(mqproc__store_outbox_done(fx.store, &a, on_done, &done), MQPROC_OK);
  fx.pending++;
  mqproc__loop_timer(fx.loop, 10, write_later, NULL);
  run();
  end_capture();
  cr_assert_eq(alone.rc, MQPROC_OK);
  cr_assert_eq(done.rc, MQPROC_OK);
  cr_assert_eq(later.rc, MQPROC_OK);
  n = lines_with("request(s) in", at, 8);
  cr_assert_eq(n, 2, "%d rounds for the two outbox marks and the write:\n%s", n,
               it_read_file(fx.log_path));
  cr_assert_geq(line_of("round of 2 request(s)"), 0, "the outbox mark went alone:\n%s",
                it_read_file(fx.log_path));
}
