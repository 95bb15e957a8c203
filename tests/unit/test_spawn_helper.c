/* The spawn helper (src/runner/spawn/helper.c, src/runner/child.c) under load, in this
 * build (ASan and UBSan with MQPROC_SANITIZE=ON): the helper runs in a fork of the test (as
 * it does where the exec of its static image is refused) and is driven through its own
 * protocol (spawn/helper.h). Many short tries run at once, tries end while others start,
 * some are killed right after their SPAWN (before or while their processor starts), some
 * never run (no such program), some carry a payload large enough to go in a memfd, some
 * leave a process behind, and a pest sends the helper SIGCHLD, its parent-death signal and
 * others all along. Every try must end exactly once, with its own status and output, and
 * the helper must live to the end and exit cleanly (a sanitizer report kills it).
 *
 * Issue 38, F18: a processor's execve lets the helper run on (vfork) before the kernel
 * closes the helper's CLOEXEC fds in the new program, so for that moment the processor
 * still holds every other try's pipe; a try that ended then left its pipe registered in
 * the helper's epoll set, pointing at the freed try (heap-use-after-free, glibc's
 * "corrupted double-linked list").
 *
 * Its size: MQPROC_STRESS_TRIES (default 1000) tries, MQPROC_STRESS_CONCURRENCY (default
 * 32) at once. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runner/int.h"
#include "runner/spawn/helper.h"

enum kind { OK, FAIL, KILLED, NO_PROGRAM, BIG, LEAVER, KINDS };

typedef struct try {
  int kind, sent, started, ended;
}
try_t;

typedef struct stress {
  int req, ev;
  pid_t helper, pest;
  try_t *tries;
  long n, concurrency;
  long sent, ended, running;
  uint64_t last_ended; /* a try that has ended: a KILL for it must be ignored */
  char *big_env;       /* one environment entry that takes a payload past the inline limit */
} stress_t;

static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  long n = v != NULL ? strtol(v, NULL, 10) : 0;
  return n > 0 ? n : def;
}

/* Sends signals to the helper until killed: one it reads (SIGCHLD), its parent-death
 * signal while its parent lives (it must check), and ones it keeps blocked. */
static pid_t pest_start(pid_t helper) {
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    const int sigs[] = {SIGCHLD, SIGUSR2, SIGCHLD, SIGTERM, SIGCHLD, SIGHUP, SIGUSR1, SIGPIPE};
    const struct timespec pause = {0, 200000L};
    for (unsigned i = 0;; i++) {
      if (kill(helper, sigs[i % (sizeof(sigs) / sizeof(sigs[0]))]) < 0)
        _exit(0);
      nanosleep(&pause, NULL);
    }
  }
  return pid;
}

static void helper_start(stress_t *s) {
  int req[2], ev[2];
  pid_t server = getpid();
  cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, req), 0);
  cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev), 0);
  fflush(NULL);
  s->helper = fork();
  cr_assert_geq(s->helper, 0);
  if (s->helper == 0) {
    close(req[0]);
    close(ev[0]);
    mqproc__helper_main(server, req[1], ev[1]);
  }
  close(req[1]);
  close(ev[1]);
  s->req = req[0];
  s->ev = ev[0];
  fcntl(s->req, F_SETFL, O_NONBLOCK);
  fcntl(s->ev, F_SETFL, O_NONBLOCK);
}

