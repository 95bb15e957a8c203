/* SQLite job store: the sweeps (republish, outbox), the marks of what was sent, dead
 * letters, and the fleet (the workers row, the operators' wish and cancels, a holder found
 * dead), in store.h's order of operations: the same statements as store/pg/sweep.c and
 * store/pg/fleet.c in SQLite's dialect, each operation's run and answer in
 * store/sqlite/jobs.c's table. Rows found on the engine's thread are handed to the caller
 * on the loop. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite/int.h"
#include "base/util.h"

static char *col_text(sqlite3_stmt *st, int i) {
  const unsigned char *t = sqlite3_column_text(st, i);
  return t != NULL ? strdup((const char *)t) : NULL;
}

/* Copies the row st is on into r->rows (blob columns as bytes with their length). */
static int keep_row(sqlite3_stmt *st, sq_req_t *r, int ncols) {
  sq_row_t *row = mqproc__sq_row_add(r);
  if (row == NULL)
    return -1;
  for (int i = 0; i < ncols && i < 12; i++) {
    if (sqlite3_column_type(st, i) == SQLITE_BLOB) {
      int n = sqlite3_column_bytes(st, i);
      if ((row->col[i] = malloc((size_t)n + 1)) != NULL) {
        memcpy(row->col[i], sqlite3_column_blob(st, i), (size_t)n);
        row->col[i][n] = '\0';
        row->len[i] = (size_t)n;
      }
    } else {
      row->col[i] = col_text(st, i);
    }
  }
  return 0;
}

/* Runs a statement whose rows go to the loop: ?1 the processor, ?2 the lease, ?3 the
 * limit. */
static int run_rows(sqlite3 *db, sq_req_t *r, const char *sql, int ncols, const char *processor,
                    int lease_ms, int limit) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, sql, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, processor);
  mqproc__sq_bind_int(st, 2, lease_ms);
  mqproc__sq_bind_int(st, 3, limit);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (keep_row(st, r, ncols) != 0) {
      sqlite3_reset(st);
      return mqproc__err(r->err, MQPROC_ENOMEM, "out of memory");
    }
  if (rc != SQLITE_DONE) {
    rc = mqproc__sq_error(db, "sweep", r->err);
    sqlite3_reset(st);
    return rc;
  }
  sqlite3_reset(st);
  return MQPROC_OK;
}

/* ---- sweeps ------------------------------------------------------------------------- */

static int run_sweep(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET state = 'QUEUED', republish = 1, delivery_acked = 0,"
      " worker_id = NULL, lease_until = mq_now() + ?2, updated_at = mq_now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = ?1"
      "   AND ((state = 'RUNNING' AND delivery_acked AND lease_until < mq_now())"
      "     OR (state = 'QUEUED' AND republish AND coalesce(lease_until, mq_now()) <= mq_now()))"
      "   ORDER BY lease_until LIMIT ?3)"
      " RETURNING job_id, request, request_format, request_body, attempt,"
      "   coalesce(priority, -1), headers";
  const mqproc__store_sweep_t *a = &r->q.u.sweep;
  return run_rows(db, r, SQL, 7, a->processor, a->lease_ms, a->limit);
}

static void sweep_answer(sq_req_t *r) {
  for (sq_row_t *w = r->rows; w != NULL; w = w->next) {
    mqproc__sweep_row_t row = {.job_id = w->col[0],
                               .request_json = w->col[1],
                               .format = w->col[2] != NULL ? w->col[2] : "json",
                               .body = w->col[3],
                               .body_len = w->len[3],
                               .attempt = w->col[4] != NULL ? atoi(w->col[4]) : 0,
                               .priority = w->col[5] != NULL ? atoi(w->col[5]) : -1,
                               .headers_json = w->col[6]};
    if (row.job_id != NULL && (row.request_json != NULL || row.body != NULL))
      r->q.u.sweep.row(r->q.ud, &row);
  }
}

const sq_op_t mqproc__sq_op_sweep = {run_sweep, sweep_answer, 0, 0};

