/* The status page (dash.h): requests become reads queued for the reader thread; each read
 * runs there with the reader's own database and broker connections (blocking clients,
 * kept between reads), and its answer is rendered and sent from the loop. */
#include "http/dash.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "http/auth.h"
#include "http/page.h"
#include "runner/joblog.h"
#include "base/log.h"
#include "mqproc/mqproc.h"
#include "ops/ops.h"
#include "ops/page_reads.h"
#include "base/util.h"
#include "store/queue.h"

#define LOG_TAIL 16384
#define AMQP_RETRY_S 10

enum { R_OVERVIEW, R_JOBS, R_JOB, R_DEPTH, R_ACTION, R_PING };

typedef struct read {
  mqproc__dash_t *dash;
  int kind;
  mqproc__http_req_t *req; /* the page's request (NULL for depth and ping) */
  char *arg;               /* job id, or the queue */
  char *state, *processor, *after;
  int admin;       /* the page's MQPROC__PAGE_* for this request */
  int hide;        /* R_JOB: its request and log are not for this reader (never read) */
  char action[16]; /* R_ACTION: retry cancel pause resume */
  char actor[80];  /* R_ACTION: web:ADDR */
  int api;         /* R_ACTION: a script's (JSON answer), else a browser's (redirect) */
  int status;      /* R_ACTION: the HTTP status of its answer */
  json_t *result;
  char *log_tail;
  char err[512];
  long messages, consumers;
  mqproc__dash_depth_cb depth_cb;
  mqproc__dash_ping_cb ping_cb;
  void *ud;
  struct read *next;
} read_t;

struct mqproc__dash {
  mqproc__loop_t *loop;
  char *database, *queue, *title, *exchange, *via;
  mqproc__auth_t *auth;    /* NULL: no token (read-only, and everything shown) */
  mqproc__odb_t *db;       /* the reader's: used by one read at a time */
  mqproc__qclient_t *amqp; /* likewise */
  mqproc__tls_t tls;       /* for amqps://; its file names are borrowed from the caller's cfg */
  time_t amqp_failed;      /* when connecting last failed (retried after AMQP_RETRY_S) */
  read_t *head, *tail;     /* waiting reads */
  read_t *running;         /* the read on the reader thread now */
  int stopped;             /* mqproc__dash_stop(): answers go nowhere */
  int depth_waiting;       /* a depth read is queued or running */
  int page_reads;          /* reads of page requests queued or running */
  int metrics;             /* /metrics is served beside the page */
};

/* ---- on the reader thread ----------------------------------------------------------- */

static int db(mqproc__dash_t *d, char *err) {
  char e[512];
  if (d->db != NULL && mqproc__odb_ok(d->db))
    return 1;
  mqproc__odb_close(d->db);
  /* a page never waits long for a slow query: 5 s */
  if ((d->db = mqproc__odb_open(d->database, 5000, e)) != NULL)
    return 1;
  snprintf(err, 512, "the database is not reachable: %.470s", e);
  return 0;
}

static mqproc__qclient_t *broker(mqproc__dash_t *d) {
  if (d->queue == NULL || d->amqp != NULL || time(NULL) - d->amqp_failed < AMQP_RETRY_S)
    return d->amqp;
  char err[MQPROC_ERR_LEN];
  if ((d->amqp = mqproc__qclient_open(d->queue, &d->tls, &mqproc__table_qclient, err)) == NULL) {
    d->amqp_failed = time(NULL); /* said once per try, every AMQP_RETRY_S at most */
    MQPROC__WARN("status page: the queue is not reachable (depths and retries wait): %s", err);
  }
  return d->amqp;
}

/* The last LOG_TAIL bytes of a job's log: its text kept in the row (text: a first try's
 * output when no file was needed), then its file, opened as the server opens it (a link or
 * a FIFO a processor put there is refused: never followed, never waited on); NULL when
 * there is neither (or the file cannot be read and there is no text). */
