/* What a server counts for /metrics: counters of its outcomes and events, two
 * histograms (queue wait, run time), and the Prometheus text rendering of them with the
 * gauges the server reads at scrape time. Counting is a few additions on the loop thread;
 * nothing here does I/O except reading /proc/self for the process gauges. */
#ifndef MQPROC_METRICS_H
#define MQPROC_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  MQPROC__M_STARTED,          /* attempts started (their first try) */
  MQPROC__M_SUCCEEDED,        /* final outcomes, by this server */
  MQPROC__M_FAILED,           /* ... */
  MQPROC__M_CANCELLED,        /* ... */
  MQPROC__M_RETRIED,          /* local tries after the first of an attempt */
  MQPROC__M_REQUEUED,         /* attempts that failed and went back to the broker */
  MQPROC__M_DEAD_LETTERED,    /* messages sent to the dead-letter queue */
  MQPROC__M_TAKEOVERS,        /* jobs taken over from a dead or expired holder */
  MQPROC__M_FENCED,           /* writes refused because a newer attempt owns the job */
  MQPROC__M_FINISHED_REDELIV, /* deliveries of jobs already final: acked without running */
  MQPROC__M_OUTBOX_RESENT,    /* outcomes of a dead holder's jobs sent again (sweeper) */
  MQPROC__M_DB_RECONNECTS,
  MQPROC__M_REDELIVERED, /* deliveries the broker marked redelivered (a quorum queue's come
                            with x-delivery-count, logged at the claim) */
  MQPROC__M_COUNT
} mqproc__counter_t;

#define MQPROC__BUCKETS_MAX 32

typedef struct mqproc__histogram {
  uint64_t counts[MQPROC__BUCKETS_MAX + 1]; /* per bucket, not cumulative; last = +Inf */
  double sum;
  uint64_t count;
} mqproc__histogram_t;

typedef struct mqproc__metrics {
  uint64_t c[MQPROC__M_COUNT];
  double bounds[MQPROC__BUCKETS_MAX]; /* upper bounds in seconds, ascending */
  size_t n_bounds;
  mqproc__histogram_t queue_wait, run_time;
  int64_t broker_down_ms, db_down_ms;       /* outage time that ended */
  int64_t broker_down_since, db_down_since; /* 0: up */
  double start_time;                        /* unix seconds */
} mqproc__metrics_t;

/* What the server knows at scrape time. */
typedef struct mqproc__metrics_now {
  const char *processor;
  int broker_reconnects; /* connections made after the first */
  int in_flight, concurrency, paused, draining;
  int broker_up, db_up;
  int broker_blocked; /* connection.blocked: the broker refuses our publishes for now */
  long queue_messages, queue_consumers; /* -1: not known (yet) */
  int64_t now_ms;                       /* monotonic, as the down_since fields */
} mqproc__metrics_now_t;

/* The default buckets: 0.1 s to 4 h (OCR jobs take minutes to hours). */
#define MQPROC__DEFAULT_BUCKETS "0.1,0.5,1,2.5,5,10,30,60,120,300,600,1200,1800,3600,7200,14400"

/* Parses a comma-separated ascending list of bucket bounds (seconds) into m; 0, or -1
 * with err (not ascending, not a number, more than MQPROC__BUCKETS_MAX). */
int mqproc__metrics_init(mqproc__metrics_t *m, const char *buckets, char *err);

static inline void mqproc__metrics_inc(mqproc__metrics_t *m, mqproc__counter_t c) {
  m->c[c]++;
}
/* Counts seconds into h, one of m's histograms. */
void mqproc__metrics_observe(mqproc__metrics_t *m, mqproc__histogram_t *h, double seconds);
/* A peer (broker or database) went down / came back at now_ms (monotonic). */
void mqproc__metrics_down(int64_t *since, int64_t now_ms);
void mqproc__metrics_up(int64_t *since, int64_t *total, int64_t now_ms);

/* The whole exposition (text format 0.0.4), malloc()ed; NULL when out of memory. */
char *mqproc__metrics_render(const mqproc__metrics_t *m, const mqproc__metrics_now_t *now,
                             size_t *len);

#endif
