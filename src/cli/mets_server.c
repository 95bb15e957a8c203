/* `mqproc mets-server`: mqproc's METS server (http/mets_server.h) for one workspace, by
 * hand or started by whatever runs OCR-D processors on that workspace. OCR-D's own
 * processors reach it with --mets-server-url SOCKET (or http://HOST:PORT) as they reach
 * `ocrd workspace -U SOCKET server start`. It runs until DELETE / (OCR-D's `ocrd workspace
 * -U SOCKET server stop`), SIGTERM or SIGINT, saving first; exit 0 then.
 *
 * Started by mqproc's Processing Server (ops/ocrd_mets_servers.c) it is given the job
 * table's key of its workspace (--workspace, repeatable) and the table (MQPROC_DATABASE in
 * its environment, never on its command line), and stops of its own accord, saving first,
 * once its workspace has had no job QUEUED, RUNNING or CACHED on WATCH_IDLE_CHECKS checks in
 * a row (one every MQPROC__METS_CLI_WATCH_MS, on a work thread: the loop never waits on the
 * database), no request for MQPROC__METS_CLI_QUIET_MS, and it has run for
 * MQPROC__METS_CLI_MIN_UP_MS. A database that does not answer keeps it serving. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admin.h"
#include "base/log.h"
#include "base/util.h"
#include "http/mets_server.h"
#include "loop/loop.h"
#include "mqproc/mqproc.h"
#include "ops/ocrd.h"
#include "store/odb.h"

#define MQPROC__METS_CLI_TICK_MS 1000
#define MQPROC__METS_CLI_WATCH_MS 5000   /* between two looks at the job table */
#define MQPROC__METS_CLI_QUIET_MS 10000  /* no request for this long ... */
#define MQPROC__METS_CLI_MIN_UP_MS 30000 /* ... and up this long, before stopping */
#define MQPROC__METS_CLI_KEYS_MAX 16
#define WATCH_IDLE_CHECKS 2
#define EXIT_LOCKED 3 /* another holds the workspace lock */

static const mqproc__opt_t OPTS[] = {
    {.name = "mets", .shrt = 'm', .help = "PATH of the workspace's METS file (required)"},
    {.name = "socket",
     .shrt = 'U',
     .help = "PATH of the Unix socket to serve on (processors: --mets-server-url PATH)"},
    {.name = "listen",
     .help = "HOST:PORT to serve on over TCP instead (port 0: any; processors: "
             "--mets-server-url http://HOST:PORT)"},
    {.name = "save-interval", .help = "ms between saves while changes are unsaved (default 5000)"},
    {.name = "workspace",
     .help = "KEY (repeatable): the job table's name of this workspace; with MQPROC_DATABASE "
             "in the environment, stop once no job of it is queued or running"},
    {.name = "ready-fd",
     .help = "N: once listening, write \"ready\\n\" (TCP: \"ready PORT\\n\") to fd N and close it"},
    {.name = "group-access",
     .env = "MQPROC_GROUP_ACCESS",
     .type = MQPROC__OPT_BOOL,
     .def = "false",
     .help = "make the socket readable and writable by its group (0660; default 0600: its "
             "user's processes only)"},
    {0}};

static const char USAGE[] =
    "Usage: mqproc mets-server --mets PATH (-U|--socket SOCKET | --listen HOST:PORT)\n"
    "                          [--save-interval MS] [--ready-fd N] [--workspace KEY]...\n"
    "OCR-D's METS server for one workspace (the protocol of OCR-D core's `ocrd workspace -U\n"
    "SOCKET server start`): OCR-D processors run with --mets-server-url SOCKET (or\n"
    "http://HOST:PORT) read and change the METS through it. Every change is journaled\n"
    "(.NAME.mqproc-journal beside the METS) before it is acknowledged, so a crash loses none;\n"
    "it holds the workspace lock while it runs (a second server of the workspace exits 3).\n"
    "DELETE / (`ocrd workspace -U SOCKET server stop`), SIGTERM or SIGINT: save, exit 0.\n"
    "With --workspace and MQPROC_DATABASE (the job table) in the environment, it also stops\n"
    "once no job of the workspace has been queued or running for two checks (5 s apart).\n";

