/* Internal to the delivery, shared by its two files: delivery.c (the state machine, the
 * processing protocol) and control.c (what acts on a delivery from outside the
 * machine: creation, start, lease renewal, --ack-after, shutdown, accessors, free). The
 * rest of mqproc uses delivery.h only.
 *
 * Here: the states (DELIVERY_STATES; their names are in delivery.c), the struct of one
 * delivery, the store backoff bounds, and the few helpers both files need.
 */
#ifndef MQPROC_DELIVERY_INT_H
#define MQPROC_DELIVERY_INT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/codec.h"
#include "delivery/delivery.h"

#define DELIVERY_STATES(X)                                                                         \
  X(DECODE)                                                                                        \
  X(CLAIM)                                                                                         \
  X(START_TRY)                                                                                     \
  X(RUNNING)                                                                                       \
  X(END_TRY)                                                                                       \
  X(BACKOFF)                                                                                       \
  X(SUCCEED)                                                                                       \
  X(FAIL)                                                                                          \
  X(CANCEL)                                                                                        \
  X(RELEASE)                                                                                       \
  X(GIVE_UP)                                                                                       \
  X(FENCED)                                                                                        \
  X(DEAD_LETTER)                                                                                   \
  X(DEAD_WAIT)                                                                                     \
  X(PUBLISH)                                                                                       \
  X(PUBLISH_WAIT)                                                                                  \
  X(PUBLISHED)                                                                                     \
  X(CALLBACK)                                                                                      \
  X(CALLBACK_WAIT)                                                                                 \
  X(CALLBACK_RECORD)                                                                               \
  X(DEFER)                                                                                         \
  X(STORE_WAIT)                                                                                    \
  X(SLOT_WAIT)                                                                                     \
  X(STORE_CALL)                                                                                    \
  X(STORE_DONE)                                                                                    \
  X(BROKER_WAIT)                                                                                   \
  X(ACK)                                                                                           \
  X(NACK)                                                                                          \
  X(DONE)

typedef enum dstate {
#define DSTATE_ENUM(name) S_##name,
  DELIVERY_STATES(DSTATE_ENUM)
#undef DSTATE_ENUM
} dstate_t;

/* Their names, in the order above (wait.c). */
extern const char *const mqproc__delivery_state_names[];

#define STORE_BACKOFF_MIN_MS 250
#define STORE_BACKOFF_MAX_MS 5000

struct mqproc__delivery {
  mqproc__delivery_t *next;      /* server's list */
  mqproc__delivery_host_t *host; /* the server, as the delivery sees it */
  dstate_t state;
  dstate_t resume; /* STORE_WAIT resumes here */
  /* the store request in flight (STORE_CALL~) and its answer (STORE_DONE) */
  dstate_t issued;                    /* the state that made it */
  int (*then)(mqproc__delivery_t *d); /* continues the machine with the answer */
  int store_rc;
  char store_err[MQPROC_ERR_LEN];
  mqproc__claim_t claim;
  int requeued;       /* fail(): back to QUEUED */
  int first_try_open; /* the claim started the first try already */
  int renewing;       /* a lease renewal is in flight */
  int64_t renew_sent_ms;
  int acking;           /* the early ack's write is in flight: the machine's writes wait */
  int has_slot;         /* one of the server's --concurrency run slots */
  int has_pass;         /* one of its --claim-ahead passes: claimed before a slot was free */
  int64_t slot_wait_ms; /* when it last began to wait in SLOT_WAIT */
  int handed_back;      /* claimed ahead, never run, released for another server (refunded) */
  int settled;          /* its tag is acked or nacked (or waits for the server's ack flush) */
  dstate_t after_dead;  /* DEAD_LETTER continues here (ACK or PUBLISH) */
  /* the delivery */
  uint64_t epoch;
  uint64_t tag;
  uint64_t consumer; /* the consume() it came through (the concurrency bound) */
  int redelivered;
  long delivery_count; /* x-delivery-count from a quorum queue; -1 when absent */
  char *body;
  size_t len;
  size_t size; /* > len: the message's whole size, body its start only (broker.h) */
  /* the message */
  mqproc__msg_t *msg;
  char *request_json;
  /* request_json with URL passwords masked, for the job table; NULL: the same */
  char *request_shown;
  char *headers_json;    /* the message's AMQP headers (JSON object text), NULL when none */
  int priority;          /* its AMQP priority, -1 when absent */
  char *mets_path;       /* path_to_mets, or the workspace_id's METS under --workspace-root */
  char *mets_server_url; /* OCR-D's METS server for it (runner/ocrd_argv.h), NULL: none */
  char *job_id;          /* also set for invalid messages when readable */
  /* the attempt */
  int attempt; /* fencing token */
  int tries_in_attempt;
  int try_no; /* over the whole job */
  mqproc__run_t *run;
  mqproc__run_result_t last; /* how the last try ended */
  const char *outcome;       /* "SUCCESS" / "FAILED" / "CANCELLED" once final */
  int send_result;           /* publish the result message */
  int send_callbacks;        /* POST the callbacks */
  int dead_recorded;
  int stop_requested;
  int stop_forced;      /* the second signal or the grace's end: no more waiting to send again */
  int cancel_requested; /* an operator cancelled the job: stop the try, record CANCELLED */
  int holder_checked;   /* the claim's holder was checked for being gone (once) */
  int fenced;
  int unsent;        /* early-acked, stopping with the broker away: outcome left to a sweep */
  int final_failure; /* the processor said the job cannot succeed (--final-exit-code) */
  int acked;         /* the delivery was acked early: the row carries the job */
  /* the queue is a table of the job store (mqproc__broker_ack_in_store): the success's
     write acks the message (these fence it) and inserts the result (result_in_write) */
  mqproc__broker_held_t in_write;
  int ack_in_write;
  int result_in_write;
  char in_write_headers[64]; /* the result's headers there: its x-mqproc-attempt */
  int abandoned;             /* released at shutdown while its thread still runs */
  uint64_t ack_timer;        /* --ack-after */
  uint64_t timer;
  int store_backoff_ms;
  int64_t last_renew_ms;
  char reason[MQPROC_ERR_LEN]; /* dead-letter reason / final error */
  char publish_error[MQPROC_ERR_LEN];
  int publish_status;
  int publish_nacks;  /* the broker refused the result this many times (sent again) */
  int64_t publish_ms; /* when the result went out (the confirm's latency, in DEBUG logs) */
  char callback_error[MQPROC_ERR_LEN];
  char log_path[PATH_MAX];
  char log_name[256]; /* its file name (joblog.h) */
  int log_made;       /* a try of this delivery wrote to that file: it exists */
  char *log_text;     /* the output of a try that succeeded without a file (owned) */
};

