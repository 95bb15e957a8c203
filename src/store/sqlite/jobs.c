/* SQLite job store (sqlite:///PATH): the same job table, claims, fencing, leases, outbox
 * and workers rows as the PostgreSQL store (store/pg/), in SQLite's dialect: times are
 * integer milliseconds since the epoch (mq_now(), a function of the connection), booleans
 * 0/1, JSON as text. Here the job's own statements, in store.h's order of operations,
 * then the table of every operation (with those of store/sqlite/ops.c: the sweeps, marks
 * and the fleet; store/sqlite/queue.c: the table queues') and the class: submit() copies what a
 * request points to and queues it for the engine's thread (store/sqlite/engine.c), which runs many
 * per transaction; each operation's run binds its statements' parameters from the request's named
 * fields with the typed bind helpers, and its answer hands the result to the caller on the loop.
 * The schema and `migrate` are in store/sqlite/conn.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/sqlite/int.h"
#include "store/sqlite/notice.h"
#include "base/util.h"

/* ---- claim -------------------------------------------------------------------------- */

/* When the holder of a job (column worker_id) counts as dead: at once when marked stopped
 * or dead, else three refresh intervals after it was last seen; NULL without a row. */
#define HOLDER_DEAD_AT                                                                             \
  "(SELECT CASE WHEN w.state IN ('stopped', 'dead') THEN 0"                                        \
  " ELSE w.last_seen + 3 * w.interval_ms END FROM mqproc_workers w"                                \
  " WHERE w.worker_id = mqproc_jobs.worker_id)"

/* The claim's statements, bound by claim_new(), claim_again() and claim_seen() below. */
static const char CLAIM_NEW[] =
    "INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, deliveries, worker_id,"
    " lease_until, created_time, queued_at, start_time, request_format, request_body,"
    " tries, log_path, headers, priority, updated_at)"
    " VALUES (?1, ?2, 'RUNNING', 1, 1, ?3, mq_now() + ?4, ?5, mq_now(), mq_now(), ?7, ?8,"
    " 1, ?9, ?10, ?11, mq_now()) ON CONFLICT (job_id) DO NOTHING";

static const char CLAIM_AGAIN[] =
    "UPDATE mqproc_jobs SET state = 'RUNNING', attempt = attempt + 1,"
    " deliveries = deliveries + 1, worker_id = ?2, lease_until = mq_now() + ?3,"
    " start_time = mq_now(), end_time = NULL, delivery_acked = 0, republish = 0,"
    " tries = tries + 1, log_path = coalesce(?4, log_path), headers = coalesce(?5, headers),"
    " priority = coalesce(?6, priority),"
    " request_body = coalesce(request_body, ?8), updated_at = mq_now()"
    " WHERE job_id = ?1 AND (state = 'QUEUED' OR (state = 'RUNNING' AND (lease_until < mq_now()"
    "   OR coalesce(" HOLDER_DEAD_AT " < mq_now(), 0))))"
    " AND attempt - attempt_base < ?9"
    " RETURNING attempt, tries, requeues, result_published, callback_state IS NOT NULL";

/* A takeover's (claim_again of a RUNNING job) record of the try its holder never ended: it
 * is cut short (no end, no verdict); it started about when the attempt's last failed try
 * ended, else at the attempt's start. ?1 job, ?2 its try, ?3 attempt, ?4 holder, ?5 the
 * attempt's start, ?6 the new attempt. */
static const char CLAIM_CUT[] =
    "INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id, started_at, error)"
    " VALUES (?1, ?2, ?3, ?4, coalesce((SELECT max(ended_at) FROM mqproc_job_tries"
    "   WHERE job_id = ?1 AND attempt = ?3), ?5, mq_now()),"
    " 'cut short: taken over by attempt ' || ?6) ON CONFLICT (job_id, try) DO NOTHING";

static const char CLAIM_OLD[] = "SELECT state = 'RUNNING', attempt, tries, coalesce(worker_id, ''),"
                                " start_time FROM mqproc_jobs WHERE job_id = ?1";

static const char CLAIM_SEEN[] = "UPDATE mqproc_jobs SET deliveries = deliveries + 1,"
                                 " updated_at = mq_now() WHERE job_id = ?1";

static const char CLAIM_ROW[] =
    "SELECT attempt, state, tries, requeues, result_published, callback_state IS NOT NULL,"
    " state = 'RUNNING' AND lease_until >= mq_now()"
    "   AND NOT coalesce(" HOLDER_DEAD_AT " < mq_now(), 0),"
    " max(0, min(lease_until, coalesce(" HOLDER_DEAD_AT ", lease_until)) - mq_now()),"
    " coalesce(worker_id, ''), state IN ('SUCCESS', 'FAILED', 'CANCELLED')"
    "   AND EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = mqproc_jobs.job_id),"
    " coalesce((SELECT w.host FROM mqproc_workers w WHERE w.worker_id = mqproc_jobs.worker_id),"
    "   ''),"
    " coalesce((SELECT w.pid FROM mqproc_workers w WHERE w.worker_id = mqproc_jobs.worker_id), 0)"
    " FROM mqproc_jobs WHERE job_id = ?1";

