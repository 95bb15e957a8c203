/* PostgreSQL job store, part three: the sweeps (republish, outbox) and the marks written
 * after a job's outcome (published, callbacks, outbox done, dead letters). Requests for
 * the asynchronous engine, like store/pg.c's. */
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
 * A holder's lease ends as LEASE_END says (see store/pg.c). */
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

/* Final jobs whose early-acked holder died before it sent their result or callbacks
 * (nothing would replay them: their message was acked). Taken for a grace lease. */
static const char OUTBOX_SQL[] =
    "UPDATE mqproc_jobs SET lease_until = now() + $2::int * interval '1 millisecond',"
    " updated_at = now()"
    " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = $1"
    "   AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') AND delivery_acked"
    "   AND " LEASE_END("lease_until", "$2::int") " < now()"
    "   ORDER BY lease_until LIMIT $3::int FOR UPDATE SKIP LOCKED)"
    " RETURNING job_id, request::text, request_format, state, attempt, result_published,"
    "   callback_state IS NOT NULL, dead_letter_pending, coalesce(last_error, ''),"
    "   request_body";
/* clang-format on */

/* A bytea column of a text-format result, unescaped (NULL for SQL NULL). */
static unsigned char *bytea_value(PGresult *res, int row, int col, size_t *len) {
  *len = 0;
  if (PQgetisnull(res, row, col))
    return NULL;
  return PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, col), len);
}

static int parse_sweep(pg_req_t *r, PGresult *res, const int *rows, int n) {
  void (*cb)(void *, const mqproc__sweep_row_t *) =
      (void (*)(void *, const mqproc__sweep_row_t *))r->row_cb;
  for (int k = 0; k < n; k++) {
    int i = rows[k];
    mqproc__sweep_row_t row = {.job_id = PQgetvalue(res, i, 0),
                               .request_json = PQgetvalue(res, i, 1),
                               .format = PQgetvalue(res, i, 2),
                               .attempt = atoi(PQgetvalue(res, i, 4)),
                               .priority = atoi(PQgetvalue(res, i, 5)),
                               .headers_json =
                                   PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6)};
    unsigned char *body = bytea_value(res, i, 3, &row.body_len);
    row.body = body;
    if (!PQgetisnull(res, i, 1))
      cb(r->ud, &row);
    PQfreemem(body);
  }
  return MQPROC_OK;
}

static const pg_stmt_t SWEEP = {"mqproc_sweep", SWEEP_SQL, 3, 0, 0, parse_sweep};

int mqproc__pg_sweep(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                     void (*row)(void *ud, const mqproc__sweep_row_t *r),
                     mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &SWEEP, NULL, (void *)row, done, ud, "sii", processor, lease_ms,
                            limit);
}

static int parse_outbox(pg_req_t *r, PGresult *res, const int *rows, int n) {
  void (*cb)(void *, const mqproc__outbox_row_t *) =
      (void (*)(void *, const mqproc__outbox_row_t *))r->row_cb;
  for (int k = 0; k < n; k++) {
    int i = rows[k];
    mqproc__outbox_row_t row = {.job_id = PQgetvalue(res, i, 0),
                                .request_json = PQgetvalue(res, i, 1),
                                .format = PQgetvalue(res, i, 2),
                                .state = PQgetvalue(res, i, 3),
                                .attempt = atoi(PQgetvalue(res, i, 4)),
                                .result_published = PQgetvalue(res, i, 5)[0] == 't',
                                .callbacks_done = PQgetvalue(res, i, 6)[0] == 't',
                                .dead_letter_pending = PQgetvalue(res, i, 7)[0] == 't',
                                .last_error = PQgetvalue(res, i, 8)};
    unsigned char *body = bytea_value(res, i, 9, &row.body_len);
    row.body = body;
    if (!PQgetisnull(res, i, 1))
      cb(r->ud, &row);
    PQfreemem(body);
  }
  return MQPROC_OK;
}

static const pg_stmt_t OUTBOX = {"mqproc_sweep_outbox", OUTBOX_SQL, 3, 0, 0, parse_outbox};

int mqproc__pg_sweep_outbox(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                            void (*row)(void *ud, const mqproc__outbox_row_t *r),
                            mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &OUTBOX, NULL, (void *)row, done, ud, "sii", processor, lease_ms,
                            limit);
}

static const pg_stmt_t REPUBLISHED = {
    "mqproc_republished",
    "UPDATE mqproc_jobs SET republish = false, lease_until = NULL,"
    " updated_at = now() WHERE job_id = $1 AND state = 'QUEUED' AND republish",
    1,
    0,
    0,
    NULL};

