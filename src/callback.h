/* Callbacks: POST a result message as JSON to a URL (libcurl), with a timeout and a
 * few retries. Blocking: call it from a worker thread, never from the event loop. */
#ifndef MQPROC_CALLBACK_H
#define MQPROC_CALLBACK_H

typedef struct mqproc__callback_opts {
  long timeout_ms; /* whole-request timeout per try (connect included) */
  int retries;     /* extra tries after the first (0 = one try) */
  long backoff_ms; /* wait before the first retry; doubled each retry */
} mqproc__callback_opts_t;

/* POSTs body (JSON text, NUL-terminated) to url with Content-Type: application/json.
 * Success = a 2xx answer. Any other answer, a connection error or a timeout is retried;
 * after the last try returns MQPROC_ECALLBACK and err says what the last try got
 * (e.g. "HTTP 500 from http://host/cb" or "timeout after 5000 ms"). *tries_out (may be
 * NULL) gets the number of tries made. Thread-safe (one curl easy handle per call);
 * curl_global_init() must have been called by the program. */
int mqproc__callback_post(const char *url, const char *body, const mqproc__callback_opts_t *opts,
                          int *tries_out, char *err);

#endif
