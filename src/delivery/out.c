/* The states of a delivery that send an outcome: the dead letter, the result message,
 * the callbacks, and the settling ack or nack (or, for a delivery acked before, the
 * outbox mark's end). Part of the machine in delivery.c (its diagram is there); shared
 * helpers are in int.h.
 */
#include "delivery/int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/callback.h"
#include "codec/codec.h"
#include "base/log.h"
#include "base/util.h"

#define RESULT_NACK_RETRIES 5 /* a refused result is sent again after 1, 2, 4, 8, 16 s */

/* ---- dead letters ------------------------------------------------------------------- */

/* Where the logs say dead letters go: the dead-letter queue, or dir://'s P/failed/. */
static const char *dead_where(const mqproc__delivery_t *d) {
  return d->host->dead_where != NULL ? d->host->dead_where : d->host->dead_queue;
}

static int publish_dead_letter(mqproc__delivery_t *d) {
  char err[MQPROC_ERR_LEN];
  mqproc__broker_header_t h[4] = {{"x-mqproc-reason", d->reason},
                                  {"x-mqproc-worker", d->host->worker_id},
                                  {"x-mqproc-queue", d->host->processor},
                                  {"x-mqproc-job-id", d->job_id}};
  mqproc__publish_t p = {.exchange = "",
                         .routing_key = d->host->dead_queue,
                         .body = d->body,
                         .len = d->len,
                         .persistent = 1,
                         .mandatory = 1,
                         .headers = h,
                         .n_headers = d->job_id != NULL ? 4 : 3,
                         .dead_letter = 1};
  int rc;
  MQPROC__WARN("job %s: dead-lettered to %s: %s", jid(d), dead_where(d), d->reason);
  rc = mqproc__host_publish(d->host, d, &p, err);
  if (rc == MQPROC_EBROKER_BLOCKED)
    return mqproc__delivery_broker_blocked(d);
  if (rc == MQPROC_EINVAL) { /* cannot be encoded: the table has it; go on */
    MQPROC__ERROR("job %s: %s; the dead letter stays in mqproc_dead_letters only", jid(d), err);
    d->state = d->after_dead;
    return 1;
  }
  if (rc != MQPROC_OK)
    return mqproc__delivery_broker_down(d, err);
  d->state = S_DEAD_WAIT;
  return 0;
}

static int dead_recorded(mqproc__delivery_t *d) {
  if (d->store_rc == MQPROC_ESTORE_DATA) /* the broker still gets it, with the reason */
    MQPROC__ERROR("job %s: the dead-letter table refused the message: %s", jid(d), d->store_err);
  else if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  d->dead_recorded = 1;
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return publish_dead_letter(d);
}

int mqproc__delivery_step_dead_letter(mqproc__delivery_t *d) {
  mqproc__store_record_dead_t dead = {.processor = d->host->processor,
                                      .job_id = d->job_id,
                                      .body = d->body,
                                      .len = d->len,
                                      .size = d->size,
                                      .keep = (size_t)cfg(d)->max_message_bytes,
                                      .reason = d->reason,
                                      .worker_id = d->host->worker_id};
  if (d->after_dead == S_ACK &&
      mqproc__delivery_stale(d)) { /* nothing claimed: the broker redelivers */
    d->state = S_DONE;
    return 1;
  }
  if (d->dead_recorded)
    return publish_dead_letter(d);
  return mqproc__delivery_store_call(
      d, mqproc__store_record_dead(d->host->store, &dead, mqproc__delivery_on_store, d),
      dead_recorded);
}

/* ---- results -------------------------------------------------------------------------- */

int mqproc__delivery_step_publish(mqproc__delivery_t *d) {
  char err[MQPROC_ERR_LEN], attempt[16];
  const char *q = d->msg->result_queue_name;
  /* the attempt that recorded the outcome: a re-send of this result (outbox sweep, broker
   * reconnect) carries the same one, a second outcome of the job could not */
  mqproc__broker_header_t hdr = {"x-mqproc-attempt", attempt};
  mqproc__format_t fmt = cfg(d)->result_format == MQPROC__RESULT_AUTO   ? d->msg->format
                         : cfg(d)->result_format == MQPROC__RESULT_JSON ? MQPROC__FMT_JSON
                                                                        : MQPROC__FMT_YAML;
  mqproc__publish_t p = {.exchange = cfg(d)->exchange,
                         .routing_key = q,
                         .content_type =
                             fmt == MQPROC__FMT_JSON ? "application/json" : "application/yaml",
                         .message_id = d->job_id,
                         .persistent = cfg(d)->queue_durable,
                         .mandatory = 1,
                         .headers = &hdr,
                         .n_headers = 1};
  char *body = NULL;
  size_t len;
  int rc;
  if (!d->send_result || q == NULL) {
    d->state = S_CALLBACK;
    return 1;
  }
  if (d->host->broker_blocked) /* not even the declaration: it would wait for a reply */
    return mqproc__delivery_broker_blocked(d);
  if ((rc = mqproc__host_result_queue(d->host, q, err)) == MQPROC_EBROKER_CLOSED)
    return mqproc__delivery_broker_down(d, err);
  if (rc != MQPROC_OK) {
    MQPROC__ERROR("job %s: cannot declare result queue '%s': %s", jid(d), q, err);
    d->state = S_CALLBACK;
    return 1;
  }
  if (mqproc__result_encode(d->msg, d->outcome, fmt, &body, &len) != MQPROC_OK) {
    d->state = S_CALLBACK;
    return 1;
  }
  snprintf(attempt, sizeof(attempt), "%d", d->attempt);
  p.body = body;
  p.len = len;
  rc = mqproc__host_publish(d->host, d, &p, err);
  free(body);
  if (rc == MQPROC_EBROKER_BLOCKED)
    return mqproc__delivery_broker_blocked(d);
  if (rc == MQPROC_EINVAL) { /* cannot be encoded: recorded as the result's error */
    d->publish_status = rc;
    snprintf(d->publish_error, sizeof(d->publish_error), "%s", err);
    MQPROC__ERROR("job %s: %s", jid(d), err);
    d->state = S_PUBLISHED;
    return 1;
  }
  if (rc != MQPROC_OK)
    return mqproc__delivery_broker_down(d, err);
  d->publish_ms = mqproc__now_ms();
  d->state = S_PUBLISH_WAIT;
  return 0;
}

