/* libmicrohttpd driven by the loop: MHD_USE_EPOLL without a polling thread, its epoll fd
 * watched by our epoll, MHD_run() when it is readable or MHD's timeout passes. A handler
 * that cannot answer at once leaves the connection suspended; mqproc__http_reply() stores
 * the answer, resumes it and arms a 0 ms timer (a resume does not wake MHD's epoll fd
 * here, and MHD_run must not be entered from inside itself), so the loop runs MHD on its
 * next turn and the access callback queues the stored response. */
#include "http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

struct mqproc__http {
  struct MHD_Daemon *d;
  mqproc__loop_t *loop;
  mqproc__http_handler handler;
  void *ud;
  int fd;         /* MHD's epoll fd, watched by the loop */
  uint64_t timer; /* MHD's next timeout */
  int port;
  mqproc__http_req_t *waiting; /* suspended requests (answered with 503 on stop) */
};

#define FORM_FIELDS 8
#define FORM_VALUE_MAX 1024
#define FORM_BODY_MAX 4096

struct mqproc__http_req {
  mqproc__http_t *h;
  struct MHD_Connection *conn;
  char method[16];
  char *path;
  int has_body;                   /* a body that is not a small form: refused with 413 */
  struct MHD_PostProcessor *form; /* a POST's application/x-www-form-urlencoded body */
  size_t form_bytes;
  char *names[FORM_FIELDS], *values[FORM_FIELDS];
  int nfields;
  int dispatched, suspended;
  struct MHD_Response *response; /* ready to queue */
  int status;
  mqproc__http_req_t *next_waiting;
};

static void schedule(mqproc__http_t *h);

static void drive(mqproc__http_t *h) {
  MHD_run(h->d);
  schedule(h);
}

static void on_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__http_t *h = ud;
  (void)loop;
  h->timer = 0;
  drive(h);
}

static void on_readable(mqproc__loop_t *loop, int fd, void *ud) {
  (void)loop;
  (void)fd;
  drive(ud);
}

/* MHD wants to run again within its timeout (idle connections, queued responses). */
static void schedule(mqproc__http_t *h) {
  MHD_UNSIGNED_LONG_LONG ms;
  if (h->timer != 0)
    mqproc__loop_timer_cancel(h->loop, h->timer);
  h->timer = 0;
  if (MHD_get_timeout(h->d, &ms) == MHD_YES)
    h->timer = mqproc__loop_timer(h->loop, ms > 60000 ? 60000 : (int64_t)ms, on_timer, h);
}

/* ---- requests ------------------------------------------------------------------------ */

static void unlink_waiting(mqproc__http_req_t *r) {
  for (mqproc__http_req_t **p = &r->h->waiting; *p != NULL; p = &(*p)->next_waiting)
    if (*p == r) {
      *p = r->next_waiting;
      return;
    }
}

/* A form field (or a piece of one: MHD calls again with the rest at offset). */
static enum MHD_Result on_field(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *filename, const char *content_type,
                                const char *transfer_encoding, const char *data, uint64_t off,
                                size_t size) {
  mqproc__http_req_t *r = cls;
  int i;
  (void)kind;
  (void)filename;
  (void)content_type;
  (void)transfer_encoding;
  for (i = 0; i < r->nfields && strcmp(r->names[i], key) != 0; i++)
    ;
  if (i == r->nfields) {
    if (i == FORM_FIELDS || (r->names[i] = strdup(key)) == NULL)
      return MHD_NO;
    r->values[i] = NULL;
    r->nfields++;
  }
  {
    size_t have = r->values[i] != NULL ? strlen(r->values[i]) : 0;
    char *v;
    if (off != have || have + size > FORM_VALUE_MAX ||
        (v = realloc(r->values[i], have + size + 1)) == NULL)
      return MHD_NO;
    memcpy(v + have, data, size);
    v[have + size] = '\0';
    r->values[i] = v;
  }
  return MHD_YES;
}

