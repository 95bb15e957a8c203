/* PostgreSQL job store (libpq): the job table's statements, fenced by attempt,
 * parameterised SQL only. Each method builds a request for the asynchronous engine
 * (store/pg_engine.c), which prepares every statement once per connection, batches the
 * hot ones (claim, succeed, renew, outbox_done: array parameters, one execution for
 * many jobs) and sends a round of them as one transaction; parse functions read each
 * request's rows back. The synchronous start-up connection and the schema are in
 * store/pg_conn.c; the sweeps and marks in store/pg_sweep.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store.h"
#include "store/pg/int.h"
#include "base/util.h"

/* ---- requests ----------------------------------------------------------------------- */

static pg_req_t *mqproc__pg_req(const pg_stmt_t *stmt, void *out, mqproc__store_done_cb done,
                                void *ud) {
  pg_req_t *r = mqproc__calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->stmt = stmt;
  r->n = stmt->nparams;
  r->out = out;
  r->done = done;
  r->ud = ud;
  return r;
}

void mqproc__pg_req_free(pg_req_t *r) {
  if (r == NULL)
    return;
  for (int i = 0; i < r->n; i++)
    free(r->vals[i]);
  free(r);
}

static int mqproc__pg_param(pg_req_t *r, int i, const char *s) {
  char *copy = NULL;
  const char *clean;
  if (s == NULL)
    return MQPROC_OK;
  /* the server refuses malformed UTF-8 with a data error: error texts from processors and
   * excerpts cut mid-character are cleaned */
  if ((clean = mqproc__utf8_clean(s, &copy)) == NULL)
    return MQPROC_ENOMEM;
  r->vals[i] = copy != NULL ? copy : mqproc__strdup(s);
  return r->vals[i] != NULL ? MQPROC_OK : MQPROC_ENOMEM;
}

static int mqproc__pg_param_int(pg_req_t *r, int i, long long v) {
  r->vals[i] = mqproc__asprintf("%lld", v);
  return r->vals[i] != NULL ? MQPROC_OK : MQPROC_ENOMEM;
}

static int mqproc__pg_param_bytes(pg_req_t *r, int i, const void *p, size_t len) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *b = p;
  if (p == NULL)
    return MQPROC_OK;
  if (!r->stmt->batched) { /* binary */
    if ((r->vals[i] = mqproc__malloc(len)) == NULL)
      return MQPROC_ENOMEM;
    memcpy(r->vals[i], p, len);
    r->lens[i] = (int)len;
    r->fmts[i] = 1;
    return MQPROC_OK;
  }
  /* an array element: bytea's text form */
  if ((r->vals[i] = mqproc__malloc(2 + 2 * len + 1)) == NULL)
    return MQPROC_ENOMEM;
  r->vals[i][0] = '\\';
  r->vals[i][1] = 'x';
  for (size_t k = 0; k < len; k++) {
    r->vals[i][2 + 2 * k] = hex[b[k] >> 4];
    r->vals[i][3 + 2 * k] = hex[b[k] & 15];
  }
  r->vals[i][2 + 2 * len] = '\0';
  return MQPROC_OK;
}

int mqproc__pg_request(mqproc__store_t *base, const pg_stmt_t *st, void *out, void *row_cb,
                       mqproc__store_done_cb done, void *ud, const char *types, ...) {
  pg_req_t *r = mqproc__pg_req(st, out, done, ud);
  va_list ap;
  int rc = r != NULL ? MQPROC_OK : MQPROC_ENOMEM;
  if (r != NULL)
    r->row_cb = row_cb;
  va_start(ap, types);
  for (int i = 0; rc == MQPROC_OK && types[i] != '\0'; i++) {
    switch (types[i]) {
    case 's':
      rc = mqproc__pg_param(r, i, va_arg(ap, const char *));
      break;
    case 'i':
      rc = mqproc__pg_param_int(r, i, va_arg(ap, int));
      break;
    case 'l':
      rc = mqproc__pg_param_int(r, i, va_arg(ap, long long));
      break;
    case 'b':
      rc = mqproc__pg_param(r, i, va_arg(ap, int) ? "true" : "false");
      break;
    case 'y': {
      const void *p = va_arg(ap, const void *);
      rc = mqproc__pg_param_bytes(r, i, p, va_arg(ap, size_t));
      break;
    }
    default:
      rc = MQPROC_EINVAL;
    }
  }
  va_end(ap);
  if (rc != MQPROC_OK) {
    mqproc__pg_req_free(r);
    return rc;
  }
  return mqproc__pg_submit((pg_store_t *)base, r);
}

