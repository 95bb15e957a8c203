/* `mqproc submit`: publish processing messages (OCR-D's format, JSON or YAML) with
 * confirms and the mandatory flag, print their job ids, and with --wait wait for their
 * final states in the job table. With the database, each job's row is written first, in
 * state QUEUED (ops/submit.h), so `jobs show`, `stats` and `jobs cancel` see it at once. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "admin.h"
#include "base/util.h"
#include "codec/codec.h"
#include "ops/ocrd.h"
#include "ops/submit.h"

static const mqproc__opt_choice_t FORMATS[] = {
    {"json", MQPROC__FMT_JSON}, {"yaml", MQPROC__FMT_YAML}, {NULL, 0}};

static const mqproc__opt_t OPTS[] = {
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL of the broker, or dir:///SPOOL (a directory queue)"},
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH: each job's row is written QUEUED "
             "before its message is sent (and --wait reads it)"},
    MQPROC__OPTS_SHARED,
    {.name = "exchange",
     .env = "MQPROC_EXCHANGE",
     .help = "exchange (default ocrd-network-default)"},
    {.name = "processor", .help = "processor = queue name (required)"},
    {.name = "mets", .help = "path_to_mets of the job"},
    {.name = "workspace-id", .help = "workspace_id of the job (instead of --mets)"},
    {.name = "input-file-grp", .shrt = 'I', .help = "input file group, repeatable"},
    {.name = "output-file-grp", .shrt = 'O', .help = "output file group, repeatable"},
    {.name = "page-id", .help = "page_id"},
    {.name = "param",
     .help = "parameter k=v, repeatable (v read as JSON when it is, else a string)"},
    {.name = "parameters", .help = "parameters as a JSON object"},
    {.name = "result-queue", .help = "result_queue_name"},
    {.name = "callback", .help = "callback_url"},
    {.name = "priority",
     .help = "AMQP priority 0-255 (orders delivery only on a queue declared with --max-priority, "
             "up to that value; a dir:// queue orders by 0-99, above 99 counts as 99)"},
    {.name = "job-id", .help = "job id (default: a random UUID; with --count, ID-1 ... ID-N)"},
    {.name = "header", .help = "AMQP header k=v, repeatable (at most 32)"},
    {.name = "format",
     .type = MQPROC__OPT_ENUM,
     .def = "json",
     .choices = FORMATS,
     .help = "the jobs' encoding (yaml: as OCR-D's Python side sends)"},
    {.name = "count", .help = "publish this many jobs (for load)"},
    {.name = "workflow",
     .help = "FILE: a workflow of task lines (NAME -I A -O B [-p JSON] [-P K V], OCR-D's "
             "format; NAME runs on processor ocrd-NAME, else NAME) run on --mets: each step "
             "waits (CACHED) for those whose output groups it reads"},
    {.name = "page-wise",
     .type = MQPROC__OPT_BOOL,
     .help = "with --workflow: the chain once per page (of --page-id, else of the METS)"},
    {.name = "wait",
     .type = MQPROC__OPT_BOOL,
     .help = "wait for the final states: exit 0 all SUCCESS, 1 any FAILED/CANCELLED"},
    {.name = "timeout",
     .help = "with --wait: give up after this many seconds (exit 2; default 3600)"},
    MQPROC__OPTS_METS_SERVERS,
    {0}};

static void uuid(char out[37]) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != sizeof(b)) /* cannot fail for 16 bytes; still */
    for (int i = 0; i < 16; i++)
      b[i] = (unsigned char)rand();
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}

static json_t *grps(const args_t *a, const char *name) {
  json_t *arr = json_array();
  const char *v;
  for (int i = 0; (v = mqproc__arg_nth(a, name, i)) != NULL; i++)
    json_array_append_new(arr, json_string(v));
  return arr;
}

