/* Internals shared by the PostgreSQL store's files: store/pg_engine.c (the asynchronous
 * connection: requests, rounds, batches), store/pg_conn.c (the synchronous connection of
 * start-up and `mqproc migrate`, the schema, error classes) and store/pg.c (the job
 * table's statements). Not an API. */
#ifndef MQPROC_STORE_PG_INT_H
#define MQPROC_STORE_PG_INT_H

#include <libpq-fe.h>

#include "loop/loop.h"
#include "store/store.h"

/* Most parameters any statement takes. */
#define MQPROC__PG_MAX_PARAMS 16

typedef struct pg_engine pg_engine_t;
typedef struct pg_req pg_req_t;

typedef struct pg_store {
  struct mqproc__store base; /* first: klass */
  char *conninfo;
  PGconn *conn;        /* synchronous: open and migrate only */
  pg_engine_t *engine; /* asynchronous: everything on the loop (NULL without a loop) */
  void (*on_notify)(void *ud, const char *payload); /* LISTENing to the control channel */
  void *notify_ud;
  int pooled; /* behind PgBouncer's transaction pooling: unnamed statements, no session
                 SET, no LISTEN (mqproc__store_pg_pooled) */
} pg_store_t;

/* Where `mqproc pause|resume|drain|jobs cancel` notify the servers (payload: the
 * processor's name). */
#define MQPROC__PG_CONTROL_CHANNEL "mqproc_control"

/* ---- statements ------------------------------------------------------------------- */

/* A statement the engine prepares once per connection. A batched one takes each of its
 * nparams parameters as an array (one element per request: unnest(...) WITH ORDINALITY)
 * and returns the ordinality (1-based) as its first column, so each row goes back to
 * its request; requests of one batch have distinct keys (job ids). */
typedef struct pg_stmt {
  const char *name;
  const char *sql;
  int nparams;
  int batched;
  int low_priority; /* held back (up to a linger) to share a round with other work */
  /* Reads the rows of r (indices rows[0..n), n may be 0) into r's out struct; returns
   * MQPROC_OK, an error (into r->err), or MQPROC__PG_RETRY to run the request again. */
  int (*parse)(pg_req_t *r, PGresult *res, const int *rows, int n);
} pg_stmt_t;

#define MQPROC__PG_RETRY 1

/* When a holder's lease ends, one rule for the claim and the sweeps (store/pg.c says
 * why): at lease_until, never within two leases (ms, an SQL expression) of the database's
 * start. */
/* clang-format off */
#define LEASE_END(col, ms) \
  "greatest(" col ", pg_postmaster_start_time() + 2 * " ms " * interval '1 millisecond')"
/* When a holder counts as dead, from its workers row (sql/005_fleet.sql): at once when it
 * was marked stopped or dead, else three refresh intervals after it was last seen, but, as
 * for LEASE_END, never within two leases of the database's start (nobody could refresh
 * while it was down). NULL when the holder has no row: then only its lease counts. */
#define HOLDER_DEAD_AT(worker, ms) \
  "(SELECT CASE WHEN w.state IN ('stopped', 'dead') THEN 'epoch'::timestamptz" \
  " ELSE greatest(w.last_seen + 3 * w.interval_ms * interval '1 millisecond'," \
  " pg_postmaster_start_time() + 2 * " ms " * interval '1 millisecond') END" \
  " FROM mqproc_workers w WHERE w.worker_id = " worker ")"
/* clang-format on */

struct pg_req {
  const pg_stmt_t *stmt;
  int n;
  char *vals[MQPROC__PG_MAX_PARAMS]; /* owned; NULL = SQL NULL */
  int lens[MQPROC__PG_MAX_PARAMS];
  int fmts[MQPROC__PG_MAX_PARAMS]; /* 1 = binary (single statements only) */
  void *out;                       /* the caller's out struct */
  void *row_cb;                    /* sweeps: the caller's row callback */
  mqproc__store_done_cb done;
  void *ud;
  char err[MQPROC_ERR_LEN];
  int rc;      /* its outcome, once its round ended */
  int solo;    /* alone in its round (after a round it shared failed) */
  int retries; /* MQPROC__PG_RETRY so far */
  pg_req_t *next;
};

/* Queues r (taking it): MQPROC_OK, or MQPROC_ENOMEM (r freed; a parameter failed). */
int mqproc__pg_submit(pg_store_t *s, pg_req_t *r);
void mqproc__pg_req_free(pg_req_t *r);

/* Queues a request of st (store/pg.c): types says how to read the parameters that follow,
 * one letter each: s string (NULL = SQL NULL), i int, l long long, b boolean (int),
 * y bytes (pointer, size_t length). out and row_cb are kept in the request for st's parse. */
int mqproc__pg_request(mqproc__store_t *base, const pg_stmt_t *st, void *out, void *row_cb,
                       mqproc__store_done_cb done, void *ud, const char *types, ...);
/* A parse for fenced writes: no row changed (no row returned, batched) is
 * MQPROC_ESTORE_FENCED; parameters 0 and 1 are the job and the attempt. */
