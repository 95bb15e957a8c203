/* The processing server: one loop owning the broker connection, the store connection,
 * timers, signals and the deliveries in flight.
 *
 * Periodic work (tick, every second; every IDLE_TICK_MS while nothing is in flight): pump
 * the broker (this is what keeps heartbeats going while a job runs for hours), renew the
 * leases of running jobs, sweep (sweeper.c), refresh the workers row (fleet.c), and end the
 * loop once a requested stop has drained every delivery.
 * Reconnects to the broker run from their own timer with exponential backoff and jitter.
 */
#include "server/server.h"

#include <signal.h>
#include <stddef.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/argv.h"
#include "broker/dirq.h"
#include "codec/codec.h"
#include "delivery/delivery.h"
#include "server/fleet.h"
#include "runner/joblog.h"
#include "runner/ocrd_argv.h"
#include "base/log.h"
#include "server/on_failure.h"
#include "server/notify.h"
#include "server/supervisor.h"
#include "server/sweeper.h"
#include "server/tool.h"
#include "server/routes.h"
#include "base/util.h"

/* A publish awaiting its confirm: for a delivery, or a sweeper's republish (job_id). */
typedef struct mqproc__waiter {
  uint64_t seq;
  mqproc__delivery_t *d;
  char *job_id;
  struct mqproc__waiter *next;
} waiter_t;

static void schedule_connect(mqproc__server_t *srv);
static void on_tick(mqproc__loop_t *loop, void *ud);

#define TICK_MS 1000
#define IDLE_TICK_MS 10000 /* an idle server wakes this often (or as its heartbeat needs) */

/* The tick's interval: TICK_MS while anything is in flight or changing (deliveries, a
 * publish, a sweep, a stop, a connection being made), else IDLE_TICK_MS, short enough for
 * the AMQP heartbeat and the sweeps (every half lease). */
static int64_t tick_every(const mqproc__server_t *srv) {
  int64_t ms = IDLE_TICK_MS;
  if (!mqproc__inflight_empty(&srv->inflight) || srv->waiters != NULL ||
      mqproc__sweeper_busy(&srv->sweeper) || srv->stopping || srv->abandoned > 0 ||
      !srv->broker_up || srv->window.store_paused)
    return TICK_MS;
  if (srv->cfg->heartbeat_s > 0 && srv->cfg->heartbeat_s * 500LL < ms)
    ms = srv->cfg->heartbeat_s * 500LL;
  if (srv->cfg->lease_s * 500LL < ms)
    ms = srv->cfg->lease_s * 500LL;
  return ms < TICK_MS ? TICK_MS : ms;
}

/* The tick again in tick_every_ms (the one pending, if any, cancelled). */
static void rearm_tick(mqproc__server_t *srv) {
  mqproc__loop_timer_cancel(srv->loop, srv->tick_timer);
  srv->tick_timer = mqproc__loop_timer(srv->loop, srv->tick_every_ms, on_tick, srv);
}

/* The loop ends once the workers row says the server stopped (fleet.h), or at once while
 * the store is unreachable. */
static void finish(mqproc__server_t *srv) {
  if (srv->fleet == NULL || srv->window.store_paused)
    mqproc__loop_stop(srv->loop);
  else
    mqproc__fleet_finish(srv->fleet);
}

/* ---- broker events ------------------------------------------------------------------ */

void mqproc__server_add_delivery(mqproc__server_t *srv, mqproc__delivery_t *d) {
  int was_idle = srv->tick_every_ms > TICK_MS;
  mqproc__inflight_add(&srv->inflight, d);
  if (was_idle) { /* work again: the busy tick, and a workers row that says so */
    srv->tick_every_ms = tick_every(srv);
    rearm_tick(srv);
    mqproc__fleet_changed(srv->fleet);
  }
  mqproc__delivery_start(d);
}