/* A fenced write changed no row: a newer attempt owns the job (vals 0, 1: job, attempt). */
static int fenced(pg_req_t *r) {
  return mqproc__err(r->err, MQPROC_ESTORE_FENCED, "job %s: attempt %s no longer owns the job",
                     r->vals[0], r->vals[1]);
}

int mqproc__pg_parse_fenced(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (r->stmt->batched ? n == 0 : atoi(PQcmdTuples(res)) == 0)
    return fenced(r);
  return MQPROC_OK;
}

/* ---- claim -------------------------------------------------------------------------- */

/* LEASE_END (store/pg_int.h), when a holder's lease counts as over, for the claim and both
 * sweeps: at lease_until, but never within two leases (ms: the SQL parameter given) of the
 * database's start. Holders could not renew while it was down, and a server that never noticed the
 * outage (started during it, or idle) would otherwise take a live job over; a copy redelivered
 * meanwhile is held, not run, until the holders had the time to renew. */
/* clang-format off */
/* The claims of many deliveries in one statement: take each job when it is new, QUEUED,
 * or RUNNING under an expired lease (attempt + 1) and start its first try; otherwise
 * count the delivery and report the row as it is. The server's lease and attempt limit
 * are the same in every element (one server makes a batch): element 1 stands for all. */
