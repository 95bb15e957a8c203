/* Integration: hostile or unusual input never stops a queue (issue "hostile input").
 *
 * Each test publishes its triggers and then a good job: every trigger ends dead-lettered
 * (or FAILED) with a precise reason, the good job reaches SUCCESS, and the server never
 * reconnects because of what a message holds (it_server_connections() stays 1). The
 * triggers that need a broker of their own (a disk alarm, a broker restart) are in
 * test_faults.c. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_listener.h"
#include "base/util.h"

#define WAIT_MS 30000

TestSuite(hostile, .fini = it_cleanup);

static char *repeat(char c, size_t n) {
  char *s = it_fmt("%*s", (int)n, "");
  memset(s, c, n);
  return s;
}

static char *result_extra(const char *results) {
  return it_fmt("{\"result_queue_name\": \"%s\"}", results);
}

/* A good job after the triggers: the queue still flows. */
static void expect_good_job(const char *proc, const char *results, const char *job) {
  it_msg_t m;
  it_publish(proc, it_job_json(proc, job, result_extra(results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result for the good job %s", job);
  cr_expect(strstr(m.body, job) != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
}

static void expect_never_reconnected(it_server_t *srv) {
  cr_expect_eq(it_server_connections(srv), 1, "the server reconnected because of a message");
  cr_expect_eq(it_server_count_log(srv, "job store unreachable"), 0,
               "a message's data was taken for a database outage");
}

/* ---- 1. what AMQP cannot encode --------------------------------------------------------- */

Test(hostile, amqp_encoding_limits_dead_letter_the_message_not_the_connection) {
  char *proc = it_name("enc"), *results = it_name("enc-result");
  char *huge = repeat('h', 130000);
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  /* a job_id that would be the result's message_id: 300 bytes > AMQP's 255 */
  it_publish(proc, it_job_json(proc, repeat('i', 300), result_extra(results)));
  it_expect_dead(proc, "job_id: must be at most 255 bytes (it is the AMQP message_id of the "
                       "result), got 300");
  it_publish(proc, it_job_json(proc, "longq-1", result_extra(repeat('q', 300))));
  it_expect_dead(proc,
                 "result_queue_name: must be at most 255 bytes (an AMQP queue name), got 300");
  /* invalid, with a 130 kB job_id: its dead letter's header would not fit an AMQP frame */
  it_publish(proc, it_fmt("{\"job_id\": \"%s\", \"processor_name\": \"%s\"}", huge, proc));
  it_expect_dead(proc, "got 130000");
  expect_good_job(proc, results, "enc-ok");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 3,
               "each message recorded once, not once per reconnect");
  cr_expect_leq(it_sql_long("SELECT max(length(job_id)) FROM mqproc_dead_letters", 0), 255);
  expect_never_reconnected(srv);
  it_server_stop(srv);
}

Test(hostile, a_stored_job_that_cannot_be_republished_fails_instead_of_looping) {
  char *proc = it_name("repub"), *results = it_name("repub-result");
  char *id = repeat('r', 300); /* a row from before the decode limit */
  const char *extra[] = {"--lease=2", NULL};
  it_server_t *srv;
  if (it_queue_is_dir() || it_queue_is_table())
    cr_skip_test("AMQP's 255-byte limit on message ids: a directory or table queue has none");
  it_declare(results);
  it_sql_long("SELECT count(*) FROM mqproc_jobs", 0); /* the schema exists from here on */
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_sql(it_q("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, republish,"
              " request, request_format, request_body) VALUES ($1, $2, 'QUEUED', 1, true, '{}',"
              " 'json', convert_to('{}', 'UTF8'))",
              "INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, republish,"
              " request, request_format, request_body) VALUES ($1, $2, 'QUEUED', 1, true, '{}',"
              " 'json', CAST('{}' AS BLOB))"),
         2, id, proc);
  cr_assert(it_server_wait_log(srv, "cannot republish the stored request", WAIT_MS));
  /* the log line comes before the store's write commits; the store commits requests in
   * the order they came, so once a later job has finished, the FAILED row is there */
  expect_good_job(proc, results, "repub-ok");
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = $1", 1, id), "FAILED");
  cr_expect_not_null(strstr(it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = $1", 1, id),
                            "the message id is 300 bytes, AMQP allows at most 255"));
  expect_never_reconnected(srv);
  it_server_stop(srv);
}

/* ---- 2. what PostgreSQL cannot store ---------------------------------------------------- */

Test(hostile, data_the_database_refuses_dead_letters_the_message_not_the_server) {
  char *proc = it_name("sql"), *results = it_name("sql-result");
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  /* microseconds: out of to_timestamp's range */
  it_publish(proc, it_job_json(proc, "usec-1", "{\"created_time\": 1718000000000000}"));
  it_expect_dead(proc, "created_time: must be Unix time in seconds, at most 253402300799");
  /* NUL inside parameters, which jsonb refuses: as JSON, and as YAML's "\0" */
  it_publish(proc, it_fmt("{\"job_id\": \"nul-1\", \"processor_name\": \"%s\", \"created_time\": 1,"
                          " \"input_file_grps\": [\"A\"], \"path_to_mets\": \"/m.xml\","
                          " \"parameters\": {\"a\": \"x\\u0000y\"}}",
                          proc));
  it_expect_dead(proc, "JSON: line 1");
  it_publish(proc, it_fmt("created_time: 1\ninput_file_grps:\n- A\njob_id: nul-2\nparameters:\n"
                          "  deep:\n  - \"x\\0y\"\npath_to_mets: /m.xml\nprocessor_name: %s\n",
                          proc));
  it_expect_dead(proc, "parameters.deep[0]: must not contain NUL characters");
  /* a job_id past the btree row limit of the primary key */
  it_publish(proc, it_job_json(proc, repeat('b', 3000), NULL));
  it_expect_dead(proc, "job_id: must be at most 255 bytes");
  /* what no decode check knows: a constraint the operator added. The claim's SQLSTATE
   * (23514) says the data is refused, not that the database is away */
  it_sql(it_q("ALTER TABLE mqproc_jobs ADD CONSTRAINT no_evil CHECK (job_id NOT LIKE 'evil%')",
              "CREATE TRIGGER no_evil BEFORE INSERT ON mqproc_jobs WHEN NEW.job_id LIKE 'evil%'"
              " BEGIN SELECT RAISE(ABORT, 'no evil'); END"),
         0);
  it_publish(proc, it_job_json(proc, "evil-1", result_extra(results)));
  it_expect_dead(proc, it_q("the job store refused this job: query failed (SQLSTATE 23514)",
                            "the job store refused this job: claim: no evil"));
  expect_good_job(proc, results, "sql-ok");
  expect_never_reconnected(srv);
  it_server_stop(srv);
}

/* ---- 3. the stored request round-trips exactly ------------------------------------------ */

Test(hostile, a_republished_request_is_the_original_message) {
  char *proc = it_name("rt"), *results = it_name("rt-result");
  char *gate = it_fmt("%s/gate", it_tmpdir()), *copy = it_fmt("%s/copy", it_tmpdir());
  const char *extra[] = {"--ack-after=1", "--lease=3", NULL};
  const char *envp_a[] = {it_fmt("PROC_GATE=%s", gate), NULL};
  const char *envp_b[] = {it_fmt("PROC_COPY=%s", copy), NULL};
  /* numbers jsonb writes back differently (1e20 as a 21-digit integer that jansson
   * refuses, -0.0 as 0), an integer past 2^53, escapes */
  char *body = it_fmt("{\"job_id\": \"rt-1\", \"processor_name\": \"%s\", \"created_time\": "
                      "1718000000, \"input_file_grps\": [\"A\"], \"path_to_mets\": \"/m.xml\", "
                      "\"result_queue_name\": \"%s\", \"parameters\": {\"big\": 1e20, \"neg\": "
                      "-0.0, \"odd\": 9007199254740993, \"u\": \"\\u00e9\\ud83d\\ude00\"}}",
                      proc, results);
  it_server_t *a, *b;
  it_msg_t m;
  char *stdin_json;
  mkdir(copy, 0755);
  it_declare(results);
  a = it_server_start(proc, it_proc("proc.sh"), extra, envp_a);
  it_publish(proc, body);
  cr_assert(it_server_wait_log(a, "job rt-1: still running after 1 s; delivery acked", WAIT_MS));
  cr_expect_eq(it_sql_long(it_q("SELECT (request_body = convert_to($1, 'UTF8'))::int FROM"
                                " mqproc_jobs WHERE job_id = 'rt-1'",
                                "SELECT request_body = CAST(?1 AS BLOB) FROM mqproc_jobs"
                                " WHERE job_id = 'rt-1'"),
                           1, body),
               1, "the original bytes are kept");
  /* the log line precedes the batched ack: wait until the queue has settled the copy, or
   * a kill before it makes the broker redeliver it (another path, tested elsewhere) */
  it_queue_settles(proc, WAIT_MS);
  it_server_signal(a, SIGKILL); /* the row alone carries the job now */
  it_server_wait_exit(a, WAIT_MS);
  b = it_server_start(proc, it_proc("proc.sh"), extra, envp_b);
  cr_assert(it_server_wait_log(b, "job rt-1: its holder is gone; republished", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m), "the republished job never ran");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  stdin_json = it_read_file(it_fmt("%s/rt-1.json", copy));
  cr_assert_not_null(stdin_json);
  cr_expect(strstr(stdin_json, "\"big\":1e20") != NULL, "%s", stdin_json);
  cr_expect(strstr(stdin_json, "\"odd\":9007199254740993") != NULL, "%s", stdin_json);
  /* what JSON may say but this server cannot hold is a JSON error, not YAML text */
  it_publish(proc, it_fmt("{\"job_id\": \"rt-2\", \"processor_name\": \"%s\", \"created_time\": 1,"
                          " \"input_file_grps\": [\"A\"], \"path_to_mets\": \"/m.xml\","
                          " \"parameters\": {\"x\": 1e400}}",
                          proc));
  it_expect_dead(proc, "real number overflow");
  it_publish(proc, it_fmt("{\"job_id\": \"rt-3\", \"processor_name\": \"%s\", \"created_time\": 1,"
                          " \"input_file_grps\": [\"A\"], \"path_to_mets\": \"/m.xml\","
                          " \"parameters\": {\"x\": 18446744073709551616}}",
                          proc));
  it_expect_dead(proc, "too big integer");
  expect_good_job(proc, results, "rt-ok");
  expect_never_reconnected(b);
  it_server_stop(a);
  it_server_stop(b);
}

/* ---- 6. children get a clean environment ------------------------------------------------ */

Test(hostile, processors_never_see_the_servers_secrets) {
  const char *dir = it_tmpdir();
  char *proc = it_name("env"), *results = it_name("env-result"), *env;
  const char *extra[] = {"--pass-env=KEEP_ME", NULL};
  const char *envp[] = {it_fmt("PROC_COPY=%s", dir),
                        "PGPASSWORD=s3cret-pg",
                        it_fmt("MQPROC_DATABASE=%s", it_db_url()),
                        it_fmt("MQPROC_QUEUE=%s", it_amqp_url()),
                        "SECRET_TOKEN=t0ken",
                        "KEEP_ME=yes",
                        "LC_ALL=C.UTF-8",
                        NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  expect_good_job(proc, results, "env-1");
  env = it_read_file(it_fmt("%s/env-1.env", dir));
  cr_assert_not_null(env);
  cr_expect_null(strstr(env, "PGPASSWORD"), "%s", env);
  cr_expect_null(strstr(env, "MQPROC_DATABASE"), "%s", env);
  cr_expect_null(strstr(env, "MQPROC_QUEUE"), "%s", env);
  cr_expect_null(strstr(env, "SECRET_TOKEN"), "%s", env);
  cr_expect_null(strstr(env, "guest:"), "the broker password leaked: %s", env);
  cr_expect_not_null(strstr(env, "KEEP_ME=yes"), "--pass-env: %s", env);
  cr_expect_not_null(strstr(env, "LC_ALL=C.UTF-8"), "%s", env);
  cr_expect_not_null(strstr(env, "MQPROC_JOB_ID=env-1"), "%s", env);
  cr_expect_not_null(strstr(env, "PATH="), "%s", env);
  it_server_stop(srv);
}

/* ---- 7. job logs are private and never shared ------------------------------------------- */

/* How often needle occurs in text. */
static int count_of(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle))
    n++;
  return n;
}

/* The C runner's pool thread makes the log file itself, when a try's output outgrows
 * memory (a chatty job: a small success makes no file): a planted link fails the try
 * there, and the job is dead-lettered with the reason; the link's target is untouched and
 * the next job runs. */
Test(hostile, a_c_processors_job_log_that_is_a_link_fails_the_job_not_the_server) {
  char *proc = it_name("clog"), *results = it_name("clog-result");
  char *logdir = it_fmt("%s/joblogs", it_tmpdir()), *sub = it_fmt("%s/%s", logdir, proc);
  char *victim = it_fmt("%s/c-victim", it_tmpdir());
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  FILE *f;
  it_server_t *srv;
  it_declare(results);
  mkdir(logdir, 0750);
  cr_assert_eq(mkdir(sub, 0750), 0);
  f = fopen(victim, "w");
  fputs("precious\n", f);
  fclose(f);
  cr_assert_eq(symlink(victim, it_fmt("%s/c-planted-1.log", sub)), 0);
  srv = it_server_start(proc, NULL, extra, NULL);
  it_publish(proc, it_job_json(proc, "c-planted-1", "{\"parameters\": {\"log_lines\": 400}}"));
  it_expect_dead(proc, "it is a symbolic link");
  cr_expect_str_eq(it_read_file(victim), "precious\n");
  expect_good_job(proc, results, "c-good-1");
  it_server_stop(srv);
}

/* Every job here makes its log file: a try's header alone outgrows --log-inline-max=16 (a
 * small success keeps its output in the row instead: test_job_logs.c). */
Test(hostile, job_logs_are_private_unique_and_follow_no_link) {
  char *proc = it_name("logs"), *results = it_name("logs-result");
  char *logdir = it_fmt("%s/joblogs", it_tmpdir()), *sub = it_fmt("%s/%s", logdir, proc);
  char *victim = it_fmt("%s/victim", it_tmpdir()), *big = it_fmt("%s/big.out", it_tmpdir());
  char *id_a = it_fmt("%s1", repeat('x', 249)), *id_b = it_fmt("%s2", repeat('x', 249));
  const char *extra[] = {"--max-log-size=1048576", "--retries=0", "--max-requeues=0",
                         "--log-inline-max=16", NULL};
  const char *ids[] = {"a/b", "a:b", "a_b", id_a, id_b};
  struct stat st;
  FILE *f;
  it_server_t *srv;
  it_declare(results);
  /* another local user got there first: a link where the job's log will be */
  cr_assert_eq(mkdir(logdir, 0750), 0);
  cr_assert_eq(mkdir(sub, 0750), 0);
  f = fopen(victim, "w");
  fputs("precious\n", f);
  fclose(f);
  cr_assert_eq(symlink(victim, it_fmt("%s/planted-1.log", sub)), 0);
  const char *envp[] = {it_fmt("PROC_BIG_FILE=%s", big), NULL};
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  it_publish(proc, it_job_json(proc, "planted-1", NULL));
  it_expect_dead(proc, "it is a symbolic link");
  cr_expect_str_eq(it_read_file(victim), "precious\n");
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
    expect_good_job(proc, results, ids[i]);
  cr_expect_eq(it_sql_long("SELECT count(DISTINCT log_path) FROM mqproc_jobs WHERE job_id IN"
                           " ($1, $2, $3, $4, $5)",
                           5, ids[0], ids[1], ids[2], ids[3], ids[4]),
               5, "each job has its own log");
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
    char *path = it_sql("SELECT log_path FROM mqproc_jobs WHERE job_id = $1", 1, ids[i]);
    char *text = it_read_file(path);
    cr_expect_not_null(strstr(text, it_fmt("=== mqproc: job %s attempt", ids[i])), "%s", path);
    cr_expect_eq(count_of(text, "=== mqproc"), 1, "%s holds another job's lines", path);
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0640, "%s: mode %o", path, st.st_mode & 0777);
  }
  cr_assert_eq(stat(sub, &st), 0);
  cr_expect_eq(st.st_mode & 0777, 0750);
  /* the log limit limits the log, not the files a processor writes (3 MiB > 1 MiB) */
  cr_expect_eq(stat(big, &st), 0);
  cr_expect_eq(st.st_size, 3145728);
  expect_never_reconnected(srv);
  it_server_stop(srv);
}

