/* Job store interface: the job table is the source of truth for every job.
 *
 * A backend fills a struct mqproc__store_class and puts a pointer to it first in its
 * private state. Backends: store/pg/ (PostgreSQL via libpq) and store/sqlite/.
 *
 * Requests are typed, in the shape of libuv's uv_fs_t: each operation (mqproc__store_op_t)
 * has a struct of named arguments, a request (mqproc__store_req_t) is the operation, its
 * arguments in a union and its done callback, and the class has one asynchronous entry
 * point, submit(), which each backend dispatches by the operation to its table of
 * statements. Callers use the typed helpers below (mqproc__store_claim(),
 * mqproc__store_succeed(), ...), which set the operation and the union's member together:
 * an argument of the wrong operation, a misspelled field or a value of the wrong type
 * does not compile, and the fields are named where the request is made:
 *
 *   mqproc__store_renew_t renew = {.job_id = id, .attempt = attempt, .lease_ms = ms};
 *   rc = mqproc__store_renew(store, &renew, renewed, ud);
 *
 * Fencing: mqproc__store_claim() returns an attempt number. Every later write for the
 * job carries it and changes nothing when a newer attempt owns the job; such a write
 * ends with MQPROC_ESTORE_FENCED. Requests are asynchronous: a call queues one and its
 * done callback runs later on the loop (a backend may batch the requests of many
 * deliveries into one write); they are bounded by the backend's timeouts, so done always
 * comes. MQPROC_ESTORE_CONNECT means "store unavailable" (an outage: the server pauses),
 * _QUERY "this statement failed, try again later" (the connection is re-established by the
 * next call when it was lost), and _DATA "the store refused what the message carried" (a
 * value out of range, a constraint): trying again cannot help, so the message is
 * dead-lettered rather than retried.
 */
#ifndef MQPROC_STORE_H
#define MQPROC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "loop/loop.h"
#include "mqproc/mqproc.h"

typedef struct mqproc__store mqproc__store_t;

/* The asynchronous operations, in the order of the backends' files: the job's own
 * statements (store/{pg,sqlite}/jobs.c), the sweeps and marks, the fleet, the table
 * queues' messages (store/{pg,sqlite}/queue.c). Each is described at its arguments below. */
typedef enum mqproc__store_op {
  MQPROC__STORE_CLAIM,
  MQPROC__STORE_START_TRY,
  MQPROC__STORE_END_TRY,
  MQPROC__STORE_SUCCEED,
  MQPROC__STORE_CANCELLED,
  MQPROC__STORE_FAIL,
  MQPROC__STORE_RELEASE,
  MQPROC__STORE_GIVE_UP,
  MQPROC__STORE_ACK_EARLY,
  MQPROC__STORE_RENEW,
  MQPROC__STORE_PING,
  MQPROC__STORE_SWEEP,
  MQPROC__STORE_SWEEP_OUTBOX,
  MQPROC__STORE_REPUBLISHED,
  MQPROC__STORE_OUTBOX_DONE,
  MQPROC__STORE_DEAD_LETTERED,
  MQPROC__STORE_MARK_PUBLISHED,
  MQPROC__STORE_RECORD_CALLBACKS,
  MQPROC__STORE_RECORD_DEAD,
  MQPROC__STORE_BEAT,
  MQPROC__STORE_HOLDER_GONE,
  MQPROC__STORE_Q_TAKE,
  MQPROC__STORE_Q_ACK,
  MQPROC__STORE_Q_NACK,
  MQPROC__STORE_Q_PUBLISH,
  MQPROC__STORE_Q_EXTEND,
  MQPROC__STORE_Q_RESET,
  MQPROC__STORE_NOPS /* the number of operations: the size of a backend's table */
} mqproc__store_op_t;

/* ---- the arguments of each operation ------------------------------------------------ */

#define MQPROC__STATE_LEN 16

