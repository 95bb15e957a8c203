/* The mqproc program's operator commands (submit, jobs, dead-letters, workers, stats,
 * pause, resume, drain): short-lived clients of the job table and the broker, in the mqproc program
 * only (not in libmqproc). Shared here: argument parsing, the database connection, the audit trail,
 * output helpers and a publisher with confirms. */
#ifndef MQPROC_CLI_ADMIN_H
#define MQPROC_CLI_ADMIN_H

#include <jansson.h>
#include <stddef.h>

#include "base/config.h"
#include "ops/ocrd.h"
#include "ops/ops.h"

/* ---- arguments ---------------------------------------------------------------------- */

/* The rows of the commands that dispatch OCR-D jobs (processing-api, submit --workflow):
 * which METS servers hold their workspaces (mqproc__admin_mets_servers). */
extern const mqproc__opt_choice_t mqproc__mets_server_choices[];
#define MQPROC__OPTS_METS_SERVERS                                                                  \
  {.name = "mets-server",                                                                          \
   .env = "MQPROC_METS_SERVER",                                                                    \
   .type = MQPROC__OPT_ENUM,                                                                       \
   .choices = mqproc__mets_server_choices,                                                         \
   .def = "mqproc",                                                                                \
   .help = "the METS server each workspace's jobs go through: mqproc (`mqproc mets-server`), "     \
           "ocrd (OCR-D's `ocrd workspace server start`, --ocrd-command) or off (none: OCR-D "     \
           "processors write mets.xml, one at a time per workspace)"},                             \
      {.name = "mets-sockets-dir",                                                                 \
       .env = "MQPROC_METS_SOCKETS_DIR",                                                           \
       .help = "DIR of the METS servers' sockets, which the processing servers must reach "        \
               "(default /tmp/mqproc-mets-UID)"},                                                  \
  {                                                                                                \
    .name = "ocrd-command", .env = "MQPROC_OCRD_COMMAND",                                          \
    .help = "OCR-D's CLI for --mets-server=ocrd (default ocrd)"                                    \
  }

/* An operator command's options are rows of the server's type (base/config.h's
 * mqproc__opt_t): .name, .env (read when the option is not given), .help, .shrt (-c) and
 * .type: MQPROC__OPT_STR (the default: --name X, kept as text), MQPROC__OPT_BOOL (a flag,
 * --name) or MQPROC__OPT_ENUM (--name X, one of .choices, which --help lists). A table
 * ends with a zero row. The rows the commands share with the server (the URL files, TLS,
 * --group-access) are MQPROC__OPTS_SHARED; mqproc__args_parse reads the URL files and
 * applies --group-access. */

#define ARGS_MAX 256
#define ARGS_OPTS_MAX 48 /* rows a (sub)command takes */

typedef struct args {
  const mqproc__opt_t *opts;
  mqproc__opt_t picked[ARGS_OPTS_MAX + 1]; /* the rows mqproc__args_parse_pick took */
  const char *cmd;                         /* the command, for messages */
  const char *names[ARGS_MAX];             /* option given (its row's name) */
  const char *vals[ARGS_MAX];              /* its value ("" for flags) */
  int n;
  const char *pos[ARGS_MAX]; /* positional arguments */
  int npos;
} args_t;

/* Parses argv (after the command words) against opts (terminated by a zero entry);
 * prints the error and returns 2 on a bad line, 0 otherwise. --help is an option of every
 * command (has(a, "help")). */
int mqproc__args_parse(args_t *a, const mqproc__opt_t *opts, int argc, char **argv,
                       const char *cmd);
/* mqproc__args_parse with the rows of catalog named in names (NULL-terminated): a
 * (sub)command takes, and its --help lists, only its own options. */
int mqproc__args_parse_pick(args_t *a, const mqproc__opt_t *catalog, const char *const *names,
                            int argc, char **argv, const char *cmd);
/* The first word of argv that is neither an option of catalog nor an option's value (a
 * command's subcommand, wherever it stands); NULL when there is none. */
const char *mqproc__args_first_word(const mqproc__opt_t *catalog, int argc, char **argv);
/* The last value of an option, else its environment variable, else NULL. */
const char *mqproc__arg(const args_t *a, const char *name);
int mqproc__has(const args_t *a, const char *name);
/* The value of enum option name (its row's choice; its default when not given); -1 after
 * printing why the text given is none of the choices. */
int mqproc__arg_enum(const args_t *a, const char *name);
/* A job state given to --state (any case): its name as the job table writes it, NULL when
 * --state was not given; *bad set after printing why the text is no state. */
const char *mqproc__arg_state(const args_t *a, int *bad);
/* --state's row (a job state, any case; the table's names are listed in --help). */
extern const mqproc__opt_choice_t mqproc__job_states[];
#define MQPROC__OPT_STATE(h)                                                                       \
  { .name = "state", .type = MQPROC__OPT_ENUM, .choices = mqproc__job_states, .help = h }
/* The i-th value of a repeatable option (NULL past the end). */
const char *mqproc__arg_nth(const args_t *a, const char *name, int i);
/* The METS servers the options above ask for, into out (its strings point into a, bufs: a
 * PATH_MAX buffer each for the program and the default directory); -1 after printing why
 * not. */
int mqproc__admin_mets_servers(const args_t *a, mqproc__mets_servers_t *out, char *program,
                               char *dir);
/* Prints usage and the option list. */
void mqproc__args_usage(const char *usage, const mqproc__opt_t *opts);

/* --http-host (repeatable, each value a name or a comma-separated list; not given:
 * MQPROC_HTTP_HOST's list): the names a Host may give, as mqproc__http_start() takes them. */
