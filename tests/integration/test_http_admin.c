/* The status page's actions and the standalone dashboard against the real servers: retry,
 * cancel, pause and resume only with the admin token (a signed-in browser's cookie or a
 * script's Bearer token), never from another site, each doing what the CLI does and
 * audited; `mqproc dashboard` serves the fleet's page, /healthz and /readyz (503 while
 * its database is away) and refuses a token file others may read. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000
#define TOKEN "0123456789abcdef-test-token"

TestSuite(http_admin, .fini = it_cleanup);

static char *token_file(const char *content, int mode) {
  static int n;
  char *path = it_fmt("%s/token-%d", it_tmpdir(), ++n);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "%s\n", content);
  fclose(f);
  cr_assert_eq(chmod(path, (mode_t)mode), 0);
  return path;
}

static void submit(const char *proc, const char *id) {
  char *out;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", id, NULL),
               0);
}

static long audits(const char *action) {
  return it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = $1 AND actor ="
                     " 'web:127.0.0.1'",
                     1, action);
}

Test(http_admin, actions_need_the_token_come_from_the_page_and_do_what_the_cli_does) {
  char *proc = it_name("adm"), *body, *marker = it_fmt("%s/adm-marker", it_tmpdir());
  char *gate = it_fmt("%s/adm-gate", it_tmpdir()), *jar = it_fmt("%s/adm-cookies", it_tmpdir());
  const char *envp[] = {"PROC_FAIL_MATCH=fail", it_fmt("PROC_MARKER=%s", marker),
                        it_fmt("PROC_GATE=%s", gate), NULL};
  const char *extra[] = {"--http",    "127.0.0.1:0", "--http-admin-token", token_file(TOKEN, 0600),
                         "--retries", "0",           "--max-requeues",     "0",
                         NULL};
  it_server_t *srv;
  int port;
  char *origin;
  const char *none[] = {"-X", "POST", NULL};
  const char *wrong[] = {"-X", "POST", "-H", "Authorization: Bearer not-the-token-at-all", NULL};
  const char *bearer[] = {"-X", "POST", "-H", "Authorization: Bearer " TOKEN, NULL};
  const char *evil[] = {
      "-X", "POST", "-H", "Authorization: Bearer " TOKEN, "-H", "Origin: http://evil.example",
      NULL};
  const char *fetch_cross[] = {
      "-X", "POST", "-H", "Authorization: Bearer " TOKEN, "-H", "Sec-Fetch-Site: cross-site", NULL};
  const char *bad_login[] = {"-c", jar, "--data-urlencode", "token=wrong-wrong-wrong", NULL};
  const char *login[] = {"-c", jar, "--data-urlencode", "token=" TOKEN, "-H", NULL, NULL};
  const char *cookie[] = {"-b", jar, NULL};
  const char *cookie_post[] = {
      "-b", jar, "-X", "POST", "-H", NULL, "-H", "Sec-Fetch-Site: same-origin", "-i", NULL};

  it_open_gate(gate); /* jobs pass it until the cancel below closes it */
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  port = it_http_port(srv);
  origin = it_fmt("Origin: http://127.0.0.1:%d", port);
  login[5] = origin;
  cookie_post[5] = origin;

  submit(proc, "adm-fail-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'adm-fail-1'", "FAILED"));
  cr_assert_eq(it_file_lines(marker), 1);

  /* refused: no token, a wrong one, from another site */
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1/retry", none, &body), 401, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1/retry", wrong, &body), 401, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1/retry", evil, &body), 403, "%s", body);
  cr_expect(strstr(body, "not from this page") != NULL, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1/retry", fetch_cross, &body), 403, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1/nonsense", bearer, &body), 404, "%s", body);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'adm-fail-1'", 0),
                   "FAILED");
  cr_expect_eq(audits("retry"), 0, "a refused request does nothing");

  /* a script's retry: the stored request runs again, audited */
  cr_assert_eq(it_http_req(port, "/jobs/adm-fail-1/retry", bearer, &body), 200, "%s", body);
  cr_expect(strstr(body, "\"ok\":true") != NULL && strstr(body, "\"retried\":1") != NULL, "%s",
            body);
  cr_assert(
      it_sql_becomes("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'adm-fail-1'", "2"));
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'adm-fail-1'", "FAILED"));
  cr_expect_eq(it_file_lines(marker), 2, "it ran again");
  cr_expect_eq(audits("retry"), 1);
  cr_expect_eq(it_http_req(port, "/jobs/no-such-job/retry", bearer, &body), 409, "%s", body);

  /* a browser signs in (a wrong token first), then sees the buttons */
  cr_expect_eq(it_http_req(port, "/login", bad_login, &body), 403, "%s", body);
  cr_expect(strstr(body, "that is not the token") != NULL, "%s", body);
  cr_expect_eq(it_http_get(port, "/jobs/adm-fail-1", &body), 200);
  cr_expect(strstr(body, "sign in to act") != NULL && strstr(body, "/retry\"") == NULL, "%s", body);
  cr_assert_eq(it_http_req(port, "/login", login, &body), 303, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/adm-fail-1", cookie, &body), 200);
  cr_expect(strstr(body, "action=\"/jobs/adm-fail-1/retry\"") != NULL, "%s", body);
  cr_expect_eq(it_http_req(port, "/", cookie, &body), 200);
  cr_expect(strstr(body, it_fmt("action=\"/processors/%s/pause\"", proc)) != NULL, "%s", body);

  /* the browser cancels a running job: its holder stops it */
  cr_assert_eq(unlink(gate), 0);
  submit(proc, "adm-gate-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'adm-gate-1'", "RUNNING"));
  cr_assert_eq(it_http_req(port, "/jobs/adm-gate-1/cancel", cookie_post, &body), 303, "%s", body);
  cr_expect(strstr(body, "/jobs/adm-gate-1") != NULL, "back to the job's page: %s", body);
  cr_expect(
      it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'adm-gate-1'", "CANCELLED"));
  cr_expect_eq(audits("cancel"), 1);

  /* pause (the browser) and resume (a script), as `mqproc pause|resume` */
  cr_assert_eq(it_http_req(port, it_fmt("/processors/%s/pause", proc), cookie_post, &body), 303,
               "%s", body);
  cr_expect(it_sql_becomes(
      it_fmt("SELECT state FROM mqproc_workers WHERE processor_name = '%s'", proc), "paused"));
  cr_expect_eq(it_http_get(port, "/readyz", &body), 503, "%s", body);
  cr_assert_eq(it_http_req(port, it_fmt("/processors/%s/resume", proc), bearer, &body), 200, "%s",
               body);
  cr_expect(it_sql_becomes(
      it_fmt("SELECT state FROM mqproc_workers WHERE processor_name = '%s'", proc), "running"));
  cr_expect_eq(audits("pause"), 1);
  cr_expect_eq(audits("resume"), 1);
  cr_expect(it_server_count_log(srv, "audit: web:127.0.0.1 pause") > 0, "logged too");
  it_open_gate(gate);
  it_server_stop(srv);
}

