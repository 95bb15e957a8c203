/* Operator actions (ops.h): the writes of `mqproc jobs retry|cancel` and `mqproc
 * pause|resume|drain`, shared with the status page's buttons so both do exactly the same,
 * each recorded in mqproc_audit; PostgreSQL's text beside SQLite's. SQLite has no
 * notifications: a server reads a wish or a cancel with its next beat. Blocking: never
 * called on a server's loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

#define ERRLEN 512
#define IDS "ARRAY(SELECT jsonb_array_elements_text($1::jsonb))"
#define SQ_IDS "(SELECT value FROM json_each(?1))"

char *mqproc__ops_audit(mqproc__odb_t *c, const char *actor, const char *action, const char *target,
                        long long rows, json_t *detail, char *err) {
  char n[32], *d = detail != NULL ? json_dumps(detail, JSON_COMPACT) : NULL, *line = NULL;
  const char *vals[5] = {actor, action, target, n, d};
  mqproc__ores_t *r;
  snprintf(n, sizeof(n), "%lld", rows);
  r = mqproc__odb_q(c,
                    "INSERT INTO mqproc_audit (actor, action, target, rows_affected, detail)"
                    " VALUES ($1, $2, $3, $4::bigint, $5::jsonb)",
                    "INSERT INTO mqproc_audit (at, actor, action, target, rows_affected, detail)"
                    " VALUES (mq_now(), ?1, ?2, ?3, CAST(?4 AS INTEGER), ?5)",
                    5, vals, err);
  if (r != NULL) {
    size_t len = strlen(actor) + strlen(action) + strlen(target) + (d != NULL ? strlen(d) : 0) + 64;
    if ((line = malloc(len)) != NULL)
      snprintf(line, len, "%s %s %s (%lld row%s)%s%s", actor, action, target, rows,
               rows == 1 ? "" : "s", d != NULL ? " " : "", d != NULL ? d : "");
  }
  mqproc__ores_free(r);
  free(d);
  json_decref(detail);
  return line;
}

/* ---- retry -------------------------------------------------------------------------- */

/* A stored headers object as up to 32 "name=value" texts (values as text); returns how
 * many (each malloc()ed into kv). */
static size_t stored_headers(const char *text, char *kv[32]) {
  json_t *o = json_loads(text, 0, NULL), *v;
  const char *k;
  size_t n = 0;
  json_object_foreach(o, k, v) {
    char *val = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    const char *s = val != NULL ? val : json_string_value(v);
    if (n < 32 && s != NULL && (kv[n] = malloc(strlen(k) + strlen(s) + 2)) != NULL) {
      sprintf(kv[n], "%s=%s", k, s);
      n++;
    }
    free(val);
  }
  json_decref(o);
  return n;
}

/* A job of OCR-D's processing API (it has a row in mqproc_ocrd_jobs): its dependencies and
 * its workspace's page locks decide when it runs, not the retry. (The same text in both
 * dialects.) */
#define OCRD_JOB "EXISTS (SELECT 1 FROM mqproc_ocrd_jobs o WHERE o.job_id = mqproc_jobs.job_id)"

/* Puts one batch of jobs (ids, or the filter) back to QUEUED and publishes their stored
 * requests, each appended to jobs as {job_id, published}; returns how many, or -1. The
 * row keeps its history (tries, attempt: the fencing token only grows); its attempt
 * budget and requeues start afresh. A request not published is published by a server's
 * sweep within a minute (republish). A job of the processing API goes back to CACHED
 * instead ({job_id, published: false, cached: true}): the API's release pass publishes it
 * when the jobs it depends on succeeded and no earlier job holds its pages (issue 38,
 * F15: published at once, a step ran beside the step it depends on). */
