/* Integration: TLS to the broker (amqps://, --tls-*) and to the database (libpq's
 * sslmode=verify-full), on the private RabbitMQ's amqps listener and PostgreSQL with
 * ssl=on, both with a throwaway CA made for this run (scripts/make-certs.sh; the services
 * start with MQPROC_SERVICES_TLS=1, as scripts/test.sh does). Jobs flow over both; a wrong
 * CA, an expired certificate and a wrong host name each fail with the reason, and the
 * server keeps trying as it does through any broker outage. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(tls, .fini = it_cleanup);

static const char *tls_file(const char *name) {
  const char *dir = getenv("MQPROC_TEST_TLS_DIR");
  cr_assert(dir != NULL && getenv("MQPROC_TEST_AMQPS_PORT") != NULL,
            "no TLS on the test services: start them with MQPROC_SERVICES_TLS=1 "
            "(scripts/test.sh does)");
  return it_fmt("%s/%s", dir, name);
}

static const char *amqps_url(const char *host, const char *port) {
  return it_fmt("amqps://guest:guest@%s:%s", host,
                port != NULL ? port : getenv("MQPROC_TEST_AMQPS_PORT"));
}

/* This test's database, by host name, with libpq's TLS settings added. */
static const char *db_tls(const char *ca, int client_cert) {
  const char *url = it_db_url(), *ip = strstr(url, "127.0.0.1");
  cr_assert_not_null(ip, "%s", url);
  return it_fmt(
      "%.*slocalhost%s&sslmode=verify-full&sslrootcert=%s%s", (int)(ip - url), url,
      ip + strlen("127.0.0.1"), ca,
      client_cert ? it_fmt("&sslcert=%s&sslkey=%s", tls_file("client.pem"), tls_file("client.key"))
                  : "");
}

static it_server_t *spawn(const char *proc, const char *queue, const char *db,
                          const char *const *more) {
  const char *argv[24];
  size_t n = 0;
  argv[n++] = "processing-server";
  argv[n++] = "--processor";
  argv[n++] = proc;
  argv[n++] = "--exec";
  argv[n++] = it_proc("proc.sh");
  argv[n++] = it_fmt("--queue=%s", queue);
  argv[n++] = it_fmt("--database=%s", db);
  argv[n++] = it_fmt("--log-dir=%s/joblogs", it_tmpdir());
  for (; more != NULL && *more != NULL && n < 23; more++)
    argv[n++] = *more;
  argv[n] = NULL;
  return it_mqproc_spawn(proc, argv);
}

Test(tls, jobs_flow_over_amqps_and_a_verified_database_connection) {
  char *proc = it_name("tls"), *results = it_name("tls-result");
  it_server_t *srv;
  it_msg_t m;
  const char *more[] = {it_fmt("--tls-ca=%s", tls_file("ca.pem")),
                        it_fmt("--tls-cert=%s", tls_file("client.pem")),
                        it_fmt("--tls-key=%s", tls_file("client.key")), NULL};
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("TLS: RabbitMQ + PostgreSQL only");
  it_declare(results);
  srv = spawn(proc, amqps_url("localhost", NULL), db_tls(tls_file("ca.pem"), 1), more);
  cr_assert(it_server_wait_log(srv, "consuming from queue", WAIT_MS), "no start over TLS");
  it_publish(proc, it_job_json(proc, "tls-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result over TLS");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  /* the database saw our client certificate on a TLS connection */
  cr_expect_geq(it_sql_long("SELECT count(*) FROM pg_stat_ssl WHERE ssl AND client_dn = "
                            "'/CN=mqproc'",
                            0),
                1, "no TLS connection with the client certificate");
  /* the operators' commands too */
  {
    it_server_t *cli = it_mqproc_spawn(
        "stats",
        (const char *const[]){"stats", "--processor", proc, "--queue", amqps_url("localhost", NULL),
                              it_fmt("--tls-ca=%s", tls_file("ca.pem")), "--database",
                              db_tls(tls_file("ca.pem"), 0), NULL});
    cr_expect_eq(it_server_wait_exit(cli, WAIT_MS), 0);
    cr_expect(it_server_wait_log(cli, "1 consumer(s)", 1000), "no queue line over TLS");
    cr_expect_eq(it_server_count_log(cli, "cannot connect"), 0);
    it_server_stop(cli);
  }
  it_server_stop(srv);
}

/* `openssl s_server` presenting cert on 127.0.0.1:port until killed. */
static pid_t tls_listener(int port, const char *cert, const char *key) {
  const char *out = it_fmt("%s/s_server-%d.out", it_tmpdir(), port);
  char *text = NULL;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    execlp("openssl", "openssl", "s_server", "-accept", it_fmt("127.0.0.1:%d", port), "-cert", cert,
           "-key", key, (char *)NULL);
    _exit(127);
  }
  for (int i = 0; i < 200; i++) { /* it says ACCEPT once it listens */
    if ((text = it_read_file(out)) != NULL && strstr(text, "ACCEPT") != NULL)
      return pid;
    usleep(50 * 1000);
  }
  cr_assert_fail("openssl s_server did not start: %s", text != NULL ? text : "");
  return -1;
}

