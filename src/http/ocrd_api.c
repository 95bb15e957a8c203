/* OCR-D's Processing Server API (ocrd_api.h): requests become tasks for the worker
 * thread, which holds its own store and queue connections (kept between tasks, made again
 * when lost) and runs one task at a time through ops/ocrd.h; the answer is sent from the
 * loop. The sweep is a task like the others.
 *
 * Workflow callbacks never run on that thread (a URL that never answers would hold every
 * route): a task hands the runs it ended to the loop, which POSTs them one at a time on a
 * callback thread of their own, at most CALLBACKS_MAX kept; the outcome is recorded by a
 * task. What is not kept (more than that, or sent by an API that stopped) has no outcome
 * in the store, and a later sweep asks the store for it: at least once. */
#include "http/ocrd_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "base/log.h"
#include "base/util.h"
#include "http/auth.h"
#include "http/multipart.h"
#include "mqproc/mqproc.h"
#include "ops/ocrd.h"
#include "store/queue.h"

#define QUEUE_RETRY_S 10
#define CALLBACKS_MAX 64 /* workflow callbacks kept in memory (queued, sent, recorded) */

enum route {
  R_PROCESSORS,
  R_INFO,
  R_RUN,
  R_JOB,
  R_LOG,
  R_RESULT,
  R_WF_STORE,
  R_WF_GET,
  R_WF_PUT,
  R_WF_RUN,
  R_WF_SIMPLE,
  R_WF_JOB,
  R_SWEEP,
  R_PING,
  R_CB_RECORD
};

/* A workflow run's callback: queued, being POSTed (on the callback thread), or its outcome
 * being recorded (by a task). */
typedef struct cbitem {
  mqproc__api_t *api;
  char *id, *url, *body;
  int state; /* CB_QUEUED, CB_POSTING, CB_RECORDING */
  int rc;    /* the POST's (MQPROC_OK: delivered) */
  char err[MQPROC_ERR_LEN];
  struct cbitem *next;
} cbitem_t;

enum { CB_QUEUED, CB_POSTING, CB_RECORDING };

typedef struct task {
  mqproc__api_t *api;
  int route;
  mqproc__http_req_t *req; /* NULL for the sweep and the ping */
  char *arg;               /* the path's {p} or {id} */
  char *body;              /* a copy of the request's body */
  size_t body_len;
  char *ctype;                           /* its Content-Type */
  char *mets, *page_id, *wf_id, *cb_url; /* /workflow/run's query */
  int page_wise;
  int hide_log_path; /* R_JOB: the client showed no token; the log's path is left out */
  json_t *callbacks; /* the runs it ended, to POST (filled on the worker) */
  int cb_fetch;      /* a sweep: how many callbacks without an outcome to ask the store for */
  cbitem_t *cb;      /* R_CB_RECORD: the callback whose outcome it records */
  mqproc__ocrd_answer_t ans;
  void (*ping_cb)(void *ud, const char *problem);
  void *ud;
  struct task *next;
} task_t;

struct mqproc__api {
  mqproc__loop_t *loop;
  char *database, *queue, *exchange, *ws_root, *result_url;
  json_t *tools;
  mqproc__tls_t tls;
  int reads_need_token;       /* --http-read-token: every read needs a token */
  mqproc__callback_opts_t cb; /* .self: the API's own address (sa_self) */
  struct sockaddr_storage sa_self;
  cbitem_t *cbs;  /* the callbacks kept, in order */
  int ncbs;       /* their count */
  int cb_posting; /* a callback thread runs */
  int cb_recheck; /* callbacks may have no outcome and none kept: the next sweep asks */
  mqproc__mets_servers_t mets; /* its strings borrowed from the caller's configuration */
  json_t *mets_idle;           /* OCR-D's METS servers a sweep found idle (the worker's) */
  mqproc__auth_t *auth;        /* NULL: the submitting routes are open */
  mqproc__odb_t *db;           /* the worker's */
  mqproc__qclient_t *q;        /* the worker's */
  time_t q_failed;             /* when connecting to the queue failed last */
  task_t *head, *tail, *running;
  int waiting; /* request tasks queued or running */
  int sweep_queued;
  int sweep_ms;
  uint64_t sweep_timer;
  int stopped;
};