static long long retry_batch(mqproc__odb_t *c, mqproc__qclient_t *amqp, const char *exchange,
                             const char *ids, const char *state, const char *proc, json_t *jobs,
                             char *err) {
  const char *vals[3] = {ids, state, proc};
  mqproc__ores_t *r = mqproc__odb_q(
      c,
      "UPDATE mqproc_jobs SET state = CASE WHEN " OCRD_JOB " THEN 'CACHED' ELSE 'QUEUED' END,"
      " attempt_base = attempt, requeues = 0,"
      " end_time = NULL, start_time = NULL, worker_id = NULL, result_published = false,"
      " delivery_acked = false, cancel_requested = false, republish = NOT " OCRD_JOB ","
      " lease_until = CASE WHEN NOT " OCRD_JOB " THEN now() + interval '60 seconds' END,"
      " updated_at = now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE"
      "   ($1::jsonb IS NULL OR job_id = ANY(" IDS "))"
      "   AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR processor_name = $3)"
      "   AND state IN ('FAILED', 'CANCELLED', 'SUCCESS') AND request_body IS NOT NULL"
      "   LIMIT 1000 FOR UPDATE SKIP LOCKED)"
      " RETURNING job_id, processor_name, request_body, request_format, coalesce(priority, -1),"
      "   coalesce(headers, '{}')::text, state",
      "UPDATE mqproc_jobs SET state = CASE WHEN " OCRD_JOB " THEN 'CACHED' ELSE 'QUEUED' END,"
      " attempt_base = attempt, requeues = 0,"
      " end_time = NULL, start_time = NULL, worker_id = NULL, result_published = 0,"
      " delivery_acked = 0, cancel_requested = 0, republish = NOT " OCRD_JOB ","
      " lease_until = CASE WHEN NOT " OCRD_JOB " THEN mq_now() + 60000 END,"
      " updated_at = mq_now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE"
      "   (?1 IS NULL OR job_id IN " SQ_IDS ")"
      "   AND (?2 IS NULL OR state = ?2) AND (?3 IS NULL OR processor_name = ?3)"
      "   AND state IN ('FAILED', 'CANCELLED', 'SUCCESS') AND request_body IS NOT NULL"
      "   LIMIT 1000)"
      " RETURNING job_id, processor_name, request_body, request_format, coalesce(priority, -1),"
      "   coalesce(headers, '{}'), state",
      3, vals, err);
  long long n;
  if (r == NULL)
    return -1;
  n = mqproc__ores_rows(r);
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    size_t len;
    unsigned char *body = mqproc__ores_bytes(r, i, 2, &len);
    const char *ctype =
        !strcmp(mqproc__ores_get(r, i, 3), "yaml") ? "application/yaml" : "application/json";
    const char *id[1] = {mqproc__ores_get(r, i, 0)};
    char *kv[32], e2[ERRLEN], why[MQPROC_ERR_LEN] = "the stored request is empty";
    size_t nh;
    int sent;
    if (!strcmp(mqproc__ores_get(r, i, 6), "CACHED")) {
      json_array_append_new(
          jobs, json_pack("{s:s, s:b, s:b}", "job_id", id[0], "published", 0, "cached", 1));
      free(body);
      continue;
    }
    nh = stored_headers(mqproc__ores_get(r, i, 5), kv);
    /* the request as it came, with its priority and headers (as text) */
    sent = body != NULL && mqproc__qclient_send(amqp, exchange, mqproc__ores_get(r, i, 1), body,
                                                len, ctype, id[0], atoi(mqproc__ores_get(r, i, 4)),
                                                (const char *const *)kv, nh, why) == 0;
    if (sent)
      mqproc__ores_free(mqproc__odb_q(c,
                                      "UPDATE mqproc_jobs SET republish = false, lease_until = NULL"
                                      " WHERE job_id = $1 AND state = 'QUEUED' AND republish",
                                      "UPDATE mqproc_jobs SET republish = 0, lease_until = NULL"
                                      " WHERE job_id = ?1 AND state = 'QUEUED' AND republish",
                                      1, id, e2));
    json_array_append_new(
        jobs, sent ? json_pack("{s:s, s:b}", "job_id", id[0], "published", 1)
                   : json_pack("{s:s, s:b, s:s}", "job_id", id[0], "published", 0, "error", why));
    free(body);
    while (nh > 0)
      free(kv[--nh]);
  }
  mqproc__ores_free(r);
  return n;
}

