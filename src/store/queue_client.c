/* The table queues as the operators' blocking queue client sees them (broker/client.h's
 * mqproc__qclient_kind_t, store/queue.h): `mqproc submit`, `jobs retry`, `stats`,
 * `results` and the status page's reader publish into and read mqproc_messages on one
 * blocking connection (store/odb.h), with the SQL docs/table-queue.md gives any producer:
 * mqproc_enqueue() on PostgreSQL (its NOTIFY wakes the servers), an INSERT and a line in
 * the notice file on SQLite. Never on a server's loop. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/odb.h"
#include "store/queue.h"
#include "store/sqlite/notice.h"
#include "base/util.h"

#define TIMEOUT_MS 10000

/* odb's errors end with a newline; err is one line. */
static void one_line(char *err, const char *odb_err) {
  snprintf(err, MQPROC_ERR_LEN, "%s", odb_err);
  err[strcspn(err, "\n")] = '\0';
}

/* A client: its connection and the URL to make it again (a database restarted since). */
typedef struct tq {
  char *url;
  mqproc__odb_t *db;
} tq_t;

static void *tq_open(const char *url, char *err) {
  char e[512];
  tq_t *t = calloc(1, sizeof(*t));
  if (t == NULL || (t->url = mqproc__strdup(url)) == NULL) {
    free(t);
    mqproc__err(err, -1, "out of memory");
    return NULL;
  }
  if ((t->db = mqproc__odb_open(url, TIMEOUT_MS, e)) == NULL) {
    one_line(err, e);
    free(t->url);
    free(t);
    return NULL;
  }
  return t;
}

/* A new connection for one found broken (a database restart is seen only when a statement
 * fails on the old one): 0, or -1 with err (the old one kept). */
static int tq_again(tq_t *t, char *err) {
  char e[512];
  mqproc__odb_t *db = mqproc__odb_open(t->url, TIMEOUT_MS, e);
  if (db == NULL) {
    one_line(err, e);
    return -1;
  }
  mqproc__odb_close(t->db);
  t->db = db;
  return 0;
}

/* "k=v" headers as a JSON object's text (NULL: none). */
static char *headers_json(const char *const *headers, size_t n) {
  json_t *o;
  char *out;
  if (n == 0 || (o = json_object()) == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(headers[i], '=');
    char *key = eq != NULL ? mqproc__strndup(headers[i], (size_t)(eq - headers[i])) : NULL;
    if (key != NULL)
      json_object_set_new(o, key, json_string(eq + 1));
    free(key);
  }
  out = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return out;
}

/* bytea's text form of the body (PostgreSQL), NULL when out of memory. */
static char *hex_of(const void *body, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = body;
  char *out = mqproc__malloc(3 + 2 * len);
  if (out == NULL)
    return NULL;
  out[0] = '\\';
  out[1] = 'x';
  for (size_t i = 0; i < len; i++) {
    out[2 + 2 * i] = hex[b[i] >> 4];
    out[3 + 2 * i] = hex[b[i] & 15];
  }
  out[2 + 2 * len] = '\0';
  return out;
}

static int send_once(mqproc__odb_t *db, const char *rk, const void *body, size_t len,
                     const char *content_type, const char *message_id, int priority,
                     const char *const *headers, size_t n_headers, char *err) {
  char prio[16], e[512], *hj = headers_json(headers, n_headers), *text = NULL, *line;
  const char *vals[6];
  mqproc__ores_t *r;
  int sqlite = mqproc__odb_sqlite(db);
  snprintf(prio, sizeof(prio), "%d", priority > 0 ? priority : 0);
  /* SQLite: the body as a text parameter stored as bytes (documents: no NUL in them) */
  if (!sqlite && (text = hex_of(body, len)) == NULL)
    return mqproc__err(err, -1, "out of memory");
  if (sqlite && (text = mqproc__strndup(body, len)) == NULL)
    return mqproc__err(err, -1, "out of memory");
  vals[0] = rk;
  vals[1] = text;
  vals[2] = prio;
  vals[3] = message_id;
  vals[4] = content_type != NULL ? content_type : "application/json";
  vals[5] = hj;
  r = mqproc__odb_q(db, "SELECT mqproc_enqueue($1, $2::bytea, $3::int, $4, $5, $6::jsonb)",
                    "INSERT INTO mqproc_messages (queue, body, priority, message_id,"
                    " content_type, headers) VALUES (?1, CAST(?2 AS BLOB), CAST(?3 AS INTEGER),"
                    " ?4, ?5, ?6)",
                    6, vals, e);
  free(text);
  free(hj);
  if (r == NULL) {
    one_line(err, e);
    return -1;
  }
  mqproc__ores_free(r);
  if (sqlite && (line = mqproc__asprintf("%s%s", MQPROC__SQ_NOTICE_QUEUE, rk)) != NULL) {
    mqproc__odb_sq_notice(db, line); /* the servers look now (else within a second) */
    free(line);
  }
  return 0;
}