static char *tail_of(const char *text, const char *path) {
  char err[MQPROC_ERR_LEN], *buf;
  int fd = path != NULL ? mqproc__joblog_open_read(path, err) : -1;
  size_t tl = text != NULL ? strlen(text) : 0, keep;
  struct stat st;
  ssize_t n = 0;
  if (fd < 0 && text == NULL)
    return NULL;
  if ((fd >= 0 && fstat(fd, &st) != 0) || (buf = malloc(LOG_TAIL + 1)) == NULL) {
    if (fd >= 0)
      close(fd);
    return NULL;
  }
  if (fd >= 0) { /* the file's end first, then as much of the text as fits before it */
    n = pread(fd, buf, LOG_TAIL, st.st_size > LOG_TAIL ? st.st_size - LOG_TAIL : 0);
    n = n > 0 ? n : 0;
    close(fd);
  }
  keep = tl < LOG_TAIL - (size_t)n ? tl : LOG_TAIL - (size_t)n;
  memmove(buf + keep, buf, (size_t)n);
  if (keep > 0)
    memcpy(buf, text + tl - keep, keep);
  buf[keep + (size_t)n] = '\0';
  if (buf != NULL) { /* cut anywhere: the page is UTF-8 */
    char *clean = NULL;
    mqproc__utf8_clean(buf, &clean);
    if (clean != NULL) {
      free(buf);
      buf = clean;
    }
  }
  return buf;
}

static json_t *overview(mqproc__dash_t *d, char *err) {
  json_t *procs = mqproc__ops_processors(d->db, err), *out, *v, *stats;
  size_t i;
  if (procs == NULL)
    return NULL;
  out = json_pack("{s:[]}", "processors");
  json_array_foreach(procs, i, v) {
    stats = mqproc__ops_stats(d->db, broker(d), json_string_value(v));
    json_object_set_new(stats, "hour", mqproc__ops_hour(d->db, json_string_value(v), err));
    json_array_append_new(json_object_get(out, "processors"), stats);
  }
  json_decref(procs);
  json_object_set_new(out, "workers", mqproc__ops_workers(d->db, NULL, 0, err));
  json_object_set_new(out, "failures", mqproc__ops_failures(d->db, 20, err));
  json_object_set_new(out, "dead_letters", mqproc__ops_dead_letters_recent(d->db, 20, err));
  return out;
}

/* An action, as the CLI does it (ops.h): the answer's status in r->status. */
static void act(mqproc__dash_t *d, read_t *r) {
  json_t *one = json_pack("[s]", r->arg);
  char *ids = one != NULL ? json_dumps(one, JSON_COMPACT) : NULL;
  json_decref(one);
  r->status = 503;
  if (ids == NULL && strcmp(r->action, "pause") != 0 && strcmp(r->action, "resume") != 0) {
    /* never "no ids": that is no filter (post() refuses such ids before they get here) */
    snprintf(r->err, sizeof(r->err), "not a job id this page can carry");
    r->status = 400;
  } else if (!strcmp(r->action, "retry")) {
    mqproc__qclient_t *a = broker(d);
    mqproc__ops_retry_t w = {.ids = ids, .exchange = d->exchange, .actor = r->actor, .via = d->via};
    if (a == NULL)
      snprintf(r->err, sizeof(r->err), "not retried: the broker is %s",
               d->queue == NULL ? "not configured (--queue)" : "not reachable now");
    else if ((r->result = mqproc__ops_retry(d->db, a, &w, r->err)) != NULL)
      r->status = json_integer_value(json_object_get(r->result, "retried")) > 0 ? 200 : 409;
    if (r->status == 200 &&
        !json_is_true(json_object_get(json_array_get(json_object_get(r->result, "jobs"), 0),
                                      "published"))) { /* the sweep publishes it; reconnect */
      mqproc__qclient_close(d->amqp);
      d->amqp = NULL;
    }
    if (r->status == 409)
      snprintf(r->err, sizeof(r->err),
               "not retried: the job is unknown, QUEUED or RUNNING, or has no stored request");
  } else if (!strcmp(r->action, "cancel")) {
    if ((r->result = mqproc__ops_cancel(d->db, ids, NULL, r->actor, d->via, r->err)) != NULL)
      r->status = json_integer_value(json_object_get(r->result, "cancelled")) > 0 ? 200 : 409;
    if (r->status == 409)
      snprintf(r->err, sizeof(r->err), "not cancelled: the job has finished, or is unknown");
  } else if ((r->result = mqproc__ops_control(d->db, r->action, r->arg, NULL, r->actor, d->via,
                                              r->err)) != NULL) {
    r->status = 200;
  }
  free(ids);
}

