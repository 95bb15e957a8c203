/* OCR-D's Processing Server, one job at a time (ocrd.h): the processors that can take
 * jobs, their tool descriptions, a job's submission (checked in OCR-D's order, its row
 * QUEUED or CACHED under the workspace's lock, then its message), its state and its log,
 * and the workers' result callback. PostgreSQL's text beside SQLite's. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "codec/codec.h"
#include "codec/ocrd_params.h"
#include "ops/ocrd.h"
#include "ops/ocrd_int.h"
#include "ops/ops.h"
#include "ops/submit.h"
#include "runner/joblog.h"
#include "runner/ocrd_argv.h"
#include "base/log.h"
#include "base/util.h"

#define LOG_MAX (8u << 20)

/* ---- answers -------------------------------------------------------------------------- */

void mqproc__ocrd_answer_free(mqproc__ocrd_answer_t *a) {
  json_decref(a->body);
  free(a->text);
  a->body = NULL;
  a->text = NULL;
}

int mqproc__ocrd_fail(mqproc__ocrd_answer_t *a, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->detail, sizeof(a->detail), fmt, ap);
  va_end(ap);
  a->status = status;
  return status;
}

/* ---- helpers shared with ocrd_settle.c and ocrd_workflow.c (ocrd_int.h) ----------------- */

void mqproc__ocrd_uuid(char out[37]) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != sizeof(b)) /* cannot fail for 16 bytes; still */
    for (int i = 0; i < 16; i++)
      b[i] = (unsigned char)random();
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}

int mqproc__ocrd_lock(const mqproc__ocrd_env_t *e, const char *workspace, char *err) {
  const char *vals[1] = {workspace};
  mqproc__ores_t *r;
  if (mqproc__odb_begin(e->db, err) != 0)
    return -1;
  if (mqproc__odb_sqlite(e->db)) /* BEGIN IMMEDIATE: the one writer */
    return 0;
  r = mqproc__odb_q(e->db, "SELECT pg_advisory_xact_lock(hashtext('mqproc_ocrd:' || $1))", NULL, 1,
                    vals, err);
  if (r == NULL) {
    mqproc__odb_rollback(e->db);
    return -1;
  }
  mqproc__ores_free(r);
  return 0;
}

