/* Integration: the table queues (docs/table-queue.md, store/queue.c): a database as the
 * queue, PostgreSQL (MQPROC_TEST_QUEUE=pg, the default of this suite) or SQLite
 * (MQPROC_TEST_QUEUE=sqlite), in the job store's own database or another one
 * (tests/CMakeLists.txt runs the pairs). Publish, consume and ack; the queue's order;
 * several servers on one queue; a kill -9 of a holder (its messages come back at their
 * deadline and the claim takes the job over); a database restart (private services
 * only); producers without our code (mqproc_enqueue(), the documented INSERT); dead
 * letters and results as rows and `mqproc results`; an idle server's looks; the take's
 * plan on a large table. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_int.h"
#include "store/pg/int.h"
#include "store/sqlite/int.h"
#include "store/store.h"

#define WAIT_MS 60000

/* A table queue whatever the pair's queue is not (this suite is about it). */
static void table_queue(void) {
  if (!it_queue_is_table())
    setenv("MQPROC_TEST_QUEUE", "pg", 1);
}

TestSuite(table_queue, .init = table_queue, .fini = it_cleanup, .timeout = 300);

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int queue_sqlite(void) {
  return strcmp(getenv("MQPROC_TEST_QUEUE"), "sqlite") == 0;
}

/* The messages of queue in the table, ready and held together. */
static long rows_of(const char *queue) {
  char *n = it_tq_sql("SELECT count(*) FROM mqproc_messages WHERE queue = $1",
                      "SELECT count(*) FROM mqproc_messages WHERE queue = ?1", 1, queue);
  return n != NULL ? atol(n) : -1;
}

/* Waits until queue's rows are gone (an ack trails the result it follows). */
static int rows_become_none(const char *queue) {
  for (int i = 0; i < WAIT_MS / 50; i++) {
    if (rows_of(queue) == 0)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

/* ---- publish, consume, ack --------------------------------------------------------- */

Test(table_queue, jobs_published_as_rows_run_once_and_leave_only_their_results) {
  char *proc = it_name("tq"), *results = it_name("tq-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  for (int i = 0; i < 20; i++)
    it_publish(proc, it_job_json(proc, it_fmt("tq-%02d", i),
                                 it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  for (int i = 0; i < 20; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d results", i);
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    cr_expect(strncmp(m.message_id, "tq-", 3) == 0, "a result's message id is its job's: %s",
              m.message_id);
    it_msg_free(&m);
  }
  cr_expect(rows_become_none(proc), "every job's message was acked: deleted");
  it_server_stop(srv);
  cr_expect_eq(it_file_lines(marker), 20, "each job ran once");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS' AND"
                           " attempt = 1 AND result_published",
                           0),
               20);
  cr_expect_eq(rows_of(results), 0, "no extra result");
}

Test(table_queue, the_highest_priority_goes_first_then_the_oldest) {
  char *proc = it_name("prio"), *marker = it_fmt("%s/marker", it_tmpdir()), *lines;
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *extra[] = {"--prefetch=1", "--concurrency=1", NULL};
  static const struct {
    const char *id, *priority;
  } jobs[] = {
      {"p-low", "1"}, {"p-high-a", "9"}, {"p-mid", "5"}, {"p-high-b", "9"}, {"p-none", "0"}};
  it_server_t *srv;
  for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) /* all there before it looks */
    it_tq_sql("SELECT mqproc_enqueue($1, $2, $3::int)",
              "INSERT INTO mqproc_messages (queue, body, priority) VALUES (?1, ?2, ?3)", 3, proc,
              it_job_json(proc, jobs[i].id, NULL), jobs[i].priority);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "5"));
  it_server_stop(srv);
  lines = it_read_file(marker);
  cr_assert_not_null(lines);
  cr_expect_str_eq(lines, "p-high-a 1 1\np-high-b 1 1\np-mid 1 1\np-low 1 1\np-none 1 1\n",
                   "by priority, then by age");
}

