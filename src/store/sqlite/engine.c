/* The SQLite store's engine (int.h): a thread with its own connection. The
 * loop queues requests; the thread takes every request queued meanwhile and runs them in
 * one BEGIN IMMEDIATE transaction (the write lock taken up front, so busy_timeout applies
 * and several servers on one file wait their turn instead of failing with SQLITE_BUSY),
 * each in a savepoint so one failing statement undoes only its own request; one commit
 * (one WAL fsync with synchronous=FULL) for all of them. The finished requests go back to
 * the loop through an eventfd. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "store/sqlite/int.h"
#include "store/sqlite/notice.h"
#include "base/util.h"

#define BUSY_TIMEOUT_MS 30000
#define CACHE 64
/* An early request (a table queue's take, store.h) is answered before its turn commits;
 * the engine waits this long at most for the loop's turn that answers it, whose requests
 * (the claims of the messages taken) then join the transaction; a few such turns at most. */
#define TURN_WAIT_MS 50
#define TURNS_MAX 4

typedef struct sq_engine {
  sq_store_t *store;
  mqproc__loop_t *loop;
  /* the engine thread's own: the database failed in a way that lasts (read-only, corrupt,
     not a database, full, an I/O error): every request is an outage until a ping finds
     it sound again (recover) */
  int down;
  int down_pages;    /* it was corrupt: a ping checks every page (quick_check) */
  int64_t probed_ms; /* the last ping's check, at most one a second */
  char down_err[MQPROC_ERR_LEN];
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  sq_req_t *todo, **todo_tail; /* queued by the loop */
  sq_req_t *done, **done_tail; /* finished, for the loop */
  sq_req_t *running;           /* the round on the thread now */
  sq_req_t *dispatching;       /* finished ones the loop is calling back now */
  int efd;                     /* eventfd: finished requests wait */
  int stop;
  /* an open turn (early requests answered before the commit) */
  pthread_cond_t turn_cond; /* the loop's turn that answered them is over */
  uint64_t early_gen;       /* early requests handed to the loop so far (batches) */
  uint64_t early_seen;      /* of those, the loop has answered this many batches */
  int turn_waiting;         /* the thread waits for that turn, its transaction open */
  int turn_done;            /* it is over: what it queued joins the transaction */
  mqproc__loop_hook_t hook; /* the loop's end of a turn */
} sq_engine_t;

/* ---- connection and statements ------------------------------------------------------ */

static void now_ms(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)argc;
  (void)argv;
  sqlite3_result_int64(ctx, (sqlite3_int64)mqproc__wall_ms());
}

static __thread struct {
  sqlite3 *db;
  const char *sql;
  sqlite3_stmt *st;
} cache[CACHE];

sqlite3_stmt *mqproc__sq_stmt(sqlite3 *db, const char *sql, char *err) {
  int free_slot = -1;
  sqlite3_stmt *st;
  for (int i = 0; i < CACHE; i++) {
    if (cache[i].db == db && cache[i].sql == sql) {
      sqlite3_reset(cache[i].st);
      sqlite3_clear_bindings(cache[i].st);
      return cache[i].st;
    }
    if (cache[i].db == NULL && free_slot < 0)
      free_slot = i;
  }
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
    mqproc__sq_error(db, "cannot prepare a statement", err); /* a lasting one is noted */
    return NULL;
  }
  if (free_slot >= 0) {
    cache[free_slot].db = db;
    cache[free_slot].sql = sql;
    cache[free_slot].st = st;
  }
  return st; /* a full cache: this one leaks until the connection closes (finalized then) */
}

static void close_db(sqlite3 *db) {
  sqlite3_stmt *st;
  for (int i = 0; i < CACHE; i++)
    if (cache[i].db == db)
      cache[i].db = NULL;
  while ((st = sqlite3_next_stmt(db, NULL)) != NULL)
    sqlite3_finalize(st);
  sqlite3_close(db);
}

/* The primary code of the last lasting failure on this thread (0: none since the engine
 * cleared it): a statement that failed to prepare reports MQPROC_ESTORE_QUERY to its
 * caller, and the engine still learns the database is gone. */
