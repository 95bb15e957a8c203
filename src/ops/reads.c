/* The fleet reads operators share (the CLI's workers, stats, jobs list and show, and the
 * status page): each a query or two over the indexes of sql/005_fleet.sql, returned as
 * JSON. Blocking libpq: a server runs them only on its page reader thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

PGresult *mqproc__ops_q(PGconn *c, const char *sql, int n, const char *const *vals, char *err,
                        size_t errlen) {
  PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
  ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
    snprintf(err, errlen, "query failed: %s", PQresultErrorMessage(r));
    PQclear(r);
    return NULL;
  }
  return r;
}

#define ERRLEN 512

/* ---- workers ------------------------------------------------------------------------ */

json_t *mqproc__ops_workers(PGconn *c, const char *processor, int all, char *err) {
  static const char *const ints[] = {"pid",         "concurrency", "in_flight", "jobs_done",
                                     "jobs_failed", "restarts",    NULL};
  static const char *const jsons[] = {"current_jobs", NULL};
  const char *vals[2] = {processor, all ? "t" : "f"};
  PGresult *r = mqproc__ops_q(
      c,
      "SELECT w.worker_id, w.processor_name, " MQPROC__WORKER_STATE " AS state, w.host, w.pid,"
      " w.concurrency, w.in_flight, w.jobs_done, w.jobs_failed,"
      " to_char(w.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS started_at,"
      " to_char(w.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS last_seen,"
      " w.version, w.restarts, array_to_json(w.current_jobs)::text AS current_jobs, w.note"
      " FROM mqproc_workers w WHERE ($1::text IS NULL OR w.processor_name = $1)"
      "   AND ($2::bool OR w.last_seen > now() - interval '1 hour')"
      " ORDER BY w.processor_name, w.worker_id",
      2, vals, err, ERRLEN);
  json_t *out = r != NULL ? mqproc__rows_json(r, ints, jsons) : NULL;
  PQclear(r);
  return out;
}

/* ---- stats -------------------------------------------------------------------------- */

json_t *mqproc__ops_processors(PGconn *c, char *err) {
  PGresult *r = mqproc__ops_q(c,
                              "SELECT DISTINCT processor_name FROM mqproc_workers"
                              " WHERE last_seen > now() - interval '24 hours' ORDER BY 1",
                              0, NULL, err, ERRLEN);
  json_t *out = r != NULL ? json_array() : NULL;
  for (int k = 0; r != NULL && k < PQntuples(r); k++)
    json_array_append_new(out, json_string(PQgetvalue(r, k, 0)));
  PQclear(r);
  return out;
}

