/* A job's row from its submission, then its message (submit.h). PostgreSQL's text beside
 * SQLite's: the body goes as hex text into a bytea (libpq's text parameters) and as text
 * cast to a blob in SQLite (the bodies are JSON or YAML text); times in SQLite are
 * integer ms. */
#include "ops/submit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRLEN 512

/* The body as hex digits (PostgreSQL's decode(..., 'hex')); NULL when out of memory. */
static char *hex_of(const void *p, size_t len) {
  static const char digits[] = "0123456789abcdef";
  const unsigned char *b = p;
  char *out = malloc(2 * len + 1);
  if (out == NULL)
    return NULL;
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[b[i] >> 4];
    out[2 * i + 1] = digits[b[i] & 15];
  }
  out[2 * len] = '\0';
  return out;
}

/* The "key=value" headers as the JSON object a row stores (NULL: none). */
static char *headers_json(const mqproc__ops_job_t *j) {
  json_t *o;
  char *text;
  if (j->n_headers == 0)
    return NULL;
  o = json_object();
  for (size_t i = 0; i < j->n_headers; i++) {
    const char *eq = strchr(j->headers[i], '=');
    char key[256];
    if (eq == NULL || (size_t)(eq - j->headers[i]) >= sizeof(key))
      continue;
    snprintf(key, sizeof(key), "%.*s", (int)(eq - j->headers[i]), j->headers[i]);
    json_object_set_new(o, key, json_string(eq + 1));
  }
  text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return text;
}

int mqproc__ops_job_row(mqproc__odb_t *c, const mqproc__ops_job_t *j, const char *state,
                        char *err) {
  char prio[16], created[32], *body, *hdrs = headers_json(j);
  const char *vals[8];
  mqproc__ores_t *r;
  int sq = mqproc__odb_sqlite(c), inserted;
  /* SQLite takes the text itself (a blob by its cast); PostgreSQL its hex digits */
  body = sq ? NULL : hex_of(j->body, j->len);
  if (!sq && body == NULL) {
    free(hdrs);
    snprintf(err, ERRLEN, "out of memory\n");
    return -1;
  }
  snprintf(prio, sizeof(prio), "%d", j->priority);
  snprintf(created, sizeof(created), "%lld", j->created_time);
  vals[0] = j->job_id;
  vals[1] = j->processor;
  vals[2] = state;
  vals[3] = j->format != NULL ? j->format : "json";
  vals[4] = sq ? NULL : body;
  vals[5] = j->created_time >= 0 ? created : NULL;
  vals[6] = j->priority >= 0 ? prio : NULL;
  vals[7] = hdrs;
  if (sq) { /* NUL-terminated text: the body is JSON or YAML */
    body = malloc(j->len + 1);
    if (body != NULL) {
      memcpy(body, j->body, j->len);
      body[j->len] = '\0';
    }
    vals[4] = body;
  }
  r = mqproc__odb_q(
      c,
      "INSERT INTO mqproc_jobs (job_id, processor_name, state, request_format, request_body,"
      " republish, lease_until, created_time, priority, headers)"
      " VALUES ($1, $2, $3, $4, decode($5, 'hex'), $3 = 'QUEUED',"
      " CASE WHEN $3 = 'QUEUED' THEN now() + " MQPROC__OPS_GRACE_PG " END,"
      " to_timestamp($6::bigint), $7::smallint, $8::jsonb)"
      " ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
      "INSERT INTO mqproc_jobs (job_id, processor_name, state, request_format, request_body,"
      " republish, lease_until, created_time, priority, headers, queued_at, updated_at)"
      " VALUES (?1, ?2, ?3, ?4, CAST(?5 AS BLOB), ?3 = 'QUEUED',"
      " CASE WHEN ?3 = 'QUEUED' THEN mq_now() + " MQPROC__OPS_GRACE_SQ " END,"
      " CAST(?6 AS INTEGER) * 1000, CAST(?7 AS INTEGER), ?8, mq_now(), mq_now())"
      " ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
      8, vals, err);
  free(body);
  free(hdrs);
  if (r == NULL)
    return -1;
  inserted = mqproc__ores_rows(r) == 1;
  mqproc__ores_free(r);
  return inserted;
}

int mqproc__ops_job_publish(mqproc__odb_t *c, mqproc__qclient_t *q, const mqproc__ops_job_t *j,
                            char *err) {
  const char *id[1] = {j->job_id};
  const char *ctype =
      j->format != NULL && !strcmp(j->format, "yaml") ? "application/yaml" : "application/json";
  char e2[ERRLEN];
  if (mqproc__qclient_send(q, j->exchange != NULL ? j->exchange : "ocrd-network-default",
                           j->processor, j->body, j->len, ctype, j->job_id, j->priority, j->headers,
                           j->n_headers, err) != 0)
    return -1;
  if (c == NULL) /* no row was written */
    return 0;
  /* confirmed: no sweep sends it again. Only the row as submitted (attempt 0): a server
   * may have claimed it meanwhile, and its own marks are its own. If this write fails a
   * sweep may send a copy after the grace: the claim absorbs it. */
  mqproc__ores_free(mqproc__odb_q(c,
                                  "UPDATE mqproc_jobs SET republish = false, lease_until = NULL,"
                                  " updated_at = now() WHERE job_id = $1 AND state = 'QUEUED'"
                                  " AND republish AND attempt = 0",
                                  "UPDATE mqproc_jobs SET republish = 0, lease_until = NULL,"
                                  " updated_at = mq_now() WHERE job_id = ?1 AND state = 'QUEUED'"
                                  " AND republish AND attempt = 0",
                                  1, id, e2));
  return 0;
}

void mqproc__ops_job_drop(mqproc__odb_t *c, const char *job_id) {
  const char *id[1] = {job_id};
  char err[ERRLEN];
  mqproc__ores_free(mqproc__odb_q(c,
                                  "DELETE FROM mqproc_jobs WHERE job_id = $1 AND state = 'QUEUED'"
                                  " AND republish AND attempt = 0",
                                  "DELETE FROM mqproc_jobs WHERE job_id = ?1 AND state = 'QUEUED'"
                                  " AND republish AND attempt = 0",
                                  1, id, err));
}
