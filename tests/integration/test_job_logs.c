/* No file per job (issue 30): a job's first try keeps its output in memory, and when it
 * succeeds within --log-inline-max the text is stored in the job's row (log_text) by the
 * success's own statement; no log file is made and log_path stays NULL. A try that fails,
 * or whose output outgrows the buffer, makes the job's log file as before (that output
 * first, then the rest); later tries append there. `mqproc jobs log`, `jobs show` and the
 * page show either. The rules of job log files (private, never blocking, following no
 * link, only a regular file of the server's user) hold when the file is made: a link or a
 * FIFO planted where it goes fails that try, not the server.
 *
 * Each case runs for the three runners: a C function on a pool thread (job.c's buffer),
 * in a worker process (a memfd the worker fills and the server reads) and an --exec
 * command (a memfd the try's supervisor fills, and moves into the file itself when it
 * outgrows the buffer). Runs on every backend pair (MQPROC_TEST_QUEUE=dir
 * MQPROC_TEST_STORE=sqlite too). */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(job_logs, .fini = it_cleanup);

typedef enum { THREAD, PROCESS, EXEC } runner_t;

/* ---- the processors ------------------------------------------------------------------ */

/* An --exec processor whose behaviour comes from the job id: "flaky" fails its first two
 * tries, "bad" every try, "chatty" writes 20000 bytes more, "binary" a NUL byte. */
static const char *script(void) {
  char *path = it_fmt("%s/joblog-proc.sh", it_tmpdir());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("#!/bin/sh\n"
        "echo \"script: job $MQPROC_JOB_ID try $MQPROC_TRY\"\n"
        "case \"$MQPROC_JOB_ID\" in\n"
        "  *chatty*) head -c 20000 /dev/zero | tr '\\000' x; echo ;;\n"
        "  *binary*) printf 'a\\000b\\n' ;;\n"
        "esac\n"
        "case \"$MQPROC_JOB_ID\" in\n"
        "  *flaky*) [ \"$MQPROC_TRY\" -ge 3 ] || { echo \"script: failing try $MQPROC_TRY\" >&2;"
        " exit 3; } ;;\n"
        "  *bad*) echo 'script: failing for good' >&2; exit 3 ;;\n"
        "esac\n"
        "exit 0\n",
        f);
  fclose(f);
  cr_assert_eq(chmod(path, 0755), 0);
  return path;
}

/* The line each try of job id writes (the C example's first line, the script's). */
static const char *marker(runner_t k, const char *id) {
  return k == EXEC ? it_fmt("script: job %s try", id) : it_fmt("ocrd-example: job %s,", id);
}

/* A server of proc running k, with a status page, and more args (NULL-terminated). */
static it_server_t *start(runner_t k, const char *proc, const char *const *more,
                          const char *const *envp) {
  const char *extra[24] = {"--http", "127.0.0.1:0"};
  int n = 2;
  if (k != EXEC)
    extra[n++] = k == THREAD ? "--isolation=thread" : "--isolation=process";
  for (; more != NULL && *more != NULL && n < 23; more++)
    extra[n++] = *more;
  extra[n] = NULL;
  return it_server_start(proc, k == EXEC ? script() : NULL, extra, envp);
}

/* Publishes job id; for the C example its parameters follow the id as the script does. */
static void publish(const char *proc, const char *id) {
  const char *params = strstr(id, "flaky")    ? "{\"parameters\": {\"fail_tries\": 2}}"
                       : strstr(id, "bad")    ? "{\"parameters\": {\"fail\": true}}"
                       : strstr(id, "chatty") ? "{\"parameters\": {\"log_lines\": 400}}"
                                              : NULL;
  it_publish(proc, it_job_json(proc, id, params));
}

/* ---- what the job left ---------------------------------------------------------------- */

