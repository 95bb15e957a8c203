/* The PostgreSQL store's asynchronous engine: one non-blocking libpq connection driven by
 * the server's loop, never blocking it.
 *
 * Requests queue up; whenever no round is in flight the engine sends the queue as one
 * round in pipeline mode: each statement (prepared once per connection) and one Sync, so
 * the round is one implicit transaction and costs one commit, one round trip. Requests of
 * a batched statement (claims, successes, renewals, outbox marks) share one execution
 * with array parameters. While a round is in flight new requests wait: under load the
 * next round carries everything that came meanwhile (group commit), at rest a request
 * goes out at once. Low-priority requests (marks nothing waits for) wait up to a linger
 * for other work to ride along with.
 *
 * Results are held until the round's Sync result (the commit) arrives, then each
 * request's done runs. A round that fails is rolled back whole: a request that was alone
 * gets the error (classified by SQLSTATE); requests that shared the round run again, each
 * alone, so only the one at fault fails. A lost connection fails the round and everything
 * queued with MQPROC_ESTORE_CONNECT (the next request connects again); connecting and
 * every round have deadlines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/pg/int.h"
#include "base/util.h"

#define ROUND_MAX 512           /* requests per round */
#define BATCH_MAX 256           /* requests per batched execution */
#define CONNECT_TIMEOUT_MS 5000 /* libpq's connect_timeout does not apply to PQconnectPoll */
#define ROUND_TIMEOUT_MS 35000  /* statement_timeout (30 s) and some */
#define LINGER_MS                                                                                  \
  5                  /* a low-priority request waits this long for company: short, since a         \
                      * result confirmed but not yet recorded is sent again if we die */
#define MAX_STMTS 48 /* distinct statements one connection prepares */

/* One execution in a round: a prepare, the session setup, or a statement with its
 * requests (several for a batched one). */
typedef struct item {
  const pg_stmt_t *stmt; /* NULL: the setup (prepare 0: the timeout, 1: the LISTEN) */
  int prepare;           /* a Parse of stmt, not an execution */
  pg_req_t **reqs;
  int nreqs;
  PGresult *res;
} item_t;

struct pg_engine {
  pg_store_t *s;
  mqproc__loop_t *loop;
  PGconn *conn;
  int fd;          /* watched, -1 */
  int connecting;  /* PQconnectPoll not done yet */
  int setup_done;  /* statement_timeout set on this connection */
  uint64_t timer;  /* the deadline of the connect or the round */
  uint64_t linger; /* low-priority requests waiting for company */
  int linger_due;  /* that wait is over: the next round goes at once */
  pg_req_t *queue, **tail;
  /* the round in flight */
  item_t items[2 * ROUND_MAX + 2]; /* each request, a prepare for each, the setup */
  int nitems, next_item, in_round;
  int failed, fail_rc;
  char fail_err[MQPROC_ERR_LEN];
  pg_req_t *round;      /* its requests, in the order they were taken */
  pg_req_t *completing; /* ended, being called back (complete()) */
  int completing_now;
  const pg_stmt_t *prepared[MAX_STMTS];
  int nprepared;
};

static void start_round(pg_engine_t *e);
static void on_io(mqproc__loop_t *loop, int fd, void *ud);

/* ---- requests ----------------------------------------------------------------------- */

int mqproc__pg_enqueue(pg_store_t *s, pg_req_t *r) {
  pg_engine_t *e = s->engine;
  if (e == NULL) {
    mqproc__pg_req_free(r);
    return MQPROC_ESTATE;
  }
  r->next = NULL;
  *e->tail = r;
  e->tail = &r->next;
  start_round(e);
  return MQPROC_OK;
}

/* ---- the connection ----------------------------------------------------------------- */

static void on_timeout(mqproc__loop_t *loop, void *ud);

static void unwatch(pg_engine_t *e) {
  if (e->fd >= 0)
    mqproc__loop_io(e->loop, e->fd, NULL, NULL);
  e->fd = -1;
}

static void watch(pg_engine_t *e, int want_write) {
  int fd = PQsocket(e->conn);
  if (fd != e->fd) {
    unwatch(e);
    if (fd >= 0 && mqproc__loop_io(e->loop, fd, on_io, e) == MQPROC_OK)
      e->fd = fd;
  }
  if (e->fd >= 0)
    mqproc__loop_io_write(e->loop, e->fd, want_write);
}

