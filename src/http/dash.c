/* The status page (dash.h): requests become reads queued for the reader thread; each read
 * runs there with the reader's own database and broker connections (blocking clients,
 * kept between reads), and its answer is rendered and sent from the loop. */
#include "http/dash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http/page.h"
#include "log.h"
#include "mqproc/mqproc.h"
#include "ops/ops.h"
#include "store_pg_int.h"
#include "util.h"

#define LOG_TAIL 16384
#define AMQP_RETRY_S 10

enum { R_OVERVIEW, R_JOBS, R_JOB, R_DEPTH };

typedef struct read {
  mqproc__dash_t *dash;
  int kind;
  mqproc__http_req_t *req; /* the page's request (NULL for depth and ping) */
  char *arg;               /* job id, or the queue */
  char *state, *processor, *after;
  json_t *result;
  char *log_tail;
  char err[512];
  long messages, consumers;
  mqproc__dash_depth_cb depth_cb;
  void *ud;
  struct read *next;
} read_t;

struct mqproc__dash {
  mqproc__loop_t *loop;
  char *database, *queue, *title;
  PGconn *pg;          /* the reader's: used by one read at a time */
  admin_amqp_t *amqp;  /* likewise */
  time_t amqp_failed;  /* when connecting last failed (retried after AMQP_RETRY_S) */
  read_t *head, *tail; /* waiting reads */
  int busy;            /* a read runs */
  int depth_waiting;   /* a depth read is queued or running */
};

/* ---- on the reader thread ----------------------------------------------------------- */

static int db(mqproc__dash_t *d, char *err) {
  const char *vals[MQPROC__PG_MAX_PARAMS];
  if (d->pg != NULL && PQstatus(d->pg) == CONNECTION_OK)
    return 1;
  PQfinish(d->pg);
  /* the store's settings (connect timeout, keepalives, tcp_user_timeout) and the URL's
   * own options (a search_path, say); the statement timeout is SET afterwards */
  mqproc__pg_conn_vals(d->database, vals);
  d->pg = PQconnectdbParams(mqproc__pg_conn_keys, vals, 1);
  if (PQstatus(d->pg) == CONNECTION_OK) { /* a page never waits long for a slow query */
    PQclear(PQexec(d->pg, "SET statement_timeout = 5000"));
    return 1;
  }
  snprintf(err, 512, "the database is not reachable: %s", PQerrorMessage(d->pg));
  PQfinish(d->pg);
  d->pg = NULL;
  return 0;
}

static admin_amqp_t *broker(mqproc__dash_t *d) {
  if (d->queue == NULL || d->amqp != NULL || time(NULL) - d->amqp_failed < AMQP_RETRY_S)
    return d->amqp;
  if ((d->amqp = mqproc__amqp_open(d->queue)) == NULL)
    d->amqp_failed = time(NULL);
  return d->amqp;
}

static char *tail_of(const char *path) {
  FILE *f = path != NULL ? fopen(path, "r") : NULL;
  char *buf;
  long size;
  size_t n;
  if (f == NULL)
    return NULL;
  fseek(f, 0, SEEK_END);
  size = ftell(f);
  fseek(f, size > LOG_TAIL ? size - LOG_TAIL : 0, SEEK_SET);
  if ((buf = malloc(LOG_TAIL + 1)) != NULL) {
    n = fread(buf, 1, LOG_TAIL, f);
    buf[n] = '\0';
  }
  fclose(f);
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
  json_t *procs = mqproc__ops_processors(d->pg, err), *out, *v, *stats;
  size_t i;
  if (procs == NULL)
    return NULL;
  out = json_pack("{s:[]}", "processors");
  json_array_foreach(procs, i, v) {
    stats = mqproc__ops_stats(d->pg, broker(d), json_string_value(v));
    json_object_set_new(stats, "per_minute",
                        mqproc__ops_per_minute(d->pg, json_string_value(v), err));
    json_array_append_new(json_object_get(out, "processors"), stats);
  }
  json_decref(procs);
  json_object_set_new(out, "workers", mqproc__ops_workers(d->pg, NULL, 0, err));
  json_object_set_new(out, "failures", mqproc__ops_failures(d->pg, 20, err));
  return out;
}

