/* AMQP backend internals shared by its files: broker/amqp.c (connection, consuming,
 * incoming frames, teardown), broker/amqp_publish.c (publishing and confirms) and
 * broker/amqp_declare.c (declarations, RPC replies). */
#ifndef MQPROC_BROKER_AMQP_INT_H
#define MQPROC_BROKER_AMQP_INT_H

#include <amqp.h>

#include "broker/broker.h"
#include "mqproc/mqproc.h"
#include "broker/amqp_write_guard.h"

#define CH_CONSUME 1
#define CH_PUBLISH 2
#define CH_DECLARE 3
#define SEQ_HEADER "x-mqproc-seq"

typedef struct pending_pub {
  uint64_t seq;
  int returned;
  int64_t sent_ms; /* when it was sent (since the last unblock): for --confirm-timeout */
  struct pending_pub *next;
} pending_pub_t;

typedef struct amqp_broker {
  struct mqproc__broker base; /* first: klass */
  char **urls;                /* the broker list (--queue, comma-separated): NULL-terminated */
  size_t n_urls;
  mqproc__topology_t topo;
  mqproc__broker_events_t ev;
  mqproc__guard_t *guard; /* the deadline of every call that may block on the socket */
  amqp_connection_state_t conn;
  int connected;
  int broken; /* an operation failed: pump() reports down */
  char broken_reason[MQPROC_ERR_LEN];
  int blocked; /* connection.blocked: no publishing until connection.unblocked */
  uint64_t epoch;
  uint64_t next_seq;      /* last publish sequence number on channel 2 */
  pending_pub_t *pending; /* oldest first */
  pending_pub_t *pending_tail;
  int consuming;
  uint64_t consumer; /* generation of the current consumer (consume() calls) */
  amqp_bytes_t consumer_tag;
} amqp_broker_t;

/* The connection is unusable from now on; pump() reports it down with this reason. */
void mqproc__amqp_mark_broken(amqp_broker_t *b, const char *reason);
/* MQPROC_OK when the connection is up (and is connection epoch, unless 0), else
 * MQPROC_EBROKER_CLOSED with err set. */
int mqproc__amqp_usable(amqp_broker_t *b, uint64_t epoch, char *err);
/* Around a rabbitmq-c call that may block on the socket (it writes, or waits for an RPC
 * reply): the deadline is --broker-timeout. end() returns 1, with the connection marked
 * broken, when the deadline cut the call short. Never around calls into the server. */
void mqproc__amqp_guard_begin(amqp_broker_t *b);
int mqproc__amqp_guard_end(amqp_broker_t *b);

/* Formats the outcome of the last RPC on channel ch into err and returns a status; *code
 * (may be NULL) gets the reply code when the server closed the channel (404 = not found).
 * A server close of a channel or the connection is answered with close-ok. */
int mqproc__amqp_rpc_status(amqp_broker_t *b, int ch, const char *what, int fail_status, int *code,
                            char *err);
int mqproc__amqp_rpc_error(amqp_broker_t *b, int ch, const char *what, int fail_status, char *err);
int mqproc__amqp_open_channel(amqp_broker_t *b, int ch, char *err);
/* The exchange, the job queue (bound) and the dead-letter queue. */
int mqproc__amqp_declare_topology(amqp_broker_t *b, char *err);
/* A queue declared like the job queue and bound with routing key = its name. */
int mqproc__amqp_declare_bound_queue(amqp_broker_t *b, const char *queue, char *err);

/* Publishing (broker/amqp_publish.c): the class's publish slot, and the confirms and
 * returns that arrive as frames (dispatched by broker/amqp.c). */
int mqproc__amqp_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                         char *err);
void mqproc__amqp_settle_confirms(amqp_broker_t *b, uint64_t tag, int multiple, int status);
void mqproc__amqp_fail_all_confirms(amqp_broker_t *b);
void mqproc__amqp_on_return(amqp_broker_t *b, amqp_channel_t ch);

/* A delivery's headers table as a JSON object text (broker/amqp_headers.c); NULL when it
 * has none. The caller frees it. */
char *mqproc__amqp_headers_json(const amqp_table_t *t);

#endif
