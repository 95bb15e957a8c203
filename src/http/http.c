/* libmicrohttpd driven by the loop: MHD_USE_EPOLL without a polling thread, its epoll fd
 * watched by our epoll, MHD_run() when it is readable or MHD's timeout passes. A handler
 * that cannot answer at once leaves the connection suspended; mqproc__http_reply() stores
 * the answer and resumes it (MHD's inter-thread channel wakes its epoll fd, so the loop
 * runs MHD again and the access callback queues the stored response). */
#include "http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "mqproc/mqproc.h"
#include "util.h"

#define MAX_FIELDS 16

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

struct mqproc__http_req {
  mqproc__http_t *h;
  struct MHD_Connection *conn;
  char method[16];
  char *path;
  char *body;
  size_t body_len;
  int too_large;
  int dispatched, suspended;
  struct MHD_Response *response; /* ready to queue */
  int status;
  char *fields[MAX_FIELDS][2]; /* urlencoded POST fields, unescaped */
  int n_fields;
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

static void parse_form(mqproc__http_req_t *r) {
  const char *ct = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Content-Type");
  char *s, *save = NULL, *pair;
  if (ct == NULL || strncmp(ct, "application/x-www-form-urlencoded", 33) != 0 || r->body == NULL)
    return;
  if ((s = strdup(r->body)) == NULL)
    return;
  for (pair = strtok_r(s, "&", &save); pair != NULL && r->n_fields < MAX_FIELDS;
       pair = strtok_r(NULL, "&", &save)) {
    char *eq = strchr(pair, '=');
    if (eq == NULL)
      continue;
    *eq = '\0';
    for (char *c = pair; *c != '\0'; c++) /* MHD_http_unescape leaves '+' alone */
      if (*c == '+')
        *c = ' ';
    for (char *c = eq + 1; *c != '\0'; c++)
      if (*c == '+')
        *c = ' ';
    MHD_http_unescape(pair);
    MHD_http_unescape(eq + 1);
    r->fields[r->n_fields][0] = strdup(pair);
    r->fields[r->n_fields][1] = strdup(eq + 1);
    if (r->fields[r->n_fields][0] != NULL && r->fields[r->n_fields][1] != NULL)
      r->n_fields++;
    else {
      free(r->fields[r->n_fields][0]);
      free(r->fields[r->n_fields][1]);
    }
  }
  free(s);
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
    *con_cls = r;
    return MHD_YES;
  }
  if (*upload_size > 0) { /* a piece of the body */
    if (r->too_large || r->body_len + *upload_size > MQPROC__HTTP_MAX_BODY) {
      r->too_large = 1;
    } else {
      char *b = realloc(r->body, r->body_len + *upload_size + 1);
      if (b == NULL)
        return MHD_NO;
      memcpy(b + r->body_len, upload_data, *upload_size);
      r->body = b;
      r->body_len += *upload_size;
      r->body[r->body_len] = '\0';
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (!r->dispatched) {
    r->dispatched = 1;
    if (r->too_large) {
      mqproc__http_reply_text(r, 413, "text/plain; charset=utf-8", "request body too large\n");
    } else {
      parse_form(r);
      h->handler(h->ud, r);
    }
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
  for (int i = 0; i < r->n_fields; i++) {
    free(r->fields[i][0]);
    free(r->fields[i][1]);
  }
  free(r->path);
  free(r->body);
  free(r);
  *con_cls = NULL;
}

void mqproc__http_reply(mqproc__http_req_t *r, int status, const char *content_type, char *body,
                        size_t len, const char *extra_header) {
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
    if (extra_header != NULL) {
      const char *colon = strchr(extra_header, ':');
      char name[64];
      if (colon != NULL && (size_t)(colon - extra_header) < sizeof(name)) {
        memcpy(name, extra_header, (size_t)(colon - extra_header));
        name[colon - extra_header] = '\0';
        MHD_add_response_header(resp, name, colon + 1 + (colon[1] == ' '));
      }
    }
  }
  r->response = resp;
  r->status = status;
  if (r->suspended) {
    r->suspended = 0;
    unlink_waiting(r);
    MHD_resume_connection(r->conn);
    drive(r->h);
  }
}

void mqproc__http_reply_text(mqproc__http_req_t *req, int status, const char *content_type,
                             const char *text) {
  char *copy = strdup(text);
  mqproc__http_reply(req, status, content_type, copy, copy != NULL ? strlen(copy) : 0, NULL);
}

const char *mqproc__http_method(const mqproc__http_req_t *r) {
  return r->method;
}
const char *mqproc__http_path(const mqproc__http_req_t *r) {
  return r->path;
}
const char *mqproc__http_body(const mqproc__http_req_t *r) {
  return r->body != NULL ? r->body : "";
}

const char *mqproc__http_arg(const mqproc__http_req_t *r, const char *name) {
  for (int i = 0; i < r->n_fields; i++)
    if (strcmp(r->fields[i][0], name) == 0)
      return r->fields[i][1];
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *mqproc__http_header(const mqproc__http_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
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
  h->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                              (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                          0, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)MQPROC__HTTP_MAX_CONNECTIONS,
                          MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                          (size_t)32768, MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
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
