/* The child side of the command runner: the supervisor of one try and, forked from it,
 * the processor. Between fork and execve only async-signal-safe calls; everything is
 * prepared by runner_proc.c and handed over by the spawn helper (runner_spawner.c).
 *
 * The supervisor (forked by the spawn helper, which reaps it and reports its end to the
 * server; runner_proc.c reads its report pipe once it has ended):
 *   - leads a new process group, so a time limit or the end of the try reaches all the
 *     processor started;
 *   - keeps no fd of the server's but the three it was given (the job, the log, the
 *     report pipe): a broker socket it held would keep a dead connection open for the
 *     broker and in the server's epoll set;
 *   - dies with its parent, the helper (which dies with the server): PR_SET_PDEATHSIG
 *     sends SIGUSR2, and only when its parent is really gone (getppid() changed) does it
 *     kill the group; every other signal a
 *     processor may send to its group (`kill 0`) is ignored here, so such a processor's
 *     try is not mistaken for a dead server's;
 *   - writes no core file (it holds a copy of the server's memory: URLs, passwords);
 *   - copies the processor's stdout and stderr into the job log and counts the bytes: past
 *     --max-log-size the processor is killed and the supervisor dies of SIGXFSZ (the log
 *     limit limits the log, not the files the processor writes, as RLIMIT_FSIZE did); a
 *     job's first try copies into a memfd the server reads when the try ended, until the
 *     output would outgrow --log-inline-max: then the supervisor makes the job's log file
 *     (following no link, never blocking, a regular file of its user with one link: what
 *     the server would make), moves the memfd's bytes there and goes on there; a file it
 *     cannot make fails the try (the processor is killed, the report pipe says why);
 *   - keeps the last MQPROC__TAIL_BYTES of that output and, when the processor failed,
 *     writes them to the report pipe (runner_int.h), so the try's error can say why
 *     without the server reading the log;
 *   - ends the way the processor ended (exit status or signal), so the server sees it.
 */
#include "runner/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/int.h"

#define LOG_FULL_NOTE "\nmqproc: the try wrote more than --max-log-size: processor killed\n"

static void set_disposition(int sig, void (*handler)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = handler;
  sigaction(sig, &sa, NULL); /* SIGKILL, SIGSTOP and libc's own refuse: harmless */
}

/* Signals that report the supervisor's own faults keep their default. */
static int synchronous(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP ||
         sig == SIGSYS || sig == SIGABRT;
}

static pid_t g_server;

/* PR_SET_PDEATHSIG: the server died. A processor may send the same signal; then the
 * server is still our parent and nothing happens. */
static void on_parent_death(int sig) {
  (void)sig;
  if (getppid() != g_server)
    kill(0, SIGKILL);
}

/* Moves fd above stdio (fcntl is async-signal-safe). */
static int lift(int fd) {
  int hi;
  if (fd < 0 || fd > 2)
    return fd;
  hi = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return hi;
}

/* Closes every fd from 3 on but the kept ones (ascending, all >= 3). */
static void close_others(const int *keep, int n) {
  unsigned from = 3;
  for (int i = 0; i < n; i++) {
    if (keep[i] < 3)
      continue;
    if ((unsigned)keep[i] > from)
      close_range(from, (unsigned)keep[i] - 1, 0);
    from = (unsigned)keep[i] + 1;
  }
  close_range(from, ~0U, 0);
}

static void sort3(int *v) {
  for (int i = 0; i < 3; i++)
    for (int j = i + 1; j < 3; j++)
      if (v[j] < v[i]) {
        int t = v[i];
        v[i] = v[j];
        v[j] = t;
      }
}

/* The processor proper: stdio, defaults, exec. Its parent is the supervisor below. */
__attribute__((noreturn)) static void processor_main(const mqproc__child_plan_t *p, int out_w) {
  sigset_t none;
  for (int sig = 1; sig < NSIG; sig++)
    set_disposition(sig, SIG_DFL); /* ignored ones would survive execve */
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setrlimit(RLIMIT_CORE, &p->core);
  if (dup2(p->in_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_DUP2);
  /* every other fd must not reach the processor; CLOEXEC rather than close, so the
   * report pipe stays open until execve succeeds */
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(p->path, p->argv, p->envp);
  mqproc__child_fail(p->report_fd, MQPROC__STAGE_EXEC);
}

/* Writes all of buf to fd (the log); errors are ignored: a full disk must not hang us. */
static void write_all(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return;
    buf += w;
    n -= (size_t)w;
  }
}