/* ---- on the worker thread ------------------------------------------------------------- */

static int connect_db(mqproc__api_t *api, char *err) {
  char e[512];
  if (api->db != NULL && mqproc__odb_ok(api->db))
    return 0;
  mqproc__odb_close(api->db);
  if ((api->db = mqproc__odb_open(api->database, 10000, e)) != NULL)
    return 0;
  e[strcspn(e, "\n")] = '\0';
  snprintf(err, 1024, "the job store is not reachable: %.900s", e);
  return -1;
}

static mqproc__qclient_t *queue(mqproc__api_t *api) {
  char err[MQPROC_ERR_LEN];
  if (api->q != NULL || time(NULL) - api->q_failed < QUEUE_RETRY_S)
    return api->q;
  if ((api->q = mqproc__qclient_open(api->queue, &api->tls, &mqproc__table_qclient, err)) == NULL) {
    api->q_failed = time(NULL);
    MQPROC__WARN("processing API: the queue is not reachable (jobs wait for a server's sweep "
                 "to be published): %s",
                 err);
  }
  return api->q;
}

/* A JSON body (422 answered when it is none). */
static json_t *json_body(task_t *t) {
  json_error_t je;
  json_t *v = t->body != NULL ? json_loadb(t->body, t->body_len, JSON_DECODE_ANY, &je) : NULL;
  if (v == NULL) {
    mqproc__ocrd_fail(&t->ans, 422, "body: %s",
                      t->body == NULL ? "Field required (a JSON body)" : je.text);
    t->ans.body = json_pack("{s:i, s:s, s:n, s:s}", "status_code", 10422, "message", t->ans.detail,
                            "data", "detail", t->ans.detail);
  }
  return v;
}

/* The multipart field "workflow" (NULL: none; 422 answered when required). */
static const char *workflow_field(task_t *t, size_t *len, int required) {
  const char *out = NULL;
  char why[300];
  if (t->body != NULL && mqproc__multipart_field(t->ctype, t->body, t->body_len, "workflow", &out,
                                                 len, why, sizeof(why)) == 0)
    return out;
  if (required)
    mqproc__ocrd_fail(&t->ans, 422, "body.workflow: Field required (%s)",
                      t->body == NULL ? "no body" : why);
  return NULL;
}

static void run_route(task_t *t, const mqproc__ocrd_env_t *e) {
  json_t *in;
  const char *wf;
  size_t len = 0;
  switch (t->route) {
  case R_PROCESSORS:
    mqproc__ocrd_processors(e, &t->ans);
    break;
  case R_INFO:
    mqproc__ocrd_info(e, t->arg, &t->ans);
    break;
  case R_RUN:
    if ((in = json_body(t)) != NULL)
      mqproc__ocrd_run(e, t->arg, in, &t->ans);
    json_decref(in);
    break;
  case R_JOB:
    mqproc__ocrd_job(e, t->arg, &t->ans);
    break;
  case R_LOG:
    mqproc__ocrd_log(e, t->arg, &t->ans);
    break;
  case R_RESULT:
    if ((in = json_body(t)) != NULL)
      mqproc__ocrd_result(e, in, &t->ans);
    json_decref(in);
    break;
  case R_WF_STORE:
  case R_WF_PUT:
    if ((wf = workflow_field(t, &len, 1)) != NULL)
      mqproc__ocrd_wf_store(e, t->route == R_WF_PUT ? t->arg : NULL, wf, len, &t->ans);
    break;
  case R_WF_GET:
    mqproc__ocrd_wf_get(e, t->arg, &t->ans);
    break;
  case R_WF_RUN: {
    mqproc__ocrd_wf_run_t r = {.mets = t->mets,
                               .page_id = t->page_id,
                               .page_wise = t->page_wise,
                               .workflow_id = t->wf_id,
                               .callback_url = t->cb_url};
    r.content = workflow_field(t, &r.len, 0);
    mqproc__ocrd_wf_run(e, &r, &t->ans);
    break;
  }
  case R_WF_SIMPLE:
  case R_WF_JOB:
    mqproc__ocrd_wf_status(e, t->arg, t->route == R_WF_SIMPLE, &t->ans);
    break;
  }
}

