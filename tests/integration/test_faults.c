/* Integration, real faults: broker restart, database restart, kill -9, SIGSTOP past the
 * lease, and a job longer than RabbitMQ's consumer_timeout.
 *
 * These tests stop and start servers, so they run on their own RabbitMQ and PostgreSQL
 * (build/services-faults, started by a ctest fixture with consumer_timeout = 60 s and
 * channel_tick_interval = 1 s) and one at a time (--jobs=1). */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 60000

TestSuite(faults, .fini = it_cleanup);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The environment for proc.sh: it appends to marker, works sleep_s seconds, then (gate
 * not NULL) works on until the file gate exists. Fills envp (4 slots) and returns it. */
static const char **proc_env(const char *envp[4], const char *marker, const char *sleep_s,
                             const char *gate) {
  envp[0] = it_fmt("PROC_MARKER=%s", marker);
  envp[1] = it_fmt("PROC_SLEEP=%s", sleep_s);
  envp[2] = gate != NULL ? it_fmt("PROC_GATE=%s", gate) : NULL;
  envp[3] = NULL;
  return envp;
}

static void expect_one_success(const char *job, const char *results) {
  it_msg_t m;
  long ready, unacked;
  cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", job);
  cr_expect(strstr(m.body, job) != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = $1", 1, job), "SUCCESS");
  it_queue_counts(results, &ready, &unacked);
  cr_expect_eq(ready, 0, "exactly one result message for %s", job);
}

Test(faults, broker_restart_during_a_job) {
  char *proc = it_name("brk"), *results = it_name("brk-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra[] = {"--heartbeat=5", NULL}, *envp[4];
  it_server_t *srv;
  long ready, unacked;
  double back;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, proc_env(envp, marker, "0", gate));
  it_publish(proc, it_job_json(proc, "brk-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job brk-1: attempt 1 try 1 started", WAIT_MS));
  it_services("rabbitmq-stop");
  cr_assert(it_server_wait_log(srv, "broker connection lost", WAIT_MS));
  it_open_gate(gate); /* the job ends while the broker is away */
  it_services("rabbitmq-start");
  back = now_s();
  cr_assert(it_server_wait_count(srv, "consuming from queue", 2, WAIT_MS));
  /* the goal is 5 s (reconnect backoff capped at 3 s); a loaded CI machine gets slack */
  cr_log_info("consuming again %.2f s after the broker's return", now_s() - back);
  cr_expect_lt(now_s() - back, 10.0, "consuming again within seconds of the broker's return");
  expect_one_success("brk-1", results);
  cr_expect_eq(it_file_lines(marker), 1, "the job ran once across the outage");
  it_server_stop(srv);

  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0, "the redelivered copy was settled");
}

Test(faults, database_restart_during_a_job) {
  char *proc = it_name("db"), *results = it_name("db-result"), *results2 = it_name("db-result2");
  char *marker = it_fmt("%s/marker", it_tmpdir()), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *envp[4];
  it_server_t *srv;
  long ready, unacked;
  it_declare(results);
  it_declare(results2);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, proc_env(envp, marker, "0", gate));
  it_publish(proc, it_job_json(proc, "db-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job db-1: attempt 1 try 1 started", WAIT_MS));
  it_services("pg-stop");
  /* the job ends while the database is away; a new job arrives meanwhile */
  it_open_gate(gate);
  cr_assert(it_server_wait_log(srv, "job store unavailable", WAIT_MS));
  it_publish(proc, it_job_json(proc, "db-2", it_fmt("{\"result_queue_name\": \"%s\"}", results2)));
  cr_assert(it_server_wait_log(srv, "not consuming", WAIT_MS));
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready, 1, "the new job waits in the broker while the database is away");
  cr_expect_eq(unacked, 1, "the finished job's delivery is held, not acked, until recorded");
  it_services("pg-start");
  cr_assert(it_server_wait_log(srv, "consuming again", WAIT_MS));
  expect_one_success("db-1", results);
  expect_one_success("db-2", results2);
  cr_expect_eq(it_file_lines(marker), 2, "each job ran once");
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'db-1'", 0), 1);
  it_server_stop(srv);
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0);
}

/* /readyz asks the database on every call: the first call after it stops says 503 with
 * the reason, the first call after it is back says 200 (each answered within 0.9 s). */
