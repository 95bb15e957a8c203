/* The operators' blocking queue client (client.h): a rabbitmq-c connection with publisher
 * confirms (a command waits for its broker; a server's loop never does), for a dir:// URL
 * the directory queue (broker/dirq.h): a publish is a durable file in the queue's new/
 * (written, fsynced, renamed, the directory fsynced), or a kind of queue its caller hands
 * over (the table queues: store/queue_client.c). It prints nothing: each
 * call says why it failed in err, and its caller decides who reads it. */
#include <amqp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "broker/client.h"

#include "base/log.h"
#include "base/util.h"
#include "broker/amqp_conn.h"
#include "broker/dirq.h"
#include "mqproc/mqproc.h"

#define TIMEOUT_S 10

struct mqproc__qclient {
  const mqproc__qclient_kind_t *kind; /* a later layer's kind of queue (kc its client), or NULL */
  void *kc;
  amqp_connection_state_t conn; /* NULL: a directory queue (or kind's) */
  uint64_t seq;
  char spool[MQPROC__DIRQ_SPOOL_MAX];
  char made[MQPROC__DIRQ_NAME_MAX + 1]; /* the queue last made (a --count run makes it once) */
  mqproc__dirq_q_t q;                   /* its directories, open */
};

/* ---- dir:// ------------------------------------------------------------------------- */

static mqproc__qclient_t *dir_open(const char *url, char *err) {
  mqproc__qclient_t *a = calloc(1, sizeof(*a));
  if (a == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return NULL;
  }
  mqproc__dirq_init(&a->q);
  if (mqproc__dirq_spool(url, a->spool, NULL, err) != MQPROC_OK) {
    free(a);
    return NULL;
  }
  return a;
}

static int dir_send(mqproc__qclient_t *a, const char *rk, const void *body, size_t len,
                    const char *content_type, const char *message_id, int priority,
                    const char *const *headers, size_t n_headers, char *err) {
  char why[MQPROC_ERR_LEN], name[MQPROC__DIRQ_NAME_MAX], *hj = NULL;
  mqproc__dirq_msg_t m = {.body = body,
                          .len = len,
                          .content_type = content_type,
                          .message_id = message_id,
                          .priority = priority};
  int rc;
  if (n_headers > 0) {
    json_t *o = json_object();
    for (size_t i = 0; i < n_headers; i++) {
      const char *eq = strchr(headers[i], '=');
      char key[256];
      if (eq == NULL || (size_t)(eq - headers[i]) >= sizeof(key))
        continue;
      memcpy(key, headers[i], (size_t)(eq - headers[i]));
      key[eq - headers[i]] = '\0';
      json_object_set_new(o, key, json_string(eq + 1));
    }
    hj = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    m.headers_json = hj;
  }
  /* a queue no server made yet is made here: the first server finds its jobs waiting */
  if (strcmp(a->made, rk) == 0 && a->q.fd >= 0) {
    rc = MQPROC_OK;
  } else {
    mqproc__dirq_close(&a->q);
    a->made[0] = '\0';
    if ((rc = mqproc__dirq_open(a->spool, rk, 1, &a->q, why)) == MQPROC_OK)
      snprintf(a->made, sizeof(a->made), "%s", rk);
  }
  if (rc == MQPROC_OK)
    rc = mqproc__dirq_put(&a->q, MQPROC__DIRQ_NEW, &m, 1, name, why);
  free(hj);
  if (rc != MQPROC_OK) {
    mqproc__err(err, rc, "not queued: %s", why);
    return -1;
  }
  a->seq++;
  return 0;
}

/* ---- AMQP --------------------------------------------------------------------------- */

static int rpc_ok(amqp_rpc_reply_t r, const char *what, char *err) {
  if (r.reply_type == AMQP_RESPONSE_NORMAL)
    return 1;
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
      (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD || r.reply.id == AMQP_CONNECTION_CLOSE_METHOD)) {
    amqp_channel_close_t *c = r.reply.decoded; /* same layout for the connection's close */
    mqproc__err(err, MQPROC_EBROKER_CONNECT, "%s: %.*s", what, (int)c->reply_text.len,
                (const char *)c->reply_text.bytes);
  } else {
    mqproc__err(err, MQPROC_EBROKER_CONNECT, "%s failed (%s)", what,
                r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                    ? amqp_error_string2(r.library_error)
                    : "broker error");
  }
  return 0;
}

