/* The table queues' broker backend (store/queue.h, broker.h): a queue is the rows of
 * mqproc_messages with its name, in PostgreSQL or SQLite, through the store's q_*
 * operations, so both databases share this code and, when the queue is the server's own
 * database, its statements ride the same rounds (transactions) as the job's writes.
 *
 * Connecting: no socket (fd() is -1). connect() starts a new epoch with a q_reset: what
 * this server (its worker id) held before is ready again, as a broker requeues a closed
 * connection's deliveries; takes start once it committed. A request that finds the
 * database gone (MQPROC_ESTORE_CONNECT) takes the "connection" down: on_down, and the
 * server connects again with its backoff.
 *
 * Consuming with prefetch N keeps up to N messages held: while fewer are held it takes
 * the difference, one q_take in flight at a time. The rows a take brings wait in a buffer
 * (pending() says so) until pump() hands them over, highest priority first, then oldest.
 * A take that came back short means the queue is empty: the next one waits for a wake, a
 * NOTIFY (PostgreSQL) or a notice-file line (SQLite) naming the queue, or the poll that
 * catches what those miss (a producer's plain INSERT, a delayed message coming due, a dead
 * holder's deadline): every TOLD_POLL_MS where the store tells of new messages, every
 * POLL_MS (with jitter) where it cannot (PostgreSQL through a pooler: no LISTEN). An idle
 * server so wakes well under once a second.
 *
 * Holding: every visibility/3 one q_extend pushes the deadline of everything held out to
 * visibility again; a server that dies stops doing so, and its messages are taken back
 * by the next take anywhere once their deadline passed. Settling: the acks and nacks of a
 * loop turn go at its flush as one q_ack and one q_nack each, fenced by holder and
 * delivery count; the take that refills the window goes in the same turn. Tags are the
 * messages' ids; an ack names every held message up to its tag when multiple.
 *
 * Publishing: q_publish, whose commit is the confirm (on_confirm with the sequence
 * number); results and dead letters are messages of their queues like any other, and
 * declare_queue makes nothing (a queue is its rows). */
#include "store/queue.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "store/odb.h"

#define POLL_MS 1000      /* an idle consumer that is told of nothing looks this often (+-10 %) */
#define TOLD_POLL_MS 5000 /* one that is told of new messages: the backstop only */

typedef struct held { /* a message this server took and has not settled */
  int64_t id;
  int deliveries;
  uint64_t consumer; /* the consume() it came for */
} held_t;

typedef struct taken { /* a message taken, not handed to the server yet */
  held_t h;
  int priority;
  char *body; /* NUL-terminated copy */
  size_t len;
  size_t size; /* > len: the body's whole size, of which only its start was read */
  char *content_type;
  char *message_id;   /* NULL: none */
  char *headers_json; /* NULL: none */
} taken_t;

typedef struct settles { /* a turn's acks or nacks */
  int64_t *ids;
  int *deliveries;
  size_t n, cap;
} settles_t;

typedef struct pub { /* a publish waiting for its commit */
  struct tqb *b;
  uint64_t seq;
  struct pub *next;
} pub_t;

typedef struct tqb {
  mqproc__broker_t base; /* first: klass */
  const mqproc__topology_t *topo;
  mqproc__broker_events_t ev;
  mqproc__store_t *store;
  int own_store; /* made here (another database than the server's): destroyed here */
  mqproc__loop_t *loop;
  char *url;                /* the database's */
  char where[256];          /* the database, masked, for the log */
  int up;                   /* connected: connect() ran, not down since */
  int resets;               /* q_resets in flight: no take before the last one committed */
  int suspect;              /* the last connection ended in a failure: connect() looks first */
  int probing;              /* that look (a q_reset) is in flight */
  char why[MQPROC_ERR_LEN]; /* how the last one failed */
  uint64_t epoch;
  uint64_t consumer; /* the current consume() */
  int consuming, prefetch;
  held_t *held; /* the messages held: handed over or still in taken[] */
  size_t n_held, cap_held;
  taken_t **taken; /* handed over from taken[head] on */
  size_t head, n_taken, cap_taken;
  int taking;          /* a q_take in flight */
  uint64_t take_epoch; /* its epoch and consumer */
  uint64_t take_consumer;
  int take_asked, take_got;
  int drained; /* the last take came back short: the next waits for a wake or the poll */
  int wanted;  /* a wake came (a notice, the poll) */
  uint64_t poll_timer, extend_timer;
  int extending, extend_sent, extend_held;
  settles_t acks, requeues, drops;
  pub_t *pubs; /* publishes not committed yet */
  uint64_t seq;
  int told; /* the store tells of new messages (listen_queues): the poll is a backstop */
} tqb_t;

