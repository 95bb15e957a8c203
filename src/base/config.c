/* Configuration: one table of options drives defaults, environment, argv and --help; the
 * operator commands' tables (cli/) share its row type and MQPROC__OPTS_SHARED (config.h). */
#include "base/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/metrics.h"
#include "base/util.h"

/* ---- the choices of the enum options ----------------------------------------------- */

/* The fields are enums stored through an int (set_opt). */
_Static_assert(sizeof(mqproc__isolation_t) == sizeof(int) &&
                   sizeof(mqproc__queue_type_t) == sizeof(int) &&
                   sizeof(mqproc__tls_verify_t) == sizeof(int) &&
                   sizeof(mqproc__result_format_t) == sizeof(int) &&
                   sizeof(mqproc__ocrd_cli_t) == sizeof(int) &&
                   sizeof(mqproc__ocrd_mets_server_t) == sizeof(int) &&
                   sizeof(mqproc__log_level_t) == sizeof(int) &&
                   sizeof(mqproc__log_format_t) == sizeof(int),
               "an enum option's field is not an int");

const mqproc__opt_choice_t mqproc__tls_verify_choices[] = {{"full", MQPROC__TLS_VERIFY_FULL},
                                                           {"ca", MQPROC__TLS_VERIFY_CA},
                                                           {"none", MQPROC__TLS_VERIFY_NONE},
                                                           {NULL, 0}};
static const mqproc__opt_choice_t ISOLATION[] = {
    {"thread", MQPROC__ISOLATION_THREAD}, {"process", MQPROC__ISOLATION_PROCESS}, {NULL, 0}};
static const mqproc__opt_choice_t OCRD_CLI[] = {{"auto", MQPROC__OCRD_CLI_AUTO},
                                                {"true", MQPROC__OCRD_CLI_TRUE},
                                                {"false", MQPROC__OCRD_CLI_FALSE},
                                                {NULL, 0}};
static const mqproc__opt_choice_t OCRD_METS_SERVER[] = {{"socket", MQPROC__OCRD_METS_SOCKET},
                                                        {"tcp", MQPROC__OCRD_METS_TCP},
                                                        {"off", MQPROC__OCRD_METS_OFF},
                                                        {NULL, 0}};
static const mqproc__opt_choice_t QUEUE_TYPE[] = {
    {"classic", MQPROC__QUEUE_CLASSIC}, {"quorum", MQPROC__QUEUE_QUORUM}, {NULL, 0}};
static const mqproc__opt_choice_t RESULT_FORMAT[] = {{"auto", MQPROC__RESULT_AUTO},
                                                     {"json", MQPROC__RESULT_JSON},
                                                     {"yaml", MQPROC__RESULT_YAML},
                                                     {NULL, 0}};
static const mqproc__opt_choice_t LOG_LEVEL[] = {
    {"debug", MQPROC__LOG_DEBUG}, {"info", MQPROC__LOG_INFO},    {"warn", MQPROC__LOG_WARN},
    {"error", MQPROC__LOG_ERROR}, {"warning", MQPROC__LOG_WARN}, {NULL, 0}};
static const mqproc__opt_choice_t LOG_FORMAT[] = {
    {"text", MQPROC__LOG_TEXT}, {"json", MQPROC__LOG_JSON}, {NULL, 0}};

/* ---- the options --------------------------------------------------------------------- */

#define F(field) offsetof(mqproc__config_t, field)

/* A row's first fields by type, as redis builds its table (createStringConfig,
 * createIntConfig, createEnumConfig, …): the name, its environment variable, the field of
 * mqproc__config_t, the default as text (NULL: none), then the range of a number or the
 * choices of an enum. The row adds .help and, for one program only, .only. */
#define ROW_STR(n, e, field, d)                                                                    \
  .name = n, .env = e, .type = MQPROC__OPT_STR, .offset = F(field), .def = d
