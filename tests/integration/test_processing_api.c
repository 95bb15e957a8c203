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
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "ocrd_workspace.h"

#define WAIT_MS 30000
#define DUMMY MQPROC_BUILD_DIR "/tools/ocrd-dummy/ocrd-dummy"

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
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
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

/* ---- mqproc processing-api ------------------------------------------------------------ */

/* A request with a JSON body (NULL: none); the answer's status, *out the body. */
static int api_call(const it_api_t *a, const char *method, const char *path, const char *json,
                    char **out) {
  const char *args[] = {"-X", method, "-H", "Content-Type: application/json", "--data-binary",
                        json, NULL};
  const char *none[] = {"-X", method, NULL};
  return it_http_req(a->port, path, json != NULL ? args : none, out);
}

/* The "detail" of an error answer. */
static const char *detail(const char *body) {
  json_t *o = it_json(body);
  const char *d = it_fmt("%s", json_string_value(json_object_get(o, "detail")) != NULL
                                   ? json_string_value(json_object_get(o, "detail"))
                                   : "(none)");
  json_decref(o);
  return d;
}

/* A workspace of n pages in the test's directory: its METS path. */
static char *workspace(int n) {
  ows_page_t pages[8] = {{4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}, {4, 4}};
  char *dir = it_fmt("%s/ws", it_tmpdir());
  mkdir(dir, 0755);
  cr_assert_eq(ows_create(dir, pages, (size_t)n), 0);
  return it_fmt("%s/mets.xml", dir);
}

/* An ocrd-dummy server (an --exec OCR-D processor: its description comes from --dump-json)
 * for processor name, once it stored its description. */
static it_server_t *dummy_server(const char *name) {
  it_server_t *s = it_server_start(name, DUMMY, NULL, NULL);
  cr_assert(it_server_wait_log(s, "stored its ocrd-tool description", WAIT_MS), "no tool stored");
  return s;
}

/* POST /processor/run/P with body; the job id (answer 200 asserted). */
static char *run_job(const it_api_t *a, const char *proc, const char *body,
                     const char *want_state) {
  char *out;
  json_t *o;
  char *id;
  cr_assert_eq(api_call(a, "POST", it_fmt("/processor/run/%s", proc), body, &out), 200, "%s", out);
  o = it_json(out);
  id = it_fmt("%s", json_string_value(json_object_get(o, "job_id")));
  if (want_state != NULL)
    cr_expect_str_eq(json_string_value(json_object_get(o, "state")), want_state, "%s", out);
  json_decref(o);
  return id;
}

static int job_becomes(const char *id, const char *state) {
  return it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", id), state);
}

