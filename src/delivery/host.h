/* The only view a delivery has of the server that runs it: the handles it uses (the
 * configuration, the loop, the store, the runner, the metrics) and a small table of what
 * it asks of its host (publish with a confirm, ack, nack, an ack in the store's write, the
 * connection's generation, run slots and claim
 * passes, result queues, another delivery holding a job, the store being away, the
 * --on-failure handler, its own end). The server fills one and hands it to every delivery;
 * a unit test fills one with fakes (tests/unit/test_delivery.c) and drives the machine
 * alone. A delivery never includes server.h.
 *
 * The handles are the host's; a delivery uses them, never frees them. broker_blocked and
 * the handles may change while deliveries live (the host updates them in place).
 */
#ifndef MQPROC_DELIVERY_HOST_H
#define MQPROC_DELIVERY_HOST_H

#include <stdint.h>

#include "broker/broker.h"
#include "net/callback.h"
#include "base/config.h"
#include "loop/loop.h"
#include "base/metrics.h"
#include "runner/runner.h"
#include "store/store.h"

typedef struct mqproc__delivery mqproc__delivery_t;
typedef struct mqproc__delivery_host mqproc__delivery_host_t;

typedef struct mqproc__delivery_host_ops {
  /* Publishes p; its confirm comes back as mqproc__delivery_on_confirm(d, status). Errors
     as mqproc__broker_publish's (MQPROC_EBROKER_CLOSED when the broker is down). */
  int (*publish)(mqproc__delivery_host_t *h, mqproc__delivery_t *d, const mqproc__publish_t *p,
                 char *err);
  /* d stops waiting for the confirm of its publish (a late confirm is then ignored). */
  void (*forget_publish)(mqproc__delivery_host_t *h, mqproc__delivery_t *d);
  /* Acks d's delivery at the host's next flush; MQPROC_EBROKER_CLOSED when d's connection
     is gone. */
  int (*ack)(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err);
  /* Gives d's delivery back to the queue (requeued) now; MQPROC_EBROKER_CLOSED when d's
     connection is gone (the broker redelivers it anyway). */
  int (*nack)(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err);
  /* d's delivery will be acked by d's success write in the job store the queue lives in
     (a table queue in the server's own database): *held gets what fences that write.
     MQPROC_EINVAL where the queue is not in the store (then d acks as usual). */
  int (*ack_in_store)(mqproc__delivery_host_t *h, mqproc__delivery_t *d,
                      mqproc__broker_held_t *held);
  /* The broker connection's generation now: a delivery of an older one cannot be acked. */
  uint64_t (*epoch)(mqproc__delivery_host_t *h);
  /* A run slot (1) or none free (0: d waits in SLOT_WAIT until mqproc__delivery_slot_free);
     give_slot returns one. */
  int (*take_slot)(mqproc__delivery_host_t *h);
  void (*give_slot)(mqproc__delivery_host_t *h);
  /* A claim pass (--claim-ahead): claim without a run slot (1), or none free (0). */
  int (*take_pass)(mqproc__delivery_host_t *h);
  void (*give_pass)(mqproc__delivery_host_t *h);
  /* Declares result queue once per connection (when configured to). */
  int (*result_queue)(mqproc__delivery_host_t *h, const char *queue, char *err);
  /* Whether a message may name this result queue (--result-queue-pattern). */
  int (*result_queue_allowed)(mqproc__delivery_host_t *h, const char *queue);
  /* The deliveries in flight changed what they hold: consume (or not) accordingly. extra:
     early acks about to be sent. */
  void (*update_consuming)(mqproc__delivery_host_t *h, int extra);
  /* The delivery in flight running attempt `attempt` of job_id, or NULL. */
  mqproc__delivery_t *(*find_job)(mqproc__delivery_host_t *h, const char *job_id, int attempt);
  /* d found the store unreachable: the host stops taking deliveries until it answers. */
  void (*store_down)(mqproc__delivery_host_t *h);
  /* A job ended FAILED: the --on-failure handler, if any. */
  void (*job_failed)(mqproc__delivery_host_t *h, const char *job_id, int attempt, const char *error,
                     const char *request_json, const char *log_path);
  /* d reached its end: the host unlinks and frees it (an abandoned one, whose try still
     runs on a thread, is only unlinked and counted). */
  void (*done)(mqproc__delivery_host_t *h, mqproc__delivery_t *d);
  /* An abandoned delivery's thread finished after all: the host frees it. */
  void (*abandoned_done)(mqproc__delivery_host_t *h, mqproc__delivery_t *d);
} mqproc__delivery_host_ops_t;