char *mqproc__ocrd_dumps(const json_t *v) {
  return v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

int mqproc__ocrd_overlap(const json_t *out_a, const json_t *pages_a, const json_t *out_b,
                         const json_t *pages_b) {
  size_t i, k;
  json_t *x, *y;
  int shared = 0;
  json_array_foreach(out_a, i, x) json_array_foreach(out_b, k, y) shared |= json_equal(x, y);
  if (!shared)
    return 0;
  if (pages_a == NULL || pages_b == NULL) /* every page */
    return 1;
  json_array_foreach(pages_a, i, x)
      json_array_foreach(pages_b, k, y) if (json_equal(x, y)) return 1;
  return 0;
}

/* ---- processors ------------------------------------------------------------------------- */

/* Whether a server of p was seen lately. */
static int live(const mqproc__ocrd_env_t *e, const char *p) {
  const char *vals[1] = {p};
  char err[512];
  mqproc__ores_t *r =
      mqproc__odb_q(e->db,
                    "SELECT count(*) FROM mqproc_workers w WHERE w.processor_name = $1"
                    " AND w.state NOT IN ('stopped', 'dead') AND " MQPROC__SEEN_LATELY,
                    "SELECT count(*) FROM mqproc_workers w WHERE w.processor_name = ?1"
                    " AND w.state NOT IN ('stopped', 'dead') AND " MQPROC__SQ_SEEN_LATELY,
                    1, vals, err);
  int n = r != NULL && mqproc__ores_rows(r) == 1 ? atoi(mqproc__ores_get(r, 0, 0)) : 0;
  mqproc__ores_free(r);
  return n > 0;
}

/* Whether a server ever served p (its workers row, in any state). */
static int served_ever(const mqproc__ocrd_env_t *e, const char *p) {
  const char *vals[1] = {p};
  char err[512];
  mqproc__ores_t *r =
      mqproc__odb_q(e->db, "SELECT 1 FROM mqproc_workers WHERE processor_name = $1 LIMIT 1",
                    "SELECT 1 FROM mqproc_workers WHERE processor_name = ?1 LIMIT 1", 1, vals, err);
  int n = r != NULL ? mqproc__ores_rows(r) : 0;
  mqproc__ores_free(r);
  return n > 0;
}

/* Whether p's queue exists (a passive declare; a dir:// queue's directory). A table queue
 * is its rows, so any name would do: there it is p's queue once a server served p or
 * messages wait in it (else a processor nobody runs would take jobs: OCR-D answers 404). */
static int queue_exists(const mqproc__ocrd_env_t *e, const char *p) {
  long msgs = 0, cons = 0, held = -1;
  if (e->q == NULL || mqproc__qclient_depth(e->q, p, &msgs, &cons, &held) != 0)
    return 0;
  return held < 0 || msgs + held > 0 || served_ever(e, p);
}

int mqproc__ocrd_takes_jobs(const mqproc__ocrd_env_t *e, const char *p) {
  return live(e, p) || queue_exists(e, p);
}

json_t *mqproc__ocrd_tool_of(const mqproc__ocrd_env_t *e, const char *p) {
  const char *vals[1] = {p};
  char err[512];
  json_t *tool = NULL;
  mqproc__ores_t *r =
      mqproc__odb_q(e->db, "SELECT tool::text FROM mqproc_ocrd_tools WHERE processor_name = $1",
                    "SELECT tool FROM mqproc_ocrd_tools WHERE processor_name = ?1", 1, vals, err);
  if (r != NULL && mqproc__ores_rows(r) == 1)
    tool = json_loads(mqproc__ores_get(r, 0, 0), 0, NULL);
  mqproc__ores_free(r);
  if (tool == NULL && json_is_object(json_object_get(e->tools, p)))
    tool = json_deep_copy(json_object_get(e->tools, p));
  return tool;
}

int mqproc__ocrd_tool_store(mqproc__odb_t *db, const char *p, const char *tool_json,
                            const char *worker_id, char *err) {
  const char *vals[3] = {p, tool_json, worker_id};
  mqproc__ores_t *r = mqproc__odb_q(
      db,
      "INSERT INTO mqproc_ocrd_tools (processor_name, tool, worker_id) VALUES ($1, $2::jsonb, $3)"
      " ON CONFLICT (processor_name) DO UPDATE SET tool = EXCLUDED.tool,"
      " worker_id = EXCLUDED.worker_id, updated_at = now()",
      "INSERT INTO mqproc_ocrd_tools (processor_name, tool, worker_id, updated_at)"
      " VALUES (?1, json(?2), ?3, mq_now()) ON CONFLICT (processor_name) DO UPDATE SET"
      " tool = excluded.tool, worker_id = excluded.worker_id, updated_at = excluded.updated_at",
      3, vals, err);
  mqproc__ores_free(r);
  return r != NULL ? 0 : -1;
}

/* Appends name to names unless it is there. */
static void add_name(json_t *names, const char *name) {
  size_t i;
  json_t *x;
  json_array_foreach(names, i, x) if (!strcmp(json_string_value(x), name)) return;
  json_array_append_new(names, json_string(name));
}

void mqproc__ocrd_processors(const mqproc__ocrd_env_t *e, mqproc__ocrd_answer_t *a) {
  json_t *out = json_array(), *candidates = json_array(), *v;
  const char *k;
  size_t i;
  char err[512];
  mqproc__ores_t *r =
      mqproc__odb_q(e->db,
                    "SELECT DISTINCT w.processor_name, true FROM mqproc_workers w"
                    " WHERE w.state NOT IN ('stopped', 'dead') AND " MQPROC__SEEN_LATELY
                    " UNION SELECT processor_name, false FROM mqproc_ocrd_tools ORDER BY 1",
                    "SELECT DISTINCT w.processor_name, 1 FROM mqproc_workers w"
                    " WHERE w.state NOT IN ('stopped', 'dead') AND " MQPROC__SQ_SEEN_LATELY
                    " UNION SELECT processor_name, 0 FROM mqproc_ocrd_tools ORDER BY 1",
                    0, NULL, err);
  if (r == NULL) {
    json_decref(out);
    json_decref(candidates);
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  for (int row = 0; row < mqproc__ores_rows(r); row++) {
    if (mqproc__ores_bool(r, row, 1))
      add_name(out, mqproc__ores_get(r, row, 0));
    else
      add_name(candidates, mqproc__ores_get(r, row, 0));
  }
  mqproc__ores_free(r);
  json_object_foreach((json_t *)e->tools, k, v) add_name(candidates, k);
  json_array_foreach(candidates, i, v) {
    const char *name = json_string_value(v);
    size_t before = json_array_size(out);
    add_name(out, name);
    if (json_array_size(out) > before && !queue_exists(e, name)) /* no server, no queue */
      json_array_remove(out, before);
  }
  json_decref(candidates);
  a->status = 200;
  a->body = out;
}

void mqproc__ocrd_info(const mqproc__ocrd_env_t *e, const char *p, mqproc__ocrd_answer_t *a) {
  json_t *tool = mqproc__ocrd_tool_of(e, p);
  if (tool == NULL) {
    mqproc__ocrd_fail(a, 404, "Processing Worker '%s' not found.", p);
    return;
  }
  a->status = 200;
  a->body = tool;
}

/* ---- the request ------------------------------------------------------------------------ */

/* FastAPI's answer to a body that is not a PYJobInput: 422 (its detail also under
 * "detail", which OCR-D's client reads). */
static void invalid_body(mqproc__ocrd_answer_t *a, const char *fmt, const char *field) {
  mqproc__ocrd_fail(a, 422, fmt, field);
  a->body = json_pack("{s:i, s:s, s:n, s:s}", "status_code", 10422, "message", a->detail, "data",
                      "detail", a->detail);
}

/* The body's fields as PYJobInput types them: 0, or 422 answered. */
static int input_ok(const json_t *in, mqproc__ocrd_answer_t *a) {
  static const char *const strs[] = {"processor_name", "path_to_mets", "workspace_id",
                                     "description",    "page_id",      "result_queue_name",
                                     "callback_url",   "job_id",       NULL};
  static const char *const lists[] = {"input_file_grps", "output_file_grps", "depends_on", NULL};
  size_t i;
  json_t *x;
  if (!json_is_object(in)) {
    invalid_body(a, "body: %s", "Input should be a valid dictionary (a JSON object)");
    return -1;
  }
  if (json_object_get(in, "input_file_grps") == NULL) {
    invalid_body(a, "body.%s: Field required", "input_file_grps");
    return -1;
  }
  for (const char *const *k = strs; *k != NULL; k++) {
    json_t *v = json_object_get(in, *k);
    if (v != NULL && !json_is_null(v) && !json_is_string(v)) {
      invalid_body(a, "body.%s: Input should be a valid string", *k);
      return -1;
    }
  }
  for (const char *const *k = lists; *k != NULL; k++) {
    json_t *v = json_object_get(in, *k);
    int ok = v == NULL || (json_is_null(v) && strcmp(*k, "input_file_grps") != 0);
    if (json_is_array(v)) {
      ok = 1;
      json_array_foreach(v, i, x) ok &= json_is_string(x);
    }
    if (!ok) {
      invalid_body(a, "body.%s: Input should be a valid list of strings", *k);
      return -1;
    }
  }
  x = json_object_get(in, "parameters");
  if (x != NULL && !json_is_null(x) && !json_is_object(x)) {
    invalid_body(a, "body.%s: Input should be a valid dictionary", "parameters");
    return -1;
  }
  return 0;
}

static const char *str(const json_t *o, const char *k) {
  const char *s = json_string_value(json_object_get(o, k));
  return s != NULL && s[0] != '\0' ? s : NULL;
}

/* Whether path starts with dir's text followed by '/' (dir given without a trailing '/'
 * or with it). */
static int under(const char *dir, const char *path) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/')
    n--;
  return strncmp(path, dir, n) == 0 && path[n] == '/' && strstr(path + n, "/../") == NULL &&
         (strlen(path) < 3 || strcmp(path + strlen(path) - 3, "/..") != 0);
}

int mqproc__ocrd_outside_root(const mqproc__ocrd_env_t *e, const char *path) {
  char *root, *real;
  int out;
  if (e->ws_root == NULL)
    return 0;
  if ((root = realpath(e->ws_root, NULL)) == NULL)
    return 1; /* no root to be inside of */
  if (!under(e->ws_root, path) && !under(root, path))
    out = 1; /* by its text, before it is looked up */
  else if ((real = realpath(path, NULL)) == NULL)
    out = 0; /* not there: inside by its text (404 follows) */
  else {
    out = !under(root, real); /* a link out */
    free(real);
  }
  free(root);
  return out;
}

/* The METS of the request: its path (a resolved copy), or 404 answered (OCR-D's words). */
static char *mets_of(const mqproc__ocrd_env_t *e, const json_t *in, mqproc__ocrd_answer_t *a) {
  const char *path = str(in, "path_to_mets"), *ws = str(in, "workspace_id");
  char buf[PATH_MAX], why[MQPROC_ERR_LEN], *want = NULL, *real;
  int fd = -1;
  if (path == NULL) {
    if (e->ws_root == NULL || strchr(ws, '/') != NULL || !strcmp(ws, "..") || !strcmp(ws, ".")) {
      mqproc__ocrd_fail(a, 404, "Workspace with id '%s' not found in the DB.", ws);
      return NULL;
    }
    snprintf(buf, sizeof(buf), "%s/%s/mets.xml", e->ws_root, ws);
    want = buf;
  } else if (mqproc__ocrd_outside_root(e, path)) {
    mqproc__ocrd_fail(a, 422, "Mets file path refused: %s: outside --workspace-root", path);
    return NULL;
  }
  real = realpath(want != NULL ? want : path, NULL);
  /* opened as every file a request names (a FIFO would hold the API's worker in open) */
  if (real != NULL && (fd = mqproc__open_untrusted(real, 1, 0, NULL, why)) < -1) {
    if (path == NULL)
      mqproc__ocrd_fail(a, 422, "Workspace with id '%s': its mets.xml is refused: %s", ws, why);
    else
      mqproc__ocrd_fail(a, 422, "Mets file path refused: %s: %s", path, why);
    free(real);
    return NULL;
  }
  if (fd >= 0)
    close(fd);
  if (real == NULL || fd < 0) {
    free(real);
    if (path == NULL)
      mqproc__ocrd_fail(a, 404, "Workspace with id '%s' not found in the DB.", ws);
    else
      mqproc__ocrd_fail(a, 404, "Mets file path not existing: %s", path);
    return NULL;
  }
  return real;
}

/* The processing message of a request (without job_id), as OCR-D's Processing Server
 * makes it for its workers. */
json_t *mqproc__ocrd_message(const mqproc__ocrd_env_t *e, const char *p, const json_t *in) {
  static const char *const copied[] = {"path_to_mets", "workspace_id",      "page_id",
                                       "callback_url", "result_queue_name", NULL};
  json_t *params = json_object_get(in, "parameters");
  json_t *m =
      json_pack("{s:s, s:I, s:O, s:o}", "processor_name", p, "created_time", (json_int_t)time(NULL),
                "input_file_grps", json_object_get(in, "input_file_grps"), "parameters",
                json_is_object(params) ? json_incref(params) : json_object());
  if (json_is_array(json_object_get(in, "output_file_grps")))
    json_object_set(m, "output_file_grps", json_object_get(in, "output_file_grps"));
  for (const char *const *k = copied; *k != NULL; k++)
    if (str(in, *k) != NULL)
      json_object_set_new(m, *k, json_string(str(in, *k)));
  if (e->result_url != NULL)
    json_object_set_new(m, "internal_callback_url", json_string(e->result_url));
  return m;
}

/* Whether the dependencies named exist (422 answered when one does not). */
static int deps_exist(const mqproc__ocrd_env_t *e, const json_t *deps, mqproc__ocrd_answer_t *a) {
  char *ids = mqproc__ocrd_dumps(deps), err[512];
  const char *vals[1] = {ids};
  mqproc__ores_t *r;
  size_t n = json_array_size(deps);
  if (n == 0) {
    free(ids);
    return 0;
  }
  r = mqproc__odb_q(e->db,
                    "SELECT count(DISTINCT job_id) FROM mqproc_jobs WHERE job_id IN"
                    " (SELECT jsonb_array_elements_text($1::jsonb))",
                    "SELECT count(DISTINCT job_id) FROM mqproc_jobs WHERE job_id IN"
                    " (SELECT value FROM json_each(?1))",
                    1, vals, err);
  free(ids);
  if (r == NULL) {
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return -1;
  }
  if ((size_t)atoll(mqproc__ores_get(r, 0, 0)) != n) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 422, "depends_on: a job it names does not exist");
    return -1;
  }
  mqproc__ores_free(r);
  return 0;
}