static void run_task(void *ud) {
  task_t *t = ud;
  mqproc__api_t *api = t->api;
  char err[1024];
  int publish_failed = 0;
  mqproc__ocrd_env_t e;
  if (connect_db(api, err) != 0) {
    mqproc__ocrd_fail(&t->ans, 503, "%s", err);
    return;
  }
  if (t->route == R_CB_RECORD || t->route == R_SWEEP)
    t->ans.status = 200;
  e = (mqproc__ocrd_env_t){.db = api->db,
                           .q = queue(api),
                           .exchange = api->exchange,
                           .tools = api->tools,
                           .ws_root = api->ws_root,
                           .result_url = api->result_url,
                           .cb = &api->cb,
                           .mets = &api->mets,
                           .publish_failed = &publish_failed,
                           .callbacks = t->callbacks = json_array()};
  if (t->route == R_SWEEP) {
    if (mqproc__ocrd_settle(&e, NULL, err) < 0)
      MQPROC__WARN("processing API: sweep: %s", err);
    if (mqproc__mets_servers_sweep(&e, api->mets_idle, err) < 0)
      MQPROC__WARN("processing API: sweep of the METS servers: %s", err);
    if (t->cb_fetch > 0 && mqproc__ocrd_callbacks_due(&e, t->cb_fetch, err) < 0) {
      MQPROC__WARN("processing API: workflow callbacks without an outcome: %s", err);
      t->ans.status = 503; /* asked again */
    }
  } else if (t->route == R_CB_RECORD) {
    if (mqproc__ocrd_callback_record(&e, t->cb->id, t->cb->rc == MQPROC_OK ? NULL : t->cb->err) !=
        0)
      t->ans.status = 503; /* sent again later */
  } else if (t->route == R_PING) {
    mqproc__ores_t *r = mqproc__odb_q(api->db, "SELECT 1", NULL, 0, NULL, err);
    t->ans.status = r != NULL ? 200 : 503;
    if (r == NULL)
      snprintf(t->ans.detail, sizeof(t->ans.detail), "%s", err);
    mqproc__ores_free(r);
  } else {
    run_route(t, &e);
  }
  if (!mqproc__odb_ok(api->db)) { /* made again for the next task */
    mqproc__odb_close(api->db);
    api->db = NULL;
  }
  if (api->q != NULL && (t->ans.status >= 500 || publish_failed)) { /* made again too */
    mqproc__qclient_close(api->q);
    api->q = NULL;
  }
}

/* ---- on the loop ---------------------------------------------------------------------- */

static void start_next(mqproc__api_t *api);
static task_t *queue_task(mqproc__api_t *api, int route, mqproc__http_req_t *req);

/* ---- workflow callbacks (on the callback thread, then the loop) ---- */

static void cb_free(cbitem_t *c) {
  free(c->id);
  free(c->url);
  free(c->body);
  free(c);
}

static void cb_forget(mqproc__api_t *api, cbitem_t *c) {
  for (cbitem_t **pp = &api->cbs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      api->ncbs--;
      break;
    }
  cb_free(c);
}

static void cb_work(void *ud) {
  cbitem_t *c = ud;
  c->err[0] = '\0';
  c->rc = mqproc__callback_post(c->url, c->body, &c->api->cb, NULL, c->err);
}

static void cb_start_next(mqproc__api_t *api);

static void cb_done(mqproc__loop_t *loop, void *ud) {
  cbitem_t *c = ud;
  mqproc__api_t *api = c->api;
  task_t *t;
  (void)loop;
  api->cb_posting = 0;
  c->state = CB_RECORDING;
  if (api->stopped) /* its outcome unrecorded: the next API sends it again */
    return;
  if ((t = queue_task(api, R_CB_RECORD, NULL)) == NULL) {
    cb_forget(api, c);
    api->cb_recheck = 1;
  } else {
    t->cb = c;
    start_next(api);
  }
  cb_start_next(api);
}

static void cb_start_next(mqproc__api_t *api) {
  cbitem_t *c = api->cbs;
  while (c != NULL && c->state != CB_QUEUED)
    c = c->next;
  if (api->cb_posting || api->stopped || c == NULL)
    return;
  c->state = CB_POSTING;
  api->cb_posting = 1;
  if (mqproc__loop_work(api->loop, cb_work, cb_done, c) != MQPROC_OK) {
    api->cb_posting = 0;
    cb_forget(api, c); /* its outcome unrecorded: asked for again */
    api->cb_recheck = 1;
  }
}