int mqproc__queue_is_table_url(const char *url) {
  return url != NULL && (strncmp(url, "postgresql://", 13) == 0 ||
                         strncmp(url, "postgres://", 11) == 0 || mqproc__store_is_sqlite(url));
}

/* ---- what is held ------------------------------------------------------------------- */

static int hold(tqb_t *b, const held_t *h) {
  if (b->n_held == b->cap_held) {
    size_t cap = b->cap_held ? 2 * b->cap_held : 64;
    held_t *grown = mqproc__realloc(b->held, cap * sizeof(*grown));
    if (grown == NULL)
      return -1;
    b->held = grown;
    b->cap_held = cap;
  }
  b->held[b->n_held++] = *h;
  return 0;
}

/* Messages held for the current consumer (its prefetch counts these only, as AMQP's
 * per-consumer basic.qos does; the server counts the others). */
static int held_now(const tqb_t *b) {
  int n = 0;
  for (size_t i = 0; i < b->n_held; i++)
    n += b->held[i].consumer == b->consumer;
  return n;
}

static void free_taken(taken_t *t) {
  if (t == NULL)
    return;
  free(t->body);
  free(t->content_type);
  free(t->message_id);
  free(t->headers_json);
  free(t);
}

/* Forgets everything held (the connection is gone: a reset or the deadline gives it
 * back) and what the turn would have settled. */
static void drop_all(tqb_t *b) {
  while (b->head < b->n_taken)
    free_taken(b->taken[b->head++]);
  b->head = b->n_taken = 0;
  b->n_held = 0;
  b->acks.n = b->requeues.n = b->drops.n = 0;
}

static int settle_add(settles_t *s, const held_t *h) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    int64_t *ids = mqproc__realloc(s->ids, cap * sizeof(*ids));
    int *dl;
    if (ids == NULL)
      return -1;
    s->ids = ids;
    if ((dl = mqproc__realloc(s->deliveries, cap * sizeof(*dl))) == NULL)
      return -1;
    s->deliveries = dl;
    s->cap = cap;
  }
  s->ids[s->n] = h->id;
  s->deliveries[s->n++] = h->deliveries;
  return 0;
}

/* ---- the connection going down ------------------------------------------------------ */

/* Every publish not committed yet is reported CLOSED (it may still commit: a message is
 * sent at least once) and its request forgotten. */
static void close_publishes(tqb_t *b) {
  while (b->pubs != NULL) {
    pub_t *p = b->pubs;
    b->pubs = p->next;
    mqproc__store_forget(b->store, p);
    b->ev.on_confirm(b->ev.ud, p->seq, MQPROC_EBROKER_CLOSED);
    free(p);
  }
}

static void stop_timers(tqb_t *b) {
  mqproc__loop_timer_cancel(b->loop, b->poll_timer);
  mqproc__loop_timer_cancel(b->loop, b->extend_timer);
  b->poll_timer = b->extend_timer = 0;
}

/* The connection is gone: nothing held any more, every publish not committed reported. */
static void drop(tqb_t *b) {
  if (!b->up)
    return;
  b->up = b->consuming = 0;
  stop_timers(b);
  drop_all(b);
  close_publishes(b);
}

