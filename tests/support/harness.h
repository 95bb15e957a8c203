/* Integration-test harness: the private RabbitMQ and PostgreSQL started by
 * scripts/services.sh, an AMQP client, SQL helpers on a per-test schema, and processing
 * servers run as child processes whose log lines can be awaited.
 *
 * Isolation: every test (criterion runs each in its own process) gets a unique
 * processor/queue name and its own PostgreSQL schema (it_db_url()). Waiting is always on
 * an event (a message arriving, a log line appearing, a process exiting) with a
 * deadline, never a bare sleep. Every helper aborts the test (cr_assert) on failure.
 *
 * Memory: strings returned by it_fmt, it_name, it_sql, it_job_json and it_job_yaml are
 * owned by the harness and freed by it_cleanup(), which every suite registers as its
 * .fini (TestSuite(name, .fini = it_cleanup)).
 */
#ifndef MQPROC_TEST_HARNESS_H
#define MQPROC_TEST_HARNESS_H

#include <jansson.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- environment -------------------------------------------------------------------- */
const char *it_amqp_url(void);
/* A database URL whose search_path is this test's own schema (created and migrated on
 * first use). */
const char *it_db_url(void);
/* A per-test name: "ocrd-t<pid>-<suffix>". */
char *it_name(const char *suffix);
/* A formatted string owned by the harness. */
char *it_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Frees everything the harness holds for this test (strings, connections). */
void it_cleanup(void);
/* A per-test scratch directory (created). */
const char *it_tmpdir(void);

/* ---- AMQP client -------------------------------------------------------------------- */
typedef struct it_msg {
  char *body; /* NUL-terminated copy */
  size_t len;
  char *content_type; /* "" when absent */
  char *message_id;
  char *reason;  /* x-mqproc-reason header, "" when absent */
  char *attempt; /* x-mqproc-attempt header, "" when absent */
  char *headers; /* every text header as "key=value\n", in order */
  int priority;  /* -1 when absent */
  int redelivered;
} it_msg_t;

void it_msg_free(it_msg_t *m);
/* Declares queue (durable, bound to ocrd-network-default with routing key = name). */
void it_declare(const char *queue);
/* Deletes queue (whatever it holds). */
void it_delete_queue(const char *queue);
/* Publishes body to ocrd-network-default with routing key rk (persistent). */
void it_publish(const char *rk, const char *body);
void it_publish_len(const char *rk, const void *body, size_t len);
/* Waits up to timeout_ms for one message on queue and acks it; 0 on timeout. */
int it_get(const char *queue, int timeout_ms, it_msg_t *out);
/* Takes one message off queue and gives it back with basic.nack(requeue): the broker
 * then delivers it again flagged redelivered. 0 on timeout. */
int it_requeue_one(const char *queue, int timeout_ms);
/* Waits (30 s) for the next message on <proc>.dead and checks that its x-mqproc-reason
 * holds reason_part. */
void it_expect_dead(const char *proc, const char *reason_part);
/* Ready and unacknowledged counts of a queue, read live from the broker (rabbitmqctl). */
void it_queue_counts(const char *queue, long *ready, long *unacked);
/* Waits until queue holds nothing, ready or unacked (an ack may trail the result it
 * follows); 1, or 0 on timeout. */
int it_queue_settles(const char *queue, int timeout_ms);

/* Runs `scripts/services.sh CMD <services dir>` (rabbitmq-stop, rabbitmq-start, pg-stop,
 * pg-start: they return once the server is down / ready again). */
void it_services(const char *cmd);

/* ---- backend pairs ------------------------------------------------------------------
 * MQPROC_TEST_QUEUE=dir: the queue is a directory queue in the test's tmpdir (it_amqp_url
 * is then a dir:// URL and the AMQP helpers below act on its files; a dead letter of P is
 * in P's failed/); MQPROC_TEST_STORE=sqlite: the store is the test's TMP/jobs.db (it_db_url
 * a sqlite:// URL, it_sql reads it). */
