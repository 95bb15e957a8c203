/* Logging: one preformatted line per event on stderr, with secrets masked; a loop thread's
 * lines are written once per loop turn (see "Batching" below and log.h). */
#include "base/log.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"

/* A line never exceeds PIPE_BUF, so one write(2) to a pipe is atomic. */
#define LOG_LINE_MAX 4096
#define LOG_TAG_MAX 64
#define ELLIPSIS "\xe2\x80\xa6" /* U+2026, "…" */
#define MASK "***"

static atomic_int log_level = MQPROC__LOG_INFO;
static atomic_int log_json = 0;
static __thread mqproc__log_job_t log_job; /* the job this thread works for now */
static pthread_mutex_t log_tag_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_tag[LOG_TAG_MAX] = "mqproc";

/* ---- Bounded output ------------------------------------------------------------------------ */

/* Appends into out[0..cap) and remembers whether anything did not fit. */
typedef struct sink {
  char *out;
  size_t cap; /* usable bytes, the NUL excluded */
  size_t len;
  bool truncated;
} sink_t;

static void put(sink_t *s, const char *p, size_t n) {
  size_t room = s->cap - s->len;
  if (n > room) {
    n = room;
    s->truncated = true;
  }
  memcpy(s->out + s->len, p, n);
  s->len += n;
}

static void puts_(sink_t *s, const char *p) {
  put(s, p, strlen(p));
}