/* The server's end (its loop has stopped): what it still holds is given back at once, as a
 * broker requeues a closed connection's deliveries, with a blocking statement of its own
 * (the store's requests need the loop; those of the last turn, a release's nack say, may
 * not have reached the database). An ack that did not either makes its message come back:
 * its claim finds the job done and acks it. */
static void t_disconnect(mqproc__broker_t *base) {
  tqb_t *b = (tqb_t *)base;
  char err[512];
  const char *vals[2] = {b->topo->queue, b->topo->client_id};
  mqproc__odb_t *db;
  mqproc__ores_t *r;
  if (!b->up)
    return;
  drop(b);
  if ((db = mqproc__odb_open(b->url, 2000, err)) == NULL) {
    MQPROC__DEBUG("table queue '%s': not given back at the end (%s); at its deadline then",
                  b->topo->queue, err);
    return;
  }
  r = mqproc__odb_q(db,
                    "UPDATE mqproc_messages SET consumer = NULL, visible_at = now()"
                    " WHERE queue = $1 AND consumer = $2",
                    "UPDATE mqproc_messages SET consumer = NULL,"
                    " visible_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
                    " WHERE queue = ?1 AND consumer = ?2",
                    2, vals, err);
  if (r != NULL && mqproc__ores_changed(r) > 0)
    MQPROC__INFO("table queue '%s': %lld message(s) this server held are ready again",
                 b->topo->queue, mqproc__ores_changed(r));
  mqproc__ores_free(r);
  mqproc__odb_close(db);
}

/* A request found the database gone: the "connection" is down, the server connects
 * again (a new epoch, whose reset gives back what this one held); until a look at the
 * database succeeds, its connects fail, so it backs off as from a broker that is away. */
static void went_down(tqb_t *b, const char *why) {
  char reason[MQPROC_ERR_LEN];
  if (!b->up)
    return;
  snprintf(reason, sizeof(reason), "the queue's database %s: %s", b->where, why);
  snprintf(b->why, sizeof(b->why), "%s", why);
  b->suspect = 1;
  drop(b);
  b->ev.on_down(b->ev.ud, reason);
}

/* A request's failure: an outage takes the connection down, anything else is logged. */
static void failed(tqb_t *b, int rc, const char *what, const char *err) {
  if (rc == MQPROC_ESTORE_CONNECT)
    went_down(b, err != NULL ? err : "unreachable");
  else
    MQPROC__WARN("table queue '%s': %s failed: %s", b->topo->queue, what,
                 err != NULL ? err : mqproc_strerror(rc));
}

/* ---- taking ------------------------------------------------------------------------- */

static void on_poll(mqproc__loop_t *loop, void *ud) {
  tqb_t *b = ud;
  (void)loop;
  b->poll_timer = 0;
  b->wanted = 1; /* taken at the turn's flush, when there is room */
}

/* While the queue looked empty: look again in about POLL_MS (TOLD_POLL_MS when told). */
static void arm_poll(tqb_t *b) {
  int ms = b->told ? TOLD_POLL_MS : POLL_MS;
  if (b->poll_timer == 0 && b->up && b->consuming && b->drained)
    b->poll_timer = mqproc__loop_timer(b->loop, ms * 9 / 10 + random() % (ms / 5 + 1), on_poll, b);
}

static void on_extend(mqproc__loop_t *loop, void *ud);

/* While anything is held: its deadline pushed out every third of the visibility. */
static void arm_extend(tqb_t *b) {
  if (b->extend_timer == 0 && b->up && b->n_held > 0)
    b->extend_timer = mqproc__loop_timer(b->loop, b->topo->visibility_s * 1000LL / 3, on_extend, b);
}

