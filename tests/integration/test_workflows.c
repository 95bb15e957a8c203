/* Integration: workflows over the job table (issue 33): OCR-D's workflow routes of
 * `mqproc processing-api` (scripts stored, read and replaced; runs of three steps, whole
 * and page-wise, with real ocrd-dummy servers; a failing step cancels its dependants; the
 * workflow callback), a restart of the API mid-workflow that loses no job and runs none
 * twice, and `mqproc submit --workflow` for a chain of processors that are no OCR-D
 * processors. Runs on the default pair and on MQPROC_TEST_QUEUE=dir
 * MQPROC_TEST_STORE=sqlite. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "http_listener.h"
#include "ocrd_workspace.h"

#define WAIT_MS 60000
#define DUMMY MQPROC_BUILD_DIR "/tools/ocrd-dummy/ocrd-dummy"

TestSuite(workflows, .fini = it_cleanup);

static int call(const it_api_t *a, const char *method, const char *path, char **out) {
  const char *args[] = {"-X", method, NULL};
  return it_http_req(a->port, path, args, out);
}

/* A multipart upload of script (as OCR-D's client sends a workflow file). */
static int upload(const it_api_t *a, const char *method, const char *path, const char *script,
                  char **out) {
  char *file = it_fmt("%s/wf-%d.txt", it_tmpdir(), rand());
  FILE *f = fopen(file, "w");
  const char *args[] = {"-X", method, "-F", it_fmt("workflow=@%s", file), NULL};
  cr_assert_not_null(f);
  fputs(script, f);
  fclose(f);
  return it_http_req(a->port, path, args, out);
}

static const char *detail(const char *body) {
  json_t *o = it_json(body);
  const char *d = it_fmt("%s", json_string_value(json_object_get(o, "detail")) != NULL
                                   ? json_string_value(json_object_get(o, "detail"))
                                   : "(none)");
  json_decref(o);
  return d;
}

static char *workspace(int n) {
  ows_page_t pages[4] = {{4, 4}, {4, 4}, {4, 4}, {4, 4}};
  char *dir = it_fmt("%s/ws", it_tmpdir());
  mkdir(dir, 0755);
  cr_assert_eq(ows_create(dir, pages, (size_t)n), 0);
  return it_fmt("%s/mets.xml", dir);
}

static it_server_t *dummy_server(const char *name) {
  it_server_t *s = it_server_start(name, DUMMY, NULL, NULL);
  cr_assert(it_server_wait_log(s, "stored its ocrd-tool description", WAIT_MS), "no tool stored");
  return s;
}

/* The task name of processor ocrd-NAME: NAME. */
static const char *task(const char *proc) {
  return proc + 5;
}

/* POST /workflow/run with script (query: mets, page_wise and more); the workflow job's id. */
static char *run(const it_api_t *a, const char *mets, const char *query, const char *script,
                 json_t **answer) {
  char *out, *id;
  json_t *o;
  cr_assert_eq(upload(a, "POST", it_fmt("/workflow/run?mets_path=%s%s", mets, query), script, &out),
               200, "%s", out);
  o = it_json(out);
  id = it_fmt("%s", json_string_value(json_object_get(o, "job_id")));
  if (answer != NULL)
    *answer = o;
  else
    json_decref(o);
  return id;
}

static int run_ends(const char *wf, const char *state) {
  return it_sql_becomes(it_fmt("SELECT state FROM mqproc_workflow_jobs WHERE job_id = '%s'", wf),
                        state);
}

static const char *simple_state(const it_api_t *a, const char *wf) {
  char *out;
  json_t *o;
  const char *s;
  cr_assert_eq(call(a, "GET", it_fmt("/workflow/job-simple/%s", wf), &out), 200, "%s", out);
  o = it_json(out);
  s = it_fmt("%s", json_string_value(json_object_get(o, "state")));
  json_decref(o);
  return s;
}

/* ---- runs ------------------------------------------------------------------------------- */