/* OCR-D's checks of a /processor/run request in its order: 0, or the answer's status. */
static int check_run(const mqproc__ocrd_env_t *e, const char *p, const json_t *in, json_t **tool,
                     mqproc__ocrd_answer_t *a) {
  int takes;
  char *why;
  *tool = NULL;
  if (input_ok(in, a) != 0)
    return a->status;
  if (!(takes = live(e, p)) && !queue_exists(e, p))
    return mqproc__ocrd_fail(a, 422, "Processing Worker '%s' not found.", p);
  if (str(in, "job_id") != NULL)
    return mqproc__ocrd_fail(a, 422, "Processing request job id field is set but must not be: %s",
                             str(in, "job_id"));
  /* a processor of mqproc's own (no ocrd-tool description) with a live server takes
     parameters unchecked; one that is neither is unknown */
  if ((*tool = mqproc__ocrd_tool_of(e, p)) == NULL && !takes)
    return mqproc__ocrd_fail(a, 404, "Processing Worker '%s' not found.", p);
  if ((str(in, "path_to_mets") != NULL) == (str(in, "workspace_id") != NULL))
    return mqproc__ocrd_fail(
        a, 422,
        "Wrong processing job input format. Either 'path_to_mets' or 'workspace_id' must be "
        "provided. Both are provided or both are missing.");
  if (*tool != NULL) {
    json_t *params = json_object_get(in, "parameters");
    json_t *none = json_is_object(params) ? NULL : json_object();
    why = mqproc__ocrd_params_check(*tool, none != NULL ? none : params);
    json_decref(none);
    if (why != NULL) {
      mqproc__ocrd_fail(a, 400,
                        "Failed to validate processing job input against the tool json of "
                        "processor: %s\n%s",
                        p, why);
      free(why);
      return 400;
    }
  }
  return 0;
}