/* claim: the idempotent claim; a claimed job's first try starts in the same write
 * (try_no, with log_path). The request points at the caller's struct: the backend copies
 * the in fields when the request is made and writes the out fields before done. */
typedef struct mqproc__claim {
  /* in */
  const char *job_id;
  const char *processor;
  const char *worker_id;
  const char *request_json;   /* the decoded message as JSON text, URL passwords masked */
  const char *request_format; /* "json" or "yaml": how it was encoded */
  const void *request_body;   /* the message exactly as received (republish, outbox) */
  size_t request_body_len;
  const char *headers_json; /* the message's AMQP headers as a JSON object text, or NULL */
  int priority;             /* its AMQP priority, -1 when absent */
  long long created_time;   /* unix seconds, -1 when absent */
  const char *log_path;     /* the job's log file when it exists (NULL: keep the row's) */
  int lease_ms;
  int max_attempts; /* no claim beyond this attempt */
  /* out */
  int try_no;                    /* claimed: the number of the try the claim started */
  int claimed;                   /* 1: this caller owns a new attempt and must run the job */
  int attempt;                   /* the fencing token (claimed) or the current attempt */
  char state[MQPROC__STATE_LEN]; /* state after the statement */
  int tries;                     /* processor runs so far */
  int requeues;
  int result_published;
  int callbacks_done;      /* callback_state is set */
  int outbox_pending;      /* final, and its holder or the outbox sweep still sends it */
  int lease_live;          /* RUNNING under a lease that has not expired */
  int64_t lease_left_ms;   /* when lease_live */
  char worker_id_now[128]; /* holder, when not claimed */
  char holder_host[256];   /* the holder's host and pid from its workers row ("", 0: none) */
  int holder_pid;
} mqproc__claim_t;

/* start_try: record a new try (tries + 1) of attempt; *try_no gets its number. */
typedef struct mqproc__store_start_try {
  const char *job_id;
  int attempt;
  const char *worker_id;
  const char *log_path; /* the job's log file when it exists (NULL: keep the row's) */
  int *try_no;          /* out: the caller's until done */
} mqproc__store_start_try_t;

/* How a try ended. */
typedef struct mqproc__try_end {
  int ok;
  int exit_code;   /* -1 when none */
  int term_signal; /* 0 when none */
  int64_t duration_ms;
  const char *error; /* NULL when ok */
} mqproc__try_end_t;

/* end_try: record how try try_no ended (a failed try; succeed records a good one). */
typedef struct mqproc__store_end_try {
  const char *job_id;
  int attempt;
  int try_no;
  mqproc__try_end_t end;
  const char *log_path; /* the job's log file when it exists (NULL: keep the row's) */
} mqproc__store_end_try_t;

/* succeed: try try_no ended well (end) and the job is RUNNING -> SUCCESS, in one write
 * (no try row: a try that succeeded is the job row's). outbox: the result (result) or
 * callbacks (callbacks) are still to be sent by this holder, whose delivery is acked now:
 * an outbox mark with a lease of lease_ms carries them for the outbox sweep, and the row
 * says they went out (result_published, callback_state OK) unless outbox_done records
 * otherwise; outbox_done lets the mark go once everything is out. log_text: the try's
 * output when it stayed in memory (no file was made), kept in the row; log_path: the job's
 * log file when it exists (NULL each: keep the row's). */
typedef struct mqproc__store_succeed {
  const char *job_id;
  int attempt;
  int try_no;
  mqproc__try_end_t end;
  int outbox;
  int result;    /* a result message is to be sent */
  int callbacks; /* callbacks are to be posted */
  int lease_ms;
  const char *log_text;
  const char *log_path;
  /* succeed only, where the queue is a table of this store (store/queue.h): the job's
   * message is acked in the same write (deleted, fenced as q_ack: q_consumer NULL: not),
   * and its result inserted into result_queue (NULL: none; a message as q_publish's,
   * message_id = job_id), which the row then records as published. One commit for the
   * outcome, the ack and the result. */
  const char *q_consumer;
  int64_t q_id;
  int q_deliveries;
  const char *result_queue;
  const void *result_body;
  size_t result_len;
  const char *result_content_type;
  const char *result_headers_json;
} mqproc__store_succeed_t;