Test(workflows, a_three_step_workflow_ends_in_success) {
  char *proc = it_name("dummy"), *mets = workspace(2), *wf, *out;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  json_t *o;
  const char *t = task(proc);
  wf = run(&a, mets, "&page_wise=False",
           it_fmt("%s -I OCR-D-IMG -O S1 -P copy_files true\n%s -I S1 -O S2\n\n%s -I S2 -O S3\n", t,
                  t, t),
           &o);
  cr_expect_eq(json_array_size(json_object_get(json_object_get(o, "processing_job_ids"), "")), 3,
               "one chain of three jobs");
  cr_expect_null(json_object_get(o, "page_wise"), "left out when false");
  json_decref(o);
  cr_assert(run_ends(wf, "SUCCESS"));
  cr_expect_str_eq(simple_state(&a, wf), "SUCCESS");
  cr_assert_eq(call(&a, "GET", it_fmt("/workflow/job/%s", wf), &out), 200);
  o = it_json(out);
  cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, proc), "SUCCESS")), 3, "%s",
               out);
  json_decref(o);
  cr_expect(strstr(it_read_file(mets), "USE=\"S3\"") != NULL, "no S3 in the METS");
  /* each ran once, the later ones released by the earlier ones' ends */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'"
                           " AND attempt = 1 AND deliveries = 1",
                           0),
               3);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(workflows, the_page_wise_form_runs_the_chain_once_per_page) {
  char *proc = it_name("dummy"), *mets = workspace(3), *wf;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  json_t *o, *ids;
  const char *t = task(proc);
  wf = run(&a, mets, "&page_wise=True&page_id=PHYS_0001..PHYS_0002",
           it_fmt("%s -I OCR-D-IMG -O P1\n%s -I P1 -O P2\n%s -I P2 -O P3\n", t, t, t), &o);
  ids = json_object_get(o, "processing_job_ids");
  cr_expect_eq(json_object_size(ids), 2, "two pages");
  cr_expect_eq(json_array_size(json_object_get(ids, "PHYS_0001")), 3);
  cr_expect_eq(json_array_size(json_object_get(ids, "PHYS_0002")), 3);
  cr_expect(json_is_true(json_object_get(o, "page_wise")));
  json_decref(o);
  cr_assert(run_ends(wf, "SUCCESS"));
  cr_expect_str_eq(simple_state(&a, wf), "SUCCESS");
  cr_expect(strstr(it_read_file(mets), "P3_0002") != NULL, "page 2 has no P3");
  cr_expect(strstr(it_read_file(mets), "P3_0003") == NULL, "page 3 was not asked for");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(workflows, a_failing_first_step_leaves_its_dependants_cancelled) {
  char *dummy = it_name("dummy"), *failing = it_name("fail"), *mets = workspace(1), *wf, *out;
  const char *envp[] = {"PROC_FAIL_MATCH=-", NULL}; /* every job id holds a '-' */
  it_server_t *srv = dummy_server(dummy),
              *bad = it_server_start(failing, it_proc("proc.sh"), NULL, envp);
  it_api_t a = it_api_start(NULL);
  json_t *o, *failed;
  wf = run(&a, mets, "",
           it_fmt("%s -I OCR-D-IMG -O F1\n%s -I F1 -O F2\n%s -I F2 -O F3\n", task(failing),
                  task(dummy), task(dummy)),
           NULL);
  cr_assert(run_ends(wf, "FAILED"));
  cr_expect_str_eq(simple_state(&a, wf), "FAILED");
  cr_expect_eq(it_sql_long(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s'"
                                  " AND state = 'CANCELLED' AND tries = 0",
                                  dummy),
                           0),
               2, "the dependants were not cancelled");
  cr_assert_eq(call(&a, "GET", it_fmt("/workflow/job/%s", wf), &out), 200);
  o = it_json(out);
  cr_expect_eq(json_integer_value(json_object_get(json_object_get(o, dummy), "CANCELLED")), 2, "%s",
               out);
  failed = json_object_get(json_object_get(o, "failed-processor-tasks"), failing);
  cr_expect_eq(json_array_size(failed), 1, "%s", out);
  json_decref(o);
  it_server_stop(a.proc);
  it_server_stop(bad);
  it_server_stop(srv);
}

/* Issue 38, F15: an operator's retry of a step goes through the API's release, as the step
 * did when it came: a retried step whose dependency FAILED is cancelled again without
 * running (it was published at once and ran beside, or without, the step before it). A
 * bulk retry takes only ended jobs: --state CACHED is refused, not counted. */
Test(workflows, a_retried_step_waits_for_its_dependencies) {
  char *dummy = it_name("dummy"), *failing = it_name("fail"), *mets = workspace(1), *wf, *out,
       *step2;
  const char *envp[] = {"PROC_FAIL_MATCH=-", NULL}; /* every job id holds a '-' */
  it_server_t *srv = dummy_server(dummy),
              *bad = it_server_start(failing, it_proc("proc.sh"), NULL, envp);
  it_api_t a = it_api_start(NULL);
  wf = run(&a, mets, "",
           it_fmt("%s -I OCR-D-IMG -O F1\n%s -I F1 -O F2\n", task(failing), task(dummy)), NULL);
  cr_assert(run_ends(wf, "FAILED"));
  step2 = it_sql(it_fmt("SELECT job_id FROM mqproc_jobs WHERE processor_name = '%s'", dummy), 0);
  cr_assert_not_null(step2);
  cr_assert_eq(it_mq(&out, "jobs", "retry", step2, NULL), 0, "%s", out);
  cr_expect(strstr(out, "CACHED") != NULL, "the retry does not say it waits: %s", out);
  cr_assert(it_sql_becomes(it_fmt("SELECT state || ' ' || tries FROM mqproc_jobs"
                                  " WHERE job_id = '%s'",
                                  step2),
                           "CANCELLED 0"),
            "the retried step ran though the step it depends on FAILED");
  cr_expect_eq(it_mq(&out, "jobs", "retry", "--state", "CACHED", NULL), 2, "%s", out);
  it_server_stop(a.proc);
  it_server_stop(bad);
  it_server_stop(srv);
}