void mqproc__ocrd_run(const mqproc__ocrd_env_t *e, const char *p, const json_t *in,
                      mqproc__ocrd_answer_t *a) {
  json_t *tool = NULL, *msg = NULL, *pages = NULL;
  mqproc__ocrd_new_t job = {0};
  char err[512], why[512], *mets = NULL;
  mqproc__msg_t *checked = NULL;
  if (check_run(e, p, in, &tool, a) != 0 || (mets = mets_of(e, in, a)) == NULL ||
      deps_exist(e, json_object_get(in, "depends_on"), a) != 0)
    goto out;
  msg = mqproc__ocrd_message(e, p, in);
  json_object_set_new(msg, "job_id", json_string("00000000-0000-4000-8000-000000000000"));
  if (mqproc__msg_validate(json_deep_copy(msg), MQPROC__FMT_YAML, p, &checked, why) !=
      MQPROC_OK) { /* what a server would refuse (a too long name, an ftp:// callback) */
    mqproc__ocrd_fail(a, 422, "not a processing message mqproc's servers take: %s", why);
    goto out;
  }
  mqproc__msg_free(checked);
  json_object_del(msg, "job_id");
  if (str(in, "page_id") != NULL &&
      (pages = mqproc__page_ids(str(in, "page_id"), why, sizeof(why))) == NULL && why[0] != '\0') {
    mqproc__ocrd_fail(a, 422, "page_id: %s", why);
    goto out;
  }
  job.processor = p;
  job.msg = msg;
  job.workspace = mets;
  job.pages = pages;
  job.depends_on = json_object_get(in, "depends_on");
  if (mqproc__ocrd_submit(e, &job, 1, NULL, NULL, err) != 0) {
    mqproc__ocrd_fail(a, 500, "Processing server has failed to record the job: %s", err);
    goto out;
  }
  mqproc__ocrd_job(e, job.job_id, a);
  if (a->status == 200) /* as it was made (it may run already) */
    json_object_set_new(a->body, "state", json_string(job.state));
out:
  json_decref(tool);
  json_decref(msg);
  json_decref(pages);
  free(mets);
}