json_t *mqproc__ops_stats(PGconn *c, admin_amqp_t *amqp, const char *proc) {
  const char *vals[1] = {proc};
  json_t *o = json_pack("{s:s}", "processor", proc), *states = json_object();
  long msgs, cons;
  char err[ERRLEN];
  PGresult *r;
  if (amqp != NULL && mqproc__amqp_depth(amqp, proc, &msgs, &cons) == 0) {
    json_object_set_new(o, "queue_depth", json_integer(msgs));
    json_object_set_new(o, "consumers", cons >= 0 ? json_integer(cons) : json_null());
  } else {
    json_object_set_new(o, "queue_depth", json_null());
    json_object_set_new(o, "consumers", json_null());
  }
  /* QUEUED and RUNNING exactly (few rows, by the (processor, state) index); the finished
   * ones over the last 24 hours (by the end_time index): no count over the whole table */
  r = mqproc__ops_q(c,
                    "SELECT state, count(*) FROM mqproc_jobs WHERE processor_name = $1"
                    " AND state IN ('QUEUED', 'RUNNING') GROUP BY state"
                    " UNION ALL SELECT state || '_24h', count(*) FROM mqproc_jobs"
                    " WHERE processor_name = $1 AND end_time > now() - interval '24 hours'"
                    " GROUP BY state",
                    1, vals, err, ERRLEN);
  for (const char *s = "QUEUED\0RUNNING\0SUCCESS_24h\0FAILED_24h\0CANCELLED_24h\0"; *s != '\0';
       s += strlen(s) + 1)
    json_object_set_new(states, s, json_integer(0));
  for (int i = 0; r != NULL && i < PQntuples(r); i++)
    json_object_set_new(states, PQgetvalue(r, i, 0), json_integer(atoll(PQgetvalue(r, i, 1))));
  PQclear(r);
  json_object_set_new(o, "jobs", states);
  r = mqproc__ops_q(
      c,
      "SELECT count(*) FILTER (WHERE end_time > now() - interval '1 minute'),"
      " count(*) FILTER (WHERE end_time > now() - interval '15 minutes') / 15.0,"
      " count(*) / 60.0,"
      " percentile_cont(0.5) WITHIN GROUP (ORDER BY exec_time_ms) FILTER (WHERE state = 'SUCCESS'),"
      " percentile_cont(0.95) WITHIN GROUP (ORDER BY exec_time_ms) FILTER (WHERE state = "
      "'SUCCESS'),"
      " max(exec_time_ms) FILTER (WHERE state = 'SUCCESS'),"
      " coalesce(count(*) FILTER (WHERE state = 'FAILED')::float8 / nullif(count(*), 0), 0),"
      " (SELECT count(*) FROM mqproc_workers w WHERE w.processor_name = $1"
      "   AND w.state NOT IN ('stopped', 'dead')"
      "   AND " MQPROC__SEEN_LATELY ")"
      " FROM mqproc_jobs WHERE processor_name = $1 AND end_time > now() - interval '60 minutes'",
      1, vals, err, ERRLEN);
  if (r != NULL && PQntuples(r) == 1) {
    json_object_set_new(o, "finished_per_minute",
                        json_pack("{s:f, s:f, s:f}", "1m", atof(PQgetvalue(r, 0, 0)), "15m",
                                  atof(PQgetvalue(r, 0, 1)), "60m", atof(PQgetvalue(r, 0, 2))));
    json_object_set_new(
        o, "exec_time_ms_60m",
        json_pack("{s:o, s:o, s:o}", "p50",
                  PQgetisnull(r, 0, 3) ? json_null() : json_real(atof(PQgetvalue(r, 0, 3))), "p95",
                  PQgetisnull(r, 0, 4) ? json_null() : json_real(atof(PQgetvalue(r, 0, 4))), "max",
                  PQgetisnull(r, 0, 5) ? json_null() : json_integer(atoll(PQgetvalue(r, 0, 5)))));
    json_object_set_new(o, "failure_rate_60m", json_real(atof(PQgetvalue(r, 0, 6))));
    json_object_set_new(o, "live_workers", json_integer(atoll(PQgetvalue(r, 0, 7))));
  }
  PQclear(r);
  return o;
}

/* Jobs finished per minute over the last hour: 60 numbers, the oldest minute first. */
json_t *mqproc__ops_per_minute(PGconn *c, const char *proc, char *err) {
  const char *vals[1] = {proc};
  PGresult *r = mqproc__ops_q(c,
                              "SELECT m, count(j.job_id) FROM generate_series(59, 0, -1) AS m"
                              " LEFT JOIN mqproc_jobs j ON j.processor_name = $1"
                              "   AND j.end_time > now() - interval '60 minutes'"
                              "   AND floor(extract(epoch FROM now() - j.end_time) / 60) = m"
                              " GROUP BY m ORDER BY m DESC",
                              1, vals, err, ERRLEN);
  json_t *out = r != NULL ? json_array() : NULL;
  for (int i = 0; r != NULL && i < PQntuples(r); i++)
    json_array_append_new(out, json_integer(atoll(PQgetvalue(r, i, 1))));
  PQclear(r);
  return out;
}

/* ---- jobs --------------------------------------------------------------------------- */

#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

const char *const MQPROC__JOB_INTS[] = {"attempt",     "tries", "exec_time_ms", "requeues",
                                        "deliveries",  "try",   "exit_code",    "term_signal",
                                        "duration_ms", NULL};

/* Newest first by the table's queued_at (qualified: the output column of that name is
 * text, and ordering by it would sort the whole table instead of walking
 * mqproc_jobs_list_idx); the cursor is "<epoch us>:<job id>". */