Test(table_queue, two_servers_share_a_queue_and_run_each_job_once) {
  char *proc = it_name("pair"), *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=0.05", NULL};
  const char *extra[] = {"--concurrency=4", NULL};
  it_server_t *a = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_server_t *b = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  for (int i = 0; i < 60; i++)
    it_publish(proc, it_job_json(proc, it_fmt("pair-%02d", i), NULL));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "60"));
  cr_expect(rows_become_none(proc));
  cr_expect_gt(it_server_count_log(a, "SUCCESS"), 0, "both servers took jobs");
  cr_expect_gt(it_server_count_log(b, "SUCCESS"), 0, "both servers took jobs");
  it_server_stop(a);
  it_server_stop(b);
  cr_expect_eq(it_file_lines(marker), 60, "no job ran twice");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE attempt = 1", 0), 60);
}

/* ---- a dead holder ------------------------------------------------------------------ */

/* kill -9 of the server holding a job: its message stays held by it until its deadline
 * (--queue-visibility, no one extends it any more), then another server takes it and its
 * claim takes the job over (attempt 2); the job ends SUCCESS once, its message acked. */
Test(table_queue, a_killed_holders_messages_come_back_after_their_deadline) {
  char *proc = it_name("kill"), *gate = it_fmt("%s/gate", it_tmpdir());
  char *marker = it_fmt("%s/marker", it_tmpdir()), *holder;
  const char *env_a[] = {it_fmt("PROC_GATE=%s", gate), it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *env_b[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *extra_a[] = {"--queue-visibility=3", "--lease=3", "--worker-id=tq-A", NULL};
  const char *extra_b[] = {"--queue-visibility=3", "--lease=3", "--worker-id=tq-B", NULL};
  it_server_t *a = it_server_start(proc, it_proc("proc.sh"), extra_a, env_a), *b;
  it_publish(proc, it_job_json(proc, "victim", NULL));
  cr_assert(it_server_wait_log(a, "try 1 started", WAIT_MS));
  holder = it_tq_sql("SELECT consumer FROM mqproc_messages WHERE queue = $1",
                     "SELECT consumer FROM mqproc_messages WHERE queue = ?1", 1, proc);
  cr_expect_str_eq(holder != NULL ? holder : "(none)", "tq-A", "the running job's message is held");
  kill(it_supervisor_of(it_server_pid(a)), SIGKILL);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, 5000), -1);
  b = it_server_start(proc, it_proc("proc.sh"), extra_b, env_b);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'victim'", "SUCCESS"));
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'victim'", 0), 2,
               "taken over by a claim");
  cr_expect_str_eq(it_sql("SELECT worker_id FROM mqproc_jobs WHERE job_id = 'victim'", 0), "tq-B");
  cr_expect(rows_become_none(proc), "the message was acked by its new holder");
  it_open_gate(gate);
  it_server_stop(a);
  it_server_stop(b);
}

/* A server that comes back under its worker id gives back what it held at once (its
 * connect's reset), as a broker requeues a closed connection's deliveries. */
Test(table_queue, a_server_restarted_under_its_worker_id_takes_back_its_messages_at_once) {
  char *proc = it_name("again"), *gate = it_fmt("%s/gate", it_tmpdir());
  const char *env_a[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  const char *extra[] = {"--queue-visibility=600", "--lease=3", "--worker-id=tq-same", NULL};
  it_server_t *a = it_server_start(proc, it_proc("proc.sh"), extra, env_a), *b;
  it_publish(proc, it_job_json(proc, "again-1", NULL));
  cr_assert(it_server_wait_log(a, "try 1 started", WAIT_MS));
  kill(it_supervisor_of(it_server_pid(a)), SIGKILL);
  it_server_signal(a, SIGKILL);
  cr_assert_neq(it_server_wait_exit(a, 5000), -1);
  b = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'again-1'", "SUCCESS"),
            "not after the 600 s deadline: the reset gave it back");
  cr_expect(rows_become_none(proc));
  it_open_gate(gate);
  it_server_stop(a);
  it_server_stop(b);
}

/* ---- a database restart ------------------------------------------------------------- */

/* PostgreSQL stops mid-run and comes back: every job ends SUCCESS exactly once, none is
 * lost (a result sent twice has the same message id). It restarts the database, so it
 * runs only on private services (MQPROC_TEST_RESTARTS=1: tests/CMakeLists.txt's faults
 * fixture), never on the shared ones. */
