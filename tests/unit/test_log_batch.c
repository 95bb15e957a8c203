/* Unit tests for log lines written once per loop turn (src/base/log.c, "Batching"): the
 * batching thread's lines wait for the flush and then come out whole and in order; a line
 * of another thread, or a warning, comes out at once after what waited; a full buffer
 * writes itself; nothing is lost at exit(), abort() or a crash, and a forked child does not
 * write its parent's lines again. stderr is a pipe here, as under a supervisor. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"

/* stderr into a pipe; the test reads its end. */
typedef struct {
  int rfd;
  int saved;
} cap_t;

static cap_t cap_begin(void) {
  cap_t c;
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  c.saved = dup(STDERR_FILENO);
  dup2(fds[1], STDERR_FILENO);
  close(fds[1]);
  c.rfd = fds[0];
  return c;
}

static void cap_end(cap_t *c) {
  dup2(c->saved, STDERR_FILENO);
  close(c->saved);
  close(c->rfd);
}

/* What the pipe holds now (never waits); the caller frees it. */
static char *cap_now(cap_t *c) {
  static char buf[1 << 16];
  size_t len = 0;
  ssize_t n;
  int fl = fcntl(c->rfd, F_GETFL);
  fcntl(c->rfd, F_SETFL, fl | O_NONBLOCK);
  while (len < sizeof(buf) - 1 && (n = read(c->rfd, buf + len, sizeof(buf) - 1 - len)) > 0)
    len += (size_t)n;
  fcntl(c->rfd, F_SETFL, fl);
  buf[len] = '\0';
  return strdup(buf);
}

/* Everything until every writer closed the pipe. */
static char *read_all(int fd) {
  size_t len = 0, cap = 1 << 16;
  char *buf = malloc(cap);
  ssize_t n;
  while ((n = read(fd, buf + len, cap - 1 - len)) > 0) {
    len += (size_t)n;
    if (cap - 1 - len < 4096)
      buf = realloc(buf, cap *= 2);
  }
  buf[len] = '\0';
  return buf;
}

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* a before b in s, both present */
static int in_order(const char *s, const char *a, const char *b) {
  const char *pa = strstr(s, a), *pb = strstr(s, b);
  return pa != NULL && pb != NULL && pa < pb;
}

Test(log_batch, lines_wait_for_the_flush_and_come_out_in_order) {
  cap_t c = cap_begin();
  char *out;
  mqproc__log_batch_begin();
  MQPROC__INFO("line one");
  MQPROC__INFO("line two");
  MQPROC__DEBUG("not shown at info");
  out = cap_now(&c);
  cr_expect_str_empty(out, "nothing before the flush: '%s'", out);
  free(out);
  mqproc__log_flush();
  out = cap_now(&c);
  cr_expect(in_order(out, "INFO  [mqproc] line one\n", "INFO  [mqproc] line two\n"), "%s", out);
  cr_expect_eq(count(out, "\n"), 2, "two whole lines: '%s'", out);
  free(out);
  mqproc__log_batch_end();
  MQPROC__INFO("after the end");
  out = cap_now(&c);
  cr_expect(strstr(out, "after the end\n") != NULL, "written at once after batch_end: '%s'", out);
  free(out);
  cap_end(&c);
}

static void *other_thread(void *arg) {
  (void)arg;
  MQPROC__INFO("from another thread");
  return NULL;
}

Test(log_batch, another_threads_line_comes_out_at_once_after_what_waited) {
  cap_t c = cap_begin();
  pthread_t t;
  char *out;
  mqproc__log_batch_begin();
  MQPROC__INFO("loop first");
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_join(t, NULL);
  out = cap_now(&c);
  cr_expect(in_order(out, "loop first", "from another thread"), "in order, at once: '%s'", out);
  free(out);
  mqproc__log_batch_end();
  cap_end(&c);
}

Test(log_batch, a_warning_comes_out_at_once_after_what_waited) {
  cap_t c = cap_begin();
  char *out;
  mqproc__log_batch_begin();
  MQPROC__INFO("an info line");
  MQPROC__WARN("a warning");
  out = cap_now(&c);
  cr_expect(in_order(out, "an info line", "WARN  [mqproc] a warning"), "'%s'", out);
  free(out);
  mqproc__log_batch_end();
  cap_end(&c);
}

