/* `mqproc dead-letters list|show|requeue|purge`: the messages the servers gave up on
 * (undecodable, invalid, for another processor, too large), from the job store's
 * mqproc_dead_letters (ops/dead.c), on either store and either queue. requeue publishes a
 * stored body back to its job queue (on dir://, a file in new/); bulk forms count without
 * --yes; every action lands in mqproc_audit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "base/util.h"

static const mqproc__opt_t OPTS[] = {
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH"},
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL or dir:///SPOOL: where a requeued body is published"},
    MQPROC__OPTS_SHARED,
    {.name = "exchange",
     .env = "MQPROC_EXCHANGE",
     .help = "exchange requeued bodies are published to (default ocrd-network-default)"},
    {.name = "processor", .help = "only dead letters of this processor (its queue)"},
    {.name = "since", .help = "only those received within this duration (30s, 15m, 2h, 7d)"},
    {.name = "waiting", .type = MQPROC__OPT_BOOL, .help = "only those not requeued"},
    {.name = "limit", .help = "at most this many rows (default 50)"},
    {.name = "after", .help = "the page after this id (printed below the previous page)"},
    {.name = "older-than", .help = "received longer ago than this duration (required)"},
    {.name = "force", .type = MQPROC__OPT_BOOL, .help = "allow --older-than under an hour"},
    {.name = "yes", .shrt = 'y', .type = MQPROC__OPT_BOOL, .help = "act (without it: only count)"},
    {.name = "json", .type = MQPROC__OPT_BOOL, .help = "machine-readable output"},
    {0}};

static const mqproc__sub_t SUBS[] = {
    {"list",
     "Usage: mqproc dead-letters list [--processor P] [--since D] [--waiting] [--limit N]\n"
     "                                [--after ID] [--json]\n"
     "Dead letters, newest first: the messages servers gave up on, with the reason.\n",
     {MQPROC__SUB_DB_OPTS, "processor", "since", "waiting", "limit", "after", "json", NULL}},
    {"show",
     "Usage: mqproc dead-letters show ID [--json]\n"
     "One dead letter: its reason, its body (passwords masked) and the message it decodes to.\n",
     {MQPROC__SUB_DB_OPTS, "json", NULL}},
    {"requeue",
     "Usage: mqproc dead-letters requeue ID...\n"
     "       mqproc dead-letters requeue --processor P [--since D] [--yes]\n"
     "Publishes the stored bodies back to their job queues (on dir://: a file in new/) and\n"
     "records it (requeued_at, requeued_by, mqproc_audit). The bulk form takes those not\n"
     "requeued yet and only counts without --yes. A body cut short (over --max-message-size)\n"
     "cannot be requeued. Exit 1 when one was not requeued.\n",
     {MQPROC__SUB_DB_OPTS, MQPROC__SUB_QUEUE_OPTS, "processor", "since", "yes", "json", NULL}},
    {"purge",
     "Usage: mqproc dead-letters purge --older-than 30d [--processor P] [--yes]\n"
     "Deletes dead letters received longer ago (requeued or not); without --yes it only\n"
     "counts; under an hour only with --force.\n",
     {MQPROC__SUB_DB_OPTS, "older-than", "processor", "force", "yes", NULL}},
};

static const char USAGE[] =
    "Usage: mqproc dead-letters list|show|requeue|purge [OPTIONS]\n"
    "  list     the messages the servers gave up on, newest first\n"
    "  show ID  one of them: reason, body, the message it decodes to\n"
    "  requeue  publish stored bodies back to their job queues\n"
    "  purge    delete those older than a duration\n"
    "They are the rows of mqproc_dead_letters (the copies on RabbitMQ's P.dead queue, or in a\n"
    "dir:// queue's P/failed/ directory, stay where they are). Each has --help.\n";

static const mqproc__col_t LIST_COLS[] = {
    {.key = "id"},
    {.key = "processor_name", .title = "processor", .max = 24, .min = 10},
    {.key = "job_id", .max = 40, .min = 8, .drop = 2},
    {.key = "received_at", .title = "received (UTC)", .time = 1},
    {.key = "body_len", .title = "bytes", .drop = 3},
    {.key = "worker_id", .title = "worker", .max = 24, .drop = 4},
    {.key = "requeued_at", .title = "requeued (UTC)", .time = 1, .drop = 1},
    {.key = "reason", .max = 80, .min = 16},
    {0}};

/* A positive integer id; 0 when s is none. */
static long long id_of(const char *s) {
  char *end;
  long long v = s != NULL ? strtoll(s, &end, 10) : 0;
  return s != NULL && *s != '\0' && *end == '\0' && v > 0 ? v : 0;
}

