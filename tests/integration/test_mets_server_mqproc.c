/* Integration: mqproc's own METS server, `mqproc mets-server` (issue 37).
 *
 * A real `mqproc mets-server` process on a workspace, driven over its Unix socket and over
 * TCP with plain HTTP requests as OCR-D core's ClientSideOcrdMets (ocrd/mets_server.py)
 * sends them: POST /file as a form, POST /agent as JSON, GET /file with a query, PUT / to
 * save. What it promises beyond OCR-D's own server, each checked here:
 *   (a) added files are in mets.xml on disk after SIGTERM, and once its save interval has
 *       passed while it keeps serving;
 *   (b) killed with -9 right after a 200, the next server of the workspace replays the
 *       journal: the entry is there and mets.xml is a valid METS;
 *   (c) a client that sends half a request and goes, or dies mid-request, costs nothing:
 *       the next request is served;
 *   (d) a local_filename outside the workspace ("..", absolute elsewhere, through a symlink
 *       out) is refused with a 4xx and nothing is written outside;
 *   (e) a second server of the same workspace exits 3 (EXIT_LOCKED) saying why, and the
 *       first keeps serving;
 *   (f) core's own ClientSideOcrdMets (../shared/ocrd, skipped when absent) adds files
 *       through it and finds them again.
 * No broker and no database are used. */
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "codec/mets.h"
#include "mqproc/mqproc.h"
#include "harness.h"
#include "ocrd_workspace.h"

#define WAIT_MS 30000
#define NEVER "3600000" /* a save interval that does not fire during a test */
#define PAGE_MIME "application/vnd.prima.page+xml"
#define OCRD MQPROC_SOURCE_DIR "/../shared/ocrd"
#define EXIT_LOCKED 3 /* src/cli/mets_server.c: another holds the workspace lock */

/* Directories made under /tmp by short_dir(), removed at the end of the test however it
 * ended (a socket's path must fit in 108 bytes: the build tree's may not). */
static char *g_dirs[6];
static size_t g_n_dirs;

static void fini(void) {
  while (g_n_dirs > 0) {
    ows_rmtree(g_dirs[--g_n_dirs]);
    free(g_dirs[g_n_dirs]);
  }
  it_cleanup();
}

TestSuite(mets_server_mqproc, .fini = fini, .timeout = 120);

/* ---- helpers ------------------------------------------------------------------------- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *short_dir(void) {
  char *d = ows_mkdtemp();
  cr_assert_not_null(d);
  cr_assert_lt(g_n_dirs, sizeof(g_dirs) / sizeof(g_dirs[0]));
  return g_dirs[g_n_dirs++] = d;
}

/* A two-page workspace in a new directory under /tmp: its METS path. */
static char *workspace(void) {
  static const ows_page_t pages[] = {{2, 2}, {2, 2}};
  char *ws = short_dir();
  cr_assert_eq(ows_create(ws, pages, 2), 0);
  return it_fmt("%s/mets.xml", ws);
}

static char *dir_of(const char *mets) {
  return it_fmt("%.*s", (int)(strrchr(mets, '/') - mets), mets);
}

static char *journal_of(const char *mets) {
  return it_fmt("%s/.mets.xml.mqproc-journal", dir_of(mets));
}

typedef struct ms {
  it_server_t *srv;
  const char *mets;
  const char *sock; /* its Unix socket, or NULL: TCP on 127.0.0.1:port */
  int port;
} ms_t;

/* `mqproc mets-server --mets mets` on a new socket (tcp: on 127.0.0.1, any port), saving
 * every save_ms, spawned (ms_start() waits until it serves). */
static ms_t ms_spawn(const char *mets, int tcp, const char *save_ms) {
  ms_t m = {.mets = mets};
  if (!tcp)
    m.sock = it_fmt("%s/mets.sock", short_dir());
  const char *args[] = {"mets-server",
                        "--mets",
                        mets,
                        tcp ? "--listen" : "--socket",
                        tcp ? "127.0.0.1:0" : m.sock,
                        "--save-interval",
                        save_ms,
                        "--ready-fd",
                        "1",
                        NULL};
  m.srv = it_mqproc_spawn(it_name("mets"), args);
  return m;
}

