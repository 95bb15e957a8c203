/* Dead letters for operators (ops.h): the rows of mqproc_dead_letters, every message a
 * server gave up on (undecodable, invalid, for another processor, over the size limit), as
 * `mqproc dead-letters list|show|requeue|purge` and `mqproc stats` show them and the status
 * page can. A requeue publishes the stored body back to its job queue (AMQP, or a file in
 * the dir:// queue's new/ through the queue client) and records that it did in the row
 * (requeued_at, requeued_by) and in mqproc_audit; the row stays, the record of what
 * arrived. PostgreSQL's text beside SQLite's (times there are milliseconds). Blocking:
 * never on a server's loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"
#include "codec/codec.h"
#include "ops/ops.h"

#define ERRLEN 512
#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define SQ_TS(col) "strftime('%Y-%m-%dT%H:%M:%fZ', " col " / 1000.0, 'unixepoch')"
#define IDS "(SELECT jsonb_array_elements_text($1::jsonb)::bigint)"
#define SQ_IDS "(SELECT CAST(value AS INTEGER) FROM json_each(?1))"
#define SHOW_MAX (64 * 1024) /* the bytes of a body `show` prints as text */

static const char *const INTS[] = {"id", "body_len", "body_stored", NULL};

/* ---- reads -------------------------------------------------------------------------- */

/* clang-format off */
/* A dead letter's columns as listed, its times formatted by ts (TS or SQ_TS). */
#define LIST_COLS(ts)                                                                              \
  "SELECT id, processor_name, job_id, reason, worker_id, " ts("received_at") " AS received_at,"    \
  " coalesce(body_len, length(body)) AS body_len, " ts("requeued_at") " AS requeued_at,"           \
  " requeued_by"
/* clang-format on */

json_t *mqproc__ops_dead_letters(mqproc__odb_t *c, const mqproc__dead_filter_t *f, char *err) {
  char after[32], since[32], lim[16];
  const char *vals[5] = {f->processor, NULL, NULL, f->waiting ? "t" : "f", lim};
  mqproc__ores_t *r;
  json_t *out;
  snprintf(after, sizeof(after), "%lld", f->after_id);
  snprintf(since, sizeof(since), "%lld", f->since_s);
  snprintf(lim, sizeof(lim), "%d", f->limit > 0 ? f->limit : 50);
  vals[1] = f->after_id > 0 ? after : NULL;
  vals[2] = f->since_s >= 0 ? since : NULL;
  r = mqproc__odb_q(c,
                    LIST_COLS(TS) " FROM mqproc_dead_letters"
                                  " WHERE ($1::text IS NULL OR processor_name = $1)"
                                  " AND ($2::bigint IS NULL OR id < $2::bigint)"
                                  " AND ($3::bigint IS NULL OR received_at >= now() - $3::bigint"
                                  "   * interval '1 second')"
                                  " AND (NOT $4::bool OR requeued_at IS NULL)"
                                  " ORDER BY id DESC LIMIT $5::int",
                    LIST_COLS(SQ_TS) " FROM mqproc_dead_letters"
                                     " WHERE (?1 IS NULL OR processor_name = ?1)"
                                     " AND (?2 IS NULL OR id < CAST(?2 AS INTEGER))"
                                     " AND (?3 IS NULL OR received_at >= mq_now()"
                                     "   - CAST(?3 AS INTEGER) * 1000)"
                                     " AND (?4 = 'f' OR requeued_at IS NULL)"
                                     " ORDER BY id DESC LIMIT CAST(?5 AS INTEGER)",
                    5, vals, err);
  if (r == NULL)
    return NULL;
  out = mqproc__rows_json(r, INTS, NULL);
  mqproc__ores_free(r);
  return out;
}

