/* The server's flow control, apart from the loop's wiring (server.c): acks batched into
 * one multiple ack per loop turn, the consumer's prefetch, the --concurrency run slots and
 * the automatic window (what the deliveries hold is counted in inflight.c), and pausing
 * consumption while the job store is unreachable or an operator paused it.
 *
 * The bound on jobs running at once (--prefetch) is kept here, not by the broker alone:
 * basic.qos counts only the unacked deliveries of one consumer, so deliveries of an older
 * consumer (before a re-consume), of a lost connection, and early-acked jobs are counted
 * here and the consumer's prefetch is what is left (mqproc__server_update_consuming).
 */
#include <stdlib.h>

#include "delivery/delivery.h"
#include "server/fleet.h"
#include "base/log.h"
#include "delivery/policy.h"
#include "server/server.h"
#include "server/sweeper.h"
#include "base/util.h"

/* ---- the consumer --------------------------------------------------------------------- */

/* The slots of --prefetch a consumer may still fill: those not held by a delivery it does
 * not count itself (consumer 0: no consumer, so every delivery holds one). */
static int free_slots(mqproc__server_t *srv, uint64_t consumer, int extra) {
  int held = extra + mqproc__inflight_slots_held(&srv->inflight, mqproc__broker_epoch(srv->broker),
                                                 consumer);
  if (srv->stopping || srv->store_paused || mqproc__fleet_holds_back(srv->fleet) ||
      held >= srv->prefetch)
    return 0;
  return srv->prefetch - held;
}

void mqproc__server_update_consuming(mqproc__server_t *srv, int extra) {
  int want, held;
  /* A blocked broker reads nothing from us: a basic.cancel or consume would wait for its
   * reply until the deadline. The consumer is set right when it unblocks. */
  if (!srv->broker_up || srv->host.broker_blocked)
    return;
  if (srv->consuming && free_slots(srv, srv->consumer, extra) != srv->consume_prefetch) {
    srv->consuming = 0;
    if (mqproc__broker_cancel(srv->broker, NULL) != MQPROC_OK)
      return; /* the connection broke: on_down follows */
  }
  /* once cancelled, what the old consumer pushed counts like any running job */
  want = free_slots(srv, 0, extra);
  held = srv->prefetch - want;
  if (want > 0 && !srv->consuming) {
    if (mqproc__broker_consume(srv->broker, want, &srv->consumer, NULL) != MQPROC_OK)
      return;
    srv->consuming = 1;
    srv->consume_prefetch = want;
    MQPROC__INFO("consuming from queue '%s' (prefetch %d%s)", srv->processor, want,
                 held > 0 ? ", the other slots hold running jobs" : "");
  }
}

/* ---- acks ----------------------------------------------------------------------------- */

int mqproc__server_ack(mqproc__server_t *srv, mqproc__delivery_t *d, char *err) {
  uint64_t epoch = 0, tag = 0;
  mqproc__delivery_tag(d, &epoch, &tag);
  if (!srv->broker_up || epoch != mqproc__broker_epoch(srv->broker))
    return mqproc__err(err, MQPROC_EBROKER_CLOSED,
                       "delivery belongs to a closed connection (epoch %llu)",
                       (unsigned long long)epoch);
  if (mqproc__inflight_queue_ack(&srv->inflight, d, tag) != 0) /* no room to wait: now */
    return mqproc__broker_ack(srv->broker, epoch, tag, 0, err);
  return MQPROC_OK;
}

void mqproc__server_flush_acks(mqproc__server_t *srv) {
  mqproc__inflight_flush_acks(&srv->inflight, srv->broker_up ? srv->broker : NULL);
}

/* ---- run slots (--concurrency) ------------------------------------------------------ */

int mqproc__server_take_slot(mqproc__server_t *srv) {
  return mqproc__inflight_take_slot(&srv->inflight, srv->cfg->concurrency);
}

/* ---- the automatic window (srv->depth_auto; policy.h says the rule) ------------------ */

/* Claim passes at most: --claim-ahead, or all of the automatic window beyond the slots. */
static int claim_ahead(const mqproc__server_t *srv) {
  int beyond = srv->prefetch - srv->cfg->concurrency;
  return srv->depth_auto && beyond > srv->claim_ahead ? beyond : srv->claim_ahead;
}

static void set_depth(mqproc__server_t *srv, int depth) {
  int want;
  if (depth == srv->prefetch)
    return;
  MQPROC__DEBUG("window: %d deliveries (was %d)", depth, srv->prefetch);
  srv->prefetch = depth;
  /* the consumer's own share, changed in place: no new consumer for every step */
  if (srv->consuming && (want = free_slots(srv, srv->consumer, 0)) > 0 &&
      mqproc__broker_resize(srv->broker, want, NULL) == MQPROC_OK)
    srv->consume_prefetch = want;
  mqproc__server_update_consuming(srv, 0);
}

/* A run slot is left without a claimed job to run: grow the window if it is full (with
 * room in it, the queue is what is short), counted as the consumer's prefetch is. */
static void slot_starved(mqproc__server_t *srv) {
  if (!srv->depth_auto || srv->stopping || srv->store_paused ||
      mqproc__fleet_holds_back(srv->fleet))
    return;
  if (free_slots(srv, 0, 0) > 0)
    return;
  srv->starved = 1;
  set_depth(srv,
            mqproc__policy_depth_grow(srv->prefetch, srv->cfg->prefetch, srv->cfg->concurrency));
}

