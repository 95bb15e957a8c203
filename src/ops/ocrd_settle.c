/* The release pass (ocrd.h, mqproc__ocrd_settle): what OCR-D's Processing Server does in
 * memory when a worker's result callback comes, done from the job table, so it can be
 * done again at any time by anyone (a callback, the API's sweep, a restarted API, another
 * API process) with the same outcome:
 *   1. a CACHED job whose dependency ended FAILED or CANCELLED becomes CANCELLED (and so,
 *      in the same pass, the jobs that depend on it);
 *   2. in the order the jobs came, a CACHED job whose dependencies all ended SUCCESS and
 *      whose pages no job before it holds or waits for becomes QUEUED (republish set: if
 *      its message is lost with this process, a server's sweep sends it) and is published;
 *   3. a workflow run whose jobs all ended is ended, and its callback URL POSTed (by the
 *      API off its worker thread, e->callbacks; again after a restart when no outcome was
 *      recorded: at least once).
 * Steps 1 and 2 run under the workspace's lock (ocrd_int.h), one transaction per
 * workspace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "ops/ocrd.h"
#include "ops/ocrd_int.h"
#include "ops/submit.h"
#include "runner/ocrd_argv.h"

/* One job of a workspace that holds or waits for pages. */
typedef struct wjob {
  char *id, *processor;
  char state[16];
  json_t *outputs, *pages, *deps; /* owned; pages NULL: every page */
  int released;
} wjob_t;

typedef struct pass {
  wjob_t *jobs;
  size_t n;
  json_t *states; /* {job id: state} of the dependencies outside the workspace's list */
} pass_t;

static void pass_free(pass_t *p) {
  for (size_t i = 0; i < p->n; i++) {
    free(p->jobs[i].id);
    free(p->jobs[i].processor);
    json_decref(p->jobs[i].outputs);
    json_decref(p->jobs[i].pages);
    json_decref(p->jobs[i].deps);
  }
  free(p->jobs);
  json_decref(p->states);
}

static json_t *loads_or_null(const char *text) {
  json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
  if (json_is_null(v)) {
    json_decref(v);
    return NULL;
  }
  return v;
}