/* Connects to one broker: socket (TCP or TLS), login, channel 1 with confirms. */
static int open_one(mqproc__qclient_t *a, const char *url, const mqproc__tls_t *tls, char *err) {
  struct amqp_connection_info info;
  struct timeval tv = {TIMEOUT_S, 0};
  char *copy = strdup(url);
  int ok;
  if (copy == NULL)
    return mqproc__err(err, 0, "out of memory");
  amqp_default_connection_info(&info);
  amqp_parse_url(copy, &info); /* checked by mqproc__amqp_urls() */
  if ((a->conn = amqp_new_connection()) == NULL) {
    free(copy);
    return mqproc__err(err, 0, "out of memory");
  }
  if (mqproc__amqp_socket_open(a->conn, &info, tls, TIMEOUT_S, err) != MQPROC_OK) {
    ok = 0;
  } else {
    amqp_set_rpc_timeout(a->conn, &tv);
    ok = rpc_ok(amqp_login(a->conn, info.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, info.user,
                           info.password),
                "login", err) &&
         amqp_channel_open(a->conn, 1) != NULL &&
         rpc_ok(amqp_get_rpc_reply(a->conn), "channel", err) &&
         amqp_confirm_select(a->conn, 1) != NULL &&
         rpc_ok(amqp_get_rpc_reply(a->conn), "confirms", err);
  }
  if (!ok) {
    amqp_destroy_connection(a->conn);
    a->conn = NULL;
  }
  free(copy);
  return ok;
}

/* A queue of a kind a later layer adds (the table queues). */
static mqproc__qclient_t *kind_open(const char *url, const mqproc__qclient_kind_t *kind,
                                    char *err) {
  mqproc__qclient_t *a = calloc(1, sizeof(*a));
  if (a == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return NULL;
  }
  mqproc__dirq_init(&a->q);
  a->kind = kind;
  if ((a->kc = kind->open(url, err)) == NULL) {
    free(a);
    return NULL;
  }
  return a;
}

mqproc__qclient_t *mqproc__qclient_open(const char *url, const mqproc__tls_t *tls,
                                        const mqproc__qclient_kind_t *kind, char *err) {
  char **urls;
  size_t n, order[64];
  mqproc__qclient_t *a;
  if (url == NULL || url[0] == '\0') {
    mqproc__err(err, MQPROC_ECONFIG, "--queue (or MQPROC_QUEUE) is required");
    return NULL;
  }
  if (kind != NULL && kind->is_url(url))
    return kind_open(url, kind, err);
  if (mqproc__dirq_is_url(url))
    return dir_open(url, err);
  if (mqproc__amqp_urls(url, &urls, &n, err) != MQPROC_OK)
    return NULL;
  if ((a = calloc(1, sizeof(*a))) == NULL) {
    mqproc__amqp_urls_free(urls);
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return NULL;
  }
  mqproc__amqp_shuffle(order, n); /* a broker list: the first that lets us in (err: why
                                     the last one did not) */
  for (size_t i = 0; i < n && a->conn == NULL; i++)
    open_one(a, urls[order[i]], tls, err);
  mqproc__amqp_urls_free(urls);
  if (a->conn == NULL) {
    free(a);
    return NULL;
  }
  return a;
}

