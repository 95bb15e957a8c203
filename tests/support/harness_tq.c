/* The harness's table queues (store/queue.h): with MQPROC_TEST_QUEUE=pg or sqlite the
 * tests' queue is the mqproc_messages table of a database, and the AMQP helpers (declare,
 * publish, get, requeue, counts, dead letters) act on its rows as a producer or consumer
 * without our code would: plain SQL. The queue's database is the job store's own (the
 * server shares its connection and rounds) when the store is of the same kind, else one of
 * its own: a PostgreSQL schema of the test's, or TMP/queue.db. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "harness_int.h"
#include "mqproc/mqproc.h"
#include "store/sqlite/notice.h"
#include "store/store.h"

static PGconn *g_pg;
static sqlite3 *g_sq;

int it_queue_is_table(void) {
  const char *q = getenv("MQPROC_TEST_QUEUE");
  return q != NULL && (strcmp(q, "pg") == 0 || strcmp(q, "sqlite") == 0);
}

static int queue_is_sqlite(void) {
  const char *q = getenv("MQPROC_TEST_QUEUE");
  return q != NULL && strcmp(q, "sqlite") == 0;
}

const char *it_tq_url(void) {
  static char *url;
  char err[MQPROC_ERR_LEN];
  mqproc__store_t *st;
  char *want;
  if (queue_is_sqlite() == it_store_is_sqlite())
    return it_db_url(); /* one database: the server shares its store's connection */
  if (!queue_is_sqlite())
    return it_pg_url();
  want = it_fmt("sqlite://%s/queue.db", it_tmpdir());
  if (url != NULL && strcmp(url, want) == 0)
    return url;
  free(url);
  url = strdup(want);
  cr_assert_eq(mqproc__store_sqlite_new(&st, url, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_migrate(st, err), MQPROC_OK, "migrate: %s", err);
  mqproc__store_destroy(st);
  return url;
}

/* ---- SQL on the queue's database ---------------------------------------------------- */

static PGconn *pg(void) {
  if (g_pg == NULL) {
    g_pg = PQconnectdb(it_tq_url());
    cr_assert_eq(PQstatus(g_pg), CONNECTION_OK, "%s", PQerrorMessage(g_pg));
  }
  return g_pg;
}

static sqlite3 *sq(void) {
  if (g_sq == NULL) {
    cr_assert_eq(sqlite3_open(it_tq_url() + 9, &g_sq), SQLITE_OK);
    sqlite3_busy_timeout(g_sq, 30000);
  }
  return g_sq;
}

/* Runs sql with n text parameters (the body, parameter 2 when blob_len >= 0, as bytes);
 * the first row's cells as text into cells (up to ncells; NULL: SQL NULL); 1 when a row
 * came. PostgreSQL's $1.. and SQLite's ?1.. texts are given both. */
