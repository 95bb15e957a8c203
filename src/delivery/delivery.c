/* The state machine of one delivery: decode -> claim -> run (local retries) -> record ->
 * publish -> callbacks -> ack/nack. Read top to bottom, it is the processing protocol.
 *
 * API (delivery.h): here only mqproc__delivery_on_confirm; what acts on a delivery from
 * outside the machine (_new, _start, _tick, --ack-after, _stop, _free, ...) is in
 * control.c. The struct and the state list are in int.h. It sees its server only through
 * host.h.
 *
 * The states (waits marked ~; docs/architecture.md links here, the one copy):
 *
 *  DECODE --too large / undecodable / invalid---------------------------------> DEAD_LETTER
 *    | valid (no free run slot nor claim pass: SLOT_WAIT~, unclaimed)     (record it in
 *    v                                                                     mqproc_dead_letters,
 *  CLAIM (one INSERT ... ON CONFLICT ... RETURNING; starts the first try)  publish it, wait
 *    |-- SUCCESS, all sent, or its holder still sends it -----> ACK         for its confirm)
 *    |-- SUCCESS or CANCELLED, result/callbacks not sent -----> PUBLISH
 *    |-- FAILED ----------------------------------------------> DEAD_LETTER -> ACK
 *    |-- out of attempts (--max-attempts) --> GIVE_UP (FAILED) --> DEAD_LETTER -> PUBLISH ...
 *    |-- RUNNING under our own lease, its connection dead ----> adopted by the holder (DONE)
 *    |-- RUNNING, its holder on this host with its pid gone --> holder marked dead -> CLAIM
 *    |-- RUNNING under another live lease --> DEFER~ (until it may expire) --> NACK (requeue)
 *    v claimed: attempt n (the fencing token); the --ack-after timer armed
 *  START_TRY --(a retry, or a job claimed ahead, with no free slot: SLOT_WAIT~)--+
 *    v                                                                          |
 *  RUNNING~ --> END_TRY --failed, tries left--> BACKOFF~ --> START_TRY <---------+
 *                 | ok       | failed, no tries left (1 + --retries), or --final-exit-code
 *                 v          v
 *              SUCCEED      FAIL --requeues left--> NACK (requeue)
 *                 | ack now  | out of requeues (or the final exit code): FAILED
 *                 |          v
 *                 |        DEAD_LETTER --> DEAD_WAIT~ --+
 *                 v                                     v
 *              PUBLISH --> PUBLISH_WAIT~ --> PUBLISHED --> CALLBACK --> CALLBACK_WAIT~
 *                                                                            |
 *                              DONE <-- ACK <-- CALLBACK_RECORD <------------+
 *              (acked at SUCCEED; at ACK the outbox mark is cleared: outbox_done)
 *
 * Side states, entered from any step: STORE_CALL~ (a store request is on its way; its
 * answer comes back as STORE_DONE, which goes on where the request was made), STORE_WAIT~
 * (the store is away: the same state again later), BROKER_WAIT~ (the broker blocks
 * publishing), CANCEL (an operator cancelled the job), RELEASE (shutdown gives a claimed
 * job back), FENCED (a write refused by the fencing token).
 *
 * A run slot is taken before the claim (SLOT_WAIT~, resuming CLAIM) and before each retry
 * (resuming START_TRY); it is given back when the try ends or the claim runs nothing.
 * With every slot busy, a --claim-ahead pass may stand in for it at the claim: the claimed
 * job then waits for its slot in SLOT_WAIT~ resuming START_TRY, as a retry does.
 *
 * Every store call is a request answered later (store.h): the state that makes it waits
 * in STORE_CALL~ and goes on in a continuation (claim_done, succeeded, ...) with the
 * answer; many deliveries' requests share one write. The hot path costs two commits per
 * job: the claim (which starts the first try) and the success (which keeps the row's
 * outbox mark); the delivery is acked right after the success, before the result's
 * confirm, and the row carries the rest (outbox_done, a write that shares the next round
 * with whatever else is due, or another server's outbox sweep if this one dies first).
 *
 * Side exits: a store that is unavailable parks the delivery in STORE_WAIT~ and resumes
 * the same state later; a write refused by the fencing token goes to FENCED (no
 * record, no publish, no ack as owner: the copy is requeued); shutdown sends a claimed
 * job through RELEASE (back to QUEUED) and NACK. A delivery whose connection died
 * before the claim is dropped (the broker redelivers it); after the claim it runs to
 * the end, so a job running during a broker outage is still recorded once.
 *
 * This file: the machine, taking a job in, running it. The states that record how its
 * attempt ended (SUCCEED, CANCEL, FAIL, GIVE_UP, RELEASE, FENCED) are in end.c,
 * those that send an outcome (DEAD_LETTER to ACK) in out.c, the helpers the steps
 * share (store calls, timed waits, the broker away) in wait.c, OCR-D's checks of a decoded
 * message (its workspace, its METS server) in ocrd.c.
 *
 * To add a state: add it to DELIVERY_STATES (int.h), write its step function
 * here (or in end.c / out.c), and add the case in step(). Waiting states return 0
 * from step() and are resumed by an event; for a new one, also see what control.c's shutdown
 * (mqproc__delivery_stop) and accessors should make of it.
 */