static void run_read(void *ud) {
  read_t *r = ud;
  mqproc__dash_t *d = r->dash;
  r->status = 503;
  if (r->kind == R_DEPTH) {
    mqproc__qclient_t *a = broker(d);
    long held;
    int rc = a != NULL ? mqproc__qclient_depth(a, r->arg, &r->messages, &r->consumers, &held) : -2;
    if (rc == -2 && a != NULL) { /* the connection is gone: again next time */
      mqproc__qclient_close(a);
      d->amqp = NULL;
    }
    if (rc != 0)
      r->messages = r->consumers = -1;
    return;
  }
  if (!db(d, r->err))
    return;
  switch (r->kind) {
  case R_OVERVIEW:
    r->result = overview(d, r->err);
    break;
  case R_JOBS: {
    mqproc__jobs_filter_t f = {.state = r->state,
                               .processor = r->processor,
                               .after = r->after,
                               .since_s = -1,
                               .limit = 50};
    r->result = mqproc__ops_jobs(d->db, &f, r->err);
    break;
  }
  case R_JOB:
    if ((r->result = mqproc__ops_job(d->db, r->arg, r->err)) != NULL && !r->hide)
      r->log_tail = tail_of(json_string_value(json_object_get(r->result, "log_text")),
                            json_string_value(json_object_get(r->result, "log_path")));
    else if (r->result != NULL) { /* what a reader without a token does not see */
      json_object_del(r->result, "request");
      json_object_del(r->result, "headers");
    }
    if (r->result != NULL) /* the log is shown as its tail, not in the job's table */
      json_object_del(r->result, "log_text");
    break;
  case R_ACTION:
    act(d, r);
    break;
  case R_PING: {
    mqproc__ores_t *res = mqproc__odb_q(d->db, "SELECT 1", NULL, 0, NULL, r->err);
    r->status = res != NULL ? 200 : 503;
    r->result = res != NULL ? json_true() : NULL;
    mqproc__ores_free(res);
    break;
  }
  }
  if (r->result == NULL && !mqproc__odb_ok(d->db)) {
    mqproc__odb_close(d->db);
    d->db = NULL;
  }
}

/* ---- on the loop -------------------------------------------------------------------- */

static void start_next(mqproc__dash_t *d);

static void read_free(read_t *r) {
  if (r->req != NULL)
    r->dash->page_reads--;
  json_decref(r->result);
  free(r->arg);
  free(r->state);
  free(r->processor);
  free(r->after);
  free(r->log_tail);
  free(r);
}

/* The page's options for a reader in state admin (MQPROC__PAGE_*). */
static mqproc__page_opts_t page_opts(const mqproc__dash_t *d, int admin, int hide) {
  return (mqproc__page_opts_t){.title = d->title,
                               .admin = admin,
                               .acts = mqproc__auth_can_act(d->auth),
                               .hide = hide,
                               .metrics = d->metrics};
}

/* A script gets JSON; a browser goes back to the page that asked (or an error page). */
static void answer_action(read_t *r, const mqproc__page_opts_t *o) {
  const char *line = json_string_value(json_object_get(r->result, "audit"));
  char *html, *where;
  size_t len = 0;
  if (line != NULL)
    MQPROC__INFO("audit: %s", line);
  if (r->api) {
    json_t *out = json_pack("{s:b}", "ok", r->status == 200);
    if (r->status != 200)
      json_object_set_new(out, "error", json_string(r->err));
    if (r->result != NULL)
      json_object_update(out, r->result);
    mqproc__http_reply_json(r->req, r->status, out);
    return;
  }
  if (r->status == 200) {
    where = !strcmp(r->action, "retry") || !strcmp(r->action, "cancel")
                ? mqproc__page_job_href(r->arg)
                : strdup("/");
    {
      const char *hdrs[] = {"Location", where != NULL ? where : "/", NULL};
      mqproc__http_reply_text_with(r->req, 303, "text/plain; charset=utf-8", "done\n", hdrs);
    }
    free(where);
    return;
  }
  if ((html = mqproc__page_error(r->err, o, &len)) == NULL)
    mqproc__http_reply_text(r->req, 500, "text/plain; charset=utf-8", "out of memory\n");
  else
    mqproc__http_reply(r->req, r->status, "text/html; charset=utf-8", html, len);
}