Test(table_queue, a_database_restart_mid_run_loses_nothing_and_finishes_nothing_twice) {
  char *proc = it_name("restart"), *results = it_name("restart-result");
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), "PROC_SLEEP=0.2", NULL};
  const char *extra[] = {"--concurrency=2", "--lease=5", "--queue-visibility=5", NULL};
  it_server_t *srv;
  char *distinct;
  if (getenv("MQPROC_TEST_RESTARTS") == NULL || queue_sqlite() || it_store_is_sqlite())
    cr_skip_test("restarts PostgreSQL: private services only (MQPROC_TEST_RESTARTS=1)");
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  for (int i = 0; i < 40; i++)
    it_publish(proc, it_job_json(proc, it_fmt("rs-%02d", i),
                                 it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_count(srv, "SUCCESS", 5, WAIT_MS));
  it_tq_cleanup(); /* the harness's own connection would not survive it */
  it_services("pg-stop");
  cr_assert(it_server_wait_log(srv, "broker connection lost", WAIT_MS));
  it_services("pg-start");
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "40"));
  cr_expect(rows_become_none(proc));
  /* while it was away the server connected again with its backoff (250 ms doubling to
   * 3 s), not in a hot loop */
  cr_expect_lt(it_server_count_log(srv, "broker connection lost"), 10, "%d connections lost",
               it_server_count_log(srv, "broker connection lost"));
  it_server_stop(srv);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), 40);
  distinct = it_tq_sql("SELECT count(DISTINCT message_id) FROM mqproc_messages WHERE queue = $1",
                       "SELECT count(DISTINCT message_id) FROM mqproc_messages WHERE queue = ?1", 1,
                       results);
  cr_expect_str_eq(distinct, "40", "a result for every job (a copy has the same id)");
  cr_expect_geq(it_file_lines(marker), 40);
}

/* ---- producers without our code ----------------------------------------------------- */

/* PostgreSQL: SELECT mqproc_enqueue(queue, body, priority, message_id, content_type,
 * headers); SQLite: the INSERT docs/table-queue.md gives (times left to their defaults). */
Test(table_queue, a_producer_in_plain_sql_submits_jobs_with_their_priority_and_headers) {
  char *proc = it_name("sql"), *results = it_name("sql-result");
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  char *body = it_job_json(proc, "sql-1", it_fmt("{\"result_queue_name\": \"%s\"}", results));
  it_msg_t m;
  it_tq_sql("SELECT mqproc_enqueue($1, $2, 7, 'sql-1', 'application/json',"
            " '{\"tenant\": \"acme\"}'::jsonb)",
            "INSERT INTO mqproc_messages (queue, body, priority, message_id, headers)"
            " VALUES (?1, ?2, 7, 'sql-1', '{\"tenant\": \"acme\"}')",
            2, proc, body);
  cr_assert(it_get(results, WAIT_MS, &m), "no result (SQLite: found by the poll, within 1 s)");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
  cr_expect_eq(it_sql_long("SELECT priority FROM mqproc_jobs WHERE job_id = 'sql-1'", 0), 7);
  cr_expect(strstr(it_sql("SELECT headers FROM mqproc_jobs WHERE job_id = 'sql-1'", 0), "acme") !=
                NULL,
            "the headers reached the job row");
}

/* ---- dead letters and results are rows ---------------------------------------------- */

Test(table_queue, dead_letters_and_results_are_rows_of_their_queues) {
  char *proc = it_name("dl"), *results = it_name("dl-result"), *dead = it_fmt("%s.dead", proc);
  const char *envp[] = {"PROC_FAIL_MATCH=dl-bad", NULL};
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  char *out, *reason;
  json_t *arr;
  it_publish(proc, it_job_json(proc, "dl-bad", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  it_publish(proc, it_job_json(proc, "dl-ok", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state IN ('SUCCESS', 'FAILED')"
                           " AND result_published",
                           "2"));
  it_server_stop(srv);
  cr_expect_eq(rows_of(dead), 1, "the dead letter is a row of <proc>.dead");
  reason = it_tq_sql("SELECT headers->>'x-mqproc-reason' FROM mqproc_messages WHERE queue = $1",
                     "SELECT json_extract(headers, '$.\"x-mqproc-reason\"') FROM mqproc_messages"
                     " WHERE queue = ?1",
                     1, dead);
  cr_expect(reason != NULL && strstr(reason, "FAILED") != NULL, "reason: %s", reason);
  cr_expect_eq(rows_of(results), 2, "two results, rows of their queue");
  /* any client reads them: `mqproc results` takes them off the queue */
  cr_assert_eq(it_mq(&out, "results", results, "--peek", "--json", NULL), 0, "%s", out);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 2, "peeked: %s", out);
  json_decref(arr);
  cr_expect_eq(rows_of(results), 2, "a peek leaves them");
  cr_assert_eq(it_mq(&out, "results", results, "--json", NULL), 0, "%s", out);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 2, "%s", out);
  cr_expect(strstr(out, "\"state\\\":\\\"FAILED\\\"") != NULL || strstr(out, "FAILED") != NULL,
            "%s", out);
  json_decref(arr);
  cr_expect_eq(rows_of(results), 0, "taken off the queue");
  cr_assert_eq(it_mq(&out, "results", results, NULL), 0);
  cr_expect_str_eq(out, "", "nothing left");
}

