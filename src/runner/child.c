/* One --exec try as the spawn helper runs it (child.h): the processor and its output.
 *
 * The processor is the helper's own child, started with vfork (the helper is small and
 * single-threaded: nothing is copied, and the helper waits only until execve). Between
 * vfork and execve the child makes system calls only, on its own stack frame, and writes
 * a failed step into the helper's memory (shared until execve): the helper knows at once
 * whether the try runs, without a report pipe. The processor:
 *   - leads a new process group, so a time limit, a full log or the end of the try reaches
 *     all it started, and its own `kill 0` reaches none of the helper or the server;
 *   - dies with the helper (PR_SET_PDEATHSIG; the helper dies with the server after
 *     killing every try's group);
 *   - gets default signal dispositions, an empty mask, the server's core limit back (the
 *     helper writes no core: it holds the processors' environments), its stdin the job,
 *     its stdout and stderr one pipe, and no other fd.
 *
 * The helper copies that pipe into the job's log and counts the bytes: past
 * --max-log-size the group is killed and the try ends as killed by SIGXFSZ (the limit
 * limits the log, not the files the processor writes, as RLIMIT_FSIZE would); a job's
 * first try copies into a memfd the server reads when the try ended, until the output
 * would outgrow --log-inline-max: then the helper makes the job's log file (following no
 * link, never blocking, a regular file of its user with one link: what the server would
 * make), moves the memfd's bytes there and goes on there; a file it cannot make fails the
 * try (the group is killed, the report says why). It keeps the last MQPROC__TAIL_BYTES of
 * the output for the error of a failed try.
 */
#include "runner/child.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DRAIN_READS 64 /* 1 MB in the helper's 16 KB reads: the most a pipe holds */
#define LOG_FULL_NOTE "\nmqproc: the try wrote more than --max-log-size: processor killed\n"

/* ---- the processor, between vfork and execve ---------------------------------------- */

/* A step failed: said in the helper's memory (vfork shares it), then the child ends. */
__attribute__((noreturn)) static void fail(volatile mqproc__child_report_t *step, int stage) {
  step->err = errno;
  step->stage = stage;
  _exit(127);
}