long long mqproc__ops_dead_count(mqproc__odb_t *c, const char *proc, char *err) {
  const char *vals[1] = {proc};
  mqproc__ores_t *r = mqproc__odb_q(c,
                                    "SELECT count(*) FROM mqproc_dead_letters"
                                    " WHERE processor_name = $1 AND requeued_at IS NULL",
                                    "SELECT count(*) FROM mqproc_dead_letters"
                                    " WHERE processor_name = ?1 AND requeued_at IS NULL",
                                    1, vals, err);
  long long n = r != NULL && mqproc__ores_rows(r) == 1 ? atoll(mqproc__ores_get(r, 0, 0)) : -1;
  mqproc__ores_free(r);
  return n;
}

/* The body as an operator may read it: its text (the first SHOW_MAX bytes) with URL
 * passwords masked, when it is UTF-8 without NUL (else null), and the message decoded
 * from it, masked (null when it does not decode). */
static void add_body(json_t *o, const unsigned char *body, size_t len) {
  size_t n = len < SHOW_MAX ? len : SHOW_MAX;
  char *text = NULL, *masked = NULL, *copy = NULL, why[MQPROC_ERR_LEN];
  json_t *doc = NULL;
  mqproc__format_t fmt;
  while (n < len && n > 0 && (body[n] & 0xc0) == 0x80) /* not inside a character */
    n--;
  if (memchr(body, '\0', len) == NULL && (text = mqproc__strndup((const char *)body, n)) != NULL &&
      mqproc__utf8_clean(text, &copy) == text && (masked = mqproc__malloc(2 * n + 64)) != NULL)
    mqproc__mask_secret(text, masked, 2 * n + 64);
  json_object_set_new(o, "body", masked != NULL ? json_string(masked) : json_null());
  json_object_set_new(o, "body_shown_cut", json_boolean(masked != NULL && n < len));
  if (mqproc__codec_parse(body, len, &doc, &fmt, why) == MQPROC_OK) {
    mqproc__doc_mask(doc);
    json_object_set_new(o, "message", doc);
    json_object_set_new(o, "format", json_string(mqproc__format_name(fmt)));
  } else {
    json_object_set_new(o, "message", json_null());
    json_object_set_new(o, "decode_error", json_string(why));
  }
  free(copy);
  free(masked);
  free(text);
}

json_t *mqproc__ops_dead_letter(mqproc__odb_t *c, const char *id, char *err) {
  const char *vals[1] = {id};
  /* clang-format off */
  mqproc__ores_t *r = mqproc__odb_q(
      c,
      LIST_COLS(TS) ", length(body) AS body_stored, encode(body_sha256, 'hex') AS body_sha256,"
      " body FROM mqproc_dead_letters WHERE id = $1::bigint",
      LIST_COLS(SQ_TS) ", length(body) AS body_stored, lower(hex(body_sha256)) AS body_sha256,"
      " body FROM mqproc_dead_letters WHERE id = CAST(?1 AS INTEGER)",
      1, vals, err);
  /* clang-format on */
  json_t *rows, *o;
  unsigned char *body;
  size_t len = 0;
  if (r == NULL)
    return NULL;
  if (mqproc__ores_rows(r) == 0) {
    snprintf(err, ERRLEN, "no dead letter %.40s", id);
    mqproc__ores_free(r);
    return NULL;
  }
  body = mqproc__ores_bytes(r, 0, mqproc__ores_cols(r) - 1, &len);
  rows = mqproc__rows_json(r, INTS, NULL);
  mqproc__ores_free(r);
  o = json_incref(json_array_get(rows, 0));
  json_decref(rows);
  json_object_del(o, "body"); /* the bytes' text, as rows_json read it: shown masked below */
  json_object_set_new(o, "body_cut",
                      json_boolean(json_integer_value(json_object_get(o, "body_stored")) <
                                   json_integer_value(json_object_get(o, "body_len"))));
  add_body(o, body != NULL ? body : (const unsigned char *)"", len);
  mqproc__doc_mask(o); /* the reason may quote a URL */
  free(body);
  return o;
}

/* ---- requeue ------------------------------------------------------------------------ */

