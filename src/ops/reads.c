/* The fleet reads operators share (the CLI's workers, stats, jobs list and show, and the
 * status page): each a query or two over the indexes of sql/005_fleet.sql (and the same
 * indexes of the SQLite schema), returned as JSON; PostgreSQL's text beside SQLite's
 * where they differ (SQLite keeps times as milliseconds since the epoch). Blocking: a
 * server runs them only on its page reader thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "ops/ops.h"

#define ERRLEN 512
/* SQLite: a time in milliseconds as PostgreSQL's to_char(… 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') */
#define SQ_TS(col) "strftime('%Y-%m-%dT%H:%M:%fZ', " col " / 1000.0, 'unixepoch')"
#define SQ_TS_S(col) "strftime('%Y-%m-%dT%H:%M:%SZ', " col " / 1000.0, 'unixepoch')"

/* ---- workers ------------------------------------------------------------------------ */

json_t *mqproc__ops_workers(mqproc__odb_t *c, const char *processor, int all, char *err) {
  static const char *const ints[] = {"pid",         "concurrency", "in_flight", "jobs_done",
                                     "jobs_failed", "restarts",    NULL};
  static const char *const jsons[] = {"current_jobs", NULL};
  const char *vals[2] = {processor, all ? "t" : "f"};
  mqproc__ores_t *r = mqproc__odb_q(
      c,
      "SELECT w.worker_id, w.processor_name, " MQPROC__WORKER_STATE_OF(
          MQPROC__SEEN_LATELY) " AS state, w.host, w.pid,"
                               " w.concurrency, w.in_flight, w.jobs_done, w.jobs_failed,"
                               " to_char(w.started_at AT TIME ZONE 'UTC',"
                               "   'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS started_at,"
                               " to_char(w.last_seen AT TIME ZONE 'UTC',"
                               "   'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS last_seen,"
                               " w.version, w.restarts,"
                               " array_to_json(w.current_jobs)::text AS current_jobs, w.note"
                               " FROM mqproc_workers w"
                               " WHERE ($1::text IS NULL OR w.processor_name = $1)"
                               "   AND ($2::bool OR w.last_seen > now() - interval '1 hour')"
                               " ORDER BY w.processor_name, w.worker_id",
      "SELECT w.worker_id, w.processor_name, " MQPROC__WORKER_STATE_OF(
          MQPROC__SQ_SEEN_LATELY) " AS state, w.host, w.pid,"
                                  " w.concurrency, w.in_flight, w.jobs_done, w.jobs_failed,"
                                  " " SQ_TS_S(
                                      "w.started_at") " AS started_at,"
                                                      " " SQ_TS(
                                                          "w.last_seen") " AS last_seen,"
                                                                         " w.version, w.restarts, "
                                                                         "w.current_jobs, w.note"
                                                                         " FROM mqproc_workers w"
                                                                         " WHERE (?1 IS NULL OR "
                                                                         "w.processor_name = ?1)"
                                                                         "   AND (?2 = 't' OR "
                                                                         "w.last_seen > mq_now() - "
                                                                         "3600000)"
                                                                         " ORDER BY "
                                                                         "w.processor_name, "
                                                                         "w.worker_id",
      2, vals, err);
  json_t *out = r != NULL ? mqproc__rows_json(r, ints, jsons) : NULL;
  mqproc__ores_free(r);
  return out;
}

/* ---- stats -------------------------------------------------------------------------- */

json_t *mqproc__ops_processors(mqproc__odb_t *c, char *err) {
  mqproc__ores_t *r = mqproc__odb_q(c,
                                    "SELECT DISTINCT processor_name FROM mqproc_workers"
                                    " WHERE last_seen > now() - interval '24 hours' ORDER BY 1",
                                    "SELECT DISTINCT processor_name FROM mqproc_workers"
                                    " WHERE last_seen > mq_now() - 86400000 ORDER BY 1",
                                    0, NULL, err);
  json_t *out = r != NULL ? json_array() : NULL;
  for (int k = 0; r != NULL && k < mqproc__ores_rows(r); k++)
    json_array_append_new(out, json_string(mqproc__ores_get(r, k, 0)));
  mqproc__ores_free(r);
  return out;
}

/* SQLite has no percentile_cont: the same interpolation between the two ranks around
 * (n - 1) * q of the SUCCESS rows' times. */
