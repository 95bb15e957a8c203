/* Integration: --concurrency N. N tries run at once, never more; a delivery is claimed
 * only when it gets a run slot (a message waiting in the server's prefetch buffer is still
 * only a message, which the broker gives to another server at once if this one dies), or
 * with --claim-ahead M one of M passes (claimed, it waits for its slot; a dead server's
 * claimed jobs are taken over at once on its host);
 * retries wait for a slot like new jobs; many deliveries in flight (batched claims,
 * successes and acks) still give every job exactly one SUCCESS and one result. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000

TestSuite(concurrency, .fini = it_cleanup);

static const char *result_extra(const char *results) {
  return it_fmt("{\"result_queue_name\": \"%s\"}", results);
}

/* Polls the broker (each read is a rabbitmqctl run) until queue has `unacked` messages
 * out at consumers; 1, or 0 after about 30 reads. */
static int wait_unacked(const char *queue, long unacked) {
  for (int i = 0; i < 30; i++) {
    long r = 0, u = 0;
    it_queue_counts(queue, &r, &u);
    if (u == unacked)
      return 1;
    usleep(200 * 1000);
  }
  return 0;
}

/* Takes n result messages off results (and checks no more came); returns how many say
 * SUCCESS. */
static int take_results(const char *results, int n) {
  long ready, unacked;
  int ok = 0;
  for (int i = 0; i < n; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d of %d results", i, n);
    ok += strstr(m.body, "SUCCESS") != NULL;
    it_msg_free(&m);
  }
  it_queue_counts(results, &ready, &unacked);
  cr_expect_eq(ready, 0, "one result per job");
  return ok;
}

static void expect_results(const char *results, int n) {
  cr_expect_eq(take_results(results, n), n, "every result says SUCCESS");
}

Test(concurrency, n_tries_run_at_once_and_waiting_deliveries_are_not_claimed) {
  char *proc = it_name("conc"), *results = it_name("conc-result");
  char *spans = it_fmt("%s/spans", it_tmpdir()), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra[] = {"--concurrency=2", "--prefetch=6", "--claim-ahead=0", NULL};
  const char *envp[] = {it_fmt("PROC_SPANS=%s", spans), it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  for (int i = 0; i < 6; i++)
    it_publish(proc, it_job_json(proc, it_fmt("conc-%d", i), result_extra(results)));
  cr_assert(it_server_wait_count(srv, "try 1 started", 2, WAIT_MS));
  cr_assert(wait_unacked(proc, 6), "all six deliveries reached the server");
  /* two run (behind the gate); the four others wait for a slot, unclaimed */
  cr_expect_eq(it_server_count_log(srv, "try 1 started"), 2);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 2, "only running jobs claimed");
  /* "try started" is the spawn: both processors must be behind the gate before it opens,
   * or a slow shell meets an open gate and the two never overlap */
  for (int i = 0; i < WAIT_MS / 10 && it_file_lines(spans) < 2; i++)
    usleep(10 * 1000);
  cr_assert_eq(it_file_lines(spans), 2, "both processors started: %s", it_read_file(spans));
  it_open_gate(gate);
  expect_results(results, 6);
  cr_expect_eq(it_most_at_once(spans), 2, "--concurrency=2: two tries at once, never more:\n%s",
               it_read_file(spans));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND "
                           "attempt = 1 AND tries = 1",
                           0),
               6);
  it_server_stop(srv);
}

/* Server A (one slot, prefetch 4, --claim-ahead claim_ahead, its processor behind a gate)
 * gets four jobs and holds 1 + claim_ahead of them claimed; then B starts and A is killed.
 * A lease far longer than the test: a job A had claimed is taken over at once only because
 * its holder's pid is gone on this host (fleet.h): attempt 2; the ones it never claimed
 * are B's as they are: attempt 1, without waiting for any lease. */
static void kill_a_holding_four(const char *tag, int claim_ahead) {
  char *proc = it_name(tag), *results = it_name(it_fmt("%s-result", tag));
  char *gate = it_fmt("%s/gate", it_tmpdir());
  long claimed = 1 + claim_ahead;
  const char *extra_a[] = {
      "--concurrency=1", "--prefetch=4",  it_fmt("--claim-ahead=%d", claim_ahead),
      "--lease=600",     "--worker-id=A", NULL};
  const char *extra_b[] = {"--concurrency=2", "--lease=600", "--worker-id=B", NULL};
  const char *envp_a[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *a, *b;
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, envp_a);
  for (int i = 0; i < 4; i++)
    it_publish(proc, it_job_json(proc, it_fmt("%s-%d", tag, i), result_extra(results)));
  cr_assert(it_server_wait_log(a, "try 1 started", WAIT_MS));
  /* one runs (behind the gate), claim_ahead more are claimed and wait for its slot, the
   * others are only messages */
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'RUNNING'",
                           it_fmt("%ld", claimed)),
            "one running and %d claimed ahead", claim_ahead);
  cr_assert(wait_unacked(proc, 4), "all four deliveries reached A");
  cr_expect_eq(it_server_count_log(a, "try 1 started"), 1, "--concurrency=1: one try at once");
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, NULL);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, WAIT_MS), -1);
  expect_results(results, 4);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND "
                           "attempt = 1 AND worker_id = 'B'",
                           0),
               4 - claimed, "the ones A never claimed");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND "
                           "attempt = 2 AND worker_id = 'B'",
                           0),
               claimed, "the ones A held were taken over although their lease had not ended");
  it_open_gate(gate);
  it_server_stop(a);
  it_server_stop(b);
}

Test(concurrency, deliveries_waiting_for_a_slot_go_to_another_server_at_once_when_killed) {
  kill_a_holding_four("conck", 0);
}

Test(concurrency, claimed_ahead_jobs_wait_for_a_slot_and_are_taken_over_when_killed) {
  kill_a_holding_four("conca", 2);
}

Test(concurrency, a_retry_waits_for_a_slot_like_a_new_job) {
  char *proc = it_name("concr"), *results = it_name("concr-result");
  const char *extra[] = {"--concurrency=1",       "--prefetch=4",     "--retries=2",
                         "--retry-backoff-ms=50", "--max-requeues=0", NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc, it_job_json(proc, "concr-bad", result_extra(results)));
  for (int i = 0; i < 3; i++)
    it_publish(proc, it_job_json(proc, it_fmt("concr-ok-%d", i), result_extra(results)));
  it_expect_dead(proc, "exited with status 3");
  cr_expect_eq(take_results(results, 4), 3, "three SUCCESS results and one FAILED");
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'concr-bad'", 0), 3);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'concr-bad'", 0), "FAILED");
  it_server_stop(srv);
}

Test(concurrency, many_deliveries_in_flight_each_job_succeeds_once) {
  char *proc = it_name("concb"), *results = it_name("concb-result");
  const char *extra[] = {"--concurrency=4", "--prefetch=64", NULL};
  enum { N = 300 };
  it_server_t *srv;
  long ready, unacked;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL); /* the C example processor */
  for (int i = 0; i < N; i++)
    it_publish(proc, it_job_json(proc, it_fmt("concb-%03d", i), result_extra(results)));
  expect_results(results, N);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND "
                           "attempt = 1 AND tries = 1 AND result_published",
                           0),
               N);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE ended_at IS NULL", 0), 0);
  it_server_stop(srv);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0, "every delivery acked");
}
