/* Headless Chromium over the DevTools pipe (browser.h): the browser reads commands on its
 * fd 3 and writes answers and events on its fd 4, each message one JSON text ended by a
 * NUL. One tab, attached with a flat session: its commands carry the sessionId. Events
 * are read and dropped; only the answer with the command's id is returned. */
#include "browser.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define CHROMIUM "/usr/bin/chromium"
#define WAIT_MS 30000
#define POLL_MS 50

struct it_browser {
  pid_t pid;
  int wfd, rfd;  /* the browser's fd 3 (commands), fd 4 (answers and events) */
  int next_id;   /* the next command's id */
  char *session; /* the tab's flat session */
  char *buf;     /* what was read and not yet parsed */
  size_t len, cap;
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sends {id, method, params (taken), sessionId?}; returns the id. */
static int send_cmd(it_browser_t *b, const char *method, json_t *params, int in_tab) {
  int id = ++b->next_id;
  json_t *m = json_pack("{s:i, s:s, s:o}", "id", id, "method", method, "params",
                        params != NULL ? params : json_object());
  char *text;
  size_t n, off = 0;
  if (in_tab)
    json_object_set_new(m, "sessionId", json_string(b->session));
  text = json_dumps(m, JSON_COMPACT);
  json_decref(m);
  cr_assert_not_null(text);
  n = strlen(text) + 1; /* with its NUL: the message's end */
  while (off < n) {
    ssize_t w = write(b->wfd, text + off, n - off);
    if (w < 0 && errno == EINTR)
      continue;
    cr_assert_gt(w, 0, "browser: writing %s: %s", method, strerror(errno));
    off += (size_t)w;
  }
  free(text);
  return id;
}

/* The next whole message, or NULL when none came by deadline (monotonic ms). */
static json_t *next_msg(it_browser_t *b, long long deadline) {
  for (;;) {
    char *nul = b->len > 0 ? memchr(b->buf, '\0', b->len) : NULL;
    if (nul != NULL) {
      size_t used = (size_t)(nul - b->buf) + 1;
      json_t *m = json_loads(b->buf, 0, NULL);
      memmove(b->buf, b->buf + used, b->len - used);
      b->len -= used;
      cr_assert_not_null(m, "browser: a message that is not JSON");
      return m;
    }
    long long left = deadline - now_ms();
    struct pollfd p = {.fd = b->rfd, .events = POLLIN};
    if (left <= 0)
      return NULL;
    if (poll(&p, 1, (int)left) <= 0)
      continue; /* EINTR, or the deadline: checked above */
    if (b->cap - b->len < 65536) {
      b->cap = b->cap * 2 + 65536;
      b->buf = realloc(b->buf, b->cap);
      cr_assert_not_null(b->buf);
    }
    ssize_t n = read(b->rfd, b->buf + b->len, b->cap - b->len);
    cr_assert(n > 0 || (n < 0 && errno == EINTR), "browser: the pipe closed (did it crash?)");
    b->len += n > 0 ? (size_t)n : 0;
  }
}

/* The answer to command id: its "result" (new reference), or NULL with *why set (the
 * command's error; owned by the harness). The test fails when no answer comes. */
static json_t *answer(it_browser_t *b, int id, char **why) {
  long long deadline = now_ms() + WAIT_MS;
  json_t *m;
  while ((m = next_msg(b, deadline)) != NULL) {
    if (json_integer_value(json_object_get(m, "id")) == id) {
      json_t *res = json_incref(json_object_get(m, "result"));
      if (res == NULL)
        *why = it_fmt("%s",
                      json_string_value(json_object_get(json_object_get(m, "error"), "message")));
      json_decref(m);
      return res;
    }
    json_decref(m); /* an event, or the answer to a command given up on */
  }
  cr_assert_fail("browser: no answer within %d ms", WAIT_MS);
  return NULL;
}

static json_t *call(it_browser_t *b, const char *method, json_t *params, int in_tab) {
  char *why = NULL;
  json_t *res = answer(b, send_cmd(b, method, params, in_tab), &why);
  cr_assert_not_null(res, "browser: %s: %s", method, why);
  return res;
}

static void spawn(it_browser_t *b, int width, int height) {
  int to[2], from[2];
  static int n;
  const char *profile = it_fmt("%s/chromium-%d", it_tmpdir(), ++n);
  const char *log = it_fmt("%s/chromium-%d.log", it_tmpdir(), n);
  const char *argv[] = {CHROMIUM,
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--hide-scrollbars",
                        "--no-first-run",
                        "--remote-debugging-pipe",
                        it_fmt("--user-data-dir=%s", profile),
                        it_fmt("--window-size=%d,%d", width, height),
                        "about:blank",
                        NULL};
  cr_assert_eq(pipe2(to, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(from, O_CLOEXEC), 0);
  fflush(stdout);
  fflush(stderr);
  b->pid = fork();
  cr_assert_geq(b->pid, 0);
  if (b->pid == 0) {
    /* above 4 first, so that dup2 onto 3 and 4 never meets an fd already there */
    int r = fcntl(to[0], F_DUPFD_CLOEXEC, 10), w = fcntl(from[1], F_DUPFD_CLOEXEC, 10);
    int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (r < 0 || w < 0 || out < 0 || in < 0 || dup2(r, 3) < 0 || dup2(w, 4) < 0 ||
        dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
      _exit(126);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(to[0]);
  close(from[1]);
  b->wfd = to[1];
  b->rfd = from[0];
}

it_browser_t *it_browser_open(int width, int height) {
  it_browser_t *b = calloc(1, sizeof(*b));
  json_t *target, *attached;
  cr_assert_not_null(b);
  signal(SIGPIPE, SIG_IGN); /* a browser that died is a failed write, not a killed test */
  spawn(b, width, height);
  target = call(b, "Target.createTarget", json_pack("{s:s}", "url", "about:blank"), 0);
  attached = call(
      b, "Target.attachToTarget",
      json_pack("{s:O, s:b}", "targetId", json_object_get(target, "targetId"), "flatten", 1), 0);
  b->session = strdup(json_string_value(json_object_get(attached, "sessionId")));
  json_decref(target);
  json_decref(attached);
  cr_assert_not_null(b->session);
  /* the layout's viewport exactly, whatever the window manager of headless makes of it */
  json_decref(call(b, "Emulation.setDeviceMetricsOverride",
                   json_pack("{s:i, s:i, s:f, s:b}", "width", width, "height", height,
                             "deviceScaleFactor", 1.0, "mobile", 0),
                   1));
  return b;
}

/* The expression's value, or NULL with *why (an exception, or a context that went away
 * in a navigation). */
static json_t *try_eval(it_browser_t *b, const char *expr, char **why) {
  json_t *res = answer(b,
                       send_cmd(b, "Runtime.evaluate",
                                json_pack("{s:s, s:b, s:b}", "expression", expr, "returnByValue", 1,
                                          "awaitPromise", 1),
                                1),
                       why),
         *v;
  if (res == NULL)
    return NULL;
  if (json_object_get(res, "exceptionDetails") != NULL) {
    json_t *ex = json_object_get(json_object_get(res, "exceptionDetails"), "exception");
    *why = it_fmt("%s: %s", expr, json_string_value(json_object_get(ex, "description")));
    json_decref(res);
    return NULL;
  }
  v = json_object_get(json_object_get(res, "result"), "value");
  v = v != NULL ? json_incref(v) : json_null();
  json_decref(res);
  return v;
}

json_t *it_browser_eval(it_browser_t *b, const char *expr) {
  char *why = NULL;
  json_t *v = try_eval(b, expr, &why);
  cr_assert_not_null(v, "browser: %s", why);
  return v;
}

int it_browser_until(it_browser_t *b, const char *expr) {
  long long deadline = now_ms() + WAIT_MS;
  char *full = it_fmt("document.readyState === 'complete' && !!(%s)", expr), *why;
  do {
    json_t *v = try_eval(b, full, &why);
    int yes = json_is_true(v);
    json_decref(v);
    if (yes)
      return 1;
    usleep(POLL_MS * 1000);
  } while (now_ms() < deadline);
  return 0;
}

void it_browser_goto(it_browser_t *b, const char *url) {
  json_t *res = call(b, "Page.navigate", json_pack("{s:s}", "url", url), 1);
  const char *err = json_string_value(json_object_get(res, "errorText"));
  cr_assert(err == NULL, "browser: %s: %s", url, err);
  json_decref(res);
  /* the answer comes once the new document is committed: wait for it to load */
  cr_assert(it_browser_until(b, "true"), "browser: %s did not load within %d ms", url, WAIT_MS);
}

void it_browser_close(it_browser_t *b) {
  long long deadline;
  int st;
  if (b == NULL)
    return;
  send_cmd(b, "Browser.close", NULL, 0);
  close(b->wfd);
  deadline = now_ms() + WAIT_MS;
  while (waitpid(b->pid, &st, WNOHANG) == 0) {
    if (now_ms() > deadline) {
      kill(b->pid, SIGKILL);
      waitpid(b->pid, &st, 0);
      break;
    }
    usleep(POLL_MS * 1000);
  }
  close(b->rfd);
  free(b->session);
  free(b->buf);
  free(b);
}
