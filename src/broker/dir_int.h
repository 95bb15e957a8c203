/* The dir:// backend's internals, shared by broker/dir.c (waiting, claiming, settling, the
 * class) and broker/dir_publish.c (publishing and its confirms). */
#ifndef MQPROC_BROKER_DIR_INT_H
#define MQPROC_BROKER_DIR_INT_H

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>

#include "broker/broker.h"
#include "broker/dir_flush.h"
#include "broker/dirq.h"

typedef struct held {
  uint64_t tag;
  uint64_t consumer; /* the consume() it came through: prefetch counts per consumer */
  int fd;            /* holds the flock */
  int wfd;           /* open for writing (local filesystem): its last close, at the server's
                        death, is the IN_CLOSE_WRITE the other servers watch; -1: none */
  char name[NAME_MAX + 1];
  struct held *next;
} held_t;

/* A holder's file in cur/ that was closed while its lock still showed (the kernel reports
 * the close a moment before it drops the lock): looked at again when due. */
typedef struct recheck {
  char name[NAME_MAX + 1];
  int64_t due_ms;
  int tries;
} recheck_t;

#define DIRB_RECHECKS 32

/* How a claim or a look opens a job file to lock it: for reading where cur/ is watched
 * (a local filesystem: a reader's close wakes nobody), for writing on a network one, where
 * an exclusive flock needs it (NFS emulates it with a byte-range lock) and cur/ is not
 * watched. */
#define DIRB_LOCK_OPEN(b) ((b)->wcur >= 0 ? O_RDONLY : O_RDWR)

typedef struct confirm {
  uint64_t seq;
  int status;
} confirm_t;

/* A result queue's directories, kept open: publishes go through the descriptors (never a
 * path a sender's queue name could turn into a link elsewhere). */
typedef struct rqueue {
  char name[MQPROC__DIRQ_NAME_MAX + 1];
  mqproc__dirq_q_t q;
} rqueue_t;

#define DIRB_RQUEUES 64 /* result queues kept open; past this, all are closed and reopened */
#define DIRB_HEAP_MAX                                                                              \
  65536 /* ready names known at once; past this, new/ is read again                                \
           (MQPROC_DIR_HEAP_MAX sets it: tests, tuning) */

typedef struct dirb {
  mqproc__broker_t base;
  char spool[MQPROC__DIRQ_SPOOL_MAX];
  mqproc__dirq_q_t q; /* the job queue: its directories, open while connected */
  const char *qdir;   /* its path (q.path), for messages */
  rqueue_t *rqueues;  /* result queues open now (DIRB_RQUEUES) */
  int n_rqueues;
  const mqproc__topology_t *topo;
  mqproc__broker_events_t ev;
  int ino;           /* inotify fd; -1: not connected */
  int epfd;          /* what the loop watches: ino, tfd and the flusher's eventfd */
  int wcur;          /* ino's watch of cur/: a holder's last close (IN_CLOSE_WRITE); -1: none */
  int warned;        /* a lock that could not be tried was reported once */
  int tfd;           /* timerfd: the next look, purge or recheck */
  int64_t armed_ms;  /* when tfd fires; 0: not armed */
  int look_every_ms; /* the look at cur/ and new/: often on a network filesystem */
  recheck_t rechecks[DIRB_RECHECKS];
  int n_rechecks;
  int durable; /* synchronous=full (the default): a publish is confirmed once on disk */
  mqproc__dirq_flusher_t *flusher; /* durable: flushes published files off the loop */
  uint64_t epoch, next_tag, next_seq, consumer;
  int consuming, prefetch, n_held;
  int reread; /* a name was passed over (locked): read new/ again at the next look */
  held_t *held;
  char **heap; /* ready names, smallest first */
  size_t n, cap;
  size_t heap_max;     /* DIRB_HEAP_MAX */
  int truncated;       /* names were left out (heap_max): read new/ again once it runs dry */
  int replaced;        /* a directory of the queue was removed or replaced: said once */
  confirm_t *confirms; /* to report at the next pump: unroutable, or relaxed publishes */
  size_t n_confirms, cap_confirms;
  int64_t looked_ms;    /* the last full look at cur/ (dead holders) and new/ */
  int64_t purged_ms;    /* the last look at tmp/ (abandoned files) */
  int64_t abandoned_ms; /* a file in tmp/ untouched this long was abandoned */
} dirb_t;

#define LOOK_NET_MS 900      /* dead holders, and new/ when the heap is empty: network fs */
#define LOOK_LOCAL_MS 30000  /* the same where inotify sees every host's (one host's) files */
#define LOOK_REREAD_MS 900   /* a name passed over while locked is looked for again */
#define PURGE_EVERY_MS 60000 /* tmp/ is looked at for abandoned files */
#define TMP_ABANDONED_MS                                                                           \
  3600000 /* a file in tmp/ untouched this long was abandoned                                      \
              (MQPROC_DIR_TMP_ABANDONED_MS sets it: tests, tuning) */

/* dir_look.c: dead holders, abandoned files, the timerfd */
void mqproc__dir_take_back(dirb_t *b);
/* Whether the queue's directories are still the ones the server opened (said once when
 * one was removed, or replaced, by a link say: the server goes on with those it has). */
void mqproc__dir_check_tree(dirb_t *b);
void mqproc__dir_closed_in_cur(dirb_t *b, const char *name, int tries, int64_t now);
void mqproc__dir_run_rechecks(dirb_t *b, int64_t now);
int64_t mqproc__dir_look_due(const dirb_t *b);
void mqproc__dir_arm(dirb_t *b, int64_t now);
void mqproc__dir_purge_tmp(dirb_t *b);

/* The open directories of queue name (the job queue's own, or a result queue's, opened
 * when create or when it exists); NULL with err (MQPROC_EBROKER_UNROUTABLE: it does not
 * exist) in *rc. dir_publish.c. */
const mqproc__dirq_q_t *mqproc__dir_queue(dirb_t *b, const char *name, int create, int *rc,
                                          char *err);
/* Closes the result queues' directories (after the flusher was drained). */
void mqproc__dir_close_queues(dirb_t *b);
/* The class's publish (broker.h). */
int mqproc__dir_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                        char *err);
/* Reports the confirms that are due: the flusher's finished files (a file not flushed or
 * not in place: NACKED), then the rest. closing: every pending one, as CLOSED, after the
 * flusher has finished (on disconnect). */
void mqproc__dir_confirms(dirb_t *b, int closing);

#endif
