/* The deliveries a server has in flight, and what they hold of it: the --concurrency run
 * slots, the claim passes (--claim-ahead, or the automatic window's), and the acks that
 * wait for the next flush. This module alone walks the list (newest first, linked through
 * the deliveries: delivery.h's mqproc__delivery_next); the rest of the server asks it to
 * act on every delivery, to find one, or for a status snapshot (the workers row, /metrics,
 * systemd's STATUS read that, never the list).
 */
#ifndef MQPROC_SERVER_INFLIGHT_H
#define MQPROC_SERVER_INFLIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "broker/broker.h"
#include "delivery/delivery.h"

typedef struct mqproc__inflight {
  mqproc__delivery_t *head; /* newest first */
  int count;                /* deliveries in the list */
  int running;              /* run slots taken */
  int ahead;                /* claim passes taken */
  uint64_t *acks;           /* tags to ack at the next flush */
  size_t n_acks, cap_acks;
} mqproc__inflight_t;

#define MQPROC__INFLIGHT_IDS 32 /* job ids a status snapshot lists at most */

/* What the deliveries in flight hold now, for the workers row, /metrics and systemd. The
 * ids point into the deliveries: valid until the loop runs on. */
typedef struct mqproc__inflight_status {
  int deliveries;                        /* in flight */
  int held;                              /* jobs held: claimed, no outcome yet */
  int running;                           /* run slots taken */
  int ahead;                             /* claim passes taken */
  const char *ids[MQPROC__INFLIGHT_IDS]; /* the newest jobs held */
  size_t n_ids;
} mqproc__inflight_status_t;

void mqproc__inflight_add(mqproc__inflight_t *f, mqproc__delivery_t *d);
/* Takes d out of the list (its end: the server frees it, or counts it abandoned). */
void mqproc__inflight_remove(mqproc__inflight_t *f, mqproc__delivery_t *d);
static inline int mqproc__inflight_empty(const mqproc__inflight_t *f) {
  return f->head == NULL;
}
void mqproc__inflight_status(const mqproc__inflight_t *f, mqproc__inflight_status_t *st);
/* The delivery running attempt `attempt` of job_id, or NULL. */
mqproc__delivery_t *mqproc__inflight_find_job(const mqproc__inflight_t *f, const char *job_id,
                                              int attempt);

/* ---- acting on every delivery (each may end, and leave the list, meanwhile) ---------- */
void mqproc__inflight_tick(mqproc__inflight_t *f);           /* leases, once a second */
void mqproc__inflight_broker_changed(mqproc__inflight_t *f); /* publishers try again */
void mqproc__inflight_store_back(mqproc__inflight_t *f);     /* parked writes go on */
/* Shutdown: requeue what has not started; with force, stop running tries too. */
void mqproc__inflight_stop(mqproc__inflight_t *f, int force);
/* Deliveries not claimed yet go back to the queue (a pause, a store outage). */
void mqproc__inflight_requeue_unclaimed(mqproc__inflight_t *f);

/* ---- slots, passes and the window ---------------------------------------------------- */
/* A run slot while fewer than limit are taken (1), else 0; give_slot returns one. */
int mqproc__inflight_take_slot(mqproc__inflight_t *f, int limit);
void mqproc__inflight_give_slot(mqproc__inflight_t *f);
int mqproc__inflight_take_pass(mqproc__inflight_t *f, int limit);
void mqproc__inflight_give_pass(mqproc__inflight_t *f);
/* Slots of the consumer's prefetch held by deliveries it does not count itself (acked
 * early, of a lost connection, of an older consumer; consumer 0: every delivery). */
int mqproc__inflight_slots_held(const mqproc__inflight_t *f, uint64_t epoch, uint64_t consumer);
/* The oldest delivery waiting in SLOT_WAIT for `what` (delivery.h), or NULL. */
mqproc__delivery_t *mqproc__inflight_oldest_waiting(const mqproc__inflight_t *f, int what);
/* Deliveries holding a claim made ahead that wait for a run slot; *stuck: one of them has
 * waited longer than ms. */
int mqproc__inflight_ahead_waiting(const mqproc__inflight_t *f, int64_t now, int64_t ms,
                                   int *stuck);
/* Hands back jobs claimed ahead and waiting (the newest first) until keep are left;
 * returns how many went back. */
int mqproc__inflight_hand_back(mqproc__inflight_t *f, int64_t now, int keep);

/* ---- the ack batch ------------------------------------------------------------------- */
/* Queues d's tag for the next flush (d is settled); -1 when there is no room (ack it now). */
int mqproc__inflight_queue_ack(mqproc__inflight_t *f, mqproc__delivery_t *d, uint64_t tag);
/* Acks what waits: one multiple ack up to the highest waiting tag below every tag still
 * being worked on, single acks for the others; broker NULL (down): dropped (the broker
 * redelivers, the claim acks). */
void mqproc__inflight_flush_acks(mqproc__inflight_t *f, mqproc__broker_t *broker);

/* Frees every delivery still in the list (abandoned ones too: their threads are gone) and
 * the ack batch. */
void mqproc__inflight_free(mqproc__inflight_t *f);

#endif
