/* `mqproc dashboard`: the status page of the whole fleet from a process that processes
 * nothing (Flower's role): the page of a server's --http (http/dash.h) on a loop of its
 * own, with /healthz (the loop answers) and /readyz (the database answers a ping on the
 * page's reader within 0.9 s; a reader busy with a slow read, or a stalled database, is
 * a 503 by then, never a call left unanswered). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "http/dash.h"
#include "http/http.h"
#include "base/log.h"
#include "loop/loop.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

static const mqproc__opt_t OPTS[] = {
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH (required)"},
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL: queue depths and consumers on the page, and where retry publishes"},
    MQPROC__OPTS_SHARED,
    {.name = "exchange",
     .env = "MQPROC_EXCHANGE",
     .help = "exchange retry publishes to (default ocrd-network-default)"},
    {.name = "http",
     .env = "MQPROC_HTTP",
     .help = "ADDR:PORT to serve on (default 127.0.0.1:9464)"},
    {.name = "http-admin-token",
     .env = "MQPROC_HTTP_ADMIN_TOKEN",
     .help =
         "FILE whose first line is the token (16+ characters, not world-readable) that lets the "
         "page retry, cancel, pause and resume, audited; without it the page is read-only; with it "
         "(or --http-read-token) a job's request and log are shown only to those signed in"},
    {.name = "http-read-token",
     .env = "MQPROC_HTTP_READ_TOKEN",
     .help = "FILE with a token that shows job requests and logs without letting the page act"},
    {.name = "http-host",
     .env = "MQPROC_HTTP_HOST",
     .help = "a name clients reach the page by (repeatable, or comma-separated): other Host names "
             "than IP addresses and localhost get 421"},
    {.name = "http-session-ttl",
     .env = "MQPROC_HTTP_SESSION_TTL",
     .help = "seconds a sign-in lasts (default 43200)"},
    {0}};

static const char USAGE[] =
    "Usage: mqproc dashboard --database URL [--queue URL] [--http ADDR:PORT]\n"
    "                        [--http-admin-token FILE] [--http-read-token FILE]\n"
    "                        [--http-host NAME]... [--http-session-ttl S]\n"
    "The status page of every processor, server and job (the same page as a server's\n"
    "--http), served by a process that takes no jobs. GET /healthz: 200 while it runs;\n"
    "/readyz: 200 while the database answers, else 503 with the reason as JSON.\n"
    "SIGTERM or SIGINT stops it.\n";

#define READY_DEADLINE_MS 900

/* A /readyz call waiting for the ping's answer or its deadline. */
typedef struct ready {
  mqproc__http_req_t *req;
  struct ready *next;
} ready_t;

typedef struct dashboard {
  mqproc__loop_t *loop;
  mqproc__dash_t *dash;
  mqproc__http_t *http;
  ready_t *ready;       /* /readyz calls waiting */
  int nready;           /* how many (at most MQPROC__HTTP_READY_MAX) */
  uint64_t ready_timer; /* their deadline */
  int pinging;          /* a ping is queued or running on the reader (one at a time) */
} dashboard_t;

static void ready_answer(dashboard_t *db, const char *problem) {
  while (db->ready != NULL) {
    ready_t *r = db->ready;
    json_t *reasons = json_array();
    db->ready = r->next;
    db->nready--;
    if (problem != NULL)
      json_array_append_new(reasons, json_sprintf("database: %.300s", problem));
    mqproc__http_reply_ready(r->req, reasons);
    free(r);
  }
  if (db->ready_timer != 0)
    mqproc__loop_timer_cancel(db->loop, db->ready_timer);
  db->ready_timer = 0;
}

static void pinged(void *ud, const char *problem) {
  dashboard_t *db = ud;
  db->pinging = 0;
  ready_answer(db, problem);
}

static void ready_late(mqproc__loop_t *loop, void *ud) {
  dashboard_t *db = ud;
  (void)loop;
  db->ready_timer = 0;
  ready_answer(db, "no answer within 0.9 s (the database, or the page's reader, is busy)");
}

/* /readyz: a ping of the database on the page's reader, the calls that come meanwhile
 * answered with it or at their deadline, whichever comes first. */
static void readyz(dashboard_t *db, mqproc__http_req_t *req) {
  ready_t *r;
  if (db->nready >= MQPROC__HTTP_READY_MAX) { /* a flood of calls holds no more slots */
    mqproc__http_reply_ready(req, json_pack("[s]", "database: too many /readyz calls waiting"));
    return;
  }
  if ((r = calloc(1, sizeof(*r))) == NULL) {
    mqproc__http_reply_text(req, 500, "text/plain", "out of memory\n");
    return;
  }
  r->req = req;
  r->next = db->ready;
  db->ready = r;
  db->nready++;
  if (db->ready_timer == 0)
    db->ready_timer = mqproc__loop_timer(db->loop, READY_DEADLINE_MS, ready_late, db);
  if (!db->pinging) {
    db->pinging = 1;
    mqproc__dash_ping(db->dash, pinged, db);
  }
}

