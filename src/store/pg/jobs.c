/* PostgreSQL job store (libpq): the job's own statements, fenced by attempt,
 * parameterised SQL only, in store.h's order of operations; then the table of every
 * operation's statement (with those of store/pg/sweep.c, store/pg/fleet.c and
 * store/pg/queue.c) and the
 * class, whose submit() makes a request of the table's statement: its bind reads the
 * request's named fields into the statement's parameters with the typed bind helpers
 * below. The asynchronous engine (store/pg/engine.c) prepares every statement once per
 * connection, batches the hot ones (claim, succeed, renew, outbox_done: array parameters,
 * one execution for many jobs) and sends a round of them as one transaction; parse
 * functions read each request's rows back. The synchronous start-up connection and the
 * schema are in store/pg/conn.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

/* ---- requests ----------------------------------------------------------------------- */

void mqproc__pg_req_free(pg_req_t *r) {
  if (r == NULL)
    return;
  for (int i = 0; i < r->n; i++)
    free(r->vals[i]);
  free(r);
}

/* ---- typed bind helpers --------------------------------------------------------------- */

static void bound(pg_req_t *r, int i, char *val) {
  if (val == NULL)
    r->nomem = 1;
  r->vals[i] = val;
}

void mqproc__pg_bind_text(pg_req_t *r, int i, const char *s) {
  char *copy = NULL;
  if (s == NULL)
    return;
  if (mqproc__utf8_clean(s, &copy) == NULL) {
    r->nomem = 1;
    return;
  }
  bound(r, i, copy != NULL ? copy : mqproc__strdup(s));
}

void mqproc__pg_bind_int(pg_req_t *r, int i, int v) {
  bound(r, i, mqproc__asprintf("%d", v));
}

void mqproc__pg_bind_int64(pg_req_t *r, int i, int64_t v) {
  bound(r, i, mqproc__asprintf("%lld", (long long)v));
}

void mqproc__pg_bind_bool(pg_req_t *r, int i, int v) {
  bound(r, i, mqproc__strdup(v ? "true" : "false"));
}

void mqproc__pg_bind_bytes(pg_req_t *r, int i, const void *p, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = p;
  char *v;
  if (p == NULL)
    return;
  if (!r->stmt->batched) { /* binary */
    if ((v = mqproc__malloc(len)) != NULL)
      memcpy(v, p, len);
    bound(r, i, v);
    r->lens[i] = (int)len;
    r->fmts[i] = 1;
    return;
  }
  /* an array element: bytea's text form */
  if ((v = mqproc__malloc(2 + 2 * len + 1)) != NULL) {
    v[0] = '\\';
    v[1] = 'x';
    for (size_t k = 0; k < len; k++) {
      v[2 + 2 * k] = hex[b[k] >> 4];
      v[3 + 2 * k] = hex[b[k] & 15];
    }
    v[2 + 2 * len] = '\0';
  }
  bound(r, i, v);
}

/* A fenced write changed no row: a newer attempt owns the job (vals 0, 1: job, attempt). */
static int fenced(pg_req_t *r) {
  return mqproc__err(r->err, MQPROC_ESTORE_FENCED, "job %s: attempt %s no longer owns the job",
                     r->vals[0], r->vals[1]);
}

int mqproc__pg_parse_fenced(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (r->stmt->batched ? n == 0 : atoi(PQcmdTuples(res)) == 0)
    return fenced(r);
  return MQPROC_OK;
}

/* ---- claim -------------------------------------------------------------------------- */

/* LEASE_END (store/pg/int.h), when a holder's lease counts as over, for the claim and both
 * sweeps: at lease_until, but never within two leases (ms: the SQL parameter given) of the
 * database's start. Holders could not renew while it was down, and a server that never noticed the
 * outage (started during it, or idle) would otherwise take a live job over; a copy redelivered
 * meanwhile is held, not run, until the holders had the time to renew. */
/* clang-format off */
/* The claims of many deliveries in one statement, the common case first: a job nobody
 * has seen is inserted RUNNING at attempt 1 (its first try started) and that is all. A job
 * the table knows already (a redelivery, a takeover, a replay, a retry's new message) is
 * not inserted: its request comes back without a row and goes again with CLAIM_FULL below
 * (the engine's fallback), so the rare cases cost the common one nothing. Arrays sorted by
 * job_id: two servers' batches lock rows in the same order. */