/* cancelled: the holder of attempt stopped a cancelled job: RUNNING -> CANCELLED, with
 * the try recorded failed and outbox as for succeed (the same arguments). */
typedef mqproc__store_succeed_t mqproc__store_cancelled_t;

/* fail: RUNNING -> QUEUED (requeues + 1) while requeues < max_requeues, else FAILED;
 * *requeued says which. republish: the delivery was acked early, so a QUEUED job needs a
 * new message (the sweeper sends it). */
typedef struct mqproc__store_fail {
  const char *job_id;
  int attempt;
  const char *error;
  int max_requeues;
  int republish;
  int *requeued; /* out: the caller's until done */
} mqproc__store_fail_t;

/* release: RUNNING -> QUEUED without counting a requeue (shutdown); republish as for
 * fail; refund 1: the attempt never ran a try (a claimed-ahead job handed back), so it
 * does not count against --max-attempts (attempt_base grows with it). */
typedef struct mqproc__store_release {
  const char *job_id;
  int attempt;
  const char *why;
  int refund;
  int republish;
} mqproc__store_release_t;

/* give_up: a job out of attempts (QUEUED, or RUNNING under an expired lease, still at
 * attempt) -> FAILED. */
typedef struct mqproc__store_give_up {
  const char *job_id;
  int attempt;
  const char *why;
} mqproc__store_give_up_t;

/* ack_early: the holder of attempt acked its delivery; the row alone carries the job. */
typedef struct mqproc__store_ack_early {
  const char *job_id;
  int attempt;
} mqproc__store_ack_early_t;

/* renew: extend the lease of attempt by lease_ms (while it runs, and while an early-acked
 * holder still sends the outcome of a final job). */
typedef struct mqproc__store_renew {
  const char *job_id;
  int attempt;
  int lease_ms;
} mqproc__store_renew_t;

/* ping: is the store reachable? No arguments. */

/* A job whose message must be published again (sweep). */
typedef struct mqproc__sweep_row {
  const char *job_id;
  int attempt;
  const char *request_json;
  const char *format; /* "json" or "yaml" */
  const void *body;   /* the original message; NULL for rows older than schema 4 */
  size_t body_len;
  int priority;             /* the message's AMQP priority; -1: none */
  const char *headers_json; /* its AMQP headers as a JSON object; NULL: none */
} mqproc__sweep_row_t;

/* sweep: jobs of processor whose early-acked holder's lease expired, or that wait for a
 * republish, are set QUEUED with republish pending (and a lease_ms grace so other
 * sweepers skip them); each is passed to row() on the loop before done (at most limit). */
typedef struct mqproc__store_sweep {
  const char *processor;
  int lease_ms;
  int limit;
  void (*row)(void *ud, const mqproc__sweep_row_t *r);
} mqproc__store_sweep_t;

/* A final job whose outcome still has to be sent (sweep_outbox). */
typedef struct mqproc__outbox_row {
  const char *job_id;
  const char *request_json;
  const char *format; /* "json" or "yaml" */
  const void *body;   /* the original message; NULL for rows older than schema 4 */
  size_t body_len;
  const char *state; /* SUCCESS or FAILED */
  int attempt;
  int result_published;
  int callbacks_done;
  int dead_letter_pending; /* FAILED, and its dead letter was never confirmed */
  const char *last_error;  /* why it FAILED ("" when none recorded) */
} mqproc__outbox_row_t;

/* sweep_outbox: final jobs whose early-acked holder died before sending their result and
 * callbacks; each is taken for lease_ms and passed to row() (at most limit). */
typedef struct mqproc__store_sweep_outbox {
  const char *processor;
  int lease_ms;
  int limit;
  void (*row)(void *ud, const mqproc__outbox_row_t *r);
} mqproc__store_sweep_outbox_t;

