/* Integration: network faults between a server and its broker or database (issue "secure
 * and scaled out", item 6), injected by the harness's fault proxy (support/faultproxy.h:
 * blackhole, freeze, reset, delay; this kernel has no netem). A half-dead peer never
 * wedges the loop (its /healthz answers throughout), nothing is lost, and the server
 * recovers when the link does. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "faultproxy.h"
#include "harness.h"

#define WAIT_MS 60000

TestSuite(netfaults, .fini = it_cleanup);

static void skip_unless_services(void) {
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("network faults: RabbitMQ + PostgreSQL only");
}

/* This test's database URL with its port replaced by port. */
static const char *db_via(int port) {
  const char *url = it_db_url(), *p = strstr(url, "127.0.0.1:"), *end;
  cr_assert_not_null(p, "%s", url);
  p += strlen("127.0.0.1:");
  end = strchr(p, '/');
  return it_fmt("%.*s%d%s", (int)(p - url), url, port, end);
}

/* Waits for job's result, passing over repeats of earlier results: a result whose
 * confirm a fault swallowed is sent again (at least once, the same message_id). */
static void expect_result(const char *results, const char *job) {
  const char *want = it_fmt("\"job_id\":\"%s\"", job);
  for (;;) {
    it_msg_t m;
    int found;
    cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", job);
    found = strstr(m.body, want) != NULL;
    if (found)
      cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    it_msg_free(&m);
    if (found)
      return;
  }
}

static void publish_job(const char *proc, const char *results, const char *job) {
  it_publish(proc, it_job_json(proc, job, it_fmt("{\"result_queue_name\": \"%s\"}", results)));
}

static void expect_job(const char *proc, const char *results, const char *job) {
  publish_job(proc, results, job);
  expect_result(results, job);
}

/* The end of each fault run: a slow link (delay_ms each way) passes job, slower but whole;
 * the link healed, all n jobs of the run are SUCCESS, each once. */
static void slow_link_then_all_done(faultproxy_t *fp, const char *proc, const char *results,
                                    const char *job, int delay_ms, long n) {
  fp_set_delay(fp, delay_ms);
  fp_set_mode(fp, FP_DELAY);
  expect_job(proc, results, job);
  fp_set_mode(fp, FP_PASS);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), n);
}

/* The loop answers while a peer is half dead: /healthz within a second, several times. */
static void expect_loop_alive(int http_port, const char *when) {
  for (int i = 0; i < 3; i++) {
    char *body = NULL; /* the harness's */
    int status = it_http_get(http_port, "/healthz", &body);
    cr_expect_eq(status, 200, "%s: /healthz answered %d", when, status);
    usleep(300 * 1000);
  }
}

Test(netfaults, a_half_dead_broker_never_wedges_the_server_and_it_recovers) {
  char *proc = it_name("nfb"), *results = it_name("nfb-result");
  faultproxy_t *fp;
  it_server_t *srv;
  int http;
  skip_unless_services();
  fp = fp_start(atoi(getenv("MQPROC_TEST_RMQ_PORT")));
  cr_assert_not_null(fp);
  it_declare(results);
  srv = it_server_start(
      proc, it_proc("proc.sh"),
      (const char *const[]){it_fmt("--queue=amqp://guest:guest@127.0.0.1:%d", fp_port(fp)),
                            "--heartbeat=2", "--broker-timeout=3", "--http=127.0.0.1:0", NULL},
      NULL);
  http = it_http_port(srv);
  expect_job(proc, results, "nfb-1");
  /* blackhole: the socket stays open, nothing arrives; heartbeats find it (2 x 2 s) */
  fp_set_mode(fp, FP_BLACKHOLE);
  expect_loop_alive(http, "broker blackholed");
  cr_assert(it_server_wait_log(srv, "broker connection lost", WAIT_MS), "a blackhole went unseen");
  publish_job(proc, results, "nfb-2");
  expect_loop_alive(http, "reconnecting into a blackhole");
  fp_set_mode(fp, FP_PASS);
  expect_result(results, "nfb-2"); /* after the blackhole */
  /* freeze: nobody reads, buffers fill */
  fp_set_mode(fp, FP_FREEZE);
  expect_loop_alive(http, "broker frozen");
  cr_assert(it_server_wait_count(srv, "broker connection lost", 2, WAIT_MS),
            "a freeze went unseen");
  fp_set_mode(fp, FP_PASS);
  expect_job(proc, results, "nfb-3");
  /* reset: every connection cut at once */
  fp_reset(fp);
  cr_assert(it_server_wait_count(srv, "broker connection lost", 3, WAIT_MS), "a reset went unseen");
  expect_job(proc, results, "nfb-4");
  slow_link_then_all_done(fp, proc, results, "nfb-5", 150, 5);
  it_server_stop(srv);
  fp_stop(fp);
}