static void answer(read_t *r) {
  mqproc__page_opts_t o = page_opts(r->dash, r->admin, r->hide);
  if (r->kind == R_ACTION) {
    answer_action(r, &o);
    return;
  }
  char *html = NULL;
  size_t len = 0;
  int status = 200;
  if (r->result == NULL) {
    status = r->kind == R_JOB && strncmp(r->err, "no job", 6) == 0 ? 404 : 503;
    html = mqproc__page_error(r->err, &o, &len);
  } else if (r->kind == R_OVERVIEW) {
    html = mqproc__page_overview(r->result, &o, &len);
  } else if (r->kind == R_JOBS) {
    html = mqproc__page_jobs(r->result, r->state, r->processor, &o, &len);
  } else {
    html = mqproc__page_job(r->result, r->log_tail, &o, &len);
  }
  if (html == NULL)
    mqproc__http_reply_text(r->req, 500, "text/plain; charset=utf-8", "out of memory\n");
  else
    mqproc__http_reply(r->req, status, "text/html; charset=utf-8", html, len);
}

static void read_done(mqproc__loop_t *loop, void *ud) {
  read_t *r = ud;
  mqproc__dash_t *d = r->dash;
  (void)loop;
  d->running = NULL;
  if (d->stopped) {
    /* the requests were answered (503) by the HTTP server's stop */
  } else if (r->kind == R_DEPTH) {
    d->depth_waiting = 0;
    r->depth_cb(r->ud, r->messages, r->consumers);
  } else if (r->kind == R_PING) {
    r->ping_cb(r->ud, r->status == 200 ? NULL : r->err);
  } else {
    answer(r);
  }
  read_free(r);
  start_next(d);
}

static void start_next(mqproc__dash_t *d) {
  read_t *r = d->head;
  if (d->running != NULL || r == NULL)
    return;
  d->head = r->next;
  if (d->head == NULL)
    d->tail = NULL;
  d->running = r;
  if (mqproc__loop_work(d->loop, run_read, read_done, r) != MQPROC_OK) {
    snprintf(r->err, sizeof(r->err), "cannot start the page reader");
    read_done(d->loop, r);
  }
}

static read_t *queue_read(mqproc__dash_t *d, int kind) {
  read_t *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  r->dash = d;
  r->kind = kind;
  if (d->tail != NULL)
    d->tail->next = r;
  else
    d->head = r;
  d->tail = r;
  return r;
}

/* A read for a page request (answered from read_done), or NULL after answering req: at
 * most MQPROC__HTTP_READS_MAX wait for the one reader, so a flood of page requests (or a
 * stuck read) holds no more of the HTTP slots. */
static read_t *page_read(mqproc__dash_t *d, mqproc__http_req_t *req, int kind) {
  read_t *r;
  if (d->page_reads >= MQPROC__HTTP_READS_MAX) {
    mqproc__http_reply_text(req, 503, "text/plain; charset=utf-8",
                            "the page is busy (too many requests wait for its reader)\n");
    return NULL;
  }
  if ((r = queue_read(d, kind)) == NULL) {
    mqproc__http_reply_text(req, 500, "text/plain; charset=utf-8", "out of memory\n");
    return NULL;
  }
  r->req = req;
  d->page_reads++;
  return r;
}

