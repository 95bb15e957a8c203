/* The sweeper (sweeper.c): republishes jobs of dead early-acked holders and sends the
 * outcomes their holders never sent. An object of its own: the server gives it the handles
 * it uses (the configuration, the store, the metrics, the host its outbox deliveries get)
 * and a small table of what it asks of the server; it never sees the server itself.
 */
#ifndef MQPROC_SERVER_SWEEPER_H
#define MQPROC_SERVER_SWEEPER_H

#include <stdint.h>

#include "base/config.h"
#include "base/metrics.h"
#include "broker/broker.h"
#include "delivery/host.h"
#include "store/store.h"

/* What the sweeper asks of its server (ud: the sweeper's ud). */
typedef struct mqproc__sweeper_ops {
  /* Whether a sweep may start now: the broker is connected and does not block publishing,
   * the store is not away, and the server does not stop. */
  int (*may_sweep)(void *ud);
  /* Publishes p, a republish of job_id; its confirm comes back as mqproc__sweeper_confirmed. */
  int (*publish_job)(void *ud, const char *job_id, const mqproc__publish_t *p, char *err);
  /* Takes d (a delivery sending a dead holder's outcome) into flight and starts it. */
  void (*add_delivery)(void *ud, mqproc__delivery_t *d);
  /* The store did not answer: stop taking deliveries until it does. */
  void (*store_down)(void *ud);
} mqproc__sweeper_ops_t;

typedef struct mqproc__sweeper {
  /* handles: the server's, used and never freed here */
  const mqproc__config_t *cfg;
  mqproc__store_t *store;
  mqproc__metrics_t *metrics;
  mqproc__delivery_host_t *host; /* what its outbox deliveries see of the server */
  const mqproc__sweeper_ops_t *ops;
  void *ud;
  /* private */
  int64_t last_sweep_ms; /* when the last sweep started */
  int64_t store_back_ms; /* when the store last came back (the holders' grace) */
  int sweeping;          /* a sweep's requests are in flight */
} mqproc__sweeper_t;

void mqproc__sweeper_init(mqproc__sweeper_t *sw, const mqproc__config_t *cfg,
                          mqproc__store_t *store, mqproc__metrics_t *metrics,
                          mqproc__delivery_host_t *host, const mqproc__sweeper_ops_t *ops,
                          void *ud);
/* One sweep, if one is due (every half lease; never while ops->may_sweep says no, nor
 * within two leases of the store's return). Called from the server's tick. */
void mqproc__sweeper_run(mqproc__sweeper_t *sw);
/* The broker settled the republish of job_id with status. */
void mqproc__sweeper_confirmed(mqproc__sweeper_t *sw, const char *job_id, int status);
/* The store is reachable again after an outage: the holders get two leases to renew. */
void mqproc__sweeper_store_back(mqproc__sweeper_t *sw);
/* Whether a sweep's requests are in flight (the server's tick stays short meanwhile). */
static inline int mqproc__sweeper_busy(const mqproc__sweeper_t *sw) {
  return sw->sweeping;
}

#endif
