/* Internals shared by the PostgreSQL store's files: store_pg_conn.c (connections,
 * statements, schema) and store_pg.c (the job table's statements). Not an API. */
#ifndef MQPROC_STORE_PG_INT_H
#define MQPROC_STORE_PG_INT_H

#include <libpq-fe.h>

#include "store.h"

typedef struct pg_store {
  struct mqproc__store base; /* first: klass */
  char *conninfo;
  PGconn *conn;
} pg_store_t;

/* Most parameters any statement takes. */
#define MQPROC__PG_MAX_PARAMS 16

/* How a failed statement's SQLSTATE is treated: connection and availability classes (08,
 * 53, 57P0x, 58) are outages (MQPROC_ESTORE_CONNECT); data, constraint and limit classes
 * (22, 23, 54) mean the data cannot be stored, ever (MQPROC_ESTORE_DATA); anything else
 * may pass when tried again (MQPROC_ESTORE_QUERY). */
int mqproc__pg_classify(const char *sqlstate);

/* Runs sql with n text parameters (NULL = SQL NULL; binary when fmts[i] is 1), connecting
 * first if needed. On success *out (if not NULL) gets the result, which the caller
 * PQclear()s. MQPROC_ESTORE_CONNECT when the connection is lost, MQPROC_ESTORE_QUERY when
 * the statement failed. */
int mqproc__pg_run(pg_store_t *s, const char *sql, int n, const char *const *vals, const int *lens,
                   const int *fmts, PGresult **out, char *err);
/* mqproc__pg_run() with text parameters only. */
int mqproc__pg_run_text(pg_store_t *s, const char *sql, int n, const char *const *vals,
                        PGresult **out, char *err);
/* A fenced write: 0 rows affected is MQPROC_ESTORE_FENCED (a newer attempt owns the job).
 * On success *out (if not NULL) gets the result (RETURNING rows), which the caller
 * PQclear()s. */
int mqproc__pg_run_fenced(pg_store_t *s, const char *sql, int n, const char *const *vals,
                          const char *job_id, int attempt, PGresult **out, char *err);
/* The store class's migrate and open methods. */
int mqproc__pg_migrate(mqproc__store_t *base, char *err);
int mqproc__pg_open(mqproc__store_t *base, char *err);

#endif
