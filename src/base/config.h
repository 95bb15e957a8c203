/* Configuration: every server option, read from MQPROC_* environment variables and
 * then from the command line (the command line wins). One table in config.c drives
 * parsing, defaults and --help; to add an option, add a field here and a row there. An
 * option with a fixed set of values is an enum row (redis's createEnumConfig): its
 * choices, each name with its value, and one enum field here.
 *
 * The rows are of mqproc__opt_t, which the operator commands' tables (cli/admin.h) use
 * too: the rows both take (the URL files, TLS, --group-access) are declared once, in
 * MQPROC__OPTS_SHARED below. */
#ifndef MQPROC_CONFIG_H
#define MQPROC_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "base/log.h"

/* ---- the values of the enum options ------------------------------------------------ */

typedef enum mqproc__result_format {
  MQPROC__RESULT_AUTO = 0, /* like the request */
  MQPROC__RESULT_JSON,
  MQPROC__RESULT_YAML
} mqproc__result_format_t;

/* --isolation: where a C processor's function runs (runner/thread.c, runner/worker.c). */
typedef enum mqproc__isolation {
  MQPROC__ISOLATION_THREAD = 0, /* a thread of the server */
  MQPROC__ISOLATION_PROCESS     /* pre-started worker processes */
} mqproc__isolation_t;

/* --queue-type: the job and dead-letter queues' kind on RabbitMQ. */
typedef enum mqproc__queue_type {
  MQPROC__QUEUE_CLASSIC = 0,
  MQPROC__QUEUE_QUORUM /* replicated; declared actively (broker/amqp_declare.c) */
} mqproc__queue_type_t;

/* --tls-verify: what is checked of an amqps:// broker's certificate (broker.h's
 * mqproc__tls_t carries it to the broker). */
typedef enum mqproc__tls_verify {
  MQPROC__TLS_VERIFY_FULL = 0, /* chain and host name */
  MQPROC__TLS_VERIFY_CA,       /* chain only */
  MQPROC__TLS_VERIFY_NONE      /* nothing (testing only) */
} mqproc__tls_verify_t;

/* --ocrd-cli: whether a command gets OCR-D's processor arguments (runner/ocrd_argv.h). */
typedef enum mqproc__ocrd_cli {
  MQPROC__OCRD_CLI_AUTO = 0, /* when the program's name starts with ocrd- */
  MQPROC__OCRD_CLI_TRUE,
  MQPROC__OCRD_CLI_FALSE
} mqproc__ocrd_cli_t;

/* --ocrd-mets-server: which METS server a job from OCR-D's Processing Server (a message
 * with internal_callback_url) goes through (runner/ocrd_argv.h). */
typedef enum mqproc__ocrd_mets_server {
  MQPROC__OCRD_METS_SOCKET = 0, /* the Unix socket the Processing Server starts per workspace */
  MQPROC__OCRD_METS_TCP,        /* its /tcp_mets endpoint (ps_config.yml use_tcp_mets: true) */
  MQPROC__OCRD_METS_OFF         /* none: processors write mets.xml themselves */
} mqproc__ocrd_mets_server_t;

/* ---- the configuration ------------------------------------------------------------- */

