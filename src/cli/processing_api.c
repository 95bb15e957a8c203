/* `mqproc processing-api`: OCR-D's Processing Server API (http/ocrd_api.h) served by a
 * process that takes no jobs, on the same job store and queue as the servers, so OCR-D's
 * own client (`ocrd network client …`) and anything written against the Processing Server
 * work against an mqproc deployment; MongoDB's part is the job table's (docs/ocrd.md).
 * /healthz: 200 while it runs; /readyz: 200 while the store answers. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admin.h"
#include "base/log.h"
#include "base/util.h"
#include "net/callback.h"
#include "http/http.h"
#include "http/ocrd_api.h"
#include "loop/loop.h"
#include "mqproc/mqproc.h"

#define SCHEMA_NEEDED 9

static const mqproc__opt_t OPTS[] = {
    {.name = "queue",
     .env = "MQPROC_QUEUE",
     .help = "AMQP URL of the broker, or dir:///SPOOL (required): where jobs are published"},
    {.name = "database",
     .env = "MQPROC_DATABASE",
     .help = "job store: postgresql://... or sqlite:///PATH (required; schema 9: mqproc migrate)"},
    MQPROC__OPTS_SHARED,
    {.name = "exchange",
     .env = "MQPROC_EXCHANGE",
     .help = "exchange jobs are published to (default ocrd-network-default)"},
    {.name = "http",
     .env = "MQPROC_HTTP",
     .help = "ADDR:PORT to serve on (default 127.0.0.1:8000)"},
    {.name = "http-host",
     .env = "MQPROC_HTTP_HOST",
     .help = "a name clients reach the API by (repeatable): other Host names than IP addresses "
             "and localhost get 421"},
    {.name = "internal-callback-url",
     .env = "MQPROC_INTERNAL_CALLBACK_URL",
     .help = "base URL the servers reach this API at (ps_config.yml's internal_callback_url; "
             "/result_callback is added; default http://ADDR:PORT of --http, the host name for "
             "0.0.0.0)"},
    {.name = "ocrd-tool",
     .help = "FILE: ocrd-tool descriptions (an ocrd-tool.json, or ocrd-all-tool.json's "
             "{name: tool}) for processors whose servers store none (repeatable)"},
    {.name = "workspace-root",
     .env = "MQPROC_WORKSPACE_ROOT",
     .help = "DIR: a job's workspace_id W is DIR/W/mets.xml (as the servers' --workspace-root)"},
    {.name = "http-admin-token",
     .env = "MQPROC_HTTP_ADMIN_TOKEN",
     .help = "FILE whose first line is a token (16+ characters, not world-readable) that the "
             "submitting routes then need as Authorization: Bearer TOKEN"},
    {.name = "http-read-token",
     .env = "MQPROC_HTTP_READ_TOKEN",
     .help = "FILE whose first line is a token (as --http-admin-token's) that every reading "
             "route then needs (or the admin token); without it, while --http-admin-token is "
             "set, a job's log and its log_file_path need a token"},
    {.name = "callback-allow",
     .env = "MQPROC_CALLBACK_ALLOW",
     .help = "CIDR[,CIDR...]: addresses a workflow_callback_url may reach even when denied "
             "(repeatable; when given, only these)"},
    {.name = "callback-deny",
     .env = "MQPROC_CALLBACK_DENY",
     .help = "CIDR[,CIDR...]: addresses a workflow_callback_url may not reach, beside the "
             "ones always refused (repeatable)"},
    {.name = "max-body", .help = "largest request body in bytes (default 1048576)"},
    {.name = "sweep-interval",
     .help = "ms between release sweeps: waiting jobs whose holder ended are released even "
             "when no callback came (default 2000)"},
    {.name = "callback-timeout-ms",
     .env = "MQPROC_CALLBACK_TIMEOUT_MS",
     .help = "timeout of one workflow callback POST (default 10000)"},
    MQPROC__OPTS_METS_SERVERS,
    {0}};

static const char USAGE[] =
    "Usage: mqproc processing-api --queue URL --database URL [--http ADDR:PORT]\n"
    "                             [--ocrd-tool FILE]... [--workspace-root DIR]\n"
    "                             [--http-admin-token FILE] [--http-read-token FILE]\n"
    "                             [--callback-allow CIDR]... [--callback-deny CIDR]...\n"
    "                             [--internal-callback-url URL]\n"
    "OCR-D's Processing Server API (GET /processor, POST /processor/run/P, GET\n"
    "/processor/job/ID, /processor/log/ID, POST /result_callback, /workflow...) over the\n"
    "job table, from a process that takes no jobs: jobs are rows from their submission\n"
    "(QUEUED, or CACHED while a page lock or a dependency holds them), locks and\n"
    "dependencies live in the database. GET /healthz, /readyz. SIGTERM or SIGINT stops it.\n";

typedef struct papi {
  mqproc__loop_t *loop;
  mqproc__api_t *api;
  mqproc__http_t *http;
  mqproc__http_req_t *ready[MQPROC__HTTP_READY_MAX];
  int nready, pinging;
} papi_t;

static void pinged(void *ud, const char *problem) {
  papi_t *p = ud;
  p->pinging = 0;
  while (p->nready > 0) {
    json_t *reasons = json_array();
    if (problem != NULL)
      json_array_append_new(reasons, json_sprintf("database: %.300s", problem));
    mqproc__http_reply_ready(p->ready[--p->nready], reasons);
  }
}

static void handle(void *ud, mqproc__http_req_t *req) {
  papi_t *p = ud;
  const char *path = mqproc__http_path(req);
  if (!strcmp(path, "/healthz")) {
    mqproc__http_reply_text(req, 200, "text/plain; charset=utf-8", "ok\n");
  } else if (!strcmp(path, "/readyz")) {
    if (p->nready == MQPROC__HTTP_READY_MAX) {
      mqproc__http_reply_ready(req, json_pack("[s]", "database: too many /readyz calls waiting"));
      return;
    }
    p->ready[p->nready++] = req;
    if (!p->pinging) {
      p->pinging = 1;
      mqproc__api_ping(p->api, pinged, p);
    }
  } else if (!mqproc__api_handle(p->api, req)) {
    mqproc__http_reply_text(req, 404, "application/json", "{\"detail\":\"Not Found\"}\n");
  }
}

static void on_signal(mqproc__loop_t *loop, int signo, void *ud) {
  (void)ud;
  if (signo == SIGTERM || signo == SIGINT) {
    MQPROC__INFO("%s: stopping", strsignal(signo));
    mqproc__loop_stop(loop);
  }
}

/* Adds the tools of one --ocrd-tool file to tools; -1 after printing why not. */
static int read_tools(const char *path, json_t *tools) {
  json_error_t je;
  json_t *doc = json_load_file(path, JSON_REJECT_DUPLICATES, &je), *list, *v;
  const char *k;
  if (doc == NULL) {
    fprintf(stderr, "mqproc processing-api: --ocrd-tool %s: %s (line %d)\n", path, je.text,
            je.line);
    return -1;
  }
  list = json_is_object(json_object_get(doc, "tools")) ? json_object_get(doc, "tools") : doc;
  json_object_foreach(list, k, v) {
    if (!json_is_object(v)) {
      fprintf(stderr, "mqproc processing-api: --ocrd-tool %s: '%s' is not a tool description\n",
              path, k);
      json_decref(doc);
      return -1;
    }
    json_object_set(tools, k, v);
  }
  json_decref(doc);
  return 0;
}

