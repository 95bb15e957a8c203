/* `mqproc jobs list|show|log|retry|cancel|purge`: the job table for operators. Reads use
 * the indexes of sql/005_fleet.sql (newest first by queued_at, keyset pages); bulk
 * actions print how many rows they would touch and act only with --yes, in batches of
 * at most 1000 rows per transaction; every action lands in mqproc_audit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"

#define BATCH 1000

static const aopt_t OPTS[] = {
    {"database", 0, 1, "MQPROC_DATABASE", "PostgreSQL URL of the job store"},
    {"queue", 0, 1, "MQPROC_QUEUE", "AMQP URL (retry publishes the stored request)"},
    {"exchange", 0, 1, "MQPROC_EXCHANGE",
     "exchange jobs are published to (default ocrd-network-default)"},
    {"state", 0, 1, NULL, "only jobs in this state (QUEUED RUNNING SUCCESS FAILED CANCELLED)"},
    {"processor", 0, 1, NULL, "only jobs of this processor"},
    {"since", 0, 1, NULL, "list: only jobs queued within this duration (30s, 15m, 2h, 7d)"},
    {"limit", 0, 1, NULL, "list: at most this many rows (default 50)"},
    {"after", 0, 1, NULL, "list: the page after this cursor (printed with the previous page)"},
    {"older-than", 0, 1, NULL, "purge: finished longer ago than this duration (required)"},
    {"yes", 'y', 0, NULL, "bulk forms: act (without it they only count)"},
    {"json", 0, 0, NULL, "machine-readable output"},
    {NULL, 0, 0, NULL, NULL}};

static const char USAGE[] =
    "Usage: mqproc jobs list [--state S] [--processor P] [--since D] [--limit N] [--after C]\n"
    "       mqproc jobs show ID      every column and every try\n"
    "       mqproc jobs log ID       the job's log file\n"
    "       mqproc jobs retry ID... | retry --state FAILED [--processor P] [--yes]\n"
    "       mqproc jobs cancel ID... [--processor P]   (P: cancel jobs not delivered yet)\n"
    "       mqproc jobs purge --older-than 30d [--state S] [--processor P] [--yes]\n";

static const char *const LIST_COLS[] = {
    "job_id",       "processor_name", "state",     "attempt",    "tries",
    "worker_id",    "created_time",   "queued_at", "start_time", "end_time",
    "exec_time_ms", "last_error",     "cursor",    NULL};

static int list(PGconn *c, const args_t *a) {
  const char *limit = mqproc__arg(a, "limit");
  mqproc__jobs_filter_t f = {.state = mqproc__arg(a, "state"),
                             .processor = mqproc__arg(a, "processor"),
                             .after = mqproc__arg(a, "after"),
                             .since_s = -1,
                             .limit = limit != NULL && atoi(limit) > 0 ? atoi(limit) : 50};
  char err[512];
  json_t *rows;
  if (mqproc__arg(a, "since") != NULL &&
      (f.since_s = mqproc__parse_duration(mqproc__arg(a, "since"))) < 0) {
    fprintf(stderr, "mqproc jobs list: --since: expected a duration like 15m, 2h, 7d\n");
    return 2;
  }
  if ((rows = mqproc__ops_jobs(c, &f, err)) == NULL) {
    fprintf(stderr, "mqproc jobs list: %s", err);
    return 1;
  }
  if ((int)json_array_size(rows) == f.limit)
    fprintf(stderr, "more: --after '%s'\n",
            json_string_value(
                json_object_get(json_array_get(rows, json_array_size(rows) - 1), "cursor")));
  if (mqproc__has(a, "json")) {
    mqproc__print_json(rows);
  } else {
    mqproc__print_rows(rows, LIST_COLS, 40);
    json_decref(rows);
  }
  return 0;
}

static int show(PGconn *c, const args_t *a, const char *id) {
  char err[512];
  json_t *job = mqproc__ops_job(c, id, err), *v;
  const char *key;
  if (job == NULL) {
    fprintf(stderr, "mqproc jobs show: %s\n", err);
    return 1;
  }
  if (mqproc__has(a, "json")) {
    mqproc__print_json(job);
    return 0;
  }
  json_object_foreach(job, key, v) {
    char *s;
    if (!strcmp(key, "tries"))
      continue;
    s = json_is_string(v) ? strdup(json_string_value(v))
                          : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    printf("%-20s %s\n", key, s != NULL ? s : "");
    free(s);
  }
  printf("tries:\n");
  for (size_t i = 0; i < json_array_size(json_object_get(job, "tries")); i++) {
    json_t *t = json_array_get(json_object_get(job, "tries"), i);
    char *s = json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER);
    printf("  %s\n", s != NULL ? s : "");
    free(s);
  }
  json_decref(job);
  return 0;
}

static int show_log(PGconn *c, const char *id) {
  const char *vals[1] = {id};
  PGresult *r = mqproc__admin_q(c, "SELECT log_path FROM mqproc_jobs WHERE job_id = $1", 1, vals);
  FILE *f;
  char buf[65536];
  size_t n;
  if (r == NULL)
    return 1;
  if (PQntuples(r) == 0 || PQgetisnull(r, 0, 0)) {
    fprintf(stderr, "mqproc jobs log: %s\n", PQntuples(r) == 0 ? "no such job" : "no log recorded");
    PQclear(r);
    return 1;
  }
  f = fopen(PQgetvalue(r, 0, 0), "r");
  if (f == NULL) {
    fprintf(stderr, "mqproc jobs log: cannot read %s (it is on the host that ran the job)\n",
            PQgetvalue(r, 0, 0));
    PQclear(r);
    return 1;
  }
  PQclear(r);
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
    fwrite(buf, 1, n, stdout);
  fclose(f);
  return 0;
}

/* The positional ids from index 1 on as a JSON array (the statements read it with IDS);
 * NULL after printing why (an id that is not UTF-8 cannot be a job id). */
