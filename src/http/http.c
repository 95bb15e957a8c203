/* libmicrohttpd driven by the loop: MHD_USE_EPOLL without a polling thread, its epoll fd
 * watched by our epoll, MHD_run() when it is readable or MHD's timeout passes. A handler
 * that cannot answer at once leaves the connection suspended; mqproc__http_reply() stores
 * the answer, resumes it and arms a 0 ms timer (a resume does not wake MHD's epoll fd
 * here, and MHD_run must not be entered from inside itself), so the loop runs MHD on its
 * next turn and the access callback queues the stored response.
 *
 * Slow clients: MHD's idle timeout restarts with every byte, so a client trickling a
 * header line now and then would keep its slot for ever. Every connection is tracked
 * (MHD_OPTION_NOTIFY_CONNECTION): while it has no whole request (since its accept, or
 * since its last answer on a kept-alive connection) it is "waiting", and after each
 * MHD_run the sweep closes the waiting ones past the head deadline and the oldest beyond
 * the per-client and overall limits (http.h). It closes by shutdown(2): MHD sees the end
 * of the stream on its next run and closes the connection itself. The sweep runs after
 * MHD_run, not at accept, so a burst of connections whose requests are already in their
 * socket buffers is served, not cut.
 *
 * Unix sockets ("unix:PATH"): the socket is bound and listened on here and handed to MHD
 * (MHD_OPTION_LISTEN_SOCKET). Its clients have no address, so the per-client limits tell
 * them apart by their process (SO_PEERCRED), the Host check is skipped (a browser cannot
 * reach a socket file, and Python's requests sends the path as Host), and the socket file
 * is removed on stop only while it is still the one bound here (device and inode). */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

/* An open connection (MHD's socket context). */
typedef struct conn {
  struct sockaddr_storage peer; /* its client address (the port is not compared) */
  pid_t pid;                    /* on a Unix socket: the client's process (SO_PEERCRED) */
  uid_t uid;                    /* and its user */
  int fd;
  int waiting;              /* no whole request yet: since since_ms */
  int closing;              /* shut down by the sweep; MHD closes it on its next run */
  int64_t since_ms;         /* its accept, or its last answer */
  struct conn *prev, *next; /* oldest first */
} conn_t;

struct mqproc__http {
  struct MHD_Daemon *d;
  mqproc__loop_t *loop;
  mqproc__http_handler handler;
  void *ud;
  int fd;         /* MHD's epoll fd, watched by the loop */
  uint64_t timer; /* MHD's next timeout, or the next head deadline */
  int port;
  mqproc__http_req_t *waiting; /* suspended requests (answered with 503 on stop) */
  char **hosts;                /* names a Host may give besides IPs and localhost */
  conn_t *conns, *conns_tail;  /* every open connection */
  int head_timeout_ms;
  size_t body_max; /* a body other than a small form, kept up to this (0: refused) */
  /* the forms it parses (mqproc__http_set_form_max) */
  int form_fields;
  size_t form_value_max, form_body_max;
  int form_with_body; /* forms parsed into fields although bodies are kept */
  /* on a Unix socket (ADDR "unix:PATH"): its path and its file, removed on stop while it
   * is still this one */
  char *unix_path;
  dev_t unix_dev;
  ino_t unix_ino;
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
  char **names, **values; /* h->form_fields of each */
  int nfields;
  int dispatched, suspended;
  char *body; /* the body when the server keeps bodies (mqproc__http_set_body_max) */
  size_t body_len;
  struct MHD_Response *response; /* ready to queue */
  int status;
  mqproc__http_req_t *next_waiting;
  mqproc__http_done_cb done; /* called once the request has ended (mqproc__http_on_done) */
  void *done_ud;
};

static void schedule(mqproc__http_t *h);
static int64_t sweep(mqproc__http_t *h);

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

/* MHD wants to run again within its timeout (idle connections, queued responses), and
 * the sweep at the next head deadline. */
