/* Integration: a processing server against the real RabbitMQ and PostgreSQL — the happy
 * path, retries and requeues, dead letters, duplicates, results and callbacks. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_listener.h"

#define WAIT_MS 30000

TestSuite(server, .fini = it_cleanup);

static char *env_kv(const char *k, const char *v) {
  return it_fmt("%s=%s", k, v);
}

static char *marker_path(void) {
  return it_fmt("%s/marker", it_tmpdir());
}

/* Publishes a job that succeeds and waits for its result: proves the server still serves
 * and that everything published before it was handled (prefetch 1, one queue). */
static void expect_still_serving(const char *proc, const char *results) {
  char extra[256], *job;
  it_msg_t m;
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  job = it_job_json(proc, "sentinel-ok", extra);
  it_publish(proc, job);
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the sentinel job");
  cr_expect(strstr(m.body, "sentinel-ok") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s",
            m.body);
  it_msg_free(&m);
}

Test(server, hundred_json_and_hundred_yaml_jobs_succeed) {
  char *proc = it_name("bulk"), *results = it_name("bulk-result");
  char *marker = marker_path();
  const char *envp[] = {env_kv("PROC_MARKER", marker), NULL};
  it_server_t *srv;
  long ready, unacked;
  int json_results = 0, yaml_results = 0;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  for (int i = 0; i < 100; i++) {
    char id[64], extra[256], *body;
    snprintf(id, sizeof(id), "json-%03d", i);
    snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
    body = it_job_json(proc, id, extra);
    it_publish(proc, body);
    snprintf(id, sizeof(id), "yaml-%03d", i);
    body = it_job_yaml(proc, id, results);
    it_publish(proc, body);
  }
  for (int i = 0; i < 200; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d results arrived", i);
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    if (strncmp(m.body, "{", 1) == 0)
      json_results++;
    else if (strncmp(m.body, "job_id: ", 8) == 0)
      yaml_results++;
    it_msg_free(&m);
  }
  cr_expect_eq(json_results, 100, "JSON results encoded like their requests");
  cr_expect_eq(yaml_results, 100, "YAML results encoded like their requests");
  it_server_stop(srv); /* a result can arrive before its confirm marks it published */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND "
                           "result_published AND attempt = 1 AND tries = 1",
                           0),
               200);
  cr_expect_eq(it_file_lines(marker), 200, "each job ran exactly once");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 0);
  cr_expect_eq(unacked, 0);
  it_queue_counts(results, &ready, &unacked);
  cr_expect_eq(ready, 0, "no extra result messages");
}

Test(server, always_failing_job_retries_requeues_then_dead_letters) {
  char *proc = it_name("fail"), *results = it_name("fail-result");
  char *dead, *marker = marker_path(), extra[256], *body;
  const char *envp[] = {env_kv("PROC_MARKER", marker), env_kv("PROC_FAIL_MATCH", "always-fail"),
                        NULL};
  it_server_t *srv;
  it_msg_t m;
  dead = it_fmt("%s.dead", proc);
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  body = it_job_json(proc, "always-fail", extra);
  it_publish(proc, body);
  cr_assert(it_get(dead, WAIT_MS, &m), "the failed job did not reach %s", dead);
  cr_expect_str_eq(m.body, body, "dead letter keeps the original body");
  cr_expect(strstr(m.reason, "FAILED after 2 attempts") != NULL, "reason: %s", m.reason);
  cr_expect(strstr(m.reason, "status 3") != NULL, "reason: %s", m.reason);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m), "no FAILED result message");
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'always-fail'", 0),
                   "FAILED");
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'always-fail'", 0), 2);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'always-fail'", 0), 8);
  cr_expect_eq(it_sql_long("SELECT requeues FROM mqproc_jobs WHERE job_id = 'always-fail'", 0), 1);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'always-fail' "
                           "AND NOT ok AND exit_code = 3 AND error LIKE '%status 3%'",
                           0),
               8, "every try recorded with its error");
  cr_expect_eq(it_sql_long("SELECT count(DISTINCT attempt) FROM mqproc_job_tries "
                           "WHERE job_id = 'always-fail'",
                           0),
               2);
  cr_expect_eq(it_file_lines(marker), 8, "4 tries, a requeue, 4 tries");
  expect_still_serving(proc, results);
  it_publish(proc, body); /* a FAILED job published again is not run again */
  cr_assert(it_get(dead, WAIT_MS, &m));
  cr_expect(strstr(m.reason, "job is already FAILED (attempt 2); not run again") != NULL, "%s",
            m.reason);
  it_msg_free(&m);
  cr_expect_eq(it_file_lines(marker), 9, "only the sentinel ran");
  it_server_stop(srv);
}

