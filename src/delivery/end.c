/* The states of a delivery that record how its attempt ended: SUCCEED and CANCEL (the
 * outcome and the outbox mark in one write, then the ack), FAIL (requeue or FAILED),
 * GIVE_UP (out of attempts), RELEASE (shutdown) and FENCED (a newer attempt owns the job).
 * Part of the machine in delivery.c (its diagram is there); what follows them, sending the
 * outcome, is in out.c.
 */
#include "delivery/int.h"

#include <stdio.h>
#include <stdlib.h>

#include "codec/codec.h"
#include "base/log.h"
#include "base/util.h"

/* How the last try ended, as the store records it. */
mqproc__try_end_t mqproc__delivery_try_end(const mqproc__delivery_t *d) {
  return (mqproc__try_end_t){.ok = d->last.status == MQPROC_OK,
                             .exit_code = d->last.exit_code,
                             .term_signal = d->last.term_signal,
                             .duration_ms = d->last.duration_ms,
                             .error = d->last.status == MQPROC_OK ? NULL : d->last.error};
}

const char *mqproc__delivery_log_path(const mqproc__delivery_t *d) {
  return d->log_made ? d->log_path : NULL;
}

/* Whether the outcome still has to reach a result queue or a callback (a result the
 * success's write inserted has). */
static int outcome_to_send(const mqproc__delivery_t *d) {
  return (d->msg->result_queue_name != NULL && !d->result_in_write) ||
         mqproc__delivery_has_callbacks(d->msg);
}

/* SUCCESS or CANCELLED is recorded (with the outbox marks when something is to be sent):
 * ack now, then send the outcome. */
static int ended(mqproc__delivery_t *d, const char *outcome) {
  char err[MQPROC_ERR_LEN];
  d->outcome = outcome;
  d->send_result = d->send_callbacks = 1;
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  mqproc__host_update_consuming(d->host, 0); /* a finished job holds no slot */
  if (d->result_in_write)
    d->send_result = 0; /* in the queue since the success committed */
  if (!d->acked) {
    /* The row records the outcome and, when there is one to send, carries it (outbox):
     * the delivery is acked now, before the result's confirm (where the success's write
     * acked it already, this ack settles nothing at the queue: it only ends the delivery's
     * part in the server's window). */
    if (mqproc__host_ack(d->host, d, err) != MQPROC_OK)
      MQPROC__WARN("job %s: cannot ack (%s); its redelivery will find it %s", jid(d), err, outcome);
    d->acked = 1;
    if (!outcome_to_send(d)) { /* nothing to send, no outbox marks to clear */
      d->state = S_DONE;
      return 1;
    }
  }
  d->state = S_PUBLISH; /* settle clears the outbox marks once it is all out */
  return 1;
}

static int succeeded(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  /* the job's one INFO line (its claim and start are DEBUG lines) */
  MQPROC__INFO("job %s: SUCCESS in %lld ms (attempt %d try %d; %d tr%s in this attempt)", jid(d),
               (long long)d->last.duration_ms, d->attempt, d->try_no, d->tries_in_attempt,
               d->tries_in_attempt == 1 ? "y" : "ies");
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_SUCCEEDED);
  mqproc__metrics_observe(d->host->metrics, &d->host->metrics->run_time,
                          (double)d->last.duration_ms / 1000.0);
  return ended(d, "SUCCESS");
}

static int cancelled(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_CANCELLED);
  MQPROC__WARN("job %s: CANCELLED by an operator (attempt %d try %d)", jid(d), d->attempt,
               d->try_no);
  return ended(d, "CANCELLED");
}

/* How the try that ended the job ended, the outbox marks (SUCCESS or CANCELLED) and where
 * its output is: its text when no file was made, or the file. */
static mqproc__store_succeed_t job_end(const mqproc__delivery_t *d) {
  return (mqproc__store_succeed_t){.job_id = d->job_id,
                                   .attempt = d->attempt,
                                   .try_no = d->try_no,
                                   .end = mqproc__delivery_try_end(d),
                                   .outbox = outcome_to_send(d),
                                   .result =
                                       d->msg->result_queue_name != NULL && !d->result_in_write,
                                   .callbacks = mqproc__delivery_has_callbacks(d->msg),
                                   .lease_ms = cfg(d)->lease_s * 1000,
                                   .log_text = d->log_text,
                                   .log_path = mqproc__delivery_log_path(d)};
}

/* The operator's cancel reached the job between or at the end of its tries. */
int mqproc__delivery_step_cancel(mqproc__delivery_t *d) {
  mqproc__store_cancelled_t end = job_end(d);
  return mqproc__delivery_store_call(
      d, mqproc__store_cancelled(d->host->store, &end, mqproc__delivery_on_store, d), cancelled);
}

/* Where the queue is a table of the job store (store/queue.h), the success's write acks
 * the message and inserts the result too: one commit for the three, no outbox mark for
 * the result (issue 31). The message's fencing fields are the queue's from the first time
 * (a success written again after an outage acks the same delivery); the result is encoded
 * as step_publish would send it. Any other queue: the usual ack and publish follow. */
