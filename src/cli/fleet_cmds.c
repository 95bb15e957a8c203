/* `mqproc workers`, `mqproc stats`, `mqproc pause|resume|drain`: the fleet for
 * operators. A wish is stored in mqproc_control (servers started later obey it) and
 * announced on the control channel; the command then waits until every live server of
 * the processor shows the wished state in its workers row and prints who confirmed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"
#include "base/util.h"

/* Every option of these commands; each takes the rows it names. */
static const mqproc__opt_t OPTS[] = {
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH"},
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL or dir:///SPOOL: queue depths (and consumers on AMQP)"},
    MQPROC__OPTS_SHARED,
    {.name = "processor", .help = "only this processor"},
    {.name = "worker", .help = "only this server (its worker id)"},
    {.name = "timeout", .help = "seconds to wait for the servers' confirmations (default 5)"},
    {.name = "all",
     .type = MQPROC__OPT_BOOL,
     .help = "also servers stopped or dead for more than an hour"},
    {.name = "json", .type = MQPROC__OPT_BOOL, .help = "machine-readable output"},
    {0}};

#define DB_OPTS "database", "database-file", "group-access"
static const char *const WORKERS_OPTS[] = {DB_OPTS, "processor", "all", "json", NULL};
static const char *const STATS_OPTS[] = {DB_OPTS,    "queue",   "queue-file", "tls-ca",
                                         "tls-cert", "tls-key", "tls-verify", "processor",
                                         "json",     NULL};
static const char *const CONTROL_OPTS[] = {DB_OPTS, "worker", "timeout", NULL};

static const char *const WORKER_COLS[] = {"worker_id",   "processor_name", "state",     "host",
                                          "pid",         "concurrency",    "in_flight", "jobs_done",
                                          "jobs_failed", "started_at",     "last_seen", "version",
                                          "restarts",    "current_jobs",   "note",      NULL};

