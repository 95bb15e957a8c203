/* Broker interface: consume deliveries, ack/nack them, publish with confirms.
 *
 * A backend fills a struct mqproc__broker_class (one comment per slot) and puts a
 * pointer to it first in its private state; callers use the mqproc__broker_* wrappers.
 * Backends: broker/amqp.c (RabbitMQ via rabbitmq-c), broker/dir.c (a directory queue,
 * dir:///SPOOL, no server to run: broker/dirq.h), and in the store layer store/queue.c (the
 * table queues: a database's table, postgresql:// or sqlite://, made by the server through
 * store/queue.h since this layer knows no store). A backend without a socket has fd() -1:
 * what it has for the server waits in pending() and goes out with pump().
 *
 * Event model: the server's loop watches mqproc__broker_fd() and calls
 * mqproc__broker_pump() when it is readable, when mqproc__broker_pending() says data
 * is buffered, and at least once a second (this is what services heartbeats); before it
 * sleeps, mqproc__broker_flush() writes what the turn buffered. pump()
 * reports what arrived through the events table. A delivery's tag is valid only within
 * the connection epoch it arrived on: after a reconnect the broker redelivers, and acking
 * an old tag is refused here (MQPROC_EBROKER_CLOSED) instead of being sent.
 *
 * Nothing here blocks the loop for long: every write and RPC has a deadline (the
 * connection is dropped when the broker stops reading), a publish the broker cannot take
 * now is refused with MQPROC_EBROKER_BLOCKED (a memory or disk alarm: on_blocked says when
 * it ends), and one that can never be encoded (a field over AMQP's limits, headers larger
 * than a frame) with MQPROC_EINVAL before a byte is written, so it fails that message only.
 */
#ifndef MQPROC_BROKER_H
#define MQPROC_BROKER_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mqproc/mqproc.h"

typedef struct mqproc__broker mqproc__broker_t;

/* One delivery as the broker hands it over. All pointers are valid only during the
 * on_message callback (copy what you keep). */
typedef struct mqproc__broker_msg {
  uint64_t epoch;    /* connection generation */
  uint64_t tag;      /* delivery tag within that epoch */
  uint64_t consumer; /* the consume() it came through (its *consumer); 0 = an older one */
  int redelivered;   /* the broker's hint; never trusted alone */
  const void *body;
  size_t len;
  size_t size; /* > len: the message's whole size, of which body holds only the start (a
                  table queue's body over --max-message-size, not read: it is
                  dead-lettered); 0: body is all of it */
  const char *content_type; /* "" when absent */
  const char *message_id;   /* "" when absent */
  const char *routing_key;
  const char *headers_json; /* the AMQP headers as a JSON object text; NULL when none */
  int priority;             /* the AMQP priority property; -1 when absent */
  long delivery_count;      /* x-delivery-count (a quorum queue's count of earlier returns);
                               -1 when absent */
} mqproc__broker_msg_t;

typedef struct mqproc__broker_events {
  void (*on_message)(void *ud, const mqproc__broker_msg_t *msg);
  /* The publish with this sequence number ended: MQPROC_OK (confirmed),
   * MQPROC_EBROKER_UNROUTABLE (returned, mandatory), MQPROC_EBROKER_NACKED, or
   * MQPROC_EBROKER_CLOSED (connection lost before the confirm). */
  void (*on_confirm)(void *ud, uint64_t seq, int status);
  /* The connection is gone (every pending confirm was reported CLOSED first). */
  void (*on_down)(void *ud, const char *reason);
  /* The socket fd is about to be closed: stop watching it now (a watch removed after the
     close cannot be, while a child process still holds the socket). */
  void (*on_closing)(void *ud, int fd);
  /* The broker blocked (1) or unblocked (0) publishing on this connection (RabbitMQ's
     connection.blocked, sent under a memory or disk alarm); reason as the broker gave it. */
  void (*on_blocked)(void *ud, int blocked, const char *reason);
  void *ud;
} mqproc__broker_events_t;

typedef struct mqproc__broker_header {
  const char *key;
  const char *value;
} mqproc__broker_header_t;

typedef struct mqproc__publish {
  const char *exchange; /* "" = the default exchange */
  const char *routing_key;
  const void *body;
  size_t len;
  const char *content_type; /* NULL = none */
  const char *message_id;   /* NULL = none */
  int persistent;           /* delivery_mode 2 */
  int mandatory;            /* ask for basic.return when unroutable */
  int priority;             /* 1-255: the AMQP priority; 0: none (the same to the broker) */
  const mqproc__broker_header_t *headers;
  size_t n_headers;
  int dead_letter; /* the server's dead letter (routing_key its dead queue): a backend that
                      keeps dead letters apart (dir://: the job queue's failed/) goes by this
                      flag, never by the name, which a message's result queue could take */
} mqproc__publish_t;

/* TLS to an amqps:// broker (broker/amqp_conn.h); verify is --tls-verify's value
 * (base/config.h). */