static void in_write(mqproc__delivery_t *d, mqproc__store_succeed_t *end, char **body) {
  mqproc__format_t fmt = cfg(d)->result_format == MQPROC__RESULT_AUTO   ? d->msg->format
                         : cfg(d)->result_format == MQPROC__RESULT_JSON ? MQPROC__FMT_JSON
                                                                        : MQPROC__FMT_YAML;
  size_t len;
  *body = NULL;
  if (!d->ack_in_write && !d->acked && !d->settled &&
      mqproc__host_ack_in_store(d->host, d, &d->in_write) == MQPROC_OK)
    d->ack_in_write = 1;
  if (!d->ack_in_write)
    return;
  end->q_consumer = d->in_write.consumer;
  end->q_id = d->in_write.id;
  end->q_deliveries = d->in_write.deliveries;
  d->result_in_write = 0;
  if (d->msg->result_queue_name == NULL ||
      mqproc__result_encode(d->msg, "SUCCESS", fmt, body, &len) != MQPROC_OK)
    return; /* (one that cannot be encoded is left to step_publish, which says why) */
  snprintf(d->in_write_headers, sizeof(d->in_write_headers), "{\"x-mqproc-attempt\": \"%d\"}",
           d->attempt);
  end->result_queue = d->msg->result_queue_name;
  end->result_body = *body;
  end->result_len = len;
  end->result_content_type = fmt == MQPROC__FMT_JSON ? "application/json" : "application/yaml";
  end->result_headers_json = d->in_write_headers;
  d->result_in_write = 1;
  end->outbox = outcome_to_send(d); /* the result is in the write: only callbacks left */
  end->result = 0;
}

int mqproc__delivery_step_succeed(mqproc__delivery_t *d) {
  mqproc__store_succeed_t end = job_end(d);
  char *body;
  int rc;
  in_write(d, &end, &body);
  rc = mqproc__store_succeed(d->host->store, &end, mqproc__delivery_on_store, d);
  free(body); /* (submit copied it) */
  return mqproc__delivery_store_call(d, rc, succeeded);
}

static int failed(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  if (d->requeued) {
    mqproc__metrics_inc(d->host->metrics, MQPROC__M_REQUEUED);
    MQPROC__WARN("job %s: attempt %d failed after %d tries; requeued", jid(d), d->attempt,
                 d->tries_in_attempt);
    return mqproc__delivery_store_ok(d, S_NACK);
  }
  d->outcome = "FAILED";
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_FAILED);
  d->send_result = d->send_callbacks = 1;
  if (d->final_failure) {
    MQPROC__ERROR("job %s: FAILED for good: %s (--final-exit-code: no retry, no requeue)", jid(d),
                  d->last.error);
    mqproc__delivery_to_dead_letter(d, S_PUBLISH, "job FAILED for good (final exit code %d): %s",
                                    d->last.exit_code, d->last.error);
  } else {
    MQPROC__ERROR("job %s: FAILED after attempt %d (%d tries in it): %s", jid(d), d->attempt,
                  d->tries_in_attempt, d->last.error);
    mqproc__delivery_to_dead_letter(d, S_PUBLISH, "job FAILED after %d attempts: %s", d->attempt,
                                    d->last.error);
  }
  mqproc__host_job_failed(d->host, d->job_id, d->attempt, d->last.error, d->request_json,
                          d->log_path);
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return 1;
}

int mqproc__delivery_step_fail(mqproc__delivery_t *d) {
  mqproc__store_fail_t fail = {.job_id = d->job_id,
                               .attempt = d->attempt,
                               .error = d->last.error,
                               .max_requeues = d->final_failure ? 0 : cfg(d)->max_requeues,
                               .republish = d->acked,
                               .requeued = &d->requeued};
  return mqproc__delivery_store_call(
      d, mqproc__store_fail(d->host->store, &fail, mqproc__delivery_on_store, d), failed);
}

static int gave_up(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  MQPROC__ERROR("job %s: FAILED, %s", jid(d), d->reason);
  d->outcome = "FAILED";
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_FAILED);
  d->send_result = d->send_callbacks = 1;
  mqproc__delivery_to_dead_letter(d, S_PUBLISH,
                                  "job FAILED: out of attempts: %d of --max-attempts=%d used",
                                  d->attempt, cfg(d)->max_attempts);
  mqproc__host_job_failed(d->host, d->job_id, d->attempt, d->reason, d->request_json, d->log_path);
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return 1;
}

int mqproc__delivery_step_give_up(mqproc__delivery_t *d) {
  mqproc__store_give_up_t give_up = {.job_id = d->job_id, .attempt = d->attempt, .why = d->reason};
  snprintf(d->reason, sizeof(d->reason), "out of attempts: %d of --max-attempts=%d used",
           d->attempt, cfg(d)->max_attempts);
  return mqproc__delivery_store_call(
      d, mqproc__store_give_up(d->host->store, &give_up, mqproc__delivery_on_store, d), gave_up);
}

static int released(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  MQPROC__INFO("job %s: released (attempt %d) for another server", jid(d), d->attempt);
  return mqproc__delivery_store_ok(d, S_NACK);
}

int mqproc__delivery_step_release(mqproc__delivery_t *d) {
  mqproc__store_release_t release = {
      .job_id = d->job_id,
      .attempt = d->attempt,
      .why = d->handed_back ? "handed back: claimed ahead, it waited for a slot behind long jobs"
                            : "released: the server stopped before the job ended",
      .refund = d->handed_back,
      .republish = d->acked};
  return mqproc__delivery_store_call(
      d, mqproc__store_release(d->host->store, &release, mqproc__delivery_on_store, d), released);
}

int mqproc__delivery_step_fenced(mqproc__delivery_t *d) {
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_FENCED);
  MQPROC__WARN("job %s: attempt %d was fenced off by a newer attempt: not recording, not "
               "publishing, requeueing this copy",
               jid(d), d->attempt);
  d->state = S_NACK;
  return 1;
}