static __thread int g_lasting;

int mqproc__sq_lasting(int code) {
  switch (code & 0xff) {
  case SQLITE_READONLY:
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
  case SQLITE_FULL:
  case SQLITE_IOERR:
  case SQLITE_CANTOPEN:
  case SQLITE_PERM:
  case SQLITE_NOLFS:
    return 1;
  default:
    return 0;
  }
}

int mqproc__sq_error(sqlite3 *db, const char *what, char *err) {
  int code = sqlite3_errcode(db) & 0xff;
  if (mqproc__sq_lasting(code)) {
    g_lasting = code;
    return mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s: %s", what, sqlite3_errmsg(db));
  }
  return mqproc__err(err,
                     code == SQLITE_CONSTRAINT || code == SQLITE_MISMATCH ||
                             code == SQLITE_TOOBIG || code == SQLITE_RANGE
                         ? MQPROC_ESTORE_DATA
                         : MQPROC_ESTORE_QUERY,
                     "%s: %s", what, sqlite3_errmsg(db));
}

/* The database file itself: a regular file (a directory, a device such as /dev/null or a
 * FIFO is a mistake in --database, never an outage to wait out), made by us when missing
 * so it gets mqproc__file_mode() (SQLite would make it 0644, and its -wal and -shm take
 * the database's mode); one that exists keeps its mode. */
static int db_file(const char *path, char *err) {
  struct stat st;
  int fd;
  if (stat(path, &st) == 0)
    return S_ISREG(st.st_mode) ? MQPROC_OK
                               : mqproc__err(err, MQPROC_ECONFIG,
                                             "the database %s is %s, not a file: give the path "
                                             "of a database file (made when missing)",
                                             path,
                                             S_ISDIR(st.st_mode)    ? "a directory"
                                             : S_ISCHR(st.st_mode)  ? "a character device"
                                             : S_ISBLK(st.st_mode)  ? "a block device"
                                             : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                                    : "a socket");
  if (errno != ENOENT) /* ENOTDIR, EACCES, ELOOP: SQLite explains it below */
    return MQPROC_OK;
  if ((fd = mqproc__open_new(path, O_RDWR | O_EXCL | O_CLOEXEC | O_NOFOLLOW)) >= 0)
    close(fd);
  return MQPROC_OK; /* EEXIST: another server made it meanwhile */
}

/* What an operator can do about a failure to open or set up the database. */
static const char *open_hint(int code) {
  switch (code & 0xff) {
  case SQLITE_READONLY:
  case SQLITE_CANTOPEN:
  case SQLITE_PERM:
    return "; this server's user needs to read and write the file and its directory (for the "
           "-wal and -shm files beside it)";
  case SQLITE_NOTADB:
  case SQLITE_CORRUPT:
    return "; restore it from a backup, or give another path";
  default:
    return "";
  }
}

int mqproc__sq_open_db(sq_store_t *s, sqlite3 **out, char *err) {
  sqlite3 *db = NULL;
  char sql[160];
  int rc;
  *out = NULL;
  if ((rc = db_file(s->path, err)) != MQPROC_OK)
    return rc;
  rc = sqlite3_open_v2(s->path, &db,
                       SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    mqproc__err(err, MQPROC_ESTORE_CONNECT, "cannot open %s: %s%s", s->path,
                db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(rc), open_hint(rc));
    sqlite3_close(db);
    return mqproc__sq_lasting(rc) ? MQPROC_ECONFIG : MQPROC_ESTORE_CONNECT;
  }
  sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
  snprintf(sql, sizeof(sql),
           "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s; PRAGMA foreign_keys = ON",
           s->sync_normal ? "NORMAL" : "FULL");
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK ||
      sqlite3_create_function(db, "mq_now", 0, SQLITE_UTF8, NULL, now_ms, NULL, NULL) !=
          SQLITE_OK) {
    rc = sqlite3_errcode(db);
    mqproc__err(err, MQPROC_ESTORE_CONNECT, "cannot set up %s: %s%s", s->path, sqlite3_errmsg(db),
                open_hint(rc));
    sqlite3_close(db);
    return mqproc__sq_lasting(rc) ? MQPROC_ECONFIG : MQPROC_ESTORE_CONNECT;
  }
  *out = db;
  return MQPROC_OK;
}

