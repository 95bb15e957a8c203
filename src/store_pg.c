/* PostgreSQL job store (libpq): the job table's statements, fenced by attempt,
 * parameterised SQL only. Connections, statement execution and the schema are in
 * store_pg_conn.c (store_pg_int.h). */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "store.h"
#include "store_pg_int.h"
#include "util.h"

/* ---- claim -------------------------------------------------------------------------- */

/* When a holder's lease counts as over, for the claim and both sweeps: at lease_until, but
 * never within two leases (ms: the SQL parameter given) of the database's start. Holders
 * could not renew while it was down, and a server that never noticed the outage (started
 * during it, or idle) would otherwise take a live job over; a copy redelivered meanwhile
 * is held, not run, until the holders had the time to renew. */
/* clang-format off */
#define LEASE_END(col, ms) \
  "greatest(" col ", pg_postmaster_start_time() + 2 * " ms "::int * interval '1 millisecond')"

/* One statement: take the job when it is new, QUEUED, or RUNNING under an expired lease
 * (attempt + 1); otherwise count the delivery and report the row as it is. */
static const char CLAIM_SQL[] =
    "WITH claim AS ("
    " INSERT INTO mqproc_jobs AS j (job_id, processor_name, state, attempt, deliveries,"
    "   worker_id, lease_until, created_time, start_time, request, request_format,"
    "   request_body)"
    " VALUES ($1, $2, 'RUNNING', 1, 1, $3, now() + $4::int * interval '1 millisecond',"
    "   to_timestamp($5::bigint), now(), $6::jsonb, $7, $9::bytea)"
    " ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = j.attempt + 1,"
    "   deliveries = j.deliveries + 1, worker_id = EXCLUDED.worker_id,"
    "   lease_until = EXCLUDED.lease_until, start_time = now(), end_time = NULL,"
    "   delivery_acked = false, republish = false,"
    "   request = coalesce(j.request, EXCLUDED.request),"
    "   request_body = coalesce(j.request_body, EXCLUDED.request_body), updated_at = now()"
    "  WHERE (j.state = 'QUEUED'"
    "     OR (j.state = 'RUNNING' AND " LEASE_END("j.lease_until", "$4") " < now()))"
    "    AND j.attempt < $8::int"
    " RETURNING true, j.attempt, j.state, j.tries, j.requeues, j.result_published,"
    "   j.callback_state IS NOT NULL, false, 0::bigint, j.worker_id),"
    " seen AS ("
    " UPDATE mqproc_jobs SET deliveries = deliveries + 1, updated_at = now()"
    "  WHERE job_id = $1 AND NOT EXISTS (SELECT 1 FROM claim)"
    " RETURNING false, attempt, state, tries, requeues, result_published,"
    "   callback_state IS NOT NULL,"
    "   state = 'RUNNING' AND " LEASE_END("lease_until", "$4") " >= now(),"
    "   greatest(0, extract(epoch FROM " LEASE_END("lease_until", "$4") " - now()) * 1000)"
    "     ::bigint,"
    "   coalesce(worker_id, ''))"
    "SELECT * FROM claim UNION ALL SELECT * FROM seen";
/* clang-format on */

static void read_claim(PGresult *res, mqproc__claim_t *c) {
  c->claimed = PQgetvalue(res, 0, 0)[0] == 't';
  c->attempt = atoi(PQgetvalue(res, 0, 1));
  snprintf(c->state, sizeof(c->state), "%s", PQgetvalue(res, 0, 2));
  c->tries = atoi(PQgetvalue(res, 0, 3));
  c->requeues = atoi(PQgetvalue(res, 0, 4));
  c->result_published = PQgetvalue(res, 0, 5)[0] == 't';
  c->callbacks_done = PQgetvalue(res, 0, 6)[0] == 't';
  c->lease_live = PQgetvalue(res, 0, 7)[0] == 't';
  c->lease_left_ms = PQgetisnull(res, 0, 8) ? 0 : atoll(PQgetvalue(res, 0, 8));
  snprintf(c->worker_id_now, sizeof(c->worker_id_now), "%s", PQgetvalue(res, 0, 9));
}