/* The content type the servers ignore but RabbitMQ carries: what the body looks like. */
static const char *content_type(const unsigned char *body, size_t len) {
  size_t i = 0;
  while (i < len && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
    i++;
  return i < len && (body[i] == '{' || body[i] == '[') ? "application/json" : "application/yaml";
}

/* Publishes the rows of r (id, processor_name, job_id, body), marked requeued already;
 * a row whose publish failed is unmarked again. Appends each to out; returns how many
 * went out. */
static long long publish_rows(mqproc__odb_t *c, mqproc__qclient_t *q, const char *exchange,
                              mqproc__ores_t *r, json_t *out) {
  long long sent_n = 0;
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    const char *id[1] = {mqproc__ores_get(r, i, 0)};
    const char *job = mqproc__ores_null(r, i, 2) ? NULL : mqproc__ores_get(r, i, 2);
    char hdr[64], why[MQPROC_ERR_LEN] = "the stored body is empty", e2[ERRLEN];
    const char *headers[1] = {hdr};
    size_t len = 0;
    unsigned char *body = mqproc__ores_bytes(r, i, 3, &len);
    int sent;
    /* the processor sees where it came from (AMQP headers reach it as they do) */
    snprintf(hdr, sizeof(hdr), "x-mqproc-requeued-dead-letter=%s", id[0]);
    sent = body != NULL && len > 0 &&
           mqproc__qclient_send(q, exchange, mqproc__ores_get(r, i, 1), body, len,
                                content_type(body, len), job, -1, headers, 1, why) == 0;
    if (!sent) /* not published: not requeued (a later requeue may try again) */
      mqproc__ores_free(mqproc__odb_q(c,
                                      "UPDATE mqproc_dead_letters SET requeued_at = NULL,"
                                      " requeued_by = NULL WHERE id = $1::bigint",
                                      "UPDATE mqproc_dead_letters SET requeued_at = NULL,"
                                      " requeued_by = NULL WHERE id = CAST(?1 AS INTEGER)",
                                      1, id, e2));
    json_array_append_new(out, json_pack("{s:I, s:s, s:s?, s:b}", "id", (json_int_t)atoll(id[0]),
                                         "processor_name", mqproc__ores_get(r, i, 1), "job_id", job,
                                         "requeued", sent));
    if (!sent)
      json_object_set_new(json_array_get(out, json_array_size(out) - 1), "error", json_string(why));
    sent_n += sent;
    free(body);
  }
  return sent_n;
}

/* clang-format off */
/* Marks a batch requeued and returns its rows: by id (any of them, requeued before or
 * not), or the filter's that were not (1000 at most); never a body cut short. */
static const char MARK_SQL[] =
    "UPDATE mqproc_dead_letters SET requeued_at = now(), requeued_by = $4"
    " WHERE id IN (SELECT id FROM mqproc_dead_letters WHERE"
    "   ($1::jsonb IS NULL OR id IN " IDS ") AND ($1::jsonb IS NOT NULL OR requeued_at IS NULL)"
    "   AND ($2::text IS NULL OR processor_name = $2)"
    "   AND ($3::bigint IS NULL OR received_at >= now() - $3::bigint * interval '1 second')"
    "   AND length(body) >= coalesce(body_len, 0)"
    "   ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED)"
    " RETURNING id, processor_name, job_id, body";
static const char SQ_MARK_SQL[] =
    "UPDATE mqproc_dead_letters SET requeued_at = mq_now(), requeued_by = ?4"
    " WHERE id IN (SELECT id FROM mqproc_dead_letters WHERE"
    "   (?1 IS NULL OR id IN " SQ_IDS ") AND (?1 IS NOT NULL OR requeued_at IS NULL)"
    "   AND (?2 IS NULL OR processor_name = ?2)"
    "   AND (?3 IS NULL OR received_at >= mq_now() - CAST(?3 AS INTEGER) * 1000)"
    "   AND length(body) >= coalesce(body_len, 0)"
    "   ORDER BY id LIMIT 1000)"
    " RETURNING id, processor_name, job_id, body";