Test(server, the_final_exit_code_fails_the_job_at_once) {
  char *proc = it_name("final"), *results = it_name("final-result");
  char *dead = it_fmt("%s.dead", proc), *marker = marker_path(), *body;
  const char *envp[] = {env_kv("PROC_MARKER", marker), env_kv("PROC_FAIL_MATCH", "hopeless"), NULL};
  const char *extra[] = {"--final-exit-code=3", NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  body = it_job_json(proc, "hopeless", it_fmt("{\"result_queue_name\": \"%s\"}", results));
  it_publish(proc, body);
  cr_assert(it_get(dead, WAIT_MS, &m), "the failed job did not reach %s", dead);
  cr_expect(strstr(m.reason, "FAILED for good (final exit code 3)") != NULL, "reason: %s",
            m.reason);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m), "no FAILED result message");
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state || ' ' || attempt || ' ' || tries || ' ' || requeues"
                          " FROM mqproc_jobs WHERE job_id = 'hopeless'",
                          0),
                   "FAILED 1 1 0", "one try: no local retry, no requeue");
  cr_expect_eq(it_file_lines(marker), 1);
  expect_still_serving(proc, results); /* other jobs (exit 0) are unaffected */
  it_server_stop(srv);
}

Test(server, a_flaky_job_succeeds_on_a_local_retry) {
  char *proc = it_name("flaky"), *results = it_name("flaky-result");
  char extra[256], *body;
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, NULL, NULL, NULL); /* the example C processor */
  snprintf(extra, sizeof(extra),
           "{\"result_queue_name\": \"%s\", \"parameters\": {\"fail_tries\": 2}}", results);
  body = it_job_json(proc, "flaky-1", extra);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'flaky-1'", 0), 3);
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'flaky-1'", 0), 1);
  cr_expect_eq(it_sql_long("SELECT requeues FROM mqproc_jobs WHERE job_id = 'flaky-1'", 0), 0);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'flaky-1' AND "
                           "error LIKE 'failing on purpose%'",
                           0),
               2, "the C processor's own error text is recorded");
  it_server_stop(srv);
}

Test(server, a_job_published_twice_runs_once) {
  char *proc = it_name("dup"), *results = it_name("dup-result");
  char *marker = marker_path(), extra[256], *body;
  const char *envp[] = {env_kv("PROC_MARKER", marker), NULL};
  it_server_t *srv;
  it_msg_t m;
  long ready, unacked;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  body = it_job_json(proc, "dup-1", extra);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  it_publish(proc, body); /* again, after it succeeded */
  expect_still_serving(proc, results);
  cr_expect_eq(it_file_lines(marker), 2, "dup-1 once, then the sentinel");
  cr_expect_eq(it_server_count_log(srv, "job dup-1: already SUCCESS; acked without running"), 1);
  cr_expect_eq(it_sql_long("SELECT deliveries FROM mqproc_jobs WHERE job_id = 'dup-1'", 0), 2);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'dup-1'", 0), 1);
  it_queue_counts(results, &ready, &unacked);
  cr_expect_eq(ready, 0, "the result was not published a second time");
  cr_expect(it_queue_settles(proc, WAIT_MS), "the job queue keeps a message");
  it_server_stop(srv);
}