#include "delivery/int.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/callback.h"
#include "codec/codec.h"
#include "runner/joblog.h"
#include "base/log.h"
#include "runner/ocrd_argv.h"
#include "delivery/policy.h"
#include "base/util.h"

static uint32_t rnd(void) {
  return (uint32_t)random();
}

/* ---- decode and claim --------------------------------------------------------------- */

/* The request as the job table keeps it for operators: callback URLs' passwords masked
 * (request_body keeps the exact bytes for a republish). NULL when nothing is masked. */
static int shown_request(mqproc__delivery_t *d) {
  json_t *shown = mqproc__doc_masked(d->msg->doc);
  if (shown == NULL)
    return MQPROC_OK;
  d->request_shown = json_dumps(shown, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(shown);
  return d->request_shown != NULL ? MQPROC_OK : MQPROC_ENOMEM;
}

/* A job that is not OCR-D's may come without job_id and created_time: they are made here.
 * The id is the message's bytes': "job-" and the first 32 hex digits of their SHA-256, so
 * a copy delivered again is the same job, known by its row (the same bytes sent again
 * later are too: give a job_id or created_time to run them again). A made id goes into
 * the body, encoded again, so a republish, the outbox and a retry send the same job. */
static int plain_job_ids(mqproc__delivery_t *d) {
  json_t *doc = d->msg->doc;
  unsigned char sha[32];
  char id[48], err[MQPROC_ERR_LEN], *body = NULL;
  size_t len = 0;
  if (d->msg->created_time < 0) {
    if (json_object_set_new(doc, "created_time", json_integer((json_int_t)time(NULL))) != 0)
      return MQPROC_ENOMEM;
    d->msg->created_time = json_integer_value(json_object_get(doc, "created_time"));
  }
  if (d->msg->job_id != NULL)
    return MQPROC_OK;
  mqproc__sha256(d->body, d->len, sha);
  memcpy(id, "job-", 4);
  for (int i = 0; i < 16; i++)
    snprintf(id + 4 + 2 * i, 3, "%02x", sha[i]);
  free(d->job_id);
  if ((d->job_id = mqproc__strdup(id)) == NULL ||
      json_object_set_new(doc, "job_id", json_string(id)) != 0 ||
      mqproc__doc_encode(doc, d->msg->format, &body, &len, err) != MQPROC_OK)
    return MQPROC_ENOMEM;
  d->msg->job_id = json_string_value(json_object_get(doc, "job_id"));
  free(d->body);
  d->body = body;
  d->len = len;
  return MQPROC_OK;
}

static int step_decode(mqproc__delivery_t *d) {
  char err[MQPROC_ERR_LEN];
  json_t *doc;
  mqproc__format_t fmt;
  const char *id;
  int rc;
  if (d->size > d->len) { /* not read (a table queue's): its start is the dead letter's body */
    mqproc__delivery_to_dead_letter(d, S_ACK,
                                    "message of %zu bytes exceeds the limit of %ld bytes"
                                    " (dead-lettered unread: its first %zu bytes kept)",
                                    d->size, cfg(d)->max_message_bytes, d->len);
    return 1;
  }
  if ((long)d->len > cfg(d)->max_message_bytes) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "message of %zu bytes exceeds the limit of %ld bytes",
                                    d->len, cfg(d)->max_message_bytes);
    return 1;
  }
  if (mqproc__codec_parse(d->body, d->len, &doc, &fmt, err) != MQPROC_OK) {
    const char *hint = strncmp(err, "empty message", 13) == 0 ? d->host->empty_hint : NULL;
    mqproc__delivery_to_dead_letter(d, S_ACK, "undecodable message: %s%s%s", err,
                                    hint != NULL ? ": " : "", hint != NULL ? hint : "");
    return 1;
  }
  id = mqproc__doc_job_id(doc);
  if (id != NULL && (d->job_id = mqproc__strdup(id)) == NULL) {
    json_decref(doc);
    return mqproc__delivery_wait_timer(d, S_DEFER, 1000); /* out of memory: give the message back */
  }
  if (id != NULL && strlen(id) > MQPROC__MAX_SHORT_STRING) {
    /* invalid (validation says so below); only its start is kept, for the dead letter's
     * header, the table and the log: all of it may not fit an AMQP frame */
    mqproc__utf8_truncate(d->job_id, MQPROC__MAX_SHORT_STRING - 3);
    strcat(d->job_id, "...");
  }
  if (mqproc__msg_validate(doc, fmt, d->host->processor, &d->msg, err) != MQPROC_OK) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "invalid message: %s", err);
    return 1;
  }
  if ((rc = mqproc__delivery_ocrd_checks(d)) != 0) /* OCR-D's own (ocrd.c) */
    return rc;
  if (!d->msg->ocrd && plain_job_ids(d) != MQPROC_OK)
    return mqproc__delivery_wait_timer(d, S_DEFER, 1000); /* out of memory: give it back */
  if (d->msg->result_queue_name != NULL &&
      !mqproc__host_result_queue_allowed(d->host, d->msg->result_queue_name)) {
    mqproc__delivery_to_dead_letter(d, S_ACK,
                                    "invalid message: result_queue_name '%.200s' does not match "
                                    "--result-queue-pattern '%.100s'",
                                    d->msg->result_queue_name, cfg(d)->result_queue_pattern);
    return 1;
  }
  if (d->msg->result_queue_name != NULL &&
      strcmp(d->msg->result_queue_name, d->host->dead_queue) == 0) {
    mqproc__delivery_to_dead_letter(
        d, S_ACK,
        "invalid message: result_queue_name '%.200s' is this server's dead-letter "
        "queue: a result may not pass for a dead letter",
        d->msg->result_queue_name);
    return 1;
  }
  d->request_json = json_dumps(d->msg->doc, JSON_COMPACT | JSON_SORT_KEYS);
  if (d->request_json == NULL || shown_request(d) != MQPROC_OK)
    return mqproc__delivery_wait_timer(d, S_DEFER, 1000);
  d->state = S_CLAIM;
  return 1;
}

