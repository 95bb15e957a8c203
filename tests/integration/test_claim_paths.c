/* The claim's paths through the store API (issue 30, lean job writes), on the test's real
 * store (PostgreSQL, or SQLite with MQPROC_TEST_STORE=sqlite), driven by a loop of the
 * test's own. A job nobody has seen takes the fast claim (a plain insert: no try row, the
 * request stored once, as its bytes); every other case falls back to the full claim:
 * - a redelivery while the holder's lease is live is held, not claimed;
 * - a takeover after the lease ran out is claimed at attempt + 1, and the try its holder
 *   never ended gets a row of its own (cut short);
 * - the old attempt's writes are fenced off;
 * - a replay of a finished job is not claimed, and says whether its outcome is still in
 *   the outbox (the narrow mqproc_outbox row the success inserted), until outbox_done;
 * - a requeued (QUEUED) job is claimed again at attempt + 1.
 * The try that succeeded has no row: mqproc_all_tries shows it from the job's row. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "harness.h"
#include "loop/loop.h"
#include "store/store.h"

#define WAIT_MS 30000

TestSuite(claim_paths, .fini = it_cleanup);

static struct {
  mqproc__loop_t *loop;
  mqproc__store_t *store;
  int pending;
  int timed_out;
} fx;

typedef struct call {
  mqproc__claim_t claim;
  int rc;
} call_t;

static void on_done(void *ud, int rc, const char *err) {
  call_t *c = ud;
  (void)err;
  c->rc = rc;
  if (--fx.pending == 0)
    mqproc__loop_stop(fx.loop);
}

static void on_deadline(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  fx.timed_out = 1;
  mqproc__loop_stop(loop);
}

/* Runs the loop until every request made so far was answered. */
static void run(void) {
  uint64_t deadline = mqproc__loop_timer(fx.loop, WAIT_MS, on_deadline, NULL);
  if (fx.pending > 0)
    mqproc__loop_run(fx.loop);
  mqproc__loop_timer_cancel(fx.loop, deadline);
  cr_assert_not(fx.timed_out, "%d request(s) not answered within %d ms", fx.pending, WAIT_MS);
}

