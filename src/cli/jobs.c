/* `mqproc jobs list|show|log|retry|cancel|purge`: the job table for operators. Reads use
 * the indexes of sql/005_fleet.sql (newest first by queued_at, keyset pages); bulk
 * actions print how many rows they would touch and act only with --yes, in batches of
 * at most 1000 rows per transaction; every action lands in mqproc_audit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "runner/joblog.h"
#include "base/util.h"

#define BATCH 1000

/* Every option of the jobs commands; each subcommand takes the rows it names below. */
static const mqproc__opt_t OPTS[] = {
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH"},
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL or dir:///SPOOL: where the stored requests are published"},
    MQPROC__OPTS_SHARED,
    {.name = "exchange",
     .env = "MQPROC_EXCHANGE",
     .help = "exchange jobs are published to (default ocrd-network-default)"},
    MQPROC__OPT_STATE("only jobs in this state (any case)"),
    {.name = "processor", .help = "only jobs of this processor"},
    {.name = "since", .help = "only jobs queued within this duration (30s, 15m, 2h, 7d)"},
    {.name = "limit", .help = "at most this many rows (default 50)"},
    {.name = "after", .help = "the page after this cursor (printed below the previous page)"},
    {.name = "older-than", .help = "finished longer ago than this duration (required)"},
    {.name = "force", .type = MQPROC__OPT_BOOL, .help = "allow --older-than under an hour"},
    {.name = "yes", .shrt = 'y', .type = MQPROC__OPT_BOOL, .help = "act (without it: only count)"},
    {.name = "json", .type = MQPROC__OPT_BOOL, .help = "machine-readable output"},
    {0}};

static const mqproc__sub_t SUBS[] = {
    {"list",
     "Usage: mqproc jobs list [--state S] [--processor P] [--since D] [--limit N] [--after C] "
     "[--json]\n"
     "Jobs, newest first, as wide as the terminal; a full page ends with the --after to the "
     "next.\n",
     {MQPROC__SUB_DB_OPTS, "state", "processor", "since", "limit", "after", "json", NULL}},
    {"show",
     "Usage: mqproc jobs show ID [--json]\n"
     "Every column of a job, its request and every try.\n",
     {MQPROC__SUB_DB_OPTS, "json", NULL}},
    {"log",
     "Usage: mqproc jobs log ID\nThe job's log file (on the host that ran it).\n",
     {MQPROC__SUB_DB_OPTS, NULL}},
    {"retry",
     "Usage: mqproc jobs retry ID...\n"
     "       mqproc jobs retry --state FAILED [--processor P] [--yes]\n"
     "Finished jobs back to QUEUED, their stored requests published again (the bulk form "
     "only\ncounts without --yes). Exit 1 when an id was not retried (unknown, QUEUED or "
     "RUNNING).\n",
     {MQPROC__SUB_DB_OPTS, MQPROC__SUB_QUEUE_OPTS, "state", "processor", "yes", NULL}},
    {"cancel",
     "Usage: mqproc jobs cancel ID... [--processor P]\n"
     "QUEUED jobs become CANCELLED, RUNNING ones are stopped; with --processor, ids not\n"
     "delivered yet are cancelled before they arrive.\n",
     {MQPROC__SUB_DB_OPTS, "processor", NULL}},
    {"purge",
     "Usage: mqproc jobs purge --older-than 30d [--state S] [--processor P] [--yes]\n"
     "Deletes finished jobs (and their tries); without --yes it only counts. Never a job\n"
     "whose result or dead letter is still to be sent, or that is to be republished; under\n"
     "an hour only with --force.\n",
     {MQPROC__SUB_DB_OPTS, "older-than", "state", "processor", "force", "yes", NULL}},
};