static const char CLAIM_SQL[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[],"
    "   $5::bigint[], $6::text[], $7::int[], $8::bytea[], $9::text[], $10::jsonb[],"
    "   $11::smallint[])"
    "   WITH ORDINALITY AS v(job_id, processor, worker, lease_ms, created, fmt, maxa, body,"
    "   log_path, headers, prio, ord)),"
    " ins AS ("
    " INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, deliveries, worker_id,"
    "   lease_until, created_time, start_time, request_format, request_body, tries, log_path,"
    "   headers, priority)"
    " SELECT job_id, processor, 'RUNNING', 1, 1, worker,"
    "   now() + lease_ms * interval '1 millisecond', to_timestamp(created), now(), fmt, body, 1,"
    "   log_path, headers, prio FROM v ORDER BY job_id"
    " ON CONFLICT (job_id) DO NOTHING RETURNING job_id)"
    "SELECT v.ord, v.job_id, true, 1, 'RUNNING', 1, 0, false, false, false, 0::bigint, v.worker,"
    "   false, '', 0 FROM ins JOIN v ON v.job_id = ins.job_id";

/* The claim of a job the table knows: take it when it is QUEUED, or RUNNING under an
 * expired lease or a dead holder (attempt + 1), and start its try; otherwise count the
 * delivery and report the row as it is (held, finished, its outcome still in the outbox).
 * A takeover gives the try its holder never ended a row of its own (cut short: no end, no
 * verdict), since the job row is about to forget that holder; it started about when the
 * attempt's last failed try ended, else at the attempt's start.
 * Inserts too, for a row that went away since (purged). The server's lease and attempt
 * limit are the same in every element (one server makes a batch): element 1 stands for
 * all. Same parameters as CLAIM_SQL. */
static const char CLAIM_FULL_SQL[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[],"
    "   $5::bigint[], $6::text[], $7::int[], $8::bytea[], $9::text[], $10::jsonb[],"
    "   $11::smallint[])"
    "   WITH ORDINALITY AS v(job_id, processor, worker, lease_ms, created, fmt, maxa, body,"
    "   log_path, headers, prio, ord)),"
    " old AS (SELECT o.job_id, o.state, o.attempt, o.tries, o.worker_id, o.start_time"
    "   FROM mqproc_jobs o JOIN v ON o.job_id = v.job_id),"
    " claim AS ("
    " INSERT INTO mqproc_jobs AS j (job_id, processor_name, state, attempt, deliveries,"
    "   worker_id, lease_until, created_time, start_time, request_format, request_body, tries,"
    "   log_path, headers, priority)"
    " SELECT job_id, processor, 'RUNNING', 1, 1, worker,"
    "   now() + lease_ms * interval '1 millisecond', to_timestamp(created), now(), fmt, body, 1,"
    "   log_path, headers, prio FROM v ORDER BY job_id"
    " ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = j.attempt + 1,"
    "   deliveries = j.deliveries + 1, worker_id = EXCLUDED.worker_id,"
    "   lease_until = EXCLUDED.lease_until, start_time = now(), end_time = NULL,"
    "   delivery_acked = false, republish = false, tries = j.tries + 1,"
    "   log_path = coalesce(EXCLUDED.log_path, j.log_path),"
    "   headers = coalesce(EXCLUDED.headers, j.headers),"
    "   priority = coalesce(EXCLUDED.priority, j.priority),"
    "   request_body = coalesce(j.request_body, EXCLUDED.request_body), updated_at = now()"
    "  WHERE (j.state = 'QUEUED'"
    "     OR (j.state = 'RUNNING' AND (" LEASE_END("j.lease_until", "($4::int[])[1]") " < now()"
    "       OR coalesce(" HOLDER_DEAD_AT("j.worker_id", "($4::int[])[1]") " < now(), false))))"
    "    AND j.attempt - j.attempt_base < ($7::int[])[1]"
    " RETURNING j.job_id, true, j.attempt, j.state, j.tries, j.requeues, j.result_published,"
    "   j.callback_state IS NOT NULL, false, 0::bigint, j.worker_id, false, '', 0),"
    " cut AS (INSERT INTO mqproc_job_tries AS t (job_id, try, attempt, worker_id, started_at,"
    "   error)"
    "   SELECT o.job_id, o.tries, o.attempt, coalesce(o.worker_id, ''),"
    "     coalesce((SELECT max(p.ended_at) FROM mqproc_job_tries p WHERE p.job_id = o.job_id"
    "       AND p.attempt = o.attempt), o.start_time, now()),"
    "     'cut short: taken over by attempt ' || c.attempt"
    "   FROM old o JOIN claim c ON c.job_id = o.job_id WHERE o.state = 'RUNNING' AND o.tries > 0"
    "   ON CONFLICT (job_id, try) DO NOTHING),"
    " seen AS ("
    " UPDATE mqproc_jobs s SET deliveries = s.deliveries + 1, updated_at = now() FROM v"
    "  WHERE s.job_id = v.job_id AND NOT EXISTS (SELECT 1 FROM claim c WHERE c.job_id = v.job_id)"
    " RETURNING s.job_id, false, s.attempt, s.state, s.tries, s.requeues, s.result_published,"
    "   s.callback_state IS NOT NULL,"
    "   s.state = 'RUNNING' AND " LEASE_END("s.lease_until", "($4::int[])[1]") " >= now()"
    "     AND NOT coalesce(" HOLDER_DEAD_AT("s.worker_id", "($4::int[])[1]") " < now(), false),"
    "   greatest(0, extract(epoch FROM least(" LEASE_END("s.lease_until", "($4::int[])[1]") ","
    "     " HOLDER_DEAD_AT("s.worker_id", "($4::int[])[1]") ") - now()) * 1000)::bigint,"
    "   coalesce(s.worker_id, ''),"
    "   s.state IN ('SUCCESS', 'FAILED', 'CANCELLED')"
    "     AND EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = s.job_id),"
    "   coalesce((SELECT w.host FROM mqproc_workers w WHERE w.worker_id = s.worker_id), ''),"
    "   coalesce((SELECT w.pid FROM mqproc_workers w WHERE w.worker_id = s.worker_id), 0))"
    "SELECT v.ord, r.* FROM (SELECT * FROM claim UNION ALL SELECT * FROM seen) r"
    " JOIN v ON v.job_id = r.job_id";
/* clang-format on */

static int parse_claim(pg_req_t *r, PGresult *res, const int *rows, int n) {
  mqproc__claim_t *c = r->out.claim;
  int row = rows[0];
  if (n == 0)
    return MQPROC__PG_RETRY; /* inserted concurrently after our snapshot: neither claimed
                                nor seen */
  c->claimed = PQgetvalue(res, row, 2)[0] == 't';
  c->attempt = atoi(PQgetvalue(res, row, 3));
  snprintf(c->state, sizeof(c->state), "%s", PQgetvalue(res, row, 4));
  c->tries = atoi(PQgetvalue(res, row, 5));
  c->try_no = c->claimed ? c->tries : 0;
  c->requeues = atoi(PQgetvalue(res, row, 6));
  c->result_published = PQgetvalue(res, row, 7)[0] == 't';
  c->callbacks_done = PQgetvalue(res, row, 8)[0] == 't';
  c->lease_live = PQgetvalue(res, row, 9)[0] == 't';
  c->lease_left_ms = PQgetisnull(res, row, 10) ? 0 : atoll(PQgetvalue(res, row, 10));
  snprintf(c->worker_id_now, sizeof(c->worker_id_now), "%s", PQgetvalue(res, row, 11));
  c->outbox_pending = PQgetvalue(res, row, 12)[0] == 't';
  snprintf(c->holder_host, sizeof(c->holder_host), "%s", PQgetvalue(res, row, 13));
  c->holder_pid = atoi(PQgetvalue(res, row, 14));
  return MQPROC_OK;
}

/* No row for a job the table knew already: the full claim decides (CLAIM_FULL). */
static int parse_claim_new(pg_req_t *r, PGresult *res, const int *rows, int n) {
  return n == 0 ? MQPROC__PG_FALLBACK : parse_claim(r, res, rows, n);
}

/* $1..$11 of both claims, in their unnest's order; created and priority NULL when absent
 * (the request is stored once, as its bytes) */
static void bind_claim(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__claim_t *c = q->u.claim;
  mqproc__pg_bind_text(r, 0, c->job_id);
  mqproc__pg_bind_text(r, 1, c->processor);
  mqproc__pg_bind_text(r, 2, c->worker_id);
  mqproc__pg_bind_int(r, 3, c->lease_ms);
  if (c->created_time >= 0)
    mqproc__pg_bind_int64(r, 4, c->created_time);
  mqproc__pg_bind_text(r, 5, c->request_format != NULL ? c->request_format : "json");
  mqproc__pg_bind_int(r, 6, c->max_attempts > 0 ? c->max_attempts : 1000000);
  mqproc__pg_bind_bytes(r, 7, c->request_body, c->request_body_len);
  mqproc__pg_bind_text(r, 8, c->log_path);
  mqproc__pg_bind_text(r, 9, c->headers_json);
  if (c->priority >= 0)
    mqproc__pg_bind_int(r, 10, c->priority);
  r->out.claim = q->u.claim;
}

static const pg_stmt_t CLAIM_FULL = {"mqproc_claim_full", CLAIM_FULL_SQL, 11,  1, 0,
                                     bind_claim,          parse_claim,    NULL};
static const pg_stmt_t CLAIM = {"mqproc_claim", CLAIM_SQL,       11,         1, 0,
                                bind_claim,     parse_claim_new, &CLAIM_FULL};

/* ---- tries -------------------------------------------------------------------------- */

static int parse_start_try(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (n == 0)
    return fenced(r);
  *r->out.try_no = atoi(PQgetvalue(res, 0, 0));
  return MQPROC_OK;
}

static void bind_start_try(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_start_try_t *a = &q->u.start_try;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_text(r, 2, a->worker_id);
  mqproc__pg_bind_text(r, 3, a->log_path);
  r->out.try_no = a->try_no;
}

/* A retry's try: its number (tries + 1). Its row is written when it ends, if it fails:
 * a try that succeeds is the job row's. */
static const pg_stmt_t START_TRY = {
    "mqproc_start_try",
    "UPDATE mqproc_jobs SET tries = tries + 1, log_path = coalesce($4, log_path), worker_id = $3, "
    "updated_at = now()"
    " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING' RETURNING tries",
    4,
    0,
    0,
    bind_start_try,
    parse_start_try,
    NULL};

/* exit code and signal NULL when there are none */
static void bind_end_try(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_end_try_t *a = &q->u.end_try;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_int(r, 2, a->try_no);
  mqproc__pg_bind_bool(r, 3, a->end.ok);
  if (a->end.exit_code >= 0)
    mqproc__pg_bind_int(r, 4, a->end.exit_code);
  if (a->end.term_signal > 0)
    mqproc__pg_bind_int(r, 5, a->end.term_signal);
  mqproc__pg_bind_int64(r, 6, a->end.duration_ms);
  mqproc__pg_bind_text(r, 7, a->end.error);
  mqproc__pg_bind_text(r, 8, a->log_path);
}

/* A try that failed (or was cut short): its row, with when it started (its duration
 * before its end) and on which server. */
static const pg_stmt_t END_TRY = {
    "mqproc_end_try",
    "WITH j AS (UPDATE mqproc_jobs SET last_error = coalesce($8, last_error),"
    " log_path = coalesce($9, log_path),"
    " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
    " AND state = 'RUNNING' RETURNING job_id, worker_id)"
    " INSERT INTO mqproc_job_tries AS t (job_id, try, attempt, worker_id, started_at, ended_at,"
    "   ok, exit_code, term_signal, duration_ms, error)"
    " SELECT j.job_id, $3::int, $2::int, coalesce(j.worker_id, ''),"
    "   now() - $7::bigint * interval '1 millisecond', now(), $4::boolean, $5::int, $6::int,"
    "   $7::bigint, $8 FROM j"
    " ON CONFLICT (job_id, try) DO UPDATE SET ended_at = now(), ok = EXCLUDED.ok,"
    "   exit_code = EXCLUDED.exit_code, term_signal = EXCLUDED.term_signal,"
    "   duration_ms = EXCLUDED.duration_ms, error = EXCLUDED.error"
    " RETURNING t.job_id",
    9,
    0,
    0,
    bind_end_try,
    mqproc__pg_parse_fenced,
    NULL};

/* ---- outcomes ----------------------------------------------------------------------- */

/* the exit code NULL when there is none */
static void bind_succeed(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_succeed_t *a = &q->u.succeed;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_int(r, 2, a->try_no);
  mqproc__pg_bind_int64(r, 3, a->end.duration_ms);
  if (a->end.exit_code >= 0)
    mqproc__pg_bind_int(r, 4, a->end.exit_code);
  mqproc__pg_bind_bool(r, 5, a->outbox);
  mqproc__pg_bind_int(r, 6, a->lease_ms);
  mqproc__pg_bind_bool(r, 7, a->result);
  mqproc__pg_bind_bool(r, 8, a->callbacks);
  mqproc__pg_bind_text(r, 9, a->log_text);
  mqproc__pg_bind_text(r, 10, a->log_path);
}

/* The successes of many jobs in one statement (the hot path): SUCCESS, its run time and
 * no lease in the row, and, when the holder acks its delivery now and still sends the
 * result or callbacks (outbox), a narrow outbox mark that carries them until outbox_done
 * lets it go; the row says they went out unless outbox_done records otherwise. No try
 * row: the try is the job row's (a failed try before it has its own). The try's output
 * rides along: its text when no file was made, or the file's path. */
static const pg_stmt_t SUCCEED = {
    "mqproc_succeed",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[],"
    "   $5::int[], $6::bool[], $7::int[], $8::bool[], $9::bool[], $10::text[], $11::text[])"
    "   WITH ORDINALITY AS v(job_id, attempt, try, ms, code, outbox, lease_ms, res, cbs,"
    "   log_text, log_path, ord)),"
    " j AS (UPDATE mqproc_jobs j SET state = 'SUCCESS', end_time = now(),"
    "   exec_time_ms = v.ms, updated_at = now(), lease_until = NULL, delivery_acked = false,"
    "   log_text = coalesce(v.log_text, j.log_text), log_path = coalesce(v.log_path, j.log_path),"
    "   result_published = j.result_published OR (v.outbox AND v.res),"
    "   callback_state = CASE WHEN v.outbox AND v.cbs THEN 'OK' ELSE j.callback_state END"
    "  FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt AND j.state = 'RUNNING'"
    "  RETURNING j.job_id, j.processor_name, j.attempt, v.ord, v.outbox, v.lease_ms),"
    " o AS (INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
    "   SELECT job_id, processor_name, attempt, now() + lease_ms * interval '1 millisecond'"
    "   FROM j WHERE outbox ORDER BY job_id"
    "   ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    "     lease_until = EXCLUDED.lease_until, dead_letter = false)"
    " SELECT ord FROM j",
    11,
    1,
    0,
    bind_succeed,
    mqproc__pg_parse_fenced,
    NULL};

/* SUCCEED's parameters, then the table queue's ($12..$18): the message to ack (its holder,
 * id, delivery count) and the result (queue, body, content type, headers), NULL each when
 * there is none */
static void bind_succeed_tq(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_succeed_t *a = &q->u.succeed;
  bind_succeed(r, q);
  mqproc__pg_bind_text(r, 11, a->q_consumer);
  if (a->q_consumer != NULL) {
    mqproc__pg_bind_int64(r, 12, a->q_id);
    mqproc__pg_bind_int(r, 13, a->q_deliveries);
  }
  mqproc__pg_bind_text(r, 14, a->result_queue);
  if (a->result_queue != NULL)
    mqproc__pg_bind_bytes(r, 15, a->result_body != NULL ? a->result_body : "", a->result_len);
  mqproc__pg_bind_text(r, 16, a->result_content_type);
  mqproc__pg_bind_text(r, 17, a->result_headers_json);
}

/* clang-format off */
/* SUCCEED where the queue is a table of this database (store/queue.c): the job's message
 * is acked (deleted, fenced by its holder and delivery count) and its result inserted into
 * its queue in the same statement, so the outcome, the ack and the result commit together
 * or not at all, and the result needs no outbox mark. Only for a job the statement
 * recorded (j): a fenced success acks and publishes nothing. */
static const pg_stmt_t SUCCEED_TQ = {
    "mqproc_succeed_tq",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[],"
    "   $5::int[], $6::bool[], $7::int[], $8::bool[], $9::bool[], $10::text[], $11::text[],"
    "   $12::text[], $13::bigint[], $14::int[], $15::text[], $16::bytea[], $17::text[],"
    "   $18::jsonb[])"
    "   WITH ORDINALITY AS v(job_id, attempt, try, ms, code, outbox, lease_ms, res, cbs,"
    "   log_text, log_path, qcons, qid, qdel, rq, rbody, rct, rh, ord)),"
    " j AS (UPDATE mqproc_jobs j SET state = 'SUCCESS', end_time = now(),"
    "   exec_time_ms = v.ms, updated_at = now(), lease_until = NULL, delivery_acked = false,"
    "   log_text = coalesce(v.log_text, j.log_text), log_path = coalesce(v.log_path, j.log_path),"
    "   result_published = j.result_published OR (v.outbox AND v.res) OR v.rq IS NOT NULL,"
    "   callback_state = CASE WHEN v.outbox AND v.cbs THEN 'OK' ELSE j.callback_state END"
    "  FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt AND j.state = 'RUNNING'"
    "  RETURNING j.job_id, j.processor_name, j.attempt, v.ord, v.outbox, v.lease_ms, v.qcons,"
    "   v.qid, v.qdel, v.rq, v.rbody, v.rct, v.rh),"
    " o AS (INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
    "   SELECT job_id, processor_name, attempt, now() + lease_ms * interval '1 millisecond'"
    "   FROM j WHERE outbox ORDER BY job_id"
    "   ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    "     lease_until = EXCLUDED.lease_until, dead_letter = false),"
    " a AS (DELETE FROM mqproc_messages m USING j WHERE m.id = j.qid AND m.consumer = j.qcons"
    "   AND m.deliveries = j.qdel),"
    " r AS (INSERT INTO mqproc_messages (queue, body, content_type, message_id, headers)"
    "   SELECT rq, rbody, coalesce(rct, 'application/json'), job_id, rh FROM j"
    "   WHERE rq IS NOT NULL ORDER BY job_id RETURNING queue),"
    " n AS (SELECT pg_notify(" MQPROC__PG_QUEUE_CHANNEL_SQL "(q), q) FROM"
    "   (SELECT DISTINCT queue AS q FROM r) d)"
    " SELECT ord FROM j WHERE (SELECT count(*) FROM n) >= 0",
    18,
    1,
    0,
    bind_succeed_tq,
    mqproc__pg_parse_fenced,
    NULL};