/* The workspace's jobs that hold or wait, in the order they came; -1 with err. */
static int load(const mqproc__ocrd_env_t *e, const char *ws, pass_t *p, char *err) {
  const char *vals[1] = {ws};
  mqproc__ores_t *r = mqproc__odb_q(
      e->db,
      "SELECT o.job_id, j.state, o.output_file_grps::text, o.pages::text, o.depends_on::text,"
      " j.processor_name"
      " FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j ON j.job_id = o.job_id"
      " WHERE o.workspace = $1 AND j.state IN ('QUEUED', 'RUNNING', 'CACHED') ORDER BY o.seq",
      "SELECT o.job_id, j.state, o.output_file_grps, o.pages, o.depends_on,"
      " j.processor_name"
      " FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j ON j.job_id = o.job_id"
      " WHERE o.workspace = ?1 AND j.state IN ('QUEUED', 'RUNNING', 'CACHED') ORDER BY o.seq",
      1, vals, err);
  if (r == NULL)
    return -1;
  p->n = (size_t)mqproc__ores_rows(r);
  if ((p->jobs = calloc(p->n + 1, sizeof(*p->jobs))) == NULL) {
    p->n = 0;
    mqproc__ores_free(r);
    snprintf(err, 512, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < p->n; i++) {
    wjob_t *j = &p->jobs[i];
    int row = (int)i;
    j->id = strdup(mqproc__ores_get(r, row, 0));
    snprintf(j->state, sizeof(j->state), "%s", mqproc__ores_get(r, row, 1));
    j->outputs = json_loads(mqproc__ores_get(r, row, 2), 0, NULL);
    j->pages = mqproc__ores_null(r, row, 3) ? NULL : loads_or_null(mqproc__ores_get(r, row, 3));
    j->deps = json_loads(mqproc__ores_get(r, row, 4), 0, NULL);
    j->processor = strdup(mqproc__ores_get(r, row, 5));
  }
  mqproc__ores_free(r);
  return 0;
}

/* The states of the CACHED jobs' dependencies, read once: {id: state}. */
static int dep_states(const mqproc__ocrd_env_t *e, pass_t *p, char *err) {
  json_t *ids = json_array(), *d;
  char *text;
  const char *vals[1];
  mqproc__ores_t *r;
  size_t k;
  for (size_t i = 0; i < p->n; i++)
    if (!strcmp(p->jobs[i].state, "CACHED"))
      json_array_foreach(p->jobs[i].deps, k, d) json_array_append(ids, d);
  p->states = json_object();
  if (json_array_size(ids) == 0) {
    json_decref(ids);
    return 0;
  }
  text = mqproc__ocrd_dumps(ids);
  json_decref(ids);
  vals[0] = text;
  r = mqproc__odb_q(e->db,
                    "SELECT job_id, state FROM mqproc_jobs WHERE job_id IN"
                    " (SELECT jsonb_array_elements_text($1::jsonb))",
                    "SELECT job_id, state FROM mqproc_jobs WHERE job_id IN"
                    " (SELECT value FROM json_each(?1))",
                    1, vals, err);
  free(text);
  if (r == NULL)
    return -1;
  for (int i = 0; i < mqproc__ores_rows(r); i++)
    json_object_set_new(p->states, mqproc__ores_get(r, i, 0),
                        json_string(mqproc__ores_get(r, i, 1)));
  mqproc__ores_free(r);
  return 0;
}

/* The state of a dependency now ("" when it is no job). */
static const char *dep_state(const pass_t *p, const char *id) {
  const char *s = json_string_value(json_object_get(p->states, id));
  return s != NULL ? s : "";
}

static int set_state(const mqproc__ocrd_env_t *e, wjob_t *j, const char *to, const char *why,
                     char *err) {
  const char *vals[3] = {j->id, to, why};
  mqproc__ores_t *r = mqproc__odb_q(
      e->db,
      "UPDATE mqproc_jobs SET state = $2, updated_at = now(),"
      " republish = ($2 = 'QUEUED'),"
      " lease_until = CASE WHEN $2 = 'QUEUED' THEN now() + " MQPROC__OPS_GRACE_PG " END,"
      " end_time = CASE WHEN $2 = 'CANCELLED' THEN now() END, last_error = $3"
      " WHERE job_id = $1 AND state = 'CACHED'",
      "UPDATE mqproc_jobs SET state = ?2, updated_at = mq_now(),"
      " republish = (?2 = 'QUEUED'),"
      " lease_until = CASE WHEN ?2 = 'QUEUED' THEN mq_now() + " MQPROC__OPS_GRACE_SQ " END,"
      " end_time = CASE WHEN ?2 = 'CANCELLED' THEN mq_now() END, last_error = ?3"
      " WHERE job_id = ?1 AND state = 'CACHED'",
      3, vals, err);
  long long n = r != NULL ? mqproc__ores_changed(r) : -1;
  mqproc__ores_free(r);
  if (n == 1)
    snprintf(j->state, sizeof(j->state), "%s", to);
  return n < 0 ? -1 : (int)n;
}

/* Whether j, waiting, must be cancelled (a dependency FAILED or was CANCELLED: its name
 * into failed) or may go (every dependency SUCCESS). */
static int deps_verdict(const pass_t *p, const wjob_t *j, char *failed, size_t n) {
  size_t k;
  json_t *d;
  int all_ok = 1;
  json_array_foreach(j->deps, k, d) {
    const char *id = json_string_value(d), *s = dep_state(p, id);
    for (size_t i = 0; i < p->n; i++) /* one of this workspace's, as this pass left it */
      if (!strcmp(p->jobs[i].id, id))
        s = p->jobs[i].state;
    if (!strcmp(s, "FAILED") || !strcmp(s, "CANCELLED")) {
      snprintf(failed, n, "cancelled: job %.60s it depends on ended %s", id, s);
      return -1;
    }
    all_ok &= !strcmp(s, "SUCCESS");
  }
  return all_ok;
}

/* Whether job i overlaps a job before it that holds or waits, or a QUEUED or RUNNING one
 * anywhere in the list. */
static int blocked(const pass_t *p, size_t i) {
  const wjob_t *j = &p->jobs[i];
  for (size_t k = 0; k < p->n; k++) {
    const wjob_t *o = &p->jobs[k];
    int holds = !strcmp(o->state, "QUEUED") || !strcmp(o->state, "RUNNING") ||
                (k < i && !strcmp(o->state, "CACHED"));
    if (k != i && holds && mqproc__ocrd_overlap(o->outputs, o->pages, j->outputs, j->pages))
      return 1;
  }
  return 0;
}

/* Steps 1 and 2 in the workspace's transaction: how many changed, -1. */
static int decide(const mqproc__ocrd_env_t *e, pass_t *p, char *err) {
  int changed = 0;
  for (size_t i = 0; i < p->n; i++) {
    wjob_t *j = &p->jobs[i];
    char why[200];
    int v, n;
    if (strcmp(j->state, "CACHED") != 0)
      continue;
    if ((v = deps_verdict(p, j, why, sizeof(why))) < 0) {
      if ((n = set_state(e, j, "CANCELLED", why, err)) < 0)
        return -1;
      changed += n;
      if (n == 1)
        MQPROC__INFO("job %s: %s", j->id, why);
    } else if (v == 1 && !blocked(p, i)) {
      if ((n = set_state(e, j, "QUEUED", NULL, err)) < 0)
        return -1;
      j->released = n == 1;
      changed += n;
    }
  }
  return changed;
}

/* A released job's message, its request as stored (read only now: a workspace may hold
 * many waiting jobs and few are released at a time). */
static void publish_released(const mqproc__ocrd_env_t *e, const wjob_t *j, const char *hdr) {
  const char *vals[1] = {j->id};
  char err[512];
  size_t len;
  unsigned char *body;
  mqproc__ores_t *r =
      mqproc__odb_q(e->db, "SELECT request_body FROM mqproc_jobs WHERE job_id = $1",
                    "SELECT request_body FROM mqproc_jobs WHERE job_id = ?1", 1, vals, err);
  body = r != NULL && mqproc__ores_rows(r) == 1 ? mqproc__ores_bytes(r, 0, 0, &len) : NULL;
  mqproc__ores_free(r);
  if (body != NULL) /* (else a server's sweep sends it: its republish mark is set) */
    mqproc__ocrd_publish(e, j->id, j->processor, body, len, hdr);
  free(body);
}

static int settle_workspace(const mqproc__ocrd_env_t *e, const char *ws, char *err) {
  pass_t p = {0};
  int changed = -1;
  char hdr[MQPROC__METS_SERVER_URL_MAX + 64], why[512];
  if (mqproc__ocrd_lock(e, ws, err) != 0)
    return -1;
  if (load(e, ws, &p, err) == 0 && dep_states(e, &p, err) == 0)
    changed = decide(e, &p, err);
  if (changed > 0 && mqproc__odb_commit(e->db, err) != 0)
    changed = -1;
  if (changed <= 0) /* nothing to keep, or it failed */
    mqproc__odb_rollback(e->db);
  /* the released jobs go through the workspace's METS server: kept running (a row keeps its
   * header for a server's republish when the server cannot be had now) */
  if (changed > 0 && mqproc__ocrd_mets_header(e, ws, hdr, sizeof(hdr), why) != 0) {
    MQPROC__WARN("workspace %s: released jobs not published now: %s", ws, why);
  } else {
    for (size_t i = 0; changed > 0 && i < p.n; i++)
      if (p.jobs[i].released)
        publish_released(e, &p.jobs[i], hdr);
  }
  pass_free(&p);
  return changed;
}

/* ---- workflow runs that ended ------------------------------------------------------------ */

/* A run's callback as the caller POSTs it: {"job_id", "url", "body"} (new, NULL). */
static json_t *callback_item(const char *id, const char *url, const char *state, const char *mets) {
  json_t *msg = json_pack("{s:s, s:s, s:s}", "job_id", id, "state", state, "path_to_mets", mets);
  char *body = mqproc__ocrd_dumps(msg);
  json_t *item =
      body != NULL ? json_pack("{s:s, s:s, s:s}", "job_id", id, "url", url, "body", body) : NULL;
  json_decref(msg);
  free(body);
  return item;
}

int mqproc__ocrd_callback_record(const mqproc__ocrd_env_t *e, const char *id, const char *error) {
  const char *vals[3] = {id, error == NULL ? "OK" : "FAILED", error};
  char err[512];
  mqproc__ores_t *r;
  if (error != NULL)
    MQPROC__WARN("workflow job %s: callback failed: %s", id, error);
  r = mqproc__odb_q(e->db,
                    "UPDATE mqproc_workflow_jobs SET callback_state = $2,"
                    " callback_error = $3 WHERE job_id = $1",
                    "UPDATE mqproc_workflow_jobs SET callback_state = ?2,"
                    " callback_error = ?3 WHERE job_id = ?1",
                    3, vals, err);
  if (r == NULL)
    MQPROC__WARN("workflow job %s: the callback's outcome is not recorded: %s", id, err);
  mqproc__ores_free(r);
  return r != NULL ? 0 : -1;
}

/* A run's end: into e->callbacks for the caller to POST off this thread, or (no list: the
 * command line's wait) POSTed now, blocking, and how that went recorded. */
static void call_back(const mqproc__ocrd_env_t *e, const char *id, const char *url,
                      const char *state, const char *mets) {
  json_t *item = callback_item(id, url, state, mets);
  char cerr[MQPROC_ERR_LEN];
  mqproc__callback_opts_t none = {.timeout_ms = 10000, .retries = 3, .backoff_ms = 500};
  int rc;
  if (item != NULL && e->callbacks != NULL) { /* (else left unrecorded: sent again later) */
    json_array_append_new(e->callbacks, item);
    return;
  }
  rc = item != NULL ? mqproc__callback_post(url, json_string_value(json_object_get(item, "body")),
                                            e->cb != NULL ? e->cb : &none, NULL, cerr)
                    : MQPROC_ENOMEM;
  mqproc__ocrd_callback_record(e, id, rc == MQPROC_OK ? NULL : item != NULL ? cerr : "no memory");
  json_decref(item);
}

int mqproc__ocrd_callbacks_due(const mqproc__ocrd_env_t *e, int max, char *err) {
  char pg[512], sq[512];
  mqproc__ores_t *r;
  snprintf(pg, sizeof(pg),
           "SELECT job_id, callback_url, state, path_to_mets FROM mqproc_workflow_jobs"
           " WHERE ended_at > now() - interval '1 day' AND callback_url IS NOT NULL"
           " AND callback_state IS NULL ORDER BY ended_at LIMIT %d",
           max);
  snprintf(sq, sizeof(sq),
           "SELECT job_id, callback_url, state, path_to_mets FROM mqproc_workflow_jobs"
           " WHERE ended_at > mq_now() - 86400000 AND callback_url IS NOT NULL"
           " AND callback_state IS NULL ORDER BY ended_at LIMIT %d",
           max);
  if (e->callbacks == NULL || max <= 0)
    return 0;
  if ((r = mqproc__odb_q(e->db, pg, sq, 0, NULL, err)) == NULL)
    return -1;
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    json_t *item = callback_item(mqproc__ores_get(r, i, 0), mqproc__ores_get(r, i, 1),
                                 mqproc__ores_get(r, i, 2), mqproc__ores_get(r, i, 3));
    if (item != NULL)
      json_array_append_new(e->callbacks, item);
  }
  mqproc__ores_free(r);
  return 0;
}

