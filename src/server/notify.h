/* systemd's service notification protocol (sd_notify(3)) without libsystemd: a datagram
 * to the AF_UNIX socket named by $NOTIFY_SOCKET, and the server's use of it for
 * Type=notify units: READY=1 once broker, database and topology are up, STATUS= as the
 * server's state changes (idle / N jobs running / paused / draining / what is down),
 * STOPPING=1 when it begins to stop, WATCHDOG=1 from the loop every half WATCHDOG_USEC. */
#ifndef MQPROC_SDNOTIFY_H
#define MQPROC_SDNOTIFY_H

#include <stdint.h>

#include "server/server.h"

/* Sends text (e.g. "READY=1\nSTATUS=idle") to $NOTIFY_SOCKET: 1 sent, 0 no socket set,
 * -1 an error (errno). Never blocks. A path starting with '@' is an abstract socket. */
int mqproc__sd_notify(const char *text);
/* The watchdog interval systemd asks for, in ms (WATCHDOG_USEC, when WATCHDOG_PID is
 * unset or this process); 0 when none. */
int64_t mqproc__sd_watchdog_ms(void);

/* The server's side (no-ops when $NOTIFY_SOCKET is unset): start arms the watchdog timer;
 * update sends READY=1 the first time the server is ready and STATUS= whenever it changed
 * (called from the loop's tick and on state changes); stopping sends STOPPING=1 once. */
void mqproc__sd_start(mqproc__server_t *srv);
void mqproc__sd_update(mqproc__server_t *srv);
void mqproc__sd_stopping(mqproc__server_t *srv);
void mqproc__sd_free(mqproc__server_t *srv);

#endif