/* The message without its job id; NULL after printing why. */
static json_t *message(const args_t *a) {
  const char *p = mqproc__arg(a, "parameters"), *v;
  json_t *m, *params;
  int ocrd;
  if (mqproc__arg(a, "processor") == NULL) {
    fprintf(stderr, "mqproc submit: --processor is required\n");
    return NULL;
  }
  /* an OCR-D job names its workspace and file groups; a job of a processor of one's own
   * has only its parameters (docs/protocol.md) */
  ocrd = mqproc__arg(a, "mets") != NULL || mqproc__arg(a, "workspace-id") != NULL ||
         mqproc__arg(a, "input-file-grp") != NULL || mqproc__arg(a, "output-file-grp") != NULL ||
         mqproc__arg(a, "page-id") != NULL;
  if (ocrd && (mqproc__arg(a, "mets") == NULL) == (mqproc__arg(a, "workspace-id") == NULL)) {
    fprintf(stderr, "mqproc submit: give one of --mets and --workspace-id\n");
    return NULL;
  }
  params = p != NULL ? json_loads(p, 0, NULL) : json_object();
  if (!json_is_object(params)) {
    fprintf(stderr, "mqproc submit: --parameters: not a JSON object\n");
    json_decref(params);
    return NULL;
  }
  for (int i = 0; (v = mqproc__arg_nth(a, "param", i)) != NULL; i++) {
    const char *eq = strchr(v, '=');
    json_t *x;
    char key[256];
    if (eq == NULL || eq == v || (size_t)(eq - v) >= sizeof(key)) {
      fprintf(stderr, "mqproc submit: --param: expected key=value, got '%s'\n", v);
      json_decref(params);
      return NULL;
    }
    snprintf(key, sizeof(key), "%.*s", (int)(eq - v), v);
    x = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
    json_object_set_new(params, key, x != NULL ? x : json_string(eq + 1));
  }
  m = json_pack("{s:s, s:I, s:o}", "processor_name", mqproc__arg(a, "processor"), "created_time",
                (json_int_t)time(NULL), "parameters", params);
  if (ocrd)
    json_object_set_new(m, "input_file_grps", grps(a, "input-file-grp"));
  if (mqproc__arg(a, "output-file-grp") != NULL) /* optional: some processors write none */
    json_object_set_new(m, "output_file_grps", grps(a, "output-file-grp"));
  if ((v = mqproc__arg(a, "mets")) != NULL)
    json_object_set_new(m, "path_to_mets", json_string(v));
  if ((v = mqproc__arg(a, "workspace-id")) != NULL)
    json_object_set_new(m, "workspace_id", json_string(v));
  if ((v = mqproc__arg(a, "page-id")) != NULL)
    json_object_set_new(m, "page_id", json_string(v));
  if ((v = mqproc__arg(a, "result-queue")) != NULL)
    json_object_set_new(m, "result_queue_name", json_string(v));
  if ((v = mqproc__arg(a, "callback")) != NULL)
    json_object_set_new(m, "callback_url", json_string(v));
  return m;
}

/* The servers' own check of a message (they dead-letter what fails it): refused here
 * with the reason instead of published. */
static int valid(json_t *msg, mqproc__format_t fmt) {
  char err[MQPROC_ERR_LEN];
  mqproc__msg_t *m = NULL;
  if (mqproc__msg_validate(json_deep_copy(msg), fmt, NULL, &m, err) != MQPROC_OK) {
    fprintf(stderr, "mqproc submit: not a valid job message: %s\n", err);
    return 0;
  }
  mqproc__msg_free(m);
  return 1;
}

/* Names the jobs of ids (a JSON array text) that did not succeed, with their errors (a
 * failed --exec try's error ends with the processor's last output). */