typedef struct mcli {
  mqproc__loop_t *loop;
  mqproc__mets_server_t *server;
  int stop_asked;
  /* the watch of the job table (keys[0] == NULL: none) */
  const char *keys[MQPROC__METS_CLI_KEYS_MAX + 1];
  const char *database;
  mqproc__odb_t *db; /* the work thread's, opened there; closed after the loop */
  int checking;      /* a check is on the work thread */
  int busy;          /* its answer: 1, 0, -1 (the database did not answer) */
  int idle_checks;   /* checks in a row that found no job of the workspace */
  int64_t started, next_check;
  char why[512];
} mcli_t;

/* On a work thread: whether the workspace has jobs to run (c->busy). */
static void check_work(void *ud) {
  mcli_t *c = ud;
  if (c->db != NULL && !mqproc__odb_ok(c->db)) {
    mqproc__odb_close(c->db);
    c->db = NULL;
  }
  if (c->db == NULL && (c->db = mqproc__odb_open(c->database, 10000, c->why)) == NULL) {
    c->busy = -1;
    return;
  }
  c->busy = mqproc__mets_workspace_busy(c->db, c->keys, c->why);
}

static void check_done(mqproc__loop_t *loop, void *ud) {
  mcli_t *c = ud;
  (void)loop;
  c->checking = 0;
  if (c->busy < 0) { /* keep serving: the jobs may still come */
    MQPROC__WARN("cannot look at the job table: %s", c->why);
    c->idle_checks = 0;
  } else {
    c->idle_checks = c->busy ? 0 : c->idle_checks + 1;
  }
}

/* Whether the server should stop of its own accord (checked every tick). */
static int should_stop(mcli_t *c, int64_t now) {
  return c->keys[0] != NULL && c->idle_checks >= WATCH_IDLE_CHECKS &&
         now - c->started >= MQPROC__METS_CLI_MIN_UP_MS &&
         now - mqproc__mets_server_last_request(c->server) >= MQPROC__METS_CLI_QUIET_MS;
}

static void on_tick(mqproc__loop_t *loop, void *ud) {
  mcli_t *c = ud;
  int64_t now = mqproc__loop_now(loop);
  if (!c->checking && should_stop(c, now)) {
    MQPROC__INFO("no job of the workspace is queued or running, no request for %d s: "
                 "saving, stopping",
                 MQPROC__METS_CLI_QUIET_MS / 1000);
    mqproc__loop_stop(loop);
    return;
  }
  if (c->keys[0] != NULL && !c->checking && now >= c->next_check) {
    c->next_check = now + MQPROC__METS_CLI_WATCH_MS;
    if (mqproc__loop_work(loop, check_work, check_done, c) == MQPROC_OK)
      c->checking = 1;
  }
  mqproc__loop_timer(loop, MQPROC__METS_CLI_TICK_MS, on_tick, c);
}

static void on_signal(mqproc__loop_t *loop, int signo, void *ud) {
  (void)ud;
  if (signo == SIGTERM || signo == SIGINT) {
    MQPROC__INFO("%s: saving, stopping", strsignal(signo));
    mqproc__loop_stop(loop);
  }
}

static void on_stop(void *ud) { /* DELETE / answered */
  mcli_t *c = ud;
  c->stop_asked = 1;
  mqproc__loop_stop(c->loop);
}

/* A number option in [lo, hi] (def when not given); -1 after printing why not. */
static long num_opt(const args_t *a, const char *name, long def, long lo, long hi) {
  const char *v = mqproc__arg(a, name);
  char *end;
  long n = v != NULL ? strtol(v, &end, 10) : def;
  if (v != NULL && (*v == '\0' || *end != '\0' || n < lo || n > hi)) {
    fprintf(stderr, "mqproc mets-server: --%s: expected a number in [%ld, %ld]\n", name, lo, hi);
    return -1;
  }
  return n;
}

/* Tells the starter it listens: "ready\n" (TCP: "ready PORT\n") on fd, closed. */
static void ready(int fd, int port) {
  char line[32];
  int n = port > 0 ? snprintf(line, sizeof(line), "ready %d\n", port)
                   : snprintf(line, sizeof(line), "ready\n");
  if (fd < 0)
    return;
  signal(SIGPIPE, SIG_IGN); /* (the loop ignores it too) a starter that went away */
  while (write(fd, line, (size_t)n) < 0 && errno == EINTR)
    ;
  close(fd);
}