#define ROW_LIST(n, e, field) .name = n, .env = e, .type = MQPROC__OPT_LIST, .offset = F(field)
#define ROW_BOOL(n, e, field, d)                                                                   \
  .name = n, .env = e, .type = MQPROC__OPT_BOOL, .offset = F(field), .def = d
#define ROW_INT(n, e, field, d, lo, hi)                                                            \
  .name = n, .env = e, .type = MQPROC__OPT_INT, .offset = F(field), .def = d, .min = lo, .max = hi
#define ROW_LONG(n, e, field, d, lo, hi)                                                           \
  .name = n, .env = e, .type = MQPROC__OPT_LONG, .offset = F(field), .def = d, .min = lo, .max = hi
#define ROW_ENUM(n, e, field, d, ch)                                                               \
  .name = n, .env = e, .type = MQPROC__OPT_ENUM, .offset = F(field), .def = d, .choices = ch

static const mqproc__opt_t OPTS[] = {
    {ROW_STR("queue", "MQPROC_QUEUE", queue_url, NULL),
     .help = "AMQP URL of the broker, amqp://user:pass@host:port/vhost, dir:///SPOOL for a "
             "directory queue (docs/dir-queue.md), or a database as the queue: postgresql://... "
             "or sqlite:///PATH, the --database's own URL for one transaction per job step "
             "(docs/table-queue.md) (required)"},
    {ROW_STR("database", "MQPROC_DATABASE", database, NULL),
     .help = "PostgreSQL URL or conninfo of the job store, or sqlite:///PATH[?synchronous=normal] "
             "(docs/sqlite-store.md) (required)"},
    MQPROC__OPTS_SHARED,
    {ROW_BOOL("database-pooler", "MQPROC_DATABASE_POOLER", database_pooler, "false"),
     .help = "--database goes through PgBouncer (or another pooler) in transaction pooling: no "
             "prepared statements, no session SET, no LISTEN (operators' wishes and cancels are "
             "read with each beat, within 2 s)"},
    {ROW_STR("processor", "MQPROC_PROCESSOR", processor, NULL),
     .help =
         "processor name = job queue name (required for mqproc; overrides a C processor's name)"},
    {ROW_STR("exec", "MQPROC_EXEC", exec, NULL), .only = MQPROC__FOR_GENERIC,
     .help =
         "command run per job, split like sh words (no shell); gets the job as JSON on stdin; "
         "always a process of its own, so --time-limit applies (--isolation is for C processors)"},
    {ROW_INT("instances", "MQPROC_INSTANCES", instances, "1", 1, 256),
     .help = "run N servers as child processes of a supervisor that restarts one that dies (at "
             "once when it had run 10 s, else after 1 s doubling to 60 s: a crash loop), forwards "
             "SIGTERM/SIGINT to all and speaks for them to systemd"},
    {ROW_INT("max-jobs-per-child", "MQPROC_MAX_JOBS_PER_CHILD", max_jobs_per_child, "0", 0,
             1000000000),
     .help =
         "after N jobs a server takes no more, finishes the ones in hand and exits with status 75 "
         "for a fresh one (the supervisor starts it at once): for processors that leak; 0 = never"},
    {ROW_STR("on-failure", "MQPROC_ON_FAILURE", on_failure, NULL),
     .help = "command run once when a job ends FAILED, split like sh words (no shell): gets the "
             "job, its last error and its request as JSON on stdin, its output goes to the job's "
             "log; time-limited (--on-failure-timeout), its failure is logged, never retried"},
    {ROW_INT("on-failure-timeout", "MQPROC_ON_FAILURE_TIMEOUT", on_failure_timeout_s, "60", 1,
             86400),
     .help = "seconds an --on-failure command may run before its process group is killed"},
    {ROW_INT("on-failure-max", "MQPROC_ON_FAILURE_MAX", on_failure_max, "4", 1, 1024),
     .help = "--on-failure commands running at once; the handlers of further FAILED jobs wait "
             "their turn in order (at most 1000 waiting: beyond that a job's handler is not run, "
             "logged with the job's id)"},
    {ROW_STR("http", "MQPROC_HTTP", http, NULL),
     .help = "serve /metrics (Prometheus), /healthz, /readyz and the status page on ADDR:PORT "
             "(e.g. 127.0.0.1:9464; off by default); read-only unless --http-admin-token"},
    {ROW_STR("http-admin-token", "MQPROC_HTTP_ADMIN_TOKEN", http_admin_token, NULL),
     .help = "FILE whose first line is the token (16+ characters, not world-readable) that lets "
             "the status page retry, cancel, pause and resume, audited (sign in on /login, or send "
             "Authorization: Bearer TOKEN); with it (or --http-read-token) a job's request and log "
             "are shown only to those signed in"},
    {ROW_STR("http-read-token", "MQPROC_HTTP_READ_TOKEN", http_read_token, NULL),
     .help = "FILE whose first line is a token (as --http-admin-token's) that shows the status "
             "page's job requests and logs without letting it act"},
    {ROW_LIST("http-host", "MQPROC_HTTP_HOST", http_hosts),
     .help = "a name clients reach --http by, repeatable (env: comma-separated): a request whose "
             "Host is neither an IP address, localhost, the --http host nor such a name gets 421 "
             "(a web page rebinding its name to this address cannot read the page)"},
    {ROW_INT("http-session-ttl", "MQPROC_HTTP_SESSION_TTL", http_session_ttl_s, "43200", 1,
             2592000),
     .help = "seconds a status-page sign-in lasts (sign-out ends it at once)"},
    {ROW_STR("metrics-buckets", "MQPROC_METRICS_BUCKETS", metrics_buckets, MQPROC__DEFAULT_BUCKETS),
     .help = "upper bounds in seconds of the queue-wait and run-time histograms of /metrics"},
    {ROW_ENUM("isolation", "MQPROC_ISOLATION", isolation, "thread", ISOLATION),
     .only = MQPROC__FOR_C,
     .help = "where the processing function runs: thread (a thread of the server: least overhead, "
             "for trusted code; a crash takes the server down and --time-limit cannot stop it) or "
             "process (one pre-started worker process per --prefetch slot: a crash or a hang fails "
             "only its try, --time-limit applies, a dead worker is replaced)"},
    {ROW_ENUM("ocrd-cli", "MQPROC_OCRD_CLI", ocrd_cli, "auto", OCRD_CLI),
     .only = MQPROC__FOR_GENERIC,
     .help = "pass OCR-D's processor arguments (--working-dir --mets --log-level [--page-id] "
             "--input-file-grp [--output-file-grp] --parameter) after the --exec words: true, "
             "false, or auto (when the program's name starts with ocrd-)"},
    {ROW_STR("ocrd-log-level", "MQPROC_OCRD_LOG_LEVEL", ocrd_log_level, "DEBUG"),
     .only = MQPROC__FOR_GENERIC,
     .help = "the --log-level given to OCR-D processors (OCR-D's worker passes DEBUG)"},
    {ROW_BOOL("ocrd-check-output", "MQPROC_OCRD_CHECK_OUTPUT", ocrd_check_output, "true"),
     .only = MQPROC__FOR_GENERIC,
     .help = "after an OCR-D processor exits 0, check that the METS (or its METS server) lists a "
             "file in each output group for each page the job names: a try whose output is "
             "missing fails, naming the pages (false: for a processor that skips pages)"},
    {ROW_STR("workspace-root", "MQPROC_WORKSPACE_ROOT", workspace_root, NULL),
     .help = "directory of workspaces: a message's workspace_id W means the METS <root>/W/mets.xml "
             "(without it, workspace_id messages are dead-lettered)"},
    {ROW_ENUM("ocrd-mets-server", "MQPROC_OCRD_METS_SERVER", ocrd_mets_server, "socket",
              OCRD_METS_SERVER),
     .help = "the METS server of a job from OCR-D's Processing Server (a message with "
             "internal_callback_url), passed to OCR-D processors as --mets-server-url as OCR-D's "
             "worker does: socket (the Unix socket the Processing Server starts for the "
             "workspace, under --ocrd-sockets-dir), tcp (its /tcp_mets endpoint, for "
             "use_tcp_mets: true in ps_config.yml) or off (none: processors write mets.xml)"},
    {ROW_STR("ocrd-sockets-dir", "MQPROC_OCRD_SOCKETS_DIR", ocrd_sockets_dir, NULL),
     .help = "the Processing Server's OCRD_NETWORK_SOCKETS_ROOT_DIR, where its METS servers' "
             "sockets are (default: $OCRD_NETWORK_SOCKETS_ROOT_DIR, else "
             "/tmp/ocrd_network_sockets)"},
    {ROW_STR("exchange", "MQPROC_EXCHANGE", exchange, "ocrd-network-default"),
     .help = "direct exchange the job and result queues are bound to"},
    {ROW_STR("dead-letter-queue", "MQPROC_DEAD_LETTER_QUEUE", dead_letter_queue, NULL),
     .help = "queue for messages given up on (default: <processor>.dead; on dir:// they go into "
             "the job queue's failed/ directory)"},
    {ROW_LIST("queue-arg", "MQPROC_QUEUE_ARGS", queue_args),
     .help = "extra queue argument key=value, repeatable (env: comma-separated); used only when "
             "the queue does not exist yet"},
    {ROW_INT("max-priority", "MQPROC_MAX_PRIORITY", max_priority, "0", 0, 255),
     .help = "declare the job queue with x-max-priority N (1-255, RabbitMQ advises <= 10), so a "
             "message's priority orders delivery; every party declaring the queue must use the "
             "same N (a queue that exists with another is an error); 0 = no priorities"},
    {ROW_ENUM("queue-type", "MQPROC_QUEUE_TYPE", queue_type, "classic", QUEUE_TYPE),
     .help = "classic, or quorum: the job and dead-letter queues are declared as RabbitMQ quorum "
             "queues (replicated, durable; no priorities; every party must declare them alike)"},
    {ROW_INT("delivery-limit", "MQPROC_DELIVERY_LIMIT", delivery_limit, "0", 0, 1000000),
     .help = "quorum queues: x-delivery-limit, the broker's own cap on a message's returns; past "
             "it the broker dead-letters it into the dead-letter queue (0 = 2 x --max-attempts, "
             "above our own cap so ours acts first)"},
    {ROW_BOOL("queue-durable", "MQPROC_QUEUE_DURABLE", queue_durable, "true"),
     .help = "declare queues durable (OCR-D core <= 3.12 declares them non-durable)"},
    {ROW_INT("concurrency", "MQPROC_CONCURRENCY", concurrency, NULL, 1, 1024),
     .help = "tries running at once per server: C processors on as many threads (or worker "
             "processes), commands as that many children; a job is claimed when its try can start, "
             "or on a --claim-ahead pass (default: --prefetch, or 1)"},
    {ROW_INT("claim-ahead", "MQPROC_CLAIM_AHEAD", claim_ahead, "-1", -1, 1024),
     .help = "deliveries claimed while every run slot is busy, so each starts the moment a slot "
             "frees (short jobs: the claim's commit overlaps a run); a server that dies holding "
             "them gives them up at once to a server on its host, on its lease elsewhere (default "
             "-1: --concurrency on a dir:// queue, more while its automatic window is deep (see "
             "--prefetch), 0 on amqp://)"},
    {ROW_INT("prefetch", "MQPROC_PREFETCH", prefetch, NULL, 1, 65535),
     .help = "deliveries in flight per server (basic.qos); the ones beyond --concurrency and "
             "--claim-ahead wait, unclaimed, for a free slot (default: 2 x --concurrency when that "
             "is given, else 1; on a dir:// queue with neither this nor --claim-ahead given, that "
             "is where an automatic window starts: it deepens, up to 64, while runs end faster "
             "than the next jobs' claims commit, and shrinks back when they do not)"},
    {ROW_INT("retries", "MQPROC_RETRIES", retries, "3", 0, 100),
     .help = "extra local tries after a failed try"},
    {ROW_INT("retry-backoff-ms", "MQPROC_RETRY_BACKOFF_MS", retry_backoff_ms, "200", 0, 3600000),
     .help = "wait before the first local retry, doubled per retry (with jitter)"},
    {ROW_INT("max-requeues", "MQPROC_MAX_REQUEUES", max_requeues, "1", 0, 1000),
     .help = "times a job whose local tries all failed goes back to the queue before it is FAILED"},
    {ROW_INT("final-exit-code", "MQPROC_FINAL_EXIT_CODE", final_exit_code, "0", 0, 255),
     .help = "a try that exits with this code (a C processor: returns it) fails the job at once, "
             "without retries or requeue (0 = none)"},
    {ROW_INT("heartbeat", "MQPROC_HEARTBEAT", heartbeat_s, "30", 0, 3600),
     .help = "AMQP heartbeat in seconds (0 = off, not advised)"},
    {ROW_INT("confirm-timeout", "MQPROC_CONFIRM_TIMEOUT", confirm_timeout_s, "30", 0, 86400),
     .help = "seconds a result or dead letter may wait for the broker's confirm before the "
             "connection is dropped and made again (the message is then sent again: at least "
             "once); a quorum queue without a majority never confirms; 0 = wait forever"},
    {ROW_INT("broker-timeout", "MQPROC_BROKER_TIMEOUT", broker_timeout_s, "10", 1, 3600),
     .help = "seconds one broker write or request may take; a broker that stops reading (a stalled "
             "network) costs the connection, not the server's loop; a broker list's members share "
             "it when connecting (at least 2 s each)"},
    {ROW_INT("lease", "MQPROC_LEASE", lease_s, "30", 2, 86400),
     .help = "seconds a running job's lease lasts; renewed while it runs"},
    {ROW_INT("queue-visibility", "MQPROC_QUEUE_VISIBILITY", queue_visibility_s, "30", 2, 86400),
     .help = "a table queue (--queue postgresql://... or sqlite:///PATH): seconds a message this "
             "server took stays invisible to the others; pushed out every third of it while the "
             "server holds the message, so a dead server's messages come back after at most this "
             "(docs/table-queue.md)"},
    {ROW_INT("ack-after", "MQPROC_ACK_AFTER", ack_after_s, "300", 0, 86400),
     .help = "ack the delivery of a job still running after this many seconds (the job table and "
             "its lease then carry it; keeps long jobs clear of the broker's consumer_timeout; 0 = "
             "ack only at the end)"},
    {ROW_INT("max-attempts", "MQPROC_MAX_ATTEMPTS", max_attempts, "5", 1, 1000),
     .help = "claims of one job (requeues and takeovers of dead servers' jobs included) before it "
             "is FAILED"},
    {ROW_INT("time-limit", "MQPROC_TIME_LIMIT", time_limit_s, "0", 0, 31536000),
     .help = "seconds a try may run before its process group is killed (0 = no limit); a message's "
             "time_limit may only lower it (a C processor: only with --isolation=process)"},
    {ROW_LONG("max-log-size", "MQPROC_MAX_LOG_SIZE", max_log_bytes, "1073741824", 4096, 1L << 50),
     .help = "bytes a job's log may grow to in one try; a processor writing more output is killed "
             "(the files it writes are not limited)"},
    {ROW_LONG("log-inline-max", "MQPROC_LOG_INLINE_MAX", log_inline_max, "8192", 0, 1048576),
     .help = "bytes of a job's first try's output (its header line included) kept in memory: a "
             "try that succeeds within them stores its output in the job's row (log_text) and "
             "makes no log file; a try that fails or writes more makes the file, as every later "
             "try does (0 = a file for every job)"},
    {ROW_INT("shutdown-grace", "MQPROC_SHUTDOWN_GRACE", shutdown_grace_s, "30", 0, 86400),
     .help = "seconds running jobs get to finish after SIGTERM/SIGINT before they are stopped and "
             "requeued"},
    {ROW_LONG("max-message-size", "MQPROC_MAX_MESSAGE_SIZE", max_message_bytes, "4194304", 64,
              1L << 30),
     .help = "largest message body accepted, in bytes; larger ones are dead-lettered"},
    {ROW_INT("callback-timeout-ms", "MQPROC_CALLBACK_TIMEOUT_MS", callback_timeout_ms, "10000", 1,
             600000),
     .help = "timeout of one callback POST"},
    {ROW_INT("callback-retries", "MQPROC_CALLBACK_RETRIES", callback_retries, "3", 0, 100),
     .help = "extra tries of a failed callback POST"},
    {ROW_LIST("callback-allow", "MQPROC_CALLBACK_ALLOW", callback_allow),
     .help = "IP range (CIDR) callbacks may reach, repeatable (env: comma-separated); once given, "
             "callbacks reach only these; it also lifts the built-in denial for what it names"},
    {ROW_LIST("callback-deny", "MQPROC_CALLBACK_DENY", callback_deny),
     .help = "IP range (CIDR) callbacks may not reach, repeatable; always denied "
             "besides: " MQPROC__CALLBACK_DENY_DEFAULT " (link-local and cloud metadata)"},
    {ROW_STR("result-queue-pattern", "MQPROC_RESULT_QUEUE_PATTERN", result_queue_pattern, NULL),
     .help = "extended regular expression a message's result_queue_name must match as a whole "
             "(default: any); other messages are dead-lettered, so a sender cannot make the server "
             "declare queues at will; on dir:// a message makes a queue directory only when this "
             "is given (else its result queue must exist)"},
    {ROW_BOOL("declare-result-queues", "MQPROC_DECLARE_RESULT_QUEUES", declare_result_queues,
              "true"),
     .help = "declare and bind result_queue_name before publishing (as OCR-D does)"},
    {ROW_ENUM("result-format", "MQPROC_RESULT_FORMAT", result_format, "auto", RESULT_FORMAT),
     .help = "result message encoding: auto (like the request), json or yaml"},
    {ROW_STR("log-dir", "MQPROC_LOG_DIR", log_dir, NULL),
     .help = "directory of the per-job log files, created private (0750, files 0640) (default: "
             "$STATE_DIRECTORY/logs under systemd, else $XDG_STATE_HOME/mqproc/logs, else "
             "~/.local/state/mqproc/logs)"},
    {ROW_LIST("pass-env", "MQPROC_PASS_ENV", pass_env),
     .help = "environment variable passed on to processors, repeatable (env: comma-separated); "
             "NAME or PREFIX* (processors get only PATH, HOME, LANG, LC_*, TZ, TMPDIR, the "
             "MQPROC_* job variables and these)"},
    {ROW_ENUM("log-level", "MQPROC_LOG_LEVEL", log_level, "info", LOG_LEVEL),
     .help = "the least severe lines logged (warning: as warn)"},
    {ROW_ENUM("log-format", "MQPROC_LOG_FORMAT", log_format, "text", LOG_FORMAT),
     .help = "text, or json: one object per line with ts, level, worker_id, msg and, on job lines, "
             "job_id, attempt, try, processor"},
    {ROW_STR("worker-id", "MQPROC_WORKER_ID", worker_id, NULL),
     .help = "this server's id in the job table (default: host:pid)"},
    {ROW_BOOL("migrate", "MQPROC_MIGRATE", migrate, "false"),
     .help = "create or upgrade the job tables at start"},
};