static const char CLAIM_SQL[] =
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[],"
    "   $5::bigint[], $6::jsonb[], $7::text[], $8::int[], $9::bytea[], $10::text[],"
    "   $11::jsonb[], $12::smallint[])"
    "   WITH ORDINALITY AS v(job_id, processor, worker, lease_ms, created, request, fmt,"
    "   maxa, body, log_path, headers, prio, ord)),"
    " claim AS ("
    " INSERT INTO mqproc_jobs AS j (job_id, processor_name, state, attempt, deliveries,"
    "   worker_id, lease_until, created_time, start_time, request, request_format,"
    "   request_body, tries, log_path, headers, priority)"
    " SELECT job_id, processor, 'RUNNING', 1, 1, worker,"
    "   now() + lease_ms * interval '1 millisecond', to_timestamp(created), now(), request,"
    "   fmt, body, 1, log_path, headers, prio FROM v"
    " ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt = j.attempt + 1,"
    "   deliveries = j.deliveries + 1, worker_id = EXCLUDED.worker_id,"
    "   lease_until = EXCLUDED.lease_until, start_time = now(), end_time = NULL,"
    "   delivery_acked = false, republish = false, tries = j.tries + 1,"
    "   log_path = EXCLUDED.log_path, headers = coalesce(EXCLUDED.headers, j.headers),"
    "   priority = coalesce(EXCLUDED.priority, j.priority),"
    "   request = coalesce(j.request, EXCLUDED.request),"
    "   request_body = coalesce(j.request_body, EXCLUDED.request_body), updated_at = now()"
    "  WHERE (j.state = 'QUEUED'"
    "     OR (j.state = 'RUNNING' AND (" LEASE_END("j.lease_until", "($4::int[])[1]") " < now()"
    "       OR coalesce(" HOLDER_DEAD_AT("j.worker_id", "($4::int[])[1]") " < now(), false))))"
    "    AND j.attempt - j.attempt_base < ($8::int[])[1]"
    " RETURNING j.job_id, true, j.attempt, j.state, j.tries, j.requeues, j.result_published,"
    "   j.callback_state IS NOT NULL, false, 0::bigint, j.worker_id, false, '', 0),"
    " try AS (INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id)"
    "   SELECT job_id, tries, attempt, worker_id FROM claim),"
    " seen AS ("
    " UPDATE mqproc_jobs s SET deliveries = s.deliveries + 1, updated_at = now() FROM v"
    "  WHERE s.job_id = v.job_id AND NOT EXISTS (SELECT 1 FROM claim c WHERE c.job_id = v.job_id)"
    " RETURNING s.job_id, false, s.attempt, s.state, s.tries, s.requeues, s.result_published,"
    "   s.callback_state IS NOT NULL,"
    "   s.state = 'RUNNING' AND " LEASE_END("s.lease_until", "($4::int[])[1]") " >= now()"
    "     AND NOT coalesce(" HOLDER_DEAD_AT("s.worker_id", "($4::int[])[1]") " < now(), false),"
    "   greatest(0, extract(epoch FROM least(" LEASE_END("s.lease_until", "($4::int[])[1]") ","
    "     " HOLDER_DEAD_AT("s.worker_id", "($4::int[])[1]") ") - now()) * 1000)::bigint,"
    "   coalesce(s.worker_id, ''),"
    "   s.delivery_acked AND s.state IN ('SUCCESS', 'FAILED', 'CANCELLED'),"
    "   coalesce((SELECT w.host FROM mqproc_workers w WHERE w.worker_id = s.worker_id), ''),"
    "   coalesce((SELECT w.pid FROM mqproc_workers w WHERE w.worker_id = s.worker_id), 0))"
    "SELECT v.ord, r.* FROM (SELECT * FROM claim UNION ALL SELECT * FROM seen) r"
    " JOIN v ON v.job_id = r.job_id";
/* clang-format on */

static int parse_claim(pg_req_t *r, PGresult *res, const int *rows, int n) {
  mqproc__claim_t *c = r->out;
  int row = rows[0];
  if (n == 0)
    return MQPROC__PG_RETRY; /* inserted concurrently after our snapshot: neither claimed
                                nor seen */
  c->claimed = PQgetvalue(res, row, 2)[0] == 't';
  c->attempt = atoi(PQgetvalue(res, row, 3));
  snprintf(c->state, sizeof(c->state), "%s", PQgetvalue(res, row, 4));
  c->tries = atoi(PQgetvalue(res, row, 5));
  c->try_no = c->claimed ? c->tries : 0;
  c->requeues = atoi(PQgetvalue(res, row, 6));
  c->result_published = PQgetvalue(res, row, 7)[0] == 't';
  c->callbacks_done = PQgetvalue(res, row, 8)[0] == 't';
  c->lease_live = PQgetvalue(res, row, 9)[0] == 't';
  c->lease_left_ms = PQgetisnull(res, row, 10) ? 0 : atoll(PQgetvalue(res, row, 10));
  snprintf(c->worker_id_now, sizeof(c->worker_id_now), "%s", PQgetvalue(res, row, 11));
  c->outbox_pending = PQgetvalue(res, row, 12)[0] == 't';
  snprintf(c->holder_host, sizeof(c->holder_host), "%s", PQgetvalue(res, row, 13));
  c->holder_pid = atoi(PQgetvalue(res, row, 14));
  return MQPROC_OK;
}

static const pg_stmt_t CLAIM = {"mqproc_claim", CLAIM_SQL, 12, 1, 0, parse_claim};

