/* PostgreSQL job store: connections, statement execution and the schema.
 *
 * Every call (re)connects lazily, runs one statement with PQexecParams and maps the
 * outcome: a lost connection is MQPROC_ESTORE_CONNECT (the next call reconnects), a
 * failed statement MQPROC_ESTORE_QUERY with its SQLSTATE, a fenced write (no row
 * matched job_id + attempt + RUNNING) MQPROC_ESTORE_FENCED. Connections carry
 * connect/keepalive/TCP timeouts so a dead server cannot stall the event loop for long.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "store_pg_int.h"
#include "util.h"

#define SCHEMA_VERSION 4

/* libpq's messages end in a newline and may have detail lines: keep the first. */
static void one_line(char *err) {
  if (err != NULL)
    err[strcspn(err, "\n")] = '\0';
}

int mqproc__pg_classify(const char *sqlstate) {
  static const char *const outage[] = {"08",    "53",    "57P01", "57P02",
                                       "57P03", "57P04", "57P05", "58"};
  static const char *const data[] = {"22", "23", "54"};
  if (sqlstate == NULL)
    return MQPROC_ESTORE_QUERY;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(outage); i++)
    if (strncmp(sqlstate, outage[i], strlen(outage[i])) == 0)
      return MQPROC_ESTORE_CONNECT;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(data); i++)
    if (strncmp(sqlstate, data[i], strlen(data[i])) == 0)
      return MQPROC_ESTORE_DATA;
  return MQPROC_ESTORE_QUERY;
}

/* A failed statement's error, with its SQLSTATE, classified (mqproc__pg_classify). */
static int query_error(const PGresult *res, char *err) {
  const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  int rc = mqproc__err(err, mqproc__pg_classify(state), "query failed (SQLSTATE %s): %s",
                       state != NULL ? state : "?", PQresultErrorMessage(res));
  one_line(err);
  return rc;
}

/* ---- connection and statements ------------------------------------------------------ */