static int run_or_fail(const char *pg_sql, const char *sq_sql, int n, const char *const *vals,
                       long blob_len, char **cells, int ncells, char **failed) {
  int found = 0;
  for (int i = 0; i < ncells; i++)
    cells[i] = NULL;
  if (!queue_is_sqlite()) {
    int lens[8] = {0}, fmts[8] = {0};
    PGresult *r;
    if (blob_len >= 0) {
      lens[1] = (int)blob_len;
      fmts[1] = 1;
    }
    r = PQexecParams(pg(), pg_sql, n, NULL, vals, lens, fmts, 0);
    if (failed != NULL && PQresultStatus(r) != PGRES_TUPLES_OK &&
        PQresultStatus(r) != PGRES_COMMAND_OK) {
      *failed = it_fmt("%s", PQresultErrorMessage(r));
      PQclear(r);
      return 0;
    }
    cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK,
              "%s: %s", pg_sql, PQresultErrorMessage(r));
    found = PQntuples(r) > 0;
    for (int i = 0; found && i < ncells && i < PQnfields(r); i++)
      if (!PQgetisnull(r, 0, i))
        cells[i] = it_fmt("%s", PQgetvalue(r, 0, i));
    PQclear(r);
    return found;
  }
  {
    sqlite3_stmt *st;
    int rc = sqlite3_prepare_v2(sq(), sq_sql, -1, &st, NULL);
    cr_assert_eq(rc, SQLITE_OK, "%s: %s", sq_sql, sqlite3_errmsg(sq()));
    for (int i = 0; i < n; i++)
      if (i == 1 && blob_len >= 0)
        sqlite3_bind_blob(st, 2, vals[1], (int)blob_len, SQLITE_TRANSIENT);
      else
        sqlite3_bind_text(st, i + 1, vals[i], -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    if (failed != NULL && rc != SQLITE_ROW && rc != SQLITE_DONE) {
      *failed = it_fmt("%s", sqlite3_errmsg(sq()));
      sqlite3_finalize(st);
      return 0;
    }
    cr_assert(rc == SQLITE_ROW || rc == SQLITE_DONE, "%s: %s", sq_sql, sqlite3_errmsg(sq()));
    found = rc == SQLITE_ROW;
    for (int i = 0; found && i < ncells && i < sqlite3_column_count(st); i++)
      if (sqlite3_column_type(st, i) != SQLITE_NULL)
        cells[i] = it_fmt("%s", (const char *)sqlite3_column_text(st, i));
    sqlite3_finalize(st);
  }
  return found;
}

static int run(const char *pg_sql, const char *sq_sql, int n, const char *const *vals,
               long blob_len, char **cells, int ncells) {
  return run_or_fail(pg_sql, sq_sql, n, vals, blob_len, cells, ncells, NULL);
}

char *it_tq_sql(const char *pg_sql, const char *sq_sql, int n, ...) {
  const char *vals[8];
  char *cell;
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n && i < 8; i++)
    vals[i] = va_arg(ap, const char *);
  va_end(ap);
  run(pg_sql, sq_sql, n, vals, -1, &cell, 1);
  return cell;
}

char *it_tq_try(const char *pg_sql, const char *sq_sql, int n, ...) {
  const char *vals[8];
  char *cell, *failed = NULL;
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n && i < 8; i++)
    vals[i] = va_arg(ap, const char *);
  va_end(ap);
  run_or_fail(pg_sql, sq_sql, n, vals, -1, &cell, 1, &failed);
  return failed;
}

/* ---- the helpers ------------------------------------------------------------------- */

void it_tq_delete(const char *queue) {
  const char *vals[1] = {queue};
  char *cell;
  run("DELETE FROM mqproc_messages WHERE queue = $1",
      "DELETE FROM mqproc_messages WHERE queue = ?1", 1, vals, -1, &cell, 0);
}

/* As a producer in another language does: mqproc_enqueue() on PostgreSQL; on SQLite the
 * INSERT docs/table-queue.md gives, and a line in the notice file so servers look now. */
void it_tq_publish(const char *rk, const void *body, size_t len) {
  const char *vals[2] = {rk, body};
  char *cell;
  run("SELECT mqproc_enqueue($1, $2::bytea)",
      "INSERT INTO mqproc_messages (queue, body) VALUES (?1, ?2)", 2, vals, (long)len, &cell, 0);
  if (queue_is_sqlite())
    mqproc__sq_notice_send(it_tq_url() + 9, it_fmt("%s%s", MQPROC__SQ_NOTICE_QUEUE, rk));
}

/* The message's AMQP-style headers (a JSON object) into out's fields. */
static void fill_headers(it_msg_t *out, const char *headers) {
  json_t *h = headers != NULL ? json_loads(headers, 0, NULL) : NULL, *v;
  const char *k;
  out->headers = it_fmt("%s", "");
  json_object_foreach(h, k, v) {
    if (!json_is_string(v))
      continue;
    out->headers = it_fmt("%s%s=%s\n", out->headers, k, json_string_value(v));
    if (!strcmp(k, "x-mqproc-reason"))
      out->reason = strdup(json_string_value(v));
    else if (!strcmp(k, "x-mqproc-attempt"))
      out->attempt = strdup(json_string_value(v));
  }
  json_decref(h);
  if (out->reason == NULL)
    out->reason = strdup("");
  if (out->attempt == NULL)
    out->attempt = strdup("");
}