/* Inserts a new job (its first try starts): 1, or 0 when the job exists. */
static int claim_new(sqlite3 *db, sq_req_t *r, const mqproc__claim_t *c) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, CLAIM_NEW, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, c->job_id);
  mqproc__sq_bind_text(st, 2, c->processor);
  mqproc__sq_bind_text(st, 3, c->worker_id);
  mqproc__sq_bind_int(st, 4, c->lease_ms);
  if (c->created_time >= 0)
    mqproc__sq_bind_int(st, 5, c->created_time * 1000LL);
  /* (the request is stored once, as its bytes: sql/007_lean_writes.sql) */
  mqproc__sq_bind_text(st, 7, c->request_format != NULL ? c->request_format : "json");
  mqproc__sq_bind_bytes(st, 8, c->request_body, c->request_body_len);
  mqproc__sq_bind_text(st, 9, c->log_path);
  mqproc__sq_bind_text(st, 10, c->headers_json);
  if (c->priority >= 0)
    mqproc__sq_bind_int(st, 11, c->priority);
  return mqproc__sq_exec(db, st, "claim", r->err);
}

/* Takes the job again when it is QUEUED or its holder's lease ended: 1 (st on the row of
 * CLAIM_AGAIN's RETURNING), 0 not taken. */
static int claim_again(sqlite3 *db, sq_req_t *r, const mqproc__claim_t *c, sqlite3_stmt **st) {
  if ((*st = mqproc__sq_stmt(db, CLAIM_AGAIN, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(*st, 1, c->job_id);
  mqproc__sq_bind_text(*st, 2, c->worker_id);
  mqproc__sq_bind_int(*st, 3, c->lease_ms);
  mqproc__sq_bind_text(*st, 4, c->log_path);
  mqproc__sq_bind_text(*st, 5, c->headers_json);
  if (c->priority >= 0)
    mqproc__sq_bind_int(*st, 6, c->priority);
  mqproc__sq_bind_bytes(*st, 8, c->request_body, c->request_body_len);
  mqproc__sq_bind_int(*st, 9, c->max_attempts > 0 ? c->max_attempts : 1000000);
  return mqproc__sq_first(db, *st, "claim", r->err);
}

/* Not claimed: the delivery is counted and the row reported as it is. */
static int claim_seen(sqlite3 *db, sq_req_t *r, mqproc__claim_t *c) {
  sqlite3_stmt *st;
  int n;
  if ((st = mqproc__sq_stmt(db, CLAIM_SEEN, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, c->job_id);
  if ((n = mqproc__sq_exec(db, st, "claim", r->err)) < 0)
    return n;
  if ((st = mqproc__sq_stmt(db, CLAIM_ROW, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, c->job_id);
  if ((n = mqproc__sq_first(db, st, "claim", r->err)) <= 0)
    return n < 0 ? n : mqproc__err(r->err, MQPROC_ESTORE_QUERY, "claim: the job's row vanished");
  c->claimed = 0;
  c->try_no = 0;
  c->attempt = sqlite3_column_int(st, 0);
  snprintf(c->state, sizeof(c->state), "%s", (const char *)sqlite3_column_text(st, 1));
  c->tries = sqlite3_column_int(st, 2);
  c->requeues = sqlite3_column_int(st, 3);
  c->result_published = sqlite3_column_int(st, 4);
  c->callbacks_done = sqlite3_column_int(st, 5);
  c->lease_live = sqlite3_column_int(st, 6);
  c->lease_left_ms = sqlite3_column_int64(st, 7);
  snprintf(c->worker_id_now, sizeof(c->worker_id_now), "%s",
           (const char *)sqlite3_column_text(st, 8));
  c->outbox_pending = sqlite3_column_int(st, 9);
  snprintf(c->holder_host, sizeof(c->holder_host), "%s", (const char *)sqlite3_column_text(st, 10));
  c->holder_pid = sqlite3_column_int(st, 11);
  sqlite3_reset(st);
  return MQPROC_OK;
}

/* The row a claim_again may take over, as it was. */
typedef struct holder {
  int running, attempt, tries;
  char worker_id[128];
  int64_t start_time; /* -1: none */
} holder_t;

static int claim_holder(sqlite3 *db, sq_req_t *r, const char *job_id, holder_t *h) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, CLAIM_OLD, r->err);
  int n;
  memset(h, 0, sizeof(*h));
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, job_id);
  if ((n = mqproc__sq_first(db, st, "claim", r->err)) <= 0)
    return n;
  h->running = sqlite3_column_int(st, 0);
  h->attempt = sqlite3_column_int(st, 1);
  h->tries = sqlite3_column_int(st, 2);
  snprintf(h->worker_id, sizeof(h->worker_id), "%s", (const char *)sqlite3_column_text(st, 3));
  h->start_time = sqlite3_column_type(st, 4) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 4);
  sqlite3_reset(st);
  return MQPROC_OK;
}

static int claim_cut(sqlite3 *db, sq_req_t *r, const char *job_id, const holder_t *h, int attempt) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, CLAIM_CUT, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, job_id);
  mqproc__sq_bind_int(st, 2, h->tries);
  mqproc__sq_bind_int(st, 3, h->attempt);
  mqproc__sq_bind_text(st, 4, h->worker_id);
  if (h->start_time >= 0)
    sqlite3_bind_int64(st, 5, h->start_time);
  mqproc__sq_bind_int(st, 6, attempt);
  return mqproc__sq_exec(db, st, "claim", r->err);
}

static int run_claim(sqlite3 *db, sq_req_t *r) {
  mqproc__claim_t *c = &r->x.claim; /* the caller's gets the answer on the loop */
  sqlite3_stmt *st;
  holder_t old;
  int n;
  if ((n = claim_new(db, r, c)) < 0)
    return n;
  memset(c->state, 0, sizeof(c->state));
  c->worker_id_now[0] = c->holder_host[0] = '\0';
  c->holder_pid = 0;
  c->lease_live = c->outbox_pending = 0;
  c->lease_left_ms = 0;
  if (n == 1) { /* a new job */
    c->claimed = 1;
    c->attempt = c->tries = c->try_no = 1;
    c->requeues = c->result_published = c->callbacks_done = 0;
    snprintf(c->state, sizeof(c->state), "RUNNING");
    return MQPROC_OK; /* (its try has no row unless it fails) */
  }
  if ((n = claim_holder(db, r, c->job_id, &old)) < 0 || (n = claim_again(db, r, c, &st)) < 0)
    return n;
  if (n == 0)
    return claim_seen(db, r, c);
  c->claimed = 1; /* taken again: QUEUED, or its holder's lease ended */
  c->attempt = sqlite3_column_int(st, 0);
  c->tries = c->try_no = sqlite3_column_int(st, 1);
  c->requeues = sqlite3_column_int(st, 2);
  c->result_published = sqlite3_column_int(st, 3);
  c->callbacks_done = sqlite3_column_int(st, 4);
  snprintf(c->state, sizeof(c->state), "RUNNING");
  if ((n = mqproc__sq_exec(db, st, "claim", r->err)) < 0)
    return n;
  if (old.running && old.tries > 0 && (n = claim_cut(db, r, c->job_id, &old, c->attempt)) < 0)
    return n;
  return MQPROC_OK;
}

static void claim_answer(sq_req_t *r) {
  mqproc__claim_t *c = r->q.u.claim, *a = &r->x.claim;
  c->claimed = a->claimed;
  c->try_no = a->try_no;
  c->attempt = a->attempt;
  memcpy(c->state, a->state, sizeof(c->state));
  c->tries = a->tries;
  c->requeues = a->requeues;
  c->result_published = a->result_published;
  c->callbacks_done = a->callbacks_done;
  c->outbox_pending = a->outbox_pending;
  c->lease_live = a->lease_live;
  c->lease_left_ms = a->lease_left_ms;
  memcpy(c->worker_id_now, a->worker_id_now, sizeof(c->worker_id_now));
  memcpy(c->holder_host, a->holder_host, sizeof(c->holder_host));
  c->holder_pid = a->holder_pid;
}

/* ---- tries -------------------------------------------------------------------------- */

static int run_start_try(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET tries = tries + 1, log_path = coalesce(?3, log_path),"
      " updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?4 AND state = 'RUNNING' RETURNING tries";
  const mqproc__store_start_try_t *a = &r->q.u.start_try;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int try_no, n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 3, a->log_path);
  mqproc__sq_bind_int(st, 4, a->attempt);
  if ((n = mqproc__sq_first(db, st, "start a try", r->err)) <= 0)
    return n < 0 ? n : mqproc__sq_fenced(r, a->job_id, a->attempt);
  try_no = sqlite3_column_int(st, 0);
  if ((n = mqproc__sq_exec(db, st, "start a try", r->err)) < 0)
    return n;
  r->int_out = try_no;
  return MQPROC_OK; /* (its row is written if it fails) */
}

