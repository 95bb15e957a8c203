/* AMQP backend: a write buffer under rabbitmq-c's TCP socket (broker/amqp_wbuf.c): a loop
 * turn's frames leave in one send(2), and pump() knows when a read emptied the socket.
 *
 * API:
 *   mqproc__amqp_wbuf_install()  wrap a connection's plain TCP socket (0: left as it was)
 *   mqproc__amqp_wbuf_flush()    write what waits (once per loop turn, under the deadline)
 *   mqproc__amqp_wbuf_pending()  bytes waiting
 *   mqproc__amqp_wbuf_drained()  whether the last read emptied the socket
 */
#ifndef MQPROC_BROKER_AMQP_WBUF_H
#define MQPROC_BROKER_AMQP_WBUF_H

#include <amqp.h>
#include <stddef.h>

/* Wraps sock (rabbitmq-c's TCP socket, from amqp_tcp_socket_new(), open or not): from now
 * on its sends wait in a buffer until a flush, a read, a close or a full buffer. Returns 1,
 * or 0 when it was left as it was (out of memory, a rabbitmq-c of unknown layout); the
 * state is freed with the socket (amqp_destroy_connection). Never for a TLS socket. */
int mqproc__amqp_wbuf_install(amqp_socket_t *sock);
/* Writes what waits on conn's socket, waiting for room (bound it with the write guard).
 * AMQP_STATUS_OK, or rabbitmq-c's error: the connection is lost (later sends fail too).
 * Nothing to do (AMQP_STATUS_OK) when the socket is not wrapped. */
int mqproc__amqp_wbuf_flush(amqp_connection_state_t conn);
/* Bytes waiting to be written on conn's socket (0 when not wrapped). */
size_t mqproc__amqp_wbuf_pending(amqp_connection_state_t conn);
/* 1 when the last read on conn's socket emptied it (a short read or EAGAIN), 0 when more
 * may be waiting, -1 when the socket is not wrapped (unknown). */
int mqproc__amqp_wbuf_drained(amqp_connection_state_t conn);

#endif