typedef struct mqproc__config {
  char *queue_url;     /* --queue */
  char *database;      /* --database (or read from --database-file) */
  char *queue_file;    /* --queue-file: the --queue URL(s) in a file */
  int database_pooler; /* --database-pooler: PgBouncer in transaction pooling */
  char *database_file; /* --database-file */
  char *tls_ca;        /* --tls-ca: CAs for amqps:// */
  char *tls_cert;      /* --tls-cert, --tls-key: client certificate */
  char *tls_key;
  mqproc__tls_verify_t tls_verify; /* --tls-verify full|ca|none */
  char *processor;                 /* --processor: queue name = processor name */
  char *exec;                      /* --exec: command line of an external processor */
  char *on_failure;                /* --on-failure: command run when a job ends FAILED */
  int on_failure_timeout_s;        /* --on-failure-timeout */
  int on_failure_max;              /* --on-failure-max: handlers running at once */
  char *http;                      /* --http ADDR:PORT: /metrics, /healthz, /readyz, the page */
  char *http_admin_token;          /* --http-admin-token FILE: the page may act */
  char *http_read_token;           /* --http-read-token FILE: the page shows requests and logs */
  char **http_hosts;               /* --http-host NAME (repeatable): names a Host may give */
  int http_session_ttl_s;          /* --http-session-ttl: a signed-in browser's session */
  char *metrics_buckets;           /* --metrics-buckets: histogram bounds in seconds */
  mqproc__isolation_t isolation;   /* --isolation thread|process: where a C processor runs */
  mqproc__ocrd_cli_t ocrd_cli;     /* --ocrd-cli auto|true|false: OCR-D's processor arguments */
  char *ocrd_log_level;            /* --ocrd-log-level: their --log-level */
  int ocrd_check_output;           /* --ocrd-check-output: an OCR-D try's output is checked */
  char *workspace_root;            /* --workspace-root: METS of workspace_id = root/id/mets.xml */
  mqproc__ocrd_mets_server_t ocrd_mets_server; /* --ocrd-mets-server socket|tcp|off */
  char *ocrd_sockets_dir;          /* --ocrd-sockets-dir: where OCR-D's METS server sockets are */
  char *exchange;                  /* --exchange */
  char *dead_letter_queue;         /* --dead-letter-queue (default <processor>.dead) */
  char **queue_args;               /* --queue-arg key=value (repeatable), NULL-terminated */
  int queue_durable;               /* --queue-durable */
  mqproc__queue_type_t queue_type; /* --queue-type classic|quorum */
  int delivery_limit;        /* --delivery-limit: quorum x-delivery-limit (0 at input: auto) */
  int prefetch;              /* --prefetch: deliveries in flight */
  int max_priority;          /* --max-priority: x-max-priority of the job queue, 0 = none */
  int instances;             /* --instances: servers run by a supervisor (1 = no supervisor) */
  int max_jobs_per_child;    /* --max-jobs-per-child: recycle after so many jobs, 0 = never */
  int concurrency;           /* --concurrency: tries running at once */
  int claim_ahead;           /* --claim-ahead: jobs claimed while every slot runs one (-1:
                                not given: the queue's backend says, server/setup.c) */
  int prefetch_given;        /* --prefetch was given (else it was derived here) */
  int retries;               /* --retries: extra local tries after a failure */
  int retry_backoff_ms;      /* --retry-backoff-ms: first wait, doubled per retry */
  int max_requeues;          /* --max-requeues */
  int final_exit_code;       /* --final-exit-code: the processor says "cannot succeed" */
  int heartbeat_s;           /* --heartbeat */
  int broker_timeout_s;      /* --broker-timeout: deadline of one broker write or RPC */
  int confirm_timeout_s;     /* --confirm-timeout: longest wait for a publisher confirm */
  int lease_s;               /* --lease */
  int queue_visibility_s;    /* --queue-visibility: a table queue's hold without an extend */
  int ack_after_s;           /* --ack-after: ack a still-running job's delivery (0 = never) */
  int max_attempts;          /* --max-attempts: claims of one job, takeovers included */
  int time_limit_s;          /* --time-limit: per try (0 = none); a message may override */
  long max_log_bytes;        /* --max-log-size: a job log may not grow beyond this */
  long log_inline_max;       /* --log-inline-max: a first try's output kept in the job's row */
  int shutdown_grace_s;      /* --shutdown-grace */
  long max_message_bytes;    /* --max-message-size */
  int callback_timeout_ms;   /* --callback-timeout-ms */
  int callback_retries;      /* --callback-retries */
  int declare_result_queues; /* --declare-result-queues */
  mqproc__result_format_t result_format; /* --result-format auto|json|yaml */
  char *log_dir;                 /* --log-dir: per-job logs (default: see config_default_log_dir) */
  int group_access;              /* --group-access: files and directories made 0660/0770 */
  char **pass_env;               /* --pass-env NAME (repeatable): more environment for processors */
  char **callback_allow;         /* --callback-allow CIDR (repeatable) */
  char **callback_deny;          /* --callback-deny CIDR (repeatable), beside the built-in ranges */
  char *result_queue_pattern;    /* --result-queue-pattern: ERE a result_queue_name must match */
  mqproc__log_level_t log_level; /* --log-level debug|info|warn|error */
  mqproc__log_format_t log_format; /* --log-format text|json */
  char *worker_id;                 /* --worker-id (default host:pid) */
  int migrate;                     /* --migrate: apply the schema at start */
  int help;                        /* --help / -h was among the options */
  /* derived */
  char *warning; /* a warning to log once the log is set up (e.g. a URL file others read) */
} mqproc__config_t;