static json_t *sq_percentile(mqproc__odb_t *c, const char *proc, long long n, double q) {
  double h = (double)(n - 1) * q;
  char lo_s[32], err[ERRLEN];
  const char *vals[2] = {proc, lo_s};
  mqproc__ores_t *r;
  json_t *out = json_null();
  if (n <= 0)
    return out;
  snprintf(lo_s, sizeof(lo_s), "%lld", (long long)h);
  r = mqproc__odb_q(c, NULL,
                    "SELECT exec_time_ms FROM mqproc_jobs WHERE processor_name = ?1"
                    " AND end_time > mq_now() - 3600000 AND state = 'SUCCESS'"
                    " AND exec_time_ms IS NOT NULL ORDER BY exec_time_ms"
                    " LIMIT 2 OFFSET CAST(?2 AS INTEGER)",
                    2, vals, err);
  if (r != NULL && mqproc__ores_rows(r) > 0) {
    double lo = atof(mqproc__ores_get(r, 0, 0));
    double hi = mqproc__ores_rows(r) > 1 ? atof(mqproc__ores_get(r, 1, 0)) : lo;
    json_decref(out);
    out = json_real(lo + (h - (double)(long long)h) * (hi - lo));
  }
  mqproc__ores_free(r);
  return out;
}

json_t *mqproc__ops_stats(mqproc__odb_t *c, mqproc__qclient_t *amqp, const char *proc) {
  const char *vals[1] = {proc};
  json_t *o = json_pack("{s:s}", "processor", proc), *states = json_object();
  long msgs, cons, held;
  char err[ERRLEN];
  mqproc__ores_t *r;
  if (amqp != NULL && mqproc__qclient_depth(amqp, proc, &msgs, &cons, &held) == 0) {
    json_object_set_new(o, "queue_depth", json_integer(msgs));
    json_object_set_new(o, "consumers", cons >= 0 ? json_integer(cons) : json_null());
    if (held >= 0) /* a table queue: the messages servers hold */
      json_object_set_new(o, "queue_held", json_integer(held));
  } else {
    json_object_set_new(o, "queue_depth", json_null());
    json_object_set_new(o, "consumers", json_null());
  }
  /* QUEUED and RUNNING exactly (few rows, by the (processor, state) index); the finished
   * ones over the last 24 hours (by the end_time index): no count over the whole table */
  r = mqproc__odb_q(c,
                    "SELECT state, count(*) FROM mqproc_jobs WHERE processor_name = $1"
                    " AND state IN ('QUEUED', 'RUNNING') GROUP BY state"
                    " UNION ALL SELECT state, count(*) FROM mqproc_jobs WHERE state = 'CACHED'"
                    " AND processor_name = $1 GROUP BY state"
                    " UNION ALL SELECT state || '_24h', count(*) FROM mqproc_jobs"
                    " WHERE processor_name = $1 AND end_time > now() - interval '24 hours'"
                    " GROUP BY state",
                    "SELECT state, count(*) FROM mqproc_jobs WHERE processor_name = ?1"
                    " AND state IN ('QUEUED', 'RUNNING') GROUP BY state"
                    " UNION ALL SELECT state, count(*) FROM mqproc_jobs WHERE state = 'CACHED'"
                    " AND processor_name = ?1 GROUP BY state"
                    " UNION ALL SELECT state || '_24h', count(*) FROM mqproc_jobs"
                    " WHERE processor_name = ?1 AND end_time > mq_now() - 86400000"
                    " GROUP BY state",
                    1, vals, err);
  for (const char *s = "QUEUED\0RUNNING\0CACHED\0SUCCESS_24h\0FAILED_24h\0CANCELLED_24h\0";
       *s != '\0'; s += strlen(s) + 1)
    json_object_set_new(states, s, json_integer(0));
  for (int i = 0; r != NULL && i < mqproc__ores_rows(r); i++)
    json_object_set_new(states, mqproc__ores_get(r, i, 0),
                        json_integer(atoll(mqproc__ores_get(r, i, 1))));
  mqproc__ores_free(r);
  json_object_set_new(o, "jobs", states);
  { /* not requeued (null on a schema before version 8, which cannot tell) */
    long long dead = mqproc__ops_dead_count(c, proc, err);
    json_object_set_new(o, "dead_letters", dead >= 0 ? json_integer(dead) : json_null());
  }
  /* the last column: how many SUCCESS times SQLite's percentiles choose from */
  r = mqproc__odb_q(
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
      "   AND " MQPROC__SEEN_LATELY "), 0"
      " FROM mqproc_jobs WHERE processor_name = $1 AND end_time > now() - interval '60 minutes'",
      "SELECT count(*) FILTER (WHERE end_time > mq_now() - 60000),"
      " count(*) FILTER (WHERE end_time > mq_now() - 900000) / 15.0,"
      " count(*) / 60.0, NULL, NULL,"
      " max(exec_time_ms) FILTER (WHERE state = 'SUCCESS'),"
      " coalesce(CAST(count(*) FILTER (WHERE state = 'FAILED') AS REAL) / nullif(count(*), 0), 0),"
      " (SELECT count(*) FROM mqproc_workers w WHERE w.processor_name = ?1"
      "   AND w.state NOT IN ('stopped', 'dead')"
      "   AND " MQPROC__SQ_SEEN_LATELY "),"
      " count(exec_time_ms) FILTER (WHERE state = 'SUCCESS')"
      " FROM mqproc_jobs WHERE processor_name = ?1 AND end_time > mq_now() - 3600000",
      1, vals, err);
  if (r != NULL && mqproc__ores_rows(r) == 1) {
    int sq = mqproc__odb_sqlite(c);
    long long n = atoll(mqproc__ores_get(r, 0, 8));
    json_object_set_new(o, "finished_per_minute",
                        json_pack("{s:f, s:f, s:f}", "1m", atof(mqproc__ores_get(r, 0, 0)), "15m",
                                  atof(mqproc__ores_get(r, 0, 1)), "60m",
                                  atof(mqproc__ores_get(r, 0, 2))));
    json_object_set_new(
        o, "exec_time_ms_60m",
        json_pack("{s:o, s:o, s:o}", "p50",
                  sq                           ? sq_percentile(c, proc, n, 0.5)
                  : mqproc__ores_null(r, 0, 3) ? json_null()
                                               : json_real(atof(mqproc__ores_get(r, 0, 3))),
                  "p95",
                  sq                           ? sq_percentile(c, proc, n, 0.95)
                  : mqproc__ores_null(r, 0, 4) ? json_null()
                                               : json_real(atof(mqproc__ores_get(r, 0, 4))),
                  "max",
                  mqproc__ores_null(r, 0, 5) ? json_null()
                                             : json_integer(atoll(mqproc__ores_get(r, 0, 5)))));
    json_object_set_new(o, "failure_rate_60m", json_real(atof(mqproc__ores_get(r, 0, 6))));
    json_object_set_new(o, "live_workers", json_integer(atoll(mqproc__ores_get(r, 0, 7))));
  }
  mqproc__ores_free(r);
  return o;
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
/* the columns of a listed job, its times formatted by ts (TS or SQ_TS) */
#define LIST_COLS(ts)                                                                              \
    "SELECT job_id, processor_name, state, attempt, tries, worker_id,"                             \
    " " ts("j.created_time") " AS created_time, " ts("j.queued_at") " AS queued_at,"               \
    " " ts("j.start_time") " AS start_time, " ts("j.end_time") " AS end_time,"                     \
    " exec_time_ms, last_error,"
static const char LIST_SQL[] =
    LIST_COLS(TS)
    " (extract(epoch FROM j.queued_at) * 1000000)::bigint || ':' || job_id AS cursor"
    " FROM mqproc_jobs j"
    " WHERE ($1::text IS NULL OR state = $1) AND ($2::text IS NULL OR processor_name = $2)"
    "   AND ($3::bigint IS NULL OR j.queued_at >= now() - $3::bigint * interval '1 second')"
    "   AND ($4::text IS NULL OR (j.queued_at, j.job_id) <"
    "     (to_timestamp(split_part($4, ':', 1)::bigint / 1000000.0),"
    "      substr($4, strpos($4, ':') + 1)))"
    " ORDER BY j.queued_at DESC, j.job_id DESC LIMIT $5::int";
/* SQLite's times are milliseconds: the cursor's microseconds are queued_at * 1000 */
static const char SQ_LIST_SQL[] =
    LIST_COLS(SQ_TS)
    " (j.queued_at * 1000) || ':' || job_id AS cursor"
    " FROM mqproc_jobs j"
    " WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR processor_name = ?2)"
    "   AND (?3 IS NULL OR j.queued_at >= mq_now() - CAST(?3 AS INTEGER) * 1000)"
    "   AND (?4 IS NULL OR (j.queued_at, j.job_id) <"
    "     (CAST(substr(?4, 1, instr(?4, ':') - 1) AS INTEGER) / 1000,"
    "      substr(?4, instr(?4, ':') + 1)))"
    " ORDER BY j.queued_at DESC, j.job_id DESC LIMIT CAST(?5 AS INTEGER)";

/* Every column but the request's bytes, as PostgreSQL's to_jsonb(j) gives them */
#define SQ_BOOL(col) "json(CASE WHEN " col " THEN 'true' ELSE 'false' END)"
static const char SQ_JOB_SQL[] =
    "SELECT json_object('job_id', job_id, 'processor_name', processor_name, 'state', state,"
    " 'attempt', attempt, 'tries', tries, 'deliveries', deliveries, 'requeues', requeues,"
    " 'worker_id', worker_id, 'lease_until', " SQ_TS("lease_until") ","
    " 'created_time', " SQ_TS("created_time") ", 'queued_at', " SQ_TS("queued_at") ","
    " 'start_time', " SQ_TS("start_time") ", 'end_time', " SQ_TS("end_time") ","
    " 'exec_time_ms', exec_time_ms, 'last_error', last_error, 'log_path', log_path,"
    " 'log_text', log_text,"
    " 'result_published', " SQ_BOOL("result_published") ","
    " 'callback_state', callback_state, 'callback_error', callback_error,"
    " 'updated_at', " SQ_TS("updated_at") ", 'delivery_acked', " SQ_BOOL("delivery_acked") ","
    " 'republish', " SQ_BOOL("republish") ", 'request_format', request_format,"
    " 'dead_letter_pending', " SQ_BOOL("dead_letter_pending") ","
    " 'headers', json(headers), 'priority', priority,"
    " 'cancel_requested', " SQ_BOOL("cancel_requested") ", 'attempt_base', attempt_base),"
    " (SELECT json_group_array(json(x)) FROM (SELECT json_object('try', t.try,"
    "   'attempt', t.attempt, 'worker_id', t.worker_id,"
    "   'started_at', " SQ_TS("t.started_at") ", 'ended_at', " SQ_TS("t.ended_at") ","
    "   'ok', CASE WHEN t.ok IS NULL THEN NULL ELSE " SQ_BOOL("t.ok") " END,"
    "   'exit_code', t.exit_code, 'term_signal', t.term_signal,"
    "   'duration_ms', t.duration_ms, 'error', t.error) AS x"
    "   FROM mqproc_job_tries t WHERE t.job_id = j.job_id ORDER BY t.try)),"
    " j.request, j.request_body,"
    " EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = j.job_id)"
    " FROM mqproc_jobs j WHERE job_id = ?1";
/* clang-format on */

json_t *mqproc__ops_jobs(mqproc__odb_t *c, const mqproc__jobs_filter_t *f, char *err) {
  char since[32], lim[16];
  const char *vals[5];
  mqproc__ores_t *r;
  json_t *out;
  snprintf(since, sizeof(since), "%lld", f->since_s);
  snprintf(lim, sizeof(lim), "%d", f->limit > 0 ? f->limit : 50);
  vals[0] = f->state;
  vals[1] = f->processor;
  vals[2] = f->since_s >= 0 ? since : NULL;
  vals[3] = f->after; /* "<epoch us>:<job id>" */
  vals[4] = lim;
  if ((r = mqproc__odb_q(c, LIST_SQL, SQ_LIST_SQL, 5, vals, err)) == NULL)
    return NULL;
  out = mqproc__rows_json(r, MQPROC__JOB_INTS, NULL);
  mqproc__ores_free(r);
  return out;
}

/* A try that succeeded has no row (sql/007_lean_writes.sql): it is the job row's. Listed
 * like the others, after them. */
static void success_try(const json_t *job, json_t *tries) {
  json_int_t n = json_integer_value(json_object_get(job, "tries"));
  size_t i;
  json_t *t;
  if (strcmp(json_string_value(json_object_get(job, "state")) != NULL
                 ? json_string_value(json_object_get(job, "state"))
                 : "",
             "SUCCESS") != 0 ||
      n <= 0)
    return;
  json_array_foreach(tries, i, t) {
    if (json_integer_value(json_object_get(t, "try")) == n)
      return; /* a row of its own (written before the table's version 7) */
  }
  json_array_append_new(tries,
                        json_pack("{s:I, s:O?, s:O?, s:O?, s:O?, s:b, s:i, s:O?, s:n}", "try", n,
                                  "attempt", json_object_get(job, "attempt"), "worker_id",
                                  json_object_get(job, "worker_id"), "started_at",
                                  json_object_get(job, "start_time"), "ended_at",
                                  json_object_get(job, "end_time"), "ok", 1, "exit_code", 0,
                                  "duration_ms", json_object_get(job, "exec_time_ms"), "error"));
}

json_t *mqproc__ops_job(mqproc__odb_t *c, const char *id, char *err) {
  const char *vals[1] = {id};
  mqproc__ores_t *r =
      mqproc__odb_q(c,
                    "SELECT (to_jsonb(j) - 'request_body' - 'request')::text,"
                    " coalesce((SELECT jsonb_agg(to_jsonb(t) - 'job_id' ORDER BY t.try)"
                    "   FROM mqproc_job_tries t WHERE t.job_id = j.job_id), '[]')::text,"
                    " j.request::text, j.request_body,"
                    " EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = j.job_id)"
                    " FROM mqproc_jobs j WHERE job_id = $1",
                    SQ_JOB_SQL, 1, vals, err);
  json_t *job, *tries, *req = NULL;
  size_t blen = 0;
  unsigned char *body;
  int outbox;
  if (r == NULL)
    return NULL;
  if (mqproc__ores_rows(r) == 0) {
    snprintf(err, ERRLEN, "no job '%.200s'", id);
    mqproc__ores_free(r);
    return NULL;
  }
  job = json_loads(mqproc__ores_get(r, 0, 0), 0, NULL);
  tries = json_loads(mqproc__ores_get(r, 0, 1), 0, NULL);
  /* the request as stored for display (older rows), else decoded from its bytes */
  if (!mqproc__ores_null(r, 0, 2))
    req = json_loads(mqproc__ores_get(r, 0, 2), 0, NULL);
  else if ((body = mqproc__ores_bytes(r, 0, 3, &blen)) != NULL) {
    mqproc__format_t fmt;
    char why[MQPROC_ERR_LEN];
    if (mqproc__codec_parse(body, blen, &req, &fmt, why) != MQPROC_OK)
      req = NULL;
    free(body);
  }
  outbox = !strcmp(mqproc__ores_get(r, 0, 4), "t") || !strcmp(mqproc__ores_get(r, 0, 4), "1");
  mqproc__ores_free(r);
  if (job == NULL) {
    json_decref(tries);
    json_decref(req);
    snprintf(err, ERRLEN, "job row unreadable");
    return NULL;
  }
  json_object_set_new(job, "request", req != NULL ? req : json_null());
  json_object_set_new(job, "outbox_pending", json_boolean(outbox));
  if (tries == NULL)
    tries = json_array();
  success_try(job, tries);
  json_object_set_new(job, "tries", tries);
  /* no password is ever shown: rows stored before requests were masked, errors, headers */
  mqproc__doc_mask(job);
  return job;
}

/* Recent failures, newest first (by the end_time index of each processor's rows). */
json_t *mqproc__ops_failures(mqproc__odb_t *c, int limit, char *err) {
  char lim[16];
  const char *vals[1] = {lim};
  mqproc__ores_t *r;
  json_t *out;
  snprintf(lim, sizeof(lim), "%d", limit);
  r = mqproc__odb_q(c,
                    "SELECT job_id, processor_name, attempt, tries, " TS(
                        "end_time") " AS end_time, last_error FROM mqproc_jobs"
                                    " WHERE state = 'FAILED' ORDER BY queued_at DESC, job_id DESC"
                                    " LIMIT $1::int",
                    "SELECT job_id, processor_name, attempt, tries, " SQ_TS(
                        "end_time") " AS end_time, last_error FROM mqproc_jobs"
                                    " WHERE state = 'FAILED' ORDER BY queued_at DESC, job_id DESC"
                                    " LIMIT CAST(?1 AS INTEGER)",
                    1, vals, err);
  if (r == NULL)
    return NULL;
  out = mqproc__rows_json(r, MQPROC__JOB_INTS, NULL);
  mqproc__ores_free(r);
  return out;
}