static void schedule(mqproc__http_t *h) {
  MHD_UNSIGNED_LONG_LONG mhd;
  int64_t ms = sweep(h);
  if (h->timer != 0)
    mqproc__loop_timer_cancel(h->loop, h->timer);
  h->timer = 0;
  if (MHD_get_timeout(h->d, &mhd) == MHD_YES && (ms < 0 || (MHD_UNSIGNED_LONG_LONG)ms > mhd))
    ms = mhd > 60000 ? 60000 : (int64_t)mhd;
  if (ms >= 0)
    h->timer = mqproc__loop_timer(h->loop, ms, on_timer, h);
}

/* ---- connections: the head deadline and the limits on waiting ones -------------------- */

static void on_connection(void *cls, struct MHD_Connection *mc, void **ctx,
                          enum MHD_ConnectionNotificationCode what) {
  mqproc__http_t *h = cls;
  conn_t *c = *ctx;
  if (what == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *fd =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (fd == NULL || (c = calloc(1, sizeof(*c))) == NULL)
      return; /* untracked: MHD's own idle timeout still ends it */
    c->fd = fd->connect_fd;
    if (h->unix_path != NULL) { /* no address: the peer's process tells clients apart */
      struct ucred cred;
      socklen_t len = sizeof(cred);
      c->peer.ss_family = AF_UNIX;
      if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->pid = cred.pid;
        c->uid = cred.uid;
      }
    } else if (addr != NULL && addr->client_addr != NULL) {
      memcpy(&c->peer, addr->client_addr,
             addr->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                      : sizeof(struct sockaddr_in));
    }
    c->waiting = 1;
    c->since_ms = mqproc__now_ms();
    c->prev = h->conns_tail;
    *(h->conns_tail != NULL ? &h->conns_tail->next : &h->conns) = c;
    h->conns_tail = c;
    *ctx = c;
    return;
  }
  if (c == NULL) /* MHD_CONNECTION_NOTIFY_CLOSED */
    return;
  *(c->prev != NULL ? &c->prev->next : &h->conns) = c->next;
  *(c->next != NULL ? &c->next->prev : &h->conns_tail) = c->prev;
  free(c);
  *ctx = NULL;
}

static conn_t *conn_of(struct MHD_Connection *mc) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci != NULL ? ci->socket_context : NULL;
}

static int same_client(const conn_t *a, const conn_t *b) {
  if (a->peer.ss_family != b->peer.ss_family)
    return 0;
  if (a->peer.ss_family == AF_UNIX) /* one process; an unknown one (0) is its own client */
    return a->pid != 0 && a->pid == b->pid && a->uid == b->uid;
  if (a->peer.ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)&a->peer)->sin6_addr,
                   &((const struct sockaddr_in6 *)&b->peer)->sin6_addr, sizeof(struct in6_addr));
  return ((const struct sockaddr_in *)&a->peer)->sin_addr.s_addr ==
         ((const struct sockaddr_in *)&b->peer)->sin_addr.s_addr;
}

static void shut(conn_t *c) {
  shutdown(c->fd, SHUT_RDWR);
  c->closing = 1;
}

/* Closes the waiting connections past their head deadline, then those beyond the newest
 * MQPROC__HTTP_WAITING_PER_CLIENT of one address or the newest MQPROC__HTTP_WAITING_MAX
 * in all (a new client gets in; the oldest waiter goes). Returns the ms until the next
 * deadline, -1 when none waits. */
static int64_t sweep(mqproc__http_t *h) {
  int64_t now = mqproc__now_ms(), next = -1;
  int total = 0;
  for (conn_t *c = h->conns_tail; c != NULL; c = c->prev) {
    int mine = 1;
    if (!c->waiting || c->closing)
      continue;
    if (now - c->since_ms >= h->head_timeout_ms) {
      shut(c);
      continue;
    }
    for (conn_t *n = c->next; n != NULL; n = n->next) /* the newer ones of its client */
      mine += n->waiting && !n->closing && same_client(n, c);
    if (mine > MQPROC__HTTP_WAITING_PER_CLIENT || ++total > MQPROC__HTTP_WAITING_MAX) {
      shut(c);
      continue;
    }
    if (next < 0 || c->since_ms + h->head_timeout_ms - now < next)
      next = c->since_ms + h->head_timeout_ms - now;
  }
  return next;
}

