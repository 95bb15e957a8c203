/* Test HTTP listener (libmicrohttpd on 127.0.0.1, ephemeral port) that records requests. */
#ifndef MQPROC_TEST_HTTP_LISTENER_H
#define MQPROC_TEST_HTTP_LISTENER_H

#include <stddef.h>

typedef struct test_http test_http_t;

/* Starts a listener on 127.0.0.1:<ephemeral> answering every request with status_code
 * (and a short text body). Returns NULL on failure. Stop it with test_http_stop(). */
test_http_t *test_http_start(int status_code);
/* Answers all following requests with status_code. */
void test_http_set_status(test_http_t *t, int status_code);
/* Answers the next n requests with first_code, every one after them with then_code. */
void test_http_set_status_seq(test_http_t *t, int n, int first_code, int then_code);
/* Delays each answer by ms (0 = none). The request is recorded (and counted) on arrival,
 * before the delay; test_http_stop() cuts a pending delay short. */
void test_http_set_delay_ms(test_http_t *t, int ms);

int test_http_port(test_http_t *t);
/* "http://127.0.0.1:<port><path>"; malloc'd, the caller frees. */
char *test_http_url(test_http_t *t, const char *path);

/* Blocks until at least n_requests were received or timeout_ms passed; returns the
 * number received. */
int test_http_wait(test_http_t *t, int n_requests, int timeout_ms);
/* Number of requests received (complete, body included). */
size_t test_http_count(test_http_t *t);

/* Copies of parts of the i-th request (0-based); malloc'd, the caller frees. NULL when
 * there is no such request (or header). Header names are matched case-insensitively. */
char *test_http_method(test_http_t *t, size_t i);
char *test_http_path(test_http_t *t, size_t i);
char *test_http_header(test_http_t *t, size_t i, const char *name);
char *test_http_body(test_http_t *t, size_t i); /* NUL-terminated; see test_http_body_len */
size_t test_http_body_len(test_http_t *t, size_t i);

/* Stops the daemon and frees everything; NULL is allowed. */
void test_http_stop(test_http_t *t);

#endif
