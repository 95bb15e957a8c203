/* Test HTTP listener (libmicrohttpd on 127.0.0.1, ephemeral port) that records requests. */
#include "http_listener.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* One header line of a recorded request. */
typedef struct http_header {
  char *name;
  char *value;
} http_header_t;

/* A recorded request. While the upload runs it is MHD's per-request context. */
typedef struct http_req {
  char *method;
  char *path;
  http_header_t *headers;
  size_t n_headers;
  char *body; /* always NUL-terminated */
  size_t body_len;
  size_t body_cap;
  bool oom; /* an allocation failed: answer 500 */
} http_req_t;

struct test_http {
  struct MHD_Daemon *daemon;
  int port;
  pthread_mutex_t lock; /* guards everything below */
  pthread_cond_t cond;  /* signalled on each recorded request and on stop */
  int status;           /* answer once first_left is 0 */
  int first_status;     /* answer while first_left > 0 */
  int first_left;
  int delay_ms;
  bool stopping;
  http_req_t **reqs;
  size_t n_reqs;
  size_t cap_reqs;
};

/* ---- Requests ------------------------------------------------------------------------------ */

static void req_free(http_req_t *r) {
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->n_headers; i++) {
    free(r->headers[i].name);
    free(r->headers[i].value);
  }
  free(r->headers);
  free(r->method);
  free(r->path);
  free(r->body);
  free(r);
}

static char *dup_or_empty(const char *s) {
  return strdup(s == NULL ? "" : s);
}

static enum MHD_Result add_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  http_req_t *r = cls;
  http_header_t *grown = realloc(r->headers, (r->n_headers + 1) * sizeof(*grown));
  (void)kind;
  if (grown == NULL) {
    r->oom = true;
    return MHD_NO;
  }
  r->headers = grown;
  grown[r->n_headers].name = dup_or_empty(key);
  grown[r->n_headers].value = dup_or_empty(value);
  r->n_headers++;
  if (grown[r->n_headers - 1].name == NULL || grown[r->n_headers - 1].value == NULL)
    r->oom = true;
  return MHD_YES;
}

static http_req_t *req_new(struct MHD_Connection *conn, const char *method, const char *url) {
  http_req_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->method = dup_or_empty(method);
  r->path = dup_or_empty(url);
  r->body = calloc(1, 1);
  if (r->method == NULL || r->path == NULL || r->body == NULL) {
    req_free(r);
    return NULL;
  }
  MHD_get_connection_values(conn, MHD_HEADER_KIND, add_header, r);
  return r;
}

/* Appends one upload chunk (MHD may deliver a body in several). */
static void req_append(http_req_t *r, const char *data, size_t n) {
  if (r->body_len + n + 1 > r->body_cap) {
    size_t cap = r->body_cap == 0 ? 1024 : r->body_cap;
    while (cap < r->body_len + n + 1)
      cap *= 2;
    char *grown = realloc(r->body, cap);
    if (grown == NULL) {
      r->oom = true;
      return;
    }
    r->body = grown;
    r->body_cap = cap;
  }
  memcpy(r->body + r->body_len, data, n);
  r->body_len += n;
  r->body[r->body_len] = '\0';
}

/* ---- Serving ------------------------------------------------------------------------------- */

static struct timespec deadline_after(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

/* Stores r (taking it over), picks the answer's status and waits out the delay. */
static int record(test_http_t *t, http_req_t *r) {
  bool oom = r->oom;
  int status;
  pthread_mutex_lock(&t->lock);
  if (t->n_reqs == t->cap_reqs) {
    size_t cap = t->cap_reqs == 0 ? 16 : t->cap_reqs * 2;
    http_req_t **grown = realloc(t->reqs, cap * sizeof(*grown));
    if (grown == NULL) {
      pthread_mutex_unlock(&t->lock);
      req_free(r);
      return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
    t->reqs = grown;
    t->cap_reqs = cap;
  }
  t->reqs[t->n_reqs++] = r;
  status = t->status;
  if (t->first_left > 0) {
    t->first_left--;
    status = t->first_status;
  }
  pthread_cond_broadcast(&t->cond);
  if (t->delay_ms > 0) {
    struct timespec until = deadline_after(t->delay_ms);
    while (!t->stopping && pthread_cond_timedwait(&t->cond, &t->lock, &until) != ETIMEDOUT)
      ;
  }
  pthread_mutex_unlock(&t->lock);
  return oom ? MHD_HTTP_INTERNAL_SERVER_ERROR : status;
}

static enum MHD_Result answer(struct MHD_Connection *conn, int status) {
  static const char text[] = "recorded\n";
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(sizeof(text) - 1, (void *)text, MHD_RESPMEM_PERSISTENT);
  enum MHD_Result rc;
  if (resp == NULL)
    return MHD_NO;
  MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
  rc = MHD_queue_response(conn, (unsigned int)status, resp);
  MHD_destroy_response(resp);
  return rc;
}

/* MHD calls this first with *ctx == NULL, then once per upload chunk, then once more
 * with *upload_size == 0 when the whole request has arrived. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **ctx) {
  test_http_t *t = cls;
  http_req_t *r = *ctx;
  (void)version;
  if (r == NULL) {
    *ctx = req_new(conn, method, url);
    return *ctx != NULL ? MHD_YES : MHD_NO;
  }
  if (*upload_size > 0) {
    req_append(r, upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  *ctx = NULL; /* record() owns r now */
  return answer(conn, record(t, r));
}

/* Frees the context of a request that ended before it was recorded (e.g. aborted). */
static void on_completed(void *cls, struct MHD_Connection *conn, void **ctx,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  (void)toe;
  req_free(*ctx);
  *ctx = NULL;
}

/* ---- Lifecycle ----------------------------------------------------------------------------- */

static int init_sync(test_http_t *t) {
  pthread_condattr_t attr;
  int rc = pthread_condattr_init(&attr);
  if (rc != 0)
    return rc;
  rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  if (rc == 0)
    rc = pthread_cond_init(&t->cond, &attr);
  pthread_condattr_destroy(&attr);
  if (rc != 0)
    return rc;
  rc = pthread_mutex_init(&t->lock, NULL);
  if (rc != 0)
    pthread_cond_destroy(&t->cond);
  return rc;
}

static struct MHD_Daemon *start_daemon(test_http_t *t) {
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = 0};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                          on_request, t, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, t, MHD_OPTION_END);
}

