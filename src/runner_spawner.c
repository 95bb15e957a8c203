/* The spawn helper (see runner_spawner.h).
 *
 * Two SEQPACKET socket pairs link the server and the helper: requests (SPAWN with four
 * fds: the plan's three and a memfd holding the path, argv and envp; or KILL) with one
 * reply per SPAWN, which the helper sends right after its fork; and events (one EXIT per
 * supervisor the helper reaped, which the loop reads). The helper is forked from a
 * multi-threaded server: it uses no lock but malloc's (glibc makes malloc safe after
 * fork) and no stdio; it writes no log.
 */
#include "runner_spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define REPLY_TIMEOUT_MS 10000 /* a helper that does not answer a fork by then is hung */
#define SPAWN_FDS 4            /* in, log, report, the memfd with path, argv and envp */

enum { REQ_SPAWN = 1, REQ_KILL = 2 };

typedef struct req {
  uint32_t kind;
  int32_t pid, sig;      /* KILL */
  uint32_t argc, envc;   /* SPAWN: the memfd holds path, argc args, envc entries, each
                            NUL-terminated */
  int64_t max_log_bytes; /* the plan's */
  uint64_t core_cur, core_max;
} req_t;

typedef struct reply {
  int32_t pid; /* > 0, or -1 with err */
  int32_t err;
} reply_t;

typedef struct event {
  int32_t pid;
  int32_t wstatus;
} event_t;

typedef struct pending {
  pid_t pid;
  mqproc__spawner_exit_cb cb;
  void *ud;
  struct pending *next;
} pending_t;

struct mqproc__spawner {
  mqproc__loop_t *loop;
  pid_t pid; /* the helper; 0 once it is gone */
  int req_fd, ev_fd;
  pending_t *runs;    /* tries whose supervisor has not been reported ended */
  pending_t *orphans; /* tries whose helper died: ended on the next loop turn */
  uint64_t orphan_timer;
};

/* ---- the helper ----------------------------------------------------------------------- */

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
static int helper_spawn(const req_t *q, int fds[SPAWN_FDS], const sigset_t *mask,
                        const int keep_fds[3], pid_t *pid) {
  char *payload = NULL, **argv = NULL, **envp = NULL, *p;
  mqproc__child_plan_t plan;
  size_t len, n;
  int e = ENOMEM;
  if (mqproc__runner_read_fd(fds[3], &payload, &len, NULL) != MQPROC_OK)
    return EIO;
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
  if (!split(&p, payload + len, argv, q->argc) || !split(&p, payload + len, envp, q->envc))
    goto out;
  /* the child's dup2s onto 0-3 must not clobber a source */
  for (int i = 0; i < 3; i++)
    if ((fds[i] = mqproc__runner_lift_fd(fds[i], MQPROC__CHILD_MIN_FD, NULL)) < 0) {
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
    event_t ev = {pid, st};
    kill(-pid, SIGKILL); /* the group's id stays taken while a member lives: never reused */
    live_drop(live, pid);
    if (send(ev_fd, &ev, sizeof(ev), MSG_NOSIGNAL) < 0 && errno == EPIPE)
      _exit(0);
  }
}

__attribute__((noreturn)) static void helper_main(pid_t server, int req_fd, int ev_fd) {
  sigset_t chld, none;
  struct sigaction sa;
  live_t live = {NULL, 0, 0};
  int sfd, keep[3], lo, hi;
  prctl(PR_SET_DUMPABLE, 0); /* it holds a copy of the server's memory */
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
    req_t q;
    int fds[SPAWN_FDS], nfds, rc;
    if (poll(pf, 2, -1) < 0)
      continue;
    while (read(sfd, &si, sizeof(si)) > 0)
      ;
    helper_reap(&live, ev_fd);
    if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    if ((rc = mqproc__recv_with_fds(req_fd, &q, sizeof(q), fds, SPAWN_FDS, &nfds)) <= 0)
      _exit(rc == 0 ? 0 : 1); /* the server closed its end, or sent garbage: it starts another */
    if (q.kind == REQ_SPAWN) {
      reply_t rep = {-1, EINVAL};
      pid_t pid = -1;
      if (nfds == SPAWN_FDS)
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
    } else if (q.kind == REQ_KILL && live_has(&live, q.pid)) {
      kill(-q.pid, q.sig);
      kill(q.pid, q.sig); /* had it left its group (not reaped: the pid is still it) */
    }
    for (int i = 0; i < nfds; i++)
      if (fds[i] >= 0)
        close(fds[i]);
  }
}

