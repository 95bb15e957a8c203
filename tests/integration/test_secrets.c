/* Integration: secrets stay off the command line and out of every log (issue "secure and
 * scaled out", item 2). The broker and database URLs come from files (--queue-file,
 * --database-file); the passwords in them never show in /proc/PID/cmdline, in a server's
 * log (text and JSON), in the operators' commands' output or in their error messages.
 * Runs on RabbitMQ + PostgreSQL, the pair whose URLs carry passwords. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(secrets, .fini = it_cleanup);

/* A 0600 file under the test's directory holding text; returns its path. */
static const char *secret_file(const char *name, const char *text, mode_t mode) {
  const char *path = it_fmt("%s/%s", it_tmpdir(), name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  cr_assert(fd >= 0, "%s", path);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  cr_assert_eq(fchmod(fd, mode), 0);
  close(fd);
  return path;
}

/* The broker URL of this run with user:password in place of guest:guest. */
static const char *amqp_as(const char *user, const char *password) {
  const char *url = it_amqp_url(), *at = strchr(url, '@');
  cr_assert(strncmp(url, "amqp://", 7) == 0 && at != NULL, "%s", url);
  return it_fmt("amqp://%s:%s%s", user, password, at);
}

/* This test's database URL with a password (trust auth ignores it; libpq still has it). */
static const char *db_with_password(const char *password) {
  const char *url = it_db_url(), *at = strstr(url, "postgres@");
  cr_assert_not_null(at, "%s", url);
  return it_fmt("%.*spostgres:%s%s", (int)(at - url), url, password, at + strlen("postgres"));
}

static void expect_not_in_cmdline(pid_t pid, const char *secret) {
  char buf[8192];
  ssize_t n;
  int fd = open(it_fmt("/proc/%d/cmdline", (int)pid), O_RDONLY | O_CLOEXEC);
  cr_assert(fd >= 0);
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  cr_assert_gt(n, 0);
  for (ssize_t i = 0; i < n; i++)
    if (buf[i] == '\0')
      buf[i] = ' ';
  buf[n] = '\0';
  cr_expect_null(strstr(buf, secret), "the password is in /proc/%d/cmdline: %s", (int)pid, buf);
  cr_expect_not_null(strstr(buf, "-file"), "%s", buf);
}

/* Stops s (SIGTERM) and returns how many of its log lines contain text. */
static int stop_and_count(it_server_t *s, const char *text) {
  int n;
  it_server_signal(s, SIGTERM);
  it_server_wait_exit(s, WAIT_MS);
  n = it_server_count_log(s, text);
  it_server_stop(s);
  return n;
}

static const char *const *server_args(const char *proc, const char *qfile, const char *dfile,
                                      const char *extra) {
  static const char *argv[16];
  size_t n = 0;
  argv[n++] = "processing-server";
  argv[n++] = "--processor";
  argv[n++] = proc;
  argv[n++] = "--exec";
  argv[n++] = it_proc("proc.sh");
  argv[n++] = it_fmt("--queue-file=%s", qfile);
  argv[n++] = it_fmt("--database-file=%s", dfile);
  argv[n++] = it_fmt("--log-dir=%s/joblogs", it_tmpdir());
  if (extra != NULL)
    argv[n++] = extra;
  argv[n] = NULL;
  return argv;
}

Test(secrets, urls_from_files_run_jobs_and_never_show_their_passwords) {
  char *proc = it_name("sec"), *results = it_name("sec-result"), *user = it_name("user");
  const char *pw = it_fmt("Pw-s3cret-%s", proc), *dbpw = it_fmt("Db-s3cret-%s", proc);
  const char *qfile, *dfile, *out;
  it_server_t *srv, *cli;
  it_msg_t m;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("URLs with passwords: RabbitMQ + PostgreSQL only");
  it_rabbitmqctl(it_fmt("add_user %s %s", user, pw));
  it_rabbitmqctl(it_fmt("set_permissions -p / %s '.*' '.*' '.*'", user));
  qfile = secret_file("queue.url", it_fmt("# the broker\n%s\n", amqp_as(user, pw)), 0600);
  dfile = secret_file("db.url", it_fmt("%s\n", db_with_password(dbpw)), 0600);
  it_declare(results);
  srv = it_mqproc_spawn(proc, server_args(proc, qfile, dfile, "--log-format=json"));
  cr_assert(it_server_wait_log(srv, "consuming from queue", WAIT_MS), "the server did not start");
  expect_not_in_cmdline(it_server_pid(srv), "s3cret");
  it_publish(proc, it_job_json(proc, "sec-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  /* the operators' commands read the same files */
  cli = it_mqproc_spawn("workers",
                        (const char *const[]){"workers", "--json", "--database-file", dfile, NULL});
  cr_assert_eq(it_server_wait_exit(cli, WAIT_MS), 0);
  cr_expect_gt(it_server_count_log(cli, proc), 0, "the server is not among the workers");
  cr_expect_eq(it_server_count_log(cli, "s3cret"), 0);
  it_server_stop(cli);
  out = it_fmt("--database-file=%s", dfile);
  cli =
      it_mqproc_spawn("submit", (const char *const[]){"submit", "--processor", proc, "--mets",
                                                      "/data/m.xml", "-I", "A", "-O", "B", "--wait",
                                                      it_fmt("--queue-file=%s", qfile), out, NULL});
  cr_assert_eq(it_server_wait_exit(cli, WAIT_MS), 0, "submit --wait over the files failed");
  cr_expect_gt(it_server_count_log(cli, "SUCCESS"), 0);
  cr_expect_eq(it_server_count_log(cli, "s3cret"), 0);
  it_server_stop(cli);
  /* the server's start line names both, masked */
  cr_expect(it_server_wait_log(srv, it_fmt("%s:***@", user), 1000), "no masked broker URL");
  cr_expect(it_server_wait_log(srv, "postgres:***@", 1000), "no masked database URL");
  cr_expect_eq(stop_and_count(srv, "s3cret"), 0, "a password in the server's log");
  it_rabbitmqctl(it_fmt("delete_user %s", user));
}

Test(secrets, connection_failures_name_the_server_without_its_password) {
  char *proc = it_name("secfail");
  const char *good_q, *good_d, *bad_q, *bad_d;
  it_server_t *srv, *cli;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("URLs with passwords: RabbitMQ + PostgreSQL only");
  good_q = secret_file("good-q.url", it_fmt("%s\n", it_amqp_url()), 0600);
  good_d = secret_file("good-d.url", it_fmt("%s\n", it_db_url()), 0600);
  bad_q = secret_file("bad-q.url", it_fmt("%s\n", amqp_as("guest", "Wrong-s3cret")), 0600);
  bad_d = secret_file("bad-d.url", "postgresql://postgres:Gone-s3cret@127.0.0.1:1/mqproc\n", 0600);
  /* the broker refuses the login */
  srv = it_mqproc_spawn(proc, server_args(proc, bad_q, good_d, NULL));
  cr_assert(it_server_wait_log(srv, "cannot connect to the broker", WAIT_MS), "no broker error");
  expect_not_in_cmdline(it_server_pid(srv), "s3cret");
  it_server_signal(srv, SIGTERM);
  it_server_wait_exit(srv, WAIT_MS);
  cr_expect_gt(it_server_count_log(srv, "guest:***@"), 0, "the log does not name the broker");
  cr_expect_eq(stop_and_count(srv, "s3cret"), 0, "a password in the server's log");
  /* the database is not there (the server retries, and stops at once when told to; JSON
   * lines this time) */
  srv = it_mqproc_spawn(proc, server_args(proc, good_q, bad_d, "--log-format=json"));
  cr_assert(it_server_wait_log(srv, "retrying in 1 s", WAIT_MS), "no database error");
  it_server_signal(srv, SIGTERM);
  it_server_wait_exit(srv, WAIT_MS);
  cr_expect_gt(it_server_count_log(srv, "postgres:***@127.0.0.1:1"), 0, "no masked URL");
  cr_expect_eq(stop_and_count(srv, "s3cret"), 0, "a password in the server's log");
  /* an operator's command */
  cli = it_mqproc_spawn("jobs",
                        (const char *const[]){"jobs", "list", "--database-file", bad_d, NULL});
  cr_expect_eq(it_server_wait_exit(cli, WAIT_MS), 1 << 8);
  cr_expect_gt(it_server_count_log(cli, "cannot connect to postgresql://postgres:***@"), 0);
  cr_expect_eq(it_server_count_log(cli, "s3cret"), 0);
  it_server_stop(cli);
}

Test(secrets, a_missing_url_file_stops_the_start_with_the_reason) {
  char *proc = it_name("secmiss");
  const char *missing = it_fmt("%s/no-such.url", it_tmpdir());
  const char *good_d = secret_file("d.url", it_fmt("%s\n", it_db_url()), 0600);
  it_server_t *srv = it_mqproc_spawn(proc, server_args(proc, missing, good_d, NULL));
  cr_expect_eq(it_server_wait_exit(srv, WAIT_MS), 2 << 8);
  cr_expect(it_server_wait_log(srv, it_fmt("--queue-file: cannot open %s", missing), 1000));
  it_server_stop(srv);
  /* the same URL on the command line and in a file: refused, so neither is ignored */
  srv = it_mqproc_spawn(proc,
                        (const char *const[]){"processing-server", "--processor", proc, "--exec",
                                              "/bin/true", "--queue", it_amqp_url(), "--queue-file",
                                              good_d, "--database-file", good_d, NULL});
  cr_expect_eq(it_server_wait_exit(srv, WAIT_MS), 2 << 8);
  cr_expect(it_server_wait_log(srv, "--queue and --queue-file are both given", 1000));
  it_server_stop(srv);
}
