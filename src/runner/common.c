/* What the runner backends share: the job log (and a try's output kept in memory until it
 * succeeds: the worker and command runners' memfd, what makes the file when it is needed),
 * the texts a try ends with, and starting a child process safely from the multi-threaded
 * server (int.h says how). Used by
 * proc.c (a command per try), worker.c (pre-started worker processes) and
 * thread.c (the job log, the function's result).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/joblog.h"
#include "runner/int.h"
#include "base/util.h"

extern char **environ;

#ifndef MFD_NOEXEC_SEAL /* Linux 6.3's: Debian 12's headers predate them */
#define MFD_NOEXEC_SEAL 0x0008U
#define MFD_EXEC 0x0010U
#endif

static const char *const STAGE_NAMES[] = {"execve", "setpgid", "prctl",    "dup2",   "setrlimit",
                                          "pipe2",  "fork",    "signalfd", "job log"};

/* ---- the job log -------------------------------------------------------------------- */

int mqproc__runner_log_head(const mqproc__run_spec_t *spec, char *head, size_t n) {
  int len = snprintf(head, n, "=== mqproc: job %s attempt %d try %d on %s ===\n", spec->msg->job_id,
                     spec->attempt, spec->try_no, spec->worker_id);
  return len < 0 ? 0 : (size_t)len < n ? len : (int)n - 1;
}

int mqproc__runner_open_log_at(const char *dir, const char *sub, const char *name, const char *head,
                               int head_len, char *err) {
  int fd;
  if ((fd = mqproc__joblog_open(dir, sub, name, err)) < 0)
    return -1;
  if (head_len > 0 && write(fd, head, (size_t)head_len) < 0) {
    /* a log header that cannot be written is not a reason to fail the try */
  }
  return fd;
}

int mqproc__runner_log_inline(const mqproc__run_spec_t *spec, int head_len) {
  return spec->log_inline_max > 0 && head_len <= spec->log_inline_max;
}

/* ---- a try's output kept in memory -------------------------------------------------- */

int mqproc__runner_log_clean(const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0, k;
  if (memchr(s, '\0', n) != NULL)
    return 0;
  while (i < n && (k = mqproc__utf8_seq_len(u + i, n - i)) != 0)
    i += k;
  return i == n;
}

int mqproc__runner_log_spill(const char *dir, const char *sub, const char *name, const char *text,
                             size_t len, char *err) {
  int fd = mqproc__joblog_open(dir, sub, name, err), rc = 0;
  size_t off = 0;
  if (fd < 0)
    return -1;
  while (off < len) {
    ssize_t n = write(fd, text + off, len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      rc = mqproc__err(err, -1, "cannot write job log %s/%s/%s: %s", dir, sub, name,
                       n < 0 ? strerror(errno) : "short write");
      break;
    }
    off += (size_t)n;
  }
  close(fd);
  return rc;
}

void mqproc__runner_log_lost(mqproc__run_result_t *res, const char *why) {
  char was[sizeof(res->error)];
  snprintf(was, sizeof(was), "%s", res->error);
  if (res->status == MQPROC_OK) {
    res->status = MQPROC_ERUNNER_FAILED;
    res->exit_code = -1;
    snprintf(res->error, sizeof(res->error), "%s", why);
  } else {
    snprintf(res->error, sizeof(res->error), "%.1400s; its output is lost: %.280s", was, why);
  }
  res->log_file = 0;
}