static int run_sweep_outbox(sqlite3 *db, sq_req_t *r) {
  /* final jobs whose holder died before it sent their outcome: their outbox marks, taken
   * for a grace lease; the result and the callbacks go again (what was sent is unknown) */
  static const char SQL[] =
      "UPDATE mqproc_outbox SET lease_until = mq_now() + ?2"
      " WHERE job_id IN (SELECT job_id FROM mqproc_outbox WHERE processor_name = ?1"
      "   AND lease_until < mq_now() ORDER BY lease_until LIMIT ?3)"
      " RETURNING job_id, (SELECT request FROM mqproc_jobs j WHERE j.job_id = "
      "mqproc_outbox.job_id),"
      "   (SELECT request_format FROM mqproc_jobs j WHERE j.job_id = mqproc_outbox.job_id),"
      "   (SELECT state FROM mqproc_jobs j WHERE j.job_id = mqproc_outbox.job_id), attempt, 0, 0,"
      "   dead_letter,"
      "   (SELECT coalesce(last_error, '') FROM mqproc_jobs j"
      "     WHERE j.job_id = mqproc_outbox.job_id),"
      "   (SELECT request_body FROM mqproc_jobs j WHERE j.job_id = mqproc_outbox.job_id)";
  const mqproc__store_sweep_outbox_t *a = &r->q.u.sweep_outbox;
  return run_rows(db, r, SQL, 10, a->processor, a->lease_ms, a->limit);
}

static void sweep_outbox_answer(sq_req_t *r) {
  for (sq_row_t *w = r->rows; w != NULL; w = w->next) {
    mqproc__outbox_row_t row = {.job_id = w->col[0],
                                .request_json = w->col[1],
                                .format = w->col[2] != NULL ? w->col[2] : "json",
                                .state = w->col[3],
                                .attempt = w->col[4] != NULL ? atoi(w->col[4]) : 0,
                                .result_published = w->col[5] != NULL && atoi(w->col[5]) != 0,
                                .callbacks_done = w->col[6] != NULL && atoi(w->col[6]) != 0,
                                .dead_letter_pending = w->col[7] != NULL && atoi(w->col[7]) != 0,
                                .last_error = w->col[8] != NULL ? w->col[8] : "",
                                .body = w->col[9],
                                .body_len = w->len[9]};
    if (row.job_id != NULL && (row.request_json != NULL || row.body != NULL) && row.state != NULL)
      r->q.u.sweep_outbox.row(r->q.ud, &row);
  }
}

const sq_op_t mqproc__sq_op_sweep_outbox = {run_sweep_outbox, sweep_outbox_answer, 0, 0};

/* ---- marks -------------------------------------------------------------------------- */

static int run_republished(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET republish = 0, lease_until = NULL,"
                            " updated_at = mq_now() WHERE job_id = ?1 AND state = 'QUEUED'"
                            " AND republish";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, r->q.u.republished.job_id);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_republished = {run_republished, NULL, 0, 0};

/* The holder sent everything: its outbox mark goes, and the job row is written only where
 * something did not go out (the success recorded the result and callbacks as sent). */
