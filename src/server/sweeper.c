/* The sweeper: every half lease, any server republishes the jobs whose early-acked holder
 * died (their broker message is gone, the row alone carries them) and sends the outcome
 * of final jobs whose holder died before sending it (the outbox). Runs from the server's
 * tick; publishes through the server (ops->publish_job), whose confirm comes back to
 * mqproc__sweeper_confirmed. Nothing is swept while the broker blocks publishing.
 *
 * A republish sends the original message bytes kept in the row (schema 4), so the job is
 * decoded again exactly as the first time; a row that can never be published again (an
 * AMQP encoding limit) is FAILED instead of coming back on every sweep.
 */
#include "server/sweeper.h"

#include <stdio.h>
#include <stdlib.h>

#include "codec/codec.h"
#include "delivery/delivery.h"
#include "base/log.h"
#include "base/util.h"

/* The message to publish again: the original bytes (schema 4 keeps them), else the stored
 * jsonb encoded again (rows written before). */
static int republish_body(const mqproc__sweep_row_t *r, char **copy, const void **body, size_t *len,
                          char *err) {
  json_t *doc;
  int rc;
  *copy = NULL;
  if (r->body != NULL) {
    *body = r->body;
    *len = r->body_len;
    return MQPROC_OK;
  }
  if ((doc = json_loads(r->request_json, 0, NULL)) == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "stored request unreadable");
  rc = mqproc__doc_encode(doc, mqproc__format_parse(r->format), copy, len, err);
  json_decref(doc);
  *body = *copy;
  return rc;
}

/* A job whose message can never be published again (it cannot be encoded): FAILED, so it
 * does not come back on every sweep. */
static void logged(void *ud, int rc, const char *err) {
  (void)ud;
  if (rc != MQPROC_OK)
    MQPROC__WARN("sweeper: %s", err);
}

static void republish_refused(mqproc__sweeper_t *sw, const mqproc__sweep_row_t *r,
                              const char *why) {
  char reason[MQPROC_ERR_LEN];
  mqproc__store_give_up_t give_up = {.job_id = r->job_id, .attempt = r->attempt, .why = reason};
  snprintf(reason, sizeof(reason), "cannot republish the stored request: %.400s", why);
  MQPROC__ERROR("job %s: %s; FAILED", r->job_id, reason);
  mqproc__store_give_up(sw->store, &give_up, logged, sw);
}

/* The stored headers of a job (a JSON object) as publish headers, values as text (as
 * `mqproc jobs retry` sends them): up to max, the texts owned by *doc and texts[]. */
#define SWEEP_HEADERS 16
static size_t stored_headers(const char *json, json_t **doc, mqproc__broker_header_t *h,
                             char **texts) {
  const char *k;
  json_t *v;
  size_t n = 0;
  *doc = json != NULL ? json_loads(json, 0, NULL) : NULL;
  json_object_foreach(*doc, k, v) {
    if (n == SWEEP_HEADERS) {
      MQPROC__WARN("a republished job keeps its first %d headers only", SWEEP_HEADERS);
      break;
    }
    texts[n] = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    h[n].key = k;
    h[n].value = texts[n] != NULL ? texts[n] : json_string_value(v);
    if (h[n].value != NULL)
      n++;
  }
  return n;
}

static void republish_row(void *ud, const mqproc__sweep_row_t *r) {
  mqproc__sweeper_t *sw = ud;
  char err[MQPROC_ERR_LEN], *copy, *texts[SWEEP_HEADERS] = {0};
  mqproc__broker_header_t h[SWEEP_HEADERS];
  json_t *doc;
  /* the message as it came: its bytes, priority and headers */
  mqproc__publish_t p = {.exchange = sw->cfg->exchange,
                         .routing_key = sw->cfg->processor,
                         .content_type = "application/json", /* as OCR-D labels both */
                         .message_id = r->job_id,
                         .persistent = sw->cfg->queue_durable,
                         .mandatory = 1,
                         .priority = r->priority > 0 ? r->priority : 0,
                         .headers = h,
                         .n_headers = stored_headers(r->headers_json, &doc, h, texts)};
  int rc = republish_body(r, &copy, &p.body, &p.len, err);
  if (rc == MQPROC_OK)
    rc = sw->ops->publish_job(sw->ud, r->job_id, &p, err);
  if (rc == MQPROC_OK) {
    mqproc__metrics_inc(sw->metrics, MQPROC__M_TAKEOVERS);
    MQPROC__INFO("job %s: its holder is gone; republished the stored request", r->job_id);
  } else if (rc == MQPROC_EINVAL) {
    republish_refused(sw, r, err);
  } else {
    MQPROC__WARN("job %s: republish failed (%s); the next sweep retries", r->job_id, err);
  }
  free(copy);
  for (size_t i = 0; i < SWEEP_HEADERS; i++)
    free(texts[i]);
  json_decref(doc);
}

