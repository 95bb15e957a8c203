/* Unit: one delivery's state machine (src/delivery*.c) driven alone, with fakes for
 * everything it sees of the world (delivery/host.h): no server, no broker, no database, no
 * network, no sleeps.
 *
 * The fakes:
 * - the host ops record publishes (the test confirms them with
 *   mqproc__delivery_on_confirm), acks (refused for a tag of an older connection, as the
 *   server's are), run slots and claim passes (counted against a limit the test sets),
 *   store_down, job_failed, and done, which frees the delivery as the server does
 *   (mqproc__server_delivery_done: an abandoned one is only counted, and freed by
 *   abandoned_done when its try ends);
 * - the store records each request (which method, its key arguments, its out pointers,
 *   done + ud) in a queue; the test answers a request explicitly (rc, err, outputs such as
 *   the claim's) after the call that made it returned, as store.h requires;
 * - the broker's epoch is the test's (a changed epoch: the connection was lost); its nack
 *   records;
 * - the runner's start records the try and returns a fake run; the test ends the try by
 *   calling its done with a result; kill records the signal;
 * - the loop is a real one (src/loop/loop.h): timers (backoff, defer, --ack-after) and the
 *   callback thread run on it; run_until() runs it until a condition holds, with a
 *   deadline, and the delays are made tiny through the configuration (retry_backoff_ms 1;
 *   a lease of 0 s for the defer). The one wait that cannot be shortened is --ack-after's
 *   (whole seconds): the early-ack scenario waits about 1 s for it.
 *
 * mqproc__delivery_trace records every state each delivery is in; each scenario asserts
 * its delivery's sequence of states and what the fakes saw (what was recorded, published,
 * acked, nacked, and in which order).
 *
 * Every state entered at least once: criterion runs each Test in a process of its own, so
 * nothing one test traces is seen by another. The check therefore runs every scenario
 * again, in order, inside ONE test (delivery/every_state_is_entered), each with a fresh
 * fixture, and compares the union of the states they traced with DELIVERY_STATES, the
 * machine's own list (delivery/int.h: included for that list only, so that a state added
 * to the machine without a scenario fails this test). That test prints which scenarios
 * entered each state. Every scenario is thus a function, run by its own Test and by the
 * coverage test.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"
#include "base/config.h"
#include "delivery/delivery.h"
#include "delivery/host.h"
#include "delivery/int.h" /* DELIVERY_STATES only: the list the coverage test checks */
#include "loop/loop.h"
#include "runner/runner.h"
#include "store/store.h"
#include "base/util.h"

/* ---- the machine's states ------------------------------------------------------------ */

static const char *const STATE_NAMES[] = {
#define T_STATE_NAME(name) #name,
    DELIVERY_STATES(T_STATE_NAME)
#undef T_STATE_NAME
};
#define N_STATES (sizeof(STATE_NAMES) / sizeof(STATE_NAMES[0]))

static int state_index(const char *name) {
  for (size_t i = 0; i < N_STATES; i++)
    if (strcmp(STATE_NAMES[i], name) == 0)
      return (int)i;
  return -1;
}

/* ---- the fake store -------------------------------------------------------------------- */

/* store.h's operations, named for the log of what the store got */
#define STORE_METHODS(X)                                                                           \
  X(CLAIM)                                                                                         \
  X(START_TRY)                                                                                     \
  X(END_TRY)                                                                                       \
  X(SUCCEED)                                                                                       \
  X(CANCELLED)                                                                                     \
  X(FAIL)                                                                                          \
  X(RELEASE)                                                                                       \
  X(GIVE_UP)                                                                                       \
  X(ACK_EARLY)                                                                                     \
  X(RENEW)                                                                                         \
  X(PING)                                                                                          \
  X(SWEEP)                                                                                         \
  X(SWEEP_OUTBOX)                                                                                  \
  X(REPUBLISHED)                                                                                   \
  X(OUTBOX_DONE)                                                                                   \
  X(DEAD_LETTERED)                                                                                 \
  X(MARK_PUBLISHED)                                                                                \
  X(RECORD_CALLBACKS)                                                                              \
  X(RECORD_DEAD)                                                                                   \
  X(BEAT)                                                                                          \
  X(HOLDER_GONE)                                                                                   \
  X(Q_TAKE)                                                                                        \
  X(Q_ACK)                                                                                         \
  X(Q_NACK)                                                                                        \
  X(Q_PUBLISH)                                                                                     \
  X(Q_EXTEND)                                                                                      \
  X(Q_RESET)

typedef enum {
#define T_REQ_ENUM(name) R_##name = MQPROC__STORE_##name,
  STORE_METHODS(T_REQ_ENUM)
#undef T_REQ_ENUM
} req_kind_t;

static const char *const REQ_NAMES[MQPROC__STORE_NOPS] = {
#define T_REQ_NAME(name) [R_##name] = #name,
    STORE_METHODS(T_REQ_NAME)
#undef T_REQ_NAME
};

/* One request as the store got it. */
typedef struct req {
  req_kind_t kind;
  char job_id[300]; /* "" when NULL */
  int attempt, try_no;
  int outbox;       /* succeed, cancelled */
  int max_requeues; /* fail */
  int republish;    /* fail, release */
  int refund;       /* release */
  int result_sent, callbacks_sent;
  int lease_ms;
  int end_ok, end_exit_code, end_signal; /* end_try, succeed, cancelled: the try's end */
  char text[600];                        /* error, why, reason, publish_error */
  char text2[600];                       /* outbox_done's callback_error */
  mqproc__claim_t *claim;                /* out pointers, valid until done */
  int *try_no_out;
  int *requeued_out;
  mqproc__store_done_cb done;
  void *ud;
} req_t;

#define MAX_REQS 32

typedef struct fake_store {
  mqproc__store_t base; /* first: the class pointer */
  req_t pending[MAX_REQS];
  int n_pending;
  char log[2048]; /* the methods called, in order, space-separated */
} fake_store_t;

static void copy_str(char *dst, size_t n, const char *s) {
  snprintf(dst, n, "%s", s != NULL ? s : "");
}

static req_t *fs_add(mqproc__store_t *s, const mqproc__store_req_t *q, const char *job_id,
                     int attempt) {
  fake_store_t *fs = (fake_store_t *)s;
  req_t *r;
  size_t used = strlen(fs->log);
  snprintf(fs->log + used, sizeof(fs->log) - used, "%s%s", used > 0 ? " " : "", REQ_NAMES[q->op]);
  cr_assert_lt(fs->n_pending, MAX_REQS, "too many store requests pending");
  r = &fs->pending[fs->n_pending++];
  memset(r, 0, sizeof(*r));
  r->kind = (req_kind_t)q->op;
  copy_str(r->job_id, sizeof(r->job_id), job_id);
  r->attempt = attempt;
  r->done = q->done;
  r->ud = q->ud;
  return r;
}

/* A try's end (end_try, succeed, cancelled). */
static void fs_end(req_t *r, int try_no, const mqproc__try_end_t *e) {
  r->try_no = try_no;
  r->end_ok = e->ok;
  r->end_exit_code = e->exit_code;
  r->end_signal = e->term_signal;
  copy_str(r->text, sizeof(r->text), e->error);
}

static int fs_open(mqproc__store_t *s, char *err) {
  (void)s;
  (void)err;
  return MQPROC_OK;
}

/* Records the request (the caller's strings copied: they may go once this returns) with
 * its out pointers; the test answers it later. */