Test(faults, readyz_flips_when_the_database_stops_and_returns) {
  char *proc = it_name("rdydb"), *body;
  const char *extra[] = {"--http", "127.0.0.1:0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  int port = it_http_port(srv);
  cr_expect_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  it_services("pg-stop");
  cr_expect_eq(it_http_get(port, "/readyz", &body), 503, "%s", body);
  cr_expect(strstr(body, "database") != NULL, "the reason: %s", body);
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200, "the loop still answers");
  cr_expect_eq(it_http_get(port, "/", &body), 503, "the page says the database is away");
  cr_expect(strstr(body, "not reachable") != NULL || strstr(body, "query failed") != NULL, "%s",
            body);
  it_services("pg-start");
  cr_expect_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  it_server_stop(srv);
}

Test(faults, kill_9_mid_job_another_server_finishes_it) {
  char *proc = it_name("kill"), *results = it_name("kill-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *extra_a[] = {"--lease=3", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=3", "--worker-id=B", NULL};
  const char *envp[4];
  it_server_t *a, *b;
  double killed;
  it_declare(results);
  /* A's try outlasts anything the test does before the kill; B's is short */
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, proc_env(envp, marker, "120", NULL));
  it_publish(proc, it_job_json(proc, "kill-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(a, "job kill-1: attempt 1 try 1 started", WAIT_MS));
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, proc_env(envp, marker, "1", NULL));
  it_server_signal(a, SIGKILL);
  killed = now_s();
  cr_assert_neq(it_server_wait_exit(a, WAIT_MS), -1);
  cr_assert(it_server_wait_log(b, "job kill-1: claimed, attempt 2", WAIT_MS));
  /* the lease (3 s), B's jittered hold of the redelivered copy (<= 1.25 leases), slack */
  cr_log_info("taken over %.2f s after the kill", now_s() - killed);
  cr_expect_lt(now_s() - killed, 3 * 1.25 + 5, "taken over within about one lease");
  expect_one_success("kill-1", results);
  cr_expect_str_eq(it_sql("SELECT worker_id FROM mqproc_jobs WHERE job_id = 'kill-1'", 0), "B");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_all_tries WHERE job_id = 'kill-1' AND "
                           "ok",
                           0),
               1, "one successful run");
  it_server_stop(a);
  it_server_stop(b);
}

Test(faults, a_server_frozen_past_its_lease_is_fenced_when_it_wakes) {
  char *proc = it_name("stop"), *results = it_name("stop-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *extra_a[] = {"--lease=3", "--heartbeat=2", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=3", "--heartbeat=2", "--worker-id=B", NULL};
  const char *envp[4];
  it_server_t *a, *b;
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, proc_env(envp, marker, "2", NULL));
  it_publish(proc, it_job_json(proc, "stop-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(a, "job stop-1: attempt 1 try 1 started", WAIT_MS));
  it_server_signal(a, SIGSTOP); /* its processor runs on and ends; A cannot see it */
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, proc_env(envp, marker, "2", NULL));
  /* the broker drops A's silent connection, B gets the job once A's lease expired */
  cr_assert(it_server_wait_log(b, "job stop-1: claimed, attempt 2", WAIT_MS));
  expect_one_success("stop-1", results);
  it_server_signal(a, SIGCONT);
  cr_assert(it_server_wait_log(a, "attempt 1 was fenced off by a newer attempt", WAIT_MS));
  cr_expect_str_eq(it_sql("SELECT worker_id FROM mqproc_jobs WHERE job_id = 'stop-1'", 0), "B");
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'stop-1'", 0), 2);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_job_tries WHERE job_id = 'stop-1' "
                           "AND attempt = 1 AND ended_at IS NOT NULL",
                           0),
               0, "the zombie recorded nothing");
  it_server_stop(a);
  it_server_stop(b);
  {
    long ready, unacked;
    it_queue_counts(results, &ready, &unacked);
    cr_expect_eq(ready, 0, "the zombie published nothing");
  }
}

Test(faults, a_job_longer_than_consumer_timeout_runs_once) {
  char *proc = it_name("ct"), *results = it_name("ct-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *extra[] = {"--ack-after=20", "--heartbeat=10", NULL}, *envp[4];
  it_server_t *srv;
  long ready, unacked;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, proc_env(envp, marker, "90", NULL));
  it_publish(proc, it_job_json(proc, "ct-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job ct-1: still running after 20 s; delivery acked", WAIT_MS));
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 0, "the broker holds nothing of the running job");
  cr_assert(it_server_wait_log(srv, "job ct-1: SUCCESS", 240000));
  expect_one_success("ct-1", results);
  cr_expect_eq(it_server_count_log(srv, "connection lost"), 0,
               "consumer_timeout (60 s) never closed the channel");
  cr_expect_eq(it_file_lines(marker), 1, "ran once");
  cr_expect_eq(it_sql_long("SELECT deliveries FROM mqproc_jobs WHERE job_id = 'ct-1'", 0), 1);
  it_server_stop(srv);
}