static char *id_json(const args_t *a) {
  json_t *arr = json_array();
  char *out;
  for (int i = 1; i < a->npos; i++) {
    if (json_array_append_new(arr, json_string(a->pos[i])) != 0) {
      fprintf(stderr, "mqproc jobs: not a job id (not UTF-8): %s\n", a->pos[i]);
      json_decref(arr);
      return NULL;
    }
  }
  out = json_dumps(arr, JSON_COMPACT);
  json_decref(arr);
  return out;
}

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

#define IDS "ARRAY(SELECT jsonb_array_elements_text($1::jsonb))"

/* Puts one batch of jobs (ids, or the filter) back to QUEUED and publishes their stored
 * requests; returns how many, or -1. The row keeps its history (tries, attempt: the
 * fencing token only grows); its attempt budget and requeues start afresh. */
static long long retry_batch(PGconn *c, admin_amqp_t *amqp, const char *exchange, const char *ids,
                             const char *state, const char *proc) {
  const char *vals[3] = {ids, state, proc};
  PGresult *r = mqproc__admin_q(
      c,
      "UPDATE mqproc_jobs SET state = 'QUEUED', attempt_base = attempt, requeues = 0,"
      " end_time = NULL, start_time = NULL, worker_id = NULL, result_published = false,"
      " callback_state = NULL, callback_error = NULL, dead_letter_pending = false,"
      " delivery_acked = false, cancel_requested = false, republish = true,"
      " lease_until = now() + interval '60 seconds', updated_at = now()"
      " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE"
      "   ($1::jsonb IS NULL OR job_id = ANY(" IDS "))"
      "   AND ($2::text IS NULL OR state = $2) AND ($3::text IS NULL OR processor_name = $3)"
      "   AND state IN ('FAILED', 'CANCELLED', 'SUCCESS') AND request_body IS NOT NULL"
      "   LIMIT 1000 FOR UPDATE SKIP LOCKED)"
      " RETURNING job_id, processor_name, request_body, request_format, coalesce(priority, -1),"
      "   coalesce(headers, '{}')::text",
      3, vals);
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
    char *kv[32];
    size_t nh = stored_headers(PQgetvalue(r, i, 5), kv);
    /* the request as it came, with its priority and headers (as text) */
    if (body == NULL ||
        mqproc__amqp_send(amqp, exchange, PQgetvalue(r, i, 1), body, len, ctype, id[0],
                          atoi(PQgetvalue(r, i, 4)), (const char *const *)kv, nh) != 0) {
      fprintf(stderr,
              "mqproc jobs retry: %s: not published; a server's sweep publishes it "
              "within a minute\n",
              id[0]);
    } else {
      PQclear(mqproc__admin_q(c,
                              "UPDATE mqproc_jobs SET republish = false, lease_until = NULL"
                              " WHERE job_id = $1 AND state = 'QUEUED' AND republish",
                              1, id));
      printf("%s\n", id[0]);
    }
    PQfreemem(body);
    while (nh > 0)
      free(kv[--nh]);
  }
  PQclear(r);
  return n;
}

