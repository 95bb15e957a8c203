/* Configuration: one table of options drives defaults, environment, argv and --help. */
#include "base/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"
#include "base/util.h"

int mqproc__tls_verify_parse(const char *s) {
  if (s == NULL || !strcmp(s, "full"))
    return 0;
  if (!strcmp(s, "ca"))
    return 1;
  if (!strcmp(s, "none"))
    return 2;
  return -1;
}

typedef enum opt_type { OPT_STR, OPT_INT, OPT_LONG, OPT_BOOL, OPT_LIST } opt_type_t;

/* Which programs take an option (the others neither parse it nor read its env). */
typedef enum opt_for { FOR_ALL = 0, FOR_GENERIC, FOR_C } opt_for_t;

typedef struct opt {
  const char *name; /* --name */
  const char *env;  /* MQPROC_… */
  opt_type_t type;
  size_t offset;
  const char *def; /* default as text; NULL = none */
  long min, max;   /* for numbers */
  opt_for_t only;  /* FOR_GENERIC: the mqproc program; FOR_C: C processors */
  const char *help;
} opt_t;

#define F(field) offsetof(mqproc__config_t, field)

static const opt_t OPTS[] = {
    {"queue", "MQPROC_QUEUE", OPT_STR, F(queue_url), NULL, 0, 0, 0,
     "AMQP URL of the broker, amqp://user:pass@host:port/vhost, or dir:///SPOOL for a "
     "directory queue (docs/dir-queue.md) (required)"},
    {"database", "MQPROC_DATABASE", OPT_STR, F(database), NULL, 0, 0, 0,
     "PostgreSQL URL or conninfo of the job store, or sqlite:///PATH[?synchronous=normal] "
     "(docs/sqlite-store.md) (required)"},
    {"queue-file", "MQPROC_QUEUE_FILE", OPT_STR, F(queue_file), NULL, 0, 0, 0,
     "read --queue from FILE (one URL per line; several are a broker list): keeps the "
     "password out of /proc/PID/cmdline, which every user can read; e.g. systemd's "
     "$CREDENTIALS_DIRECTORY/queue"},
    {"database-file", "MQPROC_DATABASE_FILE", OPT_STR, F(database_file), NULL, 0, 0, 0,
     "read --database from FILE (as --queue-file)"},
    {"tls-ca", "MQPROC_TLS_CA", OPT_STR, F(tls_ca), NULL, 0, 0, 0,
     "amqps://: PEM file of the CAs the broker's certificate must chain to (default: the "
     "system's, "
     "/etc/ssl/certs/ca-certificates.crt)"},
    {"tls-cert", "MQPROC_TLS_CERT", OPT_STR, F(tls_cert), NULL, 0, 0, 0,
     "amqps://: client certificate (PEM) for a broker that asks for one; with --tls-key"},
    {"tls-key", "MQPROC_TLS_KEY", OPT_STR, F(tls_key), NULL, 0, 0, 0,
     "amqps://: the client certificate's private key (PEM, unencrypted)"},
    {"tls-verify", "MQPROC_TLS_VERIFY", OPT_STR, F(tls_verify), "full", 0, 0, 0,
     "amqps://: full (the certificate chains to --tls-ca and names the URL's host), ca (it "
     "chains; any name) or none (no check at all: anyone on the path can read and change the "
     "traffic; a warning at start)"},
    {"database-pooler", "MQPROC_DATABASE_POOLER", OPT_BOOL, F(database_pooler), "false", 0, 0, 0,
     "--database goes through PgBouncer (or another pooler) in transaction pooling: no "
     "prepared statements, no session SET, no LISTEN (operators' wishes and cancels are read "
     "with each beat, within 2 s)"},
    {"processor", "MQPROC_PROCESSOR", OPT_STR, F(processor), NULL, 0, 0, 0,
     "processor name = job queue name (required for mqproc; overrides a C processor's name)"},
    {"exec", "MQPROC_EXEC", OPT_STR, F(exec), NULL, 0, 0, FOR_GENERIC,
     "command run per job, split like sh words (no shell); gets the job as JSON on stdin; "
     "always a process of its own, so --time-limit applies (--isolation is for C processors)"},
    {"instances", "MQPROC_INSTANCES", OPT_INT, F(instances), "1", 1, 256, 0,
     "run N servers as child processes of a supervisor that restarts one that dies (at once "
     "when it had run 10 s, else after 1 s doubling to 60 s: a crash loop), forwards "
     "SIGTERM/SIGINT to all and speaks for them to systemd"},
    {"max-jobs-per-child", "MQPROC_MAX_JOBS_PER_CHILD", OPT_INT, F(max_jobs_per_child), "0", 0,
     1000000000, 0,
     "after N jobs a server takes no more, finishes the ones in hand and exits with status 75 "
     "for a fresh one (the supervisor starts it at once): for processors that leak; 0 = never"},
    {"on-failure", "MQPROC_ON_FAILURE", OPT_STR, F(on_failure), NULL, 0, 0, 0,
     "command run once when a job ends FAILED, split like sh words (no shell): gets the job, "
     "its last error and its request as JSON on stdin, its output goes to the job's log; "
     "time-limited (--on-failure-timeout), its failure is logged, never retried"},
    {"on-failure-timeout", "MQPROC_ON_FAILURE_TIMEOUT", OPT_INT, F(on_failure_timeout_s), "60", 1,
     86400, 0, "seconds an --on-failure command may run before its process group is killed"},
    {"on-failure-max", "MQPROC_ON_FAILURE_MAX", OPT_INT, F(on_failure_max), "4", 1, 1024, 0,
     "--on-failure commands running at once; the handlers of further FAILED jobs wait their "
     "turn in order (at most 1000 waiting: beyond that a job's handler is not run, logged "
     "with the job's id)"},
    {"http", "MQPROC_HTTP", OPT_STR, F(http), NULL, 0, 0, 0,
     "serve /metrics (Prometheus), /healthz, /readyz and the status page on ADDR:PORT "
     "(e.g. 127.0.0.1:9464; off by default); read-only unless --http-admin-token"},
    {"http-admin-token", "MQPROC_HTTP_ADMIN_TOKEN", OPT_STR, F(http_admin_token), NULL, 0, 0, 0,
     "FILE whose first line is the token (16+ characters, not world-readable) that lets the "
     "status page retry, cancel, pause and resume, audited (sign in on /login, or send "
     "Authorization: Bearer TOKEN); with it (or --http-read-token) a job's request and log "
     "are shown only to those signed in"},
    {"http-read-token", "MQPROC_HTTP_READ_TOKEN", OPT_STR, F(http_read_token), NULL, 0, 0, 0,
     "FILE whose first line is a token (as --http-admin-token's) that shows the status page's "
     "job requests and logs without letting it act"},
    {"http-host", "MQPROC_HTTP_HOST", OPT_LIST, F(http_hosts), NULL, 0, 0, 0,
     "a name clients reach --http by, repeatable (env: comma-separated): a request whose Host "
     "is neither an IP address, localhost, the --http host nor such a name gets 421 (a web "
     "page rebinding its name to this address cannot read the page)"},
    {"http-session-ttl", "MQPROC_HTTP_SESSION_TTL", OPT_INT, F(http_session_ttl_s), "43200", 1,
     2592000, 0, "seconds a status-page sign-in lasts (sign-out ends it at once)"},
    {"metrics-buckets", "MQPROC_METRICS_BUCKETS", OPT_STR, F(metrics_buckets),
     MQPROC__DEFAULT_BUCKETS, 0, 0, 0,
     "upper bounds in seconds of the queue-wait and run-time histograms of /metrics"},
    {"isolation", "MQPROC_ISOLATION", OPT_STR, F(isolation), "thread", 0, 0, FOR_C,
     "where the processing function runs: thread (a thread of the server: least overhead, for "
     "trusted code; a crash takes the server down and --time-limit cannot stop it) or process "
     "(one pre-started worker process per --prefetch slot: a crash or a hang fails only its "
     "try, --time-limit applies, a dead worker is replaced)"},
    {"ocrd-cli", "MQPROC_OCRD_CLI", OPT_STR, F(ocrd_cli), "auto", 0, 0, FOR_GENERIC,
     "pass OCR-D's processor arguments (--working-dir --mets --log-level [--page-id] "
     "--input-file-grp [--output-file-grp] --parameter) after the --exec words: true, false, "
     "or auto (when the program's name starts with ocrd-)"},
    {"ocrd-log-level", "MQPROC_OCRD_LOG_LEVEL", OPT_STR, F(ocrd_log_level), "DEBUG", 0, 0,
     FOR_GENERIC, "the --log-level given to OCR-D processors (OCR-D's worker passes DEBUG)"},
    {"workspace-root", "MQPROC_WORKSPACE_ROOT", OPT_STR, F(workspace_root), NULL, 0, 0, 0,
     "directory of workspaces: a message's workspace_id W means the METS <root>/W/mets.xml "
     "(without it, workspace_id messages are dead-lettered)"},
    {"exchange", "MQPROC_EXCHANGE", OPT_STR, F(exchange), "ocrd-network-default", 0, 0, 0,
     "direct exchange the job and result queues are bound to"},
    {"dead-letter-queue", "MQPROC_DEAD_LETTER_QUEUE", OPT_STR, F(dead_letter_queue), NULL, 0, 0, 0,
     "queue for messages given up on (default: <processor>.dead)"},
    {"queue-arg", "MQPROC_QUEUE_ARGS", OPT_LIST, F(queue_args), NULL, 0, 0, 0,
     "extra queue argument key=value, repeatable (env: comma-separated); used only when the "
     "queue does not exist yet"},
    {"max-priority", "MQPROC_MAX_PRIORITY", OPT_INT, F(max_priority), "0", 0, 255, 0,
     "declare the job queue with x-max-priority N (1-255, RabbitMQ advises <= 10), so a "
     "message's priority orders delivery; every party declaring the queue must use the same "
     "N (a queue that exists with another is an error); 0 = no priorities"},
    {"queue-type", "MQPROC_QUEUE_TYPE", OPT_STR, F(queue_type), "classic", 0, 0, 0,
     "classic, or quorum: the job and dead-letter queues are declared as RabbitMQ quorum "
     "queues (replicated, durable; no priorities; every party must declare them alike)"},
    {"delivery-limit", "MQPROC_DELIVERY_LIMIT", OPT_INT, F(delivery_limit), "0", 0, 1000000, 0,
     "quorum queues: x-delivery-limit, the broker's own cap on a message's returns; past it "
     "the broker dead-letters it into the dead-letter queue (0 = 2 x --max-attempts, above "
     "our own cap so ours acts first)"},
    {"queue-durable", "MQPROC_QUEUE_DURABLE", OPT_BOOL, F(queue_durable), "true", 0, 0, 0,
     "declare queues durable (OCR-D core <= 3.12 declares them non-durable)"},
    {"concurrency", "MQPROC_CONCURRENCY", OPT_INT, F(concurrency), NULL, 1, 1024, 0,
     "tries running at once per server: C processors on as many threads (or worker "
     "processes), commands as that many children; a job is claimed when its try can start, "
     "or on a --claim-ahead pass (default: --prefetch, or 1)"},
    {"claim-ahead", "MQPROC_CLAIM_AHEAD", OPT_INT, F(claim_ahead), "-1", -1, 1024, 0,
     "deliveries claimed while every run slot is busy, so each starts the moment a slot "
     "frees (short jobs: the claim's commit overlaps a run); a server that dies holding "
     "them gives them up at once to a server on its host, on its lease elsewhere (default "
     "-1: --concurrency on a dir:// queue, more while its automatic window is deep (see "
     "--prefetch), 0 on amqp://)"},
    {"prefetch", "MQPROC_PREFETCH", OPT_INT, F(prefetch), NULL, 1, 65535, 0,
     "deliveries in flight per server (basic.qos); the ones beyond --concurrency and "
     "--claim-ahead wait, unclaimed, for a free slot (default: 2 x --concurrency when that is "
     "given, else 1; on a dir:// queue with neither this nor --claim-ahead given, that is "
     "where an automatic window starts: it deepens, up to 64, while runs end faster than "
     "the next jobs' claims commit, and shrinks back when they do not)"},
    {"retries", "MQPROC_RETRIES", OPT_INT, F(retries), "3", 0, 100, 0,
     "extra local tries after a failed try"},
    {"retry-backoff-ms", "MQPROC_RETRY_BACKOFF_MS", OPT_INT, F(retry_backoff_ms), "200", 0, 3600000,
     0, "wait before the first local retry, doubled per retry (with jitter)"},
    {"max-requeues", "MQPROC_MAX_REQUEUES", OPT_INT, F(max_requeues), "1", 0, 1000, 0,
     "times a job whose local tries all failed goes back to the queue before it is FAILED"},
    {"final-exit-code", "MQPROC_FINAL_EXIT_CODE", OPT_INT, F(final_exit_code), "0", 0, 255, 0,
     "a try that exits with this code (a C processor: returns it) fails the job at once, "
     "without retries or requeue (0 = none)"},
    {"heartbeat", "MQPROC_HEARTBEAT", OPT_INT, F(heartbeat_s), "30", 0, 3600, 0,
     "AMQP heartbeat in seconds (0 = off, not advised)"},
    {"confirm-timeout", "MQPROC_CONFIRM_TIMEOUT", OPT_INT, F(confirm_timeout_s), "30", 0, 86400, 0,
     "seconds a result or dead letter may wait for the broker's confirm before the connection "
     "is dropped and made again (the message is then sent again: at least once); a quorum "
     "queue without a majority never confirms; 0 = wait forever"},
    {"broker-timeout", "MQPROC_BROKER_TIMEOUT", OPT_INT, F(broker_timeout_s), "10", 1, 3600, 0,
     "seconds one broker write or request may take; a broker that stops reading (a stalled "
     "network) costs the connection, not the server's loop; a broker list's members share "
     "it when connecting (at least 2 s each)"},
    {"lease", "MQPROC_LEASE", OPT_INT, F(lease_s), "30", 2, 86400, 0,
     "seconds a running job's lease lasts; renewed while it runs"},
    {"ack-after", "MQPROC_ACK_AFTER", OPT_INT, F(ack_after_s), "300", 0, 86400, 0,
     "ack the delivery of a job still running after this many seconds (the job table and its "
     "lease then carry it; keeps long jobs clear of the broker's consumer_timeout; 0 = ack "
     "only at the end)"},
    {"max-attempts", "MQPROC_MAX_ATTEMPTS", OPT_INT, F(max_attempts), "5", 1, 1000, 0,
     "claims of one job (requeues and takeovers of dead servers' jobs included) before it is "
     "FAILED"},
    {"time-limit", "MQPROC_TIME_LIMIT", OPT_INT, F(time_limit_s), "0", 0, 31536000, 0,
     "seconds a try may run before its process group is killed (0 = no limit); a message's "
     "time_limit may only lower it (a C processor: only with --isolation=process)"},
    {"max-log-size", "MQPROC_MAX_LOG_SIZE", OPT_LONG, F(max_log_bytes), "1073741824", 4096,
     1L << 50, 0,
     "bytes a job's log may grow to in one try; a processor writing more output is killed "
     "(the files it writes are not limited)"},
    {"shutdown-grace", "MQPROC_SHUTDOWN_GRACE", OPT_INT, F(shutdown_grace_s), "30", 0, 86400, 0,
     "seconds running jobs get to finish after SIGTERM/SIGINT before they are stopped and "
     "requeued"},
    {"max-message-size", "MQPROC_MAX_MESSAGE_SIZE", OPT_LONG, F(max_message_bytes), "4194304", 64,
     1L << 30, 0, "largest message body accepted, in bytes; larger ones are dead-lettered"},
    {"callback-timeout-ms", "MQPROC_CALLBACK_TIMEOUT_MS", OPT_INT, F(callback_timeout_ms), "10000",
     1, 600000, 0, "timeout of one callback POST"},
    {"callback-retries", "MQPROC_CALLBACK_RETRIES", OPT_INT, F(callback_retries), "3", 0, 100, 0,
     "extra tries of a failed callback POST"},
    {"callback-allow", "MQPROC_CALLBACK_ALLOW", OPT_LIST, F(callback_allow), NULL, 0, 0, 0,
     "IP range (CIDR) callbacks may reach, repeatable (env: comma-separated); once given, "
     "callbacks reach only these; it also lifts the built-in denial for what it names"},
    {"callback-deny", "MQPROC_CALLBACK_DENY", OPT_LIST, F(callback_deny), NULL, 0, 0, 0,
     "IP range (CIDR) callbacks may not reach, repeatable; always denied "
     "besides: " MQPROC__CALLBACK_DENY_DEFAULT " (link-local and cloud metadata)"},
    {"result-queue-pattern", "MQPROC_RESULT_QUEUE_PATTERN", OPT_STR, F(result_queue_pattern), NULL,
     0, 0, 0,
     "extended regular expression a message's result_queue_name must match as a whole "
     "(default: any); other messages are dead-lettered, so a sender cannot make the server "
     "declare queues at will; on dir:// a message makes a queue directory only when this is "
     "given (else its result queue must exist)"},
    {"declare-result-queues", "MQPROC_DECLARE_RESULT_QUEUES", OPT_BOOL, F(declare_result_queues),
     "true", 0, 0, 0, "declare and bind result_queue_name before publishing (as OCR-D does)"},
    {"result-format", "MQPROC_RESULT_FORMAT", OPT_STR, F(result_format), "auto", 0, 0, 0,
     "result message encoding: auto (like the request), json or yaml"},
    {"log-dir", "MQPROC_LOG_DIR", OPT_STR, F(log_dir), NULL, 0, 0, 0,
     "directory of the per-job log files, created private (0750, files 0640) (default: "
     "$STATE_DIRECTORY/logs under systemd, else $XDG_STATE_HOME/mqproc/logs, else "
     "~/.local/state/mqproc/logs)"},
    {"group-access", "MQPROC_GROUP_ACCESS", OPT_BOOL, F(group_access), "false", 0, 0, 0,
     "make the files and directories this program creates (the SQLite database and its -wal, "
     "-shm and -control files, a dir:// spool's directories and files) readable and writable "
     "by their group, 0660/0770, for operators in the server's group; without it they are "
     "private to the server's user, 0600/0700 (files that exist keep their mode)"},
    {"pass-env", "MQPROC_PASS_ENV", OPT_LIST, F(pass_env), NULL, 0, 0, 0,
     "environment variable passed on to processors, repeatable (env: comma-separated); NAME or "
     "PREFIX* (processors get only PATH, HOME, LANG, LC_*, TZ, TMPDIR, the MQPROC_* job "
     "variables and these)"},
    {"log-level", "MQPROC_LOG_LEVEL", OPT_STR, F(log_level), "info", 0, 0, 0,
     "debug, info, warn or error"},
    {"log-format", "MQPROC_LOG_FORMAT", OPT_STR, F(log_format), "text", 0, 0, 0,
     "text, or json: one object per line with ts, level, worker_id, msg and, on job lines, "
     "job_id, attempt, try, processor"},
    {"worker-id", "MQPROC_WORKER_ID", OPT_STR, F(worker_id), NULL, 0, 0, 0,
     "this server's id in the job table (default: host:pid)"},
    {"migrate", "MQPROC_MIGRATE", OPT_BOOL, F(migrate), "false", 0, 0, 0,
     "create or upgrade the job tables at start"},
};

