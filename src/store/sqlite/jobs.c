/* SQLite job store (sqlite:///PATH): the same job table, claims, fencing, leases, outbox
 * and workers rows as the PostgreSQL store (store/pg.c), in SQLite's dialect: times are
 * integer milliseconds since the epoch (mq_now(), a function of the connection), booleans
 * 0/1, JSON as text. Each method is a request run on the engine's thread
 * (store/sqlite_engine.c, which also builds the requests), many of them per transaction;
 * the statements of the sweeps, marks and the fleet in store/sqlite_ops.c, the schema and
 * `migrate` in store/sqlite_conn.c. */
#include <errno.h>
#include <stdarg.h>
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

/* s: job, processor, worker, request, format, log_path, headers; i: lease_ms, created_ms
 * (-1), max attempts, priority (-1); the body as the blob */
static const char CLAIM_NEW[] =
    "INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, deliveries, worker_id,"
    " lease_until, created_time, queued_at, start_time, request, request_format, request_body,"
    " tries, log_path, headers, priority, updated_at)"
    " VALUES (?1, ?2, 'RUNNING', 1, 1, ?3, mq_now() + ?4, ?5, mq_now(), mq_now(), ?6, ?7, ?8,"
    " 1, ?9, ?10, ?11, mq_now()) ON CONFLICT (job_id) DO NOTHING";

static const char CLAIM_AGAIN[] =
    "UPDATE mqproc_jobs SET state = 'RUNNING', attempt = attempt + 1,"
    " deliveries = deliveries + 1, worker_id = ?2, lease_until = mq_now() + ?3,"
    " start_time = mq_now(), end_time = NULL, delivery_acked = 0, republish = 0,"
    " tries = tries + 1, log_path = ?4, headers = coalesce(?5, headers),"
    " priority = coalesce(?6, priority), request = coalesce(request, ?7),"
    " request_body = coalesce(request_body, ?8), updated_at = mq_now()"
    " WHERE job_id = ?1 AND (state = 'QUEUED' OR (state = 'RUNNING' AND (lease_until < mq_now()"
    "   OR coalesce(" HOLDER_DEAD_AT " < mq_now(), 0))))"
    " AND attempt - attempt_base < ?9"
    " RETURNING attempt, tries, requeues, result_published, callback_state IS NOT NULL";

static const char CLAIM_SEEN[] = "UPDATE mqproc_jobs SET deliveries = deliveries + 1,"
                                 " updated_at = mq_now() WHERE job_id = ?1";

static const char CLAIM_ROW[] =
    "SELECT attempt, state, tries, requeues, result_published, callback_state IS NOT NULL,"
    " state = 'RUNNING' AND lease_until >= mq_now()"
    "   AND NOT coalesce(" HOLDER_DEAD_AT " < mq_now(), 0),"
    " max(0, min(lease_until, coalesce(" HOLDER_DEAD_AT ", lease_until)) - mq_now()),"
    " coalesce(worker_id, ''), delivery_acked AND state IN ('SUCCESS', 'FAILED', 'CANCELLED'),"
    " coalesce((SELECT w.host FROM mqproc_workers w WHERE w.worker_id = mqproc_jobs.worker_id),"
    "   ''),"
    " coalesce((SELECT w.pid FROM mqproc_workers w WHERE w.worker_id = mqproc_jobs.worker_id), 0)"
    " FROM mqproc_jobs WHERE job_id = ?1";

static const char TRY_NEW[] =
    "INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id, started_at)"
    " VALUES (?1, ?2, ?3, ?4, mq_now())";

static int insert_try(sqlite3 *db, sq_req_t *r, const char *job, int try_no, int attempt,
                      const char *worker) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, TRY_NEW, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, job);
  sqlite3_bind_int(st, 2, try_no);
  sqlite3_bind_int(st, 3, attempt);
  mqproc__sq_text(st, 4, worker);
  return (n = mqproc__sq_exec(db, st, "record the try", r->err)) < 0 ? n : MQPROC_OK;
}

