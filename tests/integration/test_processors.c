/* Integration: the --exec runner's limits against the real RabbitMQ and PostgreSQL — time
 * limits (server-wide and per message), the log size limit, leftovers of a processor's
 * process group, a server killed with SIGKILL, and a program that does not exist. Every
 * test that leaves its server running ends with a further job, proving it still serves. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000
#define GONE_MS 5000 /* a killed process is gone well within this */

TestSuite(processors, .fini = it_cleanup);

static const char *misbehave(void) {
  return it_proc("misbehave.sh");
}

static char *pidfile(void) {
  return it_fmt("%s/pid", it_tmpdir());
}

static char *result_extra(const char *results) {
  return it_fmt("{\"result_queue_name\": \"%s\"}", results);
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Publishes a job misbehave.sh runs successfully and waits for its result: the server
 * still serves, and everything published before was settled (prefetch 1, one queue). */
static void expect_still_serving(const char *proc, const char *results) {
  it_msg_t m;
  it_publish(proc, it_job_json(proc, "sentinel-ok", result_extra(results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the sentinel job");
  cr_expect(strstr(m.body, "sentinel-ok") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s",
            m.body);
  it_msg_free(&m);
}

/* Waits for the dead letter of a job and checks its reason names reason_part. */
static void expect_dead(const char *proc, const char *reason_part) {
  it_msg_t m;
  cr_assert(it_get(it_fmt("%s.dead", proc), WAIT_MS, &m), "nothing dead-lettered (expected '%s')",
            reason_part);
  cr_expect(strstr(m.reason, reason_part) != NULL, "reason '%s' lacks '%s'", m.reason, reason_part);
  it_msg_free(&m);
}

/* Waits until path exists: inotify on its directory (the scripts rename pid files into
 * place), checked again after the watch is set so no creation is missed. */
static int wait_file(const char *path, int timeout_ms) {
  const char *slash = strrchr(path, '/');
  char *dir = it_fmt("%.*s", (int)(slash - path), path);
  int fd = inotify_init1(IN_CLOEXEC), found;
  int64_t deadline = now_ms() + timeout_ms;
  cr_assert_geq(fd, 0);
  cr_assert_geq(inotify_add_watch(fd, dir, IN_MOVED_TO | IN_CLOSE_WRITE), 0);
  while (!(found = access(path, F_OK) == 0)) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char buf[4096];
    int64_t left = deadline - now_ms();
    if (left <= 0 || poll(&p, 1, (int)left) <= 0 || read(fd, buf, sizeof(buf)) < 0)
      break;
  }
  found = access(path, F_OK) == 0;
  close(fd);
  return found;
}

static pid_t read_pid(const char *path) {
  FILE *f = fopen(path, "r");
  long pid = 0;
  cr_assert_not_null(f, "no pid file %s", path);
  cr_assert_eq(fscanf(f, "%ld", &pid), 1, "no pid in %s", path);
  fclose(f);
  cr_assert_gt(pid, 1);
  return (pid_t)pid;
}

/* A process to watch die. A pidfd polls readable once the process has exited, zombie or
 * not (the container's init may not reap orphans, so kill(pid, 0) alone could lie). */
typedef struct pid_watch {
  pid_t pid;
  int fd;         /* pidfd, or -1 */
  int open_errno; /* ESRCH: already gone when the watch was set */
} pid_watch_t;

static pid_watch_t watch_pid(pid_t pid) {
  pid_watch_t w = {.pid = pid, .fd = pidfd_open(pid, 0)};
  w.open_errno = w.fd < 0 ? errno : 0;
  return w;
}

/* Exited or a zombie, seen without a pidfd. */
static int pid_dead_now(pid_t pid) {
  char path[64], state = '?';
  FILE *f;
  if (kill(pid, 0) < 0 && errno == ESRCH)
    return 1;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  if ((f = fopen(path, "r")) == NULL)
    return 1;
  if (fscanf(f, "%*d (%*[^)]) %c", &state) != 1)
    state = '?';
  fclose(f);
  return state == 'Z';
}

/* 1 once the watched process has exited, 0 after timeout_ms. */
static int wait_gone(pid_watch_t *w, int timeout_ms) {
  int gone;
  if (w->fd >= 0) {
    struct pollfd p = {.fd = w->fd, .events = POLLIN};
    gone = poll(&p, 1, timeout_ms) == 1;
  } else if (w->open_errno == ESRCH) {
    gone = 1;
  } else { /* no pidfds: another process's death has no event; a bounded poll */
    int64_t deadline = now_ms() + timeout_ms;
    const struct timespec step = {0, 20 * 1000000L};
    while (!(gone = pid_dead_now(w->pid)) && now_ms() < deadline)
      nanosleep(&step, NULL);
  }
  return gone;
}

static void unwatch(pid_watch_t *w) {
  if (w->fd >= 0)
    close(w->fd);
  w->fd = -1;
}

static long rss_kib(pid_t pid) {
  char path[64], line[256];
  long kib = -1;
  FILE *f;
  snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
  f = fopen(path, "r");
  cr_assert_not_null(f);
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
      break;
  fclose(f);
  cr_assert_gt(kib, 0);
  return kib;
}

Test(processors, a_hanging_processor_is_killed_at_the_time_limit) {
  char *proc = it_name("hang"), *results = it_name("hang-result"), *pids = pidfile();
  const char *extra[] = {"--time-limit=2", "--retries=0", "--max-requeues=0", NULL};
  const char *envp[] = {it_fmt("PROC_PIDFILE=%s", pids), NULL};
  it_server_t *srv;
  pid_watch_t sleeper;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), extra, envp);
  it_publish(proc, it_job_json(proc, "hang-1", result_extra(results)));
  cr_assert(wait_file(pids, WAIT_MS), "the processor did not start");
  sleeper = watch_pid(read_pid(pids));
  expect_dead(proc, "processor exceeded its time limit of 2 s (process group killed)");
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect(wait_gone(&sleeper, GONE_MS), "the processor's child survived the time limit");
  unwatch(&sleeper);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'hang-1'", 0), "FAILED");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'hang-1' AND "
                           "NOT ok AND exit_code IS NULL AND term_signal = 9 AND error = "
                           "'processor exceeded its time limit of 2 s (process group killed)'",
                           0),
               1, "the try is recorded with the time limit as its error");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'hang-1' AND "
                           "duration_ms BETWEEN 1900 AND 9999",
                           0),
               1, "killed after about 2 s, not after the script's 1000 s");
  expect_still_serving(proc, results);
  it_server_stop(srv);
}