static void on_row(void *ud, const mqproc__q_msg_t *m) {
  tqb_t *b = ud;
  taken_t *t;
  if (!b->up || b->take_epoch != b->epoch)
    return; /* an older epoch's: the reset of this one (or the deadline) gives it back */
  if (b->n_taken == b->cap_taken) {
    size_t cap = b->cap_taken ? 2 * b->cap_taken : 64;
    taken_t **grown = mqproc__realloc(b->taken, cap * sizeof(*grown));
    if (grown == NULL)
      return; /* out of memory: it comes back at its deadline */
    b->taken = grown;
    b->cap_taken = cap;
  }
  if ((t = mqproc__calloc(1, sizeof(*t))) == NULL ||
      (t->body = mqproc__malloc(m->len + 1)) == NULL ||
      (t->content_type = mqproc__strdup(m->content_type)) == NULL ||
      (m->message_id != NULL && (t->message_id = mqproc__strdup(m->message_id)) == NULL) ||
      (m->headers_json != NULL && (t->headers_json = mqproc__strdup(m->headers_json)) == NULL) ||
      hold(b, &(held_t){m->id, m->deliveries, b->take_consumer}) != 0) {
    free_taken(t);
    return;
  }
  memcpy(t->body, m->body, m->len);
  t->body[m->len] = '\0';
  t->len = m->len;
  t->size = m->size;
  t->h = (held_t){m->id, m->deliveries, b->take_consumer};
  t->priority = m->priority;
  b->taken[b->n_taken++] = t;
  b->take_got++;
}

/* The queue's order: the highest priority first, then the oldest. */
static int by_order(const void *x, const void *y) {
  const taken_t *a = *(const taken_t *const *)x, *c = *(const taken_t *const *)y;
  if (a->priority != c->priority)
    return a->priority > c->priority ? -1 : 1;
  return a->h.id < c->h.id ? -1 : a->h.id > c->h.id;
}

static void take_done(void *ud, int rc, const char *err) {
  tqb_t *b = ud;
  b->taking = 0;
  if (b->take_epoch != b->epoch || !b->up)
    return;
  if (rc != MQPROC_OK) {
    b->drained = 1; /* the poll tries again */
    failed(b, rc, "a take", err);
    arm_poll(b);
    return;
  }
  if (b->take_got > 0) /* this take's rows, at the end of what waits */
    qsort(b->taken + b->n_taken - b->take_got, (size_t)b->take_got, sizeof(*b->taken), by_order);
  b->drained = b->take_got < b->take_asked;
  arm_extend(b);
  arm_poll(b);
}

/* Takes what the window has room for, when the queue may hold something. */
static void maybe_take(tqb_t *b) {
  int room;
  mqproc__store_q_take_t q;
  if (!b->up || b->resets > 0 || !b->consuming || b->taking || (b->drained && !b->wanted))
    return;
  if ((room = b->prefetch - held_now(b)) <= 0)
    return;
  q = (mqproc__store_q_take_t){.queue = b->topo->queue,
                               .consumer = b->topo->client_id,
                               .limit = room,
                               .visibility_ms = b->topo->visibility_s * 1000,
                               .max_body = b->topo->max_message_bytes,
                               .row = on_row,
                               .early = !b->own_store}; /* the claims join its transaction */
  b->wanted = 0;
  mqproc__loop_timer_cancel(b->loop, b->poll_timer);
  b->poll_timer = 0;
  MQPROC__DEBUG("table queue '%s': taking up to %d message(s)", b->topo->queue, room);
  if (mqproc__store_q_take(b->store, &q, take_done, b) != MQPROC_OK) {
    b->drained = 1; /* out of memory: the poll tries again */
    arm_poll(b);
    return;
  }
  b->taking = 1;
  b->take_epoch = b->epoch;
  b->take_consumer = b->consumer;
  b->take_asked = room;
  b->take_got = 0;
}

/* A notice names a queue with new messages (store.h: listen_queues). */
static void on_notice(void *ud, const char *queue) {
  tqb_t *b = ud;
  if (strcmp(queue, b->topo->queue) == 0)
    b->wanted = 1; /* taken at the turn's flush */
}

/* ---- holding and settling ----------------------------------------------------------- */

