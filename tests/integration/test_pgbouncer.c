/* Integration: the job store behind PgBouncer 1.18 in transaction pooling (issue "secure
 * and scaled out", item 7). PgBouncer hands each transaction to any server connection of
 * its pool, so named prepared statements, session SETs and LISTEN do not survive it;
 * --database-pooler makes the server use unnamed statements only, no session settings,
 * and read operators' wishes and cancels with its beat. The pool here has 2 server
 * connections for every client, so statements of different clients share backends. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000
#define JOBS 20

TestSuite(pgbouncer, .fini = it_cleanup);

static int port_open(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                          .sin_port = htons((uint16_t)port)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;
  ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(fd);
  return ok;
}

static void write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  cr_assert(fd >= 0, "%s", path);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
}

/* PgBouncer on a free port in front of database db of the test run's PostgreSQL; it will
 * not run as root, so as postgres when we are root. *pid gets its process. */
static int start_pgbouncer(const char *db, pid_t *pid) {
  int port = it_free_port();
  const char *dir = it_fmt("/tmp/mqproc-pgbouncer-%d", port),
             *ini = it_fmt("%s/pgbouncer.ini", dir);
  struct passwd *pg = getuid() == 0 ? getpwnam("postgres") : NULL;
  mkdir(dir, 0755);
  write_text(it_fmt("%s/userlist.txt", dir), "\"postgres\" \"\"\n");
  write_text(ini, it_fmt("[databases]\n%s = host=127.0.0.1 port=%s dbname=%s\n"
                         "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = %d\n"
                         "unix_socket_dir =\nauth_type = trust\nauth_file = %s/userlist.txt\n"
                         "pool_mode = transaction\ndefault_pool_size = 2\nmax_client_conn = 100\n"
                         "logfile = %s/pgbouncer.log\npidfile = %s/pgbouncer.pid\n",
                         db, getenv("MQPROC_TEST_PG_PORT"), db, port, dir, dir, dir));
  if (pg != NULL)
    cr_assert_eq(chown(dir, pg->pw_uid, pg->pw_gid), 0);
  *pid = fork();
  cr_assert_geq(*pid, 0);
  if (*pid == 0) {
    if (pg != NULL)
      execlp("runuser", "runuser", "-u", "postgres", "--", "/usr/sbin/pgbouncer", ini,
             (char *)NULL);
    else
      execlp("/usr/sbin/pgbouncer", "pgbouncer", ini, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200 && !port_open(port); i++)
    usleep(50 * 1000);
  cr_assert(port_open(port), "pgbouncer did not start: %s",
            it_read_file(it_fmt("%s/pgbouncer.log", dir)));
  return port;
}

static long count_direct(const char *db, const char *sql) {
  PGconn *c = PQconnectdb(
      it_fmt("host=127.0.0.1 port=%s user=postgres dbname=%s", getenv("MQPROC_TEST_PG_PORT"), db));
  PGresult *r;
  long n;
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
  r = PQexec(c, sql);
  cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
  n = atol(PQgetvalue(r, 0, 0));
  PQclear(r);
  PQfinish(c);
  return n;
}

Test(pgbouncer, jobs_and_a_cancel_through_transaction_pooling) {
  char *proc = it_name("pool"), *results = it_name("pool-result"), *out;
  const char *db = it_fmt("mqproc_pool_%d", (int)getpid()), *url;
  const char *gate = it_fmt("%s/gate", it_tmpdir());
  const char *env[] = {it_fmt("PROC_GATE_MATCH=long"), it_fmt("PROC_GATE=%s", gate), NULL};
  it_server_t *srv, *cli;
  pid_t bouncer;
  int port;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("PgBouncer: PostgreSQL only");
  it_sql(it_fmt("CREATE DATABASE %s", db), 0);
  port = start_pgbouncer(db, &bouncer);
  url = it_fmt("postgresql://postgres@127.0.0.1:%d/%s", port, db);
  cli = it_mqproc_spawn("migrate", (const char *const[]){"migrate", "--database", url, NULL});
  cr_assert_eq(it_server_wait_exit(cli, WAIT_MS), 0, "migrate through pgbouncer failed");
  it_server_stop(cli);
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"),
                        (const char *const[]){it_fmt("--database=%s", url), "--database-pooler",
                                              "--concurrency=2", "--prefetch=8", NULL},
                        (const char *const *)env);
  for (int i = 0; i < JOBS; i++)
    it_publish(proc, it_job_json(proc, it_fmt("pool-%d", i),
                                 it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  for (int i = 0; i < JOBS; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "result %d of %d missing", i + 1, JOBS);
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    it_msg_free(&m);
  }
  cr_expect_eq(count_direct(db, "SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'"), JOBS);
  /* a cancel: no LISTEN through the pool, so the server reads it with its beat */
  it_publish(proc, it_job_json(proc, "pool-long", NULL));
  cr_assert(it_server_wait_log(srv, "job pool-long: attempt 1 try 1 started", WAIT_MS));
  cr_assert_eq(it_mq(&out, "jobs", "cancel", "pool-long", "--database", url, NULL), 0, "%s", out);
  for (int i = 0; i < 400 && count_direct(db, "SELECT count(*) FROM mqproc_jobs WHERE job_id = "
                                              "'pool-long' AND state = 'CANCELLED'") == 0;
       i++)
    usleep(50 * 1000);
  cr_expect_eq(count_direct(db, "SELECT count(*) FROM mqproc_jobs WHERE job_id = 'pool-long' AND "
                                "state = 'CANCELLED'"),
               1, "the cancel did not reach the server through the pool");
  cr_expect_eq(it_server_count_log(srv, "prepared statement"), 0, "a prepared statement leaked");
  it_server_stop(srv);
  kill(bouncer, SIGTERM);
  waitpid(bouncer, NULL, 0);
}
