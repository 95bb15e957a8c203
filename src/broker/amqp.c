/* AMQP 0-9-1 broker backend on rabbitmq-c 0.11 (RabbitMQ).
 *
 * Channels: 1 consumes (manual ack, basic.qos prefetch), 2 publishes (confirm mode,
 * mandatory), 3 declares (a passive declare that fails closes its channel, so it gets
 * its own). Any channel.close, connection.close, basic.cancel from the server, socket
 * error or missed heartbeat takes the whole connection down: the server reconnects,
 * the epoch grows, and tags of the old epoch are never sent.
 *
 * The client announces the capabilities consumer_cancel_notify (a deleted queue cancels
 * our consumer instead of leaving it silently idle) and connection.blocked (RabbitMQ says
 * when a resource alarm blocks publishers: publish() then refuses at once with
 * MQPROC_EBROKER_BLOCKED instead of writing into a socket nobody reads). Every call that
 * may block on the socket runs under a deadline (amqp_write_guard.h, --broker-timeout).
 *
 * Writes wait in a buffer under the socket (broker/amqp_wbuf.h, plain TCP) and leave
 * together when the server's loop flushes, before it sleeps: a turn's publishes and acks
 * are one send(2). A read writes what waits first, so an RPC's request is out before its
 * reply is awaited.
 *
 * This file: connecting, consuming, incoming frames, teardown. Publishing and confirms
 * are in broker/amqp_publish.c, declarations and RPC replies in broker/amqp_declare.c;
 * shared internals in broker/amqp_int.h.
 */
#include <amqp.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp_conn.h"
#include "broker/amqp_int.h"
#include "broker/amqp_wbuf.h"
#include "base/log.h"
#include "base/util.h"

void mqproc__amqp_mark_broken(amqp_broker_t *b, const char *reason) {
  if (!b->broken) {
    b->broken = 1;
    snprintf(b->broken_reason, sizeof(b->broken_reason), "%s", reason);
  }
}

#define mark_broken mqproc__amqp_mark_broken

void mqproc__amqp_guard_begin(amqp_broker_t *b) {
  if (b->conn != NULL)
    mqproc__guard_arm(b->guard, amqp_get_sockfd(b->conn), b->topo.timeout_s * 1000LL);
}

int mqproc__amqp_guard_end(amqp_broker_t *b) {
  char why[MQPROC_ERR_LEN];
  if (!mqproc__guard_disarm(b->guard))
    return 0;
  snprintf(why, sizeof(why),
           "the broker took no data for %d s (--broker-timeout; a resource alarm, or the "
           "network stalled): connection dropped",
           b->topo.timeout_s);
  mark_broken(b, why);
  return 1;
}

/* ---- connect and consume ------------------------------------------------------------ */

/* basic.qos applies to consumers created after it (global=false), so a new prefetch needs
 * a new consumer: the server cancels and consumes again. */
