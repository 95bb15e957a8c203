/* Integration-test harness (see harness.h). */
#include "harness.h"
#include "harness_int.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mqproc/mqproc.h"
#include "base/log.h"
#include "store/store.h"

extern char **environ;

/* ---- environment -------------------------------------------------------------------- */

static char *g_amqp, *g_pg, *g_svcdir, *g_dburl, *g_tmpdir;

static void load_env_file(void) {
  const char *dir = getenv("MQPROC_SERVICES_DIR");
  char path[1024], line[2048];
  FILE *f;
  snprintf(path, sizeof(path), "%s/env", dir != NULL ? dir : MQPROC_SOURCE_DIR "/build/services");
  f = fopen(path, "r");
  cr_assert_not_null(f, "services are not running (no %s): run scripts/test.sh", path);
  while (fgets(line, sizeof(line), f) != NULL) {
    char *eq = strchr(line, '='), *v;
    size_t n;
    if (line[0] == '#' || eq == NULL)
      continue;
    *eq = '\0';
    v = eq + 1;
    n = strcspn(v, "\n");
    v[n] = '\0';
    if (v[0] == '\'' && n >= 2 && v[n - 1] == '\'') {
      v[n - 1] = '\0';
      v++;
    }
    setenv(line, v, 1);
  }
  fclose(f);
}

static void init_env(void) {
  if (g_amqp != NULL)
    return;
  load_env_file(); /* $MQPROC_SERVICES_DIR/env wins over inherited variables */

  g_amqp = strdup(getenv("MQPROC_TEST_AMQP_URL"));
  g_pg = strdup(getenv("MQPROC_TEST_PG_URL"));
  g_svcdir = strdup(getenv("MQPROC_SERVICES_DIR"));
}

const char *it_amqp_url(void) {
  init_env();
  return it_queue_is_dir() ? it_dir_url() : it_queue_is_table() ? it_tq_url() : g_amqp;
}

/* ---- strings owned by the harness ---------------------------------------------------- */

static char **g_kept;
static size_t g_n_kept;

static char *keep(char *p) {
  g_kept = realloc(g_kept, (g_n_kept + 1) * sizeof(char *));
  cr_assert_not_null(g_kept);
  g_kept[g_n_kept++] = p;
  return p;
}

char *it_fmt(const char *fmt, ...) {
  va_list ap;
  char *out;
  va_start(ap, fmt);
  cr_assert_geq(vasprintf(&out, fmt, ap), 0);
  va_end(ap);
  return keep(out);
}

/* Names this test's queues, schema and directory: the pid alone may come back within one
 * run (pid_max is often 32768 and every rabbitmqctl starts a dozen processes), so a clock
 * reading joins it. Recomputed in each test process. */
static const char *tag(void) {
  static char buf[32];
  static pid_t owner;
  if (owner != getpid()) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    owner = getpid();
    snprintf(buf, sizeof(buf), "t%dx%04lx", (int)owner,
             (unsigned long)((ts.tv_nsec / 1000) ^ ts.tv_sec) & 0xffff);
  }
  return buf;
}

char *it_name(const char *suffix) {
  return it_fmt("ocrd-%s-%s", tag(), suffix);
}

const char *it_tmpdir(void) {
  if (g_tmpdir == NULL) {
    char path[512];
    snprintf(path, sizeof(path), "%s/tests/tmp/%s", MQPROC_BUILD_DIR, tag());
    mkdir(MQPROC_BUILD_DIR "/tests", 0755);
    mkdir(MQPROC_BUILD_DIR "/tests/tmp", 0755);
    mkdir(path, 0755);
    g_tmpdir = strdup(path);
  }
  return g_tmpdir;
}

/* ---- SQL ---------------------------------------------------------------------------- */

static PGconn *g_conn;

static PGconn *pg(void) {
  if (g_conn == NULL) {
    g_conn = PQconnectdb(it_db_url());
    cr_assert_eq(PQstatus(g_conn), CONNECTION_OK, "cannot connect: %s", PQerrorMessage(g_conn));
  }
  return g_conn;
}

const char *it_db_url(void) {
  return it_store_is_sqlite() ? it_sqlite_url() : it_pg_url();
}

const char *it_pg_url(void) {
  char schema[64], err[MQPROC_ERR_LEN], sql[256];
  PGconn *c;
  mqproc__store_t *st;
  if (g_dburl != NULL)
    return g_dburl;
  init_env();
  snprintf(schema, sizeof(schema), "%s", tag());
  c = PQconnectdb(g_pg);
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "cannot connect to %s", g_pg);
  PQclear(PQexec(c, "SET client_min_messages = warning"));
  snprintf(sql, sizeof(sql), "DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", schema, schema);
  PQclear(PQexec(c, sql));
  PQfinish(c);
  cr_assert_gt(asprintf(&g_dburl, "%s%coptions=-csearch_path%%3D%s", g_pg,
                        strchr(g_pg, '?') ? '&' : '?', schema),
               0);
  mqproc__log_set_level(MQPROC__LOG_WARN);
  cr_assert_eq(mqproc__store_pg_new(&st, g_dburl, NULL, err), MQPROC_OK);
  cr_assert_eq(mqproc__store_migrate(st, err), MQPROC_OK, "migrate: %s", err);
  mqproc__store_destroy(st);
  return g_dburl;
}