/* Keeps the callbacks a task found (not those kept already), starts the next. */
static void cb_take(mqproc__api_t *api, const json_t *list) {
  size_t i;
  json_t *v;
  json_array_foreach(list, i, v) {
    const char *id = json_string_value(json_object_get(v, "job_id"));
    cbitem_t *c, **end = &api->cbs;
    int kept = 0;
    for (c = api->cbs; c != NULL; c = c->next) {
      kept |= !strcmp(c->id, id);
      end = &c->next;
    }
    if (kept)
      continue;
    if (api->ncbs >= CALLBACKS_MAX || (c = calloc(1, sizeof(*c))) == NULL ||
        (c->id = strdup(id)) == NULL ||
        (c->url = strdup(json_string_value(json_object_get(v, "url")))) == NULL ||
        (c->body = strdup(json_string_value(json_object_get(v, "body")))) == NULL) {
      if (c != NULL)
        cb_free(c);
      api->cb_recheck = 1; /* left without an outcome: a later sweep asks for it */
      continue;
    }
    c->api = api;
    *end = c;
    api->ncbs++;
  }
  cb_start_next(api);
}

static void task_free(task_t *t) {
  if (t->req != NULL)
    t->api->waiting--;
  mqproc__ocrd_answer_free(&t->ans);
  json_decref(t->callbacks);
  free(t->arg);
  free(t->body);
  free(t->ctype);
  free(t->mets);
  free(t->page_id);
  free(t->wf_id);
  free(t->cb_url);
  free(t);
}

static void reply_detail(mqproc__http_req_t *req, int status, const char *detail,
                         const char *const *headers) {
  json_t *o = json_pack("{s:s}", "detail", detail);
  char *text = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  mqproc__http_reply_with(req, status, "application/json", text, text != NULL ? strlen(text) : 0,
                          headers);
}

static void answer(task_t *t) {
  mqproc__ocrd_answer_t *a = &t->ans;
  if (a->status >= 400 && a->body == NULL) {
    reply_detail(t->req, a->status, a->detail, NULL);
  } else if (a->text != NULL) {
    char disp[200];
    const char *hdrs[] = {"Content-Disposition", disp, NULL};
    snprintf(disp, sizeof(disp), "attachment; filename=\"%.150s.log\"", t->arg);
    mqproc__http_reply_with(t->req, a->status, "text/plain; charset=utf-8", a->text, a->text_len,
                            t->route == R_LOG ? hdrs : NULL);
    a->text = NULL; /* taken */
  } else {
    if (t->hide_log_path && json_is_object(a->body))
      json_object_del(a->body, "log_file_path");
    mqproc__http_reply_json(t->req, a->status, a->body != NULL ? a->body : json_null());
    a->body = NULL; /* taken */
  }
}

static void task_done(mqproc__loop_t *loop, void *ud) {
  task_t *t = ud;
  mqproc__api_t *api = t->api;
  (void)loop;
  api->running = NULL;
  if (t->route == R_SWEEP)
    api->sweep_queued = 0;
  if ((t->route == R_SWEEP && t->cb_fetch > 0 && t->ans.status != 200) ||
      (t->route == R_CB_RECORD && t->ans.status != 200))
    api->cb_recheck = 1;
  if (t->route == R_CB_RECORD && !api->stopped)
    cb_forget(api, t->cb);
  if (!api->stopped)
    cb_take(api, t->callbacks);
  if (api->stopped) {
    /* the requests were answered (503) by the HTTP server's stop */
  } else if (t->route == R_PING) {
    t->ping_cb(t->ud, t->ans.status == 200 ? NULL : t->ans.detail);
  } else if (t->req != NULL) {
    answer(t);
  }
  task_free(t);
  start_next(api);
}

static void start_next(mqproc__api_t *api) {
  task_t *t = api->head;
  if (api->running != NULL || t == NULL || api->stopped)
    return;
  api->head = t->next;
  if (api->head == NULL)
    api->tail = NULL;
  api->running = t;
  if (mqproc__loop_work(api->loop, run_task, task_done, t) != MQPROC_OK) {
    mqproc__ocrd_fail(&t->ans, 503, "cannot start the API's worker");
    task_done(api->loop, t);
  }
}

