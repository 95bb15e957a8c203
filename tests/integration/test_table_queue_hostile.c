/* Integration: a table queue's row is the same untrusted input as an AMQP message
 * (docs/table-queue.md, "What a producer may write"; issue 38). Each test writes one
 * hostile row straight into mqproc_messages with SQL, as a producer with INSERT rights
 * can, and shows that it is refused at its insert or taken (dead-lettered with its reason
 * when it is no job), and that an ordinary job sent after it still completes: one row
 * never stops a queue. PostgreSQL (MQPROC_TEST_QUEUE=pg, this suite's default) and SQLite
 * (MQPROC_TEST_QUEUE=sqlite); a finding of one database only is skipped on the other. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

static void table_queue(void) {
  if (!it_queue_is_table())
    setenv("MQPROC_TEST_QUEUE", "pg", 1);
}

TestSuite(tq_hostile, .init = table_queue, .fini = it_cleanup, .timeout = 240);

static int queue_sqlite(void) {
  return strcmp(getenv("MQPROC_TEST_QUEUE"), "sqlite") == 0;
}

static long rows_of(const char *queue) {
  char *n = it_tq_sql("SELECT count(*) FROM mqproc_messages WHERE queue = $1",
                      "SELECT count(*) FROM mqproc_messages WHERE queue = ?1", 1, queue);
  return n != NULL ? atol(n) : -1;
}

/* Waits until queue holds no row (its messages acked). */
static int rows_become_none(const char *queue) {
  for (int i = 0; i < WAIT_MS / 50; i++) {
    if (rows_of(queue) == 0)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

static int job_becomes(const char *job_id, const char *state) {
  return it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", job_id), state);
}

/* An ordinary job sent after the hostile row completes (with its result, when results is
 * not NULL: a publish of the server's own). */
static void ordinary_job_completes(const char *proc, const char *job_id, const char *results) {
  it_publish(proc, it_job_json(proc, job_id,
                               results != NULL ? it_fmt("{\"result_queue_name\": \"%s\"}", results)
                                               : NULL));
  cr_assert(job_becomes(job_id, "SUCCESS"), "the ordinary job %s sent after the row never ran",
            job_id);
  if (results != NULL)
    cr_assert(it_sql_becomes(
                  it_fmt("SELECT result_published FROM mqproc_jobs WHERE job_id = '%s'", job_id),
                  it_q("t", "1")),
              "the result of %s was never published", job_id);
}

/* F1: a delivery count at INT_MAX made every take of its queue fail (PostgreSQL's
 * `deliveries + 1`: "integer out of range"), for good. Now refused at its insert (the
 * CHECK of sql/011); a row from before that is taken with its count saturated. */
Test(tq_hostile, f1_a_delivery_count_at_int_max_does_not_stop_the_queue) {
  char *proc = it_name("f1"), *failed;
  it_server_t *srv;
  if (queue_sqlite())
    cr_skip_test("PostgreSQL's integer column (SQLite's 64-bit count: f9)");
  failed = it_tq_try("INSERT INTO mqproc_messages (queue, body, deliveries)"
                     " VALUES ($1, convert_to($2, 'UTF8'), 2147483647)",
                     NULL, 2, proc, it_job_json(proc, "f1-hostile", NULL));
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  if (failed != NULL)
    cr_expect(strstr(failed, "mqproc_messages_deliveries_range") != NULL, "refused: %s", failed);
  else
    cr_expect(job_becomes("f1-hostile", "SUCCESS"), "the row was taken and run");
  ordinary_job_completes(proc, "f1-after", NULL);
  cr_expect(rows_become_none(proc), "every message of the queue acked");
  it_server_stop(srv);
}

/* F2: ids planted just ahead of the id sequence made every insert of a result (and of a
 * dead letter) fail with a duplicate key, retried with backoff for as long as planted ids
 * lasted. Now an id the sequence did not give out is refused at its insert. */
Test(tq_hostile, f2_ids_planted_ahead_of_the_sequence_do_not_stall_publishes) {
  char *proc = it_name("f2"), *results = it_name("f2-result"), *failed, *next;
  it_server_t *srv;
  if (queue_sqlite())
    cr_skip_test("SQLite's AUTOINCREMENT gives max(id) + 1: a planted id is never met");
  next = it_tq_sql("SELECT nextval('mqproc_messages_id_seq')", NULL, 0);
  cr_assert_not_null(next);
  failed = it_tq_try("INSERT INTO mqproc_messages (id, queue, body)"
                     " SELECT g, 'zzz-parking', ''::bytea FROM generate_series($1::bigint + 1,"
                     " $1::bigint + 300) g",
                     NULL, 1, next);
  cr_expect(failed != NULL && strstr(failed, "not given out by the table") != NULL,
            "planted ids refused: %s", failed != NULL ? failed : "(stored)");
  failed = it_tq_try("INSERT INTO mqproc_messages (id, queue, body) VALUES (-5, $1, ''::bytea)",
                     NULL, 1, proc);
  cr_expect(failed != NULL, "a negative id refused");
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  ordinary_job_completes(proc, "f2-after", results);
  cr_expect_eq(rows_of(results), 1, "its result is a row of its queue");
  it_server_stop(srv);
}

/* F3: SQLite, one row with id 2^63-1 made every later insert fail as "database or disk is
 * full" (AUTOINCREMENT at its maximum; deleting the row did not help: sqlite_sequence).
 * Now refused at its insert. */
Test(tq_hostile, f3_an_id_at_int64_max_does_not_fill_the_table) {
  char *proc = it_name("f3"), *failed;
  it_server_t *srv;
  if (!queue_sqlite())
    cr_skip_test("SQLite's AUTOINCREMENT (PostgreSQL refuses ids ahead of its sequence: f2)");
  failed = it_tq_try(NULL,
                     "INSERT INTO mqproc_messages (id, queue, body)"
                     " VALUES (9223372036854775807, 'zzz-parking', CAST('x' AS BLOB))",
                     0);
  cr_expect(failed != NULL && strstr(failed, "leave id out") != NULL, "refused: %s",
            failed != NULL ? failed : "(stored)");
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  ordinary_job_completes(proc, "f3-after", it_name("f3-result"));
  it_server_stop(srv);
}