Test(processing_api, discovery_lists_the_processor_and_prints_its_tool) {
  char *proc = it_name("dummy"), *out;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  json_t *o;
  cr_assert_eq(api_call(&a, "GET", "/", NULL, &out), 200);
  o = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(o, "message")),
                   "The home page of the OCR-D Processing Server");
  json_decref(o);
  cr_assert_eq(api_call(&a, "GET", "/processor", NULL, &out), 200);
  cr_expect(strstr(out, it_fmt("\"%s\"", proc)) != NULL, "%s", out);
  cr_assert_eq(api_call(&a, "GET", it_fmt("/processor/info/%s", proc), NULL, &out), 200);
  o = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(o, "executable")), "ocrd-dummy");
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(o, "parameters"), "copy_files"), "type")),
                   "boolean");
  json_decref(o);
  cr_expect_eq(api_call(&a, "GET", "/processor/info/ocrd-nothing-here", NULL, &out), 404);
  cr_expect_str_eq(detail(out), "Processing Worker 'ocrd-nothing-here' not found.");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(processing_api, a_job_runs_to_success_and_its_state_and_log_read_back) {
  char *proc = it_name("dummy"), *mets = workspace(3), *out, *id;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  json_t *o;
  id = run_job(&a, proc,
               it_fmt("{\"path_to_mets\": \"%s\", \"description\": \"OCR-D Network client "
                      "request\", \"input_file_grps\": [\"OCR-D-IMG\"], \"output_file_grps\": "
                      "[\"OCR-D-DUMMY\"], \"page_id\": \"PHYS_0001..PHYS_0002\", \"parameters\": "
                      "{\"copy_files\": true}}",
                      mets),
               "QUEUED");
  cr_assert(job_becomes(id, "SUCCESS"));
  cr_assert_eq(api_call(&a, "GET", it_fmt("/processor/job/%s", id), NULL, &out), 200);
  o = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "SUCCESS");
  cr_expect_str_eq(json_string_value(json_object_get(o, "processor_name")), proc);
  cr_expect_str_eq(json_string_value(json_object_get(o, "page_id")), "PHYS_0001..PHYS_0002");
  cr_expect_str_eq(json_string_value(json_array_get(json_object_get(o, "input_file_grps"), 0)),
                   "OCR-D-IMG");
  /* a first try that succeeded small keeps its output in the row: no file, no path */
  cr_expect(json_object_get(o, "log_file_path") == NULL ||
            json_is_string(json_object_get(o, "log_file_path")));
  cr_expect_null(json_object_get(o, "workspace_id"), "nulls are left out");
  json_decref(o);
  cr_expect(strstr(it_read_file(mets), "OCR-D-DUMMY_0002") != NULL, "no output in the METS");
  cr_expect(strstr(it_read_file(mets), "OCR-D-DUMMY_0003") == NULL, "page 3 was not asked for");
  cr_assert_eq(api_call(&a, "GET", it_fmt("/processor/log/%s", id), NULL, &out), 200);
  cr_expect(strstr(out, "PHYS_0002") != NULL, "%s", out);
  /* a worker's callback (OCR-D's PYResultMessage) is answered 200 with a null body */
  cr_assert_eq(api_call(&a, "POST", "/result_callback",
                        it_fmt("{\"job_id\": \"%s\", \"state\": \"SUCCESS\", \"path_to_mets\": "
                               "\"%s\"}",
                               id, mets),
                        &out),
               200, "%s", out);
  cr_expect_str_eq(out, "null\n");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(processing_api, each_error_answers_as_ocrd_does) {
  char *proc = it_name("dummy"), *mets = workspace(1), *out, *queued = it_name("noserver");
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  const char *ok_body =
      it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"]}", mets);
  json_t *o;
  /* no queue, no server */
  cr_expect_eq(api_call(&a, "POST", "/processor/run/ocrd-nothing-here", ok_body, &out), 422);
  cr_expect_str_eq(detail(out), "Processing Worker 'ocrd-nothing-here' not found.");
  /* a queue, but neither a server nor a description: unknown (a table queue is its rows:
     one exists once a server served it or a message waits in it) */
  if (it_queue_is_table())
    it_publish(queued, it_job_json(queued, "waits", NULL));
  else
    it_declare(queued);
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", queued), ok_body, &out), 404);
  cr_expect_str_eq(detail(out), it_fmt("Processing Worker '%s' not found.", queued));
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                               " \"job_id\": \"mine\"}",
                               mets),
                        &out),
               422);
  cr_expect_str_eq(detail(out), "Processing request job id field is set but must not be: mine");
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        "{\"input_file_grps\": [\"OCR-D-IMG\"]}", &out),
               422);
  cr_expect(strstr(detail(out), "Either 'path_to_mets' or 'workspace_id' must be provided") !=
            NULL);
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        it_fmt("{\"path_to_mets\": \"%s\", \"workspace_id\": \"w\","
                               " \"input_file_grps\": [\"OCR-D-IMG\"]}",
                               mets),
                        &out),
               422);
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                               " \"parameters\": {\"copy_files\": \"yes\", \"foo\": 1}}",
                               mets),
                        &out),
               400);
  cr_expect_str_eq(detail(out), it_fmt("Failed to validate processing job input against the "
                                       "tool json of processor: %s\n[\"[] Additional properties "
                                       "are not allowed ('foo' was unexpected)\", \"[copy_files] "
                                       "'yes' is not of type 'boolean'\"]",
                                       proc));
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        "{\"path_to_mets\": \"/no/such/mets.xml\", \"input_file_grps\": [\"A\"]}",
                        &out),
               404);
  cr_expect_str_eq(detail(out), "Mets file path not existing: /no/such/mets.xml");
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        "{\"workspace_id\": \"ws-1\", \"input_file_grps\": [\"A\"]}", &out),
               404);
  cr_expect_str_eq(detail(out), "Workspace with id 'ws-1' not found in the DB.");
  /* FastAPI's body validation: 422 with its own keys (and the detail OCR-D's client reads) */
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc),
                        it_fmt("{\"path_to_mets\": \"%s\"}", mets), &out),
               422);
  o = it_json(out);
  cr_expect_eq(json_integer_value(json_object_get(o, "status_code")), 10422, "%s", out);
  json_decref(o);
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc), "not json", &out), 422);
  cr_expect_eq(api_call(&a, "GET", "/processor/job/no-such-job", NULL, &out), 422);
  cr_expect_str_eq(detail(out), "Processing job with id 'no-such-job' not existing.");
  cr_expect_eq(api_call(&a, "GET", "/processor/log/no-such-job", NULL, &out), 422);
  cr_expect_eq(api_call(&a, "POST", "/result_callback",
                        "{\"job_id\": \"no-such-job\", \"state\": \"SUCCESS\"}", &out),
               404);
  cr_expect_eq(api_call(&a, "GET", "/no/such/route", NULL, &out), 404);
  cr_expect_eq(api_call(&a, "DELETE", "/processor", NULL, &out), 405);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0, "an error left a job");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(processing_api, a_body_over_the_limit_is_refused) {
  char *big = malloc(4096), *out;
  it_api_t a = it_api_start((const char *const[]){"--max-body", "2048", NULL});
  memset(big, 'x', 4095);
  big[4095] = '\0';
  cr_expect_eq(api_call(&a, "POST", "/processor/run/ocrd-x", big, &out), 413);
  cr_expect(strstr(out, "larger than 2048 bytes") != NULL, "%s", out);
  free(big);
  it_server_stop(a.proc);
}

