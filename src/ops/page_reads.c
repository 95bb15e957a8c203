/* The status page's own reads (page_reads.h): a processor's last hour for its charts and
 * the dead letters for its section; PostgreSQL's text beside SQLite's (times there are
 * milliseconds since the epoch). Each is one or two queries over an index: the end_time
 * index of the job table, the dead letters' primary key. */
#include "ops/page_reads.h"

#include <stdio.h>
#include <stdlib.h>

#include "codec/codec.h"
#include "ops/ops.h"

#define ERRLEN 512
#define MINUTES 60
/* SQLite: a time in milliseconds as PostgreSQL's to_char(… 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') */
#define SQ_TS(col) "strftime('%Y-%m-%dT%H:%M:%fZ', " col " / 1000.0, 'unixepoch')"
#define TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* ---- the last hour ------------------------------------------------------------------ */

/* One row per minute that has jobs (m: whole minutes before now that they ended), so the
 * statement groups the hour's rows once; the empty minutes are filled here. */
static const char HOUR_SQL[] =
    "SELECT floor(extract(epoch FROM now() - end_time) / 60)::int, count(*),"
    " count(*) FILTER (WHERE state = 'FAILED'),"
    " avg(greatest(0, extract(epoch FROM start_time - coalesce(created_time, queued_at))"
    "   * 1000))"
    " FROM mqproc_jobs WHERE processor_name = $1 AND end_time > now() - interval '60 minutes'"
    " GROUP BY 1";
static const char SQ_HOUR_SQL[] =
    "SELECT (mq_now() - end_time) / 60000, count(*), count(*) FILTER (WHERE state = 'FAILED'),"
    " avg(max(0, start_time - coalesce(created_time, queued_at)))"
    " FROM mqproc_jobs WHERE processor_name = ?1 AND end_time > mq_now() - 3600000"
    " GROUP BY 1";

json_t *mqproc__ops_hour(mqproc__odb_t *c, const char *proc, char *err) {
  const char *vals[1] = {proc};
  mqproc__ores_t *r = mqproc__odb_q(c, HOUR_SQL, SQ_HOUR_SQL, 1, vals, err);
  json_t *fin, *failed, *wait, *out;
  if (r == NULL)
    return NULL;
  fin = json_array();
  failed = json_array();
  wait = json_array();
  for (int i = 0; i < MINUTES; i++) {
    json_array_append_new(fin, json_integer(0));
    json_array_append_new(failed, json_integer(0));
    json_array_append_new(wait, json_null());
  }
  for (int k = 0; k < mqproc__ores_rows(r); k++) {
    long m = atol(mqproc__ores_get(r, k, 0));
    size_t i = (size_t)(MINUTES - 1 - m);
    if (m < 0 || m >= MINUTES) /* an end_time ahead of this clock */
      continue;
    json_array_set_new(fin, i, json_integer(atoll(mqproc__ores_get(r, k, 1))));
    json_array_set_new(failed, i, json_integer(atoll(mqproc__ores_get(r, k, 2))));
    if (!mqproc__ores_null(r, k, 3))
      json_array_set_new(wait, i, json_real(atof(mqproc__ores_get(r, k, 3))));
  }
  mqproc__ores_free(r);
  out = json_pack("{s:o, s:o, s:o}", "finished", fin, "failed", failed, "wait_ms", wait);
  if (out == NULL)
    snprintf(err, ERRLEN, "out of memory");
  return out;
}

/* ---- dead letters ------------------------------------------------------------------- */

/* clang-format off */
/* has_job: the job table has the job (a failed job's message), so the page may link it;
 * a message no server could read has none */
static const char DEAD_SQL[] =
    "SELECT id, processor_name, job_id, reason, worker_id,"
    " " TS("received_at") " AS received_at,"
    " coalesce(body_len, octet_length(body)) AS body_len,"
    " EXISTS (SELECT 1 FROM mqproc_jobs j WHERE j.job_id = d.job_id) AS has_job"
    " FROM mqproc_dead_letters d ORDER BY id DESC LIMIT $1::int";
static const char SQ_DEAD_SQL[] =
    "SELECT id, processor_name, job_id, reason, worker_id,"
    " " SQ_TS("received_at") " AS received_at,"
    " coalesce(body_len, length(body)) AS body_len,"
    " EXISTS (SELECT 1 FROM mqproc_jobs j WHERE j.job_id = d.job_id) AS has_job"
    " FROM mqproc_dead_letters d ORDER BY id DESC LIMIT CAST(?1 AS INTEGER)";
/* clang-format on */
/* counted among the newest MAX + 1 only (by the primary key): never the whole table */
#define COUNT_SQL(lim)                                                                             \
  "SELECT processor_name, count(*) FROM (SELECT processor_name FROM mqproc_dead_letters"           \
  " ORDER BY id DESC LIMIT " lim ") d GROUP BY processor_name ORDER BY 2 DESC, 1"
#define STR2(x) #x
#define STR(x) STR2(x)

/* {"total", "more", "by_processor"} into out. */
static int dead_counts(mqproc__odb_t *c, json_t *out, char *err) {
  mqproc__ores_t *r =
      mqproc__odb_q(c, COUNT_SQL(STR(MQPROC__DEAD_COUNT_MAX) " + 1"), NULL, 0, NULL, err);
  json_t *by;
  long long total = 0;
  if (r == NULL)
    return -1;
  by = json_object();
  for (int k = 0; k < mqproc__ores_rows(r); k++) {
    long long n = atoll(mqproc__ores_get(r, k, 1));
    total += n;
    json_object_set_new(by, mqproc__ores_get(r, k, 0), json_integer(n));
  }
  mqproc__ores_free(r);
  if (total > MQPROC__DEAD_COUNT_MAX) { /* the newest MAX + 1 by processor say little */
    json_decref(by);
    json_object_set_new(out, "total", json_integer(MQPROC__DEAD_COUNT_MAX));
    json_object_set_new(out, "more", json_true());
    return 0;
  }
  json_object_set_new(out, "total", json_integer(total));
  json_object_set_new(out, "more", json_false());
  json_object_set_new(out, "by_processor", by);
  return 0;
}

json_t *mqproc__ops_dead_letters_recent(mqproc__odb_t *c, int limit, char *err) {
  static const char *const ints[] = {"id", "body_len", NULL};
  char lim[16];
  const char *vals[1] = {lim};
  mqproc__ores_t *r;
  json_t *out = json_object(), *rows;
  snprintf(lim, sizeof(lim), "%d", limit > 0 ? limit : 20);
  if (out == NULL || dead_counts(c, out, err) != 0 ||
      (r = mqproc__odb_q(c, DEAD_SQL, SQ_DEAD_SQL, 1, vals, err)) == NULL) {
    json_decref(out);
    return NULL;
  }
  rows = mqproc__rows_json(r, ints, NULL);
  for (int k = 0; k < mqproc__ores_rows(r); k++) /* PostgreSQL's t, SQLite's 1 */
    json_object_set_new(json_array_get(rows, (size_t)k), "has_job",
                        json_boolean(mqproc__ores_bool(r, k, 7)));
  mqproc__ores_free(r);
  mqproc__doc_mask(rows); /* a reason may quote a URL with its password */
  json_object_set_new(out, "rows", rows);
  return out;
}
