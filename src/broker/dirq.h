/* The directory queue's on-disk format (docs/dir-queue.md), shared by the dir:// broker
 * backend (broker/dir.c) and the operators' client (broker/client.c: submit, retry, depths).
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
#include <sys/stat.h>

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
/* The sub-directories of a queue directory. */
enum {
  MQPROC__DIRQ_TMP,
  MQPROC__DIRQ_NEW,
  MQPROC__DIRQ_CUR,
  MQPROC__DIRQ_FAILED,
  MQPROC__DIRQ_NSUB
};

/* A queue directory, opened once: SPOOL/QUEUE and its four sub-directories, each opened
 * O_DIRECTORY|O_NOFOLLOW (a symbolic link in their place is refused), and every later
 * call works relative to these descriptors (the *at() calls), so a directory swapped for a
 * link afterwards is never followed: whoever may write the queue cannot make a server move,
 * read or delete files elsewhere. The spool itself is the operator's path (links allowed). */
typedef struct mqproc__dirq_q {
  int fd;                           /* SPOOL/QUEUE; -1: not open */
  int sub[MQPROC__DIRQ_NSUB];       /* its tmp/ new/ cur/ failed/ */
  char path[MQPROC__DIRQ_QDIR_MAX]; /* SPOOL/QUEUE, for messages */
} mqproc__dirq_q_t;

/* A handle that holds nothing (mqproc__dirq_close of it does nothing). */
void mqproc__dirq_init(mqproc__dirq_q_t *q);
/* Opens SPOOL/QUEUE. create: the spool (mkdir -p), the queue and its sub-directories are
 * made when missing (each new one fsynced into its parent; private unless group access
 * was asked for, util.h); else a queue that does not exist is MQPROC_EBROKER_UNROUTABLE.
 * A name that cannot be a queue's: MQPROC_EINVAL; a link or something else that is no
 * directory in the place of the queue or a sub-directory: MQPROC_ECONFIG; else
 * MQPROC_ESYS; err says which. q is left closed on failure. */
int mqproc__dirq_open(const char *spool, const char *queue, int create, mqproc__dirq_q_t *q,
                      char *err);
void mqproc__dirq_close(mqproc__dirq_q_t *q);
/* mqproc__dirq_open(create) and close: the queue exists; qdir (MQPROC__DIRQ_QDIR_MAX) gets
 * its path. */
int mqproc__dirq_make(const char *spool, const char *queue, char *qdir, char *err);
/* A fresh name for a job of this priority (again: marked as delivered before). */
void mqproc__dirq_name(int priority, int again, char *out, size_t n);
/* The priority a name says (0 for names not made by mqproc). */
int mqproc__dirq_name_priority(const char *name);

/* The first half of a put: m written into q's tmp/ under a fresh name (name_out,
 * MQPROC__DIRQ_NAME_MAX), not flushed; *fd the open file (the caller's, for
 * mqproc__dirq_place). The tmp/ directory gone: MQPROC_EBROKER_UNROUTABLE; else
 * MQPROC_ESYS with err. */
int mqproc__dirq_write(const mqproc__dirq_q_t *q, const mqproc__dirq_msg_t *m, char *name_out,
                       int *fd, char *err);
/* A settled job's file: unlinkat(dirfd, name) (name NULL: kept), then close(fd) and
 * close(wfd) (-1: none); a file already gone is no error, another failure a warning. */
void mqproc__dirq_remove(int dirfd, const char *name, int fd, int wfd);
/* The second half: fdatasync(fd) when flush, close(fd), renameat from tmp_dir/name to
 * dst_dir/name (the tmp file removed on failure); the directory's fsync is the caller's.
 * MQPROC_ESYS with err. */
int mqproc__dirq_place(int fd, int flush, int tmp_dir, int dst_dir, const char *name, char *err);
/* Both halves: writes m into q's sub-directory sub (MQPROC__DIRQ_NEW or _FAILED) under a
 * fresh name (out: name_out, MQPROC__DIRQ_NAME_MAX): into tmp/ first, fdatasync'ed, then
 * renamed. The directory entry is durable once sub/ is fsynced: now when sync_dir, else by
 * the caller (mqproc__dirq_sync, one fsync for many). Errors as for mqproc__dirq_write. */
int mqproc__dirq_put(const mqproc__dirq_q_t *q, int sub, const mqproc__dirq_msg_t *m, int sync_dir,
                     char *name_out, char *err);
/* fsync() of an open directory (what: its name for err); MQPROC_ESYS with err. */
int mqproc__dirq_sync(int dirfd, const char *what, char *err);

/* Opens dirfd/name, an entry anyone who may write the queue may have put there, as a job
 * file: flags (O_RDONLY or O_RDWR) with O_NONBLOCK|O_NOFOLLOW (a FIFO never blocks, a link
 * is never followed), then fstat into *st; O_NONBLOCK is cleared again. Returns the fd;
 * -1 with errno when it cannot be opened (ENOENT: gone); -2 when it is no regular file
 * (*why says what it is; nothing was read from it). */
int mqproc__dirq_open_entry(int dirfd, const char *name, int flags, struct stat *st,
                            const char **why);
/* Moves q's sub-directory from's entry name (a regular file or not) into failed/ with
 * NAME.reason beside it, never over another entry there (a fresh name then); 1 when it was
 * moved, 0 when it was gone (another server moved it), -1 on another error (logged). */
int mqproc__dirq_to_failed(const mqproc__dirq_q_t *q, int from, const char *name, const char *why);
/* Writes failed/NAME.reason (whole: written in tmp/, renamed in). */
void mqproc__dirq_write_reason(const mqproc__dirq_q_t *q, const char *name, const char *why);

/* Reads a job file's content: m's body and fields point into data, and into *meta (the
 * envelope's JSON; NULL when there is none), which the caller decrefs. -1: an envelope
 * line that is not JSON (the whole file is then the body). */
int mqproc__dirq_parse(const char *data, size_t len, mqproc__dirq_msg_t *m, json_t **meta);

/* Jobs ready in q's new/ (a directory read); -1 when it cannot be read. */
long mqproc__dirq_count(const mqproc__dirq_q_t *q);

/* The mark a server leaves in its job queue's directory, SPOOL/QUEUE/.served (a dot file:
 * no job): the queue has been served. `mqproc submit` warns of a queue without it, as
 * RabbitMQ returns a job for a queue no server declared: a typo's jobs would wait forever. */
#define MQPROC__DIRQ_SERVED ".served"
/* Leaves q's mark when it is missing (a hint: a failure is only logged). */
void mqproc__dirq_mark_served(const mqproc__dirq_q_t *q);
/* Whether SPOOL/QUEUE has a server's mark: 1, 0 (no mark, or no such queue), -1 when it
 * cannot be told. */
int mqproc__dirq_served(const char *spool, const char *queue);

#endif