static char *dup_or_null(const char *s) {
  return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

static void reply_page(mqproc__http_req_t *req, int status, char *html, size_t len,
                       const char *const *headers) {
  if (html == NULL)
    mqproc__http_reply_text(req, 500, "text/plain; charset=utf-8", "out of memory\n");
  else
    mqproc__http_reply_with(req, status, "text/html; charset=utf-8", html, len, headers);
}

/* Whether a name from a path can be carried as JSON text (valid UTF-8, no NUL). */
static int carried(const char *name) {
  json_t *t = json_string(name);
  int ok = t != NULL && name[0] != '\0';
  json_decref(t);
  return ok;
}

/* 429 while peer's tokens are refused after too many wrong ones (1). */
static int backing_off(mqproc__dash_t *d, mqproc__http_req_t *req, const char *peer) {
  int wait = mqproc__auth_backoff(d->auth, peer);
  char secs[16], text[200];
  const char *hdrs[] = {"Retry-After", secs, NULL};
  if (wait == 0)
    return 0;
  snprintf(secs, sizeof(secs), "%d", wait);
  snprintf(text, sizeof(text), "too many wrong tokens from %.64s: try again in %d s\n", peer, wait);
  mqproc__http_reply_text_with(req, 429, "text/plain; charset=utf-8", text, hdrs);
  return 1;
}

/* POST /login: a session of its own for a right token (admin or read). */
static void sign_in(mqproc__dash_t *d, mqproc__http_req_t *req, const char *peer) {
  mqproc__page_opts_t o = page_opts(d, MQPROC__PAGE_SIGN_IN, 1);
  char cookie[200], *html;
  size_t len = 0;
  if (backing_off(d, req, peer))
    return;
  if (mqproc__auth_sign_in(d->auth, mqproc__http_form(req, "token"), peer, cookie,
                           sizeof(cookie)) != MQPROC__SCOPE_NONE) {
    const char *set[] = {"Location", "/", "Set-Cookie", cookie, NULL};
    mqproc__http_reply_text_with(req, 303, "text/plain; charset=utf-8", "signed in\n", set);
    return;
  }
  html = mqproc__page_login("that is not the token", &o, &len);
  reply_page(req, 403, html, len, NULL);
}

/* Whether req may act (the admin token's cookie or Bearer); else answers it. *how: the
 * MQPROC__AUTH_* it came with. */
static int may_act(mqproc__dash_t *d, mqproc__http_req_t *req, const char *peer, int *how) {
  mqproc__page_opts_t o = page_opts(d, MQPROC__PAGE_SIGN_IN, 1);
  const char *www[] = {"WWW-Authenticate", "Bearer", NULL};
  const char *bearer = mqproc__http_header(req, "Authorization");
  int scope;
  size_t len = 0;
  if (!mqproc__auth_can_act(d->auth)) {
    mqproc__http_reply_text(req, 403, "text/plain; charset=utf-8",
                            "read-only: this page was started without --http-admin-token\n");
    return 0;
  }
  if (bearer != NULL && backing_off(d, req, peer)) /* a script's tries are counted too */
    return 0;
  *how = mqproc__auth_check(d->auth, req, &scope);
  if (*how == MQPROC__AUTH_NONE && bearer != NULL) {
    mqproc__auth_failed(d->auth, peer);
    mqproc__http_reply_text_with(req, 401, "application/json",
                                 "{\"ok\":false,\"error\":\"wrong admin token\"}\n", www);
  } else if (*how == MQPROC__AUTH_NONE) {
    char *html = mqproc__page_login("sign in first", &o, &len); /* before len is read */
    reply_page(req, 401, html, len, www);
  } else if (scope != MQPROC__SCOPE_ADMIN) {
    mqproc__http_reply_text(req, 403, "text/plain; charset=utf-8",
                            "the read token cannot act: sign in with the admin token\n");
  }
  return *how != MQPROC__AUTH_NONE && scope == MQPROC__SCOPE_ADMIN;
}

/* POST /jobs/ID/retry|cancel, /processors/NAME/pause|resume (ID may hold a slash): a
 * read for the reader thread, answered when it ran. */
static void action(mqproc__dash_t *d, mqproc__http_req_t *req, const char *path, const char *peer,
                   int how) {
  const char *slash = strrchr(path, '/'), *verb = slash + 1;
  size_t nlen = strncmp(path, "/jobs/", 6) == 0          ? 6
                : strncmp(path, "/processors/", 12) == 0 ? 12
                                                         : 0;
  char *arg;
  read_t *r;
  if (nlen == 0 || slash <= path + nlen ||
      (nlen == 6 && strcmp(verb, "retry") != 0 && strcmp(verb, "cancel") != 0) ||
      (nlen == 12 && strcmp(verb, "pause") != 0 && strcmp(verb, "resume") != 0)) {
    mqproc__http_reply_text(req, 404, "text/plain; charset=utf-8", "no such action\n");
    return;
  }
  if ((arg = strndup(path + nlen, (size_t)(slash - path) - nlen)) == NULL) {
    mqproc__http_reply_text(req, 500, "text/plain; charset=utf-8", "out of memory\n");
    return;
  }
  if (!carried(arg)) { /* e.g. /jobs/%FF/retry: it names no job, so it may do nothing */
    free(arg);
    mqproc__http_reply_text(req, 400, "text/plain; charset=utf-8",
                            "not a job or processor name: it is not UTF-8 text\n");
    return;
  }
  if ((r = page_read(d, req, R_ACTION)) == NULL) {
    free(arg);
    return;
  }
  r->arg = arg;
  r->api = how == MQPROC__AUTH_BEARER;
  r->admin = MQPROC__PAGE_SIGNED_IN;
  snprintf(r->action, sizeof(r->action), "%s", verb);
  snprintf(r->actor, sizeof(r->actor), "web:%s", peer);
  start_next(d);
}

/* POST: sign in or out, or an action on a job or a processor (the admin token's). */
static void post(mqproc__dash_t *d, mqproc__http_req_t *req, const char *path) {
  char why[300], peer[64];
  int how;
  if (d->auth == NULL) {
    mqproc__http_reply_text(req, 403, "text/plain; charset=utf-8",
                            "read-only: this page was started without --http-admin-token\n");
    return;
  }
  mqproc__http_peer(req, peer, sizeof(peer));
  if (mqproc__auth_cross_site(req, why, sizeof(why)) != NULL) {
    MQPROC__WARN("http: %s %s from %s %s", mqproc__http_method(req), path, peer, why);
    mqproc__http_reply_text(req, 403, "text/plain; charset=utf-8", why);
  } else if (!strcmp(path, "/login")) {
    sign_in(d, req, peer);
  } else if (!strcmp(path, "/logout")) { /* forgotten here, not only in the browser */
    const char *clear[] = {"Location", "/", "Set-Cookie", MQPROC__AUTH_COOKIE_CLEAR, NULL};
    mqproc__auth_sign_out(d->auth, req);
    mqproc__http_reply_text_with(req, 303, "text/plain; charset=utf-8", "signed out\n", clear);
  } else if (may_act(d, req, peer, &how)) {
    action(d, req, path, peer, how);
  }
}

/* What the page shows req's reader (MQPROC__PAGE_*); *hide: requests and logs hidden (a
 * token was given, and req has none). */
static int reader_state(const mqproc__dash_t *d, const mqproc__http_req_t *req, int *hide) {
  int scope = MQPROC__SCOPE_NONE, how;
  *hide = 0;
  if (d->auth == NULL) /* no token: everyone who reaches the port reads everything */
    return MQPROC__PAGE_READ_ONLY;
  how = mqproc__auth_check(d->auth, req, &scope);
  *hide = scope == MQPROC__SCOPE_NONE;
  if (how != MQPROC__AUTH_COOKIE)
    return MQPROC__PAGE_SIGN_IN;
  return scope == MQPROC__SCOPE_ADMIN ? MQPROC__PAGE_SIGNED_IN : MQPROC__PAGE_READER;
}

int mqproc__dash_handle(mqproc__dash_t *d, mqproc__http_req_t *req) {
  const char *path = mqproc__http_path(req), *method = mqproc__http_method(req);
  read_t *r;
  int kind;
  if (!strcmp(method, "POST")) {
    post(d, req, path);
    return 1;
  }
  if (!strcmp(path, "/"))
    kind = R_OVERVIEW;
  else if (!strcmp(path, "/jobs"))
    kind = R_JOBS;
  else if (!strncmp(path, "/jobs/", 6) && path[6] != '\0')
    kind = R_JOB;
  else if (!strcmp(path, "/login") && d->auth != NULL)
    kind = -1;
  else
    return 0;
  if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
    mqproc__http_reply_text(req, 405, "text/plain; charset=utf-8", "only GET and POST here\n");
    return 1;
  }
  if (kind == -1) {
    mqproc__page_opts_t o = page_opts(d, MQPROC__PAGE_SIGN_IN, 1);
    size_t len = 0;
    char *html = mqproc__page_login(NULL, &o, &len); /* sets len: not in reply_page's call */
    reply_page(req, 200, html, len, NULL);
    return 1;
  }
  if ((r = page_read(d, req, kind)) == NULL)
    return 1;
  r->admin = reader_state(d, req, &r->hide);
  if (kind == R_JOB)
    r->arg = strdup(path + 6); /* MHD gives the path unescaped */
  if (kind == R_JOBS) {
    r->state = dup_or_null(mqproc__http_arg(req, "state"));
    r->processor = dup_or_null(mqproc__http_arg(req, "processor"));
    r->after = dup_or_null(mqproc__http_arg(req, "after"));
  }
  start_next(d);
  return 1;
}