static void extend_done(void *ud, int rc, const char *err) {
  tqb_t *b = ud;
  b->extending = 0;
  if (!b->up)
    return;
  if (rc != MQPROC_OK)
    failed(b, rc, "an extend", err);
  else if (b->extend_held < b->extend_sent)
    MQPROC__INFO("table queue '%s': %d message(s) this server held were past their deadline and "
                 "taken by another server (their jobs are fenced by their claims)",
                 b->topo->queue, b->extend_sent - b->extend_held);
}

static void on_extend(mqproc__loop_t *loop, void *ud) {
  tqb_t *b = ud;
  int64_t *ids;
  mqproc__store_q_extend_t q;
  (void)loop;
  b->extend_timer = 0;
  if (!b->up || b->n_held == 0)
    return;
  if (!b->extending && (ids = mqproc__malloc(b->n_held * sizeof(*ids))) != NULL) {
    for (size_t i = 0; i < b->n_held; i++)
      ids[i] = b->held[i].id;
    q = (mqproc__store_q_extend_t){.consumer = b->topo->client_id,
                                   .n = b->n_held,
                                   .ids = ids,
                                   .visibility_ms = b->topo->visibility_s * 1000,
                                   .held = &b->extend_held};
    b->extend_sent = (int)b->n_held;
    if (mqproc__store_q_extend(b->store, &q, extend_done, b) == MQPROC_OK)
      b->extending = 1;
    free(ids);
  }
  arm_extend(b);
}

static void settle_done(void *ud, int rc, const char *err) {
  tqb_t *b = ud;
  if (rc != MQPROC_OK && b->up)
    failed(b, rc, "a settle", err); /* not settled: back at its deadline, then acked by the
                                       claim that finds the job done */
}

/* One request for a turn's acks, requeues or drops. */
static void send_settles(tqb_t *b, settles_t *s, int op, int requeue) {
  mqproc__store_q_settle_t q = {.consumer = b->topo->client_id,
                                .n = s->n,
                                .ids = s->ids,
                                .deliveries = s->deliveries,
                                .requeue = requeue};
  int rc;
  if (s->n == 0)
    return;
  rc = op == MQPROC__STORE_Q_ACK ? mqproc__store_q_ack(b->store, &q, settle_done, b)
                                 : mqproc__store_q_nack(b->store, &q, settle_done, b);
  if (rc != MQPROC_OK)
    MQPROC__WARN("table queue '%s': %zu settle(s) not sent (out of memory): the messages come "
                 "back at their deadline",
                 b->topo->queue, s->n);
  s->n = 0;
}

/* The held messages that tag settles (with multiple, every one up to it) into s. */
static int settle(tqb_t *b, uint64_t epoch, uint64_t tag, int multiple, settles_t *s, char *err) {
  if (!b->up || epoch != b->epoch)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "the delivery is of a closed connection");
  for (size_t i = 0; i < b->n_held;) {
    held_t *h = &b->held[i];
    if ((uint64_t)h->id == tag || (multiple && (uint64_t)h->id < tag)) {
      if (settle_add(s, h) != 0)
        return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
      *h = b->held[--b->n_held];
      continue;
    }
    i++;
  }
  return MQPROC_OK; /* (an unknown tag settles nothing, as on dir://) */
}

/* ---- the class ---------------------------------------------------------------------- */

static void reset_done(void *ud, int rc, const char *err) {
  tqb_t *b = ud;
  if (b->resets > 0)
    b->resets--;
  if (!b->up)
    return;
  if (rc != MQPROC_OK) {
    went_down(b, err != NULL ? err : mqproc_strerror(rc)); /* connect again, reset again */
    return;
  }
  if (b->resets == 0)
    MQPROC__DEBUG("table queue '%s': what this server held before is ready again", b->topo->queue);
}

/* The look at a database that failed before: a reset (it also gives back what this server
 * held); the next connect goes ahead once it succeeded. */
static void probe_done(void *ud, int rc, const char *err) {
  tqb_t *b = ud;
  b->probing = 0;
  if (rc == MQPROC_OK)
    b->suspect = 0;
  else
    snprintf(b->why, sizeof(b->why), "%s", err != NULL ? err : mqproc_strerror(rc));
}