/* Publishes; when the connection turns out broken, once more on a new one (a message
 * enqueued just before the connection broke may then be there twice: its message id, the
 * job's, lets a server's claim absorb the copy). */
static int tq_send(void *c, const char *rk, const void *body, size_t len, const char *content_type,
                   const char *message_id, int priority, const char *const *headers,
                   size_t n_headers, char *err) {
  tq_t *t = c;
  char again[MQPROC_ERR_LEN];
  int rc;
  if (!mqproc__odb_ok(t->db) && tq_again(t, err) != 0)
    return -1;
  rc = send_once(t->db, rk, body, len, content_type, message_id, priority, headers, n_headers, err);
  if (rc == 0 || mqproc__odb_ok(t->db))
    return rc;
  if (tq_again(t, again) != 0)
    return -1; /* (err: the first failure) */
  return send_once(t->db, rk, body, len, content_type, message_id, priority, headers, n_headers,
                   err);
}

static int tq_depth(void *c, const char *queue, long *ready, long *held) {
  mqproc__odb_t *db = ((tq_t *)c)->db;
  const char *vals[1] = {queue};
  char e[512];
  mqproc__ores_t *r = mqproc__odb_q(
      db,
      "SELECT (SELECT count(*) FROM mqproc_messages WHERE queue = $1 AND consumer IS NULL),"
      " (SELECT count(*) FROM mqproc_messages WHERE queue = $1 AND consumer IS NOT NULL)",
      "SELECT (SELECT count(*) FROM mqproc_messages WHERE queue = ?1 AND consumer IS NULL),"
      " (SELECT count(*) FROM mqproc_messages WHERE queue = ?1 AND consumer IS NOT NULL)",
      1, vals, e);
  if (r == NULL)
    return mqproc__odb_ok(db) ? -1 : -2;
  *ready = atol(mqproc__ores_get(r, 0, 0));
  *held = atol(mqproc__ores_get(r, 0, 1));
  mqproc__ores_free(r);
  return 0;
}

/* The queue's next ready message in its order (priority, then age): deleted, or with peek
 * read where it is (skip: those read before). */
static int tq_get(void *c, const char *queue, int peek, long skip, mqproc__qmsg_t *out, char *err) {
  mqproc__odb_t *db = ((tq_t *)c)->db;
  char off[24], e[512];
  const char *vals[2] = {queue, off};
  mqproc__ores_t *r;
  snprintf(off, sizeof(off), "%ld", skip > 0 ? skip : 0);
  if (peek)
    r = mqproc__odb_q(db,
                      "SELECT body, coalesce(message_id, ''), content_type, priority"
                      " FROM mqproc_messages WHERE queue = $1 AND consumer IS NULL"
                      " ORDER BY priority DESC, id LIMIT 1 OFFSET $2::bigint",
                      "SELECT body, coalesce(message_id, ''), content_type, priority"
                      " FROM mqproc_messages WHERE queue = ?1 AND consumer IS NULL"
                      " ORDER BY priority DESC, id LIMIT 1 OFFSET CAST(?2 AS INTEGER)",
                      2, vals, e);
  else
    r = mqproc__odb_q(db,
                      "DELETE FROM mqproc_messages WHERE id = (SELECT id FROM mqproc_messages"
                      " WHERE queue = $1 AND consumer IS NULL ORDER BY priority DESC, id LIMIT 1"
                      " FOR UPDATE SKIP LOCKED)"
                      " RETURNING body, coalesce(message_id, ''), content_type, priority",
                      "DELETE FROM mqproc_messages WHERE id = (SELECT id FROM mqproc_messages"
                      " WHERE queue = ?1 AND consumer IS NULL ORDER BY priority DESC, id LIMIT 1)"
                      " RETURNING body, coalesce(message_id, ''), content_type, priority",
                      1, vals, e);
  if (r == NULL) {
    one_line(err, e);
    return -1;
  }
  if (mqproc__ores_rows(r) == 0) {
    mqproc__ores_free(r);
    return 0;
  }
  out->body = (char *)mqproc__ores_bytes(r, 0, 0, &out->len);
  out->message_id = mqproc__strdup(mqproc__ores_get(r, 0, 1));
  out->content_type = mqproc__strdup(mqproc__ores_get(r, 0, 2));
  out->priority = atoi(mqproc__ores_get(r, 0, 3));
  mqproc__ores_free(r);
  if (out->body == NULL || out->message_id == NULL || out->content_type == NULL) {
    mqproc__qmsg_clear(out);
    return mqproc__err(err, -1, "out of memory");
  }
  return 1;
}

static void tq_close(void *c) {
  tq_t *t = c;
  if (t == NULL)
    return;
  mqproc__odb_close(t->db);
  free(t->url);
  free(t);
}

const mqproc__qclient_kind_t mqproc__table_qclient = {
    .is_url = mqproc__queue_is_table_url,
    .open = tq_open,
    .send = tq_send,
    .depth = tq_depth,
    .get = tq_get,
    .close = tq_close,
};