static void report_failed(mqproc__odb_t *c, const char *ids) {
  const char *vals[1] = {ids};
  mqproc__ores_t *r = mqproc__admin_q(
      c,
      "SELECT job_id, state, coalesce(last_error, '') FROM mqproc_jobs WHERE state IN"
      " ('FAILED', 'CANCELLED') AND job_id IN (SELECT jsonb_array_elements_text($1::jsonb))"
      " ORDER BY job_id LIMIT 20",
      "SELECT job_id, state, coalesce(last_error, '') FROM mqproc_jobs WHERE state IN"
      " ('FAILED', 'CANCELLED') AND job_id IN (SELECT value FROM json_each(?1))"
      " ORDER BY job_id LIMIT 20",
      1, vals);
  for (int i = 0; r != NULL && i < mqproc__ores_rows(r); i++) {
    const char *e = mqproc__ores_get(r, i, 2);
    fprintf(stderr, "mqproc submit: job %s %s%s", mqproc__ores_get(r, i, 0),
            mqproc__ores_get(r, i, 1), e[0] != '\0' ? ": " : "");
    mqproc__print_term(stderr, e, strlen(e));
    fputc('\n', stderr);
  }
  mqproc__ores_free(r);
}

/* Waits for the final state of every id: 0 all SUCCESS, 1 one FAILED or CANCELLED,
 * 2 timeout. */
static int wait_all(const args_t *a, mqproc__odb_t *c, json_t *ids) {
  const char *t = mqproc__arg(a, "timeout");
  time_t deadline = time(NULL) + (t != NULL ? atol(t) : 3600);
  char *arr = json_dumps(ids, JSON_COMPACT);
  int rc = 2;
  if (c == NULL || arr == NULL) {
    free(arr);
    return 2;
  }
  for (;;) {
    const char *vals[1] = {arr};
    mqproc__ores_t *r = mqproc__admin_q(
        c,
        "SELECT count(*) FILTER (WHERE state = 'SUCCESS'), count(*) FILTER (WHERE state IN"
        " ('FAILED', 'CANCELLED')) FROM mqproc_jobs WHERE job_id IN"
        " (SELECT jsonb_array_elements_text($1::jsonb))",
        "SELECT count(*) FILTER (WHERE state = 'SUCCESS'), count(*) FILTER (WHERE state IN"
        " ('FAILED', 'CANCELLED')) FROM mqproc_jobs WHERE job_id IN"
        " (SELECT value FROM json_each(?1))",
        1, vals);
    long long ok, bad;
    if (r == NULL)
      break;
    ok = atoll(mqproc__ores_get(r, 0, 0));
    bad = atoll(mqproc__ores_get(r, 0, 1));
    mqproc__ores_free(r);
    if (ok + bad == (long long)json_array_size(ids)) {
      if (bad > 0)
        report_failed(c, arr);
      fprintf(stderr, "mqproc submit: %lld SUCCESS, %lld FAILED or CANCELLED\n", ok, bad);
      rc = bad > 0 ? 1 : 0;
      break;
    }
    if (time(NULL) >= deadline) {
      fprintf(stderr, "mqproc submit: timed out: %lld of %zu job(s) final\n", ok + bad,
              json_array_size(ids));
      break;
    }
    nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
  }
  free(arr);
  return rc;
}

/* The job store for the jobs' rows, when there is one: a database that cannot be reached
 * is said, and the jobs go out as before (their rows appear when a server claims them);
 * --wait needs it. */
static mqproc__odb_t *rows_db(const args_t *a) {
  const char *url = mqproc__arg(a, "database");
  char err[512], masked[512];
  mqproc__odb_t *c;
  if (url == NULL || url[0] == '\0')
    return NULL;
  if ((c = mqproc__odb_open(url, 30000, err)) == NULL) {
    mqproc__mask_secret(url, masked, sizeof(masked));
    fprintf(stderr,
            "mqproc submit: warning: cannot write the jobs' rows (%s: %s); their rows appear "
            "when a server claims them\n",
            masked, err);
  }
  return c;
}