Test(processors, a_message_time_limit_applies_without_a_server_limit) {
  char *proc = it_name("msglimit"), *results = it_name("msglimit-result");
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  const char *envp[] = {"PROC_SLEEP=30", NULL};
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), extra, envp);
  it_publish(proc,
             it_job_json(proc, "hang-msg",
                         it_fmt("{\"result_queue_name\": \"%s\", \"time_limit\": 1}", results)));
  expect_dead(proc, "processor exceeded its time limit of 1 s (process group killed)");
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'hang-msg' AND "
                           "term_signal = 9 AND duration_ms < 10000 AND "
                           "error LIKE '%time limit of 1 s%'",
                           0),
               1, "killed after about 1 s, not after the script's 30 s");
  expect_still_serving(proc, results);
  it_server_stop(srv);
}

Test(processors, a_processor_flooding_its_log_dies_of_sigxfsz_at_the_size_limit) {
  char *proc = it_name("flood"), *results = it_name("flood-result"), *log_path;
  const char *extra[] = {"--max-log-size=1048576", "--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv;
  struct stat st;
  long rss_before;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), extra, NULL);
  rss_before = rss_kib(it_server_pid(srv));
  it_publish(proc, it_job_json(proc, "flood-1", result_extra(results)));
  expect_dead(proc, "killed by signal 25");
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'flood-1' AND "
                           "NOT ok AND term_signal = 25",
                           0),
               1);
  log_path = it_sql("SELECT log_path FROM mqproc_jobs WHERE job_id = 'flood-1'", 0);
  cr_assert_not_null(log_path);
  cr_assert_eq(stat(log_path, &st), 0, "%s", log_path);
  /* the try's output is cut at the limit; the log also holds mqproc's header and note */
  cr_expect_leq(st.st_size, 1048576 + 512, "the log grew to %lld bytes", (long long)st.st_size);
  cr_expect_geq(st.st_size, 1048576, "the processor wrote up to the limit");
  expect_still_serving(proc, results);
  cr_expect_lt(rss_kib(it_server_pid(srv)) - rss_before, 64 * 1024,
               "the server's memory grew with the processor's output");
  it_server_stop(srv);
}