/* clang-format on */

static void bind_cancelled(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_cancelled_t *a = &q->u.cancelled;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_int(r, 2, a->try_no);
  mqproc__pg_bind_int64(r, 3, a->end.duration_ms);
  mqproc__pg_bind_bool(r, 4, a->outbox);
  mqproc__pg_bind_int(r, 5, a->lease_ms);
  mqproc__pg_bind_bool(r, 6, a->result);
  mqproc__pg_bind_bool(r, 7, a->callbacks);
  mqproc__pg_bind_text(r, 8, a->log_text);
  mqproc__pg_bind_text(r, 9, a->log_path);
}

/* A cancelled job's end, like a success's (the outbox and the try's output too), with the
 * try recorded failed. */
static const pg_stmt_t CANCELLED = {
    "mqproc_cancelled",
    "WITH j AS (UPDATE mqproc_jobs j SET state = 'CANCELLED', end_time = now(),"
    "   last_error = 'cancelled by an operator', updated_at = now(), lease_until = NULL,"
    "   delivery_acked = false,"
    "   log_text = coalesce($9, j.log_text), log_path = coalesce($10, j.log_path),"
    "   result_published = j.result_published OR ($5::bool AND $7::bool),"
    "   callback_state = CASE WHEN $5::bool AND $8::bool THEN 'OK' ELSE j.callback_state END"
    "  WHERE j.job_id = $1 AND j.attempt = $2::int AND j.state = 'RUNNING'"
    "  RETURNING j.job_id, j.processor_name, j.attempt, j.worker_id),"
    " o AS (INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until)"
    "   SELECT job_id, processor_name, attempt, now() + $6::int * interval '1 millisecond'"
    "   FROM j WHERE $5::bool"
    "   ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    "     lease_until = EXCLUDED.lease_until, dead_letter = false),"
    " t AS (INSERT INTO mqproc_job_tries AS t (job_id, try, attempt, worker_id, started_at,"
    "   ended_at, ok, duration_ms, error)"
    "   SELECT job_id, $3::int, $2::int, coalesce(worker_id, ''),"
    "     now() - $4::bigint * interval '1 millisecond', now(), false, $4::bigint,"
    "     'cancelled by an operator' FROM j"
    "   ON CONFLICT (job_id, try) DO UPDATE SET ended_at = coalesce(t.ended_at, now()),"
    "     ok = coalesce(t.ok, false), duration_ms = coalesce(t.duration_ms, $4::bigint),"
    "     error = coalesce(t.error, 'cancelled by an operator'))"
    " SELECT job_id FROM j",
    10,
    0,
    0,
    bind_cancelled,
    mqproc__pg_parse_fenced,
    NULL};

