/* The server's window (see flow.h): the consumer and its prefetch, the --concurrency run
 * slots and the claim passes, the automatic window, and not consuming while the job store
 * is unreachable or an operator paused the server. */
#include "server/flow.h"

#include "base/log.h"
#include "base/util.h"
#include "delivery/delivery.h"
#include "delivery/policy.h"

void mqproc__window_init(mqproc__window_t *w, const mqproc__config_t *cfg, mqproc__loop_t *loop,
                         mqproc__broker_t *broker, mqproc__store_t *store,
                         mqproc__inflight_t *inflight, const mqproc__window_ops_t *ops, void *ud) {
  *w = (mqproc__window_t){.cfg = cfg,
                          .loop = loop,
                          .broker = broker,
                          .store = store,
                          .inflight = inflight,
                          .ops = ops,
                          .ud = ud,
                          .prefetch = cfg->prefetch};
}

/* ---- the consumer --------------------------------------------------------------------- */

/* The slots of --prefetch a consumer may still fill: those not held by a delivery it does
 * not count itself (consumer 0: no consumer, so every delivery holds one). */
static int free_slots(mqproc__window_t *w, const mqproc__window_state_t *st, uint64_t consumer,
                      int extra) {
  int held =
      extra + mqproc__inflight_slots_held(w->inflight, mqproc__broker_epoch(w->broker), consumer);
  if (st->stopping || w->store_paused || st->paused || held >= w->prefetch)
    return 0;
  return w->prefetch - held;
}

void mqproc__window_consume(mqproc__window_t *w, int extra) {
  mqproc__window_state_t st;
  int want, held;
  w->ops->state(w->ud, &st);
  /* A blocked broker reads nothing from us: a basic.cancel or consume would wait for its
   * reply until the deadline. The consumer is set right when it unblocks. */
  if (!st.broker_up || st.broker_blocked)
    return;
  if (w->consuming && free_slots(w, &st, w->consumer, extra) != w->consume_prefetch) {
    w->consuming = 0;
    if (mqproc__broker_cancel(w->broker, NULL) != MQPROC_OK)
      return; /* the connection broke: on_down follows */
  }
  /* once cancelled, what the old consumer pushed counts like any running job */
  want = free_slots(w, &st, 0, extra);
  held = w->prefetch - want;
  if (want > 0 && !w->consuming) {
    if (mqproc__broker_consume(w->broker, want, &w->consumer, NULL) != MQPROC_OK)
      return;
    w->consuming = 1;
    w->consume_prefetch = want;
    MQPROC__INFO("consuming from queue '%s' (prefetch %d%s)", w->cfg->processor, want,
                 held > 0 ? ", the other slots hold running jobs" : "");
  }
}

void mqproc__window_no_consumer(mqproc__window_t *w) {
  w->consuming = 0;
}

/* ---- run slots (--concurrency) ------------------------------------------------------ */

int mqproc__window_take_slot(mqproc__window_t *w) {
  return mqproc__inflight_take_slot(w->inflight, w->cfg->concurrency);
}

/* ---- the automatic window (depth_auto; policy.h says the rule) ----------------------- */

/* Claim passes at most: --claim-ahead, or all of the automatic window beyond the slots. */
static int claim_ahead(const mqproc__window_t *w) {
  int beyond = w->prefetch - w->cfg->concurrency;
  return w->depth_auto && beyond > w->claim_ahead ? beyond : w->claim_ahead;
}

static void set_depth(mqproc__window_t *w, int depth) {
  mqproc__window_state_t st;
  int want;
  if (depth == w->prefetch)
    return;
  MQPROC__DEBUG("window: %d deliveries (was %d)", depth, w->prefetch);
  w->prefetch = depth;
  /* the consumer's own share, changed in place: no new consumer for every step */
  w->ops->state(w->ud, &st);
  if (w->consuming && (want = free_slots(w, &st, w->consumer, 0)) > 0 &&
      mqproc__broker_resize(w->broker, want, NULL) == MQPROC_OK)
    w->consume_prefetch = want;
  mqproc__window_consume(w, 0);
}

/* A run slot is left without a claimed job to run: grow the window if it is full (with
 * room in it, the queue is what is short), counted as the consumer's prefetch is. */
static void slot_starved(mqproc__window_t *w) {
  mqproc__window_state_t st;
  w->ops->state(w->ud, &st);
  if (!w->depth_auto || st.stopping || w->store_paused || st.paused)
    return;
  if (free_slots(w, &st, 0, 0) > 0)
    return;
  w->starved = 1;
  set_depth(w, mqproc__policy_depth_grow(w->prefetch, w->cfg->prefetch, w->cfg->concurrency));
}