static task_t *queue_task(mqproc__api_t *api, int route, mqproc__http_req_t *req) {
  task_t *t;
  if (req != NULL && api->waiting >= MQPROC__HTTP_READS_MAX) {
    reply_detail(req, 503, "busy: too many requests wait for the API's worker", NULL);
    return NULL;
  }
  if ((t = calloc(1, sizeof(*t))) == NULL) {
    if (req != NULL)
      reply_detail(req, 500, "out of memory", NULL);
    return NULL;
  }
  t->api = api;
  t->route = route;
  t->req = req;
  if (req != NULL)
    api->waiting++;
  if (api->tail != NULL)
    api->tail->next = t;
  else
    api->head = t;
  api->tail = t;
  return t;
}

static void sweep_due(mqproc__loop_t *loop, void *ud) {
  mqproc__api_t *api = ud;
  api->sweep_timer = mqproc__loop_timer(loop, api->sweep_ms, sweep_due, api);
  task_t *t;
  if (api->sweep_queued || api->stopped || (t = queue_task(api, R_SWEEP, NULL)) == NULL)
    return;
  if (api->cb_recheck && api->ncbs < CALLBACKS_MAX) {
    t->cb_fetch = CALLBACKS_MAX - api->ncbs;
    api->cb_recheck = 0;
  }
  api->sweep_queued = 1;
  start_next(api);
}

/* ---- routes --------------------------------------------------------------------------- */

/* Whether req shows a token of scope `need` (MQPROC__SCOPE_READ: the read or the admin
 * token; MQPROC__SCOPE_ADMIN: the admin token), or no token is configured; else answered. */
static int has_token(mqproc__api_t *api, mqproc__http_req_t *req, int need) {
  const char *www[] = {"WWW-Authenticate", "Bearer", NULL};
  const char *bearer = mqproc__http_header(req, "Authorization");
  char peer[64];
  int scope, wait;
  if (api->auth == NULL)
    return 1;
  mqproc__http_peer(req, peer, sizeof(peer));
  if (bearer != NULL && (wait = mqproc__auth_backoff(api->auth, peer)) > 0) {
    char secs[16], text[200];
    const char *hdrs[] = {"Retry-After", secs, NULL};
    snprintf(secs, sizeof(secs), "%d", wait);
    snprintf(text, sizeof(text), "too many wrong tokens from %.64s: try again in %d s", peer, wait);
    reply_detail(req, 429, text, hdrs);
    return 0;
  }
  if (mqproc__auth_check(api->auth, req, &scope) == MQPROC__AUTH_BEARER && scope >= need)
    return 1;
  if (bearer != NULL)
    mqproc__auth_failed(api->auth, peer);
  reply_detail(req, 401,
               bearer != NULL ? "wrong token"
               : need == MQPROC__SCOPE_ADMIN
                   ? "this route needs the API's token (Authorization: Bearer TOKEN)"
                   : "this route needs the API's read or admin token (Authorization: Bearer "
                     "TOKEN)",
               www);
  return 0;
}

/* Whether route submits (it needs the admin token when one is set). */
static int submits(int route) {
  return route == R_RUN || route == R_WF_STORE || route == R_WF_PUT || route == R_WF_RUN;
}

static int may_submit(mqproc__api_t *api, mqproc__http_req_t *req) {
  return api->auth == NULL || !mqproc__auth_can_act(api->auth) || /* no admin token: open */
         has_token(api, req, MQPROC__SCOPE_ADMIN);
}

/* The {arg} after prefix (the rest of the path, not empty), or NULL. */
static const char *tail_of(const char *path, const char *prefix) {
  size_t n = strlen(prefix);
  return !strncmp(path, prefix, n) && path[n] != '\0' ? path + n : NULL;
}

/* Whether a query flag is true as FastAPI reads a bool (true/1/yes/on). */
static int truthy(const char *v) {
  return v != NULL && (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes") ||
                       !strcasecmp(v, "on"));
}

