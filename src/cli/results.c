/* `mqproc results QUEUE`: reads the result messages (or any messages) of a queue, each
 * taken off it (acked; a table queue's row deleted), or with --peek left where it is, and
 * prints their bodies: a reader for result queues that needs no AMQP client (and for a
 * table queue no SQL). AMQP (basic.get) and table queues; a dir:// queue's messages are
 * its files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admin.h"
#include "base/util.h"

static const mqproc__opt_t OPTS[] = {
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL, or the database of a table queue (postgresql://... or sqlite:///PATH)"},
    MQPROC__OPTS_SHARED,
    {.name = "peek", .type = MQPROC__OPT_BOOL, .help = "leave the messages in the queue"},
    {.name = "max", .help = "read at most N messages (default 100)"},
    {.name = "wait",
     .help = "seconds to wait for a first message when the queue has none (default 0)"},
    {.name = "json",
     .type = MQPROC__OPT_BOOL,
     .help = "print a JSON array of {message_id, content_type, priority, body}"},
    {0}};

/* A message as JSON: its body as text (a result is JSON or YAML). */
static json_t *as_json(const mqproc__qmsg_t *m) {
  return json_pack("{s:s, s:s, s:i, s:s%}", "message_id", m->message_id, "content_type",
                   m->content_type, "priority", m->priority, "body", m->body, m->len);
}

/* Reads up to max messages (waiting up to wait_s for the first); the count, or -1. */
static long read_all(mqproc__qclient_t *q, const char *queue, int peek, long max, long wait_s,
                     json_t *out) {
  time_t until = time(NULL) + wait_s;
  char err[MQPROC_ERR_LEN];
  long n = 0;
  while (n < max) {
    mqproc__qmsg_t m;
    int rc = mqproc__qclient_get(q, queue, peek, n, &m, err);
    if (rc < 0) {
      fprintf(stderr, "mqproc results: %s\n", err);
      return -1;
    }
    if (rc == 0 && n == 0 && time(NULL) < until) {
      nanosleep(&(struct timespec){0, 200 * 1000000}, NULL);
      continue;
    }
    if (rc == 0)
      break;
    if (out != NULL) {
      json_array_append_new(out, as_json(&m));
    } else {
      mqproc__print_term(stdout, m.body, m.len); /* a body may carry escape sequences */
      if (m.len == 0 || m.body[m.len - 1] != '\n')
        putchar('\n');
    }
    mqproc__qmsg_clear(&m);
    n++;
  }
  return n;
}

int mqproc__cmd_results(int argc, char **argv) {
  args_t a;
  mqproc__qclient_t *q;
  json_t *out = NULL;
  const char *max_s, *wait_s;
  long max = 100, wait = 0, n;
  int rc;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "results")) != 0)
    return rc;
  if (mqproc__has(&a, "help") || a.npos != 1) {
    mqproc__args_usage("Usage: mqproc results QUEUE [--peek] [--max N] [--wait S] [--json]\n"
                       "Reads the messages of QUEUE (a result queue), oldest first, and prints "
                       "their bodies; each is taken off the queue unless --peek.\n",
                       OPTS);
    return mqproc__has(&a, "help") ? 0 : 2;
  }
  if (((max_s = mqproc__arg(&a, "max")) != NULL && (max = atol(max_s)) < 1) ||
      ((wait_s = mqproc__arg(&a, "wait")) != NULL && (wait = atol(wait_s)) < 0)) {
    fprintf(stderr, "mqproc results: --max and --wait take a number (--max >= 1)\n");
    return 2;
  }
  if ((q = mqproc__admin_amqp(&a)) == NULL)
    return 1;
  if (mqproc__has(&a, "json"))
    out = json_array();
  n = read_all(q, a.pos[0], mqproc__has(&a, "peek"), max, wait, out);
  mqproc__qclient_close(q); /* AMQP: what was peeked at goes back to the queue */
  if (out != NULL && n >= 0)
    mqproc__print_json(out);
  else
    json_decref(out);
  fflush(stdout);
  return n < 0 ? 1 : 0;
}
