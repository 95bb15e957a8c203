/* Integration: the operator's tools of issue 32, on the default pair (RabbitMQ +
 * PostgreSQL) and on MQPROC_TEST_QUEUE=dir MQPROC_TEST_STORE=sqlite:
 *   - dead letters: `mqproc dead-letters list|show|requeue|purge`, their count in `stats`,
 *     the place a dir:// server names for them (P/failed/), an empty job file's reason;
 *   - a job of a processor that is not OCR-D's: only its parameters (submit, a hand-written
 *     message without job_id and created_time), refused by an OCR-D processor;
 *   - a drain is for the servers running when it is given; a pause stands and says who;
 *   - submit to a dir:// queue no server ever served warns;
 *   - every command's --help names only its own options; the top usage leads with
 *     dir:// + sqlite://;
 *   - --state in any case, unknown states refused; `jobs retry unknown-id` exits 1 and
 *     records nothing; migrate says what it applied; `jobs list` fits the terminal with
 *     the cursor once; a server without --migrate leaves no database file. */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(operator_cli, .fini = it_cleanup);

/* Runs `mqproc ARGS...` (NULL-terminated) with the test's queue and store, and envp's
 * extra variables (may be NULL); *out its stdout, *err its stderr (both may be NULL). */
static int mq2(const char *const *envp, char **out, char **err, ...) {
  const char *argv[72], *env[16];
  char *errfile = it_fmt("%s/stderr-%d", it_tmpdir(), rand());
  va_list ap;
  int n = 0, k = 0, rc;
  argv[n++] = "/bin/sh";
  argv[n++] = "-c";
  argv[n++] = "e=\"$0\"; exec \"$@\" 2>\"$e\"";
  argv[n++] = errfile;
  argv[n++] = it_mqproc_bin();
  va_start(ap, err);
  for (const char *s; n < 71 && (s = va_arg(ap, const char *)) != NULL;)
    argv[n++] = s;
  va_end(ap);
  argv[n] = NULL;
  env[k++] = it_fmt("MQPROC_QUEUE=%s", it_amqp_url());
  env[k++] = it_fmt("MQPROC_DATABASE=%s", it_db_url());
  for (; envp != NULL && *envp != NULL && k < 15; envp++)
    env[k++] = *envp;
  env[k] = NULL;
  rc = it_run(argv, env, NULL, out);
  if (err != NULL)
    *err = it_read_file(errfile) != NULL ? it_read_file(errfile) : "";
  return rc;
}

/* The number of lines of text containing needle. */
static int lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; p != NULL && *p != '\0';) {
    const char *nl = strchr(p, '\n'), *hit = strstr(p, needle);
    if (hit != NULL && (nl == NULL || hit < nl))
      n++;
    p = nl != NULL ? nl + 1 : NULL;
  }
  return n;
}

/* Lines in text (its newlines). */
static int newlines(const char *text) {
  int n = 0;
  for (; *text != '\0'; text++)
    n += *text == '\n';
  return n;
}

/* user@host, as the commands name whoever runs them. */
static char *actor(void) {
  char host[256] = "localhost";
  const struct passwd *pw = getpwuid(getuid());
  gethostname(host, sizeof(host) - 1);
  return it_fmt("%s@%s", pw != NULL ? pw->pw_name : "?", host);
}

/* ---- dead letters --------------------------------------------------------------------- */

/* A job a server refuses (its result queue is not one --result-queue-pattern allows) is a
 * dead letter the tools show; once the server is fixed, requeue runs it. */
