/* PostgreSQL job store: the table queues' statements (sql/010_table_queues.sql), what the
 * broker backend of store/queue.c asks of its database: take, ack, nack, publish, extend,
 * reset, in store.h's order of operations; each with its bind and parse, in
 * store/pg/jobs.c's table like the job's own statements, so they ride the same rounds
 * (one transaction, one commit) as the job writes around them.
 *
 * A take locks the messages it takes with FOR UPDATE SKIP LOCKED: two servers taking from
 * one queue at once get different messages and neither waits for the other. Its rows come
 * back in text format (the body as bytea's text form). Listeners learn of new messages
 * from a NOTIFY on the queue's own channel (int.h: mqproc__pg_queue_channel()) with the
 * queue's name, sent at the commit. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

/* An array literal {v0,v1,...} of n 64-bit (ids) or int (deliveries) values as parameter i. */
static void bind_int_array(pg_req_t *r, int i, const int64_t *ids, const int *ints, size_t n) {
  size_t cap = 3 + n * 21, used = 0;
  char *s = mqproc__malloc(cap);
  if (s == NULL) {
    r->nomem = 1;
    return;
  }
  s[used++] = '{';
  for (size_t k = 0; k < n; k++)
    used += (size_t)snprintf(s + used, cap - used, "%s%" PRId64, k > 0 ? "," : "",
                             ids != NULL ? ids[k] : (int64_t)ints[k]);
  snprintf(s + used, cap - used, "}");
  r->vals[i] = s;
}

/* ---- take --------------------------------------------------------------------------- */

/* clang-format off */
/* Messages whose holder let the deadline pass first (by deadline: the held index), then
 * ready ones (the ready index, in the queue's order: a key range that stops after the
 * limit, however many others hold). The UPDATE finds them by primary key.
 *
 * A row is a producer's (docs/table-queue.md), so nothing in it may fail the statement
 * that takes it with others: the delivery count saturates at 10^9 (the CHECK of
 * sql/011_hostile_rows.sql; a row from before it may hold anything), the priority is read
 * within the job table's smallint (-1: none), and a body larger than $5 bytes (> 0: the
 * --max-message-size) is not read: its size and its first 1024 bytes come back, and its
 * check dead-letters it (a body's hex text over 1 GiB failed every take). */
static const char TAKE_SQL[] =
    "WITH back AS (SELECT id FROM mqproc_messages WHERE queue = $1 AND consumer IS NOT NULL"
    "   AND visible_at <= now() ORDER BY visible_at LIMIT $3::int FOR UPDATE SKIP LOCKED),"
    " ready AS (SELECT id FROM mqproc_messages WHERE queue = $1 AND consumer IS NULL"
    "   AND visible_at <= now() ORDER BY priority DESC, id"
    "   LIMIT greatest(0, $3::int - (SELECT count(*) FROM back)) FOR UPDATE SKIP LOCKED)"
    " UPDATE mqproc_messages m SET consumer = $2,"
    "   deliveries = least(greatest(m.deliveries, 0), 999999999) + 1,"
    "   visible_at = now() + $4::int * interval '1 millisecond'"
    " WHERE m.id = ANY (ARRAY(SELECT id FROM back UNION ALL SELECT id FROM ready))"
    " RETURNING m.id, m.deliveries, least(greatest(m.priority, -1), 32767),"
    "   CASE WHEN $5::bigint <= 0 OR octet_length(m.body) <= $5::bigint THEN m.body"
    "   ELSE substring(m.body FROM 1 FOR 1024) END, m.content_type, m.message_id,"
    "   m.headers::text, octet_length(m.body)";
/* clang-format on */

