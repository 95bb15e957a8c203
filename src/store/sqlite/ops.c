/* SQLite job store, part two: the sweeps (republish, outbox), the marks of what was sent,
 * dead letters, and the fleet (the workers row, the operators' wish and cancels, a holder
 * found dead). The same statements as store/pg_sweep.c and store/pg_fleet.c in SQLite's
 * dialect; rows found on the engine's thread are handed to the caller on the loop. */
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

/* Runs a statement whose rows go to the loop; s[0], i[0], i[1] bound as ?1 ?2 ?3. */
static int run_rows(sqlite3 *db, sq_req_t *r, const char *sql, int ncols) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, sql, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_text(st, 1, r->s[0]);
  sqlite3_bind_int64(st, 2, r->i[0]);
  sqlite3_bind_int64(st, 3, r->i[1]);
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
  return run_rows(db, r, SQL, 7);
}

static void sweep_out(sq_req_t *r) {
  void (*cb)(void *, const mqproc__sweep_row_t *) =
      (void (*)(void *, const mqproc__sweep_row_t *))r->row_cb;
  for (sq_row_t *w = r->rows; w != NULL; w = w->next) {
    mqproc__sweep_row_t row = {.job_id = w->col[0],
                               .request_json = w->col[1],
                               .format = w->col[2] != NULL ? w->col[2] : "json",
                               .body = w->col[3],
                               .body_len = w->len[3],
                               .attempt = w->col[4] != NULL ? atoi(w->col[4]) : 0,
                               .priority = w->col[5] != NULL ? atoi(w->col[5]) : -1,
                               .headers_json = w->col[6]};
    if (row.job_id != NULL && row.request_json != NULL)
      cb(r->ud, &row);
  }
}

int mqproc__sq_sweep(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                     void (*row)(void *ud, const mqproc__sweep_row_t *r),
                     mqproc__store_done_cb done, void *ud) {
  sq_req_t *r = mqproc__sq_req(run_sweep, NULL, done, ud, "sii", processor, lease_ms, limit);
  if (r != NULL) {
    r->rows_out = sweep_out;
    r->row_cb = (void *)row;
  }
  return mqproc__sq_send(s, r);
}

static int run_outbox(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET lease_until = mq_now() + ?2, updated_at = mq_now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = ?1"
      "   AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') AND delivery_acked"
      "   AND lease_until < mq_now() ORDER BY lease_until LIMIT ?3)"
      " RETURNING job_id, request, request_format, state, attempt, result_published,"
      "   callback_state IS NOT NULL, dead_letter_pending, coalesce(last_error, ''),"
      "   request_body";
  return run_rows(db, r, SQL, 10);
}

static void outbox_out(sq_req_t *r) {
  void (*cb)(void *, const mqproc__outbox_row_t *) =
      (void (*)(void *, const mqproc__outbox_row_t *))r->row_cb;
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
    if (row.job_id != NULL && row.request_json != NULL && row.state != NULL)
      cb(r->ud, &row);
  }
}

int mqproc__sq_sweep_outbox(mqproc__store_t *s, const char *processor, int lease_ms, int limit,
                            void (*row)(void *ud, const mqproc__outbox_row_t *r),
                            mqproc__store_done_cb done, void *ud) {
  sq_req_t *r = mqproc__sq_req(run_outbox, NULL, done, ud, "sii", processor, lease_ms, limit);
  if (r != NULL) {
    r->rows_out = outbox_out;
    r->row_cb = (void *)row;
  }
  return mqproc__sq_send(s, r);
}

/* ---- marks -------------------------------------------------------------------------- */

static int run_republished(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET republish = 0, lease_until = NULL,"
                            " updated_at = mq_now() WHERE job_id = ?1 AND state = 'QUEUED'"
                            " AND republish";
  return mqproc__sq_run(db, r, SQL, 1, 0, 0);
}

int mqproc__sq_republished(mqproc__store_t *s, const char *job_id, mqproc__store_done_cb done,
                           void *ud) {
  return mqproc__sq_send(s, mqproc__sq_req(run_republished, NULL, done, ud, "s", job_id));
}