/* republished: the broker confirmed the republished message of a QUEUED job. */
typedef struct mqproc__store_republished {
  const char *job_id;
} mqproc__store_republished_t;

/* outbox_done: the early-acked holder of attempt sent everything of a final job:
 * result_sent says whether a result was due, publish_error why it did not go out (NULL:
 * it did); callbacks_sent and callback_error likewise for the callbacks. A backend may
 * batch it with other writes, but should not hold it back: until it is stored, a dead
 * holder's result is sent again. */
typedef struct mqproc__store_outbox_done {
  const char *job_id;
  int attempt;
  int result_sent;
  const char *publish_error;
  int callbacks_sent;
  const char *callback_error;
} mqproc__store_outbox_done_t;

/* dead_lettered: the broker confirmed the dead letter of a FAILED early-acked job (the
 * outbox sweep sends it while it is pending: fail sets that for such jobs). */
typedef struct mqproc__store_dead_lettered {
  const char *job_id;
  int attempt;
} mqproc__store_dead_lettered_t;

/* mark_published: the result message was confirmed by the broker (error NULL) or not. */
typedef struct mqproc__store_mark_published {
  const char *job_id;
  const char *error;
} mqproc__store_mark_published_t;

/* record_callbacks: the outcome of the callback POSTs (error NULL: all went through). */
typedef struct mqproc__store_record_callbacks {
  const char *job_id;
  const char *error;
} mqproc__store_record_callbacks_t;

/* record_dead: a message given up on goes to the dead-letter table with the job_id when
 * one could be read (NULL otherwise): at most keep bytes of its body, its length and
 * SHA-256. Job rows are not touched: a misrouted or malformed copy must not decide the
 * fate of the job it names. */
typedef struct mqproc__store_record_dead {
  const char *processor;
  const char *job_id;
  const void *body;
  size_t len;
  size_t size; /* > len: the message's whole size, body its start only (not read: a table
                  queue's body over --max-message-size); its SHA-256 is then unknown (NULL) */
  size_t keep;
  const char *reason;
  const char *worker_id;
} mqproc__store_record_dead_t;

/* beat: refresh this server's workers row and read the operator's wish for it; each
 * RUNNING job it holds whose cancel was requested is passed to cancel() on the loop
 * before done. The request points at the caller's struct, as for claim. */
typedef struct mqproc__beat {
  /* in */
  const char *worker_id;
  const char *processor;
  const char *host;
  int pid;
  const char *version;
  long long started_ms; /* unix ms */
  int interval_ms;
  const char *state; /* starting, running, paused, draining, stopped */
  int concurrency;
  int in_flight;
  long long jobs_done, jobs_failed;
  const char *const *current_jobs; /* job ids held now */
  size_t n_current;
  int restarts;     /* --instances: how often the supervisor restarted this slot */
  const char *note; /* e.g. the crash-loop delay before this start; NULL: none */
  void (*cancel)(void *ud, const char *job_id, int attempt); /* NULL: cancels ignored */
  /* out */
  char wish[16];     /* the operator's wish for this server: "", "pause" or "drain" */
  char wish_by[128]; /* who made it (user@host, web:ADDR); "" when none */
  long long wish_at; /* when (the store's clock, unix ms): tells one drain from the next */
} mqproc__beat_t;

/* For the backends' beat: the wish row's text "WISH<TAB>SET_BY" and its time into b. */
void mqproc__beat_wish(mqproc__beat_t *b, const char *text, long long at_ms);

/* holder_gone: the server worker_id on host with pid is known dead (this server saw the
 * pid gone on its own host): its jobs may be taken over at once. by: who saw it. */
typedef struct mqproc__store_holder_gone {
  const char *worker_id;
  const char *host;
  int pid;
  const char *by;
} mqproc__store_holder_gone_t;

