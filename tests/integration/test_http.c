/* --http against the real servers: /metrics counts what the job table holds and passes
 * promtool, /healthz and /readyz answer, the status page lists the run's processors,
 * workers and failures with every user-supplied text escaped, and headless Chromium
 * renders it (the screenshot is kept under build/). The database-outage flip of /readyz
 * is in test_faults.c (it stops the database). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(http, .fini = it_cleanup);

static const char *const HTTP[] = {"--http", "127.0.0.1:0", NULL};

/* A line of the exposition: the value of the sample named exactly so (-1: none). */
static double sample(const char *text, const char *series) {
  const char *p = text;
  size_t n = strlen(series);
  while ((p = strstr(p, series)) != NULL) {
    if ((p == text || p[-1] == '\n') && p[n] == ' ')
      return atof(p + n + 1);
    p += n;
  }
  return -1;
}

static void submit(const char *proc, const char *id) {
  char *out;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", id, NULL),
               0);
}

Test(http, metrics_equal_the_job_table_and_pass_promtool) {
  char *proc = it_name("met"), *text, *lint;
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  const char *extra[] = {"--http", "127.0.0.1:0",        "--retries", "1", "--max-requeues",
                         "0",      "--retry-backoff-ms", "10",        NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  int port = it_http_port(srv);
  const char *promtool[] = {"/usr/bin/promtool", "check", "metrics", NULL};
  char *series;
  for (int i = 0; i < 4; i++)
    submit(proc, it_fmt("met-ok-%d", i));
  submit(proc, "met-bad-1");
  cr_assert(
      it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state IN ('SUCCESS', 'FAILED')", "5"));
  cr_assert(it_server_wait_log(srv, "dead-lettered", WAIT_MS));
  /* a dead letter counts once the broker confirmed it: wait for that scrape */
  series = it_fmt("mqproc_jobs_dead_lettered_total{processor=\"%s\"}", proc);
  for (int i = 0; i < 100; i++) {
    cr_assert_eq(it_http_get(port, "/metrics", &text), 200);
    if (sample(text, series) == 1)
      break;
    usleep(100 * 1000);
  }
  series = it_fmt("mqproc_jobs_finished_total{processor=\"%s\",outcome=\"success\"}", proc);
  cr_expect_eq(sample(text, series),
               it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), "%s",
               text);
  series = it_fmt("mqproc_jobs_finished_total{processor=\"%s\",outcome=\"failed\"}", proc);
  cr_expect_eq(sample(text, series),
               it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'FAILED'", 0));
  series = it_fmt("mqproc_jobs_started_total{processor=\"%s\"}", proc);
  cr_expect_eq(sample(text, series), 5);
  series = it_fmt("mqproc_job_retries_total{processor=\"%s\"}", proc);
  cr_expect_eq(sample(text, series),
               it_sql_long("SELECT count(*) FROM mqproc_all_tries WHERE try > 1", 0),
               "the failing job's second try");
  series = it_fmt("mqproc_jobs_dead_lettered_total{processor=\"%s\"}", proc);
  cr_expect_eq(sample(text, series), 1);
  series = it_fmt("mqproc_job_run_seconds_count{processor=\"%s\"}", proc);
  cr_expect_eq(sample(text, series), it_sql_long("SELECT count(*) FROM mqproc_all_tries", 0));
  series = it_fmt("mqproc_up{processor=\"%s\",peer=\"broker\"}", proc);
  cr_expect_eq(sample(text, series), 1);
  cr_expect(strstr(text, "job_id") == NULL, "no job id label");
  cr_expect_eq(it_run(promtool, NULL, text, &lint), 0, "promtool: %s", lint);
  cr_expect_str_eq(lint, "", "promtool has no findings");
  /* the queue's depth comes from a passive declare made after the first scrape (dir://:
   * a count of new/, and no consumers to count) */
  for (int i = 0; i < 100 && strstr(text, "mqproc_queue_messages{") == NULL; i++) {
    usleep(100 * 1000);
    it_http_get(port, "/metrics", &text);
  }
  cr_expect(sample(text, it_fmt("mqproc_queue_messages{processor=\"%s\"}", proc)) >= 0, "%s", text);
  series = it_fmt("mqproc_queue_consumers{processor=\"%s\"}", proc);
  if (it_queue_is_dir())
    cr_expect(strstr(text, "mqproc_queue_consumers{") == NULL, "%s", text);
  else
    cr_expect_eq(sample(text, series), 1, "%s", text);
  it_server_stop(srv);
}

Test(http, healthz_and_readyz_answer_and_readyz_says_paused) {
  char *proc = it_name("rdy"), *body, *out;
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), HTTP, NULL);
  int port = it_http_port(srv);
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  cr_expect(strstr(body, "\"ready\":true") != NULL, "%s", body);
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 503, "%s", body);
  cr_expect(strstr(body, "paused by an operator") != NULL, "%s", body);
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  cr_expect_eq(it_http_get(port, "/nothing-here", &body), 404);
  it_server_stop(srv);
}