/* ---- reading a job ---------------------------------------------------------------------- */

void mqproc__ocrd_job(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a) {
  static const char *const keys[] = {"path_to_mets", "workspace_id", "output_file_grps", "page_id",
                                     NULL};
  const char *vals[1] = {id};
  char err[512];
  json_t *doc = NULL, *out;
  mqproc__format_t fmt;
  size_t len;
  unsigned char *body;
  mqproc__ores_t *r = mqproc__odb_q(e->db,
                                    "SELECT job_id, processor_name, state, request_body, log_path"
                                    " FROM mqproc_jobs WHERE job_id = $1",
                                    "SELECT job_id, processor_name, state, request_body, log_path"
                                    " FROM mqproc_jobs WHERE job_id = ?1",
                                    1, vals, err);
  if (r == NULL) {
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  if (mqproc__ores_rows(r) == 0) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 422, "Processing job with id '%s' not existing.", id);
    return;
  }
  body = mqproc__ores_bytes(r, 0, 3, &len);
  if (body != NULL && mqproc__codec_parse(body, len, &doc, &fmt, err) != MQPROC_OK)
    doc = NULL;
  free(body);
  out = json_pack("{s:s, s:s, s:s}", "job_id", mqproc__ores_get(r, 0, 0), "processor_name",
                  mqproc__ores_get(r, 0, 1), "state", mqproc__ores_get(r, 0, 2));
  for (const char *const *k = keys; *k != NULL; k++) {
    json_t *v = json_object_get(doc, *k);
    if (v != NULL && !json_is_null(v))
      json_object_set(out, *k, v);
  }
  json_object_set_new(out, "input_file_grps",
                      json_is_array(json_object_get(doc, "input_file_grps"))
                          ? json_incref(json_object_get(doc, "input_file_grps"))
                          : json_array());
  if (!mqproc__ores_null(r, 0, 4))
    json_object_set_new(out, "log_file_path", json_string(mqproc__ores_get(r, 0, 4)));
  json_decref(doc);
  mqproc__ores_free(r);
  a->status = 200;
  a->body = out;
}

