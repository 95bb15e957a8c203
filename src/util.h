/* Small helpers shared by every module: error buffers, allocation, clocks. */
#ifndef MQPROC_UTIL_H
#define MQPROC_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "mqproc/mqproc.h"

/* Formats into err (MQPROC_ERR_LEN bytes) when err is not NULL; returns status so a
 * caller can write `return mqproc__err(err, MQPROC_EINVAL, "bad %s", x);`. */
int mqproc__err(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Allocation that aborts on failure is NOT used: callers get NULL and return
 * MQPROC_ENOMEM. These wrappers exist so a test can fail the Nth allocation. */
void *mqproc__malloc(size_t n);
void *mqproc__calloc(size_t n, size_t size);
void *mqproc__realloc(void *p, size_t n);
char *mqproc__strdup(const char *s); /* NULL in, NULL out */
char *mqproc__strndup(const char *s, size_t n);
char *mqproc__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic milliseconds (for timers and durations). */
int64_t mqproc__now_ms(void);
/* Wall-clock milliseconds since the epoch (for logs and records). */
int64_t mqproc__wall_ms(void);

#define MQPROC__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
