/* The HTTP endpoint against hostile clients and careless callers (issue 28, items 3, 5, 6,
 * 7, 9 and 10), on every backend pair: an action on a job id that cannot be carried does
 * nothing, and the actions refuse to run without a filter whoever calls them; callback
 * passwords stay out of the request column, the page and `jobs show` while a retry still
 * publishes them; Host names that are not this server's are refused (DNS rebinding);
 * with a token, requests and logs are for those signed in; every sign-in gets a session
 * of its own that sign-out revokes and that expires, wrong tokens back off and their
 * warnings are bounded, a token longer than the read buffer is refused; /readyz answers
 * every call while the database (or the dashboard's reader) stalls; slow clients never
 * hold every slot, and a trickled request head has a deadline. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "ops/ops.h"
#include "store/queue.h"
#include "base/util.h"

#define WAIT_MS 30000
#define TOKEN "0123456789abcdef-hardening-token"
#define READ_TOKEN "fedcba9876543210-reading-token"

TestSuite(http_hardening, .fini = it_cleanup);

/* ---- helpers ------------------------------------------------------------------------ */

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

/* `mqproc dashboard` on this test's database with args (NULL-terminated) after its own. */
static it_server_t *dashboard(const char *name, const char *const *more) {
  const char *args[24] = {"dashboard",   "--database", it_db_url(),  "--queue",
                          it_amqp_url(), "--http",     "127.0.0.1:0"};
  size_t n = 7;
  for (; more != NULL && *more != NULL && n < 23; more++)
    args[n++] = *more;
  args[n] = NULL;
  return it_mqproc_spawn(name, args);
}

/* The value of the one cookie in a curl cookie jar ("" when there is none). */
static char *jar_cookie(const char *jar) {
  char *text = it_read_file(jar), *line, *save = NULL, *value = "";
  for (line = text != NULL ? strtok_r(text, "\n", &save) : NULL; line != NULL;
       line = strtok_r(NULL, "\n", &save)) {
    char *tab = strrchr(line, '\t');
    int fields = 0;
    for (const char *p = line; *p != '\0'; p++)
      fields += *p == '\t';
    if (fields == 6 && tab != NULL)
      value = it_fmt("%s", tab + 1);
  }
  return value;
}

/* A TCP connection to 127.0.0.1:port, from address src (NULL: any). */
static int dial(const char *src, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
  if (src != NULL) {
    struct sockaddr_in from = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, src, &from.sin_addr), 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0, "bind %s: %s", src,
                 strerror(errno));
  }
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0, "connect: %s", strerror(errno));
  return fd;
}

