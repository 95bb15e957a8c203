/* Integration: operating a fleet against the real RabbitMQ and PostgreSQL — any processor
 * name, --help of every command, the admin CLI (submit, jobs, workers, stats, retry,
 * cancel, purge, pause/resume/drain) and the audit trail. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(admin, .fini = it_cleanup);

/* A processor name of this test that does not start with ocrd-. */
static char *plain_name(const char *what) {
  return it_fmt("%s-t%d", what, (int)getpid());
}

Test(admin, a_processor_without_the_ocrd_prefix_processes_jobs) {
  char *proc = plain_name("thumbnails"), *results = it_fmt("%s-results", proc);
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  it_publish(proc, it_job_json(proc, "thumb-1", it_fmt("{\"result_queue_name\":\"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result");
  cr_expect(strstr(m.body, "\"SUCCESS\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'thumb-1'", 0), "SUCCESS");
  it_server_stop(srv);
}

Test(admin, processing_server_help_prints_the_options) {
  const char *generic[] = {it_mqproc_bin(), "processing-server", "--help", NULL};
  const char *c_proc[] = {MQPROC_EXAMPLE_BIN, "processing-server", "--queue=x", "--help", NULL};
  char *out;
  cr_assert_eq(it_run(generic, NULL, NULL, &out), 0);
  cr_expect(strstr(out, "Usage: mqproc processing-server") != NULL, "%s", out);
  cr_expect(strstr(out, "--exec") != NULL, "%s", out);
  cr_assert_eq(it_run(c_proc, NULL, NULL, &out), 0);
  cr_expect(strstr(out, "processing-server") != NULL && strstr(out, "--isolation") != NULL, "%s",
            out);
}

/* ---- the operator commands ------------------------------------------------------------ */

Test(admin, submit_wait_list_show_and_log) {
  char *proc = it_name("ops"), *out;
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  json_t *arr, *job;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/data/ws/mets.xml", "-I", "IN",
                     "-O", "OUT", "--param", "level=2", "--header", "tenant=acme", "--count", "5",
                     "--job-id", "ops", "--wait", "--timeout", "60", NULL),
               0, "submit --wait did not report SUCCESS");
  cr_expect(strstr(out, "ops-1\n") != NULL && strstr(out, "ops-5\n") != NULL, "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), 5);
  cr_assert_eq(it_mq(&out, "jobs", "list", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 5);
  job = json_array_get(arr, 0);
  cr_expect_str_eq(json_string_value(json_object_get(job, "state")), "SUCCESS");
  cr_expect(json_is_integer(json_object_get(job, "attempt")));
  cr_expect(json_object_get(job, "exec_time_ms") != NULL && json_object_get(job, "worker_id"));
  json_decref(arr);
  cr_assert_eq(it_mq(&out, "jobs", "list", "--state", "FAILED", "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 0);
  json_decref(arr);
  cr_assert_eq(it_mq(&out, "jobs", "show", "ops-3", "--json", NULL), 0);
  job = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(job, "job_id")), "ops-3");
  cr_expect_eq(json_array_size(json_object_get(job, "tries")), 1);
  cr_expect_eq(
      json_integer_value(
          json_object_get(json_object_get(job, "request"), "parameters")
              ? json_object_get(json_object_get(json_object_get(job, "request"), "parameters"),
                                "level")
              : NULL),
      2);
  json_decref(job);
  cr_assert_eq(it_mq(&out, "jobs", "log", "ops-3", NULL), 0);
  cr_expect(strstr(out, "proc.sh: job ops-3") != NULL, "%s", out);
  cr_expect_neq(it_mq(&out, "jobs", "show", "no-such-job", NULL), 0);
  it_server_stop(srv);
}

Test(admin, workers_and_stats_show_the_live_fleet) {
  char *proc = it_name("fleet"), *out;
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  json_t *arr, *w;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", "--count",
                     "3", "--wait", NULL),
               0);
  cr_assert(it_sql_becomes(
      it_fmt("SELECT jobs_done FROM mqproc_workers WHERE processor_name = '%s'", proc), "3"));
  cr_assert_eq(it_mq(&out, "workers", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  cr_assert_eq(json_array_size(arr), 1, "%s", out);
  w = json_array_get(arr, 0);
  cr_expect_str_eq(json_string_value(json_object_get(w, "state")), "running");
  cr_expect_eq(json_integer_value(json_object_get(w, "pid")), it_server_pid(srv));
  json_decref(arr);
  cr_assert_eq(it_mq(&out, "stats", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  w = json_array_get(arr, 0);
  cr_expect_eq(json_integer_value(json_object_get(json_object_get(w, "jobs"), "SUCCESS_24h")), 3);
  cr_expect_eq(json_integer_value(json_object_get(w, "queue_depth")), 0);
  if (it_queue_is_dir() || it_queue_is_table()) /* no consumers to count: unknown */
    cr_expect(json_is_null(json_object_get(w, "consumers")));
  else
    cr_expect_eq(json_integer_value(json_object_get(w, "consumers")), 1);
  cr_expect_eq(json_integer_value(json_object_get(w, "live_workers")), 1);
  json_decref(arr);
  it_server_stop(srv);
  /* a stopped server says so */
  cr_assert_eq(it_mq(&out, "workers", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(json_array_get(arr, 0), "state")), "stopped");
  json_decref(arr);
}

Test(admin, pause_holds_jobs_back_and_resume_runs_them) {
  char *proc = it_name("pause"), *out;
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  long ready, unacked;
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0, "no confirmation: %s", out);
  cr_expect(strstr(out, "paused") != NULL, "%s", out);
  cr_expect(it_server_wait_log(srv, "paused by an operator", 5000));
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", "--count",
                     "3", "--job-id", "held", NULL),
               0);
  /* the broker keeps them: no consumer while paused */
  for (int i = 0; i < 100; i++) {
    it_queue_counts(proc, &ready, &unacked);
    if (ready == 3)
      break;
    usleep(50 * 1000);
  }
  cr_expect_eq(ready, 3);
  /* (their rows are QUEUED from their submission) */
  cr_expect_eq(
      it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state <> 'QUEUED' OR tries > 0", 0), 0,
      "a job ran while paused");
  cr_expect_eq(it_sql_long(it_fmt("SELECT count(*) FROM mqproc_audit WHERE action = 'pause'"
                                  " AND target = '%s'",
                                  proc),
                           0),
               1);
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0, "%s", out);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "3"));
  it_server_stop(srv);
}

