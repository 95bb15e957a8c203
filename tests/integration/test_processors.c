/* Integration: the --exec runner's limits against the real RabbitMQ and PostgreSQL — time
 * limits (server-wide and per message), the log size limit, leftovers of a processor's
 * process group, a server killed with SIGKILL, and a program that does not exist — and the
 * same containment for C processors in worker processes (--isolation=process): a crash, a
 * hang, a dead worker, a forced stop, a killed server. Every test that leaves its server
 * running ends with a further job, proving it still serves. */
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
  it_expect_dead(proc, "processor exceeded its time limit of 2 s (process group killed)");
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
  it_expect_dead(proc, "processor exceeded its time limit of 1 s (process group killed)");
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
  it_expect_dead(proc, "killed by signal 25");
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

/* The spawn helper (runner/spawn/spawner.c) killed while a try runs: the try ends as killed,
 * its processor and the processor's child go with it, and the next try runs under a new
 * helper. */
Test(processors, a_killed_spawn_helper_ends_its_try_and_a_new_helper_runs_the_next) {
  char *proc = it_name("helper"), *results = it_name("helper-result"), *pids = pidfile();
  const char *envp[] = {it_fmt("PROC_PIDFILE=%s", pids), "PROC_SLEEP=2", NULL};
  it_server_t *srv;
  pid_watch_t child;
  pid_t helper;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), NULL, envp);
  it_publish(proc, it_job_json(proc, "hang-helper", result_extra(results)));
  cr_assert(wait_file(pids, WAIT_MS), "the processor did not start");
  child = watch_pid(read_pid(pids)); /* set while it surely runs: no pid reuse */
  unlink(pids);
  helper = it_child_of(it_server_pid(srv));
  cr_assert_gt(helper, 0);
  cr_assert_eq(kill(helper, SIGKILL), 0);
  cr_expect(wait_gone(&child, GONE_MS), "the processor's child %d outlived the helper",
            (int)child.pid);
  unwatch(&child);
  cr_assert(it_server_wait_log(
      srv, it_fmt("spawn helper (pid %d) was killed by signal 9", (int)helper), WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m), "no result");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'hang-helper'"
                           " AND try = 1 AND NOT ok AND term_signal = 9",
                           0),
               1, "the first try ended as killed");
  cr_expect_str_eq(it_sql("SELECT CASE WHEN ok THEN 'true' ELSE 'false' END FROM mqproc_all_tries "
                          "WHERE job_id = 'hang-helper'"
                          " AND try = 2",
                          0),
                   "true");
  cr_expect_neq(it_child_of(it_server_pid(srv)), helper, "the dead helper is still there");
  it_server_stop(srv);
}

/* A spawn helper that stops answering (here: stopped) is given up after its reply
 * deadline: that try cannot start, the helper is killed, the next try runs under a new
 * one. */
Test(processors, a_hung_spawn_helper_is_replaced) {
  char *proc = it_name("hung"), *results = it_name("hung-result");
  it_server_t *srv;
  pid_t helper;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, misbehave(), NULL, NULL);
  it_publish(proc, it_job_json(proc, "hung-1", result_extra(results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the first job");
  it_msg_free(&m);
  helper = it_child_of(it_server_pid(srv));
  cr_assert_gt(helper, 0);
  cr_assert_eq(kill(helper, SIGSTOP), 0);
  it_publish(proc, it_job_json(proc, "hung-2", result_extra(results)));
  cr_assert(
      it_server_wait_log(srv, it_fmt("spawn helper (pid %d) does not answer", (int)helper), 30000));
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the second job");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'hung-2'"
                           " AND try = 1 AND NOT ok AND error LIKE 'cannot start %'",
                           0),
               1, "the try the hung helper held up did not start");
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'hung-2'", 0), 2);
  cr_expect_neq(it_child_of(it_server_pid(srv)), helper, "the hung helper is still there");
  it_server_stop(srv);
}

/* Every try of a job fails to start: its program went away after the server started
 * (which refuses a missing one: test_processor_cli.c). After 1 + --retries tries the job is
 * FAILED, and the server goes on to the next job (which fails the same way). in_path: the
 * program is named by its name, found in a PATH directory; else by its path. */