/* Whether host (a request's Host header) names this server: an IP address, localhost, or
 * a name it was given, with or without a port. A web page that rebinds its own name to
 * this address sends that name, so it is refused. */
static int host_ok(const mqproc__http_t *h, const char *host) {
  char name[256];
  unsigned char addr[sizeof(struct in6_addr)];
  const char *end;
  size_t n;
  if (host == NULL) /* HTTP/1.0 (MHD refuses an HTTP/1.1 request without one) */
    return 1;
  if (host[0] == '[') { /* [V6]:PORT */
    end = strchr(host, ']');
    n = end != NULL ? (size_t)(end - host - 1) : 0;
    if (n == 0 || n >= sizeof(name) || (end[1] != '\0' && end[1] != ':'))
      return 0;
    memcpy(name, host + 1, n);
    name[n] = '\0';
    return inet_pton(AF_INET6, name, addr) == 1;
  }
  n = (end = strchr(host, ':')) != NULL ? (size_t)(end - host) : strlen(host);
  if (n == 0 || n >= sizeof(name))
    return 0;
  memcpy(name, host, n);
  name[n - (n > 1 && host[n - 1] == '.')] = '\0'; /* "localhost." is localhost */
  if (inet_pton(AF_INET, name, addr) == 1 || strcasecmp(name, "localhost") == 0)
    return 1;
  for (char **p = h->hosts; p != NULL && *p != NULL; p++)
    if (strcasecmp(name, *p) == 0)
      return 1;
  return 0;
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
    if (i == r->h->form_fields || (r->names[i] = strdup(key)) == NULL)
      return MHD_NO;
    r->values[i] = NULL;
    r->nfields++;
  }
  {
    size_t have = r->values[i] != NULL ? strlen(r->values[i]) : 0;
    char *v;
    if (off != have || have + size > r->h->form_value_max ||
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
    /* a server keeping bodies keeps forms whole, and parses them too when it said so */
    if (is_form(conn, method) && (h->body_max == 0 || h->form_with_body) &&
        ((r->names = calloc((size_t)h->form_fields, sizeof(char *))) == NULL ||
         (r->values = calloc((size_t)h->form_fields, sizeof(char *))) == NULL ||
         (r->form = MHD_create_post_processor(conn, 1024, on_field, r)) == NULL)) {
      free(r->names);
      free(r->values);
      free(r->path);
      free(r);
      return MHD_NO;
    }
    *con_cls = r;
    return MHD_YES;
  }
  if (*upload_size > 0 && r->form != NULL && h->form_with_body) { /* a form, kept and parsed */
    r->form_bytes += *upload_size;
    if (r->form_bytes > h->form_body_max ||
        MHD_post_process(r->form, upload_data, *upload_size) != MHD_YES)
      r->has_body = 1;
    else if (r->body_len + *upload_size <= h->body_max) {
      char *more = realloc(r->body, r->body_len + *upload_size + 1);
      if (more == NULL) {
        r->has_body = 1;
      } else {
        memcpy(more + r->body_len, upload_data, *upload_size);
        r->body = more;
        r->body_len += *upload_size;
        r->body[r->body_len] = '\0';
      }
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size > 0 && r->form == NULL && h->body_max > 0) { /* a body kept whole */
    char *more;
    if (r->has_body || r->body_len + *upload_size > h->body_max ||
        (more = realloc(r->body, r->body_len + *upload_size + 1)) == NULL) {
      r->has_body = 1; /* too large: answered 413, the rest read and dropped */
    } else {
      memcpy(more + r->body_len, upload_data, *upload_size);
      r->body = more;
      r->body_len += *upload_size;
      r->body[r->body_len] = '\0';
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (*upload_size > 0) { /* a piece of a body: a small form, or dropped */
    r->form_bytes += *upload_size;
    if (r->form == NULL || r->form_bytes > h->form_body_max ||
        MHD_post_process(r->form, upload_data, *upload_size) != MHD_YES)
      r->has_body = 1;
    *upload_size = 0;
    return MHD_YES;
  }
  if (!r->dispatched) {
    conn_t *c = conn_of(conn);
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    r->dispatched = 1;
    if (c != NULL) /* a whole request: no head deadline until it is answered */
      c->waiting = 0;
    if (r->form != NULL) { /* the body is complete: the last field's end comes now */
      if (MHD_destroy_post_processor(r->form) != MHD_YES)
        r->has_body = 1;
      r->form = NULL;
    }
    if (r->has_body && h->body_max > 0) {
      char text[200];
      snprintf(text, sizeof(text), "{\"detail\":\"the request body is larger than %zu bytes\"}\n",
               h->body_max);
      mqproc__http_reply_text(r, 413, "application/json", text);
    } else if (r->has_body) {
      mqproc__http_reply_text(r, 413, "text/plain; charset=utf-8",
                              "no request body here but a small form\n");
    } else if (h->unix_path == NULL && !host_ok(h, host)) { /* (no page reaches a socket file) */
      char text[400];
      snprintf(text, sizeof(text),
               "refused: '%.200s' is not a name of this server (an IP address, localhost and the "
               "names given with --http-host are)\n",
               host);
      mqproc__http_reply_text(r, 421, "text/plain; charset=utf-8", text);
    } else {
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
  conn_t *c = conn_of(conn);
  (void)cls;
  if (c != NULL && !c->waiting) { /* kept alive: its next request has a deadline too */
    c->waiting = 1;
    c->since_ms = mqproc__now_ms();
  }
  if (r == NULL)
    return;
  if (r->suspended) /* (MHD ends suspended connections only when it stops) */
    unlink_waiting(r);
  if (r->done != NULL)
    r->done(r->done_ud, why == MHD_REQUEST_TERMINATED_COMPLETED_OK);
  if (r->response != NULL)
    MHD_destroy_response(r->response);
  if (r->form != NULL)
    MHD_destroy_post_processor(r->form);
  free(r->body);
  for (int i = 0; i < r->nfields; i++) {
    free(r->names[i]);
    free(r->values[i]);
  }
  free(r->names);
  free(r->values);
  free(r->path);
  free(r);
  *con_cls = NULL;
}

void mqproc__http_on_done(mqproc__http_req_t *req, mqproc__http_done_cb cb, void *ud) {
  req->done = cb;
  req->done_ud = ud;
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
  /* ENCODE_ANY: a bare null (OCR-D's /result_callback answer) or string is a body too */
  char *json = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY), *text = NULL;
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
const char *mqproc__http_body(const mqproc__http_req_t *r, size_t *len) {
  *len = r->body_len;
  return r->body;
}

void mqproc__http_set_body_max(mqproc__http_t *h, size_t max) {
  h->body_max = max;
}

void mqproc__http_set_form_max(mqproc__http_t *h, int fields, size_t value_max, size_t body_max) {
  h->form_fields = fields;
  h->form_value_max = value_max;
  h->form_body_max = body_max;
  h->form_with_body = 1;
}

void mqproc__http_peer(const mqproc__http_req_t *r, char *out, size_t n) {
  const union MHD_ConnectionInfo *ci;
  const struct sockaddr *sa;
  if (r->h->unix_path != NULL) { /* a process on this host */
    const conn_t *c = conn_of(r->conn);
    if (c != NULL && c->pid != 0)
      snprintf(out, n, "pid %ld (uid %ld)", (long)c->pid, (long)c->uid);
    else
      snprintf(out, n, "a local process");
    return;
  }
  ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  sa = ci != NULL ? ci->client_addr : NULL;
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

/* The names a Host may give (hosts, and addr's host when it is a name), copied. */
static int names_of(mqproc__http_t *h, const char *addr, const char *const *hosts) {
  size_t n = 0, k = 0, hl = strcspn(addr, ":");
  while (hosts != NULL && hosts[n] != NULL)
    n++;
  if ((h->hosts = calloc(n + 2, sizeof(char *))) == NULL)
    return MQPROC_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(hosts[i]);
    len -= len > 1 && hosts[i][len - 1] == '.'; /* "name." is name */
    if ((h->hosts[k++] = strndup(hosts[i], len)) == NULL)
      return MQPROC_ENOMEM;
  }
  if (addr[0] != '[' && hl > 0 && (h->hosts[k] = strndup(addr, hl)) == NULL)
    return MQPROC_ENOMEM;
  return MQPROC_OK;
}

/* MQPROC_HTTP_HEAD_TIMEOUT_MS (tests, tuning), else the default. */
static int head_timeout_ms(void) {
  const char *v = getenv("MQPROC_HTTP_HEAD_TIMEOUT_MS");
  long ms = v != NULL ? strtol(v, NULL, 10) : 0;
  return ms >= 100 && ms <= 600000 ? (int)ms : MQPROC__HTTP_HEAD_TIMEOUT_MS;
}

static void free_http(mqproc__http_t *h) {
  for (char **p = h->hosts; p != NULL && *p != NULL; p++)
    free(*p);
  free(h->hosts);
  free(h->unix_path);
  free(h);
}

/* ---- Unix sockets ---------------------------------------------------------------------- */

/* Whether a server answers on the socket file at sun (a socket left by a process that died
 * answers no more: ECONNREFUSED). */
static int socket_in_use(const struct sockaddr_un *sun) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), r;
  if (fd < 0)
    return 1;
  r = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
  close(fd);
  return r == 0 || errno != ECONNREFUSED;
}

/* A listening socket bound to path (a stale socket file there is replaced; anything else
 * that is there is left alone and refused), mode mqproc__file_mode(). The fd, or -1 with
 * err. */
static int listen_unix(mqproc__http_t *h, const char *path, char *err) {
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  struct stat st;
  int fd;
  if (path[0] == '\0' || strlen(path) >= sizeof(sun.sun_path))
    return mqproc__err(err, -1, "unix:%.300s: expected a path of 1 to %zu bytes", path,
                       sizeof(sun.sun_path) - 1);
  memcpy(sun.sun_path, path, strlen(path) + 1);
  if (lstat(path, &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return mqproc__err(err, -1, "unix:%.300s: there is a file there that is no socket", path);
    if (socket_in_use(&sun))
      return mqproc__err(err, -1, "unix:%.300s: a server listens there already", path);
    unlink(path); /* a dead server's */
  }
  if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
    return mqproc__err(err, -1, "unix:%.300s: %s", path, strerror(errno));
  if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) != 0 ||
      chmod(path, mqproc__file_mode()) != 0 || lstat(path, &st) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return mqproc__err(err, -1, "unix:%.300s: cannot listen: %s", path, strerror(e));
  }
  h->unix_dev = st.st_dev;
  h->unix_ino = st.st_ino;
  if ((h->unix_path = strdup(path)) == NULL) {
    unlink(path);
    close(fd);
    return mqproc__err(err, -1, "out of memory");
  }
  return fd;
}

/* Removes the socket file if it is still the one this server made. */
static void unlink_unix(const mqproc__http_t *h) {
  struct stat st;
  if (h->unix_path != NULL && lstat(h->unix_path, &st) == 0 && S_ISSOCK(st.st_mode) &&
      st.st_dev == h->unix_dev && st.st_ino == h->unix_ino)
    unlink(h->unix_path);
}

/* MHD on addr (HOST:PORT, or unix:PATH: a socket of ours); NULL with err. */
static struct MHD_Daemon *start_daemon(mqproc__http_t *h, const char *addr, char *err) {
  unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
  struct sockaddr_storage ss;
  struct MHD_Daemon *d;
  int fd = -1;
  if (!strncmp(addr, "unix:", 5)) {
    if ((fd = listen_unix(h, addr + 5, err)) < 0)
      return NULL;
  } else if (resolve(addr, &ss, err) != MQPROC_OK) {
    return NULL;
  } else if (ss.ss_family == AF_INET6) {
    flags |= MHD_USE_IPv6;
  }
  d = fd >= 0
          ? MHD_start_daemon(flags, 0, NULL, NULL, on_access, h, MHD_OPTION_LISTEN_SOCKET, fd,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)MQPROC__HTTP_MAX_CONNECTIONS,
                             MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                             (size_t)32768, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_END)
          : MHD_start_daemon(flags, 0, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR,
                             (struct sockaddr *)&ss, MHD_OPTION_CONNECTION_LIMIT,
                             (unsigned)MQPROC__HTTP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                             10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, h, MHD_OPTION_END);
  if (d == NULL) {
    if (fd >= 0) {
      unlink_unix(h);
      close(fd);
    }
    mqproc__err(err, MQPROC_ESYS, "--http %s: cannot listen (in use, or not an address here)",
                addr);
  }
  return d; /* (MHD closes the socket it was given when it stops) */
}

int mqproc__http_start(mqproc__http_t **out, mqproc__loop_t *loop, const char *addr,
                       const char *const *hosts, mqproc__http_handler handler, void *ud,
                       char *err) {
  mqproc__http_t *h;
  const union MHD_DaemonInfo *info;
  *out = NULL;
  if ((h = calloc(1, sizeof(*h))) == NULL ||
      names_of(h, !strncmp(addr, "unix:", 5) ? "" : addr, hosts) != MQPROC_OK) {
    if (h != NULL)
      free_http(h);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  h->loop = loop;
  h->handler = handler;
  h->ud = ud;
  h->head_timeout_ms = head_timeout_ms();
  h->form_fields = FORM_FIELDS;
  h->form_value_max = FORM_VALUE_MAX;
  h->form_body_max = FORM_BODY_MAX;
  if ((h->d = start_daemon(h, addr, err)) == NULL) {
    int rc = err != NULL && strstr(err, "expected") != NULL ? MQPROC_EINVAL : MQPROC_ESYS;
    free_http(h);
    return rc;
  }
  info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
  h->fd = info != NULL ? info->epoll_fd : -1;
  info = h->unix_path == NULL ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
  h->port = info != NULL ? info->port : 0;
  if (h->fd < 0 || mqproc__loop_io(loop, h->fd, on_readable, h) != MQPROC_OK) {
    MHD_stop_daemon(h->d);
    unlink_unix(h);
    free_http(h);
    return mqproc__err(err, MQPROC_ESYS, "--http %s: cannot watch its epoll fd", addr);
  }
  schedule(h);
  *out = h;
  return MQPROC_OK;
}

int mqproc__http_port(const mqproc__http_t *h) {
  return h->port;
}

int mqproc__http_local(const mqproc__http_t *h, struct sockaddr_storage *out) {
  const union MHD_DaemonInfo *info =
      h->unix_path == NULL ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_LISTEN_FD) : NULL;
  socklen_t len = sizeof(*out);
  memset(out, 0, sizeof(*out));
  if (info == NULL || info->listen_fd < 0 ||
      getsockname(info->listen_fd, (struct sockaddr *)out, &len) != 0)
    return -1;
  return out->ss_family == AF_INET || out->ss_family == AF_INET6 ? 0 : -1;
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
  MHD_stop_daemon(h->d); /* closes every connection: their contexts are freed */
  unlink_unix(h);
  free_http(h);
}