static int t_connect(mqproc__broker_t *base, char *err) {
  tqb_t *b = (tqb_t *)base;
  mqproc__store_q_reset_t q = {.queue = b->topo->queue, .consumer = b->topo->client_id};
  int rc;
  if (b->up)
    return MQPROC_OK;
  if (b->suspect) { /* fail at once (the server backs off) while a look finds out */
    if (!b->probing && mqproc__store_q_reset(b->store, &q, probe_done, b) == MQPROC_OK)
      b->probing = 1;
    return mqproc__err(err, MQPROC_EBROKER_CONNECT, "the queue's database %s: %s", b->where,
                       b->why);
  }
  if ((rc = mqproc__store_q_reset(b->store, &q, reset_done, b)) != MQPROC_OK)
    return mqproc__err(err, rc, "table queue on %s: %s", b->where, mqproc_strerror(rc));
  b->resets++;
  b->up = 1;
  b->epoch++;
  b->consuming = 0;
  b->drained = 0;
  b->wanted = 1;
  MQPROC__INFO("table queue '%s' in the database %s (messages held for %d s, extended while "
               "held)",
               b->topo->queue, b->where, b->topo->visibility_s);
  return MQPROC_OK;
}

static int t_fd(mqproc__broker_t *base) {
  (void)base;
  return -1;
}

static int t_pending(mqproc__broker_t *base) {
  tqb_t *b = (tqb_t *)base;
  return b->up && b->head < b->n_taken;
}

/* Hands the taken messages over, in the queue's order. on_message may settle (a message
 * of a consumer cancelled meanwhile is nacked at once) or take the connection down. */
static int t_pump(mqproc__broker_t *base, char *err) {
  tqb_t *b = (tqb_t *)base;
  (void)err;
  while (b->up && b->head < b->n_taken) {
    taken_t *t = b->taken[b->head++];
    mqproc__broker_msg_t msg = {.epoch = b->epoch,
                                .tag = (uint64_t)t->h.id,
                                .consumer = t->h.consumer,
                                .redelivered = t->h.deliveries > 1,
                                .body = t->body,
                                .len = t->len,
                                .size = t->size,
                                .content_type = t->content_type,
                                .message_id = t->message_id != NULL ? t->message_id : "",
                                .routing_key = b->topo->queue,
                                .headers_json = t->headers_json,
                                .priority = t->priority,
                                .delivery_count = -1};
    b->ev.on_message(b->ev.ud, &msg);
    free_taken(t);
  }
  if (b->head == b->n_taken)
    b->head = b->n_taken = 0;
  return MQPROC_OK;
}

/* Before the loop sleeps: the turn's settles, then the take that fills the window again
 * (the same round: one transaction where the database is the server's store). */
static void t_flush(mqproc__broker_t *base) {
  tqb_t *b = (tqb_t *)base;
  if (!b->up)
    return;
  send_settles(b, &b->acks, MQPROC__STORE_Q_ACK, 0);
  send_settles(b, &b->requeues, MQPROC__STORE_Q_NACK, 1);
  send_settles(b, &b->drops, MQPROC__STORE_Q_NACK, 0);
  maybe_take(b);
}

static int t_ack(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int multiple, char *err) {
  tqb_t *b = (tqb_t *)base;
  return settle(b, epoch, tag, multiple, &b->acks, err);
}

static int t_nack(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int requeue, char *err) {
  tqb_t *b = (tqb_t *)base;
  return settle(b, epoch, tag, 0, requeue ? &b->requeues : &b->drops, err);
}