static int start_consuming(amqp_broker_t *b, int prefetch, char *err) {
  amqp_basic_consume_ok_t *ok;
  int rc;
  mqproc__amqp_guard_begin(b);
  amqp_basic_qos(b->conn, CH_CONSUME, 0, (uint16_t)prefetch, 0);
  rc = mqproc__amqp_rpc_error(b, CH_CONSUME, "basic.qos", MQPROC_EBROKER_PROTOCOL, err);
  ok = rc != MQPROC_OK ? NULL
                       : amqp_basic_consume(b->conn, CH_CONSUME, amqp_cstring_bytes(b->topo.queue),
                                            amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  if (rc == MQPROC_OK)
    rc = mqproc__amqp_rpc_error(b, CH_CONSUME, "basic.consume", MQPROC_EBROKER_PROTOCOL, err);
  if (mqproc__amqp_guard_end(b) && rc == MQPROC_OK)
    rc = mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s", b->broken_reason);
  if (rc != MQPROC_OK)
    return rc;
  amqp_bytes_free(b->consumer_tag);
  b->consumer_tag = amqp_bytes_malloc_dup(ok->consumer_tag);
  b->consuming = 1;
  b->consumer++;
  return MQPROC_OK;
}

/* What the client tells the broker about itself: the capabilities it handles (rabbitmq-c
 * announces neither of these two; its table is merged with ours) and a name for the
 * broker's connection list. */
static amqp_table_t client_properties(amqp_broker_t *b, amqp_table_entry_t *caps,
                                      amqp_table_entry_t *props) {
  caps[0].key = amqp_cstring_bytes("consumer_cancel_notify");
  caps[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
  caps[0].value.value.boolean = 1;
  caps[1].key = amqp_cstring_bytes("connection.blocked");
  caps[1].value.kind = AMQP_FIELD_KIND_BOOLEAN;
  caps[1].value.value.boolean = 1;
  props[0].key = amqp_cstring_bytes("capabilities");
  props[0].value.kind = AMQP_FIELD_KIND_TABLE;
  props[0].value.value.table = (amqp_table_t){.num_entries = 2, .entries = caps};
  props[1].key = amqp_cstring_bytes("product");
  props[1].value.kind = AMQP_FIELD_KIND_UTF8;
  props[1].value.value.bytes = amqp_cstring_bytes("mqproc");
  props[2].key = amqp_cstring_bytes("connection_name");
  props[2].value.kind = AMQP_FIELD_KIND_UTF8;
  props[2].value.value.bytes =
      amqp_cstring_bytes(b->topo.client_id != NULL ? b->topo.client_id : "mqproc");
  return (amqp_table_t){.num_entries = 3, .entries = props};
}

/* timeout_s bounds the connect, the TLS handshake and each step of the login; the RPCs
 * after it get the whole --broker-timeout. */
static int login(amqp_broker_t *b, const struct amqp_connection_info *ci, int timeout_s,
                 char *err) {
  struct timeval tv = {timeout_s, 0}, rpc = {b->topo.timeout_s, 0};
  amqp_table_entry_t caps[2], props[3];
  amqp_table_t client;
  amqp_rpc_reply_t r;
  const char *vhost = (ci->vhost == NULL || ci->vhost[0] == '\0') ? "/" : ci->vhost;
  int rc;
  b->conn = amqp_new_connection();
  if (b->conn == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = mqproc__amqp_socket_open(b->conn, ci, &b->topo.tls, timeout_s, err)) != MQPROC_OK)
    return rc;
  if (!ci->ssl) /* TLS writes as rabbitmq-c does */
    mqproc__amqp_wbuf_install(amqp_get_socket(b->conn));
  amqp_set_rpc_timeout(b->conn, &tv);
  client = client_properties(b, caps, props);
  mqproc__amqp_guard_begin(b);
  r = amqp_login_with_properties(b->conn, vhost, 0, 131072, b->topo.heartbeat_s, &client,
                                 AMQP_SASL_METHOD_PLAIN, ci->user, ci->password);
  mqproc__amqp_guard_end(b);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
      amqp_connection_close_t *c = r.reply.decoded;
      return mqproc__err(err, MQPROC_EBROKER_CONNECT, "login to vhost '%s' refused: %u %.*s", vhost,
                         c->reply_code, (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    }
    return mqproc__err(err, MQPROC_EBROKER_CONNECT, "login to vhost '%s' failed: %s", vhost,
                       r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                           ? amqp_error_string2(r.library_error)
                           : "refused by the server");
  }
  amqp_set_rpc_timeout(b->conn, &rpc);
  return MQPROC_OK;
}

/* Logs in to the first broker of the list that lets us, in a fresh random order (a
 * cluster's nodes share the load, and a dead node is passed over). err: each one's reason
 * when none did; MQPROC_ECONFIG (a TLS file that cannot be used) ends the walk. The walk
 * runs on the loop: --broker-timeout is shared among the list's brokers (at least 2 s
 * each), so a list of unreachable nodes holds the loop about as long as one would. */
static int login_any(amqp_broker_t *b, char *err) {
  size_t order[64], n = b->n_urls < 64 ? b->n_urls : 64, used = 0;
  char why[MQPROC_ERR_LEN];
  int rc = MQPROC_EBROKER_CONNECT, each = b->topo.timeout_s / (int)(n > 0 ? n : 1);
  if (each < 2)
    each = b->topo.timeout_s < 2 ? b->topo.timeout_s : 2;
  mqproc__amqp_shuffle(order, n);
  for (size_t i = 0; i < n; i++) {
    struct amqp_connection_info ci;
    char *buf = mqproc__strdup(b->urls[order[i]]);
    if (buf == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    amqp_default_connection_info(&ci);
    amqp_parse_url(buf, &ci); /* checked when the list was read */
    if (b->conn != NULL) {
      amqp_destroy_connection(b->conn);
      b->conn = NULL;
    }
    rc = login(b, &ci, each, why);
    if (rc == MQPROC_OK && n > 1)
      MQPROC__INFO("broker %s:%d%s (of %zu in the list)", ci.host, ci.port,
                   ci.ssl ? " over TLS" : "", n);
    free(buf);
    if (rc == MQPROC_OK)
      return MQPROC_OK;
    if (n == 1 || rc == MQPROC_ECONFIG || rc == MQPROC_ENOMEM)
      return mqproc__err(err, rc, "%s", why);
    used += (size_t)snprintf(err + used, used < MQPROC_ERR_LEN ? MQPROC_ERR_LEN - used : 0, "%s%s",
                             i == 0 ? "no broker of the list let us in: " : "; ", why);
    if (used >= MQPROC_ERR_LEN)
      used = MQPROC_ERR_LEN;
  }
  return rc;
}

static void teardown(amqp_broker_t *b, int graceful);

static int amqp_connect_(mqproc__broker_t *base, char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc;
  teardown(b, 0);
  rc = login_any(b, err);
  b->broken = 0;
  b->blocked = 0;
  if (rc == MQPROC_OK) {
    mqproc__amqp_guard_begin(b);
    rc = mqproc__amqp_open_channel(b, CH_CONSUME, err);
    if (rc == MQPROC_OK)
      rc = mqproc__amqp_open_channel(b, CH_PUBLISH, err);
    if (rc == MQPROC_OK)
      rc = mqproc__amqp_open_channel(b, CH_DECLARE, err);
    if (rc == MQPROC_OK) {
      amqp_confirm_select(b->conn, CH_PUBLISH);
      rc = mqproc__amqp_rpc_error(b, CH_PUBLISH, "confirm.select", MQPROC_EBROKER_PROTOCOL, err);
    }
    if (rc == MQPROC_OK)
      rc = mqproc__amqp_declare_topology(b, err);
    if (mqproc__amqp_guard_end(b) && rc == MQPROC_OK)
      rc = mqproc__err(err, MQPROC_EBROKER_CONNECT, "%s", b->broken_reason);
  }
  if (rc != MQPROC_OK) {
    teardown(b, 0);
    return rc;
  }
  b->connected = 1;
  b->epoch++;
  b->next_seq = 0;
  return MQPROC_OK;
}

/* ---- incoming frames ---------------------------------------------------------------- */

static void close_ok(amqp_broker_t *b, amqp_channel_t ch, amqp_method_number_t id) {
  if (id == AMQP_CHANNEL_CLOSE_METHOD) {
    amqp_channel_close_ok_t ok;
    amqp_send_method(b->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  } else {
    amqp_connection_close_ok_t ok;
    amqp_send_method(b->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
  }
}

static void on_method(amqp_broker_t *b, const amqp_frame_t *f) {
  char why[MQPROC_ERR_LEN];
  switch (f->payload.method.id) {
  case AMQP_BASIC_ACK_METHOD: {
    amqp_basic_ack_t *a = f->payload.method.decoded;
    mqproc__amqp_settle_confirms(b, a->delivery_tag, a->multiple, MQPROC_OK);
    break;
  }
  case AMQP_BASIC_NACK_METHOD: {
    amqp_basic_nack_t *n = f->payload.method.decoded;
    mqproc__amqp_settle_confirms(b, n->delivery_tag, n->multiple, MQPROC_EBROKER_NACKED);
    break;
  }
  case AMQP_BASIC_RETURN_METHOD:
    mqproc__amqp_on_return(b, f->channel);
    break;
  case AMQP_CONNECTION_BLOCKED_METHOD: {
    amqp_connection_blocked_t *c = f->payload.method.decoded;
    snprintf(why, sizeof(why), "%.*s", (int)c->reason.len, (const char *)c->reason.bytes);
    b->blocked = 1;
    b->ev.on_blocked(b->ev.ud, 1, why);
    break;
  }
  case AMQP_CONNECTION_UNBLOCKED_METHOD:
    b->blocked = 0;
    for (pending_pub_t *p = b->pending; p != NULL; p = p->next) /* the wait starts again */
      p->sent_ms = mqproc__now_ms();
    b->ev.on_blocked(b->ev.ud, 0, "");
    break;
  case AMQP_BASIC_CANCEL_METHOD:
    mark_broken(b, "the broker cancelled our consumer (queue deleted?)");
    break;
  case AMQP_CHANNEL_CLOSE_METHOD: {
    amqp_channel_close_t *c = f->payload.method.decoded;
    snprintf(why, sizeof(why), "broker closed channel %u: %u %.*s", f->channel, c->reply_code,
             (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    close_ok(b, f->channel, AMQP_CHANNEL_CLOSE_METHOD);
    mark_broken(b, why);
    break;
  }
  case AMQP_CONNECTION_CLOSE_METHOD: {
    amqp_connection_close_t *c = f->payload.method.decoded;
    snprintf(why, sizeof(why), "broker closed the connection: %u %.*s", c->reply_code,
             (int)c->reply_text.len, (const char *)c->reply_text.bytes);
    close_ok(b, 0, AMQP_CONNECTION_CLOSE_METHOD);
    mark_broken(b, why);
    break;
  }
  default:
    break; /* channel.flow, consume-ok after a reconnect race, …: nothing to do */
  }
}

static void deliver(amqp_broker_t *b, amqp_envelope_t *env) {
  mqproc__broker_msg_t m;
  char ctype[256] = "", mid[256] = "", rkey[256] = "";
  amqp_basic_properties_t *p = &env->message.properties;
  if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
    snprintf(ctype, sizeof(ctype), "%.*s", (int)p->content_type.len,
             (const char *)p->content_type.bytes);
  if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
    snprintf(mid, sizeof(mid), "%.*s", (int)p->message_id.len, (const char *)p->message_id.bytes);
  snprintf(rkey, sizeof(rkey), "%.*s", (int)env->routing_key.len,
           (const char *)env->routing_key.bytes);
  m.epoch = b->epoch;
  m.tag = env->delivery_tag;
  /* pushed before our basic.cancel to a consumer no longer current: 0 */
  m.consumer =
      b->consuming && env->consumer_tag.len == b->consumer_tag.len &&
              memcmp(env->consumer_tag.bytes, b->consumer_tag.bytes, env->consumer_tag.len) == 0
          ? b->consumer
          : 0;
  m.redelivered = env->redelivered;
  m.body = env->message.body.bytes;
  m.len = env->message.body.len;
  m.size = 0; /* all of it */
  m.content_type = ctype;
  m.message_id = mid;
  m.routing_key = rkey;
  m.headers_json =
      p->_flags & AMQP_BASIC_HEADERS_FLAG ? mqproc__amqp_headers_json(&p->headers) : NULL;
  m.delivery_count = -1;
  for (int i = 0; (p->_flags & AMQP_BASIC_HEADERS_FLAG) && i < p->headers.num_entries; i++) {
    const amqp_table_entry_t *e = &p->headers.entries[i];
    if (e->key.len == 16 && memcmp(e->key.bytes, "x-delivery-count", 16) == 0) {
      const amqp_field_value_t *v = &e->value;
      m.delivery_count = v->kind == AMQP_FIELD_KIND_I64   ? (long)v->value.i64
                         : v->kind == AMQP_FIELD_KIND_U64 ? (long)v->value.u64
                         : v->kind == AMQP_FIELD_KIND_I32 ? (long)v->value.i32
                         : v->kind == AMQP_FIELD_KIND_U32 ? (long)v->value.u32
                                                          : -1;
    }
  }
  m.priority = p->_flags & AMQP_BASIC_PRIORITY_FLAG ? p->priority : -1;
  b->ev.on_message(b->ev.ud, &m);
  free((char *)m.headers_json);
}

static int report_down(amqp_broker_t *b, char *err) {
  char reason[MQPROC_ERR_LEN];
  snprintf(reason, sizeof(reason), "%s", b->broken_reason);
  teardown(b, 0);
  b->ev.on_down(b->ev.ud, reason);
  return mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s", reason);
}

/* Whether pump() has read everything there is: nothing left in rabbitmq-c's buffers, and
 * its last read emptied the socket. Then it stops without another read (rabbitmq-c would
 * learn the same from a recvfrom's EAGAIN and a poll(0)); data arriving meanwhile makes
 * the socket readable, and the loop calls pump() again. Unknown (TLS): read on. */
static int caught_up(amqp_broker_t *b) {
  return b->connected && !b->broken && mqproc__amqp_wbuf_drained(b->conn) == 1 &&
         !amqp_data_in_buffer(b->conn) && !amqp_frames_enqueued(b->conn);
}

static int amqp_pump_(mqproc__broker_t *base, char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  for (;;) {
    struct timeval zero = {0, 0};
    amqp_envelope_t env;
    amqp_rpc_reply_t r;
    if (!b->connected)
      return mqproc__err(err, MQPROC_EBROKER_CLOSED, "not connected");
    if (b->broken)
      return report_down(b, err);
    if (b->pending != NULL && !b->blocked && b->topo.confirm_timeout_s > 0 &&
        mqproc__now_ms() - b->pending->sent_ms > 1000LL * b->topo.confirm_timeout_s) {
      char why[160];
      snprintf(why, sizeof(why),
               "no publisher confirm within %d s (a quorum queue without a majority of its "
               "nodes, or a network that lets nothing back?)",
               b->topo.confirm_timeout_s);
      mark_broken(b, why);
      continue; /* reported at the top; what waited is published again after reconnecting */
    }
    /* reads what arrived, and may write a heartbeat: under the deadline */
    mqproc__amqp_guard_begin(b);
    r = amqp_consume_message(b->conn, &env, &zero, 0);
    if (mqproc__amqp_guard_end(b))
      continue; /* broken: reported at the top */
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
      if (env.channel == CH_CONSUME)
        deliver(b, &env);
      amqp_destroy_envelope(&env);
      if (caught_up(b))
        return MQPROC_OK;
    } else if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
               r.library_error == AMQP_STATUS_TIMEOUT) {
      return MQPROC_OK;
    } else if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
               r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
      amqp_frame_t f;
      int rc;
      mqproc__amqp_guard_begin(b);
      rc = amqp_simple_wait_frame(b->conn, &f);
      if (mqproc__amqp_guard_end(b))
        continue;
      if (rc != AMQP_STATUS_OK)
        mark_broken(b, amqp_error_string2(rc));
      else if (f.frame_type == AMQP_FRAME_METHOD)
        on_method(b, &f);
      if (caught_up(b))
        return MQPROC_OK;
    } else {
      mark_broken(b, r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                         ? amqp_error_string2(r.library_error)
                         : "unexpected server reply");
    }
  }
}

/* ---- outgoing ----------------------------------------------------------------------- */

int mqproc__amqp_usable(amqp_broker_t *b, uint64_t epoch, char *err) {
  if (!b->connected || b->broken)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if (epoch != 0 && epoch != b->epoch)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED,
                       "delivery belongs to a closed connection (epoch %llu, now %llu)",
                       (unsigned long long)epoch, (unsigned long long)b->epoch);
  return MQPROC_OK;
}

/* Ends a guarded send: rc is rabbitmq-c's status. */
static int sent(amqp_broker_t *b, int rc, const char *what, char *err) {
  if (mqproc__amqp_guard_end(b))
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s: %s", what, b->broken_reason);
  if (rc == AMQP_STATUS_OK)
    return MQPROC_OK;
  mark_broken(b, amqp_error_string2(rc));
  return mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s: %s", what, amqp_error_string2(rc));
}

/* Settles tag: an ack (multiple) or a nack (requeue), on the connection of epoch only. */
static int settle(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int ack, int flag,
                  char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc = mqproc__amqp_usable(b, epoch, err);
  if (rc != MQPROC_OK)
    return rc;
  mqproc__amqp_guard_begin(b);
  if (ack)
    return sent(b, amqp_basic_ack(b->conn, CH_CONSUME, tag, flag != 0), "basic.ack", err);
  return sent(b, amqp_basic_nack(b->conn, CH_CONSUME, tag, 0, flag), "basic.nack", err);
}

static int amqp_ack_(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int multiple,
                     char *err) {
  return settle(base, epoch, tag, 1, multiple, err);
}

static int amqp_nack_(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int requeue,
                      char *err) {
  return settle(base, epoch, tag, 0, requeue, err);
}

static int amqp_declare_queue_(mqproc__broker_t *base, const char *queue, char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc = mqproc__amqp_usable(b, 0, err);
  if (rc == MQPROC_OK) {
    mqproc__amqp_guard_begin(b);
    rc = mqproc__amqp_declare_bound_queue(b, queue, err);
    if (mqproc__amqp_guard_end(b))
      rc = mqproc__err(err, MQPROC_EBROKER_CLOSED, "%s", b->broken_reason);
  }
  if (rc == MQPROC_EBROKER_CLOSED)
    mark_broken(b, err != NULL ? err : "declare failed");
  else if (rc != MQPROC_OK && mqproc__amqp_open_channel(b, CH_DECLARE, NULL) != MQPROC_OK)
    mark_broken(b, "cannot reopen the declare channel");
  return rc;
}

static int amqp_cancel_(mqproc__broker_t *base, char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc = mqproc__amqp_usable(b, 0, err);
  if (rc != MQPROC_OK || !b->consuming)
    return rc;
  b->consuming = 0; /* deliveries pushed before the cancel still arrive and are reported */
  mqproc__amqp_guard_begin(b);
  amqp_basic_cancel(b->conn, CH_CONSUME, b->consumer_tag);
  rc = mqproc__amqp_rpc_error(b, CH_CONSUME, "basic.cancel", MQPROC_EBROKER_PROTOCOL, err);
  if (mqproc__amqp_guard_end(b))
    rc = MQPROC_EBROKER_CLOSED;
  if (rc != MQPROC_OK)
    mark_broken(b, "basic.cancel failed");
  return rc;
}

static int amqp_consume_(mqproc__broker_t *base, int prefetch, uint64_t *consumer, char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc = mqproc__amqp_usable(b, 0, err);
  if (rc != MQPROC_OK || b->consuming)
    return rc;
  rc = start_consuming(b, prefetch, err);
  if (rc != MQPROC_OK)
    mark_broken(b, "basic.consume failed");
  else
    *consumer = b->consumer;
  return rc;
}

static int amqp_fd_(mqproc__broker_t *base) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  return b->connected ? amqp_get_sockfd(b->conn) : -1;
}

/* Writes what this loop turn buffered, under the write deadline. */
static void amqp_flush_(mqproc__broker_t *base) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  int rc;
  if (!b->connected || b->broken || mqproc__amqp_wbuf_pending(b->conn) == 0)
    return;
  mqproc__amqp_guard_begin(b);
  rc = mqproc__amqp_wbuf_flush(b->conn);
  if (mqproc__amqp_guard_end(b))
    return; /* broken: pump() reports it */
  if (rc != AMQP_STATUS_OK)
    mark_broken(b, amqp_error_string2(rc));
}