/* The SPAWN of try id (1-based) into msg; its length. */
static size_t spawn_msg(const stress_t *s, uint64_t id, char *msg, size_t size, int *memfd) {
  char arg[32], *p;
  const char *argv[6], *envp[3];
  uint32_t argc = 0, envc = 0;
  const char *path = "/bin/true";
  mqproc__helper_req_t q;
  size_t n = 0;
  snprintf(arg, sizeof(arg), "%llu", (unsigned long long)id);
  argv[argc++] = "true";
  envp[envc++] = "PATH=/usr/bin:/bin";
  switch (s->tries[id - 1].kind) {
  case FAIL: /* its own output, then a failure: the tail must be its own */
    path = "/bin/sh";
    argv[0] = "sh";
    argv[argc++] = "-c";
    argv[argc++] = "echo tail-$0-end; exit 3";
    argv[argc++] = arg;
    break;
  case NO_PROGRAM:
    path = "/nonexistent/mqproc-stress";
    break;
  case BIG:
    envp[envc++] = s->big_env;
    break;
  case LEAVER: /* a process left behind, handed to the helper (its subreaper) */
    path = "/bin/sh";
    argv[0] = "sh";
    argv[argc++] = "-c";
    argv[argc++] = "sleep 0.01 & exit 0";
    break;
  default:
    break;
  }
  memset(&q, 0, sizeof(q));
  q.kind = MQPROC__HELPER_SPAWN;
  q.id = id;
  q.argc = argc;
  q.envc = envc;
  p = msg + sizeof(q);
#define PUT(str)                                                                                   \
  do {                                                                                             \
    size_t k_ = strlen(str) + 1;                                                                   \
    cr_assert_lt(sizeof(q) + n + k_, size);                                                        \
    memcpy(p + n, (str), k_);                                                                      \
    n += k_;                                                                                       \
  } while (0)
  PUT(path);
  for (uint32_t i = 0; i < argc; i++)
    PUT(argv[i]);
  for (uint32_t i = 0; i < envc; i++)
    PUT(envp[i]);
#undef PUT
  *memfd = -1;
  if (n > MQPROC__HELPER_INLINE) {
    char err[MQPROC_ERR_LEN];
    *memfd = mqproc__runner_memfd("stress-payload", p, n, err);
    cr_assert_geq(*memfd, 0, "%s", err);
    q.inline_len = 0;
  } else {
    q.inline_len = (uint32_t)n;
  }
  memcpy(msg, &q, sizeof(q));
  return sizeof(q) + q.inline_len;
}

/* Sends the next try's SPAWN (and, for a KILLED one, its KILL right behind it); 0 when the
 * socket has no room now. */
static int send_next(stress_t *s, char *msg, size_t size) {
  uint64_t id = (uint64_t)s->sent + 1;
  char err[MQPROC_ERR_LEN];
  int fds[3], memfd;
  size_t len = spawn_msg(s, id, msg, size, &memfd);
  fds[0] = mqproc__runner_memfd("stress-job", "{}", 2, err);
  fds[1] = open("/dev/null", O_WRONLY | O_CLOEXEC);
  fds[2] = memfd;
  cr_assert(fds[0] >= 0 && fds[1] >= 0);
  if (mqproc__send_with_fds(s->req, msg, len, fds, memfd >= 0 ? 3 : 2) < 0) {
    cr_assert_eq(errno, EAGAIN, "SPAWN: %s", strerror(errno));
    for (int i = 0; i < (memfd >= 0 ? 3 : 2); i++)
      close(fds[i]);
    return 0;
  }
  for (int i = 0; i < (memfd >= 0 ? 3 : 2); i++)
    close(fds[i]);
  s->tries[id - 1].sent = 1;
  s->sent++;
  s->running++;
  if (s->tries[id - 1].kind == KILLED || (id % 7 == 0 && s->last_ended != 0)) {
    /* a kill mid-spawn, and now and then one for a try that has ended long ago */
    mqproc__helper_req_t k;
    memset(&k, 0, sizeof(k));
    k.kind = MQPROC__HELPER_KILL;
    k.sig = SIGKILL;
    k.id = s->tries[id - 1].kind == KILLED ? id : s->last_ended;
    while (send(s->req, &k, sizeof(k), MSG_NOSIGNAL) < 0) {
      struct pollfd pf = {.fd = s->req, .events = POLLOUT};
      cr_assert_eq(errno, EAGAIN, "KILL: %s", strerror(errno));
      cr_assert_eq(poll(&pf, 1, 30000), 1, "the helper reads no request");
    }
  }
  return 1;
}

static void check_end(stress_t *s, const mqproc__helper_event_t *ev, const char *tail,
                      size_t tail_len) {
  try_t *t = &s->tries[ev->id - 1];
  int st = ev->wstatus;
  char want[48];
  cr_assert_eq(t->ended, 0, "try %llu ended twice", (unsigned long long)ev->id);
  t->ended = 1;
  s->last_ended = ev->id;
  s->ended++;
  s->running--;
  switch (t->kind) {
  case NO_PROGRAM:
    cr_assert(ev->step_failed && ev->step.stage == MQPROC__STAGE_EXEC && ev->step.err == ENOENT,
              "try %llu: step %d/%d", (unsigned long long)ev->id, ev->step.stage, ev->step.err);
    cr_assert_eq(t->started, 0, "a try that never ran was said to run");
    return;
  case FAIL:
    snprintf(want, sizeof(want), "tail-%llu-end\n", (unsigned long long)ev->id);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 3, "try %llu: status %d",
              (unsigned long long)ev->id, st);
    cr_assert(tail_len == strlen(want) && memcmp(tail, want, tail_len) == 0,
              "try %llu: its tail is '%.*s'", (unsigned long long)ev->id, (int)tail_len, tail);
    break;
  case KILLED: /* killed, or done before the kill came */
    cr_assert((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) || (WIFEXITED(st) && !WEXITSTATUS(st)),
              "try %llu: status %d", (unsigned long long)ev->id, st);
    cr_assert_eq(tail_len, 0, "a stopped try has no tail");
    break;
  default:
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "try %llu (kind %d): status %d, step %d/%d",
              (unsigned long long)ev->id, t->kind, st, ev->step.stage, ev->step.err);
    break;
  }
  cr_assert_eq(ev->step_failed, 0, "try %llu: step %d failed", (unsigned long long)ev->id,
               ev->step.stage);
  cr_assert_eq(t->started, 1, "try %llu ended without having started", (unsigned long long)ev->id);
}