static void *field(mqproc__config_t *cfg, const mqproc__opt_t *o) {
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

const char *mqproc__opt_choices(const mqproc__opt_t *o, const char *sep, char *buf, size_t cap) {
  const char *names[16]; /* an enum has a handful of choices */
  size_t n = 0, len = 0;
  for (const mqproc__opt_choice_t *c = o->choices; c->name != NULL && n < 16; c++) {
    const mqproc__opt_choice_t *first = o->choices;
    while (first->value != c->value)
      first++;
    if (first == c) /* the first name of its value; a later one is an alias */
      names[n++] = c->name;
  }
  buf[0] = '\0';
  for (size_t i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(buf + len, cap - len, "%s%s",
                            i == 0        ? ""
                            : sep != NULL ? sep
                            : i + 1 < n   ? ", "
                                          : " or ",
                            names[i]);
  return buf;
}

int mqproc__opt_enum_parse(const mqproc__opt_t *o, const char *s, const char *src, char *err) {
  char choices[256];
  for (const mqproc__opt_choice_t *c = o->choices; s != NULL && c->name != NULL; c++)
    if (strcasecmp(s, c->name) == 0)
      return c->value;
  mqproc__err(err, MQPROC_ECONFIG, "%s: expected %s, got '%s'", src,
              mqproc__opt_choices(o, NULL, choices, sizeof(choices)), s != NULL ? s : "");
  return -1;
}

/* Sets option o from text v (from = "--x" or "MQPROC_X", for messages). */
static int set_opt(mqproc__config_t *cfg, const mqproc__opt_t *o, const char *v, int from_env,
                   char *err) {
  const char *src = from_env ? o->env : o->name;
  const char *dash = from_env ? "" : "--";
  char *end;
  long n;
  switch (o->type) {
  case MQPROC__OPT_STR: {
    char **p = field(cfg, o), *copy = mqproc__strdup(v);
    if (copy == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    free(*p);
    *p = copy;
    return MQPROC_OK;
  }
  case MQPROC__OPT_BOOL:
    if (parse_bool(v, field(cfg, o)) < 0)
      return mqproc__err(err, MQPROC_ECONFIG, "%s%s: expected true or false, got '%s'", dash, src,
                         v);
    return MQPROC_OK;
  case MQPROC__OPT_LIST:
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
  case MQPROC__OPT_ENUM: {
    char name[80];
    int value;
    snprintf(name, sizeof(name), "%s%s", dash, src);
    if ((value = mqproc__opt_enum_parse(o, v, name, err)) < 0)
      return MQPROC_ECONFIG;
    *(int *)field(cfg, o) = value;
    return MQPROC_OK;
  }
  case MQPROC__OPT_INT:
  case MQPROC__OPT_LONG:
    errno = 0;
    n = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || n < o->min || n > o->max)
      return mqproc__err(err, MQPROC_ECONFIG, "%s%s: expected an integer in [%ld, %ld], got '%s'",
                         dash, src, o->min, o->max, v);
    if (o->type == MQPROC__OPT_INT)
      *(int *)field(cfg, o) = (int)n;
    else
      *(long *)field(cfg, o) = n;
    return MQPROC_OK;
  }
  return MQPROC_EINVAL;
}

static int applies(const mqproc__opt_t *o, mqproc__cli_kind_t kind) {
  return o->only == MQPROC__FOR_ALL ||
         (o->only == MQPROC__FOR_GENERIC) == (kind == MQPROC__CLI_GENERIC);
}

static const mqproc__opt_t *find_opt(const char *name, size_t len, mqproc__cli_kind_t kind) {
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
                     const mqproc__opt_t **set, char *err) {
  const char *a = argv[*i], *name, *eq;
  size_t len;
  const mqproc__opt_t *o;
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
    if (o->type == MQPROC__OPT_BOOL)
      return set_opt(cfg, o, "true", 0, err);
    if (*i + 1 >= argc)
      return mqproc__err(err, MQPROC_ECONFIG, "--%s needs a value", o->name);
    return set_opt(cfg, o, argv[++*i], 0, err);
  }
  if (eq == NULL && strncmp(name, "no-", 3) == 0 &&
      (o = find_opt(name + 3, len - 3, kind)) != NULL && o->type == MQPROC__OPT_BOOL) {
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

/* OCR-D's default of OCRD_NETWORK_SOCKETS_ROOT_DIR (ocrd_utils/config.py: under
 * gettempdir(), /tmp unless TMPDIR says otherwise on the Processing Server's host). */
static char *default_sockets_dir(void) {
  const char *v = getenv("OCRD_NETWORK_SOCKETS_ROOT_DIR");
  return mqproc__strdup(v != NULL && v[0] != '\0' ? v : "/tmp/ocrd_network_sockets");
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
  const mqproc__opt_t *u, *f;
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
    const mqproc__opt_t *set = NULL;
    rc = parse_arg(cfg, kind, argc, argv, &i, &set, err);
    if (set != NULL)
      from[set - OPTS] = FROM_ARGV;
  }
  if (rc == MQPROC_OK && !cfg->help)
    rc = resolve_url_file(cfg, "queue", from, err);
  if (rc == MQPROC_OK && !cfg->help)
    rc = resolve_url_file(cfg, "database", from, err);
  if (rc == MQPROC_OK) {
    int quorum = cfg->queue_type == MQPROC__QUEUE_QUORUM;
    if (quorum && cfg->max_priority > 0)
      rc = mqproc__err(err, MQPROC_ECONFIG,
                       "--max-priority: quorum queues have no priorities (RabbitMQ 3.10); use a "
                       "classic queue, or a queue per priority");
    else if (quorum && !cfg->queue_durable)
      rc = mqproc__err(err, MQPROC_ECONFIG, "--no-queue-durable: quorum queues are always durable");
    if (cfg->delivery_limit == 0)
      cfg->delivery_limit = 2 * cfg->max_attempts;
  }
  if (rc == MQPROC_OK && cfg->log_dir == NULL && (cfg->log_dir = default_log_dir()) == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (rc == MQPROC_OK && cfg->ocrd_sockets_dir == NULL &&
      (cfg->ocrd_sockets_dir = default_sockets_dir()) == NULL)
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
  return MQPROC_OK;
}

void mqproc__config_free(mqproc__config_t *cfg) {
  free(cfg->warning);
  cfg->warning = NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    if (OPTS[i].type == MQPROC__OPT_STR) {
      char **p = field(cfg, &OPTS[i]);
      free(*p);
      *p = NULL;
    } else if (OPTS[i].type == MQPROC__OPT_LIST) {
      char ***p = field(cfg, &OPTS[i]);
      list_free(*p);
      *p = NULL;
    }
  }
}

void mqproc__config_help(FILE *out, mqproc__cli_kind_t kind) {
  mqproc__config_help_rows(out, kind, NULL);
}

static void help_row(FILE *out, const mqproc__opt_t *o);

void mqproc__config_help_rows(FILE *out, mqproc__cli_kind_t kind, const char *const *names) {
  for (size_t i = 0; names == NULL && i < MQPROC__ARRAY_LEN(OPTS); i++)
    if (applies(&OPTS[i], kind))
      help_row(out, &OPTS[i]);
  for (; names != NULL && *names != NULL; names++) /* in the order asked */
    for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++)
      if (applies(&OPTS[i], kind) && !strcmp(OPTS[i].name, *names))
        help_row(out, &OPTS[i]);
}

static void help_row(FILE *out, const mqproc__opt_t *o) {
  char meta[256] = "=TEXT";
  if (o->type == MQPROC__OPT_BOOL)
    snprintf(meta, sizeof(meta), "[=BOOL]");
  else if (o->type == MQPROC__OPT_INT || o->type == MQPROC__OPT_LONG)
    snprintf(meta, sizeof(meta), "=N");
  else if (o->type == MQPROC__OPT_ENUM)
    mqproc__opt_choices(o, "|", meta + 1, sizeof(meta) - 1); /* --isolation=thread|process */
  fprintf(out, "  --%s%s\n      %s\n      env %s", o->name, meta, o->help, o->env);
  if (o->def != NULL)
    fprintf(out, "; default %s", o->def);
  fputc('\n', out);
}