int it_queue_is_dir(void);
int it_store_is_sqlite(void);
/* MQPROC_TEST_QUEUE=pg or sqlite: the queue is a table queue (docs/table-queue.md): the
 * store's own database when the store is of that kind (--queue = --database), else one of
 * its own (a PostgreSQL schema of the test's, or TMP/queue.db); the AMQP helpers act on its
 * rows with plain SQL (harness_tq.c). */
int it_queue_is_table(void);
/* A PostgreSQL URL of this test's schema (created and migrated on first use), whatever the
 * store is. */
const char *it_pg_url(void);
/* The first cell of sql on the table queue's database (PostgreSQL's text, or SQLite's);
 * NULL for SQL NULL or no row. n text parameters follow. */
char *it_tq_sql(const char *pg_sql, const char *sq_sql, int n, ...);
/* The same statement, allowed to fail: NULL when it ran, else the database's message. */
char *it_tq_try(const char *pg_sql, const char *sq_sql, int n, ...);
/* Runs sql on this test's PostgreSQL schema (it_pg_url()) on a connection of its own as
 * role (a LOGIN role; the services trust local connections), as a producer with only
 * that role's rights would: NULL when it ran (its first cell, or NULL, into *cell when
 * cell is not NULL), else the database's message. n text parameters follow; with none,
 * sql may be statements separated by semicolons, run in one session (the last one's). */
char *it_pg_try_as(const char *role, char **cell, const char *sql, int n, ...);
/* The SQL of the test's store: pg for PostgreSQL, sqlite for SQLite (times there are
 * integer ms since the epoch, booleans 0/1). */
const char *it_q(const char *pg, const char *sqlite);
/* The most "start" spans open at once in a PROC_SPANS file (proc.sh). */
int it_most_at_once(const char *spans_path);

/* ---- SQL on this test's schema ------------------------------------------------------ */

/* First cell of the first row as text (NULL for SQL NULL or no row). The query may
 * use $1..$n, given as strings. */
char *it_sql(const char *sql, int n, ...);
long it_sql_long(const char *sql, int n, ...);

/* ---- processing servers as children ------------------------------------------------- */
/* For envp: an OCR-D stand-in (one that records its argv, or that talks to a fake METS
 * server) leaves no output the server's check after exit 0 would find. */
#define NO_CHECK "MQPROC_OCRD_CHECK_OUTPUT=false"
typedef struct it_server it_server_t;
/* Starts `mqproc processing-server --processor NAME --exec CMD` (exec NULL: the example
 * C processor `ocrd-example processing-server --processor NAME`) with --queue, --database
 * (this test's schema), --log-dir and --migrate, plus extra args (NULL-terminated), and
 * waits until it consumes. envp adds KEY=VALUE pairs (NULL-terminated, may be NULL). */
it_server_t *it_server_start(const char *processor, const char *exec, const char *const *extra,
                             const char *const *envp);
/* it_server_start() without waiting for it to consume (for servers that must fail). */
it_server_t *it_server_spawn(const char *processor, const char *exec, const char *const *extra,
                             const char *const *envp);
/* Runs `mqproc ARGS...` (NULL-terminated) as a child whose output is read like a server's
 * log (it_server_wait_log, it_server_stop, ...); name tags its log file. */
it_server_t *it_mqproc_spawn(const char *name, const char *const *args);
/* `mqproc processing-api` on this test's queue and store (a port of its own, a quick
 * sweep), extra arguments after (NULL-terminated, may be NULL); waits until it serves. */
typedef struct it_api {
  it_server_t *proc;
  int port;
} it_api_t;
it_api_t it_api_start(const char *const *extra);
/* Runs argv (argv[0] a path, NULL-terminated; envp as above) as a child whose output is
 * read like a server's log: e.g. a C processor's own `processing-server`. */
it_server_t *it_program_spawn(const char *name, const char *const *argv, const char *const *envp);
/* Broker connections the server made so far (1 = it never reconnected). */
int it_server_connections(it_server_t *s);
/* User + system CPU seconds a process has used so far. */
double it_cpu_seconds(pid_t pid);
/* The (first) child process of pid, 0 when it has none. */
pid_t it_child_of(pid_t pid);
/* The child processes of pid (up to max) into out; returns how many. */
int it_children_of(pid_t pid, pid_t *out, int max);
/* The process of a command server's running try: the processor, the child of its spawn
 * helper (runner/spawn/spawner.c), which is the server's only child; awaited up to 10 s
 * (it starts just after the try's start is logged); 0 when there is none. */
