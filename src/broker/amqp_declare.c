/* AMQP backend, part two: declarations and RPC replies (exchange, queues, bindings;
 * passive first so an existing object is used as it is). Part one is broker/amqp.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp_int.h"
#include "base/util.h"

/* ---- errors ------------------------------------------------------------------------- */

/* Formats the outcome of the last RPC into err and returns a status; *code (may be
 * NULL) gets the server's reply code when it closed the channel (404 = not found). A
 * server close of a channel or the connection is answered with close-ok here. */
int mqproc__amqp_rpc_status(amqp_broker_t *b, int ch, const char *what, int fail_status, int *code,
                            char *err) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(b->conn);
  if (code != NULL)
    *code = 0;
  if (r.reply_type == AMQP_RESPONSE_NORMAL)
    return MQPROC_OK;
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s: %s", what,
                       amqp_error_string2(r.library_error));
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    amqp_channel_close_t *c = r.reply.decoded;
    amqp_channel_close_ok_t ok;
    mqproc__err(err, fail_status, "%s: server closed channel: %u %.*s", what, c->reply_code,
                (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    amqp_send_method(b->conn, (amqp_channel_t)ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    if (code != NULL)
      *code = c->reply_code;
    return fail_status;
  }
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
      r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    amqp_connection_close_t *c = r.reply.decoded;
    amqp_connection_close_ok_t ok;
    mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s: server closed connection: %u %.*s", what,
                c->reply_code, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    amqp_send_method(b->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    return MQPROC_EBROKER_CLOSED;
  }
  return mqproc__err(err, MQPROC_EBROKER_PROTOCOL, "%s: unexpected reply", what);
}

int mqproc__amqp_rpc_error(amqp_broker_t *b, int ch, const char *what, int fail_status, char *err) {
  return mqproc__amqp_rpc_status(b, ch, what, fail_status, NULL, err);
}

int mqproc__amqp_open_channel(amqp_broker_t *b, int ch, char *err) {
  amqp_channel_open(b->conn, (amqp_channel_t)ch);
  return mqproc__amqp_rpc_error(b, ch, "channel.open", MQPROC_EBROKER_PROTOCOL, err);
}

/* Builds an AMQP table from "key=value" strings; integers and true/false are typed. */
static int build_args(const char *const *kv, amqp_table_t *t, amqp_table_entry_t *ents, size_t cap,
                      char *err) {
  size_t n = 0;
  t->num_entries = 0;
  t->entries = ents;
  for (; kv != NULL && *kv != NULL; kv++) {
    const char *eq = strchr(*kv, '=');
    char *end;
    long long iv;
    if (eq == NULL || eq == *kv || n == cap)
      return mqproc__err(err, MQPROC_ECONFIG, "queue argument '%s': expected key=value", *kv);
    ents[n].key.bytes = (void *)*kv;
    ents[n].key.len = (size_t)(eq - *kv);
    errno = 0;
    iv = strtoll(eq + 1, &end, 10);
    if (eq[1] != '\0' && *end == '\0' && errno == 0) {
      ents[n].value.kind = AMQP_FIELD_KIND_I64;
      ents[n].value.value.i64 = iv;
    } else if (strcmp(eq + 1, "true") == 0 || strcmp(eq + 1, "false") == 0) {
      ents[n].value.kind = AMQP_FIELD_KIND_BOOLEAN;
      ents[n].value.value.boolean = eq[1] == 't';
    } else {
      ents[n].value.kind = AMQP_FIELD_KIND_UTF8;
      ents[n].value.value.bytes = amqp_cstring_bytes(eq + 1);
    }
    n++;
  }
  t->num_entries = (int)n;
  return MQPROC_OK;
}

/* An active queue.declare with args; a 406 (the queue exists with other arguments) says
 * what must match (hint). */
static int declare_with(amqp_broker_t *b, const char *queue, int durable, amqp_table_t args,
                        const char *hint, char *err) {
  int code, rc;
  amqp_queue_declare(b->conn, CH_DECLARE, amqp_cstring_bytes(queue), 0, durable, 0, 0, args);
  rc = mqproc__amqp_rpc_status(b, CH_DECLARE, "queue.declare", MQPROC_EBROKER_DECLARE, &code, err);
  if (rc == MQPROC_EBROKER_DECLARE && code == 406) {
    char why[MQPROC_ERR_LEN];
    snprintf(why, sizeof(why), "%s", err);
    return mqproc__err(err, MQPROC_EBROKER_DECLARE,
                       "%.600s (queue '%.200s' exists with other arguments: %s)", why, queue, hint);
  }
  return rc;
}

/* The job queue of a server with --max-priority: declared actively with x-max-priority,
 * so that a queue that exists without it (or with another maximum) is an error the
 * operator sees, not priorities silently ignored. */
static int declare_priority_queue(amqp_broker_t *b, const char *queue, amqp_table_t *args,
                                  char *err) {
  char hint[256];
  args->entries[args->num_entries].key = amqp_cstring_bytes("x-max-priority");
  args->entries[args->num_entries].value.kind = AMQP_FIELD_KIND_I32;
  args->entries[args->num_entries].value.value.i32 = b->topo.max_priority;
  args->num_entries++;
  snprintf(hint, sizeof(hint),
           "--max-priority %d must match how it was declared; delete it, or use its "
           "x-max-priority",
           b->topo.max_priority);
  return declare_with(b, queue, b->topo.durable, *args, hint, err);
}

static int has_arg(const amqp_table_t *args, const char *key) {
  for (int i = 0; i < args->num_entries; i++)
    if (args->entries[i].key.len == strlen(key) &&
        memcmp(args->entries[i].key.bytes, key, args->entries[i].key.len) == 0)
      return 1;
  return 0;
}

/* The job or dead-letter queue of a server with --queue-type=quorum: declared actively
 * (a quorum queue cannot be made by policy, and a classic queue of that name is an error
 * the operator must see) with x-delivery-limit, the broker's own cap on returns under
 * ours (--max-attempts); the job queue dead-letters what reaches it into dead_queue
 * at least once (x-dead-letter-strategy=at-least-once, which needs
 * x-overflow=reject-publish: a quorum queue's default dead-lettering is at most once, and
 * a message lost on its way to the dead-letter queue would be gone without a trace), so
 * the broker never drops a message. Replicas: the cluster's default (3, or all nodes). */
static int declare_quorum_queue(amqp_broker_t *b, const char *queue, amqp_table_t *args,
                                char *err) {
  amqp_table_entry_t *e = args->entries + args->num_entries;
  char hint[256];
  int n = 0, strategy = !has_arg(args, "x-dead-letter-strategy"),
      overflow = !has_arg(args, "x-overflow");
  e[n].key = amqp_cstring_bytes("x-queue-type");
  e[n].value.kind = AMQP_FIELD_KIND_UTF8;
  e[n++].value.value.bytes = amqp_cstring_bytes("quorum");
  if (strcmp(queue, b->topo.queue) == 0) {
    e[n].key = amqp_cstring_bytes("x-delivery-limit");
    e[n].value.kind = AMQP_FIELD_KIND_I64;
    e[n++].value.value.i64 = b->topo.delivery_limit;
    if (b->topo.dead_queue != NULL) {
      e[n].key = amqp_cstring_bytes("x-dead-letter-exchange");
      e[n].value.kind = AMQP_FIELD_KIND_UTF8;
      e[n++].value.value.bytes = amqp_cstring_bytes("");
      e[n].key = amqp_cstring_bytes("x-dead-letter-routing-key");
      e[n].value.kind = AMQP_FIELD_KIND_UTF8;
      e[n++].value.value.bytes = amqp_cstring_bytes(b->topo.dead_queue);
      if (strategy) {
        e[n].key = amqp_cstring_bytes("x-dead-letter-strategy");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = amqp_cstring_bytes("at-least-once");
      }
      if (overflow) {
        e[n].key = amqp_cstring_bytes("x-overflow");
        e[n].value.kind = AMQP_FIELD_KIND_UTF8;
        e[n++].value.value.bytes = amqp_cstring_bytes("reject-publish");
      }
    }
  }
  args->num_entries += n;
  snprintf(hint, sizeof(hint),
           "a classic queue cannot become a quorum queue, and every party must declare the "
           "same x-delivery-limit (%d here); delete it, or match how it was declared",
           b->topo.delivery_limit);
  return declare_with(b, queue, 1, *args, hint, err);
}

/* Passive declare first so an existing queue is used as it is (its arguments may
 * differ from ours); declare it with our arguments only when it does not exist. */
static int declare_queue_inner(amqp_broker_t *b, const char *queue, char *err) {
  amqp_table_entry_t ents[39]; /* --queue-arg's, and up to 6 of ours (a quorum queue's) */
  amqp_table_t args;
  int code, rc = build_args(b->topo.queue_args, &args, ents, MQPROC__ARRAY_LEN(ents) - 7, err);
  if (rc != MQPROC_OK)
    return rc;
  if (b->topo.quorum && (strcmp(queue, b->topo.queue) == 0 ||
                         (b->topo.dead_queue != NULL && strcmp(queue, b->topo.dead_queue) == 0)))
    return declare_quorum_queue(b, queue, &args, err);
  if (b->topo.max_priority > 0 && strcmp(queue, b->topo.queue) == 0)
    return declare_priority_queue(b, queue, &args, err);
  amqp_queue_declare(b->conn, CH_DECLARE, amqp_cstring_bytes(queue), 1, b->topo.durable, 0, 0,
                     amqp_empty_table);
  rc = mqproc__amqp_rpc_status(b, CH_DECLARE, "queue.declare (passive)", MQPROC_EBROKER_DECLARE,
                               &code, err);
  if (rc == MQPROC_EBROKER_DECLARE && code == 404) {
    if ((rc = mqproc__amqp_open_channel(b, CH_DECLARE, err)) != MQPROC_OK)
      return rc;
    amqp_queue_declare(b->conn, CH_DECLARE, amqp_cstring_bytes(queue), 0, b->topo.durable, 0, 0,
                       args);
    rc = mqproc__amqp_rpc_error(b, CH_DECLARE, "queue.declare", MQPROC_EBROKER_DECLARE, err);
  }
  return rc;
}

static int bind_queue(amqp_broker_t *b, const char *queue, char *err) {
  amqp_queue_bind(b->conn, CH_DECLARE, amqp_cstring_bytes(queue),
                  amqp_cstring_bytes(b->topo.exchange), amqp_cstring_bytes(queue),
                  amqp_empty_table);
  return mqproc__amqp_rpc_error(b, CH_DECLARE, "queue.bind", MQPROC_EBROKER_DECLARE, err);
}

static int declare_exchange(amqp_broker_t *b, char *err) {
  int code, rc;
  amqp_exchange_declare(b->conn, CH_DECLARE, amqp_cstring_bytes(b->topo.exchange),
                        amqp_cstring_bytes("direct"), 1, 0, 0, 0, amqp_empty_table);
  rc = mqproc__amqp_rpc_status(b, CH_DECLARE, "exchange.declare (passive)", MQPROC_EBROKER_DECLARE,
                               &code, err);
  if (rc != MQPROC_EBROKER_DECLARE || code != 404)
    return rc;
  if ((rc = mqproc__amqp_open_channel(b, CH_DECLARE, err)) != MQPROC_OK)
    return rc;
  amqp_exchange_declare(b->conn, CH_DECLARE, amqp_cstring_bytes(b->topo.exchange),
                        amqp_cstring_bytes("direct"), 0, 0, 0, 0, amqp_empty_table);
  return mqproc__amqp_rpc_error(b, CH_DECLARE, "exchange.declare", MQPROC_EBROKER_DECLARE, err);
}

int mqproc__amqp_declare_topology(amqp_broker_t *b, char *err) {
  int rc = declare_exchange(b, err);
  if (rc == MQPROC_OK)
    rc = mqproc__amqp_declare_bound_queue(b, b->topo.queue, err);
  if (rc == MQPROC_OK && b->topo.dead_queue != NULL)
    rc = declare_queue_inner(b, b->topo.dead_queue, err);
  return rc;
}

int mqproc__amqp_declare_bound_queue(amqp_broker_t *b, const char *queue, char *err) {
  int rc = declare_queue_inner(b, queue, err);
  return rc == MQPROC_OK ? bind_queue(b, queue, err) : rc;
}
