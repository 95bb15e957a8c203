/* PostgreSQL job store, part four: what a server says about itself and learns from the
 * operators (sql/005_fleet.sql): its workers row, the wish for it (pause, drain), the
 * cancels of the jobs it holds, a holder found dead, and a cancelled job's end. Requests
 * for the asynchronous engine, like store/pg.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

/* clang-format off */
/* One refresh: the workers row, then the wish (a row for this server wins over one for
 * every server of the processor) and the cancels of the jobs this server holds. */
static const char BEAT_SQL[] =
    "WITH w AS (INSERT INTO mqproc_workers AS w (worker_id, processor_name, host, pid,"
    "   version, started_at, last_seen, interval_ms, state, concurrency, in_flight,"
    "   jobs_done, jobs_failed, current_jobs, restarts, note)"
    " VALUES ($1, $2, $3, $4::int, $5, to_timestamp($6::bigint / 1000.0), now(), $7::int,"
    "   $8, $9::int, $10::int, $11::bigint, $12::bigint, $13::text[], $14::int, $15)"
    " ON CONFLICT (worker_id) DO UPDATE SET processor_name = EXCLUDED.processor_name,"
    "   host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,"
    "   started_at = EXCLUDED.started_at, last_seen = now(),"
    "   interval_ms = EXCLUDED.interval_ms, state = EXCLUDED.state,"
    "   concurrency = EXCLUDED.concurrency, in_flight = EXCLUDED.in_flight,"
    "   jobs_done = EXCLUDED.jobs_done, jobs_failed = EXCLUDED.jobs_failed,"
    "   current_jobs = EXCLUDED.current_jobs, restarts = EXCLUDED.restarts,"
    "   note = EXCLUDED.note"
    " RETURNING 1)"
    " (SELECT 'wish', c.wish, 0 FROM mqproc_control c"
    "   WHERE c.processor_name = $2 AND c.worker_id IN ($1, '')"
    "   ORDER BY c.worker_id DESC LIMIT 1)"
    " UNION ALL"
    " SELECT 'cancel', j.job_id, j.attempt FROM mqproc_jobs j"
    "  WHERE j.worker_id = $1 AND j.state = 'RUNNING' AND j.cancel_requested";
/* clang-format on */

static int parse_beat(pg_req_t *r, PGresult *res, const int *rows, int n) {
  mqproc__beat_t *b = r->out;
  void (*cancel)(void *, const char *, int) = (void (*)(void *, const char *, int))r->row_cb;
  (void)rows;
  b->wish[0] = '\0';
  for (int i = 0; i < n; i++) {
    const char *kind = PQgetvalue(res, i, 0), *v = PQgetvalue(res, i, 1);
    if (!strcmp(kind, "wish"))
      snprintf(b->wish, sizeof(b->wish), "%s", v);
    else if (cancel != NULL && r->done != NULL)
      cancel(r->ud, v, atoi(PQgetvalue(res, i, 2)));
  }
  return MQPROC_OK;
}

static const pg_stmt_t BEAT = {"mqproc_beat", BEAT_SQL, 15, 0, 0, parse_beat};

int mqproc__pg_beat(mqproc__store_t *s, mqproc__beat_t *b,
                    void (*cancel)(void *ud, const char *job_id, int attempt),
                    mqproc__store_done_cb done, void *ud) {
  char *jobs = mqproc__pg_text_array(b->current_jobs, b->n_current);
  int rc;
  if (jobs == NULL)
    return MQPROC_ENOMEM;
  rc = mqproc__pg_request(s, &BEAT, b, (void *)cancel, done, ud, "sssislisiillsis", b->worker_id,
                          b->processor, b->host, b->pid, b->version, b->started_ms, b->interval_ms,
                          b->state, b->concurrency, b->in_flight, b->jobs_done, b->jobs_failed,
                          jobs, b->restarts, b->note);
  free(jobs);
  return rc;
}

static const pg_stmt_t HOLDER_GONE = {
    "mqproc_holder_gone",
    "UPDATE mqproc_workers SET state = 'dead', note = 'pid gone, seen by ' || $4"
    " WHERE worker_id = $1 AND host = $2 AND pid = $3::int AND state NOT IN ('stopped', 'dead')",
    4,
    0,
    0,
    NULL};

int mqproc__pg_holder_gone(mqproc__store_t *s, const char *worker_id, const char *host, int pid,
                           const char *by, mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &HOLDER_GONE, NULL, NULL, done, ud, "ssis", worker_id, host, pid,
                            by);
}

/* A cancelled job's end, like a success's (the outbox too), with the try recorded failed. */
static const pg_stmt_t CANCELLED = {
    "mqproc_cancelled",
    "WITH j AS (UPDATE mqproc_jobs j SET state = 'CANCELLED', end_time = now(),"
    "   last_error = 'cancelled by an operator', updated_at = now(),"
    "   delivery_acked = j.delivery_acked OR $5::bool,"
    "   lease_until = CASE WHEN j.delivery_acked OR $5::bool"
    "     THEN now() + $6::int * interval '1 millisecond' END"
    "  WHERE j.job_id = $1 AND j.attempt = $2::int AND j.state = 'RUNNING'"
    "  RETURNING j.job_id),"
    " t AS (UPDATE mqproc_job_tries t SET ended_at = coalesce(t.ended_at, now()),"
    "   ok = coalesce(t.ok, false), duration_ms = coalesce(t.duration_ms, $4::bigint),"
    "   error = coalesce(t.error, 'cancelled by an operator')"
    "   FROM j WHERE t.job_id = j.job_id AND t.try = $3::int)"
    " SELECT job_id FROM j",
    6,
    0,
    0,
    mqproc__pg_parse_fenced};

int mqproc__pg_cancelled(mqproc__store_t *s, const char *job_id, int attempt, int try_no,
                         const mqproc__try_end_t *e, int outbox, int lease_ms,
                         mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(s, &CANCELLED, NULL, NULL, done, ud, "siilbi", job_id, attempt, try_no,
                            (long long)e->duration_ms, outbox, lease_ms);
}