Test(faults, an_early_acked_result_waits_for_the_broker) {
  char *proc = it_name("ackbrk"), *results = it_name("ackbrk-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra[] = {"--ack-after=1", NULL}, *envp[4];
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, proc_env(envp, marker, "0", gate));
  it_publish(proc,
             it_job_json(proc, "ackbrk-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job ackbrk-1: still running after 1 s", WAIT_MS));
  it_services("rabbitmq-stop");
  it_open_gate(gate);
  cr_assert(it_server_wait_log(srv, "job ackbrk-1: SUCCESS", WAIT_MS), "ends while away");
  it_services("rabbitmq-start");
  expect_one_success("ackbrk-1", results); /* no redelivery can bring it: the server sent it */
  it_server_stop(srv);
  cr_expect_str_eq(
      it_sql("SELECT result_published::text FROM mqproc_jobs WHERE job_id = 'ackbrk-1'", 0),
      "true");
  cr_expect_eq(it_file_lines(marker), 1);
}

Test(faults, a_database_outage_longer_than_the_lease_hands_no_live_job_over) {
  char *proc = it_name("dblease"), *results = it_name("dblease-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra_a[] = {"--lease=6", "--ack-after=1", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=6", "--ack-after=1", "--worker-id=B", NULL};
  const char *extra_c[] = {"--lease=6", "--ack-after=1", "--worker-id=C", NULL};
  const char *envp[4];
  it_server_t *a, *b, *c;
  it_declare(results);
  proc_env(envp, marker, "0", gate); /* the job runs until the test opens the gate */
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, envp);
  it_publish(proc, it_job_json(proc, "dbl-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(a, "job dbl-1: still running after 1 s", WAIT_MS));
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, envp);
  it_services("pg-stop");
  /* renewals fail for longer than the lease: due 2 s after the last renewal, retried every
   * second, so the 7th failure comes about 8 s after it, when the 6 s lease has run out */
  cr_assert(it_server_wait_count(a, "lease renewal failed", 7, WAIT_MS));
  it_services("pg-start");
  /* C never saw the outage: the database's own start time keeps it from judging A */
  c = it_server_start(proc, it_proc("proc.sh"), extra_c, envp);
  cr_assert(it_server_wait_log(a, "job store reachable again", WAIT_MS));
  it_open_gate(gate);
  expect_one_success("dbl-1", results);
  cr_expect_eq(it_server_count_log(b, "republished"), 0, "B (idle through it) took no live job");
  cr_expect_eq(it_server_count_log(c, "republished"), 0, "C (started after it) took no live job");
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'dbl-1'", 0), 1);
  cr_expect_eq(it_file_lines(marker), 1, "ran once");
  it_server_stop(a);
  it_server_stop(b);
  it_server_stop(c);
}

Test(faults, an_early_acked_outcome_left_unsent_at_shutdown_is_sent_by_another_server) {
  char *proc = it_name("unsent"), *results = it_name("unsent-result");
  char *marker = it_fmt("%s/marker", it_tmpdir()), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra_a[] = {"--lease=3", "--ack-after=1", "--worker-id=A", NULL};
  const char *extra_b[] = {"--lease=3", "--worker-id=B", NULL};
  const char *envp[4];
  it_server_t *a, *b;
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra_a, proc_env(envp, marker, "0", gate));
  it_publish(proc,
             it_job_json(proc, "unsent-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(a, "job unsent-1: still running after 1 s", WAIT_MS));
  it_services("rabbitmq-stop");
  it_open_gate(gate);
  cr_assert(it_server_wait_log(a, "job unsent-1: broker away", WAIT_MS));
  it_server_signal(a, SIGTERM);
  cr_assert(it_server_wait_log(a, "stopping; no new jobs", WAIT_MS));
  it_server_signal(a, SIGTERM); /* no grace: A gives up waiting for the broker */
  cr_assert_neq(it_server_wait_exit(a, WAIT_MS), -1);
  cr_expect_str_eq(
      it_sql("SELECT state || ' ' || (SELECT count(*) FROM mqproc_outbox o"
             " WHERE o.job_id = j.job_id) FROM mqproc_jobs j WHERE job_id = 'unsent-1'",
             0),
      "SUCCESS 1", "A left the outbox mark for the outbox sweep");
  it_services("rabbitmq-start");
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, proc_env(envp, marker, "0", NULL));
  cr_assert(
      it_server_wait_log(b, "job unsent-1: its holder died before sending its outcome", WAIT_MS));
  expect_one_success("unsent-1", results);
  it_server_stop(a);
  it_server_stop(b);
  cr_expect_eq(it_file_lines(marker), 1, "ran once");
}