char *it_pg_try_as(const char *role, char **cell, const char *sql, int n, ...) {
  const char *keys[] = {"dbname", "user", NULL}, *conn_vals[] = {it_pg_url(), role, NULL};
  const char *vals[16];
  char *failed = NULL;
  PGconn *c;
  PGresult *r;
  va_list ap;
  if (cell != NULL)
    *cell = NULL;
  va_start(ap, n);
  for (int i = 0; i < n && i < 16; i++)
    vals[i] = va_arg(ap, const char *);
  va_end(ap);
  c = PQconnectdbParams(keys, conn_vals, 1); /* the URL, with its user replaced */
  cr_assert_eq(PQstatus(c), CONNECTION_OK, "cannot connect as %s: %s", role, PQerrorMessage(c));
  /* without parameters, statements after each other in one session (the last one's row) */
  r = n == 0 ? PQexec(c, sql) : PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
  if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
    failed = keep(strdup(PQresultErrorMessage(r)));
  else if (cell != NULL && PQntuples(r) > 0 && PQnfields(r) > 0 && !PQgetisnull(r, 0, 0))
    *cell = keep(strdup(PQgetvalue(r, 0, 0)));
  PQclear(r);
  PQfinish(c);
  return failed;
}

static PGresult *vquery(const char *sql, int n, va_list ap) {
  const char *vals[16];
  PGresult *r;
  for (int i = 0; i < n && i < 16; i++)
    vals[i] = va_arg(ap, const char *);
  r = PQexecParams(pg(), sql, n, NULL, vals, NULL, NULL, 0);
  if (PQstatus(g_conn) == CONNECTION_BAD) { /* the database restarted (a fault test): again */
    PQclear(r);
    PQreset(g_conn);
    r = PQexecParams(pg(), sql, n, NULL, vals, NULL, NULL, 0);
  }
  cr_assert(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK, "%s: %s",
            sql, PQresultErrorMessage(r));
  return r;
}

char *it_sql(const char *sql, int n, ...) {
  va_list ap;
  PGresult *r;
  char *out = NULL;
  if (it_store_is_sqlite()) {
    int found;
    va_start(ap, n);
    out = it_sqlite_first(sql, n, ap, &found);
    va_end(ap);
    return out;
  }
  va_start(ap, n);
  r = vquery(sql, n, ap);
  va_end(ap);
  if (PQntuples(r) > 0 && !PQgetisnull(r, 0, 0))
    out = keep(strdup(PQgetvalue(r, 0, 0)));
  PQclear(r);
  return out;
}

long it_sql_long(const char *sql, int n, ...) {
  va_list ap;
  PGresult *r;
  long out = -1;
  if (it_store_is_sqlite()) {
    int found;
    char *v;
    va_start(ap, n);
    v = it_sqlite_first(sql, n, ap, &found);
    va_end(ap);
    cr_assert(found, "no row: %s", sql);
    return v != NULL ? atol(v) : -1;
  }
  va_start(ap, n);
  r = vquery(sql, n, ap);
  va_end(ap);
  cr_assert_gt(PQntuples(r), 0, "no row: %s", sql);
  if (!PQgetisnull(r, 0, 0))
    out = atol(PQgetvalue(r, 0, 0));
  PQclear(r);
  return out;
}

/* ---- AMQP --------------------------------------------------------------------------- */

static amqp_connection_state_t g_amqp_conn;

static void check_rpc(const char *what) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(g_amqp_conn);
  cr_assert_eq(r.reply_type, AMQP_RESPONSE_NORMAL, "%s failed (reply type %d)", what, r.reply_type);
}

static amqp_connection_state_t amqp(void) {
  struct amqp_connection_info ci;
  amqp_socket_t *sock;
  char *url;
  if (g_amqp_conn != NULL)
    return g_amqp_conn;
  url = strdup(it_amqp_url());
  cr_assert_eq(amqp_parse_url(url, &ci), AMQP_STATUS_OK);
  g_amqp_conn = amqp_new_connection();
  sock = amqp_tcp_socket_new(g_amqp_conn);
  cr_assert_eq(amqp_socket_open(sock, ci.host, ci.port), AMQP_STATUS_OK, "broker unreachable");
  cr_assert_eq(
      amqp_login(g_amqp_conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password)
          .reply_type,
      AMQP_RESPONSE_NORMAL);
  free(url);
  amqp_channel_open(g_amqp_conn, 1);
  check_rpc("channel.open");
  amqp_exchange_declare(g_amqp_conn, 1, amqp_cstring_bytes("ocrd-network-default"),
                        amqp_cstring_bytes("direct"), 0, 0, 0, 0, amqp_empty_table);
  check_rpc("exchange.declare"); /* non-durable, as OCR-D and mqproc declare it */
  amqp_basic_qos(g_amqp_conn, 1, 0, 1, 0);
  check_rpc("basic.qos");
  return g_amqp_conn;
}

