/* The processing server: wires config, loop, broker, store and runner together with its
 * parts, each an object of its own given the handles it needs and a small table of what
 * it asks of the server: the deliveries in flight (inflight.h), the window (flow.h), the
 * sweeper (sweeper.h) and the fleet (fleet.h). delivery.c drives each delivery; this file
 * gives it the services it needs (publish with a confirm, result-queue declaration, the
 * end). The smaller parts still take the whole server: setup.c fills it at start, and
 * routes.c, notify.c, on_failure.c and tool.c read its state for what they show or start. */
#ifndef MQPROC_SERVER_H
#define MQPROC_SERVER_H

#include <regex.h>

#include "broker/broker.h"
#include "net/callback.h"
#include "base/config.h"
#include "delivery/host.h"
#include "server/flow.h"
#include "server/inflight.h"
#include "server/sweeper.h"
#include "loop/loop.h"
#include "base/metrics.h"
#include "mqproc/mqproc.h"
#include "runner/runner.h"
#include "store/store.h"

typedef struct mqproc__server {
  /* read-only for deliveries */
  const mqproc__config_t *cfg;
  const char *processor; /* job queue name */
  char *dead_queue;
  char *dead_where; /* how the logs name where dead letters go (dir://: P/failed/) */
  char worker_id[128];
  mqproc__loop_t *loop;
  mqproc__broker_t *broker;
  mqproc__store_t *store;
  mqproc__runner_t *runner;
  int needs_mets;                     /* the runner cannot run a job without a METS (OCR-D CLI) */
  int ocrd_processor;                 /* OCR-D's jobs only (host.h) */
  mqproc__cidr_list_t callback_allow; /* --callback-allow */
  mqproc__cidr_list_t callback_deny;  /* --callback-deny */
  int stopping;                       /* a signal asked us to stop: finish, take nothing new */
  char hostname[256];                 /* gethostname() */
  int recycle;                        /* --max-jobs-per-child reached: exit for a new one */
  mqproc__delivery_host_t host;       /* what its deliveries see of it (broker_blocked is there) */
  /* private */
  mqproc__topology_t topo;
  mqproc__inflight_t inflight; /* the deliveries in flight, their slots, passes and acks */
  int broker_up;
  int reconnects;  /* consecutive failed connects, for the backoff */
  int connections; /* connections made so far (a test's "never reconnected") */
  uint64_t reconnect_timer;
  uint64_t tick_timer;
  int64_t tick_every_ms; /* the tick's interval now: longer while nothing is in flight */
  char **declared;       /* result queues declared on this connection (at most DECLARED_MAX) */
  size_t n_declared;
  regex_t result_queue_re; /* --result-queue-pattern, when given */
  int has_result_queue_re;
  struct mqproc__waiter *waiters; /* publishes awaiting their confirm */
  int broker_fd;                  /* watched fd of the current connection, -1 when down */
  int signals;                    /* stop signals received */
  uint64_t grace_timer;           /* shutdown grace */
  mqproc__sweeper_t sweeper;      /* sweeper.c: republishes, the outbox */
  int fatal;               /* the broker's connect will not succeed: the exit status (2: the queue's
                              configuration, e.g. a queue directory that is a link; 1: a declare error) */
  int stopped_at_start;    /* SIGTERM/SIGINT while the start waited for the database */
  int abandoned;           /* deliveries released while their thread still runs */
  int declare_results;     /* result queues are declared (--declare-result-queues, and a
                              pattern where the backend needs one) */
  mqproc__window_t window; /* flow.c: the consumer, run slots, claim passes, store outages */
  struct mqproc__fleet *fleet; /* fleet.c: the workers row, the operators' wishes */
  struct mqproc__sd *sd;       /* notify.c: what systemd was told; NULL when not under it */
  struct mqproc__on_failure *on_failure; /* on_failure.c: --on-failure; NULL without it */
  mqproc__metrics_t metrics;             /* what /metrics shows (metrics.h) */
  int db_ok;                             /* the last store request reached the database */
  struct mqproc__serve *http;            /* routes.c: --http; NULL without it */
} mqproc__server_t;