static void start_try_answer(sq_req_t *r) {
  *r->q.u.start_try.try_no = r->int_out;
}

static int run_end_try(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] = "UPDATE mqproc_jobs SET last_error = coalesce(?2, last_error),"
                            " log_path = coalesce(?4, log_path),"
                            " updated_at = mq_now() WHERE job_id = ?1 AND attempt = ?3"
                            " AND state = 'RUNNING'";
  /* a try that failed or was cut short: its row (one that succeeded is the job row's) */
  static const char TRY[] =
      "INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id, started_at, ended_at,"
      " ok, exit_code, term_signal, duration_ms, error)"
      " SELECT ?1, ?7, ?8, coalesce(worker_id, ''), mq_now() - ?5, mq_now(), ?2, ?3, ?4, ?5, ?6"
      " FROM mqproc_jobs WHERE job_id = ?1"
      " ON CONFLICT (job_id, try) DO UPDATE SET ended_at = mq_now(), ok = excluded.ok,"
      " exit_code = excluded.exit_code, term_signal = excluded.term_signal,"
      " duration_ms = excluded.duration_ms, error = excluded.error";
  const mqproc__store_end_try_t *a = &r->q.u.end_try;
  sqlite3_stmt *st = mqproc__sq_stmt(db, JOB, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 2, a->end.error);
  mqproc__sq_bind_int(st, 3, a->attempt);
  mqproc__sq_bind_text(st, 4, a->log_path);
  if ((rc = mqproc__sq_write_fenced(db, st, r, "write", a->job_id, a->attempt)) != MQPROC_OK)
    return rc;
  if ((st = mqproc__sq_stmt(db, TRY, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_bool(st, 2, a->end.ok);
  if (a->end.exit_code >= 0)
    mqproc__sq_bind_int(st, 3, a->end.exit_code);
  if (a->end.term_signal > 0)
    mqproc__sq_bind_int(st, 4, a->end.term_signal);
  mqproc__sq_bind_int(st, 5, a->end.duration_ms);
  mqproc__sq_bind_text(st, 6, a->end.error);
  mqproc__sq_bind_int(st, 7, a->try_no);
  mqproc__sq_bind_int(st, 8, a->attempt);
  return mqproc__sq_write(db, st, r, "end the try");
}

/* ---- outcomes ----------------------------------------------------------------------- */

/* An outbox mark for an outcome the holder still sends (its delivery was acked): the
 * outbox sweep takes it over if the holder dies (?1 job, ?2 attempt, ?3 lease_ms, ?4 a
 * dead letter pending). */
static const char OUTBOX_MARK[] =
    "INSERT INTO mqproc_outbox (job_id, processor_name, attempt, lease_until, dead_letter)"
    " SELECT job_id, processor_name, ?2, mq_now() + ?3, ?4 FROM mqproc_jobs WHERE job_id = ?1"
    " ON CONFLICT (job_id) DO UPDATE SET attempt = excluded.attempt,"
    " lease_until = excluded.lease_until, dead_letter = excluded.dead_letter";

static int outbox_mark(sqlite3 *db, sq_req_t *r, const char *job_id, int attempt, int lease_ms,
                       int dead_letter) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, OUTBOX_MARK, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, job_id);
  mqproc__sq_bind_int(st, 2, attempt);
  mqproc__sq_bind_int(st, 3, lease_ms);
  mqproc__sq_bind_bool(st, 4, dead_letter);
  return mqproc__sq_write(db, st, r, "mark the outbox");
}

