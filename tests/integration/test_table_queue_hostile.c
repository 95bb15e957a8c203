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

/* F4: a body larger than --max-message-size is dead-lettered unread: the take reads its
 * size and its first 1024 bytes only (on PostgreSQL a body over ~512 MiB, whose hex text
 * PostgreSQL cannot make, failed every take; smaller ones were read whole first, on both).
 * SQLite: a body a producer stored as text, counted in bytes. */
Test(tq_hostile, f4_a_body_over_the_limit_is_dead_lettered_unread) {
  char *proc = it_name("f4");
  const char *extra[] = {"--max-message-size=65536", NULL};
  it_server_t *srv;
  it_tq_sql("INSERT INTO mqproc_messages (queue, body)"
            " VALUES ($1, convert_to(repeat('x', 300000), 'UTF8'))",
            "INSERT INTO mqproc_messages (queue, body) VALUES (?1, printf('%.*c', 300000, 'x'))", 1,
            proc);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_expect_dead(proc, "dead-lettered unread");
  ordinary_job_completes(proc, "f4-after", NULL);
  cr_expect_str_eq(it_sql(it_q("SELECT octet_length(body) || ' ' || body_len || ' ' ||"
                               " coalesce(encode(body_sha256, 'hex'), '-')"
                               " FROM mqproc_dead_letters WHERE job_id IS NULL",
                               "SELECT length(body) || ' ' || body_len || ' ' ||"
                               " coalesce(nullif(hex(body_sha256), ''), '-')"
                               " FROM mqproc_dead_letters WHERE job_id IS NULL"),
                          0),
                   "1024 300000 -",
                   "the dead letter keeps the body's start and its whole size, no SHA-256");
  cr_expect(rows_become_none(proc), "the row acked");
  it_server_stop(srv);
}

/* F8: a priority past the job table's smallint made the claim fail; the round that held the
 * take was undone, and the take's other bad messages were dead-lettered again each time
 * (11-15 copies). Now the take reads the priority within the job table's range: the job
 * runs, and the empty message beside it is dead-lettered once. */
Test(tq_hostile, f8_a_priority_past_smallint_runs_and_dead_letters_nothing_twice) {
  char *proc = it_name("f8");
  it_server_t *srv;
  it_tq_sql(
      "INSERT INTO mqproc_messages (queue, body, priority)"
      " VALUES ($1, convert_to($2, 'UTF8'), 40000)",
      "INSERT INTO mqproc_messages (queue, body, priority) VALUES (?1, CAST(?2 AS BLOB), 40000)", 2,
      proc, it_job_json(proc, "f8-big", NULL));
  it_tq_sql("INSERT INTO mqproc_messages (queue, body) VALUES ($1, ''::bytea)",
            "INSERT INTO mqproc_messages (queue, body) VALUES (?1, X'')", 1, proc);
  for (int i = 0; i < 3; i++)
    it_tq_sql("INSERT INTO mqproc_messages (queue, body) VALUES ($1, convert_to($2, 'UTF8'))",
              "INSERT INTO mqproc_messages (queue, body) VALUES (?1, CAST(?2 AS BLOB))", 2, proc,
              it_job_json(proc, it_fmt("f8-good-%d", i), NULL));
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert(job_becomes("f8-big", "SUCCESS"), "the job with priority 40000 ran");
  cr_expect_eq(it_sql_long("SELECT priority FROM mqproc_jobs WHERE job_id = 'f8-big'", 0), 32767,
               "its priority as the job table can hold it");
  ordinary_job_completes(proc, "f8-after", NULL);
  cr_expect(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "5"));
  cr_expect(rows_become_none(proc), "every message of the queue acked");
  sleep(2); /* a copy would come with a round undone again */
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 1,
               "the empty message dead-lettered once");
  cr_expect_eq(rows_of(it_fmt("%s.dead", proc)), 1, "one dead letter in the queue");
  it_server_stop(srv);
}

/* F9: SQLite, a delivery count at or past 2^31 (or a REAL) was read back with atoi, so the
 * ack's fence never matched: the job ran once, and its message came back every visibility
 * period for ever. Now the take keeps the count an integer below 10^9. */
Test(tq_hostile, f9_a_delivery_count_past_int_or_real_is_acked) {
  char *proc = it_name("f9");
  it_server_t *srv;
  if (!queue_sqlite())
    cr_skip_test("SQLite's 64-bit and REAL counts (PostgreSQL's column is an integer: f1)");
  it_tq_sql(NULL,
            "INSERT INTO mqproc_messages (queue, body, deliveries)"
            " VALUES (?1, CAST(?2 AS BLOB), 2147483648)",
            2, proc, it_job_json(proc, "f9-big", NULL));
  it_tq_sql(
      NULL,
      "INSERT INTO mqproc_messages (queue, body, deliveries) VALUES (?1, CAST(?2 AS BLOB), 0.5)", 2,
      proc, it_job_json(proc, "f9-real", NULL));
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert(job_becomes("f9-big", "SUCCESS"));
  cr_assert(job_becomes("f9-real", "SUCCESS"));
  cr_expect(rows_become_none(proc), "both messages acked (deleted), not held for ever");
  ordinary_job_completes(proc, "f9-after", NULL);
  cr_expect(rows_become_none(proc), "every message of the queue acked");
  it_server_stop(srv);
}