static void expect_state(const char *id, const char *state) {
  cr_assert(it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", id), state),
            "job %s never became %s (it is %s: %s)", id, state,
            it_sql("SELECT state FROM mqproc_jobs WHERE job_id = $1", 1, id),
            it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = $1", 1, id));
}

static char *column(const char *col, const char *id) {
  return it_sql(it_fmt("SELECT %s FROM mqproc_jobs WHERE job_id = $1", col), 1, id);
}

static char *logdir(void) {
  return it_fmt("%s/joblogs", it_tmpdir());
}

/* Where job id's log file goes (the ids here are plain file names). */
static char *file_of(const char *proc, const char *id) {
  return it_fmt("%s/%s/%s.log", logdir(), proc, id);
}

static int exists(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; p != NULL && (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

static char *jobs_log(const char *id, int *rc) {
  char *out = NULL;
  *rc = it_mq(&out, "jobs", "log", id, NULL);
  return out != NULL ? out : "";
}

static char *page_of(it_server_t *srv, const char *id) {
  char *body = NULL;
  cr_expect_eq(it_http_get(it_http_port(srv), it_fmt("/jobs/%s", id), &body), 200);
  return body != NULL ? body : "";
}

/* ---- 1. a successful small job: no file, its output in the row ----------------------- */

static void small_success_makes_no_file(runner_t k) {
  char *proc = it_name("jl-ok"), *id = it_fmt("%s-1", proc), *text, *out, *head;
  it_server_t *srv = start(k, proc, NULL, NULL);
  int rc;
  publish(proc, id);
  expect_state(id, "SUCCESS");
  head = it_fmt("=== mqproc: job %s attempt 1 try 1 on ", id);
  cr_expect_null(column("log_path", id), "no file: log_path stays NULL");
  cr_expect(!exists(file_of(proc, id)), "no log file was made");
  cr_expect(!exists(it_fmt("%s/%s", logdir(), proc)), "not even its directory");
  text = column("log_text", id);
  cr_assert_not_null(text, "the output is in the row");
  cr_expect_not_null(strstr(text, head), "%s", text);
  cr_expect_not_null(strstr(text, marker(k, id)), "%s", text);
  if (k == PROCESS)
    cr_expect_not_null(strstr(text, "mqproc: in worker process "), "%s", text);
  out = jobs_log(id, &rc);
  cr_expect_eq(rc, 0, "jobs log: %s", out);
  cr_expect_str_eq(out, text, "jobs log prints the row's text");
  cr_expect_eq(it_mq(&out, "jobs", "show", id, NULL), 0);
  cr_expect_not_null(strstr(out, marker(k, id)), "jobs show: %s", out);
  cr_expect_not_null(strstr(page_of(srv, id), marker(k, id)), "the page shows it");
  it_server_stop(srv);
}

Test(job_logs, a_small_success_makes_no_file_c_thread) {
  small_success_makes_no_file(THREAD);
}
Test(job_logs, a_small_success_makes_no_file_c_process) {
  small_success_makes_no_file(PROCESS);
}
Test(job_logs, a_small_success_makes_no_file_exec) {
  small_success_makes_no_file(EXEC);
}

/* ---- 2. failing tries make the file, with every try's output ------------------------- */

static void failing_tries_make_the_file(runner_t k) {
  char *proc = it_name("jl-fail"), *flaky = it_fmt("%s-flaky", proc), *bad = it_fmt("%s-bad", proc);
  const char *more[] = {"--retries=2", "--max-requeues=0", NULL};
  it_server_t *srv = start(k, proc, more, NULL);
  char *path, *text, *out;
  int rc;
  publish(proc, flaky);
  publish(proc, bad);
  expect_state(flaky, "SUCCESS");
  expect_state(bad, "FAILED");
  for (int i = 0; i < 2; i++) {
    const char *id = i == 0 ? flaky : bad;
    path = column("log_path", id);
    cr_assert_not_null(path, "job %s: a failed try made the file", id);
    cr_expect_str_eq(path, file_of(proc, id));
    text = it_read_file(path);
    cr_assert_not_null(text, "%s", path);
    for (int t = 1; t <= 3; t++)
      cr_expect_not_null(strstr(text, it_fmt("=== mqproc: job %s attempt 1 try %d on ", id, t)),
                         "job %s: try %d's header in %s", id, t, text);
    cr_expect_eq(count_of(text, marker(k, id)), 3, "every try's output: %s", text);
    cr_expect_null(column("log_text", id), "job %s: the file has it all", id);
    out = jobs_log(id, &rc);
    cr_expect_eq(rc, 0);
    cr_expect_str_eq(out, text, "jobs log prints the file");
    cr_expect_not_null(strstr(page_of(srv, id), it_fmt("try 3 on ")), "the page shows its end");
  }
  it_server_stop(srv);
}

Test(job_logs, failing_tries_make_the_file_with_every_try_c_thread) {
  failing_tries_make_the_file(THREAD);
}
Test(job_logs, failing_tries_make_the_file_with_every_try_c_process) {
  failing_tries_make_the_file(PROCESS);
}
Test(job_logs, failing_tries_make_the_file_with_every_try_exec) {
  failing_tries_make_the_file(EXEC);
}

/* ---- 3. output that outgrows the buffer makes the file -------------------------------- */

static void chatty_success_makes_the_file(runner_t k) {
  char *proc = it_name("jl-big"), *id = it_fmt("%s-chatty", proc), *path, *text;
  it_server_t *srv = start(k, proc, NULL, NULL);
  struct stat st;
  publish(proc, id);
  expect_state(id, "SUCCESS");
  path = column("log_path", id);
  cr_assert_not_null(path, "output over --log-inline-max (8192) makes the file");
  cr_expect_str_eq(path, file_of(proc, id));
  cr_expect_null(column("log_text", id));
  text = it_read_file(path);
  cr_assert_not_null(text);
  cr_expect_eq(strncmp(text, it_fmt("=== mqproc: job %s attempt 1 try 1 on ", id), 30), 0,
               "what was kept comes first: %.100s", text);
  cr_expect_not_null(strstr(text, marker(k, id)));
  if (k == EXEC)
    cr_expect_not_null(strstr(text, "xxxxxxxxxx\n"), "then the rest");
  else
    cr_expect_not_null(strstr(text, "ocrd-example: line 400 of 400\n"), "then the rest");
  cr_assert_eq(stat(path, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0640, "a private file: %o", st.st_mode & 0777);
  cr_expect_gt(st.st_size, 8192);
  it_server_stop(srv);
}

Test(job_logs, output_over_the_buffer_makes_the_file_c_thread) {
  chatty_success_makes_the_file(THREAD);
}
Test(job_logs, output_over_the_buffer_makes_the_file_c_process) {
  chatty_success_makes_the_file(PROCESS);
}
Test(job_logs, output_over_the_buffer_makes_the_file_exec) {
  chatty_success_makes_the_file(EXEC);
}

/* --log-inline-max 0: a file for every job, as before; a small maximum: the C example's
 * first line outgrows it. */
Test(job_logs, log_inline_max_sets_the_buffer) {
  char *proc = it_name("jl-max"), *a = it_fmt("%s-a", proc), *b = it_fmt("%s-b", proc);
  const char *off[] = {"--log-inline-max=0", NULL};
  it_server_t *srv = start(THREAD, proc, off, NULL);
  publish(proc, a);
  expect_state(a, "SUCCESS");
  cr_expect_not_null(column("log_path", a));
  cr_expect(exists(file_of(proc, a)));
  cr_expect_null(column("log_text", a));
  it_server_stop(srv);
  srv = start(EXEC, proc, (const char *[]){"--log-inline-max=4", NULL}, NULL);
  publish(proc, b);
  expect_state(b, "SUCCESS");
  cr_expect(exists(file_of(proc, b)), "a header longer than the maximum: the file at once");
  cr_expect_null(column("log_text", b));
  it_server_stop(srv);
}

/* Output that is not text (a NUL byte) goes to the file as it is, not into the row. */
Test(job_logs, output_that_is_not_text_goes_to_the_file) {
  char *proc = it_name("jl-bin"), *id = it_fmt("%s-binary", proc), *path;
  it_server_t *srv = start(EXEC, proc, NULL, NULL);
  FILE *f;
  char buf[512];
  size_t n;
  publish(proc, id);
  expect_state(id, "SUCCESS");
  cr_expect_null(column("log_text", id));
  path = column("log_path", id);
  cr_assert_not_null(path);
  f = fopen(path, "rb");
  cr_assert_not_null(f);
  n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  cr_expect_not_null(memmem(buf, n, "a\0b\n", 4), "the bytes as they were");
  it_server_stop(srv);
}

/* ---- 4. the rules of job log files hold when the file is made ------------------------ */

static void planted_files_fail_only_their_try(runner_t k) {
  char *proc = it_name("jl-plant"), *sub = it_fmt("%s/%s", logdir(), proc);
  char *victim = it_fmt("%s/victim", it_tmpdir());
  char *chatty = it_fmt("%s-chatty-link", proc), *bad = it_fmt("%s-bad-fifo", proc);
  char *quiet = it_fmt("%s-ok-link", proc), *after = it_fmt("%s-ok-after", proc), *body = NULL;
  const char *more[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv;
  FILE *f = fopen(victim, "w");
  cr_assert_not_null(f);
  fputs("precious\n", f);
  fclose(f);
  cr_assert_eq(mkdir(logdir(), 0750), 0);
  cr_assert_eq(mkdir(sub, 0750), 0);
  cr_assert_eq(symlink(victim, file_of(proc, chatty)), 0);
  cr_assert_eq(symlink(victim, file_of(proc, quiet)), 0);
  cr_assert_eq(mkfifo(file_of(proc, bad), 0640), 0);
  srv = start(k, proc, more, NULL);
  /* a chatty job must make the file: the link fails its try */
  publish(proc, chatty);
  expect_state(chatty, "FAILED");
  cr_expect_not_null(strstr(column("last_error", chatty), "it is a symbolic link"), "%s",
                     column("last_error", chatty));
  /* a failing job must make the file: the FIFO fails it (never waited on) */
  publish(proc, bad);
  expect_state(bad, "FAILED");
  cr_expect_not_null(strstr(column("last_error", bad), "it is not a regular file"), "%s",
                     column("last_error", bad));
  /* a small success needs no file: the link is never touched */
  publish(proc, quiet);
  expect_state(quiet, "SUCCESS");
  cr_expect_null(column("log_path", quiet));
  cr_expect_str_eq(it_read_file(victim), "precious\n", "the link was never written through");
  /* and the server goes on */
  publish(proc, after);
  expect_state(after, "SUCCESS");
  cr_expect_eq(it_http_get(it_http_port(srv), "/healthz", &body), 200);
  it_server_stop(srv);
}

Test(job_logs, a_planted_link_or_fifo_fails_that_try_not_the_server_c_thread) {
  planted_files_fail_only_their_try(THREAD);
}
Test(job_logs, a_planted_link_or_fifo_fails_that_try_not_the_server_c_process) {
  planted_files_fail_only_their_try(PROCESS);
}
Test(job_logs, a_planted_link_or_fifo_fails_that_try_not_the_server_exec) {
  planted_files_fail_only_their_try(EXEC);
}

/* With a read token, a page reader without it sees neither the log's end nor the row's
 * text (not even as a column of the job's table). */
Test(job_logs, the_page_shows_the_text_only_to_readers_with_a_token) {
  char *proc = it_name("jl-tok"), *id = it_fmt("%s-1", proc), *body = NULL;
  char *token = it_fmt("%s/read-token", it_tmpdir());
  const char *more[] = {"--http-read-token", token, NULL};
  const char *bearer[] = {"-H", "Authorization: Bearer 0123456789abcdef-read-token", NULL};
  FILE *f = fopen(token, "w");
  it_server_t *srv;
  cr_assert_not_null(f);
  fputs("0123456789abcdef-read-token\n", f);
  fclose(f);
  cr_assert_eq(chmod(token, 0600), 0);
  srv = start(EXEC, proc, more, NULL);
  publish(proc, id);
  expect_state(id, "SUCCESS");
  cr_assert_not_null(column("log_text", id));
  cr_expect_eq(it_http_get(it_http_port(srv), it_fmt("/jobs/%s", id), &body), 200);
  cr_expect_null(strstr(body, marker(EXEC, id)), "hidden from a reader without a token: %s", body);
  cr_expect_null(strstr(body, "log_text"), "%s", body);
  cr_expect_eq(it_http_req(it_http_port(srv), it_fmt("/jobs/%s", id), bearer, &body), 200);
  cr_expect_not_null(strstr(body, marker(EXEC, id)), "shown with the token: %s", body);
  it_server_stop(srv);
}

/* ---- 5. the --on-failure handler and retention ---------------------------------------- */

/* The handler's input names the job's log file, which holds every try's output (a failed
 * job always has one), and its own output is appended there. */
Test(job_logs, the_on_failure_handler_reads_the_file_of_a_failed_job) {
  char *proc = it_name("jl-onf"), *id = it_fmt("%s-bad", proc);
  char *input = it_fmt("%s/onfail.json", it_tmpdir()), *handler = it_fmt("%s/onf.sh", it_tmpdir());
  char *flag = it_fmt("--on-failure=%s", handler), *text;
  const char *more[] = {"--retries=1", "--max-requeues=0", flag, NULL};
  json_t *in;
  it_server_t *srv;
  FILE *f = fopen(handler, "w");
  cr_assert_not_null(f);
  fprintf(f, "#!/bin/sh\ncat > '%s.tmp' && mv '%s.tmp' '%s'\necho handler-was-here\n", input, input,
          input);
  fclose(f);
  cr_assert_eq(chmod(handler, 0755), 0);
  srv = start(EXEC, proc, more, NULL);
  publish(proc, id);
  expect_state(id, "FAILED");
  for (int i = 0; i < WAIT_MS / 100 && !exists(input); i++)
    usleep(100 * 1000);
  cr_assert(exists(input), "the handler ran");
  in = it_json(it_read_file(input));
  cr_expect_str_eq(json_string_value(json_object_get(in, "log_path")), file_of(proc, id));
  json_decref(in);
  cr_assert(it_server_wait_log(srv, "--on-failure handler", WAIT_MS));
  text = it_read_file(file_of(proc, id));
  cr_expect_eq(count_of(text, marker(EXEC, id)), 2, "both tries: %s", text);
  it_server_stop(srv);
}

/* A purged row takes its log text with it; the files of failed jobs stay (operators remove
 * them: docs/operations.md). */
Test(job_logs, purge_takes_the_text_and_leaves_failed_jobs_files) {
  char *proc = it_name("jl-purge"), *ok = it_fmt("%s-ok", proc), *bad = it_fmt("%s-bad", proc),
       *out;
  const char *more[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv = start(THREAD, proc, more, NULL);
  publish(proc, ok);
  publish(proc, bad);
  expect_state(ok, "SUCCESS");
  expect_state(bad, "FAILED");
  cr_assert_not_null(column("log_text", ok));
  it_server_stop(srv);
  cr_assert_eq(it_mq(&out, "jobs", "purge", "--older-than", "0s", "--force", "--yes", NULL), 0,
               "%s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0);
  cr_expect(exists(file_of(proc, bad)), "a failed job's file stays");
  cr_expect(!exists(file_of(proc, ok)), "the success never had one");
}

/* ---- 6. the schema ------------------------------------------------------------------- */

/* `mqproc migrate` of an SQLite database made at version 5 adds log_text and what versions 7
 * and 8 added (the outbox table, the tries view, the table queues' messages; a third run
 * changes nothing); until then this build refuses it with the reason. */
Test(job_logs, an_sqlite_database_at_version_5_is_migrated_to_the_current_version) {
  char *path = it_fmt("%s/v5.db", it_tmpdir()), *url = it_fmt("sqlite://%s", path), *out = NULL;
  const char *migrate[] = {it_mqproc_bin(), "migrate", "--database", url, NULL};
  const char *list[] = {"/bin/sh",       "-c",   "exec \"$0\" \"$@\" 2>&1",
                        it_mqproc_bin(), "jobs", "list",
                        "--database",    url,    NULL};
  sqlite3 *db;
  sqlite3_stmt *st;
  int current;
  cr_assert_eq(it_run(migrate, NULL, NULL, &out), 0, "%s", out);
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  cr_assert_eq(
      sqlite3_prepare_v2(db, "SELECT max(version) FROM mqproc_schema_migrations", -1, &st, NULL),
      SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  current = sqlite3_column_int(st, 0); /* what this build makes */
  sqlite3_finalize(st);
  cr_assert_eq(sqlite3_exec(db,
                            "ALTER TABLE mqproc_jobs DROP COLUMN log_text;"
                            "DROP VIEW mqproc_all_tries; DROP TABLE mqproc_outbox;"
                            "DELETE FROM mqproc_schema_migrations WHERE version > 5;",
                            NULL, NULL, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(db));
  cr_expect_neq(it_run(list, NULL, NULL, &out), 0);
  cr_expect_not_null(strstr(out, it_fmt("schema version 5, this build needs %d", current)), "%s",
                     out);
  for (int i = 0; i < 2; i++)
    cr_assert_eq(it_run(migrate, NULL, NULL, &out), 0, "run %d: %s", i + 1, out);
  cr_expect_eq(sqlite3_prepare_v2(db, "SELECT log_text FROM mqproc_jobs", -1, &st, NULL), SQLITE_OK,
               "%s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  cr_expect_eq(sqlite3_prepare_v2(
                   db, "SELECT count(*) FROM mqproc_outbox, mqproc_all_tries, mqproc_messages", -1,
                   &st, NULL),
               SQLITE_OK, "%s", sqlite3_errmsg(db));
  sqlite3_finalize(st);
  cr_assert_eq(
      sqlite3_prepare_v2(db, "SELECT max(version) FROM mqproc_schema_migrations", -1, &st, NULL),
      SQLITE_OK);
  cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
  cr_expect_eq(sqlite3_column_int(st, 0), current);
  sqlite3_finalize(st);
  sqlite3_close(db);
  cr_expect_eq(it_run(list, NULL, NULL, &out), 0, "%s", out);
}