void it_declare(const char *queue) {
  if (it_queue_is_dir()) {
    it_dir_declare(queue);
    return;
  }
  if (it_queue_is_table()) /* a queue is its rows */
    return;
  amqp_queue_declare(amqp(), 1, amqp_cstring_bytes(queue), 0, 1, 0, 0, amqp_empty_table);
  check_rpc("queue.declare");
  amqp_queue_bind(amqp(), 1, amqp_cstring_bytes(queue), amqp_cstring_bytes("ocrd-network-default"),
                  amqp_cstring_bytes(queue), amqp_empty_table);
  check_rpc("queue.bind");
}

void it_delete_queue(const char *queue) {
  if (it_queue_is_dir()) {
    it_dir_delete(queue);
    return;
  }
  if (it_queue_is_table()) {
    it_tq_delete(queue);
    return;
  }
  amqp_queue_delete(amqp(), 1, amqp_cstring_bytes(queue), 0, 0);
  check_rpc("queue.delete");
}

void it_publish_len(const char *rk, const void *body, size_t len) {
  amqp_basic_properties_t p;
  if (it_queue_is_dir()) {
    it_dir_publish(rk, body, len);
    return;
  }
  if (it_queue_is_table()) {
    it_tq_publish(rk, body, len);
    return;
  }
  memset(&p, 0, sizeof(p));
  p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
  p.delivery_mode = 2;
  p.content_type = amqp_cstring_bytes("application/json"); /* as OCR-D says, even for YAML */
  cr_assert_eq(amqp_basic_publish(amqp(), 1, amqp_cstring_bytes("ocrd-network-default"),
                                  amqp_cstring_bytes(rk), 0, 0, &p,
                                  (amqp_bytes_t){.len = len, .bytes = (void *)body}),
               AMQP_STATUS_OK);
}

void it_publish(const char *rk, const char *body) {
  it_publish_len(rk, body, strlen(body));
}

static char *dup_bytes(amqp_bytes_t b) {
  char *s = malloc(b.len + 1);
  memcpy(s, b.bytes, b.len);
  s[b.len] = '\0';
  return s;
}

static void copy_msg(const amqp_envelope_t *env, it_msg_t *out) {
  const amqp_basic_properties_t *p = &env->message.properties;
  memset(out, 0, sizeof(*out));
  out->body = dup_bytes(env->message.body);
  out->len = env->message.body.len;
  out->redelivered = env->redelivered;
  out->content_type =
      (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG) ? dup_bytes(p->content_type) : strdup("");
  out->message_id =
      (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) ? dup_bytes(p->message_id) : strdup("");
  out->reason = out->attempt = NULL;
  out->priority = (p->_flags & AMQP_BASIC_PRIORITY_FLAG) ? p->priority : -1;
  out->headers = it_fmt("%s", "");
  for (int i = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) && i < p->headers.num_entries; i++) {
    const amqp_table_entry_t *e = &p->headers.entries[i];
    if (e->value.kind != AMQP_FIELD_KIND_UTF8)
      continue;
    out->headers = it_fmt("%s%.*s=%.*s\n", out->headers, (int)e->key.len, (char *)e->key.bytes,
                          (int)e->value.value.bytes.len, (char *)e->value.value.bytes.bytes);
    if (e->key.len == 15 && memcmp(e->key.bytes, "x-mqproc-reason", 15) == 0)
      out->reason = dup_bytes(e->value.value.bytes);
    else if (e->key.len == 16 && memcmp(e->key.bytes, "x-mqproc-attempt", 16) == 0)
      out->attempt = dup_bytes(e->value.value.bytes);
  }
  if (out->reason == NULL)
    out->reason = strdup("");
  if (out->attempt == NULL)
    out->attempt = strdup("");
}

