/* What harness.c takes from harness_backends.c: the dir:// and sqlite:// sides of its
 * helpers (harness.h says what each does). */
#ifndef MQPROC_TEST_HARNESS_INT_H
#define MQPROC_TEST_HARNESS_INT_H

#include <stdarg.h>
#include <stddef.h>

#include "harness.h"

const char *it_dir_url(void);
void it_dir_declare(const char *queue);
void it_dir_delete(const char *queue);
void it_dir_publish(const char *rk, const void *body, size_t len);
int it_dir_take(const char *queue, int timeout_ms, it_msg_t *out, int requeue);
void it_dir_counts(const char *queue, long *ready, long *unacked);
const char *it_sqlite_url(void);
/* The first cell of sql's first row (NULL: none or SQL NULL; *found: a row came). */
char *it_sqlite_first(const char *sql, int n, va_list ap, int *found);
void it_backends_cleanup(void);
/* harness_tq.c: the table queues (MQPROC_TEST_QUEUE=pg or sqlite). */
const char *it_tq_url(void);
void it_tq_delete(const char *queue);
void it_tq_publish(const char *rk, const void *body, size_t len);
int it_tq_take(const char *queue, int timeout_ms, it_msg_t *out, int requeue);
void it_tq_counts(const char *queue, long *ready, long *unacked);
void it_tq_cleanup(void);

#endif
