/* The PostgreSQL store's asynchronous engine: one non-blocking libpq connection driven by
 * the server's loop, never blocking it.
 *
 * Requests queue up during a loop turn; before the loop sleeps (its before-poll hook) the
 * engine sends the queue as one round in pipeline mode: each statement (prepared once per
 * connection, the Parses first) and one Sync, so the round is one implicit transaction and
 * costs one commit. Requests of a batched statement (claims, successes, renewals, outbox
 * marks) share one execution with array parameters, sorted by key (the job id) so that
 * two servers' batches lock the rows they share in the same order. Two rounds may be in
 * flight on the pipeline (one through a pooler): what a turn gathered while one round runs
 * goes at the end of that turn and the database takes it as soon as it has committed the
 * first; under load each round carries everything that came meanwhile (group commit, no
 * timer). When a round's answer comes, what queued meanwhile is sent before its requests
 * are called back, so the database works while the loop runs the callbacks.
 * Low-priority requests (marks nothing waits for) wait up to a linger for other work to
 * ride along with.
 *
 * A job's requests stay in order: the rounds run one after the other on the one
 * connection, and a request is not sent while a request of the same key (a job's id, the
 * first parameter) is in a round still in flight, so a request that has to run again after
 * its round failed cannot be overtaken by a later one of its job in the next round. (The
 * delivery's machine asks for a job's next write only once the previous one answered;
 * this keeps the order for what goes beside those: lease renewals, the early ack, the
 * dead letter's mark. Within one round the executions go in the order their statements
 * first came, and all commit together.)
 *
 * Results are held until the round's Sync result (the commit) arrives, then each
 * request's done runs, always from the loop (never inside the submit that made it). A
 * round that fails is rolled back whole: a request that was alone gets the error
 * (classified by SQLSTATE); requests that shared the round run again, each alone, so only
 * the one at fault fails. A lost connection fails the rounds in flight and everything
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
#define ROUNDS_MAX 2            /* rounds in flight on the pipeline (1 through a pooler) */
#define CONNECT_TIMEOUT_MS 5000 /* libpq's connect_timeout does not apply to PQconnectPoll */
#define ROUND_TIMEOUT_MS 35000  /* statement_timeout (30 s) and some */
/* How long a low-priority request (the outbox mark) waits for other work to share a round
 * with: past the gap between two jobs' writes down to about 40 jobs/s (below that a
 * round of its own costs nothing that matters), short next to the broker's confirm
 * latency that is in the same window (a result confirmed but not yet recorded is sent
 * again if the server dies) and far below any lease. */
#define LINGER_MS 25
#define MAX_STMTS 48             /* distinct statements one connection prepares */
#define HEAD_MAX (3 + MAX_STMTS) /* a round's items before its executions: setup, Parses */

/* One execution in a round: a prepare, the session setup, or a statement with its
 * requests (several for a batched one). */
typedef struct item {
  const pg_stmt_t *stmt; /* NULL: the setup (prepare 0: the settings, 1: the control
                            channel's LISTEN, 2: the queues' channel's) */
  int prepare;           /* a Parse of stmt, not an execution */
  pg_req_t **reqs;
  int nreqs;
  int answered;   /* a result came for it (the NULL that ends its results may follow) */
  int ok;         /* a Parse that succeeded */
  int early_done; /* its requests were answered before the round's commit (early) */
  PGresult *res;
} item_t;

/* One round: its items in the order they were sent (the setup, the Parses, then each
 * execution), then the Sync. Its results come back in that order. A round with an early
 * request (a table queue's take: store.h) is sent with a flush instead of the Sync and
 * stays open: once its results are in, the early requests are answered, and what their
 * answers made the loop queue in that turn (the claims of the messages taken) is sent in
 * the same round, the same transaction, before the Sync; more items are appended at the
 * end (hence room for a second batch of them). */
