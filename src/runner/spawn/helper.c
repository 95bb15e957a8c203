/* The spawn helper (runner_helper.h): forks each try's supervisor (runner_child.c),
 * reaps it, kills what it left in its group, and tells the server. It uses no lock but
 * malloc's (glibc makes malloc safe after a fork of the multi-threaded server) and no
 * stdio; it writes no log; it needs nothing but libc (runner_sys.c), so it builds as a
 * static program of its own.
 */
#include "runner/spawn/helper.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/child.h"
#include "runner/int.h"

typedef struct live {
  pid_t *pids;
  size_t n, cap;
} live_t;

static int live_has(const live_t *l, pid_t pid) {
  for (size_t i = 0; i < l->n; i++)
    if (l->pids[i] == pid)
      return 1;
  return 0;
}

static void live_drop(live_t *l, pid_t pid) {
  for (size_t i = 0; i < l->n; i++)
    if (l->pids[i] == pid) {
      l->pids[i] = l->pids[--l->n];
      return;
    }
}

static int live_add(live_t *l, pid_t pid) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    pid_t *p = realloc(l->pids, cap * sizeof(*p));
    if (p == NULL)
      return -1;
    l->pids = p;
    l->cap = cap;
  }
  l->pids[l->n++] = pid;
  return 0;
}

/* Splits n NUL-terminated strings off *p into v (NULL-terminated); 0 when they overrun. */
static int split(char **p, const char *end, char **v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    char *z = memchr(*p, '\0', (size_t)(end - *p));
    if (z == NULL)
      return 0;
    v[i] = *p;
    *p = z + 1;
  }
  v[n] = NULL;
  return 1;
}

/* Forks the supervisor of one try (fds: in, log, report, the memfd); 0 with *pid, or an
 * errno. */
static int helper_spawn(const mqproc__helper_req_t *q, int fds[MQPROC__HELPER_FDS],
                        const sigset_t *mask, const int keep_fds[3], pid_t *pid) {
  char *payload = NULL, **argv = NULL, **envp = NULL, *p, *log[4];
  mqproc__child_plan_t plan;
  size_t len, n;
  int e = ENOMEM;
  if (mqproc__fd_slurp(fds[3], &payload, &len) < 0)
    return errno;
  if ((argv = calloc(q->argc + 1, sizeof(*argv))) == NULL ||
      (envp = calloc(q->envc + 1, sizeof(*envp))) == NULL)
    goto out;
  p = payload;
  e = EINVAL;
  if (q->argc < 1 || (n = strlen(p)) >= len)
    goto out;
  memset(&plan, 0, sizeof(plan));
  plan.path = p;
  p += n + 1;
  if (!split(&p, payload + len, argv, q->argc) || !split(&p, payload + len, envp, q->envc) ||
      (q->log_inline_max > 0 && !split(&p, payload + len, log, 3)))
    goto out;
  /* the child's dup2s onto 0-3 must not clobber a source */
  for (int i = 0; i < 3; i++)
    if ((fds[i] = mqproc__fd_lift(fds[i], MQPROC__CHILD_MIN_FD)) < 0) {
      e = errno;
      goto out;
    }
  plan.argv = argv;
  plan.envp = envp;
  plan.in_fd = fds[0];
  plan.log_fd = fds[1];
  plan.report_fd = fds[2];
  plan.server = getpid();
  plan.max_log_bytes = (long)q->max_log_bytes;
  if (q->log_inline_max > 0) {
    plan.log_inline_max = (long)q->log_inline_max;
    plan.log_dir = log[0];
    plan.log_sub = log[1];
    plan.log_name = log[2];
  }
  plan.core = (struct rlimit){(rlim_t)q->core_cur, (rlim_t)q->core_max};
  if ((*pid = fork()) == 0) {
    for (int i = 0; i < 3; i++)
      close(keep_fds[i]);
    close(fds[3]);
    sigprocmask(SIG_SETMASK, mask, NULL);
    mqproc__child_main(&plan);
  }
  e = *pid < 0 ? errno : 0;
out:
  free(payload);
  free(argv);
  free(envp);
  return e;
}

/* Reaps every supervisor that ended: kills what it left in its group, tells the server. */
static void helper_reap(live_t *live, int ev_fd) {
  int st;
  pid_t pid;
  while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
    mqproc__helper_event_t ev = {pid, st};
    kill(-pid, SIGKILL); /* the group's id stays taken while a member lives: never reused */
    live_drop(live, pid);
    if (send(ev_fd, &ev, sizeof(ev), MSG_NOSIGNAL) < 0 && errno == EPIPE)
      _exit(0);
  }
}

__attribute__((noreturn)) void mqproc__helper_main(pid_t server, int req_fd, int ev_fd) {
  sigset_t chld, none;
  struct sigaction sa;
  live_t live = {NULL, 0, 0};
  int sfd, keep[3], lo, hi;
  prctl(PR_SET_DUMPABLE, 0); /* it holds the processors' environments (forked from the
                                server: its memory) */
  setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_IGN;
  for (int sig = 1; sig < NSIG; sig++) /* the server decides when it ends: not a ^C */
    if (sig != SIGCHLD && sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL &&
        sig != SIGABRT && sig != SIGTRAP && sig != SIGSYS)
      sigaction(sig, &sa, NULL);
  sigemptyset(&none);
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_SETMASK, &chld, NULL);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != server)
    _exit(0);
  /* no fd of the server's: a broker socket held here would outlive a dead server */
  lo = req_fd < ev_fd ? req_fd : ev_fd;
  hi = req_fd < ev_fd ? ev_fd : req_fd;
  if (lo > 3)
    close_range(3, (unsigned)lo - 1, 0);
  if (hi > lo + 1)
    close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
  close_range((unsigned)hi + 1, ~0U, 0);
  if ((sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
    _exit(1);
  keep[0] = req_fd;
  keep[1] = ev_fd;
  keep[2] = sfd;
  for (;;) {
    struct pollfd pf[2] = {{.fd = req_fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    struct signalfd_siginfo si;
    mqproc__helper_req_t q;
    int fds[MQPROC__HELPER_FDS], nfds, rc;
    if (poll(pf, 2, -1) < 0)
      continue;
    while (read(sfd, &si, sizeof(si)) > 0)
      ;
    helper_reap(&live, ev_fd);
    if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    if ((rc = mqproc__recv_with_fds(req_fd, &q, sizeof(q), fds, MQPROC__HELPER_FDS, &nfds)) <= 0)
      _exit(rc == 0 ? 0 : 1); /* the server closed its end, or sent garbage: it starts another */
    if (q.kind == MQPROC__HELPER_SPAWN) {
      mqproc__helper_reply_t rep = {-1, EINVAL};
      pid_t pid = -1;
      if (nfds == MQPROC__HELPER_FDS)
        rep.err = helper_spawn(&q, fds, &none, keep, &pid);
      if (rep.err == 0 && live_add(&live, pid) == 0)
        rep.pid = pid;
      else if (rep.err == 0) { /* cannot track it: it must not run untracked */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        rep.err = ENOMEM;
      }
      if (send(req_fd, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
        _exit(0);
    } else if (q.kind == MQPROC__HELPER_KILL && live_has(&live, q.pid)) {
      kill(-q.pid, q.sig);
      kill(q.pid, q.sig); /* had it left its group (not reaped: the pid is still it) */
    }
    for (int i = 0; i < nfds; i++)
      if (fds[i] >= 0)
        close(fds[i]);
  }
}