/* Whether the store has the API's tables (schema 9); else says how to get them. */
static int schema_ok(const char *url) {
  char err[512], masked[512];
  mqproc__odb_t *db = mqproc__odb_open(url, 10000, err);
  mqproc__ores_t *r;
  int version = 0;
  if (db == NULL) {
    mqproc__mask_secret(url, masked, sizeof(masked));
    fprintf(stderr, "mqproc processing-api: cannot connect to %s: %s", masked, err);
    return 0;
  }
  if ((r = mqproc__odb_q(db, "SELECT max(version) FROM mqproc_schema_migrations", NULL, 0, NULL,
                         err)) != NULL)
    version = atoi(mqproc__ores_get(r, 0, 0));
  mqproc__ores_free(r);
  mqproc__odb_close(db);
  if (version < SCHEMA_NEEDED)
    fprintf(stderr,
            "mqproc processing-api: the job store's schema is version %d; the API needs %d: run "
            "`mqproc migrate --database ...`\n",
            version, SCHEMA_NEEDED);
  return version >= SCHEMA_NEEDED;
}

/* The internal callback URL: --internal-callback-url, else http://ADDR:PORT of --http (the
 * host's name for a wildcard address), with /result_callback. */
static char *result_url(const args_t *a, const char *addr, int port) {
  const char *given = mqproc__arg(a, "internal-callback-url");
  char host[256] = "localhost";
  size_t hl = strcspn(addr, ":");
  if (given != NULL) {
    size_t n = strlen(given);
    while (n > 0 && given[n - 1] == '/')
      n--;
    return mqproc__asprintf("%.*s/result_callback", (int)n, given);
  }
  if (addr[0] == '[' || !strncmp(addr, "0.0.0.0", hl) || hl == 0)
    gethostname(host, sizeof(host) - 1);
  else
    snprintf(host, sizeof(host), "%.*s", (int)hl, addr);
  return mqproc__asprintf("http://%s:%d/result_callback", host, port);
}