Test(hostile, a_log_dir_every_user_may_write_is_refused) {
  char *proc = it_name("logw"), *open_dir = it_fmt("%s/open", it_tmpdir());
  const char *extra[] = {it_fmt("--log-dir=%s", open_dir), NULL};
  it_server_t *srv;
  int st;
  cr_assert_eq(mkdir(open_dir, 0777), 0);
  cr_assert_eq(chmod(open_dir, 0777), 0);
  srv = it_server_spawn(proc, it_proc("proc.sh"), extra, NULL);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %d", st);
  cr_expect(it_server_wait_log(srv, "every user may write there", 1000));
  it_server_stop(srv);
}

/* ---- 8. a message cannot lift the operator's limits ------------------------------------- */

Test(hostile, a_message_may_only_lower_the_time_limit) {
  char *proc = it_name("tl"), *results = it_name("tl-result");
  const char *extra[] = {"--time-limit=2", "--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("misbehave.sh"), extra, NULL);
  it_publish(proc, it_job_json(proc, "hang-1", "{\"time_limit\": 3600}"));
  it_expect_dead(proc, "exceeded its time limit of 2 s");
  /* UBSan used to stop the server at time_limit * 1000 */
  it_publish(proc, it_job_json(proc, "hang-2", "{\"time_limit\": 9223372036854775807}"));
  it_expect_dead(proc, "time_limit: must be at most 31536000 seconds");
  expect_good_job(proc, results, "tl-ok");
  expect_never_reconnected(srv);
  it_server_stop(srv);
}

Test(hostile, a_processor_signalling_its_own_group_is_not_a_dead_server) {
  char *proc = it_name("kill0"), *results = it_name("kill0-result");
  char *gate = it_fmt("%s/gate", it_tmpdir()), *limits;
  const char *envp[] = {"PROC_KILL_GROUP=1", it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *srv;
  pid_t processor = 0, helper;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, envp);
  it_publish(proc, it_job_json(proc, "kill0-1", result_extra(results)));
  cr_assert(it_server_wait_log(srv, "job kill0-1: attempt 1 try 1 started", WAIT_MS));
  helper = it_child_of(it_server_pid(srv));
  processor = it_supervisor_of(it_server_pid(srv));
  cr_assert_gt(processor, 0, "no processor process under the spawn helper");
  /* the spawn helper is the small static program the server execs from a memfd, not a
   * fork of the server's image (forking that per try was most of a try's cost) */
  {
    char exe[256];
    ssize_t n = readlink(it_fmt("/proc/%d/exe", (int)helper), exe, sizeof(exe) - 1);
    int lines = it_file_lines(it_fmt("/proc/%d/maps", (int)helper));
    exe[n > 0 ? n : 0] = '\0';
    cr_expect(strstr(exe, "memfd:mqproc-spawn-helper") != NULL, "the helper runs %s", exe);
    cr_expect_lt(lines, 40, "the helper has %d mappings: a copy of the server's?", lines);
  }
  /* the spawn helper holds the processors' environments: no core file; and none of the
   * server's fds (its broker socket, database connection, epoll set) but its two links to
   * the server, none of which reaches the processor */
  limits = it_read_file(it_fmt("/proc/%d/limits", (int)helper));
  cr_expect(limits != NULL && strstr(limits, "Max core file size        0") != NULL, "%s", limits);
  /* until its execve the processor shares the helper's fds (CLOEXEC), which may still be
   * under way when the try's start is logged */
  for (int i = 0; i < WAIT_MS / 20 && it_count_sockets(processor) != 0; i++)
    usleep(20 * 1000);
  cr_expect_eq(it_count_sockets(processor), 0, "the processor holds the server's sockets");
  cr_expect_eq(it_count_sockets(helper), 2, "the spawn helper holds the server's sockets");
  it_open_gate(gate);
  {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m));
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    it_msg_free(&m);
  }
  cr_expect_eq(it_sql_long("SELECT tries FROM mqproc_jobs WHERE job_id = 'kill0-1'", 0), 1,
               "the try that signalled its group succeeded");
  it_server_stop(srv);
}