typedef struct mqproc__tls {
  const char *ca;   /* PEM file of the CAs to trust; NULL: the system's bundle */
  const char *cert; /* client certificate (PEM), with key; NULL: none */
  const char *key;
  mqproc__tls_verify_t verify;
} mqproc__tls_t;

typedef struct mqproc__topology {
  const char *exchange;          /* direct exchange the job queue is bound to */
  const char *queue;             /* job queue = processor name, bound with routing key = queue */
  const char *dead_queue;        /* where given-up messages go (declared, durable like queue) */
  int durable;                   /* queues durable; the exchange is always declared non-durable
                                    as OCR-D does, passively first */
  const char *const *queue_args; /* NULL-terminated "key=value" list; ints if numeric */
  int max_priority;              /* > 0: the job queue has x-max-priority this, declared
                                    actively (a queue with other arguments is an error) */
  int quorum;                    /* job and dead-letter queues are quorum queues, declared
                                    actively (x-queue-type, x-delivery-limit) */
  int delivery_limit;            /* quorum: x-delivery-limit, the broker's backstop */
  int heartbeat_s;
  int timeout_s;            /* deadline of one write or RPC; the connection is dropped after it */
  int confirm_timeout_s;    /* a publish unconfirmed this long drops the connection (a quorum
                               queue without a majority never confirms); 0 = never */
  const char *client_id;    /* shown in the broker's connection list (connection_name) */
  size_t max_message_bytes; /* dir://: a job file larger than this goes to failed/ unread;
                               a table queue reads only its start and size (msg.size)
                               (--max-message-size; 0: the backend's own bound) */
  mqproc__tls_t tls;        /* for amqps:// URLs */
  int visibility_s;         /* table queues (store/queue.h): how long a taken message stays
                               invisible to other servers unless its holder extends it */
} mqproc__topology_t;

/* A held message as the table queue's database knows it (store/queue.h): what fences its
 * ack there. consumer is the backend's (valid while it lives). */
typedef struct mqproc__broker_held {
  const char *consumer;
  int64_t id;
  int deliveries;
} mqproc__broker_held_t;

struct mqproc__broker_class {
  const char *name;
  /* What the server asks of a backend (never the URL's scheme):
     claim_ahead: claim jobs ahead of a free run slot unless --claim-ahead says otherwise
     (dir://: a claim's commit then overlaps the runs before it; docs/dir-queue.md);
     declare_needs_pattern: a declared queue stays behind as a directory, so a message may
     make one only where --result-queue-pattern allows (dir://). Whether its consumer's
     window can grow and shrink in place is whether resize is set. */
  int claim_ahead;
  int declare_needs_pattern;
  /* dead_in_failed: a dead letter goes into the job queue's failed/ directory, not to the
     dead-letter queue (dir://): the logs name that place. */
  int dead_in_failed;
  /* empty_hint: said with a dead letter's "empty message", how a producer avoids one (NULL:
     nothing to say; dir://: a file created in new/ is seen before it is written). */
  const char *empty_hint;
  /* connect: open the connection and declare the topology (consume() starts consuming). */
  int (*connect)(mqproc__broker_t *b, char *err);
  /* fd: the socket to watch, -1 when not connected. */
  int (*fd)(mqproc__broker_t *b);
  /* pending: nonzero when frames are buffered and pump() must run without waiting. */
  int (*pending)(mqproc__broker_t *b);
  /* pump: read what is available, dispatch events, service heartbeats. An error means
     the connection is down (on_down was called). */
  int (*pump)(mqproc__broker_t *b, char *err);
  /* flush: write what the calls of this loop turn buffered (publishes, acks), at once; the
     server calls it before its loop sleeps. A failure marks the connection down (pump()
     reports it). NULL: the backend writes at once. */
  void (*flush)(mqproc__broker_t *b);
  /* ack / nack: settle a delivery of the given epoch. */
  int (*ack)(mqproc__broker_t *b, uint64_t epoch, uint64_t tag, int multiple, char *err);
  int (*nack)(mqproc__broker_t *b, uint64_t epoch, uint64_t tag, int requeue, char *err);
  /* publish: send with confirms; *seq identifies the on_confirm event. MQPROC_EINVAL: this
     message cannot be encoded (nothing was sent); MQPROC_EBROKER_BLOCKED: not now. */
  int (*publish)(mqproc__broker_t *b, const mqproc__publish_t *p, uint64_t *seq, char *err);
  /* declare_queue: declare a queue like the job queue and bind it (result queues). */
  int (*declare_queue)(mqproc__broker_t *b, const char *queue, char *err);
  /* cancel: stop consuming, keep the connection for acks; deliveries the broker pushed
     before the cancel still arrive through on_message. */
  int (*cancel)(mqproc__broker_t *b, char *err);
  /* consume: start consuming with this prefetch (basic.qos + basic.consume); *consumer
     identifies the deliveries it brings (mqproc__broker_msg_t.consumer). */
  int (*consume)(mqproc__broker_t *b, int prefetch, uint64_t *consumer, char *err);
  /* resize: the current consumer's prefetch changed in place (NULL where the backend
     cannot: AMQP's basic.qos applies to later consumers only). */
  int (*resize)(mqproc__broker_t *b, int prefetch, char *err);
  /* ack_in_store: the delivery (epoch, tag) will be acked by a write of the job store the
     queue lives in (a table queue in the server's own database: the job's success deletes
     the message in its own statement, one commit for both): *held gets what fences that
     delete, and the message stops counting as held (the take that refills the window may
     share the write's round). MQPROC_EINVAL when it cannot be (NULL: every backend whose
     queue is not in the store); a later ack of the tag then settles nothing. */
  int (*ack_in_store)(mqproc__broker_t *b, uint64_t epoch, uint64_t tag,
                      mqproc__broker_held_t *held);
  /* epoch: the current connection generation (0 = never connected). */
  uint64_t (*epoch)(mqproc__broker_t *b);
  /* disconnect: close the connection (pending confirms report CLOSED; no on_down). */
  void (*disconnect)(mqproc__broker_t *b);
  /* destroy: disconnect and free. */
  void (*destroy)(mqproc__broker_t *b);
};

