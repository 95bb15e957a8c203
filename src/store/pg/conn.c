/* PostgreSQL job store: the synchronous connection of start-up (open, migrate; `mqproc
 * migrate`), the schema, and what both connections share: connection parameters with
 * bounded timeouts, the SQLSTATE classes, UTF-8 clean text. The loop's connection is the
 * asynchronous engine (engine.c), which takes this one over once it is open.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

#define SCHEMA_VERSION 12

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

int mqproc__pg_result_error(const PGresult *res, char *err) {
  const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  int rc = mqproc__err(err, mqproc__pg_classify(state), "query failed (SQLSTATE %s): %s",
                       state != NULL ? state : "?", PQresultErrorMessage(res));
  one_line(err);
  return rc;
}

/* ---- connecting --------------------------------------------------------------------- */

const char *const mqproc__pg_conn_keys[] = {"connect_timeout",
                                            "keepalives_idle",
                                            "keepalives_interval",
                                            "keepalives_count",
                                            "tcp_user_timeout",
                                            "application_name",
                                            "dbname",
                                            NULL};

void mqproc__pg_conn_vals(const char *conninfo, const char **vals) {
  static const char *const fixed[] = {"5", "10", "5", "3", "15000", "mqproc"};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(fixed); i++)
    vals[i] = fixed[i];
  vals[6] = conninfo;
  vals[7] = NULL;
}

static int ensure_conn(pg_store_t *s, char *err) {
  const char *vals[MQPROC__PG_MAX_PARAMS];
  if (s->conn != NULL && PQstatus(s->conn) == CONNECTION_OK)
    return MQPROC_OK;
  PQfinish(s->conn);
  mqproc__pg_conn_vals(s->conninfo, vals);
  s->conn = PQconnectdbParams(mqproc__pg_conn_keys, vals, 1);
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
  return MQPROC_OK;
}

int mqproc__pg_run_text(pg_store_t *s, const char *sql, int n, const char *const *vals,
                        PGresult **out, char *err) {
  PGresult *res;
  ExecStatusType st;
  int rc = ensure_conn(s, err);
  if (rc != MQPROC_OK)
    return rc;
  res = PQexecParams(s->conn, sql, n, NULL, vals, NULL, NULL, 0);
  st = PQresultStatus(res);
  if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
    if (out != NULL)
      *out = res;
    else
      PQclear(res);
    return MQPROC_OK;
  }
  if (PQstatus(s->conn) != CONNECTION_OK) {
    rc = mqproc__err(err, MQPROC_ESTORE_CONNECT, "database connection lost: %s",
                     PQerrorMessage(s->conn));
    one_line(err);
    PQfinish(s->conn);
    s->conn = NULL;
  } else {
    rc = mqproc__pg_result_error(res, err);
  }
  PQclear(res);
  return rc;
}

/* ---- schema ------------------------------------------------------------------------- */

static int exec_plain(pg_store_t *s, const char *sql, char *err) {
  PGresult *res = PQexec(s->conn, sql);
  ExecStatusType st = PQresultStatus(res);
  int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? MQPROC_OK
                                                           : mqproc__pg_result_error(res, err);
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

int mqproc__pg_schema(mqproc__store_t *base, int *version, int *steps, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  PGresult *res = NULL;
  int rc = ensure_conn(s, err);
  *version = *steps = 0;
  if (rc != MQPROC_OK)
    return rc;
  rc = mqproc__pg_run_text(
      s, "SELECT coalesce(max(version), 0), count(*) FROM mqproc_schema_migrations", 0, NULL, &res,
      err);
  if (rc == MQPROC_ESTORE_QUERY) /* no table: no schema */
    return MQPROC_OK;
  if (rc != MQPROC_OK)
    return rc;
  *version = atoi(PQgetvalue(res, 0, 0));
  *steps = atoi(PQgetvalue(res, 0, 1));
  PQclear(res);
  return MQPROC_OK;
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
  if (s->engine != NULL) { /* the engine's connection from now on: no second connect */
    mqproc__pg_engine_adopt(s->engine, s->conn);
    s->conn = NULL;
  }
  return MQPROC_OK;
}