static void *field(mqproc__config_t *cfg, const opt_t *o) {
  return (char *)cfg + o->offset;
}

static void list_free(char **list) {
  for (size_t i = 0; list != NULL && list[i] != NULL; i++)
    free(list[i]);
  free(list);
}

static int list_add(char ***list, const char *item, size_t len) {
  size_t n = 0;
  char **grown;
  while (*list != NULL && (*list)[n] != NULL)
    n++;
  grown = mqproc__realloc(*list, (n + 2) * sizeof(char *));
  if (grown == NULL)
    return MQPROC_ENOMEM;
  *list = grown;
  if ((grown[n] = mqproc__strndup(item, len)) == NULL)
    return MQPROC_ENOMEM;
  grown[n + 1] = NULL;
  return MQPROC_OK;
}

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on"))
    *out = 1;
  else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off"))
    *out = 0;
  else
    return -1;
  return 0;
}

/* Sets option o from text v (from = "--x" or "MQPROC_X", for messages). */
static int set_opt(mqproc__config_t *cfg, const opt_t *o, const char *v, int from_env, char *err) {
  const char *src = from_env ? o->env : o->name;
  const char *dash = from_env ? "" : "--";
  char *end;
  long n;
  switch (o->type) {
  case OPT_STR: {
    char **p = field(cfg, o), *copy = mqproc__strdup(v);
    if (copy == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    free(*p);
    *p = copy;
    return MQPROC_OK;
  }
  case OPT_BOOL:
    if (parse_bool(v, field(cfg, o)) < 0)
      return mqproc__err(err, MQPROC_ECONFIG, "%s%s: expected true or false, got '%s'", dash, src,
                         v);
    return MQPROC_OK;
  case OPT_LIST:
    if (from_env) { /* comma-separated */
      for (const char *p = v; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len > 0 && list_add(field(cfg, o), p, len) != MQPROC_OK)
          return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
        p += len + (p[len] == ',');
      }
      return MQPROC_OK;
    }
    return list_add(field(cfg, o), v, strlen(v)) == MQPROC_OK
               ? MQPROC_OK
               : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  case OPT_INT:
  case OPT_LONG:
    errno = 0;
    n = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || n < o->min || n > o->max)
      return mqproc__err(err, MQPROC_ECONFIG, "%s%s: expected an integer in [%ld, %ld], got '%s'",
                         dash, src, o->min, o->max, v);
    if (o->type == OPT_INT)
      *(int *)field(cfg, o) = (int)n;
    else
      *(long *)field(cfg, o) = n;
    return MQPROC_OK;
  }
  return MQPROC_EINVAL;
}

