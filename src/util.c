/* Small helpers shared by every module: error buffers, allocation, clocks. */
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int mqproc__err(char *err, int status, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, MQPROC_ERR_LEN, fmt, ap);
    va_end(ap);
  }
  return status;
}

void *mqproc__malloc(size_t n) {
  return malloc(n == 0 ? 1 : n);
}

void *mqproc__calloc(size_t n, size_t size) {
  return calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
}

void *mqproc__realloc(void *p, size_t n) {
  return realloc(p, n == 0 ? 1 : n);
}

char *mqproc__strdup(const char *s) {
  return s == NULL ? NULL : mqproc__strndup(s, strlen(s));
}

char *mqproc__strndup(const char *s, size_t n) {
  char *d;
  if (s == NULL)
    return NULL;
  d = mqproc__malloc(n + 1);
  if (d == NULL)
    return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

char *mqproc__asprintf(const char *fmt, ...) {
  va_list ap;
  char *out = NULL;
  va_start(ap, fmt);
  if (vasprintf(&out, fmt, ap) < 0)
    out = NULL;
  va_end(ap);
  return out;
}

static int64_t clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t mqproc__now_ms(void) {
  return clock_ms(CLOCK_MONOTONIC);
}

int64_t mqproc__wall_ms(void) {
  return clock_ms(CLOCK_REALTIME);
}
