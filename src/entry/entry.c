/* Command line: `processing-server`, `migrate`, `--help`, `--version`, shared by the
 * mqproc program (any command as processor) and by C processors (mqproc_main); a C
 * processor also answers `__mqproc-worker`, the worker process --isolation=process starts
 * (runner/worker.c), and OCR-D's processor options (`-m mets.xml -I A -O B`: one job run
 * here, runner/ocrd_run.c). */
#include "entry/entry.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/callback.h"
#include "base/config.h"
#include "base/log.h"
#include "runner/ocrd_run.h"
#include "server/server.h"
#include "store/store.h"
#include "server/supervisor.h"
#include "base/util.h"

#define MQPROC_API __attribute__((visibility("default")))

/* The options a first start needs, in the order one gives them (the rest:
 * `processing-server --help`). */
static const char *const FIRST_OPTS[] = {"processor", "exec",        "queue", "database",
                                         "migrate",   "concurrency", "http",  NULL};
/* migrate's own options. */
static const char *const MIGRATE_OPTS[] = {
    "database", "database-file", "database-pooler", "group-access", "log-level", "log-format",
    NULL};

/* `mqproc --help`: the zero-server start (a directory queue and an SQLite file) first,
 * then the commands and the options a first start needs. */
static void usage_generic(FILE *out) {
  fprintf(
      out,
      "Usage: mqproc COMMAND [OPTIONS]      (every command has --help)\n\n"
      "Start here: no broker or database server to run, a directory queue and an SQLite "
      "file:\n"
      "  export MQPROC_QUEUE=dir://$PWD/spool MQPROC_DATABASE=sqlite://$PWD/jobs.db\n"
      "  mqproc processing-server --processor hello --exec cat --migrate &\n"
      "  mqproc submit --processor hello --param name=world --wait    # cat's output: jobs log ID\n"
      "  mqproc jobs list\n"
      "On RabbitMQ and PostgreSQL: --queue amqp://USER:PASS@HOST/VHOST --database "
      "postgresql://USER@HOST/DB.\n\n"
      "Commands:\n"
      "  processing-server  consume the jobs of the queue named after --processor, run "
      "them\n"
      "                     with --exec, record every state in the job store, publish "
      "results\n"
      "  migrate            create or upgrade the job tables\n"
      "  submit             publish jobs (--wait for their outcome)\n"
      "  jobs               list, show, log, retry, cancel, purge jobs\n"
      "  dead-letters       list, show, requeue, purge messages the servers gave up on\n"
      "  workers            the processing servers, live or dead\n"
      "  stats              per processor: queue depth, jobs by state, rates, times\n"
      "  pause|resume|drain PROCESSOR: stop taking jobs, take them again, finish and exit\n"
      "  dashboard          the status page of the whole fleet, taking no jobs\n"
      "  results            QUEUE: read (or --peek at) a result queue's messages\n"
      "  processing-api     OCR-D's Processing Server API over the job table\n"
      "  mets-server        OCR-D's METS server for one workspace, journaled\n\n"
      "The options of a first start (all of them: mqproc processing-server --help):\n");
  mqproc__config_help_rows(out, MQPROC__CLI_GENERIC, FIRST_OPTS);
}

static void usage(FILE *out, const char *prog, mqproc__cli_kind_t kind,
                  const mqproc_processor_t *proc) {
  if (kind == MQPROC__CLI_C && proc->description != NULL)
    fprintf(out, "%s: %s\n\n", proc->name, proc->description);
  fprintf(out,
          "Usage: %s processing-server%s --queue=URL --database=URL [OPTIONS]\n"
          "       %s migrate --database=URL\n"
          "       %s --help | --version\n\n"
          "processing-server  consume jobs from the queue named after the processor, run them,\n"
          "                   record every state change in the job store and publish the "
          "results\n"
          "migrate            create or upgrade the job tables (mqproc_jobs, ...)\n\n"
          "--queue: dir:///SPOOL (a directory queue, no server to run) or amqp://...;\n"
          "--database: sqlite:///PATH (a file, no server to run) or postgresql://...\n\n"
          "Options (each also read from its environment variable; the command line wins):\n",
          prog, kind == MQPROC__CLI_GENERIC ? " --processor=NAME --exec='CMD ARGS...'" : "", prog,
          prog);
  mqproc__config_help(out, kind);
  fprintf(out, "\nSignals: SIGTERM/SIGINT stop consuming and let running jobs finish; a second "
               "one stops them now\n(their jobs are released to the queue).\n");
}

static void usage_migrate(FILE *out, const char *prog, mqproc__cli_kind_t kind) {
  fprintf(out,
          "Usage: %s migrate --database=URL\n"
          "Creates the job tables, or upgrades them to this build's version; says how many\n"
          "steps it applied. Safe to run again, and while servers run.\n\nOptions:\n",
          prog);
  mqproc__config_help_rows(out, kind, MIGRATE_OPTS);
}

