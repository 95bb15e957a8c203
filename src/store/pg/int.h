/* Internals shared by the PostgreSQL store's files: store/pg/engine.c (the asynchronous
 * connection: requests, rounds, batches), store/pg/batch.c (a batched execution's arrays),
 * store/pg/conn.c (the synchronous connection of start-up and `mqproc migrate`, the
 * schema, error classes) and the statements of each operation: store/pg/jobs.c (the job's
 * own, the table of all of them and the class), store/pg/sweep.c (the sweeps and marks),
 * store/pg/fleet.c (the workers row), store/pg/queue.c (the table queues'). Not an API. */
#ifndef MQPROC_STORE_PG_INT_H
#define MQPROC_STORE_PG_INT_H

#include <libpq-fe.h>

#include "loop/loop.h"
#include "store/store.h"

/* Most parameters any statement takes. */
#define MQPROC__PG_MAX_PARAMS 24

typedef struct pg_engine pg_engine_t;
typedef struct pg_req pg_req_t;

typedef struct pg_store {
  struct mqproc__store base; /* first: klass */
  char *conninfo;
  PGconn *conn;        /* synchronous: open and migrate only */
  pg_engine_t *engine; /* asynchronous: everything on the loop (NULL without a loop) */
  void (*on_notify)(void *ud, const char *payload); /* LISTENing to the control channel */
  void *notify_ud;
  void (*on_queue)(void *ud, const char *queue); /* LISTENing to a table queue's channel */
  void *queue_ud;
  char queue_listen[64]; /* "LISTEN <that channel>" (mqproc__pg_queue_channel()) */
  int pooled;            /* behind PgBouncer's transaction pooling: unnamed statements, no session
                            SET, no LISTEN (mqproc__store_pg_pooled) */
} pg_store_t;

/* Where `mqproc pause|resume|drain|jobs cancel` notify the servers (payload: the
 * processor's name). */
#define MQPROC__PG_CONTROL_CHANNEL "mqproc_control"
/* Where a table queue's new messages are told (payload: the queue's name), at the commit of
 * the transaction that made them (q_publish, mqproc_enqueue(): sql/010_table_queues.sql):
 * a channel per queue, "mqproc_q_" and the first 32 hex digits of the SHA-256 of its name
 * (SQL: mqproc_queue_channel(queue)), so a NOTIFY wakes only the servers of that queue
 * (one channel for all woke every server, and made its backend run a transaction, for
 * every result and every other queue's message). out: at least 42 bytes. */
#define MQPROC__PG_QUEUE_CHANNEL_SQL "mqproc_queue_channel"
void mqproc__pg_queue_channel(const char *queue, char *out);

/* ---- statements ------------------------------------------------------------------- */

/* The statement of one operation (store.h), prepared once per connection. A batched one
 * takes each of its nparams parameters as an array (one element per request: unnest(...)
 * WITH ORDINALITY) and returns the ordinality (1-based) as its first column, so each row
 * goes back to its request; requests of one batch have distinct keys (job ids, the first
 * parameter). */
typedef struct pg_stmt {
  const char *name;
  const char *sql;
  int nparams;
  int batched;
  int low_priority; /* held back (up to a linger) to share a round with other work */
  /* Binds each parameter of r from the named fields of the request q (of this statement's
   * operation) with the mqproc__pg_bind_* helpers, and keeps q's out pointers in r->out;
   * when the request is made, so nothing of q is read later. NULL: no parameters. */
  void (*bind)(pg_req_t *r, const mqproc__store_req_t *q);
  /* Reads the rows of r (indices rows[0..n), n may be 0) into r->out; returns MQPROC_OK,
   * an error (into r->err), MQPROC__PG_RETRY to run the request again, or
   * MQPROC__PG_FALLBACK to run it again with the fallback statement. */
  int (*parse)(pg_req_t *r, PGresult *res, const int *rows, int n);
  /* The statement a request goes on with when parse says MQPROC__PG_FALLBACK (the same
   * parameters and batching; NULL: none). A fast path for the common case, the full
   * statement for the rest (the claim). */
  const struct pg_stmt *fallback;
} pg_stmt_t;

/* The SQL of op's statement (fallback: of its fallback), NULL when none: for the test that
 * looks at their plans (tests/integration/test_pg_plans.c). */
const char *mqproc__pg_stmt_sql(mqproc__store_op_t op, int fallback);

#define MQPROC__PG_RETRY 1
#define MQPROC__PG_FALLBACK 2

/* When a holder's lease ends, one rule for the claim and the sweeps (store/pg/jobs.c says
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
  char *vals[MQPROC__PG_MAX_PARAMS]; /* owned; NULL = SQL NULL (a parameter not bound) */
  int lens[MQPROC__PG_MAX_PARAMS];
  int fmts[MQPROC__PG_MAX_PARAMS]; /* 1 = binary (single statements only) */
  int nomem;                       /* a bind ran out of memory: the request is not queued */
  /* where the answer goes: the caller's (store.h: valid until done), set by the bind */
  union {
    mqproc__claim_t *claim;
    int *try_no;   /* start_try */
    int *requeued; /* fail */
    void (*sweep_row)(void *ud, const mqproc__sweep_row_t *r);
    void (*outbox_row)(void *ud, const mqproc__outbox_row_t *r);
    void (*q_row)(void *ud, const mqproc__q_msg_t *m); /* q_take */
    int *count;                                        /* q_ack, q_nack, q_extend */
    struct {
      mqproc__beat_t *b;
      void (*cancel)(void *ud, const char *job_id, int attempt);
    } beat;
  } out;
  mqproc__store_done_cb done;
  void *ud;
  char err[MQPROC_ERR_LEN];
  int rc;      /* its outcome, once its round ended */
  int solo;    /* alone in its round (after a round it shared failed) */
  int early;   /* answered before its round commits, the round kept open for what that
                  answer brings (a table queue's take: store.h) */
  int retries; /* MQPROC__PG_RETRY so far */
  pg_req_t *next;
};

