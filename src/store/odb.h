/* The job store as operators' tools see it (the CLI and the status page's reader thread):
 * one blocking connection, to PostgreSQL (libpq) or SQLite (the store's own settings),
 * and statements whose rows come back as text, as libpq gives them. Where the dialects
 * differ a caller passes both texts: PostgreSQL's with $1.., SQLite's with ?1..
 * (SQLite's "$1" would be a named parameter). Never on a server's loop. */
#ifndef MQPROC_OPS_ODB_H
#define MQPROC_OPS_ODB_H

#include <stddef.h>

typedef struct mqproc__odb mqproc__odb_t;
typedef struct mqproc__ores mqproc__ores_t;

/* Connects to postgresql://… (or a libpq conninfo) or sqlite:///PATH; statements are
 * cancelled after timeout_ms on PostgreSQL (SQLite waits up to the store's busy
 * timeout for the write lock). NULL with err (512 bytes). */
mqproc__odb_t *mqproc__odb_open(const char *url, int timeout_ms, char *err);
/* Whether the connection is SQLite's. */
int mqproc__odb_sqlite(const mqproc__odb_t *db);
/* SQLite: tells the servers on this host that payload's (a processor's) wishes or cancels
 * changed (store/sqlite/notice.h); after the commit. (PostgreSQL: pg_notify in the
 * transaction.) */
void mqproc__odb_sq_notice(mqproc__odb_t *db, const char *payload);
/* Whether the connection can still be used (PostgreSQL: not lost). */
int mqproc__odb_ok(const mqproc__odb_t *db);
void mqproc__odb_close(mqproc__odb_t *db);

/* Runs pg or, on SQLite, sq (NULL: pg, for statements both dialects read alike and that
 * have no parameters) with vals as text (NULL: SQL NULL). A write on SQLite outside a
 * transaction runs in its own BEGIN IMMEDIATE, so the busy timeout covers it. NULL
 * with err (512 bytes) when it fails. */
mqproc__ores_t *mqproc__odb_q(mqproc__odb_t *db, const char *pg, const char *sq, int n,
                              const char *const *vals, char *err);
/* BEGIN (SQLite: BEGIN IMMEDIATE, the write lock up front), COMMIT, ROLLBACK: 0 or -1. */
int mqproc__odb_begin(mqproc__odb_t *db, char *err);
int mqproc__odb_commit(mqproc__odb_t *db, char *err);
void mqproc__odb_rollback(mqproc__odb_t *db);

int mqproc__ores_rows(const mqproc__ores_t *r);
int mqproc__ores_cols(const mqproc__ores_t *r);
const char *mqproc__ores_name(const mqproc__ores_t *r, int col);
/* A cell as text ("" when NULL, as PQgetvalue). */
const char *mqproc__ores_get(const mqproc__ores_t *r, int row, int col);
int mqproc__ores_null(const mqproc__ores_t *r, int row, int col);
/* A boolean cell: PostgreSQL's t, SQLite's non-zero. */
int mqproc__ores_bool(const mqproc__ores_t *r, int row, int col);
/* A bytes cell (bytea, blob) as a malloc()ed copy with its length; NULL when NULL. */
unsigned char *mqproc__ores_bytes(const mqproc__ores_t *r, int row, int col, size_t *len);
/* The rows an INSERT, UPDATE or DELETE changed. */
long long mqproc__ores_changed(const mqproc__ores_t *r);
void mqproc__ores_free(mqproc__ores_t *r);

#endif