static int parse_take(pg_req_t *r, PGresult *res, const int *rows, int n) {
  for (int k = 0; k < n; k++) {
    int i = rows[k];
    size_t len = 0;
    unsigned char *body = PQunescapeBytea((const unsigned char *)PQgetvalue(res, i, 3), &len);
    long long size = strtoll(PQgetvalue(res, i, 7), NULL, 10);
    mqproc__q_msg_t m = {.id = strtoll(PQgetvalue(res, i, 0), NULL, 10),
                         .deliveries = atoi(PQgetvalue(res, i, 1)),
                         .priority = atoi(PQgetvalue(res, i, 2)),
                         .body = body,
                         .len = len,
                         .size = size > 0 && (size_t)size > len ? (size_t)size : 0,
                         .content_type = PQgetvalue(res, i, 4),
                         .message_id = PQgetisnull(res, i, 5) ? NULL : PQgetvalue(res, i, 5),
                         .headers_json = PQgetisnull(res, i, 6) ? NULL : PQgetvalue(res, i, 6)};
    if (body == NULL)
      return mqproc__err(r->err, MQPROC_ENOMEM, "out of memory");
    r->out.q_row(r->ud, &m);
    PQfreemem(body);
  }
  return MQPROC_OK;
}

static void bind_take(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_q_take_t *a = &q->u.q_take;
  mqproc__pg_bind_text(r, 0, a->queue);
  mqproc__pg_bind_text(r, 1, a->consumer);
  mqproc__pg_bind_int(r, 2, a->limit);
  mqproc__pg_bind_int(r, 3, a->visibility_ms);
  mqproc__pg_bind_int64(r, 4, a->max_body <= INT64_MAX ? (int64_t)a->max_body : 0);
  r->out.q_row = a->row;
}

const pg_stmt_t mqproc__pg_stmt_q_take = {"mqproc_q_take", TAKE_SQL,   5,   0, 0,
                                          bind_take,       parse_take, NULL};

/* ---- ack, nack ---------------------------------------------------------------------- */

/* The rows a settling statement returned: how many messages it settled. */
static int parse_count(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)res;
  (void)rows;
  if (r->out.count != NULL)
    *r->out.count = n;
  return MQPROC_OK;
}

/* $1 ids, $2 their delivery counts, $3 the holder (and $4 requeue, nack's) */
static void bind_settle(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_q_settle_t *a = q->op == MQPROC__STORE_Q_ACK ? &q->u.q_ack : &q->u.q_nack;
  bind_int_array(r, 0, a->ids, NULL, a->n);
  bind_int_array(r, 1, NULL, a->deliveries, a->n);
  mqproc__pg_bind_text(r, 2, a->consumer);
  if (q->op == MQPROC__STORE_Q_NACK)
    mqproc__pg_bind_bool(r, 3, a->requeue);
  r->out.count = a->settled;
}

/* Fenced by holder and delivery count: a message taken again since is another's. */
const pg_stmt_t mqproc__pg_stmt_q_ack = {
    "mqproc_q_ack",
    "DELETE FROM mqproc_messages m USING unnest($1::bigint[], $2::int[]) AS v(id, d)"
    " WHERE m.id = v.id AND m.deliveries = v.d AND m.consumer = $3 RETURNING m.id",
    3,
    0,
    0,
    bind_settle,
    parse_count,
    NULL};

/* clang-format off */
/* Ready again (at their place in the queue: by priority, then id) and the queue's
 * listeners told, or deleted. */
static const char NACK_SQL[] =
    "WITH v AS (SELECT * FROM unnest($1::bigint[], $2::int[]) AS v(id, d)),"
    " back AS (UPDATE mqproc_messages m SET consumer = NULL, visible_at = now() FROM v"
    "   WHERE $4::bool AND m.id = v.id AND m.deliveries = v.d AND m.consumer = $3"
    "   RETURNING m.id, m.queue),"
    " gone AS (DELETE FROM mqproc_messages m USING v WHERE NOT $4::bool AND m.id = v.id"
    "   AND m.deliveries = v.d AND m.consumer = $3 RETURNING m.id),"
    " n AS (SELECT pg_notify(" MQPROC__PG_QUEUE_CHANNEL_SQL "(q), q) FROM"
    "   (SELECT DISTINCT queue AS q FROM back) d)"
    " SELECT id FROM back WHERE (SELECT count(*) FROM n) >= 0"
    " UNION ALL SELECT id FROM gone";
/* clang-format on */

const pg_stmt_t mqproc__pg_stmt_q_nack = {"mqproc_q_nack", NACK_SQL,    4,   0, 0,
                                          bind_settle,     parse_count, NULL};