/* ---- table queues: the messages of store/queue.c's broker backend (docs/table-queue.md) */

/* One message of a table queue as q_take hands it over; its pointers are valid during the
 * row() call only. */
typedef struct mqproc__q_msg {
  int64_t id;       /* its row's id: the delivery tag, never used twice */
  int deliveries;   /* takes so far, this one included (> 1: delivered before) */
  int priority;     /* higher first */
  const void *body; /* the message as sent (its first len bytes only when size > len) */
  size_t len;
  size_t size; /* the body's whole size when larger than the take's max_body: then only its
                  start was read (body, len), for the dead letter; 0: body is all of it */
  const char *content_type; /* never NULL */
  const char *message_id;   /* NULL when none */
  const char *headers_json; /* a JSON object's text; NULL when none */
} mqproc__q_msg_t;

/* q_take: up to limit messages of queue become consumer's for visibility_ms, each delivery
 * counted: first those whose holder let their deadline pass (it died), then ready ones,
 * the highest priority first, then the oldest. Each is passed to row() on the loop before
 * done (in no particular order). */
typedef struct mqproc__store_q_take {
  const char *queue;
  const char *consumer; /* the server's worker id */
  int limit;
  int visibility_ms;
  size_t max_body; /* > 0: a body larger than this is not read, only its start and size
                      (PostgreSQL; --max-message-size, whose check dead-letters it) */
  void (*row)(void *ud, const mqproc__q_msg_t *m);
  /* Its rows and done may come before its write commits, so that the requests they make
   * in that loop turn (the claims of the jobs taken) join the same transaction (PostgreSQL:
   * the round stays open for them; elsewhere: after the commit, as any request). If that
   * transaction fails after all, the take is undone: its messages are ready again, and the
   * claims made for them run again alone (their messages come back to a take; the job
   * table fences what follows). Only where the queue is the job store's own database. */
  int early;
} mqproc__store_q_take_t;

/* q_ack: the n messages ids[i] that consumer holds at delivery count deliveries[i] are
 * deleted; q_nack: they are ready again (their count kept), or deleted when requeue is 0.
 * Fenced: a message another server took since (its holder's deadline passed) is not
 * touched. settled (NULL: not wanted): how many were, the caller's until done. */
typedef struct mqproc__store_q_settle {
  const char *consumer;
  size_t n;
  const int64_t *ids;
  const int *deliveries;
  int requeue; /* q_nack */
  int *settled;
} mqproc__store_q_settle_t;
typedef mqproc__store_q_settle_t mqproc__store_q_ack_t;
typedef mqproc__store_q_settle_t mqproc__store_q_nack_t;

/* q_publish: a message into queue; it is there once done says MQPROC_OK (the commit: a
 * publisher's confirm). Listeners of the queue are told when it commits (PostgreSQL:
 * a NOTIFY on the queue's own channel, mqproc_queue_channel(queue), with the queue's name;
 * SQLite: a line in the notice file). */
typedef struct mqproc__store_q_publish {
  const char *queue;
  const void *body;
  size_t len;
  const char *content_type; /* NULL: application/json */
  const char *message_id;   /* NULL: none */
  const char *headers_json; /* a JSON object's text; NULL: none */
  int priority;             /* < 0: 0 */
} mqproc__store_q_publish_t;

/* q_extend: the messages ids[0..n) that consumer holds stay invisible for visibility_ms
 * from now; held (NULL: not wanted): how many it still held, the caller's until done. */
typedef struct mqproc__store_q_extend {
  const char *consumer;
  size_t n;
  const int64_t *ids;
  int visibility_ms;
  int *held;
} mqproc__store_q_extend_t;

/* q_reset: every message of queue that consumer holds is ready again (a server's
 * (re)connect: what it held before is given back, as a broker requeues the deliveries of
 * a closed connection). */
typedef struct mqproc__store_q_reset {
  const char *queue;
  const char *consumer;
} mqproc__store_q_reset_t;

