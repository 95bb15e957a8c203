/* Hardening of the SQLite store, the files mqproc makes, --on-failure and the supervisor
 * (issue 28, items 8, 11, 12, 13 and B1):
 * - the files a server or an operator's command makes are private (0600, directories
 *   0700) whatever the umask, or the group's with --group-access (0660/0770); a file that
 *   exists keeps its mode (a world-readable database is warned about);
 * - a database the server cannot write, or a path that is a directory or a device, stops
 *   it at start (exit 2, the reason said); a database corrupted under a running server is
 *   an outage: /readyz 503, mqproc_up{peer="database"} 0, no job run;
 * - a FIFO planted at the database's -control file blocks neither the server nor `mqproc
 *   pause`;
 * - --on-failure handlers run at most --on-failure-max at once, the others in turn;
 * - with --instances, a child whose loop is frozen (SIGSTOP) stops pinging the supervisor,
 *   which kills it and starts a new one; --http with a port gives instance k PORT + k - 1.
 * SQLite items skip on a PostgreSQL pair, dir:// items on an AMQP pair. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(store_hardening, .fini = it_cleanup);

static void need_sqlite(void) {
  if (!it_store_is_sqlite())
    cr_skip_test("an SQLite store item (MQPROC_TEST_STORE=sqlite)");
}

static void need_dir(void) {
  if (!it_queue_is_dir())
    cr_skip_test("a dir:// queue item (MQPROC_TEST_QUEUE=dir)");
}

/* A file's permission bits, -1 when it is missing. */
static int mode_of(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Waits until path exists (WAIT_MS). */
static int appears(const char *path) {
  for (int i = 0; i < WAIT_MS / 50; i++) {
    if (access(path, F_OK) == 0)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

/* The SQLite path of the harness's database (sqlite:///PATH). */
static const char *db_path(void) {
  return it_db_url() + strlen("sqlite://");
}

/* `sh -c script` with the output (stdout and stderr) into *out; the exit status. */
static int sh(const char *script, char **out) {
  const char *argv[] = {"/bin/sh", "-c", it_fmt("exec 2>&1; %s", script), NULL};
  return it_run(argv, NULL, NULL, out);
}

/* ---- item 8: the modes of what mqproc makes ------------------------------------------- */

/* A server on a database of its own (made by --migrate) that it has written to: the
 * database, its -wal, -shm and -control files, with extra (may be NULL) on the line. */
static void expect_database_files(const char *extra, int want) {
  char *dir = it_fmt("%s/own-db", it_tmpdir()), *db = it_fmt("%s/jobs.db", dir);
  const char *args[] = {"--database", it_fmt("sqlite://%s", db), "--migrate", extra, NULL};
  const char *suffix[] = {"", "-wal", "-shm", "-control"};
  it_server_t *srv;
  umask(022); /* the usual one: it would give 0644 and take the group's write bit */
  cr_assert_eq(mkdir(dir, 0755), 0);
  srv = it_server_start(it_name("modes"), it_proc("proc.sh"), args, NULL);
  for (size_t i = 0; i < 4; i++) {
    char *path = it_fmt("%s%s", db, suffix[i]);
    cr_assert(appears(path), "no %s", path);
    cr_expect_eq(mode_of(path), want, "%s: mode %04o, not %04o", path, mode_of(path), want);
  }
  it_server_stop(srv);
}

Test(store_hardening, the_database_and_its_wal_shm_and_control_files_are_private) {
  need_sqlite();
  expect_database_files(NULL, 0600);
}

Test(store_hardening, with_group_access_the_database_files_are_the_groups_whatever_the_umask) {
  need_sqlite();
  expect_database_files("--group-access", 0660);
}

Test(store_hardening, mqproc_migrate_makes_a_private_database_or_the_groups) {
  char *a = it_fmt("%s/migrated.db", it_tmpdir()), *b = it_fmt("%s/shared.db", it_tmpdir()), *out;
  const char *private_[] = {it_mqproc_bin(), "migrate", "--database", it_fmt("sqlite://%s", a),
                            NULL};
  const char *shared[] = {it_mqproc_bin(), "migrate", "--database", it_fmt("sqlite://%s", b), NULL};
  const char *env[] = {"MQPROC_GROUP_ACCESS=true", NULL};
  need_sqlite();
  umask(022);
  cr_assert_eq(it_run(private_, NULL, NULL, &out), 0);
  cr_expect_eq(mode_of(a), 0600, "mode %04o", mode_of(a));
  cr_assert_eq(it_run(shared, env, NULL, &out), 0);
  cr_expect_eq(mode_of(b), 0660, "MQPROC_GROUP_ACCESS: mode %04o", mode_of(b));
}

Test(store_hardening, an_existing_database_keeps_its_mode_and_a_world_readable_one_is_warned_of) {
  it_server_t *srv;
  need_sqlite();
  cr_assert_eq(chmod(db_path(), 0644), 0);
  srv = it_server_start(it_name("keep"), it_proc("proc.sh"), NULL, NULL);
  cr_expect(it_server_wait_log(srv, "every user of this host can read", WAIT_MS),
            "no warning about a world-readable database");
  cr_expect_eq(mode_of(db_path()), 0644, "the operator's mode was changed: %04o",
               mode_of(db_path()));
  it_server_stop(srv);
}

/* A dir:// spool the server makes (with extra, may be NULL): its directories, a result it
 * writes into another queue, a dead letter and its reason in failed/. */
static void expect_spool(const char *extra, int dirs, int files) {
  char *spool = it_fmt("%s/made-spool", it_tmpdir()), *proc = it_name("sp");
  char *rq = it_name("sp-res"), *q = it_fmt("%s/%s", spool, proc), *path, *res, *dead;
  /* (a message makes its result queue only where --result-queue-pattern allows) */
  const char *args[] = {"--queue", it_fmt("dir://%s", spool), "--result-queue-pattern=.*", extra,
                        NULL};
  it_server_t *srv;
  FILE *f;
  umask(022);
  srv = it_server_start(proc, it_proc("proc.sh"), args, NULL);
  /* a job with a result, then a file that is no job (dead-lettered): a shell producer's */
  path = it_fmt("%s/tmp/ok", q);
  cr_assert_not_null(f = fopen(path, "w"));
  fputs(it_job_json(proc, "sp-ok", it_fmt("{\"result_queue_name\": \"%s\"}", rq)), f);
  fclose(f);
  cr_assert_eq(rename(path, it_fmt("%s/new/50-ok", q)), 0);
  path = it_fmt("%s/tmp/junk", q);
  cr_assert_not_null(f = fopen(path, "w"));
  fputs("not a job", f);
  fclose(f);
  cr_assert_eq(rename(path, it_fmt("%s/new/50-junk", q)), 0);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'sp-ok'", "SUCCESS"));
  res = it_fmt("%s/%s/new", spool, rq);
  for (int i = 0; i < WAIT_MS / 50 && sh(it_fmt("ls %s/* >/dev/null", res), &dead) != 0; i++)
    usleep(50 * 1000);
  cr_assert(it_server_wait_log(srv, "dead-lettered to", WAIT_MS), "the junk was not dead-lettered");
  cr_expect_eq(mode_of(spool), dirs, "the spool: %04o", mode_of(spool));
  cr_expect_eq(mode_of(q), dirs, "the queue: %04o", mode_of(q));
  cr_expect_eq(mode_of(it_fmt("%s/new", q)), dirs);
  cr_expect_eq(mode_of(it_fmt("%s/failed", q)), dirs);
  cr_expect_eq(mode_of(it_fmt("%s/%s", spool, rq)), dirs, "the result queue's directory");
  cr_assert_eq(
      sh(it_fmt("for f in %s/* %s/failed/*; do stat -c '%%a %%n' \"$f\"; done", res, q), &dead), 0);
  cr_expect(strstr(dead, "/failed/") != NULL && strstr(dead, ".reason") != NULL,
            "no dead letter with its reason: %s", dead);
  for (char *line = strtok(dead, "\n"); line != NULL; line = strtok(NULL, "\n"))
    cr_expect_eq(strtol(line, NULL, 8), files, "%s (want %o)", line, files);
  it_server_stop(srv);
}

Test(store_hardening, a_spool_the_server_makes_is_private_and_so_are_its_files) {
  need_dir();
  expect_spool(NULL, 0700, 0600);
}

Test(store_hardening, with_group_access_the_spool_is_the_groups) {
  need_dir();
  expect_spool("--group-access", 0770, 0660);
}

Test(store_hardening, mqproc_submit_makes_a_private_spool_or_with_group_access_the_groups) {
  char *out, *proc = it_name("sub");
  need_dir();
  umask(022);
  for (int shared = 0; shared <= 1; shared++) {
    char *spool = it_fmt("%s/submit-spool-%d", it_tmpdir(), shared), *list;
    const char *argv[] = {it_mqproc_bin(),
                          "submit",
                          it_fmt("--queue=dir://%s", spool),
                          it_fmt("--processor=%s", proc),
                          "--mets=/m.xml",
                          "-I",
                          "IN",
                          "--job-id=sub-1",
                          shared ? "--group-access" : NULL,
                          NULL};
    cr_assert_eq(it_run(argv, NULL, NULL, &out), 0);
    cr_expect_eq(mode_of(spool), shared ? 0770 : 0700, "%s: %04o", spool, mode_of(spool));
    cr_expect_eq(mode_of(it_fmt("%s/%s/new", spool, proc)), shared ? 0770 : 0700);
    cr_assert_eq(sh(it_fmt("stat -c %%a %s/%s/new/*", spool, proc), &list), 0);
    cr_expect_eq(strtol(list, NULL, 8), shared ? 0660 : 0600, "the job file: %s", list);
  }
}

/* ---- item 11: a database that cannot be used ------------------------------------------ */

Test(store_hardening, a_database_the_server_cannot_write_stops_it_at_start_with_the_reason) {
  char *dir = it_fmt("%s/ro", it_tmpdir()), *db = it_fmt("%s/jobs.db", dir), *out, *cmd;
  const char *mig[] = {it_mqproc_bin(), "migrate", "--database", it_fmt("sqlite://%s", db), NULL};
  int root = geteuid() == 0, st;
  need_sqlite();
  cr_assert_eq(mkdir(dir, 0755), 0);
  cr_assert_eq(it_run(mig, NULL, NULL, &out), 0);
  cr_assert_eq(chmod(db, root ? 0644 : 0444), 0);
  cr_assert_eq(mkdir(it_fmt("%s/logs", dir), 0700), 0);
  if (root) { /* root writes any file: the server runs as nobody, the file stays root's */
    if (access("/usr/bin/setpriv", X_OK) != 0)
      cr_skip_test("running as root without setpriv to run the server as nobody");
    cr_assert_eq(chown(it_fmt("%s/logs", dir), 65534, 65534), 0);
    cr_assert_eq(chmod(it_tmpdir(), 0755), 0);
  }
  /* timeout: the unfixed server starts and waits for the store forever */
  cmd = it_fmt("%s timeout 60 %s processing-server --processor %s --exec %s --queue %s "
               "--database sqlite://%s --log-dir %s/logs",
               root ? "setpriv --reuid 65534 --regid 65534 --clear-groups" : "", it_mqproc_bin(),
               it_name("ro"), it_proc("proc.sh"), it_amqp_url(), db, dir);
  st = sh(cmd, &out);
  cr_expect_eq(st, 2, "exit status %d, not 2: %s", st, out);
  cr_expect(strstr(out, "cannot write the database") != NULL ||
                strstr(out, "attempt to write a readonly database") != NULL,
            "no reason: %s", out);
  cr_expect(strstr(out, "Sanitizer") == NULL && strstr(out, "runtime error") == NULL, "%s", out);
  cr_expect_eq(mode_of(db), root ? 0644 : 0444, "the database's mode changed");
}

/* A server on --database DATABASE exits 2 soon, saying why (why_part). */
static void expect_refused(const char *database, const char *why_part) {
  const char *args[] = {"--database", database, NULL};
  it_server_t *srv = it_server_spawn(it_name("bad-db"), it_proc("proc.sh"), args, NULL);
  int st = it_server_wait_exit(srv, 20000); /* not 60 tries a second apart */
  cr_expect(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2, "%s: wait status %d", database, st);
  cr_expect(it_server_wait_log(srv, why_part, 1000), "%s: no '%s' in the log", database, why_part);
  cr_expect_eq(it_server_count_log(srv, "retrying in 1 s"), 0, "%s was retried", database);
  it_server_stop(srv);
}

Test(store_hardening, a_database_path_that_is_a_directory_or_a_device_stops_the_server_at_start) {
  char *dir = it_fmt("%s/a-directory", it_tmpdir());
  need_sqlite();
  cr_assert_eq(mkdir(dir, 0755), 0);
  expect_refused(it_fmt("sqlite://%s", dir), "is a directory, not a file");
  expect_refused("sqlite:///dev/null", "is a character device, not a file");
  cr_expect_eq(access("/dev/null-wal", F_OK), -1, "SQLite made /dev/null-wal");
}

/* An open connection of the test's own to the server's database. */
static sqlite3 *own_db(void) {
  sqlite3 *db;
  cr_assert_eq(sqlite3_open(db_path(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 30000);
  return db;
}

/* Overwrites every page but the first (the header and the schema's root stay) with random
 * bytes, as a failing disk or a stray write would: dd if=/dev/urandom conv=notrunc. */
static void corrupt_pages(const char *path) {
  int fd = open(path, O_WRONLY), rnd = open("/dev/urandom", O_RDONLY);
  struct stat st;
  char page[4096];
  cr_assert(fd >= 0 && rnd >= 0 && fstat(fd, &st) == 0);
  cr_assert_gt(st.st_size, 4096 * 4, "a database of %lld bytes", (long long)st.st_size);
  for (off_t off = 4096; off < st.st_size; off += 4096) {
    cr_assert_eq(read(rnd, page, sizeof(page)), (ssize_t)sizeof(page));
    cr_assert_eq(pwrite(fd, page, sizeof(page), off), (ssize_t)sizeof(page));
  }
  fsync(fd);
  close(fd);
  close(rnd);
}

/* The value of metrics' mqproc_up line for peer (-1: none). */
static int up_of(const char *metrics, const char *peer) {
  char *want = it_fmt("peer=\"%s\"} ", peer);
  for (const char *p = metrics; (p = strstr(p, "\nmqproc_up{")) != NULL; p++) {
    const char *nl = strchr(p + 1, '\n'), *hit = strstr(p, want);
    if (hit != NULL && (nl == NULL || hit < nl))
      return atoi(hit + strlen(want));
  }
  return -1;
}

Test(store_hardening, a_database_corrupted_under_a_running_server_is_an_outage_it_reports) {
  char *proc = it_name("corrupt"), *marker = it_fmt("%s/marker", it_tmpdir()), *body = NULL;
  const char *args[] = {"--http", "127.0.0.1:0", NULL};
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *srv;
  sqlite3 *db;
  long ready = 0, unacked = 0;
  int port, code = 0, up = -1;
  need_sqlite();
  if (strcmp(it_amqp_url(), it_db_url()) == 0)
    cr_skip_test("the queue is in the database corrupted: nothing can be published into it");
  srv = it_server_start(proc, it_proc("proc.sh"), args, envp);
  port = it_http_port(srv);
  cr_assert_eq(it_http_get(port, "/readyz", &body), 200, "%s", body);
  /* every page in the file itself, then garbage over them */
  db = own_db();
  cr_assert_eq(sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
  corrupt_pages(db_path());
  /* a write of another connection (the header only): the server's cached pages are stale
     now, so it reads the file again */
  db = own_db();
  sqlite3_exec(db, "PRAGMA user_version = 42", NULL, NULL, NULL);
  sqlite3_close(db);
  it_publish(proc, it_job_json(proc, "corrupt-1", NULL));
  for (int i = 0; i < WAIT_MS / 200 && (code != 503 || up != 0); i++) {
    usleep(200 * 1000);
    code = it_http_get(port, "/readyz", &body);
    if (code == 503) {
      char *metrics;
      cr_assert_eq(it_http_get(port, "/metrics", &metrics), 200);
      up = up_of(metrics, "database");
    }
  }
  cr_expect_eq(code, 503, "/readyz on a corrupt database: %d %s", code, body);
  cr_expect(strstr(body, "database") != NULL, "%s", body);
  cr_expect_eq(up, 0, "mqproc_up{peer=\"database\"} is %d", up);
  cr_expect(it_server_wait_log(srv, "job store unreachable", WAIT_MS));
  cr_expect_eq(access(marker, F_OK), -1, "the job ran on a corrupt database");
  it_queue_counts(proc, &ready, &unacked);
  cr_expect_eq(ready + unacked, 1, "the job left the queue (%ld ready, %ld unacked)", ready,
               unacked);
  it_server_stop(srv);
}

/* ---- B1: the -control file ------------------------------------------------------------ */

Test(store_hardening, a_fifo_at_the_control_file_blocks_neither_the_server_nor_mqproc_pause) {
  char *proc = it_name("fifo"), *control = it_fmt("%s-control", db_path()), *body, *out;
  const char *args[] = {"--http", "127.0.0.1:0", NULL};
  it_server_t *srv;
  need_sqlite();
  unlink(control);
  cr_assert_eq(mkfifo(control, 0600), 0);
  srv = it_server_start(proc, it_proc("proc.sh"), args, NULL);
  cr_expect(it_server_wait_log(srv, "not a regular file", WAIT_MS), "the FIFO was not refused");
  cr_expect_eq(it_http_get(it_http_port(srv), "/healthz", &body), 200, "%s", body);
  it_publish(proc, it_job_json(proc, "fifo-1", NULL));
  cr_expect(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'fifo-1'", "SUCCESS"));
  /* the operators' side does not wait on it either: the wish arrives with a refresh */
  cr_expect_eq(it_mq(&out, "pause", proc, "--timeout", "30", NULL), 0, "%s", out);
  cr_expect_eq(it_mq(&out, "resume", proc, "--timeout", "30", NULL), 0, "%s", out);
  it_server_stop(srv);
}

/* ---- item 12: --on-failure-max --------------------------------------------------------- */

Test(store_hardening, on_failure_handlers_run_at_most_max_at_once_and_every_one_runs) {
  char *proc = it_name("ofm"), *spans = it_fmt("%s/handler-spans", it_tmpdir());
  char *gate = it_fmt("%s/handler-gate", it_tmpdir()), *script = it_fmt("%s/h.sh", it_tmpdir());
  const char *args[] = {"--retries=0", "--max-requeues=0", "--on-failure-max=2",
                        it_fmt("--on-failure=/bin/sh %s", script), NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=ofm-", it_fmt("PROC_HSPANS=%s", spans),
                        it_fmt("PROC_HGATE=%s", gate), NULL};
  it_server_t *srv;
  FILE *f;
  cr_assert_not_null(f = fopen(script, "w"));
  fputs("echo \"start $(date +%s%N) $MQPROC_JOB_ID\" >> \"$PROC_HSPANS\"\n"
        "while [ ! -e \"$PROC_HGATE\" ]; do sleep 0.05; done\n"
        "echo \"end $(date +%s%N) $MQPROC_JOB_ID\" >> \"$PROC_HSPANS\"\n",
        f);
  fclose(f);
  srv = it_server_start(proc, it_proc("proc.sh"), args, envp);
  for (int i = 1; i <= 10; i++)
    it_publish(proc, it_job_json(proc, it_fmt("ofm-%d", i), NULL));
  cr_assert(it_server_wait_count(srv, "--on-failure handler waits for a free place", 8, WAIT_MS),
            "8 of the 10 handlers should wait for the 2 running ones");
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'FAILED'", "10"));
  for (int i = 0; i < WAIT_MS / 50 && it_file_lines(spans) < 2; i++)
    usleep(50 * 1000);
  cr_expect_eq(it_server_count_log(srv, "--on-failure handler started"), 2);
  cr_expect_eq(it_file_lines(spans), 2, "handlers that started before the gate opened");
  it_open_gate(gate);
  cr_assert(it_server_wait_count(srv, "--on-failure handler done", 10, 2 * WAIT_MS),
            "not every waiting handler ran");
  cr_expect_eq(it_file_lines(spans), 20);
  cr_expect_leq(it_most_at_once(spans), 2, "more than --on-failure-max handlers at once");
  it_server_stop(srv);
}

Test(store_hardening, handlers_still_waiting_at_a_stop_are_freed_and_said) {
  char *proc = it_name("ofw"), *gate = it_fmt("%s/never", it_tmpdir());
  const char *args[] = {
      "--retries=0", "--max-requeues=0", "--on-failure-max=1",
      it_fmt("--on-failure=/bin/sh -c 'while [ ! -e %s ]; do sleep 0.05; done'", gate), NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=ofw-", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), args, envp);
  for (int i = 1; i <= 3; i++)
    it_publish(proc, it_job_json(proc, it_fmt("ofw-%d", i), NULL));
  cr_assert(it_server_wait_count(srv, "--on-failure handler waits for a free place", 2, WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_expect(it_server_wait_log(srv, "still waiting at exit: not run", WAIT_MS));
  it_server_stop(srv); /* exit 0, no leak report (LeakSanitizer) */
}

/* ---- item 13: the supervisor ---------------------------------------------------------- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A datagram socket as systemd's $NOTIFY_SOCKET. */
static int notify_socket(char *path, size_t n) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  cr_assert_geq(fd, 0);
  snprintf(path, n, "/tmp/mqproc-hard-notify-%d.sock", (int)getpid());
  unlink(path);
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  return fd;
}

/* Reads datagrams for up to timeout_ms, until one holds text (1; NULL text: the whole
 * time); counts the WATCHDOG=1 among them into *watchdogs. */
static int wait_notify(int fd, const char *text, int timeout_ms, int *watchdogs) {
  int64_t until = now_ms() + timeout_ms;
  for (;;) {
    char buf[512];
    struct pollfd p = {fd, POLLIN, 0};
    int64_t left = until - now_ms();
    ssize_t n;
    if (left <= 0 || poll(&p, 1, (int)left) <= 0)
      return 0;
    if ((n = recv(fd, buf, sizeof(buf) - 1, 0)) <= 0)
      continue;
    buf[n] = '\0';
    if (watchdogs != NULL && strstr(buf, "WATCHDOG=1") != NULL)
      (*watchdogs)++;
    if (text != NULL && strstr(buf, text) != NULL)
      return 1;
  }
}

static int holds(const pid_t *v, int n, pid_t p) {
  for (int i = 0; i < n; i++)
    if (v[i] == p)
      return 1;
  return 0;
}

Test(store_hardening, a_frozen_instance_is_killed_and_started_again_by_the_supervisor_watchdog) {
  char path[108];
  int fd = notify_socket(path, sizeof(path)), watchdogs = 0, n = 0, back = 0;
  const char *args[] = {"--instances", "2", NULL};
  const char *envp[] = {it_fmt("NOTIFY_SOCKET=%s", path), "WATCHDOG_USEC=2000000", NULL};
  it_server_t *srv = it_server_start(it_name("wd"), it_proc("proc.sh"), args, envp);
  pid_t kids[4], now[4], victim;
  cr_assert(it_server_wait_count(srv, "consuming from queue", 2, WAIT_MS));
  cr_assert(wait_notify(fd, "READY=1", WAIT_MS, &watchdogs), "no READY=1");
  cr_assert_eq(it_children_of(it_server_pid(srv), kids, 4), 2);
  victim = kids[0];
  kill(victim, SIGSTOP); /* its loop stops turning, as a wedged one would */
  cr_expect(it_server_wait_log(srv, "sent no watchdog ping", WAIT_MS),
            "the supervisor did not notice the frozen instance");
  for (int i = 0; i < WAIT_MS / 50 && !back; i++) {
    usleep(50 * 1000);
    n = it_children_of(it_server_pid(srv), now, 4);
    back = n == 2 && !holds(now, n, victim);
  }
  cr_expect(back, "the frozen instance (pid %d) was not replaced", (int)victim);
  cr_expect(it_server_wait_log(srv, "killed by signal 9", WAIT_MS));
  /* and the group's pings go on (none was held: the frozen one was replaced in time) */
  watchdogs = 0;
  wait_notify(fd, NULL, 3000, &watchdogs);
  cr_expect_geq(watchdogs, 2, "%d WATCHDOG=1 in 3 s after the restart", watchdogs);
  if (!back)
    kill(victim, SIGKILL);
  it_server_stop(srv);
  close(fd);
  unlink(path);
}

/* A port p on 127.0.0.1 with p + 1 free as well. */
static int two_free_ports(void) {
  for (int i = 0; i < 50; i++) {
    int p = it_free_port(), fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (p >= 65535)
      continue;
    a.sin_port = htons((uint16_t)(p + 1));
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    if (ok)
      return p;
  }
  cr_assert_fail("no two free ports in a row");
  return 0;
}

Test(store_hardening, instances_with_a_fixed_http_port_each_serve_on_port_plus_their_index) {
  int port = two_free_ports();
  char *body;
  const char *args[] = {"--instances", "2", "--http", it_fmt("127.0.0.1:%d", port), NULL};
  it_server_t *srv = it_server_start(it_name("ports"), it_proc("proc.sh"), args, NULL);
  cr_assert(it_server_wait_count(srv, "consuming from queue", 2, WAIT_MS),
            "both instances consume");
  cr_expect(it_server_wait_log(srv, "instance k serves on port", WAIT_MS));
  cr_expect(it_server_wait_log(srv, it_fmt("(port %d)", port), WAIT_MS));
  cr_expect(it_server_wait_log(srv, it_fmt("(port %d)", port + 1), WAIT_MS));
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200, "instance 1: %s", body);
  cr_expect_eq(it_http_get(port + 1, "/healthz", &body), 200, "instance 2: %s", body);
  it_server_stop(srv);
}