int mqproc__qclient_send(mqproc__qclient_t *a, const char *exchange, const char *rk,
                         const void *body, size_t len, const char *content_type,
                         const char *message_id, int priority, const char *const *headers,
                         size_t n_headers, char *err) {
  amqp_basic_properties_t p = {0};
  amqp_table_entry_t entries[32];
  struct timeval tv = {TIMEOUT_S, 0};
  int returned = 0;
  if (a->kind != NULL)
    return a->kind->send(a->kc, rk, body, len, content_type, message_id, priority, headers,
                         n_headers, err);
  if (a->conn == NULL)
    return dir_send(a, rk, body, len, content_type, message_id, priority, headers, n_headers, err);
  p._flags = AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
  p.delivery_mode = 2;
  p.content_type = amqp_cstring_bytes(content_type);
  if (message_id != NULL) {
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    p.message_id = amqp_cstring_bytes(message_id);
  }
  if (priority >= 0) {
    p._flags |= AMQP_BASIC_PRIORITY_FLAG;
    p.priority = (uint8_t)priority;
  }
  if (n_headers > 0) {
    size_t n = 0;
    for (size_t i = 0; i < n_headers && n < 32; i++) {
      const char *eq = strchr(headers[i], '=');
      if (eq == NULL)
        continue;
      entries[n].key = (amqp_bytes_t){(size_t)(eq - headers[i]), (void *)headers[i]};
      entries[n].value.kind = AMQP_FIELD_KIND_UTF8;
      entries[n].value.value.bytes = amqp_cstring_bytes(eq + 1);
      n++;
    }
    p._flags |= AMQP_BASIC_HEADERS_FLAG;
    p.headers = (amqp_table_t){(int)n, entries};
  }
  if (amqp_basic_publish(a->conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(rk), 1, 0, &p,
                         (amqp_bytes_t){len, (void *)body}) != AMQP_STATUS_OK) {
    return mqproc__err(err, -1, "publish failed: connection lost");
  }
  a->seq++;
  for (;;) { /* basic.return (unroutable) comes before the ack of the same message */
    amqp_frame_t f;
    int rc;
    amqp_maybe_release_buffers(a->conn);
    rc = amqp_simple_wait_frame_noblock(a->conn, &f, &tv);
    if (rc != AMQP_STATUS_OK) {
      return mqproc__err(err, -1, "no confirm from the broker: %s", amqp_error_string2(rc));
    }
    if (f.frame_type != AMQP_FRAME_METHOD)
      continue; /* the returned message's header and body */
    if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
      returned = 1;
      continue;
    }
    if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
      return mqproc__err(err, -1, "the broker refused the message (nack)");
    }
    if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      if (returned) {
        return mqproc__err(err, -1,
                           "unroutable: no queue is bound to exchange '%s' with routing key '%s' "
                           "(no server of that processor ever ran?)",
                           exchange, rk);
      }
      return 0;
    }
    if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
      amqp_channel_close_t *c = f.payload.method.decoded;
      return mqproc__err(err, -1, "the broker closed the channel: %.*s", (int)c->reply_text.len,
                         (const char *)c->reply_text.bytes);
    }
  }
}

int mqproc__qclient_depth(mqproc__qclient_t *a, const char *queue, long *messages, long *consumers,
                          long *held) {
  amqp_queue_declare_ok_t *ok;
  *held = -1;
  if (a->kind != NULL) { /* a table: what is ready and what is held, no consumers' list */
    *consumers = -1;
    return a->kind->depth(a->kc, queue, messages, held);
  }
  if (a->conn == NULL) { /* a directory queue keeps no list of its consumers */
    char err[MQPROC_ERR_LEN];
    mqproc__dirq_q_t q;
    if (mqproc__dirq_open(a->spool, queue, 0, &q, err) != MQPROC_OK)
      return -1;
    *consumers = -1;
    *messages = mqproc__dirq_count(&q);
    mqproc__dirq_close(&q);
    return *messages >= 0 ? 0 : -1;
  }
  ok = amqp_queue_declare(a->conn, 1, amqp_cstring_bytes(queue), 1, 0, 0, 0, amqp_empty_table);
  if (ok == NULL) { /* 404: the channel is closed; open it again for the next call */
    amqp_rpc_reply_t r = amqp_get_rpc_reply(a->conn);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
      amqp_channel_close_ok_t close_ok = {0};
      amqp_send_method(a->conn, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &close_ok);
      if (amqp_channel_open(a->conn, 1) != NULL)
        amqp_confirm_select(a->conn, 1);
      return -1;
    }
    return -2;
  }
  *messages = (long)ok->message_count;
  *consumers = (long)ok->consumer_count;
  return 0;
}