/* ---- idle --------------------------------------------------------------------------- */

/* An idle server is told of new messages (a NOTIFY on its queue's channel, a notice-file
 * line), so its look at the queue is a backstop: about every 5 s, never a busy loop (its
 * takes, counted by their DEBUG lines, are at least 4.5 s apart); a job sent meanwhile
 * with mqproc_enqueue() or a notice is taken at once, not at the next look. */
Test(table_queue, an_idle_server_looks_only_every_five_seconds_and_is_woken_by_work) {
  char *proc = it_name("idle");
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  int base;
  double t0;
  cr_assert(it_server_wait_count(srv, "taking up to", 2, WAIT_MS), "the first look and a poll");
  base = it_server_count_log(srv, "taking up to");
  t0 = now_s();
  cr_assert(it_server_wait_count(srv, "taking up to", base + 1, WAIT_MS));
  cr_expect_geq(now_s() - t0, 4.4, "a look %.2f s after the last: polling too fast", now_s() - t0);
  t0 = now_s();
  it_publish(proc, it_job_json(proc, "idle-1", NULL));
  cr_assert(it_server_wait_log(srv, "job idle-1: SUCCESS", WAIT_MS));
  cr_expect_lt(now_s() - t0, 4.0, "the job waited %.2f s: for the poll, not woken", now_s() - t0);
  it_server_stop(srv);
}

/* ---- wakes: a channel per queue (PostgreSQL) ----------------------------------------- */

/* The next notification on c within ms (NULL: none came). */
static PGnotify *next_notify(PGconn *c, int ms) {
  PGnotify *n;
  for (double end = now_s() + ms / 1000.0; now_s() < end;) {
    fd_set fds;
    struct timeval tv = {0, 50 * 1000};
    cr_assert_eq(PQconsumeInput(c), 1, "%s", PQerrorMessage(c));
    if ((n = PQnotifies(c)) != NULL)
      return n;
    FD_ZERO(&fds);
    FD_SET(PQsocket(c), &fds);
    select(PQsocket(c) + 1, &fds, NULL, NULL, &tv);
  }
  return NULL;
}

static PGconn *pg_conn(void);
static void exec_ok(PGconn *c, const char *sql);

/* A queue's new messages are told on its own channel: the servers of other queues (and
 * their database sessions) are not woken by every result and every other queue's job. The
 * server's name for a channel and SQL's mqproc_queue_channel() agree. */