Test(admin, cancel_stops_a_running_job_and_its_result_says_cancelled) {
  char *proc = it_name("cancel"), *results = it_fmt("%s-results", proc), *out;
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *env[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *srv;
  it_msg_t m;
  pid_t sup;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, env);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--result-queue", results, "--job-id", "long-one", NULL),
               0);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'long-one'", "RUNNING"));
  cr_assert(it_server_wait_log(srv, "try 1 started", WAIT_MS));
  sup = it_supervisor_of(it_server_pid(srv));
  cr_assert_eq(it_mq(&out, "jobs", "cancel", "long-one", NULL), 0, "%s", out);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'long-one'", "CANCELLED"));
  cr_assert(it_get(results, WAIT_MS, &m), "no result message");
  cr_expect(strstr(m.body, "CANCELLED") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect(sup == 0 || kill(sup, 0) != 0, "the try's process is still there");
  /* a job not delivered yet: cancelled with its processor, acked without running */
  cr_assert_eq(it_mq(&out, "jobs", "cancel", "not-yet", "--processor", proc, NULL), 0);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--result-queue", results, "--job-id", "not-yet", NULL),
               0);
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the job cancelled before delivery");
  cr_expect(strstr(m.body, "CANCELLED") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'not-yet'", 0), 0);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = 'cancel'", 0), 2);
  it_open_gate(gate);
  it_server_stop(srv);
}