/* ---- Masking ------------------------------------------------------------------------------- */

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool is_key_char(char c) {
  return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* At p (just after "://"): copies the authority with the userinfo password masked.
 * The authority ends at the first '/' (or blank); userinfo ends at its LAST '@', so an
 * unescaped '@' inside the password is masked too. Returns the bytes consumed. */
static size_t mask_authority(const char *p, sink_t *s) {
  size_t end = 0;
  const char *at = NULL;
  const char *colon;
  while (p[end] != '\0' && p[end] != '/' && !is_space(p[end])) {
    if (p[end] == '@')
      at = p + end;
    end++;
  }
  if (at == NULL)
    return 0;
  colon = memchr(p, ':', (size_t)(at - p));
  if (colon == NULL || colon + 1 == at)
    return 0; /* no password (or an empty one): nothing to hide */
  put(s, p, (size_t)(colon + 1 - p));
  puts_(s, MASK);
  put(s, at, (size_t)(p + end - at));
  return end;
}

/* Length of a libpq conninfo value at p: 'quoted' (with \' and \\) or up to a blank.
 * In a URL query (after '?' or '&') an unquoted value also ends at '&' or '#'. */
static size_t value_len(const char *p, bool in_query) {
  size_t n = 0;
  if (*p == '\'') {
    for (n = 1; p[n] != '\0' && p[n] != '\''; n++)
      if (p[n] == '\\' && p[n + 1] != '\0')
        n++;
    if (p[n] == '\'')
      n++;
    /* bytes glued to the closing quote are masked with it (found by fuzz_url: left out,
     * a second pass read them as the value; when in doubt, hide more) */
  }
  while (p[n] != '\0' && !is_space(p[n]) && !(in_query && (p[n] == '&' || p[n] == '#')))
    n++;
  return n;
}

/* At p (a case-insensitive "password", possibly the tail of a longer key such as
 * "sslpassword"): when "= value" follows, copies "password =" and a mask instead of the
 * value and returns the bytes consumed; otherwise returns 0. */
static size_t mask_keyword(const char *start, const char *p, sink_t *s) {
  const char *key = p;
  const char *q = p + 8;
  size_t vlen;
  while (key > start && is_key_char(key[-1]))
    key--;
  while (*q == ' ' || *q == '\t')
    q++;
  if (*q++ != '=')
    return 0;
  while (*q == ' ' || *q == '\t')
    q++;
  vlen = value_len(q, key > start && (key[-1] == '?' || key[-1] == '&'));
  if (vlen == 0)
    return 0;
  put(s, p, (size_t)(q - p));
  puts_(s, MASK);
  return (size_t)(q + vlen - p);
}

/* At p ("://"): copies it and the authority after it, with the password masked. */
static size_t mask_url(const char *p, sink_t *s) {
  put(s, p, 3);
  return 3 + mask_authority(p + 3, s);
}

/* Copies in to s, masking every URL userinfo password and every password=value. */
static void mask_into(const char *in, sink_t *s) {
  const char *p = in;
  while (*p != '\0' && !s->truncated) {
    size_t used = 0;
    if (strncasecmp(p, "password", 8) == 0)
      used = mask_keyword(in, p, s);
    else if (strncmp(p, "://", 3) == 0)
      used = mask_url(p, s);
    if (used == 0) {
      put(s, p, 1);
      used = 1;
    }
    p += used;
  }
}

/* Masks in into out (n >= 1 bytes), pass after pass until one changes nothing (at most 4):
 * the rules read text that may be both a URL and key=value pairs, and a mask can change how
 * the next pass reads the rest (fuzz_url found such inputs), so the result is a fixed
 * point: masking it again changes nothing. A cut line is masked again too (what the cut
 * left is read as it will be shown). Returns whether out was cut. */
static bool mask_stable(const char *in, char *out, size_t n) {
  sink_t s = {.out = out, .cap = n - 1};
  bool cut;
  char *prev;
  mask_into(in, &s);
  out[s.len] = '\0';
  cut = s.truncated;
  if ((prev = malloc(n)) == NULL)
    return cut;
  for (int pass = 1; pass < 4; pass++) {
    memcpy(prev, out, s.len + 1);
    s = (sink_t){.out = out, .cap = n - 1};
    mask_into(prev, &s);
    out[s.len] = '\0';
    cut |= s.truncated;
    if (strcmp(prev, out) == 0)
      break;
  }
  free(prev);
  return cut;
}

void mqproc__mask_secret(const char *url, char *out, size_t n) {
  if (n == 0)
    return;
  mask_stable(url != NULL ? url : "", out, n);
}

/* ---- Levels and tag ------------------------------------------------------------------------ */

static const char *const level_names[] = {"debug", "info", "warn", "error"};
static const char *const level_labels[] = {"DEBUG", "INFO ", "WARN ", "ERROR"};

void mqproc__log_set_level(mqproc__log_level_t level) {
  if (level >= MQPROC__LOG_DEBUG && level <= MQPROC__LOG_ERROR)
    atomic_store(&log_level, (int)level);
}

void mqproc__log_set_tag(const char *tag) {
  pthread_mutex_lock(&log_tag_lock);
  snprintf(log_tag, sizeof(log_tag), "%s", tag == NULL ? "" : tag);
  pthread_mutex_unlock(&log_tag_lock);
}

void mqproc__log_set_json(int json) {
  atomic_store(&log_json, json != 0);
}

mqproc__log_job_t mqproc__log_enter_job(char *const *job_id, const char *processor,
                                        const int *attempt, const int *try_no) {
  mqproc__log_job_t prev = log_job;
  log_job = (mqproc__log_job_t){job_id, processor, attempt, try_no};
  return prev;
}

void mqproc__log_leave_job(mqproc__log_job_t prev) {
  log_job = prev;
}

/* ---- Lines --------------------------------------------------------------------------------- */

static void tag_copy(char tag[LOG_TAG_MAX]) {
  pthread_mutex_lock(&log_tag_lock);
  memcpy(tag, log_tag, LOG_TAG_MAX);
  pthread_mutex_unlock(&log_tag_lock);
}

/* "2026-11-22T10:00:00.123Z INFO  [tag] " */
static void put_prefix(sink_t *s, mqproc__log_level_t level) {
  char buf[128];
  char tag[LOG_TAG_MAX];
  int64_t ms = mqproc__wall_ms();
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  size_t n;
  gmtime_r(&secs, &tm);
  n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  tag_copy(tag);
  snprintf(buf + n, sizeof(buf) - n, ".%03dZ %s [%s] ", (int)(ms % 1000), level_labels[level], tag);
  puts_(s, buf);
}

/* Copies msg, writing newlines and carriage returns as \n and \r to keep one line. */
static void put_escaped(sink_t *s, const char *msg) {
  for (const char *p = msg; *p != '\0' && !s->truncated; p++) {
    if (*p == '\n')
      put(s, "\\n", 2);
    else if (*p == '\r')
      put(s, "\\r", 2);
    else
      put(s, p, 1);
  }
}

/* Ends a line that did not fit (or whose message was cut) with "…", cutting it back to a
 * UTF-8 character boundary when needed. */
static void end_truncated(sink_t *s) {
  size_t limit = s->cap - (sizeof(ELLIPSIS) - 1);
  if (s->len > limit) {
    s->len = limit;
    while (s->len > 0 && ((unsigned char)s->out[s->len] & 0xC0) == 0x80)
      s->len--;
  }
  s->truncated = false;
  puts_(s, ELLIPSIS);
}

/* Puts all n bytes or none (then marks s truncated): an escape or a character is never
 * cut in half. */
static void put_whole(sink_t *s, const char *p, size_t n) {
  if (n > s->cap - s->len)
    s->truncated = true;
  else
    put(s, p, n);
}

/* Copies text[0..n) as the inside of a JSON string: quotes, backslashes and control
 * characters escaped, malformed UTF-8 bytes as U+FFFD; stops at the first unit that does
 * not fit. */
static void put_json_text(sink_t *s, const char *text, size_t n) {
  const unsigned char *p = (const unsigned char *)text;
  for (size_t i = 0; i < n && !s->truncated;) {
    size_t k = p[i] < 0x80 ? 1 : mqproc__utf8_seq_len(p + i, n - i);
    char esc[8];
    if (k == 0) {
      put_whole(s, "\\ufffd", 6);
      k = 1;
    } else if (p[i] == '"' || p[i] == '\\') {
      esc[0] = '\\';
      esc[1] = (char)p[i];
      put_whole(s, esc, 2);
    } else if (p[i] < 0x20) {
      snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
      put_whole(s, esc, 6);
    } else {
      put_whole(s, text + i, k);
    }
    i += k;
  }
}

static void put_json_field(sink_t *s, const char *key, const char *value) {
  puts_(s, ",\"");
  puts_(s, key);
  puts_(s, "\":\"");
  put_json_text(s, value, strlen(value));
  puts_(s, "\"");
}

/* A "job ID: ..." line's ID (the text between), or NULL. */
static const char *job_of_line(const char *msg, size_t *len) {
  const char *end;
  if (strncmp(msg, "job ", 4) != 0 || (end = strstr(msg + 4, ": ")) == NULL || end == msg + 4 ||
      memchr(msg + 4, ' ', (size_t)(end - msg - 4)) != NULL)
    return NULL;
  *len = (size_t)(end - msg - 4);
  return msg + 4;
}

/* {"ts":…,"level":…,"worker_id":…,"msg":…[,"job_id":…,"attempt":…,"try":…,"processor":…]}
 * The message is cut (with "…") so that the line stays under LOG_LINE_MAX. */
static size_t format_json(char *line, size_t cap, mqproc__log_level_t level, const char *msg,
                          bool cut) {
  sink_t s = {.out = line, .cap = cap};
  char ts[64], tag[LOG_TAG_MAX], num[32], tail[1024];
  sink_t t = {.out = tail, .cap = sizeof(tail) - 1};
  int64_t ms = mqproc__wall_ms();
  time_t secs = (time_t)(ms / 1000);
  struct tm tm;
  const char *jid = log_job.job_id != NULL ? *log_job.job_id : NULL;
  int in_ctx = jid != NULL;
  size_t jlen = jid != NULL ? strlen(jid) : 0, n;
  gmtime_r(&secs, &tm);
  n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(ts + n, sizeof(ts) - n, ".%03dZ", (int)(ms % 1000));
  tag_copy(tag);
  if (jid == NULL)
    jid = job_of_line(msg, &jlen);
  /* the job's fields first, into their own bounded buffer: the message gets what is left */
  if (jid != NULL) {
    puts_(&t, ",\"job_id\":\"");
    put_json_text(&t, jid, jlen < 300 ? jlen : 300);
    puts_(&t, "\"");
    if (in_ctx && *log_job.attempt > 0) {
      snprintf(num, sizeof(num), ",\"attempt\":%d", *log_job.attempt);
      puts_(&t, num);
    }
    if (in_ctx && *log_job.try_no > 0) {
      snprintf(num, sizeof(num), ",\"try\":%d", *log_job.try_no);
      puts_(&t, num);
    }
    if (in_ctx && log_job.processor != NULL)
      put_json_field(&t, "processor", log_job.processor);
  }
  puts_(&s, "{\"ts\":\"");
  puts_(&s, ts);
  puts_(&s, "\"");
  put_json_field(&s, "level", level_names[level]);
  put_json_field(&s, "worker_id", tag);
  puts_(&s, ",\"msg\":\"");
  s.cap = cap - t.len - 8 - sizeof(ELLIPSIS); /* room for the tail, quote, brace, "…" */
  put_json_text(&s, msg, strlen(msg));
  s.cap = cap;
  if (s.truncated || cut) { /* cut here, or already when it was masked */
    s.truncated = false;
    puts_(&s, ELLIPSIS);
  }
  puts_(&s, "\"");
  put(&s, tail, t.len);
  puts_(&s, "}");
  return s.len;
}

/* ---- Batching ------------------------------------------------------------------------------ */

/* Between mqproc__log_batch_begin() and _end(), the lines of the thread that began (the
 * server's loop) wait in one buffer, and mqproc__log_flush() (the loop's prepare hook,
 * before it sleeps) writes them together: one write(2) per loop turn instead of one per
 * line. Nothing waits longer than that turn, and nothing is lost or reordered:
 *   - a warning or an error, and any line of another thread (a pool thread, the broker's
 *     watchdog), is written at once, after what waits (under the same lock);
 *   - the buffer is written when full, at exit (atexit), and by a handler of the fatal
 *     signals (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) before the handler that was there
 *     before runs (a crash keeps the last lines of its turn);
 *   - a child made by fork() starts without the parent's waiting lines (they are the
 *     parent's to write) and writes its own at once.
 * When stderr is a pipe, one write carries at most PIPE_BUF bytes of whole lines, so a
 * line stays atomic next to other writers of the same pipe (workers, a supervisor). */
#define BATCH_CAP 65536

static pthread_mutex_t batch_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int batch_on;       /* a thread batches its lines */
static __thread int batch_here;   /* this thread is the one */
static char batch_buf[BATCH_CAP]; /* whole lines, under batch_lock */
static atomic_size_t batch_len;   /* bytes of whole lines in batch_buf (the crash handler
                                     reads it without the lock) */
static int batch_pipe;            /* stderr is a pipe: writes of <= PIPE_BUF */
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static struct sigaction fatal_before[MQPROC__ARRAY_LEN(fatal_signals)];

static void write_all(const char *p, size_t len) {
  while (len > 0) {
    ssize_t rc = write(STDERR_FILENO, p, len);
    if (rc < 0 && errno == EINTR)
      continue;
    if (rc <= 0)
      return; /* stderr is gone or full and non-blocking: nothing better to do */
    p += rc;
    len -= (size_t)rc;
  }
}

/* Writes buf[0..len) (whole lines): at once, or to a pipe in runs of whole lines of at most
 * PIPE_BUF bytes. */
static void write_lines(const char *buf, size_t len) {
  size_t start = 0;
  if (!batch_pipe) {
    write_all(buf, len);
    return;
  }
  while (start < len) {
    size_t end = start, next;
    for (;;) { /* whole lines while they fit */
      const char *nl = memchr(buf + end, '\n', len - end);
      next = nl != NULL ? (size_t)(nl - buf) + 1 : len;
      if (next - start > PIPE_BUF && end > start)
        break;
      end = next;
      if (end == len || end - start >= PIPE_BUF)
        break;
    }
    write_all(buf + start, end - start);
    start = end;
  }
}

static void flush_locked(void) {
  size_t len = atomic_load(&batch_len);
  if (len > 0) {
    write_lines(batch_buf, len);
    atomic_store(&batch_len, 0);
  }
}

void mqproc__log_flush(void) {
  if (!atomic_load(&batch_on))
    return;
  pthread_mutex_lock(&batch_lock);
  flush_locked();
  pthread_mutex_unlock(&batch_lock);
}

static void flush_at_exit(void) {
  mqproc__log_flush();
}

/* What waits goes out before the old handler runs (it may end the process). No lock: the
 * signal may have interrupted a holder of it; at worst a line shows twice. */
static void on_fatal(int sig, siginfo_t *si, void *uc) {
  size_t len = atomic_load(&batch_len);
  (void)uc;
  if (len > 0) {
    atomic_store(&batch_len, 0);
    write_lines(batch_buf, len);
  }
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(fatal_signals); i++)
    if (fatal_signals[i] == sig)
      sigaction(sig, &fatal_before[i], NULL);
  if (si == NULL || si->si_code <= 0)
    raise(sig); /* sent (kill, abort()): again, to the old handler, once this one returns */
  /* a fault: returning runs the faulting instruction again, under the old handler */
}