/* s: job, publish error, callback error; i: attempt, result sent, callbacks sent */
static int run_outbox_done(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET delivery_acked = 0, dead_letter_pending = 0, lease_until = NULL,"
      " result_published = CASE WHEN ?5 THEN ?2 IS NULL ELSE result_published END,"
      " last_error = coalesce(?2, last_error),"
      " callback_state = CASE WHEN ?6 THEN CASE WHEN ?3 IS NULL THEN 'OK' ELSE 'FAILED' END"
      "   ELSE callback_state END,"
      " callback_error = CASE WHEN ?6 THEN ?3 ELSE callback_error END, updated_at = mq_now()"
      " WHERE job_id = ?1 AND attempt = ?4 AND state IN ('SUCCESS', 'FAILED') AND delivery_acked";
  return mqproc__sq_run(db, r, SQL, 3, 3, 0);
}

int mqproc__sq_outbox_done(mqproc__store_t *s, const char *job_id, int attempt, int result_sent,
                           const char *publish_error, int callbacks_sent,
                           const char *callback_error, mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(s, mqproc__sq_req(run_outbox_done, NULL, done, ud, "sssiii", job_id,
                                           publish_error, callback_error, attempt, result_sent,
                                           callbacks_sent));
}

static int run_dead_lettered(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET dead_letter_pending = 0, updated_at = mq_now()"
                            " WHERE job_id = ?1 AND attempt = ?2 AND dead_letter_pending";
  return mqproc__sq_run(db, r, SQL, 1, 1, 0);
}

int mqproc__sq_dead_lettered(mqproc__store_t *s, const char *job_id, int attempt,
                             mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(s,
                         mqproc__sq_req(run_dead_lettered, NULL, done, ud, "si", job_id, attempt));
}

static int run_mark_published(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_jobs SET result_published = (?2 IS NULL),"
                            " last_error = coalesce(?2, last_error), updated_at = mq_now()"
                            " WHERE job_id = ?1";
  return mqproc__sq_run(db, r, SQL, 2, 0, 0);
}

int mqproc__sq_mark_published(mqproc__store_t *s, const char *job_id, const char *error,
                              mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(s,
                         mqproc__sq_req(run_mark_published, NULL, done, ud, "ss", job_id, error));
}

static int run_record_callbacks(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_jobs SET callback_state = CASE WHEN ?2 IS NULL THEN 'OK' ELSE 'FAILED' END,"
      " callback_error = ?2, updated_at = mq_now() WHERE job_id = ?1";
  return mqproc__sq_run(db, r, SQL, 2, 0, 0);
}

int mqproc__sq_record_callbacks(mqproc__store_t *s, const char *job_id, const char *error,
                                mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(s,
                         mqproc__sq_req(run_record_callbacks, NULL, done, ud, "ss", job_id, error));
}

/* s: processor, job, reason, worker, sha256 (hex); i: full length; the kept bytes as blob */
static int run_record_dead(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "INSERT INTO mqproc_dead_letters (processor_name, job_id, reason, worker_id, body_sha256,"
      " body_len, body, received_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, mq_now())";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  unsigned char sha[32];
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  for (int i = 0; i < 32; i++) /* the digest's 32 bytes, as PostgreSQL keeps them */
    sscanf(r->s[4] + 2 * i, "%2hhx", &sha[i]);
  for (int k = 0; k < 4; k++)
    mqproc__sq_text(st, k + 1, r->s[k]);
  sqlite3_bind_blob(st, 5, sha, sizeof(sha), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st, 6, r->i[0]);
  sqlite3_bind_blob(st, 7, r->blob != NULL ? r->blob : "", (int)r->blob_len, SQLITE_STATIC);
  return (n = mqproc__sq_exec(db, st, "record the dead letter", r->err)) < 0 ? n : MQPROC_OK;
}

int mqproc__sq_record_dead(mqproc__store_t *s, const char *processor, const char *job_id,
                           const void *body, size_t len, size_t keep, const char *reason,
                           const char *worker_id, mqproc__store_done_cb done, void *ud) {
  unsigned char sha[32];
  char hex[65];
  mqproc__sha256(body != NULL ? body : "", len, sha);
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", sha[i]);
  return mqproc__sq_send(s, mqproc__sq_req(run_record_dead, NULL, done, ud, "sssssly", processor,
                                           job_id, reason, worker_id, hex, (long long)len,
                                           body != NULL ? body : "", len < keep ? len : keep));
}