/* The job's end (job_sql: SUCCESS or CANCELLED; ?1 job, ?2 attempt, ?3 ms, ?4 outbox,
 * ?5 result, ?6 callbacks, ?7 log_text, ?8 log_path), its outbox mark when the outcome is
 * still to be sent, then, for a cancelled try, its try row (try_sql: ?1 job, ?2 try, ?3 ms,
 * ?4 attempt). */
static int end_job(sqlite3 *db, sq_req_t *r, const mqproc__store_succeed_t *a, const char *job_sql,
                   const char *try_sql) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, job_sql, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->attempt);
  mqproc__sq_bind_int(st, 3, a->end.duration_ms);
  mqproc__sq_bind_bool(st, 4, a->outbox);
  mqproc__sq_bind_bool(st, 5, a->result);
  mqproc__sq_bind_bool(st, 6, a->callbacks);
  mqproc__sq_bind_text(st, 7, a->log_text);
  mqproc__sq_bind_text(st, 8, a->log_path);
  rc = mqproc__sq_write_fenced(db, st, r, "record the outcome", a->job_id, a->attempt);
  if (rc == MQPROC_OK && a->outbox)
    rc = outbox_mark(db, r, a->job_id, a->attempt, a->lease_ms, 0);
  if (rc != MQPROC_OK || try_sql == NULL)
    return rc;
  if ((st = mqproc__sq_stmt(db, try_sql, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->try_no);
  mqproc__sq_bind_int(st, 3, a->end.duration_ms);
  mqproc__sq_bind_int(st, 4, a->attempt);
  return mqproc__sq_write(db, st, r, "end the try");
}

/* SUCCESS: no try row (a try that succeeded is the job row's); the result and callbacks
 * recorded as sent when the outbox carries them (outbox_done says otherwise if they do not
 * go out). */
static int run_succeed(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] =
      "UPDATE mqproc_jobs SET state = 'SUCCESS', end_time = mq_now(), exec_time_ms = ?3,"
      " updated_at = mq_now(), lease_until = NULL, delivery_acked = 0,"
      " log_text = coalesce(?7, log_text), log_path = coalesce(?8, log_path),"
      " result_published = result_published OR (?4 AND ?5),"
      " callback_state = CASE WHEN ?4 AND ?6 THEN 'OK' ELSE callback_state END"
      " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  int rc = end_job(db, r, &r->q.u.succeed, JOB, NULL);
  /* a table queue in this database: the message's ack and the result in the same write */
  return rc == MQPROC_OK ? mqproc__sq_queue_in_write(db, r, &r->q.u.succeed) : rc;
}

