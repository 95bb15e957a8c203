/* A small HTTP server inside the server's own event loop: libmicrohttpd with its epoll fd
 * watched by the loop (no thread of its own), limits on connections, header and body
 * size and idle time. A handler answers a request at once or later from the loop (the
 * connection waits suspended meanwhile, e.g. while a reader thread queries the database).
 *
 *   mqproc__http_start(&h, loop, "127.0.0.1:9464", handler, ud, err)
 *   handler(ud, req) ... mqproc__http_reply(req, 200, "text/plain", body, len)
 *   mqproc__http_stop(h)
 */
#ifndef MQPROC_HTTP_H
#define MQPROC_HTTP_H

#include <jansson.h>
#include <stddef.h>

#include "loop/loop.h"

typedef struct mqproc__http mqproc__http_t;
typedef struct mqproc__http_req mqproc__http_req_t;

/* Called on the loop once a request is complete (headers and body). It must call
 * mqproc__http_reply() exactly once, now or later (from the loop). */
typedef void (*mqproc__http_handler)(void *ud, mqproc__http_req_t *req);

/* The connection budget: MHD closes a connection beyond MQPROC__HTTP_MAX_CONNECTIONS at
 * once, so what may hold a slot for long is bounded below it, and an answer that comes
 * at once (/healthz, /metrics) always finds one:
 * - connections that have not sent a whole request yet (a new one, or a kept-alive one
 *   between requests): at most MQPROC__HTTP_WAITING_PER_CLIENT from one client address
 *   and MQPROC__HTTP_WAITING_MAX in all; beyond, the oldest are closed, so a slow client
 *   never holds every slot (and /healthz from the same address still gets in). Each has
 *   MQPROC__HTTP_HEAD_TIMEOUT_MS to send its request, however slowly its bytes trickle
 *   (MQPROC_HTTP_HEAD_TIMEOUT_MS sets another, for tests and tuning);
 * - /readyz calls waiting for the database: MQPROC__HTTP_READY_MAX (more get 503 at once);
 * - page requests waiting for the page's reader: MQPROC__HTTP_READS_MAX (more get 503). */
#define MQPROC__HTTP_MAX_CONNECTIONS 128
#define MQPROC__HTTP_WAITING_PER_CLIENT 16
#define MQPROC__HTTP_WAITING_MAX 48
#define MQPROC__HTTP_HEAD_TIMEOUT_MS 10000
#define MQPROC__HTTP_READY_MAX 32
#define MQPROC__HTTP_READS_MAX 32

/* Listens on addr ("HOST:PORT", "[V6]:PORT", or "unix:PATH": a Unix socket made there,
 * mode 0600 (0660 with --group-access), in place of a socket file no server answers on;
 * removed on stop while it is still this server's); MQPROC_EINVAL/ESYS with err. A request
 * whose Host names neither an IP address, nor localhost, nor addr's host, nor one of hosts
 * (NULL-terminated, copied; NULL: none) is refused with 421 (DNS rebinding); a request
 * without Host (HTTP/1.0) is served; on a Unix socket Host is not looked at (a web page
 * cannot reach a socket file; clients send what they like: Python's requests sends the
 * path). The per-client limits count a Unix socket's clients by their process. */
int mqproc__http_start(mqproc__http_t **out, mqproc__loop_t *loop, const char *addr,
                       const char *const *hosts, mqproc__http_handler handler, void *ud, char *err);
/* Answers what waits with 503 and stops listening. NULL is ignored. */
void mqproc__http_stop(mqproc__http_t *h);
/* The port it listens on (for ADDR:0). */
int mqproc__http_port(const mqproc__http_t *h);
struct sockaddr_storage;
/* The address it listens on (port included): 0, or -1 (a Unix socket, or unknown). */
int mqproc__http_local(const mqproc__http_t *h, struct sockaddr_storage *out);

const char *mqproc__http_method(const mqproc__http_req_t *req);
const char *mqproc__http_path(const mqproc__http_req_t *req);
/* A query-string argument; NULL when absent. */
const char *mqproc__http_arg(const mqproc__http_req_t *req, const char *name);
/* A request header, a cookie; NULL when absent. */
const char *mqproc__http_header(const mqproc__http_req_t *req, const char *name);
const char *mqproc__http_cookie(const mqproc__http_req_t *req, const char *name);
/* A field of a POST's form (application/x-www-form-urlencoded, at most 4 KiB, 8 fields);
 * NULL when absent. Any other body is refused (413). */
const char *mqproc__http_form(const mqproc__http_req_t *req, const char *name);
/* The request's body as sent (NUL-terminated; NULL when it had none), for a server that
 * keeps bodies (mqproc__http_set_body_max): a form is still parsed into fields. */
const char *mqproc__http_body(const mqproc__http_req_t *req, size_t *len);
/* Keeps request bodies of up to max bytes (a larger one is answered 413 before the
 * handler sees it); 0, the default: only a small form. */
void mqproc__http_set_body_max(mqproc__http_t *h, size_t max);
/* The forms it parses into fields: at most fields fields, value_max bytes each, body_max in
 * all (defaults 8, 1024, 4096); beyond, 413. A server that keeps bodies and calls this
 * gets both the body and the fields of a form. */
void mqproc__http_set_form_max(mqproc__http_t *h, int fields, size_t value_max, size_t body_max);
/* The client's address, numeric. */
void mqproc__http_peer(const mqproc__http_req_t *req, char *out, size_t n);

/* Calls cb(ud, sent) once req has ended, after its answer was sent (sent 1) or its
 * connection closed first (sent 0), from the loop; req is gone then. */
typedef void (*mqproc__http_done_cb)(void *ud, int sent);
void mqproc__http_on_done(mqproc__http_req_t *req, mqproc__http_done_cb cb, void *ud);

/* Sends the answer: body (malloc()ed, taken; NULL for none) of len bytes. */
void mqproc__http_reply(mqproc__http_req_t *req, int status, const char *content_type, char *body,
                        size_t len);
/* The same with more headers: name, value, ..., NULL. */
void mqproc__http_reply_with(mqproc__http_req_t *req, int status, const char *content_type,
                             char *body, size_t len, const char *const *headers);
/* mqproc__http_reply() with a copy of a NUL-terminated text (and more headers). */
void mqproc__http_reply_text(mqproc__http_req_t *req, int status, const char *content_type,
                             const char *text);
void mqproc__http_reply_text_with(mqproc__http_req_t *req, int status, const char *content_type,
                                  const char *text, const char *const *headers);
/* o (taken) as one line of compact JSON. */
void mqproc__http_reply_json(mqproc__http_req_t *req, int status, json_t *o);
/* A readiness answer: {"ready", "reasons"} (reasons taken), 200 when there are none,
 * else 503. */
void mqproc__http_reply_ready(mqproc__http_req_t *req, json_t *reasons);

#endif