/* The last MQPROC__TAIL_BYTES bytes of the processor's output, a ring. */
typedef struct tail {
  char ring[MQPROC__TAIL_BYTES];
  unsigned long long seen; /* bytes ever added */
} tail_t;

static void tail_add(tail_t *t, const char *buf, size_t n) {
  if (n > MQPROC__TAIL_BYTES) {
    t->seen += n - MQPROC__TAIL_BYTES;
    buf += n - MQPROC__TAIL_BYTES;
    n = MQPROC__TAIL_BYTES;
  }
  for (size_t i = 0; i < n; i++)
    t->ring[(t->seen + i) % MQPROC__TAIL_BYTES] = buf[i];
  t->seen += n;
}

/* The failed processor's last output into the report pipe, in order, as one write (below
 * PIPE_BUF: atomic, and the pipe holds at most one 8-byte report besides). */
static void tail_report(const tail_t *t, int report_fd) {
  char msg[sizeof(mqproc__child_report_t) + MQPROC__TAIL_BYTES];
  mqproc__child_report_t head = {MQPROC__REPORT_OUTPUT, 0};
  size_t n = t->seen < MQPROC__TAIL_BYTES ? (size_t)t->seen : MQPROC__TAIL_BYTES;
  size_t from = t->seen < MQPROC__TAIL_BYTES ? 0 : (size_t)(t->seen % MQPROC__TAIL_BYTES);
  ssize_t w;
  if (n == 0)
    return;
  if (t->seen > MQPROC__TAIL_BYTES)
    head.stage = MQPROC__REPORT_OUTPUT_CUT;
  head.err = (int)n;
  memcpy(msg, &head, sizeof(head));
  for (size_t i = 0; i < n; i++)
    msg[sizeof(head) + i] = t->ring[(from + i) % MQPROC__TAIL_BYTES];
  w = write(report_fd, msg, sizeof(head) + n); /* lost if it fails: only the text is */
  (void)w;
}

/* Whether a wait status is a failure worth the output's tail. */
static int failed(int st) {
  return !WIFEXITED(st) || WEXITSTATUS(st) != 0;
}

/* The output outgrew memory: the job's log file is made (what the server's joblog.c
 * would make, with libc alone: runner_sys.c), the memfd's bytes moved there and the memfd
 * emptied (the server reads an empty one as "in the file"); the file replaces *log_fd.
 * 0, or -1 with errno. */
static int spill(const mqproc__child_plan_t *p, int *log_fd) {
  int sfd = mqproc__joblog_sub_open(p->log_dir, p->log_sub, geteuid()), fd, e;
  if (sfd < 0)
    return -1;
  fd = mqproc__joblog_file_open(sfd, p->log_name, geteuid());
  e = errno;
  close(sfd);
  errno = e;
  if (fd < 0)
    return -1;
  if (mqproc__fd_copy(*log_fd, fd) == 0 && ftruncate(*log_fd, 0) == 0) {
    /* moved; a failed copy leaves the bytes where the server finds them too */
  }
  close(*log_fd);
  *log_fd = fd;
  return 0;
}

/* Dies of sig, as the processor did (or of SIGXFSZ for a full log). */
__attribute__((noreturn)) static void die_of(int sig) {
  sigset_t one;
  set_disposition(sig, SIG_DFL);
  sigemptyset(&one);
  sigaddset(&one, sig);
  sigprocmask(SIG_UNBLOCK, &one, NULL);
  kill(getpid(), sig);
  _exit(128 + sig);
}

/* Copies the processor's output into the log until it has exited and its output is
 * drained (a child it left behind may hold the pipe open: the server kills it). */