static int fs_submit(mqproc__store_t *s, const mqproc__store_req_t *q) {
  const mqproc__store_succeed_t *end =
      q->op == MQPROC__STORE_SUCCEED ? &q->u.succeed : &q->u.cancelled;
  req_t *r;
  switch (q->op) {
  case MQPROC__STORE_CLAIM:
    r = fs_add(s, q, q->u.claim->job_id, 0);
    r->claim = q->u.claim;
    r->lease_ms = q->u.claim->lease_ms;
    break;
  case MQPROC__STORE_START_TRY:
    r = fs_add(s, q, q->u.start_try.job_id, q->u.start_try.attempt);
    r->try_no_out = q->u.start_try.try_no;
    break;
  case MQPROC__STORE_END_TRY:
    r = fs_add(s, q, q->u.end_try.job_id, q->u.end_try.attempt);
    fs_end(r, q->u.end_try.try_no, &q->u.end_try.end);
    break;
  case MQPROC__STORE_SUCCEED:
  case MQPROC__STORE_CANCELLED:
    r = fs_add(s, q, end->job_id, end->attempt);
    fs_end(r, end->try_no, &end->end);
    r->outbox = end->outbox;
    r->lease_ms = end->lease_ms;
    break;
  case MQPROC__STORE_FAIL:
    r = fs_add(s, q, q->u.fail.job_id, q->u.fail.attempt);
    copy_str(r->text, sizeof(r->text), q->u.fail.error);
    r->max_requeues = q->u.fail.max_requeues;
    r->republish = q->u.fail.republish;
    r->requeued_out = q->u.fail.requeued;
    break;
  case MQPROC__STORE_RELEASE:
    r = fs_add(s, q, q->u.release.job_id, q->u.release.attempt);
    copy_str(r->text, sizeof(r->text), q->u.release.why);
    r->refund = q->u.release.refund;
    r->republish = q->u.release.republish;
    break;
  case MQPROC__STORE_GIVE_UP:
    r = fs_add(s, q, q->u.give_up.job_id, q->u.give_up.attempt);
    copy_str(r->text, sizeof(r->text), q->u.give_up.why);
    break;
  case MQPROC__STORE_ACK_EARLY:
    fs_add(s, q, q->u.ack_early.job_id, q->u.ack_early.attempt);
    break;
  case MQPROC__STORE_RENEW:
    r = fs_add(s, q, q->u.renew.job_id, q->u.renew.attempt);
    r->lease_ms = q->u.renew.lease_ms;
    break;
  case MQPROC__STORE_PING:
    fs_add(s, q, NULL, 0);
    break;
  case MQPROC__STORE_SWEEP:
    fs_add(s, q, NULL, 0)->lease_ms = q->u.sweep.lease_ms;
    break;
  case MQPROC__STORE_SWEEP_OUTBOX:
    fs_add(s, q, NULL, 0)->lease_ms = q->u.sweep_outbox.lease_ms;
    break;
  case MQPROC__STORE_REPUBLISHED:
    fs_add(s, q, q->u.republished.job_id, 0);
    break;
  case MQPROC__STORE_OUTBOX_DONE:
    r = fs_add(s, q, q->u.outbox_done.job_id, q->u.outbox_done.attempt);
    r->result_sent = q->u.outbox_done.result_sent;
    r->callbacks_sent = q->u.outbox_done.callbacks_sent;
    copy_str(r->text, sizeof(r->text), q->u.outbox_done.publish_error);
    copy_str(r->text2, sizeof(r->text2), q->u.outbox_done.callback_error);
    break;
  case MQPROC__STORE_DEAD_LETTERED:
    fs_add(s, q, q->u.dead_lettered.job_id, q->u.dead_lettered.attempt);
    break;
  case MQPROC__STORE_MARK_PUBLISHED:
    r = fs_add(s, q, q->u.mark_published.job_id, 0);
    copy_str(r->text, sizeof(r->text), q->u.mark_published.error);
    break;
  case MQPROC__STORE_RECORD_CALLBACKS:
    r = fs_add(s, q, q->u.record_callbacks.job_id, 0);
    copy_str(r->text, sizeof(r->text), q->u.record_callbacks.error);
    break;
  case MQPROC__STORE_RECORD_DEAD:
    r = fs_add(s, q, q->u.record_dead.job_id, 0);
    copy_str(r->text, sizeof(r->text), q->u.record_dead.reason);
    break;
  case MQPROC__STORE_BEAT:
    fs_add(s, q, NULL, 0);
    break;
  case MQPROC__STORE_HOLDER_GONE:
    fs_add(s, q, q->u.holder_gone.worker_id, 0);
    break;
  case MQPROC__STORE_Q_TAKE: /* the table queue's (store/queue.c): no delivery makes these */
  case MQPROC__STORE_Q_ACK:
  case MQPROC__STORE_Q_NACK:
  case MQPROC__STORE_Q_PUBLISH:
  case MQPROC__STORE_Q_EXTEND:
  case MQPROC__STORE_Q_RESET:
    fs_add(s, q, NULL, 0);
    break;
  case MQPROC__STORE_NOPS:
    cr_assert_fail("not an operation");
  }
  return MQPROC_OK;
}

static void fs_listen(mqproc__store_t *s, void (*cb)(void *ud, const char *payload), void *ud) {
  (void)s;
  (void)cb;
  (void)ud;
}

/* A freed delivery's requests complete without calling back: dropped here. */
static void fs_forget(mqproc__store_t *s, void *ud) {
  fake_store_t *fs = (fake_store_t *)s;
  int j = 0;
  for (int i = 0; i < fs->n_pending; i++)
    if (fs->pending[i].ud != ud)
      fs->pending[j++] = fs->pending[i];
  fs->n_pending = j;
}

static void fs_destroy(mqproc__store_t *s) {
  (void)s;
}

static const struct mqproc__store_class FAKE_STORE = {
    .name = "fake",
    .open = fs_open,
    .migrate = fs_open,
    .submit = fs_submit,
    .listen = fs_listen,
    .forget = fs_forget,
    .destroy = fs_destroy,
};

/* ---- the fake broker ------------------------------------------------------------------- */

typedef struct fake_broker {
  mqproc__broker_t base;
  uint64_t epoch; /* the test's: a new value is a new connection */
  int n_acks, n_nacks, last_requeue;
} fake_broker_t;

static int fb_err(mqproc__broker_t *b, char *err) {
  (void)b;
  return mqproc__err(err, MQPROC_EINVAL, "not used by a delivery");
}
static int fb_fd(mqproc__broker_t *b) {
  (void)b;
  return -1;
}
static int fb_pending(mqproc__broker_t *b) {
  (void)b;
  return 0;
}
static int fb_ack(mqproc__broker_t *b, uint64_t epoch, uint64_t tag, int multiple, char *err) {
  (void)epoch;
  (void)tag;
  (void)multiple;
  (void)err;
  ((fake_broker_t *)b)->n_acks++;
  return MQPROC_OK;
}
static int fb_nack(mqproc__broker_t *b, uint64_t epoch, uint64_t tag, int requeue, char *err) {
  fake_broker_t *fb = (fake_broker_t *)b;
  (void)tag;
  if (epoch != fb->epoch)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "delivery of a closed connection");
  fb->n_nacks++;
  fb->last_requeue = requeue;
  return MQPROC_OK;
}
static int fb_publish(mqproc__broker_t *b, const mqproc__publish_t *p, uint64_t *seq, char *err) {
  (void)p;
  (void)seq;
  return fb_err(b, err);
}
static int fb_declare(mqproc__broker_t *b, const char *queue, char *err) {
  (void)queue;
  return fb_err(b, err);
}
static int fb_consume(mqproc__broker_t *b, int prefetch, uint64_t *consumer, char *err) {
  (void)prefetch;
  (void)consumer;
  return fb_err(b, err);
}
static uint64_t fb_epoch(mqproc__broker_t *b) {
  return ((fake_broker_t *)b)->epoch;
}
static void fb_void(mqproc__broker_t *b) {
  (void)b;
}

static const struct mqproc__broker_class FAKE_BROKER = {
    .name = "fake",
    .connect = fb_err,
    .fd = fb_fd,
    .pending = fb_pending,
    .pump = fb_err,
    .ack = fb_ack,
    .nack = fb_nack,
    .publish = fb_publish,
    .declare_queue = fb_declare,
    .cancel = fb_err,
    .consume = fb_consume,
    .resize = NULL,
    .epoch = fb_epoch,
    .disconnect = fb_void,
    .destroy = fb_void,
};

/* ---- the fake runner ------------------------------------------------------------------- */

typedef struct fake_run {
  mqproc__run_done_cb done;
  void *ud;
  int attempt, try_no;
  int killed; /* the last signal kill() sent, 0: none */
} fake_run_t;

typedef struct fake_runner {
  mqproc__runner_t base;
  fake_run_t *run; /* the try in progress (one delivery runs one at a time) */
  int n_starts;
  int n_kills;
} fake_runner_t;