/* Runs a processing server until SIGTERM/SIGINT; returns the process exit code.
 * processor NULL = the --exec command runner. */
int mqproc__server_run(const mqproc__config_t *cfg, const mqproc_processor_t *processor);

/* Publishes p and routes its confirm to mqproc__delivery_on_confirm(d, …). */
int mqproc__server_publish(mqproc__server_t *srv, mqproc__delivery_t *d, const mqproc__publish_t *p,
                           char *err);
/* d stops waiting for the confirm of its publish (a late confirm is then ignored). */
void mqproc__server_forget_publish(mqproc__server_t *srv, mqproc__delivery_t *d);
/* Acks d's delivery at the next flush, before the loop sleeps: the acks of deliveries
 * that ended together go as one multiple ack where their tags allow. MQPROC_EBROKER_CLOSED
 * when d's connection is gone (its copy comes again). */
int mqproc__server_ack(mqproc__server_t *srv, mqproc__delivery_t *d, char *err);
/* Sends the acks waiting for a flush. */
void mqproc__server_flush_acks(mqproc__server_t *srv);
/* Takes d into the list of deliveries in flight and starts it. */
void mqproc__server_add_delivery(mqproc__server_t *srv, mqproc__delivery_t *d);
/* Declares and binds a result queue once per connection (when configured to). */
int mqproc__server_result_queue(mqproc__server_t *srv, const char *queue, char *err);
/* Whether a message may name this result queue (--result-queue-pattern). */
int mqproc__server_result_queue_allowed(const mqproc__server_t *srv, const char *queue);
/* The delivery in flight running attempt `attempt` of job_id, or NULL. */
mqproc__delivery_t *mqproc__server_find_job(mqproc__server_t *srv, const char *job_id, int attempt);
/* Stop taking jobs, let the running ones finish however long they take, then exit 0
 * (an operator's `mqproc drain`). */
void mqproc__server_drain(mqproc__server_t *srv);

/* ---- setup steps (setup.c) --------------------------------------------------------- */
/* Opens (and with --migrate upgrades) the job store; at start it retries a database that
 * is away for up to 60 s, and a SIGTERM/SIGINT meanwhile sets srv->stopped_at_start. */
int mqproc__server_open_store(mqproc__server_t *srv, char *err);
/* The broker of --queue with srv->topo and ev: a table queue (store/queue.h) with srv->store
 * when --queue is --database's URL, with a store of its own for another database; else
 * broker.h's factory (AMQP, dir://). */
int mqproc__server_make_broker(mqproc__server_t *srv, const mqproc__broker_events_t *ev, char *err);
/* The runner of proc (a C processor: threads or worker processes), else of --exec. */
int mqproc__server_make_runner(mqproc__server_t *srv, const mqproc_processor_t *proc, char *err);
/* What the queue's backend makes of the window options left unset (--claim-ahead,
 * --prefetch) and of --declare-result-queues: srv->window's claim_ahead and depth_auto,
 * and srv->declare_results, asked of the broker (broker.h), not read off its URL. */
void mqproc__server_setup_window(mqproc__server_t *srv);
/* --callback-allow, --callback-deny and --result-queue-pattern. */
int mqproc__server_setup_limits(mqproc__server_t *srv, const mqproc__config_t *cfg, char *err);
/* Whether a store request reached the database (ok 1) or not (0): /readyz and the
 * database's outage time and reconnects in /metrics. */
void mqproc__server_db_seen(mqproc__server_t *srv, int ok);
/* A delivery found the store unreachable: stop taking deliveries until it answers. */
void mqproc__server_store_down(mqproc__server_t *srv);
/* An abandoned delivery's thread finished after all: free it. */
void mqproc__server_abandoned_done(mqproc__server_t *srv, mqproc__delivery_t *d);
/* The delivery reached its end: unlink and free it (an abandoned one, whose try still
 * runs on a thread, is only unlinked and counted). */
void mqproc__server_delivery_done(mqproc__server_t *srv, mqproc__delivery_t *d);

#endif
