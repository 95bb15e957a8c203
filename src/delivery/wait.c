/* What the delivery machine's states share (delivery.c, out.c): store requests
 * and their answers, the waits on timers, the broker being away or blocking, the turn to
 * the dead letter. Each helper sets d->state and returns what a step returns (1: go on
 * with the new state, 0: wait for an event).
 */
#include "delivery/int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/log.h"
#include "base/util.h"

const char *const mqproc__delivery_state_names[] = {
#define DSTATE_NAME(name) #name,
    DELIVERY_STATES(DSTATE_NAME)
#undef DSTATE_NAME
};

/* ---- helpers ------------------------------------------------------------------------ */

int mqproc__delivery_has_callbacks(const mqproc__msg_t *m) {
  return m->callback_url != NULL || m->internal_callback_url != NULL;
}

/* The broker connection this delivery came on is gone (its tag is void). */
int mqproc__delivery_stale(const mqproc__delivery_t *d) {
  return d->epoch != mqproc__host_epoch(d->host);
}

static void on_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__delivery_t *d = ud;
  (void)loop;
  d->timer = 0;
  if (d->state == S_BACKOFF)
    d->state = S_START_TRY;
  else if (d->state == S_STORE_WAIT || d->state == S_BROKER_WAIT)
    d->state = d->resume;
  else if (d->state == S_DEFER)
    d->state = S_NACK;
  mqproc__delivery_advance(d);
}

int mqproc__delivery_wait_timer(mqproc__delivery_t *d, dstate_t state, int64_t ms) {
  d->state = state;
  d->timer = mqproc__loop_timer(d->host->loop, ms, on_timer, d);
  return 0;
}

/* ---- store requests ----------------------------------------------------------------- */

void mqproc__delivery_on_store(void *ud, int rc, const char *err) {
  mqproc__delivery_t *d = ud;
  d->store_rc = rc;
  snprintf(d->store_err, sizeof(d->store_err), "%s", err != NULL ? err : "");
  d->state = S_STORE_DONE;
  mqproc__delivery_advance(d);
}

int mqproc__delivery_store_call(mqproc__delivery_t *d, int submitted,
                                int (*then)(mqproc__delivery_t *)) {
  if (submitted != MQPROC_OK) { /* not even queued: try again later, like an outage */
    d->store_rc = MQPROC_ESTORE_QUERY;
    snprintf(d->store_err, sizeof(d->store_err), "cannot queue a store request: %s",
             mqproc_strerror(submitted));
    return mqproc__delivery_store_failed(d);
  }
  d->issued = d->state;
  d->then = then;
  d->state = S_STORE_CALL;
  return 0;
}

/* A store call failed: fenced writes end the attempt's ownership; a claim the store
 * refuses for its data (a value out of range, a constraint) dead-letters the message, as
 * no retry can change that; anything else parks the delivery until the store answers
 * again (nothing is acked meanwhile). */
int mqproc__delivery_store_failed(mqproc__delivery_t *d) {
  int rc = d->store_rc;
  const char *err = d->store_err;
  if (rc == MQPROC_ESTORE_FENCED) {
    MQPROC__WARN("job %s: %s", jid(d), err);
    d->state = S_FENCED;
    return 1;
  }
  if (rc == MQPROC_ESTORE_DATA && d->state == S_CLAIM) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "the job store refused this job: %s", err);
    return 1;
  }
  if (rc == MQPROC_ESTORE_DATA)
    MQPROC__ERROR("job %s: the job store refused a write in %s: %s", jid(d),
                  mqproc__delivery_state_names[d->state], err);
  MQPROC__WARN("job %s: job store unavailable in %s (%s); retrying in %d ms", jid(d),
               mqproc__delivery_state_names[d->state], err, d->store_backoff_ms);
  if (rc == MQPROC_ESTORE_CONNECT)
    mqproc__host_store_down(d->host);
  d->resume = d->state;
  mqproc__delivery_wait_timer(d, S_STORE_WAIT, d->store_backoff_ms);
  d->store_backoff_ms = d->store_backoff_ms * 2 > STORE_BACKOFF_MAX_MS ? STORE_BACKOFF_MAX_MS
                                                                       : d->store_backoff_ms * 2;
  return 0;
}

int mqproc__delivery_store_ok(mqproc__delivery_t *d, dstate_t next) {
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  d->state = next;
  return 1;
}

/* The broker is away while this delivery must publish (a result, a dead letter). A
 * delivery still unacked leaves it to its redelivered copy (the claim replays what was
 * not confirmed); an early-acked one has no copy coming, so it waits for the broker and
 * publishes itself (d->state is the step to retry). */
int mqproc__delivery_broker_down(mqproc__delivery_t *d, const char *why) {
  if (d->acked && !d->stop_requested) {
    MQPROC__WARN("job %s: broker away (%s); publishing once it is back", jid(d), why);
    d->resume = d->state;
    return mqproc__delivery_wait_timer(d, S_BROKER_WAIT, 1000);
  }
  MQPROC__WARN("job %s: not published (%s); %s", jid(d), why,
               d->acked ? "stopping: another server's outbox sweep will send it"
                        : "its redelivery will send it");
  d->unsent = d->acked; /* settle keeps the row's outbox marks for that sweep */
  if (d->state != S_DEAD_LETTER)
    d->state = S_CALLBACK;
  else /* nothing claimed (an invalid message): its redelivery brings it back */
    d->state = d->after_dead == S_ACK ? S_DONE : d->after_dead;
  return 1;
}

/* The broker blocks publishing (a memory or disk alarm; the connection stays): wait on the
 * loop, which goes on, until it unblocks (mqproc__delivery_broker_changed). When stopping,
 * an unacked delivery goes back to the queue, whose redelivery sends what was not sent;
 * an early-acked one is left to the outbox sweep as when the broker is away. */
int mqproc__delivery_broker_blocked(mqproc__delivery_t *d) {
  if (d->stop_requested && !d->acked) {
    MQPROC__WARN("job %s: stopping while the broker blocks publishing; requeued", jid(d));
    d->state = S_NACK;
    return 1;
  }
  if (d->stop_requested)
    return mqproc__delivery_broker_down(d, "the broker blocks publishing");
  MQPROC__INFO("job %s: waiting for the broker to unblock publishing (%s)", jid(d),
               mqproc__delivery_state_names[d->state]);
  d->resume = d->state;
  d->state = S_BROKER_WAIT;
  return 0;
}

void mqproc__delivery_to_dead_letter(mqproc__delivery_t *d, dstate_t then, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(d->reason, sizeof(d->reason), fmt, ap);
  va_end(ap);
  d->after_dead = then;
  d->state = S_DEAD_LETTER;
}
