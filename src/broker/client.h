/* The operators' blocking queue client: what `mqproc submit`, `jobs retry`, `stats` and
 * the status page's reader use to publish and to read a queue's depth. AMQP (a URL, a
 * broker list; amqps:// with tls) with publisher confirms, or a dir:// spool. It blocks: a
 * server calls it only from a reader thread, never on its loop. It prints nothing; every
 * failure is said in err (MQPROC_ERR_LEN). */
#ifndef MQPROC_BROKER_CLIENT_H
#define MQPROC_BROKER_CLIENT_H

#include <stddef.h>

#include "broker/broker.h"

typedef struct mqproc__qclient mqproc__qclient_t;

/* Connects (--queue / MQPROC_QUEUE: a URL, a broker list, dir://) with confirms on, over
 * TLS with tls for amqps:// (NULL: the defaults); NULL with err. */
mqproc__qclient_t *mqproc__qclient_open(const char *url, const mqproc__tls_t *tls, char *err);
/* Publishes with mandatory and waits for the confirm: 0, or -1 with err (unroutable,
 * nacked, connection lost). priority < 0: none. headers: "k=v" or NULL. */
int mqproc__qclient_send(mqproc__qclient_t *a, const char *exchange, const char *rk,
                         const void *body, size_t len, const char *content_type,
                         const char *message_id, int priority, const char *const *headers,
                         size_t n_headers, char *err);
/* Passive declare: ready messages and consumers; -1 when the queue does not exist (the
 * channel is opened again), -2 when the connection is gone. */
int mqproc__qclient_depth(mqproc__qclient_t *a, const char *queue, long *messages, long *consumers);
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