/* Sends text; 0, or -1 when the server has closed the connection. */
static int say(int fd, const char *text) {
  size_t len = strlen(text), off = 0;
  while (off < len) {
    ssize_t n = send(fd, text + off, len - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return -1;
    off += (size_t)n;
  }
  return 0;
}

/* Reads the answers on fds[0..n) until each connection is closed (the requests ask for
 * it) or deadline_ms passes; status[i] is answer i's HTTP status, 0 when none came, and
 * bodies[i] its text (owned by the harness). */
static void answers(const int *fds, int n, int64_t deadline_ms, int *status, char **bodies) {
  char *got[128] = {0};
  size_t len[128] = {0};
  int open = n;
  struct pollfd p[128];
  cr_assert_leq(n, 128);
  for (int i = 0; i < n; i++)
    p[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
  while (open > 0 && mqproc__now_ms() < deadline_ms) {
    if (poll(p, (nfds_t)n, (int)(deadline_ms - mqproc__now_ms())) <= 0)
      continue;
    for (int i = 0; i < n; i++) {
      char buf[4096];
      ssize_t r;
      if (p[i].fd < 0 || p[i].revents == 0)
        continue;
      if ((r = recv(p[i].fd, buf, sizeof(buf), 0)) > 0) {
        got[i] = realloc(got[i], len[i] + (size_t)r + 1);
        memcpy(got[i] + len[i], buf, (size_t)r);
        len[i] += (size_t)r;
        got[i][len[i]] = '\0';
        continue;
      }
      p[i].fd = -1; /* closed (or reset): its answer is complete */
      open--;
    }
  }
  for (int i = 0; i < n; i++) {
    status[i] = got[i] != NULL && strncmp(got[i], "HTTP/1.", 7) == 0 ? atoi(got[i] + 9) : 0;
    bodies[i] = it_fmt("%s", got[i] != NULL ? got[i] : "");
    free(got[i]);
  }
}

/* Whether the server closes fd within ms while one header line is sent every 200 ms. */
static int trickled_head_closed_within(int fd, int ms) {
  int64_t until = mqproc__now_ms() + ms;
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (say(fd, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n") < 0)
    return 1;
  for (int i = 0; mqproc__now_ms() < until; i++) {
    char buf[256];
    if (poll(&p, 1, 200) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0)
      return 1; /* the server ended it */
    if (say(fd, it_fmt("X-Slow-%d: still coming\r\n", i)) < 0)
      return 1;
  }
  return 0;
}

/* The job store's write lock held by this test (PostgreSQL: an ACCESS EXCLUSIVE lock on
 * table), so the server's store rounds or the page's writes wait until release_store(). */
typedef struct store_lock {
  sqlite3 *sq;
  PGconn *pg;
} store_lock_t;

static store_lock_t hold_store(const char *table) {
  store_lock_t l = {0};
  if (it_store_is_sqlite()) {
    const char *url = it_db_url();
    cr_assert(strncmp(url, "sqlite://", 9) == 0, "%s", url);
    cr_assert_eq(sqlite3_open(url + 9, &l.sq), SQLITE_OK);
    sqlite3_busy_timeout(l.sq, WAIT_MS);
    cr_assert_eq(sqlite3_exec(l.sq, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(l.sq));
    return l;
  }
  l.pg = PQconnectdb(it_db_url());
  cr_assert_eq(PQstatus(l.pg), CONNECTION_OK, "%s", PQerrorMessage(l.pg));
  PQclear(PQexec(l.pg, "BEGIN"));
  {
    PGresult *r = PQexec(l.pg, it_fmt("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE", table));
    cr_assert_eq(PQresultStatus(r), PGRES_COMMAND_OK, "%s", PQerrorMessage(l.pg));
    PQclear(r);
  }
  return l;
}

/* PostgreSQL: waits until another session's statement waits for the lock (SQLite's
 * waiters are not visible: a write simply waits). */
static void store_waited_for(const store_lock_t *l) {
  if (l->pg != NULL)
    cr_assert(it_sql_becomes(it_fmt("SELECT least(count(*), 1) FROM pg_stat_activity WHERE %d ="
                                    " ANY(pg_blocking_pids(pid))",
                                    PQbackendPID(l->pg)),
                             "1"),
              "nothing waited for the lock");
}

static void release_store(store_lock_t *l) {
  if (l->sq != NULL) {
    sqlite3_exec(l->sq, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(l->sq);
  }
  if (l->pg != NULL) {
    PQclear(PQexec(l->pg, "ROLLBACK"));
    PQfinish(l->pg);
  }
  *l = (store_lock_t){0};
}

/* ---- item 3: an id that cannot be carried ------------------------------------------- */

Test(http_hardening, an_id_that_cannot_be_carried_acts_on_nothing) {
  char *proc = it_name("carry"), *body, *out, err[512];
  const char *extra[] = {"--http", "127.0.0.1:0", "--http-admin-token", token_file(TOKEN, 0600),
                         NULL};
  const char *bearer[] = {"-X", "POST", "-H", "Authorization: Bearer " TOKEN, NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  int port = it_http_port(srv);
  mqproc__ops_retry_t no_filter = {.processor = proc, .actor = "test:hardening"};
  mqproc__odb_t *c;
  mqproc__qclient_t *amqp;
  json_t *res;
  submit(proc, "carry-ok-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'carry-ok-1'", "SUCCESS"));

  /* %FF is not UTF-8: no job can have that id, so nothing is done */
  cr_expect_eq(it_http_req(port, "/jobs/%FF/retry", bearer, &body), 400, "%s", body);
  cr_expect(strstr(body, "not UTF-8") != NULL, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/%FF/cancel", bearer, &body), 400, "%s", body);
  cr_expect_eq(it_http_req(port, "/processors/%FF/pause", bearer, &body), 400, "%s", body);

  /* the actions themselves refuse to run without a filter, whoever calls them */
  c = mqproc__odb_open(it_db_url(), 5000, err);
  cr_assert_not_null(c, "%s", err);
  amqp = mqproc__qclient_open(it_amqp_url(), NULL, &mqproc__table_qclient, err);
  cr_assert_not_null(amqp, "%s", err);
  res = mqproc__ops_retry(c, amqp, &no_filter, err);
  cr_expect_null(res, "a retry without ids or a state ran");
  cr_expect(strstr(err, "refused") != NULL, "%s", err);
  json_decref(res);
  res = mqproc__ops_cancel(c, NULL, proc, "test:hardening", NULL, err);
  cr_expect_null(res, "a cancel without ids ran");
  json_decref(res);
  mqproc__qclient_close(amqp);
  mqproc__odb_close(c);
  cr_expect_eq(it_mq(&out, "jobs", "retry", NULL), 2, "the CLI asks for ids or --state");

  cr_expect_eq(
      it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action IN ('retry', 'cancel')", 0), 0,
      "nothing was retried or cancelled");
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'carry-ok-1'", 0),
                   "SUCCESS");
  it_server_stop(srv);
}

/* ---- item 5: callback passwords ----------------------------------------------------- */

Test(http_hardening, callback_passwords_stay_out_of_the_request_column_the_page_and_jobs_show) {
  char *proc = it_name("cbpw"), *body, *out, *text;
  const char *extra[] = {"--http", "127.0.0.1:0", "--callback-retries", "0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  int port = it_http_port(srv);
  it_msg_t m;
  it_publish(proc, it_job_json(proc, "cbpw-1",
                               "{\"callback_url\": \"http://cbuser:S3cretPW@127.0.0.1:9/cb\"}"));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'cbpw-1' AND"
                           " state = 'SUCCESS' AND callback_state IS NOT NULL",
                           "1"));

  text = it_sql(it_q("SELECT request::text FROM mqproc_jobs WHERE job_id = 'cbpw-1'",
                     "SELECT request FROM mqproc_jobs WHERE job_id = 'cbpw-1'"),
                0);
  /* (the request is stored once, as its bytes: the display column is NULL for new rows,
   * masked in rows written before) */
  cr_expect(text == NULL || strstr(text, "S3cretPW") == NULL,
            "the request column holds the password: %s", text);
  cr_expect_eq(
      it_sql_long(it_q("SELECT (position('S3cretPW' in convert_from(request_body, 'UTF8')) > 0)"
                       "::int FROM mqproc_jobs WHERE job_id = 'cbpw-1'",
                       "SELECT instr(CAST(request_body AS TEXT), 'S3cretPW') > 0 FROM mqproc_jobs"
                       " WHERE job_id = 'cbpw-1'"),
                  0),
      1, "the exact bytes are kept for a replay");

  cr_assert_eq(it_http_get(port, "/jobs/cbpw-1", &body), 200, "%s", body);
  cr_expect(strstr(body, "S3cretPW") == NULL, "the page shows the password: %s", body);
  cr_expect(strstr(body, "cbuser:***@") != NULL, "%s", body);
  cr_assert_eq(it_mq(&out, "jobs", "show", "cbpw-1", "--json", NULL), 0);
  cr_expect(strstr(out, "S3cretPW") == NULL, "jobs show --json prints the password: %s", out);
  cr_expect(strstr(out, "cbuser:***@") != NULL, "%s", out);
  cr_assert_eq(it_mq(&out, "jobs", "show", "cbpw-1", NULL), 0);
  cr_expect(strstr(out, "S3cretPW") == NULL, "jobs show prints the password: %s", out);
  it_server_stop(srv);

  /* a retry publishes the message as it came, password and all */
  cr_assert_eq(it_mq(&out, "jobs", "retry", "cbpw-1", NULL), 0, "%s", out);
  cr_assert(it_get(proc, WAIT_MS, &m), "the retried job was not published");
  cr_expect(strstr(m.body, "http://cbuser:S3cretPW@127.0.0.1:9/cb") != NULL, "%s", m.body);
  it_msg_free(&m);
}

/* ---- item 6: Host names, and what a reader without a token sees ---------------------- */

Test(http_hardening, host_names_that_are_not_this_servers_are_refused) {
  char *proc = it_name("host"), *body;
  const char *extra[] = {"--http", "127.0.0.1:0", "--http-host", "mqproc.example", NULL};
  const char *dash_extra[] = {"--http-host", "dash.example,other.example", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL), *dash;
  int port = it_http_port(srv), dport;
  const char *good[] = {"127.0.0.1:%d",   "localhost:%d", "LocalHost.", "mqproc.example:%d",
                        "MQPROC.example", "[::1]:%d",     "10.1.2.3"};
  const char *bad[] = {"attacker.example:%d", "127.0.0.1.nip.io:%d", "localhost.attacker.example",
                       "mqproc.example.attacker.example", "[not-v6]:%d"};
  const char *paths[] = {"/healthz", "/jobs", "/metrics"};
  for (size_t p = 0; p < sizeof(paths) / sizeof(*paths); p++) {
    for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
      const char *h[] = {"-H", it_fmt("Host: %s", it_fmt(good[i], port)), NULL};
      cr_expect_eq(it_http_req(port, paths[p], h, &body), 200, "%s %s: %s", h[1], paths[p], body);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
      const char *h[] = {"-H", it_fmt("Host: %s", it_fmt(bad[i], port)), NULL};
      cr_expect_eq(it_http_req(port, paths[p], h, &body), 421, "%s %s: %s", h[1], paths[p], body);
      cr_expect(strstr(body, "not a name of this server") != NULL, "%s", body);
    }
  }
  {
    const char *http10[] = {"--http1.0", "-H", "Host:", NULL}; /* no Host at all */
    cr_expect_eq(it_http_req(port, "/healthz", http10, &body), 200, "%s", body);
  }

  /* the dashboard shares the check, its names from a comma list */
  dash = dashboard("dashboard-host", dash_extra);
  dport = it_http_port(dash);
  {
    const char *ok[] = {"-H", it_fmt("Host: other.example:%d", dport), NULL};
    const char *no[] = {"-H", it_fmt("Host: attacker.example:%d", dport), NULL};
    cr_expect_eq(it_http_req(dport, "/healthz", ok, &body), 200, "%s", body);
    cr_expect_eq(it_http_req(dport, "/", no, &body), 421, "%s", body);
  }
  it_server_stop(dash);
  it_server_stop(srv);
}

Test(http_hardening, with_a_token_requests_and_logs_are_for_those_signed_in) {
  char *proc = it_name("hide"), *body, *jar = it_fmt("%s/read-jar", it_tmpdir()), *origin;
  const char *extra[] = {"--http",
                         "127.0.0.1:0",
                         "--http-admin-token",
                         token_file(TOKEN, 0600),
                         "--http-read-token",
                         token_file(READ_TOKEN, 0600),
                         NULL};
  const char *dash_extra[] = {"--http-admin-token", token_file(TOKEN, 0600), NULL};
  const char *admin[] = {"-H", "Authorization: Bearer " TOKEN, NULL};
  const char *reader[] = {"-H", "Authorization: Bearer " READ_TOKEN, NULL};
  const char *reader_post[] = {"-X", "POST", "-H", "Authorization: Bearer " READ_TOKEN, NULL};
  const char *login[] = {"-c", jar, "--data-urlencode", "token=" READ_TOKEN, NULL};
  const char *cookie[] = {"-b", jar, NULL};
  const char *cookie_post[] = {"-b", jar, "-X", "POST", "-H", NULL, NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL), *dash;
  int port = it_http_port(srv);
  origin = it_fmt("Origin: http://127.0.0.1:%d", port);
  cookie_post[5] = origin;
  it_publish(proc, it_job_json(proc, "hide-1", "{\"parameters\": {\"marker\": \"REQ-MARKER-7\"}}"));
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'hide-1'", "SUCCESS"));

  /* no token: the state, times and tries, but neither the request nor the log */
  cr_assert_eq(it_http_get(port, "/jobs/hide-1", &body), 200, "%s", body);
  cr_expect(strstr(body, "SUCCESS") != NULL && strstr(body, "id=\"tries\"") != NULL, "%s", body);
  cr_expect(strstr(body, "to see the request and log") != NULL, "%s", body);
  cr_expect(strstr(body, "REQ-MARKER-7") == NULL, "the request is shown: %s", body);
  cr_expect(strstr(body, "proc.sh: job hide-1") == NULL, "the log is shown: %s", body);

  /* either token shows them, as a Bearer or through a sign-in */
  cr_assert_eq(it_http_req(port, "/jobs/hide-1", admin, &body), 200, "%s", body);
  cr_expect(strstr(body, "REQ-MARKER-7") != NULL && strstr(body, "proc.sh: job hide-1") != NULL,
            "%s", body);
  cr_assert_eq(it_http_req(port, "/jobs/hide-1", reader, &body), 200, "%s", body);
  cr_expect(strstr(body, "REQ-MARKER-7") != NULL && strstr(body, "proc.sh: job hide-1") != NULL,
            "%s", body);
  cr_assert_eq(it_http_req(port, "/login", login, &body), 303, "%s", body);
  cr_assert_eq(it_http_req(port, "/jobs/hide-1", cookie, &body), 200, "%s", body);
  cr_expect(strstr(body, "REQ-MARKER-7") != NULL && strstr(body, "signed in to read") != NULL, "%s",
            body);
  cr_expect(strstr(body, "/retry\"") == NULL, "no buttons for a reader: %s", body);

  /* the read token never acts */
  cr_expect_eq(it_http_req(port, "/jobs/hide-1/retry", reader_post, &body), 403, "%s", body);
  cr_expect_eq(it_http_req(port, "/jobs/hide-1/retry", cookie_post, &body), 403, "%s", body);
  cr_expect(strstr(body, "cannot act") != NULL, "%s", body);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit", 0), 0);

  /* the dashboard shares the page */
  dash = dashboard("dashboard-hide", dash_extra);
  cr_assert_eq(it_http_get(it_http_port(dash), "/jobs/hide-1", &body), 200, "%s", body);
  cr_expect(strstr(body, "to see the request and log") != NULL, "%s", body);
  cr_expect(strstr(body, "REQ-MARKER-7") == NULL, "the dashboard shows the request: %s", body);
  it_server_stop(dash);
  it_server_stop(srv);
}

/* ---- item 7: sessions, back-off, long tokens ---------------------------------------- */

/* POST /processors/P/resume as a browser with the session cookie value: the status. */
static int resume_with(int port, const char *proc, const char *session) {
  char *body;
  const char *args[] = {"-X", "POST",
                        "-H", it_fmt("Cookie: mqproc_session=%s", session),
                        "-H", it_fmt("Origin: http://127.0.0.1:%d", port),
                        NULL};
  return it_http_req(port, it_fmt("/processors/%s/resume", proc), args, &body);
}

/* Signs in with token; the session's cookie value ("" when refused). */
static char *sign_in(int port, const char *token) {
  static int n;
  char *jar = it_fmt("%s/jar-%d", it_tmpdir(), ++n), *body;
  const char *args[] = {"-c", jar, "--data-urlencode", it_fmt("token=%s", token), NULL};
  it_http_req(port, "/login", args, &body);
  return jar_cookie(jar);
}

Test(http_hardening, each_sign_in_gets_its_own_session_that_sign_out_revokes) {
  char *proc = it_name("sess"), *a, *b, *body;
  const char *more[] = {"--http-admin-token", token_file(TOKEN, 0600), NULL};
  const char *ttl_more[] = {"--http-admin-token", token_file(TOKEN, 0600), "--http-session-ttl",
                            "1", NULL};
  it_server_t *dash = dashboard("dashboard-sessions", more), *brief;
  int port = it_http_port(dash), i;
  a = sign_in(port, TOKEN);
  b = sign_in(port, TOKEN);
  cr_assert(a[0] != '\0' && b[0] != '\0', "no session cookie");
  cr_expect_str_neq(a, b, "two sign-ins share a session");
  cr_expect_geq(strlen(a), 64, "a short session: %s", a);
  cr_expect_eq(resume_with(port, proc, a), 303);

  /* sign-out forgets the session on the server: its cookie no longer acts */
  {
    const char *out[] = {"-X", "POST", "-H", it_fmt("Cookie: mqproc_session=%s", a), NULL};
    cr_assert_eq(it_http_req(port, "/logout", out, &body), 303, "%s", body);
  }
  cr_expect_eq(resume_with(port, proc, a), 401, "a signed-out session still acts");
  cr_expect_eq(resume_with(port, proc, b), 303, "the other session was signed out too");

  /* the table is bounded: 64 newer sign-ins push the oldest out */
  for (i = 0; i < 64; i++)
    cr_assert_neq(sign_in(port, TOKEN)[0], '\0');
  cr_expect_eq(resume_with(port, proc, b), 401, "the oldest session outlived the table");
  it_server_stop(dash);

  /* a session expires */
  brief = dashboard("dashboard-ttl", ttl_more);
  port = it_http_port(brief);
  a = sign_in(port, TOKEN);
  cr_assert(a[0] != '\0');
  for (int64_t until = mqproc__now_ms() + 10000;
       (i = resume_with(port, proc, a)) != 401 && mqproc__now_ms() < until;)
    usleep(100 * 1000); /* the event awaited is the clock */
  cr_expect_eq(i, 401, "a session of --http-session-ttl 1 still acts after 10 s");
  it_server_stop(brief);
}

Test(http_hardening, wrong_tokens_back_off_and_their_warnings_are_bounded) {
  const char *more[] = {"--http-admin-token", token_file(TOKEN, 0600), NULL};
  it_server_t *dash = dashboard("dashboard-backoff", more);
  int port = it_http_port(dash), refused = 0, i;
  char *body;
  for (i = 0; i < 30; i++) {
    const char *args[] = {"-i", "--data-urlencode", "token=wrong-wrong-wrong-wrong", NULL};
    int st = it_http_req(port, "/login", args, &body);
    if (i < 4)
      cr_expect_eq(st, 403, "attempt %d: %s", i, body);
    if (st == 429) {
      refused++;
      cr_expect(strstr(body, "Retry-After: ") != NULL, "%s", body);
    }
  }
  cr_expect_gt(refused, 0, "30 wrong tokens in a row were all looked at");
  cr_expect_leq(it_server_count_log(dash, "wrong token"), 10, "the warnings are not bounded");
  /* the right token gets in once the back-off is over */
  for (int64_t until = mqproc__now_ms() + 70000; /* the back-off is at most 60 s */
       (i = sign_in(port, TOKEN)[0] != '\0') == 0 && mqproc__now_ms() < until;)
    usleep(100 * 1000);
  cr_expect_eq(i, 1, "the right token never got in again");
  it_server_stop(dash);
}

Test(http_hardening, a_token_longer_than_the_read_buffer_is_refused) {
  char long_token[1501];
  const char *lengths[] = {"1023", "1500"};
  for (size_t k = 0; k < 2; k++) {
    size_t n = (size_t)atoi(lengths[k]);
    const char *more[] = {"--http-admin-token", NULL, NULL};
    it_server_t *d;
    int st;
    memset(long_token, 'x', n);
    long_token[n] = '\0';
    more[1] = token_file(long_token, 0600);
    d = dashboard("dashboard-long-token", more);
    st = it_server_wait_exit(d, WAIT_MS);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s characters: wait status %d", lengths[k],
              st);
    cr_expect(it_server_count_log(d, "longer than 1022 characters") > 0, "the reason");
    it_server_stop(d);
  }
  { /* 1022 characters fit */
    const char *more[] = {"--http-admin-token", NULL, NULL};
    it_server_t *d;
    char *body;
    memset(long_token, 'y', 1022);
    long_token[1022] = '\0';
    more[1] = token_file(long_token, 0600);
    d = dashboard("dashboard-1022", more);
    cr_expect_eq(it_http_get(it_http_port(d), "/healthz", &body), 200);
    it_server_stop(d);
  }
}

/* ---- item 9: /readyz while the database stalls --------------------------------------- */

#define READYZ_CALLS 70

Test(http_hardening, readyz_answers_every_call_while_the_database_stalls) {
  char *proc = it_name("stall"), *body, *bodies[READYZ_CALLS];
  const char *quick[] = {"-m", "5", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"),
                                     (const char *const[]){"--http", "127.0.0.1:0", NULL}, NULL);
  int port = it_http_port(srv), fds[READYZ_CALLS], status[READYZ_CALLS], late = 0;
  store_lock_t lock = hold_store("mqproc_workers"); /* its beats wait, and the pings after */
  store_waited_for(&lock);
  /* the first call's ping stalls: its deadline answers it */
  cr_assert_eq(it_http_get(port, "/readyz", &body), 503, "%s", body);
  cr_expect(strstr(body, "no answer") != NULL, "the ping did not stall: %s", body);
  /* the calls that come while that ping is still on its way are answered too: by its
   * deadline, or at once beyond the MQPROC__HTTP_READY_MAX that may wait */
  for (int i = 0; i < READYZ_CALLS; i++) {
    fds[i] = dial(NULL, port);
    cr_assert_eq(
        say(fds[i], "GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"), 0);
  }
  cr_expect_eq(it_http_req(port, "/healthz", quick, &body), 200, "/healthz: %s", body);
  answers(fds, READYZ_CALLS, mqproc__now_ms() + 15000, status, bodies);
  for (int i = 0; i < READYZ_CALLS; i++) {
    cr_expect_eq(status[i], 503, "/readyz call %d: '%s'", i, bodies[i]);
    cr_expect(strstr(bodies[i], "\"database: ") != NULL, "call %d: '%s'", i, bodies[i]);
    late += strstr(bodies[i], "no answer") != NULL;
    close(fds[i]);
  }
  cr_expect_gt(late, 0, "no call waited for the ping's deadline");
  release_store(&lock);
  for (int64_t until = mqproc__now_ms() + WAIT_MS;
       it_http_req(port, "/readyz", quick, &body) != 200 && mqproc__now_ms() < until;)
    usleep(100 * 1000);
  cr_expect_eq(it_http_req(port, "/readyz", quick, &body), 200, "ready again: %s", body);
  it_server_stop(srv);
}

Test(http_hardening, the_dashboards_readyz_answers_while_its_reader_is_stuck) {
  char *proc = it_name("dstall"), *body;
  const char *more[] = {"--http-admin-token", token_file(TOKEN, 0600), NULL};
  const char *quick[] = {"-m", "3", NULL};
  it_server_t *dash = dashboard("dashboard-stall", more);
  int port = it_http_port(dash), fd, st, late = 0;
  store_lock_t lock = hold_store("mqproc_control");
  /* a pause waits for the lock on the page's only reader */
  fd = dial(NULL, port);
  cr_assert_eq(say(fd, it_fmt("POST /processors/%s/pause HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Authorization: Bearer " TOKEN "\r\nContent-Length: 0\r\n"
                              "Connection: close\r\n\r\n",
                              proc)),
               0);
  store_waited_for(&lock);
  /* /readyz's ping queues behind it: every call is answered by its deadline */
  for (int i = 0; i < 3; i++) {
    st = it_http_req(port, "/readyz", quick, &body);
    cr_expect(st == 503 || st == 200, "/readyz call %d: %d '%s'", i, st, body);
    late += st == 503 && strstr(body, "no answer") != NULL;
  }
  cr_expect_gt(late, 0, "the reader was never stuck");
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200);
  release_store(&lock);
  close(fd);
  it_server_stop(dash);
}

/* ---- item 10: slow clients ---------------------------------------------------------- */

#define SLOW_FROM_ONE 40
#define SLOW_FROM_MANY 40

Test(http_hardening, slow_clients_never_hold_every_slot_and_a_trickled_head_has_a_deadline) {
  char *proc = it_name("slow"), *body;
  const char *envp[] = {"MQPROC_HTTP_HEAD_TIMEOUT_MS=2000", NULL};
  const char *quick[] = {"-m", "5", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"),
                                     (const char *const[]){"--http", "127.0.0.1:0", NULL}, envp);
  int port = it_http_port(srv), fds[SLOW_FROM_ONE + SLOW_FROM_MANY], n = 0, fd;
  /* more unfinished request heads than there are slots: from the probes' own address,
   * and one each from many others */
  for (int i = 0; i < SLOW_FROM_ONE; i++)
    fds[n++] = dial(NULL, port);
  for (int i = 0; i < SLOW_FROM_MANY; i++)
    fds[n++] = dial(it_fmt("127.0.0.%d", 2 + i), port);
  for (int i = 0; i < n; i++)
    say(fds[i], "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  cr_expect_eq(it_http_req(port, "/healthz", quick, &body), 200, "/healthz under slow clients");
  cr_expect_eq(it_http_req(port, "/metrics", quick, &body), 200, "/metrics under slow clients");
  for (int i = 0; i < n; i++)
    close(fds[i]);

  /* a head trickled one line at a time is cut at its deadline (2 s here), though each
   * line restarts the idle timer */
  fd = dial(NULL, port);
  cr_expect(trickled_head_closed_within(fd, 20000), "a trickled head kept its slot for 20 s");
  close(fd);
  cr_expect_eq(it_http_req(port, "/healthz", quick, &body), 200);
  it_server_stop(srv);
}
