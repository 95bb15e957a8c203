/* Job store interface: the job table is the source of truth for every job.
 *
 * A backend fills a struct mqproc__store_class and puts a pointer to it first in its
 * private state; callers use the mqproc__store_* wrappers. Backends: store/pg.c
 * (PostgreSQL via libpq). An SQLite store comes later.
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

#define MQPROC__STATE_LEN 16

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
  const char *log_path;     /* of the first try, which a claim starts */
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

/* What a server says about itself every refresh (mqproc__store_beat). */
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
  /* out */
  char wish[16]; /* the operator's wish for this server: "", "pause" or "drain" */
} mqproc__beat_t;

/* A job whose message must be published again (mqproc__store_sweep). */
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

/* A final job whose outcome still has to be sent (mqproc__store_sweep_outbox). */
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

typedef struct mqproc__try_end {
  int ok;
  int exit_code;   /* -1 when none */
  int term_signal; /* 0 when none */
  int64_t duration_ms;
  const char *error; /* NULL when ok */
} mqproc__try_end_t;

/* Called on the loop when a request ended: MQPROC_OK, or an error as above with err
 * saying why. Never called from within the call that made the request. */
typedef void (*mqproc__store_done_cb)(void *ud, int rc, const char *err);

/* Every asynchronous method copies its string and struct arguments; its out pointers
 * (claim, try_no, requeued) must stay valid until done is called. It returns MQPROC_OK,
 * or MQPROC_ENOMEM when the request could not even be queued (done is not called then). */
