/* What the status page reads besides the fleet reads of ops.h (issue 32): a processor's
 * last hour minute by minute, and the dead letters (messages no server could take). Like
 * ops.h's reads: blocking, over the operators' store connection (PostgreSQL or SQLite),
 * JSON out, errors in err (512 bytes), NULL on failure; run on the page's reader thread. */
#ifndef MQPROC_OPS_PAGE_READS_H
#define MQPROC_OPS_PAGE_READS_H

#include <jansson.h>

#include "store/odb.h"

/* The page counts at most this many dead letters (by their primary key, newest first):
 * a flood of them costs the page no more than that. */
#define MQPROC__DEAD_COUNT_MAX 10000

/* proc's last hour by the minute the jobs ended in, the oldest minute first, 60 values
 * each: {"finished": [n], "failed": [n], "wait_ms": [the mean wait from the message's
 * created_time (else queued_at) to the job's start, or null]}. By the end_time index. */
json_t *mqproc__ops_hour(mqproc__odb_t *c, const char *proc, char *err);

/* The dead letters (mqproc_dead_letters: the messages of jobs that FAILED, and messages
 * no server could read or take), newest first: {"total": N, "more": true when there are
 * more than MQPROC__DEAD_COUNT_MAX (total is then that), "by_processor": {P: n} (absent
 * with more), "rows": [at most limit of {id, processor_name, job_id, reason, worker_id,
 * received_at, body_len, has_job (the job table has job_id)}]}; the bodies are not read,
 * passwords in reasons are masked. */
json_t *mqproc__ops_dead_letters_recent(mqproc__odb_t *c, int limit, char *err);

#endif