/* ---- requests ----------------------------------------------------------------------- */

/* Called on the loop when a request ended: MQPROC_OK, or an error as above with err
 * saying why. Never called from within the call that made the request. */
typedef void (*mqproc__store_done_cb)(void *ud, int rc, const char *err);

/* One asynchronous request: op names the member of u that holds its arguments. Made by
 * the helpers below, which keep the two together. */
typedef struct mqproc__store_req {
  mqproc__store_op_t op;
  union {
    mqproc__claim_t *claim; /* in and out: the caller's until done */
    mqproc__store_start_try_t start_try;
    mqproc__store_end_try_t end_try;
    mqproc__store_succeed_t succeed;
    mqproc__store_cancelled_t cancelled;
    mqproc__store_fail_t fail;
    mqproc__store_release_t release;
    mqproc__store_give_up_t give_up;
    mqproc__store_ack_early_t ack_early;
    mqproc__store_renew_t renew;
    /* ping: none */
    mqproc__store_sweep_t sweep;
    mqproc__store_sweep_outbox_t sweep_outbox;
    mqproc__store_republished_t republished;
    mqproc__store_outbox_done_t outbox_done;
    mqproc__store_dead_lettered_t dead_lettered;
    mqproc__store_mark_published_t mark_published;
    mqproc__store_record_callbacks_t record_callbacks;
    mqproc__store_record_dead_t record_dead;
    mqproc__beat_t *beat; /* in and out: the caller's until done */
    mqproc__store_holder_gone_t holder_gone;
    mqproc__store_q_take_t q_take;
    mqproc__store_q_ack_t q_ack;
    mqproc__store_q_nack_t q_nack;
    mqproc__store_q_publish_t q_publish;
    mqproc__store_q_extend_t q_extend;
    mqproc__store_q_reset_t q_reset;
  } u;
  mqproc__store_done_cb done;
  void *ud;
} mqproc__store_req_t;

struct mqproc__store_class {
  const char *name;
  /* ---- synchronous, before the loop runs (and for `mqproc migrate`) ---- */
  /* open: check the schema is at the version this build expects. */
  int (*open)(mqproc__store_t *s, char *err);
  /* migrate: create or upgrade the schema (idempotent, safe to run concurrently). */
  int (*migrate)(mqproc__store_t *s, char *err);
  /* ---- asynchronous ---- */
  /* submit: queue req. The backend copies what it needs of it (the request and every
     string and body it points to may go once submit returns); the out pointers (claim,
     beat, start_try's try_no, fail's requeued) must stay valid until done is called.
     MQPROC_OK, or an error (MQPROC_ENOMEM) when the request could not even be queued:
     done is not called then. */
  int (*submit)(mqproc__store_t *s, const mqproc__store_req_t *req);
  /* listen: from now on, cb(ud, payload) runs on the loop for every notice the operators'
     commands send (payload: a processor's name). A hint only: notices sent while the
     connection was down are lost, so the server also reads its wish with every beat. */
  void (*listen)(mqproc__store_t *s, void (*cb)(void *ud, const char *payload), void *ud);
  /* listen_queues: from now on, cb(ud, queue) runs on the loop when a message may have
     been published to the table queue named queue in this database (q_publish,
     mqproc_enqueue(); PostgreSQL tells only the listeners of that queue's channel, so a
     server is not woken by other queues' messages, results included; SQLite's notice file
     may name others: cb checks). A hint only: notices sent while the connection was down
     are lost, so store/queue.c also looks now and then; cb NULL: no more. NULL where the
     backend has none. Returns 1 when notices will come, 0 when they cannot (PostgreSQL
     through a pooler, no loop, no notice file). */
  int (*listen_queues)(mqproc__store_t *s, const char *queue,
                       void (*cb)(void *ud, const char *queue), void *ud);
  /* forget: requests of ud still pending complete without calling back (ud goes away). */
  void (*forget)(mqproc__store_t *s, void *ud);
  /* destroy: close and free (pending requests are dropped without a call back). */
  void (*destroy)(mqproc__store_t *s);
  /* schema: synchronous, for `mqproc migrate`'s report: the schema's version and how many
     steps mqproc_schema_migrations records (0 and 0 for a database without the schema,
     never made by asking). NULL: not known. */
  int (*schema)(mqproc__store_t *s, int *version, int *steps, char *err);
};