static ms_t ms_start(const char *mets, int tcp, const char *save_ms) {
  ms_t m = ms_spawn(mets, tcp, save_ms);
  cr_assert(it_server_wait_log(m.srv, "ready", WAIT_MS), "the METS server did not start");
  for (size_t i = 0; tcp && m.port == 0; i++) {
    char *line = it_server_line(m.srv, i);
    cr_assert_not_null(line, "no port in the METS server's ready line");
    if (strncmp(line, "ready ", 6) == 0)
      m.port = atoi(line + 6);
  }
  return m;
}

static int alive(const ms_t *m) {
  return it_server_wait_exit(m->srv, 0) == -1;
}

/* A new connection to the server; -1 when it cannot be made. */
static int connect_to(const ms_t *m) {
  int fd;
  if (m->sock != NULL) {
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", m->sock);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
      close(fd);
      fd = -1;
    }
  } else {
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)m->port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
      close(fd);
      fd = -1;
    }
  }
  return fd;
}

static void send_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, data, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    cr_assert_gt(n, 0, "send: %s", strerror(errno));
    data += n;
    len -= (size_t)n;
  }
}

/* The Host header requests sends: the socket's path %-encoded as requests_unixsocket puts it
 * in the URL (ClientSideOcrdMets), or 127.0.0.1:PORT. */
static char *host_of(const ms_t *m) {
  if (m->sock == NULL)
    return it_fmt("127.0.0.1:%d", m->port);
  char *h = it_fmt("%*s", (int)strlen(m->sock) * 3, ""), *o = h;
  for (const char *p = m->sock; *p; p++)
    o += *p == '/' ? sprintf(o, "%%2F") : *p == '.' ? sprintf(o, "%%2E") : sprintf(o, "%c", *p);
  *o = '\0';
  return h;
}

/* The head of a request as requests sends it. */
static char *head(const ms_t *m, const char *method, const char *target, const char *ctype,
                  size_t len) {
  return it_fmt("%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: python-requests/2.28.1\r\n"
                "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n"
                "%s%s%sContent-Length: %zu\r\n\r\n",
                method, target, host_of(m), ctype != NULL ? "Content-Type: " : "",
                ctype != NULL ? ctype : "", ctype != NULL ? "\r\n" : "", len);
}

/* One request on a new connection: the status (0: no answer), *body the answer's body. */
static int http(const ms_t *m, const char *method, const char *target, const char *ctype,
                const char *body, char **answer) {
  int fd = connect_to(m), status = 0;
  size_t blen = body != NULL ? strlen(body) : 0, got = 0, cap = 65536;
  char *buf = it_fmt("%*s", (int)cap, ""), *h = head(m, method, target, ctype, blen), *end;
  int64_t deadline = now_ms() + WAIT_MS;
  cr_assert_geq(fd, 0, "cannot connect to the METS server: %s", strerror(errno));
  send_all(fd, h, strlen(h));
  if (blen > 0)
    send_all(fd, body, blen);
  /* read until the answer is whole: its head and Content-Length bytes */
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ssize_t n;
    long clen;
    buf[got] = '\0';
    if ((end = strstr(buf, "\r\n\r\n")) != NULL) {
      char *cl = strcasestr(buf, "\r\ncontent-length:");
      clen = cl != NULL && cl < end ? atol(cl + 17) : -1;
      if (clen >= 0 && got >= (size_t)(end + 4 - buf) + (size_t)clen)
        break;
    }
    cr_assert_lt(now_ms(), deadline, "no whole answer to %s %s: %s", method, target, buf);
    if (poll(&p, 1, 100) <= 0)
      continue;
    if ((n = read(fd, buf + got, cap - 1 - got)) <= 0)
      break;
    got += (size_t)n;
  }
  close(fd);
  buf[got] = '\0';
  if (strncmp(buf, "HTTP/1.1 ", 9) == 0)
    status = atoi(buf + 9);
  if (answer != NULL)
    *answer = (end = strstr(buf, "\r\n\r\n")) != NULL ? end + 4 : buf + got;
  return status;
}

/* application/x-www-form-urlencoded, as requests encodes a dict (quote_plus). */
static char *form_enc(const char *v) {
  char *e = it_fmt("%*s", (int)strlen(v) * 3, ""), *o = e;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~", *p) != NULL)
      *o++ = (char)*p;
    else if (*p == ' ')
      *o++ = '+';
    else
      o += sprintf(o, "%%%02X", *p);
  }
  *o = '\0';
  return e;
}

