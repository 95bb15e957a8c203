/* A deadline for blocking socket calls made by a library that cannot take one.
 *
 * rabbitmq-c 0.11 writes with no deadline: when RabbitMQ stops reading a connection (a
 * memory or disk alarm, a stalled network), basic.publish, an ack or a heartbeat blocks
 * in poll() until the socket drains, and the whole event loop with it: no signals, no
 * lease renewals, no reaping. A guard bounds such a call: the caller arms it with the
 * socket before the call and disarms it after; if the call is still running when the
 * deadline passes, a watchdog thread shuts the socket down, which wakes the blocked call
 * with an error. The connection is then lost (the library's frame state cannot be
 * trusted) and the server reconnects, as after any broker failure.
 *
 * API:
 *   mqproc__guard_new() / _free()   start / stop the watchdog thread
 *   mqproc__guard_arm()             before a call that may block on fd
 *   mqproc__guard_disarm()          after it; 1 when the deadline fired meanwhile
 *
 * Cost per call: an uncontended mutex and a clock read, no system call. The watchdog
 * wakes once a second (more often only while armed near a deadline), so a deadline
 * fires up to a second late. Arm only around the library call itself, never around
 * callbacks the call makes into the server (those may legitimately take long).
 */
#ifndef MQPROC_WRITE_GUARD_H
#define MQPROC_WRITE_GUARD_H

#include <stdint.h>

typedef struct mqproc__guard mqproc__guard_t;

int mqproc__guard_new(mqproc__guard_t **out, char *err);
void mqproc__guard_free(mqproc__guard_t *g);
/* Arms the guard for fd with timeout_ms. Nested arms are counted; the outermost arm's
 * deadline holds. */
void mqproc__guard_arm(mqproc__guard_t *g, int fd, int64_t timeout_ms);
/* Disarms (the outermost disarm ends the deadline); returns 1 when the guard fired since
 * the outermost arm (the socket was shut down). */
int mqproc__guard_disarm(mqproc__guard_t *g);

#endif