Test(admin, retry_republishes_failed_jobs_and_keeps_their_history) {
  char *proc = it_name("retry"), *out;
  const char *env[] = {"PROC_FAIL_MATCH=bad", NULL};
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, env);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "bad", "--count", "2", "--wait", NULL),
               1, "FAILED jobs: exit 1");
  it_server_stop(srv);
  /* the dry run counts, --yes acts */
  cr_assert_eq(it_mq(&out, "jobs", "retry", "--state", "FAILED", "--processor", proc, NULL), 0);
  cr_expect(strstr(out, "would retry 2 job(s)") != NULL, "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'FAILED'", 0), 2);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL); /* fixed: no failures now */
  cr_assert_eq(
      it_mq(&out, "jobs", "retry", "--state", "FAILED", "--processor", proc, "--yes", NULL), 0);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "2"));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE NOT ok", 0), 2,
               "the failed tries are kept");
  cr_expect_eq(it_sql_long("SELECT min(attempt) FROM mqproc_jobs", 0), 2);
  cr_expect_eq(it_sql_long("SELECT rows_affected FROM mqproc_audit WHERE action = 'retry'", 0), 2);
  it_server_stop(srv); /* (its outbox sweep would send the row marked below) */
  /* purge: a dry run, then nothing is older than a day */
  cr_assert_eq(it_mq(&out, "jobs", "purge", "--older-than", "0s", "--force", NULL), 0);
  cr_expect(strstr(out, "would purge 2") != NULL, "%s", out);
  cr_assert_eq(it_mq(&out, "jobs", "purge", "--older-than", "1d", "--yes", NULL), 0);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 2);
  /* under an hour only with --force; a duration that would overflow is refused */
  cr_expect_eq(it_mq(&out, "jobs", "purge", "--older-than", "0s", "--yes", NULL), 2);
  cr_expect_eq(it_mq(&out, "jobs", "purge", "--older-than", "213503982334602d", "--yes", NULL), 2);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 2);
  /* a row still in the outbox (an early-acked holder died before sending its result) stays */
  it_sql(it_q("UPDATE mqproc_jobs SET delivery_acked = true, result_published = false"
              " WHERE job_id = 'bad-1'",
              "UPDATE mqproc_jobs SET delivery_acked = 1, result_published = 0"
              " WHERE job_id = 'bad-1'"),
         0);
  cr_assert_eq(it_mq(&out, "jobs", "purge", "--older-than", "0s", "--force", "--yes", NULL), 0);
  cr_expect_str_eq(it_sql("SELECT min(job_id) || ':' || count(*) FROM mqproc_jobs", 0), "bad-1:1",
                   "only the outbox's row is left");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = 'purge'", 0), 2);
}

/* RabbitMQ returns a job no queue is bound for: submit fails. A dir:// spool makes the
 * queue instead, and the job waits there for the first server, as it does in a table
 * queue (a queue is its rows). */
Test(admin, submit_of_a_job_for_no_queue_fails_on_amqp_and_waits_on_dir) {
  char *out, *proc = it_name("nobody-listens");
  long ready = -1, unacked = -1;
  int rc = it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", NULL);
  if (!it_queue_is_dir() && !it_queue_is_table()) {
    cr_expect_eq(rc, 1);
    return;
  }
  cr_expect_eq(rc, 0);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1);
  cr_expect_eq(unacked, 0);
}

/* kill -9 of a server holding a job: another server on this host sees its pid gone and
 * runs the job at once, not after the 30 s lease. */