sq_row_t *mqproc__sq_row_add(sq_req_t *r) {
  sq_row_t *row = calloc(1, sizeof(*row));
  if (row == NULL)
    return NULL;
  if (r->rows_tail == NULL)
    r->rows_tail = &r->rows;
  *r->rows_tail = row;
  r->rows_tail = &row->next;
  return row;
}

void mqproc__sq_req_free(sq_req_t *r) {
  for (int i = 0; i < r->nowned; i++)
    free(r->owned[i]);
  while (r->rows != NULL) {
    sq_row_t *row = r->rows;
    r->rows = row->next;
    for (size_t i = 0; i < MQPROC__ARRAY_LEN(row->col); i++)
      free(row->col[i]);
    free(row);
  }
  free(r);
}

/* ---- requests ----------------------------------------------------------------------- */

/* Keeps copy (NULL: out of memory) among what r frees. */
static void *owns(sq_req_t *r, void *copy) {
  if (copy != NULL && r->nowned < MQPROC__SQ_OWNED) {
    r->owned[r->nowned++] = copy;
    return copy;
  }
  free(copy);
  r->nomem = 1;
  return NULL;
}

void mqproc__sq_own_text(sq_req_t *r, const char **s) {
  char *clean = NULL;
  if (*s == NULL)
    return;
  if (mqproc__utf8_clean(*s, &clean) == NULL) { /* like PostgreSQL, texts are UTF-8 */
    r->nomem = 1;
    return;
  }
  *s = owns(r, clean != NULL ? clean : strdup(*s));
}

void mqproc__sq_own_bytes(sq_req_t *r, const void **p, size_t len) {
  void *copy;
  if (*p == NULL)
    return;
  if ((copy = malloc(len > 0 ? len : 1)) != NULL)
    memcpy(copy, *p, len);
  *p = owns(r, copy);
}

void mqproc__sq_bind_text(sqlite3_stmt *st, int i, const char *s) {
  if (s == NULL)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
}

void mqproc__sq_bind_int(sqlite3_stmt *st, int i, int64_t v) {
  sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}

void mqproc__sq_bind_bool(sqlite3_stmt *st, int i, int v) {
  sqlite3_bind_int(st, i, v ? 1 : 0);
}

void mqproc__sq_bind_bytes(sqlite3_stmt *st, int i, const void *p, size_t len) {
  if (p == NULL)
    sqlite3_bind_null(st, i);
  else
    sqlite3_bind_blob(st, i, p, (int)len, SQLITE_STATIC);
}

/* Steps a statement to its end (rows not read); the rows it changed, or a store error
 * code (< 0) with err. */
int mqproc__sq_exec(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err) {
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    ;
  if (rc != SQLITE_DONE) {
    rc = mqproc__sq_error(db, what, err);
    sqlite3_reset(st);
    return rc;
  }
  sqlite3_reset(st);
  return sqlite3_changes(db);
}

/* The first step: 1 a row is there (finish with mqproc__sq_exec), 0 none (reset), or a
 * store error code (< 0) with err. Never step again after 0: SQLite would run it anew. */
int mqproc__sq_first(sqlite3 *db, sqlite3_stmt *st, const char *what, char *err) {
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    return 1;
  if (rc != SQLITE_DONE)
    rc = mqproc__sq_error(db, what, err);
  else
    rc = 0;
  sqlite3_reset(st);
  return rc;
}

int mqproc__sq_fenced(sq_req_t *r, const char *job, int attempt) {
  return mqproc__err(r->err, MQPROC_ESTORE_FENCED, "job %s: attempt %d no longer owns the job", job,
                     attempt);
}

int mqproc__sq_write(sqlite3 *db, sqlite3_stmt *st, sq_req_t *r, const char *what) {
  int n = mqproc__sq_exec(db, st, what, r->err);
  return n < 0 ? n : MQPROC_OK;
}

