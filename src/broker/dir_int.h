/* The dir:// backend's internals, shared by broker/dir.c (waiting, claiming, settling, the
 * class) and broker/dir_publish.c (publishing and its confirms). */
#ifndef MQPROC_BROKER_DIR_INT_H
#define MQPROC_BROKER_DIR_INT_H

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>

#include "broker.h"
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

typedef struct dirb {
  mqproc__broker_t base;
  char spool[MQPROC__DIRQ_SPOOL_MAX], qdir[MQPROC__DIRQ_QDIR_MAX];
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
  confirm_t *confirms; /* to report at the next pump: unroutable, or relaxed publishes */
  size_t n_confirms, cap_confirms;
  int64_t looked_ms; /* the last full look at cur/ (dead holders) and new/ */
  int64_t purged_ms; /* the last look at tmp/ (abandoned files) */
} dirb_t;

/* NAME.reason in qdir's failed/ (whole: written in tmp/, renamed in). */
#define LOOK_NET_MS 900      /* dead holders, and new/ when the heap is empty: network fs */
#define LOOK_LOCAL_MS 30000  /* the same where inotify sees every host's (one host's) files */
#define LOOK_REREAD_MS 900   /* a name passed over while locked is looked for again */
#define PURGE_EVERY_MS 60000 /* tmp/ is looked at for abandoned files */
#define TMP_ABANDONED_S 3600 /* a file in tmp/ untouched this long was abandoned */

/* dir_look.c: dead holders, abandoned files, the timerfd */
void mqproc__dir_take_back(dirb_t *b);
void mqproc__dir_closed_in_cur(dirb_t *b, const char *name, int tries, int64_t now);
void mqproc__dir_run_rechecks(dirb_t *b, int64_t now);
int64_t mqproc__dir_look_due(const dirb_t *b);
void mqproc__dir_arm(dirb_t *b, int64_t now);
void mqproc__dir_purge_tmp(dirb_t *b);

void mqproc__dir_write_reason(const char *qdir, const char *name, const char *why);
/* The class's publish (broker.h). */
int mqproc__dir_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                        char *err);
/* Reports the confirms that are due: the flusher's finished files (a file not flushed or
 * not in place: NACKED), then the rest. closing: every pending one, as CLOSED, after the
 * flusher has finished (on disconnect). */
void mqproc__dir_confirms(dirb_t *b, int closing);

#endif
