/* AMQP backend, publishing: basic.publish on channel 2 (confirm mode), the confirms and
 * returns that settle it. Part of broker/amqp.c's backend (broker/amqp_int.h).
 *
 * Before a byte is written, a message is checked against what AMQP can encode: short
 * strings (exchange, routing key, content type, message id) of at most 255 bytes and a
 * header frame no larger than the negotiated frame_max. rabbitmq-c sends the method frame
 * before it encodes the header frame, so a message it refuses halfway would leave the
 * connection in an undefined state; refused here, it fails only itself (MQPROC_EINVAL).
 *
 * Returned (unroutable) messages are matched to their publish by the x-mqproc-seq header
 * added here, since basic.return carries no sequence number.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp_int.h"
#include "base/util.h"

#define MAX_HEADERS 16

/* ---- what AMQP can carry ------------------------------------------------------------ */

static int short_string(const char *what, const char *s, char *err) {
  size_t n = s != NULL ? strlen(s) : 0;
  if (n > 255)
    return mqproc__err(err, MQPROC_EINVAL,
                       "cannot publish: the %s is %zu bytes, AMQP allows at most 255", what, n);
  return MQPROC_OK;
}

/* The encoded size of the content header frame's payload for p (with our seq header). */
static size_t header_frame_size(const mqproc__publish_t *p) {
  size_t n = 2 + 2 + 8 + 2;                /* class, weight, body size, property flags */
  n += 4 + 1 + strlen(SEQ_HEADER) + 1 + 8; /* the headers table and our seq entry */
  for (size_t i = 0; i < p->n_headers; i++)
    n += 1 + strlen(p->headers[i].key) + 1 + 4 + strlen(p->headers[i].value);
  n += 1; /* delivery mode */
  if (p->content_type != NULL)
    n += 1 + strlen(p->content_type);
  if (p->message_id != NULL)
    n += 1 + strlen(p->message_id);
  return n;
}

static int encodable(amqp_broker_t *b, const mqproc__publish_t *p, char *err) {
  size_t frame_max = (size_t)amqp_get_frame_max(b->conn), need;
  int rc;
  if ((rc = short_string("exchange name", p->exchange, err)) != MQPROC_OK ||
      (rc = short_string("routing key (queue name)", p->routing_key, err)) != MQPROC_OK ||
      (rc = short_string("content type", p->content_type, err)) != MQPROC_OK ||
      (rc = short_string("message id", p->message_id, err)) != MQPROC_OK)
    return rc;
  if (p->n_headers > MAX_HEADERS)
    return mqproc__err(err, MQPROC_EINVAL, "cannot publish: %zu headers, at most %d", p->n_headers,
                       MAX_HEADERS);
  for (size_t i = 0; i < p->n_headers; i++)
    if ((rc = short_string("header name", p->headers[i].key, err)) != MQPROC_OK)
      return rc;
  need = header_frame_size(p) + 8; /* frame header and end octet */
  if (frame_max > 0 && need > frame_max)
    return mqproc__err(err, MQPROC_EINVAL,
                       "cannot publish: its properties take %zu bytes, more than one AMQP frame "
                       "(%zu bytes)",
                       need, frame_max);
  return MQPROC_OK;
}

/* ---- publish ------------------------------------------------------------------------ */