static int pg_claim(mqproc__store_t *base, mqproc__claim_t *c, mqproc__store_done_cb done,
                    void *ud) {
  char created[24], prio[16];
  snprintf(created, sizeof(created), "%lld", c->created_time);
  snprintf(prio, sizeof(prio), "%d", c->priority);
  return mqproc__pg_request(
      base, &CLAIM, c, NULL, done, ud, "sssisssiysss", c->job_id, c->processor, c->worker_id,
      c->lease_ms, c->created_time >= 0 ? created : NULL, c->request_json,
      c->request_format != NULL ? c->request_format : "json",
      c->max_attempts > 0 ? c->max_attempts : 1000000, c->request_body, c->request_body_len,
      c->log_path, c->headers_json, c->priority >= 0 ? prio : NULL);
}

/* ---- tries -------------------------------------------------------------------------- */

static int parse_start_try(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (n == 0)
    return fenced(r);
  *(int *)r->out = atoi(PQgetvalue(res, 0, 0));
  return MQPROC_OK;
}

static const pg_stmt_t START_TRY = {
    "mqproc_start_try",
    "WITH j AS (UPDATE mqproc_jobs SET tries = tries + 1, log_path = $4,"
    " updated_at = now() WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'"
    " RETURNING tries)"
    " INSERT INTO mqproc_job_tries (job_id, try, attempt, worker_id)"
    " SELECT $1, tries, $2::int, $3 FROM j RETURNING try",
    4,
    0,
    0,
    parse_start_try};

static int pg_start_try(mqproc__store_t *base, const char *job_id, int attempt,
                        const char *worker_id, const char *log_path, int *try_no,
                        mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &START_TRY, try_no, NULL, done, ud, "siss", job_id, attempt,
                            worker_id, log_path);
}

static const pg_stmt_t END_TRY = {
    "mqproc_end_try",
    "WITH j AS (UPDATE mqproc_jobs SET last_error = coalesce($8, last_error),"
    " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
    " AND state = 'RUNNING' RETURNING job_id)"
    " UPDATE mqproc_job_tries t SET ended_at = now(), ok = $4::boolean,"
    " exit_code = $5::int, term_signal = $6::int, duration_ms = $7::bigint,"
    " error = $8 FROM j WHERE t.job_id = j.job_id AND t.try = $3::int",
    8,
    0,
    0,
    mqproc__pg_parse_fenced};

/* exit code and signal as text, or NULL when there are none */
static char *num_or_null(int v, int present) {
  return present ? mqproc__asprintf("%d", v) : NULL;
}

static int pg_end_try(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, mqproc__store_done_cb done, void *ud) {
  char *code = num_or_null(e->exit_code, e->exit_code >= 0);
  char *sig = num_or_null(e->term_signal, e->term_signal > 0);
  int rc = mqproc__pg_request(base, &END_TRY, NULL, NULL, done, ud, "siibssls", job_id, attempt,
                              try_no, e->ok, code, sig, (long long)e->duration_ms, e->error);
  free(code);
  free(sig);
  return rc;
}

/* ---- outcomes ----------------------------------------------------------------------- */

/* The successes of many jobs in one statement: the try's end and SUCCESS in one write
 * (the hot path). outbox: the holder acks its delivery now and still sends the result or
 * callbacks: the row carries them (delivery_acked, a lease) until outbox_done. */
static const pg_stmt_t SUCCEED = {
    "mqproc_succeed",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[],"
    "   $5::int[], $6::bool[], $7::int[])"
    "   WITH ORDINALITY AS v(job_id, attempt, try, ms, code, outbox, lease_ms, ord)),"
    " j AS (UPDATE mqproc_jobs j SET state = 'SUCCESS', end_time = now(),"
    "   exec_time_ms = v.ms, updated_at = now(),"
    "   delivery_acked = j.delivery_acked OR v.outbox,"
    "   lease_until = CASE WHEN j.delivery_acked OR v.outbox"
    "     THEN now() + v.lease_ms * interval '1 millisecond' END"
    "  FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt AND j.state = 'RUNNING'"
    "  RETURNING j.job_id, v.ord, v.try, v.ms, v.code),"
    " t AS (UPDATE mqproc_job_tries t SET ended_at = now(), ok = true, exit_code = j.code,"
    "   duration_ms = j.ms FROM j WHERE t.job_id = j.job_id AND t.try = j.try)"
    " SELECT ord FROM j",
    7,
    1,
    0,
    mqproc__pg_parse_fenced};

