/* Integration: the claim in PostgreSQL decides every delivery — the redelivered flag
 * path, fencing of a superseded attempt, several deliveries in flight. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "harness.h"
#include "http_listener.h"

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
  it_sql(it_q("UPDATE mqproc_jobs SET attempt = attempt + 1, worker_id = 'other:1',"
              " lease_until = now() + interval '1 hour' WHERE job_id = 'fence-1'",
              "UPDATE mqproc_jobs SET attempt = attempt + 1, worker_id = 'other:1',"
              " lease_until = CAST(strftime('%s', 'now') AS INTEGER) * 1000 + 3600000"
              " WHERE job_id = 'fence-1'"),
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
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), NULL}; /* run until the gate opens */
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
  it_open_gate(gate);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  it_server_stop(srv);
}

Test(claims, a_copy_of_a_job_running_elsewhere_is_held_not_spun) {
  char *proc = it_name("hold"), *results = it_name("hold-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=8", NULL};
  const char *extra_a[] = {"--lease=6", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=6", "--worker-id=B", NULL};
  char *body = it_job_json(proc, "hold-1", it_fmt("{\"result_queue_name\": \"%s\"}", results));
  it_server_t *a, *b;
  it_msg_t m;
  long ready, unacked;
  int holds;
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, envp);
  it_publish(proc, body);
  cr_assert(it_server_wait_log(a, "job hold-1: attempt 1 try 1 started", WAIT_MS));
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, envp);
  it_publish(proc, body); /* a second copy while A runs the job: B gets it */
  cr_assert(it_server_wait_log(b, "job hold-1: RUNNING under a live lease of A", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  /* the held copy goes back to the queue after each hold; once A is done, whichever server
   * gets it (B, or A now idle: a directory queue has no preference) acks it unrun */
  for (int i = 0;
       i < WAIT_MS / 100 &&
       it_server_count_log(a, "job hold-1: already SUCCESS; acked without running") +
               it_server_count_log(b, "job hold-1: already SUCCESS; acked without running") ==
           0;
       i++)
    usleep(100 * 1000);
  cr_assert(it_server_count_log(a, "job hold-1: already SUCCESS; acked without running") +
                    it_server_count_log(b, "job hold-1: already SUCCESS; acked without running") ==
                1,
            "the copy was acked unrun, once");
  holds = it_server_count_log(b, "holding this copy") + it_server_count_log(a, "holding this copy");
  /* each hold lasts until A's lease could expire (4..6 s here): two or three in 8 s */
  cr_expect_leq(holds, 8, "held for about a lease each time, not a hot requeue loop (%d)", holds);
  cr_expect_eq(it_file_lines(marker), 1, "the copy never ran");
  it_server_stop(a);
  it_server_stop(b);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0, "the copy was not lost either: it was acked");
}

Test(claims, an_early_acked_job_of_a_dead_server_is_republished_by_another) {
  char *proc = it_name("sweep"), *results = it_name("sweep-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  /* A's try outlasts anything the test does before the kill; B's is short */
  const char *envp_a[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=120", NULL};
  const char *envp_b[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=1",
                          it_fmt("PROC_COPY=%s", it_tmpdir()), NULL};
  const char *extra_a[] = {"--lease=3", "--ack-after=1", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=3", "--ack-after=1", "--worker-id=B", NULL};
  it_server_t *a, *b;
  long ready, unacked;
  it_msg_t m;
  char *out, *in;
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, envp_a);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "sweep-1", "--result-queue", results, "--header", "tenant=acme",
                     "--priority", "7", NULL),
               0);
  cr_assert(it_server_wait_log(a, "job sweep-1: still running after 1 s; delivery acked", WAIT_MS));
  /* the ack goes out with the loop's next batch of acks, just after the line */
  for (int i = 0; i < WAIT_MS / 100; i++) {
    it_queue_counts(proc, &ready, &unacked);
    if (ready + unacked == 0)
      break;
    usleep(100 * 1000);
  }
  cr_expect_eq(ready + unacked, 0, "the broker no longer holds the job");
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, envp_b);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, WAIT_MS), -1);
  cr_assert(it_server_wait_log(b, "job sweep-1: its holder is gone; republished", WAIT_MS));
  cr_assert(it_server_wait_log(b, "job sweep-1: claimed, attempt 2", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "SUCCESS") != NULL);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'sweep-1'", 0), "SUCCESS");
  cr_expect_str_eq(it_sql("SELECT worker_id FROM mqproc_jobs WHERE job_id = 'sweep-1'", 0), "B");
  in = it_read_file(it_fmt("%s/sweep-1.json", it_tmpdir()));
  cr_assert_not_null(in);
  cr_expect(strstr(in, "\"tenant\":\"acme\"") != NULL || strstr(in, "\"tenant\": \"acme\"") != NULL,
            "the republished message kept its headers: %s", in);
  it_server_stop(a);
  it_server_stop(b);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0);
}