struct mqproc__store {
  const struct mqproc__store_class *klass;
};

/* The backend url names (sqlite:///PATH, else a PostgreSQL URL or conninfo); loop: the
 * loop that drives its connection (NULL: only the synchronous open and migrate); pooled:
 * PostgreSQL is reached through a pooler in transaction mode (--database-pooler). */
int mqproc__store_new(mqproc__store_t **out, const char *url, mqproc__loop_t *loop, int pooled,
                      char *err);

/* The PostgreSQL backend; conninfo is a libpq URI or key=value string (copied). loop: the
 * loop that drives its connection (NULL: only the synchronous open and migrate). */
/* The PostgreSQL store is reached through a pooler in transaction mode (PgBouncer 1.18):
 * every statement unnamed (Parse/Bind/Execute each time, no prepared statements), no
 * session SET, no LISTEN (the servers read wishes and cancels with each beat). Call
 * before mqproc__store_open(). */
void mqproc__store_pg_pooled(mqproc__store_t *s);
int mqproc__store_pg_new(mqproc__store_t **out, const char *conninfo, mqproc__loop_t *loop,
                         char *err);

/* The SQLite backend: url sqlite:///PATH[?synchronous=normal]; loop as above. */
int mqproc__store_sqlite_new(mqproc__store_t **out, const char *url, mqproc__loop_t *loop,
                             char *err);
/* Whether url names an SQLite store. */
int mqproc__store_is_sqlite(const char *url);
struct sqlite3;
/* A blocking connection to the SQLite store at url for operators' tools (src/ops/): the
 * store's settings (WAL, busy timeout, mq_now()), refused on a network filesystem or
 * without the schema, as a server's open is. MQPROC_OK, or an error code with err. */
int mqproc__store_sqlite_connect(const char *url, struct sqlite3 **db, char *err);

#define mqproc__store_open(s, err) ((s)->klass->open((s), (err)))
#define mqproc__store_migrate(s, err) ((s)->klass->migrate((s), (err)))
static inline int mqproc__store_schema(mqproc__store_t *s, int *version, int *steps, char *err) {
  return s->klass->schema != NULL ? s->klass->schema(s, version, steps, err) : MQPROC_EINVAL;
}
#define mqproc__store_listen(s, cb, ud) ((s)->klass->listen((s), (cb), (ud)))
#define mqproc__store_forget(s, ud) ((s)->klass->forget((s), (ud)))
static inline int mqproc__store_listen_queues(mqproc__store_t *s, const char *queue,
                                              void (*cb)(void *ud, const char *queue), void *ud) {
  return s->klass->listen_queues != NULL ? s->klass->listen_queues(s, queue, cb, ud) : 0;
}
static inline void mqproc__store_destroy(mqproc__store_t *s) {
  if (s != NULL)
    s->klass->destroy(s);
}

/* ---- the typed helpers: one per operation, each makes its request and submits it ---- */

static inline int mqproc__store_submit(mqproc__store_t *s, const mqproc__store_req_t *req) {
  return s->klass->submit(s, req);
}