static long long count(PGconn *c, const char *where, const char *const *vals, int n) {
  char sql[1024];
  PGresult *r;
  long long k;
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM mqproc_jobs WHERE %s", where);
  if ((r = mqproc__admin_q(c, sql, n, vals)) == NULL)
    return -1;
  k = atoll(PQgetvalue(r, 0, 0));
  PQclear(r);
  return k;
}

static int retry(PGconn *c, const args_t *a) {
  const char *state = mqproc__arg(a, "state"), *proc = mqproc__arg(a, "processor");
  const char *exchange = mqproc__arg(a, "exchange");
  char *ids = a->npos > 1 ? id_json(a) : NULL;
  admin_amqp_t *amqp;
  long long total = 0, n;
  json_t *detail;
  if (a->npos > 1 && ids == NULL)
    return 2;
  if (ids == NULL && state == NULL) {
    fprintf(stderr, "mqproc jobs retry: give job ids, or --state (e.g. FAILED)\n");
    return 2;
  }
  if (ids == NULL) {
    const char *vals[2] = {state, proc};
    n = count(c, "state = $1 AND ($2::text IS NULL OR processor_name = $2)", vals, 2);
    if (n < 0)
      return 1;
    if (!mqproc__has(a, "yes")) {
      printf("would retry %lld job(s); run again with --yes to do it\n", n);
      return 0;
    }
  }
  if ((amqp = mqproc__amqp_open(mqproc__arg(a, "queue"))) == NULL) {
    free(ids);
    return 1;
  }
  if (exchange == NULL)
    exchange = "ocrd-network-default";
  do {
    n = retry_batch(c, amqp, exchange, ids, ids != NULL ? NULL : state, proc);
    total += n > 0 ? n : 0;
  } while (n == BATCH); /* retried rows are QUEUED now: the next batch takes others */
  mqproc__amqp_close(amqp);
  detail = json_pack("{s:s?, s:s?, s:s?}", "ids", ids, "state", state, "processor", proc);
  mqproc__admin_audit(c, "retry", ids != NULL ? ids : (proc != NULL ? proc : "*"), total, detail);
  if (ids != NULL && total < a->npos - 1)
    fprintf(stderr,
            "mqproc jobs retry: %lld of %d job(s) retried (the others are unknown, "
            "QUEUED or RUNNING)\n",
            total, a->npos - 1);
  free(ids);
  return n < 0 ? 1 : 0;
}

static int cancel(PGconn *c, const args_t *a) {
  const char *proc = mqproc__arg(a, "processor");
  char *ids;
  const char *vals[2];
  PGresult *r;
  long long n, early = 0;
  if (a->npos < 2) {
    fprintf(stderr, "mqproc jobs cancel: give job ids\n");
    return 2;
  }
  if ((ids = id_json(a)) == NULL)
    return 2;
  vals[0] = ids;
  vals[1] = proc;
  PQclear(PQexec(c, "BEGIN"));
  /* not delivered yet (no row): with --processor, a CANCELLED row its delivery will find */
  r = mqproc__admin_q(
      c,
      "INSERT INTO mqproc_jobs (job_id, processor_name, state, end_time,"
      " last_error) SELECT id, $2, 'CANCELLED', now(), 'cancelled by an "
      "operator before it was delivered' FROM jsonb_array_elements_text($1::jsonb) id"
      " WHERE $2::text IS NOT NULL ON CONFLICT (job_id) DO NOTHING RETURNING job_id",
      2, vals);
  for (int i = 0; r != NULL && i < PQntuples(r); i++)
    printf("%s CANCELLED (before its delivery)\n", PQgetvalue(r, i, 0));
  early = r != NULL ? PQntuples(r) : 0;
  PQclear(r);
  r = mqproc__admin_q(c,
                      "UPDATE mqproc_jobs SET cancel_requested = (state = 'RUNNING'),"
                      " state = CASE WHEN state = 'QUEUED' THEN 'CANCELLED' ELSE state END,"
                      " end_time = CASE WHEN state = 'QUEUED' THEN now() ELSE end_time END,"
                      " last_error = CASE WHEN state = 'QUEUED' THEN 'cancelled by an operator' "
                      "ELSE last_error END,"
                      " updated_at = now()"
                      " WHERE job_id = ANY(" IDS ") AND state IN ('QUEUED', 'RUNNING')"
                      " RETURNING job_id, processor_name, cancel_requested",
                      1, vals);
  if (r == NULL) {
    PQclear(PQexec(c, "ROLLBACK"));
    free(ids);
    return 1;
  }
  for (int i = 0; i < PQntuples(r); i++) {
    const char *p[1] = {PQgetvalue(r, i, 1)};
    printf("%s %s\n", PQgetvalue(r, i, 0),
           PQgetvalue(r, i, 2)[0] == 't' ? "stopping (running)" : "CANCELLED");
    if (PQgetvalue(r, i, 2)[0] == 't') /* its holder stops it now */
      PQclear(mqproc__admin_q(c, "SELECT pg_notify('mqproc_control', $1)", 1, p));
  }
  n = PQntuples(r) + early;
  PQclear(r);
  mqproc__admin_audit(c, "cancel", ids, n, json_pack("{s:s?}", "processor", proc));
  PQclear(PQexec(c, "COMMIT"));
  if (n < a->npos - 1)
    fprintf(stderr,
            "mqproc jobs cancel: %lld of %d job(s) cancelled (the others are finished, "
            "or unknown: give --processor to cancel a job before it is delivered)\n",
            n, a->npos - 1);
  free(ids);
  return n == a->npos - 1 ? 0 : 1;
}

