/* Integration: running a fleet against the real RabbitMQ and PostgreSQL — a message's
 * headers and priority kept and handed to processors, priorities ordering delivery, the
 * error handler (--on-failure), JSON logs, the systemd notify protocol and the supervisor
 * (--instances, --max-jobs-per-child). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(fleet, .fini = it_cleanup);

/* ---- headers ---------------------------------------------------------------------------- */

Test(fleet, headers_are_stored_and_reach_a_command_on_stdin) {
  char *proc = it_name("hdr"), *out, *stdin_copy;
  const char *envp[] = {it_fmt("PROC_COPY=%s", it_tmpdir()), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  json_t *job, *in;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "hdr-1", "--header", "tenant=acme", "--header", "trace=t-42",
                     "--priority", "3", "--wait", NULL),
               0);
  cr_assert_eq(it_mq(&out, "jobs", "show", "hdr-1", "--json", NULL), 0);
  job = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(job, "headers"), "tenant")),
                   "acme", "%s", out);
  cr_expect_eq(json_integer_value(json_object_get(job, "priority")), 3, "%s", out);
  json_decref(job);
  stdin_copy = it_read_file(it_fmt("%s/hdr-1.json", it_tmpdir()));
  cr_assert_not_null(stdin_copy);
  in = it_json(stdin_copy);
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(in, "headers"), "trace")),
                   "t-42", "%s", stdin_copy);
  cr_expect_str_eq(json_string_value(json_object_get(in, "job_id")), "hdr-1");
  json_decref(in);
  it_server_stop(srv);
}

/* The sweeper republishes a dead holder's early-acked job as it came: bytes, priority and
 * headers (the new server is paused, so the message waits in the queue to be looked at). */
Test(fleet, a_dead_holders_job_is_republished_with_its_priority_and_headers) {
  char *proc = it_name("rep"), *out;
  const char *envp_a[] = {"PROC_SLEEP=120", NULL};
  const char *extra_a[] = {"--lease=3", "--ack-after=1", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=3", "--worker-id=B", NULL};
  it_server_t *a = it_server_start(proc, it_proc("proc.sh"), extra_a, envp_a), *b;
  it_msg_t m;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "rep-1", "--header", "tenant=acme", "--priority", "7", NULL),
               0);
  cr_assert(it_server_wait_log(a, "job rep-1: still running after 1 s; delivery acked", WAIT_MS));
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0, "%s", out);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, WAIT_MS), -1);
  b = it_server_spawn(proc, it_proc("proc.sh"), extra_b, NULL);
  cr_assert(it_server_wait_log(b, "job rep-1: its holder is gone; republished", WAIT_MS));
  cr_assert(it_get(proc, WAIT_MS, &m));
  cr_expect_str_eq(m.message_id, "rep-1");
  cr_expect_eq(m.priority, 7);
  cr_expect(strstr(m.headers, "tenant=acme\n") != NULL, "%s", m.headers);
  cr_expect(strstr(m.body, "rep-1") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(a);
  it_server_stop(b);
}

/* A C processor reads a header with mqproc_job_header(), on a thread and in a worker
 * process (the header crosses the worker protocol). */
static void c_processor_sees_header(const char *isolation) {
  char *proc = it_name(isolation), *out;
  const char *extra[] = {"--isolation", isolation, NULL};
  it_server_t *srv = it_server_start(proc, NULL, extra, NULL);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", it_fmt("%s-h", isolation), "--param", "log_header=tenant",
                     "--header", "tenant=acme", "--wait", NULL),
               0);
  cr_assert_eq(it_mq(&out, "jobs", "log", it_fmt("%s-h", isolation), NULL), 0);
  cr_expect(strstr(out, "header tenant=acme") != NULL, "%s", out);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", it_fmt("%s-none", isolation), "--param", "log_header=tenant",
                     "--wait", NULL),
               0);
  cr_assert_eq(it_mq(&out, "jobs", "log", it_fmt("%s-none", isolation), NULL), 0);
  cr_expect(strstr(out, "header tenant=(none) (all: {})") != NULL, "%s", out);
  it_server_stop(srv);
}

Test(fleet, a_c_processor_on_a_thread_reads_a_header) {
  c_processor_sees_header("thread");
}