static int fr_start(mqproc__runner_t *r, mqproc__loop_t *loop, const mqproc__run_spec_t *spec,
                    mqproc__run_done_cb done, void *ud, mqproc__run_t **out, char *err) {
  fake_runner_t *fr = (fake_runner_t *)r;
  fake_run_t *run;
  (void)loop;
  cr_assert_null(fr->run, "a second try started while one runs");
  if ((run = calloc(1, sizeof(*run))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  run->done = done;
  run->ud = ud;
  run->attempt = spec->attempt;
  run->try_no = spec->try_no;
  fr->run = run;
  fr->n_starts++;
  *out = (mqproc__run_t *)run;
  return MQPROC_OK;
}

static void fr_kill(mqproc__runner_t *r, mqproc__run_t *run, int sig) {
  fake_runner_t *fr = (fake_runner_t *)r;
  cr_assert_eq((void *)run, (void *)fr->run, "kill of a try that is not running");
  fr->run->killed = sig;
  fr->n_kills++;
}

static void fr_destroy(mqproc__runner_t *r) {
  (void)r;
}

/* A process runner: kill() stops a try. */
static const struct mqproc__runner_class FAKE_PROC_RUNNER = {
    .name = "fake-proc", .killable = 1, .start = fr_start, .kill = fr_kill, .destroy = fr_destroy};
/* A thread runner: a try cannot be stopped (shutdown abandons it). */
static const struct mqproc__runner_class FAKE_THREAD_RUNNER = {.name = "fake-thread",
                                                               .killable = 0,
                                                               .start = fr_start,
                                                               .kill = fr_kill,
                                                               .destroy = fr_destroy};

/* ---- the fixture: the host and its fakes ---------------------------------------------- */

typedef struct pub {
  mqproc__delivery_t *d;
  char routing_key[300];
  char body[1024];
  char attempt[16]; /* its x-mqproc-attempt header, "" when none */
  int dead_letter;
} pub_t;

#define MAX_DELS 8
#define MAX_PUBS 16

typedef struct fx {
  mqproc__config_t cfg;
  mqproc__loop_t *loop;
  fake_store_t store;
  fake_broker_t broker;
  fake_runner_t runner;
  mqproc__metrics_t metrics;
  mqproc__cidr_list_t deny;
  mqproc__delivery_host_t host;
  uint64_t next_tag;
  /* the host's side */
  int broker_up; /* 0: publish and result_queue answer MQPROC_EBROKER_CLOSED */
  int slot_limit, slots_used, slots_taken;
  int pass_limit, passes_used;
  pub_t pubs[MAX_PUBS];
  int n_pubs, n_forgotten;
  int n_acks, n_acks_refused; /* the host's acks: taken / refused (tag of a closed connection) */
  int n_update_consuming;
  int n_store_down;
  int n_job_failed;
  char failed_error[600];
  int n_done, n_abandoned, n_abandoned_done;
  /* the deliveries of this scenario and what they traced */
  mqproc__delivery_t *dels[MAX_DELS];
  int alive[MAX_DELS];
  char trace[MAX_DELS][2048];
  int n_dels;
  char order[2048]; /* events of interest in order (ack, nack, publish, store methods) */
} fx_t;

static fx_t fx;
static int covered[N_STATES]; /* states traced in this process */

static void note(const char *what) {
  size_t used = strlen(fx.order);
  snprintf(fx.order + used, sizeof(fx.order) - used, "%s%s", used > 0 ? " " : "", what);
}

static int del_index(const mqproc__delivery_t *d) {
  for (int i = 0; i < fx.n_dels; i++)
    if (fx.alive[i] && fx.dels[i] == d)
      return i;
  return -1;
}

static void on_trace(const mqproc__delivery_t *d, const char *state) {
  int i = del_index(d), s = state_index(state);
  cr_assert_geq(i, 0, "a delivery the test did not make traced %s", state);
  cr_assert_geq(s, 0, "unknown state %s", state);
  covered[s] = 1;
  size_t used = strlen(fx.trace[i]);
  snprintf(fx.trace[i] + used, sizeof(fx.trace[i]) - used, "%s%s", used > 0 ? " " : "", state);
}

static int h_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d, const mqproc__publish_t *p,
                     char *err) {
  pub_t *pub;
  (void)h;
  if (!fx.broker_up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if (fx.host.broker_blocked)
    return mqproc__err(err, MQPROC_EBROKER_BLOCKED, "the broker blocks publishing");
  cr_assert_lt(fx.n_pubs, MAX_PUBS);
  pub = &fx.pubs[fx.n_pubs++];
  memset(pub, 0, sizeof(*pub));
  pub->d = d;
  copy_str(pub->routing_key, sizeof(pub->routing_key), p->routing_key);
  snprintf(pub->body, sizeof(pub->body), "%.*s", (int)p->len, (const char *)p->body);
  for (size_t i = 0; i < p->n_headers; i++)
    if (strcmp(p->headers[i].key, "x-mqproc-attempt") == 0)
      copy_str(pub->attempt, sizeof(pub->attempt), p->headers[i].value);
  pub->dead_letter = p->dead_letter;
  note(p->dead_letter ? "publish-dead" : "publish");
  return MQPROC_OK;
}

static void h_forget_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  (void)h;
  (void)d;
  fx.n_forgotten++;
}

/* As the server's: a tag of an older connection is refused, else acked at the flush. */
static int h_ack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  uint64_t epoch = 0, tag = 0;
  (void)h;
  mqproc__delivery_tag(d, &epoch, &tag);
  if (!fx.broker_up || epoch != fx.broker.epoch) {
    fx.n_acks_refused++;
    note("ack-refused");
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "delivery belongs to a closed connection");
  }
  fx.n_acks++;
  note("ack");
  mqproc__delivery_settled(d);
  return MQPROC_OK;
}

/* As the server's: the fake broker's nack of d's tag (refused for an older connection). */
static int h_nack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  uint64_t epoch = 0, tag = 0;
  (void)h;
  mqproc__delivery_tag(d, &epoch, &tag);
  note("nack");
  return fb_nack(&fx.broker.base, epoch, tag, 1, err);
}

/* The fake queue is not in the store: every delivery acks as usual. */
static int h_ack_in_store(mqproc__delivery_host_t *h, mqproc__delivery_t *d,
                          mqproc__broker_held_t *held) {
  (void)h;
  (void)d;
  (void)held;
  return MQPROC_EINVAL;
}

static uint64_t h_epoch(mqproc__delivery_host_t *h) {
  (void)h;
  return fx.broker.epoch;
}

static int h_take_slot(mqproc__delivery_host_t *h) {
  (void)h;
  if (fx.slots_used >= fx.slot_limit)
    return 0;
  fx.slots_used++;
  fx.slots_taken++;
  return 1;
}
static void h_give_slot(mqproc__delivery_host_t *h) {
  (void)h;
  cr_assert_gt(fx.slots_used, 0, "a slot given back that was not taken");
  fx.slots_used--;
}
static int h_take_pass(mqproc__delivery_host_t *h) {
  (void)h;
  if (fx.passes_used >= fx.pass_limit)
    return 0;
  fx.passes_used++;
  return 1;
}
static void h_give_pass(mqproc__delivery_host_t *h) {
  (void)h;
  cr_assert_gt(fx.passes_used, 0, "a pass given back that was not taken");
  fx.passes_used--;
}
static int h_result_queue(mqproc__delivery_host_t *h, const char *queue, char *err) {
  (void)h;
  (void)queue;
  return fx.broker_up ? MQPROC_OK
                      : mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
}
static int h_result_queue_allowed(mqproc__delivery_host_t *h, const char *queue) {
  (void)h;
  (void)queue;
  return 1;
}
static void h_update_consuming(mqproc__delivery_host_t *h, int extra) {
  (void)h;
  fx.n_update_consuming++;
  if (extra > 0) /* an early ack is coming: consume no more than the free slots allow */
    note("consume+1");
}
static mqproc__delivery_t *h_find_job(mqproc__delivery_host_t *h, const char *job_id, int attempt) {
  (void)h;
  for (int i = 0; i < fx.n_dels; i++)
    if (fx.alive[i] && mqproc__delivery_holds(fx.dels[i], job_id, attempt))
      return fx.dels[i];
  return NULL;
}
static void h_store_down(mqproc__delivery_host_t *h) {
  (void)h;
  fx.n_store_down++;
}
static void h_job_failed(mqproc__delivery_host_t *h, const char *job_id, int attempt,
                         const char *error, const char *request_json, const char *log_path) {
  (void)h;
  (void)job_id;
  (void)attempt;
  (void)request_json;
  (void)log_path;
  fx.n_job_failed++;
  copy_str(fx.failed_error, sizeof(fx.failed_error), error);
}
/* As mqproc__server_delivery_done: unlink; free unless its try still runs on a thread. */
static void h_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  int i = del_index(d);
  (void)h;
  cr_assert_geq(i, 0, "done for a delivery the test does not know (twice?)");
  cr_expect_str_eq(mqproc__delivery_state(d), "DONE");
  fx.n_done++;
  note("done");
  if (mqproc__delivery_abandoned(d)) {
    fx.n_abandoned++; /* the host keeps it until its thread ends */
    return;
  }
  fx.alive[i] = 0;
  mqproc__delivery_free(d);
}
/* As mqproc__server_abandoned_done. */
static void h_abandoned_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  int i = del_index(d);
  (void)h;
  cr_assert_geq(i, 0);
  fx.n_abandoned--;
  fx.n_abandoned_done++;
  fx.alive[i] = 0;
  mqproc__delivery_free(d);
}

static const mqproc__delivery_host_ops_t FAKE_HOST = {
    .publish = h_publish,
    .forget_publish = h_forget_publish,
    .ack = h_ack,
    .nack = h_nack,
    .ack_in_store = h_ack_in_store,
    .epoch = h_epoch,
    .take_slot = h_take_slot,
    .give_slot = h_give_slot,
    .take_pass = h_take_pass,
    .give_pass = h_give_pass,
    .result_queue = h_result_queue,
    .result_queue_allowed = h_result_queue_allowed,
    .update_consuming = h_update_consuming,
    .find_job = h_find_job,
    .store_down = h_store_down,
    .job_failed = h_job_failed,
    .done = h_done,
    .abandoned_done = h_abandoned_done,
};

