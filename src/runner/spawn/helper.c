/* The spawn helper (spawn/helper.h): the supervisor of every --exec try of its server.
 *
 * One small single-threaded process per server, started at the first try. It starts each
 * try's processor itself (runner/child.c: vfork + execve into a process group of its own)
 * and runs one event loop (epoll) over the requests, every try's output pipe and a
 * signalfd, doing what a supervisor process per try did before: it copies each try's
 * output into its job log (memfd, spilled to the file past --log-inline-max), kills the
 * group past --max-log-size, keeps the output's tail for the error, reaps the processor,
 * kills what its group left behind, and reports the end to the server. A try costs one
 * process, the processor's own.
 *
 * Its guarantees:
 *   - it dies with the server: PR_SET_PDEATHSIG sends SIGUSR2, and when its parent really
 *     is gone (getppid() changed; a processor may send the same signal) it kills every
 *     try's group and every process left to it, then exits; the processors die with it
 *     (their own PR_SET_PDEATHSIG), so a helper killed alone takes its processors along
 *     and the server kills the groups it was told of (STARTED's pids);
 *   - it is a child subreaper (PR_SET_CHILD_SUBREAPER): a process a processor started and
 *     left behind becomes its child when its parent exits, whatever group or session it
 *     moved to, so it is reaped here, and killed once no try runs (then every child that
 *     is not a processor is such a leftover) and when the helper ends;
 *   - a try's group is killed when its processor has exited, before the processor is
 *     reaped (waitid WNOWAIT): the zombie keeps the group's id from being reused;
 *   - it writes no core file and cannot be traced by others of its user (it holds the
 *     processors' environments); it holds no fd of the server's but its two sockets, and
 *     no processor gets one of its fds; it writes no log and uses nothing but libc
 *     (spawn/sys.c), so it builds as a static program of its own.
 */
#include "runner/spawn/helper.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h> /* snprintf */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/child.h"
#include "runner/int.h"

#define PDEATH_SIG SIGUSR2 /* the server died (or a processor says so: checked) */

/* What an epoll event is about: a try's output pipe by the try's id (never its address: an
 * event must not reach a try that has ended), or one of the helper's own fds. */
#define EV_REQ UINT64_MAX
#define EV_SIG (UINT64_MAX - 1)

typedef struct helper {
  pid_t server, self;
  int req_fd, ev_fd, sig_fd, ep;
  int chld;               /* a SIGCHLD came: reap */
  mqproc__child_t *tries; /* started or starting, not yet reported ENDED */
  char out[16384];        /* a try's output, on its way to the log */
  union {
    mqproc__helper_req_t q;
    char bytes[sizeof(mqproc__helper_req_t) + MQPROC__HELPER_INLINE];
  } req;
  union {
    mqproc__helper_event_t ev;
    char bytes[MQPROC__HELPER_EVENT_MAX];
  } msg;
} helper_t;

static helper_t g_helper; /* one per process: 50 KB of buffers not on the stack */

/* ---- the end ---------------------------------------------------------------------------- */

/* Kills every process that is the helper's child: processors, and what they left behind
 * that was handed to the helper (the subreaper), whatever group or session it moved to.
 * Returns how many it found. */
static int kill_children(pid_t self) {
  char path[64], buf[4096];
  int fd, n = 0;
  long pid = 0;
  ssize_t got;
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)self, (int)self);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return 0; /* no CONFIG_PROC_CHILDREN: the groups were killed, the processors die with us */
  while ((got = read(fd, buf, sizeof(buf))) > 0) /* "pid pid ... " */
    for (ssize_t i = 0; i < got; i++) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
        continue;
      }
      if (pid > 0) {
        kill((pid_t)pid, SIGKILL);
        n++;
      }
      pid = 0;
    }
  if (pid > 0) {
    kill((pid_t)pid, SIGKILL);
    n++;
  }
  close(fd);
  return n;
}

/* The server is gone (or closed its end): every try's group is killed, then whatever else
 * is left to the helper, round after round (a killed process hands its own children to
 * the helper as it exits), for at most DIE_GRACE_MS; the processors' own parent-death
 * signal follows when the helper exits. */
#define DIE_GRACE_MS 2000
__attribute__((noreturn)) static void die(helper_t *h, int code) {
  const struct timespec pause = {0, 1000000L};
  for (mqproc__child_t *c = h->tries; c != NULL; c = c->next)
    mqproc__child_kill(c, SIGKILL);
  for (int ms = 0; ms < DIE_GRACE_MS && kill_children(h->self) > 0; ms++) {
    while (waitpid(-1, NULL, WNOHANG) > 0)
      ;
    nanosleep(&pause, NULL);
  }
  _exit(code);
}