int mqproc__runner_log_memfd(const char *head, size_t len, char *err) {
  int fd = memfd_create("mqproc-log", MFD_CLOEXEC | MFD_NOEXEC_SEAL);
  if (fd < 0 && errno == EINVAL)
    fd = memfd_create("mqproc-log", MFD_CLOEXEC);
  if (fd < 0)
    return mqproc__err(err, -1, "memfd_create: %s", strerror(errno));
  if (len > 0 && write(fd, head, len) != (ssize_t)len) {
    mqproc__err(err, -1, "writing a job log's header to a memfd: %s", strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

/* The text memfd holds, NUL-terminated (*len bytes): one pread of at most max + 1 bytes
 * (its writer is gone or done: what it read is all there is), the whole file when it
 * holds more than max (its writer did not keep to it); NULL when it cannot be read. */
static char *memfd_text(int memfd, size_t max, size_t *len) {
  char *text = mqproc__malloc(max + 2);
  ssize_t n;
  if (text == NULL)
    return NULL;
  do
    n = pread(memfd, text, max + 1, 0);
  while (n < 0 && errno == EINTR);
  if (n >= 0 && (size_t)n <= max) {
    text[n] = '\0';
    *len = (size_t)n;
    return text;
  }
  free(text);
  if (n < 0 || mqproc__fd_slurp(memfd, &text, len) < 0)
    return NULL;
  return text;
}

void mqproc__runner_log_finish(mqproc__run_result_t *res, int memfd, size_t max, const char *dir,
                               const char *sub, const char *name) {
  char err[MQPROC_ERR_LEN], *text;
  size_t len = 0;
  if ((text = memfd_text(memfd, max, &len)) != NULL && len == 0) {
    res->log_file = 1; /* its writer moved it into the file, which has the rest */
  } else if (text != NULL && res->status == MQPROC_OK && len <= max &&
             mqproc__runner_log_clean(text, len)) {
    res->log_text = text;
    text = NULL;
  } else if (text == NULL) {
    snprintf(err, sizeof(err), "cannot read the try's output: %s", strerror(errno));
    mqproc__runner_log_lost(res, err);
  } else if (mqproc__runner_log_spill(dir, sub, name, text, len, err) < 0) {
    mqproc__runner_log_lost(res, err);
  } else {
    res->log_file = 1;
  }
  free(text);
  close(memfd);
}

/* ---- the environment of a child ---------------------------------------------------- */

/* Whether the variable kv ("NAME=value") of the server's environment reaches processors:
 * what any program needs to run in the server's locale, and what --pass-env names. */
int mqproc__env_passes(const char *kv, char *const *pass) {
  static const char *const always[] = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR"};
  static const char *const ours[] = {"MQPROC_JOB_ID", "MQPROC_ATTEMPT", "MQPROC_TRY",
                                     "MQPROC_LOG_FILE", "MQPROC_WORKSPACE_LOCK"};
  size_t n = strcspn(kv, "=");
  if (kv[n] != '=')
    return 0;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(ours); i++)
    if (strlen(ours[i]) == n && strncmp(kv, ours[i], n) == 0)
      return 0; /* set per try; an inherited value would be a lie */
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(always); i++)
    if (strlen(always[i]) == n && strncmp(kv, always[i], n) == 0)
      return 1;
  if (strncmp(kv, "LC_", 3) == 0)
    return 1;
  for (size_t i = 0; pass != NULL && pass[i] != NULL; i++) {
    size_t m = strlen(pass[i]);
    if (m > 0 && pass[i][m - 1] == '*' ? n >= m - 1 && strncmp(kv, pass[i], m - 1) == 0
                                       : m == n && strncmp(kv, pass[i], n) == 0)
      return 1;
  }
  return 0;
}

char **mqproc__runner_env(char *const *pass, size_t extra) {
  size_t n = 0, k = 0;
  char **env;
  while (environ[n] != NULL)
    n++;
  if ((env = mqproc__calloc(n + extra + 1, sizeof(char *))) == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if (mqproc__env_passes(environ[i], pass))
      env[k++] = environ[i];
  return env;
}

/* ---- how a try ended ---------------------------------------------------------------- */

void mqproc__runner_describe(int wstatus, mqproc__run_result_t *r) {
  r->exit_code = -1;
  r->term_signal = 0;
  if (WIFEXITED(wstatus)) {
    r->exit_code = WEXITSTATUS(wstatus);
    r->status = r->exit_code == 0 ? MQPROC_OK : MQPROC_ERUNNER_FAILED;
    if (r->exit_code != 0)
      snprintf(r->error, sizeof(r->error), "processor exited with status %d", r->exit_code);
  } else if (WIFSIGNALED(wstatus)) {
    r->term_signal = WTERMSIG(wstatus);
    r->status = MQPROC_ERUNNER_FAILED;
    snprintf(r->error, sizeof(r->error), "processor killed by signal %d (%s)", r->term_signal,
             strsignal(r->term_signal));
  } else {
    r->status = MQPROC_ERUNNER_FAILED;
    snprintf(r->error, sizeof(r->error), "processor ended with wait status %d", wstatus);
  }
}

void mqproc__runner_describe_timeout(int64_t limit_ms, mqproc__run_result_t *r) {
  long long ms = (long long)limit_ms;
  r->status = MQPROC_ERUNNER_TIMEOUT;
  r->exit_code = -1;
  r->term_signal = SIGKILL;
  if (ms % 1000 == 0)
    snprintf(r->error, sizeof(r->error),
             "processor exceeded its time limit of %lld s (process group killed)", ms / 1000);
  else
    snprintf(r->error, sizeof(r->error),
             "processor exceeded its time limit of %lld ms (process group killed)", ms);
}

void mqproc__runner_describe_crash(int wstatus, mqproc__run_result_t *r) {
  r->status = MQPROC_ERUNNER_FAILED;
  r->exit_code = -1; /* not the function's return value: it never returned */
  r->term_signal = 0;
  if (WIFSIGNALED(wstatus)) {
    r->term_signal = WTERMSIG(wstatus);
    snprintf(r->error, sizeof(r->error), "processor crashed: killed by signal %d (%s)",
             r->term_signal, strsignal(r->term_signal));
  } else if (WIFEXITED(wstatus)) {
    snprintf(r->error, sizeof(r->error), "processor crashed: exited with status %d",
             WEXITSTATUS(wstatus));
  } else {
    snprintf(r->error, sizeof(r->error), "processor crashed: wait status %d", wstatus);
  }
}

void mqproc__runner_function_result(int rc, const char *why, int64_t duration_ms,
                                    mqproc__run_result_t *r) {
  memset(r, 0, sizeof(*r));
  r->exit_code = rc;
  r->duration_ms = duration_ms;
  r->status = rc == 0 ? MQPROC_OK : MQPROC_ERUNNER_FAILED;
  if (rc == 0)
    return;
  if (why != NULL && why[0] != '\0')
    snprintf(r->error, sizeof(r->error), "%s", why);
  else
    snprintf(r->error, sizeof(r->error), "processing function returned %d", rc);
}

/* ---- the end of a failed processor's output ------------------------------------------ */

#define ELLIPSIS "\xe2\x80\xa6"                 /* … */
#define TAIL_SEP " | "                          /* between lines */
#define TAIL_LEAD " \xe2\x80\x94 last output: " /* " — last output: " */

/* Past an escape sequence at s[i] (ESC): a CSI (ESC [ params final) or ESC and one byte. */
static size_t skip_escape(const unsigned char *s, size_t n, size_t i) {
  if (i + 1 >= n || s[i + 1] != '[')
    return i + 2 < n ? i + 2 : n;
  for (i += 2; i < n; i++)
    if (s[i] >= 0x40 && s[i] <= 0x7e)
      return i + 1;
  return n;
}

/* s[0..n) as showable text into clean (room for n): valid UTF-8 ('?' for a malformed
 * byte), '\n' for a line break (\n or \r), a space for a tab, no other control
 * character, C1 control or escape sequence. Returns its length. */
static size_t tail_clean(const unsigned char *s, size_t n, char *clean) {
  size_t i = 0, k = 0, len;
  while (i < n) {
    unsigned char c = s[i];
    if (c == 0x1b) {
      i = skip_escape(s, n, i);
      continue;
    }
    if (c < 0x80) {
      if (c == '\n' || c == '\r' || c == '\t' || (c >= 0x20 && c != 0x7f))
        clean[k++] = c == '\r' ? '\n' : c == '\t' ? ' ' : (char)c;
      i++;
      continue;
    }
    len = mqproc__utf8_seq_len(s + i, n - i);
    if (len == 0) {
      clean[k++] = '?';
      len = 1;
    } else if (!(len == 2 && c == 0xc2 && s[i + 1] < 0xa0)) { /* not a C1 control */
      memcpy(clean + k, s + i, len);
      k += len;
    }
    i += len;
  }
  return k;
}

/* The spans of the last MQPROC__TAIL_LINES non-empty lines of clean[0..n), trimmed, in
 * order; returns their count. */
static size_t tail_lines(const char *clean, size_t n, size_t at[], size_t len[]) {
  size_t count = 0, first = 0, i = 0;
  while (i < n) {
    size_t b = i, e = i;
    while (e < n && clean[e] != '\n')
      e++;
    i = e + 1;
    while (b < e && clean[b] == ' ')
      b++;
    while (e > b && clean[e - 1] == ' ')
      e--;
    if (e == b)
      continue;
    if (count == MQPROC__TAIL_LINES) /* a ring: the oldest line gives way */
      first = (first + 1) % MQPROC__TAIL_LINES;
    else
      count++;
    at[(first + count - 1) % MQPROC__TAIL_LINES] = b;
    len[(first + count - 1) % MQPROC__TAIL_LINES] = e - b;
  }
  for (size_t r = 0; r < first; r++) { /* rotate into order */
    size_t a0 = at[0], l0 = len[0];
    memmove(at, at + 1, (MQPROC__TAIL_LINES - 1) * sizeof(at[0]));
    memmove(len, len + 1, (MQPROC__TAIL_LINES - 1) * sizeof(len[0]));
    at[MQPROC__TAIL_LINES - 1] = a0;
    len[MQPROC__TAIL_LINES - 1] = l0;
  }
  return count;
}

size_t mqproc__runner_tail_text(const char *raw, size_t n, int cut, char *out, size_t size) {
  char clean[MQPROC__TAIL_BYTES], joined[MQPROC__TAIL_BYTES + MQPROC__TAIL_LINES * 3 + 4];
  size_t at[MQPROC__TAIL_LINES], len[MQPROC__TAIL_LINES], lines, k, j = 0, max;
  const char *nl;
  int partial = 0;
  if (n > MQPROC__TAIL_BYTES) { /* only the end counts */
    raw += n - MQPROC__TAIL_BYTES;
    n = MQPROC__TAIL_BYTES;
    cut = 1;
  }
  if (cut && (nl = memchr(raw, '\n', n)) != NULL) { /* its first line began earlier */
    n -= (size_t)(nl + 1 - raw);
    raw = nl + 1;
  } else if (cut) { /* one long line: its end, from a character's start */
    while (n > 0 && ((unsigned char)*raw & 0xc0) == 0x80)
      raw++, n--;
    partial = 1;
  }
  k = tail_clean((const unsigned char *)raw, n, clean);
  lines = tail_lines(clean, k, at, len);
  for (size_t i = 0; i < lines; i++) {
    if (i > 0)
      j += (size_t)sprintf(joined + j, TAIL_SEP);
    memcpy(joined + j, clean + at[i], len[i]);
    j += len[i];
  }
  max = (size < MQPROC__TAIL_SHOWN + 1 ? size - 1 : MQPROC__TAIL_SHOWN) - (sizeof(ELLIPSIS) - 1);
  k = 0;
  if (j > max || (partial && j > 0)) { /* the start is cut off: "…" and the rest */
    size_t from = j > max ? j - max : 0;
    while (from < j && ((unsigned char)joined[from] & 0xc0) == 0x80)
      from++;
    k = (size_t)sprintf(out, ELLIPSIS);
    memcpy(out + k, joined + from, j - from);
    k += j - from;
  } else {
    memcpy(out, joined, j);
    k = j;
  }
  out[k] = '\0';
  return k;
}

void mqproc__runner_add_tail(mqproc__run_result_t *r, const char *raw, size_t n, int cut) {
  char text[MQPROC__TAIL_SHOWN + 1];
  size_t at = strlen(r->error);
  if (mqproc__runner_tail_text(raw, n, cut, text, sizeof(text)) == 0)
    return;
  snprintf(r->error + at, sizeof(r->error) - at, "%s%s", TAIL_LEAD, text);
}

/* ---- starting a child: in the parent ------------------------------------------------ */

void mqproc__child_report_text(const mqproc__child_report_t *rep, char *out, size_t n) {
  if (rep->stage == MQPROC__STAGE_EXEC || rep->stage < 0 ||
      (size_t)rep->stage >= MQPROC__ARRAY_LEN(STAGE_NAMES))
    snprintf(out, n, "%s", strerror(rep->err));
  else
    snprintf(out, n, "%s: %s", STAGE_NAMES[rep->stage], strerror(rep->err));
}

int mqproc__runner_lift_fd(int fd, int min, char *err) {
  int hi = mqproc__fd_lift(fd, min);
  if (hi < 0)
    return mqproc__err(err, -1, "fcntl(F_DUPFD): %s", strerror(errno));
  return hi;
}

/* A sealed memfd of data. exec_flag says whether it may be exec'd (MFD_EXEC or
 * MFD_NOEXEC_SEAL): since Linux 6.3 a memfd that says neither draws a warning, and
 * vm.memfd_noexec=2 refuses MFD_EXEC (6.3-6.5 also refused a memfd that said neither);
 * older kernels refuse the flags (EINVAL) and get none. */
static int memfd_of(const char *name, const void *data, size_t len, unsigned exec_flag, char *err) {
  int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | exec_flag);
  size_t off = 0;
  if (fd < 0 && errno == EINVAL)
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return mqproc__err(err, -1, "memfd_create: %s", strerror(errno));
  while (off < len) {
    ssize_t n = write(fd, (const char *)data + off, len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      mqproc__err(err, -1, "writing the job to a memfd: %s", strerror(errno));
      close(fd);
      return -1;
    }
    off += (size_t)n;
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
    mqproc__err(err, -1, "sealing a memfd: %s", strerror(errno));
    close(fd);
    return -1;
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

int mqproc__runner_memfd(const char *name, const void *data, size_t len, char *err) {
  return memfd_of(name, data, len, MFD_NOEXEC_SEAL, err);
}

int mqproc__runner_exec_memfd(const char *name, const void *data, size_t len, char *err) {
  return memfd_of(name, data, len, MFD_EXEC, err);
}

int mqproc__runner_read_fd(int fd, char **out, size_t *len, char *err) {
  if (mqproc__fd_slurp(fd, out, len) < 0)
    return mqproc__err(err, errno == ENOMEM ? MQPROC_ENOMEM : MQPROC_ESYS,
                       "cannot read the job: %s", strerror(errno));
  return MQPROC_OK;
}

int mqproc__runner_max_fd(void) {
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < INT_MAX)
    return (int)nofile.rlim_cur;
  return 65536;
}

/* 1 when the child reported a failure; 0 on EOF, which execve's CLOEXEC caused (or the
 * child exited early, which its exit status will tell). */
static int read_report(int fd, mqproc__child_report_t *rep) {
  ssize_t n;
  do
    n = read(fd, rep, sizeof(*rep));
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof(*rep);
}

int mqproc__runner_fork_exec(mqproc__child_main_fn child_main, void *plan, int *report_fd,
                             pid_t *pid, mqproc__child_report_t *rep) {
  int pfd[2], failed;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_EXEC, 0};
  if (pipe2(pfd, O_CLOEXEC) < 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    return -1;
  }
  if ((pfd[1] = mqproc__runner_lift_fd(pfd[1], MQPROC__CHILD_MIN_FD, NULL)) < 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    close(pfd[0]);
    return -1;
  }
  *report_fd = pfd[1];
  if ((*pid = fork()) == 0)
    child_main(plan);
  if (*pid < 0)
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, errno};
  close(pfd[1]);
  failed = *pid < 0 || read_report(pfd[0], rep);
  if (*pid > 0 && failed)
    waitpid(*pid, NULL, 0); /* it has _exit()ed: not handed to the loop, reaped here */
  close(pfd[0]);
  return failed ? -1 : 0;
}

/* ---- starting a child: in the child, async-signal-safe calls only ------------------- */

void mqproc__child_reset_signals(void (*on_term)(int)) {
  struct sigaction sa;
  sigset_t none;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++)
    sigaction(sig, &sa, NULL); /* SIGKILL, SIGSTOP and libc's own refuse: harmless */
  if (on_term != NULL) {
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
  }
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
}

void mqproc__child_cloexec_from(int first, int max_fd) {
  if (close_range((unsigned)first, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
    return;
  for (int fd = first; fd < max_fd; fd++) /* kernels before 5.11 */
    fcntl(fd, F_SETFD, FD_CLOEXEC);
}