void mqproc__dash_ping(mqproc__dash_t *d, mqproc__dash_ping_cb cb, void *ud) {
  read_t *r = queue_read(d, R_PING);
  if (r == NULL) {
    cb(ud, "out of memory");
    return;
  }
  r->ping_cb = cb;
  r->ud = ud;
  start_next(d);
}

void mqproc__dash_depth(mqproc__dash_t *d, const char *queue, mqproc__dash_depth_cb cb, void *ud) {
  read_t *r;
  if (d->depth_waiting || d->queue == NULL || (r = queue_read(d, R_DEPTH)) == NULL)
    return;
  d->depth_waiting = 1;
  r->arg = strdup(queue);
  r->depth_cb = cb;
  r->ud = ud;
  start_next(d);
}

int mqproc__dash_new(mqproc__dash_t **out, mqproc__loop_t *loop, const mqproc__dash_cfg_t *cfg,
                     char *err) {
  mqproc__dash_t *d = calloc(1, sizeof(*d));
  int rc;
  *out = NULL;
  if (d == NULL || (d->database = strdup(cfg->database != NULL ? cfg->database : "")) == NULL ||
      (d->title = strdup(cfg->title != NULL ? cfg->title : "mqproc")) == NULL ||
      (cfg->queue != NULL && (d->queue = strdup(cfg->queue)) == NULL)) {
    mqproc__dash_free(d);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  d->tls = cfg->tls;
  d->metrics = cfg->metrics;
  if ((cfg->exchange != NULL && (d->exchange = strdup(cfg->exchange)) == NULL) ||
      (cfg->via != NULL && (d->via = strdup(cfg->via)) == NULL)) {
    mqproc__dash_free(d);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  if ((cfg->admin_token != NULL || cfg->read_token != NULL) &&
      (rc = mqproc__auth_new(&d->auth, cfg->admin_token, cfg->read_token, cfg->session_ttl_s,
                             err)) != MQPROC_OK) {
    mqproc__dash_free(d);
    return rc;
  }
  d->loop = loop;
  *out = d;
  return MQPROC_OK;
}

static void drop_queued(mqproc__dash_t *d) {
  while (d->head != NULL) {
    read_t *r = d->head;
    d->head = r->next;
    read_free(r);
  }
  d->tail = NULL;
}

void mqproc__dash_stop(mqproc__dash_t *d) {
  if (d == NULL)
    return;
  d->stopped = 1;
  drop_queued(d);
}

/* Called after the loop stopped (its work threads joined, their after() not run): the
 * read that ran and those still queued are dropped. */
void mqproc__dash_free(mqproc__dash_t *d) {
  if (d == NULL)
    return;
  drop_queued(d);
  if (d->running != NULL)
    read_free(d->running);
  mqproc__odb_close(d->db);
  mqproc__qclient_close(d->amqp);
  free(d->database);
  free(d->queue);
  free(d->title);
  free(d->exchange);
  free(d->via);
  mqproc__auth_free(d->auth);
  free(d);
}
