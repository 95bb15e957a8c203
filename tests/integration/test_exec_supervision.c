/* Integration: the spawn helper as the supervisor of every --exec try (runner/spawn/
 * helper.c, runner/child.c): there is no supervisor process per try, so what one did is
 * checked here with several tries at once — a server killed with SIGKILL leaves no process
 * of any try alive, not even one that left its try's process group (setsid); a helper
 * killed alone ends every try as killed and takes their groups along; a process a try
 * left behind outside its group is killed once the try has ended; --max-log-size cuts off
 * the try that floods and no other; each failed try's error quotes its own last output;
 * no fd of the server's or the helper's reaches a processor; the processor gets the
 * server's core limit, the helper none. Runs on the default pair and on dir+sqlite. */
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

TestSuite(exec_supervision, .fini = it_cleanup);

/* The processor of these tests; what it does depends on the job id's prefix:
 *   tree-*    a child in its group and one that left it (setsid), their pids and its own
 *             into $PROC_DIR/<job id> ("self group escaped"), then waits for them
 *   hold-*    a child in its group, the pids into $PROC_DIR/<job id> ("self group"), then
 *             waits $PROC_SLEEP seconds for it
 *   daemon-*  a daemon (setsid, its parent gone at once: handed to the helper), its pid
 *             into $PROC_DIR/<job id>, then exits 0
 *   flood-*   writes zeros to stdout and stderr without end
 *   talk-*    writes 2000 numbered lines, then exits 0
 *   fail-*    writes 100 lines "<job id> line <n>", then exits 3
 *   fds-*     prints where each of its fds leads
 *   core-*    prints its core file limit (bytes)
 *   stop-*    the first time: stops its parent, the spawn helper (SIGSTOP), and waits;
 *             again: exits 0
 *   sig-*     prints its blocked and ignored signals (exec'd grep reads its own: dash
 *             blocks every signal around a fork, so its status read by a child may show
 *             that window)
 * Pid files are written under a temporary name and renamed. */
static const char SCRIPT[] =
    "#!/bin/sh\n"
    "put() { echo \"$2\" > \"$PROC_DIR/$1.tmp\" && mv \"$PROC_DIR/$1.tmp\" \"$PROC_DIR/$1\"; }\n"
    "case \"$MQPROC_JOB_ID\" in\n"
    "  tree-*) sleep 1000 & g=$!; setsid sleep 1000 & e=$!; put \"$MQPROC_JOB_ID\" \"$$ $g $e\"; "
    "wait ;;\n"
    "  hold-*) sleep \"${PROC_SLEEP:-1000}\" & g=$!; put \"$MQPROC_JOB_ID\" \"$$ $g\"; wait ;;\n"
    "  daemon-*) ( setsid sleep 1000 & put \"$MQPROC_JOB_ID\" \"$!\" ); exit 0 ;;\n"
    "  flood-*) while :; do head -c 65536 /dev/zero; head -c 65536 /dev/zero >&2; done ;;\n"
    "  talk-*) i=1; while [ $i -le 2000 ]; do echo \"talk line $i\"; i=$((i + 1)); done ;;\n"
    "  fail-*) i=1; while [ $i -le 100 ]; do echo \"$MQPROC_JOB_ID line $i\"; i=$((i + 1)); "
    "done; exit 3 ;;\n"
    "  fds-*) ls -l /proc/$$/fd ;;\n"
    "  stop-*) [ -e \"$PROC_DIR/$MQPROC_JOB_ID.once\" ] && exit 0; : > "
    "\"$PROC_DIR/$MQPROC_JOB_ID.once\"; "
    "kill -STOP $PPID; sleep 1000 ;;\n"
    "  core-*) grep 'core file' /proc/$$/limits ;;\n"
    "  sig-*) exec grep -E '^Sig(Blk|Ign)' /proc/self/status ;;\n"
    "esac\n"
    "exit 0\n";

static const char *script(void) {
  char *path = it_fmt("%s/supervised.sh", it_tmpdir());
  FILE *f;
  if (access(path, X_OK) == 0)
    return path;
  cr_assert_not_null(f = fopen(path, "w"));
  fputs(SCRIPT, f);
  fclose(f);
  cr_assert_eq(chmod(path, 0755), 0);
  return path;
}

