/* What operators' tools share, the CLI (src/cli/) and the status page (src/http/): the job
 * store's reads and actions over a blocking connection (store/odb.h: PostgreSQL or SQLite),
 * publishing through the blocking queue client (broker/client.h), rows as JSON. All block:
 * a server calls them only from a reader thread, never on its loop. They print nothing:
 * errors come back in err buffers (only src/cli/ prints). */
#ifndef MQPROC_OPS_H
#define MQPROC_OPS_H

#include <jansson.h>
#include <stddef.h>

#include "broker/client.h"
#include "store/odb.h"

/* ---- rows --------------------------------------------------------------------------- */

/* The rows of res as an array of objects; columns whose name is in ints are numbers,
 * in jsons are parsed as JSON. */
json_t *mqproc__rows_json(const mqproc__ores_t *res, const char *const *ints,
                          const char *const *jsons);
/* The columns of a job row that are numbers. */
extern const char *const MQPROC__JOB_INTS[];

/* ---- fleet reads (err: 512 bytes; NULL on failure) ------------------------------------ */

/* A server refreshes its row every interval_ms (fleet.h); three missed refreshes: dead.
 * PostgreSQL's and SQLite's (times in milliseconds) texts. */
#define MQPROC__SEEN_LATELY "w.last_seen > now() - 3 * w.interval_ms * interval '1 millisecond'"
#define MQPROC__SQ_SEEN_LATELY "w.last_seen > mq_now() - 3 * w.interval_ms"
/* A server's state as operators see it. */
#define MQPROC__WORKER_STATE_OF(seen)                                                              \
  "CASE WHEN w.state NOT IN ('stopped', 'dead') AND NOT " seen " THEN 'dead' ELSE w.state END"

/* The servers (of processor, or all), seen in the last hour (all: ever). */
json_t *mqproc__ops_workers(mqproc__odb_t *c, const char *processor, int all, char *err);
/* The processors with a server seen in the last day (no scan of the job table). */
json_t *mqproc__ops_processors(mqproc__odb_t *c, char *err);
/* One processor's figures (`mqproc stats`); amqp NULL: depth and consumers unknown. */
json_t *mqproc__ops_stats(mqproc__odb_t *c, mqproc__qclient_t *amqp, const char *proc);

typedef struct mqproc__jobs_filter {
  const char *state, *processor, *after; /* NULL: any / the first page */
  long long since_s;                     /* < 0: any age */
  int limit;                             /* <= 0: 50 */
} mqproc__jobs_filter_t;
/* A page of jobs, newest first; each row has a "cursor" for the next page. */
json_t *mqproc__ops_jobs(mqproc__odb_t *c, const mqproc__jobs_filter_t *f, char *err);
/* Every column of a job, its request and "tries". */
json_t *mqproc__ops_job(mqproc__odb_t *c, const char *id, char *err);
/* The last FAILED jobs, newest first. */
json_t *mqproc__ops_failures(mqproc__odb_t *c, int limit, char *err);

/* ---- dead letters (ops/dead.c; err: 512 bytes) ---------------------------------------
 * mqproc_dead_letters: every message a server gave up on. What `mqproc dead-letters` and
 * `mqproc stats` read, and the page may. */

typedef struct mqproc__dead_filter {
  const char *processor; /* NULL: every processor */
  long long after_id;    /* > 0: the page after this id (older ones) */
  long long since_s;     /* < 0: any age */
  int waiting;           /* only those not requeued */
  int limit;             /* <= 0: 50 */
} mqproc__dead_filter_t;
/* A page of dead letters, newest first: [{id, processor_name, job_id, reason, worker_id,
 * received_at, body_len, requeued_at, requeued_by}]; the last id is the next page's
 * after_id. NULL on failure. */
json_t *mqproc__ops_dead_letters(mqproc__odb_t *c, const mqproc__dead_filter_t *f, char *err);
/* One dead letter (id as text): the listed fields, body_stored (bytes kept), body_cut (the
 * body was longer than --max-message-size), body_sha256 (of the whole body, hex), body
 * (the text, at most 64 KiB, passwords masked; null when it is not UTF-8 text), message
 * (decoded and masked; null, with decode_error, when it does not decode). NULL with err
 * ("no dead letter ID") on failure. */