static int run_cancelled(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] =
      "UPDATE mqproc_jobs SET state = 'CANCELLED', end_time = mq_now(),"
      " last_error = 'cancelled by an operator', updated_at = mq_now(), lease_until = NULL,"
      " log_text = coalesce(?7, log_text), log_path = coalesce(?8, log_path),"
      " delivery_acked = 0, result_published = result_published OR (?4 AND ?5),"
      " callback_state = CASE WHEN ?4 AND ?6 THEN 'OK' ELSE callback_state END"
      " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  static const char TRY[] =
      "INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id, started_at, ended_at,"
      " ok, duration_ms, error)"
      " SELECT ?1, ?2, ?4, coalesce(worker_id, ''), mq_now() - ?3, mq_now(), 0, ?3,"
      " 'cancelled by an operator' FROM mqproc_jobs WHERE job_id = ?1"
      " ON CONFLICT (job_id, try) DO UPDATE SET ended_at = coalesce(ended_at, mq_now()),"
      " ok = coalesce(ok, 0), duration_ms = coalesce(duration_ms, ?3),"
      " error = coalesce(error, 'cancelled by an operator')";
  return end_job(db, r, &r->q.u.cancelled, JOB, TRY);
}

static int run_fail(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET"
      " state = CASE WHEN requeues < ?4 THEN 'QUEUED' ELSE 'FAILED' END,"
      " requeues = CASE WHEN requeues < ?4 THEN requeues + 1 ELSE requeues END,"
      " end_time = CASE WHEN requeues < ?4 THEN NULL ELSE mq_now() END,"
      " republish = ?5 AND requeues < ?4,"
      " delivery_acked = 0,"
      " dead_letter_pending = delivery_acked AND requeues >= ?4,"
      " lease_until = CASE WHEN delivery_acked AND requeues >= ?4 THEN lease_until END,"
      " last_error = ?2, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?3 AND state = 'RUNNING'"
      " RETURNING state, dead_letter_pending, coalesce(lease_until - mq_now(), 0)";
  const mqproc__store_fail_t *a = &r->q.u.fail;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int queued, dead, lease_left, n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 2, a->error);
  mqproc__sq_bind_int(st, 3, a->attempt);
  mqproc__sq_bind_int(st, 4, a->max_requeues);
  mqproc__sq_bind_bool(st, 5, a->republish);
  if ((n = mqproc__sq_first(db, st, "fail", r->err)) <= 0)
    return n < 0 ? n : mqproc__sq_fenced(r, a->job_id, a->attempt);
  queued = strcmp((const char *)sqlite3_column_text(st, 0), "QUEUED") == 0;
  dead = sqlite3_column_int(st, 1);
  lease_left = sqlite3_column_int(st, 2);
  if ((n = mqproc__sq_exec(db, st, "fail", r->err)) < 0)
    return n;
  r->int_out = queued;
  /* an early-acked job FAILED: its dead letter goes through the outbox */
  return dead ? outbox_mark(db, r, a->job_id, a->attempt, lease_left > 0 ? lease_left : 0, 1)
              : MQPROC_OK;
}

static void fail_answer(sq_req_t *r) {
  *r->q.u.fail.requeued = r->int_out;
}

static int run_release(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET state = 'QUEUED', lease_until = NULL, republish = ?4,"
      " delivery_acked = 0, last_error = coalesce(?2, last_error), updated_at = mq_now(),"
      " attempt_base = attempt_base + ?5"
      " WHERE job_id = ?1 AND attempt = ?3 AND state = 'RUNNING'";
  const mqproc__store_release_t *a = &r->q.u.release;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 2, a->why);
  mqproc__sq_bind_int(st, 3, a->attempt);
  mqproc__sq_bind_bool(st, 4, a->republish);
  mqproc__sq_bind_int(st, 5, a->refund ? 1 : 0);
  return mqproc__sq_write_fenced(db, st, r, "write", a->job_id, a->attempt);
}

static int run_give_up(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET state = 'FAILED', end_time = mq_now(), lease_until = NULL,"
      " republish = 0, delivery_acked = 0, last_error = ?2, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?3"
      " AND (state = 'QUEUED' OR (state = 'RUNNING' AND lease_until < mq_now()))";
  const mqproc__store_give_up_t *a = &r->q.u.give_up;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 2, a->why);
  mqproc__sq_bind_int(st, 3, a->attempt);
  return mqproc__sq_write_fenced(db, st, r, "write", a->job_id, a->attempt);
}

static int run_ack_early(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET delivery_acked = 1, updated_at = mq_now()"
                            " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  const mqproc__store_ack_early_t *a = &r->q.u.ack_early;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->attempt);
  return mqproc__sq_write_fenced(db, st, r, "write", a->job_id, a->attempt);
}