static const char USAGE[] =
    "Usage: mqproc jobs list|show|log|retry|cancel|purge [OPTIONS]\n"
    "  list     jobs, newest first (--state, --processor, --since, --limit, --after)\n"
    "  show ID  every column of a job, its request and every try\n"
    "  log ID   the job's log file\n"
    "  retry    finished jobs back to QUEUED, their requests published again\n"
    "  cancel   stop running jobs, cancel queued ones\n"
    "  purge    delete finished jobs older than a duration\n"
    "Each has --help: mqproc jobs list --help.\n";

/* The columns of `jobs list`, the first to go on a narrow terminal with the highest drop
 * (the whole row is in --json, and `jobs show`). */
static const mqproc__col_t LIST_COLS[] = {
    {.key = "job_id", .max = 40, .min = 12},
    {.key = "processor_name", .title = "processor", .max = 24, .min = 10},
    {.key = "state"},
    {.key = "attempt", .drop = 4},
    {.key = "tries"},
    {.key = "worker_id", .title = "worker", .max = 24, .drop = 3},
    {.key = "created_time", .title = "created (UTC)", .time = 1, .drop = 6},
    {.key = "queued_at", .title = "queued (UTC)", .time = 1, .drop = 1},
    {.key = "start_time", .title = "started (UTC)", .time = 1, .drop = 5},
    {.key = "end_time", .title = "ended (UTC)", .time = 1, .drop = 2},
    {.key = "exec_time_ms", .title = "exec ms", .drop = 3},
    {.key = "last_error", .title = "last error", .max = 60, .min = 10},
    {0}};

static int list(mqproc__odb_t *c, const args_t *a, const char *state) {
  const char *limit = mqproc__arg(a, "limit");
  mqproc__jobs_filter_t f = {.state = state,
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
  if (mqproc__has(a, "json")) { /* each row has its cursor */
    mqproc__print_json(rows);
    return 0;
  }
  mqproc__print_table(rows, LIST_COLS);
  fflush(stdout);
  if ((int)json_array_size(rows) == f.limit) /* once, below the page it continues */
    fprintf(stderr, "more: --after '%s'\n",
            json_string_value(
                json_object_get(json_array_get(rows, json_array_size(rows) - 1), "cursor")));
  json_decref(rows);
  return 0;
}

static int show(mqproc__odb_t *c, const args_t *a, const char *id) {
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
    if (!strcmp(key, "tries") || !strcmp(key, "log_text"))
      continue;
    s = json_is_string(v) ? strdup(json_string_value(v))
                          : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    printf("%-20s ", key); /* processor output and errors may carry escape sequences */
    mqproc__print_term(stdout, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
    putchar('\n');
    free(s);
  }
  printf("tries:\n");
  for (size_t i = 0; i < json_array_size(json_object_get(job, "tries")); i++) {
    json_t *t = json_array_get(json_object_get(job, "tries"), i);
    char *s = json_dumps(t, JSON_COMPACT | JSON_PRESERVE_ORDER);
    printf("  %s\n", s != NULL ? s : "");
    free(s);
  }
  if ((v = json_object_get(job, "log_text")) != NULL && json_is_string(v)) {
    printf("log_text:\n"); /* a first try's output, kept in the row: no file was made */
    mqproc__print_term(stdout, json_string_value(v), json_string_length(v));
  }
  json_decref(job);
  return 0;
}

/* The file of log_path to stdout (escaped on a terminal), opened as the server opens it:
 * a link or a FIFO a processor put in its place is refused, never followed, never waited
 * on. 0, or 1 after saying why. */
static int print_log_file(const char *path) {
  char buf[65536], err[MQPROC_ERR_LEN];
  FILE *f = NULL;
  size_t n;
  int fd;
  if ((fd = mqproc__joblog_open_read(path, err)) < 0 || (f = fdopen(fd, "r")) == NULL) {
    if (errno == ENOENT)
      fprintf(stderr, "mqproc jobs log: cannot read %s (it is on the host that ran the job)\n",
              path);
    else
      fprintf(stderr, "mqproc jobs log: %s\n", err);
    if (fd >= 0)
      close(fd);
    return 1;
  }
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) /* escaped on a terminal */
    mqproc__print_term(stdout, buf, n);
  fclose(f);
  return 0;
}