static int parse_fail(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (n == 0)
    return fenced(r);
  *r->out.requeued = strcmp(PQgetvalue(res, 0, 0), "QUEUED") == 0;
  return MQPROC_OK;
}

static void bind_fail(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_fail_t *a = &q->u.fail;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_text(r, 2, a->error);
  mqproc__pg_bind_int(r, 3, a->max_requeues);
  mqproc__pg_bind_bool(r, 4, a->republish);
  r->out.requeued = a->requeued;
}

/* A failed attempt: requeued, or FAILED. An early-acked job that ends FAILED has no
 * message left to dead-letter from: its dead letter goes through the outbox (a mark that
 * the outbox sweep sends if this holder dies first). */
static const pg_stmt_t FAIL = {
    "mqproc_fail",
    "WITH j AS (UPDATE mqproc_jobs SET"
    " state = CASE WHEN requeues < $4::int THEN 'QUEUED' ELSE 'FAILED' END,"
    " requeues = CASE WHEN requeues < $4::int THEN requeues + 1 ELSE requeues END,"
    " end_time = CASE WHEN requeues < $4::int THEN NULL ELSE now() END,"
    " republish = $5::boolean AND requeues < $4::int,"
    " delivery_acked = false,"
    " dead_letter_pending = delivery_acked AND requeues >= $4::int,"
    " lease_until = CASE WHEN delivery_acked AND requeues >= $4::int"
    "   THEN lease_until END, last_error = $3, updated_at = now()"
    " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'"
    " RETURNING job_id, processor_name, attempt, state, dead_letter_pending, lease_until),"
    " o AS (INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until, dead_letter)"
    "   SELECT job_id, processor_name, attempt, coalesce(lease_until, now()), true FROM j"
    "   WHERE dead_letter_pending"
    "   ON CONFLICT (job_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    "     lease_until = EXCLUDED.lease_until, dead_letter = true)"
    " SELECT state FROM j",
    5,
    0,
    0,
    bind_fail,
    parse_fail,
    NULL};