/* The job's output: its first try's text kept in the row (a try that succeeded small made
 * no file), then the end of its log file (LOG_MAX bytes in all at most, the end kept). */
void mqproc__ocrd_log(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a) {
  const char *vals[1] = {id}, *path, *text;
  char err[MQPROC_ERR_LEN], state[32];
  struct stat st;
  size_t tl, room, fl = 0;
  int fd = -1;
  ssize_t n;
  mqproc__ores_t *r;
  mqproc__ocrd_job(e, id, a);
  if (a->status != 200)
    return;
  snprintf(state, sizeof(state), "%s", json_string_value(json_object_get(a->body, "state")));
  mqproc__ocrd_answer_free(a);
  r = mqproc__odb_q(e->db, "SELECT log_text, log_path FROM mqproc_jobs WHERE job_id = $1",
                    "SELECT log_text, log_path FROM mqproc_jobs WHERE job_id = ?1", 1, vals, err);
  if (r == NULL || mqproc__ores_rows(r) == 0) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 503, "the job store: %s", r == NULL ? err : "the job went away");
    return;
  }
  text = mqproc__ores_null(r, 0, 0) ? NULL : mqproc__ores_get(r, 0, 0);
  path = mqproc__ores_null(r, 0, 1) ? NULL : mqproc__ores_get(r, 0, 1);
  if (text == NULL && path == NULL) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 404, "Processing job with id '%s' has no log yet (state %s).", id, state);
    return;
  }
  if (path != NULL && ((fd = mqproc__joblog_open_read(path, err)) < 0 || fstat(fd, &st) != 0)) {
    if (fd >= 0)
      close(fd);
    fd = -1;
    if (text == NULL) {
      mqproc__ores_free(r);
      mqproc__ocrd_fail(a, 404, "The log of processing job '%s' cannot be read: %s", id, err);
      return;
    }
  }
  tl = text != NULL ? strlen(text) : 0;
  if (tl > LOG_MAX) {
    text += tl - LOG_MAX;
    tl = LOG_MAX;
  }
  room = LOG_MAX - tl;
  if (fd >= 0)
    fl = (size_t)st.st_size > room ? room : (size_t)st.st_size;
  if ((a->text = malloc(tl + fl + 1)) == NULL) {
    if (fd >= 0)
      close(fd);
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 500, "out of memory");
    return;
  }
  memcpy(a->text, text != NULL ? text : "", tl);
  n = fd >= 0 && fl > 0 ? pread(fd, a->text + tl, fl, st.st_size - (off_t)fl) : 0;
  if (fd >= 0)
    close(fd);
  mqproc__ores_free(r);
  a->text_len = tl + (n > 0 ? (size_t)n : 0);
  a->text[a->text_len] = '\0';
  a->status = 200;
}

void mqproc__ocrd_result(const mqproc__ocrd_env_t *e, const json_t *msg, mqproc__ocrd_answer_t *a) {
  const char *id = str(msg, "job_id");
  const char *vals[1] = {id};
  char err[512];
  mqproc__ores_t *r;
  if (id == NULL || !json_is_string(json_object_get(msg, "state"))) {
    invalid_body(a, "body.%s: Field required (job_id and state)", "job_id");
    return;
  }
  r = mqproc__odb_q(e->db,
                    "SELECT o.workspace FROM mqproc_jobs j LEFT JOIN mqproc_ocrd_jobs o"
                    " ON o.job_id = j.job_id WHERE j.job_id = $1",
                    "SELECT o.workspace FROM mqproc_jobs j LEFT JOIN mqproc_ocrd_jobs o"
                    " ON o.job_id = j.job_id WHERE j.job_id = ?1",
                    1, vals, err);
  if (r == NULL) {
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  if (mqproc__ores_rows(r) == 0) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 404, "Processing result job with id '%s' not found in the DB.", id);
    return;
  }
  /* the table says how it ended, not the message: the workspace is settled again (a job
     not submitted here has none: nothing waits for it) */
  if (!mqproc__ores_null(r, 0, 0) && mqproc__ocrd_settle(e, mqproc__ores_get(r, 0, 0), err) < 0) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  mqproc__ores_free(r);
  a->status = 200;
  a->body = json_null();
}

/* ---- submitting ------------------------------------------------------------------------- */

/* A job that holds (or waits for) pages of the workspace. */
typedef struct holder {
  json_t *outputs, *pages; /* owned; pages NULL: every page */
} holder_t;

/* The jobs of workspace that hold or wait for its pages (QUEUED, RUNNING, CACHED); n into
 * *n. NULL with err. */