static void *drain(void *arg) {
  return read_all(*(int *)arg);
}

Test(log_batch, a_full_buffer_writes_itself_and_nothing_is_lost_or_reordered) {
  cap_t c = cap_begin();
  pthread_t reader;
  char *out, want[64];
  const char *p;
  int ok = 1;
  pthread_create(&reader, NULL, drain, &c.rfd); /* the pipe holds less than the lines */
  mqproc__log_batch_begin();
  for (int i = 0; i < 3000; i++) /* about 200 KB: the buffer fills three times */
    MQPROC__INFO("numbered line %05d with some padding to make it longer", i);
  mqproc__log_batch_end();
  dup2(c.saved, STDERR_FILENO); /* the reader sees EOF */
  pthread_join(reader, (void **)&out);
  p = out;
  for (int i = 0; i < 3000 && ok; i++) {
    snprintf(want, sizeof(want), "numbered line %05d ", i);
    ok = (p = strstr(p, want)) != NULL;
  }
  cr_expect(ok, "every line, in order");
  cr_expect_eq(count(out, "\n"), 3000);
  free(out);
  close(c.saved);
  close(c.rfd);
}

typedef enum { END_EXIT, END_ABORT, END_FAULT } ending_t;

/* A child batches a line and ends as told; returns what it wrote and its wait status. */
static char *child_ends(ending_t how, int *wstatus) {
  int fds[2];
  pid_t pid;
  char *out;
  cr_assert_eq(pipe(fds), 0);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    mqproc__log_batch_begin();
    MQPROC__INFO("the last words");
    if (how == END_EXIT)
      exit(0);
    if (how == END_ABORT)
      abort();
    *(volatile int *)(intptr_t)16 = 1; /* a fault */
    _exit(3);
  }
  close(fds[1]);
  out = read_all(fds[0]);
  close(fds[0]);
  waitpid(pid, wstatus, 0);
  return out;
}

Test(log_batch, exit_writes_what_waits) {
  int ws;
  char *out = child_ends(END_EXIT, &ws);
  cr_expect(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  cr_expect(strstr(out, "the last words\n") != NULL, "'%s'", out);
  free(out);
}

Test(log_batch, abort_writes_what_waits_and_still_aborts) {
  int ws;
  char *out = child_ends(END_ABORT, &ws);
  cr_expect(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGABRT, "ended by SIGABRT (status %d)", ws);
  cr_expect(strstr(out, "the last words\n") != NULL, "'%s'", out);
  free(out);
}

Test(log_batch, a_crash_writes_what_waits_and_still_crashes) {
  int ws;
  char *out = child_ends(END_FAULT, &ws);
  /* SIGSEGV, or the sanitizer's report and exit status */
  cr_expect(!(WIFEXITED(ws) && (WEXITSTATUS(ws) == 0 || WEXITSTATUS(ws) == 3)),
            "the fault still ends it (status %d)", ws);
  cr_expect(strstr(out, "the last words\n") != NULL, "'%s'", out);
  free(out);
}

Test(log_batch, a_forked_child_does_not_write_its_parents_lines) {
  cap_t c = cap_begin();
  pid_t pid;
  char *out;
  mqproc__log_batch_begin();
  MQPROC__INFO("the parent's line");
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    MQPROC__INFO("the child's line"); /* written at once: the child does not batch */
    exit(0);                          /* and its exit writes nothing of the parent's */
  }
  waitpid(pid, NULL, 0);
  mqproc__log_batch_end();
  out = cap_now(&c);
  cr_expect_eq(count(out, "the parent's line"), 1, "once: '%s'", out);
  cr_expect_eq(count(out, "the child's line"), 1, "'%s'", out);
  free(out);
  cap_end(&c);
}

Test(log_batch, json_lines_keep_their_format) {
  cap_t c = cap_begin();
  char *out;
  mqproc__log_set_json(1);
  mqproc__log_batch_begin();
  MQPROC__INFO("job j-1: a json line");
  mqproc__log_flush();
  out = cap_now(&c);
  cr_expect(strstr(out, "\"msg\":\"job j-1: a json line\",\"job_id\":\"j-1\"}\n") != NULL, "'%s'",
            out);
  free(out);
  mqproc__log_batch_end();
  mqproc__log_set_json(0);
  cap_end(&c);
}
