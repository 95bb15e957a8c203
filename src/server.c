/* The processing server: one loop owning the broker connection, the store connection,
 * timers, signals and the deliveries in flight.
 *
 * Periodic work (tick, every second): pump the broker (this is what keeps heartbeats
 * going while a job runs for hours), renew the leases of running jobs, and end the
 * loop once a requested stop has drained every delivery. Reconnects to the broker run
 * from their own timer with exponential backoff and jitter.
 */
#include "server.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "argv.h"
#include "codec.h"
#include "delivery.h"
#include "ocrd_cli.h"
#include "log.h"
#include "util.h"

/* A publish awaiting its confirm: for a delivery, or a sweeper's republish (job_id). */
typedef struct mqproc__waiter {
  uint64_t seq;
  mqproc__delivery_t *d;
  char *job_id;
  struct mqproc__waiter *next;
} waiter_t;

static void republish_confirmed(mqproc__server_t *srv, const char *job_id, int status);

static void schedule_connect(mqproc__server_t *srv);

/* ---- broker events ------------------------------------------------------------------ */

static void on_message(void *ud, const mqproc__broker_msg_t *m) {
  mqproc__server_t *srv = ud;
  mqproc__delivery_t *d;
  if (!srv->consuming) { /* pushed before our basic.cancel: give it back at once */
    mqproc__broker_nack(srv->broker, m->epoch, m->tag, 1, NULL);
    return;
  }
  d = mqproc__delivery_new(srv, m);
  if (d == NULL) {
    MQPROC__ERROR("out of memory for a delivery; it stays unacked until we reconnect");
    return;
  }
  *mqproc__delivery_next(d) = srv->deliveries;
  srv->deliveries = d;
  mqproc__delivery_start(d);
}

static void on_confirm(void *ud, uint64_t seq, int status) {
  mqproc__server_t *srv = ud;
  waiter_t **pp;
  for (pp = &srv->waiters; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->seq == seq) {
      waiter_t *w = *pp;
      *pp = w->next;
      if (w->d != NULL)
        mqproc__delivery_on_confirm(w->d, status);
      else
        republish_confirmed(srv, w->job_id, status);
      free(w->job_id);
      free(w);
      return;
    }
  }
}

static void clear_declared(mqproc__server_t *srv) {
  for (size_t i = 0; i < srv->n_declared; i++)
    free(srv->declared[i]);
  free(srv->declared);
  srv->declared = NULL;
  srv->n_declared = 0;
}

static void on_down(void *ud, const char *reason) {
  mqproc__server_t *srv = ud;
  MQPROC__ERROR("broker connection lost: %s", reason);
  srv->broker_up = 0;
  srv->consuming = 0;
  if (srv->broker_fd >= 0)
    mqproc__loop_io(srv->loop, srv->broker_fd, NULL, NULL);
  srv->broker_fd = -1;
  clear_declared(srv);
  if (!srv->stopping)
    schedule_connect(srv);
}

static void on_broker_fd(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__server_t *srv = ud;
  (void)loop;
  (void)fd;
  if (srv->broker_up)
    mqproc__broker_pump(srv->broker, NULL);
}

static int prepare(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  (void)loop;
  return srv->broker_up && mqproc__broker_pending(srv->broker) ? 0 : -1;
}

/* ---- connecting --------------------------------------------------------------------- */

static void on_connect_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  char err[MQPROC_ERR_LEN];
  int rc;
  (void)loop;
  srv->reconnect_timer = 0;
  if (srv->stopping)
    return;
  rc = mqproc__broker_connect(srv->broker, err);
  if (rc != MQPROC_OK) {
    MQPROC__ERROR("cannot connect to the broker: %s", err);
    if ((rc == MQPROC_ECONFIG || rc == MQPROC_EBROKER_DECLARE) && srv->deliveries == NULL) {
      MQPROC__ERROR("this will not fix itself; stopping");
      srv->fatal = 1;
      mqproc__loop_stop(srv->loop);
      return;
    }
    srv->reconnects++;
    schedule_connect(srv);
    return;
  }
  srv->broker_up = 1;
  srv->reconnects = 0;
  srv->consuming = 0;
  srv->broker_fd = mqproc__broker_fd(srv->broker);
  mqproc__loop_io(srv->loop, srv->broker_fd, on_broker_fd, srv);
  MQPROC__INFO("connected to the broker: queue '%s', exchange '%s', dead letters to '%s'",
               srv->processor, srv->cfg->exchange, srv->dead_queue);
  mqproc__server_update_consuming(srv, 0);
  mqproc__broker_pump(srv->broker, NULL);
}