/* Queues r (taking it): MQPROC_OK, or MQPROC_ESTATE (r freed; no loop). */
int mqproc__pg_enqueue(pg_store_t *s, pg_req_t *r);
void mqproc__pg_req_free(pg_req_t *r);

/* The typed bind helpers (store/pg/jobs.c): parameter i of r, as text (libpq's text
 * format; bytes in binary, or as bytea's text form in a batched statement's array). A
 * NULL text or bytes pointer leaves the parameter SQL NULL, as does not binding it. Out
 * of memory sets r->nomem. Texts are UTF-8 cleaned (the server refuses malformed UTF-8
 * with a data error: error texts from processors, excerpts cut mid-character). */
void mqproc__pg_bind_text(pg_req_t *r, int i, const char *s);
void mqproc__pg_bind_int(pg_req_t *r, int i, int v);
void mqproc__pg_bind_int64(pg_req_t *r, int i, int64_t v);
void mqproc__pg_bind_bool(pg_req_t *r, int i, int v);
void mqproc__pg_bind_bytes(pg_req_t *r, int i, const void *p, size_t len);
/* A parse for fenced writes: no row changed (no row returned, batched) is
 * MQPROC_ESTORE_FENCED; parameters 0 and 1 are the job and the attempt. */
int mqproc__pg_parse_fenced(pg_req_t *r, PGresult *res, const int *rows, int n);

/* The statements of the sweeps and marks (store/pg/sweep.c) and of the fleet
 * (store/pg/fleet.c), in store/pg/jobs.c's table of every operation's statement. */
extern const pg_stmt_t mqproc__pg_stmt_sweep;
extern const pg_stmt_t mqproc__pg_stmt_sweep_outbox;
extern const pg_stmt_t mqproc__pg_stmt_republished;
extern const pg_stmt_t mqproc__pg_stmt_outbox_done;
extern const pg_stmt_t mqproc__pg_stmt_dead_lettered;
extern const pg_stmt_t mqproc__pg_stmt_mark_published;
extern const pg_stmt_t mqproc__pg_stmt_record_callbacks;
extern const pg_stmt_t mqproc__pg_stmt_record_dead;
extern const pg_stmt_t mqproc__pg_stmt_beat;
extern const pg_stmt_t mqproc__pg_stmt_holder_gone;
/* The table queues' (store/pg/queue.c). */
extern const pg_stmt_t mqproc__pg_stmt_q_take;
extern const pg_stmt_t mqproc__pg_stmt_q_ack;
extern const pg_stmt_t mqproc__pg_stmt_q_nack;
extern const pg_stmt_t mqproc__pg_stmt_q_publish;
extern const pg_stmt_t mqproc__pg_stmt_q_extend;
extern const pg_stmt_t mqproc__pg_stmt_q_reset;

/* ---- batched statements (store/pg/batch.c) ------------------------------------------ */

/* The array literal of vals: {"a","b",NULL} (malloc'd; NULL: no memory). */
char *mqproc__pg_text_array(const char *const *vals, size_t n);
/* The array literal of parameter i over reqs (malloc'd; NULL: no memory). */
char *mqproc__pg_array_param(pg_req_t *const *reqs, int nreqs, int i);
/* Hands each request of a batched execution its rows (by the ordinality in column 0)
 * and sets its rc; a single execution's request gets all rows. A forgotten request
 * (done NULL) is not parsed. */
void mqproc__pg_parse_batched(pg_req_t *const *reqs, int nreqs, PGresult *res);
void mqproc__pg_parse_single(pg_req_t *r, PGresult *res);

/* ---- the engine (store/pg/engine.c) ------------------------------------------------ */

int mqproc__pg_engine_new(pg_engine_t **out, pg_store_t *s, mqproc__loop_t *loop, char *err);
/* Fails what is pending without calling back, closes, frees. */
void mqproc__pg_engine_free(pg_engine_t *e);
/* Requests of ud complete without calling back. */
void mqproc__pg_engine_forget(pg_engine_t *e, void *ud);
/* The LISTENs changed: the next round sets the session up again (settings and LISTENs). */
void mqproc__pg_engine_relisten(pg_engine_t *e);
/* Takes conn (open, idle, blocking: start-up's) as the engine's connection, so a server
 * connects once; closes it instead when the engine has one or it cannot be switched. */
void mqproc__pg_engine_adopt(pg_engine_t *e, PGconn *conn);

/* ---- synchronous connection, errors, schema (store/pg/conn.c) ----------------------- */

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
/* The schema's version and its steps recorded (store.h's schema slot). */
int mqproc__pg_schema(mqproc__store_t *base, int *version, int *steps, char *err);
int mqproc__pg_open(mqproc__store_t *base, char *err);

#endif