static void bind_release(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_release_t *a = &q->u.release;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_text(r, 2, a->why);
  mqproc__pg_bind_bool(r, 3, a->republish);
  mqproc__pg_bind_int(r, 4, a->refund ? 1 : 0);
}

static const pg_stmt_t RELEASE = {"mqproc_release",
                                  "UPDATE mqproc_jobs SET state = 'QUEUED', lease_until = NULL,"
                                  " republish = $4::boolean, delivery_acked = false,"
                                  " last_error = coalesce($3, last_error), updated_at = now(),"
                                  " attempt_base = attempt_base + $5::int"
                                  " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
                                  5,
                                  0,
                                  0,
                                  bind_release,
                                  mqproc__pg_parse_fenced,
                                  NULL};

static void bind_give_up(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_give_up_t *a = &q->u.give_up;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_text(r, 2, a->why);
}

static const pg_stmt_t GIVE_UP = {
    "mqproc_give_up",
    "UPDATE mqproc_jobs SET state = 'FAILED', end_time = now(), lease_until = NULL,"
    " republish = false, delivery_acked = false, last_error = $3,"
    " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
    " AND (state = 'QUEUED' OR (state = 'RUNNING' AND lease_until < now()))",
    3,
    0,
    0,
    bind_give_up,
    mqproc__pg_parse_fenced,
    NULL};