/* One job: its row (QUEUED) when there is a database, then its message. 0, or 1 after
 * printing why not. */
static int submit_one(mqproc__odb_t *c, mqproc__qclient_t *amqp, const mqproc__ops_job_t *j) {
  char why[MQPROC_ERR_LEN];
  int row = c != NULL ? mqproc__ops_job_row(c, j, "QUEUED", why) : 0;
  if (row < 0) {
    fprintf(stderr, "mqproc submit: job %s: its row: %s", j->job_id, why);
    return 1;
  }
  if (mqproc__ops_job_publish(c, amqp, j, why) != 0) {
    if (row == 1) /* refused, and said here: no job is left behind */
      mqproc__ops_job_drop(c, j->job_id);
    fprintf(stderr, "mqproc submit: %s\n", why);
    return 1;
  }
  return 0;
}

/* Waits for the workflow run's end, releasing its steps as they become free (the release
 * pass a processing API's sweep makes): 0 SUCCESS, 1 FAILED, 2 timeout. */
static int wait_run(const args_t *a, const mqproc__ocrd_env_t *e, const char *wf) {
  const char *t = mqproc__arg(a, "timeout"), *vals[1] = {wf};
  time_t deadline = time(NULL) + (t != NULL ? atol(t) : 3600);
  char err[512];
  json_t *idle = json_object();
  for (int turn = 0;; turn++) {
    mqproc__ores_t *r;
    int rc = -1;
    if (mqproc__ocrd_settle(e, NULL, err) < 0)
      fprintf(stderr, "mqproc submit: release pass: %s\n", err);
    /* as the API's sweep: a METS server that died is started again */
    if (turn % 10 == 0 && mqproc__mets_servers_sweep(e, idle, err) < 0)
      fprintf(stderr, "mqproc submit: METS servers: %s\n", err);
    r = mqproc__admin_q(e->db, "SELECT state FROM mqproc_workflow_jobs WHERE job_id = $1",
                        "SELECT state FROM mqproc_workflow_jobs WHERE job_id = ?1", 1, vals);
    if (r != NULL && mqproc__ores_rows(r) == 1 && !mqproc__ores_null(r, 0, 0))
      rc = strcmp(mqproc__ores_get(r, 0, 0), "SUCCESS") == 0 ? 0 : 1;
    mqproc__ores_free(r);
    if (rc >= 0) {
      fprintf(stderr, "mqproc submit: workflow job %s %s\n", wf, rc == 0 ? "SUCCESS" : "FAILED");
      /* OCR-D's own METS servers stop when told: two sweeps that find them idle */
      for (int i = 0; i < 2 && e->mets != NULL && e->mets->kind == MQPROC__METS_SERVERS_OCRD; i++)
        mqproc__mets_servers_sweep(e, idle, err);
      json_decref(idle);
      return rc;
    }
    if (time(NULL) >= deadline) {
      fprintf(stderr, "mqproc submit: timed out: workflow job %s has not ended\n", wf);
      json_decref(idle);
      return 2;
    }
    nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
  }
}

/* --workflow FILE: the run's jobs (ops/ocrd.h, as POST /workflow/run makes them), their
 * ids printed (one per line, in task order), then with --wait its end. */
