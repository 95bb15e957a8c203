/* SQLite job store: the table queues' operations (take, ack, nack, publish, extend, reset:
 * store.h), store/pg/queue.c's statements in SQLite's dialect, each operation's run and
 * answer in store/sqlite/jobs.c's table. They run on the engine's thread in its BEGIN
 * IMMEDIATE turn with the job writes queued beside them: one writer at a time, so a take
 * needs no SKIP LOCKED. A publish tells the servers on this host through the notice file
 * once its turn committed (notice_of, store/sqlite/engine.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/sqlite/int.h"
#include "store/sqlite/notice.h"
#include "base/util.h"

/* The columns a take returns: id, deliveries, priority, body, content_type, message_id,
 * headers, the body's size in bytes. */
#define TAKE_COLS 8

/* clang-format off */
/* A row is a producer's (docs/table-queue.md): the delivery count is made an integer and
 * saturates at 10^9 (a count past 2^31 or a REAL, read back with atoi, never matched its
 * ack's fence again), the priority is read as an integer within -1 (none) .. 32767, as on
 * PostgreSQL. A body larger than ?5 bytes (> 0: --max-message-size) comes back as its first
 * 1024 bytes and its size, for its dead letter: the server never copies it whole. */
#define TAKE_SET "consumer = ?2, visible_at = mq_now() + ?4, deliveries ="                     \
                 " min(max(CAST(deliveries AS INTEGER), 0), 999999999) + 1"
#define TAKE_RETURNING                                                                         \
  " RETURNING id, deliveries, min(max(CAST(priority AS INTEGER), -1), 32767),"                 \
  " CASE WHEN ?5 <= 0 OR " TAKE_SIZE " <= ?5 THEN body"                                         \
  " ELSE substr(CAST(body AS BLOB), 1, 1024) END, content_type, message_id, headers, " TAKE_SIZE
/* a blob's length is its size without reading it; text (a producer's) is counted as bytes */
#define TAKE_SIZE                                                                              \
  "CASE typeof(body) WHEN 'blob' THEN length(body) ELSE length(CAST(body AS BLOB)) END"
/* Held messages whose holder let the deadline pass (a dead holder's), by deadline. */
static const char TAKE_BACK[] =
    "UPDATE mqproc_messages SET " TAKE_SET
    " WHERE id IN (SELECT id FROM mqproc_messages WHERE queue = ?1 AND consumer IS NOT NULL"
    "   AND visible_at <= mq_now() ORDER BY visible_at LIMIT ?3)" TAKE_RETURNING;
/* Ready ones in the queue's order (the ready index: a key range). */
static const char TAKE_READY[] =
    "UPDATE mqproc_messages SET " TAKE_SET
    " WHERE id IN (SELECT id FROM mqproc_messages WHERE queue = ?1 AND consumer IS NULL"
    "   AND visible_at <= mq_now() ORDER BY priority DESC, id LIMIT ?3)" TAKE_RETURNING;
/* clang-format on */

const char *mqproc__sq_take_sql(int back) {
  return back ? TAKE_BACK : TAKE_READY;
}

/* Copies the row st is on into r->rows: the body as bytes (a producer may have stored it
 * as text), the rest as text. */
static int keep_row(sqlite3_stmt *st, sq_req_t *r) {
  sq_row_t *row = mqproc__sq_row_add(r);
  if (row == NULL)
    return -1;
  for (int i = 0; i < TAKE_COLS; i++) {
    const void *p = i == 3 ? sqlite3_column_blob(st, i) : sqlite3_column_text(st, i);
    int n = sqlite3_column_bytes(st, i);
    if (p == NULL && sqlite3_column_type(st, i) == SQLITE_NULL)
      continue;
    if ((row->col[i] = malloc((size_t)n + 1)) == NULL)
      return -1;
    if (n > 0)
      memcpy(row->col[i], p, (size_t)n);
    row->col[i][n] = '\0';
    row->len[i] = (size_t)n;
  }
  return 0;
}