/* ---- 10. never more jobs at once than the bound ----------------------------------------- */

Test(hostile, early_acks_never_let_more_than_prefetch_jobs_run) {
  char *proc = it_name("bound"), *results = it_name("bound-result");
  char *spans = it_fmt("%s/spans", it_tmpdir());
  const char *extra[] = {"--prefetch=2", "--ack-after=1", NULL};
  const char *envp[] = {it_fmt("PROC_SPANS=%s", spans), "PROC_SLEEP=3", NULL};
  it_server_t *srv;
  int most;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  for (int i = 0; i < 6; i++)
    it_publish(proc, it_job_json(proc, it_fmt("bound-%d", i), result_extra(results)));
  for (int i = 0; i < 6; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d results", i);
    it_msg_free(&m);
  }
  most = it_most_at_once(spans); /* the starts and ends replayed in time order */
  cr_expect_leq(most, 2, "%d jobs ran at once with --prefetch=2", most);
  cr_expect_eq(most, 2, "both slots were used");
  it_server_stop(srv);
}

/* ---- 11. callbacks and result queues are bounded ---------------------------------------- */

Test(hostile, callbacks_and_result_queues_stay_within_the_operators_bounds) {
  char *proc = it_name("cb"), *ok_q = it_fmt("%s-ok", proc);
  const char *extra[] = {"--callback-deny=127.0.0.0/8", "--callback-retries=0",
                         it_fmt("--result-queue-pattern=%s-ok.*", proc), NULL};
  test_http_t *http = test_http_start(200);
  char *url = test_http_url(http, "/cb"), *with_pw, *err;
  it_server_t *srv;
  it_msg_t m;
  cr_assert_not_null(url);
  with_pw = it_fmt("http://bot:pw-s3cret@%s", url + strlen("http://"));
  it_declare(ok_q);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_publish(proc, it_job_json(proc, "cb-1",
                               it_fmt("{\"result_queue_name\": \"%s\", \"callback_url\": \"%s\","
                                      " \"internal_callback_url\": "
                                      "\"http://169.254.169.254/latest/meta-data\"}",
                                      ok_q, with_pw)));
  cr_assert(it_get(ok_q, WAIT_MS, &m));
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_assert(it_server_wait_log(srv, "job cb-1: callback failed", WAIT_MS));
  it_server_stop(srv); /* the callback state is recorded before the ack */
  err = it_sql("SELECT callback_state || ': ' || callback_error FROM mqproc_jobs"
               " WHERE job_id = 'cb-1'",
               0);
  cr_assert_not_null(err);
  cr_expect_not_null(strstr(err, "FAILED: "), "%s", err);
  cr_expect_not_null(strstr(err, "address 127.0.0.1 is denied"), "%s", err);
  cr_expect_not_null(strstr(err, "address 169.254.169.254 is denied"), "%s", err);
  cr_expect_null(strstr(err, "pw-s3cret"), "%s", err);
  cr_expect_eq(test_http_count(http), 0, "a denied callback reached the listener");
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_publish(proc, it_job_json(proc, "rq-1", result_extra("some-other-queue")));
  it_expect_dead(proc, "does not match --result-queue-pattern");
  expect_good_job(proc, ok_q, "rq-ok");
  cr_expect_eq(it_server_count_log(srv, "pw-s3cret"), 0);
  expect_never_reconnected(srv);
  it_server_stop(srv);
  test_http_stop(http);
  free(url);
}