static int submit_workflow(const args_t *a) {
  const char *file = mqproc__arg(a, "workflow"), *mets = mqproc__arg(a, "mets");
  mqproc__ocrd_answer_t ans = {0};
  mqproc__mets_servers_t servers;
  char program[PATH_MAX], sockets[PATH_MAX];
  mqproc__ocrd_env_t e = {.exchange = mqproc__arg(a, "exchange"), .mets = &servers};
  mqproc__ocrd_wf_run_t r = {
      .mets = mets, .page_id = mqproc__arg(a, "page-id"), .page_wise = mqproc__has(a, "page-wise")};
  json_t *ids, *list, *v;
  char *script = NULL, *abs = NULL;
  const char *k, *wf;
  size_t i;
  int rc = 1;
  FILE *f;
  if (mets == NULL || (abs = realpath(mets, NULL)) == NULL) {
    fprintf(stderr, "mqproc submit: --workflow needs --mets PATH of an existing METS\n");
    return 2;
  }
  if (mqproc__admin_mets_servers(a, &servers, program, sockets) < 0) {
    free(abs);
    return 2;
  }
  r.mets = abs;
  if ((f = fopen(file, "r")) == NULL || (script = calloc(1, 1 << 20)) == NULL ||
      (r.len = fread(script, 1, (1 << 20) - 1, f)) == 0) {
    fprintf(stderr, "mqproc submit: --workflow %s: cannot be read (or empty)\n", file);
    if (f != NULL)
      fclose(f);
    free(script);
    free(abs);
    return 2;
  }
  fclose(f);
  r.content = script;
  if ((e.db = mqproc__admin_db(a)) == NULL || (e.q = mqproc__admin_amqp(a)) == NULL)
    goto out;
  mqproc__ocrd_wf_run(&e, &r, &ans);
  if (ans.status != 200) {
    fprintf(stderr, "mqproc submit: the workflow is refused (%d): %s\n", ans.status, ans.detail);
    rc = ans.status == 500 || ans.status == 503 ? 1 : 2;
    goto out;
  }
  wf = json_string_value(json_object_get(ans.body, "job_id"));
  ids = json_object_get(ans.body, "processing_job_ids");
  json_object_foreach(ids, k, list) json_array_foreach(list, i, v)
      printf("%s\n", json_string_value(v));
  fflush(stdout);
  fprintf(stderr, "mqproc submit: workflow job %s%s\n", wf,
          mqproc__has(a, "wait") ? ""
                                 : " (its later steps are released by a running `mqproc "
                                   "processing-api`, or by `submit --wait`)");
  rc = mqproc__has(a, "wait") ? wait_run(a, &e, wf) : 0;
out:
  mqproc__ocrd_answer_free(&ans);
  mqproc__qclient_close(e.q);
  mqproc__odb_close(e.db);
  free(script);
  free(abs);
  return rc;
}