typedef enum mqproc__cli_kind {
  MQPROC__CLI_GENERIC, /* the mqproc program: --processor and --exec required */
  MQPROC__CLI_C        /* a C processor: name and function are compiled in */
} mqproc__cli_kind_t;

/* Sets defaults, then reads the environment, then argv (options only; argv[0] is the
 * first option). Returns MQPROC_ECONFIG with err naming the option on bad input. */
int mqproc__config_load(mqproc__config_t *cfg, mqproc__cli_kind_t kind, int argc, char **argv,
                        char *err);
/* Checks what a processing server needs (URLs, processor, exec). */
int mqproc__config_check_server(const mqproc__config_t *cfg, mqproc__cli_kind_t kind, char *err);
void mqproc__config_free(mqproc__config_t *cfg);
/* Prints the option list (flag, env, default, help). */
void mqproc__config_help(FILE *out, mqproc__cli_kind_t kind);
/* The same for the rows named in names (NULL-terminated; NULL: every row). */
void mqproc__config_help_rows(FILE *out, mqproc__cli_kind_t kind, const char *const *names);

/* Ranges always refused to callbacks unless --callback-allow names them: IPv4 link-local
 * (with the 169.254.169.254 metadata service of most clouds), IPv6 link-local, AWS IMDS
 * over IPv6, Alibaba Cloud's metadata service (net/callback.c). Text for --help and
 * docs. */
#define MQPROC__CALLBACK_DENY_DEFAULT                                                              \
  "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"

/* ---- option rows --------------------------------------------------------------------- */

typedef enum mqproc__opt_type {
  MQPROC__OPT_STR = 0, /* text (an operator command's row without .type: --name X) */
  MQPROC__OPT_INT,     /* int in [min, max] */
  MQPROC__OPT_LONG,    /* long in [min, max] */
  MQPROC__OPT_BOOL,    /* --name[=BOOL], --no-name (an operator command's flag: --name) */
  MQPROC__OPT_LIST,    /* repeatable; env: comma-separated; a NULL-terminated char ** */
  MQPROC__OPT_ENUM     /* one of .choices, stored as its value in an enum (int) field */
} mqproc__opt_type_t;

/* Which programs take a server option (the others neither parse it nor read its env). */
typedef enum mqproc__opt_for {
  MQPROC__FOR_ALL = 0,
  MQPROC__FOR_GENERIC, /* the mqproc program */
  MQPROC__FOR_C        /* C processors */
} mqproc__opt_for_t;

/* A choice of an enum option. Names match in any case; a later name of a value already
 * named is an alias, accepted but not listed (--log-level=warning). */
typedef struct mqproc__opt_choice {
  const char *name;
  int value; /* >= 0: the enum's constant */
} mqproc__opt_choice_t;

/* One option: a row of the server's table (config.c) or of an operator command's (in
 * cli/, which keeps the values as text: offset, min, max and only mean nothing there). */