static int amqp_pending_(mqproc__broker_t *base) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  if (!b->connected)
    return 0;
  return b->broken || amqp_frames_enqueued(b->conn) || amqp_data_in_buffer(b->conn);
}

static uint64_t amqp_epoch_(mqproc__broker_t *base) {
  return ((amqp_broker_t *)base)->epoch;
}

/* ---- teardown ----------------------------------------------------------------------- */

static void teardown(amqp_broker_t *b, int graceful) {
  if (b->conn != NULL) {
    int fd = amqp_get_sockfd(b->conn);
    /* a close handshake with a blocked broker would wait for a reply it never reads */
    if (graceful && b->connected && !b->broken && !b->blocked) {
      struct timeval tv = {2, 0};
      amqp_set_rpc_timeout(b->conn, &tv);
      mqproc__amqp_guard_begin(b);
      amqp_connection_close(b->conn, AMQP_REPLY_SUCCESS);
      mqproc__amqp_guard_end(b);
    }
    if (fd >= 0)
      b->ev.on_closing(b->ev.ud, fd);
    amqp_destroy_connection(b->conn);
    b->conn = NULL;
  }
  b->connected = 0;
  b->consuming = 0;
  b->blocked = 0;
  mqproc__amqp_fail_all_confirms(b);
}