/* ---- the server's side ---------------------------------------------------------------- */

static void on_event(mqproc__loop_t *loop, int fd, void *ud);
static void on_helper_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud);

static void end_orphans(mqproc__loop_t *loop, void *ud) {
  mqproc__spawner_t *s = ud;
  (void)loop;
  s->orphan_timer = 0;
  while (s->orphans != NULL) {
    pending_t *r = s->orphans;
    s->orphans = r->next;
    r->cb(r->ud, r->pid, SIGKILL); /* a wait status: killed by SIGKILL */
    free(r);
  }
}

/* Kills the helper unless the loop reaped it already (its supervisors kill their groups)
 * and drops its sockets. */
static void helper_stop(mqproc__spawner_t *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    mqproc__loop_child_forget(s->loop, s->pid);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  if (s->ev_fd >= 0) {
    mqproc__loop_io(s->loop, s->ev_fd, NULL, NULL);
    close(s->ev_fd);
  }
  if (s->req_fd >= 0)
    close(s->req_fd);
  s->req_fd = s->ev_fd = -1;
}

/* Every pending try ends as killed (its supervisor died with the helper), on the next
 * loop turn: this may run inside a spawn. */
static void helper_gone(mqproc__spawner_t *s, const char *why) {
  pending_t *runs = s->runs;
  if (s->pid > 0)
    MQPROC__ERROR("spawn helper (pid %d) %s; %s", (int)s->pid, why,
                  runs != NULL ? "its running tries were killed"
                               : "a new one starts on the next try");
  helper_stop(s);
  s->runs = NULL;
  while (runs != NULL) {
    pending_t *r = runs;
    runs = r->next;
    r->next = s->orphans;
    s->orphans = r;
  }
  if (s->orphans != NULL && s->orphan_timer == 0)
    s->orphan_timer = mqproc__loop_timer(s->loop, 0, end_orphans, s);
}

static int helper_start(mqproc__spawner_t *s, char *err) {
  int req[2], ev[2];
  pid_t server = getpid(), pid;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, req) < 0)
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: socketpair: %s", strerror(errno));
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) < 0) {
    close(req[0]);
    close(req[1]);
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: socketpair: %s", strerror(errno));
  }
  if ((pid = fork()) == 0) {
    close(req[0]);
    close(ev[0]);
    helper_main(server, req[1], ev[1]);
  }
  close(req[1]);
  close(ev[1]);
  if (pid < 0 || mqproc__loop_child(s->loop, pid, on_helper_exit, s) != MQPROC_OK) {
    int e = errno;
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    close(req[0]);
    close(ev[0]);
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: %s",
                       pid < 0 ? strerror(e) : "out of memory");
  }
  s->pid = pid;
  s->req_fd = req[0];
  s->ev_fd = ev[0];
  fcntl(s->ev_fd, F_SETFL, O_NONBLOCK);
  if (mqproc__loop_io(s->loop, s->ev_fd, on_event, s) != MQPROC_OK) {
    helper_stop(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  MQPROC__DEBUG("spawn helper started (pid %d)", (int)pid);
  return MQPROC_OK;
}

int mqproc__spawner_new(mqproc__spawner_t **out, mqproc__loop_t *loop, char *err) {
  mqproc__spawner_t *s = mqproc__calloc(1, sizeof(*s));
  int rc;
  if (s == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  s->loop = loop;
  s->req_fd = s->ev_fd = -1;
  if ((rc = helper_start(s, err)) != MQPROC_OK) {
    free(s);
    return rc;
  }
  *out = s;
  return MQPROC_OK;
}

static void on_event(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__spawner_t *s = ud;
  event_t ev;
  ssize_t n;
  (void)loop;
  while ((n = recv(fd, &ev, sizeof(ev), 0)) == (ssize_t)sizeof(ev)) {
    pending_t **pp = &s->runs, *r;
    while (*pp != NULL && (*pp)->pid != ev.pid)
      pp = &(*pp)->next;
    if ((r = *pp) == NULL)
      continue;
    *pp = r->next;
    r->cb(r->ud, r->pid, ev.wstatus);
    free(r);
  }
  if (n == 0) /* EOF: the helper is gone; its exit watch tells the rest */
    mqproc__loop_io(s->loop, fd, NULL, NULL);
}

static void on_helper_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  mqproc__spawner_t *s = ud;
  char why[64];
  (void)loop;
  (void)pid;
  on_event(s->loop, s->ev_fd, s); /* what it reported before it died */
  if (WIFSIGNALED(wstatus))
    snprintf(why, sizeof(why), "was killed by signal %d", WTERMSIG(wstatus));
  else
    snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(wstatus));
  s->pid = 0; /* reaped by the loop */
  MQPROC__ERROR("spawn helper (pid %d) %s", (int)pid, why);
  helper_gone(s, why);
}