/* A number option in [lo, hi] (def when not given); -1 after printing why not. */
static long num_opt(const args_t *a, const char *name, long def, long lo, long hi) {
  const char *v = mqproc__arg(a, name);
  char *end;
  long n = v != NULL ? strtol(v, &end, 10) : def;
  if (v != NULL && (*v == '\0' || *end != '\0' || n < lo || n > hi)) {
    fprintf(stderr, "mqproc processing-api: --%s: expected a number in [%ld, %ld]\n", name, lo, hi);
    return -1;
  }
  return n;
}

static int serve(const args_t *a, mqproc__api_cfg_t *cfg, const char *addr, long body_max) {
  papi_t p = {0};
  struct sockaddr_storage self; /* a workflow callback to the API itself is refused */
  char err[MQPROC_ERR_LEN], *url = NULL;
  mqproc__http_hosts_t hosts;
  int rc;
  if (mqproc__arg_http_hosts(a, &hosts) < 0)
    return 2;
  if ((rc = mqproc__loop_new(&p.loop, err)) != MQPROC_OK ||
      (rc = mqproc__http_start(&p.http, p.loop, addr, hosts.names, handle, &p, err)) != MQPROC_OK ||
      (url = result_url(a, addr, mqproc__http_port(p.http))) == NULL ||
      (cfg->result_url = url, cfg->self = mqproc__http_local(p.http, &self) == 0 ? &self : NULL,
       (rc = mqproc__api_new(&p.api, p.loop, cfg, err)) != MQPROC_OK)) {
    fprintf(stderr, "mqproc processing-api: %s\n",
            url == NULL && rc == MQPROC_OK ? "out of memory" : err);
    mqproc__http_stop(p.http);
    mqproc__loop_free(p.loop);
    free(url);
    return rc == MQPROC_ENOMEM || rc == MQPROC_ESYS ? 1 : 2;
  }
  mqproc__http_set_body_max(p.http, (size_t)body_max);
  mqproc__loop_on_signal(p.loop, on_signal, &p);
  MQPROC__INFO("serving OCR-D's Processing Server API on %s (port %d); workers call back %s%s",
               addr, mqproc__http_port(p.http), url,
               cfg->admin_token != NULL ? "; submitting needs the token" : "");
  rc = mqproc__loop_run(p.loop);
  mqproc__api_stop(p.api);
  pinged(&p, "stopping");
  mqproc__http_stop(p.http);
  mqproc__loop_free(p.loop); /* joins the worker */
  mqproc__api_free(p.api);
  free(url);
  return rc == MQPROC_OK ? 0 : 1;
}