static inline int mqproc__store_claim(mqproc__store_t *s, mqproc__claim_t *c,
                                      mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_CLAIM, .u.claim = c, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_start_try(mqproc__store_t *s, const mqproc__store_start_try_t *a,
                                          mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_START_TRY, .u.start_try = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_end_try(mqproc__store_t *s, const mqproc__store_end_try_t *a,
                                        mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_END_TRY, .u.end_try = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_succeed(mqproc__store_t *s, const mqproc__store_succeed_t *a,
                                        mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_SUCCEED, .u.succeed = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_cancelled(mqproc__store_t *s, const mqproc__store_cancelled_t *a,
                                          mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_CANCELLED, .u.cancelled = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_fail(mqproc__store_t *s, const mqproc__store_fail_t *a,
                                     mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_FAIL, .u.fail = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_release(mqproc__store_t *s, const mqproc__store_release_t *a,
                                        mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_RELEASE, .u.release = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_give_up(mqproc__store_t *s, const mqproc__store_give_up_t *a,
                                        mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_GIVE_UP, .u.give_up = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_ack_early(mqproc__store_t *s, const mqproc__store_ack_early_t *a,
                                          mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_ACK_EARLY, .u.ack_early = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_renew(mqproc__store_t *s, const mqproc__store_renew_t *a,
                                      mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_RENEW, .u.renew = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_ping(mqproc__store_t *s, mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_PING, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_sweep(mqproc__store_t *s, const mqproc__store_sweep_t *a,
                                      mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_SWEEP, .u.sweep = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_sweep_outbox(mqproc__store_t *s,
                                             const mqproc__store_sweep_outbox_t *a,
                                             mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_SWEEP_OUTBOX, .u.sweep_outbox = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_republished(mqproc__store_t *s,
                                            const mqproc__store_republished_t *a,
                                            mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_REPUBLISHED, .u.republished = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_outbox_done(mqproc__store_t *s,
                                            const mqproc__store_outbox_done_t *a,
                                            mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_OUTBOX_DONE, .u.outbox_done = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_dead_lettered(mqproc__store_t *s,
                                              const mqproc__store_dead_lettered_t *a,
                                              mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_DEAD_LETTERED, .u.dead_lettered = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_mark_published(mqproc__store_t *s,
                                               const mqproc__store_mark_published_t *a,
                                               mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_MARK_PUBLISHED, .u.mark_published = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_record_callbacks(mqproc__store_t *s,
                                                 const mqproc__store_record_callbacks_t *a,
                                                 mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_RECORD_CALLBACKS, .u.record_callbacks = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_record_dead(mqproc__store_t *s,
                                            const mqproc__store_record_dead_t *a,
                                            mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_RECORD_DEAD, .u.record_dead = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_beat(mqproc__store_t *s, mqproc__beat_t *b,
                                     mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_BEAT, .u.beat = b, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_holder_gone(mqproc__store_t *s,
                                            const mqproc__store_holder_gone_t *a,
                                            mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_HOLDER_GONE, .u.holder_gone = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_take(mqproc__store_t *s, const mqproc__store_q_take_t *a,
                                       mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_Q_TAKE, .u.q_take = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_ack(mqproc__store_t *s, const mqproc__store_q_ack_t *a,
                                      mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_Q_ACK, .u.q_ack = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_nack(mqproc__store_t *s, const mqproc__store_q_nack_t *a,
                                       mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_Q_NACK, .u.q_nack = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_publish(mqproc__store_t *s, const mqproc__store_q_publish_t *a,
                                          mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_Q_PUBLISH, .u.q_publish = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_extend(mqproc__store_t *s, const mqproc__store_q_extend_t *a,
                                         mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {
      .op = MQPROC__STORE_Q_EXTEND, .u.q_extend = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

static inline int mqproc__store_q_reset(mqproc__store_t *s, const mqproc__store_q_reset_t *a,
                                        mqproc__store_done_cb done, void *ud) {
  mqproc__store_req_t req = {.op = MQPROC__STORE_Q_RESET, .u.q_reset = *a, .done = done, .ud = ud};
  return mqproc__store_submit(s, &req);
}

/* The schema migrations, in order (generated from sql/ at build time). */
typedef struct mqproc__migration {
  int version;
  const char *name;
  const char *sql;
} mqproc__migration_t;
extern const mqproc__migration_t mqproc__migrations[];
extern const size_t mqproc__n_migrations;

#endif