/* ClientSideOcrdMets.add_file's form (None values are left out by requests). */
static char *file_form(const char *grp, const char *id, const char *page, const char *local) {
  char *f = it_fmt("file_grp=%s&file_id=%s", form_enc(grp), form_enc(id));
  if (page != NULL)
    f = it_fmt("%s&page_id=%s", f, form_enc(page));
  f = it_fmt("%s&mimetype=%s", f, form_enc(PAGE_MIME));
  if (local != NULL)
    f = it_fmt("%s&local_filename=%s", f, form_enc(local));
  return f;
}

/* POST /file: the status, *answer its body. */
static int add_file(const ms_t *m, const char *grp, const char *id, const char *page,
                    const char *local, char **answer) {
  return http(m, "POST", "/file", "application/x-www-form-urlencoded",
              file_form(grp, id, page, local), answer);
}

static void must_add(const ms_t *m, const char *grp, const char *id, const char *page) {
  char *answer;
  int st = add_file(m, grp, id, page, it_fmt("%s/%s.xml", grp, id), &answer);
  cr_assert_eq(st, 200, "POST /file %s: %d %s", id, st, answer);
}

/* The files GET /file?file_id=id finds (the ids, comma-separated). */
static char *found(const ms_t *m, const char *id) {
  char *answer, *ids = it_fmt("%s", "");
  int st = http(m, "GET", it_fmt("/file?file_id=%s", form_enc(id)), NULL, NULL, &answer);
  json_t *doc, *f;
  size_t i;
  cr_assert_eq(st, 200, "GET /file: %d %s", st, answer);
  doc = it_json(answer);
  json_array_foreach(json_object_get(doc, "files"), i, f) ids =
      it_fmt("%s%s%s", ids, i > 0 ? "," : "", json_string_value(json_object_get(f, "file_id")));
  json_decref(doc);
  return ids;
}

/* mets.xml on disk, parsed (the test fails when it is no valid METS): whether it lists file
 * id in grp for page with local_filename grp/id.xml. */
static int on_disk(const char *mets, const char *grp, const char *id, const char *page) {
  char err[512];
  mqproc__mets_t *doc;
  mqproc__mets_query_t q = {.file_grp = grp, .file_id = id};
  json_t *files, *f;
  int there;
  cr_assert_eq(mqproc__mets_load(mets, &doc, err), MQPROC_OK, "mets.xml is no valid METS: %s", err);
  cr_assert_eq(mqproc__mets_find(doc, &q, &files, err), MQPROC_OK, "%s", err);
  f = json_array_get(files, 0);
  there = f != NULL;
  if (there) {
    cr_expect_str_eq(json_string_value(json_object_get(f, "page_id")), page);
    cr_expect_str_eq(json_string_value(json_object_get(f, "mimetype")), PAGE_MIME);
    cr_expect_str_eq(json_string_value(json_object_get(f, "local_filename")),
                     it_fmt("%s/%s.xml", grp, id));
  }
  json_decref(files);
  mqproc__mets_free(doc);
  return there;
}

/* Waits (bounded) until mets.xml on disk lists the file. */
static int becomes_on_disk(const char *mets, const char *grp, const char *id, const char *page) {
  for (int64_t deadline = now_ms() + WAIT_MS; now_ms() < deadline; usleep(20 * 1000)) {
    char *text = it_read_file(mets);
    if (text != NULL && strstr(text, it_fmt("ID=\"%s\"", id)) != NULL)
      return on_disk(mets, grp, id, page);
  }
  return 0;
}

/* SIGTERM: it saves and exits 0. */
static void term(ms_t *m) {
  int st;
  it_server_signal(m->srv, SIGTERM);
  st = it_server_wait_exit(m->srv, WAIT_MS);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "mets-server after SIGTERM: %#x",
            st);
}

/* ---- (a) saved on stop and on its schedule --------------------------------------------- */