static void fork_prepare(void) {
  pthread_mutex_lock(&batch_lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&batch_lock);
}

static void fork_child(void) {
  atomic_store(&batch_len, 0); /* the parent writes them */
  atomic_store(&batch_on, 0);
  batch_here = 0;
  pthread_mutex_unlock(&batch_lock);
}

static void batch_once(void) {
  atexit(flush_at_exit);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void mqproc__log_batch_begin(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  struct sigaction sa;
  struct stat st;
  int off = 0;
  pthread_once(&once, batch_once);
  if (!atomic_compare_exchange_strong(&batch_on, &off, 1))
    return; /* one thread batches at a time */
  batch_pipe = fstat(STDERR_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(fatal_signals); i++)
    sigaction(fatal_signals[i], &sa, &fatal_before[i]);
  batch_here = 1;
}

void mqproc__log_batch_end(void) {
  if (!batch_here)
    return;
  mqproc__log_flush();
  atomic_store(&batch_on, 0);
  batch_here = 0;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(fatal_signals); i++) {
    struct sigaction now;
    /* a handler the program installed since is left in place */
    if (sigaction(fatal_signals[i], NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
        now.sa_sigaction == on_fatal)
      sigaction(fatal_signals[i], &fatal_before[i], NULL);
  }
}

/* One finished line (with its '\n'): into the batch, or out now after what waits. */
static void emit(mqproc__log_level_t level, const char *line, size_t len) {
  size_t used;
  if (!atomic_load(&batch_on)) {
    write_all(line, len);
    return;
  }
  pthread_mutex_lock(&batch_lock);
  used = atomic_load(&batch_len);
  if (batch_here && level < MQPROC__LOG_WARN) {
    if (used + len > BATCH_CAP) {
      flush_locked();
      used = 0;
    }
    memcpy(batch_buf + used, line, len); /* LOG_LINE_MAX < BATCH_CAP: it fits */
    atomic_store(&batch_len, used + len);
  } else {
    flush_locked();
    write_all(line, len);
  }
  pthread_mutex_unlock(&batch_lock);
}

void mqproc__log(mqproc__log_level_t level, const char *fmt, ...) {
  char line[LOG_LINE_MAX];
  char masked[LOG_LINE_MAX];
  sink_t s = {.out = line, .cap = sizeof(line) - 1}; /* room for the '\n' */
  sink_t m = {.out = masked, .cap = sizeof(masked) - 1};
  char *msg = NULL;
  va_list ap;
  if (level < MQPROC__LOG_DEBUG || level > MQPROC__LOG_ERROR ||
      (int)level < atomic_load(&log_level))
    return;
  va_start(ap, fmt);
  if (vasprintf(&msg, fmt, ap) < 0)
    msg = NULL;
  va_end(ap);
  /* Mask the whole message before cutting it, so a cut never exposes half a secret. */
  m.truncated =
      mask_stable(msg != NULL ? msg : "(log message lost: out of memory)", masked, sizeof(masked));
  m.len = strlen(masked);
  free(msg);
  if (atomic_load(&log_json)) {
    s.len = format_json(line, s.cap, level, masked, m.truncated);
    line[s.len++] = '\n';
    emit(level, line, s.len);
    return;
  }
  put_prefix(&s, level);
  put_escaped(&s, masked);
  if (s.truncated || m.truncated)
    end_truncated(&s);
  line[s.len++] = '\n';
  emit(level, line, s.len);
}