static int run_renew(sqlite3 *db, sq_req_t *r) {
  /* a running job's lease is in its row, a final one's (its holder still sends its
   * outcome) in its outbox mark */
  static const char SQL[] =
      "UPDATE mqproc_jobs SET lease_until = mq_now() + ?3 WHERE job_id = ?1 AND attempt = ?2"
      " AND state = 'RUNNING'";
  static const char OUTBOX[] = "UPDATE mqproc_outbox SET lease_until = mq_now() + ?3"
                               " WHERE job_id = ?1 AND attempt = ?2";
  const mqproc__store_renew_t *a = &r->q.u.renew;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->attempt);
  mqproc__sq_bind_int(st, 3, a->lease_ms);
  if ((n = mqproc__sq_exec(db, st, "renew", r->err)) != 0)
    return n < 0 ? n : MQPROC_OK;
  if ((st = mqproc__sq_stmt(db, OUTBOX, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->attempt);
  mqproc__sq_bind_int(st, 3, a->lease_ms);
  return mqproc__sq_write_fenced(db, st, r, "write", a->job_id, a->attempt);
}

/* Reads the schema's table, not just `SELECT 1`: a file that is no database any more
 * fails here. While the database is down the engine checks it more closely first
 * (store/sqlite/engine.c, recover). */
static int run_ping(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "SELECT max(version) FROM mqproc_schema_migrations";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  return mqproc__sq_write(db, st, r, "write");
}

/* ---- every operation ---------------------------------------------------------------- */

static const sq_op_t CLAIM = {run_claim, claim_answer, 0, 0};
static const sq_op_t START_TRY = {run_start_try, start_try_answer, 0, 0};
static const sq_op_t END_TRY = {run_end_try, NULL, 0, 0};
static const sq_op_t SUCCEED = {run_succeed, NULL, 0, 0};
static const sq_op_t CANCELLED = {run_cancelled, NULL, 0, 0};
static const sq_op_t FAIL = {run_fail, fail_answer, 0, 0};
static const sq_op_t RELEASE = {run_release, NULL, 0, 0};
static const sq_op_t GIVE_UP = {run_give_up, NULL, 0, 0};
static const sq_op_t ACK_EARLY = {run_ack_early, NULL, 0, 0};
static const sq_op_t RENEW = {run_renew, NULL, 0, 0};
static const sq_op_t PING = {run_ping, NULL, 0, 1};

static const sq_op_t *const OPS[MQPROC__STORE_NOPS] = {
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
    [MQPROC__STORE_SWEEP] = &mqproc__sq_op_sweep,
    [MQPROC__STORE_SWEEP_OUTBOX] = &mqproc__sq_op_sweep_outbox,
    [MQPROC__STORE_REPUBLISHED] = &mqproc__sq_op_republished,
    [MQPROC__STORE_OUTBOX_DONE] = &mqproc__sq_op_outbox_done,
    [MQPROC__STORE_DEAD_LETTERED] = &mqproc__sq_op_dead_lettered,
    [MQPROC__STORE_MARK_PUBLISHED] = &mqproc__sq_op_mark_published,
    [MQPROC__STORE_RECORD_CALLBACKS] = &mqproc__sq_op_record_callbacks,
    [MQPROC__STORE_RECORD_DEAD] = &mqproc__sq_op_record_dead,
    [MQPROC__STORE_BEAT] = &mqproc__sq_op_beat,
    [MQPROC__STORE_HOLDER_GONE] = &mqproc__sq_op_holder_gone,
    [MQPROC__STORE_Q_TAKE] = &mqproc__sq_op_q_take,
    [MQPROC__STORE_Q_ACK] = &mqproc__sq_op_q_ack,
    [MQPROC__STORE_Q_NACK] = &mqproc__sq_op_q_nack,
    [MQPROC__STORE_Q_PUBLISH] = &mqproc__sq_op_q_publish,
    [MQPROC__STORE_Q_EXTEND] = &mqproc__sq_op_q_extend,
    [MQPROC__STORE_Q_RESET] = &mqproc__sq_op_q_reset,
};

/* The texts and bytes of the request r->q (a copy of the caller's) become r's own copies
 * (claim and beat: of the caller's struct, into r->x), so the thread reads nothing of the
 * caller's; what is derived from them is made here too (a beat's jobs as JSON, a dead
 * letter's SHA-256 of the whole body). Out of memory sets r->nomem. */
static void own_args(sq_req_t *r) {
  mqproc__store_req_t *q = &r->q;
  switch (q->op) {
  case MQPROC__STORE_CLAIM: {
    mqproc__claim_t *c = &r->x.claim;
    *c = *q->u.claim;
    mqproc__sq_own_text(r, &c->job_id);
    mqproc__sq_own_text(r, &c->processor);
    mqproc__sq_own_text(r, &c->worker_id);
    mqproc__sq_own_text(r, &c->request_json);
    mqproc__sq_own_text(r, &c->request_format);
    mqproc__sq_own_bytes(r, &c->request_body, c->request_body_len);
    mqproc__sq_own_text(r, &c->headers_json);
    mqproc__sq_own_text(r, &c->log_path);
    break;
  }
  case MQPROC__STORE_START_TRY:
    mqproc__sq_own_text(r, &q->u.start_try.job_id);
    mqproc__sq_own_text(r, &q->u.start_try.worker_id);
    mqproc__sq_own_text(r, &q->u.start_try.log_path);
    break;
  case MQPROC__STORE_END_TRY:
    mqproc__sq_own_text(r, &q->u.end_try.job_id);
    mqproc__sq_own_text(r, &q->u.end_try.end.error);
    mqproc__sq_own_text(r, &q->u.end_try.log_path);
    break;
  case MQPROC__STORE_SUCCEED:
    mqproc__sq_own_text(r, &q->u.succeed.job_id);
    mqproc__sq_own_text(r, &q->u.succeed.end.error);
    mqproc__sq_own_text(r, &q->u.succeed.log_text);
    mqproc__sq_own_text(r, &q->u.succeed.log_path);
    mqproc__sq_own_queue_args(r); /* the table queue's ack and result, when given */
    break;
  case MQPROC__STORE_CANCELLED:
    mqproc__sq_own_text(r, &q->u.cancelled.job_id);
    mqproc__sq_own_text(r, &q->u.cancelled.end.error);
    mqproc__sq_own_text(r, &q->u.cancelled.log_text);
    mqproc__sq_own_text(r, &q->u.cancelled.log_path);
    break;
  case MQPROC__STORE_FAIL:
    mqproc__sq_own_text(r, &q->u.fail.job_id);
    mqproc__sq_own_text(r, &q->u.fail.error);
    break;
  case MQPROC__STORE_RELEASE:
    mqproc__sq_own_text(r, &q->u.release.job_id);
    mqproc__sq_own_text(r, &q->u.release.why);
    break;
  case MQPROC__STORE_GIVE_UP:
    mqproc__sq_own_text(r, &q->u.give_up.job_id);
    mqproc__sq_own_text(r, &q->u.give_up.why);
    break;
  case MQPROC__STORE_ACK_EARLY:
    mqproc__sq_own_text(r, &q->u.ack_early.job_id);
    break;
  case MQPROC__STORE_RENEW:
    mqproc__sq_own_text(r, &q->u.renew.job_id);
    break;
  case MQPROC__STORE_PING:
    break;
  case MQPROC__STORE_SWEEP:
    mqproc__sq_own_text(r, &q->u.sweep.processor);
    break;
  case MQPROC__STORE_SWEEP_OUTBOX:
    mqproc__sq_own_text(r, &q->u.sweep_outbox.processor);
    break;
  case MQPROC__STORE_REPUBLISHED:
    mqproc__sq_own_text(r, &q->u.republished.job_id);
    break;
  case MQPROC__STORE_OUTBOX_DONE:
    mqproc__sq_own_text(r, &q->u.outbox_done.job_id);
    mqproc__sq_own_text(r, &q->u.outbox_done.publish_error);
    mqproc__sq_own_text(r, &q->u.outbox_done.callback_error);
    break;
  case MQPROC__STORE_DEAD_LETTERED:
    mqproc__sq_own_text(r, &q->u.dead_lettered.job_id);
    break;
  case MQPROC__STORE_MARK_PUBLISHED:
    mqproc__sq_own_text(r, &q->u.mark_published.job_id);
    mqproc__sq_own_text(r, &q->u.mark_published.error);
    break;
  case MQPROC__STORE_RECORD_CALLBACKS:
    mqproc__sq_own_text(r, &q->u.record_callbacks.job_id);
    mqproc__sq_own_text(r, &q->u.record_callbacks.error);
    break;
  case MQPROC__STORE_RECORD_DEAD: {
    mqproc__store_record_dead_t *a = &q->u.record_dead;
    if (a->body == NULL)
      a->body = "";
    mqproc__sha256(a->body, a->len, r->x.sha256);
    mqproc__sq_own_text(r, &a->processor);
    mqproc__sq_own_text(r, &a->job_id);
    mqproc__sq_own_text(r, &a->reason);
    mqproc__sq_own_text(r, &a->worker_id);
    mqproc__sq_own_bytes(r, &a->body, a->len < a->keep ? a->len : a->keep);
    break;
  }
  case MQPROC__STORE_BEAT:
    mqproc__sq_own_beat(r);
    break;
  case MQPROC__STORE_HOLDER_GONE:
    mqproc__sq_own_text(r, &q->u.holder_gone.worker_id);
    mqproc__sq_own_text(r, &q->u.holder_gone.host);
    mqproc__sq_own_text(r, &q->u.holder_gone.by);
    break;
  case MQPROC__STORE_Q_TAKE:
  case MQPROC__STORE_Q_ACK:
  case MQPROC__STORE_Q_NACK:
  case MQPROC__STORE_Q_PUBLISH:
  case MQPROC__STORE_Q_EXTEND:
  case MQPROC__STORE_Q_RESET:
    mqproc__sq_own_queue_args(r);
    break;
  case MQPROC__STORE_NOPS:
    break;
  }
}

/* ---- the class ---------------------------------------------------------------------- */

/* A request of q's operation with copies of what q points to, queued for the engine. */
static int sq_submit(mqproc__store_t *base, const mqproc__store_req_t *q) {
  sq_req_t *r;
  if ((unsigned)q->op >= MQPROC__STORE_NOPS || OPS[q->op] == NULL)
    return MQPROC_EINVAL;
  if ((r = calloc(1, sizeof(*r))) == NULL)
    return MQPROC_ENOMEM;
  r->op = OPS[q->op];
  r->q = *q;
  own_args(r);
  if (r->nomem) {
    mqproc__sq_req_free(r);
    return MQPROC_ENOMEM;
  }
  return mqproc__sq_enqueue((sq_store_t *)base, r);
}

/* A line of the notice file: a table queue's (MQPROC__SQ_NOTICE_QUEUE and its name), or an
 * operator's (a processor's name). */
static void on_notice(void *ud, const char *line) {
  sq_store_t *s = ud;
  size_t n = strlen(MQPROC__SQ_NOTICE_QUEUE);
  if (strncmp(line, MQPROC__SQ_NOTICE_QUEUE, n) == 0) {
    if (s->on_queue != NULL)
      s->on_queue(s->queue_ud, line + n);
  } else if (s->on_control != NULL) {
    s->on_control(s->control_ud, line);
  }
}

/* No notifications in SQLite: a file beside it that operators and publishers append to;
 * without it, a server reads its wishes and cancels with its next beat, and a table queue
 * looks every second. */
static void watch_notices(sq_store_t *s) {
  if (s->loop != NULL && s->notice == NULL)
    s->notice = mqproc__sq_notice_watch(s->path, s->loop, on_notice, s);
}

static void sq_listen(mqproc__store_t *base, void (*cb)(void *ud, const char *payload), void *ud) {
  sq_store_t *s = (sq_store_t *)base;
  s->on_control = cb;
  s->control_ud = ud;
  if (cb != NULL)
    watch_notices(s);
}

static int sq_listen_queues(mqproc__store_t *base, const char *queue,
                            void (*cb)(void *ud, const char *queue), void *ud) {
  sq_store_t *s = (sq_store_t *)base;
  (void)queue; /* the notice file names every queue: on_notice picks its own */
  s->on_queue = cb;
  s->queue_ud = ud;
  if (cb != NULL)
    watch_notices(s);
  return cb != NULL && s->notice != NULL;
}

static void sq_forget(mqproc__store_t *base, void *ud) {
  sq_store_t *s = (sq_store_t *)base;
  if (s->engine != NULL)
    mqproc__sq_forget(s->engine, ud);
}

static void sq_destroy(mqproc__store_t *base) {
  sq_store_t *s = (sq_store_t *)base;
  mqproc__sq_notice_free(s->notice);
  mqproc__sq_engine_free(s->engine);
  free(s->path);
  free(s);
}

static const struct mqproc__store_class sq_class = {
    "sqlite",           /* name */
    mqproc__sq_open,    /* open */
    mqproc__sq_migrate, /* migrate */
    sq_submit,          /* submit */
    sq_listen,          /* listen */
    sq_listen_queues,   /* listen_queues */
    sq_forget,          /* forget */
    sq_destroy,         /* destroy */
    mqproc__sq_schema,  /* schema */
};

int mqproc__store_is_sqlite(const char *url) {
  return url != NULL && strncmp(url, "sqlite://", 9) == 0;
}

int mqproc__store_sqlite_new(mqproc__store_t **out, const char *url, mqproc__loop_t *loop,
                             char *err) {
  sq_store_t *s;
  const char *p = url + 9, *q;
  int rc;
  *out = NULL;
  for (int op = 0; op < MQPROC__STORE_NOPS; op++) /* an operation left out of OPS: a bug */
    if (OPS[op] == NULL)
      return mqproc__err(err, MQPROC_ESTATE, "the SQLite store lacks operation %d (OPS)", op);
  if (!mqproc__store_is_sqlite(url) || p[0] != '/' || p[1] == '\0')
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--database %s: expected sqlite:///ABSOLUTE/PATH[?synchronous=normal]", url);
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  q = strchr(p, '?');
  s->path = q != NULL ? strndup(p, (size_t)(q - p)) : strdup(p);
  if (q != NULL && strcmp(q, "?synchronous=normal") != 0 && strcmp(q, "?synchronous=full") != 0) {
    free(s->path);
    free(s);
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--database %s: the only option is ?synchronous=normal (or full)", url);
  }
  s->sync_normal = q != NULL && strcmp(q, "?synchronous=normal") == 0;
  s->base.klass = &sq_class;
  s->loop = loop;
  if (s->path == NULL) {
    free(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  if (loop != NULL && (rc = mqproc__sq_engine_new(&s->engine, s, loop, err)) != MQPROC_OK) {
    free(s->path);
    free(s);
    return rc;
  }
  *out = &s->base;
  return MQPROC_OK;
}