Test(table_queue, each_queue_is_told_on_its_own_channel_only) {
  char *proc = it_name("chan"), *results = it_name("chan-result"), *other = it_name("chan-x");
  const char *names[] = {proc, "ocrd-\xc3\xbc", "a queue with spaces", NULL};
  char mine[64], theirs[64], *sql_name;
  PGconn *c;
  PGnotify *n;
  it_server_t *srv;
  if (queue_sqlite())
    cr_skip_test("SQLite's wakes are lines of the notice file");
  c = pg_conn();
  for (int i = 0; names[i] != NULL; i++) {
    mqproc__pg_queue_channel(names[i], mine);
    sql_name = it_tq_sql("SELECT mqproc_queue_channel($1)", NULL, 1, names[i]);
    cr_expect_str_eq(sql_name, mine, "the channel of '%s'", names[i]);
  }
  mqproc__pg_queue_channel(results, mine);
  mqproc__pg_queue_channel(other, theirs);
  exec_ok(c, it_fmt("LISTEN %s", mine));
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  it_publish(proc, it_job_json(proc, "chan-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  n = next_notify(c, WAIT_MS);
  cr_assert_not_null(n, "no NOTIFY on the result queue's channel");
  cr_expect_str_eq(n->relname, mine);
  cr_expect_str_eq(n->extra, results, "the payload is the queue's name");
  PQfreemem(n);
  exec_ok(c, "UNLISTEN *");
  exec_ok(c, it_fmt("LISTEN %s", theirs));
  it_publish(proc, it_job_json(proc, "chan-2", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "2"));
  n = next_notify(c, 500);
  cr_expect_null(n, "a listener of another queue was told: %s", n != NULL ? n->extra : "");
  if (n != NULL)
    PQfreemem(n);
  it_server_stop(srv);
  PQfinish(c);
}

/* ---- one transaction per job -------------------------------------------------------- */

/* Whether the queue is the job store's own database (the server then shares its rounds). */
static int shared(void) {
  return strcmp(it_amqp_url(), it_db_url()) == 0;
}

/* Where queue and store are one database, a job's success, the ack of its message and its
 * result are one write: no separate publish waits for a confirm, no outbox mark is left
 * to clear (a server killed in between leaves the job either running, its message held,
 * or done with its result and ack: nothing to reconcile). */
Test(table_queue, the_success_the_ack_and_the_result_are_one_write) {
  char *proc = it_name("onew"), *results = it_name("onew-result"), *attempt;
  it_server_t *srv;
  it_msg_t m;
  if (!shared())
    cr_skip_test("queue and store in two databases: the ack and the result follow the success");
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  it_publish(proc, it_job_json(proc, "onew-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job onew-1: SUCCESS", WAIT_MS));
  cr_expect_eq(rows_of(proc), 0, "acked when the success committed");
  cr_expect_eq(rows_of(results), 1, "its result is there with it");
  attempt = it_tq_sql("SELECT headers->>'x-mqproc-attempt' FROM mqproc_messages WHERE queue = $1",
                      "SELECT json_extract(headers, '$.\"x-mqproc-attempt\"') FROM mqproc_messages"
                      " WHERE queue = ?1",
                      1, results);
  cr_expect_str_eq(attempt != NULL ? attempt : "(none)", "1");
  cr_assert(it_get(results, WAIT_MS, &m));
  cr_expect_str_eq(m.message_id, "onew-1");
  it_msg_free(&m);
  cr_expect_str_eq(it_sql(it_q("SELECT CASE WHEN result_published THEN 'yes' ELSE 'no' END FROM"
                               " mqproc_jobs WHERE job_id = 'onew-1'",
                               "SELECT CASE WHEN result_published THEN 'yes' ELSE 'no' END FROM"
                               " mqproc_jobs WHERE job_id = 'onew-1'"),
                          0),
                   "yes");
  it_server_signal(srv, SIGTERM); /* all it wrote, then its log */
  cr_assert_neq(it_server_wait_exit(srv, WAIT_MS), -1);
  cr_expect_eq(it_server_count_log(srv, "result confirmed in"), 0, "no publish of its own");
  cr_expect_eq(it_server_count_log(srv, "outbox done"), 0, "no outbox mark to clear");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_outbox", 0), 0);
  it_server_stop(srv);
}

/* At prefetch 1, the take of the next message and the claim of its job share a
 * transaction (the round stays open for the claim): with the success, its ack and its
 * result in one write, a job costs one commit where queue and store are one database. */
Test(table_queue, the_claims_of_the_messages_taken_join_the_takes_transaction) {
  char *proc = it_name("join");
  const char *extra[] = {"--prefetch=1", "--concurrency=1", NULL};
  it_server_t *srv;
  int joined;
  if (!shared())
    cr_skip_test("queue and store in two databases: two transactions");
  for (int i = 0; i < 10; i++)
    it_publish(proc, it_job_json(proc, it_fmt("join-%d", i), NULL));
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "10"));
  joined = it_server_count_log(srv, "joined the open turn");
  cr_expect_geq(joined, 5, "the claims of %d of 10 takes joined their transaction", joined);
  it_server_stop(srv);
}

/* ---- the take's plan ---------------------------------------------------------------- */

static PGconn *pg_conn(void) {
  PGconn *c = PQconnectdb(it_tq_url());
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  return c;
}

static void exec_ok(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  ExecStatusType st = PQresultStatus(r);
  cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
            PQresultErrorMessage(r));
  PQclear(r);
}