static void saved_on_sigterm(int tcp) {
  char *mets = workspace(), *before = it_read_file(mets);
  ms_t m = ms_start(mets, tcp, NEVER);
  must_add(&m, "OCR-D-A", "A_0001", "PHYS_0001");
  must_add(&m, "OCR-D-A", "A_0002", "PHYS_0002");
  cr_expect_str_eq(found(&m, "A_0002"), "A_0002");
  cr_expect_str_eq(it_read_file(mets), before, "saved before the stop: nothing to test");
  term(&m);
  cr_expect(on_disk(mets, "OCR-D-A", "A_0001", "PHYS_0001"), "A_0001 not saved on SIGTERM");
  cr_expect(on_disk(mets, "OCR-D-A", "A_0002", "PHYS_0002"), "A_0002 not saved on SIGTERM");
  cr_expect_null(it_read_file(journal_of(mets)), "the journal stays after a clean stop");
  it_server_stop(m.srv);
}

Test(mets_server_mqproc, added_files_are_saved_on_sigterm_unix_socket) {
  saved_on_sigterm(0);
}

Test(mets_server_mqproc, added_files_are_saved_on_sigterm_tcp) {
  saved_on_sigterm(1);
}

static void saved_on_schedule(int tcp) {
  char *mets = workspace();
  ms_t m = ms_start(mets, tcp, "300");
  must_add(&m, "OCR-D-S", "S_0001", "PHYS_0001");
  cr_expect(becomes_on_disk(mets, "OCR-D-S", "S_0001", "PHYS_0001"),
            "not saved within %d ms with --save-interval 300", WAIT_MS);
  cr_expect(alive(&m), "the server stopped");
  /* a second change after the first save: saved again */
  must_add(&m, "OCR-D-S", "S_0002", "PHYS_0002");
  cr_expect(becomes_on_disk(mets, "OCR-D-S", "S_0002", "PHYS_0002"), "the second add not saved");
  cr_expect_str_eq(found(&m, "//S_000."), "S_0001,S_0002");
  term(&m);
  it_server_stop(m.srv);
}

Test(mets_server_mqproc, added_files_are_saved_on_its_schedule_unix_socket) {
  saved_on_schedule(0);
}

Test(mets_server_mqproc, added_files_are_saved_on_its_schedule_tcp) {
  saved_on_schedule(1);
}

/* ---- (b) kill -9: the journal ----------------------------------------------------------- */

