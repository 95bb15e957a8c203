/* The dir:// backend's internals, shared by broker/dir.c (waiting, claiming, settling, the
 * class) and broker/dir_publish.c (publishing and its confirms). */
#ifndef MQPROC_BROKER_DIR_INT_H
#define MQPROC_BROKER_DIR_INT_H

#include <limits.h>
#include <stdint.h>

#include "broker.h"
#include "broker/dir_flush.h"
#include "broker/dirq.h"

typedef struct held {
  uint64_t tag;
  uint64_t consumer; /* the consume() it came through: prefetch counts per consumer */
  int fd;            /* holds the flock */
  char name[NAME_MAX + 1];
  struct held *next;
} held_t;

typedef struct confirm {
  uint64_t seq;
  int status;
} confirm_t;

typedef struct dirb {
  mqproc__broker_t base;
  char spool[MQPROC__DIRQ_SPOOL_MAX], qdir[MQPROC__DIRQ_QDIR_MAX];
  const mqproc__topology_t *topo;
  mqproc__broker_events_t ev;
  int ino;     /* inotify fd; -1: not connected */
  int epfd;    /* what the loop watches: ino and the flusher's eventfd */
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
  int64_t looked_ms; /* the last look at cur/ (dead holders) and new/ */
  int64_t purged_ms; /* the last look at tmp/ (abandoned files) */
} dirb_t;

/* NAME.reason in qdir's failed/ (whole: written in tmp/, renamed in). */
void mqproc__dir_write_reason(const char *qdir, const char *name, const char *why);
/* The class's publish (broker.h). */
int mqproc__dir_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                        char *err);
/* Reports the confirms that are due: the flusher's finished files (a file not flushed or
 * not in place: NACKED), then the rest. closing: every pending one, as CLOSED, after the
 * flusher has finished (on disconnect). */
void mqproc__dir_confirms(dirb_t *b, int closing);

#endif