static int cmd_migrate(mqproc__config_t *cfg) {
  char err[MQPROC_ERR_LEN];
  mqproc__store_t *store = NULL;
  int rc, before = 0, after = 0, steps_before = 0, steps_after = 0;
  if (cfg->database == NULL) {
    fprintf(stderr, "migrate: --database (or MQPROC_DATABASE) is required\n");
    return 2;
  }
  rc = mqproc__store_new(&store, cfg->database, NULL, cfg->database_pooler, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_schema(store, &before, &steps_before, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_migrate(store, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_open(store, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_schema(store, &after, &steps_after, err);
  mqproc__store_destroy(store);
  if (rc != MQPROC_OK) {
    fprintf(stderr, "migrate: %s\n", err);
    return 1;
  }
  if (steps_after == steps_before)
    printf("mqproc schema is up to date: already at version %d, nothing applied\n", after);
  else
    printf("mqproc schema is up to date: applied %d migration%s (version %d to %d)\n",
           steps_after - steps_before, steps_after - steps_before == 1 ? "" : "s", before, after);
  return 0;
}

int mqproc__cli_main(int argc, char **argv, mqproc__cli_kind_t kind,
                     const mqproc_processor_t *proc) {
  const char *prog = kind == MQPROC__CLI_C ? proc->name : "mqproc";
  char err[MQPROC_ERR_LEN];
  mqproc__config_t cfg;
  int rc;
  if (argc < 2) {
    if (kind == MQPROC__CLI_C)
      mqproc__ocrd_run_usage(stderr, proc);
    else
      usage_generic(stderr);
    return 2;
  }
  /* a C processor is an OCR-D processor program too: its options, its --help, --version */
  if (kind == MQPROC__CLI_C && argv[1][0] == '-')
    return mqproc__ocrd_run_main(argc, argv, proc);
  if (kind == MQPROC__CLI_C && !strcmp(argv[1], "help")) {
    mqproc__ocrd_run_usage(stdout, proc);
    return 0;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    if (kind == MQPROC__CLI_GENERIC)
      usage_generic(stdout);
    else
      usage(stdout, prog, kind, proc);
    return 0;
  }
  if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
    printf("mqproc %s\n", MQPROC_VERSION);
    return 0;
  }
  if (kind == MQPROC__CLI_C && !strcmp(argv[1], MQPROC_WORKER_COMMAND))
    return mqproc__runner_worker_main(proc); /* started by runner/worker.c; not in --help */
  if (strcmp(argv[1], "processing-server") != 0 && strcmp(argv[1], "migrate") != 0) {
    fprintf(stderr, "%s: unknown command '%s' (see --help)\n", prog, argv[1]);
    return 2;
  }
  rc = mqproc__config_load(&cfg, kind, argc - 2, argv + 2, err);
  if (cfg.help) { /* `processing-server --help`, whatever else the line says */
    if (!strcmp(argv[1], "migrate"))
      usage_migrate(stdout, prog, kind);
    else
      usage(stdout, prog, kind, proc);
    mqproc__config_free(&cfg);
    return 0;
  }
  if (rc != MQPROC_OK) {
    fprintf(stderr, "%s: %s\n", prog, err);
    mqproc__config_free(&cfg);
    return 2;
  }
  mqproc__log_set_level(cfg.log_level);
  mqproc__log_set_json(cfg.log_format == MQPROC__LOG_JSON);
  mqproc__set_group_access(cfg.group_access); /* before the first file is made */
  if (cfg.warning != NULL)
    MQPROC__WARN("%s", cfg.warning);
  if (!strcmp(argv[1], "migrate")) {
    rc = cmd_migrate(&cfg);
    mqproc__config_free(&cfg);
    return rc;
  }
  if (kind == MQPROC__CLI_C && cfg.processor == NULL)
    cfg.processor = mqproc__strdup(proc->name);
  if (mqproc__config_check_server(&cfg, kind, err) != MQPROC_OK) {
    fprintf(stderr, "%s: %s\n", prog, err);
    mqproc__config_free(&cfg);
    return 2;
  }
  if (getenv(MQPROC__INSTANCE_ENV) != NULL && /* a supervised server: its own --http port */
      mqproc__instance_http(&cfg, atoi(getenv(MQPROC__INSTANCE_ENV)), err) != MQPROC_OK) {
    MQPROC__ERROR("cannot start: %s", err);
    mqproc__config_free(&cfg);
    return 2;
  }
  if (cfg.instances > 1 && getenv(MQPROC__INSTANCE_ENV) == NULL)
    rc = mqproc__supervise(&cfg, argc, argv); /* the children run the line below */
  else
    rc = mqproc__server_run(&cfg, proc); /* libcurl is set up when a callback is due */
  mqproc__callback_shutdown();
  mqproc__config_free(&cfg);
  return rc;
}

/* The library reads only the fields the program's struct has (mqproc/mqproc.h's mqproc_main
 * macro passes its size): the rest stay NULL in this copy, which lives as long as the
 * command runs. */
MQPROC_API int mqproc_main_sized(int argc, char **argv, const mqproc_processor_t *processor,
                                 size_t processor_size) {
  mqproc_processor_t p;
  memset(&p, 0, sizeof(p));
  if (processor != NULL)
    memcpy(&p, processor, processor_size < sizeof(p) ? processor_size : sizeof(p));
  if (p.name == NULL || p.process == NULL) {
    fprintf(stderr, "mqproc_main: the processor needs a name and a process function\n");
    return 2;
  }
  return mqproc__cli_main(argc, argv, MQPROC__CLI_C, &p);
}

/* The entry of programs built against 0.1.0's header, whose struct ends at userdata. */
#undef mqproc_main
MQPROC_API int mqproc_main(int argc, char **argv, const mqproc_processor_t *processor) {
  return mqproc_main_sized(argc, argv, processor, offsetof(mqproc_processor_t, ocrd_tool_json));
}
