/* PostgreSQL job store: the statements of the sweeps (republish, outbox) and of the marks
 * written after a job's outcome (republished, outbox done, dead letters, published,
 * callbacks), in store.h's order of operations; each with its bind (the request's named
 * fields into its parameters) and its parse, in store/pg/jobs.c's table like the job's
 * own statements. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

/* clang-format off */
/* Collects jobs to republish: an early-acked job whose holder's lease expired (the holder
 * is gone and no message exists for it) or a QUEUED job still waiting for its message.
 * They become QUEUED with republish pending and a grace lease, so concurrent sweepers skip
 * them while this one publishes; if this one dies, the grace runs out and another sends.
 * A holder's lease ends as LEASE_END says (see store/pg/jobs.c). */
static const char SWEEP_SQL[] =
    "UPDATE mqproc_jobs SET state = 'QUEUED', republish = true, delivery_acked = false,"
    " worker_id = NULL, lease_until = now() + $2::int * interval '1 millisecond',"
    " updated_at = now()"
    " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = $1"
    "   AND ((state = 'RUNNING' AND delivery_acked"
    "       AND " LEASE_END("lease_until", "$2::int") " < now())"
    "     OR (state = 'QUEUED' AND republish AND coalesce(lease_until, now()) <= now()))"
    "   ORDER BY lease_until NULLS FIRST LIMIT $3::int FOR UPDATE SKIP LOCKED)"
    " RETURNING job_id, request::text, request_format, request_body, attempt,"
    "   coalesce(priority, -1), headers::text";

/* Final jobs whose holder died before it sent their result, callbacks or dead letter
 * (nothing would replay them: their message was acked): their outbox marks, taken for a
 * grace lease. What was sent already is not known: the result and the callbacks go again
 * (a result's message_id lets its reader drop the copy). */
static const char OUTBOX_SQL[] =
    "UPDATE mqproc_outbox o SET lease_until = now() + $2::int * interval '1 millisecond'"
    " FROM mqproc_jobs j"
    " WHERE o.job_id IN (SELECT job_id FROM mqproc_outbox WHERE processor_name = $1"
    "   AND " LEASE_END("lease_until", "$2::int") " < now()"
    "   ORDER BY lease_until LIMIT $3::int FOR UPDATE SKIP LOCKED)"
    "   AND j.job_id = o.job_id"
    " RETURNING o.job_id, j.request::text, j.request_format, j.state, o.attempt, false, false,"
    "   o.dead_letter, coalesce(j.last_error, ''), j.request_body";
/* clang-format on */

/* A bytea column of a text-format result, unescaped (NULL for SQL NULL). */
static unsigned char *bytea_value(PGresult *res, int row, int col, size_t *len) {
  *len = 0;
  if (PQgetisnull(res, row, col))
    return NULL;
  return PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, col), len);
}

static int parse_sweep(pg_req_t *r, PGresult *res, const int *rows, int n) {
  for (int k = 0; k < n; k++) {
    int i = rows[k];
    mqproc__sweep_row_t row = {
        .job_id = PQgetvalue(res, i, 0),
        .request_json = PQgetisnull(res, i, 1) ? NULL : PQgetvalue(res, i, 1),
        .format = PQgetvalue(res, i, 2),
        .attempt = atoi(PQgetvalue(res, i, 4)),
        .priority = atoi(PQgetvalue(res, i, 5)),
        .headers_json = PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6)};
    unsigned char *body = bytea_value(res, i, 3, &row.body_len);
    row.body = body;
    if (!PQgetisnull(res, i, 1) || body != NULL) /* the request: its bytes, or an old row's */
      r->out.sweep_row(r->ud, &row);
    PQfreemem(body);
  }
  return MQPROC_OK;
}

static void bind_sweep(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_sweep_t *a = &q->u.sweep;
  mqproc__pg_bind_text(r, 0, a->processor);
  mqproc__pg_bind_int(r, 1, a->lease_ms);
  mqproc__pg_bind_int(r, 2, a->limit);
  r->out.sweep_row = a->row;
}