int mqproc__qclient_served(mqproc__qclient_t *a, const char *queue) {
  if (a->kind != NULL) /* a table queue: a message for a queue nobody reads waits there */
    return -1;
  return a->conn == NULL ? mqproc__dirq_served(a->spool, queue) : -1;
}

void mqproc__qmsg_clear(mqproc__qmsg_t *m) {
  free(m->body);
  free(m->message_id);
  free(m->content_type);
  memset(m, 0, sizeof(*m));
}

/* One basic.get: with peek the message stays unacked (the channel's close gives it back). */
static int amqp_get(mqproc__qclient_t *a, const char *queue, int peek, mqproc__qmsg_t *out,
                    char *err) {
  amqp_rpc_reply_t r = amqp_basic_get(a->conn, 1, amqp_cstring_bytes(queue), 0);
  amqp_message_t msg;
  uint64_t tag;
  if (!rpc_ok(r, "basic.get", err))
    return -1;
  if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
    return 0;
  tag = ((amqp_basic_get_ok_t *)r.reply.decoded)->delivery_tag;
  if (!rpc_ok(amqp_read_message(a->conn, 1, &msg, 0), "reading the message", err))
    return -1;
  out->body = malloc(msg.body.len + 1);
  out->message_id = (msg.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG)
                        ? strndup(msg.properties.message_id.bytes, msg.properties.message_id.len)
                        : strdup("");
  out->content_type =
      (msg.properties._flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
          ? strndup(msg.properties.content_type.bytes, msg.properties.content_type.len)
          : strdup("");
  out->priority = (msg.properties._flags & AMQP_BASIC_PRIORITY_FLAG) ? msg.properties.priority : -1;
  if (out->body != NULL) {
    memcpy(out->body, msg.body.bytes, msg.body.len);
    out->body[msg.body.len] = '\0';
    out->len = msg.body.len;
  }
  amqp_destroy_message(&msg);
  if (out->body == NULL || out->message_id == NULL || out->content_type == NULL) {
    mqproc__qmsg_clear(out);
    return mqproc__err(err, -1, "out of memory");
  }
  if (!peek && amqp_basic_ack(a->conn, 1, tag, 0) != AMQP_STATUS_OK) {
    mqproc__qmsg_clear(out);
    return mqproc__err(err, -1, "ack failed: connection lost");
  }
  return 1;
}

int mqproc__qclient_get(mqproc__qclient_t *a, const char *queue, int peek, long skip,
                        mqproc__qmsg_t *out, char *err) {
  memset(out, 0, sizeof(*out));
  if (a->kind != NULL)
    return a->kind->get(a->kc, queue, peek, skip, out, err);
  if (a->conn == NULL)
    return mqproc__err(err, -1,
                       "a dir:// queue's messages are its files: read SPOOL/%s/new/ (each file "
                       "is a message: docs/dir-queue.md)",
                       queue);
  return amqp_get(a, queue, peek, out, err);
}

int mqproc__qclient_make_queue(mqproc__qclient_t *a, const char *queue, char *err) {
  char qdir[MQPROC__DIRQ_QDIR_MAX];
  if (a->conn != NULL || a->kind != NULL) /* the servers declare result queues on AMQP; a
                                             table queue is its rows */
    return 0;
  return mqproc__dirq_make(a->spool, queue, qdir, err) == MQPROC_OK ? 0 : -1;
}

void mqproc__qclient_close(mqproc__qclient_t *a) {
  if (a == NULL)
    return;
  if (a->kind != NULL)
    a->kind->close(a->kc);
  if (a->conn == NULL) {
    mqproc__dirq_close(&a->q);
    free(a);
    return;
  }
  amqp_channel_close(a->conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(a->conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(a->conn);
  free(a);
}