/* A job's log: the text kept in its row (a first try that succeeded without a file), then
 * its log file (the tries that failed or wrote more). */
static int show_log(mqproc__odb_t *c, const char *id) {
  const char *vals[1] = {id};
  mqproc__ores_t *r =
      mqproc__admin_q(c, "SELECT log_path, log_text FROM mqproc_jobs WHERE job_id = $1",
                      "SELECT log_path, log_text FROM mqproc_jobs WHERE job_id = ?1", 1, vals);
  int rc = 0;
  if (r == NULL)
    return 1;
  if (mqproc__ores_rows(r) == 0 || (mqproc__ores_null(r, 0, 0) && mqproc__ores_null(r, 0, 1))) {
    fprintf(stderr, "mqproc jobs log: %s\n",
            mqproc__ores_rows(r) == 0
                ? "no such job"
                : "no log recorded (a running first try keeps its output until it ends)");
    mqproc__ores_free(r);
    return 1;
  }
  if (!mqproc__ores_null(r, 0, 1))
    mqproc__print_term(stdout, mqproc__ores_get(r, 0, 1), strlen(mqproc__ores_get(r, 0, 1)));
  if (!mqproc__ores_null(r, 0, 0)) {
    fflush(stdout);
    rc = print_log_file(mqproc__ores_get(r, 0, 0));
  }
  mqproc__ores_free(r);
  return rc;
}

/* The positional ids from index 1 on as a JSON array (the actions read it so);
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

/* The rows of mqproc_jobs that match where (PostgreSQL's) or sq_where (SQLite's). */
static long long count(mqproc__odb_t *c, const char *where, const char *sq_where,
                       const char *const *vals, int n) {
  char sql[1024], sq[1024];
  mqproc__ores_t *r;
  long long k;
  snprintf(sql, sizeof(sql), "SELECT count(*) FROM mqproc_jobs WHERE %s", where);
  snprintf(sq, sizeof(sq), "SELECT count(*) FROM mqproc_jobs WHERE %s", sq_where);
  if ((r = mqproc__admin_q(c, sql, sq, n, vals)) == NULL)
    return -1;
  k = atoll(mqproc__ores_get(r, 0, 0));
  mqproc__ores_free(r);
  return k;
}

