/* A server's setup steps that stand alone: the job store opened (retried at start while
 * the database is away, a stop signal honoured meanwhile), the runner made for the
 * processor (a thread pool, worker processes or a command), the broker (a table queue
 * made with the store when both are one database), the sender-facing limits read.
 * server.c's setup() calls them in order. */
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/argv.h"
#include "net/callback.h"
#include "base/log.h"
#include "runner/ocrd_argv.h"
#include "server/server.h"
#include "store/queue.h"
#include "base/util.h"

void mqproc__server_setup_window(mqproc__server_t *srv) {
  const mqproc__config_t *cfg = srv->cfg;
  srv->window.claim_ahead = cfg->claim_ahead >= 0             ? cfg->claim_ahead
                            : srv->broker->klass->claim_ahead ? cfg->concurrency
                                                              : 0;
  /* (not with --max-jobs-per-child: a window deeper than the jobs left would run more) */
  srv->window.depth_auto = mqproc__broker_can_resize(srv->broker) && !cfg->prefetch_given &&
                           cfg->claim_ahead < 0 && cfg->max_jobs_per_child == 0;
  /* a backend whose queues are directories: a message makes one only where the operator
   * said which names may be made; else results go to queues that exist */
  srv->declare_results =
      cfg->declare_result_queues &&
      (!srv->broker->klass->declare_needs_pattern || cfg->result_queue_pattern != NULL);
}

int mqproc__server_make_broker(mqproc__server_t *srv, const mqproc__broker_events_t *ev,
                               char *err) {
  const char *url = srv->cfg->queue_url;
  if (!mqproc__queue_is_table_url(url))
    return mqproc__broker_new(&srv->broker, url, &srv->topo, ev, err);
  /* a table queue in the job store's own database shares its connection and its rounds:
   * a job's queue statements commit with its writes */
  return mqproc__broker_table_new(&srv->broker, url,
                                  strcmp(url, srv->cfg->database) == 0 ? srv->store : NULL,
                                  srv->loop, srv->cfg->migrate, &srv->topo, ev, err);
}

int mqproc__server_open_store(mqproc__server_t *srv, char *err) {
  char masked[512];
  sigset_t stop;
  int sig;
  int rc =
      mqproc__store_new(&srv->store, srv->cfg->database, srv->loop, srv->cfg->database_pooler, err);
  for (int tries = 0; rc == MQPROC_OK; tries++) {
    if (srv->cfg->migrate)
      rc = mqproc__store_migrate(srv->store, err);
    if (rc == MQPROC_OK)
      rc = mqproc__store_open(srv->store, err);
    if (rc != MQPROC_ESTORE_CONNECT || tries >= 60)
      break;
    mqproc__mask_secret(srv->cfg->database, masked, sizeof(masked));
    MQPROC__WARN("%s (%s); retrying in 1 s", err, masked);
    rc = MQPROC_OK;
    /* the loop's signalfd does not run yet: a stop signal ends the wait here */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if ((sig = sigtimedwait(&stop, NULL, &(struct timespec){1, 0})) > 0) {
      srv->stopped_at_start = 1;
      return mqproc__err(err, MQPROC_ESTORE_CONNECT, "%s while waiting for the database",
                         strsignal(sig));
    }
  }
  return rc;
}

int mqproc__server_make_runner(mqproc__server_t *srv, const mqproc_processor_t *proc, char *err) {
  mqproc__proc_opts_t opts;
  char **argv;
  int argc, rc;
  /* which jobs it takes: a C processor named ocrd-* is OCR-D's, as a command is that gets
   * OCR-D's arguments (any other takes jobs that name no workspace: docs/protocol.md) */
  srv->ocrd_processor = proc != NULL && mqproc__ocrd_is_processor(proc->name);
  if (proc != NULL && srv->cfg->isolation == MQPROC__ISOLATION_PROCESS)
    return mqproc__runner_worker_new(&srv->runner, srv->loop, proc, srv->cfg->concurrency,
                                     srv->cfg->pass_env, err);
  if (proc != NULL) {
    if (srv->cfg->time_limit_s > 0)
      MQPROC__WARN("--time-limit cannot stop a processing function on a thread; it applies with "
                   "--isolation=process");
    return mqproc__runner_thread_new(&srv->runner, proc, srv->loop, srv->cfg->concurrency, err);
  }
  if ((rc = mqproc__argv_split(srv->cfg->exec, &argv, &argc, err)) != MQPROC_OK)
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.400s", err);
  opts.ocrd_cli =
      srv->cfg->ocrd_cli == MQPROC__OCRD_CLI_TRUE ||
      (srv->cfg->ocrd_cli == MQPROC__OCRD_CLI_AUTO && mqproc__ocrd_is_processor(argv[0]));
  opts.ocrd_log_level = srv->cfg->ocrd_log_level;
  opts.ocrd_check = srv->cfg->ocrd_check_output;
  opts.pass_env = srv->cfg->pass_env;
  srv->needs_mets = opts.ocrd_cli;
  srv->ocrd_processor = opts.ocrd_cli;
  if (opts.ocrd_cli)
    MQPROC__INFO("running %s with OCR-D's processor arguments", argv[0]);
  rc = mqproc__runner_proc_new(&srv->runner, argv, &opts, err);
  mqproc__argv_free(argv);
  return rc;
}

/* The sender-facing limits: callback address ranges and the result queue pattern. */
int mqproc__server_setup_limits(mqproc__server_t *srv, const mqproc__config_t *cfg, char *err) {
  char why[MQPROC_ERR_LEN], *anchored;
  int rc;
  if (mqproc__cidr_list_parse((const char *const *)cfg->callback_allow, &srv->callback_allow,
                              why) != MQPROC_OK)
    return mqproc__err(err, MQPROC_ECONFIG, "--callback-allow: %s", why);
  if (mqproc__cidr_list_parse((const char *const *)cfg->callback_deny, &srv->callback_deny, why) !=
      MQPROC_OK)
    return mqproc__err(err, MQPROC_ECONFIG, "--callback-deny: %s", why);
  if (cfg->result_queue_pattern == NULL)
    return MQPROC_OK;
  /* the whole name must match, not a part of it */
  if ((anchored = mqproc__asprintf("^(%s)$", cfg->result_queue_pattern)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  rc = regcomp(&srv->result_queue_re, anchored, REG_EXTENDED | REG_NOSUB);
  free(anchored);
  if (rc != 0) {
    regerror(rc, NULL, why, sizeof(why));
    return mqproc__err(err, MQPROC_ECONFIG, "--result-queue-pattern: %s", why);
  }
  srv->has_result_queue_re = 1;
  return MQPROC_OK;
}