static void setup(void) {
  char err[MQPROC_ERR_LEN];
  const char *url = it_db_url();
  memset(&fx, 0, sizeof(fx));
  cr_assert_eq(mqproc__loop_new(&fx.loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_new(&fx.store, url, fx.loop, 0, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_migrate(fx.store, err), MQPROC_OK, "migrate: %s", err);
  cr_assert_eq(mqproc__store_open(fx.store, err), MQPROC_OK, "open: %s", err);
}

static void teardown(void) {
  mqproc__store_destroy(fx.store);
  if (fx.loop != NULL)
    mqproc__loop_free(fx.loop);
}

/* A claim of job by worker, answered. */
static void claim(call_t *c, const char *job, const char *worker) {
  static const char body[] = "{\"job_id\": \"x\"}";
  memset(c, 0, sizeof(*c));
  c->claim = (mqproc__claim_t){.job_id = job,
                               .processor = "claim-paths",
                               .worker_id = worker,
                               .request_json = "{}",
                               .request_format = "json",
                               .request_body = body,
                               .request_body_len = sizeof(body) - 1,
                               .priority = -1,
                               .created_time = -1,
                               .lease_ms = 60000,
                               .max_attempts = 5};
  cr_assert_eq(mqproc__store_claim(fx.store, &c->claim, on_done, c), MQPROC_OK);
  fx.pending++;
  run();
  cr_assert_eq(c->rc, MQPROC_OK, "claim of %s by %s: %d", job, worker, c->rc);
}

/* The success of try_no of attempt, its outcome still to be sent (outbox). */
static int succeed(const char *job, int attempt, int try_no) {
  call_t c = {.rc = -1};
  mqproc__store_succeed_t a = {.job_id = job,
                               .attempt = attempt,
                               .try_no = try_no,
                               .end = {.ok = 1, .exit_code = 0, .duration_ms = 7},
                               .outbox = 1,
                               .result = 1,
                               .lease_ms = 60000};
  cr_assert_eq(mqproc__store_succeed(fx.store, &a, on_done, &c), MQPROC_OK);
  fx.pending++;
  run();
  return c.rc;
}

static int outbox_done(const char *job, int attempt) {
  call_t c = {.rc = -1};
  mqproc__store_outbox_done_t a = {.job_id = job, .attempt = attempt, .result_sent = 1};
  cr_assert_eq(mqproc__store_outbox_done(fx.store, &a, on_done, &c), MQPROC_OK);
  fx.pending++;
  run();
  return c.rc;
}

/* The holder's lease ran out (as if it had stopped renewing an hour ago). */
static void expire(const char *job) {
  it_sql(it_q("UPDATE mqproc_jobs SET lease_until = now() - interval '1 hour' WHERE job_id = $1",
              "UPDATE mqproc_jobs SET lease_until = 1 WHERE job_id = ?1"),
         1, job);
}

static long count(const char *sql, const char *job) {
  return it_sql_long(sql, 1, job);
}

Test(claim_paths, redelivery_takeover_fencing_and_replay, .init = setup, .fini = teardown) {
  char *job = it_name("j");
  call_t c;
  /* new: the fast claim, nothing but the row */
  claim(&c, job, "w1");
  cr_assert(c.claim.claimed);
  cr_expect_eq(c.claim.attempt, 1);
  cr_expect_eq(c.claim.try_no, 1);
  cr_expect_str_eq(c.claim.state, "RUNNING");
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_job_tries WHERE job_id = $1",
                          "SELECT count(*) FROM mqproc_job_tries WHERE job_id = ?1"),
                     job),
               0, "a try row for a try that has not failed");
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_jobs WHERE job_id = $1 AND request IS NULL"
                          " AND request_body IS NOT NULL",
                          "SELECT count(*) FROM mqproc_jobs WHERE job_id = ?1 AND request IS NULL"
                          " AND request_body IS NOT NULL"),
                     job),
               1, "the request is stored once, as its bytes");
  /* a redelivery while w1's lease is live: held */
  claim(&c, job, "w2");
  cr_expect_not(c.claim.claimed, "a live lease was taken over");
  cr_expect(c.claim.lease_live);
  cr_expect_eq(c.claim.attempt, 1);
  cr_expect_str_eq(c.claim.worker_id_now, "w1");
  cr_expect_str_eq(c.claim.state, "RUNNING");
  /* the lease ran out: w2 takes over at attempt 2; w1's try is recorded cut short */
  expire(job);
  claim(&c, job, "w2");
  cr_assert(c.claim.claimed, "an expired lease was not taken over");
  cr_expect_eq(c.claim.attempt, 2);
  cr_expect_eq(c.claim.try_no, 2);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_job_tries WHERE job_id = $1 AND try = 1"
                          " AND attempt = 1 AND worker_id = 'w1' AND ended_at IS NULL"
                          " AND error LIKE 'cut short: taken over by attempt 2%'",
                          "SELECT count(*) FROM mqproc_job_tries WHERE job_id = ?1 AND try = 1"
                          " AND attempt = 1 AND worker_id = 'w1' AND ended_at IS NULL"
                          " AND error LIKE 'cut short: taken over by attempt 2%'"),
                     job),
               1, "the try w1 never ended has no row");
  /* w1 wakes up: its attempt is fenced off */
  cr_expect_eq(succeed(job, 1, 1), MQPROC_ESTORE_FENCED);
  cr_expect_str_eq(it_sql(it_q("SELECT state FROM mqproc_jobs WHERE job_id = $1",
                               "SELECT state FROM mqproc_jobs WHERE job_id = ?1"),
                          1, job),
                   "RUNNING");
  /* w2's success, with its outcome in the outbox */
  cr_assert_eq(succeed(job, 2, 2), MQPROC_OK);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_outbox WHERE job_id = $1 AND attempt = 2",
                          "SELECT count(*) FROM mqproc_outbox WHERE job_id = ?1 AND attempt = 2"),
                     job),
               1);
  /* a replay of the finished job: not claimed, its outcome still being sent */
  claim(&c, job, "w3");
  cr_expect_not(c.claim.claimed);
  cr_expect_str_eq(c.claim.state, "SUCCESS");
  cr_expect_eq(c.claim.attempt, 2);
  cr_expect(c.claim.outbox_pending, "the outbox row was not seen");
  cr_assert_eq(outbox_done(job, 2), MQPROC_OK);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_outbox WHERE job_id = $1",
                          "SELECT count(*) FROM mqproc_outbox WHERE job_id = ?1"),
                     job),
               0, "outbox_done left the outbox row");
  claim(&c, job, "w3");
  cr_expect_not(c.claim.claimed);
  cr_expect_not(c.claim.outbox_pending);
  cr_expect(c.claim.result_published);
  /* every try as operators read them: the cut-short one, and the success from the row */
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_all_tries WHERE job_id = $1",
                          "SELECT count(*) FROM mqproc_all_tries WHERE job_id = ?1"),
                     job),
               2);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_all_tries WHERE job_id = $1 AND try = 2"
                          " AND attempt = 2 AND ok AND worker_id = 'w2' AND duration_ms = 7",
                          "SELECT count(*) FROM mqproc_all_tries WHERE job_id = ?1 AND try = 2"
                          " AND attempt = 2 AND ok AND worker_id = 'w2' AND duration_ms = 7"),
                     job),
               1, "the successful try is not shown from the job's row");
}