int mqproc__sq_write_fenced(sqlite3 *db, sqlite3_stmt *st, sq_req_t *r, const char *what,
                            const char *job, int attempt) {
  int n = mqproc__sq_exec(db, st, what, r->err);
  if (n < 0)
    return n;
  return n == 0 ? mqproc__sq_fenced(r, job, attempt) : MQPROC_OK;
}

/* ---- the thread --------------------------------------------------------------------- */

static int exec(sqlite3 *db, const char *sql) {
  return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

/* Every request of the round fails with rc and err (nothing of it was stored). */
static void fail_round(sq_req_t *round, int rc, const char *err) {
  for (sq_req_t *r = round; r != NULL; r = r->next) {
    r->rc = rc;
    snprintf(r->err, sizeof(r->err), "%s", err);
  }
}

/* The database failed in a way that lasts: an outage (the server stops taking jobs, /readyz
 * and mqproc_up say so) until recover() finds it sound; the connection is made anew then. */
static void went_down(sq_engine_t *e, sqlite3 **dbp, int code, const char *err) {
  e->down = 1;
  e->down_pages = (code & 0xff) == SQLITE_CORRUPT || (code & 0xff) == SQLITE_NOTADB;
  e->probed_ms = 0;
  snprintf(e->down_err, sizeof(e->down_err), "%s", err);
  if (*dbp != NULL)
    close_db(*dbp);
  *dbp = NULL;
}

/* While down, only a ping looks at the database again, and at most once a second (a
 * readiness probe may ask often; a page check reads the whole file): a new connection,
 * then mqproc__sq_probe (writable, a write commits, every page sound after corruption).
 * MQPROC_OK: the store is back on that connection; else an outage with err. */
static int recover(sq_engine_t *e, sqlite3 **dbp, const sq_req_t *round, char *err) {
  int64_t now = mqproc__now_ms();
  int pinged = 0, rc;
  for (const sq_req_t *r = round; r != NULL; r = r->next)
    pinged |= r->op->probe;
  if (!pinged || now - e->probed_ms < 1000)
    return mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s", e->down_err);
  e->probed_ms = now;
  if ((rc = mqproc__sq_open_db(e->store, dbp, err)) == MQPROC_OK &&
      (rc = mqproc__sq_probe(*dbp, e->store->path, e->down_pages, err)) == MQPROC_OK) {
    e->down = 0;
    return MQPROC_OK;
  }
  if (*dbp != NULL)
    close_db(*dbp);
  *dbp = NULL;
  snprintf(e->down_err, sizeof(e->down_err), "%s", err);
  return MQPROC_ESTORE_CONNECT;
}

/* After a turn committed: the listeners of each table queue it published to are told,
 * once per queue (a line in the notice file: store/sqlite/notice.h). */
static void send_notices(sq_engine_t *e, const sq_req_t *round) {
  const char *told[16];
  int ntold = 0;
  for (const sq_req_t *r = round; r != NULL; r = r->next) {
    const char *queue = mqproc__sq_queue_notice(r);
    char line[600];
    int seen = 0;
    for (int i = 0; queue != NULL && i < ntold && !seen; i++)
      seen = strcmp(told[i], queue) == 0;
    if (queue == NULL || seen)
      continue;
    if (ntold < (int)MQPROC__ARRAY_LEN(told))
      told[ntold++] = queue;
    /* a name too long for a line is not told: its servers find the message within 1 s */
    if (snprintf(line, sizeof(line), "%s%s", MQPROC__SQ_NOTICE_QUEUE, queue) < (int)sizeof(line))
      mqproc__sq_notice_send(e->store->path, line);
  }
}

/* Runs the requests of list in the open transaction, a savepoint each; MQPROC_OK, or the
 * transaction's end (err): the database is gone, or SQLite rolled it all back. */
static int run_requests(sqlite3 *db, sq_req_t *list, char *err) {
  for (sq_req_t *r = list; r != NULL; r = r->next) {
    exec(db, "SAVEPOINT r");
    r->rc = r->op->run(db, r);
    if (r->rc != MQPROC_OK && g_lasting != 0) /* the database, not this request */
      r->rc = MQPROC_ESTORE_CONNECT;
    if (r->rc == MQPROC_ESTORE_CONNECT || sqlite3_get_autocommit(db)) {
      /* gone, or SQLite rolled the whole transaction back (a full disk, an I/O error):
         nothing of the round is kept */
      snprintf(err, MQPROC_ERR_LEN, "%s", r->rc != MQPROC_OK ? r->err : "the transaction ended");
      return r->rc == MQPROC_ESTORE_CONNECT ? r->rc : MQPROC_ESTORE_QUERY;
    }
    if (r->rc != MQPROC_OK && r->rc != MQPROC_ESTORE_FENCED)
      exec(db, "ROLLBACK TO r");
    exec(db, "RELEASE r");
  }
  return MQPROC_OK;
}

/* A take that brought nothing is not: no claim would join its transaction, so it is
 * answered after the commit like any request (an idle server's look costs no open turn). */
static int is_early(const sq_req_t *r) {
  return r->rc == MQPROC_OK && r->q.op == MQPROC__STORE_Q_TAKE && r->q.u.q_take.early &&
         r->rows != NULL;
}

/* The early requests of the round (*roundp, the list the thread runs) go to the loop now,
 * its transaction still open; then the thread waits for the loop's turn that answers them
 * (at most TURN_WAIT_MS) and takes what that turn queued, appended to the round: it joins
 * the transaction. NULL when there was no early request, or nothing came. */
static sq_req_t *open_turn(sq_engine_t *e, sq_req_t **roundp) {
  sq_req_t *early = NULL, **et = &early, *more, **pp;
  uint64_t one = 1;
  struct timespec until;
  pthread_mutex_lock(&e->lock);
  for (pp = roundp; *pp != NULL;) {
    sq_req_t *r = *pp;
    if (!is_early(r)) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    r->next = NULL;
    *et = r;
    et = &r->next;
  }
  if (early == NULL) {
    pthread_mutex_unlock(&e->lock);
    return NULL;
  }
  e->running = *roundp;
  *e->done_tail = early;
  while (*e->done_tail != NULL)
    e->done_tail = &(*e->done_tail)->next;
  e->early_gen++;
  e->turn_waiting = 1;
  e->turn_done = 0;
  pthread_mutex_unlock(&e->lock);
  if (write(e->efd, &one, sizeof(one)) < 0) {
    /* the counter is full: the loop reads it anyway */
  }
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += TURN_WAIT_MS * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&e->lock);
  while (!e->turn_done && !e->stop &&
         pthread_cond_timedwait(&e->turn_cond, &e->lock, &until) != ETIMEDOUT)
    ;
  e->turn_waiting = 0;
  more = e->stop ? NULL : e->todo;
  if (more != NULL) {
    e->todo = NULL;
    e->todo_tail = &e->todo;
    for (pp = roundp; *pp != NULL; pp = &(*pp)->next)
      ;
    *pp = more; /* part of the round from here on (forget() finds them in running) */
    e->running = *roundp;
  }
  pthread_mutex_unlock(&e->lock);
  return more;
}