/* The first ready message of queue, taken as a consumer without our code would: deleted
 * (get), or counted as delivered and left ready (requeue: it comes again redelivered). */
int it_tq_take(const char *queue, int timeout_ms, it_msg_t *out, int requeue) {
  static const char PG_GET[] =
      "DELETE FROM mqproc_messages WHERE id = (SELECT id FROM mqproc_messages WHERE queue = $1"
      " AND consumer IS NULL ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED)"
      " RETURNING encode(body, 'hex'), content_type, coalesce(message_id, ''), priority,"
      " headers::text, deliveries";
  static const char SQ_GET[] =
      "DELETE FROM mqproc_messages WHERE id = (SELECT id FROM mqproc_messages WHERE queue = ?1"
      " AND consumer IS NULL ORDER BY priority DESC, id LIMIT 1)"
      " RETURNING hex(body), content_type, coalesce(message_id, ''), priority, headers,"
      " deliveries";
  static const char PG_REQUEUE[] =
      "UPDATE mqproc_messages SET deliveries = deliveries + 1 WHERE id = (SELECT id FROM"
      " mqproc_messages WHERE queue = $1 AND consumer IS NULL ORDER BY priority DESC, id LIMIT 1"
      " FOR UPDATE SKIP LOCKED) RETURNING id";
  static const char SQ_REQUEUE[] =
      "UPDATE mqproc_messages SET deliveries = deliveries + 1 WHERE id = (SELECT id FROM"
      " mqproc_messages WHERE queue = ?1 AND consumer IS NULL ORDER BY priority DESC, id"
      " LIMIT 1) RETURNING id";
  const char *vals[1] = {queue};
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    char *c[6];
    size_t n;
    if (!run(requeue ? PG_REQUEUE : PG_GET, requeue ? SQ_REQUEUE : SQ_GET, 1, vals, -1, c, 6)) {
      usleep(20 * 1000);
      continue;
    }
    if (out == NULL)
      return 1;
    memset(out, 0, sizeof(*out));
    n = c[0] != NULL ? strlen(c[0]) / 2 : 0;
    out->body = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
      sscanf(c[0] + 2 * i, "%2hhx", (unsigned char *)&out->body[i]);
    out->body[n] = '\0';
    out->len = n;
    out->content_type = strdup(c[1] != NULL ? c[1] : "");
    out->message_id = strdup(c[2] != NULL ? c[2] : "");
    out->priority = c[3] != NULL ? atoi(c[3]) : -1;
    out->redelivered = c[5] != NULL && atoi(c[5]) > 0;
    fill_headers(out, c[4]);
    return 1;
  }
  return 0;
}

void it_tq_counts(const char *queue, long *ready, long *unacked) {
  const char *vals[1] = {queue};
  char *c[2];
  run("SELECT count(*) FILTER (WHERE consumer IS NULL), count(*) FILTER (WHERE consumer IS NOT"
      " NULL) FROM mqproc_messages WHERE queue = $1",
      "SELECT count(*) FILTER (WHERE consumer IS NULL), count(*) FILTER (WHERE consumer IS NOT"
      " NULL) FROM mqproc_messages WHERE queue = ?1",
      1, vals, -1, c, 2);
  *ready = c[0] != NULL ? atol(c[0]) : 0;
  *unacked = c[1] != NULL ? atol(c[1]) : 0;
}

void it_tq_cleanup(void) {
  if (g_pg != NULL)
    PQfinish(g_pg);
  if (g_sq != NULL)
    sqlite3_close(g_sq);
  g_pg = NULL;
  g_sq = NULL;
}