/* Long jobs behind short ones: a job claimed ahead has waited for a slot longer than
 * HAND_BACK_MS. The window goes back to its start at once, and the jobs claimed ahead
 * beyond its passes (the newest) are handed back for other servers, without costing them
 * an attempt. Short jobs never wait so long (the deep window turns over in tens of ms). */
#define HAND_BACK_MS 1000

static int hand_back(mqproc__window_t *w) {
  int64_t now = mqproc__now_ms();
  int stuck, n;
  mqproc__inflight_ahead_waiting(w->inflight, now, HAND_BACK_MS, &stuck);
  if (!stuck)
    return 0;
  set_depth(w, w->cfg->prefetch);
  n = mqproc__inflight_hand_back(w->inflight, now, claim_ahead(w)); /* the newest */
  if (n > 0)
    MQPROC__INFO("handed back %d job(s) claimed ahead that waited over %d ms for a slot (long "
                 "jobs behind short ones): the window is back at %d",
                 n, HAND_BACK_MS, w->prefetch);
  return 1;
}

void mqproc__window_tick(mqproc__window_t *w) {
  mqproc__window_state_t st;
  if (!w->depth_auto)
    return;
  w->ops->state(w->ud, &st);
  if (mqproc__inflight_empty(w->inflight))
    set_depth(w, w->cfg->prefetch); /* idle: the next burst grows it again */
  else if (!st.stopping && !hand_back(w) && !w->starved)
    set_depth(w, mqproc__policy_depth_shrink(w->prefetch, w->cfg->prefetch));
  w->starved = 0;
}

/* From a timer: the try that gave the slot back is still in its own step. A free slot
 * goes to a claimed job first (the oldest), then to one waiting to claim (the slot starves
 * meanwhile); a free pass to one waiting to claim. */
static void on_slot_free(mqproc__loop_t *loop, void *ud) {
  mqproc__window_t *w = ud;
  int starved = 0;
  (void)loop;
  w->slot_timer = 0;
  for (;;) {
    mqproc__delivery_t *next = NULL;
    if (w->inflight->running < w->cfg->concurrency) { /* a slot */
      if ((next = mqproc__inflight_oldest_waiting(w->inflight, 2)) == NULL) {
        starved = 1;
        next = mqproc__inflight_oldest_waiting(w->inflight, 1);
      }
    } else if (w->inflight->ahead < claim_ahead(w)) /* a pass */
      next = mqproc__inflight_oldest_waiting(w->inflight, 1);
    if (next == NULL)
      break;
    mqproc__delivery_slot_free(next); /* it leaves SLOT_WAIT with a slot or a pass, or ends */
  }
  if (starved)
    slot_starved(w);
}

void mqproc__window_give_slot(mqproc__window_t *w) {
  mqproc__inflight_give_slot(w->inflight);
  if (w->slot_timer == 0)
    w->slot_timer = mqproc__loop_timer(w->loop, 0, on_slot_free, w);
}

int mqproc__window_take_pass(mqproc__window_t *w) {
  return mqproc__inflight_take_pass(w->inflight, claim_ahead(w));
}

void mqproc__window_give_pass(mqproc__window_t *w) {
  mqproc__inflight_give_pass(w->inflight);
  if (w->slot_timer == 0)
    w->slot_timer = mqproc__loop_timer(w->loop, 0, on_slot_free, w);
}

/* ---- store outages: stop taking deliveries until the store answers ------------------ */

static void on_store_ping(mqproc__loop_t *loop, void *ud);

static void store_pinged(void *ud, int rc, const char *err) {
  mqproc__window_t *w = ud;
  (void)err;
  if (rc != MQPROC_OK) {
    w->ping_timer = mqproc__loop_timer(w->loop, 1000, on_store_ping, w);
    return;
  }
  w->store_paused = 0;
  w->ops->store_back(w->ud);
  MQPROC__INFO("job store reachable again; renewing leases, recording what waited, consuming "
               "again");
  mqproc__inflight_store_back(w->inflight);
  mqproc__window_consume(w, 0);
}

static void on_store_ping(mqproc__loop_t *loop, void *ud) {
  mqproc__window_t *w = ud;
  w->ping_timer = 0;
  if (mqproc__store_ping(w->store, store_pinged, w) != MQPROC_OK)
    w->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, w);
}

/* Runs from a timer, not from the failing delivery's own step (which it may requeue). */
static void on_store_pause(mqproc__loop_t *loop, void *ud) {
  mqproc__window_t *w = ud;
  MQPROC__WARN("job store unreachable: not consuming; deliveries not yet claimed go back to "
               "the queue; running jobs keep running and are recorded when it returns");
  mqproc__window_consume(w, 0);
  mqproc__inflight_requeue_unclaimed(w->inflight);
  w->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, w);
}

void mqproc__window_store_down(mqproc__window_t *w) {
  if (w->store_paused)
    return;
  w->store_paused = 1;
  mqproc__loop_timer(w->loop, 0, on_store_pause, w);
}