int mqproc__pg_republished(mqproc__store_t *s, const char *job_id, mqproc__store_done_cb done,
                           void *ud) {
  return mqproc__pg_request(s, &REPUBLISHED, NULL, NULL, done, ud, "s", job_id);
}

/* The holders of many final jobs sent everything: one statement for all, in the next
 * round (not held back as low priority: until it commits, a dead holder's result is sent
 * again by the outbox sweep, so that window stays one round long). It records what the
 * result and callbacks came to and lets the row go (no lease, no outbox marks). */
static const pg_stmt_t OUTBOX_DONE = {
    "mqproc_outbox_done",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::bool[], $4::text[],"
    "   $5::bool[], $6::text[])"
    "   WITH ORDINALITY AS v(job_id, attempt, rsent, perr, csent, cerr, ord))"
    " UPDATE mqproc_jobs j SET delivery_acked = false, dead_letter_pending = false,"
    "   lease_until = NULL,"
    "   result_published = CASE WHEN v.rsent THEN v.perr IS NULL ELSE j.result_published END,"
    "   last_error = coalesce(v.perr, j.last_error),"
    "   callback_state = CASE WHEN v.csent THEN"
    "     CASE WHEN v.cerr IS NULL THEN 'OK' ELSE 'FAILED' END ELSE j.callback_state END,"
    "   callback_error = CASE WHEN v.csent THEN v.cerr ELSE j.callback_error END,"
    "   updated_at = now()"
    " FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt"
    "   AND j.state IN ('SUCCESS', 'FAILED') AND j.delivery_acked"
    " RETURNING v.ord",
    6,
    1,
    1,
    NULL};

int mqproc__pg_outbox_done(mqproc__store_t *s, const char *job_id, int attempt, int result_sent,
                           const char *publish_error, int callbacks_sent,
                           const char *callback_error, mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &OUTBOX_DONE, NULL, NULL, done, ud, "sibsbs", job_id, attempt,
                            result_sent, publish_error, callbacks_sent, callback_error);
}

static const pg_stmt_t DEAD_LETTERED = {
    "mqproc_dead_lettered",
    "UPDATE mqproc_jobs SET dead_letter_pending = false, updated_at = now()"
    " WHERE job_id = $1 AND attempt = $2::int AND dead_letter_pending",
    2,
    0,
    0,
    NULL};

int mqproc__pg_dead_lettered(mqproc__store_t *s, const char *job_id, int attempt,
                             mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &DEAD_LETTERED, NULL, NULL, done, ud, "si", job_id, attempt);
}

static const pg_stmt_t MARK_PUBLISHED = {
    "mqproc_mark_published",
    "UPDATE mqproc_jobs SET result_published = ($2::text IS NULL),"
    " last_error = coalesce($2, last_error), updated_at = now() WHERE job_id = $1",
    2,
    0,
    0,
    NULL};

int mqproc__pg_mark_published(mqproc__store_t *s, const char *job_id, const char *error,
                              mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &MARK_PUBLISHED, NULL, NULL, done, ud, "ss", job_id, error);
}

static const pg_stmt_t RECORD_CALLBACKS = {
    "mqproc_record_callbacks",
    "UPDATE mqproc_jobs SET callback_state = CASE WHEN $2::text IS NULL THEN 'OK'"
    " ELSE 'FAILED' END, callback_error = $2, updated_at = now() WHERE job_id = $1",
    2,
    0,
    0,
    NULL};

int mqproc__pg_record_callbacks(mqproc__store_t *s, const char *job_id, const char *error,
                                mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &RECORD_CALLBACKS, NULL, NULL, done, ud, "ss", job_id, error);
}

static const pg_stmt_t RECORD_DEAD = {
    "mqproc_record_dead",
    "INSERT INTO mqproc_dead_letters (processor_name, job_id, reason, body,"
    " worker_id, body_len, body_sha256)"
    " VALUES ($1, $2, $3, $4::bytea, $5, $6::bigint, $7::bytea)",
    7,
    0,
    0,
    NULL};

int mqproc__pg_record_dead(mqproc__store_t *s, const char *processor, const char *job_id,
                           const void *body, size_t len, size_t keep, const char *reason,
                           const char *worker_id, mqproc__store_done_cb done, void *ud) {
  unsigned char sha[32];
  mqproc__sha256(body != NULL ? body : "", len, sha);
  return mqproc__pg_request(s, &RECORD_DEAD, NULL, NULL, done, ud, "sssysly", processor, job_id,
                            reason, body != NULL ? body : "", len < keep ? len : keep, worker_id,
                            (long long)len, (const void *)sha, sizeof(sha));
}
