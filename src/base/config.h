/* Configuration: every server option, read from MQPROC_* environment variables and
 * then from the command line (the command line wins). One table in config.c drives
 * parsing, defaults and --help; to add an option, add a field here and a row there. */
#ifndef MQPROC_CONFIG_H
#define MQPROC_CONFIG_H

#include <stdio.h>

typedef enum mqproc__result_format {
  MQPROC__RESULT_AUTO = 0, /* like the request */
  MQPROC__RESULT_JSON,
  MQPROC__RESULT_YAML
} mqproc__result_format_t;

typedef struct mqproc__config {
  char *queue_url;     /* --queue */
  char *database;      /* --database (or read from --database-file) */
  char *queue_file;    /* --queue-file: the --queue URL(s) in a file */
  int database_pooler; /* --database-pooler: PgBouncer in transaction pooling */
  char *database_file; /* --database-file */
  char *tls_ca;        /* --tls-ca: CAs for amqps:// */
  char *tls_cert;      /* --tls-cert, --tls-key: client certificate */
  char *tls_key;
  char *tls_verify;           /* --tls-verify full|ca|none */
  char *processor;            /* --processor: queue name = processor name */
  char *exec;                 /* --exec: command line of an external processor */
  char *on_failure;           /* --on-failure: command run when a job ends FAILED */
  int on_failure_timeout_s;   /* --on-failure-timeout */
  int on_failure_max;         /* --on-failure-max: handlers running at once */
  char *http;                 /* --http ADDR:PORT: /metrics, /healthz, /readyz, the page */
  char *http_admin_token;     /* --http-admin-token FILE: the page may act */
  char *http_read_token;      /* --http-read-token FILE: the page shows requests and logs */
  char **http_hosts;          /* --http-host NAME (repeatable): names a Host may give */
  int http_session_ttl_s;     /* --http-session-ttl: a signed-in browser's session */
  char *metrics_buckets;      /* --metrics-buckets: histogram bounds in seconds */
  char *isolation;            /* --isolation thread|process: where a C processor runs */
  char *ocrd_cli;             /* --ocrd-cli auto|true|false: OCR-D's processor arguments */
  char *ocrd_log_level;       /* --ocrd-log-level: their --log-level */
  char *workspace_root;       /* --workspace-root: METS of workspace_id = root/id/mets.xml */
  char *exchange;             /* --exchange */
  char *dead_letter_queue;    /* --dead-letter-queue (default <processor>.dead) */
  char **queue_args;          /* --queue-arg key=value (repeatable), NULL-terminated */
  int queue_durable;          /* --queue-durable */
  char *queue_type;           /* --queue-type classic|quorum */
  int delivery_limit;         /* --delivery-limit: quorum x-delivery-limit (0 at input: auto) */
  int prefetch;               /* --prefetch: deliveries in flight */
  int max_priority;           /* --max-priority: x-max-priority of the job queue, 0 = none */
  int instances;              /* --instances: servers run by a supervisor (1 = no supervisor) */
  int max_jobs_per_child;     /* --max-jobs-per-child: recycle after so many jobs, 0 = never */
  int concurrency;            /* --concurrency: tries running at once */
  int claim_ahead;            /* --claim-ahead: jobs claimed while every slot runs one (-1:
                                 not given: the queue's backend says, server/setup.c) */
  int prefetch_given;         /* --prefetch was given (else it was derived here) */
  int retries;                /* --retries: extra local tries after a failure */
  int retry_backoff_ms;       /* --retry-backoff-ms: first wait, doubled per retry */
  int max_requeues;           /* --max-requeues */
  int final_exit_code;        /* --final-exit-code: the processor says "cannot succeed" */
  int heartbeat_s;            /* --heartbeat */
  int broker_timeout_s;       /* --broker-timeout: deadline of one broker write or RPC */
  int confirm_timeout_s;      /* --confirm-timeout: longest wait for a publisher confirm */
  int lease_s;                /* --lease */
  int ack_after_s;            /* --ack-after: ack a still-running job's delivery (0 = never) */
  int max_attempts;           /* --max-attempts: claims of one job, takeovers included */
  int time_limit_s;           /* --time-limit: per try (0 = none); a message may override */
  long max_log_bytes;         /* --max-log-size: a job log may not grow beyond this */
  int shutdown_grace_s;       /* --shutdown-grace */
  long max_message_bytes;     /* --max-message-size */
  int callback_timeout_ms;    /* --callback-timeout-ms */
  int callback_retries;       /* --callback-retries */
  int declare_result_queues;  /* --declare-result-queues */
  char *result_format;        /* --result-format auto|json|yaml */
  char *log_dir;              /* --log-dir: per-job logs (default: see config_default_log_dir) */
  int group_access;           /* --group-access: files and directories made 0660/0770 */
  char **pass_env;            /* --pass-env NAME (repeatable): more environment for processors */
  char **callback_allow;      /* --callback-allow CIDR (repeatable) */
  char **callback_deny;       /* --callback-deny CIDR (repeatable), beside the built-in ranges */
  char *result_queue_pattern; /* --result-queue-pattern: ERE a result_queue_name must match */
  char *log_level;            /* --log-level */
  char *log_format;           /* --log-format: text or json */
  char *worker_id;            /* --worker-id (default host:pid) */
  int migrate;                /* --migrate: apply the schema at start */
  int help;                   /* --help / -h was among the options */
  /* derived */
  mqproc__result_format_t result_fmt;
  int isolate_process; /* --isolation=process */
  int tls_verify_mode; /* mqproc__tls_verify_t of --tls-verify */
  int quorum;          /* --queue-type=quorum */
  char *warning;       /* a warning to log once the log is set up (e.g. a URL file others read) */
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

/* Ranges always refused to callbacks unless --callback-allow names them: IPv4 link-local
 * (with the 169.254.169.254 metadata service of most clouds), IPv6 link-local, AWS IMDS
 * over IPv6, Alibaba Cloud's metadata service (delivery/callback.c). Text for --help and
 * docs. */
#define MQPROC__CALLBACK_DENY_DEFAULT                                                              \
  "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32"

/* --tls-verify: "full" (or NULL) 0, "ca" 1, "none" 2 (broker.h's mqproc__tls_verify_t);
 * -1 otherwise. */
int mqproc__tls_verify_parse(const char *s);

#endif
