/* PostgreSQL job store: the fleet's statements, what a server says about itself and learns
 * from the operators (sql/005_fleet.sql): its workers row, the wish for it (pause, drain)
 * and the cancels of the jobs it holds (beat), a holder found dead (holder_gone). Each
 * with its bind and parse, in store/pg/jobs.c's table like the job's own statements. */
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
    " (SELECT 'wish', c.wish || chr(9) || c.set_by,"
    "   (extract(epoch FROM c.set_at) * 1000)::bigint FROM mqproc_control c"
    "   WHERE c.processor_name = $2 AND c.worker_id IN ($1, '')"
    "   ORDER BY c.worker_id DESC LIMIT 1)"
    " UNION ALL"
    " SELECT 'cancel', j.job_id, j.attempt FROM mqproc_jobs j"
    "  WHERE j.worker_id = $1 AND j.state = 'RUNNING' AND j.cancel_requested";
/* clang-format on */

static int parse_beat(pg_req_t *r, PGresult *res, const int *rows, int n) {
  mqproc__beat_t *b = r->out.beat.b;
  (void)rows;
  b->wish[0] = b->wish_by[0] = '\0';
  b->wish_at = 0;
  for (int i = 0; i < n; i++) {
    const char *kind = PQgetvalue(res, i, 0), *v = PQgetvalue(res, i, 1);
    if (!strcmp(kind, "wish"))
      mqproc__beat_wish(b, v, atoll(PQgetvalue(res, i, 2)));
    else if (r->out.beat.cancel != NULL && r->done != NULL)
      r->out.beat.cancel(r->ud, v, atoi(PQgetvalue(res, i, 2)));
  }
  return MQPROC_OK;
}

/* $1..$15 of BEAT_SQL; the jobs held as a text[] literal */
static void bind_beat(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__beat_t *b = q->u.beat;
  char *jobs = mqproc__pg_text_array(b->current_jobs, b->n_current);
  if (jobs == NULL) {
    r->nomem = 1;
    return;
  }
  mqproc__pg_bind_text(r, 0, b->worker_id);
  mqproc__pg_bind_text(r, 1, b->processor);
  mqproc__pg_bind_text(r, 2, b->host);
  mqproc__pg_bind_int(r, 3, b->pid);
  mqproc__pg_bind_text(r, 4, b->version);
  mqproc__pg_bind_int64(r, 5, b->started_ms);
  mqproc__pg_bind_int(r, 6, b->interval_ms);
  mqproc__pg_bind_text(r, 7, b->state);
  mqproc__pg_bind_int(r, 8, b->concurrency);
  mqproc__pg_bind_int(r, 9, b->in_flight);
  mqproc__pg_bind_int64(r, 10, b->jobs_done);
  mqproc__pg_bind_int64(r, 11, b->jobs_failed);
  mqproc__pg_bind_text(r, 12, jobs);
  mqproc__pg_bind_int(r, 13, b->restarts);
  mqproc__pg_bind_text(r, 14, b->note);
  free(jobs);
  r->out.beat.b = q->u.beat;
  r->out.beat.cancel = b->cancel;
}

const pg_stmt_t mqproc__pg_stmt_beat = {"mqproc_beat", BEAT_SQL,   15,  0, 0,
                                        bind_beat,     parse_beat, NULL};

static void bind_holder_gone(pg_req_t *r, const mqproc__store_req_t *q) {
  const mqproc__store_holder_gone_t *a = &q->u.holder_gone;
  mqproc__pg_bind_text(r, 0, a->worker_id);
  mqproc__pg_bind_text(r, 1, a->host);
  mqproc__pg_bind_int(r, 2, a->pid);
  mqproc__pg_bind_text(r, 3, a->by);
}

const pg_stmt_t mqproc__pg_stmt_holder_gone = {
    "mqproc_holder_gone",
    "UPDATE mqproc_workers SET state = 'dead', note = 'pid gone, seen by ' || $4"
    " WHERE worker_id = $1 AND host = $2 AND pid = $3::int AND state NOT IN ('stopped', 'dead')",
    4,
    0,
    0,
    bind_holder_gone,
    NULL,
    NULL};