static void setup(void) {
  char err[MQPROC_ERR_LEN];
  static const char *const deny[] = {"127.0.0.0/8", NULL};
  memset(&fx, 0, sizeof(fx));
  cr_assert_eq(mqproc__config_load(&fx.cfg, MQPROC__CLI_C, 0, NULL, err), MQPROC_OK, "%s", err);
  /* the defaults (3 retries, 1 requeue, 10 attempts), with tiny waits */
  fx.cfg.retries = 2;
  fx.cfg.retry_backoff_ms = 1;
  fx.cfg.max_requeues = 1;
  fx.cfg.max_attempts = 3;
  fx.cfg.lease_s = 60;
  fx.cfg.ack_after_s = 0;
  fx.cfg.final_exit_code = 0;
  fx.cfg.time_limit_s = 0;
  fx.cfg.callback_retries = 0;
  fx.cfg.result_format = MQPROC__RESULT_JSON;
  cr_assert_eq(mqproc__loop_new(&fx.loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__metrics_init(&fx.metrics, NULL, err), 0, "%s", err);
  /* callbacks to 127.0.0.1 are refused before a connection is tried: a fast failure that
   * the machine records (callback.h's address policy) */
  cr_assert_eq(mqproc__cidr_list_parse(deny, &fx.deny, err), MQPROC_OK, "%s", err);
  fx.store.base.klass = &FAKE_STORE;
  fx.broker.base.klass = &FAKE_BROKER;
  fx.broker.epoch = 1;
  fx.runner.base.klass = &FAKE_PROC_RUNNER;
  fx.host = (mqproc__delivery_host_t){.ops = &FAKE_HOST,
                                      .cfg = &fx.cfg,
                                      .processor = "proc",
                                      .dead_queue = "proc.dead",
                                      .worker_id = "me:1",
                                      .hostname = "testhost",
                                      .loop = fx.loop,
                                      .store = &fx.store.base,
                                      .runner = &fx.runner.base,
                                      .metrics = &fx.metrics,
                                      .callback_deny = &fx.deny};
  fx.broker_up = 1;
  fx.slot_limit = 1;
  mqproc__delivery_trace = on_trace;
}

static void teardown(void) {
  int leaked = 0;
  mqproc__delivery_trace = NULL;
  for (int i = 0; i < fx.n_dels; i++)
    if (fx.alive[i]) { /* a delivery that never reached DONE: a failure, but free it */
      leaked++;
      if (fx.runner.run != NULL && fx.runner.run->ud == fx.dels[i]) {
        free(fx.runner.run);
        fx.runner.run = NULL;
      }
      mqproc__delivery_free(fx.dels[i]);
      fx.alive[i] = 0;
    }
  free(fx.runner.run);
  fx.runner.run = NULL;
  mqproc__loop_free(fx.loop);
  mqproc__cidr_list_free(&fx.deny);
  mqproc__config_free(&fx.cfg);
  mqproc__callback_shutdown();
  cr_expect_eq(leaked, 0, "%d deliveries did not reach DONE", leaked);
  cr_expect_eq(fx.slots_used, 0, "every run slot is given back");
  cr_expect_eq(fx.passes_used, 0, "every claim pass is given back");
  /* nothing of the scenario stays reachable from here: what was not freed is a leak that
   * LeakSanitizer reports at the process's exit */
  memset(&fx, 0, sizeof(fx));
}

/* ---- helpers for the scenarios ---------------------------------------------------------- */

/* A valid processing message of job `id` for processor "proc"; extra: more JSON members
 * (",\"result_queue_name\":\"proc.result\"", ...). */
static char *message(const char *id, const char *extra) {
  return mqproc__asprintf("{\"job_id\":\"%s\",\"processor_name\":\"proc\","
                          "\"created_time\":1718000000,\"input_file_grps\":[\"IN\"],"
                          "\"path_to_mets\":\"/data/ws/mets.xml\"%s}",
                          id, extra != NULL ? extra : "");
}

#define RESULT_Q ",\"result_queue_name\":\"proc.result\""
#define CALLBACK_URL ",\"callback_url\":\"http://127.0.0.1:9/cb\""

/* A delivery of body on the current connection, registered (traced), not started. */
static mqproc__delivery_t *delivery_of(const char *body, int redelivered) {
  mqproc__broker_msg_t m = {.epoch = fx.broker.epoch,
                            .tag = ++fx.next_tag,
                            .consumer = 1,
                            .redelivered = redelivered,
                            .body = body,
                            .len = strlen(body),
                            .content_type = "",
                            .message_id = "",
                            .routing_key = "proc",
                            .priority = -1,
                            .delivery_count = -1};
  mqproc__delivery_t *d = mqproc__delivery_new(&fx.host, &m);
  cr_assert_not_null(d);
  cr_assert_lt(fx.n_dels, MAX_DELS);
  fx.dels[fx.n_dels] = d;
  fx.alive[fx.n_dels++] = 1;
  return d;
}

/* A delivery of job `id`'s message (with extra), started: it runs until it waits. */
static mqproc__delivery_t *start(const char *id, const char *extra, int redelivered) {
  char *body = message(id, extra);
  mqproc__delivery_t *d = delivery_of(body, redelivered);
  free(body);
  mqproc__delivery_start(d);
  return d;
}

/* The delivery number i of this scenario is gone (done and freed). */
static int gone(int i) {
  return !fx.alive[i];
}

static const char *trace_of(int i) {
  return fx.trace[i];
}

/* The oldest pending store request (of any delivery) of that method; the test fails when
 * there is none. Answer it with answer(). */
static req_t *req(req_kind_t kind) {
  for (int i = 0; i < fx.store.n_pending; i++)
    if (fx.store.pending[i].kind == kind)
      return &fx.store.pending[i];
  cr_assert_fail("no %s request pending (store calls so far: %s)", REQ_NAMES[kind], fx.store.log);
  return NULL;
}

static int has_req(req_kind_t kind) {
  for (int i = 0; i < fx.store.n_pending; i++)
    if (fx.store.pending[i].kind == kind)
      return 1;
  return 0;
}

/* Completes request r (from req()) with rc: out of the queue first, then its done, which
 * runs the machine on (as the loop would: never inside the call that made it). */
static void answer(req_t *r, int rc, const char *err) {
  req_t copy = *r;
  int i = (int)(r - fx.store.pending);
  memmove(&fx.store.pending[i], &fx.store.pending[i + 1],
          (size_t)(fx.store.n_pending - i - 1) * sizeof(req_t));
  fx.store.n_pending--;
  note(REQ_NAMES[copy.kind]);
  if (copy.done != NULL)
    copy.done(copy.ud, rc, err);
}

static void ok(req_kind_t kind) {
  answer(req(kind), MQPROC_OK, NULL);
}

/* The claim made a new attempt (and started its first try). */
static void claim_new(int attempt, int try_no) {
  req_t *r = req(R_CLAIM);
  r->claim->claimed = 1;
  r->claim->attempt = attempt;
  r->claim->try_no = try_no;
  r->claim->tries = try_no;
  snprintf(r->claim->state, sizeof(r->claim->state), "RUNNING");
  answer(r, MQPROC_OK, NULL);
}

/* The claim found the job in `state`, not claimable by us. */
static req_t *claim_found(const char *state, int attempt) {
  req_t *r = req(R_CLAIM);
  r->claim->claimed = 0;
  r->claim->attempt = attempt;
  snprintf(r->claim->state, sizeof(r->claim->state), "%s", state);
  return r;
}

/* Ends the try in progress: ok, or failed with exit_code, or killed by sig. */
static void end_try(int ok_, int exit_code, int sig) {
  fake_run_t *run = fx.runner.run;
  mqproc__run_result_t r = {.status = ok_ ? MQPROC_OK : MQPROC_ERUNNER_FAILED,
                            .exit_code = sig != 0 ? -1 : exit_code,
                            .term_signal = sig,
                            .duration_ms = 5};
  cr_assert_not_null(run, "no try is running");
  if (!ok_)
    snprintf(r.error, sizeof(r.error), sig != 0 ? "killed by signal %d" : "exit status %d",
             sig != 0 ? sig : exit_code);
  fx.runner.run = NULL; /* the handle is freed right after done (runner.h) */
  run->done(run->ud, &r);
  free(run);
}

static pub_t *last_pub(void) {
  cr_assert_gt(fx.n_pubs, 0, "nothing was published");
  return &fx.pubs[fx.n_pubs - 1];
}

/* Confirms the last publish with status. */
static void confirm(int status) {
  pub_t *p = last_pub();
  note(status == MQPROC_OK ? "confirm" : "confirm-failed");
  mqproc__delivery_on_confirm(p->d, status);
}

/* ---- running the loop until something happened ---------------------------------------- */

typedef int (*cond_fn)(int arg);
static cond_fn until_fn;
static int until_arg, until_expired;

static int until_prepare(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  if (until_fn(until_arg)) {
    mqproc__loop_stop(loop);
    return 0;
  }
  return -1;
}

static void until_deadline(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  until_expired = 1;
  mqproc__loop_stop(loop);
}

/* Runs the loop (timers, the callback thread's return) until fn(arg) holds, at most ms. */
static void run_until(cond_fn fn, int arg, int64_t ms, const char *what) {
  uint64_t deadline;
  until_fn = fn;
  until_arg = arg;
  until_expired = 0;
  if (fn(arg))
    return;
  deadline = mqproc__loop_timer(fx.loop, ms, until_deadline, NULL);
  mqproc__loop_set_prepare(fx.loop, until_prepare, NULL);
  mqproc__loop_run(fx.loop);
  mqproc__loop_set_prepare(fx.loop, NULL, NULL);
  mqproc__loop_timer_cancel(fx.loop, deadline);
  cr_assert(!until_expired && fn(arg), "waited %lld ms for %s", (long long)ms, what);
}

static int c_req(int kind) {
  return has_req((req_kind_t)kind);
}
static int c_gone(int i) {
  return gone(i);
}
/* ---- the scenarios ------------------------------------------------------------------- */

/* The hot path: claim (which starts the first try), run, SUCCESS recorded with the outbox
 * mark, acked right after that write (not before), the result published and confirmed,
 * the outbox mark cleared. */
static void sc_success(void) {
  mqproc__delivery_t *d = start("j-ok", RESULT_Q, 0);
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL");
  cr_expect_str_eq(req(R_CLAIM)->claim->job_id, "j-ok");
  claim_new(1, 1);
  cr_assert_eq(fx.runner.n_starts, 1);
  cr_expect_eq(fx.runner.run->attempt, 1);
  cr_expect_eq(fx.runner.run->try_no, 1);
  cr_expect_str_eq(mqproc__delivery_job_held(d), "j-ok");
  end_try(1, 0, 0);
  cr_expect_eq(req(R_SUCCEED)->outbox, 1, "a result to send: the row keeps the outbox mark");
  cr_expect_eq(req(R_SUCCEED)->try_no, 1);
  cr_expect_eq(fx.n_acks, 0, "no ack before the outcome is recorded");
  ok(R_SUCCEED);
  cr_expect_eq(fx.n_acks, 1, "acked right after the outcome's write, before the confirm");
  cr_assert_eq(fx.n_pubs, 1);
  cr_expect_str_eq(last_pub()->routing_key, "proc.result");
  cr_expect(strstr(last_pub()->body, "\"SUCCESS\"") != NULL, "%s", last_pub()->body);
  cr_expect_str_eq(last_pub()->attempt, "1");
  confirm(MQPROC_OK);
  cr_expect_eq(req(R_OUTBOX_DONE)->result_sent, 1);
  cr_expect_str_eq(req(R_OUTBOX_DONE)->text, "", "no publish error");
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE PUBLISH PUBLISH_WAIT PUBLISHED "
                                "CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.order, "CLAIM SUCCEED ack publish confirm OUTBOX_DONE done");
  cr_expect_str_eq(fx.store.log, "CLAIM SUCCEED OUTBOX_DONE");
  cr_expect_eq(fx.metrics.c[MQPROC__M_SUCCEEDED], 1);
  cr_expect_eq(fx.broker.n_nacks, 0);
  cr_expect_eq(fx.n_done, 1);
}

/* Nothing to send (no result queue, no callback): SUCCESS recorded without an outbox mark,
 * acked, done. */
static void sc_success_nothing_to_send(void) {
  start("j-quiet", NULL, 0);
  claim_new(1, 1);
  end_try(1, 0, 0);
  cr_expect_eq(req(R_SUCCEED)->outbox, 0);
  ok(R_SUCCEED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.order, "CLAIM SUCCEED ack done");
  cr_expect_eq(fx.n_pubs, 0);
}

/* A failed try is recorded and retried locally after a backoff (a new try of the same
 * attempt, with a slot taken again), which succeeds. */
static void sc_local_retry(void) {
  start("j-retry", NULL, 0);
  claim_new(1, 1);
  end_try(0, 1, 0);
  cr_expect_eq(req(R_END_TRY)->try_no, 1);
  cr_expect_eq(req(R_END_TRY)->end_exit_code, 1);
  cr_expect_eq(fx.slots_used, 0, "a backoff holds no run slot");
  ok(R_END_TRY);
  run_until(c_req, R_START_TRY, 2000, "the retry's start_try after the backoff");
  cr_expect_eq(req(R_START_TRY)->attempt, 1);
  *req(R_START_TRY)->try_no_out = 2;
  ok(R_START_TRY);
  cr_assert_eq(fx.runner.n_starts, 2);
  cr_expect_eq(fx.runner.run->try_no, 2);
  cr_expect_eq(fx.runner.run->attempt, 1);
  end_try(1, 0, 0);
  cr_expect_eq(req(R_SUCCEED)->try_no, 2);
  ok(R_SUCCEED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "STORE_CALL STORE_DONE BACKOFF START_TRY STORE_CALL STORE_DONE "
                                "RUNNING END_TRY SUCCEED STORE_CALL STORE_DONE DONE");
  cr_expect_eq(fx.metrics.c[MQPROC__M_RETRIED], 1);
  cr_expect_eq(fx.slots_taken, 2);
  cr_expect_eq(fx.n_acks, 1);
}

/* Every local try fails: the attempt fails, the store requeues the job (requeues left),
 * the delivery is nacked with requeue, never acked, nothing published. */
static void sc_requeue(void) {
  fx.cfg.retries = 1;
  start("j-requeue", RESULT_Q, 0);
  claim_new(1, 1);
  end_try(0, 2, 0);
  ok(R_END_TRY);
  run_until(c_req, R_START_TRY, 2000, "the retry");
  *req(R_START_TRY)->try_no_out = 2;
  ok(R_START_TRY);
  end_try(0, 2, 0);
  ok(R_END_TRY);
  cr_expect_eq(req(R_FAIL)->max_requeues, 1);
  cr_expect_eq(req(R_FAIL)->republish, 0, "not acked early: the broker requeues the message");
  cr_expect(strstr(req(R_FAIL)->text, "exit status 2") != NULL, "%s", req(R_FAIL)->text);
  *req(R_FAIL)->requeued_out = 1;
  ok(R_FAIL);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "STORE_CALL STORE_DONE BACKOFF START_TRY STORE_CALL STORE_DONE "
                                "RUNNING END_TRY STORE_CALL STORE_DONE FAIL STORE_CALL STORE_DONE "
                                "NACK DONE");
  cr_expect_eq(fx.broker.n_nacks, 1);
  cr_expect_eq(fx.broker.last_requeue, 1);
  cr_expect_eq(fx.n_acks, 0);
  cr_expect_eq(fx.n_pubs, 0);
  cr_expect_eq(fx.n_job_failed, 0);
  cr_expect_eq(fx.metrics.c[MQPROC__M_REQUEUED], 1);
}