/* ---- 12. the dead-letter table keeps a bounded part of a body --------------------------- */

Test(hostile, the_dead_letter_table_keeps_at_most_max_message_size_bytes) {
  char *proc = it_name("dlt"), *results = it_name("dlt-result"), *body = repeat('z', 100000);
  const char *extra[] = {"--max-message-size=65536", NULL};
  unsigned char sha[32];
  char hex[65];
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  it_publish(proc, body);
  /* (dir://: the job file's size, its envelope line included) */
  it_expect_dead(proc, it_queue_is_dir()
                           ? "bytes exceeds the limit of 65536 bytes"
                           : "message of 100000 bytes exceeds the limit of 65536 bytes");
  mqproc__sha256(body, 100000, sha);
  for (int i = 0; i < 32; i++)
    snprintf(hex + 2 * i, 3, "%02x", sha[i]);
  if (it_queue_is_dir()) /* never read there: moved into failed/ whole, by a rename */
    cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0);
  else if (it_queue_is_table()) /* never read there either: the take brought its size and
                                   first 1024 bytes */
    cr_expect_str_eq(it_sql(it_q("SELECT octet_length(body) || ' ' || body_len || ' ' ||"
                                 " coalesce(encode(body_sha256, 'hex'), '-')"
                                 " FROM mqproc_dead_letters",
                                 "SELECT length(body) || ' ' || body_len || ' ' ||"
                                 " coalesce(nullif(hex(body_sha256), ''), '-')"
                                 " FROM mqproc_dead_letters"),
                            0),
                     "1024 100000 -");
  else
    cr_expect_str_eq(it_sql(it_q("SELECT octet_length(body) || ' ' || body_len || ' ' ||"
                                 " encode(body_sha256, 'hex') FROM mqproc_dead_letters",
                                 "SELECT length(body) || ' ' || body_len || ' ' ||"
                                 " lower(hex(body_sha256)) FROM mqproc_dead_letters"),
                            0),
                     it_fmt("65536 100000 %s", hex));
  expect_good_job(proc, results, "dlt-ok");
  expect_never_reconnected(srv);
  it_server_stop(srv);
}