static int pg_claim(mqproc__store_t *base, mqproc__claim_t *c, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  char lease[16], created[24], maxa[16];
  const char *vals[9] = {c->job_id,
                         c->processor,
                         c->worker_id,
                         lease,
                         c->created_time >= 0 ? created : NULL,
                         c->request_json,
                         c->request_format != NULL ? c->request_format : "json",
                         maxa,
                         c->request_body};
  int lens[9] = {0, 0, 0, 0, 0, 0, 0, 0, (int)c->request_body_len};
  int fmts[9] = {0, 0, 0, 0, 0, 0, 0, 0, 1};
  PGresult *res = NULL;
  int rc;
  snprintf(lease, sizeof(lease), "%d", c->lease_ms);
  snprintf(maxa, sizeof(maxa), "%d", c->max_attempts > 0 ? c->max_attempts : 1000000);

  snprintf(created, sizeof(created), "%lld", c->created_time);
  /* A row inserted concurrently after our snapshot is neither claimed nor seen: retry. */
  for (int i = 0; i < 3; i++) {
    if ((rc = mqproc__pg_run(s, CLAIM_SQL, 9, vals, lens, fmts, &res, err)) != MQPROC_OK)
      return rc;
    if (PQntuples(res) == 1) {
      read_claim(res, c);
      PQclear(res);
      return MQPROC_OK;
    }
    PQclear(res);
  }
  return mqproc__err(err, MQPROC_ESTORE_QUERY, "job %s: claim found no row", c->job_id);
}

/* ---- fenced writes ------------------------------------------------------------------ */