/* RUNNING under a live lease held by this very server: another copy of a job we are
 * running. A copy redelivered after our connection died replaces the dead delivery (its
 * tag is the one to ack at the end); a copy of an early-acked job is redundant. */
static int adopt_copy(mqproc__delivery_t *d, const mqproc__claim_t *c) {
  mqproc__delivery_t *holder = mqproc__host_find_job(d->host, d->job_id, c->attempt);
  if (holder == NULL || holder == d)
    return 0;
  if (holder->acked) {
    MQPROC__INFO("job %s: copy of a running, already acked job; acked", jid(d));
    d->state = S_ACK;
    return 1;
  }
  if (!mqproc__delivery_stale(holder))
    return 0; /* a true duplicate in flight: hold it like any other */
  MQPROC__INFO("job %s: redelivered copy taken over by running attempt %d", jid(d), c->attempt);
  holder->epoch = d->epoch;
  holder->tag = d->tag;
  holder->consumer = d->consumer;
  d->state = S_DONE;
  return 1;
}

static int claimed(mqproc__delivery_t *d, int attempt) {
  d->attempt = attempt;
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_STARTED);
  /* created -> first claimed (the histogram counts a future created_time as 0 s) */
  if (attempt == 1 && d->msg->created_time > 0)
    mqproc__metrics_observe(d->host->metrics, &d->host->metrics->queue_wait,
                            (double)(time(NULL) - d->msg->created_time));
  /* a job's one INFO line is at its end (end.c); a redelivery is rare and worth one more */
  if (d->delivery_count > 0)
    MQPROC__INFO("job %s: claimed, attempt %d (redelivered; x-delivery-count %ld)", jid(d), attempt,
                 d->delivery_count);
  else if (d->redelivered)
    MQPROC__INFO("job %s: claimed, attempt %d (redelivered)", jid(d), attempt);
  else
    MQPROC__DEBUG("job %s: claimed, attempt %d", jid(d), attempt);
  mqproc__delivery_arm_ack_timer(d);   /* --ack-after, in control.c */
  d->last_renew_ms = mqproc__now_ms(); /* the claim took the lease; it may wait for a slot */
  d->state = S_START_TRY;
  return 1;
}