static char *pg_plan(PGconn *c, const char *sql) {
  PGresult *r = PQexec(c, sql);
  char *out = it_fmt("%s", "");
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(r));
  for (int i = 0; i < PQntuples(r); i++)
    out = it_fmt("%s%s\n", out, PQgetvalue(r, i, 0));
  PQclear(r);
  return out;
}

static void mq_now(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_int64(ctx, (sqlite3_int64)time(NULL) * 1000);
}

/* A take finds its messages by key ranges (the ready index, the held index by deadline,
 * the primary key), however many messages other servers hold: the held ones are not in
 * the ready index at all. PostgreSQL: the prepared statement's generic and custom plans,
 * and with ANALYZE the rows it looked at; SQLite: the query plan of both statements. */
Test(table_queue, a_take_is_a_key_lookup_when_many_messages_are_held) {
  if (!queue_sqlite()) {
    PGconn *c = pg_conn();
    char *p;
    exec_ok(c, "INSERT INTO mqproc_messages (queue, priority, body, consumer, deliveries,"
               " visible_at) SELECT 'q' || (i % 4), i % 3, '\\x7b7d'::bytea,"
               " CASE WHEN i % 10 < 9 THEN 'w' || (i % 7) END, 1,"
               " CASE WHEN i % 10 < 9 THEN now() + interval '1 hour' ELSE now() END"
               " FROM generate_series(1, 200000) i");
    exec_ok(c, "ANALYZE mqproc_messages");
    exec_ok(c, it_fmt("PREPARE take AS %s", mqproc__pg_stmt_sql(MQPROC__STORE_Q_TAKE, 0)));
    for (int mode = 0; mode < 2; mode++) {
      exec_ok(c, mode == 0 ? "SET plan_cache_mode = force_generic_plan"
                           : "SET plan_cache_mode = force_custom_plan");
      p = pg_plan(c, "EXPLAIN EXECUTE take('q1', 'me', 10, 30000, 4194304)");
      cr_expect(strstr(p, "Seq Scan") == NULL, "a scan:\n%s", p);
      cr_expect(strstr(p, "mqproc_messages_ready_idx") != NULL, "not the ready index:\n%s", p);
      cr_expect(strstr(p, "mqproc_messages_held_idx") != NULL, "not the held index:\n%s", p);
      cr_expect(strstr(p, "mqproc_messages_pkey") != NULL, "not by primary key:\n%s", p);
    }
    exec_ok(c, "BEGIN");
    p = pg_plan(
        c, "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE take('q1', 'me', 10, 30000, 4194304)");
    exec_ok(c, "ROLLBACK");
    cr_expect(strstr(p, "rows=10 ") != NULL || strstr(p, "rows=10)") != NULL, "%s", p);
    cr_expect(strstr(p, "Rows Removed by Filter") == NULL, "held rows were looked at:\n%s", p);
    PQfinish(c);
    return;
  }
  {
    sqlite3 *db;
    sqlite3_stmt *st;
    char *plan;
    cr_assert_eq(sqlite3_open(it_tq_url() + 9, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_create_function(db, "mq_now", 0, SQLITE_UTF8, NULL, mq_now, NULL, NULL),
                 SQLITE_OK); /* the servers' connections have it */
    cr_assert_eq(sqlite3_exec(db,
                              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                              " WHERE i < 50000) INSERT INTO mqproc_messages (queue, priority,"
                              " body, consumer, visible_at) SELECT 'q' || (i % 4), i % 3, x'7b7d',"
                              " CASE WHEN i % 10 < 9 THEN 'w' END, 0 FROM n;"
                              " ANALYZE;",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    for (int back = 0; back < 2; back++) {
      cr_assert_eq(sqlite3_prepare_v2(db,
                                      it_fmt("EXPLAIN QUERY PLAN %s", mqproc__sq_take_sql(back)),
                                      -1, &st, NULL),
                   SQLITE_OK, "%s", sqlite3_errmsg(db));
      plan = it_fmt("%s", "");
      while (sqlite3_step(st) == SQLITE_ROW)
        plan = it_fmt("%s%s\n", plan, (const char *)sqlite3_column_text(st, 3));
      sqlite3_finalize(st);
      cr_expect(strstr(plan, "SCAN mqproc_messages") == NULL, "a scan:\n%s", plan);
      cr_expect(strstr(plan, back ? "mqproc_messages_held_idx" : "mqproc_messages_ready_idx") !=
                    NULL,
                "%s", plan);
    }
    sqlite3_close(db);
  }
}