static void set_timer(pg_engine_t *e, int64_t ms) {
  mqproc__loop_timer_cancel(e->loop, e->timer);
  e->timer = ms > 0 ? mqproc__loop_timer(e->loop, ms, on_timeout, e) : 0;
}

/* Calls back the requests of list (each with its own rc and err; done NULL: forgotten)
 * and frees them. They wait in e->completing, where forget() still reaches them: a call
 * back may free the ud of a request further down the list. A call back that ends more
 * requests (a lost connection) appends them to the list being worked through. */
static void complete(pg_engine_t *e, pg_req_t *list) {
  pg_req_t **t = &e->completing;
  while (*t != NULL)
    t = &(*t)->next;
  *t = list;
  if (e->completing_now)
    return;
  e->completing_now = 1;
  while (e->completing != NULL) {
    pg_req_t *r = e->completing;
    e->completing = r->next;
    if (r->done != NULL)
      r->done(r->ud, r->rc, r->rc != MQPROC_OK ? r->err : NULL);
    mqproc__pg_req_free(r);
  }
  e->completing_now = 0;
}

static void clear_round(pg_engine_t *e) {
  for (int i = 0; i < e->nitems; i++) {
    PQclear(e->items[i].res);
    free(e->items[i].reqs);
  }
  memset(e->items, 0, (size_t)e->nitems * sizeof(e->items[0]));
  e->nitems = e->next_item = e->in_round = e->failed = 0;
}

/* The connection is gone or unusable: everything in flight and queued fails (their
 * outcome is unknown for a round in flight: fenced writes make a retry safe). */
static void broken(pg_engine_t *e, const char *why) {
  char err[MQPROC_ERR_LEN];
  pg_req_t *failed = e->round, **t = &failed;
  snprintf(err, sizeof(err), "database connection lost: %s", why);
  err[strcspn(err, "\n")] = '\0';
  while (*t != NULL)
    t = &(*t)->next;
  *t = e->queue; /* the round first, then the queue, in order */
  e->queue = NULL;
  e->tail = &e->queue;
  e->round = NULL;
  clear_round(e);
  set_timer(e, 0);
  mqproc__loop_timer_cancel(e->loop, e->linger);
  e->linger = 0;
  unwatch(e);
  PQfinish(e->conn);
  e->conn = NULL;
  e->connecting = e->setup_done = e->nprepared = 0;
  for (pg_req_t *r = failed; r != NULL; r = r->next) {
    r->rc = MQPROC_ESTORE_CONNECT;
    snprintf(r->err, sizeof(r->err), "%s", err);
  }
  complete(e, failed);
}

static void on_timeout(mqproc__loop_t *loop, void *ud) {
  pg_engine_t *e = ud;
  (void)loop;
  e->timer = 0;
  broken(e, e->connecting ? "connect timed out" : "no answer within the round's deadline");
}

static void connect_start(pg_engine_t *e) {
  const char *vals[MQPROC__PG_MAX_PARAMS];
  mqproc__pg_conn_vals(e->s->conninfo, vals);
  e->conn = PQconnectStartParams(mqproc__pg_conn_keys, vals, 1);
  if (e->conn == NULL || PQstatus(e->conn) == CONNECTION_BAD) {
    broken(e, e->conn != NULL ? PQerrorMessage(e->conn) : "out of memory");
    return;
  }
  e->connecting = 1;
  set_timer(e, CONNECT_TIMEOUT_MS);
  watch(e, 1); /* PQconnectPoll starts as if it had returned PGRES_POLLING_WRITING */
}

static void connect_poll(pg_engine_t *e) {
  switch (PQconnectPoll(e->conn)) {
  case PGRES_POLLING_READING:
    watch(e, 0);
    return;
  case PGRES_POLLING_WRITING:
    watch(e, 1);
    return;
  case PGRES_POLLING_OK:
    break;
  default:
    broken(e, PQerrorMessage(e->conn));
    return;
  }
  e->connecting = 0;
  set_timer(e, 0);
  if (PQsetnonblocking(e->conn, 1) != 0 || PQenterPipelineMode(e->conn) != 1) {
    broken(e, PQerrorMessage(e->conn));
    return;
  }
  watch(e, 0);
  start_round(e);
}