Test(processors, a_background_child_left_behind_is_killed_when_the_processor_exits) {
  char *proc = it_name("orphan"), *results = it_name("orphan-result"), *pids = pidfile();
  const char *envp[] = {it_fmt("PROC_PIDFILE=%s", pids), NULL};
  it_server_t *srv;
  pid_watch_t left;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), NULL, envp);
  it_publish(proc, it_job_json(proc, "orphan-1", result_extra(results)));
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "orphan-1") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  left = watch_pid(read_pid(pids)); /* written before the script exited */
  cr_expect(wait_gone(&left, GONE_MS), "the background sleep %d is still running", (int)left.pid);
  unwatch(&left);
  expect_still_serving(proc, results);
  it_server_stop(srv);
}

Test(processors, a_server_killed_with_sigkill_takes_its_processor_along) {
  char *proc = it_name("pdeath"), *pids = pidfile();
  const char *envp[] = {it_fmt("PROC_PIDFILE=%s", pids), NULL};
  it_server_t *srv;
  pid_watch_t child;
  int st;
  srv = it_server_start(proc, misbehave(), NULL, envp);
  it_publish(proc, it_job_json(proc, "pdeath-1", NULL));
  cr_assert(wait_file(pids, WAIT_MS), "the processor did not start");
  child = watch_pid(read_pid(pids)); /* set while it surely runs: no pid reuse */
  cr_assert_not(wait_gone(&child, 0), "the processor ended before the server was killed");
  it_server_signal(srv, SIGKILL);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_assert(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "wait status %d", st);
  cr_expect(wait_gone(&child, GONE_MS), "the processor's child %d outlived the server",
            (int)child.pid);
  unwatch(&child);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'pdeath-1'", 0), "RUNNING",
                   "nobody recorded the end: the job waits for its lease to expire");
  it_server_stop(srv); /* already reaped: only frees */
}

/* Every try of a job fails to start; after 1 + --retries tries the job is FAILED, and the
 * server goes on to the next job (which fails the same way). */
static void expect_cannot_start(const char *suffix, const char *exec) {
  char *proc = it_name(suffix);
  const char *extra[] = {"--retries=2", "--max-requeues=0", NULL};
  char *why = it_fmt("cannot start %s: No such file or directory", exec);
  it_server_t *srv = it_server_start(proc, exec, extra, NULL);
  it_publish(proc, it_job_json(proc, "missing-1", NULL));
  expect_dead(proc, why);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'missing-1'", 0), "FAILED");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'missing-1' "
                           "AND NOT ok AND exit_code IS NULL AND error = $1",
                           1, why),
               3, "every try recorded with the reason");
  it_publish(proc, it_job_json(proc, "missing-2", NULL));
  expect_dead(proc, why);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'missing-2'", 0), 3);
  it_server_stop(srv);
}

Test(processors, a_program_missing_from_path_fails_every_try) {
  expect_cannot_start("nopath", "mqproc-no-such-program");
}

Test(processors, a_missing_program_path_is_reported_by_the_child) {
  expect_cannot_start("noexec", "/nonexistent/mqproc-no-such-program");
}