static int serve(mcli_t *cp, const char *mets, const char *listen, long save_ms, long ready_fd) {
  mcli_t c = *cp;
  char err[MQPROC_ERR_LEN];
  mqproc__mets_server_cfg_t cfg = {.mets = mets,
                                   .listen = listen,
                                   .save_interval_ms = (int)save_ms,
                                   .on_stop = on_stop,
                                   .ud = &c};
  int rc;
  if ((rc = mqproc__loop_new(&c.loop, err)) != MQPROC_OK ||
      (rc = mqproc__mets_server_start(&c.server, c.loop, &cfg, err)) != MQPROC_OK) {
    fprintf(stderr, "mqproc mets-server: %s\n", err);
    mqproc__loop_free(c.loop);
    return rc == MQPROC_ESTATE ? EXIT_LOCKED : rc == MQPROC_EINVAL ? 2 : 1;
  }
  c.started = mqproc__loop_now(c.loop);
  mqproc__loop_on_signal(c.loop, on_signal, &c);
  mqproc__loop_timer(c.loop, MQPROC__METS_CLI_TICK_MS, on_tick, &c);
  ready((int)ready_fd, mqproc__mets_server_port(c.server));
  rc = mqproc__loop_run(c.loop);
  if (mqproc__mets_server_save(c.server, err) != MQPROC_OK) { /* (logged; the journal has it) */
    fprintf(stderr,
            "mqproc mets-server: the last save failed: %s (the journal keeps the "
            "changes: the next start replays them)\n",
            err);
    rc = MQPROC_ESYS;
  }
  mqproc__mets_server_free(c.server);
  mqproc__loop_free(c.loop); /* (joins a check still running) */
  mqproc__odb_close(c.db);
  return rc == MQPROC_OK ? 0 : 1;
}

int mqproc__cmd_mets_server(int argc, char **argv) {
  args_t a;
  const char *mets, *sock, *tcp;
  char *listen = NULL;
  long save_ms, ready_fd;
  mcli_t c = {0};
  int rc, nkeys = 0;
  if ((rc = mqproc__args_parse(&a, OPTS, argc, argv, "mets-server")) != 0 ||
      mqproc__has(&a, "help")) {
    if (rc == 0)
      mqproc__args_usage(USAGE, OPTS);
    return rc;
  }
  mets = mqproc__arg(&a, "mets");
  sock = mqproc__arg(&a, "socket");
  tcp = mqproc__arg(&a, "listen");
  if (a.npos > 0) {
    fprintf(stderr, "mqproc mets-server: unexpected '%s' (see --help)\n", a.pos[0]);
    return 2;
  }
  if (mets == NULL || (sock == NULL) == (tcp == NULL)) {
    fprintf(stderr, "mqproc mets-server: --mets and one of --socket or --listen are required\n");
    return 2;
  }
  if ((save_ms = num_opt(&a, "save-interval", 5000, 10, 3600000)) < 0 ||
      (ready_fd = num_opt(&a, "ready-fd", 1L << 21, 0, 1 << 20)) < 0)
    return 2;
  for (const char *k; (k = mqproc__arg_nth(&a, "workspace", nkeys)) != NULL; nkeys++) {
    if (nkeys == MQPROC__METS_CLI_KEYS_MAX) {
      fprintf(stderr, "mqproc mets-server: at most %d --workspace\n", MQPROC__METS_CLI_KEYS_MAX);
      return 2;
    }
    c.keys[nkeys] = k;
  }
  c.database = getenv("MQPROC_DATABASE");
  if (nkeys > 0 && (c.database == NULL || c.database[0] == '\0')) {
    fprintf(stderr, "mqproc mets-server: --workspace watches the job table: MQPROC_DATABASE "
                    "must name it\n");
    return 2;
  }
  if (ready_fd == 1L << 21) /* not given */
    ready_fd = -1;
  else if (fcntl((int)ready_fd, F_GETFD) < 0) {
    fprintf(stderr, "mqproc mets-server: --ready-fd %ld: not an open fd\n", ready_fd);
    return 2;
  }
  mqproc__log_set_level(MQPROC__LOG_INFO);
  mqproc__log_set_tag("mets-server");
  if ((listen = sock != NULL ? mqproc__asprintf("unix:%s", sock) : mqproc__strdup(tcp)) == NULL)
    return 1;
  rc = serve(&c, mets, listen, save_ms, ready_fd);
  free(listen);
  return rc;
}
