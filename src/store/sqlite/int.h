/* Internals of the SQLite store: store/sqlite/jobs.c (the job's own statements, the table
 * of every operation's and the class: each request's statements run on the engine),
 * store/sqlite/ops.c (the statements of the sweeps, marks and the fleet),
 * store/sqlite/queue.c (the table queues'),
 * store/sqlite/engine.c (the engine: one thread with its own connection runs every request
 * queued meanwhile in one BEGIN IMMEDIATE transaction, a savepoint each, and hands the
 * finished ones back to the loop through an eventfd, where their answers and done run),
 * store/sqlite/conn.c (the schema, open and migrate). The loop never waits for SQLite. */
#ifndef MQPROC_STORE_SQLITE_INT_H
#define MQPROC_STORE_SQLITE_INT_H

#include <sqlite3.h>

#include "mqproc/mqproc.h"
#include "store/store.h"

typedef struct sq_store sq_store_t;
typedef struct sq_req sq_req_t;

/* Rows a request hands to the loop (sweeps, cancels of a beat): text columns, copied. */
typedef struct sq_row {
  char *col[12];
  size_t len[12]; /* of blob columns */
  struct sq_row *next;
} sq_row_t;

/* What the store does for one operation (store.h), in store/sqlite/jobs.c's table. */
typedef struct sq_op {
  /* on the engine's thread: the operation's statements, each parameter bound from a named
     field of r->q (or r->x); MQPROC_OK, or an error with r->err (a store error code:
     _FENCED, _QUERY, _DATA) */
  int (*run)(sqlite3 *db, sq_req_t *r);
  /* on the loop before done, when it succeeded and was not forgotten: its answer into the
     caller's out fields or row callback (NULL: none) */
  void (*answer)(sq_req_t *r);
  int unsynced_ok; /* a power cut may lose it (a workers-row refresh): a round of only
                      these commits without an fsync (synchronous=NORMAL) */
  int probe;       /* a ping: while the database is down, it looks again (recover) */
} sq_op_t;

#define MQPROC__SQ_OWNED 10 /* copies one request owns, at most (a claim's: 8) */

struct sq_req {
  const sq_op_t *op;
  /* the request as made; the texts and bytes it points to are copies r owns (made by
     submit: the thread never reads the caller's memory; for claim and beat, which point
     at the caller's struct, it reads x's copy), but the out pointers (claim, beat,
     try_no, requeued) are the caller's: written on the loop only, by answer */
  mqproc__store_req_t q;
  union {                  /* what an operation keeps beside its arguments */
    mqproc__claim_t claim; /* claim: the thread's copy of the caller's (texts owned), with
                              the answer (answer copies its out fields back) */
    struct {
      mqproc__beat_t b;      /* beat: the thread's copy of the caller's (texts owned) */
      const char *jobs_json; /* its current jobs as a JSON array (owned) */
    } beat;
    unsigned char sha256[32]; /* record_dead: of the whole body (only keep bytes are copied) */
  } x;
  int int_out; /* start_try's try number, fail's "requeued" */
  void *owned[MQPROC__SQ_OWNED];
  int nowned;
  int nomem; /* a copy failed: the request is not queued */
  sq_row_t *rows, **rows_tail;
  int forgotten;
  int rc;
  char err[MQPROC_ERR_LEN];
  sq_req_t *next;
};

struct sq_store {
  mqproc__store_t base;
  char *path;      /* the database file */
  int sync_normal; /* ?synchronous=normal: a commit may be lost to a power cut */
  struct sq_engine *engine;
  mqproc__loop_t *loop;             /* the server's, NULL for the operators' tools */
  struct mqproc__sq_notice *notice; /* listen(), listen_queues(): the notice file */
  void (*on_control)(void *ud, const char *payload); /* listen() */
  void *control_ud;
  void (*on_queue)(void *ud, const char *queue); /* listen_queues() */
  void *queue_ud;
};

/* The engine (store/sqlite/engine.c). */
int mqproc__sq_engine_new(struct sq_engine **out, sq_store_t *s, mqproc__loop_t *loop, char *err);
void mqproc__sq_engine_free(struct sq_engine *e);
/* Queues r (taken); MQPROC_OK, or MQPROC_EINVAL (r freed; no loop). */
int mqproc__sq_enqueue(sq_store_t *s, sq_req_t *r);
/* Requests of ud still pending complete without calling back. */
void mqproc__sq_forget(struct sq_engine *e, void *ud);

/* Opens path with the store's settings (WAL, synchronous, busy timeout, mq_now());
 * MQPROC_ESTORE_CONNECT with err. */
int mqproc__sq_open_db(sq_store_t *s, sqlite3 **db, char *err);
/* A statement prepared once per connection (cached by its text's address). */
sqlite3_stmt *mqproc__sq_stmt(sqlite3 *db, const char *sql, char *err);
/* The store error of a failed step: _DATA for constraints, _CONNECT for a lasting failure
 * of the database (mqproc__sq_lasting), else _QUERY. */
int mqproc__sq_error(sqlite3 *db, const char *what, char *err);
/* Whether an SQLite result code means the database is unusable until someone acts (READONLY,
 * CORRUPT, NOTADB, FULL, IOERR, CANTOPEN, PERM, NOLFS): a store outage, not one statement's
 * failure. */