static holder_t *holders_of(const mqproc__ocrd_env_t *e, const char *workspace, size_t extra,
                            size_t *n, char *err) {
  const char *vals[1] = {workspace};
  mqproc__ores_t *r =
      mqproc__odb_q(e->db,
                    "SELECT o.output_file_grps::text, o.pages::text FROM mqproc_ocrd_jobs o"
                    " JOIN mqproc_jobs j ON j.job_id = o.job_id WHERE o.workspace = $1"
                    " AND j.state IN ('QUEUED', 'RUNNING', 'CACHED')",
                    "SELECT o.output_file_grps, o.pages FROM mqproc_ocrd_jobs o"
                    " JOIN mqproc_jobs j ON j.job_id = o.job_id WHERE o.workspace = ?1"
                    " AND j.state IN ('QUEUED', 'RUNNING', 'CACHED')",
                    1, vals, err);
  holder_t *h;
  if (r == NULL)
    return NULL;
  *n = (size_t)mqproc__ores_rows(r);
  if ((h = calloc(*n + extra + 1, sizeof(*h))) == NULL) {
    mqproc__ores_free(r);
    snprintf(err, 512, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < *n; i++) {
    h[i].outputs = json_loads(mqproc__ores_get(r, (int)i, 0), 0, NULL);
    h[i].pages = mqproc__ores_null(r, (int)i, 1)
                     ? NULL
                     : json_loads(mqproc__ores_get(r, (int)i, 1), JSON_DECODE_ANY, NULL);
    if (json_is_null(h[i].pages)) {
      json_decref(h[i].pages);
      h[i].pages = NULL;
    }
  }
  mqproc__ores_free(r);
  return h;
}

/* Whether every job of deps ended SUCCESS (one of this batch's has not even started). */
static int dep_done(const mqproc__ocrd_env_t *e, const json_t *deps, const mqproc__ocrd_new_t *jobs,
                    size_t upto) {
  size_t i;
  json_t *d;
  json_array_foreach(deps, i, d) {
    const char *vals[1] = {json_string_value(d)};
    char err[512];
    mqproc__ores_t *r;
    int ok;
    for (size_t k = 0; k < upto; k++)
      if (!strcmp(jobs[k].job_id, vals[0]))
        return 0;
    r = mqproc__odb_q(e->db, "SELECT state FROM mqproc_jobs WHERE job_id = $1",
                      "SELECT state FROM mqproc_jobs WHERE job_id = ?1", 1, vals, err);
    ok = r != NULL && mqproc__ores_rows(r) == 1 && !strcmp(mqproc__ores_get(r, 0, 0), "SUCCESS");
    mqproc__ores_free(r);
    if (!ok)
      return 0;
  }
  return 1;
}

/* The API's row of a job (after its mqproc_jobs row): 0 or -1 with err. */
int mqproc__ocrd_job_row(const mqproc__ocrd_env_t *e, const mqproc__ocrd_new_t *j, char *err) {
  char *outs = mqproc__ocrd_dumps(json_object_get(j->msg, "output_file_grps"));
  char *pages = mqproc__ocrd_dumps(j->pages), *deps = mqproc__ocrd_dumps(j->depends_on);
  const char *vals[6] = {
      j->job_id,      j->workspace, outs != NULL ? outs : "[]", pages, deps != NULL ? deps : "[]",
      j->workflow_job};
  mqproc__ores_t *r = mqproc__odb_q(
      e->db,
      "INSERT INTO mqproc_ocrd_jobs (job_id, workspace, output_file_grps, pages, depends_on,"
      " workflow_job_id) VALUES ($1, $2, $3::jsonb, $4::jsonb, $5::jsonb, $6)",
      "INSERT INTO mqproc_ocrd_jobs (job_id, seq, workspace, output_file_grps, pages,"
      " depends_on, workflow_job_id, created_at) VALUES (?1, (SELECT coalesce(max(seq), 0) + 1"
      " FROM mqproc_ocrd_jobs), ?2, ?3, ?4, ?5, ?6, mq_now())",
      6, vals, err);
  free(outs);
  free(pages);
  free(deps);
  mqproc__ores_free(r);
  return r != NULL ? 0 : -1;
}

/* One job of the batch: its id, state (held back by a dependency or an overlap with a
 * holder), message and rows; the job becomes a holder. body: its message (malloc()ed). */
static int submit_one(const mqproc__ocrd_env_t *e, mqproc__ocrd_new_t *jobs, size_t i, holder_t *h,
                      size_t *nh, char **body, size_t *len, const char *const *hdr, char *err) {
  mqproc__ocrd_new_t *j = &jobs[i];
  const json_t *outs = json_object_get(j->msg, "output_file_grps");
  int cached = !dep_done(e, j->depends_on, jobs, i);
  mqproc__ops_job_t row = {0};
  for (size_t k = 0; !cached && k < *nh; k++)
    cached = mqproc__ocrd_overlap(h[k].outputs, h[k].pages, outs, j->pages);
  if (j->job_id[0] == '\0') /* (a workflow's are made beforehand: they depend on each other) */
    mqproc__ocrd_uuid(j->job_id);
  j->state = cached ? "CACHED" : "QUEUED";
  json_object_set_new(j->msg, "job_id", json_string(j->job_id));
  if (mqproc__doc_encode(j->msg, MQPROC__FMT_YAML, body, len, err) != MQPROC_OK)
    return -1;
  json_object_del(j->msg, "job_id");
  row = (mqproc__ops_job_t){.job_id = j->job_id,
                            .processor = j->processor,
                            .body = *body,
                            .len = *len,
                            .format = "yaml",
                            .exchange = e->exchange,
                            .priority = -1,
                            .headers = hdr,
                            .n_headers = 1,
                            .created_time =
                                json_integer_value(json_object_get(j->msg, "created_time"))};
  if (mqproc__ops_job_row(e->db, &row, j->state, err) != 1) {
    if (err[0] == '\0')
      snprintf(err, 512, "job %s exists already", j->job_id);
    return -1;
  }
  if (mqproc__ocrd_job_row(e, j, err) != 0)
    return -1;
  h[*nh].outputs = json_incref((json_t *)(outs != NULL ? outs : json_array()));
  h[*nh].pages = json_incref(j->pages);
  (*nh)++;
  return 0;
}

void mqproc__ocrd_publish(const mqproc__ocrd_env_t *e, const char *job_id, const char *processor,
                          const void *body, size_t len, const char *mets_header) {
  char err[MQPROC_ERR_LEN];
  const char *const hdr[] = {mets_header};
  mqproc__ops_job_t row = {.job_id = job_id,
                           .processor = processor,
                           .body = body,
                           .len = len,
                           .format = "yaml",
                           .exchange = e->exchange,
                           .priority = -1,
                           .headers = hdr,
                           .n_headers = 1,
                           .created_time = -1};
  /* unpublished, its row keeps republish set: a server's sweep sends it after the grace */
  if (e->q == NULL || mqproc__ops_job_publish(e->db, e->q, &row, err) != 0) {
    MQPROC__WARN("job %s: not published now (%s); a server of %s sends it within a minute", job_id,
                 e->q == NULL ? "no queue" : err, processor);
    if (e->publish_failed != NULL && e->q != NULL)
      *e->publish_failed = 1;
  }
}

int mqproc__ocrd_submit(const mqproc__ocrd_env_t *e, mqproc__ocrd_new_t *jobs, size_t n,
                        mqproc__ocrd_before_commit_cb before, void *ud, char *err) {
  size_t nh = 0;
  holder_t *h = NULL;
  char **bodies = calloc(n + 1, sizeof(char *)), mets_header[MQPROC__METS_SERVER_URL_MAX + 64];
  const char *const hdr[] = {mets_header};
  size_t *lens = calloc(n + 1, sizeof(size_t));
  int rc = -1;
  err[0] = '\0';
  if (bodies == NULL || lens == NULL) {
    snprintf(err, 512, "out of memory");
    goto out;
  }
  /* the workspace's METS server runs before any of its jobs can */
  if (mqproc__ocrd_mets_header(e, jobs[0].workspace, mets_header, sizeof(mets_header), err) != 0)
    goto out;
  if (mqproc__ocrd_lock(e, jobs[0].workspace, err) != 0)
    goto out;
  if ((h = holders_of(e, jobs[0].workspace, n, &nh, err)) == NULL) {
    mqproc__odb_rollback(e->db);
    goto out;
  }
  for (size_t i = 0; i < n; i++)
    if (submit_one(e, jobs, i, h, &nh, &bodies[i], &lens[i], hdr, err) != 0) {
      mqproc__odb_rollback(e->db);
      goto out;
    }
  if ((before != NULL && before(e, ud, jobs, n, err) != 0) || mqproc__odb_commit(e->db, err) != 0) {
    mqproc__odb_rollback(e->db);
    goto out;
  }
  for (size_t i = 0; i < n; i++)
    if (!strcmp(jobs[i].state, "QUEUED"))
      mqproc__ocrd_publish(e, jobs[i].job_id, jobs[i].processor, bodies[i], lens[i], mets_header);
  rc = 0;
out:
  for (size_t i = 0; h != NULL && i < nh; i++) {
    json_decref(h[i].outputs);
    json_decref(h[i].pages);
  }
  free(h);
  for (size_t i = 0; bodies != NULL && i < n; i++)
    free(bodies[i]);
  free(bodies);
  free(lens);
  return rc;
}