/* The last requeue used: the attempt fails for good. The job is FAILED, the message
 * dead-lettered (table, then the dead-letter queue, confirmed), the FAILED result
 * published and marked, the --on-failure handler told, and only then the delivery acked. */
static void sc_failed_dead_letter(void) {
  fx.cfg.retries = 0;
  start("j-fail", RESULT_Q, 1);
  claim_new(2, 3); /* the second attempt, after one requeue */
  end_try(0, 1, 0);
  ok(R_END_TRY);
  *req(R_FAIL)->requeued_out = 0;
  ok(R_FAIL);
  cr_expect_eq(fx.n_job_failed, 1, "the --on-failure handler is told");
  cr_expect(strstr(req(R_RECORD_DEAD)->text, "FAILED after 2 attempts") != NULL, "%s",
            req(R_RECORD_DEAD)->text);
  ok(R_RECORD_DEAD);
  cr_assert_eq(fx.n_pubs, 1);
  cr_expect_str_eq(last_pub()->routing_key, "proc.dead");
  cr_expect_eq(last_pub()->dead_letter, 1);
  confirm(MQPROC_OK);
  cr_assert_eq(fx.n_pubs, 2);
  cr_expect_str_eq(last_pub()->routing_key, "proc.result");
  cr_expect(strstr(last_pub()->body, "\"FAILED\"") != NULL, "%s", last_pub()->body);
  cr_expect_str_eq(last_pub()->attempt, "2");
  confirm(MQPROC_OK);
  cr_expect_str_eq(req(R_MARK_PUBLISHED)->text, "", "published without error");
  cr_expect_eq(fx.n_acks, 0, "not acked before the outcome is out");
  ok(R_MARK_PUBLISHED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "STORE_CALL STORE_DONE FAIL STORE_CALL STORE_DONE DEAD_LETTER "
                                "STORE_CALL STORE_DONE DEAD_WAIT PUBLISH PUBLISH_WAIT PUBLISHED "
                                "STORE_CALL STORE_DONE CALLBACK ACK DONE");
  cr_expect_str_eq(fx.order, "CLAIM END_TRY FAIL RECORD_DEAD publish-dead confirm publish confirm "
                             "MARK_PUBLISHED ack done");
  cr_expect_eq(fx.metrics.c[MQPROC__M_FAILED], 1);
  cr_expect_eq(fx.metrics.c[MQPROC__M_DEAD_LETTERED], 1);
}