struct mqproc__delivery_host {
  const mqproc__delivery_host_ops_t *ops;
  const mqproc__config_t *cfg;
  const char *processor;  /* the job queue's name */
  const char *dead_queue; /* where given-up messages go */
  const char *dead_where; /* how the logs name that place (NULL: dead_queue; dir://:
                             the job queue's failed/ directory) */
  const char *worker_id;
  const char *hostname; /* gethostname() */
  mqproc__loop_t *loop;
  mqproc__store_t *store;
  mqproc__runner_t *runner;
  mqproc__metrics_t *metrics;
  const mqproc__cidr_list_t *callback_allow; /* --callback-allow */
  const mqproc__cidr_list_t *callback_deny;  /* --callback-deny */
  int needs_mets;         /* the runner cannot run a job without a METS (OCR-D CLI) */
  int ocrd_processor;     /* an OCR-D processor (--exec with OCR-D's CLI, a C processor named
                             ocrd-*): a job that names no workspace and no file groups is
                             invalid for it */
  int broker_blocked;     /* connection.blocked: publishing waits for connection.unblocked */
  const char *empty_hint; /* what an empty message means on this queue (NULL: nothing) */
};

static inline int mqproc__host_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d,
                                       const mqproc__publish_t *p, char *err) {
  return h->ops->publish(h, d, p, err);
}
static inline void mqproc__host_forget_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  h->ops->forget_publish(h, d);
}
static inline int mqproc__host_ack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  return h->ops->ack(h, d, err);
}
static inline int mqproc__host_nack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  return h->ops->nack(h, d, err);
}
static inline int mqproc__host_ack_in_store(mqproc__delivery_host_t *h, mqproc__delivery_t *d,
                                            mqproc__broker_held_t *held) {
  return h->ops->ack_in_store(h, d, held);
}
static inline uint64_t mqproc__host_epoch(mqproc__delivery_host_t *h) {
  return h->ops->epoch(h);
}
static inline int mqproc__host_take_slot(mqproc__delivery_host_t *h) {
  return h->ops->take_slot(h);
}
static inline void mqproc__host_give_slot(mqproc__delivery_host_t *h) {
  h->ops->give_slot(h);
}
static inline int mqproc__host_take_pass(mqproc__delivery_host_t *h) {
  return h->ops->take_pass(h);
}
static inline void mqproc__host_give_pass(mqproc__delivery_host_t *h) {
  h->ops->give_pass(h);
}
static inline int mqproc__host_result_queue(mqproc__delivery_host_t *h, const char *queue,
                                            char *err) {
  return h->ops->result_queue(h, queue, err);
}
static inline int mqproc__host_result_queue_allowed(mqproc__delivery_host_t *h, const char *queue) {
  return h->ops->result_queue_allowed(h, queue);
}
static inline void mqproc__host_update_consuming(mqproc__delivery_host_t *h, int extra) {
  h->ops->update_consuming(h, extra);
}
static inline mqproc__delivery_t *mqproc__host_find_job(mqproc__delivery_host_t *h,
                                                        const char *job_id, int attempt) {
  return h->ops->find_job(h, job_id, attempt);
}
static inline void mqproc__host_store_down(mqproc__delivery_host_t *h) {
  h->ops->store_down(h);
}
static inline void mqproc__host_job_failed(mqproc__delivery_host_t *h, const char *job_id,
                                           int attempt, const char *error, const char *request_json,
                                           const char *log_path) {
  h->ops->job_failed(h, job_id, attempt, error, request_json, log_path);
}
static inline void mqproc__host_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  h->ops->done(h, d);
}
static inline void mqproc__host_abandoned_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  h->ops->abandoned_done(h, d);
}

#endif