Test(fleet, a_c_processor_in_a_worker_process_reads_a_header) {
  c_processor_sees_header("process");
}

/* ---- JSON logs -------------------------------------------------------------------------- */

Test(fleet, json_logs_are_one_object_per_line_with_the_job_fields) {
  char *proc = it_name("jlog"), *out, *line;
  const char *extra[] = {"--log-format=json", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  int job_lines = 0, tried = 0, lines = 0;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "jlog-\"1\"", "--wait", NULL),
               0);
  cr_assert(it_server_wait_log(srv, "SUCCESS in", WAIT_MS));
  for (size_t i = 0; (line = it_server_line(srv, i)) != NULL; i++) {
    json_error_t e;
    json_t *o = json_loads(line, 0, &e);
    const char *jid;
    cr_assert_not_null(o, "line %zu is not JSON (%s): %s", i, e.text, line);
    cr_expect(json_is_string(json_object_get(o, "ts")) &&
                  json_is_string(json_object_get(o, "level")) &&
                  json_is_string(json_object_get(o, "worker_id")) &&
                  json_is_string(json_object_get(o, "msg")),
              "%s", line);
    cr_expect(strstr(line, ":guest@") == NULL, "a password in the log: %s", line);
    jid = json_string_value(json_object_get(o, "job_id"));
    if (jid != NULL && strcmp(jid, "jlog-\"1\"") == 0) {
      job_lines++;
      cr_expect_str_eq(json_string_value(json_object_get(o, "processor")), proc, "%s", line);
      if (json_integer_value(json_object_get(o, "attempt")) == 1 &&
          json_integer_value(json_object_get(o, "try")) == 1)
        tried++;
    }
    lines++;
    json_decref(o);
  }
  cr_expect_gt(lines, 3);
  cr_expect_gt(job_lines, 0, "no line carries the job's id");
  cr_expect_gt(tried, 0, "no job line carries attempt 1 and try 1");
  it_server_stop(srv);
}

/* ---- systemd's notify protocol ------------------------------------------------------------ */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A datagram socket of the test's own, as systemd's $NOTIFY_SOCKET. */
static int notify_socket(char *path, size_t n) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  snprintf(path, n, "/tmp/mqproc-notify-%d.sock", (int)getpid());
  unlink(path);
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

static char last_notice[512]; /* the datagram wait_notify() stopped at */

/* Reads datagrams until one holds text (1) or timeout_ms passed (0); counts WATCHDOG=1. */
static int wait_notify(int fd, const char *text, int timeout_ms, int *watchdogs) {
  int64_t until = now_ms() + timeout_ms;
  for (;;) {
    char buf[512];
    struct pollfd p = {fd, POLLIN, 0};
    int64_t left = until - now_ms();
    ssize_t n;
    if (left <= 0 || poll(&p, 1, (int)left) <= 0)
      return 0;
    if ((n = recv(fd, buf, sizeof(buf) - 1, 0)) <= 0)
      continue;
    buf[n] = '\0';
    if (watchdogs != NULL && strstr(buf, "WATCHDOG=1") != NULL)
      (*watchdogs)++;
    if (strstr(buf, text) != NULL) {
      memcpy(last_notice, buf, (size_t)n + 1);
      return 1;
    }
  }
}

Test(fleet, systemd_hears_ready_status_watchdog_and_stopping) {
  char path[108], *proc = it_name("sd"), *out, *env;
  int fd = notify_socket(path, sizeof(path)), watchdogs = 0;
  const char *envp[] = {it_fmt("NOTIFY_SOCKET=%s", path), "WATCHDOG_USEC=400000",
                        it_fmt("PROC_COPY=%s", it_tmpdir()), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  cr_assert(wait_notify(fd, "READY=1", WAIT_MS, &watchdogs), "no READY=1");
  cr_expect(strstr(last_notice, "STATUS=") != NULL, "%s", last_notice);
  /* the watchdog every 200 ms: several within two seconds */
  wait_notify(fd, "(nothing)", 2000, &watchdogs);
  cr_expect_geq(watchdogs, 4, "%d WATCHDOG=1 in about 2 s", watchdogs);
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0);
  cr_expect(wait_notify(fd, "STATUS=paused", WAIT_MS, NULL), "no STATUS=paused");
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0);
  cr_expect(wait_notify(fd, "STATUS=idle", WAIT_MS, NULL), "no STATUS=idle after resume");
  /* what the server runs never sees the socket */
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--job-id", "sd-env", "--mets", "/m.xml",
                     "-I", "IN", "--wait", NULL),
               0);
  env = it_read_file(it_fmt("%s/sd-env.env", it_tmpdir()));
  cr_assert_not_null(env);
  cr_expect(strstr(env, "NOTIFY_SOCKET") == NULL && strstr(env, "WATCHDOG_USEC") == NULL, "%s",
            env);
  it_server_signal(srv, SIGTERM);
  cr_expect(wait_notify(fd, "STOPPING=1", WAIT_MS, NULL), "no STOPPING=1");
  it_server_stop(srv);
  close(fd);
  unlink(path);
}