/* Consumes one message of queue (prefetch 1) and settles it: ack, or nack + requeue. */
static int take_one(const char *queue, int timeout_ms, it_msg_t *out, int requeue) {
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  amqp_basic_consume_ok_t *ok;
  amqp_envelope_t env;
  amqp_rpc_reply_t r;
  amqp_bytes_t tag;
  int got = 0;
  ok = amqp_basic_consume(amqp(), 1, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                          amqp_empty_table);
  check_rpc("basic.consume");
  tag = amqp_bytes_malloc_dup(ok->consumer_tag);
  amqp_maybe_release_buffers(amqp());
  r = amqp_consume_message(amqp(), &env, &tv, 0);
  if (r.reply_type == AMQP_RESPONSE_NORMAL) {
    if (out != NULL)
      copy_msg(&env, out);
    got = 1;
  } else {
    cr_assert(r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                  r.library_error == AMQP_STATUS_TIMEOUT,
              "consume on %s failed", queue);
  }
  /* cancel before settling: with prefetch 1 nothing else is pushed to us meanwhile */
  amqp_basic_cancel(amqp(), 1, tag);
  check_rpc("basic.cancel");
  amqp_bytes_free(tag);
  if (got) {
    if (requeue)
      cr_assert_eq(amqp_basic_nack(amqp(), 1, env.delivery_tag, 0, 1), AMQP_STATUS_OK);
    else
      cr_assert_eq(amqp_basic_ack(amqp(), 1, env.delivery_tag, 0), AMQP_STATUS_OK);
    amqp_destroy_envelope(&env);
  }
  return got;
}

int it_get(const char *queue, int timeout_ms, it_msg_t *out) {
  if (it_queue_is_dir())
    return it_dir_take(queue, timeout_ms, out, 0);
  if (it_queue_is_table())
    return it_tq_take(queue, timeout_ms, out, 0);
  return take_one(queue, timeout_ms, out, 0);
}

int it_requeue_one(const char *queue, int timeout_ms) {
  if (it_queue_is_dir())
    return it_dir_take(queue, timeout_ms, NULL, 1);
  if (it_queue_is_table())
    return it_tq_take(queue, timeout_ms, NULL, 1);
  return take_one(queue, timeout_ms, NULL, 1);
}

void it_msg_free(it_msg_t *m) {
  free(m->body);
  free(m->content_type);
  free(m->message_id);
  free(m->attempt);
  free(m->reason);
  memset(m, 0, sizeof(*m));
  /* headers: it_fmt()'s, freed by it_cleanup() */
}

void it_queue_counts(const char *queue, long *ready, long *unacked) {
  char cmd[1024], line[1024], name[512];
  FILE *p;
  init_env();
  if (it_queue_is_dir()) {
    it_dir_counts(queue, ready, unacked);
    return;
  }
  if (it_queue_is_table()) {
    it_tq_counts(queue, ready, unacked);
    return;
  }
  *ready = *unacked = -1;
  snprintf(cmd, sizeof(cmd),
           "bash %s/scripts/services.sh rabbitmqctl %s list_queues -q --no-table-headers name "
           "messages_ready messages_unacknowledged 2>/dev/null",
           MQPROC_SOURCE_DIR, g_svcdir);
  p = popen(cmd, "r");
  cr_assert_not_null(p);
  while (fgets(line, sizeof(line), p) != NULL) {
    long r, u;
    if (sscanf(line, "%511s %ld %ld", name, &r, &u) == 3 && strcmp(name, queue) == 0) {
      *ready = r;
      *unacked = u;
    }
  }
  pclose(p);
  cr_assert_geq(*ready, 0, "queue %s not listed by rabbitmqctl", queue);
}

void it_services(const char *cmd) {
  char line[1024];
  int rc;
  init_env();
  snprintf(line, sizeof(line), "bash %s/scripts/services.sh %s %s >/dev/null 2>&1",
           MQPROC_SOURCE_DIR, cmd, g_svcdir);
  if (strstr(cmd, "rabbitmq") != NULL && g_amqp_conn != NULL) { /* reconnect afterwards */
    amqp_destroy_connection(g_amqp_conn);
    g_amqp_conn = NULL;
  }
  rc = system(line);
  cr_assert_eq(rc, 0, "services.sh %s failed (%d)", cmd, rc);
}

/* ---- servers ------------------------------------------------------------------------ */

struct it_server {
  pid_t pid;
  int out_fd;
  pthread_t reader;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  char **lines;
  size_t n_lines;
  int eof;
  FILE *log;
  int waited;
  int wstatus;
};

/* Servers of this test not yet seen exiting: killed by it_cleanup() when a failed
 * assertion ended the test before it stopped them. */
static pid_t g_live[64];

static void live_add(pid_t pid) {
  for (size_t i = 0; i < sizeof(g_live) / sizeof(g_live[0]); i++)
    if (g_live[i] == 0) {
      g_live[i] = pid;
      return;
    }
}

static void live_drop(pid_t pid) {
  for (size_t i = 0; i < sizeof(g_live) / sizeof(g_live[0]); i++)
    if (g_live[i] == pid)
      g_live[i] = 0;
}

