/* The hot statements' plans on a large, analysed job table (issue 30): every statement a
 * job's hot path runs finds its rows by key (the primary key, or the outbox's), never by a
 * scan of the table or of a partial index joined by hash, however many rows the table
 * holds and whatever its statistics say. Checked with EXPLAIN of each statement as the
 * store prepares it, with both plans PostgreSQL may use for a prepared statement: the
 * generic one (after five executions) and a custom one. PostgreSQL only. */
#include <criterion/criterion.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "store/pg/int.h"
#include "store/store.h"

TestSuite(pg_plans, .fini = it_cleanup, .timeout = 300);

#define ROWS 200000

static PGconn *conn(void) {
  PGconn *c = PQconnectdb(it_db_url());
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

/* The plan of EXECUTE args of the statement prepared as name, as text. */
static char *plan(PGconn *c, const char *name, const char *args) {
  PGresult *r = PQexec(c, it_fmt("EXPLAIN EXECUTE %s(%s)", name, args));
  char *out = it_fmt("%s", "");
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: %s", name, PQresultErrorMessage(r));
  for (int i = 0; i < PQntuples(r); i++)
    out = it_fmt("%s%s\n", out, PQgetvalue(r, i, 0));
  PQclear(r);
  return out;
}

/* No scan of a whole table; the job table found by a key (its primary key, or the
 * outbox's). */
static void expect_key_lookups(const char *what, const char *p) {
  cr_expect(strstr(p, "Seq Scan on mqproc_jobs") == NULL, "%s scans the job table:\n%s", what, p);
  cr_expect(strstr(p, "Seq Scan on mqproc_outbox") == NULL, "%s scans the outbox:\n%s", what, p);
  cr_expect(strstr(p, "Bitmap Heap Scan on mqproc_jobs") == NULL,
            "%s scans an index of the job table:\n%s", what, p);
  cr_expect(strstr(p, "mqproc_jobs_state_list_idx") == NULL &&
                strstr(p, "mqproc_jobs_sweep_idx") == NULL &&
                strstr(p, "mqproc_jobs_active_idx") == NULL,
            "%s walks a partial index instead of the key:\n%s", what, p);
}

Test(pg_plans, the_hot_statements_find_their_rows_by_key_on_a_large_analysed_table) {
  static const struct {
    mqproc__store_op_t op;
    int fallback;
    const char *args;
  } hot[] = {
      /* job, processor, worker, lease ms, created, format, max attempts, body, log path,
         headers, priority */
      {MQPROC__STORE_CLAIM, 0,
       "'{j-new}', '{p}', '{w}', '{60000}', '{1}', '{json}', '{5}', '{\\\\x7b7d}', '{/l}',"
       " '{NULL}', '{NULL}'"},
      {MQPROC__STORE_CLAIM, 1,
       "'{j-100}', '{p}', '{w}', '{60000}', '{1}', '{json}', '{5}', '{\\\\x7b7d}', '{/l}',"
       " '{NULL}', '{NULL}'"},
      /* job, attempt, try, ms, exit code, outbox, lease ms, result, callbacks, log text,
         log path */
      {MQPROC__STORE_SUCCEED, 0,
       "'{j-100}', '{1}', '{1}', '{5}', '{0}', '{t}', '{60000}', '{t}', '{f}', '{NULL}',"
       " '{NULL}'"},
      /* job, attempt, result sent, error, callbacks sent, error */
      {MQPROC__STORE_OUTBOX_DONE, 0, "'{j-100}', '{1}', '{t}', '{NULL}', '{f}', '{NULL}'"},
      /* job, attempt, lease ms */
      {MQPROC__STORE_RENEW, 0, "'{j-100}', '{1}', '{60000}'"},
  };
  PGconn *c;
  if (it_store_is_sqlite())
    cr_skip_test("PostgreSQL's plans");
  c = conn();
  /* a table as a long-lived fleet leaves it: mostly finished jobs, some running, queued,
   * failed, early-acked and waiting for a republish; and some 20 000 outbox marks, more
   * than a fleet holds in flight (on a small outbox a scan is the cheaper plan, and
   * PostgreSQL rightly takes it) */
  exec_ok(c, it_fmt("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, tries,"
                    " worker_id, lease_until, queued_at, start_time, end_time, exec_time_ms,"
                    " request_format, request_body, delivery_acked, republish)"
                    " SELECT 'j-' || i, 'p' || (i %% 5), CASE WHEN i %% 100 = 1 THEN 'RUNNING'"
                    " WHEN i %% 100 = 2 THEN 'QUEUED' WHEN i %% 100 = 3 THEN 'FAILED'"
                    " ELSE 'SUCCESS' END, 1, 1, 'w' || (i %% 7), now() + interval '1 minute',"
                    " now() - i * interval '1 second', now() - i * interval '1 second',"
                    " CASE WHEN i %% 100 > 2 THEN now() END, 5, 'json', '\\x7b7d'::bytea,"
                    " i %% 1000 = 1, i %% 1000 = 2 FROM generate_series(1, %d) i",
                    ROWS));
  exec_ok(c, "INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
             " SELECT job_id, processor_name, attempt, now() + interval '1 minute'"
             " FROM mqproc_jobs WHERE state = 'SUCCESS' AND random() < 0.1");
  exec_ok(c, "ANALYZE mqproc_jobs");
  exec_ok(c, "ANALYZE mqproc_outbox");
  for (size_t i = 0; i < sizeof(hot) / sizeof(hot[0]); i++) {
    const char *sql = mqproc__pg_stmt_sql(hot[i].op, hot[i].fallback);
    char *name = it_fmt("s%zu", i);
    cr_assert_not_null(sql);
    exec_ok(c, it_fmt("PREPARE %s AS %s", name, sql));
    exec_ok(c, "SET plan_cache_mode = force_generic_plan");
    expect_key_lookups(
        it_fmt("op %d%s (generic plan)", (int)hot[i].op, hot[i].fallback ? " fallback" : ""),
        plan(c, name, hot[i].args));
    exec_ok(c, "SET plan_cache_mode = force_custom_plan");
    expect_key_lookups(
        it_fmt("op %d%s (custom plan)", (int)hot[i].op, hot[i].fallback ? " fallback" : ""),
        plan(c, name, hot[i].args));
    exec_ok(c, "RESET plan_cache_mode");
  }
  PQfinish(c);
}
