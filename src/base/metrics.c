/* Counters and histograms of one server, rendered in the Prometheus text format (0.0.4):
 * names mqproc_… in base units, counters end in _total, one HELP and TYPE per family,
 * every series present from the start (at 0) so rate() works from the first scrape. */
#include "base/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "mqproc/mqproc.h"
#include "base/util.h"

int mqproc__metrics_init(mqproc__metrics_t *m, const char *buckets, char *err) {
  const char *p = buckets != NULL ? buckets : MQPROC__DEFAULT_BUCKETS;
  struct timeval tv;
  memset(m, 0, sizeof(*m));
  gettimeofday(&tv, NULL);
  m->start_time = (double)tv.tv_sec + tv.tv_usec / 1e6;
  while (*p != '\0') {
    char *end;
    double v;
    errno = 0;
    v = strtod(p, &end);
    if (end == p || errno != 0 || v <= 0 || (*end != ',' && *end != '\0'))
      return mqproc__err(err, -1, "--metrics-buckets: '%.40s' is not a positive number of seconds",
                         p);
    if (m->n_bounds == MQPROC__BUCKETS_MAX)
      return mqproc__err(err, -1, "--metrics-buckets: at most %d buckets", MQPROC__BUCKETS_MAX);
    if (m->n_bounds > 0 && v <= m->bounds[m->n_bounds - 1])
      return mqproc__err(err, -1, "--metrics-buckets: the bounds must ascend");
    m->bounds[m->n_bounds++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  if (m->n_bounds == 0)
    return mqproc__err(err, -1, "--metrics-buckets: no bounds given");
  return 0;
}

void mqproc__metrics_observe(mqproc__metrics_t *m, mqproc__histogram_t *h, double seconds) {
  size_t i = 0;
  if (seconds < 0)
    seconds = 0;
  while (i < m->n_bounds && seconds > m->bounds[i])
    i++;
  h->counts[i]++;
  h->sum += seconds;
  h->count++;
}

void mqproc__metrics_down(int64_t *since, int64_t now_ms) {
  if (*since == 0)
    *since = now_ms > 0 ? now_ms : 1;
}

void mqproc__metrics_up(int64_t *since, int64_t *total, int64_t now_ms) {
  if (*since != 0)
    *total += now_ms - *since;
  *since = 0;
}

/* A label value with \, " and newline escaped. */
static void label(FILE *f, const char *s) {
  for (; *s != '\0'; s++) {
    if (*s == '\\' || *s == '"')
      fprintf(f, "\\%c", *s);
    else if (*s == '\n')
      fputs("\\n", f);
    else
      fputc(*s, f);
  }
}

/* The shortest text that reads back as v (0.1, not 0.10000000000000001). */
static void number(char *buf, size_t n, double v) {
  for (int digits = 6; digits <= 17; digits++) {
    snprintf(buf, n, "%.*g", digits, v);
    if (strtod(buf, NULL) == v)
      return;
  }
}

static void family(FILE *f, const char *name, const char *type, const char *help) {
  fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{processor="P"[,extra]} value */
static void sample(FILE *f, const char *name, const char *proc, const char *extra, double v) {
  fprintf(f, "%s{processor=\"", name);
  label(f, proc);
  char text[40];
  number(text, sizeof(text), v);
  fprintf(f, "\"%s%s} %s\n", extra != NULL ? "," : "", extra != NULL ? extra : "", text);
}

static void counter(FILE *f, const char *name, const char *help, const char *proc, uint64_t v) {
  family(f, name, "counter", help);
  sample(f, name, proc, NULL, (double)v);
}

static void gauge(FILE *f, const char *name, const char *help, const char *proc, double v) {
  family(f, name, "gauge", help);
  sample(f, name, proc, NULL, v);
}

static void histogram(FILE *f, const mqproc__metrics_t *m, const char *name, const char *help,
                      const char *proc, const mqproc__histogram_t *h) {
  char key[160], le[64], bound[40];
  uint64_t cum = 0;
  family(f, name, "histogram", help);
  snprintf(key, sizeof(key), "%s_bucket", name);
  for (size_t i = 0; i <= m->n_bounds; i++) {
    cum += h->counts[i];
    if (i < m->n_bounds)
      number(bound, sizeof(bound), m->bounds[i]);
    else
      snprintf(bound, sizeof(bound), "+Inf");
    snprintf(le, sizeof(le), "le=\"%s\"", bound);
    sample(f, key, proc, le, (double)cum);
  }
  snprintf(key, sizeof(key), "%s_sum", name);
  sample(f, key, proc, NULL, h->sum);
  snprintf(key, sizeof(key), "%s_count", name);
  sample(f, key, proc, NULL, (double)h->count);
}

/* Resident set size in bytes and open fds, from /proc/self. */
static void process_stats(double *rss, double *fds, double *cpu) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size, res;
  DIR *d;
  struct timespec ts;
  *rss = *fds = 0;
  if (f != NULL) {
    if (fscanf(f, "%lu %lu", &size, &res) == 2)
      *rss = (double)res * (double)sysconf(_SC_PAGESIZE);
    fclose(f);
  }
  if ((d = opendir("/proc/self/fd")) != NULL) {
    while (readdir(d) != NULL)
      (*fds)++;
    closedir(d);
    *fds -= 3; /* ".", ".." and the directory's own fd */
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  *cpu = (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double outage_s(int64_t total, int64_t since, int64_t now) {
  return (double)(total + (since != 0 ? now - since : 0)) / 1000.0;
}

char *mqproc__metrics_render(const mqproc__metrics_t *m, const mqproc__metrics_now_t *now,
                             size_t *len) {
  static const char *const OUTCOMES[] = {"success", "failed", "cancelled"};
  const char *p = now->processor;
  char *buf = NULL, extra[64];
  double rss, fds, cpu;
  FILE *f = open_memstream(&buf, len);
  if (f == NULL)
    return NULL;
  family(f, "mqproc_build_info", "gauge", "The mqproc version of this server (always 1).");
  snprintf(extra, sizeof(extra), "version=\"%s\"", MQPROC_VERSION);
  sample(f, "mqproc_build_info", p, extra, 1);
  counter(f, "mqproc_jobs_started_total", "Attempts this server started (their first try).", p,
          m->c[MQPROC__M_STARTED]);
  family(f, "mqproc_jobs_finished_total", "counter",
         "Jobs this server brought to a final state, by outcome.");
  for (int i = 0; i < 3; i++) {
    snprintf(extra, sizeof(extra), "outcome=\"%s\"", OUTCOMES[i]);
    sample(f, "mqproc_jobs_finished_total", p, extra, (double)m->c[MQPROC__M_SUCCEEDED + i]);
  }
  counter(f, "mqproc_job_retries_total", "Local tries after the first try of an attempt.", p,
          m->c[MQPROC__M_RETRIED]);
  counter(f, "mqproc_jobs_requeued_total",
          "Attempts that failed every local try and went back to the broker.", p,
          m->c[MQPROC__M_REQUEUED]);
  counter(f, "mqproc_jobs_dead_lettered_total", "Messages sent to the dead-letter queue.", p,
          m->c[MQPROC__M_DEAD_LETTERED]);
  counter(f, "mqproc_lease_takeovers_total",
          "Jobs taken over from a holder that died or whose lease ran out.", p,
          m->c[MQPROC__M_TAKEOVERS]);
  counter(f, "mqproc_fenced_writes_total",
          "Writes refused because a newer attempt of the job owns it.", p, m->c[MQPROC__M_FENCED]);
  counter(f, "mqproc_finished_redeliveries_total",
          "Deliveries of jobs already final, acked without running them again.", p,
          m->c[MQPROC__M_FINISHED_REDELIV]);
  counter(f, "mqproc_redeliveries_total",
          "Deliveries the broker marked redelivered (returned by a nack, a lost connection or "
          "a lost node; a quorum queue counts them in x-delivery-count).",
          p, m->c[MQPROC__M_REDELIVERED]);
  counter(f, "mqproc_outbox_resends_total",
          "Outcomes and requests of a dead holder's jobs published again by the sweeper.", p,
          m->c[MQPROC__M_OUTBOX_RESENT]);
  family(f, "mqproc_reconnects_total", "counter", "Connections made again after a loss, by peer.");
  sample(f, "mqproc_reconnects_total", p, "peer=\"broker\"", now->broker_reconnects);
  sample(f, "mqproc_reconnects_total", p, "peer=\"database\"",
         (double)m->c[MQPROC__M_DB_RECONNECTS]);
  family(f, "mqproc_outage_seconds_total", "counter",
         "Time the peer was unreachable since this server started, by peer.");
  sample(f, "mqproc_outage_seconds_total", p, "peer=\"broker\"",
         outage_s(m->broker_down_ms, m->broker_down_since, now->now_ms));
  sample(f, "mqproc_outage_seconds_total", p, "peer=\"database\"",
         outage_s(m->db_down_ms, m->db_down_since, now->now_ms));
  family(f, "mqproc_up", "gauge", "Whether the peer is connected and usable (1) or not (0).");
  sample(f, "mqproc_up", p, "peer=\"broker\"", now->broker_up);
  sample(f, "mqproc_up", p, "peer=\"database\"", now->db_up);
  family(f, "mqproc_broker_blocked", "gauge",
         "Whether the broker blocks our publishing now (connection.blocked: a memory or disk "
         "alarm): results and dead letters wait.");
  sample(f, "mqproc_broker_blocked", p, NULL, now->broker_blocked);
  gauge(f, "mqproc_jobs_in_flight", "Jobs this server holds now (running or sending outcomes).", p,
        now->in_flight);
  gauge(f, "mqproc_concurrency", "Jobs this server runs at once at most (--concurrency).", p,
        now->concurrency);
  gauge(f, "mqproc_paused", "Whether an operator paused this server (1) or not (0).", p,
        now->paused);
  gauge(f, "mqproc_draining", "Whether this server is draining to exit (1) or not (0).", p,
        now->draining);
  if (now->queue_messages >= 0) {
    gauge(f, "mqproc_queue_messages", "Messages ready in the job queue (a passive declare).", p,
          (double)now->queue_messages);
    if (now->queue_consumers >= 0) /* a directory queue keeps no list of its consumers */
      gauge(f, "mqproc_queue_consumers", "Consumers of the job queue (a passive declare).", p,
            (double)now->queue_consumers);
  }
  histogram(f, m, "mqproc_queue_wait_seconds",
            "Time from a message's creation to its claim by this server.", p, &m->queue_wait);
  histogram(f, m, "mqproc_job_run_seconds", "Run time of the tries this server ran.", p,
            &m->run_time);
  process_stats(&rss, &fds, &cpu);
  fprintf(f,
          "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
          "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %.17g\n"
          "# HELP process_open_fds Number of open file descriptors.\n"
          "# TYPE process_open_fds gauge\nprocess_open_fds %.17g\n"
          "# HELP process_cpu_seconds_total Total user and system CPU time spent in "
          "seconds.\n# TYPE process_cpu_seconds_total counter\n"
          "process_cpu_seconds_total %.17g\n"
          "# HELP process_start_time_seconds Start time of the process since unix epoch in "
          "seconds.\n# TYPE process_start_time_seconds gauge\n"
          "process_start_time_seconds %.17g\n",
          rss, fds, cpu, m->start_time);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}