static void *reader_main(void *arg) {
  it_server_t *s = arg;
  FILE *in = fdopen(s->out_fd, "r");
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, in) > 0) {
    pthread_mutex_lock(&s->lock);
    fputs(line, s->log);
    fflush(s->log);
    s->lines = realloc(s->lines, (s->n_lines + 1) * sizeof(char *));
    s->lines[s->n_lines++] = strdup(line);
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
  }
  free(line);
  fclose(in);
  pthread_mutex_lock(&s->lock);
  s->eof = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static void build_argv(const char **argv, size_t cap, const char *processor, const char *exec,
                       const char *const *extra, char *logdir) {
  size_t n = 0;
  argv[n++] = exec != NULL ? MQPROC_BIN : MQPROC_EXAMPLE_BIN;
  argv[n++] = "processing-server";
  argv[n++] = "--processor";
  argv[n++] = processor;
  if (exec != NULL) {
    argv[n++] = "--exec";
    argv[n++] = exec;
  }
  argv[n++] = "--queue";
  argv[n++] = it_amqp_url();
  argv[n++] = "--database";
  argv[n++] = it_db_url();
  argv[n++] = "--log-dir";
  argv[n++] = logdir;
  argv[n++] = "--retry-backoff-ms=10";
  argv[n++] = "--pass-env=PROC_*"; /* the test processors' knobs (procs/proc.sh) */
  /* worker processes (--isolation=process) are sanitized builds like the server */
  argv[n++] = "--pass-env=ASAN_OPTIONS";
  argv[n++] = "--pass-env=UBSAN_OPTIONS";
  argv[n++] = "--pass-env=LSAN_OPTIONS";
  /* a job's claim and start are DEBUG lines (its one INFO line is at its end); tests wait
   * for them. A test's own --log-level comes later and wins. */
  argv[n++] = "--log-level=debug";
  for (; extra != NULL && *extra != NULL && n < cap - 1; extra++)
    argv[n++] = *extra;
  argv[n] = NULL;
}

