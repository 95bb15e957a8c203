/* A server's part in the fleet (sql/005_fleet.sql): it keeps its row in mqproc_workers
 * fresh, obeys the operators' standing wish for it (pause, drain; `mqproc pause|resume|
 * drain`) and stops the jobs they cancel (`mqproc jobs cancel`). The wish and the cancels
 * are read with every refresh (FLEET_INTERVAL_MS) and at once when the store relays an
 * operator's notice, so a command takes effect within a round trip.
 *
 * An object of its own: the server gives it the handles it uses (the loop, the store, the
 * configuration, the names the row shows, the metrics and the deliveries in flight, read
 * only) and a small table of what it asks of the server; it never sees the server itself.
 */
#ifndef MQPROC_FLEET_H
#define MQPROC_FLEET_H

#include <stdint.h>

#include "base/config.h"
#include "base/metrics.h"
#include "loop/loop.h"
#include "server/inflight.h"
#include "store/store.h"

#define MQPROC__FLEET_INTERVAL_MS 2000

typedef struct mqproc__fleet mqproc__fleet_t;

/* The server's own state, as the workers row shows it (asked at every refresh). */
typedef struct mqproc__fleet_status {
  int stopping;    /* it stops or drains: takes nothing new */
  int connected;   /* it has connected to the broker once (else it is still starting) */
  int64_t tick_ms; /* its tick's interval now (longer while idle) */
} mqproc__fleet_status_t;

/* What the fleet asks of its server (ud: the handles' ud). */
typedef struct mqproc__fleet_ops {
  void (*status)(void *ud, mqproc__fleet_status_t *st);
  /* A refresh of the row ended with rc (the store's answer; MQPROC_ESTORE_FENCED too means
   * the database answered): /readyz, the outage metrics and systemd learn of it. */
  void (*refreshed)(void *ud, int rc);
  /* The operators paused (1: the deliveries not claimed yet go back) or resumed (0) the
   * server: it consumes accordingly (mqproc__fleet_holds_back says which). */
  void (*paused)(void *ud, int paused);
  /* An operator's drain: take nothing new, exit once the running jobs finished. */
  void (*drain)(void *ud);
} mqproc__fleet_ops_t;

/* What a fleet is given: the server's, used and never freed by it. */
typedef struct mqproc__fleet_handles {
  mqproc__loop_t *loop;
  mqproc__store_t *store;
  const mqproc__config_t *cfg; /* the processor, --concurrency */
  const char *worker_id;
  const char *hostname;
  const mqproc__metrics_t *metrics;   /* the jobs done and failed */
  const mqproc__inflight_t *inflight; /* the jobs held (the row), the ones to cancel */
  const mqproc__fleet_ops_t *ops;
  void *ud;
} mqproc__fleet_handles_t;

/* Starts refreshing (the first refresh at once). version: what the row shows. */
int mqproc__fleet_start(mqproc__fleet_t **out, const mqproc__fleet_handles_t *h,
                        const char *version);
/* Whether the operators paused this server (it takes no new job; a drain stops it);
 * 0 for NULL. */
int mqproc__fleet_holds_back(const mqproc__fleet_t *f);
/* The server stops: record it as stopped, then end the loop (when the write ended or after
 * a second; at once when it cannot be sent). The server ends the loop itself instead when
 * the store is not reachable. */
void mqproc__fleet_finish(mqproc__fleet_t *f);
/* The server's state changed by itself (its first broker connection: starting -> running):
 * the row shows it now, not with the next beat. */
void mqproc__fleet_changed(mqproc__fleet_t *f);
/* From the server's tick: refreshes the row when FLEET_INTERVAL_MS has passed. */
void mqproc__fleet_tick(mqproc__fleet_t *f);
/* Frees f (NULL: nothing); its store requests and timers are dropped. */
void mqproc__fleet_free(mqproc__fleet_t *f);
/* Whether the store has taken a refresh of the workers row yet (the database is up);
 * 0 for NULL. */
int mqproc__fleet_store_seen(const mqproc__fleet_t *f);

#endif