static int list(mqproc__odb_t *c, const args_t *a) {
  const char *limit = mqproc__arg(a, "limit"), *after = mqproc__arg(a, "after");
  mqproc__dead_filter_t f = {.processor = mqproc__arg(a, "processor"),
                             .after_id = id_of(after),
                             .since_s = -1,
                             .waiting = mqproc__has(a, "waiting"),
                             .limit = limit != NULL && atoi(limit) > 0 ? atoi(limit) : 50};
  char err[512];
  json_t *rows;
  if (after != NULL && f.after_id == 0) {
    fprintf(stderr, "mqproc dead-letters list: --after: expected an id\n");
    return 2;
  }
  if (mqproc__arg(a, "since") != NULL &&
      (f.since_s = mqproc__parse_duration(mqproc__arg(a, "since"))) < 0) {
    fprintf(stderr, "mqproc dead-letters list: --since: expected a duration like 15m, 2h, 7d\n");
    return 2;
  }
  if ((rows = mqproc__ops_dead_letters(c, &f, err)) == NULL) {
    fprintf(stderr, "mqproc dead-letters list: %s", err);
    return 1;
  }
  if (mqproc__has(a, "json")) {
    mqproc__print_json(rows);
    return 0;
  }
  mqproc__print_table(rows, LIST_COLS);
  fflush(stdout);
  if ((int)json_array_size(rows) == f.limit)
    fprintf(stderr, "more: --after %lld\n",
            (long long)json_integer_value(
                json_object_get(json_array_get(rows, json_array_size(rows) - 1), "id")));
  json_decref(rows);
  return 0;
}

