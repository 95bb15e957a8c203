/* The table queues: a broker backend (broker.h) whose queues are rows of the database's
 * mqproc_messages table (sql/010_table_queues.sql), on the store's asynchronous operations
 * q_take, q_ack, q_nack, q_publish, q_extend and q_reset (store.h), so PostgreSQL and
 * SQLite share its code. It lives in the store layer because it needs a store; the
 * server makes it (server/setup.c) with its own store when --queue is --database's URL
 * (the queue's statements then ride the same rounds, the same transactions, as the job's
 * writes), or with a store of its own for another database. docs/table-queue.md. */
#ifndef MQPROC_STORE_QUEUE_H
#define MQPROC_STORE_QUEUE_H

#include "broker/broker.h"
#include "broker/client.h"
#include "loop/loop.h"
#include "store/store.h"

/* Whether url names a table queue: postgresql://, postgres:// or sqlite://. */
int mqproc__queue_is_table_url(const char *url);

/* A table queue backend on url's database. shared: the store to use (the server's, whose
 * --database is url), or NULL: one of its own is made on loop, migrated first when migrate
 * and checked (its schema) before this returns. The consumer's name in the table is
 * topo->client_id (the server's worker id); topo->visibility_s its hold. topo and ev as
 * for mqproc__broker_new(); shared must outlive the broker. */
int mqproc__broker_table_new(mqproc__broker_t **out, const char *url, mqproc__store_t *shared,
                             mqproc__loop_t *loop, int migrate, const mqproc__topology_t *topo,
                             const mqproc__broker_events_t *ev, char *err);

/* The table queues for the operators' blocking queue client (store/queue_client.c): callers
 * of mqproc__qclient_open() that may be given a database as --queue pass it. */
extern const mqproc__qclient_kind_t mqproc__table_qclient;

#endif
