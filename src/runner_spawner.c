/* The spawn helper (see runner_spawner.h).
 *
 * Two socket pairs link the server and the helper: requests (stream; the server writes
 * SPAWN with the plan's three fds as SCM_RIGHTS, or KILL, and reads one reply per SPAWN:
 * the helper answers right after its fork) and events (seqpacket; the helper writes one
 * EXIT per supervisor it reaped, which the loop reads). The helper is forked from a
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
#define MAX_PAYLOAD (64L << 20)

enum { REQ_SPAWN = 1, REQ_KILL = 2 };

typedef struct req {
  uint32_t kind;
  int32_t pid, sig;      /* KILL */
  uint32_t argc, envc;   /* SPAWN: path, argc args, envc entries, NUL-terminated */
  uint64_t len;          /* payload bytes after this header */
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

/* Reads exactly n bytes (blocking); 0 on EOF or an error. */
static int read_full(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return 0;
    p += r;
    n -= (size_t)r;
  }
  return 1;
}

static int write_full(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return 0;
    p += w;
    n -= (size_t)w;
  }
  return 1;
}

/* The header of a request and the fds sent with it (-1 for none); 0 on EOF. */
static int recv_req(int fd, req_t *q, int fds[3]) {
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {q, sizeof(*q)};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
  ssize_t r;
  fds[0] = fds[1] = fds[2] = -1;
  do
    r = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  if (r <= 0)
    return 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      memcpy(fds, CMSG_DATA(c), (k < 3 ? k : 3) * sizeof(int));
    }
  /* the rest of the header (a stream may split it; the fds came with its first byte) */
  return (size_t)r == sizeof(*q) || read_full(fd, (char *)q + r, sizeof(*q) - (size_t)r);
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

