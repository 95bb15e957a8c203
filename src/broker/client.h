/* The operators' blocking queue client: what `mqproc submit`, `jobs retry`, `stats`,
 * `results` and the status page's reader use to publish, to read a queue's depth and its
 * messages. AMQP (a URL, a broker list; amqps:// with tls) with publisher confirms, a
 * dir:// spool, or a kind of queue a later layer adds (the table queues: their database).
 * It blocks: a server calls it only from a reader thread, never on its loop. It prints
 * nothing; every failure is said in err (MQPROC_ERR_LEN). */
#ifndef MQPROC_BROKER_CLIENT_H
#define MQPROC_BROKER_CLIENT_H

#include <stddef.h>

#include "broker/broker.h"

typedef struct mqproc__qclient mqproc__qclient_t;

/* One message read off a queue (mqproc__qclient_get): malloc'd copies, freed by
 * mqproc__qmsg_clear(). */
typedef struct mqproc__qmsg {
  char *body; /* NUL-terminated */
  size_t len;
  char *message_id;   /* "" when none */
  char *content_type; /* "" when none */
  int priority;       /* -1 when none */
} mqproc__qmsg_t;
void mqproc__qmsg_clear(mqproc__qmsg_t *m);

/* A kind of queue this layer cannot reach itself, a later layer's: the table queues
 * (store/queue.h: mqproc__table_qclient), a database's. Callers that may meet one hand it
 * to mqproc__qclient_open(), which uses it for the URLs it claims; each call below then
 * goes to it. */
typedef struct mqproc__qclient_kind {
  int (*is_url)(const char *url);
  void *(*open)(const char *url, char *err); /* NULL with err */
  int (*send)(void *c, const char *rk, const void *body, size_t len, const char *content_type,
              const char *message_id, int priority, const char *const *headers, size_t n_headers,
              char *err); /* 0, or -1 with err */
  /* ready and held messages of queue; 0, -2 when the connection is gone */
  int (*depth)(void *c, const char *queue, long *ready, long *held);
  /* as mqproc__qclient_get() */
  int (*get)(void *c, const char *queue, int peek, long skip, mqproc__qmsg_t *out, char *err);
  void (*close)(void *c);
} mqproc__qclient_kind_t;

/* Connects (--queue / MQPROC_QUEUE: a URL, a broker list, dir://, or a URL kind claims) with
 * confirms on, over TLS with tls for amqps:// (NULL: the defaults); NULL with err. kind: a
 * kind of queue a later layer adds (NULL: none). */
mqproc__qclient_t *mqproc__qclient_open(const char *url, const mqproc__tls_t *tls,
                                        const mqproc__qclient_kind_t *kind, char *err);
/* Publishes with mandatory and waits for the confirm: 0, or -1 with err (unroutable,
 * nacked, connection lost). priority < 0: none. headers: "k=v" or NULL. */
int mqproc__qclient_send(mqproc__qclient_t *a, const char *exchange, const char *rk,
                         const void *body, size_t len, const char *content_type,
                         const char *message_id, int priority, const char *const *headers,
                         size_t n_headers, char *err);
/* Passive declare: ready messages and consumers; -1 when the queue does not exist (the
 * channel is opened again), -2 when the connection is gone. held: the messages consumers
 * hold (a table queue's; -1 where the queue does not say). */
int mqproc__qclient_depth(mqproc__qclient_t *a, const char *queue, long *messages, long *consumers,
                          long *held);
/* The next message of queue, removed (acked), or with peek left there (skip: how many
 * peeked at already; AMQP: all peeked are given back by close()); 1 one came (*out filled),
 * 0 the queue has none now, -1 error (err). A dir:// spool is read as files. */
int mqproc__qclient_get(mqproc__qclient_t *a, const char *queue, int peek, long skip,
                        mqproc__qmsg_t *out, char *err);
/* dir://: makes the queue's directory (a result queue a job names: servers make one only
 * where --result-queue-pattern allows); AMQP: nothing (servers declare result queues).
 * 0, or -1 with err. */
int mqproc__qclient_make_queue(mqproc__qclient_t *a, const char *queue, char *err);
/* dir://: whether a server ever served queue (broker/dirq.h's mark): 1 or 0; -1 when it
 * cannot be told, and on AMQP, where a publish for a queue nobody declared is returned
 * (unroutable) instead. */
int mqproc__qclient_served(mqproc__qclient_t *a, const char *queue);
void mqproc__qclient_close(mqproc__qclient_t *a);

#endif
