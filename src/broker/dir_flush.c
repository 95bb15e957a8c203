/* The dir:// backend's flusher: see dir_flush.h. */
#include "broker/dir_flush.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "broker/dirq.h"
#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

#define SYNCFS_FROM 2      /* files in a batch from which one syncfs() flushes them all */
#define GROUP_FILES 16     /* a batch smaller than this waits GROUP_WAIT_US for more files: */
#define GROUP_WAIT_US 1000 /* every flush is a journal commit, shared by the whole batch */

typedef struct item {
  uint64_t seq;
  int fd, rc, placed;
  int tmp_dir, dst_dir; /* the queue's (the broker keeps them open until drained) */
  struct item *next;
  char name[]; /* flexible */
} item_t;

/* A settled job's file: removed, then its descriptors closed (the lock last but one, the
 * writer's close last: the event the other servers watch). */
typedef struct removal {
  int dir, fd, wfd;
  struct removal *next;
  char name[]; /* flexible */
} removal_t;

struct mqproc__dirq_flusher {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond, idle;
  removal_t *removals;       /* handed over by the loop, newest first */
  item_t *todo, **todo_tail; /* handed over by the loop */
  item_t *done, **done_tail; /* finished, for the loop */
  int signalled;             /* the eventfd was written and not read yet */
  size_t n_todo;             /* in todo */
  int busy;                  /* the thread works on a batch now */
  int efd, flush, stop;
};

static void free_item(item_t *it) {
  free(it);
}

/* One batch, off the lock: the files' data made durable (a few: fdatasync each; more: one
 * syncfs of their filesystem, one journal commit for all of them), then each renamed into
 * place in order, then each distinct directory fsynced once (a failed flush fails its
 * files: they are not confirmed). */
static void flush_batch(mqproc__dirq_flusher_t *f, item_t *batch) {
  char err[MQPROC_ERR_LEN];
  item_t *it;
  size_t n = 0;
  int each = f->flush;
  for (it = batch; it != NULL; it = it->next)
    n++;
  if (f->flush && n >= SYNCFS_FROM) { /* all files of a queue share its filesystem */
    if (syncfs(batch->fd) == 0)
      each = 0; /* else each one fails or succeeds on its own fdatasync */
  }
  for (it = batch; it != NULL; it = it->next)
    if (!(it->placed = (it->rc = mqproc__dirq_place(it->fd, each, it->tmp_dir, it->dst_dir,
                                                    it->name, err)) == MQPROC_OK))
      MQPROC__WARN("dir queue: %s", err);
  for (it = batch; f->flush && it != NULL; it = it->next) {
    item_t *e = batch;
    if (!it->placed)
      continue;
    while (e != it && !(e->placed && e->dst_dir == it->dst_dir))
      e = e->next;
    if (e != it) { /* its directory was synced with an earlier file: the same outcome */
      it->rc = e->rc;
      continue;
    }
    if ((it->rc = mqproc__dirq_sync(it->dst_dir, it->name, err)) !=
        MQPROC_OK)                        /* in place, but its entry may */
      MQPROC__WARN("dir queue: %s", err); /* not survive a crash: not confirmed */
  }
}

static void remove_all(removal_t *r) {
  while (r != NULL) {
    removal_t *next = r->next;
    mqproc__dirq_remove(r->dir, r->name, r->fd, r->wfd);
    free(r);
    r = next;
  }
}

static void *flusher_main(void *arg) {
  mqproc__dirq_flusher_t *f = arg;
  uint64_t one = 1;
  pthread_mutex_lock(&f->lock);
  for (;;) {
    item_t *batch = NULL;
    removal_t *removals;
    while (f->todo == NULL && f->removals == NULL && !f->stop)
      pthread_cond_wait(&f->cond, &f->lock);
    if (f->todo == NULL && f->removals == NULL)
      break;
    if (f->todo != NULL && f->n_todo < GROUP_FILES &&
        !f->stop) { /* group commit: a moment for more files */
      struct timespec until;
      clock_gettime(CLOCK_MONOTONIC, &until);
      until.tv_nsec += GROUP_WAIT_US * 1000L;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      while (f->n_todo < GROUP_FILES && !f->stop &&
             pthread_cond_timedwait(&f->cond, &f->lock, &until) == 0)
        ;
    }
    batch = f->todo;
    f->todo = NULL;
    f->todo_tail = &f->todo;
    f->n_todo = 0;
    removals = f->removals;
    f->removals = NULL;
    f->busy = 1;
    pthread_mutex_unlock(&f->lock);
    remove_all(removals);
    if (batch != NULL)
      flush_batch(f, batch);
    pthread_mutex_lock(&f->lock);
    if (batch == NULL) {
      f->busy = 0;
      pthread_cond_broadcast(&f->idle);
      continue;
    }
    *f->done_tail = batch;
    while (*f->done_tail != NULL)
      f->done_tail = &(*f->done_tail)->next;
    f->busy = 0;
    pthread_cond_broadcast(&f->idle);
    if (!f->signalled) { /* under the lock: the eventfd is readable exactly while signalled */
      f->signalled = 1;
      if (write(f->efd, &one, sizeof(one)) < 0)
        MQPROC__WARN("dir queue: the flusher cannot signal: %s", strerror(errno));
    }
  }
  pthread_mutex_unlock(&f->lock);
  return NULL;
}