static int is_form(struct MHD_Connection *conn, const char *method) {
  const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
  return !strcmp(method, "POST") && ct != NULL &&
         strncasecmp(ct, "application/x-www-form-urlencoded", 33) == 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_size, void **con_cls) {
  mqproc__http_t *h = cls;
  mqproc__http_req_t *r = *con_cls;
  (void)version;
  if (r == NULL) {
    if ((r = calloc(1, sizeof(*r))) == NULL || (r->path = strdup(url)) == NULL) {
      free(r);
      return MHD_NO;
    }
    r->h = h;
    r->conn = conn;
    snprintf(r->method, sizeof(r->method), "%s", method);
    if (is_form(conn, method))
      r->form = MHD_create_post_processor(conn, 1024, on_field, r);
    *con_cls = r;
    return MHD_YES;
  }
  if (*upload_size > 0) { /* a piece of a body: a small form, or dropped */
    r->form_bytes += *upload_size;
    if (r->form == NULL || r->form_bytes > FORM_BODY_MAX ||
        MHD_post_process(r->form, upload_data, *upload_size) != MHD_YES)
      r->has_body = 1;
    *upload_size = 0;
    return MHD_YES;
  }
  if (!r->dispatched) {
    r->dispatched = 1;
    if (r->form != NULL) { /* the body is complete: the last field's end comes now */
      if (MHD_destroy_post_processor(r->form) != MHD_YES)
        r->has_body = 1;
      r->form = NULL;
    }
    if (r->has_body)
      mqproc__http_reply_text(r, 413, "text/plain; charset=utf-8",
                              "no request body here but a small form\n");
    else
      h->handler(h->ud, r);
    if (r->response == NULL) { /* answered later, from the loop */
      r->suspended = 1;
      r->next_waiting = h->waiting;
      h->waiting = r;
      MHD_suspend_connection(conn);
      return MHD_YES;
    }
  }
  if (r->response == NULL)
    return MHD_YES; /* resumed before the answer: cannot happen, wait */
  {
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)r->status, r->response);
    MHD_destroy_response(r->response);
    r->response = NULL;
    return ok;
  }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  mqproc__http_req_t *r = *con_cls;
  (void)cls;
  (void)conn;
  (void)why;
  if (r == NULL)
    return;
  if (r->response != NULL)
    MHD_destroy_response(r->response);
  if (r->form != NULL)
    MHD_destroy_post_processor(r->form);
  for (int i = 0; i < r->nfields; i++) {
    free(r->names[i]);
    free(r->values[i]);
  }
  free(r->path);
  free(r);
  *con_cls = NULL;
}

void mqproc__http_reply(mqproc__http_req_t *r, int status, const char *content_type, char *body,
                        size_t len) {
  mqproc__http_reply_with(r, status, content_type, body, len, NULL);
}

void mqproc__http_reply_with(mqproc__http_req_t *r, int status, const char *content_type,
                             char *body, size_t len, const char *const *headers) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(
      body != NULL ? len : 0, body != NULL ? body : (void *)"",
      body != NULL ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
  if (resp == NULL) {
    free(body);
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    status = 500;
  }
  if (resp != NULL) {
    if (content_type != NULL)
      MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; style-src 'unsafe-inline'; script-src "
                            "'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
                            "form-action 'self'; frame-ancestors 'none'");
    for (; headers != NULL && headers[0] != NULL; headers += 2)
      MHD_add_response_header(resp, headers[0], headers[1]);
  }
  r->response = resp;
  r->status = status;
  if (r->suspended) { /* MHD runs it from the loop's next turn (never from inside MHD_run) */
    r->suspended = 0;
    unlink_waiting(r);
    MHD_resume_connection(r->conn);
    if (r->h->timer != 0)
      mqproc__loop_timer_cancel(r->h->loop, r->h->timer);
    r->h->timer = mqproc__loop_timer(r->h->loop, 0, on_timer, r->h);
  }
}

void mqproc__http_reply_text(mqproc__http_req_t *req, int status, const char *content_type,
                             const char *text) {
  mqproc__http_reply_text_with(req, status, content_type, text, NULL);
}

void mqproc__http_reply_text_with(mqproc__http_req_t *req, int status, const char *content_type,
                                  const char *text, const char *const *headers) {
  char *copy = strdup(text);
  mqproc__http_reply_with(req, status, content_type, copy, copy != NULL ? strlen(copy) : 0,
                          headers);
}

void mqproc__http_reply_json(mqproc__http_req_t *req, int status, json_t *o) {
  char *json = json_dumps(o, JSON_COMPACT), *text = NULL;
  if (json != NULL)
    text = mqproc__asprintf("%s\n", json);
  free(json);
  json_decref(o);
  if (text == NULL)
    mqproc__http_reply_text(req, 500, "text/plain; charset=utf-8", "out of memory\n");
  else
    mqproc__http_reply(req, status, "application/json", text, strlen(text));
}