typedef struct round {
  item_t items[2 * (HEAD_MAX + ROUND_MAX)];
  int nitems, next_item;
  int failed, fail_rc;
  char fail_err[MQPROC_ERR_LEN];
  pg_req_t *reqs;  /* its requests, in the order they were taken */
  int64_t sent_at; /* its deadline runs from here (monotonic ms) */
  int setup;       /* it carries the session setup, of this setup_gen */
  unsigned setup_gen;
  int open;     /* sent without its Sync yet: more may join it */
  int awaiting; /* open, its early requests answered: the turn's requests join it, or Sync */
} round_t;

struct pg_engine {
  pg_store_t *s;
  mqproc__loop_t *loop;
  mqproc__loop_hook_t flush; /* before the loop sleeps: send what the turn gathered */
  PGconn *conn;
  int fd;             /* watched, -1 */
  int connecting;     /* PQconnectPoll not done yet */
  int setup_done;     /* the session settings committed on this connection */
  unsigned setup_gen; /* bumped when the LISTENs change: a setup sent before is not enough */
  uint64_t timer;     /* the deadline of the connect or of the oldest round in flight */
  uint64_t linger;    /* low-priority requests waiting for company */
  int linger_due;     /* that wait is over: the next round goes at once */
  pg_req_t *queue, **tail;
  round_t rounds[ROUNDS_MAX]; /* a ring: rounds[head] is the oldest in flight */
  int head, inflight;
  pg_req_t *completing; /* ended, being called back (complete()) */
  int completing_now;
  int called_back; /* complete() ran (the before-poll hook then asks for another turn) */
  const pg_stmt_t *prepared[MAX_STMTS]; /* prepared, or their Parse sent */
  int nprepared;
};

static void start_round(pg_engine_t *e);
static void on_io(mqproc__loop_t *loop, int fd, void *ud);
static round_t *open_round(pg_engine_t *e);

/* ---- requests ----------------------------------------------------------------------- */

/* Queued only: the loop's before-poll hook (flush()) sends the turn's requests together,
 * and no request's done can run inside the submit that made it. */