Test(workflows, the_workflow_callback_is_called_when_it_ends) {
  char *proc = it_name("dummy"), *mets = workspace(1), *wf, *url, *body;
  it_server_t *srv = dummy_server(proc);
  test_http_t *cb = test_http_start(200);
  it_api_t a = it_api_start(NULL);
  json_t *o;
  url = test_http_url(cb, "/workflow-done");
  wf = run(&a, mets, it_fmt("&workflow_callback_url=%s", url),
           it_fmt("%s -I OCR-D-IMG -O CB1\n", task(proc)), NULL);
  cr_assert_eq(test_http_wait(cb, 1, WAIT_MS), 1, "no workflow callback");
  body = test_http_body(cb, 0);
  o = it_json(body);
  cr_expect_str_eq(json_string_value(json_object_get(o, "job_id")), wf);
  cr_expect_str_eq(json_string_value(json_object_get(o, "state")), "SUCCESS");
  json_decref(o);
  free(body);
  cr_expect(it_sql_becomes(
      it_fmt("SELECT callback_state FROM mqproc_workflow_jobs WHERE job_id = '%s'", wf), "OK"));
  free(url);
  test_http_stop(cb);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- scripts ------------------------------------------------------------------------------ */

Test(workflows, scripts_are_stored_read_replaced_and_run_by_id) {
  char *proc = it_name("dummy"), *mets = workspace(1), *out, *id, *wf;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  const char *script = it_fmt("%s -I OCR-D-IMG -O W1\n", task(proc));
  json_t *o;
  cr_assert_eq(upload(&a, "POST", "/workflow", script, &out), 201, "%s", out);
  o = it_json(out);
  id = it_fmt("%s", json_string_value(json_object_get(o, "workflow_id")));
  json_decref(o);
  cr_expect_eq(upload(&a, "POST", "/workflow", script, &out), 409);
  cr_expect_str_eq(detail(out),
                   it_fmt("The same workflow script already exists, workflow id: %s", id));
  cr_assert_eq(call(&a, "GET", it_fmt("/workflow/%s", id), &out), 200);
  cr_expect_str_eq(out, script);
  cr_expect_eq(upload(&a, "PUT", it_fmt("/workflow/%s", id),
                      it_fmt("%s -I OCR-D-IMG -O W2\n", task(proc)), &out),
               200, "%s", out);
  cr_assert_eq(call(&a, "GET", it_fmt("/workflow/%s", id), &out), 200);
  cr_expect(strstr(out, "-O W2") != NULL, "%s", out);
  cr_expect_eq(call(&a, "GET", "/workflow/no-such-id", &out), 404);
  cr_expect_str_eq(detail(out), "Workflow script not existing for id 'no-such-id'.");
  cr_expect_eq(upload(&a, "PUT", "/workflow/no-such-id", script, &out), 404);
  cr_expect_eq(upload(&a, "POST", "/workflow", "  \n", &out), 422);
  cr_expect_eq(upload(&a, "POST", "/workflow", "dummy -I A -X B\n", &out), 422);
  {
    const char *args[] = {"-X", "POST", NULL};
    cr_assert_eq(it_http_req(a.port, it_fmt("/workflow/run?mets_path=%s&workflow_id=%s", mets, id),
                             args, &out),
                 200, "%s", out);
    o = it_json(out);
    wf = it_fmt("%s", json_string_value(json_object_get(o, "job_id")));
    json_decref(o);
  }
  cr_expect(run_ends(wf, "SUCCESS"));
  cr_expect(strstr(it_read_file(mets), "USE=\"W2\"") != NULL);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

Test(workflows, each_run_error_answers_as_ocrd_does) {
  char *proc = it_name("dummy"), *mets = workspace(1), *out;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  const char *ok = it_fmt("%s -I OCR-D-IMG -O E1\n", task(proc));
  const char *args[] = {"-X", "POST", NULL};
  cr_expect_eq(upload(&a, "POST", "/workflow/run?mets_path=/no/such/mets.xml", ok, &out), 404);
  cr_expect_str_eq(detail(out), "Mets file path not existing: /no/such/mets.xml");
  cr_expect_eq(upload(&a, "POST", it_fmt("/workflow/run?mets_path=%s", mets),
                      it_fmt("%s -I NO-SUCH-GRP -O E1\n", task(proc)), &out),
               422);
  cr_expect_str_eq(detail(out), "Input file group 'NO-SUCH-GRP' of the first processor not found: "
                                "['NO-SUCH-GRP']");
  cr_expect_eq(upload(&a, "POST", it_fmt("/workflow/run?mets_path=%s", mets),
                      it_fmt("%s -I OCR-D-IMG -O E1\nno-such-thing -I E1 -O E2\n", task(proc)),
                      &out),
               406);
  cr_expect(strstr(detail(out), "Missing Processing Workers: [{'ocrd-no-such-thing'}]") != NULL,
            "%s", out);
  cr_expect_eq(upload(&a, "POST", it_fmt("/workflow/run?mets_path=%s", mets),
                      it_fmt("%s -I OCR-D-IMG -O E1 -P copy_files maybe\n", task(proc)), &out),
               400);
  cr_expect_eq(it_http_req(a.port, it_fmt("/workflow/run?mets_path=%s", mets), args, &out), 422);
  cr_expect(strstr(detail(out), "Either 'workflow' must be uploaded") != NULL, "%s", out);
  cr_expect_eq(
      it_http_req(a.port, it_fmt("/workflow/run?mets_path=%s&workflow_id=nope", mets), args, &out),
      404);
  cr_expect_eq(call(&a, "GET", "/workflow/job-simple/nope", &out), 404);
  cr_expect_eq(call(&a, "GET", "/workflow/job/nope", &out), 404);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0, "an error left a job");
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- restarts ------------------------------------------------------------------------------ */

Test(workflows, a_restart_of_the_api_mid_workflow_loses_no_job_and_runs_none_twice) {
  char *proc = it_name("gated"), *mets = workspace(1), *gate = it_fmt("%s/gate", it_tmpdir());
  char *marker = it_fmt("%s/runs", it_tmpdir()), *wf;
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  it_api_t a = it_api_start(NULL);
  wf = run(&a, mets, "",
           it_fmt("%s -I OCR-D-IMG -O R1\n%s -I R1 -O R2\n%s -I R2 -O R3\n", task(proc), task(proc),
                  task(proc)),
           NULL);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'RUNNING'", "1"));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'CACHED'", 0), 2);
  /* the API dies; the first step ends meanwhile (its callback finds nobody) */
  it_server_signal(a.proc, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a.proc, WAIT_MS), -1);
  it_server_stop(a.proc);
  it_open_gate(gate);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "1"));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'CACHED'", 0), 2,
               "released without an API");
  /* a new API picks the workflow up where the table says it is */
  a = it_api_start(NULL);
  cr_assert(run_ends(wf, "SUCCESS"));
  cr_expect_eq(it_file_lines(marker), 3, "a job ran twice, or one was lost");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'"
                           " AND attempt = 1 AND tries = 1 AND deliveries = 1",
                           0),
               3);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- mqproc submit --workflow ------------------------------------------------------------- */