static void handle(void *ud, mqproc__http_req_t *req) {
  dashboard_t *db = ud;
  const char *path = mqproc__http_path(req);
  if (!strcmp(path, "/healthz"))
    mqproc__http_reply_text(req, 200, "text/plain; charset=utf-8", "ok\n");
  else if (!strcmp(path, "/readyz"))
    readyz(db, req);
  else if (!mqproc__dash_handle(db->dash, req))
    mqproc__http_reply_text(req, 404, "text/plain; charset=utf-8",
                            "not found (a dashboard has no /metrics: scrape the servers)\n");
}

/* --http-session-ttl in seconds (0: the default); -1 after printing why not. */
static int session_ttl(const args_t *a) {
  const char *v = mqproc__arg(a, "http-session-ttl");
  char *end;
  long s = v != NULL ? strtol(v, &end, 10) : 0;
  if (v != NULL && (*v == '\0' || *end != '\0' || s < 1 || s > 2592000)) {
    fprintf(stderr, "mqproc dashboard: --http-session-ttl: expected seconds in [1, 2592000]\n");
    return -1;
  }
  return (int)s;
}

static void on_signal(mqproc__loop_t *loop, int signo, void *ud) {
  (void)ud;
  if (signo == SIGTERM || signo == SIGINT) {
    MQPROC__INFO("%s: stopping", strsignal(signo));
    mqproc__loop_stop(loop);
  }
}

int mqproc__cmd_dashboard(int argc, char **argv) {
  args_t a;
  dashboard_t db = {0};
  char err[MQPROC_ERR_LEN], host[256] = "localhost", via[300], title[340];
  mqproc__http_hosts_t hosts;
  const char *addr;
  mqproc__dash_cfg_t cfg;
  mqproc__tls_t tls;
  int rc, ttl;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "dashboard")) != 0)
    return rc;
  if (mqproc__has(&a, "help")) {
    mqproc__args_usage(USAGE, OPTS);
    return 0;
  }
  if (a.npos > 0) {
    fprintf(stderr, "mqproc dashboard: unexpected '%s' (see --help)\n", a.pos[0]);
    return 2;
  }
  if (mqproc__arg(&a, "database") == NULL || mqproc__arg(&a, "database")[0] == '\0') {
    fprintf(stderr, "mqproc dashboard: --database (or MQPROC_DATABASE) is required\n");
    return 2;
  }
  addr = mqproc__arg(&a, "http") != NULL ? mqproc__arg(&a, "http") : "127.0.0.1:9464";
  mqproc__log_set_level(MQPROC__LOG_INFO);
  gethostname(host, sizeof(host) - 1);
  snprintf(via, sizeof(via), "dashboard@%s", host);
  snprintf(title, sizeof(title), "mqproc: the fleet (%s)", via);
  if (mqproc__admin_tls(&a, &tls) < 0 || mqproc__arg_http_hosts(&a, &hosts) < 0 ||
      (ttl = session_ttl(&a)) < 0)
    return 2;
  cfg = (mqproc__dash_cfg_t){.database = mqproc__arg(&a, "database"),
                             .queue = mqproc__arg(&a, "queue"),
                             .title = title,
                             .admin_token = mqproc__arg(&a, "http-admin-token"),
                             .read_token = mqproc__arg(&a, "http-read-token"),
                             .session_ttl_s = ttl,
                             .exchange = mqproc__arg(&a, "exchange"),
                             .via = via,
                             .tls = tls};
  if ((rc = mqproc__loop_new(&db.loop, err)) != MQPROC_OK ||
      (rc = mqproc__dash_new(&db.dash, db.loop, &cfg, err)) != MQPROC_OK ||
      (rc = mqproc__http_start(&db.http, db.loop, addr, hosts.names, handle, &db, err)) !=
          MQPROC_OK) {
    fprintf(stderr, "mqproc dashboard: %s\n", err);
    mqproc__dash_free(db.dash);
    mqproc__loop_free(db.loop);
    return rc == MQPROC_ENOMEM || rc == MQPROC_ESYS ? 1 : 2;
  }
  mqproc__loop_on_signal(db.loop, on_signal, &db);
  MQPROC__INFO("serving the status page on %s (port %d) for the whole fleet%s", addr,
               mqproc__http_port(db.http),
               cfg.admin_token != NULL ? ", with the admin token's actions" : ", read-only");
  rc = mqproc__loop_run(db.loop);
  ready_answer(&db, "stopping");
  mqproc__dash_stop(db.dash);
  mqproc__http_stop(db.http);
  mqproc__loop_free(db.loop); /* joins the reader */
  mqproc__dash_free(db.dash);
  return rc == MQPROC_OK ? 0 : 1;
}