Test(claims, a_job_out_of_attempts_fails_without_running) {
  char *proc = it_name("maxatt"), *dead = it_fmt("%s.dead", it_name("maxatt"));
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *extra[] = {"--max-attempts=3", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_msg_t m;
  /* as after three claims whose servers all died: the job is QUEUED at attempt 3 */
  it_sql("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt) "
         "VALUES ('maxatt-1', $1, 'QUEUED', 3)",
         1, proc);
  it_publish(proc, it_job_json(proc, "maxatt-1", NULL));
  cr_assert(it_get(dead, WAIT_MS, &m));
  cr_expect(strstr(m.reason, "out of attempts: 3 of --max-attempts=3") != NULL, "%s", m.reason);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'maxatt-1'", 0), "FAILED");
  cr_expect_eq(it_file_lines(marker), 0);
  it_server_stop(srv);
}

Test(claims, an_early_acked_job_keeps_its_slot) {
  char *proc = it_name("slot"), *results = it_name("slot-result");
  const char *envp[] = {"PROC_SLEEP=3", NULL};
  const char *extra[] = {"--ack-after=1", "--prefetch=1", NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc, it_job_json(proc, "slot-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  it_publish(proc, it_job_json(proc, "slot-2", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(
      it_server_wait_log(srv, "job slot-1: still running after 1 s; delivery acked", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "slot-1") != NULL, "slot-1 ended first: %s", m.body);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  it_server_stop(srv);
  {
    /* slot-2 was claimed only once slot-1 had ended: --prefetch bounds running jobs */
    long first = it_sql_long(it_q("SELECT extract(epoch FROM start_time) * 1000 FROM mqproc_jobs"
                                  " WHERE job_id = 'slot-2'",
                                  "SELECT start_time FROM mqproc_jobs WHERE job_id = 'slot-2'"),
                             0);
    long ended = it_sql_long(it_q("SELECT extract(epoch FROM end_time) * 1000 FROM mqproc_jobs"
                                  " WHERE job_id = 'slot-1'",
                                  "SELECT end_time FROM mqproc_jobs WHERE job_id = 'slot-1'"),
                             0);
    cr_expect_geq(first, ended, "slot-2 started %ld ms before slot-1 ended", ended - first);
  }
}

Test(claims, the_outcome_an_early_acked_holder_never_sent_is_sent_by_a_sweeper) {
  char *proc = it_name("outbox"), *results = it_name("outbox-result");
  test_http_t *cb = test_http_start(200);
  char *cb_url = test_http_url(cb, "/result_callback");
  const char *extra[] = {"--lease=2", NULL};
  it_server_t *srv;
  it_msg_t m;
  char *body;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  /* as if the holder died right after recording SUCCESS, its delivery acked early: the
   * row, and its outbox mark with a lease that ran out */
  it_sql(it_q("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, request)"
              " VALUES ('outbox-1', $1, 'SUCCESS', 3, $2::jsonb)",
              "INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, request)"
              " VALUES ('outbox-1', $1, 'SUCCESS', 3, $2)"),
         2, proc,
         it_job_json(
             proc, "outbox-1",
             it_fmt("{\"result_queue_name\": \"%s\", \"callback_url\": \"%s\"}", results, cb_url)));
  it_sql(it_q("INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
              " VALUES ('outbox-1', $1, 3, now() - interval '1 second')",
              "INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
              " VALUES ('outbox-1', $1, 3,"
              " CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 1000)"),
         1, proc);
  cr_assert(it_get(results, WAIT_MS, &m), "the sweeper did not send the result");
  cr_expect(strstr(m.body, "outbox-1") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  /* the same message as its holder's: the id consumers deduplicate by, the attempt that won */
  cr_expect_str_eq(m.message_id, "outbox-1");
  cr_expect_str_eq(m.attempt, "3");
  it_msg_free(&m);
  cr_assert_eq(test_http_wait(cb, 1, WAIT_MS), 1, "the callback was not sent");
  body = test_http_body(cb, 0);
  cr_expect(strstr(body, "\"state\":\"SUCCESS\"") != NULL, "%s", body);
  free(body);
  it_server_stop(srv); /* the outbox delivery ended before the server could stop */
  cr_expect_str_eq(it_sql("SELECT CASE WHEN result_published THEN 'true' ELSE 'false' END || ' ' "
                          "|| callback_state || ' ' ||"
                          " (SELECT count(*) FROM mqproc_outbox o WHERE o.job_id = j.job_id)"
                          " FROM mqproc_jobs j WHERE job_id = 'outbox-1'",
                          0),
                   "true OK 0", "sent, recorded, and its outbox mark gone");
  test_http_stop(cb);
  free(cb_url);
}

Test(claims, the_dead_letter_an_early_acked_holder_never_sent_is_sent_by_a_sweeper) {
  char *proc = it_name("outdead"), *results = it_name("outdead-result");
  char *dead = it_fmt("%s.dead", proc);
  const char *extra[] = {"--lease=2", NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  /* as if the holder died right after recording FAILED, its delivery acked early: the row,
   * and its outbox mark (the dead letter pending) with a lease that ran out */
  it_sql(it_q("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt,"
              " dead_letter_pending, last_error, request, request_format)"
              " VALUES ('outdead-1', $1, 'FAILED', 1, true,"
              " 'processor exited with status 3', $2::jsonb, 'yaml')",
              "INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt,"
              " dead_letter_pending, last_error, request, request_format)"
              " VALUES ('outdead-1', $1, 'FAILED', 1, 1,"
              " 'processor exited with status 3', $2, 'yaml')"),
         2, proc,
         it_job_json(proc, "outdead-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  it_sql(it_q("INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until,"
              " dead_letter) VALUES ('outdead-1', $1, 1, now() - interval '1 second', true)",
              "INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until,"
              " dead_letter) VALUES ('outdead-1', $1, 1,"
              " CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) - 1000, 1)"),
         1, proc);
  cr_assert(it_get(dead, WAIT_MS, &m), "the sweeper did not send the dead letter");
  cr_expect(strstr(m.reason, "job FAILED: processor exited with status 3 (sent by") != NULL,
            "reason: %s", m.reason);
  cr_expect(strstr(m.body, "job_id: outdead-1\n") != NULL, "the stored request, as YAML: %s",
            m.body);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m), "the sweeper did not send the result");
  cr_expect(strstr(m.body, "state: FAILED") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
  cr_expect_str_eq(it_sql("SELECT CASE WHEN dead_letter_pending THEN 'true' ELSE 'false' END || ' "
                          "' || (SELECT count(*) FROM mqproc_outbox o WHERE o.job_id = j.job_id)"
                          " FROM mqproc_jobs j WHERE job_id = 'outdead-1'",
                          0),
                   "false 0");
}

Test(claims, an_early_acked_job_that_fails_for_good_is_dead_lettered_once) {
  char *proc = it_name("ackfail"), *results = it_name("ackfail-result");
  char *dead = it_fmt("%s.dead", proc), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), "PROC_FAIL_MATCH=ackfail", NULL};
  const char *extra[] = {"--ack-after=1", "--final-exit-code=3", NULL};
  it_server_t *srv;
  it_msg_t m;
  long ready, unacked;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc,
             it_job_json(proc, "ackfail-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job ackfail-1: still running after 1 s", WAIT_MS));
  it_open_gate(gate); /* now the job may end (and fail) */
  cr_assert(it_get(dead, WAIT_MS, &m));
  cr_expect(strstr(m.reason, "FAILED for good (final exit code 3)") != NULL, "%s", m.reason);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
  cr_expect_str_eq(
      it_sql("SELECT state || ' ' || tries || ' ' || CASE WHEN dead_letter_pending THEN 'true' "
             "ELSE 'false' END"
             " || ' ' || CASE WHEN delivery_acked THEN 'true' ELSE 'false' END FROM mqproc_jobs"
             " WHERE job_id = 'ackfail-1'",
             0),
      "FAILED 1 false false", "the holder sent everything and cleared its marks");
  it_queue_counts(dead, &ready, &unacked);
  cr_expect_eq(ready, 0, "one dead letter");
}

