/* Operator actions (ops.h): the writes of `mqproc jobs retry|cancel` and `mqproc
 * pause|resume|drain`, shared with the status page's buttons so both do exactly the same,
 * each recorded in mqproc_audit. Blocking: never called on a server's loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

#define ERRLEN 512
#define IDS "ARRAY(SELECT jsonb_array_elements_text($1::jsonb))"

char *mqproc__ops_audit(PGconn *c, const char *actor, const char *action, const char *target,
                        long long rows, json_t *detail, char *err) {
  char n[32], *d = detail != NULL ? json_dumps(detail, JSON_COMPACT) : NULL, *line = NULL;
  const char *vals[5] = {actor, action, target, n, d};
  PGresult *r;
  snprintf(n, sizeof(n), "%lld", rows);
  r = mqproc__ops_q(c,
                    "INSERT INTO mqproc_audit (actor, action, target, rows_affected, detail)"
                    " VALUES ($1, $2, $3, $4::bigint, $5::jsonb)",
                    5, vals, err, ERRLEN);
  if (r != NULL) {
    size_t len = strlen(actor) + strlen(action) + strlen(target) + (d != NULL ? strlen(d) : 0) + 64;
    if ((line = malloc(len)) != NULL)
      snprintf(line, len, "%s %s %s (%lld row%s)%s%s", actor, action, target, rows,
               rows == 1 ? "" : "s", d != NULL ? " " : "", d != NULL ? d : "");
  }
  PQclear(r);
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

/* Puts one batch of jobs (ids, or the filter) back to QUEUED and publishes their stored
 * requests, each appended to jobs as {job_id, published}; returns how many, or -1. The
 * row keeps its history (tries, attempt: the fencing token only grows); its attempt
 * budget and requeues start afresh. A request not published is published by a server's
 * sweep within a minute (republish). */
static long long retry_batch(PGconn *c, admin_amqp_t *amqp, const char *exchange, const char *ids,
                             const char *state, const char *proc, json_t *jobs, char *err) {
  const char *vals[3] = {ids, state, proc};
  PGresult *r = mqproc__ops_q(
      c,
      "UPDATE mqproc_jobs SET state = 'QUEUED', attempt_base = attempt, requeues = 0,"
      " end_time = NULL, start_time = NULL, worker_id = NULL, result_published = false,"
      " delivery_acked = false, cancel_requested = false, republish = true,"
      " lease_until = now() + interval '60 seconds', updated_at = now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE"
      "   ($1::jsonb IS NULL OR job_id = ANY(" IDS "))"
      "   AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR processor_name = $3)"
      "   AND state IN ('FAILED', 'CANCELLED', 'SUCCESS') AND request_body IS NOT NULL"
      "   LIMIT 1000 FOR UPDATE SKIP LOCKED)"
      " RETURNING job_id, processor_name, request_body, request_format, coalesce(priority, -1),"
      "   coalesce(headers, '{}')::text",
      3, vals, err, ERRLEN);
  long long n;
  if (r == NULL)
    return -1;
  n = PQntuples(r);
  for (int i = 0; i < PQntuples(r); i++) {
    size_t len;
    unsigned char *body = PQunescapeBytea((const unsigned char *)PQgetvalue(r, i, 2), &len);
    const char *ctype =
        !strcmp(PQgetvalue(r, i, 3), "yaml") ? "application/yaml" : "application/json";
    const char *id[1] = {PQgetvalue(r, i, 0)};
    char *kv[32], e2[ERRLEN];
    size_t nh = stored_headers(PQgetvalue(r, i, 5), kv);
    /* the request as it came, with its priority and headers (as text) */
    int sent = body != NULL &&
               mqproc__amqp_send(amqp, exchange, PQgetvalue(r, i, 1), body, len, ctype, id[0],
                                 atoi(PQgetvalue(r, i, 4)), (const char *const *)kv, nh) == 0;
    if (sent)
      PQclear(mqproc__ops_q(c,
                            "UPDATE mqproc_jobs SET republish = false, lease_until = NULL"
                            " WHERE job_id = $1 AND state = 'QUEUED' AND republish",
                            1, id, e2, sizeof(e2)));
    json_array_append_new(jobs, json_pack("{s:s, s:b}", "job_id", id[0], "published", sent));
    PQfreemem(body);
    while (nh > 0)
      free(kv[--nh]);
  }
  PQclear(r);
  return n;
}