static void job_log_path(mqproc__delivery_t *d) {
  mqproc__joblog_name(d->job_id, d->log_name, sizeof(d->log_name));
  snprintf(d->log_path, sizeof(d->log_path), "%s/%s/%s", cfg(d)->log_dir, d->host->processor,
           d->log_name);
}

static void give_pass(mqproc__delivery_t *d) {
  if (d->has_pass) {
    d->has_pass = 0;
    mqproc__host_give_pass(d->host);
  }
}

/* Waits in SLOT_WAIT~ for one of the --concurrency run slots, then resumes `then`; to
 * claim (then CLAIM), one of the --claim-ahead passes will do instead. */
static int take_slot(mqproc__delivery_t *d, dstate_t then) {
  if (d->has_slot || (d->has_slot = mqproc__host_take_slot(d->host))) {
    give_pass(d); /* claimed ahead: it runs now */
    return 1;
  }
  if (then == S_CLAIM && (d->has_pass || (d->has_pass = mqproc__host_take_pass(d->host))))
    return 1;
  d->resume = then;
  d->state = S_SLOT_WAIT; /* the server wakes the oldest waiter when a slot frees */
  d->slot_wait_ms = mqproc__now_ms();
  return 0;
}

static void give_slot(mqproc__delivery_t *d) {
  give_pass(d);
  if (d->has_slot) {
    d->has_slot = 0;
    mqproc__host_give_slot(d->host);
  }
}

/* Whether the holder of a job (its workers row) ran on this host and its pid is gone: a
 * server killed beside this one. (A pid of another namespace under the same host name
 * would look gone: hosts in containers have names of their own.) */
static int holder_gone_here(const mqproc__delivery_t *d, const mqproc__claim_t *c) {
  if (c->holder_pid <= 0 || c->holder_pid == (int)getpid() ||
      strcmp(c->holder_host, d->host->hostname) != 0)
    return 0;
  if (kill(c->holder_pid, 0) < 0)
    return errno == ESRCH;
  return mqproc__pid_is_zombie(c->holder_pid); /* dead, not reaped yet */
}

/* The store marked the dead holder's job for takeover: claim it again. */
static int claim_again(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  mqproc__metrics_inc(d->host->metrics, MQPROC__M_TAKEOVERS);
  return mqproc__delivery_store_ok(d, S_CLAIM);
}