static void pub_done(void *ud, int rc, const char *err) {
  pub_t *p = ud, **pp;
  tqb_t *b = p->b;
  uint64_t seq = p->seq;
  for (pp = &b->pubs; *pp != NULL && *pp != p; pp = &(*pp)->next)
    ;
  if (*pp != NULL)
    *pp = p->next;
  free(p);
  if (rc != MQPROC_OK)
    MQPROC__WARN("table queue: a message to '%s' not stored: %s", b->topo->queue,
                 err != NULL ? err : mqproc_strerror(rc));
  b->ev.on_confirm(b->ev.ud, seq,
                   rc == MQPROC_OK               ? MQPROC_OK
                   : rc == MQPROC_ESTORE_CONNECT ? MQPROC_EBROKER_CLOSED
                                                 : MQPROC_EBROKER_NACKED);
  if (rc == MQPROC_ESTORE_CONNECT)
    went_down(b, err != NULL ? err : "unreachable");
}

/* The headers as a JSON object's text (NULL: none, or out of memory). */
static char *headers_json(const mqproc__publish_t *p) {
  json_t *o;
  char *out;
  if (p->n_headers == 0 || (o = json_object()) == NULL)
    return NULL;
  for (size_t i = 0; i < p->n_headers; i++)
    if (p->headers[i].key != NULL && p->headers[i].value != NULL)
      json_object_set_new(o, p->headers[i].key, json_string(p->headers[i].value));
  out = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return out;
}