/* ---- rounds: sending ---------------------------------------------------------------- */

static int is_prepared(pg_engine_t *e, const pg_stmt_t *st) {
  for (int i = 0; i < e->nprepared; i++)
    if (e->prepared[i] == st)
      return 1;
  return 0;
}

static item_t *add_item(pg_engine_t *e, const pg_stmt_t *st, int prepare) {
  item_t *it = &e->items[e->nitems++];
  memset(it, 0, sizeof(*it));
  it->stmt = st;
  it->prepare = prepare;
  return it;
}

/* The execution item of r in this round: an existing one of a batched statement r may
 * join, a new one (after a Parse when the statement is not prepared yet), or NULL when r
 * must wait for the next round (its job is in the batch already, or the batch is full). */
static item_t *item_for(pg_engine_t *e, const pg_req_t *r) {
  int parse_queued = 0;
  for (int i = 0; i < e->nitems; i++) {
    item_t *it = &e->items[i];
    if (it->stmt != r->stmt)
      continue;
    if (it->prepare) {
      parse_queued = 1;
      continue;
    }
    if (!r->stmt->batched)
      continue;
    if (it->nreqs >= BATCH_MAX)
      return NULL;
    for (int k = 0; k < it->nreqs; k++) /* one request per job in an execution */
      if (strcmp(it->reqs[k]->vals[0], r->vals[0]) == 0)
        return NULL;
    return it;
  }
  if (!parse_queued && !is_prepared(e, r->stmt) && !e->s->pooled)
    add_item(e, r->stmt, 1);
  return add_item(e, r->stmt, 0);
}

/* Takes requests off the queue (in order, skipping those item_for() defers) into the
 * round's items; returns how many were taken. */
static int take(pg_engine_t *e) {
  pg_req_t **pp = &e->queue, **round_tail = &e->round;
  int taken = 0;
  if (!e->setup_done && !e->s->pooled) { /* session settings: not through a pooler */
    add_item(e, NULL, 0);
    if (e->s->on_notify != NULL)
      add_item(e, NULL, 1);
  }
  while (*pp != NULL && taken < ROUND_MAX) {
    pg_req_t *r = *pp, **grown;
    item_t *it;
    if (r->solo && taken > 0)
      break; /* alone in a round of its own, next time */
    if ((it = item_for(e, r)) == NULL) {
      pp = &r->next;
      continue;
    }
    grown = mqproc__realloc(it->reqs, (size_t)(it->nreqs + 1) * sizeof(*grown));
    if (grown == NULL)
      break;
    it->reqs = grown;
    it->reqs[it->nreqs++] = r;
    *pp = r->next; /* off the queue, onto the round's list */
    if (*pp == NULL)
      e->tail = pp;
    r->next = NULL;
    *round_tail = r;
    round_tail = &r->next;
    taken++;
    if (r->solo)
      break;
  }
  return taken;
}

static int send_item(pg_engine_t *e, const item_t *it) {
  char *arrays[MQPROC__PG_MAX_PARAMS] = {0};
  const pg_req_t *r;
  int ok = 1, n;
  if (it->stmt == NULL)
    return PQsendQueryParams(e->conn,
                             it->prepare ? "LISTEN " MQPROC__PG_CONTROL_CHANNEL
                                         : "SET statement_timeout = 30000",
                             0, NULL, NULL, NULL, NULL, 0);
  if (it->prepare)
    return PQsendPrepare(e->conn, it->stmt->name, it->stmt->sql, it->stmt->nparams, NULL);
  n = it->stmt->nparams;
  r = it->reqs[0];
  if (!it->stmt->batched && e->s->pooled) /* the unnamed statement: parsed each time */
    return PQsendQueryParams(e->conn, it->stmt->sql, n, NULL, (const char *const *)r->vals, r->lens,
                             r->fmts, 0);
  if (!it->stmt->batched)
    return PQsendQueryPrepared(e->conn, it->stmt->name, n, (const char *const *)r->vals, r->lens,
                               r->fmts, 0);
  for (int i = 0; i < n && ok; i++)
    ok = (arrays[i] = mqproc__pg_array_param(it->reqs, it->nreqs, i)) != NULL;
  if (ok && e->s->pooled)
    ok = PQsendQueryParams(e->conn, it->stmt->sql, n, NULL, (const char *const *)arrays, NULL, NULL,
                           0);
  else if (ok)
    ok =
        PQsendQueryPrepared(e->conn, it->stmt->name, n, (const char *const *)arrays, NULL, NULL, 0);
  for (int i = 0; i < n; i++)
    free(arrays[i]);
  return ok;
}