static int applies(const opt_t *o, mqproc__cli_kind_t kind) {
  return o->only == FOR_ALL || (o->only == FOR_GENERIC) == (kind == MQPROC__CLI_GENERIC);
}

static const opt_t *find_opt(const char *name, size_t len, mqproc__cli_kind_t kind) {
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    if (strlen(OPTS[i].name) == len && strncmp(OPTS[i].name, name, len) == 0 &&
        applies(&OPTS[i], kind))
      return &OPTS[i];
  }
  return NULL;
}

/* Parses one argv option at *i (advancing it when the value is the next word); *set is
 * the option it set (NULL for --help). */
static int parse_arg(mqproc__config_t *cfg, mqproc__cli_kind_t kind, int argc, char **argv, int *i,
                     const opt_t **set, char *err) {
  const char *a = argv[*i], *name, *eq;
  size_t len;
  const opt_t *o;
  if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
    cfg->help = 1;
    return MQPROC_OK;
  }
  if (strncmp(a, "--", 2) != 0) /* also "" and "-": name below would point past the end */
    return mqproc__err(err, MQPROC_ECONFIG, "unexpected argument '%s' (see --help)", a);
  name = a + 2;
  eq = strchr(name, '=');
  len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  if ((o = find_opt(name, len, kind)) != NULL) {
    *set = o;
    if (eq != NULL)
      return set_opt(cfg, o, eq + 1, 0, err);
    if (o->type == OPT_BOOL)
      return set_opt(cfg, o, "true", 0, err);
    if (*i + 1 >= argc)
      return mqproc__err(err, MQPROC_ECONFIG, "--%s needs a value", o->name);
    return set_opt(cfg, o, argv[++*i], 0, err);
  }
  if (eq == NULL && strncmp(name, "no-", 3) == 0 &&
      (o = find_opt(name + 3, len - 3, kind)) != NULL && o->type == OPT_BOOL) {
    *set = o;
    return set_opt(cfg, o, "false", 0, err);
  }
  return mqproc__err(err, MQPROC_ECONFIG, "unknown option '%.*s' (see --help)", (int)(len + 2), a);
}