static void bind_ack_early(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.ack_early.job_id);
  mqproc__pg_bind_int(r, 1, q->u.ack_early.attempt);
}

static const pg_stmt_t ACK_EARLY = {
    "mqproc_ack_early",
    "UPDATE mqproc_jobs SET delivery_acked = true, updated_at = now()"
    " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
    2,
    0,
    0,
    bind_ack_early,
    mqproc__pg_parse_fenced,
    NULL};

static void bind_renew(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_renew_t *a = &q->u.renew;
  mqproc__pg_bind_text(r, 0, a->job_id);
  mqproc__pg_bind_int(r, 1, a->attempt);
  mqproc__pg_bind_int(r, 2, a->lease_ms);
}

/* The lease renewals of many jobs in one statement (the server's tick): a running job's
 * in its row, a final one's (its holder still sends its outcome) in its outbox mark. */
static const pg_stmt_t RENEW = {
    "mqproc_renew",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[])"
    "   WITH ORDINALITY AS v(job_id, attempt, lease_ms, ord)),"
    " j AS (UPDATE mqproc_jobs j SET lease_until = now() + v.lease_ms * interval '1 millisecond'"
    "   FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt AND j.state = 'RUNNING'"
    "   RETURNING v.ord),"
    " o AS (UPDATE mqproc_outbox o SET lease_until = now() + v.lease_ms * interval '1 millisecond'"
    "   FROM v WHERE o.job_id = v.job_id AND o.attempt = v.attempt"
    "   AND NOT EXISTS (SELECT 1 FROM j WHERE j.ord = v.ord)"
    "   RETURNING v.ord)"
    " SELECT ord FROM j UNION ALL SELECT ord FROM o",
    3,
    1,
    0,
    bind_renew,
    mqproc__pg_parse_fenced,
    NULL};