static void survives_kill_9(int tcp) {
  char *mets = workspace(), *before = it_read_file(mets), *answer;
  const char *agent = "{\"name\":\"ocrd-k9 v1\",\"type\":\"OTHER\",\"role\":\"OTHER\","
                      "\"otherrole\":\"preprocessing\",\"othertype\":\"SOFTWARE\","
                      "\"notes\":[[{\"option\":\"input-file-grp\"},\"OCR-D-IMG\"]]}";
  ms_t m = ms_start(mets, tcp, NEVER), m2, m3;
  int st;
  must_add(&m, "OCR-D-K", "K_0001", "PHYS_0001");
  cr_assert_eq(http(&m, "POST", "/agent", "application/json", agent, &answer), 200, "%s", answer);
  must_add(&m, "OCR-D-K", "K_0002", "PHYS_0002");
  it_server_signal(m.srv, SIGKILL);
  st = it_server_wait_exit(m.srv, WAIT_MS);
  cr_assert(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%#x", st);
  cr_assert_str_eq(it_read_file(mets), before, "saved before the kill: nothing to test");
  cr_assert_not_null(it_read_file(journal_of(mets)), "no journal after the kill");
  it_server_stop(m.srv);
  /* the next server of the workspace: replays, saves what it replayed */
  m2 = ms_start(mets, tcp, NEVER);
  cr_expect_eq(it_server_count_log(m2.srv, "replayed 3 of 3 journal entries"), 1,
               "the journal was not replayed");
  cr_expect_str_eq(found(&m2, "//K_000."), "K_0001,K_0002", "entries lost by kill -9");
  cr_expect_eq(http(&m2, "GET", "/agent", NULL, NULL, &answer), 200);
  cr_expect(strstr(answer, "ocrd-k9 v1") != NULL, "the agent was lost: %s", answer);
  cr_expect(on_disk(mets, "OCR-D-K", "K_0001", "PHYS_0001"), "not in mets.xml after the replay");
  cr_expect(on_disk(mets, "OCR-D-K", "K_0002", "PHYS_0002"), "not in mets.xml after the replay");
  cr_expect(strstr(it_read_file(mets), "ocrd-k9 v1") != NULL, "the agent not in mets.xml");
  term(&m2);
  cr_expect(on_disk(mets, "OCR-D-K", "K_0002", "PHYS_0002"));
  it_server_stop(m2.srv);
  /* replayed once: a third start finds nothing to replay and no duplicate */
  m3 = ms_start(mets, tcp, NEVER);
  cr_expect_eq(it_server_count_log(m3.srv, "replayed"), 0);
  cr_expect_str_eq(found(&m3, "//K_000."), "K_0001,K_0002");
  term(&m3);
  it_server_stop(m3.srv);
}

Test(mets_server_mqproc, kill_9_after_a_200_loses_no_entry_unix_socket) {
  survives_kill_9(0);
}

Test(mets_server_mqproc, kill_9_after_a_200_loses_no_entry_tcp) {
  survives_kill_9(1);
}

/* ---- (c) half requests -------------------------------------------------------------------- */

/* Sends data on a new connection and closes it. */
static void send_and_go(const ms_t *m, const char *data, size_t len) {
  int fd = connect_to(m);
  cr_assert_geq(fd, 0);
  send_all(fd, data, len);
  close(fd);
}

static void next_is_served(const ms_t *m, const char *id, const char *after) {
  char *answer;
  cr_expect(alive(m), "the server died after %s", after);
  cr_expect_eq(add_file(m, "OCR-D-H", id, "PHYS_0001", it_fmt("OCR-D-H/%s.xml", id), &answer), 200,
               "after %s: %s", after, answer);
  cr_expect_str_eq(found(m, id), id, "after %s", after);
}

static void half_requests(int tcp) {
  char *mets = workspace();
  ms_t m = ms_start(mets, tcp, NEVER);
  int socks = it_count_sockets(it_server_pid(m.srv)); /* before any connection */
  char *form = file_form("OCR-D-H", "HALF", "PHYS_0001", "OCR-D-H/HALF.xml");
  char *full = it_fmt(
      "%s%s", head(&m, "POST", "/file", "application/x-www-form-urlencoded", strlen(form)), form);
  size_t head_len = strlen(full) - strlen(form);
  pid_t child;
  int st, fd;
  /* half a head, then gone */
  send_and_go(&m, full, head_len / 2);
  next_is_served(&m, "H_0001", "half a head");
  /* the whole head, half the body, then gone */
  send_and_go(&m, full, head_len + strlen(form) / 2);
  next_is_served(&m, "H_0002", "half a body");
  /* a client that dies mid-request (killed: the kernel closes its connection) */
  for (int64_t deadline = now_ms() + WAIT_MS; /* the earlier connections closed by it */
       it_count_sockets(it_server_pid(m.srv)) > socks && now_ms() < deadline;)
    usleep(10 * 1000);
  child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    int cfd = connect_to(&m);
    if (cfd < 0 || send(cfd, full, head_len + 10, MSG_NOSIGNAL) < 0)
      _exit(1);
    pause();
    _exit(0);
  }
  /* awaited: the server has taken its connection */
  for (int64_t deadline = now_ms() + WAIT_MS;
       it_count_sockets(it_server_pid(m.srv)) <= socks && now_ms() < deadline;)
    usleep(10 * 1000);
  cr_expect_gt(it_count_sockets(it_server_pid(m.srv)), socks, "the client's connection not seen");
  kill(child, SIGKILL);
  cr_assert_eq(waitpid(child, &st, 0), child);
  cr_assert(WIFSIGNALED(st), "the client ended by itself: %#x", st);
  next_is_served(&m, "H_0003", "a client killed mid-request");
  /* one that sends half and stays: others are served meanwhile */
  fd = connect_to(&m);
  cr_assert_geq(fd, 0);
  send_all(fd, full, head_len + 5);
  next_is_served(&m, "H_0004", "a client that stalls mid-body");
  close(fd);
  /* none of the half requests was taken as a change */
  cr_expect_str_eq(found(&m, "HALF"), "", "a half request added its file");
  term(&m);
  cr_expect(!on_disk(mets, "OCR-D-H", "HALF", "PHYS_0001"));
  cr_expect(on_disk(mets, "OCR-D-H", "H_0004", "PHYS_0001"));
  it_server_stop(m.srv);
}

Test(mets_server_mqproc, half_requests_do_not_stop_the_server_unix_socket) {
  half_requests(0);
}