void mqproc__server_update_consuming(mqproc__server_t *srv, int extra) {
  int acked = extra, want;
  for (mqproc__delivery_t *d = srv->deliveries; d != NULL; d = *mqproc__delivery_next(d))
    acked += mqproc__delivery_acked(d);
  want = srv->cfg->prefetch - acked;
  if (!srv->broker_up)
    return;
  if (srv->stopping || srv->store_paused)
    want = 0;
  if (srv->consuming && want != srv->consume_prefetch) {
    srv->consuming = 0;
    if (mqproc__broker_cancel(srv->broker, NULL) != MQPROC_OK)
      return; /* the connection broke: on_down follows */
  }
  if (want > 0 && !srv->consuming) {
    if (mqproc__broker_consume(srv->broker, want, NULL) != MQPROC_OK)
      return;
    srv->consuming = 1;
    srv->consume_prefetch = want;
    MQPROC__INFO("consuming from queue '%s' (prefetch %d%s)", srv->processor, want,
                 acked > 0 ? ", the other slots hold early-acked jobs" : "");
  }
}

static void schedule_connect(mqproc__server_t *srv) {
  /* 250 ms doubling to 3 s: consuming resumes within seconds of the broker's return */
  int64_t ms = 250;
  for (int i = 0; i < srv->reconnects && ms < 3000; i++)
    ms *= 2;
  if (ms > 3000)
    ms = 3000;
  ms = ms / 2 + random() % (ms / 2 + 1); /* jitter: [ms/2, ms] */
  if (srv->reconnects == 0)
    ms = 0;
  else
    MQPROC__INFO("reconnecting to the broker in %lld ms", (long long)ms);
  if (srv->reconnect_timer == 0)
    srv->reconnect_timer = mqproc__loop_timer(srv->loop, ms, on_connect_timer, srv);
}

/* ---- services for deliveries -------------------------------------------------------- */

/* Publishes p and keeps a waiter for its confirm: for delivery d, or (d NULL) for the
 * sweeper's republish of job_id. */