static char *dup_arg(mqproc__http_req_t *req, const char *name) {
  const char *v = mqproc__http_arg(req, name);
  return v != NULL && v[0] != '\0' ? strdup(v) : NULL;
}

/* The route of (method, path): its enum (arg set to the path's part), -1 unknown path, -2
 * a method the path does not take. */
static int route_of(const char *m, const char *path, const char **arg) {
  int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST");
  *arg = NULL;
  if (!strcmp(path, "/processor"))
    return get ? R_PROCESSORS : -2;
  if ((*arg = tail_of(path, "/processor/info/")) != NULL)
    return get ? R_INFO : -2;
  if ((*arg = tail_of(path, "/processor/run/")) != NULL)
    return post ? R_RUN : -2;
  if ((*arg = tail_of(path, "/processor/job/")) != NULL)
    return get ? R_JOB : -2;
  if ((*arg = tail_of(path, "/processor/log/")) != NULL)
    return get ? R_LOG : -2;
  if (!strcmp(path, "/result_callback"))
    return post ? R_RESULT : -2;
  if (!strcmp(path, "/workflow"))
    return post ? R_WF_STORE : -2;
  if (!strcmp(path, "/workflow/run") && post)
    return R_WF_RUN;
  if ((*arg = tail_of(path, "/workflow/job-simple/")) != NULL)
    return get ? R_WF_SIMPLE : -2;
  if ((*arg = tail_of(path, "/workflow/job/")) != NULL)
    return get ? R_WF_JOB : -2;
  if ((*arg = tail_of(path, "/workflow/")) != NULL && strchr(*arg, '/') == NULL)
    return get ? R_WF_GET : !strcmp(m, "PUT") ? R_WF_PUT : -2;
  return -1;
}

static void home(mqproc__http_req_t *req) {
  char when[32];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(when, sizeof(when), "%Y-%m-%d %H:%M", &tm);
  mqproc__http_reply_json(req, 200,
                          json_pack("{s:s, s:s}", "message",
                                    "The home page of the OCR-D Processing Server", "time", when));
}

/* What a task takes from its request: the path's part, the body, the query. */
static int fill_task(task_t *t, mqproc__http_req_t *req, const char *arg) {
  const char *body, *ct = mqproc__http_header(req, "Content-Type");
  size_t len;
  if ((arg != NULL && (t->arg = strdup(arg)) == NULL) ||
      (ct != NULL && (t->ctype = strdup(ct)) == NULL))
    return -1;
  if ((body = mqproc__http_body(req, &len)) != NULL) {
    if ((t->body = malloc(len + 1)) == NULL)
      return -1;
    memcpy(t->body, body, len + 1);
    t->body_len = len;
  }
  if (t->route == R_WF_RUN) {
    t->mets = dup_arg(req, "mets_path");
    t->page_id = dup_arg(req, "page_id");
    t->wf_id = dup_arg(req, "workflow_id");
    t->cb_url = dup_arg(req, "workflow_callback_url");
    t->page_wise = truthy(mqproc__http_arg(req, "page_wise"));
  }
  return 0;
}

/* Whether s can be carried as JSON text (valid UTF-8). */
static int utf8_text(const char *s) {
  json_t *probe = json_string(s);
  json_decref(probe);
  return probe != NULL;
}

int mqproc__api_handle(mqproc__api_t *api, mqproc__http_req_t *req) {
  const char *path = mqproc__http_path(req), *m = mqproc__http_method(req), *arg;
  int route = route_of(m, path, &arg), hide;
  task_t *t;
  if (!strcmp(path, "/") && (!strcmp(m, "GET") || !strcmp(m, "HEAD"))) {
    home(req);
    return 1;
  }
  if (route == -1)
    return 0;
  if (route == -2) {
    reply_detail(req, 405, "Method Not Allowed", NULL);
    return 1;
  }
  if (submits(route) && !may_submit(api, req))
    return 1;
  /* the reads (not the workers' /result_callback): with a read token, every one needs a
   * token; with the admin token alone, a job's log does, and a job's answer leaves its
   * log's path out unless a token comes (as the status page hides both: issue 38, F11) */
  hide = route == R_JOB && api->auth != NULL && !api->reads_need_token &&
         mqproc__http_header(req, "Authorization") == NULL;
  if (route != R_RESULT && !submits(route) && api->auth != NULL && !hide &&
      (api->reads_need_token || route == R_LOG || route == R_JOB) &&
      !has_token(api, req, MQPROC__SCOPE_READ))
    return 1;
  if (arg != NULL && !utf8_text(arg)) { /* it names nothing */
    reply_detail(req, 404, "Not Found (the path is not UTF-8 text)", NULL);
    return 1;
  }
  if ((t = queue_task(api, route, req)) == NULL)
    return 1;
  t->hide_log_path = hide;
  if (fill_task(t, req, arg) != 0) {
    mqproc__ocrd_fail(&t->ans, 500, "out of memory");
    t->route = -1; /* answered as it is when it runs */
  }
  start_next(api);
  return 1;
}

