/* The control surface of a delivery: what acts on one from outside its state machine
 * (delivery.c, where the states and the processing protocol are). The server creates
 * deliveries (mqproc__delivery_new, _new_outbox) and starts them, renews the leases of
 * the jobs they hold (_tick), tells them the store is back (_store_back), stops them at
 * shutdown (_stop), asks about them (the accessors) and frees them. The --ack-after
 * early ack of a long-running job is a timer armed at the claim and handled here.
 *
 * These functions change a delivery's state only where it waits, then let the machine
 * run on (mqproc__delivery_advance); the struct and states are in int.h.
 */
#include "delivery/int.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "base/log.h"
#include "delivery/policy.h"
#include "base/util.h"

/* ---- --ack-after -------------------------------------------------------------------- */

/* --ack-after: a job still running this long gets its delivery acked, after the row
 * records that the broker no longer holds it (so a dead holder's job is republished by
 * a sweeper instead of waiting for a redelivery that will not come). Keeps long jobs
 * clear of RabbitMQ's consumer_timeout. */
static void on_ack_timer(mqproc__loop_t *loop, void *ud);

/* The row says the delivery is acked early: ack it. The machine waited meanwhile (its
 * steps that write the job's row or settle the delivery do not run while d->acking). */
static void early_ack_recorded(void *ud, int rc, const char *err) {
  mqproc__delivery_t *d = ud;
  char why[MQPROC_ERR_LEN];
  d->acking = 0;
  if (rc == MQPROC_OK) {
    /* this job keeps its slot after the ack: first make the broker push no more than the
     * free slots allow, then ack */
    mqproc__host_update_consuming(d->host, 1);
    rc = mqproc__host_ack(d->host, d, why);
    err = why;
  }
  d->acked = rc == MQPROC_OK;
  mqproc__host_update_consuming(d->host, 0);
  if (rc == MQPROC_OK) {
    MQPROC__INFO("job %s: still running after %d s; delivery acked, the job table carries it",
                 jid(d), cfg(d)->ack_after_s);
  } else {
    MQPROC__WARN("job %s: early ack postponed: %s", jid(d), err);
    if (rc != MQPROC_ESTORE_FENCED && d->outcome == NULL)
      d->ack_timer = mqproc__loop_timer(d->host->loop, 5000, on_ack_timer, d);
  }
  mqproc__delivery_advance(d); /* a step that waited for this goes on */
}

static void on_ack_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__delivery_t *d = ud;
  mqproc__store_ack_early_t ack = {.job_id = d->job_id, .attempt = d->attempt};
  (void)loop;
  d->ack_timer = 0;
  if (d->acked || d->fenced || d->acking ||
      (d->state != S_RUNNING && d->state != S_BACKOFF && d->state != S_SLOT_WAIT))
    return;
  if (d->host->broker_blocked) { /* it could not lower the consumer's prefetch first */
    d->ack_timer = mqproc__loop_timer(d->host->loop, 5000, on_ack_timer, d);
    return;
  }
  if (mqproc__store_ack_early(d->host->store, &ack, early_ack_recorded, d) == MQPROC_OK)
    d->acking = 1;
  else
    d->ack_timer = mqproc__loop_timer(d->host->loop, 5000, on_ack_timer, d);
}

