/* Integration: a job running for 40 s (eight heartbeat intervals) with 5 s AMQP
 * heartbeats keeps its connection (the loop services heartbeats while the job runs), runs
 * once, is acked once. A server that stopped servicing heartbeats would be dropped by the broker
 * after about 10 s, its delivery requeued and run again: the marker would show it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

TestSuite(heartbeat, .fini = it_cleanup);

Test(heartbeat, a_job_of_eight_heartbeat_intervals_keeps_its_connection) {
  char *proc = it_name("long"), *results = it_name("long-result");
  char *marker, *env_marker, extra[256], *body;
  const char *args[] = {"--heartbeat=5", NULL};
  const char *envp[3];
  it_server_t *srv;
  it_msg_t m;
  long ready, unacked;
  marker = it_fmt("%s/marker", it_tmpdir());
  env_marker = it_fmt("PROC_MARKER=%s", marker);
  envp[0] = env_marker;
  envp[1] = "PROC_SLEEP=40";
  envp[2] = NULL;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), args, envp);
  snprintf(extra, sizeof(extra), "{\"result_queue_name\": \"%s\"}", results);
  body = it_job_json(proc, "long-1", extra);
  it_publish(proc, body);
  cr_assert(it_server_wait_log(srv, "job long-1: attempt 1 try 1 started", 30000));
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(unacked, 1, "the delivery is held unacked while the job runs");
  cr_assert(it_get(results, 120000, &m), "no result within 2 minutes");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_eq(it_server_count_log(srv, "connection lost"), 0, "the connection never dropped");
  cr_expect_eq(it_file_lines(marker), 1, "the job ran once");
  cr_expect_geq(it_sql_long("SELECT exec_time_ms FROM mqproc_jobs WHERE job_id = 'long-1'", 0),
                40000);
  cr_expect_eq(it_sql_long("SELECT deliveries FROM mqproc_jobs WHERE job_id = 'long-1'", 0), 1);
  it_server_stop(srv);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0, "acked, nothing left");
}