json_t *mqproc__ops_dead_letter(mqproc__odb_t *c, const char *id, char *err);
/* A processor's dead letters not requeued (by its index); -1 on failure. */
long long mqproc__ops_dead_count(mqproc__odb_t *c, const char *proc, char *err);

/* ---- actions (err: 512 bytes; NULL on failure) ---------------------------------------
 * What the CLI's commands and the page's buttons do, the same writes for both. actor:
 * who asks (user@host, web:ADDR); via: what relayed it (NULL: nothing). Each returns an
 * object with "audit", the line recorded in mqproc_audit (for the caller's log). */

/* Records an operator action in mqproc_audit (detail taken); the line, malloc()ed. */
char *mqproc__ops_audit(mqproc__odb_t *c, const char *actor, const char *action, const char *target,
                        long long rows, json_t *detail, char *err);

#define MQPROC__OPS_BATCH 1000
typedef struct mqproc__ops_retry {
  const char *ids;               /* JSON array of job ids; NULL: by state (and processor) */
  const char *state, *processor; /* the filter when ids is NULL */
  const char *exchange;          /* NULL: ocrd-network-default */
  const char *actor, *via;
} mqproc__ops_retry_t;
/* FAILED, CANCELLED or SUCCESS jobs back to QUEUED, their stored requests published again
 * (priority and headers kept), 1000 rows per transaction: {"jobs": [{job_id, published}],
 * "retried": N, "audit"} ("audit" null when nothing was retried: no row is written); an
 * unpublished one is published by a server's sweep. */
json_t *mqproc__ops_retry(mqproc__odb_t *c, mqproc__qclient_t *amqp, const mqproc__ops_retry_t *w,
                          char *err);
/* QUEUED jobs become CANCELLED, RUNNING ones are stopped by their holder (told at once on
 * PostgreSQL, with its next beat on SQLite); with proc, ids not delivered yet get a
 * CANCELLED row: {"jobs": [{job_id, outcome}], "cancelled": N, "audit"}, one
 * transaction. */
json_t *mqproc__ops_cancel(mqproc__odb_t *c, const char *ids, const char *proc, const char *actor,
                           const char *via, char *err);
typedef struct mqproc__ops_dead_requeue {
  const char *ids;       /* JSON array of dead-letter ids; NULL: by the filter */
  const char *processor; /* the filter (required without ids): this processor's dead letters */
  long long since_s;     /* and received within this many seconds (< 0: any age) */
  const char *exchange;  /* NULL: ocrd-network-default */
  const char *actor, *via;
} mqproc__ops_dead_requeue_t;
/* Publishes dead letters' stored bodies back to their job queues (routing key: their
 * processor; on dir:// a file in its new/), marking each requeued (when, by whom) first and
 * unmarking one whose publish failed. By ids: those given (requeued before or not); by the
 * filter: those not requeued yet, 1000 per batch. A body cut short is never sent. {
 * "dead_letters": [{id, processor_name, job_id, requeued, error}], "requeued": N, "audit"}
 * ("audit" null when nothing went out: no row is written). */
json_t *mqproc__ops_dead_requeue(mqproc__odb_t *c, mqproc__qclient_t *q,
                                 const mqproc__ops_dead_requeue_t *w, char *err);
/* How many the filter form would requeue (proc NULL: every processor); -1 on failure. */
long long mqproc__ops_dead_requeue_count(mqproc__odb_t *c, const char *proc, long long since_s,
                                         char *err);
/* Deletes dead letters received more than older_s seconds ago (of proc; NULL: all), 1000
 * per transaction: {"purged": N, "audit"}; dry_run: only {"would_purge": N}. */
json_t *mqproc__ops_dead_purge(mqproc__odb_t *c, long long older_s, const char *proc, int dry_run,
                               const char *actor, const char *via, char *err);

/* cmd pause|resume|drain for a processor's servers (worker NULL: all): the stored wish,
 * a notification to the live ones (PostgreSQL; on SQLite they read the wish with their
 * next beat), one transaction: {"audit"}. */
json_t *mqproc__ops_control(mqproc__odb_t *c, const char *cmd, const char *proc, const char *worker,
                            const char *actor, const char *via, char *err);

#endif