static int marked_published(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  return mqproc__delivery_store_ok(d, S_CALLBACK);
}

int mqproc__delivery_step_published(mqproc__delivery_t *d) {
  mqproc__store_mark_published_t mark = {
      .job_id = d->job_id, .error = d->publish_status == MQPROC_OK ? NULL : d->publish_error};
  if (d->publish_status == MQPROC_EBROKER_CLOSED) { /* unknown fate: send it (again) */
    d->state = S_PUBLISH;
    return mqproc__delivery_broker_down(d,
                                        "connection lost before the broker confirmed the result");
  }
  if (d->acked) { /* recorded with the outbox mark's end, in settle */
    d->state = S_CALLBACK;
    return 1;
  }
  return mqproc__delivery_store_call(
      d, mqproc__store_mark_published(d->host->store, &mark, mqproc__delivery_on_store, d),
      marked_published);
}

/* ---- callbacks ---------------------------------------------------------------------- */

static void callback_work(void *ud) {
  mqproc__delivery_t *d = ud;
  const char *urls[2] = {d->msg->callback_url, d->msg->internal_callback_url};
  mqproc__callback_opts_t o = {.timeout_ms = cfg(d)->callback_timeout_ms,
                               .retries = cfg(d)->callback_retries,
                               .backoff_ms = 500,
                               .allow = d->host->callback_allow,
                               .deny = d->host->callback_deny};
  char *body = NULL, err[MQPROC_ERR_LEN];
  size_t len, used = 0;
  d->callback_error[0] = '\0';
  if (mqproc__result_encode(d->msg, d->outcome, MQPROC__FMT_JSON, &body, &len) != MQPROC_OK) {
    snprintf(d->callback_error, sizeof(d->callback_error), "cannot encode the result");
    return;
  }
  for (int i = 0; i < 2; i++) {
    if (urls[i] == NULL || mqproc__callback_post(urls[i], body, &o, NULL, err) == MQPROC_OK)
      continue;
    used += (size_t)snprintf(d->callback_error + used, sizeof(d->callback_error) - used, "%s%s",
                             used > 0 ? "; " : "", err);
    if (used >= sizeof(d->callback_error))
      used = sizeof(d->callback_error) - 1;
  }
  free(body);
}

static void callback_after(mqproc__loop_t *loop, void *ud) {
  mqproc__delivery_t *d = ud;
  (void)loop;
  if (d->callback_error[0] != '\0')
    MQPROC__WARN("job %s: callback failed: %s", jid(d), d->callback_error);
  d->state = S_CALLBACK_RECORD;
  mqproc__delivery_advance(d);
}

int mqproc__delivery_step_callback(mqproc__delivery_t *d) {
  if (!d->send_callbacks || !mqproc__delivery_has_callbacks(d->msg)) {
    d->state = S_ACK;
    return 1;
  }
  if (mqproc__callback_init() != MQPROC_OK ||
      mqproc__loop_work(d->host->loop, callback_work, callback_after, d) != MQPROC_OK) {
    snprintf(d->callback_error, sizeof(d->callback_error), "cannot start the callback thread");
    d->state = S_CALLBACK_RECORD;
    return 1;
  }
  d->state = S_CALLBACK_WAIT;
  return 0;
}

static int callbacks_recorded(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  return mqproc__delivery_store_ok(d, S_ACK);
}

int mqproc__delivery_step_callback_record(mqproc__delivery_t *d) {
  mqproc__store_record_callbacks_t record = {
      .job_id = d->job_id, .error = d->callback_error[0] != '\0' ? d->callback_error : NULL};
  if (d->acked) { /* recorded with the outbox mark's end, in settle */
    d->state = S_ACK;
    return 1;
  }
  return mqproc__delivery_store_call(
      d, mqproc__store_record_callbacks(d->host->store, &record, mqproc__delivery_on_store, d),
      callbacks_recorded);
}