Test(http, the_page_lists_real_jobs_and_escapes_markup) {
  char *proc = it_name("page"), *body;
  const char *envp[] = {"PROC_FAIL_MATCH=<", NULL};
  const char *extra[] = {"--http", "127.0.0.1:0", "--retries", "0", "--max-requeues", "0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  int port = it_http_port(srv);
  const char *evil = "x<script>alert(1)</script>";
  submit(proc, "page-ok-1");
  submit(proc, evil);
  cr_assert(
      it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", evil), "FAILED"));
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'page-ok-1'", "SUCCESS"));
  cr_assert_eq(it_http_get(port, "/", &body), 200, "%s", body);
  cr_expect(strstr(body, proc) != NULL, "the processor is listed");
  cr_expect(strstr(body, "x&lt;script&gt;alert(1)&lt;/script&gt;") != NULL, "%s", body);
  cr_expect(strstr(body, "<script>alert") == NULL, "markup is never passed through");
  cr_expect(strstr(body, "href=\"/jobs/x%3Cscript%3Ealert%281%29%3C%2Fscript%3E\"") != NULL,
            "links are URL-encoded: %s", body);
  cr_expect_lt(strlen(body), 50 * 1024, "the page stays small");
  cr_assert_eq(it_http_get(port, it_fmt("/jobs?processor=%s", proc), &body), 200);
  cr_expect(strstr(body, "page-ok-1") != NULL, "%s", body);
  cr_assert_eq(it_http_get(port, "/jobs/x%3Cscript%3Ealert%281%29%3C%2Fscript%3E", &body), 200);
  cr_expect(strstr(body, "id=\"tries\"") != NULL && strstr(body, "exited with status 3") != NULL,
            "the job page shows its try and error: %s", body);
  cr_expect(strstr(body, "proc.sh: job x&lt;script&gt;") != NULL, "and its log's end: %s", body);
  cr_expect(strstr(body, "<script>alert") == NULL);
  cr_expect_eq(it_http_get(port, "/jobs/no-such-job", &body), 404);
  it_server_stop(srv);
}

/* The page in a real browser: Debian's Chromium, headless. */
Test(http, headless_chromium_renders_processors_workers_and_failures) {
  char *proc = it_name("chr"), *dom, *shot;
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  const char *extra[] = {"--http", "127.0.0.1:0", "--retries",           "0", "--max-requeues",
                         "0",      "--worker-id", it_fmt("%s-w1", proc), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  int port = it_http_port(srv);
  char *url = it_fmt("http://127.0.0.1:%d/", port);
  const char *dump[] = {
      "/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url, NULL};
  submit(proc, "chr-ok-1");
  submit(proc, "chr-bad-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'chr-bad-1'", "FAILED"));
  cr_assert_eq(it_run(dump, NULL, NULL, &dom), 0);
  cr_expect(strstr(dom, it_fmt(">%s</a>", proc)) != NULL, "the processor row: %s", dom);
  cr_expect(strstr(dom, it_fmt("<td>%s-w1</td>", proc)) != NULL, "the worker row");
  cr_expect(strstr(dom, "<tr class=\"failure\"><td><a href=\"/jobs/chr-bad-1\">") != NULL,
            "the failure, linked");
  url = it_fmt("http://127.0.0.1:%d/jobs/chr-bad-1", port);
  dump[5] = url;
  cr_assert_eq(it_run(dump, NULL, NULL, &dom), 0);
  cr_expect(strstr(dom, "<tr class=\"try\">") != NULL, "the failed job's try: %s", dom);
  cr_expect(strstr(dom, "proc.sh: job chr-bad-1") != NULL, "its log's end");
  shot = it_fmt("%s/../status-page.png", it_tmpdir());
  {
    const char *argv[] = {"/usr/bin/chromium",
                          "--headless",
                          "--no-sandbox",
                          "--disable-gpu",
                          "--hide-scrollbars",
                          "--window-size=1400,900",
                          it_fmt("--screenshot=%s", shot),
                          it_fmt("http://127.0.0.1:%d/", port),
                          NULL};
    cr_expect_eq(it_run(argv, NULL, NULL, NULL), 0);
    cr_expect_neq(it_read_file(shot), NULL, "the screenshot is kept: %s", shot);
  }
  it_server_stop(srv);
}

/* A listener that cannot be had, or buckets that make no sense: the server does not start,
 * and says why (exit 2, a configuration error). */
static void refused_start(const char *const *extra, const char *why) {
  char *proc = it_name("bad");
  it_server_t *srv = it_server_spawn(proc, it_proc("proc.sh"), extra, NULL);
  int st = it_server_wait_exit(srv, WAIT_MS);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "wait status %d", st);
  cr_expect(it_server_count_log(srv, why) > 0, "the reason '%s' is not in the log", why);
  it_server_stop(srv);
}

Test(http, a_port_in_use_stops_the_server_with_the_reason) {
  char *proc = it_name("first");
  it_server_t *first = it_server_start(proc, it_proc("proc.sh"), HTTP, NULL);
  char *addr = it_fmt("127.0.0.1:%d", it_http_port(first));
  const char *extra[] = {"--http", addr, NULL};
  refused_start(extra, "cannot listen");
  it_server_stop(first);
}

Test(http, a_malformed_address_or_buckets_stop_the_server_with_the_reason) {
  const char *no_port[] = {"--http", "localhost", NULL};
  const char *buckets[] = {"--metrics-buckets", "1,0.5", NULL};
  refused_start(no_port, "expected HOST:PORT");
  refused_start(buckets, "the bounds must ascend");
}