struct mqproc__broker {
  const struct mqproc__broker_class *klass;
};

/* The backend url's scheme names (amqp://, amqps://, a broker list; dir://): url is copied,
 * topology strings must outlive the broker. MQPROC_ECONFIG with err when the URL or the
 * topology cannot work with it. */
int mqproc__broker_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                       const mqproc__broker_events_t *ev, char *err);

/* The AMQP backend. url is copied; topology strings must outlive the broker. */
int mqproc__broker_amqp_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                            const mqproc__broker_events_t *ev, char *err);

/* The directory-queue backend (dir:///SPOOL); as above. */
int mqproc__broker_dir_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                           const mqproc__broker_events_t *ev, char *err);

static inline int mqproc__broker_connect(mqproc__broker_t *b, char *err) {
  return b->klass->connect(b, err);
}
static inline int mqproc__broker_fd(mqproc__broker_t *b) {
  return b->klass->fd(b);
}
static inline int mqproc__broker_pending(mqproc__broker_t *b) {
  return b->klass->pending(b);
}
static inline int mqproc__broker_pump(mqproc__broker_t *b, char *err) {
  return b->klass->pump(b, err);
}
static inline void mqproc__broker_flush(mqproc__broker_t *b) {
  if (b->klass->flush != NULL)
    b->klass->flush(b);
}
/* multiple: every delivery of the epoch up to tag (AMQP's multiple ack). */
static inline int mqproc__broker_ack(mqproc__broker_t *b, uint64_t epoch, uint64_t tag,
                                     int multiple, char *err) {
  return b->klass->ack(b, epoch, tag, multiple, err);
}
static inline int mqproc__broker_nack(mqproc__broker_t *b, uint64_t epoch, uint64_t tag,
                                      int requeue, char *err) {
  return b->klass->nack(b, epoch, tag, requeue, err);
}
static inline int mqproc__broker_publish(mqproc__broker_t *b, const mqproc__publish_t *p,
                                         uint64_t *seq, char *err) {
  return b->klass->publish(b, p, seq, err);
}
static inline int mqproc__broker_declare_queue(mqproc__broker_t *b, const char *queue, char *err) {
  return b->klass->declare_queue(b, queue, err);
}
static inline int mqproc__broker_cancel(mqproc__broker_t *b, char *err) {
  return b->klass->cancel(b, err);
}
static inline int mqproc__broker_consume(mqproc__broker_t *b, int prefetch, uint64_t *consumer,
                                         char *err) {
  return b->klass->consume(b, prefetch, consumer, err);
}
/* Whether the consumer's prefetch can change in place (resize is set). */
static inline int mqproc__broker_can_resize(const mqproc__broker_t *b) {
  return b->klass->resize != NULL;
}
static inline int mqproc__broker_resize(mqproc__broker_t *b, int prefetch, char *err) {
  return b->klass->resize != NULL ? b->klass->resize(b, prefetch, err) : MQPROC_EINVAL;
}
static inline int mqproc__broker_ack_in_store(mqproc__broker_t *b, uint64_t epoch, uint64_t tag,
                                              mqproc__broker_held_t *held) {
  return b->klass->ack_in_store != NULL ? b->klass->ack_in_store(b, epoch, tag, held)
                                        : MQPROC_EINVAL;
}
static inline uint64_t mqproc__broker_epoch(mqproc__broker_t *b) {
  return b->klass->epoch(b);
}
static inline void mqproc__broker_disconnect(mqproc__broker_t *b) {
  b->klass->disconnect(b);
}
static inline void mqproc__broker_destroy(mqproc__broker_t *b) {
  if (b != NULL)
    b->klass->destroy(b);
}

#endif