static const char *proc_dir(void) {
  char *dir = it_fmt("%s/pids", it_tmpdir());
  if (mkdir(dir, 0755) < 0)
    cr_assert_eq(errno, EEXIST);
  return dir;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until path exists: inotify on its directory (the script renames files into
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

/* The pids the job wrote (up to max) into out; returns how many. */
static int read_pids(const char *job_id, pid_t *out, int max) {
  char *path = it_fmt("%s/%s", proc_dir(), job_id);
  FILE *f;
  int n = 0;
  long pid;
  cr_assert(wait_file(path, WAIT_MS), "%s did not write its pids", job_id);
  cr_assert_not_null(f = fopen(path, "r"));
  while (n < max && fscanf(f, "%ld", &pid) == 1) {
    cr_assert_gt(pid, 1);
    out[n++] = (pid_t)pid;
  }
  fclose(f);
  return n;
}

/* A process to watch die: a pidfd polls readable once it has exited, zombie or not (the
 * container's init may not reap orphans). Set while the process surely runs: no reuse. */
static int watch(pid_t pid) {
  int fd = pidfd_open(pid, 0);
  cr_assert_geq(fd, 0, "pid %d is gone already: %s", (int)pid, strerror(errno));
  return fd;
}

static int gone_within(int pidfd, int timeout_ms) {
  struct pollfd p = {.fd = pidfd, .events = POLLIN};
  return poll(&p, 1, timeout_ms) == 1;
}

/* Every watched process has exited; the watches are closed. */
static void expect_all_gone(const int *fds, const pid_t *pids, int n, const char *why) {
  for (int i = 0; i < n; i++) {
    cr_expect(gone_within(fds[i], GONE_MS), "pid %d outlived %s", (int)pids[i], why);
    close(fds[i]);
  }
}

static const char *result_extra(const char *results) {
  return it_fmt("{\"result_queue_name\": \"%s\"}", results);
}

/* Waits for the result of job_id on results and checks its state. */
static void expect_result(const char *results, const char *job_id, const char *state) {
  it_msg_t m;
  cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", job_id);
  cr_expect(strstr(m.body, job_id) != NULL && strstr(m.body, state) != NULL, "%s", m.body);
  it_msg_free(&m);
}

/* The job's whole log: its text in the row, or its file. */
static char *job_log(const char *job_id) {
  char *text = it_sql("SELECT log_text FROM mqproc_jobs WHERE job_id = $1", 1, job_id);
  char *path = it_sql("SELECT log_path FROM mqproc_jobs WHERE job_id = $1", 1, job_id);
  char *file = path != NULL ? it_read_file(path) : NULL;
  cr_assert(text != NULL || file != NULL, "no log for %s", job_id);
  return file != NULL ? file : text;
}

Test(exec_supervision, a_server_killed_with_sigkill_leaves_no_process_of_any_try) {
  char *proc = it_name("kill9");
  const char *extra[] = {"--concurrency=2", NULL};
  const char *envp[] = {it_fmt("PROC_DIR=%s", proc_dir()), NULL};
  const char *jobs[] = {"tree-1", "tree-2"};
  pid_t pids[7];
  int fds[7], n = 0, st;
  it_server_t *srv = it_server_start(proc, script(), extra, envp);
  for (int i = 0; i < 2; i++)
    it_publish(proc, it_job_json(proc, jobs[i], NULL));
  for (int i = 0; i < 2; i++) { /* each: the processor, its child, the child that left */
    cr_assert_eq(read_pids(jobs[i], pids + n, 3), 3);
    n += 3;
  }
  pids[n++] = it_child_of(it_server_pid(srv)); /* the helper */
  cr_assert_gt(pids[n - 1], 0);
  for (int i = 0; i < n; i++)
    fds[i] = watch(pids[i]);
  it_server_signal(srv, SIGKILL);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_assert(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "wait status %d", st);
  expect_all_gone(fds, pids, n, "the server");
  it_server_stop(srv); /* already reaped: only frees */
}

Test(exec_supervision, a_killed_helper_ends_every_try_as_killed_with_its_group) {
  char *proc = it_name("helper"), *results = it_name("helper-result");
  const char *extra[] = {"--concurrency=2", NULL};
  const char *envp[] = {it_fmt("PROC_DIR=%s", proc_dir()), "PROC_SLEEP=2", NULL};
  const char *jobs[] = {"hold-1", "hold-2"};
  pid_t pids[4], helper;
  int fds[4];
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), extra, envp);
  for (int i = 0; i < 2; i++)
    it_publish(proc, it_job_json(proc, jobs[i], result_extra(results)));
  for (int i = 0; i < 2; i++) /* each: the processor and its child */
    cr_assert_eq(read_pids(jobs[i], pids + 2 * i, 2), 2);
  for (int i = 0; i < 4; i++)
    fds[i] = watch(pids[i]);
  for (int i = 0; i < 2; i++) /* the retries write them again */
    unlink(it_fmt("%s/%s", proc_dir(), jobs[i]));
  helper = it_child_of(it_server_pid(srv));
  cr_assert_gt(helper, 0);
  cr_assert_eq(kill(helper, SIGKILL), 0);
  expect_all_gone(fds, pids, 4, "the spawn helper");
  cr_assert(it_server_wait_log(
      srv, it_fmt("spawn helper (pid %d) was killed by signal 9", (int)helper), WAIT_MS));
  for (int i = 0; i < 2; i++)
    expect_result(results, "hold-", "SUCCESS");
  for (int i = 0; i < 2; i++)
    cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = $1 AND "
                             "try = 1 AND NOT ok AND term_signal = 9",
                             1, jobs[i]),
                 1, "%s's first try ended as killed", jobs[i]);
  cr_expect_neq(it_child_of(it_server_pid(srv)), helper, "the dead helper is still there");
  it_server_stop(srv);
}