/* Forks the supervisor of one try; 0 with *pid, or an errno. */
static int helper_spawn(const req_t *q, int fds[3], const sigset_t *mask, int keep_fds[3],
                        pid_t *pid) {
  char *payload = NULL, **argv = NULL, **envp = NULL, *p;
  mqproc__child_plan_t plan;
  size_t n;
  int e = ENOMEM;
  /* the payload is read whatever comes next, or the stream would lose its framing; a
   * helper that cannot read it exits, and the server starts another */
  if (q->len > MAX_PAYLOAD || (payload = malloc(q->len + 1)) == NULL ||
      !read_full(keep_fds[0], payload, q->len))
    _exit(1);
  payload[q->len] = '\0';
  if ((argv = calloc(q->argc + 1, sizeof(*argv))) == NULL ||
      (envp = calloc(q->envc + 1, sizeof(*envp))) == NULL)
    goto out;
  p = payload;
  e = EINVAL;
  if (q->argc < 1 || fds[0] < 0 || fds[1] < 0 || fds[2] < 0 || (n = strlen(p)) >= q->len)
    goto out;
  for (int i = 0; i < 3; i++) /* the child's dup2s onto 0-3 must not clobber a source */
    if (fds[i] < MQPROC__CHILD_MIN_FD) {
      int hi = fcntl(fds[i], F_DUPFD_CLOEXEC, MQPROC__CHILD_MIN_FD);
      if (hi < 0) {
        e = errno;
        goto out;
      }
      close(fds[i]);
      fds[i] = hi;
    }
  memset(&plan, 0, sizeof(plan));
  plan.path = p;
  p += n + 1;
  if (!split(&p, payload + q->len, argv, q->argc) || !split(&p, payload + q->len, envp, q->envc))
    goto out;
  plan.argv = argv;
  plan.envp = envp;
  plan.in_fd = fds[0];
  plan.log_fd = fds[1];
  plan.report_fd = fds[2];
  plan.server = getpid();
  plan.max_log_bytes = (long)q->max_log_bytes;
  plan.core = (struct rlimit){(rlim_t)q->core_cur, (rlim_t)q->core_max};
  if ((*pid = fork()) == 0) {
    close(keep_fds[0]);
    close(keep_fds[1]);
    close(keep_fds[2]);
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
    int fds[3];
    if (poll(pf, 2, -1) < 0)
      continue;
    while (read(sfd, &si, sizeof(si)) > 0)
      ;
    helper_reap(&live, ev_fd);
    if (!(pf[0].revents & (POLLIN | POLLHUP | POLLERR)))
      continue;
    if (!recv_req(req_fd, &q, fds))
      _exit(0); /* the server closed its end */
    if (q.kind == REQ_SPAWN) {
      reply_t rep = {-1, 0};
      pid_t pid = -1;
      rep.err = helper_spawn(&q, fds, &none, keep, &pid);
      if (rep.err == 0 && live_add(&live, pid) == 0)
        rep.pid = pid;
      else if (rep.err == 0) { /* cannot track it: it must not run untracked */
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
        rep.err = ENOMEM;
      }
      for (int i = 0; i < 3; i++)
        if (fds[i] >= 0)
          close(fds[i]);
      if (!write_full(req_fd, &rep, sizeof(rep)))
        _exit(0);
    } else if (q.kind == REQ_KILL && live_has(&live, q.pid)) {
      kill(-q.pid, q.sig);
      kill(q.pid, q.sig); /* had it left its group (not reaped: the pid is still it) */
    }
    for (int i = 0; q.kind != REQ_SPAWN && i < 3; i++)
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

/* Every pending try ends as killed (its supervisor died with the helper), on the next
 * loop turn: this may run inside a spawn. */
static void helper_gone(mqproc__spawner_t *s, const char *why) {
  pending_t *runs = s->runs;
  if (s->pid > 0) {
    MQPROC__ERROR("spawn helper (pid %d) %s; %s", (int)s->pid, why,
                  runs != NULL ? "its running tries were killed"
                               : "a new one starts on the next try");
    kill(s->pid, SIGKILL);
    mqproc__loop_child_forget(s->loop, s->pid);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  mqproc__loop_io(s->loop, s->ev_fd, NULL, NULL);
  close(s->req_fd);
  close(s->ev_fd);
  s->req_fd = s->ev_fd = -1;
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
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, req) < 0)
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
    helper_gone(s, "cannot be watched");
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

/* Writes msg (a request header and its payload, n bytes) with fds (3, or NULL). */
static int send_req(mqproc__spawner_t *s, const char *msg, size_t n, const int *fds) {
  union {
    char buf[CMSG_SPACE(3 * sizeof(int))];
    struct cmsghdr align;
  } u;
  struct iovec iov = {(void *)msg, n};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  ssize_t w;
  if (fds != NULL) {
    struct cmsghdr *c;
    memset(&u, 0, sizeof(u));
    m.msg_control = u.buf;
    m.msg_controllen = sizeof(u.buf);
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(3 * sizeof(int));
    memcpy(CMSG_DATA(c), fds, 3 * sizeof(int));
  }
  do
    w = sendmsg(s->req_fd, &m, MSG_NOSIGNAL);
  while (w < 0 && errno == EINTR);
  if (w < 0)
    return -1;
  /* the rest of a long payload, the helper reading it meanwhile */
  return write_full(s->req_fd, msg + w, n - (size_t)w) ? 0 : -1;
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
  char err[MQPROC_ERR_LEN], *msg, *p;
  int fds[3] = {plan->in_fd, plan->log_fd, plan->report_fd};
  pending_t *r = mqproc__calloc(1, sizeof(*r));
  struct pollfd pf;
  reply_t reply;
  req_t q;
  memset(&q, 0, sizeof(q));
  q.kind = REQ_SPAWN;
  q.len = strlen(plan->path) + 1 + vec_len(plan->argv, &q.argc) + vec_len(plan->envp, &q.envc);
  q.max_log_bytes = plan->max_log_bytes;
  q.core_cur = plan->core.rlim_cur;
  q.core_max = plan->core.rlim_max;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, ENOMEM};
  if (r == NULL || (msg = malloc(sizeof(q) + q.len)) == NULL) {
    free(r);
    return -1;
  }
  memcpy(msg, &q, sizeof(q));
  p = vec_put(msg + sizeof(q), (char *const[]){(char *)plan->path}, 1);
  p = vec_put(p, plan->argv, q.argc);
  vec_put(p, plan->envp, q.envc);
  if (s->pid == 0 && helper_start(s, err) != MQPROC_OK) {
    MQPROC__ERROR("%s", err);
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  pf = (struct pollfd){.fd = s->req_fd, .events = POLLIN};
  if (send_req(s, msg, sizeof(q) + q.len, fds) < 0 || poll(&pf, 1, REPLY_TIMEOUT_MS) != 1 ||
      !read_full(s->req_fd, &reply, sizeof(reply))) {
    helper_gone(s, "does not answer");
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  if (reply.pid <= 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, reply.err};
    goto fail;
  }
  free(msg);
  r->pid = *pid = reply.pid;
  r->cb = cb;
  r->ud = ud;
  r->next = s->runs;
  s->runs = r;
  return 0;
fail:
  free(msg);
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
  if (send_req(s, (const char *)&q, sizeof(q), NULL) < 0)
    helper_gone(s, "does not answer");
}

void mqproc__spawner_free(mqproc__spawner_t *s) {
  if (s == NULL)
    return;
  if (s->pid > 0) {
    kill(s->pid, SIGKILL); /* its supervisors kill their groups */
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
  if (s->orphan_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->orphan_timer);
  for (pending_t *lists[2] = {s->runs, s->orphans}, **l = lists; l < lists + 2; l++)
    while (*l != NULL) {
      pending_t *r = *l;
      *l = r->next;
      free(r);
    }
  free(s);
}
