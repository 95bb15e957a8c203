/* `mqproc workers`, `mqproc stats`, `mqproc pause|resume|drain`: the fleet for
 * operators. A wish is stored in mqproc_control (servers started later obey it) and
 * announced on the control channel; the command then waits until every live server of
 * the processor shows the wished state in its workers row and prints who confirmed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"

static const aopt_t OPTS[] = {
    {"database", 0, 1, "MQPROC_DATABASE", "PostgreSQL URL of the job store"},
    {"queue", 0, 1, "MQPROC_QUEUE", "AMQP URL (stats: queue depth and consumers)"},
    {"processor", 0, 1, NULL, "only this processor"},
    {"worker", 0, 1, NULL, "pause/resume/drain: only this server (its worker id)"},
    {"timeout", 0, 1, NULL, "pause/resume/drain: seconds to wait for confirmations (default 5)"},
    {"all", 0, 0, NULL, "workers: also servers stopped or dead for more than an hour"},
    {"json", 0, 0, NULL, "machine-readable output"},
    {NULL, 0, 0, NULL, NULL}};

/* A server refreshes its row every interval_ms (fleet.h); three missed refreshes: dead. */
#define SEEN_LATELY "w.last_seen > now() - 3 * w.interval_ms * interval '1 millisecond'"
/* A server's state as operators see it. */
#define WORKER_STATE                                                                               \
  "CASE WHEN w.state NOT IN ('stopped', 'dead') AND NOT " SEEN_LATELY " THEN 'dead'"               \
  " ELSE w.state END"

int mqproc__cmd_workers(int argc, char **argv) {
  static const char *const ints[] = {"pid",         "concurrency", "in_flight", "jobs_done",
                                     "jobs_failed", "restarts",    NULL};
  static const char *const jsons[] = {"current_jobs", NULL};
  args_t a;
  PGconn *c;
  PGresult *r;
  const char *vals[2];
  int rc;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "workers")) != 0)
    return rc;
  if (mqproc__has(&a, "help")) {
    mqproc__args_usage("Usage: mqproc workers [--processor P] [--all] [--json]\n"
                       "The processing servers and their state (running, paused, draining, "
                       "stopped, dead).\n",
                       OPTS);
    return 0;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  vals[0] = mqproc__arg(&a, "processor");
  vals[1] = mqproc__has(&a, "all") ? "t" : "f";
  r = mqproc__admin_q(
      c,
      "SELECT w.worker_id, w.processor_name, " WORKER_STATE " AS state, w.host, w.pid,"
      " w.concurrency, w.in_flight, w.jobs_done, w.jobs_failed,"
      " to_char(w.started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS started_at,"
      " to_char(w.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS last_seen,"
      " w.version, w.restarts, array_to_json(w.current_jobs)::text AS current_jobs, w.note"
      " FROM mqproc_workers w WHERE ($1::text IS NULL OR w.processor_name = $1)"
      " AND ($2::bool OR w.last_seen > now() - interval '1 hour')"
      " ORDER BY w.processor_name, w.worker_id",
      2, vals);
  if (r != NULL) {
    if (mqproc__has(&a, "json"))
      mqproc__print_json(mqproc__rows_json(r, ints, jsons));
    else
      mqproc__print_table(r, 40);
  }
  PQclear(r);
  PQfinish(c);
  return r != NULL ? 0 : 1;
}

/* ---- stats -------------------------------------------------------------------------- */