static size_t vec_len(char *const *v, uint32_t *n) {
  size_t len = 0;
  *n = 0;
  for (; v != NULL && v[*n] != NULL; (*n)++)
    len += strlen(v[*n]) + 1;
  return len;
}

static char *vec_put(char *p, char *const *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    size_t k = strlen(v[i]) + 1;
    memcpy(p, v[i], k);
    p += k;
  }
  return p;
}

int mqproc__spawner_spawn(mqproc__spawner_t *s, const mqproc__child_plan_t *plan,
                          mqproc__spawner_exit_cb cb, void *ud, pid_t *pid,
                          mqproc__child_report_t *rep) {
  char err[MQPROC_ERR_LEN], *payload = NULL, *p;
  int fds[SPAWN_FDS] = {plan->in_fd, plan->log_fd, plan->report_fd, -1};
  pending_t *r = mqproc__calloc(1, sizeof(*r));
  struct pollfd pf;
  reply_t reply;
  size_t len;
  req_t q;
  memset(&q, 0, sizeof(q));
  q.kind = REQ_SPAWN;
  len = strlen(plan->path) + 1 + vec_len(plan->argv, &q.argc) + vec_len(plan->envp, &q.envc);
  q.max_log_bytes = plan->max_log_bytes;
  q.core_cur = plan->core.rlim_cur;
  q.core_max = plan->core.rlim_max;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, ENOMEM};
  if (r == NULL || (payload = malloc(len)) == NULL)
    goto fail;
  p = vec_put(payload, (char *const[]){(char *)plan->path}, 1);
  p = vec_put(p, plan->argv, q.argc);
  vec_put(p, plan->envp, q.envc);
  if ((fds[3] = mqproc__runner_memfd("mqproc-spawn", payload, len, NULL)) < 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    goto fail;
  }
  if (s->pid == 0 && helper_start(s, err) != MQPROC_OK) {
    MQPROC__ERROR("%s", err);
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  pf = (struct pollfd){.fd = s->req_fd, .events = POLLIN};
  if (mqproc__send_with_fds(s->req_fd, &q, sizeof(q), fds, SPAWN_FDS) < 0 ||
      poll(&pf, 1, REPLY_TIMEOUT_MS) != 1 ||
      recv(s->req_fd, &reply, sizeof(reply), 0) != (ssize_t)sizeof(reply)) {
    helper_gone(s, "does not answer");
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  if (reply.pid <= 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, reply.err};
    goto fail;
  }
  close(fds[3]);
  free(payload);
  r->pid = *pid = reply.pid;
  r->cb = cb;
  r->ud = ud;
  r->next = s->runs;
  s->runs = r;
  return 0;
fail:
  if (fds[3] >= 0)
    close(fds[3]);
  free(payload);
  free(r);
  return -1;
}

void mqproc__spawner_kill(mqproc__spawner_t *s, pid_t pid, int sig) {
  req_t q;
  if (s == NULL || s->pid == 0)
    return;
  memset(&q, 0, sizeof(q));
  q.kind = REQ_KILL;
  q.pid = pid;
  q.sig = sig;
  if (mqproc__send_with_fds(s->req_fd, &q, sizeof(q), NULL, 0) < 0)
    helper_gone(s, "does not answer");
}

static void free_list(pending_t *r) {
  while (r != NULL) {
    pending_t *next = r->next;
    free(r);
    r = next;
  }
}

void mqproc__spawner_free(mqproc__spawner_t *s) {
  if (s == NULL)
    return;
  helper_stop(s);
  if (s->orphan_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->orphan_timer);
  free_list(s->runs);
  free_list(s->orphans);
  free(s);
}