static void on_message(void *ud, const mqproc__broker_msg_t *m) {
  mqproc__server_t *srv = ud;
  mqproc__delivery_t *d;
  if (!srv->window.consuming || m->consumer != srv->window.consumer) {
    /* pushed before our basic.cancel, to a consumer whose slots are gone: give it back */
    mqproc__broker_nack(srv->broker, m->epoch, m->tag, 1, NULL);
    return;
  }
  d = mqproc__delivery_new(&srv->host, m);
  if (d == NULL) {
    MQPROC__ERROR("out of memory for a delivery; it stays unacked until we reconnect");
    return;
  }
  mqproc__server_add_delivery(srv, d);
}

/* The broker's state changed (connected, lost, blocked, unblocked): deliveries waiting to
 * publish try again now. */
static void wake_publishers(mqproc__server_t *srv) {
  mqproc__inflight_broker_changed(&srv->inflight);
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
        mqproc__sweeper_confirmed(&srv->sweeper, w->job_id, status);
      free(w->job_id);
      free(w);
      return;
    }
  }
}

void mqproc__server_forget_publish(mqproc__server_t *srv, mqproc__delivery_t *d) {
  for (waiter_t **pp = &srv->waiters; *pp != NULL;) {
    waiter_t *w = *pp;
    if (w->d == d) {
      *pp = w->next;
      free(w->job_id);
      free(w);
    } else {
      pp = &w->next;
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

static void on_closing(void *ud, int fd) {
  mqproc__server_t *srv = ud;
  mqproc__loop_io(srv->loop, fd, NULL, NULL);
  srv->broker_fd = -1;
}

static void on_down(void *ud, const char *reason) {
  mqproc__server_t *srv = ud;
  MQPROC__ERROR("broker connection lost: %s", reason);
  mqproc__metrics_down(&srv->metrics.broker_down_since, mqproc__now_ms());
  srv->broker_up = 0;
  srv->host.broker_blocked = 0;
  mqproc__window_no_consumer(&srv->window);
  clear_declared(srv);
  if (!srv->stopping)
    schedule_connect(srv);
  wake_publishers(srv);
}

static void on_blocked(void *ud, int blocked, const char *reason) {
  mqproc__server_t *srv = ud;
  srv->host.broker_blocked = blocked;
  if (blocked) {
    MQPROC__WARN("the broker blocked publishing (%s): results and dead letters wait; jobs "
                 "keep running",
                 reason[0] != '\0' ? reason : "a resource alarm");
    return;
  }
  MQPROC__INFO("the broker unblocked publishing: sending what waited");
  mqproc__window_consume(&srv->window, 0);
  wake_publishers(srv);
}

static void on_broker_fd(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__server_t *srv = ud;
  (void)loop;
  (void)fd;
  if (srv->broker_up)
    mqproc__broker_pump(srv->broker, NULL);
}

/* Before the loop sleeps: frames rabbitmq-c has already read into its buffer make the
 * socket no more readable, so they are handled now, not at the next tick. Then what the
 * turn wrote goes out at once: the acks (one multiple ack), the broker frames it buffered
 * (publishes and acks in one write) and the log lines (one write). */
static int prepare(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  int again;
  (void)loop;
  if (srv->broker_up && mqproc__broker_pending(srv->broker))
    mqproc__broker_pump(srv->broker, NULL);
  mqproc__server_flush_acks(srv);
  if (srv->broker_up)
    mqproc__broker_flush(srv->broker);
  again = srv->broker_up && mqproc__broker_pending(srv->broker);
  mqproc__log_flush();
  return again ? 0 : -1;
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
    mqproc__metrics_down(&srv->metrics.broker_down_since, mqproc__now_ms());
    if ((rc == MQPROC_ECONFIG || rc == MQPROC_EBROKER_DECLARE) &&
        mqproc__inflight_empty(&srv->inflight)) {
      MQPROC__ERROR("this will not fix itself; stopping");
      srv->fatal = rc == MQPROC_ECONFIG ? 2 : 1;
      mqproc__loop_stop(srv->loop);
      return;
    }
    srv->reconnects++;
    schedule_connect(srv);
    return;
  }
  srv->broker_up = 1;
  srv->reconnects = 0;
  srv->connections++;
  mqproc__metrics_up(&srv->metrics.broker_down_since, &srv->metrics.broker_down_ms,
                     mqproc__now_ms());
  mqproc__window_no_consumer(&srv->window);
  srv->broker_fd = mqproc__broker_fd(srv->broker);
  if (srv->broker_fd >= 0) /* (a table queue has none: its store's completions feed it) */
    mqproc__loop_io(srv->loop, srv->broker_fd, on_broker_fd, srv);
  MQPROC__INFO("connected to the broker (connection %d): queue '%s', exchange '%s', dead "
               "letters to '%s'",
               srv->connections, srv->processor, srv->cfg->exchange, srv->dead_where);
  mqproc__window_consume(&srv->window, 0);
  mqproc__broker_pump(srv->broker, NULL);
  wake_publishers(srv);
  mqproc__sd_update(srv);
  if (srv->connections == 1)
    mqproc__fleet_changed(srv->fleet); /* starting -> running */
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
 * sweeper's republish of job_id. Refused at once while the broker blocks publishing. */
static int publish_waiter(mqproc__server_t *srv, mqproc__delivery_t *d, const char *job_id,
                          const mqproc__publish_t *p, char *err) {
  waiter_t *w;
  int rc;
  if (!srv->broker_up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if (srv->host.broker_blocked)
    return mqproc__err(err, MQPROC_EBROKER_BLOCKED, "the broker blocks publishing");
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

/* ---- what the sweeper asks of the server (sweeper.h) ---------------------------------- */

static int sw_may_sweep(void *ud) {
  const mqproc__server_t *srv = ud;
  return srv->broker_up && !srv->host.broker_blocked && !srv->window.store_paused && !srv->stopping;
}
static int sw_publish_job(void *ud, const char *job_id, const mqproc__publish_t *p, char *err) {
  return publish_waiter(ud, NULL, job_id, p, err);
}
static void sw_add_delivery(void *ud, mqproc__delivery_t *d) {
  mqproc__server_add_delivery(ud, d);
}
static void sw_store_down(void *ud) {
  mqproc__server_store_down(ud);
}

static const mqproc__sweeper_ops_t SWEEPER_OPS = {
    .may_sweep = sw_may_sweep,
    .publish_job = sw_publish_job,
    .add_delivery = sw_add_delivery,
    .store_down = sw_store_down,
};

/* ---- acks (batched by inflight.c) and the store's reachability ------------------------ */

int mqproc__server_ack(mqproc__server_t *srv, mqproc__delivery_t *d, char *err) {
  uint64_t epoch = 0, tag = 0;
  mqproc__delivery_tag(d, &epoch, &tag);
  if (!srv->broker_up || epoch != mqproc__broker_epoch(srv->broker))
    return mqproc__err(err, MQPROC_EBROKER_CLOSED,
                       "delivery belongs to a closed connection (epoch %llu)",
                       (unsigned long long)epoch);
  if (mqproc__inflight_queue_ack(&srv->inflight, d, tag) != 0) /* no room to wait: now */
    return mqproc__broker_ack(srv->broker, epoch, tag, 0, err);
  return MQPROC_OK;
}

void mqproc__server_flush_acks(mqproc__server_t *srv) {
  mqproc__inflight_flush_acks(&srv->inflight, srv->broker_up ? srv->broker : NULL);
}

void mqproc__server_db_seen(mqproc__server_t *srv, int ok) {
  if (ok && srv->metrics.db_down_since != 0) { /* it was down: reached again */
    mqproc__metrics_up(&srv->metrics.db_down_since, &srv->metrics.db_down_ms, mqproc__now_ms());
    mqproc__metrics_inc(&srv->metrics, MQPROC__M_DB_RECONNECTS);
  } else if (!ok) {
    mqproc__metrics_down(&srv->metrics.db_down_since, mqproc__now_ms());
  }
  srv->db_ok = ok;
}

void mqproc__server_store_down(mqproc__server_t *srv) {
  mqproc__server_db_seen(srv, 0);
  mqproc__window_store_down(&srv->window);
}

/* Result queues remembered as declared; past this many, the memo starts over (a sender
 * naming ever new queues costs declarations, not memory). */
#define DECLARED_MAX 256

int mqproc__server_result_queue(mqproc__server_t *srv, const char *queue, char *err) {
  char **grown;
  int rc;
  if (!srv->declare_results)
    return MQPROC_OK;
  for (size_t i = 0; i < srv->n_declared; i++)
    if (strcmp(srv->declared[i], queue) == 0)
      return MQPROC_OK;
  if (!srv->broker_up)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "broker connection is down");
  if ((rc = mqproc__broker_declare_queue(srv->broker, queue, err)) != MQPROC_OK)
    return rc;
  if (srv->n_declared >= DECLARED_MAX)
    clear_declared(srv);
  grown = mqproc__realloc(srv->declared, (srv->n_declared + 1) * sizeof(char *));
  if (grown == NULL)
    return MQPROC_OK; /* declared, just not remembered */
  srv->declared = grown;
  if ((grown[srv->n_declared] = mqproc__strdup(queue)) != NULL)
    srv->n_declared++;
  return MQPROC_OK;
}

int mqproc__server_result_queue_allowed(const mqproc__server_t *srv, const char *queue) {
  return !srv->has_result_queue_re || regexec(&srv->result_queue_re, queue, 0, NULL, 0) == 0;
}

void mqproc__server_delivery_done(mqproc__server_t *srv, mqproc__delivery_t *d) {
  mqproc__inflight_remove(&srv->inflight, d);
  if (mqproc__delivery_abandoned(d))
    srv->abandoned++; /* its thread still uses it: freed when that ends, or at exit */
  else
    mqproc__delivery_free(d);
  if (srv->cfg->max_jobs_per_child > 0 && !srv->stopping &&
      (long long)(srv->metrics.c[MQPROC__M_SUCCEEDED] + srv->metrics.c[MQPROC__M_FAILED]) >=
          srv->cfg->max_jobs_per_child) {
    MQPROC__INFO(
        "%lld jobs done: recycling this server (--max-jobs-per-child), taking no more",
        (long long)(srv->metrics.c[MQPROC__M_SUCCEEDED] + srv->metrics.c[MQPROC__M_FAILED]));
    srv->recycle = 1;
    mqproc__server_drain(srv);
  }
  if (srv->stopping && mqproc__inflight_empty(&srv->inflight))
    finish(srv);
  else
    mqproc__window_consume(&srv->window, 0); /* an early-acked job's slot may be free */
}

void mqproc__server_abandoned_done(mqproc__server_t *srv, mqproc__delivery_t *d) {
  srv->abandoned--;
  mqproc__delivery_free(d);
}

mqproc__delivery_t *mqproc__server_find_job(mqproc__server_t *srv, const char *job_id,
                                            int attempt) {
  return mqproc__inflight_find_job(&srv->inflight, job_id, attempt);
}

/* ---- periodic work and signals ------------------------------------------------------ */

static void on_tick(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  (void)loop;
  srv->tick_timer = 0; /* this one ran: what re-arms it below (or a delivery's arrival in
                          the pump) must not cancel a stale id and leave two */
  if (srv->broker_up)
    mqproc__broker_pump(srv->broker, NULL);
  mqproc__inflight_tick(&srv->inflight);
  mqproc__window_tick(&srv->window);
  mqproc__sweeper_run(&srv->sweeper);
  mqproc__sd_update(srv);
  srv->tick_every_ms = tick_every(srv); /* the refresh tells the interval coming */
  mqproc__fleet_tick(srv->fleet);
  if (srv->stopping && mqproc__inflight_empty(&srv->inflight))
    finish(srv);
  rearm_tick(srv); /* in the interval the refresh above told */
}

static void stop_all(mqproc__server_t *srv, int force) {
  mqproc__inflight_stop(&srv->inflight, force);
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
    mqproc__server_drain(srv);
    if (!mqproc__inflight_empty(
            &srv->inflight)) /* unlike an operator's drain, a signal's has a grace */
      srv->grace_timer =
          mqproc__loop_timer(loop, srv->cfg->shutdown_grace_s * 1000LL, on_grace_over, srv);
    return;
  }
  MQPROC__INFO("%s again: stopping running jobs now", strsignal(signo));
  mqproc__loop_timer_cancel(loop, srv->grace_timer);
  srv->grace_timer = 0;
  stop_all(srv, 1);
  if (srv->signals > 2) /* the third: do not even wait for the workers row */
    mqproc__loop_stop(loop);
  else if (mqproc__inflight_empty(&srv->inflight))
    finish(srv);
}

void mqproc__server_drain(mqproc__server_t *srv) {
  if (srv->stopping)
    return;
  srv->stopping = 1; /* no grace timer here: the running jobs finish, however long they take */
  mqproc__sd_stopping(srv);
  mqproc__window_consume(&srv->window, 0);
  stop_all(srv, 0);
  if (mqproc__inflight_empty(&srv->inflight))
    finish(srv);
}

/* ---- what a delivery sees of the server (delivery/host.h) ---------------------------- */

static mqproc__server_t *of(mqproc__delivery_host_t *h) {
  return (mqproc__server_t *)((char *)h - offsetof(mqproc__server_t, host));
}

static int h_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d, const mqproc__publish_t *p,
                     char *err) {
  return mqproc__server_publish(of(h), d, p, err);
}
static void h_forget_publish(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  mqproc__server_forget_publish(of(h), d);
}
static int h_ack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  return mqproc__server_ack(of(h), d, err);
}
static int h_nack(mqproc__delivery_host_t *h, mqproc__delivery_t *d, char *err) {
  uint64_t epoch = 0, tag = 0;
  mqproc__delivery_tag(d, &epoch, &tag);
  return mqproc__broker_nack(of(h)->broker, epoch, tag, 1, err);
}
static int h_ack_in_store(mqproc__delivery_host_t *h, mqproc__delivery_t *d,
                          mqproc__broker_held_t *held) {
  uint64_t epoch = 0, tag = 0;
  mqproc__delivery_tag(d, &epoch, &tag);
  return mqproc__broker_ack_in_store(of(h)->broker, epoch, tag, held);
}
static uint64_t h_epoch(mqproc__delivery_host_t *h) {
  return mqproc__broker_epoch(of(h)->broker);
}
static int h_take_slot(mqproc__delivery_host_t *h) {
  return mqproc__window_take_slot(&of(h)->window);
}
static void h_give_slot(mqproc__delivery_host_t *h) {
  mqproc__window_give_slot(&of(h)->window);
}
static int h_take_pass(mqproc__delivery_host_t *h) {
  return mqproc__window_take_pass(&of(h)->window);
}
static void h_give_pass(mqproc__delivery_host_t *h) {
  mqproc__window_give_pass(&of(h)->window);
}
static int h_result_queue(mqproc__delivery_host_t *h, const char *queue, char *err) {
  return mqproc__server_result_queue(of(h), queue, err);
}
static int h_result_queue_allowed(mqproc__delivery_host_t *h, const char *queue) {
  return mqproc__server_result_queue_allowed(of(h), queue);
}
static void h_update_consuming(mqproc__delivery_host_t *h, int extra) {
  mqproc__window_consume(&of(h)->window, extra);
}
static mqproc__delivery_t *h_find_job(mqproc__delivery_host_t *h, const char *job_id, int attempt) {
  return mqproc__server_find_job(of(h), job_id, attempt);
}
static void h_store_down(mqproc__delivery_host_t *h) {
  mqproc__server_store_down(of(h));
}
static void h_job_failed(mqproc__delivery_host_t *h, const char *job_id, int attempt,
                         const char *error, const char *request_json, const char *log_path) {
  mqproc__on_failure_run(of(h), job_id, attempt, error, request_json, log_path);
}
static void h_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  mqproc__server_delivery_done(of(h), d);
}
static void h_abandoned_done(mqproc__delivery_host_t *h, mqproc__delivery_t *d) {
  mqproc__server_abandoned_done(of(h), d);
}