/* ---- priorities ----------------------------------------------------------------------------- */

/* Lines of a marker file (ocrd-example's "marker": "<job_id> <attempt> <try>" per run), in
 * the order the jobs ran; the position (0-based) of the first line starting with job_id,
 * or -1. */
static int run_position(const char *marker, const char *job_id) {
  char *text = it_read_file(marker), *line, *save = NULL;
  int i = 0;
  cr_assert_not_null(text, "no marker file %s", marker);
  for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save), i++)
    if (strncmp(line, job_id, strlen(job_id)) == 0 && line[strlen(job_id)] == ' ')
      return i;
  return -1;
}

Test(fleet, a_priority_job_overtakes_two_hundred_queued_ones) {
  char *proc = it_name("prio"), *out, *marker = it_fmt("%s/runs", it_tmpdir());
  char *param = it_fmt("marker=%s", marker);
  const char *extra[] = {"--max-priority", "10", "--prefetch", "1", "--concurrency", "1", NULL};
  it_server_t *srv = it_server_start(proc, NULL, extra, NULL);
  int pos;
  /* paused: the jobs queue up in the broker, none prefetched */
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", "--param",
                     param, "--job-id", "low", "--count", "200", "--priority", "0", NULL),
               0);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", "--param",
                     param, "--job-id", "urgent", "--priority", "9", NULL),
               0);
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "201"),
            "not all 201 jobs ended SUCCESS");
  pos = run_position(marker, "urgent");
  cr_expect(pos >= 0 && pos < 1 + 1, "the priority-9 job ran as number %d of 201", pos + 1);
  cr_expect_eq(it_sql_long("SELECT priority FROM mqproc_jobs WHERE job_id = 'urgent'", 0), 9);
  it_server_stop(srv);
}

/* RabbitMQ's x-max-priority (a dir:// queue has its fixed 0-99: nothing to differ) */
Test(fleet, a_server_whose_max_priority_differs_from_the_queue_stops_with_the_reason) {
  char *proc = it_name("prio2");
  const char *a[] = {"--max-priority", "5", NULL}, *b[] = {"--max-priority", "9", NULL};
  it_server_t *first, *second;
  int st;
  if (it_queue_is_dir())
    cr_skip_test("a dir:// queue has no x-max-priority");
  first = it_server_start(proc, NULL, a, NULL);
  second = it_server_spawn(proc, NULL, b, NULL);
  st = it_server_wait_exit(second, WAIT_MS);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 1, "wait status %d", st);
  cr_expect(it_server_count_log(second, "--max-priority 9 must match") > 0,
            "the reason is not in the log");
  it_server_stop(second);
  it_server_stop(first);
}

/* ---- the error handler ---------------------------------------------------------------------- */