/* An invalid message is dead-lettered (table and queue) and acked; nothing is claimed. */
static void sc_invalid(void) {
  /* an OCR-D job (it names a METS) without its file groups and created_time */
  char *body = mqproc__asprintf(
      "{\"job_id\":\"j-bad\",\"processor_name\":\"proc\",\"path_to_mets\":\"/m\"}");
  mqproc__delivery_t *d = delivery_of(body, 0);
  free(body);
  mqproc__delivery_start(d);
  cr_expect_str_eq(req(R_RECORD_DEAD)->job_id, "j-bad");
  cr_expect(strstr(req(R_RECORD_DEAD)->text, "invalid message") != NULL, "%s",
            req(R_RECORD_DEAD)->text);
  ok(R_RECORD_DEAD);
  cr_expect_str_eq(last_pub()->routing_key, "proc.dead");
  confirm(MQPROC_OK);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE DEAD_LETTER STORE_CALL STORE_DONE DEAD_WAIT ACK DONE");
  cr_expect_str_eq(fx.store.log, "RECORD_DEAD", "nothing claimed");
  cr_expect_eq(fx.n_acks, 1);
  cr_expect_eq(fx.runner.n_starts, 0);
  cr_expect_eq(fx.slots_taken, 0);
}

/* A redelivered copy of a job that is SUCCESS with everything sent: acked, not run. */
static void sc_already_success(void) {
  start("j-done", RESULT_Q, 1);
  req_t *r = claim_found("SUCCESS", 1);
  r->claim->result_published = 1;
  answer(r, MQPROC_OK, NULL);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE ACK DONE");
  cr_expect_eq(fx.runner.n_starts, 0);
  cr_expect_eq(fx.n_pubs, 0);
  cr_expect_eq(fx.n_acks, 1);
  cr_expect_eq(fx.metrics.c[MQPROC__M_FINISHED_REDELIV], 1);
}

/* SUCCESS, but its result never went out (the holder died between): the copy sends it,
 * with the attempt that recorded it, marks it published, and is acked; not run again. */
static void sc_already_success_unsent(void) {
  start("j-unsent", RESULT_Q, 1);
  req_t *r = claim_found("SUCCESS", 2);
  r->claim->result_published = 0;
  answer(r, MQPROC_OK, NULL);
  cr_assert_eq(fx.n_pubs, 1);
  cr_expect_str_eq(last_pub()->routing_key, "proc.result");
  cr_expect(strstr(last_pub()->body, "\"SUCCESS\"") != NULL, "%s", last_pub()->body);
  cr_expect_str_eq(last_pub()->attempt, "2");
  confirm(MQPROC_OK);
  ok(R_MARK_PUBLISHED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE PUBLISH PUBLISH_WAIT "
                                "PUBLISHED STORE_CALL STORE_DONE CALLBACK ACK DONE");
  cr_expect_eq(fx.runner.n_starts, 0);
  cr_expect_eq(fx.n_acks, 1);
}

/* RUNNING elsewhere under a live lease: this copy is held (DEFER), then requeued; its run
 * slot goes back at once. A lease of 0 s bounds the hold to no time at all. */
static void sc_running_elsewhere(void) {
  fx.cfg.lease_s = 0;
  start("j-busy", NULL, 1);
  req_t *r = claim_found("RUNNING", 1);
  r->claim->lease_live = 1;
  r->claim->lease_left_ms = 30000;
  snprintf(r->claim->worker_id_now, sizeof(r->claim->worker_id_now), "other:2");
  answer(r, MQPROC_OK, NULL);
  cr_expect_str_eq(mqproc__delivery_state(fx.dels[0]), "DEFER");
  cr_expect_eq(fx.slots_used, 0, "a held copy holds no run slot");
  run_until(c_gone, 0, 2000, "the deferred copy to be requeued");
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE DEFER NACK DONE");
  cr_expect_eq(fx.broker.n_nacks, 1);
  cr_expect_eq(fx.broker.last_requeue, 1);
  cr_expect_eq(fx.n_acks, 0);
  cr_expect_eq(fx.runner.n_starts, 0);
}

/* A newer attempt owns the job: the success's write is fenced. Nothing recorded,
 * published or acked as owner; the copy is requeued. */
static void sc_fenced(void) {
  start("j-fenced", RESULT_Q, 0);
  claim_new(1, 1);
  end_try(1, 0, 0);
  answer(req(R_SUCCEED), MQPROC_ESTORE_FENCED, "attempt 1 is fenced off by attempt 2");
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE FENCED NACK DONE");
  cr_expect_eq(fx.n_acks, 0);
  cr_expect_eq(fx.n_pubs, 0);
  cr_expect_eq(fx.broker.n_nacks, 1);
  cr_expect_eq(fx.broker.last_requeue, 1);
  cr_expect_eq(fx.metrics.c[MQPROC__M_FENCED], 1);
}

/* A lease renewal is fenced while the try runs: the try is killed, its end goes to FENCED,
 * nothing of it is recorded. (A lease of 0 s: every tick renews.) */
static void sc_fenced_lease(void) {
  fx.cfg.lease_s = 0;
  mqproc__delivery_t *d = start("j-lease", NULL, 0);
  claim_new(1, 1);
  mqproc__delivery_tick(d);
  cr_expect_eq(req(R_RENEW)->attempt, 1);
  answer(req(R_RENEW), MQPROC_ESTORE_FENCED, "fenced");
  cr_assert_not_null(fx.runner.run);
  cr_expect_eq(fx.runner.run->killed, SIGKILL);
  cr_expect_null(mqproc__delivery_job_held(d), "a fenced delivery holds no job");
  end_try(0, 0, SIGKILL);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "FENCED NACK DONE");
  cr_expect_str_eq(fx.store.log, "CLAIM RENEW");
  cr_expect_eq(fx.n_acks, 0);
}

/* The store is unreachable at the claim: the delivery parks (STORE_WAIT), the host hears
 * the store is down, the run slot goes back; the store's return resumes the claim. Later
 * the success's write meets an outage too, and resumes likewise; nothing is acked while
 * the outcome is not recorded. */