/* Runs the machine until it waits for something; a delivery that reaches DONE is handed
 * back to the server (delivery.c). */
void mqproc__delivery_advance(mqproc__delivery_t *d);

/* The machine's shared helpers (wait.c), used by its steps in delivery.c and
 * out.c (the states that send an outcome: dead letter, result, callbacks,
 * settle). Each sets d->state and returns what a step returns (1 go on, 0 wait). */
int mqproc__delivery_has_callbacks(const mqproc__msg_t *m);
int mqproc__delivery_stale(const mqproc__delivery_t *d);
int mqproc__delivery_wait_timer(mqproc__delivery_t *d, dstate_t state, int64_t ms);
/* The done callback of the machine's store requests (ud: the delivery). */
void mqproc__delivery_on_store(void *ud, int rc, const char *err);
/* A store request was made (submitted: what the call returned): wait for its answer in
 * STORE_CALL~, then go on with then(d) in the state that made it (d->store_rc, _err). */
int mqproc__delivery_store_call(mqproc__delivery_t *d, int submitted,
                                int (*then)(mqproc__delivery_t *));
/* The answer d->store_rc was an error: fenced, the message's data, or an outage (park). */
int mqproc__delivery_store_failed(mqproc__delivery_t *d);
/* The answer was fine: the store backoff starts over, the machine goes to next. */
int mqproc__delivery_store_ok(mqproc__delivery_t *d, dstate_t next);
int mqproc__delivery_broker_down(mqproc__delivery_t *d, const char *why);
int mqproc__delivery_broker_blocked(mqproc__delivery_t *d);
void mqproc__delivery_to_dead_letter(mqproc__delivery_t *d, dstate_t then, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* How the last try ended, as the store records it (end.c). */
mqproc__try_end_t mqproc__delivery_try_end(const mqproc__delivery_t *d);
/* The job's log file for the store: its path once a try of this delivery wrote there, else
 * NULL (the row keeps the path it has: a file an earlier attempt made, or none). */
const char *mqproc__delivery_log_path(const mqproc__delivery_t *d);
/* OCR-D's checks of a decoded message (ocrd.c): 0 when it goes on; else what a step
 * returns (it was dead-lettered, or deferred when out of memory). */
int mqproc__delivery_ocrd_checks(mqproc__delivery_t *d);
/* The states that record the attempt's end (end.c). */
int mqproc__delivery_step_succeed(mqproc__delivery_t *d);
int mqproc__delivery_step_cancel(mqproc__delivery_t *d);
int mqproc__delivery_step_fail(mqproc__delivery_t *d);
int mqproc__delivery_step_give_up(mqproc__delivery_t *d);
int mqproc__delivery_step_release(mqproc__delivery_t *d);
int mqproc__delivery_step_fenced(mqproc__delivery_t *d);
/* The states that send the outcome (out.c). */
int mqproc__delivery_step_dead_letter(mqproc__delivery_t *d);
int mqproc__delivery_step_publish(mqproc__delivery_t *d);
int mqproc__delivery_step_published(mqproc__delivery_t *d);
int mqproc__delivery_step_callback(mqproc__delivery_t *d);
int mqproc__delivery_step_callback_record(mqproc__delivery_t *d);
int mqproc__delivery_step_settle(mqproc__delivery_t *d, int ack);
/* The confirm of the publish d waits for (DEAD_WAIT~, PUBLISH_WAIT~) arrived. */
void mqproc__delivery_confirmed(mqproc__delivery_t *d, int status);
/* Arms the --ack-after timer of a freshly claimed delivery, if configured (control.c). */
void mqproc__delivery_arm_ack_timer(mqproc__delivery_t *d);

static inline const char *jid(const mqproc__delivery_t *d) {
  return d->job_id != NULL ? d->job_id : "(no job_id)";
}

static inline const mqproc__config_t *cfg(const mqproc__delivery_t *d) {
  return d->host->cfg;
}

#endif