/* Reads what the helper says until nothing is left now. */
static void read_events(stress_t *s) {
  static char buf[MQPROC__HELPER_EVENT_MAX + 16];
  for (;;) {
    mqproc__helper_event_t ev;
    ssize_t n = recv(s->ev, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN)
      return;
    cr_assert_gt(n, 0, "the helper is gone (%s)", n < 0 ? strerror(errno) : "EOF");
    cr_assert_geq((size_t)n, sizeof(ev));
    memcpy(&ev, buf, sizeof(ev));
    cr_assert(ev.id >= 1 && ev.id <= (uint64_t)s->sent, "an event for try %llu",
              (unsigned long long)ev.id);
    if (ev.kind == MQPROC__HELPER_STARTED) {
      cr_assert_eq(s->tries[ev.id - 1].started, 0, "try %llu started twice",
                   (unsigned long long)ev.id);
      cr_assert_gt(ev.pid, 0);
      s->tries[ev.id - 1].started = 1;
    } else {
      cr_assert_eq(ev.kind, MQPROC__HELPER_ENDED);
      cr_assert_leq(ev.tail_len, (size_t)n - sizeof(ev));
      check_end(s, &ev, buf + sizeof(ev), ev.tail_len);
    }
  }
}

Test(spawn_helper, many_short_tries_at_once_each_end_once_and_the_helper_lives_on) {
  static char msg[sizeof(mqproc__helper_req_t) + MQPROC__HELPER_INLINE + 65536];
  stress_t s;
  uint32_t rnd = 38;
  int st;
  memset(&s, 0, sizeof(s));
  s.n = env_long("MQPROC_STRESS_TRIES", 1000);
  s.concurrency = env_long("MQPROC_STRESS_CONCURRENCY", 32);
  cr_assert_not_null(s.tries = calloc((size_t)s.n, sizeof(*s.tries)));
  for (long i = 0; i < s.n; i++) { /* mostly plain short tries, the others spread out */
    rnd = rnd * 1103515245u + 12345u;
    s.tries[i].kind = (rnd >> 16) % 4 != 0 ? OK : (int)((rnd >> 8) % KINDS);
  }
  cr_assert_not_null(s.big_env = malloc(MQPROC__HELPER_INLINE + 100));
  memcpy(s.big_env, "BIG=", 4);
  memset(s.big_env + 4, 'x', MQPROC__HELPER_INLINE);
  s.big_env[MQPROC__HELPER_INLINE + 4] = '\0';
  helper_start(&s);
  while (s.ended < s.n) {
    struct pollfd pf[2] = {{.fd = s.ev, .events = POLLIN}, {.fd = s.req, .events = 0}};
    while (s.sent < s.n && s.running < s.concurrency && send_next(&s, msg, sizeof(msg)))
      ;
    if (s.sent < s.n && s.running < s.concurrency)
      pf[1].events = POLLOUT;
    cr_assert_gt(poll(pf, 2, 60000), 0, "nothing for 60 s: %ld of %ld tries ended, %ld running",
                 s.ended, s.n, s.running);
    if (pf[0].revents != 0)
      read_events(&s);
    if (s.pest == 0 && s.ended > 0) /* once the helper serves: its signals are set up */
      s.pest = pest_start(s.helper);
  }
  if (s.pest > 0) {
    kill(s.pest, SIGKILL);
    waitpid(s.pest, NULL, 0);
  }
  close(s.req); /* the helper's end: it exits */
  cr_assert_eq(waitpid(s.helper, &st, 0), s.helper);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the helper ended with wait status %d", st);
  close(s.ev);
  free(s.big_env);
  free(s.tries);
}