Test(operator_cli, a_dead_letter_is_listed_shown_counted_requeued_and_purged) {
  char *proc = it_name("dl"), *results = it_name("dl-results"), *out, *err, *id;
  const char *strict[] = {"--result-queue-pattern=only-this", NULL};
  const char *open[] = {"--result-queue-pattern=.*", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), strict, NULL);
  json_t *arr, *o;
  it_publish(proc, it_job_json(proc, "dl-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_dead_letters", "1"));
  /* the log names where it went: dir:// has no P.dead queue, but P/failed/ */
  cr_assert(it_server_wait_log(srv, "dead-lettered to", WAIT_MS));
  cr_expect(it_server_count_log(srv, it_queue_is_dir()
                                         ? it_fmt("dead-lettered to %s/failed/", proc)
                                         : it_fmt("dead-lettered to %s.dead", proc)) == 1,
            "the log names the wrong place");
  cr_expect_eq(it_server_count_log(srv, it_queue_is_dir() ? ".dead" : "/failed/"), 0);
  /* list, show, stats */
  cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "list", "--processor", proc, "--json", NULL),
               0);
  arr = it_json(out);
  cr_assert_eq(json_array_size(arr), 1, "%s", out);
  o = json_array_get(arr, 0);
  cr_expect_str_eq(json_string_value(json_object_get(o, "job_id")), "dl-1");
  cr_expect(strstr(json_string_value(json_object_get(o, "reason")), "result-queue-pattern") !=
            NULL);
  cr_expect(json_is_null(json_object_get(o, "requeued_at")));
  id = it_fmt("%lld", (long long)json_integer_value(json_object_get(o, "id")));
  json_decref(arr);
  cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "list", NULL), 0);
  cr_expect(strstr(out, "dl-1") != NULL && strstr(out, "reason") != NULL, "%s", out);
  cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "show", id, "--json", NULL), 0);
  o = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(json_object_get(o, "message"), "job_id")),
                   "dl-1");
  cr_expect(strstr(json_string_value(json_object_get(o, "body")), "dl-1") != NULL, "%s", out);
  cr_expect(json_is_false(json_object_get(o, "body_cut")));
  json_decref(o);
  cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "show", id, NULL), 0);
  cr_expect(strstr(out, "result-queue-pattern") != NULL && strstr(out, "body:") != NULL, "%s", out);
  cr_assert_eq(mq2(NULL, &out, NULL, "stats", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_integer_value(json_object_get(json_array_get(arr, 0), "dead_letters")), 1, "%s",
               out);
  json_decref(arr);
  cr_assert_eq(mq2(NULL, &out, NULL, "stats", "--processor", proc, NULL), 0);
  cr_expect(strstr(out, "dead letters   1 not requeued") != NULL, "%s", out);
  /* fixed: a server that allows the result queue; the bulk form counts, the id acts */
  it_server_stop(srv);
  srv = it_server_start(proc, it_proc("proc.sh"), open, NULL);
  cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "requeue", "--processor", proc, NULL), 0);
  cr_expect(strstr(out, "would requeue 1 dead letter(s)") != NULL, "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0, "a dry run acted");
  cr_assert_eq(mq2(NULL, &out, &err, "dead-letters", "requeue", id, NULL), 0, "%s", err);
  cr_expect(strstr(out, it_fmt("%s requeued to %s", id, proc)) != NULL, "%s", out);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dl-1'", "SUCCESS"),
            "the requeued job did not run");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters WHERE requeued_at IS NOT NULL"
                           " AND requeued_by LIKE '%@%'",
                           0),
               1, "the requeue is not recorded in its row");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = "
                           "'requeue-dead-letters'",
                           0),
               1);
  cr_assert_eq(mq2(NULL, &out, NULL, "stats", "--processor", proc, "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_integer_value(json_object_get(json_array_get(arr, 0), "dead_letters")), 0);
  json_decref(arr);
  /* an unknown id: exit 1, nothing recorded */
  cr_expect_eq(mq2(NULL, &out, &err, "dead-letters", "requeue", "999999", NULL), 1);
  cr_expect(strstr(err, "no such dead letter") != NULL, "%s", err);
  cr_expect_eq(it_mq(&out, "dead-letters", "requeue", "not-a-number", NULL), 2);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = "
                           "'requeue-dead-letters'",
                           0),
               1);
  /* purge: a floor of an hour unless --force, a dry run, then the rows go */
  cr_expect_eq(it_mq(&out, "dead-letters", "purge", "--older-than", "0s", "--yes", NULL), 2);
  cr_assert_eq(it_mq(&out, "dead-letters", "purge", "--older-than", "0s", "--force", NULL), 0);
  cr_expect(strstr(out, "would purge 1 dead letter(s)") != NULL, "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 1);
  cr_assert_eq(it_mq(&out, "dead-letters", "purge", "--older-than", "0s", "--force", "--yes", NULL),
               0);
  cr_expect(strstr(out, "purged 1 dead letter(s)") != NULL, "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0);
  cr_expect_eq(
      it_sql_long("SELECT count(*) FROM mqproc_audit WHERE action = 'purge-dead-letters'", 0), 1);
  it_server_stop(srv);
}

/* An empty message: on a directory queue it is what a file created in new/ looks like
 * before it is written, and the reason says how to write one. A body cut at
 * --max-message-size cannot be requeued. */
Test(operator_cli, an_empty_job_says_how_to_write_one_and_a_cut_body_is_not_requeued) {
  char *proc = it_name("dlempty"), *out, *err, *id;
  const char *extra[] = {"--max-message-size=64", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  char *reason;
  it_publish_len(proc, "", 0);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_dead_letters", "1"));
  reason = it_sql("SELECT reason FROM mqproc_dead_letters", 0);
  cr_expect(strstr(reason, "empty message") != NULL, "%s", reason);
  if (it_queue_is_dir())
    cr_expect(strstr(reason, "tmp/") != NULL && strstr(reason, "new/") != NULL, "%s", reason);
  /* too large: the table keeps the first 64 bytes only (dir:// moves such a file into
   * failed/ unread: no row) */
  it_publish(proc, it_job_json(proc, "too-big-for-the-limit", NULL));
  if (!it_queue_is_dir()) {
    cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_dead_letters", "2"));
    id = it_sql("SELECT max(id) FROM mqproc_dead_letters", 0);
    cr_expect_eq(mq2(NULL, &out, &err, "dead-letters", "requeue", id, NULL), 1);
    cr_expect(strstr(err, "cut short") != NULL, "%s", err);
    cr_assert_eq(mq2(NULL, &out, NULL, "dead-letters", "show", id, "--json", NULL), 0);
    cr_expect(strstr(out, "\"body_cut\": true") != NULL, "%s", out);
  }
  it_server_stop(srv);
}

/* ---- jobs of a processor of one's own ------------------------------------------------- */

Test(operator_cli, a_job_of_a_processor_of_ones_own_needs_only_its_parameters) {
  char *proc = it_name("own"), *out, *err, *id, *body;
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  json_t *job;
  /* submit: no --mets, no -I */
  cr_assert_eq(mq2(NULL, &out, &err, "submit", "--processor", proc, "--param", "file=/etc/hosts",
                   "--job-id", "own-1", "--wait", "--timeout", "60", NULL),
               0, "%s", err);
  cr_assert_eq(it_mq(&out, "jobs", "show", "own-1", "--json", NULL), 0);
  job = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(
                       json_object_get(json_object_get(job, "request"), "parameters"), "file")),
                   "/etc/hosts");
  cr_expect(json_object_get(json_object_get(job, "request"), "input_file_grps") == NULL);
  json_decref(job);
  /* a hand-written message: no job_id, no created_time; both are made */
  body =
      it_fmt("{\"processor_name\": \"%s\", \"parameters\": {\"file\": \"/etc/hostname\"}}", proc);
  it_publish(proc, body);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE job_id LIKE 'job-%'"
                           " AND state = 'SUCCESS'",
                           "1"));
  id = it_sql("SELECT job_id FROM mqproc_jobs WHERE job_id LIKE 'job-%'", 0);
  cr_expect_eq(strlen(id), 4 + 32, "%s", id);
  cr_expect_eq(it_sql_long(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE job_id = '%s' AND "
                                  "created_time IS NOT NULL",
                                  id),
                           0),
               1);
  /* the same bytes again are the same job: not run again */
  it_publish(proc, body);
  cr_assert(it_server_wait_log(srv, it_fmt("job %s: already SUCCESS", id), WAIT_MS));
  cr_expect_eq(it_sql_long(it_fmt("SELECT tries FROM mqproc_jobs WHERE job_id = '%s'", id), 0), 1);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0);
  it_server_stop(srv);
}

