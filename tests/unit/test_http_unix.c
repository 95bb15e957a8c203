/* Unit tests for src/http/http.c on a Unix socket ("unix:PATH"): served whatever Host a
 * client sends (Python's requests sends the socket's path), the per-client limits counting
 * processes (all Unix clients have the same empty address), the socket file made in place of
 * a dead server's and never over a live one or another file, removed on stop only while it
 * is still this server's, and the form limits a server may raise.
 *
 * The server runs on a loop in the test's thread; the client side of each test runs on a
 * work thread of that loop (mqproc__loop_work), whose completion stops the loop. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"
#include "http/http.h"
#include "loop/loop.h"

static char dir[64], sock[100];

static void make_dir(void) {
  snprintf(dir, sizeof(dir), "/tmp/mqproc-http-unix-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/s.sock", dir);
}

static void clean(void) {
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(http_unix, .init = make_dir, .fini = clean);

/* Answers every request with "PEER|form field a|field j|body length". */
static void handle(void *ud, mqproc__http_req_t *req) {
  char peer[64], *text;
  const char *a = mqproc__http_form(req, "a"), *j = mqproc__http_form(req, "j");
  size_t len = 0;
  (void)ud;
  mqproc__http_peer(req, peer, sizeof(peer));
  mqproc__http_body(req, &len);
  text = mqproc__asprintf("%s|%s|%s|%zu", peer, a ? a : "-", j ? j : "-", len);
  mqproc__http_reply(req, 200, "text/plain", text, strlen(text));
}