Test(server, an_unpublished_result_is_sent_on_redelivery_without_running_again) {
  char *proc = it_name("replay"), *results = it_name("replay-result");
  char *marker = marker_path(), extra[256], *body;
  const char *envp[] = {env_kv("PROC_MARKER", marker), NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  body = it_job_json(proc, "replay-1", extra);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect_str_eq(m.message_id, "replay-1");
  cr_expect_str_eq(m.attempt, "1");
  it_msg_free(&m);
  it_server_stop(srv); /* the row's outbox mark is cleared once everything went out */
  /* as if the result had not gone out, and a copy of the job came again */
  it_sql("UPDATE mqproc_jobs SET result_published = false WHERE job_id = 'replay-1'", 0);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m), "the result was not sent again");
  cr_expect(strstr(m.body, "replay-1") != NULL && strstr(m.body, "SUCCESS") != NULL);
  cr_expect_str_eq(m.message_id, "replay-1", "a re-send is the same message");
  cr_expect_str_eq(m.attempt, "1", "the attempt that recorded the outcome, not a new one");
  it_msg_free(&m);
  expect_still_serving(proc, results); /* replay-1 was settled before the sentinel ran */
  cr_expect_eq(it_file_lines(marker), 2, "the processor ran once for replay-1, then the sentinel");
  cr_expect_str_eq(it_sql("SELECT CASE WHEN result_published THEN 'true' ELSE 'false' END FROM "
                          "mqproc_jobs WHERE job_id = "
                          "'replay-1'",
                          0),
                   "true");
  it_server_stop(srv);
}

static void expect_dead(const char *dead, const char *reason_part) {
  it_msg_t m;
  cr_assert(it_get(dead, WAIT_MS, &m), "nothing dead-lettered (expected '%s')", reason_part);
  cr_expect(strstr(m.reason, reason_part) != NULL, "reason '%s' lacks '%s'", m.reason, reason_part);
  it_msg_free(&m);
}

Test(server, bad_messages_are_dead_lettered_with_a_reason_and_the_server_keeps_serving) {
  char *proc = it_name("bad"), *results = it_name("bad-result"), *dead;
  const char *extra[] = {"--max-message-size=2048", NULL};
  it_server_t *srv;
  char big[4096], *body;
  dead = it_fmt("%s.dead", proc);
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_publish(proc, "job_id: [unclosed\n");
  expect_dead(dead, "undecodable message");
  it_publish(proc, "{\"processor_name\": \"x\", \"input_file_grps\": [\"A\"]}");
  expect_dead(dead, "job_id");
  body = it_job_json("ocrd-someone-else", "misrouted-1", NULL);
  it_publish(proc, body);
  expect_dead(dead, "this server runs");
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  it_publish(proc, big);
  expect_dead(dead, "exceeds the limit of 2048 bytes");
  it_publish_len(proc, "\x00\x01\x02", 3);
  expect_dead(dead, "undecodable message");
  expect_still_serving(proc, results);
  /* (dir://: the file over the limit moved into failed/ unread, so the table has no copy) */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0),
               it_queue_is_dir() ? 4 : 5, "every dead letter is recorded");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters WHERE job_id = "
                           "'misrouted-1' AND reason LIKE '%processor_name%'",
                           0),
               1);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'misrouted-1'", 0), 0,
               "a misrouted copy does not decide its job's fate");
  it_server_stop(srv);
}

Test(server, an_unroutable_result_is_recorded_and_the_job_still_succeeds) {
  char *proc = it_name("unroutable"), *body;
  const char *extra[] = {"--no-declare-result-queues", NULL};
  it_server_t *srv;
  if (it_queue_is_table())
    cr_skip_test("a table queue routes every message: a queue is its rows");
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  body = it_job_json(proc, "unroutable-1", "{\"result_queue_name\": \"no-such-queue-xyz\"}");
  it_publish(proc, body);
  cr_assert(it_server_wait_log(srv, "result message unroutable", WAIT_MS));
  cr_assert(it_server_wait_log(srv, "job unroutable-1: SUCCESS", WAIT_MS));
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'unroutable-1'", 0),
                   "SUCCESS");
  it_server_stop(srv); /* the delivery was settled before the server could stop */
  cr_expect_str_eq(it_sql("SELECT CASE WHEN result_published THEN 'true' ELSE 'false' END FROM "
                          "mqproc_jobs WHERE job_id = "
                          "'unroutable-1'",
                          0),
                   "false");
  cr_expect(strstr(it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = 'unroutable-1'", 0),
                   "no queue bound to 'no-such-queue-xyz'") != NULL);
}