Test(netfaults, a_confirm_that_never_comes_costs_the_connection_not_the_result) {
  char *proc = it_name("nfc"), *results = it_name("nfc-result");
  const char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  faultproxy_t *fp;
  it_server_t *srv;
  skip_unless_services();
  fp = fp_start(atoi(getenv("MQPROC_TEST_RMQ_PORT")));
  cr_assert_not_null(fp);
  it_declare(results);
  /* no heartbeats, no result-queue declare (an RPC: its own deadline would act first):
   * only the confirm's deadline can notice that nothing comes back */
  srv = it_server_start(
      proc, it_proc("proc.sh"),
      (const char *const[]){it_fmt("--queue=amqp://guest:guest@127.0.0.1:%d", fp_port(fp)),
                            "--heartbeat=0", "--confirm-timeout=3", "--broker-timeout=20",
                            "--no-declare-result-queues", NULL},
      envp);
  publish_job(proc, results, "nfc-1");
  cr_assert(it_server_wait_log(srv, "job nfc-1: attempt 1 try 1 started", WAIT_MS));
  fp_set_mode(fp, FP_ONE_WAY); /* the result goes out; its confirm never comes back */
  it_open_gate(gate);
  cr_assert(it_server_wait_log(srv, "no publisher confirm within 3 s", WAIT_MS),
            "an unconfirmed result waited forever");
  fp_set_mode(fp, FP_PASS);
  expect_result(results, "nfc-1");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'nfc-1' AND state = "
                           "'SUCCESS'",
                           0),
               1);
  it_server_stop(srv);
  fp_stop(fp);
}

Test(netfaults, a_half_dead_database_never_wedges_the_server_and_it_recovers) {
  char *proc = it_name("nfd"), *results = it_name("nfd-result");
  faultproxy_t *fp;
  it_server_t *srv;
  int http;
  skip_unless_services();
  fp = fp_start(atoi(getenv("MQPROC_TEST_PG_PORT")));
  cr_assert_not_null(fp);
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"),
                        (const char *const[]){it_fmt("--database=%s", db_via(fp_port(fp))),
                                              "--http=127.0.0.1:0", NULL},
                        NULL);
  http = it_http_port(srv);
  expect_job(proc, results, "nfd-1");
  /* blackhole: requests wait on a silent socket until libpq's tcp_user_timeout (15 s) */
  fp_set_mode(fp, FP_BLACKHOLE);
  publish_job(proc, results, "nfd-2");
  expect_loop_alive(http, "database blackholed");
  cr_assert(it_server_wait_log(srv, "job store unreachable", WAIT_MS), "a blackhole went unseen");
  expect_loop_alive(http, "database unreachable");
  fp_set_mode(fp, FP_PASS);
  expect_result(results, "nfd-2"); /* after the database came back */
  /* a reset in the middle of things, then a slow link */
  fp_reset(fp);
  expect_job(proc, results, "nfd-3");
  slow_link_then_all_done(fp, proc, results, "nfd-4", 100, 4);
  it_server_stop(srv);
  fp_stop(fp);
}
