/* A server's part in the fleet (see fleet.h): its workers row, the operators' wishes,
 * their cancels. Everything goes through the store's asynchronous beat(); nothing here
 * waits. */
#include "server/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delivery/delivery.h"
#include "base/log.h"
#include "base/util.h"

#define MAX_CURRENT 20      /* job ids shown per server */
#define FINISH_WAIT_MS 1000 /* the last write may take this long at exit */

struct mqproc__fleet {
  mqproc__fleet_handles_t h;
  char version[64];
  int restarts;   /* MQPROC_RESTARTS: set by the --instances supervisor */
  char note[128]; /* its crash-loop delay before this start, "" when none */
  long long started_ms;
  uint64_t timer;        /* the first refresh, at once */
  int64_t beat_ms;       /* when the last refresh was sent */
  uint64_t finish_timer; /* the last write's deadline */
  int in_flight;         /* a beat is with the store */
  int again;             /* refresh once more when it ends */
  int finishing;         /* the server stops: the next beat is the last */
  int paused;            /* the operators' wish: pause */
  int wish_seen;         /* a beat read the wishes: what the first read is stood before */
  long long old_drain;   /* the time of a drain given before this server started (0: none):
                            a drain is for the servers running when it is given */
  int store_seen;        /* a refresh went through */
  int sent_interval_ms;  /* the interval the row was last told */
  mqproc__beat_t beat;   /* the beat in flight (its out field is written at the end) */
};
typedef struct mqproc__fleet fleet_t;

static void on_timer(mqproc__loop_t *loop, void *ud);

static const char *state_name(const fleet_t *f, const mqproc__fleet_status_t *st) {
  if (f->finishing)
    return "stopped";
  if (st->stopping)
    return "draining";
  if (f->paused)
    return "paused";
  return st->connected ? "running" : "starting";
}

static void on_cancel(void *ud, const char *job_id, int attempt) {
  fleet_t *f = ud;
  mqproc__delivery_t *d = mqproc__inflight_find_job(f->h.inflight, job_id, attempt);
  if (d != NULL)
    mqproc__delivery_cancel(d);
}

/* Acts on the wish read by the last beat; returns whether the server's state changed. A
 * drain is for the servers running when it is given: one the first read finds was given
 * before this server started, and this server takes jobs (a later drain, of another
 * time, is for it). A pause stands: a server started later starts paused. */
static int apply_wish(fleet_t *f, const mqproc__beat_t *b) {
  const char *processor = f->h.cfg->processor;
  mqproc__fleet_status_t st;
  const char *wish = b->wish, *by = b->wish_by[0] != '\0' ? b->wish_by : "?";
  int first = !f->wish_seen;
  f->wish_seen = 1;
  if (!strcmp(wish, "drain")) {
    if (first) {
      f->old_drain = b->wish_at;
      MQPROC__INFO("a drain of '%s' (by %s) was given before this server started: it is for "
                   "the servers that ran then, this one takes jobs (`mqproc resume %s` clears it)",
                   processor, by, processor);
      return 0;
    }
    f->h.ops->status(f->h.ud, &st);
    if (st.stopping || b->wish_at == f->old_drain)
      return 0;
    MQPROC__INFO("drain requested by an operator (%s): no new jobs; exiting once the running "
                 "ones finished",
                 by);
    f->h.ops->drain(f->h.ud);
    return 1;
  }
  if (!strcmp(wish, "pause") && !f->paused) {
    f->paused = 1;
    MQPROC__INFO("paused by an operator (%s%s): not taking new jobs (running ones finish); the "
                 "pause stands, for servers started later too, until `mqproc resume %s`",
                 by, first ? ", before this server started" : "", processor);
    f->h.ops->paused(f->h.ud, 1); /* what is prefetched, not started, goes back */
    return 1;
  }
  if (wish[0] == '\0' && f->paused) {
    f->paused = 0;
    MQPROC__INFO("resumed by an operator");
    f->h.ops->paused(f->h.ud, 0);
    return 1;
  }
  return 0;
}

static int send_beat(fleet_t *f);

static void beat_done(void *ud, int rc, const char *err) {
  fleet_t *f = ud;
  f->in_flight = 0;
  if (f->finishing) {
    if (f->again) { /* the last beat waited for this one */
      f->again = 0;
      if (send_beat(f) == MQPROC_OK)
        return;
    }
    mqproc__loop_stop(f->h.loop);
    return;
  }
  if (rc == MQPROC_OK)
    f->store_seen = 1;
  f->h.ops->refreshed(f->h.ud, rc); /* ready for systemd now, not at the next (idle) tick */
  if (rc != MQPROC_OK) {
    MQPROC__DEBUG("workers row not refreshed: %s", err);
    f->sent_interval_ms = 0; /* the row still says the old one: the next tick says it again */
  } else {
    if (apply_wish(f, &f->beat))
      f->again = 1; /* show the new state at once: the operator's command waits for it */
  }
  if (f->again) {
    f->again = 0;
    send_beat(f);
  }
}

/* What the row says of the refreshes' interval: the tick's while that is longer (idle). */
static int interval_ms(const mqproc__fleet_status_t *st) {
  return st->tick_ms > MQPROC__FLEET_INTERVAL_MS ? (int)st->tick_ms : MQPROC__FLEET_INTERVAL_MS;
}