static const mqproc__delivery_host_ops_t HOST_OPS = {
    .publish = h_publish,
    .forget_publish = h_forget_publish,
    .ack = h_ack,
    .nack = h_nack,
    .ack_in_store = h_ack_in_store,
    .epoch = h_epoch,
    .take_slot = h_take_slot,
    .give_slot = h_give_slot,
    .take_pass = h_take_pass,
    .give_pass = h_give_pass,
    .result_queue = h_result_queue,
    .result_queue_allowed = h_result_queue_allowed,
    .update_consuming = h_update_consuming,
    .find_job = h_find_job,
    .store_down = h_store_down,
    .job_failed = h_job_failed,
    .done = h_done,
    .abandoned_done = h_abandoned_done,
};

/* The view deliveries get, once everything it points at exists. */
static void fill_host(mqproc__server_t *srv) {
  mqproc__delivery_host_t *h = &srv->host;
  h->ops = &HOST_OPS;
  h->cfg = srv->cfg;
  h->processor = srv->processor;
  h->dead_queue = srv->dead_queue;
  h->dead_where = srv->dead_where;
  h->worker_id = srv->worker_id;
  h->hostname = srv->hostname;
  h->loop = srv->loop;
  h->empty_hint = srv->broker->klass->empty_hint;
  h->store = srv->store;
  h->runner = srv->runner;
  h->metrics = &srv->metrics;
  h->callback_allow = &srv->callback_allow;
  h->callback_deny = &srv->callback_deny;
  h->needs_mets = srv->needs_mets;
  h->ocrd_processor = srv->ocrd_processor;
}