/* Runs one of the take's statements for up to limit messages; *got += the rows kept. */
static int take_some(sqlite3 *db, sq_req_t *r, const char *sql, int limit, int *got) {
  const mqproc__store_q_take_t *a = &r->q.u.q_take;
  sqlite3_stmt *st = mqproc__sq_stmt(db, sql, r->err);
  int rc;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->queue);
  mqproc__sq_bind_text(st, 2, a->consumer);
  mqproc__sq_bind_int(st, 3, limit);
  mqproc__sq_bind_int(st, 4, a->visibility_ms);
  mqproc__sq_bind_int(st, 5, a->max_body <= INT64_MAX ? (int64_t)a->max_body : 0);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (keep_row(st, r) != 0) {
      sqlite3_reset(st);
      return mqproc__err(r->err, MQPROC_ENOMEM, "out of memory");
    }
    (*got)++;
  }
  if (rc != SQLITE_DONE) {
    rc = mqproc__sq_error(db, "take messages", r->err);
    sqlite3_reset(st);
    return rc;
  }
  sqlite3_reset(st);
  return MQPROC_OK;
}

static int run_take(sqlite3 *db, sq_req_t *r) {
  int limit = r->q.u.q_take.limit, got = 0, rc;
  if ((rc = take_some(db, r, TAKE_BACK, limit, &got)) != MQPROC_OK || got >= limit)
    return rc;
  return take_some(db, r, TAKE_READY, limit - got, &got);
}

static void take_answer(sq_req_t *r) {
  for (const sq_row_t *w = r->rows; w != NULL; w = w->next) {
    long long size = w->col[7] != NULL ? strtoll(w->col[7], NULL, 10) : 0;
    mqproc__q_msg_t m = {.id = w->col[0] != NULL ? strtoll(w->col[0], NULL, 10) : 0,
                         .deliveries = w->col[1] != NULL ? atoi(w->col[1]) : 1,
                         .priority = w->col[2] != NULL ? atoi(w->col[2]) : 0,
                         .body = w->col[3] != NULL ? w->col[3] : "",
                         .len = w->len[3],
                         .size = size > 0 && (size_t)size > w->len[3] ? (size_t)size : 0,
                         .content_type = w->col[4] != NULL ? w->col[4] : "application/json",
                         .message_id = w->col[5],
                         .headers_json = w->col[6]};
    r->q.u.q_take.row(r->q.ud, &m);
  }
}

/* ---- ack, nack ---------------------------------------------------------------------- */

/* Each message by id, fenced by its holder and delivery count; r->int_out: how many. */
static int settle(sqlite3 *db, sq_req_t *r, const mqproc__store_q_settle_t *a, const char *sql,
                  const char *what) {
  sqlite3_stmt *st = mqproc__sq_stmt(db, sql, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  r->int_out = 0;
  for (size_t k = 0; k < a->n; k++) {
    mqproc__sq_bind_int(st, 1, a->ids[k]);
    mqproc__sq_bind_int(st, 2, a->deliveries[k]);
    mqproc__sq_bind_text(st, 3, a->consumer);
    if ((n = mqproc__sq_exec(db, st, what, r->err)) < 0)
      return n;
    r->int_out += n;
  }
  return MQPROC_OK;
}

static int run_ack(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "DELETE FROM mqproc_messages WHERE id = ?1 AND deliveries = ?2 AND consumer = ?3";
  return settle(db, r, &r->q.u.q_ack, SQL, "ack");
}

static int run_nack(sqlite3 *db, sq_req_t *r) {
  static const char BACK[] = "UPDATE mqproc_messages SET consumer = NULL, visible_at = mq_now()"
                             " WHERE id = ?1 AND deliveries = ?2 AND consumer = ?3";
  static const char GONE[] =
      "DELETE FROM mqproc_messages WHERE id = ?1 AND deliveries = ?2 AND consumer = ?3";
  const mqproc__store_q_nack_t *a = &r->q.u.q_nack;
  return settle(db, r, a, a->requeue ? BACK : GONE, "nack");
}

/* settled, extend's held: the count, for a caller that wants it */
static void count_answer(sq_req_t *r) {
  int *out = r->q.op == MQPROC__STORE_Q_ACK    ? r->q.u.q_ack.settled
             : r->q.op == MQPROC__STORE_Q_NACK ? r->q.u.q_nack.settled
                                               : r->q.u.q_extend.held;
  if (out != NULL)
    *out = r->int_out;
}

/* ---- publish ------------------------------------------------------------------------ */

static int run_publish(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] =
      "INSERT INTO mqproc_messages (queue, priority, body, content_type, message_id, headers,"
      " enqueued_at, visible_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, mq_now(), mq_now())";
  const mqproc__store_q_publish_t *a = &r->q.u.q_publish;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->queue);
  mqproc__sq_bind_int(st, 2, a->priority > 0 ? a->priority : 0);
  mqproc__sq_bind_bytes(st, 3, a->body != NULL ? a->body : "", a->len);
  mqproc__sq_bind_text(st, 4, a->content_type != NULL ? a->content_type : "application/json");
  mqproc__sq_bind_text(st, 5, a->message_id);
  mqproc__sq_bind_text(st, 6, a->headers_json);
  return mqproc__sq_write(db, st, r, "publish");
}

