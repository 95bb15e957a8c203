/* A processing server's HTTP endpoint (--http): /metrics from the server's counters,
 * /healthz (the loop answers), /readyz (broker connected with its topology, database
 * answering, not paused or stopping), and the status page (dash.c). */
#include "server/routes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "delivery/delivery.h"
#include "server/fleet.h"
#include "http/dash.h"
#include "http/http.h"
#include "base/log.h"
#include "base/util.h"

#define DEPTH_EVERY_MS 5000
#define READY_DEADLINE_MS 900

struct mqproc__serve {
  mqproc__server_t *srv;
  mqproc__http_t *http;
  mqproc__dash_t *dash;
  long messages, consumers; /* the job queue, from the reader's last passive declare */
  int64_t depth_at;         /* when that read was asked for */
  struct ready *ready;      /* /readyz calls waiting for the database's answer */
  int nready;               /* how many (at most MQPROC__HTTP_READY_MAX) */
  int pinging;              /* a ping is on its way (its answer may come after a deadline) */
  uint64_t ready_timer;     /* the deadline of the waiting calls */
};

/* ---- /readyz ------------------------------------------------------------------------ */

/* /readyz calls wait for one ping of the database at a time, sent through the loop's own
 * store connection, answered together when it answers or at the deadline. */
typedef struct ready {
  mqproc__http_req_t *req;
  json_t *reasons; /* what was not ready when it was asked */
  struct ready *next;
} ready_t;

static void ready_answer(mqproc__serve_t *s, const char *db_problem) {
  while (s->ready != NULL) {
    ready_t *r = s->ready;
    s->ready = r->next;
    s->nready--;
    if (db_problem != NULL)
      json_array_append_new(r->reasons, json_string(db_problem));
    mqproc__http_reply_ready(r->req, r->reasons);
    free(r);
  }
  if (s->ready_timer != 0)
    mqproc__loop_timer_cancel(s->srv->loop, s->ready_timer);
  s->ready_timer = 0;
}

static void ready_late(mqproc__loop_t *loop, void *ud) {
  mqproc__serve_t *s = ud;
  (void)loop;
  s->ready_timer = 0;
  ready_answer(s, "database: no answer within 0.9 s");
}

static void ready_pinged(void *ud, int rc, const char *err) {
  mqproc__serve_t *s = ud;
  char why[300];
  s->pinging = 0;
  mqproc__server_db_seen(s->srv, rc == MQPROC_OK);
  snprintf(why, sizeof(why), "database: %.280s", err != NULL ? err : "unreachable");
  ready_answer(s, rc == MQPROC_OK ? NULL : why);
}

static void readyz(mqproc__serve_t *s, mqproc__http_req_t *req) {
  mqproc__server_t *srv = s->srv;
  ready_t *r;
  if (s->nready >= MQPROC__HTTP_READY_MAX) { /* a flood of calls holds no more slots */
    mqproc__http_reply_ready(req, json_pack("[s]", "database: too many /readyz calls waiting"));
    return;
  }
  if ((r = calloc(1, sizeof(*r))) == NULL) {
    mqproc__http_reply_text(req, 500, "text/plain", "out of memory\n");
    return;
  }
  r->req = req;
  r->reasons = json_array();
  if (!srv->broker_up)
    json_array_append_new(r->reasons, json_string("broker: not connected"));
  if (mqproc__fleet_holds_back(srv->fleet))
    json_array_append_new(r->reasons, json_string("paused by an operator"));
  if (srv->stopping)
    json_array_append_new(r->reasons, json_string("stopping"));
  r->next = s->ready;
  s->ready = r;
  s->nready++;
  /* every call is answered by its deadline, also one that joins a ping sent before an
   * earlier deadline passed (the database stalls): the list was empty, so no timer ran */
  if (s->ready_timer == 0)
    s->ready_timer = mqproc__loop_timer(srv->loop, READY_DEADLINE_MS, ready_late, s);
  if (s->pinging) /* the ping on its way answers this call too, if in time */
    return;
  s->pinging = 1;
  if (mqproc__store_ping(srv->store, ready_pinged, s) != MQPROC_OK) {
    s->pinging = 0;
    ready_answer(s, "database: cannot ask");
  }
}

/* ---- /metrics ----------------------------------------------------------------------- */

static void depth_read(void *ud, long messages, long consumers) {
  mqproc__serve_t *s = ud;
  s->messages = messages;
  s->consumers = consumers;
}