/* A requeued job (QUEUED after its attempt failed) is claimed again at attempt + 1 by the
 * full claim; its failed try keeps its row. */
Test(claim_paths, a_requeued_job_is_claimed_again, .init = setup, .fini = teardown) {
  char *job = it_name("q");
  call_t c, f = {.rc = -1};
  int requeued = -1;
  mqproc__store_end_try_t end = {
      .job_id = NULL, .attempt = 1, .try_no = 1, .end = {.ok = 0, .exit_code = 3, .error = "boom"}};
  mqproc__store_fail_t fail = {
      .job_id = NULL, .attempt = 1, .error = "boom", .max_requeues = 2, .requeued = &requeued};
  claim(&c, job, "w1");
  cr_assert(c.claim.claimed);
  end.job_id = fail.job_id = job;
  cr_assert_eq(mqproc__store_end_try(fx.store, &end, on_done, &f), MQPROC_OK);
  fx.pending++;
  run();
  cr_assert_eq(f.rc, MQPROC_OK);
  cr_assert_eq(mqproc__store_fail(fx.store, &fail, on_done, &f), MQPROC_OK);
  fx.pending++;
  run();
  cr_assert_eq(f.rc, MQPROC_OK);
  cr_assert_eq(requeued, 1);
  claim(&c, job, "w2");
  cr_assert(c.claim.claimed, "a QUEUED job was not claimed again");
  cr_expect_eq(c.claim.attempt, 2);
  cr_expect_eq(c.claim.try_no, 2);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_job_tries WHERE job_id = $1 AND try = 1"
                          " AND NOT ok AND error = 'boom'",
                          "SELECT count(*) FROM mqproc_job_tries WHERE job_id = ?1 AND try = 1"
                          " AND NOT ok AND error = 'boom'"),
                     job),
               1);
  cr_expect_eq(count(it_q("SELECT count(*) FROM mqproc_job_tries WHERE job_id = $1",
                          "SELECT count(*) FROM mqproc_job_tries WHERE job_id = ?1"),
                     job),
               1, "a QUEUED job's claim recorded a try as cut short");
}