static int claim_done(mqproc__delivery_t *d) {
  mqproc__claim_t *c = &d->claim;
  mqproc__claim_action_t next;
  if (d->store_rc != MQPROC_OK) {
    give_slot(d);
    return mqproc__delivery_store_failed(d);
  }
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  next = mqproc__policy_after_claim(c, d->msg->result_queue_name != NULL,
                                    mqproc__delivery_has_callbacks(d->msg));
  if (next != MQPROC__CLAIM_RUN) /* it runs nothing now: the slot goes to the next job */
    give_slot(d);
  switch (next) {
  case MQPROC__CLAIM_RUN:
    d->try_no = c->try_no; /* the claim started the first try */
    d->first_try_open = 1;
    return claimed(d, c->attempt);
  case MQPROC__CLAIM_REPLAY:
    mqproc__metrics_inc(d->host->metrics, MQPROC__M_FINISHED_REDELIV);
    MQPROC__INFO("job %s: already %s; sending what was not sent, not running it again%s", jid(d),
                 c->state, d->redelivered ? " (redelivered)" : "");
    d->outcome = mqproc__job_state_name(mqproc__job_state_parse(c->state)); /* or CANCELLED */
    d->attempt = c->attempt; /* the one that recorded it: the result says so */
    d->send_result = !c->result_published;
    d->send_callbacks = !c->callbacks_done;
    d->state = S_PUBLISH;
    return 1;
  case MQPROC__CLAIM_ACK:
    mqproc__metrics_inc(d->host->metrics, MQPROC__M_FINISHED_REDELIV);
    MQPROC__INFO("job %s: already %s; acked without running%s", jid(d), c->state,
                 d->redelivered ? " (redelivered)" : "");
    d->state = S_ACK;
    return 1;
  case MQPROC__CLAIM_DEAD:
    mqproc__delivery_to_dead_letter(d, S_ACK, "job is already FAILED (attempt %d); not run again",
                                    c->attempt);
    return 1;
  case MQPROC__CLAIM_EXHAUSTED:
    d->attempt = c->attempt;
    d->state = S_GIVE_UP;
    return 1;
  case MQPROC__CLAIM_DEFER:
    break;
  }
  if (strcmp(c->worker_id_now, d->host->worker_id) == 0 && adopt_copy(d, c))
    return 1;
  if (!d->holder_checked && holder_gone_here(d, c)) { /* kill -9'd beside us: take it now */
    mqproc__store_holder_gone_t gone = {.worker_id = c->worker_id_now,
                                        .host = c->holder_host,
                                        .pid = c->holder_pid,
                                        .by = d->host->worker_id};
    d->holder_checked = 1;
    MQPROC__INFO("job %s: its holder %s (pid %d on this host) is gone; taking the job over", jid(d),
                 c->worker_id_now, c->holder_pid);
    return mqproc__delivery_store_call(
        d, mqproc__store_holder_gone(d->host->store, &gone, mqproc__delivery_on_store, d),
        claim_again);
  }
  MQPROC__INFO("job %s: %s under a live lease of %s; holding this copy", jid(d), c->state,
               c->worker_id_now);
  return mqproc__delivery_wait_timer(
      d, S_DEFER, mqproc__policy_defer_ms(c->lease_left_ms, cfg(d)->lease_s * 1000, rnd()));
}

/* A job is claimed when it can start: with a run slot, so that a delivery waiting for one
 * is still only a message (if this server dies the broker gives it to another at once),
 * and the claim opens the first try. With every slot busy, one of the --claim-ahead passes
 * lets it be claimed now and wait, claimed, for a slot (START_TRY): its claim's commit
 * overlaps the runs before it, which short jobs need; a server dying then leaves it to the
 * takeover of a dead holder's job (at once on its host, on its lease elsewhere). */
static int step_claim(mqproc__delivery_t *d) {
  if (!take_slot(d, S_CLAIM))
    return 0;
  if (d->log_name[0] == '\0') /* one log per job, every try that needs it appends */
    job_log_path(d);
  d->claim = (mqproc__claim_t){.job_id = d->job_id,
                               .processor = d->host->processor,
                               .worker_id = d->host->worker_id,
                               .request_json =
                                   d->request_shown != NULL ? d->request_shown : d->request_json,
                               .request_format = mqproc__format_name(d->msg->format),
                               .request_body = d->body,
                               .request_body_len = d->len,
                               .headers_json = d->headers_json,
                               .priority = d->priority,
                               .created_time = d->msg->created_time,
                               .log_path = mqproc__delivery_log_path(d),
                               .lease_ms = cfg(d)->lease_s * 1000,
                               .max_attempts = cfg(d)->max_attempts};
  return mqproc__delivery_store_call(
      d, mqproc__store_claim(d->host->store, &d->claim, mqproc__delivery_on_store, d), claim_done);
}

/* ---- run with local retries --------------------------------------------------------- */

static void on_run_done(void *ud, const mqproc__run_result_t *r) {
  mqproc__delivery_t *d = ud;
  if (d->abandoned) { /* released at shutdown while its thread ran on; now it ended */
    free(r->log_text);
    mqproc__host_abandoned_done(d->host, d);
    return;
  }
  d->run = NULL;
  d->last = *r;
  d->last.log_text = NULL; /* owned by d->log_text: */
  free(d->log_text);
  d->log_text = r->log_text;
  d->log_made = d->log_made || r->log_file;
  d->state = S_END_TRY;
  mqproc__delivery_advance(d);
}

/* A message's time_limit may lower the operator's --time-limit, never lift it (the codec
 * bounds it, so the product cannot overflow). */
static int64_t time_limit_ms(const mqproc__delivery_t *d) {
  long long server = cfg(d)->time_limit_s, msg = d->msg->time_limit;
  long long s = server > 0 && (msg <= 0 || msg > server) ? server : (msg > 0 ? msg : 0);
  return s * 1000LL;
}