int mqproc__pg_parse_fenced(pg_req_t *r, PGresult *res, const int *rows, int n);

/* The sweeps and marks (store/pg_sweep.c), the class's methods of those names. */
int mqproc__pg_sweep(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                     void (*row)(void *ud, const mqproc__sweep_row_t *r),
                     mqproc__store_done_cb done, void *ud);
int mqproc__pg_republished(mqproc__store_t *s, const char *job_id, mqproc__store_done_cb done,
                           void *ud);
int mqproc__pg_outbox_done(mqproc__store_t *s, const char *job_id, int attempt, int result_sent,
                           const char *publish_error, int callbacks_sent,
                           const char *callback_error, mqproc__store_done_cb done, void *ud);
int mqproc__pg_dead_lettered(mqproc__store_t *s, const char *job_id, int attempt,
                             mqproc__store_done_cb done, void *ud);
int mqproc__pg_sweep_outbox(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                            void (*row)(void *ud, const mqproc__outbox_row_t *r),
                            mqproc__store_done_cb done, void *ud);
int mqproc__pg_mark_published(mqproc__store_t *s, const char *job_id, const char *error,
                              mqproc__store_done_cb done, void *ud);
int mqproc__pg_record_callbacks(mqproc__store_t *s, const char *job_id, const char *error,
                                mqproc__store_done_cb done, void *ud);
int mqproc__pg_record_dead(mqproc__store_t *s, const char *processor, const char *job_id,
                           const void *body, size_t len, size_t keep, const char *reason,
                           const char *worker_id, mqproc__store_done_cb done, void *ud);

/* The fleet's statements (store/pg_fleet.c), the class's methods of those names. */
int mqproc__pg_beat(mqproc__store_t *s, mqproc__beat_t *b,
                    void (*cancel)(void *ud, const char *job_id, int attempt),
                    mqproc__store_done_cb done, void *ud);
int mqproc__pg_holder_gone(mqproc__store_t *s, const char *worker_id, const char *host, int pid,
                           const char *by, mqproc__store_done_cb done, void *ud);
int mqproc__pg_cancelled(mqproc__store_t *s, const char *job_id, int attempt, int try_no,
                         const mqproc__try_end_t *e, int outbox, int lease_ms,
                         mqproc__store_done_cb done, void *ud);

/* ---- batched statements (store/pg_batch.c) ------------------------------------------ */

/* The array literal of vals: {"a","b",NULL} (malloc'd; NULL: no memory). */
char *mqproc__pg_text_array(const char *const *vals, size_t n);
/* The array literal of parameter i over reqs (malloc'd; NULL: no memory). */
char *mqproc__pg_array_param(pg_req_t *const *reqs, int nreqs, int i);
/* Hands each request of a batched execution its rows (by the ordinality in column 0)
 * and sets its rc; a single execution's request gets all rows. A forgotten request
 * (done NULL) is not parsed. */
void mqproc__pg_parse_batched(pg_req_t *const *reqs, int nreqs, PGresult *res);
void mqproc__pg_parse_single(pg_req_t *r, PGresult *res);

/* ---- the engine (store/pg_engine.c) ------------------------------------------------ */

int mqproc__pg_engine_new(pg_engine_t **out, pg_store_t *s, mqproc__loop_t *loop, char *err);
/* Fails what is pending without calling back, closes, frees. */
void mqproc__pg_engine_free(pg_engine_t *e);
/* Requests of ud complete without calling back. */
void mqproc__pg_engine_forget(pg_engine_t *e, void *ud);
/* Takes conn (open, idle, blocking: start-up's) as the engine's connection, so a server
 * connects once; closes it instead when the engine has one or it cannot be switched. */
void mqproc__pg_engine_adopt(pg_engine_t *e, PGconn *conn);

/* ---- synchronous connection, errors, schema (store/pg_conn.c) ----------------------- */

/* How a failed statement's SQLSTATE is treated: connection and availability classes (08,
 * 53, 57P0x, 58) are outages (MQPROC_ESTORE_CONNECT); data, constraint and limit classes
 * (22, 23, 54) mean the data cannot be stored, ever (MQPROC_ESTORE_DATA); anything else
 * may pass when tried again (MQPROC_ESTORE_QUERY). */
int mqproc__pg_classify(const char *sqlstate);
/* A failed result's error, "query failed (SQLSTATE x): message" into err, classified. */
int mqproc__pg_result_error(const PGresult *res, char *err);
/* The keys and values for PQconnect*Params: conninfo (expanded as dbname), bounded
 * timeouts, keepalives, application_name. vals needs room for MQPROC__PG_MAX_PARAMS. */
extern const char *const mqproc__pg_conn_keys[];
void mqproc__pg_conn_vals(const char *conninfo, const char **vals);
/* Runs sql synchronously (start-up only) with n text parameters. */
int mqproc__pg_run_text(pg_store_t *s, const char *sql, int n, const char *const *vals,
                        PGresult **out, char *err);
/* The store class's migrate and open methods. */
int mqproc__pg_migrate(mqproc__store_t *base, char *err);
int mqproc__pg_open(mqproc__store_t *base, char *err);

#endif