/* Whether only low-priority requests wait (nothing would wait for their round). */
static int only_low_priority(const pg_engine_t *e) {
  for (const pg_req_t *r = e->queue; r != NULL; r = r->next)
    if (!r->stmt->low_priority)
      return 0;
  return 1;
}

static void on_linger(mqproc__loop_t *loop, void *ud) {
  pg_engine_t *e = ud;
  (void)loop;
  e->linger = 0;
  e->linger_due = 1;
  start_round(e);
}

static void start_round(pg_engine_t *e) {
  int taken;
  if (e->in_round || e->queue == NULL)
    return;
  if (e->conn == NULL) {
    connect_start(e);
    return;
  }
  if (e->connecting)
    return;
  if (!e->linger_due && only_low_priority(e)) { /* wait a little for company */
    if (e->linger == 0)
      e->linger = mqproc__loop_timer(e->loop, LINGER_MS, on_linger, e);
    return;
  }
  e->linger_due = 0;
  if (e->linger != 0) {
    mqproc__loop_timer_cancel(e->loop, e->linger);
    e->linger = 0;
  }
  if ((taken = take(e)) == 0) {
    clear_round(e);
    return;
  }
  e->in_round = 1;
  for (int i = 0; i < e->nitems; i++) {
    if (!send_item(e, &e->items[i])) {
      broken(e, PQerrorMessage(e->conn));
      return;
    }
  }
  if (PQpipelineSync(e->conn) != 1) {
    broken(e, PQerrorMessage(e->conn));
    return;
  }
  set_timer(e, ROUND_TIMEOUT_MS);
  MQPROC__DEBUG("store: round of %d request(s) in %d execution(s) sent", taken, e->nitems);
  switch (PQflush(e->conn)) {
  case 0:
    watch(e, 0);
    break;
  case 1:
    watch(e, 1); /* the rest when the socket has room */
    break;
  default:
    broken(e, PQerrorMessage(e->conn));
  }
}

/* ---- rounds: results ---------------------------------------------------------------- */

/* The round's Sync arrived: it committed, or it was rolled back because a statement
 * failed. A failed round's requests run again, each alone, unless one was alone already:
 * then the failure is its own. */
static void finish_round(pg_engine_t *e) {
  pg_req_t *list = e->round, *again = NULL, **at = &again, *done = NULL, **dt = &done;
  int alone = list != NULL && list->next == NULL, failed = e->failed, fail_rc = e->fail_rc;
  char fail_err[MQPROC_ERR_LEN];
  snprintf(fail_err, sizeof(fail_err), "%s", e->fail_err);
  e->round = NULL;
  if (!failed) {
    e->setup_done = 1;
    for (int i = 0; i < e->nitems; i++) {
      item_t *it = &e->items[i];
      if (it->prepare || it->stmt == NULL)
        continue;
      if (it->res == NULL) /* no result: cannot happen in a round that did not fail */
        for (int k = 0; k < it->nreqs; k++)
          it->reqs[k]->rc = mqproc__err(it->reqs[k]->err, MQPROC_ESTORE_QUERY, "no result");
      else if (it->stmt->batched)
        mqproc__pg_parse_batched(it->reqs, it->nreqs, it->res);
      else
        mqproc__pg_parse_single(it->reqs[0], it->res);
    }
  }
  clear_round(e);
  set_timer(e, 0);
  while (list != NULL) {
    pg_req_t *r = list;
    list = r->next;
    r->next = NULL;
    if (failed && !alone) {
      r->solo = 1; /* runs again, alone, before what was queued meanwhile */
      *at = r;
      at = &r->next;
      continue;
    }
    if (failed) {
      r->rc = fail_rc;
      snprintf(r->err, sizeof(r->err), "%s", fail_err);
    } else if (r->rc == MQPROC__PG_FALLBACK && r->stmt->fallback != NULL) {
      r->rc = MQPROC_OK; /* the full statement, in the next round (the same parameters) */
      r->stmt = r->stmt->fallback;
      *at = r;
      at = &r->next;
      continue;
    } else if (r->rc == MQPROC__PG_RETRY && ++r->retries <= 3) {
      r->rc = MQPROC_OK;
      *at = r;
      at = &r->next;
      continue;
    } else if (r->rc == MQPROC__PG_RETRY) {
      r->rc = mqproc__err(r->err, MQPROC_ESTORE_QUERY, "no row came back after 3 tries");
    }
    *dt = r;
    dt = &r->next;
  }
  if (again != NULL) {
    *at = e->queue;
    e->queue = again;
    if (*at == NULL)
      e->tail = at;
  }
  complete(e, done);
  start_round(e);
}