void mqproc__http_reply_ready(mqproc__http_req_t *req, json_t *reasons) {
  int ready = json_array_size(reasons) == 0;
  mqproc__http_reply_json(req, ready ? 200 : 503,
                          json_pack("{s:b, s:o}", "ready", ready, "reasons", reasons));
}

const char *mqproc__http_method(const mqproc__http_req_t *r) {
  return r->method;
}
const char *mqproc__http_path(const mqproc__http_req_t *r) {
  return r->path;
}
const char *mqproc__http_arg(const mqproc__http_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}
const char *mqproc__http_header(const mqproc__http_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}
const char *mqproc__http_cookie(const mqproc__http_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, name);
}
const char *mqproc__http_form(const mqproc__http_req_t *r, const char *name) {
  for (int i = 0; i < r->nfields; i++)
    if (!strcmp(r->names[i], name))
      return r->values[i] != NULL ? r->values[i] : "";
  return NULL;
}
void mqproc__http_peer(const mqproc__http_req_t *r, char *out, size_t n) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  const struct sockaddr *sa = ci != NULL ? ci->client_addr : NULL;
  snprintf(out, n, "?");
  if (sa != NULL)
    getnameinfo(
        sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
        out, (socklen_t)n, NULL, 0, NI_NUMERICHOST);
}

/* ---- the daemon ---------------------------------------------------------------------- */

static int resolve(const char *addr, struct sockaddr_storage *ss, char *err) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_PASSIVE},
                  *res = NULL;
  size_t hl;
  int rc;
  if (colon == NULL || colon[1] == '\0')
    return mqproc__err(err, MQPROC_EINVAL, "--http %s: expected HOST:PORT (127.0.0.1:9464)", addr);
  hl = (size_t)(colon - addr);
  if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') { /* [::1]:9464 */
    addr++;
    hl -= 2;
  }
  if (hl == 0 || hl >= sizeof(host))
    return mqproc__err(err, MQPROC_EINVAL, "--http %s: expected HOST:PORT (127.0.0.1:9464)", addr);
  memcpy(host, addr, hl);
  host[hl] = '\0';
  if ((rc = getaddrinfo(host, colon + 1, &hints, &res)) != 0 || res == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "--http %s: %s", addr, gai_strerror(rc));
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  return MQPROC_OK;
}

int mqproc__http_start(mqproc__http_t **out, mqproc__loop_t *loop, const char *addr,
                       mqproc__http_handler handler, void *ud, char *err) {
  struct sockaddr_storage ss;
  mqproc__http_t *h;
  const union MHD_DaemonInfo *info;
  int rc;
  *out = NULL;
  if ((rc = resolve(addr, &ss, err)) != MQPROC_OK)
    return rc;
  if ((h = calloc(1, sizeof(*h))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  h->loop = loop;
  h->handler = handler;
  h->ud = ud;
  h->d = MHD_start_daemon(
      MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0), 0,
      NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
      MHD_OPTION_CONNECTION_LIMIT, (unsigned)MQPROC__HTTP_MAX_CONNECTIONS,
      MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
  if (h->d == NULL) {
    free(h);
    return mqproc__err(err, MQPROC_ESYS,
                       "--http %s: cannot listen (in use, or not an address here)", addr);
  }
  info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
  h->fd = info != NULL ? info->epoll_fd : -1;
  info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
  h->port = info != NULL ? info->port : 0;
  if (h->fd < 0 || mqproc__loop_io(loop, h->fd, on_readable, h) != MQPROC_OK) {
    MHD_stop_daemon(h->d);
    free(h);
    return mqproc__err(err, MQPROC_ESYS, "--http %s: cannot watch its epoll fd", addr);
  }
  schedule(h);
  *out = h;
  return MQPROC_OK;
}

int mqproc__http_port(const mqproc__http_t *h) {
  return h->port;
}

void mqproc__http_stop(mqproc__http_t *h) {
  if (h == NULL)
    return;
  while (h->waiting != NULL)
    mqproc__http_reply_text(h->waiting, 503, "text/plain; charset=utf-8", "stopping\n");
  MHD_run(h->d);
  mqproc__loop_io(h->loop, h->fd, NULL, NULL);
  if (h->timer != 0)
    mqproc__loop_timer_cancel(h->loop, h->timer);
  MHD_stop_daemon(h->d);
  free(h);
}
