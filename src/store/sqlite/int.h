/* Internals of the SQLite store: store/sqlite.c (the class: each method a request whose
 * statements run on the engine) and store/sqlite_engine.c (the engine: one thread with
 * its own connection runs every request queued meanwhile in one BEGIN IMMEDIATE
 * transaction, a savepoint each, and hands the finished ones back to the loop through an
 * eventfd, where their row callbacks and done run). The loop never waits for SQLite. */
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

struct sq_req {
  /* runs on the engine thread: the statements of this request; MQPROC_OK, or an error
     with r->err (a store error code: _FENCED, _QUERY, _DATA) */
  int (*run)(sqlite3 *db, sq_req_t *r);
  /* runs on the loop before done: hands r->rows to the caller's row callback */
  void (*rows_out)(sq_req_t *r);
  char *s[16];     /* text arguments (copies) */
  long long i[16]; /* integer arguments */
  void *blob;      /* a blob argument (copy) */
  size_t blob_len;
  void *out;             /* the caller's out struct or int: written on the loop only, by copy_out,
                            when the request was not forgotten */
  mqproc__claim_t claim; /* run_claim's answer, for copy_out */
  int int_out;           /* start_try's try number, fail's "requeued" */
  void (*copy_out)(sq_req_t *r);
  void *row_cb; /* the caller's row callback */
  sq_row_t *rows, **rows_tail;
  mqproc__store_done_cb done;
  void *ud;
  int forgotten;
  int unsynced_ok; /* a power cut may lose it (a workers-row refresh): a round of only
                      these commits without an fsync (synchronous=NORMAL) */
  int probe;       /* a ping: while the database is down, it looks again (recover) */
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
  struct mqproc__sq_notice *notice; /* listen(): the operators' notice file */
};

/* The engine (store/sqlite_engine.c). */
int mqproc__sq_engine_new(struct sq_engine **out, sq_store_t *s, mqproc__loop_t *loop, char *err);
void mqproc__sq_engine_free(struct sq_engine *e);
/* Queues r (taken); MQPROC_OK. */
int mqproc__sq_submit(sq_store_t *s, sq_req_t *r);
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

/* ---- requests and statements (store/sqlite.c) ---- */
/* A request of run: types says what follows: s text (copied into r->s in order), i int
 * and l long long (into r->i in order), y a blob (pointer, size_t). NULL: out of memory. */
sq_req_t *mqproc__sq_req(int (*run)(sqlite3 *, sq_req_t *), void *out, mqproc__store_done_cb done,
                         void *ud, const char *types, ...);
/* Queues r (NULL: MQPROC_ENOMEM). */
int mqproc__sq_send(mqproc__store_t *base, sq_req_t *r);
void mqproc__sq_text(sqlite3_stmt *st, int i, const char *s);
/* Steps to the end: the rows changed, or a store error code (< 0) with err. */
int mqproc__sq_exec(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err);
/* The first step: 1 a row, 0 none (reset), < 0 a store error code with err. */
int mqproc__sq_first(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err);
/* Runs sql with s[0..ns), then i[0..ni), then the blob (if any) bound in that order:
 * MQPROC_ESTORE_FENCED when fence and it changed no row. */
int mqproc__sq_run(sqlite3 *db, sq_req_t *r, const char *sql, int ns, int ni, int fence);
/* MQPROC_ESTORE_FENCED for r (s[0] the job, i[0] the attempt). */
int mqproc__sq_fenced(sq_req_t *r);

/* ---- the schema (store/sqlite_conn.c): the class's open and migrate ---- */
int mqproc__sq_open(mqproc__store_t *base, char *err);
int mqproc__sq_migrate(mqproc__store_t *base, char *err);

/* ---- the sweeps, marks and the fleet (store/sqlite_ops.c): the class's methods ---- */
int mqproc__sq_sweep(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                     void (*row)(void *ud, const mqproc__sweep_row_t *r),
                     mqproc__store_done_cb done, void *ud);
int mqproc__sq_sweep_outbox(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                            void (*row)(void *ud, const mqproc__outbox_row_t *r),
                            mqproc__store_done_cb done, void *ud);
int mqproc__sq_republished(mqproc__store_t *s, const char *job_id, mqproc__store_done_cb done,
                           void *ud);
int mqproc__sq_outbox_done(mqproc__store_t *s, const char *job_id, int attempt, int result_sent,
                           const char *publish_error, int callbacks_sent,
                           const char *callback_error, mqproc__store_done_cb done, void *ud);
int mqproc__sq_dead_lettered(mqproc__store_t *s, const char *job_id, int attempt,
                             mqproc__store_done_cb done, void *ud);
int mqproc__sq_mark_published(mqproc__store_t *s, const char *job_id, const char *error,
                              mqproc__store_done_cb done, void *ud);
int mqproc__sq_record_callbacks(mqproc__store_t *s, const char *job_id, const char *error,
                                mqproc__store_done_cb done, void *ud);
int mqproc__sq_record_dead(mqproc__store_t *s, const char *processor, const char *job_id,
                           const void *body, size_t len, size_t keep, const char *reason,
                           const char *worker_id, mqproc__store_done_cb done, void *ud);
int mqproc__sq_beat(mqproc__store_t *s, mqproc__beat_t *b,
                    void (*cancel)(void *ud, const char *job_id, int attempt),
                    mqproc__store_done_cb done, void *ud);
int mqproc__sq_holder_gone(mqproc__store_t *s, const char *worker_id, const char *host, int pid,
                           const char *by, mqproc__store_done_cb done, void *ud);

#endif