static void run_round(sq_engine_t *e, sqlite3 **dbp, sq_req_t **roundp) {
  char err[MQPROC_ERR_LEN];
  sqlite3 *db = *dbp;
  sq_req_t *round = *roundp, *more;
  int rc = MQPROC_OK, relax = !e->store->sync_normal;
  for (sq_req_t *r = round; relax && r != NULL; r = r->next)
    relax = r->op->unsynced_ok;
  if (e->down && recover(e, dbp, round, err) != MQPROC_OK) {
    fail_round(round, MQPROC_ESTORE_CONNECT, err);
    return;
  }
  if (*dbp == NULL && mqproc__sq_open_db(e->store, dbp, err) != MQPROC_OK) {
    fail_round(round, MQPROC_ESTORE_CONNECT, err);
    return;
  }
  db = *dbp;
  g_lasting = 0;
  if (relax) /* only refreshes: committed without an fsync (a later commit's covers it) */
    exec(db, "PRAGMA synchronous = NORMAL");
  if (exec(db, "BEGIN IMMEDIATE") != 0)
    rc = mqproc__sq_error(db, "BEGIN IMMEDIATE", err);
  if (rc == MQPROC_OK)
    rc = run_requests(db, round, err);
  /* early requests answered now; the requests their answers bring join this transaction */
  for (int turns = 0; rc == MQPROC_OK && turns < TURNS_MAX; turns++) {
    int n = 0;
    if ((more = open_turn(e, roundp)) == NULL)
      break;
    for (const sq_req_t *r = more; r != NULL; r = r->next)
      n++;
    MQPROC__DEBUG("store: %d request(s) joined the open turn", n);
    rc = run_requests(db, more, err);
  }
  round = *roundp;
  if (rc == MQPROC_OK && exec(db, "COMMIT") != 0)
    rc = mqproc__sq_error(db, "COMMIT", err);
  if (rc == MQPROC_OK)
    send_notices(e, round);
  if (rc != MQPROC_OK && !sqlite3_get_autocommit(db))
    exec(db, "ROLLBACK");
  if (relax && exec(db, "PRAGMA synchronous = FULL") != 0) { /* never left relaxed */
    close_db(db);
    *dbp = NULL;
  }
  if (rc == MQPROC_ESTORE_CONNECT || g_lasting != 0)
    went_down(e, dbp, g_lasting, err);
  if (rc != MQPROC_OK) /* nothing of the round was stored */
    fail_round(round, rc == MQPROC_ESTORE_CONNECT ? rc : MQPROC_ESTORE_QUERY, err);
}

