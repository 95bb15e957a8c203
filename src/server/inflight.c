/* The deliveries a server has in flight (inflight.h). */
#include "server/inflight.h"

#include <stdlib.h>
#include <string.h>

#include "base/util.h"

#define EACH(f, d) for (mqproc__delivery_t *d = (f)->head; d != NULL; d = *mqproc__delivery_next(d))
/* (d may leave the list in the body: its successor is read first) */
#define EACH_SAFE(f, d, next)                                                                      \
  for (mqproc__delivery_t *d = (f)->head, *next;                                                   \
       d != NULL && (next = *mqproc__delivery_next(d), 1); d = next)

void mqproc__inflight_add(mqproc__inflight_t *f, mqproc__delivery_t *d) {
  *mqproc__delivery_next(d) = f->head;
  f->head = d;
  f->count++;
}

void mqproc__inflight_remove(mqproc__inflight_t *f, mqproc__delivery_t *d) {
  for (mqproc__delivery_t **pp = &f->head; *pp != NULL; pp = mqproc__delivery_next(*pp))
    if (*pp == d) {
      *pp = *mqproc__delivery_next(d);
      *mqproc__delivery_next(d) = NULL;
      f->count--;
      return;
    }
}

void mqproc__inflight_status(const mqproc__inflight_t *f, mqproc__inflight_status_t *st) {
  memset(st, 0, sizeof(*st));
  st->deliveries = f->count;
  st->running = f->running;
  st->ahead = f->ahead;
  EACH(f, d) {
    const char *id = mqproc__delivery_job_held(d);
    if (id == NULL)
      continue;
    st->held++;
    if (st->n_ids < MQPROC__INFLIGHT_IDS)
      st->ids[st->n_ids++] = id;
  }
}

mqproc__delivery_t *mqproc__inflight_find_job(const mqproc__inflight_t *f, const char *job_id,
                                              int attempt) {
  EACH(f, d) {
    if (mqproc__delivery_holds(d, job_id, attempt))
      return d;
  }
  return NULL;
}

/* ---- acting on every delivery ------------------------------------------------------- */

void mqproc__inflight_tick(mqproc__inflight_t *f) {
  EACH_SAFE(f, d, next) {
    mqproc__delivery_tick(d);
  }
}

void mqproc__inflight_broker_changed(mqproc__inflight_t *f) {
  EACH_SAFE(f, d, next) {
    mqproc__delivery_broker_changed(d);
  }
}

void mqproc__inflight_store_back(mqproc__inflight_t *f) {
  EACH_SAFE(f, d, next) {
    mqproc__delivery_store_back(d);
  }
}

void mqproc__inflight_stop(mqproc__inflight_t *f, int force) {
  EACH_SAFE(f, d, next) {
    mqproc__delivery_stop(d, force);
  }
}

void mqproc__inflight_requeue_unclaimed(mqproc__inflight_t *f) {
  EACH_SAFE(f, d, next) {
    if (mqproc__delivery_before_claim(d)) /* prefetched, not started: back to the queue */
      mqproc__delivery_stop(d, 0);
  }
}

/* ---- slots, passes and the window --------------------------------------------------- */

int mqproc__inflight_take_slot(mqproc__inflight_t *f, int limit) {
  if (f->running >= limit)
    return 0;
  f->running++;
  return 1;
}

void mqproc__inflight_give_slot(mqproc__inflight_t *f) {
  if (f->running > 0)
    f->running--;
}

int mqproc__inflight_take_pass(mqproc__inflight_t *f, int limit) {
  if (f->ahead >= limit)
    return 0;
  f->ahead++;
  return 1;
}

void mqproc__inflight_give_pass(mqproc__inflight_t *f) {
  if (f->ahead > 0)
    f->ahead--;
}

int mqproc__inflight_slots_held(const mqproc__inflight_t *f, uint64_t epoch, uint64_t consumer) {
  int held = 0;
  EACH(f, d) {
    held += mqproc__delivery_holds_slot(d, epoch, consumer);
  }
  return held;
}

mqproc__delivery_t *mqproc__inflight_oldest_waiting(const mqproc__inflight_t *f, int what) {
  mqproc__delivery_t *oldest = NULL;
  EACH(f, d) {
    if (mqproc__delivery_waits_for_slot(d) == what)
      oldest = d; /* the list is newest first */
  }
  return oldest;
}

int mqproc__inflight_ahead_waiting(const mqproc__inflight_t *f, int64_t now, int64_t ms,
                                   int *stuck) {
  int waiting = 0;
  *stuck = 0;
  EACH(f, d) {
    int64_t waited = mqproc__delivery_ahead_waited_ms(d, now);
    waiting += waited >= 0;
    *stuck |= waited > ms;
  }
  return waiting;
}

int mqproc__inflight_hand_back(mqproc__inflight_t *f, int64_t now, int keep) {
  int stuck, waiting = mqproc__inflight_ahead_waiting(f, now, 0, &stuck), n = 0;
  EACH_SAFE(f, d, next) {
    if (waiting <= keep)
      break;
    if (mqproc__delivery_ahead_waited_ms(d, now) >= 0 && mqproc__delivery_hand_back(d)) {
      waiting--;
      n++;
    }
  }
  return n;
}

/* ---- the ack batch ------------------------------------------------------------------ */

int mqproc__inflight_queue_ack(mqproc__inflight_t *f, mqproc__delivery_t *d, uint64_t tag) {
  if (f->n_acks == f->cap_acks) {
    size_t cap = f->cap_acks > 0 ? 2 * f->cap_acks : 64;
    uint64_t *grown = mqproc__realloc(f->acks, cap * sizeof(*grown));
    if (grown == NULL)
      return -1;
    f->acks = grown;
    f->cap_acks = cap;
  }
  f->acks[f->n_acks++] = tag;
  mqproc__delivery_settled(d);
  return 0;
}

static int cmp_tag(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void mqproc__inflight_flush_acks(mqproc__inflight_t *f, mqproc__broker_t *broker) {
  uint64_t epoch, low = UINT64_MAX;
  size_t below = 0;
  if (f->n_acks == 0)
    return;
  if (broker == NULL) {
    f->n_acks = 0; /* the connection is gone: the broker redelivers, the claim acks */
    return;
  }
  epoch = mqproc__broker_epoch(broker);
  EACH(f, d) {
    uint64_t e = 0, tag = 0;
    if (!mqproc__delivery_tag(d, &e, &tag) && e == epoch && tag < low)
      low = tag; /* unsettled */
  }
  qsort(f->acks, f->n_acks, sizeof(uint64_t), cmp_tag);
  while (below < f->n_acks && f->acks[below] < low)
    below++;
  if (below > 0) /* the broker acks all of ours up to it: each waits here or was settled */
    mqproc__broker_ack(broker, epoch, f->acks[below - 1], below > 1, NULL);
  for (size_t i = below; i < f->n_acks; i++)
    mqproc__broker_ack(broker, epoch, f->acks[i], 0, NULL);
  f->n_acks = 0;
}

void mqproc__inflight_free(mqproc__inflight_t *f) {
  while (f->head != NULL) {
    mqproc__delivery_t *d = f->head;
    f->head = *mqproc__delivery_next(d);
    mqproc__delivery_free(d);
  }
  f->count = 0;
  free(f->acks);
  f->acks = NULL;
  f->n_acks = f->cap_acks = 0;
}
