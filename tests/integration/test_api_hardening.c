/* Integration: `mqproc processing-api` against hostile requests (issue 38): a workflow
 * callback URL that never answers (a tarpit) or that points at the API itself holds no
 * route (F5: callbacks leave the API's worker thread), and one an API stopped before it
 * recorded an outcome is sent again by the next API (at least once); a FIFO, or a link to one, as a
 * METS (mets_path, path_to_mets, a workspace's mets.xml) is refused with its reason instead of
 * holding the worker in open() (F6); after a database restart the API's first publish on a
 * table queue is not lost to the dead connection (F16: private services only, its own
 * ctest entry). Runs on the default pair and on MQPROC_TEST_QUEUE=dir
 * MQPROC_TEST_STORE=sqlite. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_int.h" /* it_tq_cleanup */
#include "ocrd_workspace.h"

#define WAIT_MS 60000
#define CALLBACK_TIMEOUT_MS 15000
#define DUMMY MQPROC_BUILD_DIR "/tools/ocrd-dummy/ocrd-dummy"

TestSuite(api_hardening, .fini = it_cleanup);

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static int call(const it_api_t *a, const char *method, const char *path, char **out) {
  const char *args[] = {"-X", method, NULL};
  return it_http_req(a->port, path, args, out);
}

static int api_json(const it_api_t *a, const char *path, const char *json, char **out) {
  const char *args[] = {"-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                        json, NULL};
  return it_http_req(a->port, path, args, out);
}

/* POST /workflow/run?mets_path=mets&query with script as the multipart "workflow". */
static int run_wf(const it_api_t *a, const char *mets, const char *query, const char *script,
                  char **out) {
  char *file = it_fmt("%s/wf-%d.txt", it_tmpdir(), rand());
  FILE *f = fopen(file, "w");
  const char *args[] = {"-X", "POST", "-F", it_fmt("workflow=@%s", file), NULL};
  cr_assert_not_null(f);
  fputs(script, f);
  fclose(f);
  return it_http_req(a->port, it_fmt("/workflow/run?mets_path=%s%s", mets, query), args, out);
}

static const char *detail(const char *body) {
  json_t *o = it_json(body);
  const char *d = it_fmt("%s", json_string_value(json_object_get(o, "detail")) != NULL
                                   ? json_string_value(json_object_get(o, "detail"))
                                   : "(none)");
  json_decref(o);
  return d;
}

static const char *field(const char *body, const char *key) {
  json_t *o = it_json(body);
  const char *v = it_fmt("%s", json_string_value(json_object_get(o, key)) != NULL
                                   ? json_string_value(json_object_get(o, key))
                                   : "(none)");
  json_decref(o);
  return v;
}

static char *workspace(const char *name) {
  ows_page_t pages[1] = {{4, 4}};
  char *dir = it_fmt("%s/%s", it_tmpdir(), name);
  mkdir(dir, 0755);
  cr_assert_eq(ows_create(dir, pages, 1), 0);
  return it_fmt("%s/mets.xml", dir);
}

static it_server_t *dummy_server(const char *name) {
  it_server_t *s = it_server_start(name, DUMMY, NULL, NULL);
  cr_assert(it_server_wait_log(s, "stored its ocrd-tool description", WAIT_MS), "no tool stored");
  return s;
}

/* A listening socket on 127.0.0.1 that accepts and never answers: its fd, *port. */
static int tarpit(int *port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  cr_assert_eq(listen(fd, 16), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
  *port = ntohs(sa.sin_port);
  return fd;
}

/* The next connection to the tarpit (waits up to ms): its fd, -1 when none came. */
static int tarpit_accept(int lfd, int ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1)
    return -1;
  return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/* Whether the client of a tarpit connection still holds it (it neither closed nor shut
 * down its side). */
static int still_held(int cfd) {
  struct pollfd p = {.fd = cfd, .events = POLLRDHUP};
  return poll(&p, 1, 0) == 0;
}

/* Workflow run wf's callback ends FAILED, its callback_error holding why. */
static void expect_callback_failed(const char *wf, const char *why) {
  char *err;
  cr_expect(it_sql_becomes(it_fmt("SELECT callback_state FROM mqproc_workflow_jobs"
                                  " WHERE job_id = '%s'",
                                  wf),
                           "FAILED"));
  err =
      it_sql(it_fmt("SELECT callback_error FROM mqproc_workflow_jobs WHERE job_id = '%s'", wf), 0);
  cr_expect(err != NULL && strstr(err, why) != NULL, "callback_error: %s", err);
}

/* ---- F5: the workflow callback ------------------------------------------------------------ */

/* The run ends and its callback goes to a tarpit: while the tarpit holds that connection
 * (the POST waits for an answer that never comes), the API's other routes answer at once;
 * when the tarpit goes away the callback ends FAILED with its reason. */
Test(api_hardening, a_callback_to_a_tarpit_holds_no_route) {
  char *proc = it_name("dummy"), *mets = workspace("ws-tarpit"), *out, *wf;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(
      (const char *const[]){"--callback-timeout-ms", it_fmt("%d", CALLBACK_TIMEOUT_MS), NULL});
  int port, lfd = tarpit(&port), cfd, status;
  long t0, took;
  cr_assert_eq(run_wf(&a, mets, it_fmt("&workflow_callback_url=http://127.0.0.1:%d/cb", port),
                      it_fmt("%s -I OCR-D-IMG -O TP1\n", proc + 5), &out),
               200, "%s", out);
  wf = it_fmt("%s", field(out, "job_id"));
  cr_assert_geq(cfd = tarpit_accept(lfd, WAIT_MS), 0, "the callback never came to the tarpit");
  /* the callback's POST is under way and waits: the routes answer meanwhile */
  t0 = now_ms();
  status = call(&a, "GET", it_fmt("/workflow/job-simple/%s", wf), &out);
  took = now_ms() - t0;
  cr_expect_eq(status, 200, "GET /workflow/job-simple while the callback waits: %d %s", status,
               out);
  cr_expect_str_eq(field(out, "state"), "SUCCESS", "%s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz: %s", out);
  cr_expect(still_held(cfd), "the callback's connection ended before the routes answered");
  cr_expect_lt(took, CALLBACK_TIMEOUT_MS, "GET took %ld ms", took);
  cr_expect(it_sql_becomes(it_fmt("SELECT coalesce(callback_state, 'none') FROM"
                                  " mqproc_workflow_jobs WHERE job_id = '%s'",
                                  wf),
                           "none"),
            "no outcome while it is sent");
  /* the tarpit goes: the callback's tries fail and that is recorded */
  close(cfd);
  close(lfd);
  cr_expect(it_sql_becomes(it_fmt("SELECT callback_state FROM mqproc_workflow_jobs"
                                  " WHERE job_id = '%s'",
                                  wf),
                           "FAILED"));
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* A callback URL that is the API's own address is never POSTed (it would wait for the API,
 * which waits for it): FAILED at once, with the reason. */
Test(api_hardening, a_callback_to_the_api_itself_is_refused) {
  char *proc = it_name("dummy"), *mets = workspace("ws-self"), *out, *wf;
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start(NULL);
  cr_assert_eq(run_wf(&a, mets,
                      it_fmt("&workflow_callback_url=http://127.0.0.1:%d/result_callback", a.port),
                      it_fmt("%s -I OCR-D-IMG -O SELF1\n", proc + 5), &out),
               200, "%s", out);
  wf = it_fmt("%s", field(out, "job_id"));
  expect_callback_failed(wf, "own");
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz: %s", out);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* A tarpit on a port given (again, after one there closed). */
static int tarpit_on(int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                           .sin_port = htons((uint16_t)port)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
  cr_assert_geq(fd, 0);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "port %d again", port);
  cr_assert_eq(listen(fd, 16), 0);
  return fd;
}

/* Reads a request on cfd until it holds want (up to ms), then answers 200: whether it
 * held it. */
static int answer_200(int cfd, const char *want, int ms) {
  char buf[8192];
  size_t used = 0;
  long until = now_ms() + ms;
  const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  int found = 0;
  while (!found && used < sizeof(buf) - 1 && now_ms() < until) {
    struct pollfd p = {.fd = cfd, .events = POLLIN};
    ssize_t n;
    if (poll(&p, 1, 200) != 1)
      continue;
    if ((n = read(cfd, buf + used, sizeof(buf) - 1 - used)) <= 0)
      break;
    used += (size_t)n;
    buf[used] = '\0';
    found = strstr(buf, want) != NULL;
  }
  if (found && write(cfd, ok, strlen(ok)) < 0)
    found = 0;
  return found;
}

/* An API stopped while a callback is under way records no outcome for it; the next API
 * sends it again (at least once). */
Test(api_hardening, a_callback_cut_short_by_a_stop_is_sent_again_by_the_next_api) {
  char *proc = it_name("dummy"), *mets = workspace("ws-again"), *out, *wf;
  it_server_t *srv = dummy_server(proc);
  const char *extra[] = {"--callback-timeout-ms", it_fmt("%d", CALLBACK_TIMEOUT_MS), NULL};
  it_api_t a = it_api_start(extra);
  int port, lfd = tarpit(&port), cfd;
  cr_assert_eq(run_wf(&a, mets, it_fmt("&workflow_callback_url=http://127.0.0.1:%d/again", port),
                      it_fmt("%s -I OCR-D-IMG -O AG1\n", proc + 5), &out),
               200, "%s", out);
  wf = it_fmt("%s", field(out, "job_id"));
  cr_assert_geq(cfd = tarpit_accept(lfd, WAIT_MS), 0, "the callback never came to the tarpit");
  it_server_signal(a.proc, SIGTERM);
  cr_assert(it_server_wait_log(a.proc, "stopping", WAIT_MS));
  close(cfd); /* the POST fails now, while the API stops */
  close(lfd);
  cr_assert_neq(it_server_wait_exit(a.proc, WAIT_MS), -1);
  it_server_stop(a.proc);
  out =
      it_sql(it_fmt("SELECT callback_state FROM mqproc_workflow_jobs WHERE job_id = '%s'", wf), 0);
  cr_expect_null(out, "an outcome was recorded while stopping: %s", out);
  /* the next API asks the store for callbacks without an outcome at its first sweep */
  lfd = tarpit_on(port);
  a = it_api_start(extra);
  cr_assert_geq(cfd = tarpit_accept(lfd, WAIT_MS), 0, "the callback was not sent again");
  cr_expect(answer_200(cfd, wf, WAIT_MS), "the callback sent again is not the run's");
  close(cfd);
  close(lfd);
  cr_expect(it_sql_becomes(it_fmt("SELECT callback_state FROM mqproc_workflow_jobs"
                                  " WHERE job_id = '%s'",
                                  wf),
                           "OK"));
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- F6: FIFOs as a METS ----------------------------------------------------------------- */

/* Opens the FIFO for writing (no wait), a few times: an API still in open() for reading
 * goes on (each request that blocked there, in turn). */
static void release(const char *fifo) {
  for (int i = 0; i < 20; i++) {
    int w = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0)
      close(w);
    usleep(50000);
  }
}

Test(api_hardening, a_fifo_as_a_mets_is_refused_with_its_reason) {
  char *proc = it_name("dummy"), *root = it_fmt("%s/root", it_tmpdir()), *out;
  /* inside the root (one outside is refused before it is looked at) */
  char *fifo = it_fmt("%s/fifo.xml", root), *link = it_fmt("%s/link.xml", root);
  it_server_t *srv = dummy_server(proc);
  it_api_t a;
  int status;
  mkdir(root, 0755);
  mkdir(it_fmt("%s/wsf", root), 0755);
  cr_assert_eq(mkfifo(fifo, 0644), 0);
  cr_assert_eq(mkfifo(it_fmt("%s/wsf/mets.xml", root), 0644), 0);
  cr_assert_eq(symlink(fifo, link), 0);
  a = it_api_start((const char *const[]){"--workspace-root", root, NULL});
  /* /workflow/run reads the METS: refused, not opened blocking */
  status = run_wf(&a, fifo, "", "dummy -I OCR-D-IMG -O F1\n", &out);
  cr_expect(status >= 400 && status < 500, "mets_path FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz after a FIFO: %s", out);
  status = run_wf(&a, link, "", "dummy -I OCR-D-IMG -O F1\n", &out);
  cr_expect(status >= 400 && status < 500, "mets_path link to a FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "link") != NULL || strstr(detail(out), "FIFO") != NULL,
            "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz after a link: %s", out);
  /* /processor/run: path_to_mets and workspace_id alike */
  status = api_json(&a, it_fmt("/processor/run/%s", proc),
                    it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                           " \"output_file_grps\": [\"F2\"]}",
                           link),
                    &out);
  cr_expect(status >= 400 && status < 500, "path_to_mets link to a FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  status = api_json(&a, it_fmt("/processor/run/%s", proc),
                    "{\"workspace_id\": \"wsf\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                    " \"output_file_grps\": [\"F3\"]}",
                    &out);
  cr_expect(status >= 400 && status < 500, "workspace_id with a FIFO mets.xml: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz at the end: %s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0, "no job was made");
  release(fifo); /* (an API that blocked in open() goes on, and can stop) */
  release(it_fmt("%s/wsf/mets.xml", root));
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- F16: a database restart ----------------------------------------------------------- */

/* PostgreSQL restarts under an API whose queue is a table queue: the next job is published
 * at once (the dead connection is found at the publish and the message sent again on a new
 * one), not left for a server's republish a minute later. Restarts the database: private
 * services only (MQPROC_TEST_RESTARTS=1, tests/CMakeLists.txt's @restart entry). */
Test(api_hardening, after_a_database_restart_the_first_publish_goes_out, .timeout = 300) {
  char *proc, *mets, *out, *body;
  it_server_t *srv;
  it_api_t a;
  long until;
  int status = 0;
  if (getenv("MQPROC_TEST_RESTARTS") == NULL || !it_queue_is_table() || it_store_is_sqlite())
    cr_skip_test("restarts PostgreSQL: private services, a PostgreSQL table queue only");
  proc = it_name("dummy");
  mets = workspace("ws-restart");
  srv = dummy_server(proc);
  a = it_api_start(NULL);
  body = it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                " \"output_file_grps\": [\"%%s\"]}",
                mets);
  cr_assert_eq(api_json(&a, it_fmt("/processor/run/%s", proc), it_fmt(body, "R1"), &out), 200, "%s",
               out);
  cr_assert(it_sql_becomes(
      it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", field(out, "job_id")),
      "SUCCESS"));
  it_tq_cleanup(); /* the harness's own connection would not survive it */
  it_services("pg-stop");
  it_services("pg-start");
  /* the API's store connection is made again by its sweep; its queue's is not used yet */
  for (until = now_ms() + WAIT_MS; now_ms() < until; usleep(200000))
    if ((status = it_http_get(a.port, "/readyz", &out)) == 200)
      break;
  cr_assert_eq(status, 200, "/readyz after the restart: %s", out);
  cr_assert_eq(api_json(&a, it_fmt("/processor/run/%s", proc), it_fmt(body, "R2"), &out), 200, "%s",
               out);
  cr_expect_eq(it_server_count_log(a.proc, "not published now"), 0,
               "the first publish after the restart failed");
  cr_expect(it_sql_becomes(
      it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", field(out, "job_id")),
      "SUCCESS"));
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* ---- F11: what an anonymous client may read; F12: where a callback may go ------------------ */

/* A token file (mode 0600) holding text; its path. */
static char *token_file(const char *name, const char *text) {
  char *path = it_fmt("%s/%s", it_tmpdir(), name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "%s\n", text);
  fclose(f);
  chmod(path, 0600);
  return path;
}

static int call_as(const it_api_t *a, const char *path, const char *token, char **out) {
  const char *args[] = {"-H", it_fmt("Authorization: Bearer %s", token), NULL};
  return it_http_req(a->port, path, token != NULL ? args : (const char *[]){NULL}, out);
}

/* With --http-admin-token, a job's log and its log's path need a token, as the status
 * page hides them; its state does not. With --http-read-token every read needs one (the
 * read or the admin token), and submitting stays as the admin token says. */
Test(api_hardening, a_jobs_log_needs_a_token_when_one_is_set) {
  char *proc = it_name("fail"), *mets = workspace("ws-log"), *out, *id;
  const char *admin = "admin-token-of-the-api-0123", *reader = "read-token-of-the-api-4567";
  const char *envp[] = {"PROC_FAIL_MATCH=-", NULL}; /* fails: its log is a file */
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_api_t a =
      it_api_start((const char *const[]){"--http-admin-token", token_file("admin", admin), NULL});
  const char *args[] = {"-X",
                        "POST",
                        "-H",
                        it_fmt("Authorization: Bearer %s", admin),
                        "-H",
                        "Content-Type: application/json",
                        "--data-binary",
                        it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                               " \"output_file_grps\": [\"LOG1\"]}",
                               mets),
                        NULL};
  cr_assert_eq(it_http_req(a.port, it_fmt("/processor/run/%s", proc), args, &out), 200, "%s", out);
  id = it_fmt("%s", field(out, "job_id"));
  cr_assert(
      it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", id), "FAILED"));
  cr_expect_eq(call_as(&a, it_fmt("/processor/log/%s", id), NULL, &out), 401, "%s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/log/%s", id), "wrong-token-wrong-token", &out), 401);
  cr_expect_eq(call_as(&a, it_fmt("/processor/log/%s", id), admin, &out), 200, "%s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/job/%s", id), NULL, &out), 200, "%s", out);
  cr_expect(strstr(out, "FAILED") != NULL && strstr(out, "log_file_path") == NULL,
            "the state, without the log's path: %s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/job/%s", id), admin, &out), 200, "%s", out);
  cr_expect(strstr(out, "log_file_path") != NULL, "with the token, the path: %s", out);
  it_server_stop(a.proc);
  a = it_api_start((const char *const[]){"--http-read-token", token_file("reader", reader), NULL});
  cr_expect_eq(call_as(&a, "/processor", NULL, &out), 401, "%s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/job/%s", id), NULL, &out), 401, "%s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/job/%s", id), reader, &out), 200, "%s", out);
  cr_expect_eq(call_as(&a, it_fmt("/processor/log/%s", id), reader, &out), 200, "%s", out);
  cr_expect_eq(call_as(&a, "/readyz", NULL, &out), 200, "/readyz stays open: %s", out);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* --callback-deny narrows where a workflow_callback_url may go (the servers' rules): a
 * callback to a denied address is refused before any connection, and says so. */
Test(api_hardening, a_workflow_callback_to_a_denied_address_is_refused) {
  char *proc = it_name("dummy"), *mets = workspace("ws-deny"), *out, *wf;
  int port, lfd = tarpit(&port);
  it_server_t *srv = dummy_server(proc);
  it_api_t a = it_api_start((const char *const[]){"--callback-deny", "127.0.0.0/8", NULL});
  cr_assert_eq(run_wf(&a, mets, it_fmt("&workflow_callback_url=http://127.0.0.1:%d/cb", port),
                      it_fmt("%s -I OCR-D-IMG -O DENY1\n", proc + 5), &out),
               200, "%s", out);
  wf = it_fmt("%s", field(out, "job_id"));
  expect_callback_failed(wf, "refused");
  cr_expect_eq(tarpit_accept(lfd, 0), -1, "a connection reached the denied address");
  close(lfd);
  it_server_stop(a.proc);
  it_server_stop(srv);
}

/* F13: with --workspace-root, a METS outside it is refused whether it exists or not (no
 * probe of the file system), also through a link inside the root; one inside runs. */
Test(api_hardening, with_a_workspace_root_a_mets_outside_it_is_refused) {
  char *proc = it_name("dummy"), *root = it_fmt("%s/root13", it_tmpdir()), *out, *mets;
  it_server_t *srv = dummy_server(proc);
  it_api_t a;
  const char *paths[] = {"/etc/passwd", "/etc/no-such-file.xml", NULL, NULL, NULL};
  mkdir(root, 0755);
  mets = workspace("root13/ws");
  cr_assert_eq(symlink("/etc/passwd", it_fmt("%s/link.xml", root)), 0);
  paths[2] = it_fmt("%s/link.xml", root);
  paths[3] = it_fmt("%s/../ws-outside/mets.xml", root);
  a = it_api_start((const char *const[]){"--workspace-root", root, NULL});
  for (int i = 0; paths[i] != NULL; i++) {
    cr_expect_eq(api_json(&a, it_fmt("/processor/run/%s", proc),
                          it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                                 " \"output_file_grps\": [\"R13\"]}",
                                 paths[i]),
                          &out),
                 422, "%s: %s", paths[i], out);
    cr_expect(strstr(detail(out), "outside --workspace-root") != NULL, "%s: %s", paths[i], out);
  }
  cr_expect_eq(api_json(&a, it_fmt("/processor/run/%s", proc),
                        it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                               " \"output_file_grps\": [\"R13\"]}",
                               mets),
                        &out),
               200, "inside: %s", out);
  cr_expect_eq(run_wf(&a, "/etc/passwd", "", it_fmt("%s -I OCR-D-IMG -O R13W\n", proc + 5), &out),
               422, "%s", out);
  it_server_stop(a.proc);
  it_server_stop(srv);
}
