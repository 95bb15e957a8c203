/* Operators' connection to the job store (odb.h): libpq's results as they come, SQLite's
 * rows copied into a table of text cells that reads the same way. */
#include "store/odb.h"

#include <errno.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "mqproc/mqproc.h"
#include "store/store.h"
#include "store/pg/int.h"
#include "store/sqlite/notice.h"

#define ERRLEN 512

struct mqproc__odb {
  PGconn *pg;
  sqlite3 *sq;
};

typedef struct cell {
  char *v; /* NUL-terminated copy (a blob too); NULL: SQL NULL */
  size_t len;
} cell_t;

struct mqproc__ores {
  PGresult *pg; /* PostgreSQL's, or NULL and the table below */
  int rows, cols, cap;
  char **names;
  cell_t *cells; /* rows * cols */
  long long changed;
};

mqproc__odb_t *mqproc__odb_open(const char *url, int timeout_ms, char *err) {
  mqproc__odb_t *db = calloc(1, sizeof(*db));
  if (db == NULL) {
    snprintf(err, ERRLEN, "out of memory\n");
    return NULL;
  }
  if (mqproc__store_is_sqlite(url)) {
    char e[MQPROC_ERR_LEN];
    if (mqproc__store_sqlite_connect(url, &db->sq, e) != MQPROC_OK) {
      snprintf(err, ERRLEN, "%.500s\n", e);
      free(db);
      return NULL;
    }
    return db;
  }
  {
    /* the store's settings (connect timeout, keepalives, tcp_user_timeout) and the URL's
     * own options (a search_path, say) */
    const char *vals[MQPROC__PG_MAX_PARAMS];
    char set[64];
    mqproc__pg_conn_vals(url, vals);
    db->pg = PQconnectdbParams(mqproc__pg_conn_keys, vals, 1);
    if (PQstatus(db->pg) != CONNECTION_OK) {
      snprintf(err, ERRLEN, "%s", PQerrorMessage(db->pg));
      PQfinish(db->pg);
      free(db);
      return NULL;
    }
    snprintf(set, sizeof(set), "SET statement_timeout = %d", timeout_ms);
    PQclear(PQexec(db->pg, set));
  }
  return db;
}

int mqproc__odb_sqlite(const mqproc__odb_t *db) {
  return db->sq != NULL;
}

void mqproc__odb_sq_notice(mqproc__odb_t *db, const char *payload) {
  const char *path = db->sq != NULL ? sqlite3_db_filename(db->sq, "main") : NULL;
  /* no notice file: the servers read the wish with their next refresh */
  if (path != NULL && path[0] != '\0' && mqproc__sq_notice_send(path, payload) != 0)
    MQPROC__WARN("cannot tell the servers at once (%s-control: %s): they read it with their "
                 "next refresh (within 10 s)",
                 path, strerror(errno));
}

int mqproc__odb_ok(const mqproc__odb_t *db) {
  return db->sq != NULL || PQstatus(db->pg) == CONNECTION_OK;
}

void mqproc__odb_close(mqproc__odb_t *db) {
  if (db == NULL)
    return;
  PQfinish(db->pg);
  sqlite3_close(db->sq);
  free(db);
}

/* ---- SQLite ------------------------------------------------------------------------- */

static int keep_row(mqproc__ores_t *r, sqlite3_stmt *st) {
  if (r->rows == r->cap) {
    int cap = r->cap > 0 ? 2 * r->cap : 16;
    cell_t *c = realloc(r->cells, (size_t)cap * (size_t)r->cols * sizeof(*c));
    if (c == NULL)
      return -1;
    r->cells = c;
    r->cap = cap;
  }
  for (int k = 0; k < r->cols; k++) {
    cell_t *c = &r->cells[(size_t)r->rows * (size_t)r->cols + (size_t)k];
    int type = sqlite3_column_type(st, k);
    const void *p = type == SQLITE_BLOB   ? sqlite3_column_blob(st, k)
                    : type == SQLITE_NULL ? NULL
                                          : (const void *)sqlite3_column_text(st, k);
    c->len = (size_t)sqlite3_column_bytes(st, k);
    c->v = NULL;
    if (type != SQLITE_NULL) {
      if ((c->v = malloc(c->len + 1)) == NULL) {
        for (int j = 0; j < k; j++)
          free(r->cells[(size_t)r->rows * (size_t)r->cols + (size_t)j].v);
        return -1;
      }
      if (c->len > 0)
        memcpy(c->v, p, c->len);
      c->v[c->len] = '\0';
    }
  }
  r->rows++;
  return 0;
}

static mqproc__ores_t *sq_run(sqlite3 *db, const char *sql, int n, const char *const *vals,
                              char *err) {
  sqlite3_stmt *st = NULL;
  mqproc__ores_t *r = calloc(1, sizeof(*r));
  int rc, own_txn = 0;
  if (r == NULL) {
    snprintf(err, ERRLEN, "out of memory\n");
    return NULL;
  }
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
    goto fail;
  for (int i = 0; i < n; i++)
    if ((vals[i] != NULL ? sqlite3_bind_text(st, i + 1, vals[i], -1, SQLITE_STATIC)
                         : sqlite3_bind_null(st, i + 1)) != SQLITE_OK)
      goto fail;
  /* a write outside a transaction takes the write lock up front: waiting for it is the
   * busy timeout's, where upgrading a read to a write could fail at once */
  if (!sqlite3_stmt_readonly(st) && sqlite3_get_autocommit(db)) {
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
      goto fail;
    own_txn = 1;
  }
  r->cols = sqlite3_column_count(st);
  if (r->cols > 0 && (r->names = calloc((size_t)r->cols, sizeof(char *))) == NULL)
    goto fail;
  for (int k = 0; k < r->cols; k++)
    if ((r->names[k] = strdup(sqlite3_column_name(st, k))) == NULL)
      goto fail;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (keep_row(r, st) != 0) {
      snprintf(err, ERRLEN, "out of memory\n");
      goto fail_err;
    }
  if (rc != SQLITE_DONE)
    goto fail;
  r->changed = sqlite3_changes(db);
  sqlite3_finalize(st);
  if (own_txn && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
    snprintf(err, ERRLEN, "query failed: %s\n", sqlite3_errmsg(db));
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    mqproc__ores_free(r);
    return NULL;
  }
  return r;
fail:
  snprintf(err, ERRLEN, "query failed: %s\n", sqlite3_errmsg(db));
fail_err:
  sqlite3_finalize(st);
  if (own_txn)
    sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  mqproc__ores_free(r);
  return NULL;
}