static it_server_t *spawn_argv(const char *name, const char *const *argv, const char *const *envp) {
  it_server_t *s = calloc(1, sizeof(*s));
  char logpath[600];
  int fds[2];
  cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  s->pid = fork();
  cr_assert_geq(s->pid, 0);
  if (s->pid == 0) {
    dup2(fds[1], 2);
    dup2(fds[1], 1);
    for (; envp != NULL && *envp != NULL; envp++)
      putenv((char *)*envp);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  live_add(s->pid);
  s->out_fd = fds[0];
  snprintf(logpath, sizeof(logpath), "%s/server-%s-%d.log", it_tmpdir(), name, (int)s->pid);
  s->log = fopen(logpath, "a");
  cr_assert_not_null(s->log);
  pthread_create(&s->reader, NULL, reader_main, s);
  return s;
}

it_server_t *it_server_spawn(const char *processor, const char *exec, const char *const *extra,
                             const char *const *envp) {
  const char *argv[64];
  char logdir[600];
  snprintf(logdir, sizeof(logdir), "%s/joblogs", it_tmpdir());
  build_argv(argv, 64, processor, exec, extra, logdir);
  return spawn_argv(processor, argv, envp);
}

it_server_t *it_mqproc_spawn(const char *name, const char *const *args) {
  const char *argv[64];
  size_t n = 0;
  argv[n++] = MQPROC_BIN;
  for (; args != NULL && *args != NULL && n < 63; args++)
    argv[n++] = *args;
  argv[n] = NULL;
  return spawn_argv(name, argv, NULL);
}

it_api_t it_api_start(const char *const *extra) {
  const char *args[40] = {"processing-api", "--queue",          it_amqp_url(),
                          "--database",     it_db_url(),        "--http",
                          "127.0.0.1:0",    "--sweep-interval", "300"};
  size_t n = 9;
  it_api_t a = {0};
  char *line;
  for (; extra != NULL && *extra != NULL && n < 39; extra++)
    args[n++] = *extra;
  args[n] = NULL;
  a.proc = it_mqproc_spawn("api", args);
  cr_assert(it_server_wait_log(a.proc, "serving OCR-D's Processing Server API", 60000),
            "processing-api did not start");
  for (size_t i = 0; (line = it_server_line(a.proc, i)) != NULL; i++)
    if (strstr(line, "Processing Server API on") != NULL && strstr(line, "(port ") != NULL)
      a.port = atoi(strstr(line, "(port ") + 6);
  cr_assert_gt(a.port, 0);
  return a;
}

it_server_t *it_program_spawn(const char *name, const char *const *argv, const char *const *envp) {
  return spawn_argv(name, argv, envp);
}

it_server_t *it_server_start(const char *processor, const char *exec, const char *const *extra,
                             const char *const *envp) {
  it_server_t *s = it_server_spawn(processor, exec, extra, envp);
  cr_assert(it_server_wait_log(s, "consuming from queue", 30000),
            "server for %s did not start consuming (pid %d)", processor, (int)s->pid);
  return s;
}

int it_server_connections(it_server_t *s) {
  return it_server_count_log(s, "connected to the broker (connection ");
}

double it_cpu_seconds(pid_t pid) {
  char path[64], buf[2048], *p;
  unsigned long ut = 0, st = 0;
  FILE *f;
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  f = fopen(path, "r");
  cr_assert_not_null(f, "no process %d", (int)pid);
  cr_assert_not_null(fgets(buf, sizeof(buf), f));
  fclose(f);
  p = strrchr(buf, ')'); /* the command name may hold spaces */
  cr_assert_not_null(p);
  /* after ") ": state(3) ... utime is field 14, stime 15 */
  cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int it_children_of(pid_t pid, pid_t *out, int max) {
  char path[96], buf[4096], *p = buf, *end;
  int n = 0;
  FILE *f;
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
  if ((f = fopen(path, "r")) == NULL)
    return 0;
  if (fgets(buf, sizeof(buf), f) == NULL)
    buf[0] = '\0';
  fclose(f);
  for (long c; n < max && (c = strtol(p, &end, 10)) > 0; p = end)
    out[n++] = (pid_t)c;
  return n;
}

pid_t it_child_of(pid_t pid) {
  pid_t child = 0;
  return it_children_of(pid, &child, 1) == 1 ? child : 0;
}

pid_t it_supervisor_of(pid_t server) {
  const struct timespec step = {0, 10 * 1000000L};
  pid_t helper = it_child_of(server), proc = 0;
  /* the helper starts the processor just after the server logs the try's start: no event
   * tells when, so a bounded poll */
  for (int i = 0; helper > 0 && (proc = it_child_of(helper)) == 0 && i < 1000; i++)
    nanosleep(&step, NULL);
  return proc;
}

void it_rabbitmqctl(const char *args) {
  char line[2048];
  int rc;
  init_env();
  snprintf(line, sizeof(line), "bash %s/scripts/services.sh rabbitmqctl %s %s >/dev/null 2>&1",
           MQPROC_SOURCE_DIR, g_svcdir, args);
  rc = system(line);
  cr_assert_eq(rc, 0, "rabbitmqctl %s failed (%d)", args, rc);
}

static int deadline_wait(it_server_t *s, const struct timespec *until) {
  return pthread_cond_timedwait(&s->cond, &s->lock, until) == 0;
}

int it_server_count_log(it_server_t *s, const char *text) {
  int n = 0;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->n_lines; i++)
    n += strstr(s->lines[i], text) != NULL;
  pthread_mutex_unlock(&s->lock);
  return n;
}

char *it_server_line(it_server_t *s, size_t i) {
  char *line = NULL;
  pthread_mutex_lock(&s->lock);
  if (i < s->n_lines)
    line = it_fmt("%s", s->lines[i]);
  pthread_mutex_unlock(&s->lock);
  return line;
}

int it_server_wait_count(it_server_t *s, const char *text, int n, int timeout_ms) {
  struct timespec until;
  size_t seen = 0;
  int found = 0;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  until.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->lock);
  for (;;) {
    for (; seen < s->n_lines && found < n; seen++)
      found += strstr(s->lines[seen], text) != NULL;
    if (found >= n || s->eof || !deadline_wait(s, &until))
      break;
  }
  for (; seen < s->n_lines && found < n; seen++)
    found += strstr(s->lines[seen], text) != NULL;
  pthread_mutex_unlock(&s->lock);
  return found >= n;
}

int it_server_wait_log(it_server_t *s, const char *text, int timeout_ms) {
  return it_server_wait_count(s, text, 1, timeout_ms);
}

void it_server_signal(it_server_t *s, int sig) {
  kill(s->pid, sig);
}

pid_t it_server_pid(const it_server_t *s) {
  return s->pid;
}

int it_server_wait_exit(it_server_t *s, int timeout_ms) {
  /* The reader sees EOF when the server (and everything holding its stderr) exits. */
  struct timespec until;
  int eof;
  if (s->waited)
    return s->wstatus;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += timeout_ms / 1000;
  pthread_mutex_lock(&s->lock);
  while (!s->eof && deadline_wait(s, &until))
    ;
  eof = s->eof;
  pthread_mutex_unlock(&s->lock);
  if (!eof && waitpid(s->pid, &s->wstatus, WNOHANG) != s->pid)
    return -1;
  if (eof)
    waitpid(s->pid, &s->wstatus, 0);
  s->waited = 1;
  live_drop(s->pid);
  return s->wstatus;
}

static void check_sanitizers(it_server_t *s) {
  cr_expect_eq(it_server_count_log(s, "ERROR: AddressSanitizer"), 0, "ASan report in server log");
  cr_expect_eq(it_server_count_log(s, "ERROR: LeakSanitizer"), 0, "LSan report in server log");
  cr_expect_eq(it_server_count_log(s, "runtime error:"), 0, "UBSan report in server log");
}