static int send_beat(fleet_t *f) {
  mqproc__inflight_status_t st;
  mqproc__fleet_status_t now;
  int rc;
  if (f->in_flight) {
    f->again = 1;
    return MQPROC_OK;
  }
  f->beat_ms = mqproc__now_ms();
  mqproc__inflight_status(f->h.inflight, &st);
  f->h.ops->status(f->h.ud, &now);
  f->beat = (mqproc__beat_t){.worker_id = f->h.worker_id,
                             .processor = f->h.cfg->processor,
                             .host = f->h.hostname,
                             .pid = (int)getpid(),
                             .version = f->version,
                             .started_ms = f->started_ms,
                             .interval_ms = f->sent_interval_ms = interval_ms(&now),
                             .state = state_name(f, &now),
                             .concurrency = f->h.cfg->concurrency,
                             .in_flight = st.held,
                             .jobs_done = (long long)f->h.metrics->c[MQPROC__M_SUCCEEDED],
                             .jobs_failed = (long long)f->h.metrics->c[MQPROC__M_FAILED],
                             .current_jobs = st.ids,
                             .n_current = st.n_ids < MAX_CURRENT ? st.n_ids : MAX_CURRENT,
                             .restarts = f->restarts,
                             .note = f->note[0] != '\0' ? f->note : NULL,
                             .cancel = on_cancel};
  rc = mqproc__store_beat(f->h.store, &f->beat, beat_done, f);
  f->in_flight = rc == MQPROC_OK;
  return rc;
}

static void on_timer(mqproc__loop_t *loop, void *ud) {
  fleet_t *f = ud;
  (void)loop;
  f->timer = 0;
  send_beat(f);
}

/* The refreshes ride on the server's tick (no wake-up of their own): one when the last is
 * the interval old, give or take the tick's jitter, and one at once when the interval
 * changes (idle, busy again), so the row never says a shorter one than its refreshes keep. */
void mqproc__fleet_tick(fleet_t *f) {
  mqproc__fleet_status_t now;
  int every;
  if (f == NULL || f->finishing)
    return;
  f->h.ops->status(f->h.ud, &now);
  every = interval_ms(&now);
  if (mqproc__now_ms() - f->beat_ms >= every - every / 4 || f->sent_interval_ms != every)
    send_beat(f);
}

/* An operator's notice (payload: the processor it is for). */
static void on_notice(void *ud, const char *payload) {
  fleet_t *f = ud;
  if (!f->finishing && strcmp(payload, f->h.cfg->processor) == 0)
    send_beat(f);
}

int mqproc__fleet_start(fleet_t **out, const mqproc__fleet_handles_t *h, const char *version) {
  fleet_t *f = mqproc__calloc(1, sizeof(*f));
  if (f == NULL)
    return MQPROC_ENOMEM;
  f->h = *h;
  snprintf(f->version, sizeof(f->version), "%s", version);
  f->started_ms = mqproc__wall_ms();
  if (getenv("MQPROC_INSTANCE") != NULL && getenv("MQPROC_RESTARTS") != NULL) /* supervised */
    f->restarts = atoi(getenv("MQPROC_RESTARTS"));
  if (getenv("MQPROC_RESTART_DELAY_MS") != NULL && atoll(getenv("MQPROC_RESTART_DELAY_MS")) > 0)
    snprintf(f->note, sizeof(f->note), "crash loop: restarted after a %lld ms delay",
             atoll(getenv("MQPROC_RESTART_DELAY_MS")));
  *out = f;
  mqproc__store_listen(h->store, on_notice, f);
  f->timer = mqproc__loop_timer(h->loop, 0, on_timer, f);
  return MQPROC_OK;
}

void mqproc__fleet_changed(fleet_t *f) {
  if (f != NULL && !f->finishing)
    send_beat(f);
}

int mqproc__fleet_holds_back(const fleet_t *f) {
  return f != NULL && f->paused;
}

int mqproc__fleet_store_seen(const fleet_t *f) {
  return f != NULL && f->store_seen;
}

static void on_finish_timeout(mqproc__loop_t *loop, void *ud) {
  fleet_t *f = ud;
  f->finish_timer = 0;
  MQPROC__DEBUG("the workers row was not marked stopped in time");
  mqproc__loop_stop(loop);
}

void mqproc__fleet_finish(fleet_t *f) {
  if (f->finishing)
    return;
  f->finishing = 1;
  mqproc__loop_timer_cancel(f->h.loop, f->timer);
  f->timer = 0;
  f->finish_timer = mqproc__loop_timer(f->h.loop, FINISH_WAIT_MS, on_finish_timeout, f);
  if (f->in_flight)
    f->again = 1; /* beat_done sends the last one */
  else if (send_beat(f) != MQPROC_OK)
    mqproc__loop_stop(f->h.loop);
}

void mqproc__fleet_free(fleet_t *f) {
  if (f == NULL)
    return;
  mqproc__store_listen(f->h.store, NULL, NULL);
  mqproc__store_forget(f->h.store, f);
  mqproc__loop_timer_cancel(f->h.loop, f->timer);
  mqproc__loop_timer_cancel(f->h.loop, f->finish_timer);
  free(f);
}