/* ---- both --------------------------------------------------------------------------- */

mqproc__ores_t *mqproc__odb_q(mqproc__odb_t *db, const char *pg, const char *sq, int n,
                              const char *const *vals, char *err) {
  PGresult *res;
  ExecStatusType st;
  mqproc__ores_t *r;
  if (db->sq != NULL)
    return sq_run(db->sq, sq != NULL ? sq : pg, n, vals, err);
  res = PQexecParams(db->pg, pg, n, NULL, vals, NULL, NULL, 0);
  st = PQresultStatus(res);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    snprintf(err, ERRLEN, "query failed: %s", PQresultErrorMessage(res));
    PQclear(res);
    return NULL;
  }
  if ((r = calloc(1, sizeof(*r))) == NULL) {
    snprintf(err, ERRLEN, "out of memory\n");
    PQclear(res);
    return NULL;
  }
  r->pg = res;
  r->rows = PQntuples(res);
  r->cols = PQnfields(res);
  r->changed = atoll(PQcmdTuples(res));
  return r;
}

/* A transaction statement: on SQLite straight to sqlite3_exec (odb_q would wrap it). */
static int txn(mqproc__odb_t *db, const char *pg, const char *sq, char *err) {
  mqproc__ores_t *r;
  if (db->sq != NULL) {
    if (sqlite3_exec(db->sq, sq, NULL, NULL, NULL) == SQLITE_OK)
      return 0;
    snprintf(err, ERRLEN, "%s failed: %s\n", sq, sqlite3_errmsg(db->sq));
    return -1;
  }
  r = mqproc__odb_q(db, pg, NULL, 0, NULL, err);
  mqproc__ores_free(r);
  return r != NULL ? 0 : -1;
}

int mqproc__odb_begin(mqproc__odb_t *db, char *err) {
  return txn(db, "BEGIN", "BEGIN IMMEDIATE", err);
}

int mqproc__odb_commit(mqproc__odb_t *db, char *err) {
  return txn(db, "COMMIT", "COMMIT", err);
}

void mqproc__odb_rollback(mqproc__odb_t *db) {
  char err[ERRLEN];
  txn(db, "ROLLBACK", "ROLLBACK", err);
}

int mqproc__ores_rows(const mqproc__ores_t *r) {
  return r->rows;
}
int mqproc__ores_cols(const mqproc__ores_t *r) {
  return r->cols;
}

const char *mqproc__ores_name(const mqproc__ores_t *r, int col) {
  return r->pg != NULL ? PQfname(r->pg, col) : r->names[col];
}

static const cell_t *cell(const mqproc__ores_t *r, int row, int col) {
  return &r->cells[(size_t)row * (size_t)r->cols + (size_t)col];
}

int mqproc__ores_null(const mqproc__ores_t *r, int row, int col) {
  return r->pg != NULL ? PQgetisnull(r->pg, row, col) : cell(r, row, col)->v == NULL;
}

const char *mqproc__ores_get(const mqproc__ores_t *r, int row, int col) {
  if (r->pg != NULL)
    return PQgetvalue(r->pg, row, col);
  return cell(r, row, col)->v != NULL ? cell(r, row, col)->v : "";
}

int mqproc__ores_bool(const mqproc__ores_t *r, int row, int col) {
  const char *v = mqproc__ores_get(r, row, col);
  return r->pg != NULL ? v[0] == 't' : atoll(v) != 0;
}

unsigned char *mqproc__ores_bytes(const mqproc__ores_t *r, int row, int col, size_t *len) {
  unsigned char *out, *tmp;
  *len = 0;
  if (mqproc__ores_null(r, row, col))
    return NULL;
  if (r->pg == NULL) {
    const cell_t *c = cell(r, row, col);
    if ((out = malloc(c->len + 1)) != NULL) {
      memcpy(out, c->v, c->len + 1);
      *len = c->len;
    }
    return out;
  }
  /* bytea in text form: unescaped by libpq, copied so the caller frees it with free() */
  if ((tmp = PQunescapeBytea((const unsigned char *)PQgetvalue(r->pg, row, col), len)) == NULL)
    return NULL;
  if ((out = malloc(*len + 1)) != NULL) {
    memcpy(out, tmp, *len);
    out[*len] = '\0';
  }
  PQfreemem(tmp);
  return out;
}

long long mqproc__ores_changed(const mqproc__ores_t *r) {
  return r->changed;
}

void mqproc__ores_free(mqproc__ores_t *r) {
  if (r == NULL)
    return;
  PQclear(r->pg);
  for (int i = 0; r->cells != NULL && i < r->rows * r->cols; i++)
    free(r->cells[i].v);
  for (int k = 0; r->names != NULL && k < r->cols; k++)
    free(r->names[k]);
  free(r->cells);
  free(r->names);
  free(r);
}
