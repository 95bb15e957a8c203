/* A job's row from its submission (issue 32 item 6): what `mqproc submit` and the
 * processing API (http/ocrd_api.c) share to make a job exist before its message does.
 *
 *   1. mqproc__ops_job_row():     the row, QUEUED with `republish` set and a grace lease
 *                                 (or CACHED: a job that waits for a lock or a dependency,
 *                                 published when it is released); in the caller's
 *                                 transaction when it has one
 *   2. mqproc__ops_job_publish(): the message, with confirms; once confirmed, `republish`
 *                                 is cleared, so no sweep sends it a second time
 *
 * A submitter that dies between 1 and 2 loses nothing: the servers' republish sweep
 * (server/sweeper.c) publishes a QUEUED row whose `republish` is still set once its grace
 * lease ran out. A job whose row exists already (an id given twice, a message another
 * program published) keeps the row it has: its claim decides, as before. Blocking: never
 * on a server's loop. */
#ifndef MQPROC_OPS_SUBMIT_H
#define MQPROC_OPS_SUBMIT_H

#include <stddef.h>

#include "broker/client.h"
#include "store/odb.h"

/* How long a new QUEUED row waits for its submitter's confirm before a server's sweep
 * publishes it instead (the grace `mqproc jobs retry` gives its rows too). */
#define MQPROC__OPS_GRACE_PG "interval '60 seconds'"
#define MQPROC__OPS_GRACE_SQ "60000"

typedef struct mqproc__ops_job {
  const char *job_id;
  const char *processor; /* the queue */
  const void *body;      /* the message as published (JSON or YAML text) */
  size_t len;
  const char *format;         /* "json" or "yaml" (NULL: json) */
  const char *exchange;       /* NULL: ocrd-network-default */
  int priority;               /* < 0: none */
  const char *const *headers; /* "key=value", n_headers of them */
  size_t n_headers;
  long long created_time; /* the message's, in seconds; < 0: none */
} mqproc__ops_job_t;

/* Inserts j's row in state (QUEUED: republish pending under the grace lease; CACHED:
 * waiting, nothing to publish yet): 1 inserted, 0 a row with that id exists (left as it
 * is), -1 with err (512 bytes). */
int mqproc__ops_job_row(mqproc__odb_t *c, const mqproc__ops_job_t *j, const char *state, char *err);

/* Publishes j (mandatory, confirmed) and, when confirmed, clears the row's republish mark
 * (only while nobody claimed it yet; c NULL: no row): 0, or -1 with err when the broker did not
 * take it (the row keeps its mark: a server's sweep sends it later; see drop). */
int mqproc__ops_job_publish(mqproc__odb_t *c, mqproc__qclient_t *q, const mqproc__ops_job_t *j,
                            char *err);

/* Deletes the row j's submitter inserted and could not publish (a refusal it reports,
 * e.g. unroutable): only while it is still the unclaimed QUEUED row it wrote. */
void mqproc__ops_job_drop(mqproc__odb_t *c, const char *job_id);

#endif