static int ensure_conn(pg_store_t *s, char *err) {
  static const char *const keys[] = {"connect_timeout",
                                     "keepalives_idle",
                                     "keepalives_interval",
                                     "keepalives_count",
                                     "tcp_user_timeout",
                                     "application_name",
                                     "dbname",
                                     NULL};
  const char *vals[] = {"5", "10", "5", "3", "15000", "mqproc", s->conninfo, NULL};
  if (s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK)
    return MQPROC_OK;
  PQfinish(s->conn);
  s->conn = PQconnectdbParams(keys, vals, 1);
  if (s->conn == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (PQstatus(s->conn) != CONNECTION_OK) {
    char msg[MQPROC_ERR_LEN];
    snprintf(msg, sizeof(msg), "%s", PQerrorMessage(s->conn));
    one_line(msg);
    PQfinish(s->conn);
    s->conn = NULL;
    return mqproc__err(err, MQPROC_ESTORE_CONNECT, "cannot connect to the database: %s", msg);
  }
  /* Bound every statement so a stuck server cannot hold the loop (not via `options`:
   * a URL's own options would replace it). */
  PQclear(PQexec(s->conn, "SET statement_timeout = 30000"));
  return MQPROC_OK;
}

/* Runs sql with n text parameters (NULL = SQL NULL; binary when fmts[i] is 1). On success
 * *out (if not NULL) gets the result, which the caller PQclear()s. */
/* Text parameters must be valid UTF-8 (the server refuses anything else with a data
 * error): error texts from processors and excerpts cut mid-character are cleaned here. */
static int clean_params(int n, const char *const *vals, const int *fmts, const char **clean,
                        char **copies, char *err) {
  for (int i = 0; i < n; i++) {
    clean[i] = vals[i];
    copies[i] = NULL;
    if (vals[i] != NULL && (fmts == NULL || fmts[i] == 0) &&
        (clean[i] = mqproc__utf8_clean(vals[i], &copies[i])) == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  return MQPROC_OK;
}

int mqproc__pg_run(pg_store_t *s, const char *sql, int n, const char *const *vals, const int *lens,
                   const int *fmts, PGresult **out, char *err) {
  const char *clean[MQPROC__PG_MAX_PARAMS] = {0};
  char *copies[MQPROC__PG_MAX_PARAMS] = {0}; /* free(NULL) for those clean_params left */
  PGresult *res = NULL;
  ExecStatusType st;
  int rc = ensure_conn(s, err);
  if (rc != MQPROC_OK)
    return rc;
  if (n > MQPROC__PG_MAX_PARAMS)
    return mqproc__err(err, MQPROC_EINVAL, "too many statement parameters");
  rc = clean_params(n, vals, fmts, clean, copies, err);
  res = rc != MQPROC_OK ? NULL : PQexecParams(s->conn, sql, n, NULL, clean, lens, fmts, 0);
  for (int i = 0; i < n; i++)
    free(copies[i]);
  if (rc != MQPROC_OK)
    return rc;
  st = PQresultStatus(res);
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
    if (out != NULL)
      *out = res;
    else
      PQclear(res);
    return MQPROC_OK;
  }
  if (PQstatus(s->conn) != CONNECTION_OK) {
    mqproc__err(err, MQPROC_ESTORE_CONNECT, "database connection lost: %s",
                PQerrorMessage(s->conn));
    rc = MQPROC_ESTORE_CONNECT;
    PQfinish(s->conn);
    s->conn = NULL;
    one_line(err);
  } else {
    rc = query_error(res, err);
    if (rc == MQPROC_ESTORE_CONNECT && PQstatus(s->conn) == CONNECTION_OK) {
      PQfinish(s->conn); /* an availability error (shutdown, disk full): connect anew */
      s->conn = NULL;
    }
  }
  PQclear(res);
  return rc;
}

int mqproc__pg_run_text(pg_store_t *s, const char *sql, int n, const char *const *vals,
                        PGresult **out, char *err) {
  return mqproc__pg_run(s, sql, n, vals, NULL, NULL, out, err);
}

int mqproc__pg_run_fenced(pg_store_t *s, const char *sql, int n, const char *const *vals,
                          const char *job_id, int attempt, PGresult **out, char *err) {
  PGresult *res = NULL;
  int rc = mqproc__pg_run_text(s, sql, n, vals, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  if (atoi(PQcmdTuples(res)) == 0) {
    PQclear(res);
    return mqproc__err(err, MQPROC_ESTORE_FENCED, "job %s: attempt %d no longer owns the job",
                       job_id, attempt);
  }
  if (out != NULL)
    *out = res;
  else
    PQclear(res);
  return MQPROC_OK;
}

/* ---- schema ------------------------------------------------------------------------- */

static int exec_plain(pg_store_t *s, const char *sql, char *err) {
  PGresult *res = PQexec(s->conn, sql);
  ExecStatusType st = PQresultStatus(res);
  int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? MQPROC_OK : query_error(res, err);
  PQclear(res);
  return rc;
}

static int apply_migration(pg_store_t *s, const mqproc__migration_t *m, char *err) {
  char ver[16];
  const char *vals[2] = {ver, m->name};
  PGresult *res = NULL;
  int rc, done;
  snprintf(ver, sizeof(ver), "%d", m->version);
  rc = mqproc__pg_run_text(s, "SELECT 1 FROM mqproc_schema_migrations WHERE version = $1::int", 1,
                           vals, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  done = PQntuples(res) > 0;
  PQclear(res);
  if (done)
    return MQPROC_OK;
  MQPROC__INFO("applying schema migration %03d_%s", m->version, m->name);
  if ((rc = exec_plain(s, m->sql, err)) != MQPROC_OK)
    return rc;
  return mqproc__pg_run_text(
      s, "INSERT INTO mqproc_schema_migrations (version, name) VALUES ($1::int, $2)", 2, vals, NULL,
      err);
}

int mqproc__pg_migrate(mqproc__store_t *base, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  int rc = ensure_conn(s, err);
  if (rc != MQPROC_OK)
    return rc;
  rc = exec_plain(s,
                  "BEGIN; SELECT pg_advisory_xact_lock(hashtext('mqproc_migrate'));"
                  "CREATE TABLE IF NOT EXISTS mqproc_schema_migrations (version integer PRIMARY "
                  "KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
                  err);
  for (size_t i = 0; rc == MQPROC_OK && i < mqproc__n_migrations; i++)
    rc = apply_migration(s, &mqproc__migrations[i], err);
  if (rc == MQPROC_OK)
    rc = exec_plain(s, "COMMIT", err);
  else if (s->conn != NULL)
    exec_plain(s, "ROLLBACK", NULL);
  return rc;
}

int mqproc__pg_open(mqproc__store_t *base, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  PGresult *res = NULL;
  int rc = mqproc__pg_run_text(s, "SELECT coalesce(max(version), 0) FROM mqproc_schema_migrations",
                               0, NULL, &res, err);
  int version;
  if (rc == MQPROC_ESTORE_QUERY)
    return mqproc__err(err, MQPROC_ESTORE_QUERY,
                       "the mqproc schema is not installed in this database: run `mqproc "
                       "migrate --database=…` or start the server with --migrate");
  if (rc != MQPROC_OK)
    return rc;
  version = atoi(PQgetvalue(res, 0, 0));
  PQclear(res);
  if (version < SCHEMA_VERSION)
    return mqproc__err(err, MQPROC_ESTORE_QUERY,
                       "database schema is at version %d, this build needs %d: run `mqproc "
                       "migrate` or pass --migrate",
                       version, SCHEMA_VERSION);
  return MQPROC_OK;
}