/* ---- extend, reset ------------------------------------------------------------------ */

static int run_extend(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_messages SET visible_at = mq_now() + ?3"
                            " WHERE id = ?1 AND consumer = ?2";
  const mqproc__store_q_extend_t *a = &r->q.u.q_extend;
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  r->int_out = 0;
  for (size_t k = 0; k < a->n; k++) {
    mqproc__sq_bind_int(st, 1, a->ids[k]);
    mqproc__sq_bind_text(st, 2, a->consumer);
    mqproc__sq_bind_int(st, 3, a->visibility_ms);
    if ((n = mqproc__sq_exec(db, st, "extend", r->err)) < 0)
      return n;
    r->int_out += n;
  }
  return MQPROC_OK;
}

static int run_reset(sqlite3 *db, sq_req_t *r) {
  static const char SQL[] = "UPDATE mqproc_messages SET consumer = NULL, visible_at = mq_now()"
                            " WHERE queue = ?1 AND consumer = ?2";
  sqlite3_stmt *st = mqproc__sq_stmt(db, SQL, r->err);
  int n;
  if (st == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, r->q.u.q_reset.queue);
  mqproc__sq_bind_text(st, 2, r->q.u.q_reset.consumer);
  if ((n = mqproc__sq_exec(db, st, "reset", r->err)) < 0)
    return n;
  r->int_out = n;
  return MQPROC_OK;
}