int mqproc__amqp_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                         char *err) {
  amqp_broker_t *b = (amqp_broker_t *)base;
  amqp_basic_properties_t props;
  amqp_table_entry_t ents[MAX_HEADERS + 1];
  pending_pub_t *pend;
  size_t n = 0;
  int rc;
  if ((rc = mqproc__amqp_usable(b, 0, err)) != MQPROC_OK)
    return rc;
  if ((rc = encodable(b, p, err)) != MQPROC_OK)
    return rc;
  if (b->blocked)
    return mqproc__err(err, MQPROC_EBROKER_BLOCKED,
                       "the broker blocked publishing on this connection (resource alarm)");
  if ((pend = mqproc__calloc(1, sizeof(*pend))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  memset(&props, 0, sizeof(props));
  for (; n < p->n_headers; n++) {
    ents[n].key = amqp_cstring_bytes(p->headers[n].key);
    ents[n].value.kind = AMQP_FIELD_KIND_UTF8;
    ents[n].value.value.bytes = amqp_cstring_bytes(p->headers[n].value);
  }
  ents[n].key = amqp_cstring_bytes(SEQ_HEADER);
  ents[n].value.kind = AMQP_FIELD_KIND_U64;
  ents[n].value.value.u64 = b->next_seq + 1;
  props._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  props.headers.num_entries = (int)n + 1;
  props.headers.entries = ents;
  props.delivery_mode = p->persistent ? 2 : 1;
  if (p->content_type != NULL) {
    props._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
    props.content_type = amqp_cstring_bytes(p->content_type);
  }
  if (p->priority > 0 && p->priority <= 255) {
    props._flags |= AMQP_BASIC_PRIORITY_FLAG;
    props.priority = (uint8_t)p->priority;
  }
  if (p->message_id != NULL) {
    props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    props.message_id = amqp_cstring_bytes(p->message_id);
  }
  mqproc__amqp_guard_begin(b);
  rc = amqp_basic_publish(b->conn, CH_PUBLISH, amqp_cstring_bytes(p->exchange),
                          amqp_cstring_bytes(p->routing_key), p->mandatory, 0, &props,
                          (amqp_bytes_t){.len = p->len, .bytes = (void *)p->body});
  if (mqproc__amqp_guard_end(b) || rc != AMQP_STATUS_OK) {
    free(pend);
    if (rc != AMQP_STATUS_OK)
      mqproc__amqp_mark_broken(b, amqp_error_string2(rc));
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "basic.publish: %s", b->broken_reason);
  }
  pend->seq = ++b->next_seq;
  pend->sent_ms = mqproc__now_ms();
  if (b->pending_tail != NULL)
    b->pending_tail->next = pend;
  else
    b->pending = pend;
  b->pending_tail = pend;
  *seq = pend->seq;
  return MQPROC_OK;
}

/* ---- confirms and returns ----------------------------------------------------------- */

void mqproc__amqp_settle_confirms(amqp_broker_t *b, uint64_t tag, int multiple, int status) {
  pending_pub_t **pp = &b->pending, *last = NULL, *done = NULL, **done_tail = &done;
  /* first take the settled ones out, so the list is whole when on_confirm publishes anew */
  while (*pp != NULL) {
    pending_pub_t *p = *pp;
    if (p->seq == tag || (multiple && p->seq < tag)) {
      *pp = p->next;
      p->next = NULL;
      *done_tail = p;
      done_tail = &p->next;
    } else {
      last = p;
      pp = &p->next;
    }
  }
  b->pending_tail = last;
  while (done != NULL) {
    pending_pub_t *p = done;
    done = p->next;
    b->ev.on_confirm(b->ev.ud, p->seq,
                     status == MQPROC_OK && p->returned ? MQPROC_EBROKER_UNROUTABLE : status);
    free(p);
  }
}

void mqproc__amqp_fail_all_confirms(amqp_broker_t *b) {
  pending_pub_t *p = b->pending;
  b->pending = b->pending_tail = NULL;
  while (p != NULL) {
    pending_pub_t *next = p->next;
    b->ev.on_confirm(b->ev.ud, p->seq, MQPROC_EBROKER_CLOSED);
    free(p);
    p = next;
  }
}

void mqproc__amqp_on_return(amqp_broker_t *b, amqp_channel_t ch) {
  amqp_message_t msg;
  amqp_rpc_reply_t r = amqp_read_message(b->conn, ch, &msg, 0);
  if (r.reply_type != AMQP_RESPONSE_NORMAL) {
    mqproc__amqp_mark_broken(b, "cannot read a returned message");
    return;
  }
  if (msg.properties._flags & AMQP_BASIC_HEADERS_FLAG) {
    amqp_table_t *h = &msg.properties.headers;
    for (int i = 0; i < h->num_entries; i++) {
      amqp_table_entry_t *e = &h->entries[i];
      if (e->key.len == strlen(SEQ_HEADER) && memcmp(e->key.bytes, SEQ_HEADER, e->key.len) == 0 &&
          e->value.kind == AMQP_FIELD_KIND_U64) {
        for (pending_pub_t *p = b->pending; p != NULL; p = p->next)
          if (p->seq == e->value.value.u64)
            p->returned = 1;
      }
    }
  }
  amqp_destroy_message(&msg);
}