static const pg_stmt_t PING = {"mqproc_ping", "SELECT 1", 0, 0, 0, NULL, NULL, NULL};

/* ---- every operation's statement ------------------------------------------------------ */

static const pg_stmt_t *const STMTS[MQPROC__STORE_NOPS] = {
    [MQPROC__STORE_CLAIM] = &CLAIM,
    [MQPROC__STORE_START_TRY] = &START_TRY,
    [MQPROC__STORE_END_TRY] = &END_TRY,
    [MQPROC__STORE_SUCCEED] = &SUCCEED,
    [MQPROC__STORE_CANCELLED] = &CANCELLED,
    [MQPROC__STORE_FAIL] = &FAIL,
    [MQPROC__STORE_RELEASE] = &RELEASE,
    [MQPROC__STORE_GIVE_UP] = &GIVE_UP,
    [MQPROC__STORE_ACK_EARLY] = &ACK_EARLY,
    [MQPROC__STORE_RENEW] = &RENEW,
    [MQPROC__STORE_PING] = &PING,
    [MQPROC__STORE_SWEEP] = &mqproc__pg_stmt_sweep,
    [MQPROC__STORE_SWEEP_OUTBOX] = &mqproc__pg_stmt_sweep_outbox,
    [MQPROC__STORE_REPUBLISHED] = &mqproc__pg_stmt_republished,
    [MQPROC__STORE_OUTBOX_DONE] = &mqproc__pg_stmt_outbox_done,
    [MQPROC__STORE_DEAD_LETTERED] = &mqproc__pg_stmt_dead_lettered,
    [MQPROC__STORE_MARK_PUBLISHED] = &mqproc__pg_stmt_mark_published,
    [MQPROC__STORE_RECORD_CALLBACKS] = &mqproc__pg_stmt_record_callbacks,
    [MQPROC__STORE_RECORD_DEAD] = &mqproc__pg_stmt_record_dead,
    [MQPROC__STORE_BEAT] = &mqproc__pg_stmt_beat,
    [MQPROC__STORE_HOLDER_GONE] = &mqproc__pg_stmt_holder_gone,
    [MQPROC__STORE_Q_TAKE] = &mqproc__pg_stmt_q_take,
    [MQPROC__STORE_Q_ACK] = &mqproc__pg_stmt_q_ack,
    [MQPROC__STORE_Q_NACK] = &mqproc__pg_stmt_q_nack,
    [MQPROC__STORE_Q_PUBLISH] = &mqproc__pg_stmt_q_publish,
    [MQPROC__STORE_Q_EXTEND] = &mqproc__pg_stmt_q_extend,
    [MQPROC__STORE_Q_RESET] = &mqproc__pg_stmt_q_reset,
};

const char *mqproc__pg_stmt_sql(mqproc__store_op_t op, int fallback) {
  const pg_stmt_t *st = (unsigned)op < MQPROC__STORE_NOPS ? STMTS[op] : NULL;
  if (st != NULL && fallback)
    st = st->fallback;
  return st != NULL ? st->sql : NULL;
}