/* ---- settle ------------------------------------------------------------------------- */

static int outbox_ended(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  MQPROC__DEBUG("job %s: outbox done %lld ms after the result's publish", jid(d),
                (long long)(mqproc__now_ms() - d->publish_ms));
  d->state = S_DONE;
  return 1;
}

int mqproc__delivery_step_settle(mqproc__delivery_t *d, int ack) {
  char err[MQPROC_ERR_LEN];
  int rc;
  if (d->acked && d->outcome != NULL && !d->unsent) { /* out: the row needs us no more */
    int result_sent = d->send_result && d->msg->result_queue_name != NULL;
    mqproc__store_outbox_done_t out = {
        .job_id = d->job_id,
        .attempt = d->attempt,
        .result_sent = result_sent,
        .publish_error = result_sent && d->publish_status != MQPROC_OK ? d->publish_error : NULL,
        .callbacks_sent = d->send_callbacks && mqproc__delivery_has_callbacks(d->msg),
        .callback_error = d->callback_error[0] != '\0' ? d->callback_error : NULL};
    return mqproc__delivery_store_call(
        d, mqproc__store_outbox_done(d->host->store, &out, mqproc__delivery_on_store, d),
        outbox_ended);
  }
  d->state = S_DONE;
  if (d->acked) /* acked early; a requeued job gets a new message from the sweeper */
    return 1;
  rc = ack ? mqproc__host_ack(d->host, d, err) : mqproc__host_nack(d->host, d, err);
  d->settled = 1;
  if (rc != MQPROC_OK)
    MQPROC__WARN("job %s: cannot %s (%s); the broker will redeliver it", jid(d),
                 ack ? "ack" : "requeue", err);
  return 1;
}

/* ---- confirms ----------------------------------------------------------------------- */

void mqproc__delivery_confirmed(mqproc__delivery_t *d, int status) {
  if (d->state == S_DEAD_WAIT) {
    if (status == MQPROC_OK) {
      mqproc__metrics_inc(d->host->metrics, MQPROC__M_DEAD_LETTERED); /* once: on its confirm */
      d->state = d->after_dead;
      /* an early-acked job's row said "dead letter pending" for the outbox sweep; if
       * this write fails, outbox_done clears it, or a sweep sends a second copy */
      if (d->acked && d->outcome != NULL) {
        mqproc__store_dead_lettered_t dead = {.job_id = d->job_id, .attempt = d->attempt};
        mqproc__store_dead_lettered(d->host->store, &dead, NULL, NULL);
      }
    } else if (status == MQPROC_EBROKER_CLOSED) {
      d->state = S_DEAD_LETTER;
      if (!mqproc__delivery_broker_down(
              d, "connection lost before the broker confirmed the dead letter"))
        return;
    } else if (d->acked) { /* no message to keep: the outcome still goes out */
      MQPROC__ERROR("job %s: dead-letter queue %s refused the message (%s); it stays in "
                    "mqproc_dead_letters only",
                    jid(d), dead_where(d), mqproc_strerror(status));
      d->state = d->after_dead;
    } else { /* the dead-letter queue refused it: keep the message, try again later */
      MQPROC__ERROR("job %s: dead-letter queue %s refused the message (%s); requeueing later",
                    jid(d), dead_where(d), mqproc_strerror(status));
      mqproc__delivery_wait_timer(d, S_DEFER, 5000);
      return;
    }
  } else if (d->state == S_PUBLISH_WAIT && status == MQPROC_EBROKER_NACKED &&
             d->publish_nacks < RESULT_NACK_RETRIES && !d->stop_forced) {
    /* a refusal is often brief (a quorum queue electing its leader, a full queue being
     * drained): the result goes out again, 1 s, 2 s, ... later, before it is given up;
     * not when the server must stop now (the outbox keeps an early-acked job's result for
     * a sweep, an unacked delivery is redelivered) */
    int64_t ms = 1000LL << d->publish_nacks++;
    MQPROC__WARN("job %s: the broker refused the result message (nack %d of %d); sending it "
                 "again in %lld ms",
                 jid(d), d->publish_nacks, RESULT_NACK_RETRIES, (long long)ms);
    mqproc__delivery_wait_timer(d, S_PUBLISH, ms);
    return;
  } else if (d->state == S_PUBLISH_WAIT) {
    d->publish_status = status;
    if (status == MQPROC_EBROKER_UNROUTABLE)
      snprintf(d->publish_error, sizeof(d->publish_error),
               "result message unroutable: no queue bound to '%s' on exchange '%s'",
               d->msg->result_queue_name, cfg(d)->exchange);
    else if (status != MQPROC_OK)
      snprintf(d->publish_error, sizeof(d->publish_error), "result message not confirmed: %s",
               mqproc_strerror(status));
    if (status != MQPROC_OK)
      MQPROC__ERROR("job %s: %s", jid(d), d->publish_error);
    else
      MQPROC__DEBUG("job %s: result confirmed in %lld ms", jid(d),
                    (long long)(mqproc__now_ms() - d->publish_ms));
    d->state = S_PUBLISHED;
  } else {
    return;
  }
  mqproc__delivery_advance(d);
}