int mqproc__dirq_flusher_new(mqproc__dirq_flusher_t **out, int flush, char *err) {
  mqproc__dirq_flusher_t *f = calloc(1, sizeof(*f));
  *out = NULL;
  if (f == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  f->todo_tail = &f->todo;
  f->done_tail = &f->done;
  f->flush = flush;
  pthread_mutex_init(&f->lock, NULL);
  {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&f->cond, &ca);
    pthread_condattr_destroy(&ca);
  }
  pthread_cond_init(&f->idle, NULL);
  if ((f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
      pthread_create(&f->thread, NULL, flusher_main, f) != 0) {
    int e = errno;
    if (f->efd >= 0)
      close(f->efd);
    pthread_mutex_destroy(&f->lock);
    pthread_cond_destroy(&f->cond);
    pthread_cond_destroy(&f->idle);
    free(f);
    return mqproc__err(err, MQPROC_ESYS, "cannot start the dir queue's flusher: %s", strerror(e));
  }
  *out = f;
  return MQPROC_OK;
}

int mqproc__dirq_flusher_fd(const mqproc__dirq_flusher_t *f) {
  return f->efd;
}

int mqproc__dirq_flusher_add(mqproc__dirq_flusher_t *f, uint64_t seq, int fd, int tmp_dir,
                             int dst_dir, const char *name, char *err) {
  size_t n = strlen(name) + 1;
  item_t *it = calloc(1, sizeof(*it) + n);
  int wake;
  if (it == NULL) {
    close(fd);
    unlinkat(tmp_dir, name, 0);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  memcpy(it->name, name, n);
  it->seq = seq;
  it->fd = fd;
  it->tmp_dir = tmp_dir;
  it->dst_dir = dst_dir;
  pthread_mutex_lock(&f->lock);
  *f->todo_tail = it;
  f->todo_tail = &it->next;
  wake = ++f->n_todo == 1 || f->n_todo == GROUP_FILES;
  pthread_mutex_unlock(&f->lock);
  if (wake) /* after the unlock: the thread does not wake into it */
    pthread_cond_signal(&f->cond);
  return MQPROC_OK;
}

void mqproc__dirq_flusher_remove(mqproc__dirq_flusher_t *f, int dir, const char *name, int fd,
                                 int wfd) {
  size_t n = strlen(name) + 1;
  removal_t *r = malloc(sizeof(*r) + n);
  int wake;
  if (r == NULL) { /* no room to hand it over: here and now */
    mqproc__dirq_remove(dir, name, fd, wfd);
    return;
  }
  r->dir = dir;
  r->fd = fd;
  r->wfd = wfd;
  memcpy(r->name, name, n);
  pthread_mutex_lock(&f->lock);
  wake = f->removals == NULL && f->todo == NULL;
  r->next = f->removals;
  f->removals = r;
  pthread_mutex_unlock(&f->lock);
  if (wake)
    pthread_cond_signal(&f->cond);
}

size_t mqproc__dirq_flusher_take(mqproc__dirq_flusher_t *f,
                                 void (*done)(void *ud, uint64_t seq, int rc), void *ud) {
  uint64_t v;
  item_t *list;
  size_t n = 0;
  pthread_mutex_lock(&f->lock);
  if (!f->signalled) { /* nothing finished: no system call on the loop's way */
    pthread_mutex_unlock(&f->lock);
    return 0;
  }
  f->signalled = 0;
  if (read(f->efd, &v, sizeof(v)) < 0)
    MQPROC__WARN("dir queue: the flusher's eventfd: %s", strerror(errno));
  list = f->done;
  f->done = NULL;
  f->done_tail = &f->done;
  pthread_mutex_unlock(&f->lock);
  while (list != NULL) { /* off the lock: a callback may hand over more */
    item_t *it = list;
    list = it->next;
    done(ud, it->seq, it->rc);
    free_item(it);
    n++;
  }
  return n;
}

void mqproc__dirq_flusher_drain(mqproc__dirq_flusher_t *f) {
  pthread_mutex_lock(&f->lock);
  while (f->todo != NULL || f->removals != NULL || f->busy)
    pthread_cond_wait(&f->idle, &f->lock);
  pthread_mutex_unlock(&f->lock);
}

void mqproc__dirq_flusher_free(mqproc__dirq_flusher_t *f) {
  if (f == NULL)
    return;
  pthread_mutex_lock(&f->lock);
  f->stop = 1;
  pthread_cond_signal(&f->cond);
  pthread_mutex_unlock(&f->lock);
  pthread_join(f->thread, NULL); /* it finishes what was handed over first */
  while (f->done != NULL) {
    item_t *it = f->done;
    f->done = it->next;
    free_item(it);
  }
  close(f->efd);
  pthread_mutex_destroy(&f->lock);
  pthread_cond_destroy(&f->cond);
  pthread_cond_destroy(&f->idle);
  free(f);
}