Test(admin, a_killed_servers_job_runs_again_elsewhere_at_once) {
  char *proc = it_name("takeover"), *marker = it_fmt("%s/marker", it_tmpdir()), *out;
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *env1[] = {it_fmt("PROC_GATE=%s", gate), it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *env2[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *a, *b;
  if (it_queue_is_table()) /* test_table_queue.c: a_killed_holders_messages_come_back_... */
    cr_skip_test("a table queue gives a dead server's messages back at their deadline");
  a = it_server_start(proc, it_proc("proc.sh"), NULL, env1);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "victim", NULL),
               0);
  cr_assert(it_server_wait_log(a, "try 1 started", WAIT_MS));
  b = it_server_start(proc, it_proc("proc.sh"), NULL, env2);
  kill(it_supervisor_of(it_server_pid(a)), SIGKILL);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, 5000), -1); /* reaped: its pid is gone */
  cr_assert(it_server_wait_log(b, "is gone; taking the job over", 10000));
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'victim'", "SUCCESS"));
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'victim'", 0), 2);
  cr_expect_str_eq(
      it_sql(it_fmt("SELECT state FROM mqproc_workers WHERE pid = %d", (int)it_server_pid(a)), 0),
      "dead");
  it_open_gate(gate);
  it_server_stop(a);
  it_server_stop(b);
}

/* The commands without their servers: a clear message and exit 1, not a hang or a crash. */
Test(admin, commands_without_a_database_or_broker_fail_clearly) {
  const char *env[] = {"MQPROC_DATABASE=postgresql://nobody:secret@127.0.0.1:1/none",
                       "MQPROC_QUEUE=amqp://guest:secret@127.0.0.1:1/", NULL};
  const char *list[] = {it_mqproc_bin(), "jobs", "list", NULL};
  const char *submit[] = {
      it_mqproc_bin(), "submit", "--processor", "p", "--mets", "/m", "-I", "IN", NULL};
  const char *bad[] = {it_mqproc_bin(), "jobs", "list", "--no-such-option", NULL};
  const char *nojob[] = {it_mqproc_bin(), "submit", "--processor", "p", "-I", "IN", NULL};
  cr_expect_eq(it_run(list, env, NULL, NULL), 1);
  cr_expect_eq(it_run(submit, env, NULL, NULL), 1);
  cr_expect_eq(it_run(bad, env, NULL, NULL), 2);
  cr_expect_eq(it_run(nojob, env, NULL, NULL), 2, "no --mets or --workspace-id");
}

/* An SQLite store the commands cannot use: its directory is missing, or the file has no
 * mqproc schema. Exit 1 with the reason, and nothing created. */
Test(admin, commands_on_an_unusable_sqlite_store_fail_with_the_reason) {
  char *missing = it_fmt("%s/no-such-dir/jobs.db", it_tmpdir());
  char *empty = it_fmt("%s/empty.db", it_tmpdir()), *out;
  char *absent = it_fmt("%s/typo.db", it_tmpdir());
  const char *cmd = "\"$0\" jobs list --database \"sqlite://$1\" 2>&1";
  const char *a[] = {"/bin/sh", "-c", cmd, it_mqproc_bin(), missing, NULL};
  const char *b[] = {"/bin/sh", "-c", cmd, it_mqproc_bin(), empty, NULL};
  const char *c[] = {"/bin/sh", "-c", cmd, it_mqproc_bin(), absent, NULL};
  FILE *f = fopen(empty, "w");
  cr_assert_not_null(f);
  fclose(f);
  cr_expect_eq(it_run(a, NULL, NULL, &out), 1);
  cr_expect(strstr(out, "no database at") != NULL && strstr(out, "no-such-dir") != NULL, "%s", out);
  cr_expect_eq(access(it_fmt("%s/no-such-dir", it_tmpdir()), F_OK), -1, "a directory was made");
  cr_expect_eq(it_run(b, NULL, NULL, &out), 1);
  cr_expect(strstr(out, "mqproc migrate") != NULL, "%s", out);
  cr_expect_eq(it_run(c, NULL, NULL, &out), 1);
  cr_expect(strstr(out, "no database at") != NULL, "%s", out);
  cr_expect_eq(access(absent, F_OK), -1, "a database file was made by a read");
}

Test(admin, submit_refuses_a_message_the_servers_would_dead_letter) {
  char *proc = it_name("badsub"), *out;
  long ready, unacked;
  it_declare(proc);
  cr_expect_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", NULL), 2,
               "no input group: must be refused");
  cr_expect_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--callback", "ftp://x/", NULL),
               2, "a non-http callback: must be refused");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 0, "nothing may have been published");
}
