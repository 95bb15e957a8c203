/* Integration: a job exists from its submission (issue 32 item 6: `mqproc submit` writes
 * its row QUEUED before the message, so `jobs show`, `stats` and `jobs cancel ID` see it,
 * and a cancelled job never runs), and `mqproc processing-api`, OCR-D's Processing Server
 * API over the job table (issue 33): every route and error, against real servers. Runs on
 * the default pair and on MQPROC_TEST_QUEUE=dir MQPROC_TEST_STORE=sqlite. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(processing_api, .fini = it_cleanup);

/* The job's row as `mqproc jobs show ID --json` prints it (NULL when it says no job). */
static json_t *job_shown(const char *id) {
  char *out;
  if (it_mq(&out, "jobs", "show", id, "--json", NULL) != 0)
    return NULL;
  return it_json(out);
}

static const char *field(json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* ---- a job's row from its submission (issue 32 item 6) -------------------------------- */

Test(processing_api, a_submitted_job_is_queued_in_the_table_before_any_server_sees_it) {
  char *proc = it_name("rowq"), *out;
  json_t *job, *stats;
  it_declare(proc);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/data/ws/mets.xml", "-I", "IN",
                     "--job-id", "rowq-1", "--priority", "3", "--header", "tenant=acme", NULL),
               0);
  cr_assert_not_null(job = job_shown("rowq-1"), "jobs show: no job after submit");
  cr_expect_str_eq(field(job, "state"), "QUEUED");
  cr_expect_str_eq(field(job, "processor_name"), proc);
  json_decref(job);
  /* the broker confirmed the message: no sweep sends it again */
  cr_expect_eq(it_sql_long(it_q("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'rowq-1'"
                                " AND NOT republish AND lease_until IS NULL AND attempt = 0"
                                " AND request_body IS NOT NULL AND priority = 3"
                                " AND headers->>'tenant' = 'acme'",
                                "SELECT count(*) FROM mqproc_jobs WHERE job_id = 'rowq-1'"
                                " AND NOT republish AND lease_until IS NULL AND attempt = 0"
                                " AND request_body IS NOT NULL AND priority = 3"
                                " AND json_extract(headers, '$.tenant') = 'acme'"),
                           0),
               1);
  cr_assert_eq(it_mq(&out, "stats", "--processor", proc, "--json", NULL), 0);
  stats = it_json(out);
  cr_expect_eq(json_integer_value(
                   json_object_get(json_object_get(json_array_get(stats, 0), "jobs"), "QUEUED")),
               1, "%s", out);
  json_decref(stats);
}

Test(processing_api, a_queued_job_is_cancelled_by_id_alone_and_never_runs) {
  char *proc = it_name("rowc"), *out;
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NULL};
  it_server_t *srv;
  json_t *job;
  it_declare(proc);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/data/ws/mets.xml", "-I", "IN",
                     "--job-id", "rowc-1", NULL),
               0);
  cr_assert_eq(it_mq(&out, "jobs", "cancel", "rowc-1", NULL), 0, "cancel by id alone failed");
  cr_assert_not_null(job = job_shown("rowc-1"));
  cr_expect_str_eq(field(job, "state"), "CANCELLED");
  json_decref(job);
  /* its message is still queued: the server that gets it acks it without running it */
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), NULL, envp);
  cr_expect(it_server_wait_log(srv, "rowc-1: already CANCELLED", WAIT_MS), "not seen as cancelled");
  cr_expect(it_queue_settles(proc, WAIT_MS));
  cr_expect_eq(access(it_fmt("%s/rowc-1.argv", it_tmpdir()), F_OK), -1, "the job ran");
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'rowc-1'", 0), 0);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'rowc-1'", 0), "CANCELLED");
  it_server_stop(srv);
}

Test(processing_api, a_submitted_job_runs_once_from_its_row) {
  char *proc = it_name("rowr");
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  char *out;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "rowr", "--count", "3", "--wait", "--timeout", "60", NULL),
               0);
  /* each ran once, from the row submit wrote (claimed at attempt 1, one delivery) */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'"
                           " AND attempt = 1 AND deliveries = 1 AND NOT republish",
                           0),
               3);
  cr_expect(it_queue_settles(proc, WAIT_MS));
  it_server_stop(srv);
}

Test(processing_api, a_row_whose_submitter_died_before_publishing_is_sent_by_the_sweep) {
  char *proc = it_name("rowd");
  const char *extra[] = {"--lease=2", NULL};
  char *body = it_job_json(proc, "rowd-1", NULL);
  it_server_t *srv;
  /* what a submitter leaves when it dies between its row and its message */
  it_sql(it_q("INSERT INTO mqproc_jobs (job_id, processor_name, state, republish, lease_until,"
              " request_body) VALUES ('rowd-1', $1, 'QUEUED', true, now() - interval '1 second',"
              " convert_to($2, 'UTF8'))",
              "INSERT INTO mqproc_jobs (job_id, processor_name, state, republish, lease_until,"
              " request_body) VALUES ('rowd-1', ?1, 'QUEUED', 1, 0, CAST(?2 AS BLOB))"),
         2, proc, body);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  cr_expect(it_server_wait_log(srv, "rowd-1: its holder is gone; republished", WAIT_MS));
  cr_expect(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'rowd-1'", "SUCCESS"));
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'rowd-1'", 0), 1);
  it_server_stop(srv);
}

Test(processing_api, a_message_another_program_published_still_runs) {
  char *proc = it_name("rowo");
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  it_publish(proc, it_job_json(proc, "rowo-1", NULL));
  cr_expect(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'rowo-1'", "SUCCESS"));
  it_server_stop(srv);
}