/* ---- what the window asks of the server (flow.h) ------------------------------------- */

static void wi_state(void *ud, mqproc__window_state_t *st) {
  const mqproc__server_t *srv = ud;
  *st = (mqproc__window_state_t){.broker_up = srv->broker_up,
                                 .broker_blocked = srv->host.broker_blocked,
                                 .stopping = srv->stopping,
                                 .paused = mqproc__fleet_holds_back(srv->fleet)};
}
static void wi_store_back(void *ud) {
  mqproc__server_t *srv = ud;
  mqproc__sweeper_store_back(&srv->sweeper);
  mqproc__server_db_seen(srv, 1);
}

static const mqproc__window_ops_t WINDOW_OPS = {.state = wi_state, .store_back = wi_store_back};

/* ---- what the fleet asks of the server (fleet.h) ------------------------------------- */

static void fl_status(void *ud, mqproc__fleet_status_t *st) {
  const mqproc__server_t *srv = ud;
  *st = (mqproc__fleet_status_t){
      .stopping = srv->stopping, .connected = srv->connections > 0, .tick_ms = srv->tick_every_ms};
}
static void fl_refreshed(void *ud, int rc) {
  mqproc__server_db_seen(ud, rc == MQPROC_OK || rc == MQPROC_ESTORE_FENCED);
  if (rc == MQPROC_OK)
    mqproc__sd_update(ud);
}
static void fl_paused(void *ud, int paused) {
  mqproc__server_t *srv = ud;
  if (paused)
    mqproc__inflight_requeue_unclaimed(&srv->inflight); /* prefetched, not started */
  mqproc__window_consume(&srv->window, 0);
}
static void fl_drain(void *ud) {
  mqproc__server_drain(ud);
}