/* One event to the server; a server that is gone ends the helper. */
static void report(helper_t *h, size_t len) {
  ssize_t n;
  do
    n = send(h->ev_fd, h->msg.bytes, len, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    die(h, 0);
}

static void report_started(helper_t *h, const mqproc__child_t *c) {
  memset(&h->msg.ev, 0, sizeof(h->msg.ev));
  h->msg.ev.kind = MQPROC__HELPER_STARTED;
  h->msg.ev.id = c->id;
  h->msg.ev.pid = c->pid;
  report(h, sizeof(h->msg.ev));
}

/* The try ended (reaped, or it never ran): its status, a failed step, and a failed
 * processor's last output. */
static void report_ended(helper_t *h, const mqproc__child_t *c) {
  mqproc__helper_event_t *ev = &h->msg.ev;
  int cut = 0;
  size_t tail = mqproc__child_tail(c, h->msg.bytes + sizeof(*ev), &cut);
  memset(ev, 0, sizeof(*ev));
  ev->kind = MQPROC__HELPER_ENDED;
  ev->id = c->id;
  ev->pid = c->pid;
  ev->wstatus = c->wstatus;
  ev->step_failed = c->step_failed;
  ev->step = c->step;
  ev->tail_len = (uint32_t)tail;
  ev->tail_cut = cut;
  report(h, sizeof(*ev) + tail);
}

static mqproc__child_t *find_id(helper_t *h, uint64_t id) {
  mqproc__child_t *c = h->tries;
  while (c != NULL && c->id != id)
    c = c->next;
  return c;
}

static void unlink_try(helper_t *h, mqproc__child_t *c) {
  mqproc__child_t **pp = &h->tries;
  while (*pp != NULL && *pp != c)
    pp = &(*pp)->next;
  if (*pp == c)
    *pp = c->next;
}

/* ---- reaping ---------------------------------------------------------------------------- */

/* Every child that exited: a processor's group is killed while its zombie still holds the
 * group's id, then it is reaped and its try reported; anything else (a process handed to
 * the subreaper) is only reaped. */
static void reap(helper_t *h) {
  for (;;) {
    siginfo_t si;
    mqproc__child_t *c;
    int st = 0;
    memset(&si, 0, sizeof(si));
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
      return;
    for (c = h->tries; c != NULL && c->pid != si.si_pid; c = c->next)
      ;
    if (c != NULL)
      kill(-c->pid, SIGKILL); /* what the try left in its group */
    while (waitpid(si.si_pid, &st, 0) < 0 && errno == EINTR)
      ;
    if (c == NULL)
      continue;
    mqproc__child_reaped(c, st, h->out, sizeof(h->out));
    unlink_try(h, c);
    report_ended(h, c);
    mqproc__child_free(c);
    /* no try runs: every child the helper still has is what an ended try left behind
     * outside its group (a daemon handed to the subreaper) */
    if (h->tries == NULL)
      kill_children(h->self);
  }
}

/* ---- requests --------------------------------------------------------------------------- */

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

/* The try's state and a copy of its payload (path, argv, envp, the log's names) in one
 * block; NULL with errno. */
static mqproc__child_t *try_new(const mqproc__helper_req_t *q, const char *payload, size_t len) {
  size_t vecs = ((size_t)q->argc + 1 + (size_t)q->envc + 1) * sizeof(char *);
  mqproc__child_t *c;
  char **argv, **envp, *p, *end, *log[4];
  if (q->argc < 1 || q->argc > (1u << 20) || q->envc > (1u << 20) || len == 0 ||
      payload[len - 1] != '\0') {
    errno = EINVAL;
    return NULL;
  }
  if ((c = calloc(1, sizeof(*c) + vecs + len)) == NULL)
    return NULL;
  mqproc__child_init(c);
  argv = (char **)(void *)(c + 1);
  envp = argv + q->argc + 1;
  p = (char *)(envp + q->envc + 1);
  memcpy(p, payload, len);
  end = p + len;
  c->plan.path = p;
  p += strlen(p) + 1;
  if (p > end || !split(&p, end, argv, q->argc) || !split(&p, end, envp, q->envc) ||
      (q->log_inline_max > 0 && !split(&p, end, log, 3))) {
    free(c);
    errno = EINVAL;
    return NULL;
  }
  c->id = q->id;
  c->plan.argv = argv;
  c->plan.envp = envp;
  c->plan.max_log_bytes = (long)q->max_log_bytes;
  c->plan.core = (struct rlimit){(rlim_t)q->core_cur, (rlim_t)q->core_max};
  if (q->log_inline_max > 0) {
    c->plan.log_inline_max = (long)q->log_inline_max;
    c->plan.log_dir = log[0];
    c->plan.log_sub = log[1];
    c->plan.log_name = log[2];
  }
  return c;
}

/* A try that never got to run: reported at once. */
static void spawn_failed(helper_t *h, uint64_t id, int stage, int err) {
  mqproc__child_t c;
  memset(&c, 0, sizeof(c));
  c.id = id;
  c.step_failed = 1;
  c.step = (mqproc__child_report_t){stage, err};
  report_ended(h, &c);
}

/* SPAWN: fds are the job's memfd, the log and (a large payload) its memfd; they are the
 * try's from here on. */
static void spawn(helper_t *h, size_t got, int *fds, int nfds) {
  const mqproc__helper_req_t *q = &h->req.q;
  char *payload = NULL;
  size_t len = q->inline_len;
  mqproc__child_t *c = NULL;
  struct epoll_event ev = {.events = EPOLLIN};
  if (nfds != (len > 0 ? 2 : 3) || len != got - sizeof(*q) || q->id >= EV_SIG) {
    spawn_failed(h, q->id, MQPROC__STAGE_FORK, EINVAL);
    return;
  }
  if (len == 0 && mqproc__fd_slurp(fds[2], &payload, &len) < 0) {
    spawn_failed(h, q->id, MQPROC__STAGE_FORK, errno);
    return;
  }
  if (len > 0 && payload == NULL)
    c = try_new(q, h->req.bytes + sizeof(*q), len);
  else
    c = try_new(q, payload, len + 1); /* mqproc__fd_slurp added the NUL */
  free(payload);
  if (c == NULL) {
    spawn_failed(h, q->id, MQPROC__STAGE_FORK, errno);
    return;
  }
  c->plan.in_fd = mqproc__fd_lift(fds[0], MQPROC__CHILD_MIN_FD);
  c->plan.log_fd = fds[1];
  fds[0] = fds[1] = -1;
  if (c->plan.in_fd < 0) {
    c->step = (mqproc__child_report_t){MQPROC__STAGE_DUP2, errno};
    c->step_failed = 1;
  }
  if (c->step_failed || mqproc__child_start(c, h->self) < 0) {
    report_ended(h, c);
    mqproc__child_free(c);
    return;
  }
  c->next = h->tries;
  h->tries = c;
  ev.data.u64 = c->id;
  if (epoll_ctl(h->ep, EPOLL_CTL_ADD, c->out_fd, &ev) < 0) {
    /* its output could not be copied: it must not run unwatched */
    c->step = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    c->step_failed = 1;
    mqproc__child_kill(c, SIGKILL);
  } else {
    c->ep = h->ep; /* the pipe leaves the set before it is closed */
  }
  report_started(h, c);
}

/* Serves what the server sent: returns when nothing is left to read. */
static void serve(helper_t *h) {
  for (;;) {
    int fds[MQPROC__HELPER_FDS], nfds = 0;
    ssize_t got = mqproc__recv_fds(h->req_fd, h->req.bytes, sizeof(h->req.bytes), fds,
                                   MQPROC__HELPER_FDS, &nfds, MSG_DONTWAIT);
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
      return;
    if (got <= 0 || (size_t)got < sizeof(h->req.q))
      die(h, got == 0 ? 0 : 1); /* the server closed its end, or sent garbage */
    if (h->req.q.kind == MQPROC__HELPER_SPAWN) {
      spawn(h, (size_t)got, fds, nfds);
    } else if (h->req.q.kind == MQPROC__HELPER_KILL) {
      mqproc__child_t *c = find_id(h, h->req.q.id);
      if (c != NULL) {
        c->stopped = 1; /* the server ends it (time limit, cancel, shutdown): it knows why */
        mqproc__child_kill(c, h->req.q.sig);
      }
    } else if (h->req.q.kind == MQPROC__HELPER_PING) {
      memset(&h->msg.ev, 0, sizeof(h->msg.ev));
      h->msg.ev.kind = MQPROC__HELPER_PONG;
      h->msg.ev.id = h->req.q.id;
      report(h, sizeof(h->msg.ev));
    }
    for (int i = 0; i < nfds; i++)
      if (fds[i] >= 0)
        close(fds[i]);
  }
}

/* ---- the loop --------------------------------------------------------------------------- */

/* SIGCHLD: reap; the parent-death signal: die when the server really is gone. */
static void on_signals(helper_t *h) {
  struct signalfd_siginfo si;
  while (read(h->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    if (si.ssi_signo == PDEATH_SIG && getppid() != h->server)
      die(h, 0);
    h->chld |= si.ssi_signo == SIGCHLD; /* one may stand for several: reap() takes all */
  }
}

/* Every signal but those of its own faults blocked (the server decides when it ends: not a
 * ^C) and left at its default disposition, so a processor needs one sigprocmask, not a
 * sigaction per signal, to start with default signals (in a fork of the server the
 * server's dispositions are reset here once); SIGCHLD and the parent-death signal are
 * read from a signalfd, the others stay pending, never delivered. */
static int set_signals(helper_t *h) {
  struct sigaction dfl;
  sigset_t all, mine;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigfillset(&all);
  for (int sig = 1; sig < NSIG; sig++) {
    sigaction(sig, &dfl, NULL); /* SIGKILL, SIGSTOP and libc's own refuse: harmless */
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGABRT ||
        sig == SIGTRAP || sig == SIGSYS)
      sigdelset(&all, sig);
  }
  sigprocmask(SIG_SETMASK, &all, NULL);
  sigemptyset(&mine);
  sigaddset(&mine, SIGCHLD);
  sigaddset(&mine, PDEATH_SIG);
  h->sig_fd = signalfd(-1, &mine, SFD_CLOEXEC | SFD_NONBLOCK);
  return h->sig_fd;
}

/* No fd of the server's but the two sockets (a broker socket held here would outlive a
 * dead server), and those not to be inherited by what it starts. */
static void keep_only(int req_fd, int ev_fd, int sig_fd) {
  int keep[3] = {req_fd, ev_fd, sig_fd};
  unsigned from = 3;
  for (int i = 0; i < 3; i++) /* ascending */
    for (int j = i + 1; j < 3; j++)
      if (keep[j] < keep[i]) {
        int t = keep[i];
        keep[i] = keep[j];
        keep[j] = t;
      }
  for (int i = 0; i < 3; i++) {
    if (keep[i] < 3)
      continue;
    if ((unsigned)keep[i] > from)
      close_range(from, (unsigned)keep[i] - 1, 0);
    from = (unsigned)keep[i] + 1;
  }
  close_range(from, ~0U, 0);
  fcntl(req_fd, F_SETFD, FD_CLOEXEC);
  fcntl(ev_fd, F_SETFD, FD_CLOEXEC);
  fcntl(req_fd, F_SETFL, O_NONBLOCK);
}

__attribute__((noreturn)) void mqproc__helper_main(pid_t server, int req_fd, int ev_fd) {
  helper_t *h = &g_helper;
  struct rlimit core;
  struct epoll_event ev = {.events = EPOLLIN};
  h->server = server;
  h->self = getpid();
  h->req_fd = req_fd;
  h->ev_fd = ev_fd;
  prctl(PR_SET_DUMPABLE, 0); /* it holds the processors' environments */
  if (getrlimit(RLIMIT_CORE, &core) == 0) {
    core.rlim_cur = 0; /* the hard limit stays: the processors get the server's back */
    setrlimit(RLIMIT_CORE, &core);
  }
  if (set_signals(h) < 0)
    _exit(1);
  if (prctl(PR_SET_PDEATHSIG, PDEATH_SIG) < 0 || getppid() != server)
    _exit(0); /* the server died before the prctl: nothing would tell us later */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  keep_only(req_fd, ev_fd, h->sig_fd);
  if ((h->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
    _exit(1);
  ev.data.u64 = EV_REQ;
  if (epoll_ctl(h->ep, EPOLL_CTL_ADD, req_fd, &ev) < 0)
    _exit(1);
  ev.data.u64 = EV_SIG;
  if (epoll_ctl(h->ep, EPOLL_CTL_ADD, h->sig_fd, &ev) < 0)
    _exit(1);
  for (;;) {
    struct epoll_event evs[64];
    int n = epoll_wait(h->ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      mqproc__child_t *c;
      if (evs[i].data.u64 == EV_REQ)
        serve(h);
      else if (evs[i].data.u64 == EV_SIG)
        on_signals(h);
      else if ((c = find_id(h, evs[i].data.u64)) != NULL)
        /* one read per turn and try: a flood does not starve the others */
        mqproc__child_read(c, h->out, sizeof(h->out));
    }
    if (h->chld) {
      h->chld = 0;
      reap(h);
    }
  }
}