void mqproc__api_ping(mqproc__api_t *api, void (*cb)(void *ud, const char *problem), void *ud) {
  task_t *t = queue_task(api, R_PING, NULL);
  if (t == NULL) {
    cb(ud, "out of memory");
    return;
  }
  t->ping_cb = cb;
  t->ud = ud;
  start_next(api);
}

/* ---- life ----------------------------------------------------------------------------- */

int mqproc__api_new(mqproc__api_t **out, mqproc__loop_t *loop, const mqproc__api_cfg_t *cfg,
                    char *err) {
  mqproc__api_t *api = calloc(1, sizeof(*api));
  int rc;
  *out = NULL;
  if (api == NULL || (api->database = strdup(cfg->database)) == NULL ||
      (api->queue = strdup(cfg->queue)) == NULL ||
      (cfg->exchange != NULL && (api->exchange = strdup(cfg->exchange)) == NULL) ||
      (cfg->ws_root != NULL && (api->ws_root = strdup(cfg->ws_root)) == NULL) ||
      (cfg->result_url != NULL && (api->result_url = strdup(cfg->result_url)) == NULL)) {
    mqproc__api_free(api);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  api->reads_need_token = cfg->read_token != NULL;
  if ((cfg->admin_token != NULL || cfg->read_token != NULL) &&
      (rc = mqproc__auth_new(&api->auth, cfg->admin_token, cfg->read_token, 0, err)) != MQPROC_OK) {
    mqproc__api_free(api);
    return rc;
  }
  api->loop = loop;
  api->mets = cfg->mets;
  if ((api->mets_idle = json_object()) == NULL) {
    mqproc__api_free(api);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  api->tools = json_incref(cfg->tools);
  api->tls = cfg->tls;
  api->cb = cfg->cb;
  if (cfg->self != NULL) {
    memcpy(&api->sa_self, cfg->self, sizeof(api->sa_self));
    api->cb.self = (const struct sockaddr *)&api->sa_self;
  }
  api->cb_recheck = 1; /* the first sweep asks for what a stopped API left unsent */
  api->sweep_ms = cfg->sweep_ms > 0 ? cfg->sweep_ms : 2000;
  api->sweep_timer = mqproc__loop_timer(loop, 0, sweep_due, api); /* one at start: a restart
                                                                      looks at once */
  *out = api;
  return MQPROC_OK;
}

static void drop_queued(mqproc__api_t *api) {
  while (api->head != NULL) {
    task_t *t = api->head;
    api->head = t->next;
    task_free(t);
  }
  api->tail = NULL;
}

void mqproc__api_stop(mqproc__api_t *api) {
  if (api == NULL)
    return;
  api->stopped = 1;
  if (api->sweep_timer != 0)
    mqproc__loop_timer_cancel(api->loop, api->sweep_timer);
  api->sweep_timer = 0;
  drop_queued(api);
}

void mqproc__api_free(mqproc__api_t *api) {
  if (api == NULL)
    return;
  drop_queued(api);
  if (api->running != NULL)
    task_free(api->running);
  while (api->cbs != NULL) {
    cbitem_t *c = api->cbs;
    api->cbs = c->next;
    cb_free(c);
  }
  mqproc__odb_close(api->db);
  mqproc__qclient_close(api->q);
  mqproc__auth_free(api->auth);
  json_decref(api->tools);
  json_decref(api->mets_idle);
  free(api->database);
  free(api->queue);
  free(api->exchange);
  free(api->ws_root);
  free(api->result_url);
  free(api);
}