void it_server_stop(it_server_t *s) {
  int st;
  if (!s->waited) {
    kill(s->pid, SIGTERM);
    st = it_server_wait_exit(s, 60000);
    if (st == -1) {
      kill(s->pid, SIGKILL);
      st = it_server_wait_exit(s, 10000);
      cr_expect_fail("server %d did not stop on SIGTERM", (int)s->pid);
    } else {
      cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "server %d did not exit 0 on SIGTERM (wait status %d)", (int)s->pid, st);
    }
  }

  pthread_join(s->reader, NULL);
  check_sanitizers(s);
  for (size_t i = 0; i < s->n_lines; i++)
    free(s->lines[i]);
  free(s->lines);
  fclose(s->log);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  free(s);
}

/* ---- messages and files ------------------------------------------------------------- */

char *it_job_json(const char *processor, const char *job_id, const char *extra) {
  json_t *o = json_pack("{s:s, s:s, s:I, s:[s], s:[s], s:s, s:{}}", "job_id", job_id,
                        "processor_name", processor, "created_time", (json_int_t)1718000000,
                        "input_file_grps", "OCR-D-IMG", "output_file_grps", "OCR-D-OUT",
                        "path_to_mets", "/data/ws1/mets.xml", "parameters");
  char *out;
  if (extra != NULL) {
    json_error_t e;
    json_t *x = json_loads(extra, 0, &e);
    cr_assert_not_null(x, "bad extra JSON: %s", e.text);
    json_object_update(o, x);
    json_decref(x);
  }
  out = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return keep(out);
}

char *it_job_yaml(const char *processor, const char *job_id, const char *result_queue) {
  char *out;
  cr_assert_gt(asprintf(&out,
                        "created_time: 1718000000\n"
                        "input_file_grps:\n"
                        "- OCR-D-IMG\n"
                        "job_id: %s\n"
                        "output_file_grps:\n"
                        "- OCR-D-OUT\n"
                        "page_id: PHYS_0001..PHYS_0003\n"
                        "parameters:\n"
                        "  copy_files: true\n"
                        "path_to_mets: /data/ws1/mets.xml\n"
                        "processor_name: %s\n"
                        "%s%s%s",
                        job_id, processor, result_queue ? "result_queue_name: " : "",
                        result_queue ? result_queue : "", result_queue ? "\n" : ""),
               0);
  return keep(out);
}

void it_open_gate(const char *path) {
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "cannot create %s", path);
  fclose(f);
}