/* An OCR-D processor (here a C processor named ocrd-*) needs a workspace: a job without
 * one is a dead letter that says so; OCR-D jobs are validated as before. */
Test(operator_cli, an_ocrd_processor_refuses_a_job_without_a_workspace) {
  char *proc = it_name("ocrdonly"), *out, *reason;
  it_server_t *srv = it_server_start(proc, NULL, NULL, NULL);
  it_publish(proc, it_fmt("{\"job_id\": \"plain-1\", \"processor_name\": \"%s\"}", proc));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_dead_letters", "1"));
  reason = it_sql("SELECT reason FROM mqproc_dead_letters", 0);
  cr_expect(strstr(reason, "is an OCR-D processor") != NULL && strstr(reason, "path_to_mets"), "%s",
            reason);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0);
  /* an OCR-D job missing a key: as before */
  cr_expect_eq(it_mq(&out, "submit", "--processor", proc, "-I", "IN", NULL), 2);
  it_server_stop(srv);
}

/* ---- drain and pause ------------------------------------------------------------------- */

Test(operator_cli, a_drain_is_for_the_servers_running_and_a_pause_stands) {
  char *proc = it_name("drain"), *out, *err;
  it_server_t *a = it_server_start(proc, it_proc("proc.sh"), NULL, NULL), *b, *c;
  int st;
  cr_assert_eq(it_mq(&out, "drain", proc, NULL), 0, "%s", out);
  st = it_server_wait_exit(a, WAIT_MS);
  cr_assert(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the drained server: %d", st);
  it_server_stop(a);
  /* a server started after the drain takes jobs */
  b = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_expect(it_server_wait_log(b, "was given before this server started", WAIT_MS));
  cr_assert_eq(mq2(NULL, &out, &err, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                   "--wait", "--timeout", "60", NULL),
               0, "%s", err);
  cr_expect_eq(it_server_wait_exit(b, 100), -1, "the later server exited");
  /* a drain given now is for it */
  cr_assert_eq(it_mq(&out, "drain", proc, NULL), 0, "%s", out);
  st = it_server_wait_exit(b, WAIT_MS);
  cr_expect(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  it_server_stop(b);
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0, "%s", out);
  /* a pause stands: its log line says who and how to undo it, a later server starts paused */
  b = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert_eq(it_mq(&out, "pause", proc, NULL), 0, "%s", out);
  cr_assert(it_server_wait_log(b, it_fmt("paused by an operator (%s)", actor()), WAIT_MS));
  cr_expect(it_server_wait_log(b, it_fmt("until `mqproc resume %s`", proc), 100));
  c = it_server_spawn(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert(it_server_wait_log(c, "before this server started", WAIT_MS),
            "a later server did not start paused");
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", "held", NULL),
               0);
  /* its row exists from submission, QUEUED and never claimed while the pause stands */
  cr_expect_str_eq(
      it_sql("SELECT state || ' ' || attempt FROM mqproc_jobs WHERE job_id = 'held'", 0),
      "QUEUED 0");
  cr_assert_eq(it_mq(&out, "resume", proc, NULL), 0, "%s", out);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'held'", "SUCCESS"));
  it_server_stop(b);
  it_server_stop(c);
}

/* ---- submit to a queue nobody serves --------------------------------------------------- */

Test(operator_cli, submit_to_a_dir_queue_no_server_ever_served_warns) {
  char *proc = it_name("typo"), *out, *err;
  it_server_t *srv;
  int rc = mq2(NULL, &out, &err, "submit", "--processor", proc, "--param", "k=v", NULL);
  if (!it_queue_is_dir()) { /* RabbitMQ returns it: an error, not a warning */
    cr_expect_eq(rc, 1);
    cr_expect(strstr(err, "unroutable") != NULL, "%s", err);
    return;
  }
  cr_expect_eq(rc, 0, "%s", err);
  cr_expect(strstr(err, "warning: no server has served") != NULL, "%s", err);
  cr_assert_eq(mq2(NULL, &out, &err, "submit", "--processor", proc, "--param", "k=v", NULL), 0);
  cr_expect(strstr(err, "no server has served") != NULL, "a second submit must warn too: %s", err);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert_eq(mq2(NULL, &out, &err, "submit", "--processor", proc, "--param", "k=v", NULL), 0);
  cr_expect(strstr(err, "warning") == NULL, "%s", err);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "3"));
  it_server_stop(srv);
}