/* Issue 38, F7: a processor stops its spawn helper (its parent; SIGSTOP cannot be blocked).
 * Its try would never end, time limits would do nothing and the leases would be renewed
 * for ever; the server's PINGs go unanswered, so it ends the helper and its tries (as
 * killed, or as not started when the helper was stopped before it answered the SPAWN),
 * and the retry runs under a new helper. */
Test(exec_supervision, a_processor_that_stops_its_helper_does_not_wedge_the_server) {
  char *proc = it_name("stophelper"), *results = it_name("stophelper-result");
  const char *envp[] = {it_fmt("PROC_DIR=%s", proc_dir()), NULL};
  pid_t helper;
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), NULL, envp);
  it_publish(proc, it_job_json(proc, "stop-1", result_extra(results)));
  cr_assert(it_server_wait_log(srv, "job stop-1: attempt 1 try 1 started", WAIT_MS));
  helper = it_child_of(it_server_pid(srv));
  cr_assert_gt(helper, 0);
  cr_assert(it_server_wait_log(
      srv, it_fmt("spawn helper (pid %d) does not answer (stopped?)", (int)helper), WAIT_MS));
  expect_result(results, "stop-1", "SUCCESS");
  /* The processor may stop the helper before the helper said the try runs: then the
   * server never learnt of it and ends it as not started; either way it failed. */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'stop-1' AND "
                           "try = 1 AND NOT ok",
                           0),
               1, "the first try did not end as failed");
  cr_expect_neq(it_child_of(it_server_pid(srv)), helper, "the stopped helper is still there");
  it_server_stop(srv);
}

Test(exec_supervision, a_process_a_try_left_outside_its_group_is_killed_when_it_ends) {
  char *proc = it_name("daemon"), *results = it_name("daemon-result");
  const char *envp[] = {it_fmt("PROC_DIR=%s", proc_dir()), NULL};
  pid_t daemon;
  int fd;
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), NULL, envp);
  it_publish(proc, it_job_json(proc, "daemon-1", result_extra(results)));
  cr_assert_eq(read_pids("daemon-1", &daemon, 1), 1);
  /* it may be gone already (the try ended): then it was killed, or it did not start */
  fd = pidfd_open(daemon, 0);
  expect_result(results, "daemon-1", "SUCCESS");
  if (fd >= 0) {
    cr_expect(gone_within(fd, GONE_MS), "the daemon %d outlived its try", (int)daemon);
    close(fd);
  }
  it_server_stop(srv);
}

Test(exec_supervision, a_full_log_cuts_off_its_own_try_and_no_other) {
  char *proc = it_name("flood"), *results = it_name("flood-result"), *log, *path;
  const char *extra[] = {"--concurrency=2", "--max-log-size=65536", "--retries=0",
                         "--max-requeues=0", NULL};
  struct stat st;
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), extra, NULL);
  it_publish(proc, it_job_json(proc, "flood-1", result_extra(results)));
  it_publish(proc, it_job_json(proc, "talk-1", result_extra(results)));
  it_expect_dead(proc, "killed by signal 25");
  for (int i = 0; i < 2; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "no result");
    if (strstr(m.body, "flood-1") != NULL)
      cr_expect(strstr(m.body, "FAILED") != NULL, "%s", m.body);
    else
      cr_expect(strstr(m.body, "talk-1") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s",
                m.body);
    it_msg_free(&m);
  }
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'flood-1' AND "
                           "NOT ok AND term_signal = 25",
                           0),
               1);
  path = it_sql("SELECT log_path FROM mqproc_jobs WHERE job_id = 'flood-1'", 0);
  cr_assert_not_null(path);
  cr_assert_eq(stat(path, &st), 0, "%s", path);
  cr_expect(st.st_size >= 65536 && st.st_size <= 65536 + 512, "the flood's log is %lld bytes",
            (long long)st.st_size);
  log = job_log("talk-1"); /* every line of the other try, in order */
  for (int i = 1; i <= 2000; i++) {
    char *line = it_fmt("talk line %d\n", i), *at = strstr(log, line);
    cr_assert_not_null(at, "talk-1's log lacks line %d", i);
    log = at + strlen(line);
  }
  it_server_stop(srv);
}