const pg_stmt_t mqproc__pg_stmt_sweep = {"mqproc_sweep", SWEEP_SQL,   3,   0, 0,
                                         bind_sweep,     parse_sweep, NULL};

static int parse_outbox(pg_req_t *r, PGresult *res, const int *rows, int n) {
  for (int k = 0; k < n; k++) {
    int i = rows[k];
    mqproc__outbox_row_t row = {.job_id = PQgetvalue(res, i, 0),
                                .request_json =
                                    PQgetisnull(res, i, 1) ? NULL : PQgetvalue(res, i, 1),
                                .format = PQgetvalue(res, i, 2),
                                .state = PQgetvalue(res, i, 3),
                                .attempt = atoi(PQgetvalue(res, i, 4)),
                                .result_published = PQgetvalue(res, i, 5)[0] == 't',
                                .callbacks_done = PQgetvalue(res, i, 6)[0] == 't',
                                .dead_letter_pending = PQgetvalue(res, i, 7)[0] == 't',
                                .last_error = PQgetvalue(res, i, 8)};
    unsigned char *body = bytea_value(res, i, 9, &row.body_len);
    row.body = body;
    if (!PQgetisnull(res, i, 1) || body != NULL)
      r->out.outbox_row(r->ud, &row);
    PQfreemem(body);
  }
  return MQPROC_OK;
}

static void bind_sweep_outbox(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_sweep_outbox_t *a = &q->u.sweep_outbox;
  mqproc__pg_bind_text(r, 0, a->processor);
  mqproc__pg_bind_int(r, 1, a->lease_ms);
  mqproc__pg_bind_int(r, 2, a->limit);
  r->out.outbox_row = a->row;
}

const pg_stmt_t mqproc__pg_stmt_sweep_outbox = {"mqproc_sweep_outbox", OUTBOX_SQL,   3,   0, 0,
                                                bind_sweep_outbox,     parse_outbox, NULL};

static void bind_republished(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.republished.job_id);
}

const pg_stmt_t mqproc__pg_stmt_republished = {
    "mqproc_republished",
    "UPDATE mqproc_jobs SET republish = false, lease_until = NULL,"
    " updated_at = now() WHERE job_id = $1 AND state = 'QUEUED' AND republish",
    1,
    0,
    0,
    bind_republished,
    NULL,
    NULL};

static void bind_outbox_done(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_outbox_done_t *a = &q->u.outbox_done;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_bool(r, 2, a->result_sent);
  mqproc__pg_bind_text(r, 3, a->publish_error);
  mqproc__pg_bind_bool(r, 4, a->callbacks_sent);
  mqproc__pg_bind_text(r, 5, a->callback_error);
}

/* The holders of many final jobs sent everything: one statement for all. Low priority:
 * it shares the next round of other writes (at prefetch 1 the next job's claim or
 * success), waiting for one at most the engine's linger (store/pg/engine.c), so a job
 * costs two commits, not three. Until it commits a dead holder's result is sent again by
 * the outbox sweep; the linger adds at most its 25 ms to that window, and only when
 * nothing else is written. It lets the outbox marks go, and writes the job row only where
 * something did not go out (the success recorded the result and callbacks as sent). */