int mqproc__cmd_submit(int argc, char **argv) {
  const char *prio_s, *count_s, *exchange, *headers[32], *v;
  size_t n_headers = 0;
  mqproc__format_t fmt;
  args_t a;
  json_t *msg, *ids;
  mqproc__qclient_t *amqp;
  mqproc__odb_t *db = NULL;
  long count = 1;
  int rc, prio = -1;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "submit")) != 0)
    return rc;
  if (mqproc__has(&a, "help")) {
    mqproc__args_usage("Usage: mqproc submit --processor P [--param K=V]... [OPTIONS]\n"
                       "       mqproc submit --processor P (--mets PATH | --workspace-id W) -I GRP "
                       "[-O GRP] [OPTIONS]\n"
                       "       mqproc submit --workflow FILE --mets PATH [--page-wise] [--wait]\n"
                       "Publishes jobs and prints their ids: a job of a processor of one's own "
                       "(its parameters), an\nOCR-D job (a workspace and file groups), or a "
                       "workflow's jobs.\n",
                       OPTS);
    return 0;
  }
  if (mqproc__arg(&a, "workflow") != NULL)
    return submit_workflow(&a);
  if ((rc = mqproc__arg_enum(&a, "format")) < 0)
    return 2;
  fmt = (mqproc__format_t)rc;
  if ((prio_s = mqproc__arg(&a, "priority")) != NULL &&
      ((prio = atoi(prio_s)) < 0 || prio > 255 || strspn(prio_s, "0123456789") != strlen(prio_s))) {
    fprintf(stderr, "mqproc submit: --priority: expected 0-255\n");
    return 2;
  }
  if ((count_s = mqproc__arg(&a, "count")) != NULL && (count = atol(count_s)) < 1) {
    fprintf(stderr, "mqproc submit: --count: expected a number >= 1\n");
    return 2;
  }
  for (int i = 0; (v = mqproc__arg_nth(&a, "header", i)) != NULL; i++) {
    if (strchr(v, '=') == NULL) {
      fprintf(stderr, "mqproc submit: --header: expected key=value, got '%s'\n", v);
      return 2;
    }
    if (n_headers == MQPROC__ARRAY_LEN(headers)) {
      fprintf(stderr, "mqproc submit: --header: at most %zu\n", MQPROC__ARRAY_LEN(headers));
      return 2;
    }
    headers[n_headers++] = v;
  }
  if ((msg = message(&a)) == NULL)
    return 2;
  json_object_set_new(msg, "job_id", json_string("submit-check")); /* each gets its own */
  if (!valid(msg, fmt)) {
    json_decref(msg);
    return 2;
  }
  if ((amqp = mqproc__admin_amqp(&a)) == NULL) {
    json_decref(msg);
    return 1;
  }
  db = rows_db(&a);
  exchange =
      mqproc__arg(&a, "exchange") != NULL ? mqproc__arg(&a, "exchange") : "ocrd-network-default";
  char why[MQPROC_ERR_LEN];
  int served = mqproc__qclient_served(amqp, mqproc__arg(&a, "processor"));
  ids = json_array();
  rc = 0;
  /* dir://: the result queue is made here (servers make one only where the operator's
   * --result-queue-pattern allows) */
  if (mqproc__arg(&a, "result-queue") != NULL &&
      mqproc__qclient_make_queue(amqp, mqproc__arg(&a, "result-queue"), why) != 0) {
    fprintf(stderr, "mqproc submit: %s\n", why);
    rc = 1;
  }
  for (long i = 0; i < count && rc == 0; i++) {
    char id[300], err[256], *body = NULL;
    size_t len;
    if (mqproc__arg(&a, "job-id") != NULL && count > 1)
      snprintf(id, sizeof(id), "%.255s-%ld", mqproc__arg(&a, "job-id"), i + 1);
    else if (mqproc__arg(&a, "job-id") != NULL)
      snprintf(id, sizeof(id), "%.255s", mqproc__arg(&a, "job-id"));
    else
      uuid(id);
    json_object_set_new(msg, "job_id", json_string(id));
    if (mqproc__doc_encode(msg, fmt, &body, &len, err) != 0) {
      fprintf(stderr, "mqproc submit: %s\n", err);
      rc = 2;
      break;
    }
    mqproc__ops_job_t j = {.job_id = id,
                           .processor = mqproc__arg(&a, "processor"),
                           .body = body,
                           .len = len,
                           .format = fmt == MQPROC__FMT_YAML ? "yaml" : "json",
                           .exchange = exchange,
                           .priority = prio,
                           .headers = headers,
                           .n_headers = n_headers,
                           .created_time =
                               json_integer_value(json_object_get(msg, "created_time"))};
    if ((rc = submit_one(db, amqp, &j)) == 0) {
      printf("%s\n", id);
      json_array_append_new(ids, json_string(id));
    }
    free(body);
  }
  fflush(stdout);
  if (served == 0 && rc == 0) /* dir://: RabbitMQ would return it as unroutable */
    fprintf(stderr,
            "mqproc submit: warning: no server has served '%s' in %s yet: the job waits "
            "there for the first one (a typo in --processor?)\n",
            mqproc__arg(&a, "processor"), mqproc__arg(&a, "queue"));
  mqproc__qclient_close(amqp);
  json_decref(msg);
  if (rc == 0 && mqproc__has(&a, "wait")) {
    if (db == NULL)
      db = mqproc__admin_db(&a);
    rc = wait_all(&a, db, ids);
  }
  mqproc__odb_close(db);
  json_decref(ids);
  return rc;
}