static void expect_cannot_start(const char *suffix, int in_path) {
  char *proc = it_name(suffix), *dir = it_fmt("%s/bin", it_tmpdir());
  char *path = it_fmt("%s/mqproc-gone-program", dir);
  const char *exec = in_path ? "mqproc-gone-program" : path;
  const char *extra[] = {"--retries=2", "--max-requeues=0", NULL};
  const char *env[] = {it_fmt("PATH=%s:%s", dir, getenv("PATH")), NULL};
  char *why = it_fmt("cannot start %s: No such file or directory", exec);
  it_server_t *srv;
  FILE *f;
  cr_assert_eq(mkdir(dir, 0755), 0);
  cr_assert_not_null(f = fopen(path, "w"));
  fputs("#!/bin/sh\nexit 0\n", f);
  fclose(f);
  cr_assert_eq(chmod(path, 0755), 0);
  srv = it_server_start(proc, exec, extra, in_path ? env : NULL);
  cr_assert_eq(unlink(path), 0);
  it_publish(proc, it_job_json(proc, "missing-1", NULL));
  it_expect_dead(proc, why);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'missing-1'", 0), "FAILED");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'missing-1' "
                           "AND NOT ok AND exit_code IS NULL AND error = $1",
                           1, why),
               3, "every try recorded with the reason");
  it_publish(proc, it_job_json(proc, "missing-2", NULL));
  it_expect_dead(proc, why);
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'missing-2'", 0), 3);
  it_server_stop(srv);
}

Test(processors, a_program_gone_from_path_fails_every_try) {
  expect_cannot_start("nopath", 1);
}

Test(processors, a_gone_program_path_is_reported_by_the_child) {
  expect_cannot_start("noexec", 0);
}

/* ---- C processors with --isolation=process ------------------------------------------ */

/* A job for the example C processor with these parameters (a JSON object text). */
static char *c_job(const char *proc, const char *job_id, const char *results, const char *params) {
  return it_job_json(
      proc, job_id, it_fmt("{\"result_queue_name\": \"%s\", \"parameters\": %s}", results, params));
}

/* Publishes a job the example C processor runs successfully and checks its result. */
static void expect_c_job_succeeds(const char *proc, const char *results, const char *job_id) {
  it_msg_t m;
  it_publish(proc, c_job(proc, job_id, results, "{}"));
  cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", job_id);
  cr_expect(strstr(m.body, job_id) != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
}

/* ASan turns a SIGSEGV into a report and exit status 1 (and the suites fail on reports):
 * let the worker die of the signal, as it does without sanitizers. */
static const char *segv_env(void) {
  const char *cur = getenv("ASAN_OPTIONS");
  return it_fmt("ASAN_OPTIONS=%s%shandle_segv=0", cur != NULL ? cur : "",
                cur != NULL && cur[0] != '\0' ? ":" : "");
}

/* The worker processes that ran job_id's tries, from the lines the runner writes into the
 * job's log (its text in the row when the job succeeded at once, else its file); returns
 * how many distinct pids were added to pids (capacity cap, count *n). */
static void worker_pids(const char *job_id, pid_t *pids, int *n, int cap) {
  char *path = it_sql("SELECT log_path FROM mqproc_jobs WHERE job_id = $1", 1, job_id), line[512];
  char *text = it_sql("SELECT log_text FROM mqproc_jobs WHERE job_id = $1", 1, job_id);
  cr_assert(path != NULL || text != NULL, "no log for %s", job_id);
  for (int k = 0; k < 2; k++) {
    FILE *f = k == 0 ? (text != NULL ? fmemopen(text, strlen(text), "r") : NULL)
                     : (path != NULL ? fopen(path, "r") : NULL);
    if (k == 1 && path != NULL)
      cr_assert_not_null(f, "no job log %s", path);
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
      int pid, i;
      if (sscanf(line, "mqproc: in worker process %d", &pid) != 1)
        continue;
      for (i = 0; i < *n && pids[i] != pid; i++)
        ;
      if (i == *n && *n < cap)
        pids[(*n)++] = pid;
    }
    if (f != NULL)
      fclose(f);
  }
}

static pid_t only_worker_pid(const char *job_id) {
  pid_t pid[2];
  int n = 0;
  worker_pids(job_id, pid, &n, 2);
  cr_assert_eq(n, 1, "job %s ran in %d worker processes", job_id, n);
  return pid[0];
}

Test(processors, process_isolation_turns_a_crash_into_a_failed_try) {
  char *proc = it_name("crash"), *results = it_name("crash-result");
  const char *extra[] = {"--isolation=process", NULL};
  const char *envp[] = {segv_env(), NULL};
  const char *why = "processor crashed: killed by signal 11 (Segmentation fault)";
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, envp);
  it_publish(proc, c_job(proc, "crash-1", results, "{\"crash\": true}"));
  it_expect_dead(proc, why);
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'crash-1'", 0), "FAILED");
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'crash-1'", 0), 8,
               "4 tries, a requeue, 4 tries");
  cr_expect_eq(it_sql_long("SELECT requeues FROM mqproc_jobs WHERE job_id = 'crash-1'", 0), 1);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'crash-1' AND "
                           "NOT ok AND exit_code IS NULL AND term_signal = 11 AND error = $1",
                           1, why),
               8, "every try recorded as a crash");
  expect_c_job_succeeds(proc, results, "crash-after");
  cr_expect_eq(it_server_wait_exit(srv, 0), -1, "the server died");
  cr_expect_eq(it_sql_long("SELECT count(DISTINCT worker_id) FROM mqproc_all_tries", 0), 1);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_all_tries WHERE worker_id LIKE $1", 1,
                           it_fmt("%%:%d", (int)it_server_pid(srv))),
               9, "every try ran under the first server process");
  it_server_stop(srv);
}