/* clang-format off */
static const char LIST_SQL[] =
    "SELECT job_id, processor_name, state, attempt, tries, worker_id,"
    " " TS("j.created_time") " AS created_time, " TS("j.queued_at") " AS queued_at,"
    " " TS("j.start_time") " AS start_time, " TS("j.end_time") " AS end_time,"
    " exec_time_ms, last_error,"
    " (extract(epoch FROM j.queued_at) * 1000000)::bigint || ':' || job_id AS cursor"
    " FROM mqproc_jobs j"
    " WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR processor_name = $2)"
    "   AND ($3::bigint IS NULL OR j.queued_at >= now() - $3::bigint * interval '1 second')"
    "   AND ($4::text IS NULL OR (j.queued_at, j.job_id) <"
    "     (to_timestamp(split_part($4, ':', 1)::bigint / 1000000.0),"
    "      substr($4, strpos($4, ':') + 1)))"
    " ORDER BY j.queued_at DESC, j.job_id DESC LIMIT $5::int";
/* clang-format on */

json_t *mqproc__ops_jobs(PGconn *c, const mqproc__jobs_filter_t *f, char *err) {
  char since[32], lim[16];
  const char *vals[5];
  PGresult *r;
  json_t *out;
  snprintf(since, sizeof(since), "%lld", f->since_s);
  snprintf(lim, sizeof(lim), "%d", f->limit > 0 ? f->limit : 50);
  vals[0] = f->state;
  vals[1] = f->processor;
  vals[2] = f->since_s >= 0 ? since : NULL;
  vals[3] = f->after; /* "<epoch us>:<job id>" */
  vals[4] = lim;
  if ((r = mqproc__ops_q(c, LIST_SQL, 5, vals, err, ERRLEN)) == NULL)
    return NULL;
  out = mqproc__rows_json(r, MQPROC__JOB_INTS, NULL);
  PQclear(r);
  return out;
}

json_t *mqproc__ops_job(PGconn *c, const char *id, char *err) {
  const char *vals[1] = {id};
  PGresult *r = mqproc__ops_q(c,
                              "SELECT (to_jsonb(j) - 'request_body' - 'request')::text,"
                              " coalesce((SELECT jsonb_agg(to_jsonb(t) - 'job_id' ORDER BY t.try)"
                              "   FROM mqproc_job_tries t WHERE t.job_id = j.job_id), '[]')::text,"
                              " j.request::text FROM mqproc_jobs j WHERE job_id = $1",
                              1, vals, err, ERRLEN);
  json_t *job, *tries, *req;
  if (r == NULL)
    return NULL;
  if (PQntuples(r) == 0) {
    snprintf(err, ERRLEN, "no job '%.200s'", id);
    PQclear(r);
    return NULL;
  }
  job = json_loads(PQgetvalue(r, 0, 0), 0, NULL);
  tries = json_loads(PQgetvalue(r, 0, 1), 0, NULL);
  req = PQgetisnull(r, 0, 2) ? json_null() : json_loads(PQgetvalue(r, 0, 2), 0, NULL);
  PQclear(r);
  if (job == NULL) {
    json_decref(tries);
    json_decref(req);
    snprintf(err, ERRLEN, "job row unreadable");
    return NULL;
  }
  json_object_set_new(job, "request", req != NULL ? req : json_null());
  json_object_set_new(job, "tries", tries != NULL ? tries : json_array());
  return job;
}

/* Recent failures, newest first (by the end_time index of each processor's rows). */
json_t *mqproc__ops_failures(PGconn *c, int limit, char *err) {
  char lim[16];
  const char *vals[1] = {lim};
  PGresult *r;
  json_t *out;
  snprintf(lim, sizeof(lim), "%d", limit);
  r = mqproc__ops_q(
      c,
      "SELECT job_id, processor_name, attempt, tries, " TS(
          "end_time") " AS end_time, last_error FROM mqproc_jobs"
                      " WHERE state = 'FAILED' ORDER BY queued_at DESC, job_id DESC LIMIT $1::int",
      1, vals, err, ERRLEN);
  if (r == NULL)
    return NULL;
  out = mqproc__rows_json(r, MQPROC__JOB_INTS, NULL);
  PQclear(r);
  return out;
}