/* ---- publish ------------------------------------------------------------------------ */

/* clang-format off */
/* The publishes of a round in one statement, in the order they were made (their keys);
 * one NOTIFY per queue. */
static const char PUBLISH_SQL[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bytea[],"
    "   $5::text[], $6::text[], $7::jsonb[])"
    "   WITH ORDINALITY AS v(k, queue, priority, body, ctype, message_id, headers, ord)),"
    " ins AS (INSERT INTO mqproc_messages (queue, priority, body, content_type, message_id,"
    "   headers) SELECT queue, priority, body, ctype, message_id, headers FROM v ORDER BY k"
    "   RETURNING queue),"
    " n AS (SELECT pg_notify(" MQPROC__PG_QUEUE_CHANNEL_SQL "(q), q) FROM"
    "   (SELECT DISTINCT queue AS q FROM ins) d)"
    " SELECT ord FROM v WHERE (SELECT count(*) FROM n) >= 0";
/* clang-format on */

/* A publish's key (the batch's first parameter, its sort order): the order it was made
 * in. Messages without an id must not share a key (one per key and batch), and the
 * inserts keep the order the server published them in. Loop thread only. */
static void bind_publish(pg_req_t *r, const mqproc__store_req_t *q) {
  static uint64_t seq;
  const mqproc__store_q_publish_t *a = &q->u.q_publish;
  char key[24];
  snprintf(key, sizeof(key), "%020" PRIu64, ++seq);
  mqproc__pg_bind_text(r, 0, key);
  mqproc__pg_bind_text(r, 1, a->queue);
  mqproc__pg_bind_int(r, 2, a->priority > 0 ? a->priority : 0);
  mqproc__pg_bind_bytes(r, 3, a->body != NULL ? a->body : "", a->len);
  mqproc__pg_bind_text(r, 4, a->content_type != NULL ? a->content_type : "application/json");
  mqproc__pg_bind_text(r, 5, a->message_id);
  mqproc__pg_bind_text(r, 6, a->headers_json);
}

/* A row for each publish (every one is inserted or the statement fails). */
static int parse_published(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)res;
  (void)rows;
  return n == 1 ? MQPROC_OK
                : mqproc__err(r->err, MQPROC_ESTORE_QUERY, "the message was not stored");
}

const pg_stmt_t mqproc__pg_stmt_q_publish = {"mqproc_q_publish", PUBLISH_SQL,     7,   1, 0,
                                             bind_publish,       parse_published, NULL};

/* ---- extend, reset ------------------------------------------------------------------ */

static void bind_extend(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_q_extend_t *a = &q->u.q_extend;
  bind_int_array(r, 0, a->ids, NULL, a->n);
  mqproc__pg_bind_text(r, 1, a->consumer);
  mqproc__pg_bind_int(r, 2, a->visibility_ms);
  r->out.count = a->held;
}

const pg_stmt_t mqproc__pg_stmt_q_extend = {
    "mqproc_q_extend",
    "UPDATE mqproc_messages SET visible_at = now() + $3::int * interval '1 millisecond'"
    " WHERE id = ANY ($1::bigint[]) AND consumer = $2 RETURNING id",
    3,
    0,
    0,
    bind_extend,
    parse_count,
    NULL};

static void bind_reset(pg_req_t *r, const mqproc__store_req_t *q) {
  mqproc__pg_bind_text(r, 0, q->u.q_reset.queue);
  mqproc__pg_bind_text(r, 1, q->u.q_reset.consumer);
}

/* What the server held before its (re)connect is ready again, the queue's listeners told. */
const pg_stmt_t mqproc__pg_stmt_q_reset = {
    "mqproc_q_reset",
    "WITH r AS (UPDATE mqproc_messages SET consumer = NULL, visible_at = now()"
    " WHERE queue = $1 AND consumer = $2 RETURNING id)"
    " SELECT (SELECT count(*) FROM r), pg_notify(" MQPROC__PG_QUEUE_CHANNEL_SQL "($1), $1)",
    2,
    0,
    0,
    bind_reset,
    NULL,
    NULL};