/* The private default for per-job logs: systemd's StateDirectory=, else the XDG state
 * directory, else ~/.local/state; never a shared directory such as /tmp, where another
 * user could plant the directory or its files first. */
static char *default_log_dir(void) {
  const char *v;
  if ((v = getenv("STATE_DIRECTORY")) != NULL && v[0] == '/')
    return mqproc__asprintf("%.*s/logs", (int)strcspn(v, ":"), v); /* first of a list */
  if ((v = getenv("XDG_STATE_HOME")) != NULL && v[0] == '/')
    return mqproc__asprintf("%s/mqproc/logs", v);
  if ((v = getenv("HOME")) != NULL && v[0] == '/')
    return mqproc__asprintf("%s/.local/state/mqproc/logs", strcmp(v, "/") == 0 ? "" : v);
  return mqproc__strdup("mqproc-logs"); /* no home: beside where the server runs */
}

/* Where each option's value came from: its default, the environment or argv. */
enum { FROM_DEFAULT = 0, FROM_ENV, FROM_ARGV };

static size_t opt_index(const char *name) {
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++)
    if (!strcmp(OPTS[i].name, name))
      return i;
  return 0; /* not reached: names below are in OPTS */
}

/* --NAME or --NAME-file: the one given by the stronger source (argv over environment);
 * both from the same source is an error, so neither is silently ignored. */