int mqproc__pg_enqueue(pg_store_t *s, pg_req_t *r) {
  pg_engine_t *e = s->engine;
  if (e == NULL) {
    mqproc__pg_req_free(r);
    return MQPROC_ESTATE;
  }
  r->next = NULL;
  *e->tail = r;
  e->tail = &r->next;
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

/* The oldest round in flight has its deadline from when it was sent; none: no timer. */
static void arm_round_timer(pg_engine_t *e) {
  int64_t left;
  if (e->inflight == 0) {
    set_timer(e, 0);
    return;
  }
  left = e->rounds[e->head].sent_at + ROUND_TIMEOUT_MS - mqproc__now_ms();
  set_timer(e, left > 0 ? left : 1);
}

/* Hands the requests of list to e->completing, where forget() still reaches them, to be
 * called back by run_completions(). */
static void park(pg_engine_t *e, pg_req_t *list) {
  pg_req_t **t = &e->completing;
  while (*t != NULL)
    t = &(*t)->next;
  *t = list;
}

/* Calls back the requests in e->completing (each with its own rc and err; done NULL:
 * forgotten) and frees them. A call back may free the ud of a request further down the
 * list (and forget it); one that ends more requests (a lost connection) appends them to
 * the list being worked through. */
static void run_completions(pg_engine_t *e) {
  if (e->completing_now || e->completing == NULL)
    return;
  e->completing_now = 1;
  e->called_back = 1;
  while (e->completing != NULL) {
    pg_req_t *r = e->completing;
    e->completing = r->next;
    if (r->done != NULL)
      r->done(r->ud, r->rc, r->rc != MQPROC_OK ? r->err : NULL);
    mqproc__pg_req_free(r);
  }
  e->completing_now = 0;
}

static void complete(pg_engine_t *e, pg_req_t *list) {
  park(e, list);
  run_completions(e);
}

static void clear_round(round_t *rd) {
  for (int i = 0; i < rd->nitems; i++) {
    PQclear(rd->items[i].res);
    free(rd->items[i].reqs);
  }
  memset(rd->items, 0, (size_t)rd->nitems * sizeof(rd->items[0]));
  rd->nitems = rd->next_item = rd->failed = rd->setup = rd->open = rd->awaiting = 0;
  rd->reqs = NULL;
}

/* The connection is gone or unusable: everything in flight and queued fails (their
 * outcome is unknown for a round in flight: fenced writes make a retry safe). */
static void broken(pg_engine_t *e, const char *why) {
  char err[MQPROC_ERR_LEN];
  pg_req_t *failed = NULL, **t = &failed;
  snprintf(err, sizeof(err), "database connection lost: %s", why);
  err[strcspn(err, "\n")] = '\0';
  for (int k = 0; k < e->inflight; k++) { /* the rounds, oldest first, then the queue */
    round_t *rd = &e->rounds[(e->head + k) % ROUNDS_MAX];
    *t = rd->reqs;
    while (*t != NULL)
      t = &(*t)->next;
    clear_round(rd);
  }
  *t = e->queue;
  e->queue = NULL;
  e->tail = &e->queue;
  e->head = e->inflight = 0;
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

/* ---- rounds: what goes in one ------------------------------------------------------- */

static int is_prepared(const pg_engine_t *e, const pg_stmt_t *st) {
  for (int i = 0; i < e->nprepared; i++)
    if (e->prepared[i] == st)
      return 1;
  return 0;
}

/* A Parse of st failed or never ran (its round failed before it): prepare it again. */
static void unprepare(pg_engine_t *e, const pg_stmt_t *st) {
  for (int i = 0; i < e->nprepared; i++)
    if (e->prepared[i] == st) {
      e->prepared[i] = e->prepared[--e->nprepared];
      return;
    }
}

static item_t *add_item(item_t *it, const pg_stmt_t *st, int prepare) {
  memset(it, 0, sizeof(*it));
  it->stmt = st;
  it->prepare = prepare;
  return it;
}

/* The key that orders a request among those of its job: its first parameter (the job's
 * id for the job's statements), NULL when it has none. */
static const char *key_of(const pg_req_t *r) {
  return r->n > 0 ? r->vals[0] : NULL;
}

static int cmp_key(const char *a, const char *b) {
  if (a == NULL || b == NULL)
    return (a != NULL) - (b != NULL);
  return strcmp(a, b);
}

static int cmp_keyp(const void *a, const void *b) {
  return cmp_key(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_req(const void *a, const void *b) {
  return cmp_key(key_of(*(pg_req_t *const *)a), key_of(*(pg_req_t *const *)b));
}

/* The keys of the requests in the rounds in flight, sorted (malloc'd; *n of them). NULL
 * with *n 0 when nothing is in flight; NULL with *n -1 when out of memory. */
static const char **keys_in_flight(const pg_engine_t *e, int *n) {
  const char **keys;
  int count = 0;
  *n = 0;
  for (int k = 0; k < e->inflight; k++)
    for (const pg_req_t *r = e->rounds[(e->head + k) % ROUNDS_MAX].reqs; r != NULL; r = r->next)
      count++;
  if (count == 0)
    return NULL;
  if ((keys = mqproc__malloc((size_t)count * sizeof(*keys))) == NULL) {
    *n = -1;
    return NULL;
  }
  for (int k = 0; k < e->inflight; k++)
    for (const pg_req_t *r = e->rounds[(e->head + k) % ROUNDS_MAX].reqs; r != NULL; r = r->next)
      if (key_of(r) != NULL)
        keys[(*n)++] = key_of(r);
  qsort(keys, (size_t)*n, sizeof(*keys), cmp_keyp);
  return keys;
}

/* The execution item of r among the round's executions (execs[0..*nexec)): an existing
 * one of a batched statement r may join, or a new one; NULL when r must wait for the next
 * round (its job is in the batch already, or the batch is full). */
static item_t *item_for(item_t *execs, int *nexec, const pg_req_t *r) {
  for (int i = 0; i < *nexec; i++) {
    item_t *it = &execs[i];
    if (it->stmt != r->stmt || !r->stmt->batched)
      continue;
    if (it->nreqs >= BATCH_MAX)
      return NULL;
    for (int k = 0; k < it->nreqs; k++) /* one request per job in an execution */
      if (cmp_key(key_of(it->reqs[k]), key_of(r)) == 0)
        return NULL;
    return it;
  }
  return add_item(&execs[(*nexec)++], r->stmt, 0);
}

/* Whether r waits for a round in flight to end: one of them holds a request of its key. */
static int waits_for_key(const pg_req_t *r, const char **keys, int nkeys) {
  const char *key = key_of(r);
  return key != NULL && nkeys > 0 &&
         bsearch(&key, keys, (size_t)nkeys, sizeof(*keys), cmp_keyp) != NULL;
}

/* Moves r from the queue (at *pp) onto rd's list (at *tail) and into item it. */
static int take_one(pg_engine_t *e, pg_req_t **pp, pg_req_t ***tail, item_t *it) {
  pg_req_t *r = *pp, **grown = mqproc__realloc(it->reqs, (size_t)(it->nreqs + 1) * sizeof(*grown));
  if (grown == NULL)
    return 0;
  it->reqs = grown;
  it->reqs[it->nreqs++] = r;
  *pp = r->next;
  if (*pp == NULL)
    e->tail = pp;
  r->next = NULL;
  **tail = r;
  *tail = &r->next;
  return 1;
}

/* Takes requests off the queue (in order, skipping those that must wait) into rd's items,
 * after those it has (an open round's): the session setup when it is not done (a new
 * round), a Parse of each statement not prepared yet, then the executions, each batch
 * sorted by key. Returns how many requests were taken; *early: whether one of them is
 * early (store.h: the round stays open for what its answer brings). */
static int take(pg_engine_t *e, round_t *rd, int *early) {
  int base = rd->nitems;
  item_t *head = &rd->items[base], *execs = &rd->items[base + HEAD_MAX]; /* moved down */
  pg_req_t **pp = &e->queue, **tail = &rd->reqs;
  int taken = 0, nexec = 0, nhead = 0, nkeys;
  const char **keys = keys_in_flight(e, &nkeys);
  *early = 0;
  while (*tail != NULL)
    tail = &(*tail)->next;
  if (nkeys < 0)
    return 0; /* out of memory: the queue goes when nothing is in flight */
  if (base == 0 && !e->setup_done && !e->s->pooled) { /* session settings: not through a
                                                         pooler */
    rd->setup = 1;
    rd->setup_gen = e->setup_gen;
    add_item(&head[nhead++], NULL, 0);
    if (e->s->on_notify != NULL)
      add_item(&head[nhead++], NULL, 1);
    if (e->s->on_queue != NULL && e->s->queue_listen[0] != '\0')
      add_item(&head[nhead++], NULL, 2);
  }
  while (*pp != NULL && taken < ROUND_MAX) {
    pg_req_t *r = *pp;
    item_t *it;
    if (r->solo && taken > 0)
      break; /* alone in a round of its own, next time */
    if (waits_for_key(r, keys, nkeys) && r->solo)
      break; /* nothing overtakes a request that runs again (cannot happen: its round held
                its key, so the round after did not) */
    if (waits_for_key(r, keys, nkeys) || (it = item_for(execs, &nexec, r)) == NULL) {
      pp = &r->next;
      continue;
    }
    if (!take_one(e, pp, &tail, it)) {
      if (it->nreqs == 0)
        nexec--; /* the item just made for it */
      break;
    }
    taken++;
    *early |= r->early;
    if (!e->s->pooled && !is_prepared(e, r->stmt) && e->nprepared < MAX_STMTS) {
      add_item(&head[nhead++], r->stmt, 1);  /* before any execution can fail */
      e->prepared[e->nprepared++] = r->stmt; /* so the next round does not Parse it again */
    }
    if (r->solo)
      break;
  }
  free(keys);
  for (int i = 0; i < nexec; i++)
    if (execs[i].stmt->batched) /* a stable lock order between servers */
      qsort(execs[i].reqs, (size_t)execs[i].nreqs, sizeof(pg_req_t *), cmp_req);
  memmove(&head[nhead], execs, (size_t)nexec * sizeof(*execs));
  if (nhead < HEAD_MAX)
    memset(&head[nhead + nexec], 0, (size_t)(HEAD_MAX - nhead) * sizeof(*execs));
  rd->nitems = base + nhead + nexec;
  return taken;
}

/* ---- rounds: sending ---------------------------------------------------------------- */

/* The session's settings, one statement: the statement timeout (the round's deadline is
 * above it). */
static const char SETUP_SQL[] = "SELECT set_config('statement_timeout', '30000', false)";

static int send_item(pg_engine_t *e, const item_t *it) {
  char *arrays[MQPROC__PG_MAX_PARAMS] = {0};
  const pg_req_t *r;
  int ok = 1, n;
  if (it->stmt == NULL)
    return PQsendQueryParams(e->conn,
                             it->prepare == 2   ? e->s->queue_listen
                             : it->prepare == 1 ? "LISTEN " MQPROC__PG_CONTROL_CHANNEL
                                                : SETUP_SQL,
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

/* Whether another round may go now: one is queued, connected, a place on the pipeline,
 * and no round is open (what is sent now would join its transaction). */
static int may_send(pg_engine_t *e) {
  if (e->queue == NULL || e->inflight >= (e->s->pooled ? 1 : ROUNDS_MAX) || open_round(e) != NULL)
    return 0;
  if (e->conn == NULL) {
    connect_start(e);
    return 0;
  }
  if (e->connecting)
    return 0;
  if (!e->linger_due && only_low_priority(e)) { /* wait a little for company */
    if (e->linger == 0)
      e->linger = mqproc__loop_timer(e->loop, LINGER_MS, on_linger, e);
    return 0;
  }
  return 1;
}

/* Sends the items of rd from first on, then its Sync, or a flush request instead when
 * early (the round stays open); 0 when the connection broke. */
static int send_items(pg_engine_t *e, round_t *rd, int first, int early) {
  for (int i = first; i < rd->nitems; i++) {
    if (!send_item(e, &rd->items[i])) {
      broken(e, PQerrorMessage(e->conn));
      return 0;
    }
  }
  rd->open = early;
  rd->awaiting = 0;
  if ((early ? PQsendFlushRequest(e->conn) : PQpipelineSync(e->conn)) != 1) {
    broken(e, PQerrorMessage(e->conn));
    return 0;
  }
  return 1;
}

/* The last round in flight, when it is open. */
static round_t *open_round(pg_engine_t *e) {
  round_t *rd = e->inflight > 0 ? &e->rounds[(e->head + e->inflight - 1) % ROUNDS_MAX] : NULL;
  return rd != NULL && rd->open ? rd : NULL;
}

/* An open round whose early requests were answered: what the loop's turn queued since
 * joins it (the claims of the messages its take brought), or it ends with its Sync. 0 when
 * the connection broke. */
static int extend_round(pg_engine_t *e, round_t *rd) {
  int first = rd->nitems, early = 0, taken = 0;
  if (e->queue != NULL && !rd->failed && rd->nitems <= HEAD_MAX + ROUND_MAX)
    taken = take(e, rd, &early);
  if (taken > 0)
    MQPROC__DEBUG("store: %d request(s) joined the open turn", taken);
  return send_items(e, rd, first, early);
}

/* Sends one round of what is queued; 0 when nothing could be taken or the connection
 * broke. */
static int send_round(pg_engine_t *e) {
  round_t *rd = &e->rounds[(e->head + e->inflight) % ROUNDS_MAX];
  int early, taken = take(e, rd, &early);
  if (taken == 0) {
    clear_round(rd);
    return 0;
  }
  e->linger_due = 0;
  if (e->linger != 0) {
    mqproc__loop_timer_cancel(e->loop, e->linger);
    e->linger = 0;
  }
  rd->sent_at = mqproc__now_ms();
  if (e->inflight++ == 0)
    arm_round_timer(e);
  if (!send_items(e, rd, 0, early))
    return 0;
  MQPROC__DEBUG("store: round of %d request(s) in %d execution(s) sent%s, %d in flight", taken,
                rd->nitems, early ? " (open)" : "", e->inflight);
  return 1;
}

/* Sends what is queued, in as many rounds as the pipeline takes (first into an open round
 * that waits for it), then flushes. */
static void start_round(pg_engine_t *e) {
  round_t *rd = open_round(e);
  int sent = 0;
  if (rd != NULL && rd->awaiting) {
    if (!extend_round(e, rd))
      return;
    sent = 1;
  }
  while (may_send(e) && send_round(e))
    sent = 1;
  if (!sent || e->conn == NULL)
    return;
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

/* The loop's before-poll hook: the requests of the turn go out together. Callbacks run
 * here (a lost connection) may have asked for more: then the loop must not sleep. */
static int flush(mqproc__loop_t *loop, void *ud) {
  pg_engine_t *e = ud;
  round_t *rd = open_round(e);
  (void)loop;
  e->called_back = 0;
  if (e->queue != NULL || (rd != NULL && rd->awaiting))
    start_round(e);
  return e->called_back ? 0 : -1;
}

/* ---- rounds: results ---------------------------------------------------------------- */

/* Reads each execution's rows into its requests (a round that did not fail); forgets the
 * Parses that did not succeed. */
static void parse_round(pg_engine_t *e, round_t *rd) {
  for (int i = 0; i < rd->nitems; i++) {
    item_t *it = &rd->items[i];
    if (it->prepare && it->stmt != NULL && !it->ok)
      unprepare(e, it->stmt);
    if (rd->failed || it->prepare || it->stmt == NULL || it->early_done)
      continue;
    if (it->res == NULL) /* no result: cannot happen in a round that did not fail */
      for (int k = 0; k < it->nreqs; k++)
        it->reqs[k]->rc = mqproc__err(it->reqs[k]->err, MQPROC_ESTORE_QUERY, "no result");
    else if (it->stmt->batched)
      mqproc__pg_parse_batched(it->reqs, it->nreqs, it->res);
    else
      mqproc__pg_parse_single(it->reqs[0], it->res);
  }
  if (!rd->failed && rd->setup && rd->setup_gen == e->setup_gen)
    e->setup_done = 1;
}

/* The oldest round's Sync arrived: it committed, or it was rolled back because a statement
 * failed. A failed round's requests run again, each alone, unless one was alone already:
 * then the failure is its own. What queued meanwhile is sent before the round's requests
 * are called back. */
static void finish_round(pg_engine_t *e) {
  round_t *rd = &e->rounds[e->head];
  pg_req_t *list = rd->reqs, *again = NULL, **at = &again, *done = NULL, **dt = &done;
  int alone = list != NULL && list->next == NULL, failed = rd->failed, fail_rc = rd->fail_rc;
  char fail_err[MQPROC_ERR_LEN];
  snprintf(fail_err, sizeof(fail_err), "%s", rd->fail_err);
  parse_round(e, rd);
  clear_round(rd);
  e->head = (e->head + 1) % ROUNDS_MAX;
  e->inflight--;
  arm_round_timer(e);
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
  park(e, done); /* reachable by forget() while what queued is sent */
  start_round(e);
  run_completions(e);
}

/* One result of the oldest round's current item. */
static void on_result(round_t *rd, PGresult *res) {
  item_t *it = rd->next_item < rd->nitems ? &rd->items[rd->next_item] : NULL;
  ExecStatusType st = PQresultStatus(res);
  MQPROC__DEBUG("store: item %d/%d: %s", rd->next_item, rd->nitems, PQresStatus(st));
  if (st == PGRES_FATAL_ERROR && !rd->failed) {
    rd->failed = 1;
    rd->fail_rc = mqproc__pg_result_error(res, rd->fail_err);
  }
  if (it != NULL) {
    it->answered = 1;
    if (it->prepare && st == PGRES_COMMAND_OK)
      it->ok = 1;
  }
  if (it != NULL && it->res == NULL && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
    it->res = res;
  else
    PQclear(res);
}

/* Every result of an open round is in: its early requests are answered now, before the
 * commit (a failed round instead ends with its Sync: nothing of it is answered early, its
 * requests run again as usual). What their answers make the loop queue in this turn joins
 * the round at the turn's end (flush()). */
static void answer_early(pg_engine_t *e, round_t *rd) {
  pg_req_t *done = NULL, **dt = &done;
  if (rd->failed) {
    send_items(e, rd, rd->nitems, 0); /* the Sync */
    if (e->conn != NULL && PQflush(e->conn) < 0)
      broken(e, PQerrorMessage(e->conn));
    return;
  }
  for (int i = 0; i < rd->nitems; i++) {
    item_t *it = &rd->items[i];
    if (it->prepare || it->stmt == NULL || it->early_done || it->nreqs == 0 || !it->reqs[0]->early)
      continue;
    if (it->res == NULL)
      continue; /* (cannot happen in a round that did not fail: answered at its end) */
    if (it->stmt->batched)
      mqproc__pg_parse_batched(it->reqs, it->nreqs, it->res);
    else
      mqproc__pg_parse_single(it->reqs[0], it->res);
    it->early_done = 1;
    for (int k = 0; k < it->nreqs; k++) { /* out of the round's list, into done */
      pg_req_t **pp = &rd->reqs;
      while (*pp != NULL && *pp != it->reqs[k])
        pp = &(*pp)->next;
      if (*pp != NULL)
        *pp = it->reqs[k]->next;
      it->reqs[k]->next = NULL;
      *dt = it->reqs[k];
      dt = &it->reqs[k]->next;
    }
  }
  rd->awaiting = 1;
  park(e, done);
  run_completions(e);
}

static void read_results(pg_engine_t *e) {
  while (e->inflight > 0 && e->conn != NULL && !PQisBusy(e->conn)) {
    round_t *rd = &e->rounds[e->head];
    PGresult *res;
    if (rd->open && rd->next_item >= rd->nitems) { /* nothing more until we send more */
      if (!rd->awaiting)
        answer_early(e, rd);
      return;
    }
    res = PQgetResult(e->conn);
    if (res == NULL) { /* the end of one item's results (none before its first result) */
      if (rd->next_item < rd->nitems && rd->items[rd->next_item].answered)
        rd->next_item++;
      continue;
    }
    if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
      PQclear(res);
      finish_round(e); /* then the next round's results, if they came */
      continue;
    }
    on_result(rd, res);
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
  for (PGnotify *n; e->conn != NULL && (n = PQnotifies(e->conn)) != NULL; PQfreemem(n)) {
    if (e->s->queue_listen[0] != '\0' && strcmp(n->relname, e->s->queue_listen + 7) == 0) {
      if (e->s->on_queue != NULL)
        e->s->on_queue(e->s->queue_ud, n->extra);
    } else if (e->s->on_notify != NULL) {
      e->s->on_notify(e->s->notify_ud, n->extra);
    }
  }
  if (e->conn != NULL && e->inflight == 0 && PQstatus(e->conn) == CONNECTION_BAD)
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
}

int mqproc__pg_engine_new(pg_engine_t **out, pg_store_t *s, mqproc__loop_t *loop, char *err) {
  pg_engine_t *e = mqproc__calloc(1, sizeof(*e));
  if (e == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  e->s = s;
  e->loop = loop;
  e->fd = -1;
  e->tail = &e->queue;
  mqproc__loop_before_poll(loop, &e->flush, flush, e);
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
  for (int k = 0; k < e->inflight; k++)
    forget_list(e->rounds[(e->head + k) % ROUNDS_MAX].reqs, ud);
  forget_list(e->completing, ud);
}

void mqproc__pg_engine_relisten(pg_engine_t *e) {
  e->setup_done = 0; /* (LISTEN again on a channel already listened to changes nothing) */
  e->setup_gen++;
}

void mqproc__pg_engine_free(pg_engine_t *e) {
  if (e == NULL)
    return;
  mqproc__loop_before_poll_stop(e->loop, &e->flush);
  mqproc__pg_engine_forget(e, NULL);
  broken(e, "closing"); /* calls nothing back: everything was forgotten */
  free(e);
}