/* ---- help per command ------------------------------------------------------------------ */

/* Whether help lists option name as one of its own (a line "  --name", "  -y, --name"). */
static int lists_option(const char *help, const char *name) {
  for (const char *p = help; p != NULL && *p != '\0';) {
    const char *nl = strchr(p, '\n'), *q = p;
    size_t n = strlen(name);
    while (*q == ' ')
      q++;
    if (q > p && q[0] == '-' && q[1] != '-' && q[2] == ',' && q[3] == ' ')
      q += 4; /* -y, --yes */
    if (q > p && strncmp(q, "--", 2) == 0 && strncmp(q + 2, name, n) == 0 &&
        strchr(" =[\n", q[2 + n]) != NULL)
      return 1;
    p = nl != NULL ? nl + 1 : NULL;
  }
  return 0;
}

typedef struct help_case {
  const char *args[4];
  const char *has[5];
  const char *hasnt[6];
} help_case_t;

Test(operator_cli, each_commands_help_names_only_its_own_options) {
  static const help_case_t cases[] = {
      {{"migrate"}, {"database", "database-file"}, {"exec", "processor", "queue", "concurrency"}},
      {{"submit"}, {"processor", "param", "mets", "wait"}, {"state", "older-than", "yes"}},
      {{"jobs", "list"}, {"state", "limit", "after", "json"}, {"older-than", "yes", "queue"}},
      {{"jobs", "show"}, {"json"}, {"state", "limit", "yes", "queue"}},
      {{"jobs", "log"}, {"database"}, {"json", "state", "yes", "queue"}},
      {{"jobs", "retry"}, {"state", "yes", "queue"}, {"limit", "older-than", "force", "json"}},
      {{"jobs", "cancel"}, {"processor"}, {"yes", "queue", "state", "limit"}},
      {{"jobs", "purge"}, {"older-than", "force", "yes"}, {"queue", "limit", "after", "json"}},
      {{"stats"}, {"processor", "queue", "json"}, {"worker", "all", "timeout", "yes"}},
      {{"workers"}, {"processor", "all", "json"}, {"worker", "queue", "timeout"}},
      {{"pause"}, {"worker", "timeout"}, {"json", "all", "processor", "queue"}},
      {{"resume"}, {"worker", "timeout"}, {"json", "all", "queue"}},
      {{"drain"}, {"worker", "timeout"}, {"json", "all", "queue"}},
      {{"dead-letters", "list"}, {"processor", "waiting", "json"}, {"older-than", "queue", "yes"}},
      {{"dead-letters", "show"}, {"json"}, {"processor", "queue", "yes", "limit"}},
      {{"dead-letters", "requeue"}, {"queue", "yes", "processor"}, {"limit", "older-than"}},
      {{"dead-letters", "purge"}, {"older-than", "force", "yes"}, {"queue", "limit", "json"}},
      {{"dashboard"}, {"http", "database"}, {"state", "yes", "exec"}},
  };
  char *seen[sizeof(cases) / sizeof(cases[0])];
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const help_case_t *c = &cases[i];
    const char *argv[8] = {it_mqproc_bin()};
    char *out;
    int n = 1;
    for (int k = 0; c->args[k] != NULL; k++)
      argv[n++] = c->args[k];
    argv[n++] = "--help";
    cr_assert_eq(it_run(argv, NULL, NULL, &out), 0, "%s --help", c->args[0]);
    for (int k = 0; c->has[k] != NULL; k++)
      cr_expect(lists_option(out, c->has[k]), "%s %s --help lacks --%s:\n%s", c->args[0],
                c->args[1] != NULL ? c->args[1] : "", c->has[k], out);
    for (int k = 0; c->hasnt[k] != NULL; k++)
      cr_expect(!lists_option(out, c->hasnt[k]), "%s %s --help offers --%s:\n%s", c->args[0],
                c->args[1] != NULL ? c->args[1] : "", c->hasnt[k], out);
    cr_expect(strstr(out, "Usage: mqproc ") != NULL, "%s", out);
    seen[i] = out;
    for (size_t j = 0; j < i; j++)
      cr_expect(strcmp(seen[j], out) != 0, "%s and case %zu print the same help", c->args[0], j);
  }
  /* a subcommand's option is refused by another */
  cr_expect_eq(it_mq(NULL, "jobs", "show", "x", "--older-than", "1d", NULL), 2);
  cr_expect_eq(it_mq(NULL, "pause", "x", "--json", NULL), 2);
}