static void read_results(pg_engine_t *e) {
  while (e->in_round && e->conn != NULL && !PQisBusy(e->conn)) {
    PGresult *res = PQgetResult(e->conn);
    item_t *it = e->next_item < e->nitems ? &e->items[e->next_item] : NULL;
    ExecStatusType st;
    if (res == NULL) { /* the end of one item's results */
      e->next_item++;
      continue;
    }
    st = PQresultStatus(res);
    MQPROC__DEBUG("store: item %d/%d: %s", e->next_item, e->nitems, PQresStatus(st));
    if (st == PGRES_PIPELINE_SYNC) {
      PQclear(res);
      finish_round(e);
      return;
    }
    if (st == PGRES_FATAL_ERROR && !e->failed) {
      e->failed = 1;
      e->fail_rc = mqproc__pg_result_error(res, e->fail_err);
    }
    if (it != NULL && it->stmt != NULL && it->prepare && st == PGRES_COMMAND_OK &&
        e->nprepared < MAX_STMTS)
      e->prepared[e->nprepared++] = it->stmt;
    if (it != NULL && it->res == NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
      it->res = res;
    else
      PQclear(res);
  }
}

static void on_io(mqproc__loop_t *loop, int fd, void *ud) {
  pg_engine_t *e = ud;
  (void)loop;
  (void)fd;
  if (e->connecting) {
    connect_poll(e);
    return;
  }
  if (e->conn == NULL)
    return;
  switch (PQflush(e->conn)) {
  case 0:
    watch(e, 0);
    break;
  case 1:
    break; /* still more to send */
  default:
    broken(e, PQerrorMessage(e->conn));
    return;
  }
  if (PQconsumeInput(e->conn) != 1) {
    broken(e, PQerrorMessage(e->conn));
    return;
  }
  read_results(e);
  for (PGnotify *n; e->conn != NULL && (n = PQnotifies(e->conn)) != NULL; PQfreemem(n))
    if (e->s->on_notify != NULL)
      e->s->on_notify(e->s->notify_ud, n->extra);
  if (e->conn != NULL && !e->in_round && PQstatus(e->conn) == CONNECTION_BAD)
    broken(e, PQerrorMessage(e->conn));
}

/* ---- lifecycle ---------------------------------------------------------------------- */

void mqproc__pg_engine_adopt(pg_engine_t *e, PGconn *conn) {
  if (e->conn != NULL || PQsetnonblocking(conn, 1) != 0 || PQenterPipelineMode(conn) != 1) {
    PQfinish(conn);
    return;
  }
  e->conn = conn;
  watch(e, 0);
  start_round(e);
}

int mqproc__pg_engine_new(pg_engine_t **out, pg_store_t *s, mqproc__loop_t *loop, char *err) {
  pg_engine_t *e = mqproc__calloc(1, sizeof(*e));
  if (e == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  e->s = s;
  e->loop = loop;
  e->fd = -1;
  e->tail = &e->queue;
  *out = e;
  return MQPROC_OK;
}

static void forget_list(pg_req_t *r, void *ud) {
  for (; r != NULL; r = r->next)
    if (ud == NULL || r->ud == ud)
      r->done = NULL;
}

void mqproc__pg_engine_forget(pg_engine_t *e, void *ud) {
  forget_list(e->queue, ud);
  forget_list(e->round, ud);
  forget_list(e->completing, ud);
}

void mqproc__pg_engine_free(pg_engine_t *e) {
  if (e == NULL)
    return;
  mqproc__pg_engine_forget(e, NULL);
  broken(e, "closing"); /* calls nothing back: everything was forgotten */
  free(e);
}