Test(processing_api, the_submitting_routes_need_the_token_when_one_is_given) {
  char *proc = it_name("dummy"), *mets = workspace(1), *tok = it_fmt("%s/token", it_tmpdir());
  char *out;
  it_server_t *srv;
  it_api_t a;
  const char *body;
  FILE *f = fopen(tok, "w");
  fputs("s3cret-token-for-the-api\n", f);
  fclose(f);
  chmod(tok, 0600);
  srv = dummy_server(proc);
  a = it_api_start((const char *const[]){"--http-admin-token", tok, NULL});
  body = it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                " \"output_file_grps\": [\"OUT\"]}",
                mets);
  cr_expect_eq(api_call(&a, "POST", it_fmt("/processor/run/%s", proc), body, &out), 401);
  {
    const char *args[] = {
        "-X", "POST", "-H", "Authorization: Bearer wrong-token-wrong-token", "--data-binary",
        body, NULL};
    cr_expect_eq(it_http_req(a.port, it_fmt("/processor/run/%s", proc), args, &out), 401);
  }
  {
    const char *args[] = {
        "-X", "POST", "-H", "Authorization: Bearer s3cret-token-for-the-api", "--data-binary",
        body, NULL};
    cr_expect_eq(it_http_req(a.port, it_fmt("/processor/run/%s", proc), args, &out), 200, "%s",
                 out);
  }
  cr_expect_eq(api_call(&a, "GET", "/processor", NULL, &out), 200, "reading needs no token");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* A server of proc.sh (a processor of mqproc's own: no description, parameters unchecked)
 * whose jobs wait for the gate file. */
static it_server_t *gated_server(const char *name, const char *gate) {
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  const char *extra[] = {"--concurrency=4", NULL};
  return it_server_start(name, it_proc("proc.sh"), extra, envp);
}

Test(processing_api, a_second_request_on_the_same_pages_is_cached_until_the_first_ends) {
  char *proc = it_name("slow"), *mets = workspace(2), *gate = it_fmt("%s/gate", it_tmpdir());
  char *first, *second, *other, *out;
  it_server_t *srv = gated_server(proc, gate);
  it_api_t a = it_api_start(NULL);
  const char *fmt = "{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                    " \"output_file_grps\": [\"%s\"], \"page_id\": \"%s\"}";
  first = run_job(&a, proc, it_fmt(fmt, mets, "OUT", "PHYS_0001"), "QUEUED");
  cr_assert(job_becomes(first, "RUNNING"));
  second = run_job(&a, proc, it_fmt(fmt, mets, "OUT", "PHYS_0001"), "CACHED");
  other = run_job(&a, proc, it_fmt(fmt, mets, "OUT", "PHYS_0002"), "QUEUED"); /* other page */
  run_job(&a, proc, it_fmt(fmt, mets, "OTHER", "PHYS_0001"), "QUEUED");       /* other group */
  cr_assert(job_becomes(other, "RUNNING"));
  cr_assert_eq(api_call(&a, "GET", it_fmt("/processor/job/%s", second), NULL, &out), 200);
  cr_expect(strstr(out, "\"CACHED\"") != NULL, "%s", out);
  cr_expect_eq(it_sql_long(it_fmt("SELECT tries FROM mqproc_jobs WHERE job_id = '%s'", second), 0),
               0);
  /* `stats` counts it; `jobs show` shows it */
  cr_assert_eq(it_mq(&out, "jobs", "show", second, "--json", NULL), 0);
  cr_expect(strstr(out, "\"CACHED\"") != NULL, "%s", out);
  it_open_gate(gate);
  cr_expect(job_becomes(first, "SUCCESS"));
  cr_expect(job_becomes(second, "SUCCESS"), "the cached job was not released");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(processing_api, a_lost_callback_strands_nothing_the_sweep_releases) {
  char *proc = it_name("lost"), *mets = workspace(1), *gate = it_fmt("%s/gate", it_tmpdir());
  char *first, *second;
  it_server_t *srv = gated_server(proc, gate);
  /* the servers call back a port where nobody listens */
  it_api_t a = it_api_start((const char *const[]){
      "--internal-callback-url", it_fmt("http://127.0.0.1:%d", it_free_port()), NULL});
  const char *body = it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                            " \"output_file_grps\": [\"OUT\"]}",
                            mets);
  first = run_job(&a, proc, body, "QUEUED");
  second = run_job(&a, proc, body, "CACHED");
  it_open_gate(gate);
  cr_expect(job_becomes(first, "SUCCESS"));
  cr_expect(job_becomes(second, "SUCCESS"), "the sweep did not release the cached job");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(processing_api, a_cached_job_is_cancelled_by_id_and_never_runs) {
  char *proc = it_name("cc"), *mets = workspace(1), *gate = it_fmt("%s/gate", it_tmpdir());
  char *first, *second, *out;
  it_server_t *srv = gated_server(proc, gate);
  it_api_t a = it_api_start(NULL);
  const char *body = it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                            " \"output_file_grps\": [\"OUT\"]}",
                            mets);
  first = run_job(&a, proc, body, "QUEUED");
  second = run_job(&a, proc, body, "CACHED");
  cr_assert_eq(it_mq(&out, "stats", "--processor", proc, "--json", NULL), 0);
  cr_expect(strstr(out, "\"CACHED\":1") != NULL || strstr(out, "\"CACHED\": 1") != NULL, "%s", out);
  cr_assert_eq(it_mq(&out, "jobs", "cancel", second, NULL), 0);
  it_open_gate(gate);
  cr_expect(job_becomes(first, "SUCCESS"));
  cr_expect_str_eq(it_sql(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", second), 0),
                   "CANCELLED");
  cr_expect_eq(it_sql_long(it_fmt("SELECT tries FROM mqproc_jobs WHERE job_id = '%s'", second), 0),
               0);
  it_server_stop(a.proc);
  it_server_stop(srv);
}