void mqproc__delivery_arm_ack_timer(mqproc__delivery_t *d) {
  if (cfg(d)->ack_after_s > 0)
    d->ack_timer = mqproc__loop_timer(d->host->loop, cfg(d)->ack_after_s * 1000LL, on_ack_timer, d);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

mqproc__delivery_t *mqproc__delivery_new(mqproc__delivery_host_t *host,
                                         const mqproc__broker_msg_t *m) {
  mqproc__delivery_t *d = mqproc__calloc(1, sizeof(*d));
  /* (an empty message has no bytes, and may have no pointer: a dead letter all the same) */
  if (d == NULL || (d->body = mqproc__malloc(m->len + 1)) == NULL) {
    free(d);
    return NULL;
  }
  if (m->len > 0)
    memcpy(d->body, m->body, m->len);
  d->len = m->len;
  d->size = m->size > m->len ? m->size : 0;
  d->priority = m->priority;
  if (m->headers_json != NULL && (d->headers_json = mqproc__strdup(m->headers_json)) == NULL) {
    free(d->body);
    free(d);
    return NULL;
  }
  d->host = host;
  d->epoch = m->epoch;
  d->tag = m->tag;
  d->consumer = m->consumer;
  d->redelivered = m->redelivered;
  d->delivery_count = m->delivery_count;
  if (m->redelivered)
    mqproc__metrics_inc(host->metrics, MQPROC__M_REDELIVERED);
  d->state = S_DECODE;
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return d;
}

mqproc__delivery_t *mqproc__delivery_new_outbox(mqproc__delivery_host_t *host,
                                                const mqproc__outbox_row_t *r) {
  mqproc__delivery_t *d = mqproc__calloc(1, sizeof(*d));
  char err[MQPROC_ERR_LEN];
  mqproc__format_t fmt;
  json_t *doc;
  /* the original bytes decode as they did for the holder; the jsonb of older rows may not
   * (it turns 1e20 into an integer too big for jansson) */
  const char *text = r->body != NULL ? r->body : r->request_json;
  size_t len = r->body != NULL ? r->body_len : strlen(r->request_json);
  if (d == NULL)
    return NULL;
  if (mqproc__codec_parse(text, len, &doc, &fmt, err) != MQPROC_OK ||
      mqproc__msg_validate(doc, fmt, NULL, &d->msg, err) != MQPROC_OK ||
      (d->job_id = mqproc__strdup(r->job_id)) == NULL) {
    MQPROC__ERROR("job %s: cannot send its outcome: stored request unusable (%s)", r->job_id, err);
    mqproc__delivery_free(d);
    return NULL;
  }
  d->msg->format = mqproc__format_parse(r->format);
  d->host = host;
  d->attempt = r->attempt;
  d->outcome = mqproc__job_state_name(mqproc__job_state_parse(r->state)); /* a final state */
  d->send_result = !r->result_published;
  d->send_callbacks = !r->callbacks_done;
  d->acked = 1; /* no broker delivery: the row carries the job */
  d->last_renew_ms = mqproc__now_ms();
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  d->state = S_PUBLISH;
  if (r->dead_letter_pending && strcmp(d->outcome, "FAILED") == 0) {
    /* its dead letter first: the original body, or the stored request encoded again */
    if (r->body != NULL) {
      if ((d->body = mqproc__malloc(r->body_len)) == NULL) {
        mqproc__delivery_free(d);
        return NULL;
      }
      memcpy(d->body, r->body, r->body_len);
      d->len = r->body_len;
    } else if (mqproc__doc_encode(d->msg->doc, d->msg->format, &d->body, &d->len, err) !=
               MQPROC_OK) {
      MQPROC__ERROR("job %s: cannot send its outcome: %s", r->job_id, err);
      mqproc__delivery_free(d);
      return NULL;
    }
    snprintf(d->reason, sizeof(d->reason), "job FAILED: %s (sent by %s: the holder died first)",
             r->last_error[0] != '\0' ? r->last_error : "no error recorded", host->worker_id);
    d->after_dead = S_PUBLISH;
    d->state = S_DEAD_LETTER;
  }
  mqproc__metrics_inc(host->metrics, MQPROC__M_OUTBOX_RESENT);
  MQPROC__INFO("job %s: its holder died before sending its outcome (%s); sending it", d->job_id,
               d->outcome);
  return d;
}

void mqproc__delivery_start(mqproc__delivery_t *d) {
  mqproc__delivery_advance(d);
}

static void renewed(void *ud, int rc, const char *err) {
  mqproc__delivery_t *d = ud;
  d->renewing = 0;
  if (rc == MQPROC_OK) {
    d->last_renew_ms = d->renew_sent_ms;
  } else if (rc == MQPROC_ESTORE_FENCED) {
    MQPROC__ERROR("job %s: lease of attempt %d lost to a newer attempt; stopping this try", jid(d),
                  d->attempt);
    d->fenced = 1;
    if (d->run != NULL)
      mqproc__runner_kill(d->host->runner, d->run, SIGKILL);
    else if (d->state == S_BACKOFF) {
      mqproc__loop_timer_cancel(d->host->loop, d->timer);
      d->state = S_FENCED;
      mqproc__delivery_advance(d);
    }
  } else {
    MQPROC__WARN("job %s: lease renewal failed: %s", jid(d), err);
  }
}

void mqproc__delivery_tick(mqproc__delivery_t *d) {
  int64_t now = mqproc__now_ms();
  int holds = d->state == S_RUNNING || d->state == S_BACKOFF ||
              (d->state == S_SLOT_WAIT && d->resume == S_START_TRY) ||
              (d->acked && d->outcome != NULL);
  mqproc__store_renew_t renew = {
      .job_id = d->job_id, .attempt = d->attempt, .lease_ms = cfg(d)->lease_s * 1000};
  if (!holds || d->fenced || d->renewing || now - d->last_renew_ms < cfg(d)->lease_s * 1000 / 3)
    return;
  d->renew_sent_ms = now;
  d->renewing = mqproc__store_renew(d->host->store, &renew, renewed, d) == MQPROC_OK;
}

void mqproc__delivery_stop(mqproc__delivery_t *d, int force) {
  d->stop_requested = 1;
  d->stop_forced |= force;
  switch (d->state) {
  case S_DEFER:
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
    d->state = S_NACK;
    mqproc__delivery_advance(d);
    break;
  case S_STORE_WAIT:
    if (d->resume == S_CLAIM || d->resume == S_DECODE) {
      mqproc__loop_timer_cancel(d->host->loop, d->timer);
      d->state = S_NACK;
      mqproc__delivery_advance(d);
    }
    break;
  case S_BACKOFF:
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
    d->state = S_RELEASE;
    mqproc__delivery_advance(d);
    break;
  case S_SLOT_WAIT: /* not claimed yet: back to the queue; claimed: released */
    d->state = d->resume == S_CLAIM ? S_NACK : S_RELEASE;
    mqproc__delivery_advance(d);
    break;
  case S_DEAD_WAIT:
  case S_PUBLISH_WAIT:
    /* A confirm normally comes at once; the broker withholds it only while it blocks
     * publishing (the publish that made it block). Past the grace, publish again: now
     * refused at once, that requeues an unacked delivery (whose redelivery sends it;
     * perhaps twice: at least once) and leaves an early-acked one to the outbox. */
    if (!force || !d->host->broker_blocked)
      break;
    mqproc__host_forget_publish(d->host, d);
    d->state = d->state == S_DEAD_WAIT ? S_DEAD_LETTER : S_PUBLISH;
    mqproc__delivery_advance(d);
    break;
  case S_PUBLISH: /* a refused result waiting to be sent again: send it now, once more */
    if (!force || d->timer == 0)
      break;
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
    d->timer = 0;
    mqproc__delivery_advance(d);
    break;
  case S_BROKER_WAIT: /* an early-acked job's result waits for the broker */
    if (!force)
      break;
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
    d->timer = 0;
    d->state = d->resume;
    mqproc__delivery_advance(
        d); /* stop_requested: mqproc__delivery_broker_down() gives up waiting */
    break;
  case S_RUNNING:
    if (!force || d->run == NULL)
      break;
    if (mqproc__runner_killable(d->host->runner)) {
      mqproc__runner_kill(d->host->runner, d->run, SIGKILL); /* ends as RELEASE */
      break;
    }
    /* A thread cannot be stopped: release the job now and leave the try running; the
     * server exits without waiting for it (mqproc__server_delivery_done). */
    MQPROC__WARN("job %s: the processing function is still running; releasing its job", jid(d));
    d->abandoned = 1;
    mqproc__loop_timer_cancel(d->host->loop, d->ack_timer);
    d->ack_timer = 0;
    d->state = S_RELEASE;
    mqproc__delivery_advance(d);
    break;
  default:
    break; /* publishing, recording, calling back: let it finish */
  }
}

void mqproc__delivery_free(mqproc__delivery_t *d) {
  if (d == NULL)
    return;
  if (d->host != NULL)
    mqproc__store_forget(d->host->store, d); /* no answer may reach it any more */
  if (d->timer != 0)
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
  if (d->ack_timer != 0)
    mqproc__loop_timer_cancel(d->host->loop, d->ack_timer);
  mqproc__msg_free(d->msg);
  free(d->request_json);
  free(d->request_shown);
  free(d->headers_json);
  free(d->mets_path);
  free(d->mets_server_url);
  free(d->job_id);
  free(d->body);
  free(d->log_text);
  free(d);
}

mqproc__delivery_t **mqproc__delivery_next(mqproc__delivery_t *d) {
  return &d->next;
}

int mqproc__delivery_holds(const mqproc__delivery_t *d, const char *job_id, int attempt) {
  return d->job_id != NULL && d->attempt == attempt && d->outcome == NULL && !d->fenced &&
         strcmp(d->job_id, job_id) == 0 &&
         (d->state == S_START_TRY || d->state == S_RUNNING || d->state == S_END_TRY ||
          d->state == S_BACKOFF || d->state == S_STORE_WAIT ||
          (d->state == S_SLOT_WAIT && d->resume == S_START_TRY));
}

int mqproc__delivery_abandoned(const mqproc__delivery_t *d) {
  return d->abandoned;
}

int mqproc__delivery_holds_slot(const mqproc__delivery_t *d, uint64_t epoch, uint64_t consumer) {
  if (d->outcome != NULL) /* the job ended: only its outcome is being sent */
    return 0;
  return d->acked || d->epoch != epoch || d->consumer != consumer;
}

int mqproc__delivery_tag(const mqproc__delivery_t *d, uint64_t *epoch, uint64_t *tag) {
  *epoch = d->epoch;
  *tag = d->tag;
  return d->settled || d->tag == 0;
}

void mqproc__delivery_settled(mqproc__delivery_t *d) {
  d->settled = 1;
}

int mqproc__delivery_waits_for_slot(const mqproc__delivery_t *d) {
  return d->state != S_SLOT_WAIT ? 0 : d->resume == S_CLAIM ? 1 : 2;
}

/* Claimed on a pass, its first try opened by the claim and never run, waiting for a slot. */
static int claimed_ahead(const mqproc__delivery_t *d) {
  return d->state == S_SLOT_WAIT && d->resume == S_START_TRY && d->first_try_open &&
         !d->stop_requested && !d->cancel_requested && !d->acked;
}

int64_t mqproc__delivery_ahead_waited_ms(const mqproc__delivery_t *d, int64_t now) {
  return claimed_ahead(d) ? now - d->slot_wait_ms : -1;
}

int mqproc__delivery_hand_back(mqproc__delivery_t *d) {
  if (!claimed_ahead(d))
    return 0;
  d->handed_back = 1;
  d->state = S_RELEASE; /* then NACK: the message goes back to the queue */
  mqproc__delivery_advance(d);
  return 1;
}

void mqproc__delivery_slot_free(mqproc__delivery_t *d) {
  if (d->state != S_SLOT_WAIT)
    return;
  d->state = d->resume; /* CLAIM or START_TRY (a retry) */
  mqproc__delivery_advance(d);
}

void mqproc__delivery_broker_changed(mqproc__delivery_t *d) {
  if (d->state == S_SLOT_WAIT && d->resume == S_CLAIM && mqproc__delivery_stale(d)) {
    d->state = S_DONE; /* not claimed, and its tag is void: the broker redelivers it */
    mqproc__delivery_advance(d);
    return;
  }
  if (d->state != S_BROKER_WAIT)
    return;
  mqproc__loop_timer_cancel(d->host->loop, d->timer);
  d->timer = 0;
  d->state = d->resume;
  mqproc__delivery_advance(d);
}

void mqproc__delivery_store_back(mqproc__delivery_t *d) {
  d->last_renew_ms = 0; /* renew at the next tick */
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  if (d->state != S_STORE_WAIT)
    return;
  mqproc__loop_timer_cancel(d->host->loop, d->timer);
  d->timer = 0;
  d->state = d->resume;
  mqproc__delivery_advance(d);
}

int mqproc__delivery_before_claim(const mqproc__delivery_t *d) {
  return d->state == S_DECODE || d->state == S_CLAIM ||
         ((d->state == S_STORE_WAIT || d->state == S_SLOT_WAIT) &&
          (d->resume == S_CLAIM || d->resume == S_DECODE));
}

void mqproc__delivery_cancel(mqproc__delivery_t *d) {
  if (d->cancel_requested || d->outcome != NULL || d->fenced)
    return;
  d->cancel_requested = 1;
  MQPROC__WARN("job %s: cancelled by an operator; stopping it", jid(d));
  switch (d->state) {
  case S_RUNNING: /* a process group is killed; a function is asked to return */
    if (d->run != NULL)
      mqproc__runner_kill(d->host->runner, d->run, SIGKILL);
    break; /* its end leads to CANCEL (step_end_try) */
  case S_BACKOFF:
    mqproc__loop_timer_cancel(d->host->loop, d->timer);
    d->timer = 0;
    d->state = S_CANCEL;
    mqproc__delivery_advance(d);
    break;
  case S_SLOT_WAIT:
    if (d->resume == S_START_TRY) { /* a retry waiting for a slot */
      d->state = S_CANCEL;
      mqproc__delivery_advance(d);
    }
    break;
  default:
    break; /* START_TRY and END_TRY look at cancel_requested */
  }
}

const char *mqproc__delivery_job_held(const mqproc__delivery_t *d) {
  return d->job_id != NULL && d->attempt > 0 && d->outcome == NULL && !d->fenced ? d->job_id : NULL;
}