static void expect_refused_and_retried(it_server_t *srv, const char *reason) {
  cr_expect(it_server_wait_log(srv, reason, WAIT_MS), "no '%s' in the log", reason);
  /* a broker outage, not a configuration error: it tries again */
  cr_expect(it_server_wait_count(srv, reason, 2, WAIT_MS), "it did not try again");
  cr_expect_eq(it_server_count_log(srv, "this will not fix itself"), 0);
}

Test(tls, bad_certificates_fail_with_the_reason_and_the_server_keeps_trying) {
  char *proc = it_name("tlsbad");
  const char *db = it_db_url();
  int port;
  pid_t listener;
  it_server_t *srv;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("TLS: RabbitMQ + PostgreSQL only");
  /* a CA the broker's certificate does not chain to */
  srv = spawn(proc, amqps_url("localhost", NULL), db,
              (const char *const[]){it_fmt("--tls-ca=%s", tls_file("other-ca.pem")), NULL});
  expect_refused_and_retried(srv, "the broker's certificate was refused: self-signed certificate "
                                  "in certificate chain");
  it_server_stop(srv);
  /* a host name the certificate is not for (it names localhost only) */
  srv = spawn(proc, amqps_url("127.0.0.1", NULL), db,
              (const char *const[]){it_fmt("--tls-ca=%s", tls_file("ca.pem")), NULL});
  expect_refused_and_retried(srv, "the broker's certificate is not for the host name '127.0.0.1'");
  it_server_stop(srv);
  /* an expired certificate, from a TLS listener of our own */
  port = it_free_port();
  listener = tls_listener(port, tls_file("expired.pem"), tls_file("expired.key"));
  srv = spawn(proc, amqps_url("localhost", it_fmt("%d", port)), db,
              (const char *const[]){it_fmt("--tls-ca=%s", tls_file("ca.pem")), NULL});
  expect_refused_and_retried(srv, "the broker's certificate was refused: certificate has expired");
  it_server_stop(srv);
  kill(listener, SIGKILL);
  waitpid(listener, NULL, 0);
  /* --tls-verify=none takes the wrong host name, with a warning */
  srv = spawn(proc, amqps_url("127.0.0.1", NULL), db,
              (const char *const[]){"--tls-verify=none", NULL});
  cr_expect(it_server_wait_log(srv, "consuming from queue", WAIT_MS), "no start with verify none");
  cr_expect_gt(it_server_count_log(srv, "the broker's certificate is NOT checked"), 0);
  it_server_stop(srv);
  /* a CA file that is not there: a configuration error, it stops (exit 2) */
  srv = spawn(proc, amqps_url("localhost", NULL), db,
              (const char *const[]){"--tls-ca=/nonexistent/ca.pem", NULL});
  cr_expect_eq(it_server_wait_exit(srv, WAIT_MS), 2 << 8);
  cr_expect_gt(it_server_count_log(srv, "--tls-ca: cannot load the CA certificates in "
                                        "/nonexistent/ca.pem"),
               0);
  it_server_stop(srv);
}

Test(tls, a_database_certificate_from_another_ca_is_refused_with_the_reason) {
  char *proc = it_name("tlsdb");
  it_server_t *srv;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("TLS: RabbitMQ + PostgreSQL only");
  srv = spawn(proc, it_amqp_url(), db_tls(tls_file("other-ca.pem"), 0), NULL);
  cr_expect(it_server_wait_count(srv, "certificate verify failed", 2, WAIT_MS),
            "no libpq reason, or no second try");
  it_server_stop(srv);
}

/* ---- broker lists (failover) ---------------------------------------------------------- */

Test(tls, a_broker_list_passes_over_a_dead_broker_in_any_order) {
  char *proc = it_name("list");
  const char *dead = it_fmt("amqp://guest:guest@127.0.0.1:%d", it_free_port());
  it_server_t *srv;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("broker lists: RabbitMQ only");
  /* both orders: the shuffle may try either first; each start must consume */
  for (int i = 0; i < 4; i++) {
    srv = spawn(
        proc, i % 2 ? it_fmt("%s, %s", dead, it_amqp_url()) : it_fmt("%s,%s", it_amqp_url(), dead),
        it_db_url(), NULL);
    cr_expect(it_server_wait_log(srv, "consuming from queue", WAIT_MS), "round %d: no start", i);
    cr_expect(it_server_wait_log(srv, "(of 2 in the list)", 1000), "round %d: no broker line", i);
    it_server_stop(srv);
  }
  /* all of them dead: each one's reason, and it keeps trying */
  srv = spawn(proc, it_fmt("%s,amqp://guest:guest@127.0.0.1:%d", dead, it_free_port()), it_db_url(),
              NULL);
  cr_expect(it_server_wait_count(
      srv, "no broker of the list let us in: cannot connect to 127.0.0.1:", 2, WAIT_MS));
  cr_expect(it_server_wait_log(srv, "; cannot connect to 127.0.0.1:", 1000), "not each reason");
  it_server_stop(srv);
}