static void amqp_disconnect_(mqproc__broker_t *base) {
  teardown((amqp_broker_t *)base, 1);
}

static void amqp_destroy_(mqproc__broker_t *base) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  teardown(b, 1);
  mqproc__guard_free(b->guard);
  amqp_bytes_free(b->consumer_tag);
  mqproc__amqp_urls_free(b->urls);
  free(b);
}

static const struct mqproc__broker_class amqp_class = {
    .name = "amqp",
    .claim_ahead = 0,           /* the broker spreads the queue over the servers */
    .declare_needs_pattern = 0, /* a declared queue is the broker's to keep */
    .dead_in_failed = 0,        /* dead letters go to the dead-letter queue */
    .connect = amqp_connect_,
    .fd = amqp_fd_,
    .pending = amqp_pending_,
    .pump = amqp_pump_,
    .flush = amqp_flush_,
    .ack = amqp_ack_,
    .nack = amqp_nack_,
    .publish = mqproc__amqp_publish,
    .declare_queue = amqp_declare_queue_,
    .cancel = amqp_cancel_,
    .consume = amqp_consume_,
    .resize = NULL, /* basic.qos changes only later consumers' prefetch */
    .epoch = amqp_epoch_,
    .disconnect = amqp_disconnect_,
    .destroy = amqp_destroy_,
};

int mqproc__broker_amqp_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                            const mqproc__broker_events_t *ev, char *err) {
  amqp_broker_t *b = mqproc__calloc(1, sizeof(*b));
  int rc;
  if (b == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = mqproc__amqp_urls(url, &b->urls, &b->n_urls, err)) != MQPROC_OK) {
    free(b);
    return rc;
  }
  if (mqproc__guard_new(&b->guard, err) != MQPROC_OK) {
    mqproc__amqp_urls_free(b->urls);
    free(b);
    return MQPROC_ESYS;
  }
  b->base.klass = &amqp_class;
  b->topo = *topo;
  b->ev = *ev;
  b->consumer_tag = amqp_empty_bytes;
  *out = &b->base;
  return MQPROC_OK;
}