static const mqproc__fleet_ops_t FLEET_OPS = {
    .status = fl_status, .refreshed = fl_refreshed, .paused = fl_paused, .drain = fl_drain};

static int start_fleet(mqproc__server_t *srv, const char *version) {
  mqproc__fleet_handles_t h = {.loop = srv->loop,
                               .store = srv->store,
                               .cfg = srv->cfg,
                               .worker_id = srv->worker_id,
                               .hostname = srv->hostname,
                               .metrics = &srv->metrics,
                               .inflight = &srv->inflight,
                               .ops = &FLEET_OPS,
                               .ud = srv};
  return mqproc__fleet_start(&srv->fleet, &h, version);
}

/* ---- setup (the parts that open the store, make the runner and read the limits are in
 * setup.c) ---------------------------------------------------------------------------- */

static int setup(mqproc__server_t *srv, const mqproc__config_t *cfg, const mqproc_processor_t *proc,
                 char *err) {
  mqproc__broker_events_t ev = {on_message, on_confirm, on_down, on_closing, on_blocked, srv};
  int rc;
  srv->cfg = cfg;
  srv->processor = cfg->processor;
  if (gethostname(srv->hostname, sizeof(srv->hostname) - 1) != 0)
    snprintf(srv->hostname, sizeof(srv->hostname), "localhost");
  if (cfg->worker_id != NULL && getenv(MQPROC__INSTANCE_ENV) != NULL) /* one per instance */
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%.100s-%.8s", cfg->worker_id,
             getenv(MQPROC__INSTANCE_ENV));
  else if (cfg->worker_id != NULL)
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%s", cfg->worker_id);
  else
    snprintf(srv->worker_id, sizeof(srv->worker_id), "%.64s:%d", srv->hostname, (int)getpid());
  mqproc__log_set_tag(srv->worker_id);
  srv->dead_queue = cfg->dead_letter_queue != NULL ? mqproc__strdup(cfg->dead_letter_queue)
                                                   : mqproc__asprintf("%s.dead", cfg->processor);
  if (srv->dead_queue == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  srandom((unsigned)(getpid() ^ mqproc__wall_ms()));
  if ((rc = mqproc__server_setup_limits(srv, cfg, err)) != MQPROC_OK ||
      (rc = mqproc__joblog_prepare(cfg->log_dir, err)) != MQPROC_OK ||
      (rc = mqproc__loop_new(&srv->loop, err)) != MQPROC_OK ||
      (rc = mqproc__server_make_runner(srv, proc, err)) != MQPROC_OK ||
      (rc = mqproc__on_failure_init(srv, err)) != MQPROC_OK ||
      (rc = mqproc__server_open_store(srv, err)) != MQPROC_OK)
    return rc;
  if (mqproc__metrics_init(&srv->metrics, cfg->metrics_buckets, err) != 0)
    return MQPROC_ECONFIG;
  if ((rc = mqproc__serve_start(srv, err)) != MQPROC_OK)
    return rc;
  srv->topo = (mqproc__topology_t){.exchange = cfg->exchange,
                                   .queue = cfg->processor,
                                   .dead_queue = srv->dead_queue,
                                   .durable = cfg->queue_durable,
                                   .queue_args = (const char *const *)cfg->queue_args,
                                   .max_priority = cfg->max_priority,
                                   .quorum = cfg->queue_type == MQPROC__QUEUE_QUORUM,
                                   .delivery_limit = cfg->delivery_limit,
                                   .heartbeat_s = cfg->heartbeat_s,
                                   .timeout_s = cfg->broker_timeout_s,
                                   .confirm_timeout_s = cfg->confirm_timeout_s,
                                   .client_id = srv->worker_id,
                                   .max_message_bytes = (size_t)cfg->max_message_bytes,
                                   .tls = {.ca = cfg->tls_ca,
                                           .cert = cfg->tls_cert,
                                           .key = cfg->tls_key,
                                           .verify = cfg->tls_verify},
                                   .visibility_s = cfg->queue_visibility_s};
  if ((rc = mqproc__server_make_broker(srv, &ev, err)) != MQPROC_OK)
    return rc;
  srv->dead_where = srv->broker->klass->dead_in_failed
                        ? mqproc__asprintf("%s/failed/", cfg->processor)
                        : mqproc__strdup(srv->dead_queue);
  if (srv->dead_where == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  mqproc__window_init(&srv->window, cfg, srv->loop, srv->broker, srv->store, &srv->inflight,
                      &WINDOW_OPS, srv);
  mqproc__server_setup_window(srv);
  fill_host(srv);
  mqproc__sweeper_init(&srv->sweeper, cfg, srv->store, &srv->metrics, &srv->host, &SWEEPER_OPS,
                       srv);
  return MQPROC_OK;
}

static void teardown(mqproc__server_t *srv) {
  while (srv->waiters != NULL) {
    waiter_t *w = srv->waiters;
    srv->waiters = w->next;
    free(w->job_id);
    free(w);
  }
  mqproc__inflight_free(&srv->inflight);
  mqproc__serve_stop(srv);
  mqproc__broker_destroy(srv->broker);
  mqproc__sd_free(srv);
  mqproc__on_failure_free(srv);
  mqproc__fleet_free(srv->fleet);
  srv->fleet = NULL;
  mqproc__store_destroy(srv->store);
  mqproc__runner_destroy(srv->runner);
  mqproc__loop_free(srv->loop);
  mqproc__serve_free(srv);
  clear_declared(srv);
  free(srv->dead_queue);
  free(srv->dead_where);
  mqproc__cidr_list_free(&srv->callback_allow);
  mqproc__cidr_list_free(&srv->callback_deny);
  if (srv->has_result_queue_re)
    regfree(&srv->result_queue_re);
  srv->broker_fd = -1;
}

int mqproc__server_run(const mqproc__config_t *cfg, const mqproc_processor_t *proc) {
  mqproc__server_t srv;
  char err[MQPROC_ERR_LEN], masked_q[512], masked_db[512], version[512];
  int rc;
  memset(&srv, 0, sizeof(srv));
  srv.broker_fd = -1;
  mqproc__mask_secret(cfg->queue_url, masked_q, sizeof(masked_q));
  mqproc__mask_secret(cfg->database, masked_db, sizeof(masked_db));
  if ((rc = setup(&srv, cfg, proc, err)) != MQPROC_OK && srv.stopped_at_start) {
    MQPROC__INFO("%s: stopped", err); /* asked to stop: not a failure */
    teardown(&srv);
    return 0;
  }
  if (rc != MQPROC_OK) {
    MQPROC__ERROR("cannot start: %s", err);
    teardown(&srv);
    return rc == MQPROC_ECONFIG ? 2 : 1;
  }
  MQPROC__INFO("mqproc %s processing server for '%s' (%s runner), broker %s, database %s",
               MQPROC_VERSION, srv.processor, srv.runner->klass->name, masked_q, masked_db);
  if (cfg->tls_verify == MQPROC__TLS_VERIFY_NONE)
    MQPROC__WARN("--tls-verify=none: the broker's certificate is NOT checked; anyone on the "
                 "network path can pose as the broker, read the jobs and the password");
  mqproc__loop_set_prepare(srv.loop, prepare, &srv);
  mqproc__loop_on_signal(srv.loop, on_signal, &srv);
  snprintf(version, sizeof(version), "%s %s (mqproc %s)", srv.processor,
           proc != NULL && proc->version != NULL ? proc->version : "-", MQPROC_VERSION);
  if (start_fleet(&srv, version) != MQPROC_OK) {
    MQPROC__ERROR("cannot start: out of memory");
    teardown(&srv);
    return 1;
  }
  mqproc__server_tool_start(&srv, proc); /* for the processing API (server/tool.h) */
  mqproc__sd_start(&srv);
  srv.tick_every_ms = TICK_MS;
  srv.tick_timer = mqproc__loop_timer(srv.loop, TICK_MS, on_tick, &srv);
  schedule_connect(&srv);
  mqproc__log_batch_begin(); /* the loop's lines: one write per turn (prepare) */
  rc = mqproc__loop_run(srv.loop);
  mqproc__log_batch_end();
  mqproc__server_flush_acks(&srv);
  if (srv.broker_up) {
    mqproc__broker_flush(srv.broker); /* the acks, before the close handshake */
    mqproc__broker_disconnect(srv.broker);
  }
  if (srv.abandoned > 0) {
    /* Processing functions still running on threads cannot be stopped, and they use the
     * loop and their jobs: their jobs are released and requeued, so end the process now
     * instead of waiting for them. */
    MQPROC__WARN("stopped; %d processing function(s) still running were abandoned (their "
                 "jobs were released and requeued)",
                 srv.abandoned);
    mqproc__store_destroy(srv.store);
    _exit(rc != MQPROC_OK ? 1 : srv.fatal);
  }
  MQPROC__INFO("stopped");
  rc = rc != MQPROC_OK ? 1 : srv.fatal ? srv.fatal : (srv.recycle ? MQPROC__EXIT_RECYCLE : 0);
  teardown(&srv);
  return rc;
}