__attribute__((noreturn)) static void supervise(const mqproc__child_plan_t *p, pid_t pid, int out_r,
                                                int sfd) {
  tail_t tail = {.seen = 0};
  char buf[16384];
  long written = 0, kept = -1; /* kept: bytes in the memfd log; -1 once in the file */
  int st = 0, exited = 0, log_fd = p->log_fd;
  struct stat held;
  if (p->log_inline_max > 0)
    kept = fstat(log_fd, &held) == 0 ? (long)held.st_size : 0;
  for (;;) {
    struct pollfd fds[2] = {{.fd = out_r, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    struct signalfd_siginfo si;
    ssize_t n;
    if (!exited && waitpid(pid, &st, WNOHANG) == pid) {
      exited = 1;
      fcntl(out_r, F_SETFL, O_NONBLOCK); /* drain what is there, wait for nothing */
    }
    if (!exited && poll(fds, 2, -1) < 0)
      continue; /* EINTR */
    while (read(sfd, &si, sizeof(si)) > 0)
      ;
    if (!exited && !(fds[0].revents & (POLLIN | POLLHUP)))
      continue;
    n = read(out_r, buf, sizeof(buf));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) { /* drained (exited) or EOF: only the exit is left to wait for */
      while (!exited && waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
      break;
    }
    tail_add(&tail, buf, (size_t)n);
    if (kept >= 0 && kept + n > p->log_inline_max) {
      if (spill(p, &log_fd) < 0) { /* a link or FIFO where the file goes: this try fails */
        int e = errno;
        kill(pid, SIGKILL);
        errno = e;
        mqproc__child_fail(p->report_fd, MQPROC__STAGE_JOBLOG);
      }
      kept = -1;
    } else if (kept >= 0) {
      kept += n;
    }
    if (p->max_log_bytes > 0 && written + n > p->max_log_bytes) {
      write_all(log_fd, buf, (size_t)(p->max_log_bytes - written));
      write_all(log_fd, LOG_FULL_NOTE, sizeof(LOG_FULL_NOTE) - 1);
      kill(pid, SIGKILL);
      tail_report(&tail, p->report_fd);
      die_of(SIGXFSZ);
    }
    write_all(log_fd, buf, (size_t)n);
    written += n;
  }
  if (failed(st))
    tail_report(&tail, p->report_fd);
  if (WIFEXITED(st))
    _exit(WEXITSTATUS(st));
  die_of(WTERMSIG(st));
}

void mqproc__child_main(void *plan) {
  const mqproc__child_plan_t *p = plan;
  struct rlimit no_core = {0, p->core.rlim_max};
  int keep[3] = {p->in_fd, p->log_fd, p->report_fd}, out[2], sfd;
  sigset_t chld;
  pid_t pid;
  if (setpgid(0, 0) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_SETPGID);
  /* No core file, no ptrace by other processes of the same user: we hold the server's
   * memory. */
  prctl(PR_SET_DUMPABLE, 0);
  setrlimit(RLIMIT_CORE, &no_core);
  g_server = p->server;
  for (int sig = 1; sig < NSIG; sig++)
    set_disposition(sig, synchronous(sig) || sig == SIGCHLD || sig == SIGCONT ? SIG_DFL : SIG_IGN);
  set_disposition(SIGUSR2, on_parent_death);
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_SETMASK, &chld, NULL); /* SIGCHLD comes through the signalfd */
  /* the signal follows the forking *thread*: the loop thread, which lives as long as the
   * server */
  if (prctl(PR_SET_PDEATHSIG, SIGUSR2) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_PRCTL);
  if (getppid() != p->server)
    _exit(127); /* the server died before prctl: nothing would tell us later */
  sort3(keep);
  close_others(keep, 3);
  if (pipe2(out, O_CLOEXEC) < 0 || (out[0] = lift(out[0])) < 0 || (out[1] = lift(out[1])) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_PIPE);
  if ((sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_SIGNALFD);
  /* vfork: the supervisor is single-threaded and processor_main only makes system calls
   * on its own stack frame until execve or _exit, so no copy of the server's page tables
   * is made a second time per try */
  if ((pid = vfork()) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_FORK);
  if (pid == 0)
    processor_main(p, out[1]);
  /* p->report_fd stays open: the output's tail goes there when the processor fails, and
   * a log file the supervisor cannot make is reported there (the server reads the pipe
   * only once this process has ended) */
  close(p->in_fd);
  close(out[1]);
  supervise(p, pid, out[0], sfd);
}