int it_files_in(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int it_files_become(const char *dir, int n) {
  for (int i = 0; i < 600; i++) {
    if (it_files_in(dir) == n)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

int it_file_lines(const char *path) {
  FILE *f = fopen(path, "r");
  int n = 0, c;
  if (f == NULL)
    return 0;
  while ((c = fgetc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

const char *it_proc(const char *script) {
  static char buf[4][600];
  static int i;
  char *b = buf[i++ % 4];
  snprintf(b, sizeof(buf[0]), "%s/tests/support/procs/%s", MQPROC_SOURCE_DIR, script);
  return b;
}

void it_cleanup(void) {
  for (size_t i = 0; i < sizeof(g_live) / sizeof(g_live[0]); i++) {
    if (g_live[i] != 0)
      kill(g_live[i], SIGKILL);
    g_live[i] = 0;
  }
  for (size_t i = 0; i < g_n_kept; i++)
    free(g_kept[i]);
  free(g_kept);
  g_kept = NULL;
  g_n_kept = 0;
  if (g_conn != NULL)
    PQfinish(g_conn);
  g_conn = NULL;
  it_backends_cleanup();
  it_tq_cleanup();
  if (g_amqp_conn != NULL) {
    amqp_channel_close(g_amqp_conn, 1, AMQP_REPLY_SUCCESS);
    amqp_connection_close(g_amqp_conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(g_amqp_conn);
  }
  g_amqp_conn = NULL;
  free(g_amqp);
  free(g_pg);
  free(g_svcdir);
  free(g_dburl);
  free(g_tmpdir);
  g_amqp = g_pg = g_svcdir = g_dburl = g_tmpdir = NULL;
}

char *it_read_file(const char *path) {
  FILE *f = fopen(path, "r");
  char *buf = NULL;
  size_t len = 0, cap = 0, n;
  if (f == NULL)
    return NULL;
  do {
    if (cap - len < 4096) {
      cap = cap * 2 + 8192;
      buf = realloc(buf, cap);
      cr_assert_not_null(buf);
    }
    n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
  } while (n > 0);
  fclose(f);
  buf[len] = '\0';
  return keep(buf);
}

int it_count_sockets(pid_t pid) {
  char path[64], link[384], target[300];
  struct dirent *e;
  DIR *d;
  int n = 0;
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  d = opendir(path);
  cr_assert_not_null(d, "%s", path);
  while ((e = readdir(d)) != NULL) {
    ssize_t len;
    if (e->d_name[0] == '.')
      continue;
    snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
    len = readlink(link, target, sizeof(target) - 1);
    n += len > 0 && strncmp(target, "socket:", 7) == 0;
  }
  closedir(d);
  return n;
}

void it_expect_dead(const char *proc, const char *reason_part) {
  it_msg_t m;
  cr_assert(it_get(it_fmt("%s.dead", proc), 30000, &m), "nothing dead-lettered (expected '%s')",
            reason_part);
  cr_expect(strstr(m.reason, reason_part) != NULL, "reason '%s' lacks '%s'", m.reason, reason_part);
  it_msg_free(&m);
}

int it_queue_settles(const char *queue, int timeout_ms) {
  for (int waited = 0;; waited += 20) {
    long ready, unacked;
    it_queue_counts(queue, &ready, &unacked);
    if (ready == 0 && unacked == 0)
      return 1;
    if (waited >= timeout_ms)
      return 0;
    usleep(20 * 1000);
  }
}

int it_run(const char *const *argv, const char *const *envp, const char *input, char **out) {
  int outp[2], inp[2], status;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  ssize_t n;
  pid_t pid;
  cr_assert_eq(pipe2(outp, O_CLOEXEC), 0);
  cr_assert_eq(pipe2(inp, O_CLOEXEC), 0);
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(outp[1], 1);
    dup2(inp[0], 0);
    for (; envp != NULL && *envp != NULL; envp++)
      putenv((char *)*envp);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  close(outp[1]);
  close(inp[0]);
  if (input != NULL && write(inp[1], input, strlen(input)) < 0)
    cr_log_warn("it_run: writing stdin: %s", strerror(errno));
  close(inp[1]);
  do {
    if (cap - len < 4096) {
      cap = cap * 2 + 8192;
      buf = realloc(buf, cap);
      cr_assert_not_null(buf);
    }
    n = read(outp[0], buf + len, cap - len - 1);
    len += n > 0 ? (size_t)n : 0;
  } while (n > 0 || (n < 0 && errno == EINTR));
  close(outp[0]);
  buf[len] = '\0';
  while (waitpid(pid, &status, 0) < 0)
    cr_assert_eq(errno, EINTR);
  if (out != NULL)
    *out = keep(buf);
  else
    free(buf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

char *it_mqproc_bin(void) {
  return MQPROC_BIN;
}

int it_mq(char **out, ...) {
  const char *argv[64];
  const char *env[] = {it_fmt("MQPROC_QUEUE=%s", it_amqp_url()),
                       it_fmt("MQPROC_DATABASE=%s", it_db_url()), NULL};
  va_list ap;
  int n = 0;
  argv[n++] = it_mqproc_bin();
  va_start(ap, out);
  for (const char *s; n < 63 && (s = va_arg(ap, const char *)) != NULL;)
    argv[n++] = s;
  va_end(ap);
  argv[n] = NULL;
  return it_run(argv, env, NULL, out);
}

json_t *it_json(const char *text) {
  json_error_t e;
  json_t *v = json_loads(text, 0, &e);
  cr_assert_not_null(v, "not JSON (%s): %s", e.text, text);
  return v;
}

int it_sql_becomes(const char *sql, const char *want) {
  for (int i = 0; i < 600; i++) {
    char *v = it_sql(sql, 0);
    if (v != NULL && strcmp(v, want) == 0)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

int it_free_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cr_assert(fd >= 0);
  cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

int it_http_port(it_server_t *s) {
  char *line;
  cr_assert(it_server_wait_log(s, "status page on", 30000), "the server serves no --http");
  for (size_t i = 0; (line = it_server_line(s, i)) != NULL; i++) {
    const char *p = strstr(line, "(port ");
    if (strstr(line, "status page on") != NULL && p != NULL)
      return atoi(p + 6);
  }
  return 0;
}

int it_http_get(int port, const char *path, char **body) {
  return it_http_req(port, path, NULL, body);
}

int it_http_req(int port, const char *path, const char *const *args, char **body) {
  char *url = it_fmt("http://127.0.0.1:%d%s", port, path), *out = NULL, *nl;
  const char *argv[48] = {"/usr/bin/curl", "-s", "--max-time", "20", "-w", "\n%{http_code}"};
  size_t n = 6;
  for (; args != NULL && *args != NULL && n < 46; args++)
    argv[n++] = *args;
  argv[n++] = url;
  argv[n] = NULL;
  it_run(argv, NULL, NULL, &out);
  if (out == NULL || (nl = strrchr(out, '\n')) == NULL) {
    *body = it_fmt("%s", "");
    return 0;
  }
  *nl = '\0';
  *body = out;
  return atoi(nl + 1);
}