static int resolve_url_file(mqproc__config_t *cfg, const char *name, const int *from, char *err) {
  char file_opt[32];
  const opt_t *u, *f;
  char **url, **file, *text;
  int others;
  snprintf(file_opt, sizeof(file_opt), "%s-file", name);
  u = &OPTS[opt_index(name)];
  f = &OPTS[opt_index(file_opt)];
  url = field(cfg, u);
  file = field(cfg, f);
  if (from[f - OPTS] == FROM_DEFAULT || from[u - OPTS] > from[f - OPTS])
    return MQPROC_OK;
  if (from[u - OPTS] == from[f - OPTS])
    return mqproc__err(
        err, MQPROC_ECONFIG, "%s%s and %s%s are both given: give one",
        from[f - OPTS] == FROM_ARGV ? "--" : "", from[f - OPTS] == FROM_ARGV ? u->name : u->env,
        from[f - OPTS] == FROM_ARGV ? "--" : "", from[f - OPTS] == FROM_ARGV ? f->name : f->env);
  if ((text = mqproc__read_url_file(*file, &others, err)) == NULL) {
    char why[MQPROC_ERR_LEN];
    snprintf(why, sizeof(why), "%s", err);
    return mqproc__err(err, MQPROC_ECONFIG, "--%s: %s", f->name, why);
  }
  if (others && cfg->warning == NULL)
    cfg->warning =
        mqproc__asprintf("--%s: every user of this host can read %s: chmod o-r it", f->name, *file);
  free(*url);
  *url = text;
  return MQPROC_OK;
}