test_http_t *test_http_start(int status_code) {
  test_http_t *t = calloc(1, sizeof(*t));
  const union MHD_DaemonInfo *info;
  if (t == NULL)
    return NULL;
  t->status = status_code;
  if (init_sync(t) != 0) {
    free(t);
    return NULL;
  }
  t->daemon = start_daemon(t);
  info = t->daemon == NULL ? NULL : MHD_get_daemon_info(t->daemon, MHD_DAEMON_INFO_BIND_PORT);
  if (info == NULL || info->port == 0) {
    fprintf(stderr, "test_http_start: cannot start libmicrohttpd on 127.0.0.1\n");
    test_http_stop(t);
    return NULL;
  }
  t->port = info->port;
  return t;
}

void test_http_stop(test_http_t *t) {
  if (t == NULL)
    return;
  pthread_mutex_lock(&t->lock);
  t->stopping = true;
  pthread_cond_broadcast(&t->cond);
  pthread_mutex_unlock(&t->lock);
  if (t->daemon != NULL)
    MHD_stop_daemon(t->daemon);
  for (size_t i = 0; i < t->n_reqs; i++)
    req_free(t->reqs[i]);
  free(t->reqs);
  pthread_cond_destroy(&t->cond);
  pthread_mutex_destroy(&t->lock);
  free(t);
}

/* ---- Settings ------------------------------------------------------------------------------ */

void test_http_set_status(test_http_t *t, int status_code) {
  test_http_set_status_seq(t, 0, status_code, status_code);
}

void test_http_set_status_seq(test_http_t *t, int n, int first_code, int then_code) {
  pthread_mutex_lock(&t->lock);
  t->first_left = n;
  t->first_status = first_code;
  t->status = then_code;
  pthread_mutex_unlock(&t->lock);
}

void test_http_set_delay_ms(test_http_t *t, int ms) {
  pthread_mutex_lock(&t->lock);
  t->delay_ms = ms;
  pthread_mutex_unlock(&t->lock);
}

int test_http_port(test_http_t *t) {
  return t->port;
}

char *test_http_url(test_http_t *t, const char *path) {
  char *url = NULL;
  if (asprintf(&url, "http://127.0.0.1:%d%s", t->port, path == NULL ? "" : path) < 0)
    return NULL;
  return url;
}

/* ---- Inspection ---------------------------------------------------------------------------- */

int test_http_wait(test_http_t *t, int n_requests, int timeout_ms) {
  struct timespec until = deadline_after(timeout_ms);
  size_t n;
  pthread_mutex_lock(&t->lock);
  while (t->n_reqs < (size_t)n_requests &&
         pthread_cond_timedwait(&t->cond, &t->lock, &until) != ETIMEDOUT)
    ;
  n = t->n_reqs;
  pthread_mutex_unlock(&t->lock);
  return (int)n;
}

size_t test_http_count(test_http_t *t) {
  size_t n;
  pthread_mutex_lock(&t->lock);
  n = t->n_reqs;
  pthread_mutex_unlock(&t->lock);
  return n;
}

/* Which part of a request copy_part() copies. */
enum part { PART_METHOD, PART_PATH, PART_BODY, PART_HEADER };

/* The body may hold NUL bytes: copy all of it. */
static char *copy_body(const http_req_t *r) {
  char *copy = malloc(r->body_len + 1);
  if (copy != NULL)
    memcpy(copy, r->body, r->body_len + 1);
  return copy;
}

static char *copy_part(test_http_t *t, size_t i, enum part part, const char *name) {
  char *copy = NULL;
  pthread_mutex_lock(&t->lock);
  if (i < t->n_reqs) {
    const http_req_t *r = t->reqs[i];
    if (part == PART_METHOD)
      copy = strdup(r->method);
    else if (part == PART_PATH)
      copy = strdup(r->path);
    else if (part == PART_BODY)
      copy = copy_body(r);
    for (size_t h = 0; part == PART_HEADER && h < r->n_headers; h++) {
      if (strcasecmp(r->headers[h].name, name) == 0) {
        copy = strdup(r->headers[h].value);
        break;
      }
    }
  }
  pthread_mutex_unlock(&t->lock);
  return copy;
}

char *test_http_method(test_http_t *t, size_t i) {
  return copy_part(t, i, PART_METHOD, NULL);
}

char *test_http_path(test_http_t *t, size_t i) {
  return copy_part(t, i, PART_PATH, NULL);
}

char *test_http_header(test_http_t *t, size_t i, const char *name) {
  return copy_part(t, i, PART_HEADER, name);
}

char *test_http_body(test_http_t *t, size_t i) {
  return copy_part(t, i, PART_BODY, NULL);
}

size_t test_http_body_len(test_http_t *t, size_t i) {
  size_t n = 0;
  pthread_mutex_lock(&t->lock);
  if (i < t->n_reqs)
    n = t->reqs[i]->body_len;
  pthread_mutex_unlock(&t->lock);
  return n;
}