Test(http_admin, the_dashboard_serves_the_fleet_and_readyz_follows_its_database) {
  char *proc = it_name("dash"), *body;
  const char *srv_extra[] = {NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), srv_extra, NULL);
  const char *args[] = {"dashboard",   "--database", it_db_url(),   "--queue",
                        it_amqp_url(), "--http",     "127.0.0.1:0", NULL};
  const char *dead_args[] = {"dashboard", "--database",  "postgresql://mqproc@127.0.0.1:1/none",
                             "--http",    "127.0.0.1:0", NULL};
  it_server_t *dash, *dead;
  int port, st;
  submit(proc, "dash-ok-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dash-ok-1'", "SUCCESS"));
  dash = it_mqproc_spawn("dashboard", args);
  port = it_http_port(dash);
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  cr_assert_eq(it_http_get(port, "/", &body), 200, "%s", body);
  cr_expect(strstr(body, proc) != NULL, "the processor is on the page: %s", body);
  cr_expect(strstr(body, "class=\"worker\"") != NULL, "and its server: %s", body);
  cr_expect(strstr(body, "sign in") == NULL, "read-only: nothing to sign in for");
  cr_assert_eq(it_http_get(port, "/jobs/dash-ok-1", &body), 200);
  cr_expect(strstr(body, "id=\"tries\"") != NULL, "%s", body);
  cr_expect_eq(
      it_http_req(port, "/jobs/dash-ok-1/retry", (const char *const[]){"-X", "POST", NULL}, &body),
      403, "%s", body);
  cr_expect(strstr(body, "read-only") != NULL, "%s", body);
  cr_expect_eq(it_http_get(port, "/metrics", &body), 404, "a dashboard has no metrics");

  dead = it_mqproc_spawn("dashboard-dead", dead_args);
  port = it_http_port(dead);
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 503, "%s", body);
  cr_expect(strstr(body, "database:") != NULL, "the reason: %s", body);
  cr_expect_eq(it_http_get(port, "/", &body), 503, "%s", body);
  it_server_signal(dead, SIGTERM);
  st = it_server_wait_exit(dead, WAIT_MS);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "SIGTERM stops it: status %d", st);
  it_server_stop(dead);
  it_server_stop(dash);
  it_server_stop(srv);
}

Test(http_admin, a_token_others_may_read_or_too_short_is_refused) {
  const char *readable[] = {"dashboard",
                            "--database",
                            it_db_url(),
                            "--http",
                            "127.0.0.1:0",
                            "--http-admin-token",
                            token_file(TOKEN, 0644),
                            NULL};
  const char *shorty[] = {"dashboard",
                          "--database",
                          it_db_url(),
                          "--http",
                          "127.0.0.1:0",
                          "--http-admin-token",
                          token_file("short", 0600),
                          NULL};
  const char *const *cases[] = {readable, shorty};
  const char *why[] = {"chmod 600", "at least 16 characters"};
  for (int i = 0; i < 2; i++) {
    it_server_t *d = it_mqproc_spawn("dashboard-bad", cases[i]);
    int st = it_server_wait_exit(d, WAIT_MS);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "wait status %d", st);
    cr_expect(it_server_count_log(d, why[i]) > 0, "the reason '%s' is not in the log", why[i]);
    it_server_stop(d);
  }
}