static int pg_succeed(mqproc__store_t *base, const char *job_id, int attempt, int try_no,
                      const mqproc__try_end_t *e, int outbox, int lease_ms,
                      mqproc__store_done_cb done, void *ud) {
  char *code = num_or_null(e->exit_code, e->exit_code >= 0);
  int rc = mqproc__pg_request(base, &SUCCEED, NULL, NULL, done, ud, "siilsbi", job_id, attempt,
                              try_no, (long long)e->duration_ms, code, outbox, lease_ms);
  free(code);
  return rc;
}

static int parse_fail(pg_req_t *r, PGresult *res, const int *rows, int n) {
  (void)rows;
  if (n == 0)
    return fenced(r);
  *(int *)r->out = strcmp(PQgetvalue(res, 0, 0), "QUEUED") == 0;
  return MQPROC_OK;
}

static const pg_stmt_t FAIL = {
    "mqproc_fail",
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
    5,
    0,
    0,
    parse_fail};

static int pg_fail(mqproc__store_t *base, const char *job_id, int attempt, const char *error,
                   int max_requeues, int republish, int *requeued, mqproc__store_done_cb done,
                   void *ud) {
  return mqproc__pg_request(base, &FAIL, requeued, NULL, done, ud, "sisib", job_id, attempt, error,
                            max_requeues, republish);
}

static const pg_stmt_t RELEASE = {"mqproc_release",
                                  "UPDATE mqproc_jobs SET state = 'QUEUED', lease_until = NULL,"
                                  " republish = $4::boolean, delivery_acked = false,"
                                  " last_error = coalesce($3, last_error), updated_at = now(),"
                                  " attempt_base = attempt_base + $5::int"
                                  " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
                                  5,
                                  0,
                                  0,
                                  mqproc__pg_parse_fenced};

static int pg_release(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      int refund, int republish, mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &RELEASE, NULL, NULL, done, ud, "sisbi", job_id, attempt, why,
                            republish, refund ? 1 : 0);
}

static const pg_stmt_t GIVE_UP = {
    "mqproc_give_up",
    "UPDATE mqproc_jobs SET state = 'FAILED', end_time = now(), lease_until = NULL,"
    " republish = false, delivery_acked = false, last_error = $3,"
    " updated_at = now() WHERE job_id = $1 AND attempt = $2::int"
    " AND (state = 'QUEUED' OR (state = 'RUNNING' AND lease_until < now()))",
    3,
    0,
    0,
    mqproc__pg_parse_fenced};

static int pg_give_up(mqproc__store_t *base, const char *job_id, int attempt, const char *why,
                      mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &GIVE_UP, NULL, NULL, done, ud, "sis", job_id, attempt, why);
}

static const pg_stmt_t ACK_EARLY = {
    "mqproc_ack_early",
    "UPDATE mqproc_jobs SET delivery_acked = true, updated_at = now()"
    " WHERE job_id = $1 AND attempt = $2::int AND state = 'RUNNING'",
    2,
    0,
    0,
    mqproc__pg_parse_fenced};

static int pg_ack_early(mqproc__store_t *base, const char *job_id, int attempt,
                        mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &ACK_EARLY, NULL, NULL, done, ud, "si", job_id, attempt);
}