static json_t *stats_of(PGconn *c, admin_amqp_t *amqp, const char *proc) {
  const char *vals[1] = {proc};
  json_t *o = json_pack("{s:s}", "processor", proc), *states = json_object();
  long msgs, cons;
  PGresult *r;
  if (amqp != NULL && mqproc__amqp_depth(amqp, proc, &msgs, &cons) == 0) {
    json_object_set_new(o, "queue_depth", json_integer(msgs));
    json_object_set_new(o, "consumers", json_integer(cons));
  } else {
    json_object_set_new(o, "queue_depth", json_null());
    json_object_set_new(o, "consumers", json_null());
  }
  /* QUEUED and RUNNING exactly (few rows, by the (processor, state) index); the finished
   * ones over the last 24 hours (by the end_time index): no count over the whole table */
  r = mqproc__admin_q(c,
                      "SELECT state, count(*) FROM mqproc_jobs WHERE processor_name = $1"
                      " AND state IN ('QUEUED', 'RUNNING') GROUP BY state"
                      " UNION ALL SELECT state || '_24h', count(*) FROM mqproc_jobs"
                      " WHERE processor_name = $1 AND end_time > now() - interval '24 hours'"
                      " GROUP BY state",
                      1, vals);
  for (const char *s = "QUEUED\0RUNNING\0SUCCESS_24h\0FAILED_24h\0CANCELLED_24h\0"; *s != '\0';
       s += strlen(s) + 1)
    json_object_set_new(states, s, json_integer(0));
  for (int i = 0; r != NULL && i < PQntuples(r); i++)
    json_object_set_new(states, PQgetvalue(r, i, 0), json_integer(atoll(PQgetvalue(r, i, 1))));
  PQclear(r);
  json_object_set_new(o, "jobs", states);
  r = mqproc__admin_q(
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
      "   AND " SEEN_LATELY ")"
      " FROM mqproc_jobs WHERE processor_name = $1 AND end_time > now() - interval '60 minutes'",
      1, vals);
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

static void print_stats(json_t *o) {
  json_t *j = json_object_get(o, "jobs"), *f = json_object_get(o, "finished_per_minute"),
         *e = json_object_get(o, "exec_time_ms_60m");
  printf("%s\n", json_string_value(json_object_get(o, "processor")));
  if (json_is_integer(json_object_get(o, "queue_depth")))
    printf("  queue          %lld ready, %lld consumer(s)\n",
           (long long)json_integer_value(json_object_get(o, "queue_depth")),
           (long long)json_integer_value(json_object_get(o, "consumers")));
  else
    printf("  queue          unknown (no --queue, or no such queue)\n");
  printf("  jobs           QUEUED %lld, RUNNING %lld; last 24 h: SUCCESS %lld, FAILED %lld, "
         "CANCELLED %lld\n",
         (long long)json_integer_value(json_object_get(j, "QUEUED")),
         (long long)json_integer_value(json_object_get(j, "RUNNING")),
         (long long)json_integer_value(json_object_get(j, "SUCCESS_24h")),
         (long long)json_integer_value(json_object_get(j, "FAILED_24h")),
         (long long)json_integer_value(json_object_get(j, "CANCELLED_24h")));
  if (f != NULL)
    printf("  finished/min   %.1f (1 m), %.1f (15 m), %.1f (60 m)\n",
           json_real_value(json_object_get(f, "1m")), json_real_value(json_object_get(f, "15m")),
           json_real_value(json_object_get(f, "60m")));
  if (e != NULL && json_is_real(json_object_get(e, "p50")))
    printf("  exec time      p50 %.0f ms, p95 %.0f ms, max %lld ms (60 m)\n",
           json_real_value(json_object_get(e, "p50")), json_real_value(json_object_get(e, "p95")),
           (long long)json_integer_value(json_object_get(e, "max")));
  printf("  failure rate   %.1f %% (60 m)\n",
         100 * json_real_value(json_object_get(o, "failure_rate_60m")));
  printf("  live workers   %lld\n",
         (long long)json_integer_value(json_object_get(o, "live_workers")));
}

int mqproc__cmd_stats(int argc, char **argv) {
  args_t a;
  PGconn *c;
  PGresult *r = NULL;
  admin_amqp_t *amqp = NULL;
  json_t *all = json_array();
  const char *proc;
  size_t i;
  json_t *v;
  int rc;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "stats")) != 0) {
    json_decref(all);
    return rc;
  }
  if (mqproc__has(&a, "help")) {
    json_decref(all);
    mqproc__args_usage("Usage: mqproc stats [--processor P] [--queue URL] [--json]\n"
                       "Per processor: queue depth and consumers (a passive declare), jobs by "
                       "state, jobs finished per minute,\nexecution time, failure rate, live "
                       "workers.\n",
                       OPTS);
    return 0;
  }
  if ((c = mqproc__admin_db(&a)) == NULL) {
    json_decref(all);
    return 1;
  }
  if (mqproc__arg(&a, "queue") != NULL)
    amqp = mqproc__amqp_open(mqproc__arg(&a, "queue"));
  if ((proc = mqproc__arg(&a, "processor")) != NULL) {
    json_array_append_new(all, stats_of(c, amqp, proc));
  } else { /* the processors with a server seen in the last day (no scan of the job table) */
    r = mqproc__admin_q(c,
                        "SELECT DISTINCT processor_name FROM mqproc_workers"
                        " WHERE last_seen > now() - interval '24 hours' ORDER BY 1",
                        0, NULL);
    for (int k = 0; r != NULL && k < PQntuples(r); k++)
      json_array_append_new(all, stats_of(c, amqp, PQgetvalue(r, k, 0)));
    PQclear(r);
  }
  mqproc__amqp_close(amqp);
  PQfinish(c);
  if (mqproc__has(&a, "json")) {
    mqproc__print_json(all);
    return 0;
  }
  json_array_foreach(all, i, v) print_stats(v);
  json_decref(all);
  return 0;
}

