/* The mqproc program's operator commands (submit, jobs, workers, stats, pause, resume,
 * drain): short-lived clients of the job table and the broker, in the mqproc program only
 * (not in libmqproc). Shared here: argument parsing, the database connection, the audit
 * trail, output helpers and a publisher with confirms. */
#ifndef MQPROC_CLI_ADMIN_H
#define MQPROC_CLI_ADMIN_H

#include <jansson.h>
#include <libpq-fe.h>
#include <stddef.h>

/* ---- arguments ---------------------------------------------------------------------- */

typedef struct aopt {
  const char *name; /* --name */
  char shrt;        /* -c, or 0 */
  int has_arg;
  const char *env; /* MQPROC_… default, or NULL */
  const char *help;
} aopt_t;

#define ARGS_MAX 256

typedef struct args {
  const aopt_t *opts;
  const char *names[ARGS_MAX]; /* option given (its aopt_t name) */
  const char *vals[ARGS_MAX];  /* its value ("" for flags) */
  int n;
  const char *pos[ARGS_MAX]; /* positional arguments */
  int npos;
} args_t;

/* Parses argv (after the command words) against opts (terminated by a zero entry);
 * prints the error and returns 2 on a bad line, 0 otherwise. --help is an option of every
 * command (has(a, "help")). */
int mqproc__args_parse(args_t *a, const aopt_t *opts, int argc, char **argv, const char *cmd);
/* The last value of an option, else its environment variable, else NULL. */
const char *mqproc__arg(const args_t *a, const char *name);
int mqproc__has(const args_t *a, const char *name);
/* The i-th value of a repeatable option (NULL past the end). */
const char *mqproc__arg_nth(const args_t *a, const char *name, int i);
/* Prints usage and the option list. */
void mqproc__args_usage(const char *usage, const aopt_t *opts);
/* A duration like 30s, 15m, 2h, 30d (or plain seconds) in seconds; -1 when invalid. */
long long mqproc__parse_duration(const char *s);

/* ---- database ----------------------------------------------------------------------- */

/* Connects to --database / MQPROC_DATABASE (prints why not and returns NULL). */
PGconn *mqproc__admin_db(const args_t *a);
/* Runs sql with text parameters (NULL = SQL NULL); prints the error and returns NULL on
 * failure. */
PGresult *mqproc__admin_q(PGconn *c, const char *sql, int n, const char *const *vals);
/* Records an operator action in mqproc_audit and the log (stderr). */
int mqproc__admin_audit(PGconn *c, const char *action, const char *target, long long rows,
                        json_t *detail);
/* user@host of whoever runs the command. */
const char *mqproc__admin_actor(void);

/* ---- output ------------------------------------------------------------------------- */

/* Prints v (stolen) as JSON on stdout. */
void mqproc__print_json(json_t *v);
/* The rows of res as an array of objects; columns whose name is in ints are numbers,
 * in arrays are parsed as JSON. */
json_t *mqproc__rows_json(PGresult *res, const char *const *ints, const char *const *jsons);
/* Prints res as an aligned table (at most width characters per cell). */
void mqproc__print_table(PGresult *res, int width);

/* ---- broker ------------------------------------------------------------------------- */

typedef struct admin_amqp admin_amqp_t;
/* Connects (--queue / MQPROC_QUEUE) with confirms on; NULL after printing why not. */
admin_amqp_t *mqproc__amqp_open(const char *url);
/* Publishes with mandatory and waits for the confirm: 0, or -1 after printing why not
 * (unroutable, nacked, connection lost). priority < 0: none. headers: "k=v" or NULL. */
int mqproc__amqp_send(admin_amqp_t *a, const char *exchange, const char *rk, const void *body,
                      size_t len, const char *content_type, const char *message_id, int priority,
                      const char *const *headers, size_t n_headers);
/* Passive declare: ready messages and consumers; -1 when the queue does not exist. */
int mqproc__amqp_depth(admin_amqp_t *a, const char *queue, long *messages, long *consumers);
void mqproc__amqp_close(admin_amqp_t *a);

/* ---- commands ----------------------------------------------------------------------- */

int mqproc__cmd_submit(int argc, char **argv);
int mqproc__cmd_jobs(int argc, char **argv);
int mqproc__cmd_workers(int argc, char **argv);
int mqproc__cmd_stats(int argc, char **argv);
int mqproc__cmd_control(const char *wish, int argc, char **argv); /* pause resume drain */

/* The operator commands: the exit code, or -1 when argv[1] is not one of them. */
int mqproc__admin_main(int argc, char **argv);

#endif