json_t *mqproc__ops_retry(mqproc__odb_t *c, mqproc__qclient_t *amqp, const mqproc__ops_retry_t *w,
                          char *err) {
  json_t *jobs, *out;
  long long total = 0, n;
  const char *exchange = w->exchange != NULL ? w->exchange : "ocrd-network-default";
  /* NULL ids and state would match every finished job of every processor: a caller that
   * lost its ids (an id json_pack could not carry) must not re-run the fleet's history */
  if (w->ids == NULL && w->state == NULL) {
    snprintf(err, ERRLEN, "refused: a retry needs job ids or a state\n");
    return NULL;
  }
  jobs = json_array();
  do {
    n = retry_batch(c, amqp, exchange, w->ids, w->ids != NULL ? NULL : w->state, w->processor, jobs,
                    err);
    total += n > 0 ? n : 0;
  } while (n == MQPROC__OPS_BATCH); /* retried rows are QUEUED now: the next batch takes others */
  if (n < 0 && total == 0) {
    json_decref(jobs);
    return NULL;
  }
  out = json_pack("{s:o, s:I}", "jobs", jobs, "retried", (json_int_t)total);
  if (n < 0)
    json_object_set_new(out, "error", json_string(err));
  if (total == 0) { /* nothing was done: nothing to record (an unknown id is no action) */
    json_object_set_new(out, "audit", json_null());
    return out;
  }
  {
    char e2[ERRLEN],
        *line = mqproc__ops_audit(
            c, w->actor, "retry",
            w->ids != NULL ? w->ids : (w->processor != NULL ? w->processor : "*"), total,
            json_pack("{s:s?, s:s?, s:s?, s:s?}", "ids", w->ids, "state", w->state, "processor",
                      w->processor, "via", w->via),
            e2);
    json_object_set_new(out, "audit", line != NULL ? json_string(line) : json_null());
    free(line);
  }
  return out;
}

/* ---- cancel ------------------------------------------------------------------------- */

json_t *mqproc__ops_cancel(mqproc__odb_t *c, const char *ids, const char *proc, const char *actor,
                           const char *via, char *err) {
  const char *vals[2] = {ids, proc};
  json_t *jobs, *out = NULL, *notify;
  mqproc__ores_t *r = NULL;
  char *line = NULL;
  if (ids == NULL) { /* a cancel names its jobs; nothing else is a filter */
    snprintf(err, ERRLEN, "refused: a cancel needs job ids\n");
    return NULL;
  }
  jobs = json_array();
  notify = json_array();
  if (mqproc__odb_begin(c, err) != 0) {
    json_decref(jobs);
    json_decref(notify);
    return NULL;
  }
  /* not delivered yet (no row): with a processor, a CANCELLED row its delivery will find */
  r = mqproc__odb_q(c,
                    "INSERT INTO mqproc_jobs (job_id, processor_name, state, end_time,"
                    " last_error) SELECT id, $2, 'CANCELLED', now(), 'cancelled by an "
                    "operator before it was delivered' FROM jsonb_array_elements_text($1::jsonb) id"
                    " WHERE $2::text IS NOT NULL ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
                    "INSERT INTO mqproc_jobs (job_id, processor_name, state, end_time,"
                    " last_error) SELECT value, ?2, 'CANCELLED', mq_now(), 'cancelled by an "
                    "operator before it was delivered' FROM json_each(?1)"
                    " WHERE ?2 IS NOT NULL ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
                    2, vals, err);
  if (r == NULL)
    goto fail;
  for (int i = 0; i < mqproc__ores_rows(r); i++)
    json_array_append_new(jobs, json_pack("{s:s, s:s}", "job_id", mqproc__ores_get(r, i, 0),
                                          "outcome", "CANCELLED (before its delivery)"));
  mqproc__ores_free(r);
  r = mqproc__odb_q(c,
                    "UPDATE mqproc_jobs SET cancel_requested = (state = 'RUNNING'),"
                    " state = CASE WHEN state <> 'RUNNING' THEN 'CANCELLED' ELSE state END,"
                    " end_time = CASE WHEN state <> 'RUNNING' THEN now() ELSE end_time END,"
                    " last_error = CASE WHEN state <> 'RUNNING' THEN 'cancelled by an operator' "
                    "ELSE last_error END,"
                    " updated_at = now()" /* (CACHED: a processing API's job waiting) */
                    " WHERE job_id = ANY(" IDS ") AND state IN ('QUEUED', 'RUNNING', 'CACHED')"
                    " RETURNING job_id, processor_name, cancel_requested",
                    "UPDATE mqproc_jobs SET cancel_requested = (state = 'RUNNING'),"
                    " state = CASE WHEN state <> 'RUNNING' THEN 'CANCELLED' ELSE state END,"
                    " end_time = CASE WHEN state <> 'RUNNING' THEN mq_now() ELSE end_time END,"
                    " last_error = CASE WHEN state <> 'RUNNING' THEN 'cancelled by an operator' "
                    "ELSE last_error END,"
                    " updated_at = mq_now()"
                    " WHERE job_id IN " SQ_IDS " AND state IN ('QUEUED', 'RUNNING', 'CACHED')"
                    " RETURNING job_id, processor_name, cancel_requested",
                    1, vals, err);
  if (r == NULL)
    goto fail;
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    const char *p[1] = {mqproc__ores_get(r, i, 1)};
    int running = mqproc__ores_bool(r, i, 2);
    json_array_append_new(jobs, json_pack("{s:s, s:s}", "job_id", mqproc__ores_get(r, i, 0),
                                          "outcome", running ? "stopping (running)" : "CANCELLED"));
    if (running && mqproc__odb_sqlite(c)) /* after the commit */
      json_array_append_new(notify, json_string(p[0]));
    if (running && !mqproc__odb_sqlite(c)) { /* its holder stops it now */
      mqproc__ores_t *n =
          mqproc__odb_q(c, "SELECT pg_notify('mqproc_control', $1)", NULL, 1, p, err);
      if (n == NULL)
        goto fail;
      mqproc__ores_free(n);
    }
  }
  mqproc__ores_free(r);
  r = NULL;
  if ((line = mqproc__ops_audit(c, actor, "cancel", ids, (long long)json_array_size(jobs),
                                json_pack("{s:s?, s:s?}", "processor", proc, "via", via), err)) ==
      NULL)
    goto fail;
  if (mqproc__odb_commit(c, err) != 0)
    goto fail;
  for (size_t i = 0; i < json_array_size(notify); i++) /* its holder stops it now */
    mqproc__odb_sq_notice(c, json_string_value(json_array_get(notify, i)));
  json_decref(notify);
  out = json_pack("{s:o, s:I, s:s}", "jobs", jobs, "cancelled", (json_int_t)json_array_size(jobs),
                  "audit", line);
  free(line);
  return out;