static void metrics(mqproc__serve_t *s, mqproc__http_req_t *req) {
  mqproc__server_t *srv = s->srv;
  mqproc__inflight_status_t st;
  mqproc__metrics_now_t now;
  char *text;
  size_t len;
  mqproc__inflight_status(&srv->inflight, &st);
  now =
      (mqproc__metrics_now_t){.processor = srv->processor,
                              .broker_reconnects = srv->connections > 1 ? srv->connections - 1 : 0,
                              .in_flight = st.held,
                              .concurrency = srv->cfg->concurrency,
                              .paused = mqproc__fleet_holds_back(srv->fleet),
                              .draining = srv->stopping,
                              .broker_up = srv->broker_up,
                              .broker_blocked = srv->host.broker_blocked,
                              .db_up = srv->db_ok,
                              .queue_messages = s->messages,
                              .queue_consumers = s->consumers,
                              .now_ms = mqproc__now_ms()};
  text = mqproc__metrics_render(&srv->metrics, &now, &len);
  if (text == NULL)
    mqproc__http_reply_text(req, 500, "text/plain", "out of memory\n");
  else
    mqproc__http_reply(req, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
  /* the queue's depth for the next scrape: read off the loop, at most every 5 s */
  if (now.now_ms - s->depth_at >= DEPTH_EVERY_MS) {
    s->depth_at = now.now_ms;
    mqproc__dash_depth(s->dash, srv->processor, depth_read, s);
  }
}

static void handle(void *ud, mqproc__http_req_t *req) {
  mqproc__serve_t *s = ud;
  const char *path = mqproc__http_path(req);
  if (!strcmp(path, "/metrics"))
    metrics(s, req);
  else if (!strcmp(path, "/healthz"))
    mqproc__http_reply_text(req, 200, "text/plain; charset=utf-8", "ok\n");
  else if (!strcmp(path, "/readyz"))
    readyz(s, req);
  else if (!mqproc__dash_handle(s->dash, req))
    mqproc__http_reply_text(req, 404, "text/plain; charset=utf-8", "not found\n");
}

int mqproc__serve_start(mqproc__server_t *srv, char *err) {
  mqproc__serve_t *s;
  char title[300];
  mqproc__dash_cfg_t dc;
  int rc;
  if (srv->cfg->http == NULL || srv->cfg->http[0] == '\0')
    return MQPROC_OK;
  if ((s = calloc(1, sizeof(*s))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  s->srv = srv;
  s->messages = s->consumers = -1;
  snprintf(title, sizeof(title), "mqproc: %.100s (%.150s)", srv->processor, srv->worker_id);
  dc = (mqproc__dash_cfg_t){.database = srv->cfg->database,
                            .queue = srv->cfg->queue_url,
                            .tls = {.ca = srv->cfg->tls_ca,
                                    .cert = srv->cfg->tls_cert,
                                    .key = srv->cfg->tls_key,
                                    .verify = srv->cfg->tls_verify},
                            .title = title,
                            .admin_token = srv->cfg->http_admin_token,
                            .read_token = srv->cfg->http_read_token,
                            .session_ttl_s = srv->cfg->http_session_ttl_s,
                            .exchange = srv->cfg->exchange,
                            .via = srv->worker_id,
                            .metrics = 1};
  if ((rc = mqproc__dash_new(&s->dash, srv->loop, &dc, err)) != MQPROC_OK ||
      (rc = mqproc__http_start(&s->http, srv->loop, srv->cfg->http,
                               (const char *const *)srv->cfg->http_hosts, handle, s, err)) !=
          MQPROC_OK) {
    mqproc__dash_free(s->dash);
    free(s);
    return rc == MQPROC_ENOMEM ? rc : MQPROC_ECONFIG;
  }
  srv->http = s;
  MQPROC__INFO("serving /metrics, /healthz, /readyz and the status page on %s (port %d)",
               srv->cfg->http, mqproc__http_port(s->http));
  return MQPROC_OK;
}

void mqproc__serve_stop(mqproc__server_t *srv) {
  if (srv->http == NULL)
    return;
  ready_answer(srv->http, "stopping");
  mqproc__dash_stop(srv->http->dash);
  mqproc__http_stop(srv->http->http);
  srv->http->http = NULL;
}

void mqproc__serve_free(mqproc__server_t *srv) {
  if (srv->http == NULL)
    return;
  mqproc__http_stop(srv->http->http);
  mqproc__dash_free(srv->http->dash);
  free(srv->http);
  srv->http = NULL;
}