static int retry(mqproc__odb_t *c, const args_t *a, const char *state) {
  mqproc__ops_retry_t w = {.state = state,
                           .processor = mqproc__arg(a, "processor"),
                           .exchange = mqproc__arg(a, "exchange"),
                           .actor = mqproc__admin_actor()};
  char *ids = a->npos > 1 ? id_json(a) : NULL, err[512];
  mqproc__qclient_t *amqp;
  json_t *out, *v;
  long long total;
  size_t i;
  int failed;
  if (a->npos > 1 && ids == NULL)
    return 2;
  if (ids == NULL && w.state == NULL) {
    fprintf(stderr, "mqproc jobs retry: give job ids, or --state (e.g. FAILED)\n");
    return 2;
  }
  if (ids == NULL && strcmp(w.state, "SUCCESS") != 0 && strcmp(w.state, "FAILED") != 0 &&
      strcmp(w.state, "CANCELLED") != 0) { /* the others are not retried: a dry run says 0 */
    fprintf(stderr, "mqproc jobs retry: a retry takes jobs that ended: --state FAILED, "
                    "CANCELLED or SUCCESS\n");
    return 2;
  }
  if (ids == NULL) { /* counted as the retry takes them: ended, with a stored request */
    const char *vals[2] = {w.state, w.processor};
    long long n = count(c,
                        "state = $1 AND ($2::text IS NULL OR processor_name = $2)"
                        " AND request_body IS NOT NULL",
                        "state = ?1 AND (?2 IS NULL OR processor_name = ?2)"
                        " AND request_body IS NOT NULL",
                        vals, 2);
    if (n < 0)
      return 1;
    if (!mqproc__has(a, "yes")) {
      printf("would retry %lld job(s); run again with --yes to do it\n", n);
      return 0;
    }
  }
  if ((amqp = mqproc__admin_amqp(a)) == NULL) {
    free(ids);
    return 1;
  }
  w.ids = ids;
  out = mqproc__ops_retry(c, amqp, &w, err);
  mqproc__qclient_close(amqp);
  if (out == NULL) {
    fprintf(stderr, "mqproc jobs retry: %s", err);
    free(ids);
    return 1;
  }
  json_array_foreach(json_object_get(out, "jobs"), i, v) {
    const char *id = json_string_value(json_object_get(v, "job_id"));
    if (json_is_true(json_object_get(v, "published")))
      printf("%s\n", id);
    else if (json_is_true(json_object_get(v, "cached")))
      printf("%s CACHED (the processing API publishes it when the jobs it depends on "
             "succeeded and its pages are free)\n",
             id);
    else
      fprintf(stderr,
              "mqproc jobs retry: %s: not published (%s); a server's sweep publishes it "
              "within a minute\n",
              id,
              json_string_value(json_object_get(v, "error")) != NULL
                  ? json_string_value(json_object_get(v, "error"))
                  : "no reason given");
  }
  total = json_integer_value(json_object_get(out, "retried"));
  if (total > 0) /* nothing retried: nothing recorded */
    mqproc__print_audit(out);
  else if (ids == NULL)
    printf("retried 0 jobs\n");
  if (ids != NULL && total < a->npos - 1)
    fprintf(stderr,
            "mqproc jobs retry: %lld of %d job(s) retried (the others are unknown, "
            "QUEUED or RUNNING)\n",
            total, a->npos - 1);
  if (json_object_get(out, "error") != NULL)
    fprintf(stderr, "mqproc jobs retry: %s", json_string_value(json_object_get(out, "error")));
  free(ids);
  failed = json_object_get(out, "error") != NULL || (ids != NULL && total < a->npos - 1);
  json_decref(out);
  return failed ? 1 : 0;
}

static int cancel(mqproc__odb_t *c, const args_t *a) {
  char *ids, err[512];
  json_t *out, *v;
  long long n;
  size_t i;
  if (a->npos < 2) {
    fprintf(stderr, "mqproc jobs cancel: give job ids\n");
    return 2;
  }
  if ((ids = id_json(a)) == NULL)
    return 2;
  out = mqproc__ops_cancel(c, ids, mqproc__arg(a, "processor"), mqproc__admin_actor(), NULL, err);
  free(ids);
  if (out == NULL) {
    fprintf(stderr, "mqproc jobs cancel: %s", err);
    return 1;
  }
  json_array_foreach(json_object_get(out, "jobs"), i, v) {
    printf("%s %s\n", json_string_value(json_object_get(v, "job_id")),
           json_string_value(json_object_get(v, "outcome")));
  }
  mqproc__print_audit(out);
  n = json_integer_value(json_object_get(out, "cancelled"));
  json_decref(out);
  if (n < a->npos - 1)
    fprintf(stderr,
            "mqproc jobs cancel: %lld of %d job(s) cancelled (the others are finished, "
            "or unknown: give --processor to cancel a job before it is delivered)\n",
            n, a->npos - 1);
  return n == a->npos - 1 ? 0 : 1;
}

#define PURGE_FLOOR_S 3600 /* a job's row outlives its redeliveries by this at least */