Test(workflows, submit_runs_a_chain_of_processors_that_are_not_ocrd_processors) {
  char *split = it_fmt("split-t%d", (int)getpid()), *count = it_fmt("count-t%d", (int)getpid());
  char *marker = it_fmt("%s/runs", it_tmpdir()), *file = it_fmt("%s/chain.txt", it_tmpdir());
  char *mets = workspace(1), *out;
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *s1 = it_server_start(split, it_proc("proc.sh"), NULL, envp);
  it_server_t *s2 = it_server_start(count, it_proc("proc.sh"), NULL, envp);
  FILE *f = fopen(file, "w");
  fprintf(f, "%s -I OCR-D-IMG -O WORDS -P lang en\n%s -I WORDS -O COUNTS\n", split, count);
  fclose(f);
  cr_assert_eq(
      it_mq(&out, "submit", "--workflow", file, "--mets", mets, "--wait", "--timeout", "60", NULL),
      0, "%s", out);
  cr_expect_eq(it_sql_long(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'"
                                  " AND processor_name IN ('%s', '%s')",
                                  split, count),
                           0),
               2);
  cr_expect_eq(it_file_lines(marker), 2);
  /* the second step started after the first ended */
  cr_expect_eq(it_sql_long(it_q("SELECT count(*) FROM mqproc_jobs a, mqproc_jobs b"
                                " WHERE a.processor_name = $1 AND b.processor_name = $2"
                                " AND b.start_time >= a.end_time",
                                "SELECT count(*) FROM mqproc_jobs a, mqproc_jobs b"
                                " WHERE a.processor_name = ?1 AND b.processor_name = ?2"
                                " AND b.start_time >= a.end_time"),
                           2, split, count),
               1);
  it_server_stop(s1);
  it_server_stop(s2);
}