static int t_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq, char *err) {
  tqb_t *b = (tqb_t *)base;
  mqproc__store_q_publish_t q;
  pub_t *pub;
  char *headers;
  int rc;
  if (!b->up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "the queue's database is not connected");
  if (p->routing_key == NULL || p->routing_key[0] == '\0')
    return mqproc__err(err, MQPROC_EINVAL, "no queue to publish to");
  if ((pub = mqproc__calloc(1, sizeof(*pub))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  headers = headers_json(p);
  q = (mqproc__store_q_publish_t){.queue = p->routing_key,
                                  .body = p->body,
                                  .len = p->len,
                                  .content_type = p->content_type,
                                  .message_id = p->message_id,
                                  .headers_json = headers,
                                  .priority = p->priority};
  pub->b = b;
  rc = mqproc__store_q_publish(b->store, &q, pub_done, pub);
  free(headers);
  if (rc != MQPROC_OK) {
    free(pub);
    return mqproc__err(err, rc, "the message cannot be queued: %s", mqproc_strerror(rc));
  }
  pub->seq = ++b->seq;
  pub->next = b->pubs;
  b->pubs = pub;
  *seq = pub->seq;
  return MQPROC_OK;
}

static int t_declare_queue(mqproc__broker_t *base, const char *queue, char *err) {
  (void)base;
  (void)queue;
  (void)err;
  return MQPROC_OK; /* a queue is its rows: nothing to make */
}

static int t_cancel(mqproc__broker_t *base, char *err) {
  tqb_t *b = (tqb_t *)base;
  (void)err;
  b->consuming = 0; /* what was taken still comes through pump() (the server gives it back) */
  mqproc__loop_timer_cancel(b->loop, b->poll_timer);
  b->poll_timer = 0;
  return MQPROC_OK;
}

static int t_consume(mqproc__broker_t *base, int prefetch, uint64_t *consumer, char *err) {
  tqb_t *b = (tqb_t *)base;
  (void)err;
  b->consuming = 1;
  b->prefetch = prefetch > 0 ? prefetch : 1;
  b->drained = 0; /* look at once */
  *consumer = ++b->consumer;
  return MQPROC_OK;
}

static int t_resize(mqproc__broker_t *base, int prefetch, char *err) {
  (void)err;
  ((tqb_t *)base)->prefetch = prefetch > 0 ? prefetch : 1; /* the next flush takes more */
  return MQPROC_OK;
}

/* Only where the queue is the server's own store: the job's write that deletes the message
 * is in the same database, the same transaction. */
static int t_ack_in_store(mqproc__broker_t *base, uint64_t epoch, uint64_t tag,
                          mqproc__broker_held_t *held) {
  tqb_t *b = (tqb_t *)base;
  if (b->own_store || !b->up || epoch != b->epoch)
    return MQPROC_EINVAL;
  for (size_t i = 0; i < b->n_held; i++)
    if ((uint64_t)b->held[i].id == tag) {
      *held = (mqproc__broker_held_t){b->topo->client_id, b->held[i].id, b->held[i].deliveries};
      b->held[i] = b->held[--b->n_held]; /* the window's room: the next take may go now */
      return MQPROC_OK;
    }
  return MQPROC_EINVAL;
}

static uint64_t t_epoch(mqproc__broker_t *base) {
  return ((tqb_t *)base)->epoch;
}

static void t_destroy(mqproc__broker_t *base) {
  tqb_t *b = (tqb_t *)base;
  drop(b); /* (the server disconnected first, when it could) */
  mqproc__store_listen_queues(b->store, NULL, NULL, NULL);
  mqproc__store_forget(b->store, b);
  if (b->own_store)
    mqproc__store_destroy(b->store);
  free(b->url);
  free(b->held);
  free(b->taken);
  for (settles_t *s = &b->acks; s <= &b->drops; s++) {
    free(s->ids);
    free(s->deliveries);
  }
  free(b);
}

static const struct mqproc__broker_class TABLE_CLASS = {
    .name = "table",
    .claim_ahead = 1, /* as dir://: a claim's commit overlaps the runs before it */
    .declare_needs_pattern = 0,
    .connect = t_connect,
    .fd = t_fd,
    .pending = t_pending,
    .pump = t_pump,
    .flush = t_flush,
    .ack = t_ack,
    .nack = t_nack,
    .publish = t_publish,
    .declare_queue = t_declare_queue,
    .cancel = t_cancel,
    .consume = t_consume,
    .resize = t_resize,
    .ack_in_store = t_ack_in_store,
    .epoch = t_epoch,
    .disconnect = t_disconnect,
    .destroy = t_destroy,
};

/* A store of the queue's own (another database than the server's): made, migrated when
 * asked, its schema checked. A database away at start is not fatal: the first request
 * connects again (and the connect's reset fails until it is back). */
static int own_store(tqb_t *b, const char *url, int migrate, char *err) {
  int rc = mqproc__store_new(&b->store, url, b->loop, 0, err);
  if (rc != MQPROC_OK)
    return rc;
  b->own_store = 1;
  if (migrate)
    rc = mqproc__store_migrate(b->store, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_open(b->store, err);
  if (rc == MQPROC_ESTORE_CONNECT) {
    MQPROC__WARN("table queue: the database %s: %s; taking messages once it answers", b->where,
                 err);
    rc = MQPROC_OK;
  }
  return rc == MQPROC_OK ? rc : mqproc__err(err, rc, "--queue %s: %.400s", b->where, err);
}

int mqproc__broker_table_new(mqproc__broker_t **out, const char *url, mqproc__store_t *shared,
                             mqproc__loop_t *loop, int migrate, const mqproc__topology_t *topo,
                             const mqproc__broker_events_t *ev, char *err) {
  tqb_t *b;
  int rc;
  *out = NULL;
  if (topo->quorum)
    return mqproc__err(err, MQPROC_ECONFIG, "--queue-type=quorum is for RabbitMQ, not a table");
  if (topo->client_id == NULL || topo->client_id[0] == '\0' || topo->visibility_s < 1)
    return mqproc__err(err, MQPROC_ECONFIG, "a table queue needs a worker id and a visibility");
  if ((b = mqproc__calloc(1, sizeof(*b))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  b->base.klass = &TABLE_CLASS;
  b->topo = topo;
  b->ev = *ev;
  b->loop = loop;
  b->prefetch = 1;
  if ((b->url = mqproc__strdup(url)) == NULL) {
    free(b);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  mqproc__mask_secret(url, b->where, sizeof(b->where));
  if (shared != NULL)
    b->store = shared;
  else if ((rc = own_store(b, url, migrate, err)) != MQPROC_OK) {
    mqproc__store_destroy(b->store);
    free(b->url);
    free(b);
    return rc;
  }
  b->told = mqproc__store_listen_queues(b->store, b->topo->queue, on_notice, b);
  *out = &b->base;
  return MQPROC_OK;
}