/* The try d->try_no is recorded as started: run it. */
static int run_try(mqproc__delivery_t *d) {
  char err[MQPROC_ERR_LEN];
  mqproc__run_spec_t spec = {.msg = d->msg,
                             .request_json = d->request_json,
                             .headers_json = d->headers_json,
                             .mets_path = d->mets_path,
                             .mets_server_url = d->mets_server_url,
                             .attempt = d->attempt,
                             .try_no = d->try_no,
                             .log_path = d->log_path,
                             .log_dir = cfg(d)->log_dir,
                             .log_sub = d->host->processor,
                             .log_name = d->log_name,
                             .worker_id = d->host->worker_id,
                             .time_limit_ms = time_limit_ms(d),
                             .max_log_bytes = cfg(d)->max_log_bytes,
                             /* only a job's first try: a later one appends to its file */
                             .log_inline_max =
                                 d->try_no == 1 && !d->log_made ? cfg(d)->log_inline_max : 0};
  int rc;
  d->tries_in_attempt++;
  if (d->tries_in_attempt > 1)
    mqproc__metrics_inc(d->host->metrics, MQPROC__M_RETRIED);
  d->last_renew_ms = mqproc__now_ms();
  rc = mqproc__runner_start(d->host->runner, d->host->loop, &spec, on_run_done, d, &d->run, err);
  if (rc != MQPROC_OK) { /* could not start: a failed try like any other */
    memset(&d->last, 0, sizeof(d->last));
    d->last.status = rc;
    d->last.exit_code = -1;
    snprintf(d->last.error, sizeof(d->last.error), "%s", err);
    d->state = S_END_TRY;
    return 1;
  }
  MQPROC__DEBUG("job %s: attempt %d try %d started (log %s)", jid(d), d->attempt, d->try_no,
                d->log_path);
  d->state = S_RUNNING;
  return 0;
}

static int try_started(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return run_try(d);
}

static int step_start_try(mqproc__delivery_t *d) {
  mqproc__store_start_try_t start = {.job_id = d->job_id,
                                     .attempt = d->attempt,
                                     .worker_id = d->host->worker_id,
                                     .log_path = mqproc__delivery_log_path(d),
                                     .try_no = &d->try_no};
  if (d->cancel_requested) {
    give_slot(d);
    d->state = S_CANCEL;
    return 1;
  }
  if (d->stop_requested) {
    d->state = S_RELEASE;
    return 1;
  }
  if (!take_slot(d, S_START_TRY))
    return 0;
  if (d->first_try_open) { /* recorded by the claim */
    d->first_try_open = 0;
    return run_try(d);
  }
  return mqproc__delivery_store_call(
      d, mqproc__store_start_try(d->host->store, &start, mqproc__delivery_on_store, d),
      try_started);
}

static int try_ended(mqproc__delivery_t *d) {
  if (d->store_rc != MQPROC_OK)
    return mqproc__delivery_store_failed(d);
  mqproc__metrics_observe(d->host->metrics, &d->host->metrics->run_time,
                          (double)d->last.duration_ms / 1000.0);
  MQPROC__WARN("job %s: attempt %d try %d failed: %s", jid(d), d->attempt, d->try_no,
               d->last.error);
  if (d->stop_requested)
    return mqproc__delivery_store_ok(d, S_RELEASE);
  switch (mqproc__policy_after_try(d->tries_in_attempt, cfg(d)->retries, d->last.exit_code,
                                   cfg(d)->final_exit_code)) {
  case MQPROC__TRY_FINAL:
    d->final_failure = 1;
    return mqproc__delivery_store_ok(d, S_FAIL);
  case MQPROC__TRY_GIVE_UP:
    return mqproc__delivery_store_ok(d, S_FAIL);
  case MQPROC__TRY_RETRY:
    break;
  }
  d->store_backoff_ms = STORE_BACKOFF_MIN_MS;
  return mqproc__delivery_wait_timer(
      d, S_BACKOFF,
      mqproc__policy_backoff_ms(cfg(d)->retry_backoff_ms, d->tries_in_attempt, rnd()));
}