/* --callback-allow or --callback-deny (repeatable) into *l; 0, or -1 said. */
static int cidr_opt(const args_t *a, const char *name, mqproc__cidr_list_t *l) {
  const char *items[33];
  char err[MQPROC_ERR_LEN];
  int n = 0;
  while (n < 32 && (items[n] = mqproc__arg_nth(a, name, n)) != NULL)
    n++;
  items[n] = NULL;
  if (mqproc__arg_nth(a, name, n) != NULL) {
    fprintf(stderr, "mqproc processing-api: --%s: at most 32 (each a comma-separated list)\n",
            name);
    return -1;
  }
  if (mqproc__cidr_list_parse(items, l, err) != MQPROC_OK) {
    fprintf(stderr, "mqproc processing-api: --%s: %s\n", name, err);
    return -1;
  }
  return 0;
}

int mqproc__cmd_processing_api(int argc, char **argv) {
  args_t a;
  json_t *tools = json_object();
  mqproc__api_cfg_t cfg;
  mqproc__tls_t tls;
  mqproc__mets_servers_t mets;
  mqproc__cidr_list_t allow = {0}, deny = {0};
  char program[PATH_MAX], sockets[PATH_MAX];
  const char *v;
  long body_max, sweep_ms, cb_ms;
  int rc;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "processing-api")) != 0 ||
      mqproc__has(&a, "help")) {
    if (rc == 0)
      mqproc__args_usage(USAGE, OPTS);
    json_decref(tools);
    return rc;
  }
  rc = 2;
  if (a.npos > 0)
    fprintf(stderr, "mqproc processing-api: unexpected '%s' (see --help)\n", a.pos[0]);
  else if (mqproc__arg(&a, "database") == NULL || mqproc__arg(&a, "queue") == NULL)
    fprintf(stderr, "mqproc processing-api: --queue and --database are required\n");
  else if ((body_max = num_opt(&a, "max-body", 1048576, 1024, 1L << 30)) < 0 ||
           (sweep_ms = num_opt(&a, "sweep-interval", 2000, 100, 3600000)) < 0 ||
           (cb_ms = num_opt(&a, "callback-timeout-ms", 10000, 1, 3600000)) < 0 ||
           mqproc__admin_tls(&a, &tls) < 0 || cidr_opt(&a, "callback-allow", &allow) < 0 ||
           cidr_opt(&a, "callback-deny", &deny) < 0 ||
           mqproc__admin_mets_servers(&a, &mets, program, sockets) < 0)
    ;
  else
    rc = 0;
  for (int i = 0; rc == 0 && (v = mqproc__arg_nth(&a, "ocrd-tool", i)) != NULL; i++)
    if (read_tools(v, tools) != 0)
      rc = 2;
  mqproc__log_set_level(MQPROC__LOG_INFO);
  if (rc == 0 && !schema_ok(mqproc__arg(&a, "database")))
    rc = 2;
  if (rc == 0 && mqproc__callback_init() != MQPROC_OK) {
    fprintf(stderr, "mqproc processing-api: cannot set up libcurl\n");
    rc = 1;
  }
  if (rc != 0) {
    json_decref(tools);
    mqproc__cidr_list_free(&allow);
    mqproc__cidr_list_free(&deny);
    return rc;
  }
  cfg = (mqproc__api_cfg_t){
      .database = mqproc__arg(&a, "database"),
      .queue = mqproc__arg(&a, "queue"),
      .exchange = mqproc__arg(&a, "exchange"),
      .ws_root = mqproc__arg(&a, "workspace-root"),
      .admin_token = mqproc__arg(&a, "http-admin-token"),
      .read_token = mqproc__arg(&a, "http-read-token"),
      .tools = tools,
      .tls = tls,
      .sweep_ms = (int)sweep_ms,
      .mets = mets,
      .cb = {.timeout_ms = cb_ms, .retries = 3, .backoff_ms = 500, .allow = &allow, .deny = &deny}};
  rc = serve(&a, &cfg, mqproc__arg(&a, "http") != NULL ? mqproc__arg(&a, "http") : "127.0.0.1:8000",
             body_max);
  mqproc__callback_shutdown();
  json_decref(tools);
  mqproc__cidr_list_free(&allow);
  mqproc__cidr_list_free(&deny);
  return rc;
}