/* Long jobs behind short ones: a job claimed ahead has waited for a slot longer than
 * HAND_BACK_MS. The window goes back to its start at once, and the jobs claimed ahead
 * beyond its passes (the newest) are handed back for other servers, without costing them
 * an attempt. Short jobs never wait so long (the deep window turns over in tens of ms). */
#define HAND_BACK_MS 1000

static int hand_back(mqproc__server_t *srv) {
  int64_t now = mqproc__now_ms();
  int stuck, n;
  mqproc__inflight_ahead_waiting(&srv->inflight, now, HAND_BACK_MS, &stuck);
  if (!stuck)
    return 0;
  set_depth(srv, srv->cfg->prefetch);
  n = mqproc__inflight_hand_back(&srv->inflight, now, claim_ahead(srv)); /* the newest */
  if (n > 0)
    MQPROC__INFO("handed back %d job(s) claimed ahead that waited over %d ms for a slot (long "
                 "jobs behind short ones): the window is back at %d",
                 n, HAND_BACK_MS, srv->prefetch);
  return 1;
}

void mqproc__server_depth_tick(mqproc__server_t *srv) {
  if (!srv->depth_auto)
    return;
  if (mqproc__inflight_empty(&srv->inflight))
    set_depth(srv, srv->cfg->prefetch); /* idle: the next burst grows it again */
  else if (!srv->stopping && !hand_back(srv) && !srv->starved)
    set_depth(srv, mqproc__policy_depth_shrink(srv->prefetch, srv->cfg->prefetch));
  srv->starved = 0;
}

/* From a timer: the try that gave the slot back is still in its own step. A free slot
 * goes to a claimed job first (the oldest), then to one waiting to claim (the slot starves
 * meanwhile); a free pass to one waiting to claim. */
static void on_slot_free(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  int starved = 0;
  (void)loop;
  srv->slot_timer = 0;
  for (;;) {
    mqproc__delivery_t *next = NULL;
    if (srv->inflight.running < srv->cfg->concurrency) { /* a slot */
      if ((next = mqproc__inflight_oldest_waiting(&srv->inflight, 2)) == NULL) {
        starved = 1;
        next = mqproc__inflight_oldest_waiting(&srv->inflight, 1);
      }
    } else if (srv->inflight.ahead < claim_ahead(srv)) /* a pass */
      next = mqproc__inflight_oldest_waiting(&srv->inflight, 1);
    if (next == NULL)
      break;
    mqproc__delivery_slot_free(next); /* it leaves SLOT_WAIT with a slot or a pass, or ends */
  }
  if (starved)
    slot_starved(srv);
}

void mqproc__server_give_slot(mqproc__server_t *srv) {
  mqproc__inflight_give_slot(&srv->inflight);
  if (srv->slot_timer == 0)
    srv->slot_timer = mqproc__loop_timer(srv->loop, 0, on_slot_free, srv);
}

int mqproc__server_take_pass(mqproc__server_t *srv) {
  return mqproc__inflight_take_pass(&srv->inflight, claim_ahead(srv));
}

void mqproc__server_give_pass(mqproc__server_t *srv) {
  mqproc__inflight_give_pass(&srv->inflight);
  if (srv->slot_timer == 0)
    srv->slot_timer = mqproc__loop_timer(srv->loop, 0, on_slot_free, srv);
}

/* ---- store outages: stop taking deliveries until the store answers ------------------ */

static void on_store_ping(mqproc__loop_t *loop, void *ud);

static void store_pinged(void *ud, int rc, const char *err) {
  mqproc__server_t *srv = ud;
  (void)err;
  if (rc != MQPROC_OK) {
    srv->ping_timer = mqproc__loop_timer(srv->loop, 1000, on_store_ping, srv);
    return;
  }
  srv->store_paused = 0;
  mqproc__sweeper_store_back(&srv->sweeper);
  mqproc__server_db_seen(srv, 1);
  MQPROC__INFO("job store reachable again; renewing leases, recording what waited, consuming "
               "again");
  mqproc__inflight_store_back(&srv->inflight);
  mqproc__server_update_consuming(srv, 0);
}

static void on_store_ping(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  srv->ping_timer = 0;
  if (mqproc__store_ping(srv->store, store_pinged, srv) != MQPROC_OK)
    srv->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, srv);
}

/* Runs from a timer, not from the failing delivery's own step (which it may requeue). */
static void on_store_pause(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  MQPROC__WARN("job store unreachable: not consuming; deliveries not yet claimed go back to "
               "the queue; running jobs keep running and are recorded when it returns");
  mqproc__server_update_consuming(srv, 0);
  mqproc__inflight_requeue_unclaimed(&srv->inflight);
  srv->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, srv);
}

void mqproc__server_db_seen(mqproc__server_t *srv, int ok) {
  if (ok && srv->metrics.db_down_since != 0) { /* it was down: reached again */
    mqproc__metrics_up(&srv->metrics.db_down_since, &srv->metrics.db_down_ms, mqproc__now_ms());
    mqproc__metrics_inc(&srv->metrics, MQPROC__M_DB_RECONNECTS);
  } else if (!ok) {
    mqproc__metrics_down(&srv->metrics.db_down_since, mqproc__now_ms());
  }
  srv->db_ok = ok;
}

void mqproc__server_store_down(mqproc__server_t *srv) {
  mqproc__server_db_seen(srv, 0);
  if (srv->store_paused)
    return;
  srv->store_paused = 1;
  mqproc__loop_timer(srv->loop, 0, on_store_pause, srv);
}