#define MQPROC__HTTP_HOSTS_MAX 32
typedef struct mqproc__http_hosts {
  const char *names[MQPROC__HTTP_HOSTS_MAX + 1]; /* NULL-terminated */
  char buf[2048];                                /* their text */
} mqproc__http_hosts_t;
/* Fills h from a; -1 after printing why not (more names, or more text, than h holds). */
int mqproc__arg_http_hosts(const args_t *a, mqproc__http_hosts_t *h);

/* A command with subcommands (`jobs list`, `dead-letters requeue`): each subcommand its
 * name, its usage and the options of the command's catalog it takes. */
typedef struct mqproc__sub {
  const char *name;
  const char *usage;
  const char *const opts[24];
} mqproc__sub_t;
/* The option rows every subcommand that opens the store takes, and those of the queue. */
#define MQPROC__SUB_DB_OPTS "database", "database-file", "group-access"
#define MQPROC__SUB_QUEUE_OPTS                                                                     \
  "queue", "queue-file", "tls-ca", "tls-cert", "tls-key", "tls-verify", "exchange"
/* Finds argv's subcommand among subs[0..n) and parses its options into a (cmd: the
 * command's name, for messages; usage: the command's own, for `CMD`, `CMD --help`).
 * -1: *sub and a are ready, go on; else the exit status, having printed what to print
 * (the command's or the subcommand's help: 0; an unknown subcommand or bad option: 2). */
int mqproc__sub_parse(const char *cmd, const char *usage, const mqproc__opt_t *catalog,
                      const mqproc__sub_t *subs, size_t n, int argc, char **argv,
                      const mqproc__sub_t **sub, args_t *a);
/* A duration like 30s, 15m, 2h, 30d (or plain seconds) in seconds; -1 when invalid. */
#define MQPROC__DURATION_MAX_S (100LL * 365 * 86400) /* a century */
long long mqproc__parse_duration(const char *s);

/* ---- database ----------------------------------------------------------------------- */

/* The TLS settings of --tls-* (for amqps://); -1 after printing why --tls-verify is
 * wrong. The strings are a's. */
int mqproc__admin_tls(const args_t *a, mqproc__tls_t *tls);
/* Connects to --queue with the --tls-* settings (ops.h's mqproc__qclient_open); NULL after
 * printing why not. */
mqproc__qclient_t *mqproc__admin_amqp(const args_t *a);

/* Connects to --database / MQPROC_DATABASE, PostgreSQL or SQLite (prints why not and
 * returns NULL). */
mqproc__odb_t *mqproc__admin_db(const args_t *a);
/* Runs pg, or sq on SQLite (NULL: pg), with text parameters (NULL = SQL NULL); prints
 * the error and returns NULL on failure. */
mqproc__ores_t *mqproc__admin_q(mqproc__odb_t *c, const char *pg, const char *sq, int n,
                                const char *const *vals);
/* Records an operator action in mqproc_audit and the log (stderr). */
int mqproc__admin_audit(mqproc__odb_t *c, const char *action, const char *target, long long rows,
                        json_t *detail);
/* Prints an action's (ops.h) "audit" line on stderr. */
void mqproc__print_audit(json_t *out);
/* user@host of whoever runs the command. */
const char *mqproc__admin_actor(void);

/* ---- output ------------------------------------------------------------------------- */

/* Prints v (stolen) as JSON on stdout. */
void mqproc__print_json(json_t *v);
/* Prints the columns cols (NULL-terminated) of rows (an array of objects) as an aligned
 * table (at most width characters per cell; null as "-"). */
void mqproc__print_rows(json_t *rows, const char *const *cols, int width);

/* A column of mqproc__print_table. */
typedef struct mqproc__col {
  const char *key;   /* the row's field */
  const char *title; /* the header (NULL: key) */
  int max;           /* the widest it is shown (0: as wide as its cells) */
  int min;           /* > 0: cut down to this on a narrow terminal, after the drops */
  int drop;          /* > 0: left out on a narrow terminal, the highest first */
  int time;          /* an ISO time: shown as YYYY-MM-DD HH:MM:SS (UTC) */
} mqproc__col_t;
/* The columns (ended by a zero row) of rows as an aligned table that fits the terminal:
 * its width is $COLUMNS, else the terminal's (stdout), else unbounded; columns are left
 * out (by drop) and cut (to min) until it fits; a cut cell ends with "~". */
void mqproc__print_table(json_t *rows, const mqproc__col_t *cols);
/* The width the tables fit: $COLUMNS, else stdout's terminal, else 0 (unbounded). */
int mqproc__term_width(void);

/* ---- commands ----------------------------------------------------------------------- */

int mqproc__cmd_submit(int argc, char **argv);
int mqproc__cmd_jobs(int argc, char **argv);
int mqproc__cmd_dead_letters(int argc, char **argv);
int mqproc__cmd_workers(int argc, char **argv);
int mqproc__cmd_stats(int argc, char **argv);
int mqproc__cmd_dashboard(int argc, char **argv);
int mqproc__cmd_processing_api(int argc, char **argv);            /* processing_api.c */
int mqproc__cmd_results(int argc, char **argv);                   /* results.c */
int mqproc__cmd_mets_server(int argc, char **argv);               /* mets_server.c */
int mqproc__cmd_control(const char *wish, int argc, char **argv); /* pause resume drain */

/* The operator commands: the exit code, or -1 when argv[1] is not one of them. */
int mqproc__admin_main(int argc, char **argv);

#endif