int mqproc__sq_queue_in_write(sqlite3 *db, sq_req_t *r, const mqproc__store_succeed_t *a) {
  static const char ACK[] =
      "DELETE FROM mqproc_messages WHERE id = ?1 AND deliveries = ?2 AND consumer = ?3";
  static const char RESULT[] =
      "INSERT INTO mqproc_messages (queue, body, content_type, message_id, headers, enqueued_at,"
      " visible_at) VALUES (?1, ?2, coalesce(?3, 'application/json'), ?4, ?5, mq_now(), mq_now())";
  static const char PUBLISHED[] = "UPDATE mqproc_jobs SET result_published = 1 WHERE job_id = ?1";
  sqlite3_stmt *st;
  int rc;
  if (a->q_consumer != NULL) {
    if ((st = mqproc__sq_stmt(db, ACK, r->err)) == NULL)
      return MQPROC_ESTORE_QUERY;
    mqproc__sq_bind_int(st, 1, a->q_id);
    mqproc__sq_bind_int(st, 2, a->q_deliveries);
    mqproc__sq_bind_text(st, 3, a->q_consumer);
    if ((rc = mqproc__sq_write(db, st, r, "ack")) != MQPROC_OK)
      return rc;
  }
  if (a->result_queue == NULL)
    return MQPROC_OK;
  if ((st = mqproc__sq_stmt(db, RESULT, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->result_queue);
  mqproc__sq_bind_bytes(st, 2, a->result_body != NULL ? a->result_body : "", a->result_len);
  mqproc__sq_bind_text(st, 3, a->result_content_type);
  mqproc__sq_bind_text(st, 4, a->job_id);
  mqproc__sq_bind_text(st, 5, a->result_headers_json);
  if ((rc = mqproc__sq_write(db, st, r, "publish the result")) != MQPROC_OK)
    return rc;
  if ((st = mqproc__sq_stmt(db, PUBLISHED, r->err)) == NULL)
    return MQPROC_ESTORE_QUERY;
  mqproc__sq_bind_text(st, 1, a->job_id);
  return mqproc__sq_write(db, st, r, "publish the result");
}

const char *mqproc__sq_queue_notice(const sq_req_t *r) {
  if (r->rc != MQPROC_OK)
    return NULL;
  if (r->q.op == MQPROC__STORE_Q_PUBLISH)
    return r->q.u.q_publish.queue;
  if (r->q.op == MQPROC__STORE_SUCCEED) /* its result, when it carried one */
    return r->q.u.succeed.result_queue;
  if (r->q.op == MQPROC__STORE_Q_RESET && r->int_out > 0) /* other servers may take them */
    return r->q.u.q_reset.queue;
  return NULL;
}

const sq_op_t mqproc__sq_op_q_take = {run_take, take_answer, 0, 0};
const sq_op_t mqproc__sq_op_q_ack = {run_ack, count_answer, 0, 0};
const sq_op_t mqproc__sq_op_q_nack = {run_nack, count_answer, 0, 0};
const sq_op_t mqproc__sq_op_q_publish = {run_publish, NULL, 0, 0};
const sq_op_t mqproc__sq_op_q_extend = {run_extend, count_answer, 0, 0};
const sq_op_t mqproc__sq_op_q_reset = {run_reset, NULL, 0, 0};

void mqproc__sq_own_queue_args(sq_req_t *r) {
  mqproc__store_req_t *q = &r->q;
  switch (q->op) {
  case MQPROC__STORE_Q_TAKE:
    mqproc__sq_own_text(r, &q->u.q_take.queue);
    mqproc__sq_own_text(r, &q->u.q_take.consumer);
    break;
  case MQPROC__STORE_Q_ACK:
  case MQPROC__STORE_Q_NACK: {
    mqproc__store_q_settle_t *a = q->op == MQPROC__STORE_Q_ACK ? &q->u.q_ack : &q->u.q_nack;
    const void *ids = a->ids, *deliveries = a->deliveries;
    mqproc__sq_own_text(r, &a->consumer);
    mqproc__sq_own_bytes(r, &ids, a->n * sizeof(*a->ids));
    mqproc__sq_own_bytes(r, &deliveries, a->n * sizeof(*a->deliveries));
    a->ids = ids;
    a->deliveries = deliveries;
    break;
  }
  case MQPROC__STORE_Q_PUBLISH: {
    mqproc__store_q_publish_t *a = &q->u.q_publish;
    mqproc__sq_own_text(r, &a->queue);
    mqproc__sq_own_bytes(r, &a->body, a->len);
    mqproc__sq_own_text(r, &a->content_type);
    mqproc__sq_own_text(r, &a->message_id);
    mqproc__sq_own_text(r, &a->headers_json);
    break;
  }
  case MQPROC__STORE_Q_EXTEND: {
    const void *ids = q->u.q_extend.ids;
    mqproc__sq_own_text(r, &q->u.q_extend.consumer);
    mqproc__sq_own_bytes(r, &ids, q->u.q_extend.n * sizeof(*q->u.q_extend.ids));
    q->u.q_extend.ids = ids;
    break;
  }
  case MQPROC__STORE_Q_RESET:
    mqproc__sq_own_text(r, &q->u.q_reset.queue);
    mqproc__sq_own_text(r, &q->u.q_reset.consumer);
    break;
  case MQPROC__STORE_SUCCEED: { /* its table queue part (jobs.c copies the rest) */
    mqproc__store_succeed_t *a = &q->u.succeed;
    mqproc__sq_own_text(r, &a->q_consumer);
    mqproc__sq_own_text(r, &a->result_queue);
    mqproc__sq_own_bytes(r, &a->result_body, a->result_len);
    mqproc__sq_own_text(r, &a->result_content_type);
    mqproc__sq_own_text(r, &a->result_headers_json);
    break;
  }
  default:
    break;
  }
}