static int connect_to(const char *path) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Sends req on a new connection and reads the answer into out (n bytes): its length, -1. */
static ssize_t ask(const char *req, char *out, size_t n) {
  int fd = connect_to(sock);
  ssize_t got = 0, r;
  if (fd < 0 || write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  while ((size_t)got < n - 1 && (r = read(fd, out + got, n - 1 - (size_t)got)) > 0)
    got += r;
  out[got] = '\0';
  close(fd);
  return got;
}

/* Whether fd was closed by the server within ms (read gives its end). */
static int closed_within(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  char c;
  return poll(&p, 1, ms) == 1 && read(fd, &c, 1) <= 0;
}

typedef struct run {
  void (*client)(struct run *r);
  char out[16384];
  int ok;
} run_t;

static void on_client(void *ud) {
  run_t *r = ud;
  r->client(r);
}

static void after_client(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mqproc__loop_stop(loop);
}

/* Starts a server on sock, runs client on a work thread until it returns, stops. */
static void serve_while(run_t *r, int forms) {
  char err[MQPROC_ERR_LEN];
  mqproc__loop_t *loop;
  mqproc__http_t *h;
  char addr[160];
  snprintf(addr, sizeof(addr), "unix:%s", sock);
  cr_assert_eq(mqproc__loop_new(&loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__http_start(&h, loop, addr, NULL, handle, NULL, err), MQPROC_OK, "%s", err);
  if (forms) {
    mqproc__http_set_body_max(h, 65536);
    mqproc__http_set_form_max(h, 32, 8192, 65536);
  }
  cr_assert_eq(mqproc__loop_work(loop, on_client, after_client, r), MQPROC_OK);
  mqproc__loop_run(loop);
  mqproc__http_stop(h);
  mqproc__loop_free(loop);
}

static void any_host(run_t *r) {
  char req[256];
  snprintf(req, sizeof(req),
           "GET /x HTTP/1.1\r\nHost: %%2Ftmp%%2Fs.sock\r\nConnection: close\r\n\r\n");
  r->ok = ask(req, r->out, sizeof(r->out)) > 0;
}

Test(http_unix, any_host_is_served_and_the_peer_is_a_process) {
  run_t r = {.client = any_host};
  char want[64];
  struct stat st;
  serve_while(&r, 0);
  cr_assert(r.ok);
  cr_expect(strstr(r.out, "HTTP/1.1 200") == r.out, "%s", r.out);
  snprintf(want, sizeof(want), "pid %ld (uid %ld)|", (long)getpid(), (long)getuid());
  cr_expect(strstr(r.out, want) != NULL, "%s", r.out);
  cr_expect_eq(lstat(sock, &st), -1, "the socket file is still there after the stop");
}

/* 40 fields of up to 5 KB: beyond the default form limits (8 fields, 1 KiB), within the
 * raised ones; the body is kept as well. */
static void big_form(run_t *r) {
  static char body[60000], req[61000];
  size_t n = 0;
  for (int i = 0; i < 30; i++)
    n += (size_t)snprintf(body + n, sizeof(body) - n, "f%d=%d&", i, i);
  n += (size_t)snprintf(body + n, sizeof(body) - n, "a=");
  memset(body + n, 'x', 5000);
  n += 5000;
  n += (size_t)snprintf(body + n, sizeof(body) - n, "&j=%%2Fa%%20b");
  snprintf(req, sizeof(req),
           "POST /file HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
           "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
           n, body);
  r->ok = ask(req, r->out, sizeof(r->out)) > 0;
}

Test(http_unix, a_server_may_raise_the_form_limits) {
  run_t r = {.client = big_form};
  char *bar;
  serve_while(&r, 1);
  cr_assert(r.ok);
  cr_assert(strstr(r.out, "HTTP/1.1 200") == r.out, "%.300s", r.out);
  cr_assert_not_null(bar = strchr(strstr(r.out, "\r\n\r\n"), '|'));
  cr_expect_eq(strspn(bar + 1, "x"), 5000);
  cr_expect(!strncmp(bar + 5001, "|/a b|", 6), "%.100s", bar + 5001);
  cr_expect_gt(atoi(bar + 5007), 5000, "the body was not kept: %.100s", bar + 5001);
}

static void too_big_form(run_t *r) {
  static char req[80000];
  size_t n = (size_t)snprintf(req, sizeof(req),
                              "POST /file HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/x-www-form-urlencoded\r\nContent-Length: 70000\r\n"
                              "Connection: close\r\n\r\na=");
  memset(req + n, 'x', 69998);
  req[n + 69998] = '\0';
  r->ok = ask(req, r->out, sizeof(r->out)) > 0;
}

Test(http_unix, a_form_beyond_the_limits_is_refused) {
  run_t r = {.client = too_big_form};
  serve_while(&r, 1);
  cr_assert(r.ok);
  cr_expect(strstr(r.out, "HTTP/1.1 413") == r.out, "%.300s", r.out);
}

/* 20 idle connections of this process: the 4 oldest are closed (16 per client); a request
 * from another process is answered meanwhile and closes none of them. */
static void per_process(run_t *r) {
  int fds[20], closed = 0, others = 0, st;
  pid_t child;
  for (int i = 0; i < 20; i++)
    cr_assert_geq(fds[i] = connect_to(sock), 0);
  for (int i = 0; i < 4; i++)
    closed += closed_within(fds[i], 5000);
  if ((child = fork()) == 0) {
    char out[512];
    _exit(ask("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", out, sizeof(out)) > 0 &&
                  strstr(out, "HTTP/1.1 200") == out
              ? 0
              : 1);
  }
  cr_assert_gt(child, 0);
  cr_assert_eq(waitpid(child, &st, 0), child);
  for (int i = 4; i < 20; i++)
    others += closed_within(fds[i], 0);
  snprintf(r->out, sizeof(r->out), "%d %d %d", closed, others,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  for (int i = 0; i < 20; i++)
    close(fds[i]);
  r->ok = 1;
}

Test(http_unix, the_per_client_limits_count_processes) {
  run_t r = {.client = per_process};
  serve_while(&r, 0);
  cr_assert(r.ok);
  cr_expect_str_eq(r.out, "4 0 0", "closed oldest, closed others, child's status: %s", r.out);
}

Test(http_unix, a_dead_servers_socket_is_replaced_a_live_one_and_other_files_are_not) {
  char err[MQPROC_ERR_LEN], addr[160];
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  mqproc__loop_t *loop;
  mqproc__http_t *h, *h2;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  FILE *f;
  snprintf(addr, sizeof(addr), "unix:%s", sock);
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", sock);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
  close(fd); /* a socket file nobody listens on */
  cr_assert_eq(mqproc__loop_new(&loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__http_start(&h, loop, addr, NULL, handle, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_neq(mqproc__http_start(&h2, loop, addr, NULL, handle, NULL, err), MQPROC_OK);
  cr_expect(strstr(err, "listens there already") != NULL, "%s", err);
  mqproc__http_stop(h);
  cr_assert_not_null(f = fopen(sock, "w"));
  fclose(f);
  cr_expect_neq(mqproc__http_start(&h2, loop, addr, NULL, handle, NULL, err), MQPROC_OK);
  cr_expect(strstr(err, "no socket") != NULL, "%s", err);
  cr_expect_eq(access(sock, F_OK), 0, "the file was removed");
  mqproc__loop_free(loop);
}

Test(http_unix, a_socket_file_that_is_no_longer_its_own_stays) {
  char err[MQPROC_ERR_LEN], addr[160], moved[160];
  mqproc__loop_t *loop;
  mqproc__http_t *h;
  FILE *f;
  snprintf(addr, sizeof(addr), "unix:%s", sock);
  snprintf(moved, sizeof(moved), "%s/other", dir);
  cr_assert_eq(mqproc__loop_new(&loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__http_start(&h, loop, addr, NULL, handle, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_not_null(f = fopen(moved, "w"));
  fclose(f);
  cr_assert_eq(rename(moved, sock), 0); /* someone put another file there */
  mqproc__http_stop(h);
  cr_expect_eq(access(sock, F_OK), 0, "another's file was removed");
  mqproc__loop_free(loop);
}

Test(http_unix, a_path_too_long_is_refused) {
  char err[MQPROC_ERR_LEN], addr[400];
  mqproc__loop_t *loop;
  mqproc__http_t *h;
  snprintf(addr, sizeof(addr), "unix:%s/%0200d", dir, 0);
  cr_assert_eq(mqproc__loop_new(&loop, err), MQPROC_OK, "%s", err);
  cr_expect_eq(mqproc__http_start(&h, loop, addr, NULL, handle, NULL, err), MQPROC_EINVAL);
  cr_expect(strstr(err, "expected a path") != NULL, "%s", err);
  mqproc__loop_free(loop);
}