static void sc_store_outage(void) {
  mqproc__delivery_t *d = start("j-outage", NULL, 0);
  answer(req(R_CLAIM), MQPROC_ESTORE_CONNECT, "connection refused");
  cr_expect_str_eq(mqproc__delivery_state(d), "STORE_WAIT");
  cr_expect_eq(fx.n_store_down, 1);
  cr_expect_eq(fx.slots_used, 0, "parked before the claim: no slot held");
  cr_expect(mqproc__delivery_before_claim(d));
  mqproc__delivery_store_back(d);
  claim_new(1, 1);
  end_try(1, 0, 0);
  answer(req(R_SUCCEED), MQPROC_ESTORE_CONNECT, "connection refused");
  cr_expect_str_eq(mqproc__delivery_state(d), "STORE_WAIT");
  cr_expect_eq(fx.n_store_down, 2);
  cr_expect_eq(fx.n_acks, 0);
  mqproc__delivery_store_back(d);
  ok(R_SUCCEED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE STORE_WAIT CLAIM STORE_CALL "
                                "STORE_DONE START_TRY RUNNING END_TRY SUCCEED STORE_CALL "
                                "STORE_DONE STORE_WAIT SUCCEED STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.store.log, "CLAIM CLAIM SUCCEED SUCCEED");
  cr_expect_eq(fx.n_acks, 1);
}

/* The broker connection is lost while the job runs: the job is still recorded once (and
 * its result sent once the broker is back: the delivery waits in BROKER_WAIT), but the ack
 * of the old connection's tag is refused (the broker redelivers that copy, which the claim
 * then finds SUCCESS). */
static void sc_broker_lost(void) {
  mqproc__delivery_t *d = start("j-lost", RESULT_Q, 0);
  claim_new(1, 1);
  fx.broker.epoch = 2; /* connection lost ... */
  fx.broker_up = 0;    /* ... and not back yet */
  end_try(1, 0, 0);
  ok(R_SUCCEED);
  cr_expect_eq(fx.n_acks_refused, 1, "the old connection's tag cannot be acked");
  cr_expect_eq(fx.n_acks, 0);
  cr_expect_str_eq(mqproc__delivery_state(d), "BROKER_WAIT");
  fx.broker_up = 1; /* connected again */
  mqproc__delivery_broker_changed(d);
  cr_assert_eq(fx.n_pubs, 1);
  cr_expect_str_eq(last_pub()->routing_key, "proc.result");
  /* the broker redelivers the copy of the lost connection: the claim finds it SUCCESS with
   * its outcome in the outbox, and acks that copy without running it */
  req_t *r;
  start("j-lost", RESULT_Q, 1);
  r = claim_found("SUCCESS", 1);
  r->claim->outbox_pending = 1;
  answer(r, MQPROC_OK, NULL);
  cr_expect(gone(1));
  cr_expect_str_eq(trace_of(1), "DECODE CLAIM STORE_CALL STORE_DONE ACK DONE");
  cr_expect_eq(fx.n_acks, 1, "the copy's ack, on the new connection");
  cr_expect_eq(fx.runner.n_starts, 1, "run once");
  confirm(MQPROC_OK);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE PUBLISH BROKER_WAIT PUBLISH "
                                "PUBLISH_WAIT PUBLISHED CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.store.log, "CLAIM SUCCEED CLAIM OUTBOX_DONE", "recorded once");
  cr_expect_eq(fx.broker.n_nacks, 0);
}

/* A delivery whose connection died before its claim is dropped: no claim, no ack (the
 * broker redelivers it). */
static void sc_broker_lost_before_claim(void) {
  fx.slot_limit = 0;
  mqproc__delivery_t *d = start("j-early-loss", NULL, 0);
  cr_expect_str_eq(mqproc__delivery_state(d), "SLOT_WAIT");
  fx.broker.epoch = 2;
  mqproc__delivery_broker_changed(d);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM SLOT_WAIT DONE");
  cr_expect_str_eq(fx.store.log, "");
  cr_expect_eq(fx.n_acks + fx.n_acks_refused + fx.broker.n_nacks, 0);
}

/* The broker blocks publishing (a memory alarm): the result waits in BROKER_WAIT, and goes
 * out when it unblocks. */
static void sc_broker_blocked(void) {
  mqproc__delivery_t *d = start("j-blocked", RESULT_Q, 0);
  claim_new(1, 1);
  fx.host.broker_blocked = 1;
  end_try(1, 0, 0);
  ok(R_SUCCEED);
  cr_expect_str_eq(mqproc__delivery_state(d), "BROKER_WAIT");
  cr_expect_eq(fx.n_pubs, 0);
  fx.host.broker_blocked = 0;
  mqproc__delivery_broker_changed(d);
  cr_assert_eq(fx.n_pubs, 1);
  confirm(MQPROC_OK);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE PUBLISH BROKER_WAIT PUBLISH "
                                "PUBLISH_WAIT PUBLISHED CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_eq(fx.n_acks, 1);
}

/* An operator cancels the running job: its try is killed, CANCELLED recorded (whatever
 * the try did), acked, and the CANCELLED result sent. */
static void sc_cancel(void) {
  mqproc__delivery_t *d = start("j-cancel", RESULT_Q, 0);
  claim_new(1, 1);
  mqproc__delivery_cancel(d);
  cr_assert_not_null(fx.runner.run);
  cr_expect_eq(fx.runner.run->killed, SIGKILL);
  end_try(0, 0, SIGKILL);
  cr_expect_eq(req(R_CANCELLED)->outbox, 1);
  cr_expect_eq(req(R_CANCELLED)->end_signal, SIGKILL);
  ok(R_CANCELLED);
  cr_expect(strstr(last_pub()->body, "\"CANCELLED\"") != NULL, "%s", last_pub()->body);
  confirm(MQPROC_OK);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "CANCEL STORE_CALL STORE_DONE PUBLISH PUBLISH_WAIT PUBLISHED "
                                "CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.store.log, "CLAIM CANCELLED OUTBOX_DONE");
  cr_expect_eq(fx.metrics.c[MQPROC__M_CANCELLED], 1);
  cr_expect_eq(fx.n_acks, 1);
}

/* Shutdown before the claim (waiting for a slot): the message goes back to the queue. */
static void sc_stop_before_claim(void) {
  fx.slot_limit = 0;
  mqproc__delivery_t *d = start("j-stop", NULL, 0);
  cr_expect_eq(mqproc__delivery_waits_for_slot(d), 1);
  mqproc__delivery_stop(d, 0);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM SLOT_WAIT NACK DONE");
  cr_expect_str_eq(fx.store.log, "");
  cr_expect_eq(fx.broker.n_nacks, 1);
  cr_expect_eq(fx.broker.last_requeue, 1);
}

/* Shutdown: a drain lets the running try go on; the forced stop kills it, its end is
 * recorded, the job RELEASEd (back to QUEUED, no requeue counted) and the message
 * requeued. */
static void sc_stop_force(void) {
  mqproc__delivery_t *d = start("j-drain", RESULT_Q, 0);
  claim_new(1, 1);
  mqproc__delivery_stop(d, 0);
  cr_expect_eq(fx.runner.n_kills, 0, "a drain lets the try run on");
  mqproc__delivery_stop(d, 1);
  cr_assert_not_null(fx.runner.run);
  cr_expect_eq(fx.runner.run->killed, SIGKILL);
  end_try(0, 0, SIGKILL);
  ok(R_END_TRY);
  cr_expect_eq(req(R_RELEASE)->refund, 0);
  ok(R_RELEASE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "STORE_CALL STORE_DONE RELEASE STORE_CALL STORE_DONE NACK DONE");
  cr_expect_eq(fx.broker.n_nacks, 1);
  cr_expect_eq(fx.broker.last_requeue, 1);
  cr_expect_eq(fx.n_acks, 0);
  cr_expect_eq(fx.n_pubs, 0);
}

/* Shutdown with a C function on a thread, which cannot be stopped: the job is released
 * and the delivery abandoned (the host keeps it); when the thread ends after all, the
 * host frees it. */
static void sc_stop_abandon(void) {
  fx.runner.base.klass = &FAKE_THREAD_RUNNER;
  mqproc__delivery_t *d = start("j-thread", NULL, 0);
  claim_new(1, 1);
  mqproc__delivery_stop(d, 1);
  cr_expect_eq(fx.runner.n_kills, 0);
  ok(R_RELEASE);
  cr_expect_eq(fx.n_done, 1);
  cr_expect_eq(fx.n_abandoned, 1, "its thread still runs: the host keeps it");
  cr_expect(!gone(0));
  end_try(1, 0, 0);
  cr_expect(gone(0));
  cr_expect_eq(fx.n_abandoned_done, 1);
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING RELEASE "
                                "STORE_CALL STORE_DONE NACK DONE");
  cr_expect_str_eq(fx.store.log, "CLAIM RELEASE", "its late end records nothing");
  cr_expect_eq(fx.broker.n_nacks, 1);
}

/* --ack-after: the job still runs after 1 s, so the row records that it carries the job
 * and the delivery is acked early; the outcome then goes out by the outbox path (SUCCESS
 * with the outbox mark, the result, outbox_done), with no second ack and no
 * mark_published. The one real wait of this file: --ack-after counts whole seconds. */
static void sc_ack_early(void) {
  fx.cfg.ack_after_s = 1;
  mqproc__delivery_t *d = start("j-long", RESULT_Q, 0);
  claim_new(1, 1);
  run_until(c_req, R_ACK_EARLY, 5000, "the --ack-after timer");
  cr_expect_eq(req(R_ACK_EARLY)->attempt, 1);
  cr_expect_eq(fx.n_acks, 0, "acked after the row says so, not before");
  ok(R_ACK_EARLY);
  cr_expect_eq(fx.n_acks, 1);
  cr_expect_eq(mqproc__delivery_holds_slot(d, fx.broker.epoch, 1), 1,
               "an early-acked job holds a slot its consumer does not count");
  end_try(1, 0, 0);
  cr_expect_eq(req(R_SUCCEED)->outbox, 1);
  ok(R_SUCCEED);
  confirm(MQPROC_OK);
  cr_expect_eq(req(R_OUTBOX_DONE)->result_sent, 1);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING RUNNING "
                                "END_TRY SUCCEED STORE_CALL STORE_DONE PUBLISH PUBLISH_WAIT "
                                "PUBLISHED CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.order,
                   "CLAIM ACK_EARLY consume+1 ack SUCCEED publish confirm OUTBOX_DONE done");
  cr_expect_eq(fx.n_acks, 1, "one ack: the early one");
}

/* No run slot free: the delivery waits in SLOT_WAIT, unclaimed; a freed slot resumes the
 * claim. */
static void sc_slot_wait(void) {
  fx.slot_limit = 0;
  mqproc__delivery_t *d = start("j-slot", NULL, 0);
  cr_expect_str_eq(mqproc__delivery_state(d), "SLOT_WAIT");
  cr_expect_eq(mqproc__delivery_waits_for_slot(d), 1);
  cr_expect_str_eq(fx.store.log, "", "not claimed while it waits");
  fx.slot_limit = 1;
  mqproc__delivery_slot_free(d);
  claim_new(1, 1);
  end_try(1, 0, 0);
  ok(R_SUCCEED);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM SLOT_WAIT CLAIM STORE_CALL STORE_DONE START_TRY "
                                "RUNNING END_TRY SUCCEED STORE_CALL STORE_DONE DONE");
}

/* Claimable but out of attempts (--max-attempts): FAILED without running, dead-lettered,
 * the handler told, acked. */