static int publish_waiter(mqproc__server_t *srv, mqproc__delivery_t *d, const char *job_id,
                          const mqproc__publish_t *p, char *err) {
  waiter_t *w;
  int rc;
  if (!srv->broker_up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if ((w = mqproc__calloc(1, sizeof(*w))) == NULL ||
      (job_id != NULL && (w->job_id = mqproc__strdup(job_id)) == NULL)) {
    free(w);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  if ((rc = mqproc__broker_publish(srv->broker, p, &w->seq, err)) != MQPROC_OK) {
    free(w->job_id);
    free(w);
    return rc;
  }
  w->d = d;
  w->next = srv->waiters;
  srv->waiters = w;
  return MQPROC_OK;
}

int mqproc__server_publish(mqproc__server_t *srv, mqproc__delivery_t *d, const mqproc__publish_t *p,
                           char *err) {
  return publish_waiter(srv, d, NULL, p, err);
}

int mqproc__server_result_queue(mqproc__server_t *srv, const char *queue, char *err) {
  char **grown;
  int rc;
  if (!srv->cfg->declare_result_queues)
    return MQPROC_OK;
  for (size_t i = 0; i < srv->n_declared; i++)
    if (strcmp(srv->declared[i], queue) == 0)
      return MQPROC_OK;
  if (!srv->broker_up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if ((rc = mqproc__broker_declare_queue(srv->broker, queue, err)) != MQPROC_OK)
    return rc;
  grown = mqproc__realloc(srv->declared, (srv->n_declared + 1) * sizeof(char *));
  if (grown == NULL)
    return MQPROC_OK; /* declared, just not remembered */
  srv->declared = grown;
  if ((grown[srv->n_declared] = mqproc__strdup(queue)) != NULL)
    srv->n_declared++;
  return MQPROC_OK;
}

void mqproc__server_delivery_done(mqproc__server_t *srv, mqproc__delivery_t *d) {
  mqproc__delivery_t **pp;
  for (pp = &srv->deliveries; *pp != NULL; pp = mqproc__delivery_next(*pp)) {
    if (*pp == d) {
      *pp = *mqproc__delivery_next(d);
      break;
    }
  }
  if (mqproc__delivery_abandoned(d))
    srv->abandoned++; /* its thread still uses it: freed when that ends, or at exit */
  else
    mqproc__delivery_free(d);
  if (srv->stopping && srv->deliveries == NULL)
    mqproc__loop_stop(srv->loop);
  else
    mqproc__server_update_consuming(srv, 0); /* an early-acked job's slot may be free */
}

void mqproc__server_abandoned_done(mqproc__server_t *srv, mqproc__delivery_t *d) {
  srv->abandoned--;
  mqproc__delivery_free(d);
}

mqproc__delivery_t *mqproc__server_find_job(mqproc__server_t *srv, const char *job_id,
                                            int attempt) {
  for (mqproc__delivery_t *d = srv->deliveries; d != NULL; d = *mqproc__delivery_next(d))
    if (mqproc__delivery_holds(d, job_id, attempt))
      return d;
  return NULL;
}

/* ---- store outages: stop taking deliveries until the store answers ------------------ */

static void on_store_ping(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  char err[MQPROC_ERR_LEN];
  srv->ping_timer = 0;
  if (mqproc__store_ping(srv->store, err) != MQPROC_OK) {
    srv->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, srv);
    return;
  }
  srv->store_paused = 0;
  srv->store_back_ms = mqproc__now_ms();
  MQPROC__INFO("job store reachable again; renewing leases, recording what waited, consuming "
               "again");
  for (mqproc__delivery_t *d = srv->deliveries, *next; d != NULL; d = next) {
    next = *mqproc__delivery_next(d);
    mqproc__delivery_store_back(d);
  }
  mqproc__server_update_consuming(srv, 0);
}

/* Runs from a timer, not from the failing delivery's own step (which it may requeue). */
static void on_store_pause(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  mqproc__delivery_t *d, *next;
  MQPROC__WARN("job store unreachable: not consuming; deliveries not yet claimed go back to "
               "the queue; running jobs keep running and are recorded when it returns");
  mqproc__server_update_consuming(srv, 0);
  for (d = srv->deliveries; d != NULL; d = next) {
    next = *mqproc__delivery_next(d);
    if (mqproc__delivery_before_claim(d))
      mqproc__delivery_stop(d, 0);
  }
  srv->ping_timer = mqproc__loop_timer(loop, 1000, on_store_ping, srv);
}

void mqproc__server_store_down(mqproc__server_t *srv) {
  if (srv->store_paused)
    return;
  srv->store_paused = 1;
  mqproc__loop_timer(srv->loop, 0, on_store_pause, srv);
}

/* ---- the sweeper: republish jobs whose early-acked holder died ---------------------- */

static void republish_row(void *ud, const char *job_id, const char *request_json,
                          const char *format) {
  mqproc__server_t *srv = ud;
  char err[MQPROC_ERR_LEN], *body = NULL;
  size_t len = 0;
  json_t *doc = json_loads(request_json, 0, NULL);
  int rc = doc == NULL ? mqproc__err(err, MQPROC_ENOMEM, "stored request unreadable")
                       : mqproc__doc_encode(doc, mqproc__format_parse(format), &body, &len, err);
  mqproc__publish_t p = {.exchange = srv->cfg->exchange,
                         .routing_key = srv->processor,
                         .content_type = "application/json", /* as OCR-D labels both */
                         .message_id = job_id,
                         .body = body,
                         .len = len,
                         .persistent = srv->cfg->queue_durable,
                         .mandatory = 1};
  if (rc == MQPROC_OK)
    rc = publish_waiter(srv, NULL, job_id, &p, err);
  if (rc == MQPROC_OK)
    MQPROC__INFO("job %s: its holder is gone; republished the stored request", job_id);
  else
    MQPROC__WARN("job %s: republish failed (%s); the next sweep retries", job_id, err);
  free(body);
  json_decref(doc);
}

static void republish_confirmed(mqproc__server_t *srv, const char *job_id, int status) {
  char err[MQPROC_ERR_LEN];
  if (status != MQPROC_OK) {
    MQPROC__WARN("job %s: republished request not confirmed (%s); the next sweep retries", job_id,
                 mqproc_strerror(status));
    return;
  }
  if (mqproc__store_republished(srv->store, job_id, err) != MQPROC_OK)
    MQPROC__WARN("job %s: %s (a later sweep may send a duplicate; the claim absorbs it)", job_id,
                 err);
}

/* A final job's outcome its dead holder never sent: a delivery without a broker message
 * sends it (result, callbacks) like any other. */
static void send_outbox_row(void *ud, const mqproc__outbox_row_t *r) {
  mqproc__server_t *srv = ud;
  mqproc__delivery_t *d = mqproc__delivery_new_outbox(srv, r);
  if (d == NULL)
    return; /* logged; its grace lease runs out and a later sweep tries again */
  *mqproc__delivery_next(d) = srv->deliveries;
  srv->deliveries = d;
  mqproc__delivery_start(d);
}

static void sweep(mqproc__server_t *srv) {
  char err[MQPROC_ERR_LEN];
  int64_t now = mqproc__now_ms();
  int every_ms = srv->cfg->lease_s * 500, rc;
  if (!srv->broker_up || srv->store_paused || srv->stopping || now - srv->last_sweep_ms < every_ms)
    return;
  /* Right after a database outage every holder's lease may have run out only because it
   * could not renew: give the holders two leases to renew before judging them dead. */
  if (srv->store_back_ms != 0 && now - srv->store_back_ms < srv->cfg->lease_s * 2000LL)
    return;
  srv->last_sweep_ms = now;
  rc = mqproc__store_sweep(srv->store, srv->processor, srv->cfg->lease_s * 1000, 50, republish_row,
                           srv, err);
  if (rc == MQPROC_OK)
    rc = mqproc__store_sweep_outbox(srv->store, srv->processor, srv->cfg->lease_s * 1000, 50,
                                    send_outbox_row, srv, err);
  if (rc != MQPROC_OK)
    MQPROC__WARN("sweep failed: %s", err);
  /* An idle server learns of a database outage here: pausing makes it wait the two
   * leases above once the database is back, like a server that was running a job. A
   * connection dropped while the database stays up (idle timeout, a proxy) is not an
   * outage: the ping reconnects and the next sweep runs as usual. */
  if (rc == MQPROC_ESTORE_CONNECT && mqproc__store_ping(srv->store, err) != MQPROC_OK)
    mqproc__server_store_down(srv);
}

/* ---- periodic work and signals ------------------------------------------------------ */

static void on_tick(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  mqproc__delivery_t *d, *next;
  if (srv->broker_up)
    mqproc__broker_pump(srv->broker, NULL);
  for (d = srv->deliveries; d != NULL; d = next) {
    next = *mqproc__delivery_next(d);
    mqproc__delivery_tick(d);
  }
  sweep(srv);
  if (srv->stopping && srv->deliveries == NULL)
    mqproc__loop_stop(loop);
  srv->tick_timer = mqproc__loop_timer(loop, 1000, on_tick, srv);
}

static void stop_all(mqproc__server_t *srv, int force) {
  mqproc__delivery_t *d = srv->deliveries, *next;
  for (; d != NULL; d = next) {
    next = *mqproc__delivery_next(d);
    mqproc__delivery_stop(d, force);
  }
}

static void on_grace_over(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  (void)loop;
  srv->grace_timer = 0;
  MQPROC__WARN("shutdown grace of %d s over: stopping running jobs (they are requeued)",
               srv->cfg->shutdown_grace_s);
  stop_all(srv, 1);
}

static void on_signal(mqproc__loop_t *loop, int signo, void *ud) {
  mqproc__server_t *srv = ud;
  if (signo == SIGHUP) {
    MQPROC__INFO("SIGHUP ignored");
    return;
  }
  srv->signals++;
  if (srv->signals == 1) {
    MQPROC__INFO("%s: stopping; no new jobs, letting running jobs finish (send it again to "
                 "stop them now)",
                 strsignal(signo));
    srv->stopping = 1;
    mqproc__server_update_consuming(srv, 0);
    stop_all(srv, 0);
    if (srv->deliveries != NULL)
      srv->grace_timer =
          mqproc__loop_timer(loop, srv->cfg->shutdown_grace_s * 1000LL, on_grace_over, srv);
  } else {
    MQPROC__INFO("%s again: stopping running jobs now", strsignal(signo));
    mqproc__loop_timer_cancel(loop, srv->grace_timer);
    srv->grace_timer = 0;
    stop_all(srv, 1);
  }
  if (srv->deliveries == NULL)
    mqproc__loop_stop(loop);
}

/* ---- setup -------------------------------------------------------------------------- */

static int open_store(mqproc__server_t *srv, char *err) {
  int rc = mqproc__store_pg_new(&srv->store, srv->cfg->database, err);
  for (int tries = 0; rc == MQPROC_OK; tries++) {
    if (srv->cfg->migrate)
      rc = mqproc__store_migrate(srv->store, err);
    if (rc == MQPROC_OK)
      rc = mqproc__store_open(srv->store, err);
    if (rc != MQPROC_ESTORE_CONNECT || tries >= 60)
      break;
    MQPROC__WARN("%s; retrying in 1 s", err);
    rc = MQPROC_OK;
    sleep(1);
  }
  return rc;
}

static int make_runner(mqproc__server_t *srv, const mqproc_processor_t *proc, char *err) {
  mqproc__proc_opts_t opts;
  char **argv;
  int argc, rc;
  if (proc != NULL && srv->cfg->isolate_process)
    return mqproc__runner_worker_new(&srv->runner, srv->loop, proc, srv->cfg->prefetch, err);
  if (proc != NULL) {
    if (srv->cfg->time_limit_s > 0)
      MQPROC__WARN("--time-limit cannot stop a processing function on a thread; it applies with "
                   "--isolation=process");
    return mqproc__runner_thread_new(&srv->runner, proc, err);
  }
  if ((rc = mqproc__argv_split(srv->cfg->exec, &argv, &argc, err)) != MQPROC_OK)
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.400s", err);
  opts.ocrd_cli = strcmp(srv->cfg->ocrd_cli, "true") == 0 ||
                  (strcmp(srv->cfg->ocrd_cli, "auto") == 0 && mqproc__ocrd_is_processor(argv[0]));
  opts.ocrd_log_level = srv->cfg->ocrd_log_level;
  srv->needs_mets = opts.ocrd_cli;
  if (opts.ocrd_cli)
    MQPROC__INFO("running %s with OCR-D's processor arguments", argv[0]);
  rc = mqproc__runner_proc_new(&srv->runner, argv, &opts, err);
  mqproc__argv_free(argv);
  return rc;
}

static int setup(mqproc__server_t *srv, const mqproc__config_t *cfg, const mqproc_processor_t *proc,
                 char *err) {
  mqproc__broker_events_t ev = {on_message, on_confirm, on_down, srv};
  char host[64] = "localhost";
  int rc;
  srv->cfg = cfg;
  srv->processor = cfg->processor;
  gethostname(host, sizeof(host) - 1);
  if (cfg->worker_id != NULL)
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%s", cfg->worker_id);
  else
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%s:%d", host, (int)getpid());
  mqproc__log_set_tag(srv->worker_id);
  srv->dead_queue = cfg->dead_letter_queue != NULL ? mqproc__strdup(cfg->dead_letter_queue)
                                                   : mqproc__asprintf("%s.dead", cfg->processor);
  if (srv->dead_queue == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  srandom((unsigned)(getpid() ^ mqproc__wall_ms()));
  if ((rc = mqproc__loop_new(&srv->loop, err)) != MQPROC_OK ||
      (rc = make_runner(srv, proc, err)) != MQPROC_OK || (rc = open_store(srv, err)) != MQPROC_OK)
    return rc;
  srv->topo = (mqproc__topology_t){.exchange = cfg->exchange,
                                   .queue = cfg->processor,
                                   .dead_queue = srv->dead_queue,
                                   .durable = cfg->queue_durable,
                                   .queue_args = (const char *const *)cfg->queue_args,
                                   .heartbeat_s = cfg->heartbeat_s};
  return mqproc__broker_amqp_new(&srv->broker, cfg->queue_url, &srv->topo, &ev, err);
}

static void teardown(mqproc__server_t *srv) {
  while (srv->waiters != NULL) {
    waiter_t *w = srv->waiters;
    srv->waiters = w->next;
    free(w->job_id);
    free(w);
  }
  while (srv->deliveries != NULL) {
    mqproc__delivery_t *d = srv->deliveries;
    srv->deliveries = *mqproc__delivery_next(d);
    mqproc__delivery_free(d);
  }
  mqproc__broker_destroy(srv->broker);
  mqproc__store_destroy(srv->store);
  mqproc__runner_destroy(srv->runner);
  mqproc__loop_free(srv->loop);
  clear_declared(srv);
  free(srv->dead_queue);
  srv->broker_fd = -1;
}

int mqproc__server_run(const mqproc__config_t *cfg, const mqproc_processor_t *proc) {
  mqproc__server_t srv;
  char err[MQPROC_ERR_LEN], masked_q[512], masked_db[512];
  int rc;
  memset(&srv, 0, sizeof(srv));
  srv.broker_fd = -1;
  mqproc__mask_secret(cfg->queue_url, masked_q, sizeof(masked_q));
  mqproc__mask_secret(cfg->database, masked_db, sizeof(masked_db));
  if ((rc = setup(&srv, cfg, proc, err)) != MQPROC_OK) {
    MQPROC__ERROR("cannot start: %s", err);
    teardown(&srv);
    return rc == MQPROC_ECONFIG ? 2 : 1;
  }
  MQPROC__INFO("mqproc %s processing server for '%s' (%s runner), broker %s, database %s",
               MQPROC_VERSION, srv.processor, srv.runner->klass->name, masked_q, masked_db);
  mqproc__loop_set_prepare(srv.loop, prepare, &srv);
  mqproc__loop_on_signal(srv.loop, on_signal, &srv);
  srv.tick_timer = mqproc__loop_timer(srv.loop, 1000, on_tick, &srv);
  schedule_connect(&srv);
  rc = mqproc__loop_run(srv.loop);
  if (srv.broker_up)
    mqproc__broker_disconnect(srv.broker);
  if (srv.abandoned > 0) {
    /* Processing functions still running on threads cannot be stopped, and they use the
     * loop and their jobs: their jobs are released and requeued, so end the process now
     * instead of waiting for them. */
    MQPROC__WARN("stopped; %d processing function(s) still running were abandoned (their "
                 "jobs were released and requeued)",
                 srv.abandoned);
    mqproc__store_destroy(srv.store);
    _exit(rc != MQPROC_OK || srv.fatal ? 1 : 0);
  }
  MQPROC__INFO("stopped");
  rc = rc != MQPROC_OK || srv.fatal ? 1 : 0;
  teardown(&srv);
  return rc;
}