Test(mets_server_mqproc, half_requests_do_not_stop_the_server_tcp) {
  half_requests(1);
}

/* ---- (d) paths outside the workspace -------------------------------------------------------- */

static void outside_refused(int tcp) {
  char *mets = workspace(), *ws = dir_of(mets), *out = short_dir(), *answer;
  char *out_name = strrchr(out, '/') + 1;
  ms_t m;
  const char *bad[] = {
      "../x.xml",
      it_fmt("../%s/x.xml", out_name),
      "OCR-D-O/../../x.xml",
      it_fmt("%s/x.xml", out),
      it_fmt("%s/../%s/x.xml", ws, out_name),
      "/etc/x.xml",
      "link/x.xml",
      "link/sub/x.xml",
      it_fmt("%s/link/x.xml", ws),
      "./link/../link/x.xml",
  };
  cr_assert_eq(symlink(out, it_fmt("%s/link", ws)), 0, "%s", strerror(errno));
  m = ms_start(mets, tcp, "100");
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *id = it_fmt("OUT_%04zu", i);
    int st = add_file(&m, "OCR-D-O", id, "PHYS_0001", bad[i], &answer);
    cr_expect(st >= 400 && st < 500, "local_filename %s: %d %s (want 4xx)", bad[i], st, answer);
    cr_expect_str_eq(found(&m, id), "", "%s was added", bad[i]);
  }
  /* what is inside is taken (a ".." that stays inside too) */
  cr_expect_eq(
      add_file(&m, "OCR-D-O", "IN_0001", "PHYS_0001", "OCR-D-O/../OCR-D-O/IN_0001.xml", &answer),
      200, "%s", answer);
  cr_expect_eq(add_file(&m, "OCR-D-O", "IN_0002", "PHYS_0002", it_fmt("%s/OCR-D-O/IN_0002.xml", ws),
                        &answer),
               200, "%s", answer);
  cr_expect_eq(http(&m, "PUT", "/", NULL, NULL, &answer), 200, "%s", answer);
  term(&m);
  cr_expect(strstr(it_read_file(mets), "IN_0002") != NULL);
  cr_expect(strstr(it_read_file(mets), "OUT_") == NULL, "a refused file is in mets.xml");
  cr_expect_eq(it_files_in(out), 0, "something was written outside the workspace");
  cr_expect_eq(access(it_fmt("%s/../x.xml", ws), F_OK), -1, "written above the workspace");
  it_server_stop(m.srv);
}

Test(mets_server_mqproc, paths_outside_the_workspace_are_refused_unix_socket) {
  outside_refused(0);
}

Test(mets_server_mqproc, paths_outside_the_workspace_are_refused_tcp) {
  outside_refused(1);
}

/* ---- (e) one server per workspace ------------------------------------------------------------ */

Test(mets_server_mqproc, a_second_server_of_the_workspace_exits_3_and_the_first_serves_on) {
  char *mets = workspace();
  ms_t first = ms_start(mets, 0, NEVER), second, third;
  int st;
  must_add(&first, "OCR-D-L", "L_0001", "PHYS_0001");
  second = ms_spawn(mets, 0, NEVER);
  st = it_server_wait_exit(second.srv, WAIT_MS);
  cr_assert(st != -1 && WIFEXITED(st), "the second server did not exit: %#x", st);
  cr_expect_eq(WEXITSTATUS(st), EXIT_LOCKED);
  cr_expect(it_server_count_log(second.srv, "is held by another") == 1,
            "the second server does not say why");
  cr_expect_eq(access(second.sock, F_OK), -1, "the second server left its socket");
  third = ms_spawn(mets, 1, NEVER); /* over TCP too */
  st = it_server_wait_exit(third.srv, WAIT_MS);
  cr_expect(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_LOCKED, "%#x", st);
  /* the first one serves on, its unsaved entry kept */
  cr_expect(alive(&first));
  must_add(&first, "OCR-D-L", "L_0002", "PHYS_0002");
  cr_expect_str_eq(found(&first, "//L_000."), "L_0001,L_0002");
  term(&first);
  cr_expect(on_disk(mets, "OCR-D-L", "L_0001", "PHYS_0001"));
  cr_expect(on_disk(mets, "OCR-D-L", "L_0002", "PHYS_0002"));
  it_server_stop(second.srv);
  it_server_stop(third.srv);
  it_server_stop(first.srv);
}