/* Ends run id when all its jobs ended (SUCCESS when all succeeded, else FAILED); the one
 * process whose update ends it calls its callback (call_back: at least once, the API
 * sending again what it never recorded). */
static int end_run(const mqproc__ocrd_env_t *e, const char *id, const char *ids, char *err) {
  const char *vals[2] = {ids, NULL};
  mqproc__ores_t *r = mqproc__odb_q(
      e->db,
      "SELECT count(*), count(*) FILTER (WHERE state IN ('SUCCESS', 'FAILED', 'CANCELLED')),"
      " count(*) FILTER (WHERE state = 'SUCCESS') FROM mqproc_jobs WHERE job_id IN"
      " (SELECT jsonb_array_elements_text($1::jsonb))",
      "SELECT count(*), count(*) FILTER (WHERE state IN ('SUCCESS', 'FAILED', 'CANCELLED')),"
      " count(*) FILTER (WHERE state = 'SUCCESS') FROM mqproc_jobs WHERE job_id IN"
      " (SELECT value FROM json_each(?1))",
      1, vals, err);
  long long all, ended, ok;
  const char *state;
  if (r == NULL)
    return -1;
  all = atoll(mqproc__ores_get(r, 0, 0));
  ended = atoll(mqproc__ores_get(r, 0, 1));
  ok = atoll(mqproc__ores_get(r, 0, 2));
  mqproc__ores_free(r);
  if (ended < all)
    return 0;
  state = ok == all ? "SUCCESS" : "FAILED";
  vals[0] = id;
  vals[1] = state;
  r = mqproc__odb_q(e->db,
                    "UPDATE mqproc_workflow_jobs SET state = $2, ended_at = now()"
                    " WHERE job_id = $1 AND ended_at IS NULL RETURNING callback_url, path_to_mets",
                    "UPDATE mqproc_workflow_jobs SET state = ?2, ended_at = mq_now()"
                    " WHERE job_id = ?1 AND ended_at IS NULL RETURNING callback_url, path_to_mets",
                    2, vals, err);
  if (r == NULL)
    return -1;
  if (mqproc__ores_rows(r) == 1) {
    MQPROC__INFO("workflow job %s: %s", id, state);
    if (!mqproc__ores_null(r, 0, 0))
      call_back(e, id, mqproc__ores_get(r, 0, 0), state, mqproc__ores_get(r, 0, 1));
  }
  mqproc__ores_free(r);
  return 1;
}