__attribute__((noreturn)) static void processor_main(const mqproc__child_plan_t *p, int out_w,
                                                     pid_t helper,
                                                     volatile mqproc__child_report_t *step) {
  sigset_t none;
  /* first: from here on a kill of the group reaches the processor */
  if (setpgid(0, 0) < 0)
    fail(step, MQPROC__STAGE_SETPGID);
  /* the helper leaves every disposition at its default and blocks the signals instead
   * (spawn/helper.c), so one call gives the processor default signals; a new process has
   * none pending */
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    fail(step, MQPROC__STAGE_PRCTL);
  if (getppid() != helper)
    _exit(127); /* the helper died before the prctl: nothing would kill us with it */
  setrlimit(RLIMIT_CORE, &p->core);
  if (dup2(p->in_fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0)
    fail(step, MQPROC__STAGE_DUP2);
  /* no fd of the helper's reaches the processor: all are CLOEXEC already; this is the
   * guarantee */
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(p->path, p->argv, p->envp);
  fail(step, MQPROC__STAGE_EXEC);
}

/* Moves fd to MQPROC__CHILD_MIN_FD or above (the child's dup2s onto 0-2 must not clobber
 * a source), keeping it CLOEXEC. */
static int lift(int fd) {
  return fd < 0 ? fd : mqproc__fd_lift(fd, MQPROC__CHILD_MIN_FD);
}

void mqproc__child_init(mqproc__child_t *c) {
  c->plan.in_fd = c->plan.log_fd = -1;
  c->ep = -1;
  c->pid = 0;
  c->out_fd = c->log_fd = -1;
  c->kept = -1;
}

int mqproc__child_start(mqproc__child_t *c, pid_t helper) {
  volatile mqproc__child_report_t step = {-1, 0};
  int out[2];
  pid_t pid;
  c->log_fd = c->plan.log_fd;
  if (c->plan.log_inline_max > 0) {
    struct stat held;
    c->kept = fstat(c->log_fd, &held) == 0 ? (long long)held.st_size : 0;
  }
  if (pipe2(out, O_CLOEXEC) < 0 || (out[0] = lift(out[0])) < 0 || (out[1] = lift(out[1])) < 0) {
    c->step = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    c->step_failed = 1;
    return -1;
  }
  if ((pid = vfork()) == 0)
    processor_main(&c->plan, out[1], helper, &step);
  if (pid < 0)
    step = (mqproc__child_report_t){MQPROC__STAGE_FORK, errno};
  close(out[1]);
  close(c->plan.in_fd); /* the processor has it (or never will) */
  c->plan.in_fd = -1;
  if (step.stage >= 0) { /* it never ran: its exit status is only the 127 of fail() */
    int st;
    if (pid > 0)
      while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    close(out[0]);
    c->step = (mqproc__child_report_t){step.stage, step.err};
    c->step_failed = 1;
    return -1;
  }
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  c->pid = pid;
  c->out_fd = out[0];
  return 0;
}

/* ---- its output ----------------------------------------------------------------------- */

/* The pipe is done with: out of the helper's epoll set first. Closing the fd alone does
 * not take it out while another process holds the same pipe: a processor that a vfork
 * let the helper run on beside does, from its execve until the kernel has closed its
 * CLOEXEC fds; the set would go on reporting the pipe as a try's that is freed by then. */
static void close_out(mqproc__child_t *c) {
  if (c->out_fd < 0)
    return;
  if (c->ep >= 0)
    epoll_ctl(c->ep, EPOLL_CTL_DEL, c->out_fd, NULL);
  close(c->out_fd);
  c->out_fd = -1;
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

static void tail_add(mqproc__child_tail_t *t, const char *buf, size_t n) {
  if (n > MQPROC__TAIL_BYTES) {
    t->seen += n - MQPROC__TAIL_BYTES;
    buf += n - MQPROC__TAIL_BYTES;
    n = MQPROC__TAIL_BYTES;
  }
  for (size_t i = 0; i < n; i++)
    t->ring[(t->seen + i) % MQPROC__TAIL_BYTES] = buf[i];
  t->seen += n;
}

/* The output outgrew memory: the job's log file is made (what the server's joblog.c
 * would make, with libc alone: spawn/sys.c), the memfd's bytes moved there and the memfd
 * emptied (the server reads an empty one as "in the file"); the file replaces c->log_fd.
 * 0, or -1 with errno. */
static int spill(mqproc__child_t *c) {
  const mqproc__child_plan_t *p = &c->plan;
  int sfd = mqproc__joblog_sub_open(p->log_dir, p->log_sub, geteuid()), fd, e;
  if (sfd < 0)
    return -1;
  fd = mqproc__joblog_file_open(sfd, p->log_name, geteuid());
  e = errno;
  close(sfd);
  errno = e;
  if (fd < 0)
    return -1;
  if (mqproc__fd_copy(c->log_fd, fd) == 0 && ftruncate(c->log_fd, 0) == 0) {
    /* moved; a failed copy leaves the bytes where the server finds them too */
  }
  if (c->log_fd != p->log_fd)
    close(c->log_fd);
  c->log_fd = fd;
  return 0;
}

/* The try is cut off (its log is full, or has no file to go to): its group is killed and
 * the rest of its output thrown away. */
static void cut_off(mqproc__child_t *c) {
  mqproc__child_kill(c, SIGKILL);
  close_out(c);
}

/* n bytes of output into the log. */
static void copy(mqproc__child_t *c, const char *buf, size_t n) {
  const mqproc__child_plan_t *p = &c->plan;
  tail_add(&c->tail, buf, n);
  if (c->kept >= 0 && c->kept + (long long)n > p->log_inline_max) {
    if (spill(c) < 0) { /* a link or FIFO where the file goes: this try fails */
      c->step = (mqproc__child_report_t){MQPROC__STAGE_JOBLOG, errno};
      c->step_failed = 1;
      cut_off(c);
      return;
    }
    c->kept = -1;
  } else if (c->kept >= 0) {
    c->kept += (long long)n;
  }
  if (p->max_log_bytes > 0 && c->copied + (long long)n > p->max_log_bytes) {
    write_all(c->log_fd, buf, (size_t)(p->max_log_bytes - c->copied));
    write_all(c->log_fd, LOG_FULL_NOTE, sizeof(LOG_FULL_NOTE) - 1);
    c->copied = p->max_log_bytes;
    c->log_full = 1;
    cut_off(c);
    return;
  }
  write_all(c->log_fd, buf, n);
  c->copied += (long long)n;
}

int mqproc__child_read(mqproc__child_t *c, char *buf, size_t size) {
  ssize_t n;
  if (c->out_fd < 0)
    return 0;
  do
    n = read(c->out_fd, buf, size);
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN)
    return -1;
  if (n <= 0) { /* EOF (or an error no later read would cure) */
    close_out(c);
    return 0;
  }
  copy(c, buf, (size_t)n);
  return 1;
}

void mqproc__child_reaped(mqproc__child_t *c, int wstatus, char *buf, size_t size) {
  c->reaped = 1;
  c->wstatus = wstatus;
  /* what the processor wrote is all in the pipe by now (at most the pipe's size); a child
   * of its that escaped the group may hold the pipe open and write on: what is there is
   * read, nothing waited for, and not more than DRAIN_READS reads */
  for (int i = 0; i < DRAIN_READS && mqproc__child_read(c, buf, size) > 0; i++)
    ;
  close_out(c);
  if (c->log_full)
    c->wstatus = SIGXFSZ; /* the try ends as killed by SIGXFSZ, as RLIMIT_FSIZE would */
}

void mqproc__child_kill(mqproc__child_t *c, int sig) {
  if (c->pid <= 0 || c->reaped)
    return;
  kill(-c->pid, sig); /* the group's id stays taken while the processor is not reaped */
  kill(c->pid, sig);  /* had it left its group */
}

size_t mqproc__child_tail(const mqproc__child_t *c, char *out, int *cut) {
  const mqproc__child_tail_t *t = &c->tail;
  size_t n = t->seen < MQPROC__TAIL_BYTES ? (size_t)t->seen : MQPROC__TAIL_BYTES;
  size_t from = t->seen < MQPROC__TAIL_BYTES ? 0 : (size_t)(t->seen % MQPROC__TAIL_BYTES);
  *cut = t->seen > MQPROC__TAIL_BYTES;
  if (c->step_failed || c->stopped || (WIFEXITED(c->wstatus) && WEXITSTATUS(c->wstatus) == 0))
    return 0; /* it never ran, its log failed (the report says so), it was stopped, or it
                 succeeded */
  for (size_t i = 0; i < n; i++)
    out[i] = t->ring[(from + i) % MQPROC__TAIL_BYTES];
  return n;
}

void mqproc__child_free(mqproc__child_t *c) {
  if (c == NULL)
    return;
  close_out(c);
  if (c->log_fd >= 0 && c->log_fd != c->plan.log_fd)
    close(c->log_fd);
  if (c->plan.log_fd >= 0)
    close(c->plan.log_fd);
  if (c->plan.in_fd >= 0)
    close(c->plan.in_fd);
  free(c);
}