/* The lease renewals of many jobs in one statement (the server's tick). */
static const pg_stmt_t RENEW = {
    "mqproc_renew",
    "WITH v AS (SELECT * FROM unnest($1::text[], $2::int[], $3::int[])"
    "   WITH ORDINALITY AS v(job_id, attempt, lease_ms, ord))"
    " UPDATE mqproc_jobs j SET lease_until = now() + v.lease_ms * interval '1 millisecond'"
    " FROM v WHERE j.job_id = v.job_id AND j.attempt = v.attempt"
    " AND (j.state = 'RUNNING' OR (j.delivery_acked AND j.state IN ('SUCCESS', 'FAILED')))"
    " RETURNING v.ord",
    3,
    1,
    0,
    mqproc__pg_parse_fenced};

static int pg_renew(mqproc__store_t *base, const char *job_id, int attempt, int lease_ms,
                    mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &RENEW, NULL, NULL, done, ud, "sii", job_id, attempt, lease_ms);
}

static const pg_stmt_t PING = {"mqproc_ping", "SELECT 1", 0, 0, 0, NULL};

static int pg_ping(mqproc__store_t *base, mqproc__store_done_cb done, void *ud) {
  return mqproc__pg_request(base, &PING, NULL, NULL, done, ud, "");
}

/* ---- class -------------------------------------------------------------------------- */

static void pg_listen(mqproc__store_t *base, void (*cb)(void *ud, const char *payload), void *ud) {
  pg_store_t *s = (pg_store_t *)base;
  if (s->pooled) /* LISTEN needs a session of its own: wishes and cancels come with the beat */
    return;
  s->on_notify = cb;
  s->notify_ud = ud;
}

static void pg_forget(mqproc__store_t *base, void *ud) {
  pg_store_t *s = (pg_store_t *)base;
  if (s->engine != NULL)
    mqproc__pg_engine_forget(s->engine, ud);
}

static void pg_destroy(mqproc__store_t *base) {
  pg_store_t *s = (pg_store_t *)base;
  mqproc__pg_engine_free(s->engine);
  PQfinish(s->conn);
  free(s->conninfo);
  free(s);
}

static const struct mqproc__store_class pg_class = {
    "postgresql",                /* name */
    mqproc__pg_open,             /* open */
    mqproc__pg_migrate,          /* migrate */
    pg_claim,                    /* claim */
    pg_start_try,                /* start_try */
    pg_end_try,                  /* end_try */
    pg_succeed,                  /* succeed */
    pg_fail,                     /* fail */
    pg_release,                  /* release */
    pg_give_up,                  /* give_up */
    pg_ack_early,                /* ack_early */
    mqproc__pg_sweep,            /* sweep */
    mqproc__pg_republished,      /* republished */
    pg_ping,                     /* ping */
    pg_renew,                    /* renew */
    mqproc__pg_outbox_done,      /* outbox_done */
    mqproc__pg_dead_lettered,    /* dead_lettered */
    mqproc__pg_sweep_outbox,     /* sweep_outbox */
    mqproc__pg_mark_published,   /* mark_published */
    mqproc__pg_record_callbacks, /* record_callbacks */
    mqproc__pg_record_dead,      /* record_dead */
    mqproc__pg_beat,             /* beat */
    mqproc__pg_holder_gone,      /* holder_gone */
    mqproc__pg_cancelled,        /* cancelled */
    pg_listen,                   /* listen */
    pg_forget,                   /* forget */
    pg_destroy,                  /* destroy */
};

void mqproc__store_pg_pooled(mqproc__store_t *base) {
  ((pg_store_t *)base)->pooled = 1;
}

int mqproc__store_pg_new(mqproc__store_t **out, const char *conninfo, mqproc__loop_t *loop,
                         char *err) {
  pg_store_t *s = mqproc__calloc(1, sizeof(*s));
  int rc;
  if (s == NULL || (s->conninfo = mqproc__strdup(conninfo)) == NULL) {
    free(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  s->base.klass = &pg_class;
  if (loop != NULL && (rc = mqproc__pg_engine_new(&s->engine, s, loop, err)) != MQPROC_OK) {
    free(s->conninfo);
    free(s);
    return rc;
  }
  *out = &s->base;
  return MQPROC_OK;
}