static void *engine_main(void *arg) {
  sq_engine_t *e = arg;
  sqlite3 *db = NULL;
  uint64_t one = 1;
  pthread_mutex_lock(&e->lock);
  for (;;) {
    sq_req_t *round;
    while (e->todo == NULL && !e->stop)
      pthread_cond_wait(&e->cond, &e->lock);
    if (e->stop) /* what is still queued is dropped, never run (store.h: destroy) */
      break;
    round = e->todo;
    e->todo = NULL;
    e->todo_tail = &e->todo;
    e->running = round;
    pthread_mutex_unlock(&e->lock);
    run_round(e, &db, &round);
    pthread_mutex_lock(&e->lock);
    e->running = NULL;
    *e->done_tail = round;
    while (*e->done_tail != NULL)
      e->done_tail = &(*e->done_tail)->next;
    pthread_mutex_unlock(&e->lock); /* the loop wakes to take the lock: free it first */
    if (write(e->efd, &one, sizeof(one)) < 0) {
      /* the counter is full: the loop reads it anyway */
    }
    pthread_mutex_lock(&e->lock);
  }
  pthread_mutex_unlock(&e->lock);
  if (db != NULL)
    close_db(db);
  return NULL;
}

/* ---- the loop's side ---------------------------------------------------------------- */

/* The end of a loop turn: if the thread waits with its transaction open and the loop has
 * answered its early requests (on_done, then the turn's prepare made what they bring),
 * what was queued meanwhile may join it now. */
static int turn_end(mqproc__loop_t *loop, void *ud) {
  sq_engine_t *e = ud;
  (void)loop;
  pthread_mutex_lock(&e->lock);
  if (e->turn_waiting && e->early_seen == e->early_gen) {
    e->turn_done = 1;
    pthread_cond_signal(&e->turn_cond);
  }
  pthread_mutex_unlock(&e->lock);
  return -1;
}