Test(fleet, on_failure_runs_once_per_failed_job_with_the_job_on_stdin) {
  char *proc = it_name("onfail"), *out, *runs = it_fmt("%s/handler-runs", it_tmpdir()), *text;
  char *handler =
      it_fmt("sh -c 'cat >> \"$0\"; echo >> \"$0\"; echo handler saw $MQPROC_JOB_ID' %s", runs);
  const char *extra[] = {"--retries", "1", "--max-requeues", "0", "--on-failure", handler, NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  json_t *in;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "bad-1", "--wait", NULL),
               1, "the job must end FAILED");
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "good-1", "--wait", NULL),
               0);
  cr_assert(it_server_wait_log(srv, "--on-failure handler done", WAIT_MS));
  text = it_read_file(runs);
  cr_assert_not_null(text);
  cr_expect_eq(it_file_lines(runs), 1, "one run, for the failed job only: %s", text);
  in = it_json(text);
  cr_expect_str_eq(json_string_value(json_object_get(in, "job_id")), "bad-1");
  cr_expect_str_eq(json_string_value(json_object_get(in, "state")), "FAILED");
  cr_expect(strstr(json_string_value(json_object_get(in, "error")), "status 3") != NULL, "%s",
            text);
  cr_expect_str_eq(
      json_string_value(json_object_get(json_object_get(in, "request"), "processor_name")), proc);
  json_decref(in);
  cr_assert_eq(it_mq(&out, "jobs", "log", "bad-1", NULL), 0);
  cr_expect(strstr(out, "handler saw bad-1") != NULL, "the handler's output is in the job log: %s",
            out);
  it_server_stop(srv);
}

Test(fleet, a_failing_or_hanging_on_failure_handler_is_logged_and_never_retried) {
  char *proc = it_name("onfail2"), *out;
  const char *extra[] = {"--retries",
                         "1",
                         "--max-requeues",
                         "0",
                         "--on-failure-timeout",
                         "1",
                         "--on-failure",
                         "sh -c 'echo x >> \"$0\"; [ \"$MQPROC_JOB_ID\" = bad-hang ] "
                         "&& sleep 600; exit 3'",
                         NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  char *runs = it_fmt("%s/runs", it_tmpdir());
  extra[7] = it_fmt("%s %s", extra[7], runs);
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "bad-exit", "--wait", NULL),
               1);
  cr_assert(it_server_wait_log(srv, "handler exited with status 3 (not retried)", WAIT_MS));
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "bad-hang", "--wait", NULL),
               1);
  cr_assert(it_server_wait_log(srv, "still running after 1 s: killing its process group", WAIT_MS));
  cr_assert(it_server_wait_log(srv, "handler killed by signal 9 (not retried)", WAIT_MS));
  cr_expect_eq(it_file_lines(runs), 2, "each handler ran once");
  cr_expect_str_eq(it_sql(it_q("SELECT string_agg(state, ',' ORDER BY job_id) FROM mqproc_jobs",
                               "SELECT group_concat(state, ',') FROM"
                               " (SELECT state FROM mqproc_jobs ORDER BY job_id)"),
                          0),
                   "FAILED,FAILED");
  it_server_stop(srv);
}

/* ---- the supervisor ---------------------------------------------------------------------------
 */

static int contains(const pid_t *v, int n, pid_t p) {
  for (int i = 0; i < n; i++)
    if (v[i] == p)
      return 1;
  return 0;
}

Test(fleet, instances_3_a_killed_child_is_back_and_no_job_is_lost_or_doubled) {
  char *proc = it_name("sup"), *out;
  const char *extra[] = {"--instances", "3", NULL};
  const char *envp[] = {"PROC_SLEEP=0.2", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  pid_t kids[8], after[8], victim;
  int n, back = 0;
  cr_assert(it_server_wait_count(srv, "consuming", 3, WAIT_MS), "not all 3 instances consume");
  cr_assert_eq(it_children_of(it_server_pid(srv), kids, 8), 3);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "sup", "--count", "60", NULL),
               0);
  cr_assert(it_sql_becomes("SELECT count(*) >= 5 FROM mqproc_jobs WHERE state = 'SUCCESS'",
                           it_q("t", "1")));
  /* every row says running before the kill (a row keeps the last state its server wrote) */
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_workers WHERE state = 'running'", "3"));
  victim = kids[1];
  kill(victim, SIGKILL);
  /* back: a new child in its place within 2 s (polled every 20 ms) */
  for (int i = 0; i < 100 && !back; i++) {
    usleep(20 * 1000);
    n = it_children_of(it_server_pid(srv), after, 8);
    back = n == 3 && !contains(after, n, victim);
  }
  cr_expect(back, "the killed instance was not replaced within 2 s");
  cr_assert(it_server_wait_log(srv, "killed by signal 9", WAIT_MS));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "60"),
            "not all 60 jobs ended SUCCESS");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 60);
  cr_expect(it_sql_becomes("SELECT max(restarts) FROM mqproc_workers", "1"),
            "the workers row of the new instance does not count the restart");
  /* the new instance's row says 'starting' until it is connected (then it beats at once) */
  cr_expect(it_sql_becomes("SELECT count(DISTINCT worker_id) FROM mqproc_workers"
                           " WHERE state IN ('running', 'dead')",
                           "4"),
            "3 instances and the killed one; the rows: %s",
            it_sql(it_q("SELECT string_agg(worker_id || ' ' || state || ' r' || restarts, ', ')"
                        " FROM mqproc_workers",
                        "SELECT group_concat(worker_id || ' ' || state || ' r' || restarts, ', ')"
                        " FROM mqproc_workers"),
                   0));
  it_server_stop(srv);
  /* the victim's row keeps 'running' unless a server took a job over from it ('dead') */
  cr_expect_eq(
      it_sql_long(
          it_fmt("SELECT count(*) FROM mqproc_workers WHERE state = 'running' AND pid <> %d",
                 (int)victim),
          0),
      0, "every instance stopped with the supervisor; the rows: %s (victim %d)",
      it_sql(it_q("SELECT string_agg(worker_id || ' ' || state || ' ' || coalesce(note, '')"
                  ", ', ') FROM mqproc_workers",
                  "SELECT group_concat(worker_id || ' ' || state || ' ' || coalesce(note, '')"
                  ", ', ') FROM mqproc_workers"),
             0),
      (int)victim);
}