Test(processors, process_isolation_applies_the_time_limit_to_a_c_processor) {
  char *proc = it_name("chang"), *results = it_name("chang-result");
  const char *extra[] = {"--isolation=process", "--time-limit=2", "--retries=1", "--max-requeues=0",
                         NULL};
  const char *why = "processor exceeded its time limit of 2 s (process group killed)";
  it_server_t *srv;
  pid_t pids[3];
  int n = 0;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL);
  it_publish(proc, c_job(proc, "chang-1", results, "{\"hang\": true}"));
  it_expect_dead(proc, why);
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect(strstr(m.body, "\"state\":\"FAILED\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'chang-1' AND "
                           "NOT ok AND exit_code IS NULL AND term_signal = 9 AND error = $1 AND "
                           "duration_ms BETWEEN 1900 AND 9999",
                           1, why),
               2, "both tries killed after about 2 s");
  worker_pids("chang-1", pids, &n, 3);
  cr_expect_eq(n, 2, "the second try ran in a new worker process");
  expect_c_job_succeeds(proc, results, "chang-after");
  it_server_stop(srv);
}

Test(processors, process_isolation_runs_each_job_once_in_at_most_prefetch_workers) {
  char *proc = it_name("cmany"), *results = it_name("cmany-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *extra[] = {"--isolation=process", "--prefetch=2", NULL};
  it_server_t *srv;
  pid_t pids[21];
  int n = 0;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL);
  cr_expect_eq(it_server_count_log(srv, "2 worker processes started"), 1);
  for (int i = 0; i < 20; i++)
    it_publish(proc, c_job(proc, it_fmt("cmany-%d", i), results,
                           it_fmt("{\"marker\": \"%s\", \"sleep_ms\": 50}", marker)));
  for (int i = 0; i < 20; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d results", i);
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    it_msg_free(&m);
  }
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), 20);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_all_tries", 0), 20);
  cr_expect_eq(it_file_lines(marker), 20, "each job ran exactly once");
  for (int i = 0; i < 20; i++)
    worker_pids(it_fmt("cmany-%d", i), pids, &n, 21);
  cr_expect(n >= 1 && n <= 2, "%d worker processes ran the jobs", n);
  for (int i = 0; i < n; i++)
    cr_expect_neq(pids[i], it_server_pid(srv), "a job ran in the server process");
  it_server_stop(srv);
}

Test(processors, process_isolation_replaces_a_worker_that_died_idle) {
  char *proc = it_name("cidle"), *results = it_name("cidle-result");
  const char *extra[] = {"--isolation=process", NULL};
  it_server_t *srv;
  pid_t first;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL);
  expect_c_job_succeeds(proc, results, "cidle-1");
  first = only_worker_pid("cidle-1");
  cr_assert_eq(kill(first, SIGKILL), 0);
  cr_assert(it_server_wait_log(srv, it_fmt("idle worker process %d ended", (int)first), WAIT_MS));
  expect_c_job_succeeds(proc, results, "cidle-2");
  cr_expect_neq(only_worker_pid("cidle-2"), first);
  it_server_stop(srv);
}

Test(processors, process_isolation_lets_a_forced_stop_end_a_hanging_c_processor) {
  char *proc = it_name("cstop");
  const char *extra[] = {"--isolation=process", "--shutdown-grace=1", NULL};
  it_server_t *srv = it_server_start(proc, NULL, extra, NULL);
  long ready, unacked;
  int st;
  it_publish(proc, it_job_json(proc, "cstop-1", "{\"parameters\": {\"hang\": true}}"));
  cr_assert(it_server_wait_log(srv, "job cstop-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(srv, SIGTERM);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "wait status %d", st);
  cr_expect_eq(it_server_count_log(srv, "were abandoned"), 0, "the worker was killed instead");
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'cstop-1'", 0), "QUEUED");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1, "its message is back in the queue");
  it_server_stop(srv);
}

Test(processors, process_isolation_workers_die_with_a_killed_server) {
  char *proc = it_name("cpdeath"), *results = it_name("cpdeath-result");
  const char *extra[] = {"--isolation=process", NULL};
  it_server_t *srv;
  pid_watch_t worker;
  int st;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL);
  expect_c_job_succeeds(proc, results, "cpdeath-1");
  worker = watch_pid(only_worker_pid("cpdeath-1")); /* idle, alive: no pid reuse */
  cr_assert_not(wait_gone(&worker, 0), "the worker ended before the server was killed");
  it_server_signal(srv, SIGKILL);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_assert(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "wait status %d", st);
  cr_expect(wait_gone(&worker, GONE_MS), "worker process %d outlived the server", (int)worker.pid);
  unwatch(&worker);
  it_server_stop(srv);
}