struct mqproc__store_class {
  const char *name;
  /* ---- synchronous, before the loop runs (and for `mqproc migrate`) ---- */
  /* open: check the schema is at the version this build expects. */
  int (*open)(mqproc__store_t *s, char *err);
  /* migrate: create or upgrade the schema (idempotent, safe to run concurrently). */
  int (*migrate)(mqproc__store_t *s, char *err);
  /* ---- asynchronous ---- */
  /* claim: the idempotent claim (see mqproc__claim_t); a claimed job's first try starts in
     the same write (c->try_no, with c->log_path). */
  int (*claim)(mqproc__store_t *s, mqproc__claim_t *c, mqproc__store_done_cb done, void *ud);
  /* start_try: record a new try (tries + 1) of attempt; *try_no gets its number. */
  int (*start_try)(mqproc__store_t *s, const char *job_id, int attempt, const char *worker_id,
                   const char *log_path, int *try_no, mqproc__store_done_cb done, void *ud);
  /* end_try: record how try try_no ended (a failed try; succeed records a good one). */
  int (*end_try)(mqproc__store_t *s, const char *job_id, int attempt, int try_no,
                 const mqproc__try_end_t *e, mqproc__store_done_cb done, void *ud);
  /* succeed: try try_no ended well (e) and the job is RUNNING -> SUCCESS, in one write.
     outbox: the result or callbacks are still to be sent by this holder, whose delivery is
     acked now: the row keeps delivery_acked and a lease for the outbox sweep (outbox_done
     clears both once everything is out). */
  int (*succeed)(mqproc__store_t *s, const char *job_id, int attempt, int try_no,
                 const mqproc__try_end_t *e, int outbox, int lease_ms, mqproc__store_done_cb done,
                 void *ud);
  /* fail: RUNNING -> QUEUED (requeues + 1) while requeues < max_requeues, else FAILED;
     *requeued says which. republish: the delivery was acked early, so a QUEUED job needs a
     new message (the sweeper sends it). */
  int (*fail)(mqproc__store_t *s, const char *job_id, int attempt, const char *error,
              int max_requeues, int republish, int *requeued, mqproc__store_done_cb done, void *ud);
  /* release: RUNNING -> QUEUED without counting a requeue (shutdown); republish as above;
     refund 1: the attempt never ran a try (a claimed-ahead job handed back), so it does not
     count against --max-attempts (attempt_base grows with it). */
  int (*release)(mqproc__store_t *s, const char *job_id, int attempt, const char *why, int refund,
                 int republish, mqproc__store_done_cb done, void *ud);
  /* give_up: a job out of attempts (QUEUED, or RUNNING under an expired lease, still at
     attempt) -> FAILED. */
  int (*give_up)(mqproc__store_t *s, const char *job_id, int attempt, const char *why,
                 mqproc__store_done_cb done, void *ud);
  /* ack_early: the holder of attempt acked its delivery; the row alone carries the job. */
  int (*ack_early)(mqproc__store_t *s, const char *job_id, int attempt, mqproc__store_done_cb done,
                   void *ud);
  /* sweep: jobs of processor whose early-acked holder's lease expired, or that wait for a
     republish, are set QUEUED with republish pending (and a lease_ms grace so other
     sweepers skip them); each is passed to row() before done (at most limit). */
  int (*sweep)(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
               void (*row)(void *ud, const mqproc__sweep_row_t *r), mqproc__store_done_cb done,
               void *ud);
  /* republished: the broker confirmed the republished message of a QUEUED job. */
  int (*republished)(mqproc__store_t *s, const char *job_id, mqproc__store_done_cb done, void *ud);
  /* ping: is the store reachable? */
  int (*ping)(mqproc__store_t *s, mqproc__store_done_cb done, void *ud);
  /* renew: extend the lease of attempt by lease_ms (while it runs, and while an early-acked
     holder still sends the outcome of a final job). */
  int (*renew)(mqproc__store_t *s, const char *job_id, int attempt, int lease_ms,
               mqproc__store_done_cb done, void *ud);
  /* outbox_done: the early-acked holder of attempt sent everything of a final job:
     published says whether the result went out (NULL error) or why not; callbacks_error
     likewise for the callbacks (callbacks_sent 0: none were due). A backend may batch it
     with other writes, but should not hold it back: until it is stored, a dead holder's
     result is sent again. */
  int (*outbox_done)(mqproc__store_t *s, const char *job_id, int attempt, int result_sent,
                     const char *publish_error, int callbacks_sent, const char *callback_error,
                     mqproc__store_done_cb done, void *ud);
  /* dead_lettered: the broker confirmed the dead letter of a FAILED early-acked job (the
     outbox sweep sends it while it is pending: fail() sets that for such jobs). */
  int (*dead_lettered)(mqproc__store_t *s, const char *job_id, int attempt,
                       mqproc__store_done_cb done, void *ud);
  /* sweep_outbox: final jobs whose early-acked holder died before sending their result
     and callbacks; each is taken for lease_ms and passed to row() (at most limit). */
  int (*sweep_outbox)(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                      void (*row)(void *ud, const mqproc__outbox_row_t *r),
                      mqproc__store_done_cb done, void *ud);
  /* mark_published: the result message was confirmed by the broker (or failed: error). */
  int (*mark_published)(mqproc__store_t *s, const char *job_id, const char *error,
                        mqproc__store_done_cb done, void *ud);
  /* record_callbacks: outcome of the callback POSTs (error NULL = all OK). */
  int (*record_callbacks)(mqproc__store_t *s, const char *job_id, const char *error,
                          mqproc__store_done_cb done, void *ud);
  /* record_dead: a message given up on goes to the dead-letter table with the job_id
     when one could be read (NULL otherwise): at most keep bytes of its body, its length
     and SHA-256. Job rows are not touched: a misrouted or malformed copy must not decide
     the fate of the job it names. */
  int (*record_dead)(mqproc__store_t *s, const char *processor, const char *job_id,
                     const void *body, size_t len, size_t keep, const char *reason,
                     const char *worker_id, mqproc__store_done_cb done, void *ud);
  /* beat: refresh this server's workers row from b and read the operator's wish for it
     (b->wish); each RUNNING job it holds whose cancel was requested is passed to
     cancel() before done. */
  int (*beat)(mqproc__store_t *s, mqproc__beat_t *b,
              void (*cancel)(void *ud, const char *job_id, int attempt), mqproc__store_done_cb done,
              void *ud);
  /* holder_gone: the server worker_id on host with pid is known dead (this server saw the
     pid gone on its own host): its jobs may be taken over at once. by: who saw it. */
  int (*holder_gone)(mqproc__store_t *s, const char *worker_id, const char *host, int pid,
                     const char *by, mqproc__store_done_cb done, void *ud);
  /* cancelled: the holder of attempt stopped a cancelled job: RUNNING -> CANCELLED, with
     outbox as for succeed. */
  int (*cancelled)(mqproc__store_t *s, const char *job_id, int attempt, int try_no,
                   const mqproc__try_end_t *e, int outbox, int lease_ms, mqproc__store_done_cb done,
                   void *ud);
  /* listen: from now on, cb(ud, payload) runs on the loop for every notice the operators'
     commands send (payload: a processor's name). A hint only: notices sent while the
     connection was down are lost, so the server also reads its wish with every beat. */
  void (*listen)(mqproc__store_t *s, void (*cb)(void *ud, const char *payload), void *ud);
  /* forget: requests of ud still pending complete without calling back (ud goes away). */
  void (*forget)(mqproc__store_t *s, void *ud);
  /* destroy: close and free (pending requests are dropped without a call back). */
  void (*destroy)(mqproc__store_t *s);
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

#define MQPROC__STORE_CALL(s, method, ...) ((s)->klass->method((s), __VA_ARGS__))
#define mqproc__store_open(s, err) ((s)->klass->open((s), (err)))
#define mqproc__store_migrate(s, err) ((s)->klass->migrate((s), (err)))
#define mqproc__store_claim(s, ...) MQPROC__STORE_CALL(s, claim, __VA_ARGS__)
#define mqproc__store_start_try(s, ...) MQPROC__STORE_CALL(s, start_try, __VA_ARGS__)
#define mqproc__store_end_try(s, ...) MQPROC__STORE_CALL(s, end_try, __VA_ARGS__)
#define mqproc__store_succeed(s, ...) MQPROC__STORE_CALL(s, succeed, __VA_ARGS__)
#define mqproc__store_fail(s, ...) MQPROC__STORE_CALL(s, fail, __VA_ARGS__)
#define mqproc__store_release(s, ...) MQPROC__STORE_CALL(s, release, __VA_ARGS__)
#define mqproc__store_give_up(s, ...) MQPROC__STORE_CALL(s, give_up, __VA_ARGS__)
#define mqproc__store_ack_early(s, ...) MQPROC__STORE_CALL(s, ack_early, __VA_ARGS__)
#define mqproc__store_sweep(s, ...) MQPROC__STORE_CALL(s, sweep, __VA_ARGS__)
#define mqproc__store_republished(s, ...) MQPROC__STORE_CALL(s, republished, __VA_ARGS__)
#define mqproc__store_ping(s, ...) MQPROC__STORE_CALL(s, ping, __VA_ARGS__)
#define mqproc__store_renew(s, ...) MQPROC__STORE_CALL(s, renew, __VA_ARGS__)
#define mqproc__store_outbox_done(s, ...) MQPROC__STORE_CALL(s, outbox_done, __VA_ARGS__)
#define mqproc__store_dead_lettered(s, ...) MQPROC__STORE_CALL(s, dead_lettered, __VA_ARGS__)
#define mqproc__store_sweep_outbox(s, ...) MQPROC__STORE_CALL(s, sweep_outbox, __VA_ARGS__)
#define mqproc__store_mark_published(s, ...) MQPROC__STORE_CALL(s, mark_published, __VA_ARGS__)
#define mqproc__store_record_callbacks(s, ...) MQPROC__STORE_CALL(s, record_callbacks, __VA_ARGS__)
#define mqproc__store_record_dead(s, ...) MQPROC__STORE_CALL(s, record_dead, __VA_ARGS__)
#define mqproc__store_beat(s, ...) MQPROC__STORE_CALL(s, beat, __VA_ARGS__)
#define mqproc__store_holder_gone(s, ...) MQPROC__STORE_CALL(s, holder_gone, __VA_ARGS__)
#define mqproc__store_cancelled(s, ...) MQPROC__STORE_CALL(s, cancelled, __VA_ARGS__)
#define mqproc__store_listen(s, cb, ud) ((s)->klass->listen((s), (cb), (ud)))
#define mqproc__store_forget(s, ud) ((s)->klass->forget((s), (ud)))
static inline void mqproc__store_destroy(mqproc__store_t *s) {
  if (s != NULL)
    s->klass->destroy(s);
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