const pg_stmt_t mqproc__pg_stmt_outbox_done = {
    "mqproc_outbox_done",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::bool[], $4::text[],"
    "   $5::bool[], $6::text[])"
    "   WITH ORDINALITY AS v(job_id, attempt, rsent, perr, csent, cerr, ord)),"
    " o AS (DELETE FROM mqproc_outbox o USING v WHERE o.job_id = v.job_id"
    "   AND o.attempt = v.attempt RETURNING v.ord),"
    " j AS (UPDATE mqproc_jobs j SET"
    "   result_published = CASE WHEN v.rsent THEN v.perr IS NULL ELSE j.result_published END,"
    "   last_error = coalesce(v.perr, j.last_error),"
    "   callback_state = CASE WHEN v.csent THEN"
    "     CASE WHEN v.cerr IS NULL THEN 'OK' ELSE 'FAILED' END ELSE j.callback_state END,"
    "   callback_error = CASE WHEN v.csent THEN v.cerr ELSE j.callback_error END,"
    "   dead_letter_pending = false, updated_at = now()"
    "  FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt"
    "   AND ((v.rsent AND v.perr IS NOT NULL) OR (v.csent AND v.cerr IS NOT NULL)"
    "     OR (v.rsent AND NOT j.result_published) OR (v.csent AND j.callback_state IS NULL)"
    "     OR j.dead_letter_pending)"
    "  RETURNING v.ord)"
    " SELECT ord FROM o UNION SELECT ord FROM j",
    6,
    1,
    1, /* low priority: the comment above says why */
    bind_outbox_done,
    NULL,
    NULL};

static void bind_dead_lettered(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.dead_lettered.job_id);
  mqproc__pg_bind_int(r, 1, q->u.dead_lettered.attempt);
}

/* The dead letter of an early-acked FAILED job is confirmed: its outbox mark need not send
 * it again. */
const pg_stmt_t mqproc__pg_stmt_dead_lettered = {
    "mqproc_dead_lettered",
    "UPDATE mqproc_outbox SET dead_letter = false"
    " WHERE job_id = $1 AND attempt = $2::int AND dead_letter",
    2,
    0,
    0,
    bind_dead_lettered,
    NULL,
    NULL};

static void bind_mark_published(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.mark_published.job_id);
  mqproc__pg_bind_text(r, 1, q->u.mark_published.error);
}

const pg_stmt_t mqproc__pg_stmt_mark_published = {
    "mqproc_mark_published",
    "UPDATE mqproc_jobs SET result_published = ($2::text IS NULL),"
    " last_error = coalesce($2, last_error), updated_at = now() WHERE job_id = $1",
    2,
    0,
    0,
    bind_mark_published,
    NULL,
    NULL};

static void bind_record_callbacks(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.record_callbacks.job_id);
  mqproc__pg_bind_text(r, 1, q->u.record_callbacks.error);
}

const pg_stmt_t mqproc__pg_stmt_record_callbacks = {
    "mqproc_record_callbacks",
    "UPDATE mqproc_jobs SET callback_state = CASE WHEN $2::text IS NULL THEN 'OK'"
    " ELSE 'FAILED' END, callback_error = $2, updated_at = now() WHERE job_id = $1",
    2,
    0,
    0,
    bind_record_callbacks,
    NULL,
    NULL};

/* at most keep bytes of the body (none: empty), its whole length and SHA-256 (NULL when
 * only its start was read) */
static void bind_record_dead(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_record_dead_t *a = &q->u.record_dead;
  const void *body = a->body != NULL ? a->body : "";
  unsigned char sha[32];
  mqproc__sha256(body, a->len, sha);
  mqproc__pg_bind_text(r, 0, a->processor);
  mqproc__pg_bind_text(r, 1, a->job_id);
  mqproc__pg_bind_text(r, 2, a->reason);
  mqproc__pg_bind_bytes(r, 3, body, a->len < a->keep ? a->len : a->keep);
  mqproc__pg_bind_text(r, 4, a->worker_id);
  mqproc__pg_bind_int64(r, 5, (int64_t)(a->size > a->len ? a->size : a->len));
  if (a->size <= a->len)
    mqproc__pg_bind_bytes(r, 6, sha, sizeof(sha));
}

const pg_stmt_t mqproc__pg_stmt_record_dead = {
    "mqproc_record_dead",
    "INSERT INTO mqproc_dead_letters (processor_name, job_id, reason, body,"
    " worker_id, body_len, body_sha256)"
    " VALUES ($1, $2, $3, $4::bytea, $5, $6::bigint, $7::bytea)",
    7,
    0,
    0,
    bind_record_dead,
    NULL,
    NULL};