/* ---- pause / resume / drain --------------------------------------------------------- */

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mqproc__cmd_control(const char *cmd, int argc, char **argv) {
  const char *wish = !strcmp(cmd, "pause") ? "pause" : !strcmp(cmd, "drain") ? "drain" : NULL;
  const char *want = wish == NULL ? "running" : !strcmp(wish, "pause") ? "paused" : "draining";
  const char *timeout;
  args_t a;
  PGconn *c;
  PGresult *r;
  const char *vals[4];
  long long deadline;
  int rc, pending = 0;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, cmd)) != 0)
    return rc;
  if (mqproc__has(&a, "help") || a.npos != 1) {
    printf("Usage: mqproc %s PROCESSOR [--worker ID] [--timeout S]\n", cmd);
    mqproc__args_usage(!strcmp(cmd, "pause")    ? "Stop taking jobs; running ones finish; the "
                                                  "connection stays. Stored: servers started "
                                                  "later start paused.\n"
                       : !strcmp(cmd, "resume") ? "Take jobs again.\n"
                                                : "Finish the running jobs, then exit 0.\n",
                       OPTS);
    return mqproc__has(&a, "help") ? 0 : 2;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  vals[0] = a.pos[0];
  vals[1] = mqproc__arg(&a, "worker") != NULL ? mqproc__arg(&a, "worker") : "";
  vals[2] = wish;
  vals[3] = mqproc__admin_actor();
  PQclear(PQexec(c, "BEGIN"));
  r = wish != NULL ? mqproc__admin_q(c,
                                     "INSERT INTO mqproc_control (processor_name, worker_id, wish,"
                                     " set_by) VALUES ($1, $2, $3, $4) ON CONFLICT (processor_name,"
                                     " worker_id) DO UPDATE SET wish = EXCLUDED.wish, set_by ="
                                     " EXCLUDED.set_by, set_at = now()",
                                     4, vals)
                   : mqproc__admin_q(c,
                                     "DELETE FROM mqproc_control WHERE processor_name = $1 AND"
                                     " (worker_id = $2 OR $2 = '')",
                                     2, vals);
  if (r == NULL) {
    PQfinish(c);
    return 1;
  }
  PQclear(r);
  PQclear(mqproc__admin_q(c, "SELECT pg_notify('mqproc_control', $1)", 1, vals));
  mqproc__admin_audit(c, cmd, vals[1][0] != '\0' ? vals[1] : vals[0], 1,
                      json_pack("{s:s}", "processor", vals[0]));
  PQclear(PQexec(c, "COMMIT"));
  timeout = mqproc__arg(&a, "timeout");
  deadline = now_ms() + 1000LL * (timeout != NULL ? atoi(timeout) : 5);
  for (;;) { /* the live servers meant, and whether each shows the wished state */
    const char *v[3] = {vals[0], vals[1], want};
    r = mqproc__admin_q(
        c,
        "SELECT w.worker_id, w.state = $3 OR ($3 = 'draining' AND w.state = 'stopped')"
        " FROM mqproc_workers w WHERE w.processor_name = $1 AND ($2 = '' OR w.worker_id = $2)"
        " AND " SEEN_LATELY
        " AND (w.state NOT IN ('stopped', 'dead') OR ($3 = 'draining' AND w.state = 'stopped'))"
        " ORDER BY 1",
        3, v);
    if (r == NULL)
      break;
    pending = 0;
    for (int i = 0; i < PQntuples(r); i++)
      pending += PQgetvalue(r, i, 1)[0] != 't';
    if (pending == 0 || now_ms() >= deadline) {
      if (PQntuples(r) == 0)
        printf("%s %s: no live server now; servers started later obey it\n", cmd, vals[0]);
      for (int i = 0; i < PQntuples(r); i++)
        printf("%s %s\n", PQgetvalue(r, i, 0),
               PQgetvalue(r, i, 1)[0] == 't' ? want : "did not confirm in time");
      PQclear(r);
      break;
    }
    PQclear(r);
    nanosleep(&(struct timespec){0, 50 * 1000000}, NULL); /* poll the rows: 50 ms */
  }
  PQfinish(c);
  return pending == 0 ? 0 : 1;
}