int mqproc__sq_lasting(int code);
/* Whether db can take the server's writes: not opened read-only, every page sound (when
 * pages: PRAGMA quick_check, which reads the whole file), and a write commits. MQPROC_OK,
 * or a store error with err (_CONNECT: it cannot, _QUERY: try again, e.g. busy). */
int mqproc__sq_probe(sqlite3 *db, const char *path, int pages, char *err);
/* A row for r->rows (columns copied); NULL when out of memory. */
sq_row_t *mqproc__sq_row_add(sq_req_t *r);

/* ---- requests (store/sqlite/engine.c) ---- */
/* Makes *s a copy r owns (UTF-8 cleaned, as PostgreSQL wants its texts); NULL stays NULL.
 * Out of memory sets r->nomem. */
void mqproc__sq_own_text(sq_req_t *r, const char **s);
/* Makes *p a copy r owns of its len bytes (not NULL, also for none); NULL stays NULL. */
void mqproc__sq_own_bytes(sq_req_t *r, const void **p, size_t len);
/* Frees r and what it owns. */
void mqproc__sq_req_free(sq_req_t *r);
/* The typed bind helpers: parameter i (1-based) of st; a NULL text or bytes pointer binds
 * SQL NULL, as does not binding it. The values must live until st is reset (r's do). */
void mqproc__sq_bind_text(sqlite3_stmt *st, int i, const char *s);
void mqproc__sq_bind_int(sqlite3_stmt *st, int i, int64_t v); /* SQLite's are 64 bits */
void mqproc__sq_bind_bool(sqlite3_stmt *st, int i, int v);    /* 0 or 1 */
void mqproc__sq_bind_bytes(sqlite3_stmt *st, int i, const void *p, size_t len);
/* Steps to the end: the rows changed, or a store error code (< 0) with err. */
int mqproc__sq_exec(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err);
/* The first step: 1 a row, 0 none (reset), < 0 a store error code with err. */
int mqproc__sq_first(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err);
/* Steps st to its end: MQPROC_OK, or a store error code with r->err. */
int mqproc__sq_write(sqlite3 *db, sqlite3_stmt *st, sq_req_t *r, const char *what);
/* Likewise, and MQPROC_ESTORE_FENCED when it changed no row: attempt no longer owns job. */
int mqproc__sq_write_fenced(sqlite3 *db, sqlite3_stmt *st, sq_req_t *r, const char *what,
                            const char *job, int attempt);
/* MQPROC_ESTORE_FENCED with r->err: attempt no longer owns job. */
int mqproc__sq_fenced(sq_req_t *r, const char *job, int attempt);

/* ---- the schema (store/sqlite/conn.c): the class's open and migrate ---- */
int mqproc__sq_open(mqproc__store_t *base, char *err);
int mqproc__sq_migrate(mqproc__store_t *base, char *err);
/* The schema's version and its steps recorded (store.h's schema slot). */
int mqproc__sq_schema(mqproc__store_t *base, int *version, int *steps, char *err);

/* ---- the sweeps, marks and the fleet (store/sqlite/ops.c), in store/sqlite/jobs.c's
 * table of every operation ---- */
extern const sq_op_t mqproc__sq_op_sweep;
extern const sq_op_t mqproc__sq_op_sweep_outbox;
extern const sq_op_t mqproc__sq_op_republished;
extern const sq_op_t mqproc__sq_op_outbox_done;
extern const sq_op_t mqproc__sq_op_dead_lettered;
extern const sq_op_t mqproc__sq_op_mark_published;
extern const sq_op_t mqproc__sq_op_record_callbacks;
extern const sq_op_t mqproc__sq_op_record_dead;
extern const sq_op_t mqproc__sq_op_beat;
extern const sq_op_t mqproc__sq_op_holder_gone;
/* A beat's part of the copy submit makes (r->x.beat: the caller's struct, its texts and
 * its jobs as JSON). */
void mqproc__sq_own_beat(sq_req_t *r);

/* ---- the table queues (store/sqlite/queue.c), in store/sqlite/jobs.c's table ---- */
extern const sq_op_t mqproc__sq_op_q_take;
extern const sq_op_t mqproc__sq_op_q_ack;
extern const sq_op_t mqproc__sq_op_q_nack;
extern const sq_op_t mqproc__sq_op_q_publish;
extern const sq_op_t mqproc__sq_op_q_extend;
extern const sq_op_t mqproc__sq_op_q_reset;
/* The SQL of a take's statement for the held messages past their deadline (back 1) or the
 * ready ones (0): for the test that looks at their plans (tests/integration/
 * test_table_queue.c). */
const char *mqproc__sq_take_sql(int back);
/* The table queues' part of the copy submit makes (their texts, bytes and id arrays). */
void mqproc__sq_own_queue_args(sq_req_t *r);
/* Once r's turn committed (on the engine's thread): the table queue whose listeners are
 * told through the notice file, NULL when none (a publish's, a reset that gave some back). */
const char *mqproc__sq_queue_notice(const sq_req_t *r);
/* A success's table queue part (store.h: succeed's q_* and result_* fields), after its job
 * write: the message's ack and the result, in the same savepoint. */
int mqproc__sq_queue_in_write(sqlite3 *db, sq_req_t *r, const mqproc__store_succeed_t *a);

#endif
