/* AMQP backend internals shared by broker_amqp.c (connection, consuming, publishing)
 * and broker_amqp_declare.c (declarations, RPC replies). */
#ifndef MQPROC_BROKER_AMQP_INT_H
#define MQPROC_BROKER_AMQP_INT_H

#include <amqp.h>

#include "broker.h"
#include "mqproc/mqproc.h"

#define CH_CONSUME 1
#define CH_PUBLISH 2
#define CH_DECLARE 3
#define SEQ_HEADER "x-mqproc-seq"

typedef struct pending_pub {
  uint64_t seq;
  int returned;
  struct pending_pub *next;
} pending_pub_t;

typedef struct amqp_broker {
  struct mqproc__broker base; /* first: klass */
  char *url;
  mqproc__topology_t topo;
  mqproc__broker_events_t ev;
  amqp_connection_state_t conn;
  int connected;
  int broken; /* an operation failed: pump() reports down */
  char broken_reason[MQPROC_ERR_LEN];
  uint64_t epoch;
  uint64_t next_seq;      /* last publish sequence number on channel 2 */
  pending_pub_t *pending; /* oldest first */
  int consuming;
  amqp_bytes_t consumer_tag;
} amqp_broker_t;

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

#endif