typedef struct mqproc__opt {
  const char *name; /* --name */
  const char *env;  /* MQPROC_…, or NULL */
  mqproc__opt_type_t type;
  size_t offset;                       /* the server's field in mqproc__config_t */
  const char *def;                     /* default as text; NULL = none */
  long min, max;                       /* MQPROC__OPT_INT, _LONG: the range */
  mqproc__opt_for_t only;              /* which programs take it */
  const char *help;                    /* one line, for --help */
  const mqproc__opt_choice_t *choices; /* MQPROC__OPT_ENUM: ended by {NULL, 0} */
  char shrt;                           /* an operator command's -c, or 0 */
} mqproc__opt_t;

/* The value of enum option o's choice s (any case); -1 with err "SRC: expected a, b or c,
 * got 's'" when s is none of them (src names where s came from: "--name" or its env). */
int mqproc__opt_enum_parse(const mqproc__opt_t *o, const char *s, const char *src, char *err);
/* Writes o's choices (aliases left out) into buf: "a|b|c" with sep "|", "a, b or c" with
 * sep NULL. Returns buf. */
const char *mqproc__opt_choices(const mqproc__opt_t *o, const char *sep, char *buf, size_t cap);

/* --tls-verify's choices (in MQPROC__OPTS_SHARED). */
extern const mqproc__opt_choice_t mqproc__tls_verify_choices[];

/* The rows the server and every operator command that reaches the queue and the store
 * share: --queue-file and --database-file (the URLs in files, so a password stays out of
 * /proc/PID/cmdline), the TLS settings of amqps:// and --group-access (the modes of the
 * files and directories a program makes, util.h). */
/* clang-format off */
#define MQPROC__OPTS_SHARED                                                                        \
  {.name = "queue-file", .env = "MQPROC_QUEUE_FILE",                                               \
   .offset = offsetof(mqproc__config_t, queue_file),                                               \
   .help = "read --queue from FILE (one URL per line; several are a broker list): keeps the "      \
           "password out of /proc/PID/cmdline, which every user can read; e.g. systemd's "         \
           "$CREDENTIALS_DIRECTORY/queue"},                                                        \
  {.name = "database-file", .env = "MQPROC_DATABASE_FILE",                                         \
   .offset = offsetof(mqproc__config_t, database_file),                                            \
   .help = "read --database from FILE (as --queue-file)"},                                         \
  {.name = "tls-ca", .env = "MQPROC_TLS_CA",                                                       \
   .offset = offsetof(mqproc__config_t, tls_ca),                                                   \
   .help = "amqps://: PEM file of the CAs the broker's certificate must chain to (default: "       \
           "the system's, /etc/ssl/certs/ca-certificates.crt)"},                                   \
  {.name = "tls-cert", .env = "MQPROC_TLS_CERT",                                                   \
   .offset = offsetof(mqproc__config_t, tls_cert),                                                 \
   .help = "amqps://: client certificate (PEM) for a broker that asks for one; with --tls-key"},   \
  {.name = "tls-key", .env = "MQPROC_TLS_KEY",                                                     \
   .offset = offsetof(mqproc__config_t, tls_key),                                                  \
   .help = "amqps://: the client certificate's private key (PEM, unencrypted)"},                   \
  {.name = "tls-verify", .env = "MQPROC_TLS_VERIFY",                                               \
   .offset = offsetof(mqproc__config_t, tls_verify), .type = MQPROC__OPT_ENUM,                     \
   .def = "full", .choices = mqproc__tls_verify_choices,                                           \
   .help = "amqps://: full (the certificate chains to --tls-ca and names the URL's host), "        \
           "ca (it chains; any name) or none (no check at all: anyone on the path can read "       \
           "and change the traffic; a warning at start)"},                                         \
  {.name = "group-access", .env = "MQPROC_GROUP_ACCESS",                                           \
   .offset = offsetof(mqproc__config_t, group_access), .type = MQPROC__OPT_BOOL,                   \
   .def = "false",                                                                                 \
   .help = "make the files and directories this program creates (the SQLite database and "         \
           "its -wal, -shm and -control files, a dir:// spool's directories and files) "           \
           "readable and writable by their group, 0660/0770, for the servers and operators "       \
           "of one group; without it they are private to their user, 0600/0700 (files that "       \
           "exist keep their mode)"}
/* clang-format on */

#endif
