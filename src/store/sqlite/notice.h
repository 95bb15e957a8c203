/* Operators' notices for servers on an SQLite store, which has no LISTEN/NOTIFY: a file
 * beside the database (PATH-control) that `mqproc pause|resume|drain` and `jobs cancel`
 * append the processor's name to, one line each, and that every server on the host
 * watches with inotify (IN_MODIFY). A notice makes a server refresh its workers row at
 * once, which reads its wishes and the cancels of its jobs; without the file (no right to
 * make it), the refresh of every interval does the same, later. Table queues on the
 * database announce new messages there too (MQPROC__SQ_NOTICE_QUEUE). */
#ifndef MQPROC_STORE_SQLITE_NOTICE_H
#define MQPROC_STORE_SQLITE_NOTICE_H

#include "loop/loop.h"

typedef struct mqproc__sq_notice mqproc__sq_notice_t;

/* A line that starts so is a table queue's (store/sqlite/queue.c): new messages in the
 * queue named after it; any other line is an operator's, a processor's name. */
#define MQPROC__SQ_NOTICE_QUEUE "queue "

/* Watches db_path's notice file (made when missing) from loop: cb(ud, line) for every line
 * appended from now on. NULL (logged) when it cannot. */
mqproc__sq_notice_t *mqproc__sq_notice_watch(const char *db_path, mqproc__loop_t *loop,
                                             void (*cb)(void *ud, const char *payload), void *ud);
void mqproc__sq_notice_free(mqproc__sq_notice_t *n);
/* Appends payload to db_path's notice file (the operators' side); 0, or -1 with errno. */
int mqproc__sq_notice_send(const char *db_path, const char *payload);

#endif
