/* Integration: SIGTERM/SIGINT — stop consuming at once, let running jobs finish within the
 * grace period, then stop and requeue them; exit 0; no row left RUNNING. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(shutdown, .fini = it_cleanup);

static int exited_0(int st) {
  return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

Test(shutdown, sigterm_lets_the_running_job_finish_and_takes_nothing_new) {
  char *proc = it_name("term"), *results = it_name("term-result");
  const char *envp[] = {"PROC_SLEEP=2", NULL};
  it_server_t *srv;
  long ready, unacked;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  it_publish(proc, it_job_json(proc, "term-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job term-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_assert(it_server_wait_log(srv, "stopping; no new jobs", WAIT_MS));
  it_publish(proc, it_job_json(proc, "term-2", NULL)); /* must not be taken */
  cr_assert(exited_0(it_server_wait_exit(srv, WAIT_MS)), "exit 0 after the job finished");
  cr_assert(it_get(results, WAIT_MS, &m), "term-1 finished and was reported");
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'term-1'", 0), "SUCCESS");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'term-2'", 0), 0);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1, "term-2 waits in the queue");
  cr_expect_eq(unacked, 0);
  it_server_stop(srv);
}

Test(shutdown, a_job_outlasting_the_grace_is_stopped_and_requeued) {
  char *proc = it_name("grace");
  const char *envp[] = {"PROC_SLEEP=300", NULL};
  const char *extra[] = {"--shutdown-grace=2", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  long ready, unacked;
  it_publish(proc, it_job_json(proc, "grace-1", NULL));
  cr_assert(it_server_wait_log(srv, "job grace-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(srv, SIGINT);
  cr_assert(exited_0(it_server_wait_exit(srv, WAIT_MS)), "exit 0 after the grace");
  cr_expect_eq(it_server_count_log(srv, "shutdown grace of 2 s over"), 1);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'grace-1'", 0), "QUEUED",
                   "released, not left RUNNING");
  cr_expect_eq(it_sql_long("SELECT requeues FROM mqproc_jobs WHERE job_id = 'grace-1'", 0), 0,
               "a release is not a failed attempt");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1, "its message is back in the queue");
  it_server_stop(srv);
}

Test(shutdown, a_second_signal_stops_running_jobs_at_once) {
  char *proc = it_name("twice");
  const char *envp[] = {"PROC_SLEEP=300", NULL};
  const char *extra[] = {"--shutdown-grace=600", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  long ready, unacked;
  it_publish(proc, it_job_json(proc, "twice-1", NULL));
  cr_assert(it_server_wait_log(srv, "job twice-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_assert(it_server_wait_log(srv, "stopping; no new jobs", WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_assert(exited_0(it_server_wait_exit(srv, WAIT_MS)),
            "exit 0 at once, not after the 600 s grace");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'RUNNING'", 0), 0);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1);
  it_server_stop(srv);
}

Test(shutdown, a_c_processor_outlasting_the_grace_is_released_and_the_server_exits) {
  char *proc = it_name("cgrace");
  const char *extra[] = {"--shutdown-grace=1", NULL};
  it_server_t *srv = it_server_start(proc, NULL, extra, NULL); /* the example C processor */
  long ready, unacked;
  it_publish(proc, it_job_json(proc, "cgrace-1", "{\"parameters\": {\"sleep_ms\": 600000}}"));
  cr_assert(it_server_wait_log(srv, "job cgrace-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_assert(exited_0(it_server_wait_exit(srv, WAIT_MS)), "exit 0 although the thread runs on");
  cr_expect_eq(it_server_count_log(srv, "were abandoned"), 1);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'cgrace-1'", 0), "QUEUED");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1, "its message is back in the queue");
  it_server_stop(srv);
}