static void sc_give_up(void) {
  start("j-exhausted", NULL, 1);
  answer(claim_found("QUEUED", 3), MQPROC_OK, NULL);
  cr_expect_eq(req(R_GIVE_UP)->attempt, 3);
  cr_expect(strstr(req(R_GIVE_UP)->text, "out of attempts") != NULL, "%s", req(R_GIVE_UP)->text);
  ok(R_GIVE_UP);
  cr_expect_eq(fx.n_job_failed, 1);
  ok(R_RECORD_DEAD);
  cr_expect_str_eq(last_pub()->routing_key, "proc.dead");
  confirm(MQPROC_OK);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE GIVE_UP STORE_CALL STORE_DONE "
                                "DEAD_LETTER STORE_CALL STORE_DONE DEAD_WAIT PUBLISH CALLBACK ACK "
                                "DONE");
  cr_expect_eq(fx.runner.n_starts, 0);
  cr_expect_eq(fx.n_acks, 1);
  cr_expect_eq(fx.metrics.c[MQPROC__M_FAILED], 1);
}

/* Callbacks: POSTed on a thread (here refused by the address policy before any
 * connection: a fast failure), their outcome recorded. An acked job's goes with the
 * outbox's end; a replayed (unacked) one's is recorded by itself before the ack. */
static void sc_callbacks(void) {
  start("j-cb", CALLBACK_URL, 0);
  claim_new(1, 1);
  end_try(1, 0, 0);
  cr_expect_eq(req(R_SUCCEED)->outbox, 1);
  ok(R_SUCCEED);
  run_until(c_req, R_OUTBOX_DONE, 5000, "the callback's end");
  cr_expect_eq(req(R_OUTBOX_DONE)->callbacks_sent, 1);
  cr_expect_eq(req(R_OUTBOX_DONE)->result_sent, 0);
  cr_expect(strstr(req(R_OUTBOX_DONE)->text2, "refused") != NULL, "callback error: %s",
            req(R_OUTBOX_DONE)->text2);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DECODE CLAIM STORE_CALL STORE_DONE START_TRY RUNNING END_TRY "
                                "SUCCEED STORE_CALL STORE_DONE PUBLISH CALLBACK CALLBACK_WAIT "
                                "CALLBACK_RECORD ACK STORE_CALL STORE_DONE DONE");

  /* a redelivered copy of a SUCCESS job whose callbacks never went out */
  start("j-cb2", CALLBACK_URL, 1);
  req_t *r = claim_found("SUCCESS", 1);
  r->claim->callbacks_done = 0;
  answer(r, MQPROC_OK, NULL);
  run_until(c_req, R_RECORD_CALLBACKS, 5000, "the replayed callback's end");
  cr_expect(strstr(req(R_RECORD_CALLBACKS)->text, "refused") != NULL, "%s",
            req(R_RECORD_CALLBACKS)->text);
  cr_expect_eq(fx.n_acks, 1, "the first job's ack only, so far");
  ok(R_RECORD_CALLBACKS);
  cr_expect(gone(1));
  cr_expect_str_eq(trace_of(1), "DECODE CLAIM STORE_CALL STORE_DONE PUBLISH CALLBACK "
                                "CALLBACK_WAIT CALLBACK_RECORD STORE_CALL STORE_DONE ACK DONE");
  cr_expect_eq(fx.n_acks, 2);
}

/* The outbox sweep's delivery: a FAILED job whose early-acked holder died before its dead
 * letter and result went out. No broker delivery behind it: nothing is acked; the dead
 * letter's confirm is recorded, then the result, then the outbox's end. */
static void sc_outbox_sweep(void) {
  char *req_json = message("j-orphan", RESULT_Q);
  mqproc__outbox_row_t row = {.job_id = "j-orphan",
                              .request_json = req_json,
                              .format = "json",
                              .state = "FAILED",
                              .attempt = 2,
                              .dead_letter_pending = 1,
                              .last_error = "exit status 1"};
  mqproc__delivery_t *d = mqproc__delivery_new_outbox(&fx.host, &row);
  free(req_json);
  cr_assert_not_null(d);
  fx.dels[fx.n_dels] = d;
  fx.alive[fx.n_dels++] = 1;
  mqproc__delivery_start(d);
  ok(R_RECORD_DEAD);
  cr_expect_eq(last_pub()->dead_letter, 1);
  confirm(MQPROC_OK);
  cr_expect(has_req(R_DEAD_LETTERED), "the dead letter's confirm is recorded");
  cr_expect_str_eq(last_pub()->routing_key, "proc.result");
  cr_expect(strstr(last_pub()->body, "\"FAILED\"") != NULL, "%s", last_pub()->body);
  cr_expect_str_eq(last_pub()->attempt, "2");
  confirm(MQPROC_OK);
  ok(R_OUTBOX_DONE);
  cr_expect(gone(0));
  cr_expect_str_eq(trace_of(0), "DEAD_LETTER STORE_CALL STORE_DONE DEAD_WAIT PUBLISH PUBLISH_WAIT "
                                "PUBLISHED CALLBACK ACK STORE_CALL STORE_DONE DONE");
  cr_expect_str_eq(fx.store.log, "RECORD_DEAD DEAD_LETTERED OUTBOX_DONE");
  cr_expect_eq(fx.n_acks + fx.n_acks_refused + fx.broker.n_nacks, 0);
}

/* ---- the tests: each scenario alone, then all of them for the coverage of states ------ */

typedef struct scenario {
  const char *name;
  void (*fn)(void);
} scenario_t;

static const scenario_t SCENARIOS[] = {
    {"success", sc_success},
    {"success_nothing_to_send", sc_success_nothing_to_send},
    {"local_retry", sc_local_retry},
    {"requeue", sc_requeue},
    {"failed_dead_letter", sc_failed_dead_letter},
    {"invalid", sc_invalid},
    {"already_success", sc_already_success},
    {"already_success_unsent", sc_already_success_unsent},
    {"running_elsewhere", sc_running_elsewhere},
    {"fenced", sc_fenced},
    {"fenced_lease", sc_fenced_lease},
    {"store_outage", sc_store_outage},
    {"broker_lost", sc_broker_lost},
    {"broker_lost_before_claim", sc_broker_lost_before_claim},
    {"broker_blocked", sc_broker_blocked},
    {"cancel", sc_cancel},
    {"stop_before_claim", sc_stop_before_claim},
    {"stop_force", sc_stop_force},
    {"stop_abandon", sc_stop_abandon},
    {"ack_early", sc_ack_early},
    {"slot_wait", sc_slot_wait},
    {"give_up", sc_give_up},
    {"callbacks", sc_callbacks},
    {"outbox_sweep", sc_outbox_sweep},
};

static void run_scenario(void (*fn)(void)) {
  setup();
  fn();
  teardown();
}

TestSuite(delivery, .timeout = 30);

#define SCENARIO_TEST(name)                                                                        \
  Test(delivery, name) {                                                                           \
    run_scenario(sc_##name);                                                                       \
  }
SCENARIO_TEST(success)
SCENARIO_TEST(success_nothing_to_send)
SCENARIO_TEST(local_retry)
SCENARIO_TEST(requeue)
SCENARIO_TEST(failed_dead_letter)
SCENARIO_TEST(invalid)
SCENARIO_TEST(already_success)
SCENARIO_TEST(already_success_unsent)
SCENARIO_TEST(running_elsewhere)
SCENARIO_TEST(fenced)
SCENARIO_TEST(fenced_lease)
SCENARIO_TEST(store_outage)
SCENARIO_TEST(broker_lost)
SCENARIO_TEST(broker_lost_before_claim)
SCENARIO_TEST(broker_blocked)
SCENARIO_TEST(cancel)
SCENARIO_TEST(stop_before_claim)
SCENARIO_TEST(stop_force)
SCENARIO_TEST(stop_abandon)
SCENARIO_TEST(ack_early)
SCENARIO_TEST(slot_wait)
SCENARIO_TEST(give_up)
SCENARIO_TEST(callbacks)
SCENARIO_TEST(outbox_sweep)

/* Every scenario in one process: the union of the states they traced is the machine's
 * whole list. Prints, per state, the scenarios that entered it. */
Test(delivery, every_state_is_entered) {
  static int by[sizeof(SCENARIOS) / sizeof(SCENARIOS[0])][N_STATES];
  size_t n = sizeof(SCENARIOS) / sizeof(SCENARIOS[0]);
  char missing[1024] = "";
  for (size_t k = 0; k < n; k++) {
    memset(covered, 0, sizeof(covered));
    run_scenario(SCENARIOS[k].fn);
    memcpy(by[k], covered, sizeof(covered));
  }
  for (size_t s = 0; s < N_STATES; s++) {
    char who[1024] = "";
    size_t used = 0;
    for (size_t k = 0; k < n; k++)
      if (by[k][s] && used < sizeof(who))
        used += (size_t)snprintf(who + used, sizeof(who) - used, " %s", SCENARIOS[k].name);
    fprintf(stderr, "state %-15s entered by:%s\n", STATE_NAMES[s], who[0] ? who : " NONE");
    if (who[0] == '\0') {
      size_t m = strlen(missing);
      snprintf(missing + m, sizeof(missing) - m, " %s", STATE_NAMES[s]);
    }
  }
  cr_expect_str_eq(missing, "", "states no scenario entered:%s", missing);
}
