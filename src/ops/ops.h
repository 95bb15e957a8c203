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
 * "retried": N, "audit"}; an unpublished one is published by a server's sweep. */
json_t *mqproc__ops_retry(mqproc__odb_t *c, mqproc__qclient_t *amqp, const mqproc__ops_retry_t *w,
                          char *err);
/* QUEUED jobs become CANCELLED, RUNNING ones are stopped by their holder (told at once on
 * PostgreSQL, with its next beat on SQLite); with proc, ids not delivered yet get a
 * CANCELLED row: {"jobs": [{job_id, outcome}], "cancelled": N, "audit"}, one
 * transaction. */
json_t *mqproc__ops_cancel(mqproc__odb_t *c, const char *ids, const char *proc, const char *actor,
                           const char *via, char *err);
/* cmd pause|resume|drain for a processor's servers (worker NULL: all): the stored wish,
 * a notification to the live ones (PostgreSQL; on SQLite they read the wish with their
 * next beat), one transaction: {"audit"}. */
json_t *mqproc__ops_control(mqproc__odb_t *c, const char *cmd, const char *proc, const char *worker,
                            const char *actor, const char *via, char *err);

#endif
