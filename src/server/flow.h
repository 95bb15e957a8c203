/* The server's window (flow.c): how many deliveries it takes at once (--prefetch, or the
 * automatic window), the consumer that takes them, the --concurrency run slots and the
 * claim passes (what the deliveries hold is counted in inflight.c), and not consuming
 * while the job store is unreachable. An object of its own: the server gives it the
 * handles it uses and a small table of what it asks; it never sees the server itself.
 *
 * The bound on jobs running at once (--prefetch) is kept here, not by the broker alone:
 * basic.qos counts only the unacked deliveries of one consumer, so deliveries of an older
 * consumer (before a re-consume), of a lost connection, and early-acked jobs are counted
 * here and the consumer's prefetch is what is left (mqproc__window_consume).
 */
#ifndef MQPROC_SERVER_FLOW_H
#define MQPROC_SERVER_FLOW_H

#include <stdint.h>

#include "base/config.h"
#include "broker/broker.h"
#include "loop/loop.h"
#include "server/inflight.h"
#include "store/store.h"

/* What the window reads of its server. */
typedef struct mqproc__window_state {
  int broker_up;      /* connected */
  int broker_blocked; /* the broker blocks publishing (and reads nothing from us) */
  int stopping;       /* a stop or a drain: nothing new */
  int paused;         /* the operators paused it (fleet.h) */
} mqproc__window_state_t;

/* What the window asks of its server (ud: the window's ud). */
typedef struct mqproc__window_ops {
  void (*state)(void *ud, mqproc__window_state_t *st);
  /* The store answers again after an outage (store_paused is 0 again): what waited for it
   * other than the deliveries may go on (the window then resumes them and consuming). */
  void (*store_back)(void *ud);
} mqproc__window_ops_t;

typedef struct mqproc__window {
  /* handles: the server's, used and never freed here */
  const mqproc__config_t *cfg;
  mqproc__loop_t *loop;
  mqproc__broker_t *broker;
  mqproc__store_t *store;       /* pinged while it is away */
  mqproc__inflight_t *inflight; /* what the deliveries hold */
  const mqproc__window_ops_t *ops;
  void *ud;
  /* set once by the server's setup (mqproc__server_setup_window) */
  int claim_ahead; /* claim passes at most beside the window's */
  int depth_auto;  /* the window adapts to the jobs: neither --prefetch nor --claim-ahead
                      given, and the backend can resize its consumer in place */
  /* read-only for the server */
  int prefetch;      /* deliveries in flight at most: --prefetch, or the automatic window */
  int consuming;     /* a consumer is registered on this connection */
  uint64_t consumer; /* the current consumer (mqproc__broker_consume) */
  int store_paused;  /* the store is unreachable: not consuming */
  /* private */
  int consume_prefetch; /* the consumer's prefetch */
  int starved;          /* a slot starved with the window full since the tick */
  uint64_t slot_timer;  /* wakes the oldest delivery waiting for a slot */
  uint64_t ping_timer;  /* while the store is away: is it back? */
} mqproc__window_t;

void mqproc__window_init(mqproc__window_t *w, const mqproc__config_t *cfg, mqproc__loop_t *loop,
                         mqproc__broker_t *broker, mqproc__store_t *store,
                         mqproc__inflight_t *inflight, const mqproc__window_ops_t *ops, void *ud);

/* Consumes only when connected, not stopping, with a reachable store and a free slot:
 * --prefetch bounds the jobs running at once, early-acked ones included (the broker's
 * prefetch only counts unacked deliveries). extra: early acks about to be sent. */
void mqproc__window_consume(mqproc__window_t *w, int extra);
/* The connection is new or gone: it has no consumer. */
void mqproc__window_no_consumer(mqproc__window_t *w);
/* The automatic window at a busy tick: shrunk unless a slot starved since the last one;
 * back at its start when idle (depth_auto only). */
void mqproc__window_tick(mqproc__window_t *w);

/* A run slot for a try (1), or none free (0: the delivery waits in SLOT_WAIT until
 * mqproc__delivery_slot_free); give_slot returns one (the oldest waiter gets it). */
int mqproc__window_take_slot(mqproc__window_t *w);
void mqproc__window_give_slot(mqproc__window_t *w);
/* A claim pass (--claim-ahead, or the automatic window's): a job may be claimed without a run
 * slot (1), or none is free (0); give_pass returns one (the oldest delivery waiting to claim
 * gets it). */
int mqproc__window_take_pass(mqproc__window_t *w);
void mqproc__window_give_pass(mqproc__window_t *w);

/* The store was found unreachable: stop consuming (from a timer: the caller may be a
 * delivery's own step), send the deliveries not claimed yet back, and ping the store every
 * second until it answers. */
void mqproc__window_store_down(mqproc__window_t *w);

#endif