Test(operator_cli, the_top_usage_leads_with_a_directory_queue_and_sqlite) {
  const char *argv[] = {it_mqproc_bin(), "--help", NULL};
  char *out, *dir, *amqp;
  cr_assert_eq(it_run(argv, NULL, NULL, &out), 0);
  dir = strstr(out, "dir://");
  amqp = strstr(out, "amqp://");
  cr_assert_not_null(dir, "%s", out);
  cr_expect(amqp == NULL || dir < amqp, "%s", out);
  cr_expect(strstr(out, "sqlite://") != NULL && strstr(out, "sqlite://") < strstr(out, "Commands"),
            "%s", out);
  cr_expect(strstr(out, "dead-letters") != NULL, "%s", out);
  cr_expect(lists_option(out, "processor") && lists_option(out, "exec") &&
                lists_option(out, "migrate"),
            "%s", out);
  cr_expect(!lists_option(out, "on-failure") && !lists_option(out, "prefetch"),
            "the first start's options only: %s", out);
}

/* ---- output ---------------------------------------------------------------------------- */

Test(operator_cli, state_is_any_case_and_an_unknown_state_is_refused) {
  char *proc = it_name("states"), *out, *err;
  const char *env[] = {"PROC_FAIL_MATCH=bad", NULL};
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, env);
  json_t *arr;
  cr_assert_eq(mq2(NULL, &out, &err, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                   "--job-id", "bad-1", "--wait", NULL),
               1);
  cr_expect(strstr(err, "bad-1 FAILED") != NULL, "submit --wait names the job: %s", err);
  cr_assert_eq(it_mq(&out, "jobs", "list", "--state", "failed", "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 1, "%s", out);
  json_decref(arr);
  cr_assert_eq(it_mq(&out, "jobs", "list", "--state", "Failed", "--json", NULL), 0);
  arr = it_json(out);
  cr_expect_eq(json_array_size(arr), 1, "%s", out);
  json_decref(arr);
  cr_expect_eq(mq2(NULL, &out, &err, "jobs", "list", "--state", "failled", NULL), 2);
  cr_expect(strstr(err, "FAILED") != NULL && strstr(err, "failled") != NULL, "%s", err);
  cr_assert_eq(it_mq(&out, "jobs", "retry", "--state", "failed", "--processor", proc, NULL), 0);
  cr_expect(strstr(out, "would retry 1 job(s)") != NULL, "%s", out);
  cr_expect_eq(it_mq(&out, "jobs", "purge", "--older-than", "1d", "--state", "bogus", NULL), 2);
  it_server_stop(srv);
}

Test(operator_cli, retry_of_an_unknown_id_exits_1_and_records_nothing) {
  char *out, *err;
  cr_expect_eq(mq2(NULL, &out, &err, "jobs", "retry", "no-such-job", NULL), 1);
  cr_expect(strstr(err, "0 of 1 job(s) retried") != NULL, "%s", err);
  cr_expect(strstr(err, "audit") == NULL, "%s", err);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_audit", 0), 0);
}

Test(operator_cli, migrate_says_what_it_applied) {
  char *path = it_fmt("%s/fresh.db", it_tmpdir()), *fresh = it_fmt("sqlite://%s", path), *out;
  const char *first[] = {it_mqproc_bin(), "migrate", "--database", fresh, NULL};
  sqlite3 *db;
  sqlite3_stmt *st;
  char *v;
  cr_assert_eq(it_run(first, NULL, NULL, &out), 0);
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  cr_assert_eq(
      sqlite3_prepare_v2(db, "SELECT max(version) FROM mqproc_schema_migrations", -1, &st, NULL),
      SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  v = it_fmt("%d", sqlite3_column_int(st, 0)); /* the version this build makes */
  sqlite3_finalize(st);
  sqlite3_close(db);
  cr_expect(strstr(out, "applied ") != NULL &&
                strstr(out, it_fmt("migrations (version 0 to %s)", v)) != NULL,
            "%s", out);
  cr_assert_eq(it_run(first, NULL, NULL, &out), 0);
  cr_expect(strstr(out, it_fmt("already at version %s, nothing applied", v)) != NULL, "%s", out);
  /* the test's own store, migrated already (PostgreSQL: the files of sql/) */
  cr_assert_eq(it_mq(&out, "migrate", NULL), 0);
  cr_expect(strstr(out, it_fmt("already at version %s, nothing applied", v)) != NULL, "%s", out);
}

Test(operator_cli, jobs_list_fits_the_terminal_with_the_cursor_once) {
  char *proc = it_name("wide"), *out, *err;
  const char *narrow[] = {"COLUMNS=80", NULL}, *wide[] = {"COLUMNS=250", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN", "--count",
                     "3", "--job-id", "a-job-id-long-enough-to-need-some-room-in-any-table",
                     "--wait", NULL),
               0);
  cr_assert_eq(mq2(narrow, &out, &err, "jobs", "list", "--limit", "2", NULL), 0);
  for (const char *p = out; *p != '\0';) {
    const char *nl = strchr(p, '\n');
    size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
    cr_expect(len <= 80, "a line of %zu columns: %.*s", len, (int)len, p);
    p = nl != NULL ? nl + 1 : p + len;
  }
  cr_expect_eq(newlines(out), 3, "a header and two rows: %s", out);
  cr_expect(strstr(out, "cursor") == NULL && strstr(out, "job_id") != NULL, "%s", out);
  cr_expect(strstr(out, "state") != NULL && strstr(out, "SUCCESS") != NULL, "%s", out);
  cr_expect_eq(lines_with(err, "more: --after '"), 1, "the cursor once: %s", err);
  cr_expect(lines_with(out, ":a-job-id") == 0, "a cursor on a row: %s", out);
  cr_assert_eq(mq2(wide, &out, &err, "jobs", "list", NULL), 0);
  cr_expect(strstr(out, "queued (UTC)") != NULL && strstr(out, "exec ms") != NULL, "%s", out);
  cr_expect(strstr(err, "more:") == NULL, "not a full page: %s", err);
  it_server_stop(srv);
}

/* Issue 38, F14: a result body with escape sequences (a retitle, a screen clear) is
 * printed escaped on a terminal, as `jobs log` prints a log; piped, it stays as it came. */
Test(operator_cli, results_escapes_control_bytes_on_a_terminal) {
  char *results = it_name("esc-results"), *out, *cmd;
  const char body[] = "{\"job\": \"x\"}\x1b]0;PWNED\x07\x1b[2J";
  const char *argv[] = {"/usr/bin/script", "-qec", NULL, "/dev/null", NULL};
  if (it_queue_is_dir())
    cr_skip("a dir:// queue's results are its files (mqproc results says so)");
  it_declare(results);
  it_publish(results, body);
  cmd = it_fmt("'%s' results '%s' --queue '%s' --peek", it_mqproc_bin(), results, it_amqp_url());
  argv[2] = cmd;
  cr_assert_eq(it_run(argv, NULL, NULL, &out), 0, "%s", out);
  cr_expect(strstr(out, "\\x1b]0;PWNED\\x07\\x1b[2J") != NULL, "not escaped: %s", out);
  cr_expect(strchr(out, '\x1b') == NULL && strchr(out, '\x07') == NULL, "a raw control byte");
  cr_assert_eq(mq2(NULL, &out, NULL, "results", results, "--peek", NULL), 0);
  cr_expect(strstr(out, "\x1b]0;PWNED\x07") != NULL, "piped output is changed: %s", out);
}

Test(operator_cli, a_server_without_migrate_leaves_no_database_file) {
  char *db = it_fmt("%s/never.db", it_tmpdir()), *out;
  const char *argv[] = {it_mqproc_bin(),
                        "processing-server",
                        "--processor",
                        "nomigrate",
                        "--exec",
                        "true",
                        "--queue",
                        it_amqp_url(),
                        "--database",
                        it_fmt("sqlite://%s", db),
                        NULL};
  int st = it_run(argv, NULL, NULL, &out);
  cr_expect_neq(st, 0);
  cr_expect_eq(access(db, F_OK), -1, "an empty database file was left behind");
}