static int run_outbox_done(sqlite3 *db, sq_req_t *r) {
  static const char OUTBOX[] = "DELETE FROM mqproc_outbox WHERE job_id = ?1 AND attempt = ?2";
  static const char SQL[] =
      "UPDATE mqproc_jobs SET dead_letter_pending = 0,"
      " result_published = CASE WHEN ?5 THEN ?2 IS NULL ELSE result_published END,"
      " last_error = coalesce(?2, last_error),"
      " callback_state = CASE WHEN ?6 THEN CASE WHEN ?3 IS NULL THEN 'OK' ELSE 'FAILED' END"
      "   ELSE callback_state END,"
      " callback_error = CASE WHEN ?6 THEN ?3 ELSE callback_error END, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?4"
      "   AND ((?5 AND ?2 IS NOT NULL) OR (?6 AND ?3 IS NOT NULL) OR (?5 AND NOT result_published)"
      "     OR (?6 AND callback_state IS NULL) OR dead_letter_pending)";
  const mqproc__store_outbox_done_t *a = &r->q.u.outbox_done;
  sqlite3_stmt *st = mqproc__sq_stmt(db, OUTBOX, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_int(st, 2, a->attempt);
  if ((rc = mqproc__sq_write(db, st, r, "write")) != MQPROC_OK)
    return rc;
  if ((st = mqproc__sq_stmt(db, SQL, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  mqproc__sq_bind_text(st, 2, a->publish_error);
  mqproc__sq_bind_text(st, 3, a->callback_error);
  mqproc__sq_bind_int(st, 4, a->attempt);
  mqproc__sq_bind_bool(st, 5, a->result_sent);
  mqproc__sq_bind_bool(st, 6, a->callbacks_sent);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_outbox_done = {run_outbox_done, NULL, 0, 0};

static int run_dead_lettered(sqlite3 *db, sq_req_t *r) {
  /* its outbox mark need not send the dead letter again */
  static const char SQL[] = "UPDATE mqproc_outbox SET dead_letter = 0"
                            " WHERE job_id = ?1 AND attempt = ?2 AND dead_letter";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, r->q.u.dead_lettered.job_id);
  mqproc__sq_bind_int(st, 2, r->q.u.dead_lettered.attempt);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_dead_lettered = {run_dead_lettered, NULL, 0, 0};

static int run_mark_published(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET result_published = (?2 IS NULL),"
                            " last_error = coalesce(?2, last_error), updated_at = mq_now()"
                            " WHERE job_id = ?1";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, r->q.u.mark_published.job_id);
  mqproc__sq_bind_text(st, 2, r->q.u.mark_published.error);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_mark_published = {run_mark_published, NULL, 0, 0};

static int run_record_callbacks(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET callback_state = CASE WHEN ?2 IS NULL THEN 'OK' ELSE 'FAILED' END,"
      " callback_error = ?2, updated_at = mq_now() WHERE job_id = ?1";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, r->q.u.record_callbacks.job_id);
  mqproc__sq_bind_text(st, 2, r->q.u.record_callbacks.error);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_record_callbacks = {run_record_callbacks, NULL, 0, 0};

/* The kept bytes of the body (submit copied at most keep), its whole length and the
 * SHA-256 of all of it (32 bytes, as PostgreSQL keeps it), computed by submit. */
static int run_record_dead(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "INSERT INTO mqproc_dead_letters (processor_name, job_id, reason, worker_id, body_sha256,"
      " body_len, body, received_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, mq_now())";
  const mqproc__store_record_dead_t *a = &r->q.u.record_dead;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->processor);
  mqproc__sq_bind_text(st, 2, a->job_id);
  mqproc__sq_bind_text(st, 3, a->reason);
  mqproc__sq_bind_text(st, 4, a->worker_id);
  if (a->size <= a->len) /* (else only its start was read: no SHA-256) */
    mqproc__sq_bind_bytes(st, 5, r->x.sha256, sizeof(r->x.sha256));
  mqproc__sq_bind_int(st, 6, (int64_t)(a->size > a->len ? a->size : a->len));
  mqproc__sq_bind_bytes(st, 7, a->body, a->len < a->keep ? a->len : a->keep);
  return mqproc__sq_write(db, st, r, "record the dead letter");
}

const sq_op_t mqproc__sq_op_record_dead = {run_record_dead, NULL, 0, 0};

/* ---- the fleet ---------------------------------------------------------------------- */

void mqproc__sq_own_beat(sq_req_t *r) {
  mqproc__beat_t *b = &r->x.beat.b;
  json_t *jobs = json_array();
  char *text;
  *b = *r->q.u.beat;
  for (size_t i = 0; i < b->n_current; i++)
    json_array_append_new(jobs, json_string(b->current_jobs[i]));
  text = json_dumps(jobs, JSON_COMPACT);
  json_decref(jobs);
  b->current_jobs = NULL; /* the caller's: the thread reads jobs_json */
  b->n_current = 0;
  if (text == NULL) {
    r->nomem = 1;
    return;
  }
  r->x.beat.jobs_json = text;
  mqproc__sq_own_text(r, &r->x.beat.jobs_json);
  free(text);
  mqproc__sq_own_text(r, &b->worker_id);
  mqproc__sq_own_text(r, &b->processor);
  mqproc__sq_own_text(r, &b->host);
  mqproc__sq_own_text(r, &b->version);
  mqproc__sq_own_text(r, &b->state);
  mqproc__sq_own_text(r, &b->note);
}

/* The workers row, then what it reads back, as rows for the loop: ("wish", WISH) and
 * ("cancel", JOB, ATTEMPT). */
static int run_beat(sqlite3 *db, sq_req_t *r) {
  static const char ROW[] =
      "INSERT INTO mqproc_workers (worker_id, processor_name, host, pid, version, started_at,"
      " last_seen, interval_ms, state, concurrency, in_flight, jobs_done, jobs_failed,"
      " current_jobs, restarts, note)"
      " VALUES (?1, ?2, ?3, ?8, ?4, ?9, mq_now(), ?10, ?5, ?11, ?12, ?13, ?14, ?6, ?15, ?7)"
      " ON CONFLICT (worker_id) DO UPDATE SET processor_name = excluded.processor_name,"
      " host = excluded.host, pid = excluded.pid, version = excluded.version,"
      " started_at = excluded.started_at, last_seen = mq_now(),"
      " interval_ms = excluded.interval_ms, state = excluded.state,"
      " concurrency = excluded.concurrency, in_flight = excluded.in_flight,"
      " jobs_done = excluded.jobs_done, jobs_failed = excluded.jobs_failed,"
      " current_jobs = excluded.current_jobs, restarts = excluded.restarts, note = excluded.note";
  static const char WISH[] = "SELECT 'wish', wish || char(9) || set_by, set_at FROM mqproc_control"
                             " WHERE processor_name = ?2 AND worker_id IN (?1, '')"
                             " ORDER BY worker_id DESC LIMIT 1";
  static const char CANCELS[] = "SELECT 'cancel', job_id, attempt FROM mqproc_jobs"
                                " WHERE worker_id = ?1 AND state = 'RUNNING' AND cancel_requested";
  const char *reads[2] = {WISH, CANCELS};
  const mqproc__beat_t *b = &r->x.beat.b;
  sqlite3_stmt *st = mqproc__sq_stmt(db, ROW, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, b->worker_id);
  mqproc__sq_bind_text(st, 2, b->processor);
  mqproc__sq_bind_text(st, 3, b->host);
  mqproc__sq_bind_text(st, 4, b->version);
  mqproc__sq_bind_text(st, 5, b->state);
  mqproc__sq_bind_text(st, 6, r->x.beat.jobs_json);
  mqproc__sq_bind_text(st, 7, b->note);
  mqproc__sq_bind_int(st, 8, b->pid);
  mqproc__sq_bind_int(st, 9, b->started_ms);
  mqproc__sq_bind_int(st, 10, b->interval_ms);
  mqproc__sq_bind_int(st, 11, b->concurrency);
  mqproc__sq_bind_int(st, 12, b->in_flight);
  mqproc__sq_bind_int(st, 13, b->jobs_done);
  mqproc__sq_bind_int(st, 14, b->jobs_failed);
  mqproc__sq_bind_int(st, 15, b->restarts);
  if ((rc = mqproc__sq_write(db, st, r, "write")) != MQPROC_OK)
    return rc;
  for (int k = 0; k < 2; k++) {
    if ((st = mqproc__sq_stmt(db, reads[k], r->err)) == NULL)
      return MQPROC_ESTORE_QUERY;
    mqproc__sq_bind_text(st, 1, b->worker_id);
    if (k == 0)
      mqproc__sq_bind_text(st, 2, b->processor);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      keep_row(st, r, 3);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
      return mqproc__sq_error(db, "beat", r->err);
  }
  return MQPROC_OK;
}

static void beat_answer(sq_req_t *r) {
  mqproc__beat_t *b = r->q.u.beat;
  void (*cancel)(void *, const char *, int) = r->x.beat.b.cancel;
  b->wish[0] = b->wish_by[0] = '\0';
  b->wish_at = 0;
  for (sq_row_t *w = r->rows; w != NULL; w = w->next) {
    if (w->col[0] == NULL || w->col[1] == NULL)
      continue;
    if (!strcmp(w->col[0], "wish"))
      mqproc__beat_wish(b, w->col[1], w->col[2] != NULL ? atoll(w->col[2]) : 0);
    else if (cancel != NULL)
      cancel(r->q.ud, w->col[1], w->col[2] != NULL ? atoi(w->col[2]) : 0);
  }
}

/* unsynced_ok: the next refresh says it again, so an idle server's refreshes need not wait
 * for the disk */
const sq_op_t mqproc__sq_op_beat = {run_beat, beat_answer, 1, 0};

static int run_holder_gone(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_workers SET state = 'dead', note = 'pid gone, seen by ' || ?3"
      " WHERE worker_id = ?1 AND host = ?2 AND pid = ?4 AND state NOT IN ('stopped', 'dead')";
  const mqproc__store_holder_gone_t *a = &r->q.u.holder_gone;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->worker_id);
  mqproc__sq_bind_text(st, 2, a->host);
  mqproc__sq_bind_text(st, 3, a->by);
  mqproc__sq_bind_int(st, 4, a->pid);
  return mqproc__sq_write(db, st, r, "write");
}

const sq_op_t mqproc__sq_op_holder_gone = {run_holder_gone, NULL, 0, 0};