Test(server, callbacks_receive_the_result_and_a_failing_callback_does_not_fail_the_job) {
  char *proc = it_name("cb"), *results = it_name("cb-result");
  test_http_t *ok = test_http_start(200), *bad = test_http_start(500);
  char *ok_url = test_http_url(ok, "/cb"), *bad_url = test_http_url(bad, "/result_callback");
  const char *extra[] = {"--callback-retries=1", NULL};
  char json[1024], *body, *ctype, *got;
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  snprintf(json, sizeof(json),
           "{\"result_queue_name\": \"%s\", \"callback_url\": \"%s\", "
           "\"internal_callback_url\": \"%s\"}",
           results, ok_url, bad_url);
  body = it_job_json(proc, "cb-1", json);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  cr_assert_eq(test_http_wait(ok, 1, WAIT_MS), 1);
  cr_assert_eq(test_http_wait(bad, 2, WAIT_MS), 2, "a failed callback is retried");
  got = test_http_body(ok, 0);
  ctype = test_http_header(ok, 0, "Content-Type");
  cr_expect_str_eq(got, "{\"job_id\":\"cb-1\",\"path_to_mets\":\"/data/ws1/mets.xml\","
                        "\"state\":\"SUCCESS\",\"workspace_id\":\"\"}");
  cr_expect_str_eq(ctype, "application/json");
  free(got);
  free(ctype);
  expect_still_serving(proc, results); /* cb-1 was acked before the sentinel ran */
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'cb-1'", 0), "SUCCESS");
  cr_expect_str_eq(it_sql("SELECT callback_state FROM mqproc_jobs WHERE job_id = 'cb-1'", 0),
                   "FAILED");
  cr_expect(strstr(it_sql("SELECT callback_error FROM mqproc_jobs WHERE job_id = 'cb-1'", 0),
                   "500") != NULL);
  it_server_stop(srv);
  test_http_stop(ok);
  test_http_stop(bad);
  free(ok_url);
  free(bad_url);
}

Test(server, a_command_gets_the_job_on_stdin_and_its_ids_in_the_environment) {
  char *proc = it_name("env"), *results = it_name("env-result");
  const char *envp[] = {env_kv("PROC_COPY", it_tmpdir()), NULL};
  char extra[256], *body, path[700], line[4096];
  it_server_t *srv;
  it_msg_t m;
  FILE *f;
  int have_id = 0, have_attempt = 0;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  body = it_job_yaml(proc, "stdin-1", results);
  it_publish(proc, body);
  cr_assert(it_get(results, WAIT_MS, &m));
  it_msg_free(&m);
  snprintf(path, sizeof(path), "%s/stdin-1.json", it_tmpdir());
  f = fopen(path, "r");
  cr_assert_not_null(f);
  cr_assert_not_null(fgets(line, sizeof(line), f));
  fclose(f);
  cr_expect(strstr(line, "\"page_id\":\"PHYS_0001..PHYS_0003\"") != NULL, "%s", line);
  cr_expect(strstr(line, "\"parameters\":{\"copy_files\":true}") != NULL, "%s", line);
  snprintf(path, sizeof(path), "%s/stdin-1.env", it_tmpdir());
  f = fopen(path, "r");
  cr_assert_not_null(f);
  while (fgets(line, sizeof(line), f) != NULL) {
    have_id |= strcmp(line, "MQPROC_JOB_ID=stdin-1\n") == 0;
    have_attempt |= strcmp(line, "MQPROC_ATTEMPT=1\n") == 0;
  }
  fclose(f);
  cr_expect(have_id && have_attempt);
  /* a small success keeps its output in the row: no log file (test_job_logs.c) */
  cr_expect(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'stdin-1' AND log_path "
                        "IS NULL AND log_text LIKE '%proc.sh: job stdin-1 %'",
                        0) == 1);
  it_server_stop(srv);
}

Test(server, a_processor_killed_by_a_signal_is_a_failed_try) {
  char *proc = it_name("sig"), *dead, *body;
  const char *envp[] = {env_kv("PROC_SIGNAL", "SEGV"), NULL};
  const char *extra[] = {"--retries=1", "--max-requeues=0", NULL};
  it_server_t *srv;
  it_msg_t m;
  dead = it_fmt("%s.dead", proc);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  body = it_job_json(proc, "sig-1", NULL);
  it_publish(proc, body);
  cr_assert(it_get(dead, WAIT_MS, &m));
  cr_expect(strstr(m.reason, "killed by signal 11") != NULL, "%s", m.reason);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'sig-1' AND "
                           "term_signal = 11",
                           0),
               2);
  it_server_stop(srv);
}