static int purge(mqproc__odb_t *c, const args_t *a, const char *state) {
  long long secs = mqproc__parse_duration(mqproc__arg(a, "older-than")), n, total = 0;
  const char *proc = mqproc__arg(a, "processor");
  char s[32];
  const char *vals[3] = {s, state, proc};
  static const char WHERE[] =
      "end_time < now() - $1::bigint * interval '1 second'"
      " AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') AND ($2::text IS NULL OR state = $2)"
      " AND ($3::text IS NULL OR processor_name = $3)"
      /* the outbox's, the dead-letter sweep's and the republish sweep's rows stay */
      " AND NOT delivery_acked AND NOT dead_letter_pending AND NOT republish"
      " AND NOT EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = mqproc_jobs.job_id)";
  static const char SQ_WHERE[] =
      "end_time < mq_now() - CAST(?1 AS INTEGER) * 1000"
      " AND state IN ('SUCCESS', 'FAILED', 'CANCELLED') AND (?2 IS NULL OR state = ?2)"
      " AND (?3 IS NULL OR processor_name = ?3)"
      " AND NOT delivery_acked AND NOT dead_letter_pending AND NOT republish"
      " AND NOT EXISTS (SELECT 1 FROM mqproc_outbox o WHERE o.job_id = mqproc_jobs.job_id)";
  char sql[1024], sq[1024];
  if (secs < 0) {
    fprintf(stderr, "mqproc jobs purge: --older-than DURATION is required (e.g. 30d; at most "
                    "a century)\n");
    return 2;
  }
  if (secs < PURGE_FLOOR_S && !mqproc__has(a, "force")) {
    fprintf(stderr,
            "mqproc jobs purge: --older-than %s is under an hour: the rows of jobs that just "
            "ended may still be read (a redelivery of a finished job is recognised by its "
            "row); add --force to purge them anyway\n",
            mqproc__arg(a, "older-than"));
    return 2;
  }
  snprintf(s, sizeof(s), "%lld", secs);
  if (!mqproc__has(a, "yes")) {
    if ((n = count(c, WHERE, SQ_WHERE, vals, 3)) < 0)
      return 1;
    printf("would purge %lld finished job(s); run again with --yes to do it\n", n);
    return 0;
  }
  snprintf(sql, sizeof(sql),
           "DELETE FROM mqproc_jobs WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE %s"
           " LIMIT 1000 FOR UPDATE SKIP LOCKED)",
           WHERE);
  snprintf(sq, sizeof(sq),
           "DELETE FROM mqproc_jobs WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE %s"
           " LIMIT 1000)",
           SQ_WHERE);
  do {
    mqproc__ores_t *r = mqproc__admin_q(c, sql, sq, 3, vals);
    if (r == NULL)
      return 1;
    n = mqproc__ores_changed(r);
    total += n;
    mqproc__ores_free(r);
  } while (n == BATCH);
  printf("purged %lld job(s)\n", total);
  mqproc__admin_audit(
      c, "purge", proc != NULL ? proc : "*", total,
      json_pack("{s:s, s:s?}", "older_than", mqproc__arg(a, "older-than"), "state", state));
  return 0;
}

int mqproc__cmd_jobs(int argc, char **argv) {
  const mqproc__sub_t *sub;
  const char *state;
  args_t a;
  mqproc__odb_t *c;
  int bad, rc = mqproc__sub_parse("jobs", USAGE, OPTS, SUBS, sizeof(SUBS) / sizeof(SUBS[0]), argc,
                                  argv, &sub, &a);
  if (rc >= 0)
    return rc;
  state = mqproc__arg_state(&a, &bad);
  if (bad)
    return 2;
  if ((!strcmp(sub->name, "show") || !strcmp(sub->name, "log")) && a.npos != 2) {
    fprintf(stderr, "mqproc jobs %s: give one job id\n", sub->name);
    return 2;
  }
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  if (!strcmp(sub->name, "list"))
    rc = list(c, &a, state);
  else if (!strcmp(sub->name, "show"))
    rc = show(c, &a, a.pos[1]);
  else if (!strcmp(sub->name, "log"))
    rc = show_log(c, a.pos[1]);
  else if (!strcmp(sub->name, "retry"))
    rc = retry(c, &a, state);
  else if (!strcmp(sub->name, "cancel"))
    rc = cancel(c, &a);
  else
    rc = purge(c, &a, state);
  mqproc__odb_close(c);
  return rc;
}