static void run_read(void *ud) {
  read_t *r = ud;
  mqproc__dash_t *d = r->dash;
  if (r->kind == R_DEPTH) {
    admin_amqp_t *a = broker(d);
    int rc = a != NULL ? mqproc__amqp_depth(a, r->arg, &r->messages, &r->consumers) : -2;
    if (rc == -2 && a != NULL) { /* the connection is gone: again next time */
      mqproc__amqp_close(a);
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
    r->result = mqproc__ops_jobs(d->pg, &f, r->err);
    break;
  }
  case R_JOB:
    if ((r->result = mqproc__ops_job(d->pg, r->arg, r->err)) != NULL)
      r->log_tail = tail_of(json_string_value(json_object_get(r->result, "log_path")));
    break;
  }
  if (r->result == NULL && PQstatus(d->pg) != CONNECTION_OK) {
    PQfinish(d->pg);
    d->pg = NULL;
  }
}

/* ---- on the loop -------------------------------------------------------------------- */

static void start_next(mqproc__dash_t *d);

static void read_free(read_t *r) {
  json_decref(r->result);
  free(r->arg);
  free(r->state);
  free(r->processor);
  free(r->after);
  free(r->log_tail);
  free(r);
}

static void answer(read_t *r) {
  mqproc__page_opts_t o = {.title = r->dash->title};
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
  d->busy = 0;
  if (r->kind == R_DEPTH) {
    d->depth_waiting = 0;
    r->depth_cb(r->ud, r->messages, r->consumers);
  } else {
    answer(r);
  }
  read_free(r);
  start_next(d);
}

static void start_next(mqproc__dash_t *d) {
  read_t *r = d->head;
  if (d->busy || r == NULL)
    return;
  d->head = r->next;
  if (d->head == NULL)
    d->tail = NULL;
  d->busy = 1;
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

static char *dup_or_null(const char *s) {
  return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

int mqproc__dash_handle(mqproc__dash_t *d, mqproc__http_req_t *req) {
  const char *path = mqproc__http_path(req);
  read_t *r;
  int kind;
  if (!strcmp(path, "/"))
    kind = R_OVERVIEW;
  else if (!strcmp(path, "/jobs"))
    kind = R_JOBS;
  else if (!strncmp(path, "/jobs/", 6) && path[6] != '\0')
    kind = R_JOB;
  else
    return 0;
  if (strcmp(mqproc__http_method(req), "GET") != 0 &&
      strcmp(mqproc__http_method(req), "HEAD") != 0) {
    mqproc__http_reply_text(req, 405, "text/plain; charset=utf-8", "only GET here\n");
    return 1;
  }
  if ((r = queue_read(d, kind)) == NULL) {
    mqproc__http_reply_text(req, 500, "text/plain; charset=utf-8", "out of memory\n");
    return 1;
  }
  r->req = req;
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
  *out = NULL;
  if (d == NULL || (d->database = strdup(cfg->database != NULL ? cfg->database : "")) == NULL ||
      (d->title = strdup(cfg->title != NULL ? cfg->title : "mqproc")) == NULL ||
      (cfg->queue != NULL && (d->queue = strdup(cfg->queue)) == NULL)) {
    mqproc__dash_free(d);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  d->loop = loop;
  *out = d;
  return MQPROC_OK;
}

/* Called after the loop stopped (its work threads joined): reads still queued are
 * dropped; their requests were answered by mqproc__http_stop(). */
void mqproc__dash_free(mqproc__dash_t *d) {
  if (d == NULL)
    return;
  while (d->head != NULL) {
    read_t *r = d->head;
    d->head = r->next;
    read_free(r);
  }
  PQfinish(d->pg);
  mqproc__amqp_close(d->amqp);
  free(d->database);
  free(d->queue);
  free(d->title);
  free(d);
}