/* ---- the fleet ---------------------------------------------------------------------- */

/* s: worker, processor, host, version, state, current jobs (JSON), note;
 * i: pid, started ms, interval ms, concurrency, in flight, done, failed, restarts.
 * Rows to the loop: ("wish", WISH) and ("cancel", JOB, ATTEMPT). */
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
  static const char WISH[] = "SELECT 'wish', wish, 0 FROM mqproc_control WHERE processor_name = ?2"
                             " AND worker_id IN (?1, '') ORDER BY worker_id DESC LIMIT 1";
  static const char CANCELS[] = "SELECT 'cancel', job_id, attempt FROM mqproc_jobs"
                                " WHERE worker_id = ?1 AND state = 'RUNNING' AND cancel_requested";
  const char *reads[2] = {WISH, CANCELS};
  sqlite3_stmt *st;
  int rc = mqproc__sq_run(db, r, ROW, 7, 8, 0);
  if (rc != MQPROC_OK)
    return rc;
  for (int k = 0; k < 2; k++) {
    if ((st = mqproc__sq_stmt(db, reads[k], r->err)) == NULL)
      return MQPROC_ESTORE_QUERY;
    mqproc__sq_text(st, 1, r->s[0]);
    if (k == 0)
      mqproc__sq_text(st, 2, r->s[1]);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
      keep_row(st, r, 3);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE)
      return mqproc__sq_error(db, "beat", r->err);
  }
  return MQPROC_OK;
}

static void beat_out(sq_req_t *r) {
  mqproc__beat_t *b = r->out;
  void (*cancel)(void *, const char *, int) = (void (*)(void *, const char *, int))r->row_cb;
  b->wish[0] = '\0';
  for (sq_row_t *w = r->rows; w != NULL; w = w->next) {
    if (w->col[0] == NULL || w->col[1] == NULL)
      continue;
    if (!strcmp(w->col[0], "wish"))
      snprintf(b->wish, sizeof(b->wish), "%s", w->col[1]);
    else if (cancel != NULL)
      cancel(r->ud, w->col[1], w->col[2] != NULL ? atoi(w->col[2]) : 0);
  }
}

int mqproc__sq_beat(mqproc__store_t *s, mqproc__beat_t *b,
                    void (*cancel)(void *ud, const char *job_id, int attempt),
                    mqproc__store_done_cb done, void *ud) {
  json_t *jobs = json_array();
  char *text;
  sq_req_t *r;
  for (size_t i = 0; i < b->n_current; i++)
    json_array_append_new(jobs, json_string(b->current_jobs[i]));
  text = json_dumps(jobs, JSON_COMPACT);
  json_decref(jobs);
  if (text == NULL)
    return MQPROC_ENOMEM;
  r = mqproc__sq_req(run_beat, b, done, ud, "sssssssilliilli", b->worker_id, b->processor, b->host,
                     b->version, b->state, text, b->note, b->pid, b->started_ms,
                     (long long)b->interval_ms, b->concurrency, b->in_flight, b->jobs_done,
                     b->jobs_failed, b->restarts);
  free(text);
  if (r != NULL) {
    r->rows_out = beat_out;
    r->row_cb = (void *)cancel;
    r->unsynced_ok = 1; /* the next refresh says it again: an idle server's refreshes need
                           not wait for the disk */
  }
  return mqproc__sq_send(s, r);
}

static int run_holder_gone(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "UPDATE mqproc_workers SET state = 'dead', note = 'pid gone, seen by ' || ?3"
      " WHERE worker_id = ?1 AND host = ?2 AND pid = ?4 AND state NOT IN ('stopped', 'dead')";
  return mqproc__sq_run(db, r, SQL, 3, 1, 0);
}

int mqproc__sq_holder_gone(mqproc__store_t *s, const char *worker_id, const char *host, int pid,
                           const char *by, mqproc__store_done_cb done, void *ud) {
  return mqproc__sq_send(
      s, mqproc__sq_req(run_holder_gone, NULL, done, ud, "sssi", worker_id, host, by, pid));
}