static int pg_start_try(mqproc__store_t *base, const char *job_id, int attempt,
                        const char *worker_id, const char *log_path, int *try_no, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  char att[16];
  const char *vals[4] = {job_id, att, worker_id, log_path};
  PGresult *res = NULL;
  int rc;
  snprintf(att, sizeof(att), "%d", attempt);
  rc = mqproc__pg_run_fenced(
      s,
      "WITH j AS (UPDATE mqproc_jobs SET tries = tries + 1, log_path = $4,"
      " updated_at = now() WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'"
      " RETURNING tries)"
      " INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id)"
      " SELECT $1, tries, $2::int, $3 FROM j RETURNING try",
      4, vals, job_id, attempt, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  *try_no = atoi(PQgetvalue(res, 0, 0));
  PQclear(res);
  return MQPROC_OK;
}

static int pg_end_try(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, char *err) {
  char att[16], tn[16], code[16], sig[16], dur[24];
  const char *vals[8] = {job_id,
                         att,
                         tn,
                         e->ok ? "true" : "false",
                         e->exit_code >= 0 ? code : NULL,
                         e->term_signal > 0 ? sig : NULL,
                         dur,
                         e->error};
  snprintf(att, sizeof(att), "%d", attempt);
  snprintf(tn, sizeof(tn), "%d", try_no);
  snprintf(code, sizeof(code), "%d", e->exit_code);
  snprintf(sig, sizeof(sig), "%d", e->term_signal);
  snprintf(dur, sizeof(dur), "%lld", (long long)e->duration_ms);
  return mqproc__pg_run_fenced(
      (pg_store_t *)base,
      "WITH j AS (UPDATE mqproc_jobs SET last_error = coalesce($8, last_error),"
      " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
      " AND state = 'RUNNING' RETURNING job_id)"
      " UPDATE mqproc_job_tries t SET ended_at = now(), ok = $4::boolean,"
      " exit_code = $5::int, term_signal = $6::int, duration_ms = $7::bigint,"
      " error = $8 FROM j WHERE t.job_id = j.job_id AND t.try = $3::int",
      8, vals, job_id, attempt, NULL, err);
}

/* One statement for the successful try's end and the job's SUCCESS (the hot path). */
static int pg_succeed(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, char *err) {
  char att[16], tn[16], ms[24], code[16];
  const char *vals[5] = {job_id, att, tn, ms, e->exit_code >= 0 ? code : NULL};
  snprintf(att, sizeof(att), "%d", attempt);
  snprintf(tn, sizeof(tn), "%d", try_no);
  snprintf(ms, sizeof(ms), "%lld", (long long)e->duration_ms);
  snprintf(code, sizeof(code), "%d", e->exit_code);
  return mqproc__pg_run_fenced(
      (pg_store_t *)base,
      "WITH j AS (UPDATE mqproc_jobs SET state = 'SUCCESS', end_time = now(),"
      " exec_time_ms = $4::bigint, updated_at = now(),"
      /* an early-acked holder keeps its lease while it sends the result */
      " lease_until = CASE WHEN delivery_acked THEN lease_until END"
      " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'"
      " RETURNING job_id)"
      " UPDATE mqproc_job_tries t SET ended_at = now(), ok = true,"
      " exit_code = $5::int, duration_ms = $4::bigint"
      " FROM j WHERE t.job_id = j.job_id AND t.try = $3::int",
      5, vals, job_id, attempt, NULL, err);
}

static int pg_fail(mqproc__store_t *base, const char *job_id, int attempt, const char *error,
                   int max_requeues, int republish, int *requeued, char *err) {
  pg_store_t *s = (pg_store_t *)base;
  char att[16], maxr[16];
  const char *vals[5] = {job_id, att, error, maxr, republish ? "true" : "false"};
  PGresult *res = NULL;
  int rc;
  snprintf(att, sizeof(att), "%d", attempt);
  snprintf(maxr, sizeof(maxr), "%d", max_requeues);
  rc = mqproc__pg_run_fenced(
      s,
      "UPDATE mqproc_jobs SET"
      " state = CASE WHEN requeues < $4::int THEN 'QUEUED' ELSE 'FAILED' END,"
      " requeues = CASE WHEN requeues < $4::int THEN requeues + 1 ELSE requeues END,"
      " end_time = CASE WHEN requeues < $4::int THEN NULL ELSE now() END,"
      " republish = $5::boolean AND requeues < $4::int,"
      " delivery_acked = delivery_acked AND requeues >= $4::int,"
      " dead_letter_pending = delivery_acked AND requeues >= $4::int,"
      " lease_until = CASE WHEN delivery_acked AND requeues >= $4::int"
      "   THEN lease_until END, last_error = $3, updated_at = now()"
      " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING' RETURNING state",
      5, vals, job_id, attempt, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  *requeued = strcmp(PQgetvalue(res, 0, 0), "QUEUED") == 0;
  PQclear(res);
  return MQPROC_OK;
}

static int pg_release(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      int republish, char *err) {
  char att[16];
  const char *vals[4] = {job_id, att, why, republish ? "true" : "false"};
  snprintf(att, sizeof(att), "%d", attempt);
  return mqproc__pg_run_fenced((pg_store_t *)base,
                               "UPDATE mqproc_jobs SET state = 'QUEUED', lease_until = NULL,"
                               " republish = $4::boolean, delivery_acked = false,"
                               " last_error = coalesce($3, last_error), updated_at = now()"
                               " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
                               4, vals, job_id, attempt, NULL, err);
}

static int pg_give_up(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      char *err) {
  char att[16];
  const char *vals[3] = {job_id, att, why};
  snprintf(att, sizeof(att), "%d", attempt);
  return mqproc__pg_run_fenced(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET state = 'FAILED', end_time = now(), lease_until = NULL,"
      " republish = false, delivery_acked = false, last_error = $3,"
      " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
      " AND (state = 'QUEUED' OR (state = 'RUNNING' AND lease_until < now()))",
      3, vals, job_id, attempt, NULL, err);
}

static int pg_ack_early(mqproc__store_t *base, const char *job_id, int attempt, char *err) {
  char att[16];
  const char *vals[2] = {job_id, att};
  snprintf(att, sizeof(att), "%d", attempt);
  return mqproc__pg_run_fenced((pg_store_t *)base,
                               "UPDATE mqproc_jobs SET delivery_acked = true, updated_at = now()"
                               " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
                               2, vals, job_id, attempt, NULL, err);
}

/* Collects jobs to republish: an early-acked job whose holder's lease expired (the holder
 * is gone and no message exists for it) or a QUEUED job still waiting for its message.
 * They become QUEUED with republish pending and a grace lease, so concurrent sweepers skip
 * them while this one publishes; if this one dies, the grace runs out and another sends.
 * A holder's lease ends as LEASE_END says. */
/* clang-format off */
static const char SWEEP_SQL[] =
    "UPDATE mqproc_jobs SET state = 'QUEUED', republish = true, delivery_acked = false,"
    " worker_id = NULL, lease_until = now() + $2::int * interval '1 millisecond',"
    " updated_at = now()"
    " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = $1"
    "   AND ((state = 'RUNNING' AND delivery_acked"
    "       AND " LEASE_END("lease_until", "$2") " < now())"
    "     OR (state = 'QUEUED' AND republish AND coalesce(lease_until, now()) <= now()))"
    "   ORDER BY lease_until NULLS FIRST LIMIT $3::int FOR UPDATE SKIP LOCKED)"
    " RETURNING job_id, request::text, request_format, request_body, attempt";
/* clang-format on */

/* A bytea column of a text-format result, unescaped (NULL for SQL NULL). */
static unsigned char *bytea_value(PGresult *res, int row, int col, size_t *len) {
  *len = 0;
  if (PQgetisnull(res, row, col))
    return NULL;
  return PQunescapeBytea((const unsigned char *)PQgetvalue(res, row, col), len);
}

/* Runs a sweep statement ($1 processor, $2 grace lease in ms, $3 row limit). */
static int run_sweep(pg_store_t *s, const char *sql, const char *processor, int lease_ms, int limit,
                     PGresult **res, char *err) {
  char ms[16], lim[16];
  const char *vals[3] = {processor, ms, lim};
  snprintf(ms, sizeof(ms), "%d", lease_ms);
  snprintf(lim, sizeof(lim), "%d", limit);
  return mqproc__pg_run_text(s, sql, 3, vals, res, err);
}

static int pg_sweep(mqproc__store_t *base, const char *processor, int lease_ms, int limit,
                    void (*row)(void *ud, const mqproc__sweep_row_t *r), void *ud, char *err) {
  PGresult *res = NULL;
  int rc = run_sweep((pg_store_t *)base, SWEEP_SQL, processor, lease_ms, limit, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  for (int i = 0; i < PQntuples(res); i++) {
    mqproc__sweep_row_t r = {.job_id = PQgetvalue(res, i, 0),
                             .request_json = PQgetvalue(res, i, 1),
                             .format = PQgetvalue(res, i, 2),
                             .attempt = atoi(PQgetvalue(res, i, 4))};
    unsigned char *body = bytea_value(res, i, 3, &r.body_len);
    r.body = body;
    if (!PQgetisnull(res, i, 1))
      row(ud, &r);
    PQfreemem(body);
  }
  PQclear(res);
  return MQPROC_OK;
}

static int pg_republished(mqproc__store_t *base, const char *job_id, char *err) {
  const char *vals[1] = {job_id};
  return mqproc__pg_run_text(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET republish = false, lease_until = NULL,"
      " updated_at = now() WHERE job_id = $1 AND state = 'QUEUED' AND republish",
      1, vals, NULL, err);
}

static int pg_ping(mqproc__store_t *base, char *err) {
  return mqproc__pg_run_text((pg_store_t *)base, "SELECT 1", 0, NULL, NULL, err);
}

static int pg_renew(mqproc__store_t *base, const char *job_id, int attempt, int lease_ms,
                    char *err) {
  char att[16], ms[16];
  const char *vals[3] = {job_id, att, ms};
  snprintf(att, sizeof(att), "%d", attempt);
  snprintf(ms, sizeof(ms), "%d", lease_ms);
  return mqproc__pg_run_fenced(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET lease_until = now() + $3::int * interval '1 millisecond'"
      " WHERE job_id = $1 AND attempt = $2::int"
      " AND (state = 'RUNNING' OR (delivery_acked AND state IN ('SUCCESS', 'FAILED')))",
      3, vals, job_id, attempt, NULL, err);
}

static int pg_outbox_done(mqproc__store_t *base, const char *job_id, int attempt, char *err) {
  char att[16];
  const char *vals[2] = {job_id, att};
  snprintf(att, sizeof(att), "%d", attempt);
  return mqproc__pg_run_text(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET delivery_acked = false, dead_letter_pending = false,"
      " lease_until = NULL, updated_at = now() WHERE job_id = $1"
      " AND attempt = $2::int AND state IN ('SUCCESS', 'FAILED') AND delivery_acked",
      2, vals, NULL, err);
}

static int pg_dead_lettered(mqproc__store_t *base, const char *job_id, int attempt, char *err) {
  char att[16];
  const char *vals[2] = {job_id, att};
  snprintf(att, sizeof(att), "%d", attempt);
  return mqproc__pg_run_text(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET dead_letter_pending = false, updated_at = now()"
      " WHERE job_id = $1 AND attempt = $2::int AND dead_letter_pending",
      2, vals, NULL, err);
}

/* Final jobs whose early-acked holder died before it sent their result or callbacks
 * (nothing would replay them: their message was acked). Taken for a grace lease. */
/* clang-format off */
static const char OUTBOX_SQL[] =
    "UPDATE mqproc_jobs SET lease_until = now() + $2::int * interval '1 millisecond',"
    " updated_at = now()"
    " WHERE job_id IN (SELECT job_id FROM mqproc_jobs WHERE processor_name = $1"
    "   AND state IN ('SUCCESS', 'FAILED') AND delivery_acked"
    "   AND " LEASE_END("lease_until", "$2") " < now()"
    "   ORDER BY lease_until LIMIT $3::int FOR UPDATE SKIP LOCKED)"
    " RETURNING job_id, request::text, request_format, state, attempt, result_published,"
    "   callback_state IS NOT NULL, dead_letter_pending, coalesce(last_error, ''),"
    "   request_body";
/* clang-format on */

static int pg_sweep_outbox(mqproc__store_t *base, const char *processor, int lease_ms, int limit,
                           void (*row)(void *ud, const mqproc__outbox_row_t *r), void *ud,
                           char *err) {
  PGresult *res = NULL;
  int rc = run_sweep((pg_store_t *)base, OUTBOX_SQL, processor, lease_ms, limit, &res, err);
  if (rc != MQPROC_OK)
    return rc;
  for (int i = 0; i < PQntuples(res); i++) {
    mqproc__outbox_row_t r = {.job_id = PQgetvalue(res, i, 0),
                              .request_json = PQgetvalue(res, i, 1),
                              .format = PQgetvalue(res, i, 2),
                              .state = PQgetvalue(res, i, 3),
                              .attempt = atoi(PQgetvalue(res, i, 4)),
                              .result_published = PQgetvalue(res, i, 5)[0] == 't',
                              .callbacks_done = PQgetvalue(res, i, 6)[0] == 't',
                              .dead_letter_pending = PQgetvalue(res, i, 7)[0] == 't',
                              .last_error = PQgetvalue(res, i, 8)};
    unsigned char *body = bytea_value(res, i, 9, &r.body_len);
    r.body = body;
    if (!PQgetisnull(res, i, 1))
      row(ud, &r);
    PQfreemem(body);
  }
  PQclear(res);
  return MQPROC_OK;
}

/* ---- after the outcome -------------------------------------------------------------- */

static int pg_mark_published(mqproc__store_t *base, const char *job_id, const char *error,
                             char *err) {
  const char *vals[2] = {job_id, error};
  return mqproc__pg_run_text(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET result_published = ($2::text IS NULL),"
      " last_error = coalesce($2, last_error), updated_at = now() WHERE job_id = $1",
      2, vals, NULL, err);
}

static int pg_record_callbacks(mqproc__store_t *base, const char *job_id, const char *error,
                               char *err) {
  const char *vals[2] = {job_id, error};
  return mqproc__pg_run_text(
      (pg_store_t *)base,
      "UPDATE mqproc_jobs SET callback_state = CASE WHEN $2::text IS NULL THEN 'OK'"
      " ELSE 'FAILED' END, callback_error = $2, updated_at = now() WHERE job_id = $1",
      2, vals, NULL, err);
}

static int pg_record_dead(mqproc__store_t *base, const char *processor, const char *job_id,
                          const void *body, size_t len, size_t keep, const char *reason,
                          const char *worker_id, char *err) {
  unsigned char sha[32];
  char total[24];
  size_t kept = len < keep ? len : keep;
  const char *vals[7] = {
      processor, job_id, reason,           body != NULL ? (const char *)body : "",
      worker_id, total,  (const char *)sha};
  int lens[7] = {0, 0, 0, (int)kept, 0, 0, (int)sizeof(sha)};
  int fmts[7] = {0, 0, 0, 1, 0, 0, 1};
  mqproc__sha256(body != NULL ? body : "", len, sha);
  snprintf(total, sizeof(total), "%zu", len);
  return mqproc__pg_run((pg_store_t *)base,
                        "INSERT INTO mqproc_dead_letters (processor_name, job_id, reason, body,"
                        " worker_id, body_len, body_sha256)"
                        " VALUES ($1, $2, $3, $4::bytea, $5, $6::bigint, $7::bytea)",
                        7, vals, lens, fmts, NULL, err);
}

/* ---- class -------------------------------------------------------------------------- */

static void pg_destroy(mqproc__store_t *base) {
  pg_store_t *s = (pg_store_t *)base;
  PQfinish(s->conn);
  free(s->conninfo);
  free(s);
}

static const struct mqproc__store_class pg_class = {
    "postgresql",        /* name */
    mqproc__pg_open,     /* open */
    mqproc__pg_migrate,  /* migrate */
    pg_claim,            /* claim */
    pg_start_try,        /* start_try */
    pg_end_try,          /* end_try */
    pg_succeed,          /* succeed */
    pg_fail,             /* fail */
    pg_release,          /* release */
    pg_give_up,          /* give_up */
    pg_ack_early,        /* ack_early */
    pg_sweep,            /* sweep */
    pg_republished,      /* republished */
    pg_ping,             /* ping */
    pg_renew,            /* renew */
    pg_outbox_done,      /* outbox_done */
    pg_dead_lettered,    /* dead_lettered */
    pg_sweep_outbox,     /* sweep_outbox */
    pg_mark_published,   /* mark_published */
    pg_record_callbacks, /* record_callbacks */
    pg_record_dead,      /* record_dead */
    pg_destroy,          /* destroy */
};

int mqproc__store_pg_new(mqproc__store_t **out, const char *conninfo, char *err) {
  pg_store_t *s = mqproc__calloc(1, sizeof(*s));
  if (s == NULL || (s->conninfo = mqproc__strdup(conninfo)) == NULL) {
    free(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  s->base.klass = &pg_class;
  *out = &s->base;
  return MQPROC_OK;
}