/* ---- class -------------------------------------------------------------------------- */

/* A request of q's statement, its parameters bound now (q and what it points to are the
 * caller's only until we return), queued for the engine. */
static int pg_submit(mqproc__store_t *base, const mqproc__store_req_t *q) {
  const pg_stmt_t *st = (unsigned)q->op < MQPROC__STORE_NOPS ? STMTS[q->op] : NULL;
  pg_req_t *r;
  if (st == NULL)
    return MQPROC_EINVAL;
  if (q->op == MQPROC__STORE_SUCCEED &&
      (q->u.succeed.q_consumer != NULL || q->u.succeed.result_queue != NULL))
    st = &SUCCEED_TQ; /* with the table queue's ack and result */
  if ((r = mqproc__calloc(1, sizeof(*r))) == NULL)
    return MQPROC_ENOMEM;
  r->stmt = st;
  r->n = st->nparams;
  r->done = q->done;
  r->ud = q->ud;
  r->early = q->op == MQPROC__STORE_Q_TAKE && q->u.q_take.early;
  if (st->bind != NULL)
    st->bind(r, q);
  if (r->nomem) {
    mqproc__pg_req_free(r);
    return MQPROC_ENOMEM;
  }
  return mqproc__pg_enqueue((pg_store_t *)base, r);
}

static void pg_listen(mqproc__store_t *base, void (*cb)(void *ud, const char *payload), void *ud) {
  pg_store_t *s = (pg_store_t *)base;
  if (s->pooled) /* LISTEN needs a session of its own: wishes and cancels come with the beat */
    return;
  s->on_notify = cb;
  s->notify_ud = ud;
}

void mqproc__pg_queue_channel(const char *queue, char *out) {
  static const char hex[] = "0123456789abcdef";
  unsigned char h[32];
  mqproc__sha256(queue, strlen(queue), h);
  memcpy(out, "mqproc_q_", 9);
  for (int i = 0; i < 16; i++) {
    out[9 + 2 * i] = hex[h[i] >> 4];
    out[10 + 2 * i] = hex[h[i] & 15];
  }
  out[41] = '\0';
}

static int pg_listen_queues(mqproc__store_t *base, const char *queue,
                            void (*cb)(void *ud, const char *queue), void *ud) {
  pg_store_t *s = (pg_store_t *)base;
  if (s->pooled) /* no LISTEN through a pooler: store/queue.c looks every second */
    return 0;
  s->on_queue = cb;
  s->queue_ud = ud;
  s->queue_listen[0] = '\0';
  if (cb != NULL && queue != NULL) { /* the channel is hex: no quoting */
    memcpy(s->queue_listen, "LISTEN ", 7);
    mqproc__pg_queue_channel(queue, s->queue_listen + 7);
  }
  if (cb != NULL && s->engine != NULL)
    mqproc__pg_engine_relisten(s->engine);
  return cb != NULL && s->engine != NULL && s->queue_listen[0] != '\0';
}

static void pg_forget(mqproc__store_t *base, void *ud) {
  pg_store_t *s = (pg_store_t *)base;
  if (s->engine != NULL)
    mqproc__pg_engine_forget(s->engine, ud);
}

static void pg_destroy(mqproc__store_t *base) {
  pg_store_t *s = (pg_store_t *)base;
  mqproc__pg_engine_free(s->engine);
  PQfinish(s->conn);
  free(s->conninfo);
  free(s);
}

static const struct mqproc__store_class pg_class = {
    "postgresql",       /* name */
    mqproc__pg_open,    /* open */
    mqproc__pg_migrate, /* migrate */
    pg_submit,          /* submit */
    pg_listen,          /* listen */
    pg_listen_queues,   /* listen_queues */
    pg_forget,          /* forget */
    pg_destroy,         /* destroy */
    mqproc__pg_schema,  /* schema */
};

void mqproc__store_pg_pooled(mqproc__store_t *base) {
  ((pg_store_t *)base)->pooled = 1;
}

int mqproc__store_pg_new(mqproc__store_t **out, const char *conninfo, mqproc__loop_t *loop,
                         char *err) {
  pg_store_t *s;
  int rc;
  for (int op = 0; op < MQPROC__STORE_NOPS; op++) /* an operation left out of STMTS: a bug */
    if (STMTS[op] == NULL)
      return mqproc__err(err, MQPROC_ESTATE, "the PostgreSQL store lacks operation %d (STMTS)", op);
  s = mqproc__calloc(1, sizeof(*s));
  if (s == NULL || (s->conninfo = mqproc__strdup(conninfo)) == NULL) {
    free(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  s->base.klass = &pg_class;
  if (loop != NULL && (rc = mqproc__pg_engine_new(&s->engine, s, loop, err)) != MQPROC_OK) {
    free(s->conninfo);
    free(s);
    return rc;
  }
  *out = &s->base;
  return MQPROC_OK;
}
