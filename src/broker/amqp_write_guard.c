/* A deadline for blocking socket calls (see amqp_write_guard.h for why and how). */
#include "broker/amqp_write_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/util.h"

struct mqproc__guard {
  pthread_t thread;
  pthread_mutex_t lock; /* guards everything below */
  pthread_cond_t cond;  /* wakes the watchdog at stop */
  int stop;
  int depth; /* nested arms; 0 = disarmed */
  int fd;
  int64_t deadline_ms; /* monotonic */
  int fired;
};

/* The condition variable runs on CLOCK_MONOTONIC, like mqproc__now_ms(). */
static struct timespec at_ms(int64_t ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  return ts;
}

static void *watchdog(void *arg) {
  mqproc__guard_t *g = arg;
  pthread_mutex_lock(&g->lock);
  while (!g->stop) {
    int64_t now = mqproc__now_ms(), wake = now + 1000;
    if (g->depth > 0 && !g->fired) {
      if (now >= g->deadline_ms) {
        /* Under the lock: the owner cannot disarm and close fd (whose number could then
         * name another file) while we are at it. */
        shutdown(g->fd, SHUT_RDWR);
        g->fired = 1;
      } else if (g->deadline_ms < wake) {
        wake = g->deadline_ms;
      }
    }
    struct timespec ts = at_ms(wake);
    pthread_cond_timedwait(&g->cond, &g->lock, &ts);
  }
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

int mqproc__guard_new(mqproc__guard_t **out, char *err) {
  mqproc__guard_t *g = mqproc__calloc(1, sizeof(*g));
  pthread_condattr_t attr;
  int rc;
  if (g == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  pthread_mutex_init(&g->lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g->cond, &attr);
  pthread_condattr_destroy(&attr);
  g->fd = -1;
  if ((rc = pthread_create(&g->thread, NULL, watchdog, g)) != 0) {
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return mqproc__err(err, MQPROC_ESYS, "cannot start the broker watchdog: %s", strerror(rc));
  }
  *out = g;
  return MQPROC_OK;
}

void mqproc__guard_free(mqproc__guard_t *g) {
  if (g == NULL)
    return;
  pthread_mutex_lock(&g->lock);
  g->stop = 1;
  pthread_cond_signal(&g->cond);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->thread, NULL);
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

void mqproc__guard_arm(mqproc__guard_t *g, int fd, int64_t timeout_ms) {
  pthread_mutex_lock(&g->lock);
  if (g->depth++ == 0) {
    g->fd = fd;
    g->deadline_ms = mqproc__now_ms() + timeout_ms;
    g->fired = 0;
  }
  pthread_mutex_unlock(&g->lock);
}

int mqproc__guard_disarm(mqproc__guard_t *g) {
  int fired;
  pthread_mutex_lock(&g->lock);
  fired = g->fired;
  if (g->depth > 0 && --g->depth == 0)
    g->fd = -1;
  pthread_mutex_unlock(&g->lock);
  return fired;
}