static int run_claim(sqlite3 *db, sq_req_t *r) {
  mqproc__claim_t *c = &r->claim; /* the caller's gets it on the loop (claim_out) */
  sqlite3_stmt *st;
  int n;
  if ((st = mqproc__sq_stmt(db, CLAIM_NEW, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  mqproc__sq_text(st, 2, r->s[1]);
  mqproc__sq_text(st, 3, r->s[2]);
  sqlite3_bind_int64(st, 4, r->i[0]);
  if (r->i[1] >= 0)
    sqlite3_bind_int64(st, 5, r->i[1]);
  mqproc__sq_text(st, 6, r->s[3]);
  mqproc__sq_text(st, 7, r->s[4]);
  if (r->blob != NULL)
    sqlite3_bind_blob(st, 8, r->blob, (int)r->blob_len, SQLITE_STATIC);
  mqproc__sq_text(st, 9, r->s[5]);
  mqproc__sq_text(st, 10, r->s[6]);
  if (r->i[3] >= 0)
    sqlite3_bind_int64(st, 11, r->i[3]);
  if ((n = mqproc__sq_exec(db, st, "claim", r->err)) < 0)
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
    return insert_try(db, r, r->s[0], 1, 1, r->s[2]);
  }
  if ((st = mqproc__sq_stmt(db, CLAIM_AGAIN, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  mqproc__sq_text(st, 2, r->s[2]);
  sqlite3_bind_int64(st, 3, r->i[0]);
  mqproc__sq_text(st, 4, r->s[5]);
  mqproc__sq_text(st, 5, r->s[6]);
  if (r->i[3] >= 0)
    sqlite3_bind_int64(st, 6, r->i[3]);
  mqproc__sq_text(st, 7, r->s[3]);
  if (r->blob != NULL)
    sqlite3_bind_blob(st, 8, r->blob, (int)r->blob_len, SQLITE_STATIC);
  sqlite3_bind_int64(st, 9, r->i[2]);
  if ((n = mqproc__sq_first(db, st, "claim", r->err)) < 0)
    return n;
  if (n == 1) { /* taken again: QUEUED, or its holder's lease ended */
    c->claimed = 1;
    c->attempt = sqlite3_column_int(st, 0);
    c->tries = c->try_no = sqlite3_column_int(st, 1);
    c->requeues = sqlite3_column_int(st, 2);
    c->result_published = sqlite3_column_int(st, 3);
    c->callbacks_done = sqlite3_column_int(st, 4);
    snprintf(c->state, sizeof(c->state), "RUNNING");
    if ((n = mqproc__sq_exec(db, st, "claim", r->err)) < 0)
      return n;
    return insert_try(db, r, r->s[0], c->tries, c->attempt, r->s[2]);
  }
  /* seen: counted, and reported as it is */
  if ((st = mqproc__sq_stmt(db, CLAIM_SEEN, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  if ((n = mqproc__sq_exec(db, st, "claim", r->err)) < 0)
    return n;
  if ((st = mqproc__sq_stmt(db, CLAIM_ROW, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
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

static void claim_out(sq_req_t *r) {
  mqproc__claim_t *c = r->out, *a = &r->claim;
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

static void int_out(sq_req_t *r) {
  *(int *)r->out = r->int_out;
}

/* r with its answer copied out on the loop by copy (NULL r: passed on). */
static sq_req_t *with_out(sq_req_t *r, void (*copy)(sq_req_t *)) {
  if (r != NULL)
    r->copy_out = copy;
  return r;
}

static int sq_claim(mqproc__store_t *base, mqproc__claim_t *c, mqproc__store_done_cb done,
                    void *ud) {
  return mqproc__sq_send(
      base, with_out(mqproc__sq_req(run_claim, c, done, ud, "sssssssiliiy", c->job_id, c->processor,
                                    c->worker_id, c->request_json,
                                    c->request_format != NULL ? c->request_format : "json",
                                    c->log_path, c->headers_json, c->lease_ms,
                                    c->created_time >= 0 ? c->created_time * 1000LL : -1LL,
                                    c->max_attempts > 0 ? c->max_attempts : 1000000, c->priority,
                                    c->request_body, c->request_body_len),
                     claim_out));
}

/* ---- tries and outcomes ------------------------------------------------------------- */

/* Runs sql with s[0..ns), then i[0..ni), then the blob (if any) bound in that order:
 * MQPROC_ESTORE_FENCED when fence and it changed no row. */
int mqproc__sq_run(sqlite3 *db, sq_req_t *r, const char *sql, int ns, int ni, int fence) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, sql, r->err);
  int n, k = 1;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  for (int j = 0; j < ns; j++)
    mqproc__sq_text(st, k++, r->s[j]);
  for (int j = 0; j < ni; j++)
    sqlite3_bind_int64(st, k++, r->i[j]);
  if (r->blob != NULL)
    sqlite3_bind_blob(st, k, r->blob, (int)r->blob_len, SQLITE_STATIC);
  if ((n = mqproc__sq_exec(db, st, "write", r->err)) < 0)
    return n;
  return fence && n == 0 ? mqproc__sq_fenced(r) : MQPROC_OK;
}

/* s: job, worker, log_path; i: attempt */
static int run_start_try(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET tries = tries + 1, log_path = ?3, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?4 AND state = 'RUNNING' RETURNING tries";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int try_no, n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  mqproc__sq_text(st, 3, r->s[2]);
  sqlite3_bind_int64(st, 4, r->i[0]);
  if ((n = mqproc__sq_first(db, st, "start a try", r->err)) <= 0)
    return n < 0 ? n : mqproc__sq_fenced(r);
  try_no = sqlite3_column_int(st, 0);
  if ((n = mqproc__sq_exec(db, st, "start a try", r->err)) < 0)
    return n;
  r->int_out = try_no;
  return insert_try(db, r, r->s[0], try_no, (int)r->i[0], r->s[1]);
}

static int sq_start_try(mqproc__store_t *base, const char *job_id, int attempt,
                        const char *worker_id, const char *log_path, int *try_no,
                        mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base, with_out(mqproc__sq_req(run_start_try, try_no, done, ud, "sssi",
                                                       job_id, worker_id, log_path, attempt),
                                        int_out));
}

/* s: job, error; i: attempt, try, ok, exit (-1), signal (0), ms */
static int run_end_try(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] = "UPDATE mqproc_jobs SET last_error = coalesce(?2, last_error),"
                            " updated_at = mq_now() WHERE job_id = ?1 AND attempt = ?3"
                            " AND state = 'RUNNING'";
  static const char TRY[] =
      "UPDATE mqproc_job_tries SET ended_at = mq_now(), ok = ?2, exit_code = ?3,"
      " term_signal = ?4, duration_ms = ?5, error = ?6 WHERE job_id = ?1 AND try = ?7";
  sqlite3_stmt *st;
  int rc = mqproc__sq_run(db, r, JOB, 2, 1, 1), n;
  if (rc != MQPROC_OK || (st = mqproc__sq_stmt(db, TRY, r->err)) == NULL)
    return rc != MQPROC_OK ? rc : MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  sqlite3_bind_int64(st, 2, r->i[2]);
  if (r->i[3] >= 0)
    sqlite3_bind_int64(st, 3, r->i[3]);
  if (r->i[4] > 0)
    sqlite3_bind_int64(st, 4, r->i[4]);
  sqlite3_bind_int64(st, 5, r->i[5]);
  mqproc__sq_text(st, 6, r->s[1]);
  sqlite3_bind_int64(st, 7, r->i[1]);
  return (n = mqproc__sq_exec(db, st, "end the try", r->err)) < 0 ? n : MQPROC_OK;
}

static int sq_end_try(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base, mqproc__sq_req(run_end_try, NULL, done, ud, "ssiiiiil", job_id,
                                              e->error, attempt, try_no, e->ok, e->exit_code,
                                              e->term_signal, (long long)e->duration_ms));
}

/* s: job; i: attempt, try, ms, exit (-1), outbox, lease_ms; state: SUCCESS or CANCELLED */
static int end_job(sqlite3 *db, sq_req_t *r, const char *job_sql, const char *try_sql) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, job_sql, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  sqlite3_bind_int64(st, 2, r->i[0]);
  sqlite3_bind_int64(st, 3, r->i[2]);
  sqlite3_bind_int64(st, 4, r->i[4]);
  sqlite3_bind_int64(st, 5, r->i[5]);
  if ((n = mqproc__sq_exec(db, st, "record the outcome", r->err)) < 0)
    return n;
  if (n == 0)
    return mqproc__sq_fenced(r);
  if ((st = mqproc__sq_stmt(db, try_sql, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  sqlite3_bind_int64(st, 2, r->i[1]);
  sqlite3_bind_int64(st, 3, r->i[2]);
  if (r->i[3] >= 0)
    sqlite3_bind_int64(st, 4, r->i[3]);
  return (n = mqproc__sq_exec(db, st, "end the try", r->err)) < 0 ? n : MQPROC_OK;
}

static int run_succeed(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] =
      "UPDATE mqproc_jobs SET state = 'SUCCESS', end_time = mq_now(), exec_time_ms = ?3,"
      " updated_at = mq_now(), lease_until = CASE WHEN delivery_acked OR ?4"
      "   THEN mq_now() + ?5 END, delivery_acked = delivery_acked OR ?4"
      " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  static const char TRY[] = "UPDATE mqproc_job_tries SET ended_at = mq_now(), ok = 1,"
                            " exit_code = ?4, duration_ms = ?3 WHERE job_id = ?1 AND try = ?2";
  return end_job(db, r, JOB, TRY);
}

static int sq_succeed(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, int outbox, int lease_ms,
                      mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base, mqproc__sq_req(run_succeed, NULL, done, ud, "siiliii", job_id,
                                              attempt, try_no, (long long)e->duration_ms,
                                              e->exit_code, outbox, lease_ms));
}

static int run_cancelled(sqlite3 *db, sq_req_t *r) {
  static const char JOB[] = "UPDATE mqproc_jobs SET state = 'CANCELLED', end_time = mq_now(),"
                            " last_error = 'cancelled by an operator', updated_at = mq_now(),"
                            " lease_until = CASE WHEN delivery_acked OR ?4 THEN mq_now() + ?5 END,"
                            " delivery_acked = delivery_acked OR ?4"
                            " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  static const char TRY[] =
      "UPDATE mqproc_job_tries SET ended_at = coalesce(ended_at, mq_now()),"
      " ok = coalesce(ok, 0), duration_ms = coalesce(duration_ms, ?3),"
      " error = coalesce(error, 'cancelled by an operator') WHERE job_id = ?1 AND try = ?2";
  return end_job(db, r, JOB, TRY);
}

static int sq_cancelled(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                        const mqproc__try_end_t *e, int outbox, int lease_ms,
                        mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base,
                         mqproc__sq_req(run_cancelled, NULL, done, ud, "siiliii", job_id, attempt,
                                        try_no, (long long)e->duration_ms, -1, outbox, lease_ms));
}

/* s: job, error; i: attempt, max_requeues, republish */
static int run_fail(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET"
      " state = CASE WHEN requeues < ?4 THEN 'QUEUED' ELSE 'FAILED' END,"
      " requeues = CASE WHEN requeues < ?4 THEN requeues + 1 ELSE requeues END,"
      " end_time = CASE WHEN requeues < ?4 THEN NULL ELSE mq_now() END,"
      " republish = ?5 AND requeues < ?4,"
      " delivery_acked = delivery_acked AND requeues >= ?4,"
      " dead_letter_pending = delivery_acked AND requeues >= ?4,"
      " lease_until = CASE WHEN delivery_acked AND requeues >= ?4 THEN lease_until END,"
      " last_error = ?2, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?3 AND state = 'RUNNING' RETURNING state";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int queued, n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  mqproc__sq_text(st, 2, r->s[1]);
  sqlite3_bind_int64(st, 3, r->i[0]);
  sqlite3_bind_int64(st, 4, r->i[1]);
  sqlite3_bind_int64(st, 5, r->i[2]);
  if ((n = mqproc__sq_first(db, st, "fail", r->err)) <= 0)
    return n < 0 ? n : mqproc__sq_fenced(r);
  queued = strcmp((const char *)sqlite3_column_text(st, 0), "QUEUED") == 0;
  if ((n = mqproc__sq_exec(db, st, "fail", r->err)) < 0)
    return n;
  r->int_out = queued;
  return MQPROC_OK;
}

static int sq_fail(mqproc__store_t *base, const char *job_id, int attempt, const char *error,
                   int max_requeues, int republish, int *requeued, mqproc__store_done_cb done,
                   void *ud) {
  return mqproc__sq_send(base,
                         with_out(mqproc__sq_req(run_fail, requeued, done, ud, "ssiii", job_id,
                                                 error, attempt, max_requeues, republish),
                                  int_out));
}

/* s: job, why; i: attempt, republish, refund */
static int run_release(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET state = 'QUEUED', lease_until = NULL, republish = ?4,"
      " delivery_acked = 0, last_error = coalesce(?2, last_error), updated_at = mq_now(),"
      " attempt_base = attempt_base + ?5"
      " WHERE job_id = ?1 AND attempt = ?3 AND state = 'RUNNING'";
  return mqproc__sq_run(db, r, SQL, 2, 3, 1);
}

static int sq_release(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      int refund, int republish, mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base, mqproc__sq_req(run_release, NULL, done, ud, "ssiii", job_id, why,
                                              attempt, republish, refund ? 1 : 0));
}

static int run_give_up(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET state = 'FAILED', end_time = mq_now(), lease_until = NULL,"
      " republish = 0, delivery_acked = 0, last_error = ?2, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?3"
      " AND (state = 'QUEUED' OR (state = 'RUNNING' AND lease_until < mq_now()))";
  return mqproc__sq_run(db, r, SQL, 2, 1, 1);
}

static int sq_give_up(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base,
                         mqproc__sq_req(run_give_up, NULL, done, ud, "ssi", job_id, why, attempt));
}

static int run_ack_early(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET delivery_acked = 1, updated_at = mq_now()"
                            " WHERE job_id = ?1 AND attempt = ?2 AND state = 'RUNNING'";
  return mqproc__sq_run(db, r, SQL, 1, 1, 1);
}

static int sq_ack_early(mqproc__store_t *base, const char *job_id, int attempt,
                        mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(base,
                         mqproc__sq_req(run_ack_early, NULL, done, ud, "si", job_id, attempt));
}

static int run_renew(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET lease_until = mq_now() + ?3 WHERE job_id = ?1 AND attempt = ?2"
      " AND (state = 'RUNNING' OR (delivery_acked AND state IN ('SUCCESS', 'FAILED')))";
  return mqproc__sq_run(db, r, SQL, 1, 2, 1);
}

static int sq_renew(mqproc__store_t *base, const char *job_id, int attempt, int lease_ms,
                    mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(
      base, mqproc__sq_req(run_renew, NULL, done, ud, "sii", job_id, attempt, lease_ms));
}

/* Reads the schema's table, not just `SELECT 1`: a file that is no database any more
 * fails here. While the database is down the engine checks it more closely first
 * (sqlite_engine.c, recover). */
static int run_ping(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "SELECT max(version) FROM mqproc_schema_migrations";
  return mqproc__sq_run(db, r, SQL, 0, 0, 0);
}

static int sq_ping(mqproc__store_t *base, mqproc__store_done_cb done, void *ud) {
  sq_req_t *r = mqproc__sq_req(run_ping, NULL, done, ud, "");
  if (r != NULL)
    r->probe = 1;
  return mqproc__sq_send(base, r);
}

/* ---- open, migrate, the class ------------------------------------------------------- */

static void sq_listen(mqproc__store_t *base, void (*cb)(void *ud, const char *payload), void *ud) {
  /* no notifications in SQLite: a file beside it that operators append to; without it, a
   * server reads its wishes and cancels with its next beat */
  sq_store_t *s = (sq_store_t *)base;
  if (s->loop != NULL && s->notice == NULL)
    s->notice = mqproc__sq_notice_watch(s->path, s->loop, cb, ud);
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
    "sqlite",                    /* name */
    mqproc__sq_open,             /* open */
    mqproc__sq_migrate,          /* migrate */
    sq_claim,                    /* claim */
    sq_start_try,                /* start_try */
    sq_end_try,                  /* end_try */
    sq_succeed,                  /* succeed */
    sq_fail,                     /* fail */
    sq_release,                  /* release */
    sq_give_up,                  /* give_up */
    sq_ack_early,                /* ack_early */
    mqproc__sq_sweep,            /* sweep */
    mqproc__sq_republished,      /* republished */
    sq_ping,                     /* ping */
    sq_renew,                    /* renew */
    mqproc__sq_outbox_done,      /* outbox_done */
    mqproc__sq_dead_lettered,    /* dead_lettered */
    mqproc__sq_sweep_outbox,     /* sweep_outbox */
    mqproc__sq_mark_published,   /* mark_published */
    mqproc__sq_record_callbacks, /* record_callbacks */
    mqproc__sq_record_dead,      /* record_dead */
    mqproc__sq_beat,             /* beat */
    mqproc__sq_holder_gone,      /* holder_gone */
    sq_cancelled,                /* cancelled */
    sq_listen,                   /* listen */
    sq_forget,                   /* forget */
    sq_destroy,                  /* destroy */
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