static void on_done(mqproc__loop_t *loop, int fd, void *ud) {
  sq_engine_t *e = ud;
  uint64_t n, gen;
  sq_req_t *list;
  (void)loop;
  if (read(fd, &n, sizeof(n)) < 0) {
    /* EAGAIN: nothing new */
  }
  pthread_mutex_lock(&e->lock);
  list = e->done;
  e->done = NULL;
  e->done_tail = &e->done;
  gen = e->early_gen; /* the early batches this list holds, when answered */
  pthread_mutex_unlock(&e->lock);
  /* a callback may free its delivery, which forgets its other requests: those still in
   * this list too (mqproc__sq_forget looks here) */
  e->dispatching = list;
  while (e->dispatching != NULL) {
    sq_req_t *r = e->dispatching;
    e->dispatching = r->next;
    if (!r->forgotten) { /* the caller's memory is touched here only, on the loop */
      if (r->rc == MQPROC_OK && r->op->answer != NULL)
        r->op->answer(r);
      if (r->q.done != NULL)
        r->q.done(r->q.ud, r->rc, r->rc == MQPROC_OK ? NULL : r->err);
    }
    mqproc__sq_req_free(r);
  }
  pthread_mutex_lock(&e->lock);
  e->early_seen = gen;
  pthread_mutex_unlock(&e->lock);
}

int mqproc__sq_enqueue(sq_store_t *s, sq_req_t *r) {
  sq_engine_t *e = s->engine;
  if (e == NULL) {
    mqproc__sq_req_free(r);
    return MQPROC_EINVAL;
  }
  r->next = NULL;
  pthread_mutex_lock(&e->lock);
  *e->todo_tail = r;
  e->todo_tail = &r->next;
  pthread_mutex_unlock(&e->lock);
  pthread_cond_signal(&e->cond); /* after the unlock: the thread does not wake into it */
  return MQPROC_OK;
}

void mqproc__sq_forget(sq_engine_t *e, void *ud) {
  sq_req_t *lists[4];
  pthread_mutex_lock(&e->lock);
  lists[0] = e->todo;
  lists[1] = e->running;
  lists[2] = e->done;
  lists[3] = e->dispatching; /* the loop's own: forget runs on the loop */
  for (int k = 0; k < 4; k++)
    for (sq_req_t *r = lists[k]; r != NULL; r = r->next)
      if (r->q.ud == ud)
        r->forgotten = 1;
  pthread_mutex_unlock(&e->lock);
}

int mqproc__sq_engine_new(sq_engine_t **out, sq_store_t *s, mqproc__loop_t *loop, char *err) {
  sq_engine_t *e = calloc(1, sizeof(*e));
  *out = NULL;
  if (e == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  e->store = s;
  e->loop = loop;
  e->todo_tail = &e->todo;
  e->done_tail = &e->done;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->cond, NULL);
  pthread_cond_init(&e->turn_cond, NULL);
  if ((e->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
      mqproc__loop_io(loop, e->efd, on_done, e) != MQPROC_OK ||
      pthread_create(&e->thread, NULL, engine_main, e) != 0) {
    if (e->efd >= 0) {
      mqproc__loop_io(loop, e->efd, NULL, NULL);
      close(e->efd);
    }
    free(e);
    return mqproc__err(err, MQPROC_ESYS, "cannot start the SQLite store's thread");
  }
  mqproc__loop_before_poll(loop, &e->hook, turn_end, e);
  *out = e;
  return MQPROC_OK;
}

/* Pending requests are dropped without a call back (store.h: destroy). */
void mqproc__sq_engine_free(sq_engine_t *e) {
  sq_req_t *lists[2];
  if (e == NULL)
    return;
  mqproc__loop_before_poll_stop(e->loop, &e->hook);
  pthread_mutex_lock(&e->lock);
  e->stop = 1;
  for (sq_req_t *r = e->todo; r != NULL; r = r->next)
    r->forgotten = 1;
  pthread_cond_signal(&e->cond);
  pthread_cond_signal(&e->turn_cond);
  pthread_mutex_unlock(&e->lock);
  pthread_join(e->thread, NULL);
  mqproc__loop_io(e->loop, e->efd, NULL, NULL);
  close(e->efd);
  lists[0] = e->todo;
  lists[1] = e->done;
  for (int k = 0; k < 2; k++)
    while (lists[k] != NULL) {
      sq_req_t *r = lists[k];
      lists[k] = r->next;
      mqproc__sq_req_free(r);
    }
  pthread_mutex_destroy(&e->lock);
  pthread_cond_destroy(&e->cond);
  pthread_cond_destroy(&e->turn_cond);
  free(e);
}