/* The open runs' job ids as one flat array text. */
static char *flat_ids(const char *by_page) {
  json_t *o = json_loads(by_page, 0, NULL), *ids = json_array(), *list;
  const char *k;
  char *text;
  json_object_foreach(o, k, list) json_array_extend(ids, list);
  text = mqproc__ocrd_dumps(ids);
  json_decref(ids);
  json_decref(o);
  return text;
}

/* The open runs none of whose jobs waits or runs any more (by the workflow index of
 * mqproc_ocrd_jobs: the runs still going cost nothing), each ended. */
static int end_runs(const mqproc__ocrd_env_t *e, char *err) {
  mqproc__ores_t *r = mqproc__odb_q(
      e->db,
      "SELECT w.job_id, w.processing_job_ids::text FROM mqproc_workflow_jobs w"
      " WHERE w.ended_at IS NULL AND NOT EXISTS (SELECT 1 FROM mqproc_ocrd_jobs o"
      "   JOIN mqproc_jobs j ON j.job_id = o.job_id WHERE o.workflow_job_id = w.job_id"
      "   AND j.state IN ('QUEUED', 'RUNNING', 'CACHED'))"
      " ORDER BY w.created_at LIMIT 1000",
      "SELECT w.job_id, w.processing_job_ids FROM mqproc_workflow_jobs w"
      " WHERE w.ended_at IS NULL AND NOT EXISTS (SELECT 1 FROM mqproc_ocrd_jobs o"
      "   JOIN mqproc_jobs j ON j.job_id = o.job_id WHERE o.workflow_job_id = w.job_id"
      "   AND j.state IN ('QUEUED', 'RUNNING', 'CACHED'))"
      " ORDER BY w.created_at LIMIT 1000",
      0, NULL, err);
  int n = 0;
  if (r == NULL)
    return -1;
  for (int i = 0; i < mqproc__ores_rows(r) && n >= 0; i++) {
    char *ids = flat_ids(mqproc__ores_get(r, i, 1));
    int rc = ids != NULL ? end_run(e, mqproc__ores_get(r, i, 0), ids, err) : 0;
    free(ids);
    n = rc < 0 ? -1 : n + rc;
  }
  mqproc__ores_free(r);
  return n;
}

/* ---- the pass ----------------------------------------------------------------------------- */

int mqproc__ocrd_settle(const mqproc__ocrd_env_t *e, const char *workspace, char *err) {
  mqproc__ores_t *r;
  int total = 0, n;
  if (workspace != NULL) {
    if ((total = settle_workspace(e, workspace, err)) < 0)
      return -1;
    return end_runs(e, err) < 0 ? -1 : total;
  }
  r = mqproc__odb_q(e->db,
                    "SELECT DISTINCT o.workspace FROM mqproc_jobs j JOIN mqproc_ocrd_jobs o"
                    " ON o.job_id = j.job_id WHERE j.state = 'CACHED'",
                    NULL, 0, NULL, err);
  if (r == NULL)
    return -1;
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    if ((n = settle_workspace(e, mqproc__ores_get(r, i, 0), err)) < 0) {
      mqproc__ores_free(r);
      return -1;
    }
    total += n;
  }
  mqproc__ores_free(r);
  return end_runs(e, err) < 0 ? -1 : total;
}