/* clang-format on */

/* Why ids that were not marked were not: no such row, or its body is cut short. */
static void explain_skipped(mqproc__odb_t *c, const char *ids, json_t *out) {
  const char *vals[1] = {ids};
  char err[ERRLEN];
  json_t *asked = json_loads(ids, 0, NULL), *v;
  mqproc__ores_t *r = mqproc__odb_q(
      c, "SELECT id, length(body), body_len FROM mqproc_dead_letters WHERE id IN " IDS,
      "SELECT id, length(body), body_len FROM mqproc_dead_letters WHERE id IN " SQ_IDS, 1, vals,
      err);
  size_t i;
  json_array_foreach(asked, i, v) {
    long long id = json_is_integer(v)  ? json_integer_value(v)
                   : json_is_string(v) ? atoll(json_string_value(v))
                                       : 0;
    const char *why = "no such dead letter";
    char cut[160];
    size_t k;
    json_t *d;
    int done = 0;
    json_array_foreach(out, k, d) done |= json_integer_value(json_object_get(d, "id")) == id;
    for (int row = 0; !done && r != NULL && row < mqproc__ores_rows(r); row++)
      if (atoll(mqproc__ores_get(r, row, 0)) == id) {
        snprintf(cut, sizeof(cut),
                 "its stored body is cut short (%s of %s bytes: over --max-message-size)",
                 mqproc__ores_get(r, row, 1), mqproc__ores_get(r, row, 2));
        why = cut;
      }
    if (!done)
      json_array_append_new(
          out, json_pack("{s:I, s:b, s:s}", "id", (json_int_t)id, "requeued", 0, "error", why));
  }
  mqproc__ores_free(r);
  json_decref(asked);
}

json_t *mqproc__ops_dead_requeue(mqproc__odb_t *c, mqproc__qclient_t *q,
                                 const mqproc__ops_dead_requeue_t *w, char *err) {
  const char *exchange = w->exchange != NULL ? w->exchange : "ocrd-network-default";
  char since[32], *line = NULL, e2[ERRLEN];
  const char *vals[4] = {w->ids, w->processor, NULL, w->actor};
  json_t *rows = json_array(), *out;
  long long total = 0, n;
  mqproc__ores_t *r;
  /* every dead letter of every processor is no filter an operator means */
  if (w->ids == NULL && w->processor == NULL) {
    json_decref(rows);
    snprintf(err, ERRLEN, "refused: a requeue needs dead-letter ids or a processor\n");
    return NULL;
  }
  snprintf(since, sizeof(since), "%lld", w->since_s);
  vals[2] = w->since_s >= 0 ? since : NULL;
  do { /* marked rows are left out of the filter's next batch; ids are one batch */
    if ((r = mqproc__odb_q(c, MARK_SQL, SQ_MARK_SQL, 4, vals, err)) == NULL)
      break;
    n = mqproc__ores_rows(r);
    total += publish_rows(c, q, exchange, r, rows);
    mqproc__ores_free(r);
  } while (w->ids == NULL && n == MQPROC__OPS_BATCH);
  if (r == NULL && json_array_size(rows) == 0) {
    json_decref(rows);
    return NULL;
  }
  if (w->ids != NULL)
    explain_skipped(c, w->ids, rows);
  out = json_pack("{s:o, s:I}", "dead_letters", rows, "requeued", (json_int_t)total);
  if (r == NULL)
    json_object_set_new(out, "error", json_string(err));
  if (total > 0) /* nothing requeued: nothing to record */
    line = mqproc__ops_audit(
        c, w->actor, "requeue-dead-letters", w->ids != NULL ? w->ids : w->processor, total,
        json_pack("{s:s?, s:s?, s:s?}", "ids", w->ids, "processor", w->processor, "via", w->via),
        e2);
  json_object_set_new(out, "audit", line != NULL ? json_string(line) : json_null());
  free(line);
  return out;
}

