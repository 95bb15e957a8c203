/* The directory queue's on-disk format (docs/dir-queue.md), shared by the dir:// broker
 * backend (broker/dir.c) and the operators' client (ops/amqp.c: submit, retry, depths).
 *
 * A spool directory (dir:///spool) holds one directory per queue, as a vhost holds queues:
 *   QUEUE/tmp/     files being written: a producer writes here, then renames into new/
 *   QUEUE/new/     ready jobs, one file each, claimed in the byte order of their names
 *   QUEUE/cur/     claimed jobs, each held by its server with flock(); a file nobody holds
 *                  (its server died) goes back to new/
 *   QUEUE/failed/  jobs given up on: the message, and NAME.reason beside it
 * A name mqproc makes: PP-TTTTTTTTTTTTTTTT-HOST-PID-N, PP = 99 - priority (higher
 * priorities sort first), T = microseconds since the epoch in 16 hex digits (FIFO within
 * a priority), the host, pid and a counter (unique across hosts sharing the spool);
 * ".r" at the end marks a job that was delivered before. Any other name not starting with
 * "." is a job of priority 0. A file is the message body, or an envelope line
 * "MQPROC-ENVELOPE 1 {JSON}\n" (content_type, message_id, headers) and then the body.
 */
#ifndef MQPROC_BROKER_DIRQ_H
#define MQPROC_BROKER_DIRQ_H

#include <jansson.h>
#include <stddef.h>

#define MQPROC__DIRQ_SCHEME "dir://"
#define MQPROC__DIRQ_NAME_MAX 200
#define MQPROC__DIRQ_MAX_PRIORITY 99
#define MQPROC__DIRQ_ENVELOPE "MQPROC-ENVELOPE 1 "
#define MQPROC__DIRQ_SPOOL_MAX 2048 /* spool/queue/sub/name fits in PATH_MAX */
#define MQPROC__DIRQ_QDIR_MAX (MQPROC__DIRQ_SPOOL_MAX + MQPROC__DIRQ_NAME_MAX + 56)

typedef struct mqproc__dirq_msg {
  const void *body;
  size_t len;
  const char *content_type; /* NULL: none */
  const char *message_id;   /* NULL: none */
  const char *headers_json; /* a JSON object text; NULL: none */
  int priority;             /* 0..99, larger first (beyond 99: 99; < 0: 0) */
} mqproc__dirq_msg_t;

/* Whether url is a dir:// URL. */
int mqproc__dirq_is_url(const char *url);
/* The spool directory of dir:///PATH[?synchronous=normal|full] (absolute; out:
 * MQPROC__DIRQ_SPOOL_MAX); *durable (when not NULL): 0 for synchronous=normal (publishes
 * are not flushed), else 1. MQPROC_ECONFIG with err. */
int mqproc__dirq_spool(const char *url, char *out, int *durable, char *err);
/* Creates spool/queue with its four directories when missing (each new one fsynced into
 * its parent); qdir (MQPROC__DIRQ_QDIR_MAX) gets spool/queue. MQPROC_ESYS with err. */
int mqproc__dirq_make(const char *spool, const char *queue, char *qdir, char *err);
/* A fresh name for a job of this priority (again: marked as delivered before). */
void mqproc__dirq_name(int priority, int again, char *out, size_t n);
/* The priority a name says (0 for names not made by mqproc). */
int mqproc__dirq_name_priority(const char *name);

/* The first half of a put: m written into qdir/tmp/ under a fresh name (name_out,
 * MQPROC__DIRQ_NAME_MAX), not flushed; tmp and dst (PATH_MAX each) get its path there and
 * in qdir/sub/, *fd the open file (the caller's, for mqproc__dirq_place). Errors as for
 * mqproc__dirq_put. */
int mqproc__dirq_write(const char *qdir, const char *sub, const mqproc__dirq_msg_t *m,
                       char *name_out, char *tmp, char *dst, int *fd, char *err);
/* A settled job's file: unlink(path) (NULL: kept), then close(fd) and close(wfd) (-1:
 * none); a file already gone is no error, another failure a warning. */
void mqproc__dirq_remove(const char *path, int fd, int wfd);
/* The second half: fdatasync(fd) when flush, close(fd), rename tmp to dst (tmp removed on
 * failure); the directory's fsync is the caller's. MQPROC_ESYS with err. */
int mqproc__dirq_place(int fd, int flush, const char *tmp, const char *dst, char *err);
/* Both halves: writes m into qdir/sub/ (sub "new" or "failed") under a fresh name (out: name_out,
 * MQPROC__DIRQ_NAME_MAX): into tmp/ first, fdatasync'ed, then renamed. The directory
 * entry is durable once sub/ is fsynced: now when sync_dir, else by the caller
 * (mqproc__dirq_sync, one fsync for many). A queue that does not exist:
 * MQPROC_EBROKER_UNROUTABLE; else MQPROC_ESYS with err. */
int mqproc__dirq_put(const char *qdir, const char *sub, const mqproc__dirq_msg_t *m, int sync_dir,
                     char *name_out, char *err);
/* fsync() of a directory; MQPROC_ESYS with err. */
int mqproc__dirq_sync(const char *dir, char *err);

/* Reads a job file's content: m's body and fields point into data, and into *meta (the
 * envelope's JSON; NULL when there is none), which the caller decrefs. -1: an envelope
 * line that is not JSON (the whole file is then the body). */
int mqproc__dirq_parse(const char *data, size_t len, mqproc__dirq_msg_t *m, json_t **meta);

/* Jobs ready in qdir/new (a directory read); -1 when it cannot be read. */
long mqproc__dirq_count(const char *qdir);

#endif