json_t *mqproc__ops_retry(PGconn *c, admin_amqp_t *amqp, const mqproc__ops_retry_t *w, char *err) {
  json_t *jobs = json_array(), *out;
  long long total = 0, n;
  const char *exchange = w->exchange != NULL ? w->exchange : "ocrd-network-default";
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

json_t *mqproc__ops_cancel(PGconn *c, const char *ids, const char *proc, const char *actor,
                           const char *via, char *err) {
  const char *vals[2] = {ids, proc};
  json_t *jobs = json_array(), *out = NULL;
  PGresult *r;
  char *line = NULL;
  PQclear(PQexec(c, "BEGIN"));
  /* not delivered yet (no row): with a processor, a CANCELLED row its delivery will find */
  r = mqproc__ops_q(c,
                    "INSERT INTO mqproc_jobs (job_id, processor_name, state, end_time,"
                    " last_error) SELECT id, $2, 'CANCELLED', now(), 'cancelled by an "
                    "operator before it was delivered' FROM jsonb_array_elements_text($1::jsonb) id"
                    " WHERE $2::text IS NOT NULL ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
                    2, vals, err, ERRLEN);
  for (int i = 0; r != NULL && i < PQntuples(r); i++)
    json_array_append_new(jobs, json_pack("{s:s, s:s}", "job_id", PQgetvalue(r, i, 0), "outcome",
                                          "CANCELLED (before its delivery)"));
  if (r == NULL)
    goto fail;
  PQclear(r);
  r = mqproc__ops_q(c,
                    "UPDATE mqproc_jobs SET cancel_requested = (state = 'RUNNING'),"
                    " state = CASE WHEN state = 'QUEUED' THEN 'CANCELLED' ELSE state END,"
                    " end_time = CASE WHEN state = 'QUEUED' THEN now() ELSE end_time END,"
                    " last_error = CASE WHEN state = 'QUEUED' THEN 'cancelled by an operator' "
                    "ELSE last_error END,"
                    " updated_at = now()"
                    " WHERE job_id = ANY(" IDS ") AND state IN ('QUEUED', 'RUNNING')"
                    " RETURNING job_id, processor_name, cancel_requested",
                    1, vals, err, ERRLEN);
  if (r == NULL)
    goto fail;
  for (int i = 0; i < PQntuples(r); i++) {
    const char *p[1] = {PQgetvalue(r, i, 1)};
    int running = PQgetvalue(r, i, 2)[0] == 't';
    json_array_append_new(jobs, json_pack("{s:s, s:s}", "job_id", PQgetvalue(r, i, 0), "outcome",
                                          running ? "stopping (running)" : "CANCELLED"));
    if (running) { /* its holder stops it now */
      PGresult *n = mqproc__ops_q(c, "SELECT pg_notify('mqproc_control', $1)", 1, p, err, ERRLEN);
      if (n == NULL)
        goto fail;
      PQclear(n);
    }
  }
  PQclear(r);
  r = NULL;
  if ((line = mqproc__ops_audit(c, actor, "cancel", ids, (long long)json_array_size(jobs),
                                json_pack("{s:s?, s:s?}", "processor", proc, "via", via), err)) ==
      NULL)
    goto fail;
  if ((r = mqproc__ops_q(c, "COMMIT", 0, NULL, err, ERRLEN)) == NULL)
    goto fail;
  PQclear(r);
  out = json_pack("{s:o, s:I, s:s}", "jobs", jobs, "cancelled", (json_int_t)json_array_size(jobs),
                  "audit", line);
  free(line);
  return out;
fail:
  PQclear(r);
  PQclear(PQexec(c, "ROLLBACK"));
  json_decref(jobs);
  free(line);
  return NULL;
}

/* ---- pause / resume / drain --------------------------------------------------------- */

json_t *mqproc__ops_control(PGconn *c, const char *cmd, const char *proc, const char *worker,
                            const char *actor, const char *via, char *err) {
  const char *wish = !strcmp(cmd, "pause") ? "pause" : !strcmp(cmd, "drain") ? "drain" : NULL;
  const char *vals[4] = {proc, worker != NULL ? worker : "", wish, actor};
  PGresult *r;
  char *line = NULL;
  json_t *out;
  PQclear(PQexec(c, "BEGIN"));
  r = wish != NULL ? mqproc__ops_q(c,
                                   "INSERT INTO mqproc_control (processor_name, worker_id, wish,"
                                   " set_by) VALUES ($1, $2, $3, $4) ON CONFLICT (processor_name,"
                                   " worker_id) DO UPDATE SET wish = EXCLUDED.wish, set_by ="
                                   " EXCLUDED.set_by, set_at = now()",
                                   4, vals, err, ERRLEN)
                   : mqproc__ops_q(c,
                                   "DELETE FROM mqproc_control WHERE processor_name = $1 AND"
                                   " (worker_id = $2 OR $2 = '')",
                                   2, vals, err, ERRLEN);
  if (r == NULL)
    goto fail;
  PQclear(r);
  if ((r = mqproc__ops_q(c, "SELECT pg_notify('mqproc_control', $1)", 1, vals, err, ERRLEN)) ==
      NULL)
    goto fail;
  PQclear(r);
  if ((line = mqproc__ops_audit(c, actor, cmd, vals[1][0] != '\0' ? vals[1] : proc, 1,
                                json_pack("{s:s, s:s?}", "processor", proc, "via", via), err)) ==
      NULL)
    goto fail;
  if ((r = mqproc__ops_q(c, "COMMIT", 0, NULL, err, ERRLEN)) == NULL)
    goto fail;
  PQclear(r);
  out = json_pack("{s:s}", "audit", line);
  free(line);
  return out;
fail:
  PQclear(PQexec(c, "ROLLBACK"));
  free(line);
  return NULL;
}