Test(claims, an_early_acked_job_whose_dead_letter_is_refused_still_sends_its_result) {
  char *proc = it_name("deadgone"), *results = it_name("deadgone-result");
  char *dead = it_fmt("%s.dead", proc), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), "PROC_FAIL_MATCH=deadgone", NULL};
  const char *extra[] = {"--ack-after=1", "--final-exit-code=3", NULL};
  it_server_t *srv;
  it_msg_t m;
  if (it_queue_is_table())
    cr_skip_test("a table queue refuses no dead letter: a queue is its rows");
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc,
             it_job_json(proc, "deadgone-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job deadgone-1: still running after 1 s", WAIT_MS));
  it_delete_queue(dead); /* the dead letter becomes unroutable */
  it_open_gate(gate);
  cr_assert(it_server_wait_log(srv, "refused the message", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m), "no result after the refused dead letter");
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
  cr_expect_eq(
      it_sql_long("SELECT count(*) FROM mqproc_dead_letters WHERE job_id = 'deadgone-1'", 0), 1,
      "recorded in the table");
  cr_expect_str_eq(it_sql("SELECT state || ' ' || CASE WHEN delivery_acked THEN 'true' ELSE "
                          "'false' END FROM mqproc_jobs"
                          " WHERE job_id = 'deadgone-1'",
                          0),
                   "FAILED false");
}