/* ---- (f) OCR-D core's own client ----------------------------------------------------------------
 */

static const char CLIENT_PY[] =
    "import sys\n"
    "from ocrd.mets_server import ClientSideOcrdMets\n"
    "c = ClientSideOcrdMets(sys.argv[1])\n"
    "print('ws', c.workspace_path)\n"
    "print('pages', ','.join(c.physical_pages))\n"
    "for i, page in enumerate(c.physical_pages, 1):\n"
    "    c.add_file('OCR-D-PY', ID='PY_%04d' % i, pageId=page,\n"
    "               mimetype='application/vnd.prima.page+xml',\n"
    "               local_filename='OCR-D-PY/PY_%04d.xml' % i)\n"
    "c.add_agent(name='ocrd-py-client', _type='OTHER', othertype='SOFTWARE', role='OTHER',\n"
    "            otherrole='testing', notes=[({'option': 'page-id'}, 'PHYS_0001')])\n"
    "print('found', ','.join(f.ID for f in c.find_files(fileGrp='OCR-D-PY')))\n"
    "print('page1', ','.join(f.local_filename for f in c.find_files(pageId='PHYS_0001',\n"
    "                                                             fileGrp='OCR-D-PY')))\n"
    "print('groups', ','.join(c.file_groups))\n"
    "print('agents', ','.join(a.name for a in c.agents))\n"
    "try:\n"
    "    c.add_file('OCR-D-PY', ID='PY_OUT', pageId='PHYS_0001', mimetype='text/plain',\n"
    "               local_filename='../outside.xml')\n"
    "    print('outside taken')\n"
    "except RuntimeError as e:\n"
    "    print('outside refused')\n"
    "print('save', c.save())\n";

static void core_client(int tcp) {
  char *mets, *out, *ws;
  ms_t m;
  int rc;
  if (access(OCRD "/core/src/ocrd/mets_server.py", R_OK) != 0)
    cr_skip_test("OCR-D core is not here (%s): this test needs ../shared/ocrd beside the "
                 "checkout and its Debian packages (scripts/setup.sh --tests)",
                 OCRD);
  mets = workspace();
  ws = dir_of(mets);
  m = ms_start(mets, tcp, NEVER);
  {
    const char *url = tcp ? it_fmt("http://127.0.0.1:%d", m.port) : m.sock;
    const char *argv[] = {"/usr/bin/python3", "-c", CLIENT_PY, url, NULL};
    const char *envp[] = {"PYTHONPATH=" OCRD "/stubs:" OCRD "/vendor:" OCRD "/core/src",
                          "PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1", NULL};
    rc = it_run(argv, envp, NULL, &out);
  }
  cr_assert_eq(rc, 0, "core's ClientSideOcrdMets failed: %s", out);
  cr_expect(strstr(out, it_fmt("ws %s\n", ws)) != NULL, "%s", out);
  cr_expect(strstr(out, "pages PHYS_0001,PHYS_0002\n") != NULL, "%s", out);
  cr_expect(strstr(out, "found PY_0001,PY_0002\n") != NULL, "%s", out);
  cr_expect(strstr(out, "page1 OCR-D-PY/PY_0001.xml\n") != NULL, "%s", out);
  cr_expect(strstr(out, "groups OCR-D-IMG,OCR-D-PY\n") != NULL, "%s", out);
  cr_expect(strstr(out, "ocrd-py-client") != NULL, "%s", out);
  cr_expect(strstr(out, "outside refused\n") != NULL, "%s", out);
  cr_expect(strstr(out, "save The Mets Server is writing changes to disk.") != NULL, "%s", out);
  /* PUT / saved it: on disk while the server still runs */
  cr_expect(on_disk(mets, "OCR-D-PY", "PY_0001", "PHYS_0001"));
  cr_expect(on_disk(mets, "OCR-D-PY", "PY_0002", "PHYS_0002"));
  cr_expect(strstr(it_read_file(mets), "ocrd-py-client") != NULL);
  term(&m);
  it_server_stop(m.srv);
}

Test(mets_server_mqproc, cores_client_side_ocrd_mets_adds_and_finds_unix_socket) {
  core_client(0);
}

Test(mets_server_mqproc, cores_client_side_ocrd_mets_adds_and_finds_tcp) {
  core_client(1);
}