Test(exec_supervision, each_failed_try_quotes_its_own_last_output) {
  char *proc = it_name("fail");
  const char *extra[] = {"--concurrency=2", "--retries=0", "--max-requeues=0", NULL};
  const char *jobs[] = {"fail-a", "fail-b"};
  it_server_t *srv = it_server_start(proc, script(), extra, NULL);
  for (int i = 0; i < 2; i++)
    it_publish(proc, it_job_json(proc, jobs[i], NULL));
  for (int i = 0; i < 2; i++)
    it_expect_dead(proc, "processor exited with status 3");
  for (int i = 0; i < 2; i++) {
    char *err = it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = $1", 1, jobs[i]);
    cr_assert_not_null(err, "%s has no error", jobs[i]);
    cr_expect(strstr(err, it_fmt("last output: %s line 91 |", jobs[i])) != NULL &&
                  strstr(err, it_fmt("| %s line 100", jobs[i])) != NULL,
              "%s: %s", jobs[i], err);
    cr_expect(strstr(err, jobs[1 - i]) == NULL, "%s quotes the other try: %s", jobs[i], err);
  }
  it_server_stop(srv);
}

Test(exec_supervision, no_fd_of_the_server_or_the_helper_reaches_the_processor) {
  char *proc = it_name("fds"), *results = it_name("fds-result"), *log;
  it_server_t *srv;
  int fds = 0;
  it_declare(results);
  srv = it_server_start(proc, script(), NULL, NULL);
  it_publish(proc, it_job_json(proc, "fds-1", result_extra(results)));
  expect_result(results, "fds-1", "SUCCESS");
  log = job_log("fds-1");
  for (char *p = log; (p = strstr(p, " -> ")) != NULL; p++)
    fds++;
  /* 0: the job (a memfd), 1 and 2: the output pipe; the shell holds its script open */
  cr_expect(strstr(log, " 0 -> /memfd:mqproc-job") != NULL, "%s", log);
  cr_expect(strstr(log, " 1 -> pipe:") != NULL && strstr(log, " 2 -> pipe:") != NULL, "%s", log);
  cr_expect(strstr(log, "socket:") == NULL, "a socket reached the processor: %s", log);
  cr_expect(strstr(log, "anon_inode:") == NULL, "an epoll, signalfd or eventfd reached it: %s",
            log);
  cr_expect(strstr(log, "memfd:mqproc-log") == NULL, "its log's memfd reached it: %s", log);
  cr_expect_leq(fds, 4, "%s", log);
  it_server_stop(srv);
}

/* The helper blocks every signal and the server ignores SIGPIPE: the processor starts with
 * none blocked and none ignored. */
Test(exec_supervision, the_processor_starts_with_default_signals) {
  char *proc = it_name("sig"), *results = it_name("sig-result"), *log;
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), NULL, NULL);
  it_publish(proc, it_job_json(proc, "sig-1", result_extra(results)));
  expect_result(results, "sig-1", "SUCCESS");
  log = job_log("sig-1");
  cr_expect(strstr(log, "SigBlk:\t0000000000000000\n") != NULL, "%s", log);
  cr_expect(strstr(log, "SigIgn:\t0000000000000000\n") != NULL, "%s", log);
  it_server_stop(srv);
}

/* "Max core file size  <soft>  <hard>  bytes" of /proc/PID/limits (owned by the harness). */
static char *core_line(const char *limits) {
  const char *at = limits != NULL ? strstr(limits, "Max core file size") : NULL;
  cr_assert_not_null(at, "%s", limits);
  return it_fmt("%.*s", (int)strcspn(at, "\n"), at);
}

/* The server's own limit (a sanitized build lowers its soft limit to 0 at start), both
 * values: the processor gets it back; the helper writes no core. */
Test(exec_supervision, the_processor_gets_the_servers_core_limit_and_the_helper_none) {
  char *proc = it_name("core"), *results = it_name("core-result"), *server, *helper;
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, script(), NULL, NULL);
  server = core_line(it_read_file(it_fmt("/proc/%d/limits", (int)it_server_pid(srv))));
  if (strstr(server, "   0                    0 ") != NULL)
    cr_skip_test("the server's hard core limit is 0 here");
  it_publish(proc, it_job_json(proc, "core-1", result_extra(results)));
  expect_result(results, "core-1", "SUCCESS");
  cr_expect_str_eq(core_line(job_log("core-1")), server);
  helper = core_line(it_read_file(it_fmt("/proc/%d/limits", (int)it_child_of(it_server_pid(srv)))));
  cr_expect(
      strncmp(helper, "Max core file size        0 ", strlen("Max core file size        0 ")) == 0,
      "%s", helper);
  it_server_stop(srv);
}