static int show(mqproc__odb_t *c, const args_t *a) {
  char err[512];
  json_t *o, *v;
  const char *key, *body;
  if (a->npos != 2 || id_of(a->pos[1]) == 0) {
    fprintf(stderr, "mqproc dead-letters show: give one dead letter's id (a number)\n");
    return 2;
  }
  if ((o = mqproc__ops_dead_letter(c, a->pos[1], err)) == NULL) {
    fprintf(stderr, "mqproc dead-letters show: %s\n", err);
    return 1;
  }
  if (mqproc__has(a, "json")) {
    mqproc__print_json(o);
    return 0;
  }
  json_object_foreach(o, key, v) {
    char *s;
    if (!strcmp(key, "body") || !strcmp(key, "message"))
      continue;
    s = json_is_string(v) ? strdup(json_string_value(v))
                          : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    printf("%-16s ", key); /* reasons quote what arrived: escaped on a terminal */
    mqproc__print_term(stdout, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
    putchar('\n');
    free(s);
  }
  body = json_string_value(json_object_get(o, "body"));
  printf("body:\n");
  if (body != NULL)
    mqproc__print_term(stdout, body, strlen(body));
  else
    printf("(not UTF-8 text: %lld bytes)",
           (long long)json_integer_value(json_object_get(o, "body_stored")));
  putchar('\n');
  json_decref(o);
  return 0;
}

/* The positional ids as a JSON array of numbers; NULL after printing why. */
static char *ids_json(const args_t *a) {
  json_t *arr = json_array();
  char *out;
  for (int i = 1; i < a->npos; i++) {
    if (id_of(a->pos[i]) == 0) {
      fprintf(stderr, "mqproc dead-letters: not a dead letter's id (a number): %s\n", a->pos[i]);
      json_decref(arr);
      return NULL;
    }
    json_array_append_new(arr, json_integer(id_of(a->pos[i])));
  }
  out = json_dumps(arr, JSON_COMPACT);
  json_decref(arr);
  return out;
}

/* The bulk form's dry run: how many it would requeue. */
static int requeue_count(mqproc__odb_t *c, const char *proc, long long since_s) {
  char err[512];
  long long n = mqproc__ops_dead_requeue_count(c, proc, since_s, err);
  if (n < 0) {
    fprintf(stderr, "mqproc dead-letters requeue: %s", err);
    return 1;
  }
  printf("would requeue %lld dead letter(s) of %s; run again with --yes to do it\n", n, proc);
  return 0;
}

static int requeue(mqproc__odb_t *c, const args_t *a) {
  mqproc__ops_dead_requeue_t w = {.processor = mqproc__arg(a, "processor"),
                                  .since_s = -1,
                                  .exchange = mqproc__arg(a, "exchange"),
                                  .actor = mqproc__admin_actor()};
  char *ids = NULL, err[512];
  mqproc__qclient_t *q;
  json_t *out, *v;
  size_t i;
  int failed = 0, by_ids = a->npos > 1;
  if (by_ids && (ids = ids_json(a)) == NULL)
    return 2;
  if (ids == NULL && w.processor == NULL) {
    fprintf(stderr, "mqproc dead-letters requeue: give dead-letter ids, or --processor P\n");
    return 2;
  }
  if (mqproc__arg(a, "since") != NULL &&
      (w.since_s = mqproc__parse_duration(mqproc__arg(a, "since"))) < 0) {
    fprintf(stderr, "mqproc dead-letters requeue: --since: expected a duration like 2h, 7d\n");
    free(ids);
    return 2;
  }
  if (ids == NULL && !mqproc__has(a, "yes"))
    return requeue_count(c, w.processor, w.since_s);
  if ((q = mqproc__admin_amqp(a)) == NULL) {
    free(ids);
    return 1;
  }
  w.ids = ids;
  out = mqproc__ops_dead_requeue(c, q, &w, err);
  mqproc__qclient_close(q);
  free(ids);
  if (out == NULL) {
    fprintf(stderr, "mqproc dead-letters requeue: %s", err);
    return 1;
  }
  json_array_foreach(json_object_get(out, "dead_letters"), i, v) {
    long long id = (long long)json_integer_value(json_object_get(v, "id"));
    failed |= !json_is_true(json_object_get(v, "requeued"));
    if (mqproc__has(a, "json"))
      continue;
    if (json_is_true(json_object_get(v, "requeued")))
      printf("%lld requeued to %s\n", id, json_string_value(json_object_get(v, "processor_name")));
    else
      fprintf(stderr, "mqproc dead-letters requeue: %lld: not requeued: %s\n", id,
              json_string_value(json_object_get(v, "error")));
  }
  if (json_object_get(out, "error") != NULL) {
    fprintf(stderr, "mqproc dead-letters requeue: %s",
            json_string_value(json_object_get(out, "error")));
    failed = 1;
  }
  if (json_integer_value(json_object_get(out, "requeued")) > 0)
    mqproc__print_audit(out);
  else if (!by_ids && !mqproc__has(a, "json"))
    printf("requeued 0 dead letters\n");
  if (mqproc__has(a, "json"))
    mqproc__print_json(out);
  else
    json_decref(out);
  return failed ? 1 : 0;
}

#define PURGE_FLOOR_S 3600 /* fresh evidence of a fault is not deleted by a slip */

static int purge(mqproc__odb_t *c, const args_t *a) {
  long long secs = mqproc__parse_duration(mqproc__arg(a, "older-than"));
  const char *proc = mqproc__arg(a, "processor");
  int dry = !mqproc__has(a, "yes"), rc = 0;
  char err[512];
  json_t *out;
  if (secs < 0) {
    fprintf(stderr, "mqproc dead-letters purge: --older-than DURATION is required (e.g. 30d; "
                    "at most a century)\n");
    return 2;
  }
  if (secs < PURGE_FLOOR_S && !mqproc__has(a, "force")) {
    fprintf(stderr,
            "mqproc dead-letters purge: --older-than %s is under an hour: the dead letters of "
            "a fault still being looked into would go; add --force to purge them anyway\n",
            mqproc__arg(a, "older-than"));
    return 2;
  }
  if ((out = mqproc__ops_dead_purge(c, secs, proc, dry, mqproc__admin_actor(), NULL, err)) ==
      NULL) {
    fprintf(stderr, "mqproc dead-letters purge: %s", err);
    return 1;
  }
  if (dry)
    printf("would purge %lld dead letter(s); run again with --yes to do it\n",
           (long long)json_integer_value(json_object_get(out, "would_purge")));
  else
    printf("purged %lld dead letter(s)\n",
           (long long)json_integer_value(json_object_get(out, "purged")));
  if (!dry && json_integer_value(json_object_get(out, "purged")) > 0)
    mqproc__print_audit(out);
  if (json_object_get(out, "error") != NULL) {
    fprintf(stderr, "mqproc dead-letters purge: %s",
            json_string_value(json_object_get(out, "error")));
    rc = 1;
  }
  json_decref(out);
  return rc;
}

int mqproc__cmd_dead_letters(int argc, char **argv) {
  const mqproc__sub_t *sub;
  args_t a;
  mqproc__odb_t *c;
  int rc = mqproc__sub_parse("dead-letters", USAGE, OPTS, SUBS, sizeof(SUBS) / sizeof(SUBS[0]),
                             argc, argv, &sub, &a);
  if (rc >= 0)
    return rc;
  if ((c = mqproc__admin_db(&a)) == NULL)
    return 1;
  if (!strcmp(sub->name, "list"))
    rc = list(c, &a);
  else if (!strcmp(sub->name, "show"))
    rc = show(c, &a);
  else if (!strcmp(sub->name, "requeue"))
    rc = requeue(c, &a);
  else
    rc = purge(c, &a);
  mqproc__odb_close(c);
  return rc;
}