long long mqproc__ops_dead_requeue_count(mqproc__odb_t *c, const char *proc, long long since_s,
                                         char *err) {
  char since[32];
  const char *vals[2] = {proc, NULL};
  mqproc__ores_t *r;
  long long n;
  snprintf(since, sizeof(since), "%lld", since_s);
  vals[1] = since_s >= 0 ? since : NULL;
  r = mqproc__odb_q(c,
                    "SELECT count(*) FROM mqproc_dead_letters WHERE requeued_at IS NULL"
                    " AND ($1::text IS NULL OR processor_name = $1)"
                    " AND ($2::bigint IS NULL OR received_at >= now() - $2::bigint"
                    "   * interval '1 second') AND length(body) >= coalesce(body_len, 0)",
                    "SELECT count(*) FROM mqproc_dead_letters WHERE requeued_at IS NULL"
                    " AND (?1 IS NULL OR processor_name = ?1)"
                    " AND (?2 IS NULL OR received_at >= mq_now() - CAST(?2 AS INTEGER) * 1000)"
                    " AND length(body) >= coalesce(body_len, 0)",
                    2, vals, err);
  n = r != NULL ? atoll(mqproc__ores_get(r, 0, 0)) : -1;
  mqproc__ores_free(r);
  return n;
}

/* ---- purge -------------------------------------------------------------------------- */

#define PURGE_WHERE                                                                                \
  " received_at < now() - $1::bigint * interval '1 second'"                                        \
  " AND ($2::text IS NULL OR processor_name = $2)"
#define SQ_PURGE_WHERE                                                                             \
  " received_at < mq_now() - CAST(?1 AS INTEGER) * 1000 AND (?2 IS NULL OR processor_name = ?2)"

json_t *mqproc__ops_dead_purge(mqproc__odb_t *c, long long older_s, const char *proc, int dry_run,
                               const char *actor, const char *via, char *err) {
  char s[32], *line, e2[ERRLEN];
  const char *vals[2] = {s, proc};
  long long total = 0, n;
  mqproc__ores_t *r;
  json_t *out;
  snprintf(s, sizeof(s), "%lld", older_s);
  if (dry_run) {
    if ((r = mqproc__odb_q(c, "SELECT count(*) FROM mqproc_dead_letters WHERE" PURGE_WHERE,
                           "SELECT count(*) FROM mqproc_dead_letters WHERE" SQ_PURGE_WHERE, 2, vals,
                           err)) == NULL)
      return NULL;
    out = json_pack("{s:I}", "would_purge", (json_int_t)atoll(mqproc__ores_get(r, 0, 0)));
    mqproc__ores_free(r);
    return out;
  }
  do { /* 1000 rows per transaction: a big purge never holds the table long */
    r = mqproc__odb_q(c,
                      "DELETE FROM mqproc_dead_letters WHERE id IN (SELECT id FROM"
                      " mqproc_dead_letters WHERE" PURGE_WHERE
                      " LIMIT 1000 FOR UPDATE SKIP LOCKED)",
                      "DELETE FROM mqproc_dead_letters WHERE id IN (SELECT id FROM"
                      " mqproc_dead_letters WHERE" SQ_PURGE_WHERE " LIMIT 1000)",
                      2, vals, err);
    if (r == NULL)
      break;
    n = mqproc__ores_changed(r);
    total += n;
    mqproc__ores_free(r);
  } while (n == MQPROC__OPS_BATCH);
  if (r == NULL && total == 0)
    return NULL;
  out = json_pack("{s:I}", "purged", (json_int_t)total);
  if (r == NULL)
    json_object_set_new(out, "error", json_string(err));
  line = total > 0
             ? mqproc__ops_audit(
                   c, actor, "purge-dead-letters", proc != NULL ? proc : "*", total,
                   json_pack("{s:I, s:s?}", "older_than_s", (json_int_t)older_s, "via", via), e2)
             : NULL;
  json_object_set_new(out, "audit", line != NULL ? json_string(line) : json_null());
  free(line);
  return out;
}