Test(fleet, a_crash_looping_instance_is_restarted_ever_more_slowly) {
  char *proc = it_name("loop");
  const char *a[] = {"--max-priority", "5", NULL},
             *b[] = {"--max-priority", "9", "--instances", "2", NULL};
  it_server_t *first, *sup;
  if (it_queue_is_dir())
    cr_skip_test("the crash loop comes from RabbitMQ's x-max-priority");
  first = it_server_start(proc, NULL, a, NULL);
  /* every instance of the second dies at once: the queue exists with another priority */
  sup = it_server_spawn(proc, NULL, b, NULL);
  cr_expect(it_server_wait_log(sup, "restart 1 in 1000 ms", WAIT_MS));
  cr_expect(it_server_wait_log(sup, "restart 2 in 2000 ms", WAIT_MS));
  cr_expect(it_server_wait_log(sup, "restart 3 in 4000 ms", WAIT_MS));
  it_server_stop(sup);
  it_server_stop(first);
}

Test(fleet, max_jobs_per_child_recycles_a_server_between_jobs) {
  char *proc = it_name("recycle"), *out;
  const char *extra[] = {"--instances", "2", "--max-jobs-per-child", "4", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "rc", "--count", "20", "--wait", NULL),
               0);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), 20);
  cr_expect_geq(it_sql_long("SELECT count(DISTINCT worker_id) FROM mqproc_jobs", 0), 5,
                "20 jobs at most 4 per server: at least 5 servers");
  cr_expect_leq(it_sql_long("SELECT max(n) FROM (SELECT count(*) AS n FROM mqproc_jobs"
                            " GROUP BY worker_id) c",
                            0),
                4);
  cr_expect(it_server_count_log(srv, "recycled after --max-jobs-per-child") >= 3);
  it_server_stop(srv);
}

/* An idle server refreshes its workers row with its 10 s tick and says so (interval_ms, by
 * which `workers` and the dead-holder rule judge it); work brings the 2 s refresh back at
 * once, the row saying that too, and the idle interval after it. */
Test(fleet, an_idle_servers_row_says_its_longer_interval_and_work_shortens_it_at_once) {
  char *proc = it_name("idl"), *gate = it_fmt("%s/idl-gate", it_tmpdir()), *out;
  char *interval =
      it_fmt("SELECT interval_ms FROM mqproc_workers WHERE processor_name = '%s'", proc);
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  cr_assert(it_sql_becomes(interval, "10000"), "idle: the row says the idle interval");
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "idl-1", NULL),
               0);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'idl-1'", "RUNNING"));
  cr_expect(it_sql_becomes(interval, "2000"), "busy: the row says the busy interval");
  it_open_gate(gate);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'idl-1'", "SUCCESS"));
  cr_expect(it_sql_becomes(interval, "10000"), "idle again");
  it_server_stop(srv);
}