int mqproc__cmd_workers(int argc, char **argv) {
  args_t a;
  mqproc__odb_t *c;
  json_t *rows;
  char err[512];
  int rc;
  if ((rc = mqproc__args_parse_pick(&a, OPTS, WORKERS_OPTS, argc, argv, "workers")) != 0)
    return rc;
  if (mqproc__has(&a, "help")) {
    mqproc__args_usage("Usage: mqproc workers [--processor P] [--all] [--json]\n"
                       "The processing servers and their state (running, paused, draining, "
                       "stopped, dead).\n",
                       a.opts);
    return 0;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  rows = mqproc__ops_workers(c, mqproc__arg(&a, "processor"), mqproc__has(&a, "all"), err);
  mqproc__odb_close(c);
  if (rows == NULL) {
    fprintf(stderr, "mqproc workers: %s", err);
    return 1;
  }
  if (mqproc__has(&a, "json")) {
    mqproc__print_json(rows);
    return 0;
  }
  mqproc__print_rows(rows, WORKER_COLS, 40);
  json_decref(rows);
  return 0;
}

/* ---- stats -------------------------------------------------------------------------- */

static void print_stats(json_t *o) {
  json_t *j = json_object_get(o, "jobs"), *f = json_object_get(o, "finished_per_minute"),
         *e = json_object_get(o, "exec_time_ms_60m");
  printf("%s\n", json_string_value(json_object_get(o, "processor")));
  if (json_is_integer(json_object_get(o, "queue_depth")) &&
      json_is_integer(json_object_get(o, "consumers")))
    printf("  queue          %lld ready, %lld consumer(s)\n",
           (long long)json_integer_value(json_object_get(o, "queue_depth")),
           (long long)json_integer_value(json_object_get(o, "consumers")));
  else if (json_is_integer(json_object_get(o, "queue_held"))) /* a table: what servers hold */
    printf("  queue          %lld ready, %lld held\n",
           (long long)json_integer_value(json_object_get(o, "queue_depth")),
           (long long)json_integer_value(json_object_get(o, "queue_held")));
  else if (json_is_integer(json_object_get(o, "queue_depth"))) /* dir://: no consumer count */
    printf("  queue          %lld ready\n",
           (long long)json_integer_value(json_object_get(o, "queue_depth")));
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
  if (json_integer_value(json_object_get(o, "dead_letters")) > 0)
    printf("  dead letters   %lld not requeued (mqproc dead-letters list --processor %s)\n",
           (long long)json_integer_value(json_object_get(o, "dead_letters")),
           json_string_value(json_object_get(o, "processor")));
  else if (json_is_integer(json_object_get(o, "dead_letters")))
    printf("  dead letters   0\n");
  printf("  live workers   %lld\n",
         (long long)json_integer_value(json_object_get(o, "live_workers")));
}

int mqproc__cmd_stats(int argc, char **argv) {
  args_t a;
  mqproc__odb_t *c;
  mqproc__qclient_t *amqp = NULL;
  json_t *all = json_array();
  const char *proc;
  size_t i;
  json_t *v;
  int rc;
  if ((rc = mqproc__args_parse_pick(&a, OPTS, STATS_OPTS, argc, argv, "stats")) != 0) {
    json_decref(all);
    return rc;
  }
  if (mqproc__has(&a, "help")) {
    json_decref(all);
    mqproc__args_usage("Usage: mqproc stats [--processor P] [--queue URL] [--json]\n"
                       "Per processor: queue depth and consumers (a passive declare), jobs by "
                       "state, jobs finished per minute,\nexecution time, failure rate, dead "
                       "letters not requeued, live workers.\n",
                       a.opts);
    return 0;
  }
  if ((c = mqproc__admin_db(&a)) == NULL) {
    json_decref(all);
    return 1;
  }
  if (mqproc__arg(&a, "queue") != NULL)
    amqp = mqproc__admin_amqp(&a);
  if ((proc = mqproc__arg(&a, "processor")) != NULL) {
    json_array_append_new(all, mqproc__ops_stats(c, amqp, proc));
  } else { /* the processors with a server seen in the last day (no scan of the job table) */
    char err[512];
    json_t *procs = mqproc__ops_processors(c, err);
    if (procs == NULL)
      fprintf(stderr, "mqproc stats: %s", err);
    json_array_foreach(procs, i, v) {
      json_array_append_new(all, mqproc__ops_stats(c, amqp, json_string_value(v)));
    }
    json_decref(procs);
  }
  mqproc__qclient_close(amqp);
  mqproc__odb_close(c);
  if (mqproc__has(&a, "json")) {
    mqproc__print_json(all);
    return 0;
  }
  json_array_foreach(all, i, v) print_stats(v);
  json_decref(all);
  return 0;
}

/* ---- pause / resume / drain --------------------------------------------------------- */

int mqproc__cmd_control(const char *cmd, int argc, char **argv) {
  const char *wish = !strcmp(cmd, "pause") ? "pause" : !strcmp(cmd, "drain") ? "drain" : NULL;
  const char *want = wish == NULL ? "running" : !strcmp(wish, "pause") ? "paused" : "draining";
  const char *timeout;
  args_t a;
  mqproc__odb_t *c;
  mqproc__ores_t *r;
  const char *vals[2];
  long long deadline;
  int rc, pending = 0;
  if ((rc = mqproc__args_parse_pick(&a, OPTS, CONTROL_OPTS, argc, argv, cmd)) != 0)
    return rc;
  if (mqproc__has(&a, "help") || a.npos != 1) {
    char usage[1024];
    snprintf(usage, sizeof(usage), "Usage: mqproc %s PROCESSOR [--worker ID] [--timeout S]\n%s",
             cmd,
             !strcmp(cmd, "pause")
                 ? "Stop taking jobs; running ones finish; the connection stays. The pause is\n"
                   "stored and stands until `mqproc resume PROCESSOR`: servers started later\n"
                   "start paused.\n"
             : !strcmp(cmd, "resume")
                 ? "Take jobs again: ends a pause (and a drain still waiting) of the processor's\n"
                   "servers, or of one with --worker.\n"
                 : "The servers running now finish their running jobs, take no new ones, and\n"
                   "exit 0. Servers started later are not drained: they take jobs.\n");
    mqproc__args_usage(usage, a.opts);
    if (!mqproc__has(&a, "help"))
      fprintf(stderr, "mqproc %s: give one processor\n", cmd);
    return mqproc__has(&a, "help") ? 0 : 2;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  vals[0] = a.pos[0];
  vals[1] = mqproc__arg(&a, "worker") != NULL ? mqproc__arg(&a, "worker") : "";
  {
    char err[512];
    json_t *out = mqproc__ops_control(c, cmd, vals[0], vals[1], mqproc__admin_actor(), NULL, err);
    if (out == NULL) {
      fprintf(stderr, "mqproc %s: %s", cmd, err);
      mqproc__odb_close(c);
      return 1;
    }
    mqproc__print_audit(out);
    json_decref(out);
  }
  timeout = mqproc__arg(&a, "timeout");
  deadline = mqproc__now_ms() + 1000LL * (timeout != NULL ? atoi(timeout) : 5);
  for (;;) { /* the live servers meant, and whether each shows the wished state */
    const char *v[3] = {vals[0], vals[1], want};
    r = mqproc__admin_q(
        c,
        "SELECT w.worker_id, w.state = $3 OR ($3 = 'draining' AND w.state = 'stopped')"
        " FROM mqproc_workers w WHERE w.processor_name = $1 AND ($2 = '' OR w.worker_id = $2)"
        " AND " MQPROC__SEEN_LATELY
        " AND (w.state NOT IN ('stopped', 'dead') OR ($3 = 'draining' AND w.state = 'stopped'))"
        " ORDER BY 1",
        "SELECT w.worker_id, w.state = ?3 OR (?3 = 'draining' AND w.state = 'stopped')"
        " FROM mqproc_workers w WHERE w.processor_name = ?1 AND (?2 = '' OR w.worker_id = ?2)"
        " AND " MQPROC__SQ_SEEN_LATELY
        " AND (w.state NOT IN ('stopped', 'dead') OR (?3 = 'draining' AND w.state = 'stopped'))"
        " ORDER BY 1",
        3, v);
    if (r == NULL)
      break;
    pending = 0;
    for (int i = 0; i < mqproc__ores_rows(r); i++)
      pending += !mqproc__ores_bool(r, i, 1);
    if (pending == 0 || mqproc__now_ms() >= deadline) {
      if (mqproc__ores_rows(r) == 0)
        printf("%s %s: no live server now; servers started later obey it\n", cmd, vals[0]);
      for (int i = 0; i < mqproc__ores_rows(r); i++)
        printf("%s %s\n", mqproc__ores_get(r, i, 0),
               mqproc__ores_bool(r, i, 1) ? want : "did not confirm in time");
      mqproc__ores_free(r);
      break;
    }
    mqproc__ores_free(r);
    nanosleep(&(struct timespec){0, 50 * 1000000}, NULL); /* poll the rows: 50 ms */
  }
  mqproc__odb_close(c);
  return pending == 0 ? 0 : 1;
}