void mqproc__sweeper_confirmed(mqproc__sweeper_t *sw, const char *job_id, int status) {
  mqproc__store_republished_t republished = {.job_id = job_id};
  if (status != MQPROC_OK) {
    MQPROC__WARN("job %s: republished request not confirmed (%s); the next sweep retries", job_id,
                 mqproc_strerror(status));
    return;
  }
  /* if this write fails, a later sweep may send a duplicate: the claim absorbs it */
  mqproc__store_republished(sw->store, &republished, logged, sw);
}

/* A final job's outcome its dead holder never sent: a delivery without a broker message
 * sends it (result, callbacks) like any other. */
static void send_outbox_row(void *ud, const mqproc__outbox_row_t *r) {
  mqproc__sweeper_t *sw = ud;
  mqproc__delivery_t *d = mqproc__delivery_new_outbox(sw->host, r);
  if (d != NULL) /* else logged; its grace lease runs out and a later sweep tries again */
    sw->ops->add_delivery(sw->ud, d);
}

/* An idle server learns of a database outage here: pausing makes it wait the two leases
 * below once the database is back, like a server that was running a job. A connection
 * dropped while the database stays up (idle timeout, a proxy) is not an outage: the ping
 * reconnects and the next sweep runs as usual. */
static void pinged(void *ud, int rc, const char *err) {
  mqproc__sweeper_t *sw = ud;
  (void)err;
  if (rc != MQPROC_OK)
    sw->ops->store_down(sw->ud);
}

static void sweep_ended(mqproc__sweeper_t *sw, int rc, const char *err) {
  sw->sweeping = 0;
  if (rc == MQPROC_OK)
    return;
  MQPROC__WARN("sweep failed: %s", err);
  if (rc == MQPROC_ESTORE_CONNECT && mqproc__store_ping(sw->store, pinged, sw) != MQPROC_OK)
    sw->ops->store_down(sw->ud);
}

static void outbox_swept(void *ud, int rc, const char *err) {
  sweep_ended(ud, rc, err);
}

static void swept(void *ud, int rc, const char *err) {
  mqproc__sweeper_t *sw = ud;
  mqproc__store_sweep_outbox_t sweep = {.processor = sw->cfg->processor,
                                        .lease_ms = sw->cfg->lease_s * 1000,
                                        .limit = 50,
                                        .row = send_outbox_row};
  if (rc == MQPROC_OK)
    rc = mqproc__store_sweep_outbox(sw->store, &sweep, outbox_swept, sw);
  if (rc != MQPROC_OK)
    sweep_ended(sw, rc, err != NULL ? err : mqproc_strerror(rc));
}

void mqproc__sweeper_init(mqproc__sweeper_t *sw, const mqproc__config_t *cfg,
                          mqproc__store_t *store, mqproc__metrics_t *metrics,
                          mqproc__delivery_host_t *host, const mqproc__sweeper_ops_t *ops,
                          void *ud) {
  *sw = (mqproc__sweeper_t){
      .cfg = cfg, .store = store, .metrics = metrics, .host = host, .ops = ops, .ud = ud};
}

void mqproc__sweeper_store_back(mqproc__sweeper_t *sw) {
  sw->store_back_ms = mqproc__now_ms();
}

void mqproc__sweeper_run(mqproc__sweeper_t *sw) {
  int64_t now = mqproc__now_ms();
  int every_ms = sw->cfg->lease_s * 500;
  mqproc__store_sweep_t sweep = {.processor = sw->cfg->processor,
                                 .lease_ms = sw->cfg->lease_s * 1000,
                                 .limit = 50,
                                 .row = republish_row};
  if (!sw->ops->may_sweep(sw->ud) || sw->sweeping || now - sw->last_sweep_ms < every_ms)
    return;
  /* Right after a database outage every holder's lease may have run out only because it
   * could not renew: give the holders two leases to renew before judging them dead. */
  if (sw->store_back_ms != 0 && now - sw->store_back_ms < sw->cfg->lease_s * 2000LL)
    return;
  sw->last_sweep_ms = now;
  sw->sweeping = 1;
  if (mqproc__store_sweep(sw->store, &sweep, swept, sw) != MQPROC_OK)
    sw->sweeping = 0;
}
