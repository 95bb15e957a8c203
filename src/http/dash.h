/* The status page's routes and its reader: the page shows the whole fleet, so it reads
 * the job table (and the broker's queue depths) with blocking clients of its own (the
 * fleet reads of ops/ops.h) on a reader thread, one read at a time, and renders on the
 * loop. The loop's own store connection never waits for a page.
 *
 *   GET  /              processors, workers, last failures, dead letters, the last hour
 *   GET  /jobs          ?state=&processor=&after=   newest first, 50 a page
 *   GET  /jobs/ID       state, error, tries, times, the end of its log; folded: the
 *                       request and every column
 *   GET  /login         the sign-in form (with a token given)
 *
 * With a token given (--http-admin-token, --http-read-token), a job's request and log
 * are shown only to a reader who signed in (or sends a token as Bearer); without one,
 * everyone who reaches the port reads them.
 */
#ifndef MQPROC_HTTP_DASH_H
#define MQPROC_HTTP_DASH_H

#include "broker/broker.h"
#include "http/http.h"
#include "loop/loop.h"

typedef struct mqproc__dash mqproc__dash_t;

typedef struct mqproc__dash_cfg {
  const char *database;    /* PostgreSQL URL */
  const char *queue;       /* AMQP URL for queue depths (and retry); NULL: none */
  const char *title;       /* shown on every page */
  const char *admin_token; /* --http-admin-token FILE; NULL: read-only */
  const char *read_token;  /* --http-read-token FILE; NULL: none */
  int session_ttl_s;       /* --http-session-ttl; <= 0: 12 h */
  const char *exchange;    /* where retry publishes (NULL: ocrd-network-default) */
  const char *via;         /* this server or dashboard, in the audit's detail */
  mqproc__tls_t tls;       /* for an amqps:// queue; its strings must outlive the page */
  int metrics;             /* /metrics is served beside the page (a server's --http) */
} mqproc__dash_cfg_t;

int mqproc__dash_new(mqproc__dash_t **out, mqproc__loop_t *loop, const mqproc__dash_cfg_t *cfg,
                     char *err);
/* Before the HTTP server stops (it answers the waiting requests): reads still queued are
 * dropped, the one running finishes without an answer. NULL is ignored. */
void mqproc__dash_stop(mqproc__dash_t *d);
/* Frees it, after the loop was freed (its reader joined). NULL is ignored. */
void mqproc__dash_free(mqproc__dash_t *d);
/* Answers req when its path is one of the page's (1), else 0. Every POST is the page's:
 *   POST /login, /logout                     sign in with a token (a form): a session of
 *                                            its own; sign out: the session is forgotten
 *   POST /jobs/ID/retry, /jobs/ID/cancel     what `mqproc jobs retry|cancel ID` does
 *   POST /processors/P/pause, .../resume     what `mqproc pause|resume P` does
 * the actions only with the admin token (a session from /login, or Authorization:
 * Bearer), never from another site; each audited as web:ADDR. A script gets JSON, a
 * browser a redirect. An ID or P that is not UTF-8 text names nothing: 400. */
int mqproc__dash_handle(mqproc__dash_t *d, mqproc__http_req_t *req);

/* The depth and consumers of queue, read on the reader thread; cb runs on the loop
 * (messages -1 when unknown). At most one such read waits at a time. */
typedef void (*mqproc__dash_depth_cb)(void *ud, long messages, long consumers);
void mqproc__dash_depth(mqproc__dash_t *d, const char *queue, mqproc__dash_depth_cb cb, void *ud);

/* Whether the database answers (SELECT 1 on the reader's connection); cb runs on the loop
 * with NULL, or why not. */
typedef void (*mqproc__dash_ping_cb)(void *ud, const char *problem);
void mqproc__dash_ping(mqproc__dash_t *d, mqproc__dash_ping_cb cb, void *ud);

#endif