int mqproc__config_load(mqproc__config_t *cfg, mqproc__cli_kind_t kind, int argc, char **argv,
                        char *err) {
  int rc = MQPROC_OK, from[MQPROC__ARRAY_LEN(OPTS)] = {0};
  memset(cfg, 0, sizeof(*cfg));
  for (size_t i = 0; rc == MQPROC_OK && i < MQPROC__ARRAY_LEN(OPTS); i++)
    if (OPTS[i].def != NULL)
      rc = set_opt(cfg, &OPTS[i], OPTS[i].def, 0, err);
  for (size_t i = 0; rc == MQPROC_OK && i < MQPROC__ARRAY_LEN(OPTS); i++) {
    const char *v = getenv(OPTS[i].env);
    if (v != NULL && applies(&OPTS[i], kind)) {
      rc = set_opt(cfg, &OPTS[i], v, 1, err);
      from[i] = FROM_ENV;
    }
  }
  for (int i = 0; rc == MQPROC_OK && i < argc; i++) {
    const opt_t *set = NULL;
    rc = parse_arg(cfg, kind, argc, argv, &i, &set, err);
    if (set != NULL)
      from[set - OPTS] = FROM_ARGV;
  }
  if (rc == MQPROC_OK && !cfg->help)
    rc = resolve_url_file(cfg, "queue", from, err);
  if (rc == MQPROC_OK && !cfg->help)
    rc = resolve_url_file(cfg, "database", from, err);
  if (rc == MQPROC_OK) {
    if (!strcmp(cfg->result_format, "auto"))
      cfg->result_fmt = MQPROC__RESULT_AUTO;
    else if (!strcmp(cfg->result_format, "json"))
      cfg->result_fmt = MQPROC__RESULT_JSON;
    else if (!strcmp(cfg->result_format, "yaml"))
      cfg->result_fmt = MQPROC__RESULT_YAML;
    else
      rc = mqproc__err(err, MQPROC_ECONFIG, "--result-format: expected auto, json or yaml");
  }
  if (rc == MQPROC_OK) {
    cfg->isolate_process = !strcmp(cfg->isolation, "process");
    if (!cfg->isolate_process && strcmp(cfg->isolation, "thread") != 0)
      rc = mqproc__err(err, MQPROC_ECONFIG, "--isolation: expected thread or process, got '%s'",
                       cfg->isolation);
  }
  if (rc == MQPROC_OK) {
    cfg->quorum = !strcmp(cfg->queue_type, "quorum");
    if (!cfg->quorum && strcmp(cfg->queue_type, "classic") != 0)
      rc = mqproc__err(err, MQPROC_ECONFIG, "--queue-type: expected classic or quorum, got '%s'",
                       cfg->queue_type);
    else if (cfg->quorum && cfg->max_priority > 0)
      rc = mqproc__err(err, MQPROC_ECONFIG,
                       "--max-priority: quorum queues have no priorities (RabbitMQ 3.10); use a "
                       "classic queue, or a queue per priority");
    else if (cfg->quorum && !cfg->queue_durable)
      rc = mqproc__err(err, MQPROC_ECONFIG, "--no-queue-durable: quorum queues are always durable");
    if (cfg->delivery_limit == 0)
      cfg->delivery_limit = 2 * cfg->max_attempts;
  }
  if (rc == MQPROC_OK && (cfg->tls_verify_mode = mqproc__tls_verify_parse(cfg->tls_verify)) < 0)
    rc = mqproc__err(err, MQPROC_ECONFIG, "--tls-verify: expected full, ca or none, got '%s'",
                     cfg->tls_verify);
  if (rc == MQPROC_OK && cfg->log_dir == NULL && (cfg->log_dir = default_log_dir()) == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (rc == MQPROC_OK) {
    /* --prefetch alone bounds the jobs running at once, as before --concurrency came;
     * --concurrency alone gets twice its deliveries, so the next job waits delivered */
    int given = cfg->concurrency != 0;
    /* (what the queue's backend makes of --prefetch and --claim-ahead left unset, the
     * server asks it: server/setup.c, mqproc__server_setup_window) */
    cfg->prefetch_given = cfg->prefetch != 0;
    if (!given)
      cfg->concurrency = cfg->prefetch > 0 ? (cfg->prefetch < 1024 ? cfg->prefetch : 1024) : 1;
    if (cfg->prefetch == 0)
      cfg->prefetch = given && cfg->concurrency > 1 ? 2 * cfg->concurrency : cfg->concurrency;
  }
  return rc;
}

int mqproc__config_check_server(const mqproc__config_t *cfg, mqproc__cli_kind_t kind, char *err) {
  if (cfg->queue_url == NULL || cfg->queue_url[0] == '\0')
    return mqproc__err(err, MQPROC_ECONFIG, "--queue (or MQPROC_QUEUE) is required");
  if (cfg->database == NULL || cfg->database[0] == '\0')
    return mqproc__err(err, MQPROC_ECONFIG, "--database (or MQPROC_DATABASE) is required");
  if (cfg->processor == NULL || cfg->processor[0] == '\0')
    return mqproc__err(err, MQPROC_ECONFIG, "--processor (or MQPROC_PROCESSOR) is required");
  if (kind == MQPROC__CLI_GENERIC && (cfg->exec == NULL || cfg->exec[0] == '\0'))
    return mqproc__err(err, MQPROC_ECONFIG, "--exec (or MQPROC_EXEC) is required");
  if (kind == MQPROC__CLI_GENERIC && strcmp(cfg->ocrd_cli, "auto") != 0 &&
      strcmp(cfg->ocrd_cli, "true") != 0 && strcmp(cfg->ocrd_cli, "false") != 0)
    return mqproc__err(err, MQPROC_ECONFIG, "--ocrd-cli: expected auto, true or false");
  return MQPROC_OK;
}

void mqproc__config_free(mqproc__config_t *cfg) {
  free(cfg->warning);
  cfg->warning = NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    if (OPTS[i].type == OPT_STR) {
      char **p = field(cfg, &OPTS[i]);
      free(*p);
      *p = NULL;
    } else if (OPTS[i].type == OPT_LIST) {
      char ***p = field(cfg, &OPTS[i]);
      list_free(*p);
      *p = NULL;
    }
  }
}

void mqproc__config_help(FILE *out, mqproc__cli_kind_t kind) {
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    const opt_t *o = &OPTS[i];
    const char *meta = o->type == OPT_BOOL                           ? ""
                       : (o->type == OPT_STR || o->type == OPT_LIST) ? "=TEXT"
                                                                     : "=N";
    if (!applies(o, kind))
      continue;
    fprintf(out, "  --%s%s%s\n      %s\n      env %s", o->name,
            o->type == OPT_BOOL ? "[=BOOL]" : "", meta, o->help, o->env);
    if (o->def != NULL)
      fprintf(out, "; default %s", o->def);
    fputc('\n', out);
  }
}
