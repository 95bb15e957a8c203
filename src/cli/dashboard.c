/* `mqproc dashboard`: the status page of the whole fleet from a process that processes
 * nothing (Flower's role): the page of a server's --http (http/dash.h) on a loop of its
 * own, with /healthz (the loop answers) and /readyz (the database answers). */
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

static const aopt_t OPTS[] = {
    {"database", 0, 1, "MQPROC_DATABASE",
     "job store: postgresql://... or sqlite:///PATH (required)"},
    {"queue", 0, 1, "MQPROC_QUEUE",
     "AMQP URL: queue depths and consumers on the page, and where retry publishes"},
    MQPROC__URL_FILE_OPTS,
    {"exchange", 0, 1, "MQPROC_EXCHANGE",
     "exchange retry publishes to (default ocrd-network-default)"},
    {"http", 0, 1, "MQPROC_HTTP", "ADDR:PORT to serve on (default 127.0.0.1:9464)"},
    {"http-admin-token", 0, 1, "MQPROC_HTTP_ADMIN_TOKEN",
     "FILE whose first line is the token (16+ characters, not world-readable) that lets the "
     "page retry, cancel, pause and resume, audited; without it the page is read-only"},
    {NULL, 0, 0, NULL, NULL}};

static const char USAGE[] =
    "Usage: mqproc dashboard --database URL [--queue URL] [--http ADDR:PORT]\n"
    "                        [--http-admin-token FILE]\n"
    "The status page of every processor, server and job (the same page as a server's\n"
    "--http), served by a process that takes no jobs. GET /healthz: 200 while it runs;\n"
    "/readyz: 200 while the database answers, else 503 with the reason as JSON.\n"
    "SIGTERM or SIGINT stops it.\n";

typedef struct dashboard {
  mqproc__loop_t *loop;
  mqproc__dash_t *dash;
  mqproc__http_t *http;
} dashboard_t;

static void pinged(void *ud, const char *problem) {
  json_t *reasons = json_array();
  if (problem != NULL)
    json_array_append_new(reasons, json_sprintf("database: %.300s", problem));
  mqproc__http_reply_ready(ud, reasons);
}

static void handle(void *ud, mqproc__http_req_t *req) {
  dashboard_t *db = ud;
  const char *path = mqproc__http_path(req);
  if (!strcmp(path, "/healthz"))
    mqproc__http_reply_text(req, 200, "text/plain; charset=utf-8", "ok\n");
  else if (!strcmp(path, "/readyz"))
    mqproc__dash_ping(db->dash, pinged, req);
  else if (!mqproc__dash_handle(db->dash, req))
    mqproc__http_reply_text(req, 404, "text/plain; charset=utf-8",
                            "not found (a dashboard has no /metrics: scrape the servers)\n");
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
  const char *addr;
  mqproc__dash_cfg_t cfg;
  mqproc__tls_t tls;
  int rc;
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
  if (mqproc__admin_tls(&a, &tls) < 0)
    return 2;
  cfg = (mqproc__dash_cfg_t){.database = mqproc__arg(&a, "database"),
                             .queue = mqproc__arg(&a, "queue"),
                             .title = title,
                             .admin_token = mqproc__arg(&a, "http-admin-token"),
                             .exchange = mqproc__arg(&a, "exchange"),
                             .via = via,
                             .tls = tls};
  if ((rc = mqproc__loop_new(&db.loop, err)) != MQPROC_OK ||
      (rc = mqproc__dash_new(&db.dash, db.loop, &cfg, err)) != MQPROC_OK ||
      (rc = mqproc__http_start(&db.http, db.loop, addr, handle, &db, err)) != MQPROC_OK) {
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
  mqproc__dash_stop(db.dash);
  mqproc__http_stop(db.http);
  mqproc__loop_free(db.loop); /* joins the reader */
  mqproc__dash_free(db.dash);
  return rc == MQPROC_OK ? 0 : 1;
}