pid_t it_supervisor_of(pid_t server);
/* Runs rabbitmqctl ARGS on this run's broker (e.g. "set_disk_free_limit 1000GB"). */
void it_rabbitmqctl(const char *args);
/* Waits until a log line containing text has appeared (counting from the start);
 * returns 1, or 0 on timeout. */
int it_server_wait_log(it_server_t *s, const char *text, int timeout_ms);
/* Waits until at least n log lines contain text; 1, or 0 on timeout. */
int it_server_wait_count(it_server_t *s, const char *text, int n, int timeout_ms);
/* Log line i (0-based) so far, a copy owned by the harness; NULL when there is none yet. */
char *it_server_line(it_server_t *s, size_t i);
/* Number of log lines so far containing text. */
int it_server_count_log(it_server_t *s, const char *text);
void it_server_signal(it_server_t *s, int sig);
/* Waits for exit (up to timeout_ms); returns the wait status, or -1 on timeout. */
int it_server_wait_exit(it_server_t *s, int timeout_ms);
pid_t it_server_pid(const it_server_t *s);
/* SIGTERM, wait, free (SIGKILL when it does not stop within 30 s). */
void it_server_stop(it_server_t *s);

/* ---- messages ----------------------------------------------------------------------- */
/* A JSON processing message for processor with this job id; extra is a JSON object text
 * merged in (may be NULL), e.g. "{\"result_queue_name\": \"q\"}". */
char *it_job_json(const char *processor, const char *job_id, const char *extra);
/* The same message as OCR-D's PyYAML would write it (block style, sorted keys). */
char *it_job_yaml(const char *processor, const char *job_id, const char *result_queue);

/* A file's content (NULL when it cannot be read), owned by the harness. */
char *it_read_file(const char *path);
/* Sockets among the open fds of a process. */
int it_count_sockets(pid_t pid);
/* Entries in dir but dot files (0 when it is missing). */
int it_files_in(const char *dir);
/* Waits (30 s) until dir holds n entries; 1, or 0 on timeout. */
int it_files_become(const char *dir, int n);
/* Lines in a file (0 when missing). */
int it_file_lines(const char *path);
/* Opens a gate: creates the (empty) file path that jobs of proc.sh with PROC_GATE=path
 * wait for, so they end now. */
void it_open_gate(const char *path);
/* Runs argv (argv[0] a path) with envp added (NULL-terminated, may be NULL) and input on
 * its stdin (NULL: none), and waits for it; *out (when out is not NULL) gets its stdout
 * (owned by the harness); stderr goes to the test's. Returns the exit status (128 + the
 * signal when it was killed). */
int it_run(const char *const *argv, const char *const *envp, const char *input, char **out);
/* The mqproc program under test. Static. */
char *it_mqproc_bin(void);
/* Runs `mqproc ARGS...` (NULL-terminated) with this test's broker and database in the
 * environment (MQPROC_QUEUE, MQPROC_DATABASE); returns the exit status, *out its stdout. */
int it_mq(char **out, ...);
/* text parsed as JSON; the test fails when it is not. The caller decrefs. */
json_t *it_json(const char *text);
/* Waits (30 s) until the SQL query's first cell equals want; 1, or 0 on timeout. */
int it_sql_becomes(const char *sql, const char *want);
/* A port on 127.0.0.1 nothing listens on now. */
int it_free_port(void);
/* The port of a server started with --http 127.0.0.1:0 (read off its log). */
int it_http_port(it_server_t *s);
/* GET http://127.0.0.1:port/path with curl: the status (0 when none), *body the answer
 * (owned by the harness). */
int it_http_get(int port, const char *path, char **body);
/* The same with more curl arguments (NULL-terminated), e.g. "-X", "POST", "-H", "...". */
int it_http_req(int port, const char *path, const char *const *args, char **body);
/* Path to a helper processor script in tests/support/procs/. Static. */
const char *it_proc(const char *script);

#endif
