/* Integration: the claim in PostgreSQL decides every delivery — the redelivered flag
 * path, fencing of a superseded attempt, several deliveries in flight. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(claims, .fini = it_cleanup);

Test(claims, a_redelivered_copy_of_a_finished_job_is_acked_without_running) {
  char *proc = it_name("redeliv"), *results = it_name("redeliv-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  char *body = it_job_json(proc, "redeliv-1", it_fmt("{\"result_queue_name\": \"%s\"}", results));
  it_server_t *srv;
  it_msg_t m;
  long ready, unacked;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  it_server_stop(srv);
  /* a second copy, delivered once and requeued: the broker flags it redelivered */
  it_publish(proc, body);
  cr_assert(it_requeue_one(proc, WAIT_MS));
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  cr_assert(it_server_wait_log(
      srv, "job redeliv-1: already SUCCESS; acked without running (redelivered)", WAIT_MS));
  it_server_stop(srv);
  cr_expect_eq(it_file_lines(marker), 1, "the processor ran once");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0);
  it_queue_counts(results, &ready, &unacked);
  cr_expect_eq(ready, 0, "the confirmed result was not published again");
}

Test(claims, a_superseded_attempt_is_fenced_off) {
  char *proc = it_name("fence");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=20", NULL};
  const char *extra[] = {"--lease=3", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  long ready, unacked;
  it_publish(proc, it_job_json(proc, "fence-1", NULL));
  cr_assert(it_server_wait_log(srv, "job fence-1: attempt 1 try 1 started", WAIT_MS));
  /* another server takes the job over (as after an expired lease): attempt 2 */
  it_sql("UPDATE mqproc_jobs SET attempt = attempt + 1, worker_id = 'other:1',"
         " lease_until = now() + interval '1 hour' WHERE job_id = 'fence-1'",
         0);
  cr_assert(it_server_wait_log(srv, "lease of attempt 1 lost to a newer attempt", WAIT_MS));
  cr_assert(it_server_wait_log(srv, "attempt 1 was fenced off by a newer attempt", WAIT_MS));
  /* its copy goes back to the queue and is held while the new owner's lease is live */
  cr_assert(it_server_wait_log(srv, "under a live lease of other:1", WAIT_MS));
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'fence-1'", 0), "RUNNING",
                   "the zombie attempt recorded nothing");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'fence-1' AND "
                           "ended_at IS NOT NULL",
                           0),
               0, "its try's end was not recorded either");
  /* the new owner finishes: the held copy meets SUCCESS and is acked without running */
  it_sql("UPDATE mqproc_jobs SET state = 'SUCCESS', lease_until = NULL WHERE job_id = 'fence-1'",
         0);
  cr_assert(it_server_wait_log(srv, "job fence-1: already SUCCESS; acked without running", 60000));
  cr_expect_eq(it_file_lines(marker), 1, "the processor started once and was killed");
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'fence-1'", 0), 2);
  it_server_stop(srv);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0);
}

Test(claims, prefetch_two_runs_two_jobs_at_once) {
  char *proc = it_name("prefetch"), *results = it_name("prefetch-result");
  const char *envp[] = {"PROC_SLEEP=2", NULL};
  const char *extra[] = {"--prefetch=2", NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc, it_job_json(proc, "pf-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  it_publish(proc, it_job_json(proc, "pf-2", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job pf-1: attempt 1 try 1 started", WAIT_MS));
  cr_assert(it_server_wait_log(srv, "job pf-2: attempt 1 try 1 started", WAIT_MS));
  cr_expect_eq(it_server_count_log(srv, ": SUCCESS in"), 0, "both started before either ended");
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  it_server_stop(srv);
}