/* F10: a producer needs no right on mqproc_messages: a role that may only EXECUTE
 * mqproc_enqueue() (docs/table-queue.md, "A role that may only enqueue") queues a job that
 * runs, and cannot INSERT, UPDATE, DELETE or read a row itself, so none of the columns a
 * producer with INSERT could write (id, deliveries, consumer, visible_at) is its to set.
 * This needs the function to run with its owner's rights (SECURITY DEFINER) on a
 * search_path of its own: a temporary table of the caller's named mqproc_messages (found
 * first on the caller's path) must not take the job. PostgreSQL only. */
Test(tq_hostile, f10_a_role_that_may_only_enqueue_queues_jobs_and_writes_no_row) {
  char *proc = it_name("f10"), *role = it_fmt("mqproc_f10_producer_%d", (int)getpid());
  char *schema, *failed, *id = NULL;
  const char *fns = "mqproc_enqueue(text, bytea, integer, text, text, jsonb),"
                    " mqproc_enqueue(text, text, integer, text, text, jsonb)";
  it_server_t *srv;
  if (queue_sqlite())
    cr_skip_test("SQLite has no roles: whoever can write the file can write anything in it");
  schema = it_tq_sql("SELECT quote_ident(current_schema())", NULL, 0);
  cr_assert_not_null(schema);
  it_tq_sql(it_fmt("CREATE ROLE %s LOGIN", role), NULL, 0);
  /* the recipe: nothing on the tables, USAGE on the schema, EXECUTE on the function */
  it_tq_sql(it_fmt("REVOKE ALL ON mqproc_messages, mqproc_jobs FROM %s", role), NULL, 0);
  it_tq_sql(it_fmt("GRANT USAGE ON SCHEMA %s TO %s", schema, role), NULL, 0);
  it_tq_sql(it_fmt("GRANT EXECUTE ON FUNCTION %s TO %s", fns, role), NULL, 0);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);

  failed = it_pg_try_as(role, &id, "SELECT mqproc_enqueue($1, $2::text)", 2, proc,
                        it_job_json(proc, "f10-enqueued", NULL));
  cr_expect(failed == NULL && id != NULL, "the producer enqueues: %s", failed);
  cr_expect(job_becomes("f10-enqueued", "SUCCESS"), "its job ran");
  /* a table of its own named like ours, first on its path (pg_temp), takes nothing */
  failed = it_pg_try_as(
      role, &id,
      it_fmt("CREATE TEMP TABLE mqproc_messages (id bigserial, queue text, priority integer,"
             " body bytea, content_type text, message_id text, headers jsonb);"
             " SELECT mqproc_enqueue('%s', $job$%s$job$::text)",
             proc, it_job_json(proc, "f10-temp-table", NULL)),
      0);
  cr_expect(failed == NULL && id != NULL, "the producer enqueues: %s", failed);
  cr_expect(job_becomes("f10-temp-table", "SUCCESS"), "the job went to the caller's own table");
  failed = it_pg_try_as(role, NULL, "SELECT mqproc_enqueue(repeat('q', 300), 'x'::text)", 0);
  cr_expect(failed != NULL && strstr(failed, "1 to 255 bytes") != NULL, "a 300-byte queue: %s",
            failed != NULL ? failed : "(queued)");

  /* no row of its own making, changing or removing: permission denied */
  failed = it_pg_try_as(role, NULL,
                        "INSERT INTO mqproc_messages (queue, body, deliveries, consumer)"
                        " VALUES ($1, '\\x00'::bytea, 5, 'w1')",
                        1, proc);
  cr_expect(failed != NULL && strstr(failed, "permission denied") != NULL, "INSERT: %s",
            failed != NULL ? failed : "(stored)");
  failed = it_pg_try_as(role, NULL, "UPDATE mqproc_messages SET deliveries = 0", 0);
  cr_expect(failed != NULL && strstr(failed, "permission denied") != NULL, "UPDATE: %s",
            failed != NULL ? failed : "(ran)");
  failed = it_pg_try_as(role, NULL, "DELETE FROM mqproc_messages", 0);
  cr_expect(failed != NULL && strstr(failed, "permission denied") != NULL, "DELETE: %s",
            failed != NULL ? failed : "(ran)");
  failed = it_pg_try_as(role, NULL, "SELECT count(*) FROM mqproc_messages", 0);
  cr_expect(failed != NULL && strstr(failed, "permission denied") != NULL, "SELECT: %s",
            failed != NULL ? failed : "(ran)");

  ordinary_job_completes(proc, "f10-after", NULL);
  it_server_stop(srv);
  it_tq_try(it_fmt("DROP OWNED BY %s", role), NULL, 0);
  failed = it_tq_try(it_fmt("DROP ROLE %s", role), NULL, 0);
  cr_expect(failed == NULL, "drop the role: %s", failed);
}