static int purge(PGconn *c, const args_t *a) {
  long long secs = mqproc__parse_duration(mqproc__arg(a, "older-than")), n, total = 0;
  const char *state = mqproc__arg(a, "state"), *proc = mqproc__arg(a, "processor");
  char s[32];
  const char *vals[3] = {s, state, proc};
  static const char WHERE[] =
      "end_time < now() - $1::bigint * interval '1 second'"
      " AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') AND ($2::text IS NULL OR state = $2)"
      " AND ($3::text IS NULL OR processor_name = $3)";
  char sql[1024];
  if (secs < 0) {
    fprintf(stderr, "mqproc jobs purge: --older-than DURATION is required (e.g. 30d)\n");
    return 2;
  }
  snprintf(s, sizeof(s), "%lld", secs);
  if (!mqproc__has(a, "yes")) {
    if ((n = count(c, WHERE, vals, 3)) < 0)
      return 1;
    printf("would purge %lld finished job(s); run again with --yes to do it\n", n);
    return 0;
  }
  snprintf(sql, sizeof(sql),
           "DELETE FROM mqproc_jobs WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE %s"
           " LIMIT 1000 FOR UPDATE SKIP LOCKED)",
           WHERE);
  do {
    PGresult *r = mqproc__admin_q(c, sql, 3, vals);
    if (r == NULL)
      return 1;
    n = atoll(PQcmdTuples(r));
    total += n;
    PQclear(r);
  } while (n == BATCH);
  printf("purged %lld job(s)\n", total);
  mqproc__admin_audit(
      c, "purge", proc != NULL ? proc : "*", total,
      json_pack("{s:s, s:s?}", "older_than", mqproc__arg(a, "older-than"), "state", state));
  return 0;
}

int mqproc__cmd_jobs(int argc, char **argv) {
  args_t a;
  PGconn *c;
  const char *sub;
  int rc;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "jobs")) != 0)
    return rc;
  if (mqproc__has(&a, "help") || a.npos == 0) {
    mqproc__args_usage(USAGE, OPTS);
    return a.npos == 0 && !mqproc__has(&a, "help") ? 2 : 0;
  }
  sub = a.pos[0];
  if (strcmp(sub, "list") && strcmp(sub, "show") && strcmp(sub, "log") && strcmp(sub, "retry") &&
      strcmp(sub, "cancel") && strcmp(sub, "purge")) {
    fprintf(stderr, "mqproc jobs: unknown command '%s' (see --help)\n", sub);
    return 2;
  }
  if ((!strcmp(sub, "show") || !strcmp(sub, "log")) && a.npos != 2) {
    fprintf(stderr, "mqproc jobs %s: give one job id\n", sub);
    return 2;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  if (!strcmp(sub, "list"))
    rc = list(c, &a);
  else if (!strcmp(sub, "show"))
    rc = show(c, &a, a.pos[1]);
  else if (!strcmp(sub, "log"))
    rc = show_log(c, a.pos[1]);
  else if (!strcmp(sub, "retry"))
    rc = retry(c, &a);
  else if (!strcmp(sub, "cancel"))
    rc = cancel(c, &a);
  else
    rc = purge(c, &a);
  PQfinish(c);
  return rc;
}