/* A successful try is recorded with the job's SUCCESS in one write (step_succeed). */
static int step_end_try(mqproc__delivery_t *d) {
  mqproc__store_end_try_t end = {.job_id = d->job_id,
                                 .attempt = d->attempt,
                                 .try_no = d->try_no,
                                 .end = mqproc__delivery_try_end(d),
                                 .log_path = mqproc__delivery_log_path(d)};
  give_slot(d); /* the try is over: its slot goes to the next waiting job */
  if (d->fenced) {
    d->state = S_FENCED;
    return 1;
  }
  if (d->cancel_requested) { /* whatever the try did: the operator's word wins */
    d->state = S_CANCEL;
    return 1;
  }
  if (end.end.ok) {
    d->state = S_SUCCEED;
    return 1;
  }
  return mqproc__delivery_store_call(
      d, mqproc__store_end_try(d->host->store, &end, mqproc__delivery_on_store, d), try_ended);
}

/* ---- the machine -------------------------------------------------------------------- */

static int step(mqproc__delivery_t *d) {
  if (d->acking && (d->state == S_START_TRY || d->state == S_END_TRY || d->state == S_RELEASE ||
                    d->state == S_FENCED || d->state == S_CANCEL))
    return 0; /* the early ack's write first (control.c resumes the machine) */
  if ((d->state == S_DECODE || d->state == S_CLAIM) && mqproc__delivery_stale(d)) {
    d->state = S_DONE; /* not claimed, and its tag is void: the broker redelivers it */
    return 1;
  }
  switch (d->state) {
  case S_DECODE:
    return step_decode(d);
  case S_CLAIM:
    return step_claim(d);
  case S_START_TRY:
    return step_start_try(d);
  case S_END_TRY:
    return step_end_try(d);
  case S_SUCCEED:
    return mqproc__delivery_step_succeed(d);
  case S_FAIL:
    return mqproc__delivery_step_fail(d);
  case S_CANCEL:
    return mqproc__delivery_step_cancel(d);
  case S_RELEASE:
    return mqproc__delivery_step_release(d);
  case S_GIVE_UP:
    return mqproc__delivery_step_give_up(d);
  case S_FENCED:
    return mqproc__delivery_step_fenced(d);
  case S_DEAD_LETTER:
    return mqproc__delivery_step_dead_letter(d);
  case S_PUBLISH:
    return mqproc__delivery_step_publish(d);
  case S_PUBLISHED:
    return mqproc__delivery_step_published(d);
  case S_CALLBACK:
    return mqproc__delivery_step_callback(d);
  case S_CALLBACK_RECORD:
    return mqproc__delivery_step_callback_record(d);
  case S_ACK:
    return mqproc__delivery_step_settle(d, 1);
  case S_NACK:
    return mqproc__delivery_step_settle(d, 0);
  case S_STORE_DONE: /* the answer to a store request: go on where it was made */
    d->state = d->issued;
    return d->then(d);
  case S_RUNNING: /* waiting states: resumed by their event */
  case S_SLOT_WAIT:
  case S_STORE_CALL:
  case S_BACKOFF:
  case S_DEAD_WAIT:
  case S_PUBLISH_WAIT:
  case S_CALLBACK_WAIT:
  case S_DEFER:
  case S_STORE_WAIT:
  case S_BROKER_WAIT:
  case S_DONE:
    return 0;
  }
  return 0;
}

void (*mqproc__delivery_trace)(const mqproc__delivery_t *d, const char *state);

const char *mqproc__delivery_state(const mqproc__delivery_t *d) {
  return mqproc__delivery_state_names[d->state];
}

void mqproc__delivery_advance(mqproc__delivery_t *d) {
  mqproc__log_job_t prev =
      mqproc__log_enter_job(&d->job_id, d->host->processor, &d->attempt, &d->try_no);
  dstate_t at;
  do { /* (each state the machine is in, when traced) */
    at = d->state;
    if (mqproc__delivery_trace != NULL)
      mqproc__delivery_trace(d, mqproc__delivery_state_names[at]);
  } while (step(d));
  if (mqproc__delivery_trace != NULL && d->state != at) /* and the wait it stopped in */
    mqproc__delivery_trace(d, mqproc__delivery_state_names[d->state]);
  mqproc__log_leave_job(prev);
  if (d->state == S_DONE) {
    give_slot(d);
    mqproc__host_done(d->host, d);
  }
}

void mqproc__delivery_on_confirm(mqproc__delivery_t *d, int status) {
  mqproc__delivery_confirmed(d, status);
}