fail:
  mqproc__ores_free(r);
  mqproc__odb_rollback(c);
  json_decref(jobs);
  json_decref(notify);
  free(line);
  return NULL;
}

/* ---- pause / resume / drain --------------------------------------------------------- */

json_t *mqproc__ops_control(mqproc__odb_t *c, const char *cmd, const char *proc, const char *worker,
                            const char *actor, const char *via, char *err) {
  const char *wish = !strcmp(cmd, "pause") ? "pause" : !strcmp(cmd, "drain") ? "drain" : NULL;
  const char *vals[4] = {proc, worker != NULL ? worker : "", wish, actor};
  mqproc__ores_t *r;
  char *line = NULL;
  json_t *out;
  if (proc == NULL) {
    snprintf(err, ERRLEN, "refused: %s needs a processor\n", cmd);
    return NULL;
  }
  if (mqproc__odb_begin(c, err) != 0)
    return NULL;
  r = wish != NULL ? mqproc__odb_q(c,
                                   "INSERT INTO mqproc_control (processor_name, worker_id, wish,"
                                   " set_by) VALUES ($1, $2, $3, $4) ON CONFLICT (processor_name,"
                                   " worker_id) DO UPDATE SET wish = EXCLUDED.wish, set_by ="
                                   " EXCLUDED.set_by, set_at = now()",
                                   "INSERT INTO mqproc_control (processor_name, worker_id, wish,"
                                   " set_by, set_at) VALUES (?1, ?2, ?3, ?4, mq_now())"
                                   " ON CONFLICT (processor_name, worker_id) DO UPDATE SET"
                                   " wish = excluded.wish, set_by = excluded.set_by,"
                                   " set_at = excluded.set_at",
                                   4, vals, err)
                   : mqproc__odb_q(c,
                                   "DELETE FROM mqproc_control WHERE processor_name = $1 AND"
                                   " (worker_id = $2 OR $2 = '')",
                                   "DELETE FROM mqproc_control WHERE processor_name = ?1 AND"
                                   " (worker_id = ?2 OR ?2 = '')",
                                   2, vals, err);
  if (r == NULL)
    goto fail;
  mqproc__ores_free(r);
  if (!mqproc__odb_sqlite(c)) {
    if ((r = mqproc__odb_q(c, "SELECT pg_notify('mqproc_control', $1)", NULL, 1, vals, err)) ==
        NULL)
      goto fail;
    mqproc__ores_free(r);
  }
  if ((line = mqproc__ops_audit(c, actor, cmd, vals[1][0] != '\0' ? vals[1] : proc, 1,
                                json_pack("{s:s, s:s?}", "processor", proc, "via", via), err)) ==
      NULL)
    goto fail;
  if (mqproc__odb_commit(c, err) != 0)
    goto fail;
  if (mqproc__odb_sqlite(c))
    mqproc__odb_sq_notice(c, proc);
  out = json_pack("{s:s}", "audit", line);
  free(line);
  return out;
fail:
  mqproc__odb_rollback(c);
  free(line);
  return NULL;
}