/* A broker that stops reading (RabbitMQ under a disk alarm blocks publishers) never blocks
 * the server's loop: the client announces connection.blocked, a dead letter waits for the
 * unblock, and SIGTERM, lease renewals and reaping go on. */
static void alarm_off(void) {
  it_rabbitmqctl("set_disk_free_limit 50000000"); /* the broker's default: later tests publish */
  it_cleanup();
}

Test(faults, a_broker_under_a_disk_alarm_never_blocks_the_loop, .fini = alarm_off) {
  char *proc = it_name("alarm"), *results = it_name("alarm-result");
  const char *extra[] = {"--max-message-size=1048576", "--shutdown-grace=1", NULL};
  size_t len = 2 * 1024 * 1024;
  char *body = malloc(len);
  it_server_t *a, *b;
  it_msg_t m;
  int st;
  memset(body, 'x', len); /* too large: its dead letter (a 2 MiB publish) is what waits */
  it_declare(proc);
  it_declare(results);
  it_publish_len(proc, body, len);
  free(body);
  it_rabbitmqctl("set_disk_free_limit 100000GB");
  a = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  /* RabbitMQ blocks a connection once it publishes under an alarm: the dead letter does
   * that; its confirm then waits for the unblock, as any further publish would */
  cr_assert(it_server_wait_log(a, "the broker blocked publishing", WAIT_MS));
  it_server_signal(a, SIGTERM); /* handled: the loop is not stuck in a write */
  st = it_server_wait_exit(a, 20000);
  cr_expect(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "stopped: status %d", st);
  cr_expect(it_server_wait_log(a, "stopping while the broker blocks publishing; requeued", 1000));
  cr_expect_eq(it_server_connections(a), 1);
  it_server_stop(a);
  it_rabbitmqctl("set_disk_free_limit 50000000");
  b = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  cr_assert(it_get(it_fmt("%s.dead", proc), WAIT_MS, &m), "the held message was lost");
  cr_expect(strstr(m.reason, "exceeds the limit of 1048576 bytes") != NULL, "%s", m.reason);
  cr_expect_eq(m.len, len);
  it_msg_free(&m);
  it_publish(proc,
             it_job_json(proc, "alarm-ok", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  expect_one_success("alarm-ok", results);
  cr_expect_eq(it_server_connections(b), 1);
  it_server_stop(b);
}

/* After a broker restart while a command runs, the loop sleeps: the old socket's watch is
 * removed before the socket is closed, and no child holds a copy that would keep it
 * readable (it used to spin at 100 % CPU until the job ended). */
Test(faults, a_broker_restart_while_a_command_runs_leaves_the_loop_idle) {
  char *proc = it_name("spin"), *results = it_name("spin-result");
  char *marker = it_fmt("%s/marker", it_tmpdir()), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *extra[] = {"--heartbeat=5", NULL}, *envp[4];
  it_server_t *srv;
  pid_t sup;
  double cpu;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, proc_env(envp, marker, "0", gate));
  it_publish(proc, it_job_json(proc, "spin-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job spin-1: attempt 1 try 1 started", WAIT_MS));
  sup = it_supervisor_of(it_server_pid(srv));
  cr_assert_gt(sup, 0);
  /* the supervisor closes what it got from the spawn helper right after its fork, which
   * may be just after the server logged the start: awaited, not sampled once */
  for (int i = 0; i < 200 && it_count_sockets(sup) != 0; i++)
    usleep(10 * 1000);
  cr_expect_eq(it_count_sockets(sup), 0, "the try's supervisor holds the server's sockets");
  cr_expect_eq(it_count_sockets(it_child_of(it_server_pid(srv))), 2,
               "the spawn helper holds more than its two links to the server");
  it_services("rabbitmq-stop");
  cr_assert(it_server_wait_log(srv, "broker connection lost", WAIT_MS));
  it_services("rabbitmq-start");
  cr_assert(it_server_wait_log(srv, "connected to the broker (connection 2)", WAIT_MS));
  cpu = it_cpu_seconds(it_server_pid(srv));
  usleep(3000000); /* the measuring window itself, not a wait for an event */
  cpu = it_cpu_seconds(it_server_pid(srv)) - cpu;
  cr_log_info("CPU while a job ran after the reconnect: %.2f s in 3 s", cpu);
  cr_expect_lt(cpu, 1.0, "the loop spun: %.2f CPU seconds in 3 s", cpu);
  it_open_gate(gate);
  expect_one_success("spin-1", results);
  it_server_stop(srv);
}
