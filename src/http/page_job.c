/* One job's page (page.h): what a person looks for first (its state, its error, its tries,
 * its times, the end of its log in a box that opens at its end), then the tries; the
 * request and the job row's every column folded (<details>). No script: the log box is
 * scrolled to its end by CSS (page.c's .log). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/page_int.h"

#define esc mqproc__page_esc
#define str mqproc__page_str

static const mqproc__page_col_t TRY_COLS[] = {
    {"try", "try", C_NUM, NULL},           {"attempt", "attempt", C_NUM, NULL},
    {"worker", "worker_id", C_TEXT, NULL}, {"started", "started_at", C_WHEN, NULL},
    {"ended", "ended_at", C_WHEN, NULL},   {"ms", "duration_ms", C_NUM, NULL},
    {"exit", "exit_code", C_NUM, NULL},    {"signal", "term_signal", C_NUM, NULL},
    {"error", "error", C_ERR, NULL},       {NULL, NULL, C_TEXT, NULL}};

static void fact_open(FILE *f, const char *name) {
  fprintf(f, "<div><dt>%s</dt><dd>", name);
}

static void fact_text(FILE *f, const char *name, const char *text) {
  fact_open(f, name);
  fputs("<span title=\"", f);
  esc(f, text != NULL ? text : "-");
  fputs("\">", f);
  esc(f, text != NULL ? text : "-");
  fputs("</span></dd></div>", f);
}

static void fact_when(FILE *f, const char *name, const char *iso, int64_t now) {
  fact_open(f, name);
  mqproc__page_when(f, iso, now);
  fputs("</dd></div>", f);
}

/* How long it ran: the successful try's time, else from its start to its end (or to now
 * while it runs). */
static void took(FILE *f, const json_t *job, int64_t now) {
  const json_t *ms = json_object_get(job, "exec_time_ms");
  const char *st = str(job, "state");
  int64_t a, b;
  fact_open(f, st != NULL && !strcmp(st, "RUNNING") ? "running for" : "took");
  if (json_is_number(ms))
    mqproc__page_duration(f, json_number_value(ms));
  else if (mqproc__page_parse_time(str(job, "start_time"), &a) &&
           (mqproc__page_parse_time(str(job, "end_time"), &b) ||
            (st != NULL && !strcmp(st, "RUNNING") && (b = now) > 0)) &&
           b >= a)
    mqproc__page_duration(f, (double)(b - a));
  else
    fputs("-", f);
  fputs("</dd></div>", f);
}

/* State, tries, times, processor and worker: a grid of short facts. */
static void facts(FILE *f, const json_t *job, int64_t now) {
  /* "tries" is the list of tries here (mqproc__ops_job() puts it in the column's place) */
  const json_t *t = json_object_get(job, "tries");
  long long tries = json_is_array(t) ? (long long)json_array_size(t) : json_integer_value(t);
  long long attempt = json_integer_value(json_object_get(job, "attempt"));
  long long requeues = json_integer_value(json_object_get(job, "requeues"));
  fputs("<dl class=\"facts\" id=\"facts\">", f);
  fact_open(f, "state");
  mqproc__page_badge(f, str(job, "state"));
  if (json_is_true(json_object_get(job, "cancel_requested")))
    fputs(" <span class=\"muted\">cancel asked</span>", f);
  fputs("</dd></div>", f);
  fact_open(f, "tries");
  fprintf(f, "%lld <span class=\"muted\">(attempt %lld", tries, attempt);
  if (requeues > 0)
    fprintf(f, ", %lld requeue%s", requeues, requeues == 1 ? "" : "s");
  fputs(")</span></dd></div>", f);
  fact_when(f, "queued", str(job, "queued_at"), now);
  fact_when(f, "started", str(job, "start_time"), now);
  fact_when(f, "ended", str(job, "end_time"), now);
  took(f, job, now);
  fact_text(f, "processor", str(job, "processor_name"));
  fact_text(f, "worker", str(job, "worker_id"));
  if (str(job, "callback_state") != NULL)
    fact_text(f, "callback", str(job, "callback_state"));
  fputs("</dl>", f);
}

/* The error (the last try's, or the callback's) in a box of its own, at the top. */
static void error_box(FILE *f, const json_t *job) {
  const char *e = str(job, "last_error"), *cb = str(job, "callback_error");
  const char *st = str(job, "state");
  if (e == NULL && cb == NULL)
    return;
  fputs("<div class=\"errbox\" id=\"error\">", f);
  if (e != NULL) {
    fputs(st != NULL && !strcmp(st, "SUCCESS") ? "<b>error of an earlier try</b>" : "<b>error</b>",
          f);
    fputs("<pre id=\"last-error\">", f);
    esc(f, e);
    fputs("</pre>", f);
  }
  if (cb != NULL) {
    fputs("<b>callback</b><pre id=\"callback-error\">", f);
    esc(f, cb);
    fputs("</pre>", f);
  }
  fputs("</div>", f);
}

static void actions(FILE *f, const json_t *job) {
  const char *st = str(job, "state");
  fputs("<p id=\"actions\">", f);
  if (st != NULL && (!strcmp(st, "QUEUED") || !strcmp(st, "RUNNING")))
    mqproc__page_button(f, "/jobs/", str(job, "job_id"), "cancel", "cancel");
  else if (json_object_get(job, "request") != NULL &&
           !json_is_null(json_object_get(job, "request")))
    mqproc__page_button(f, "/jobs/", str(job, "job_id"), "retry", "retry");
  fputs("</p>", f);
}

/* Every column of the job row as it is stored (times exact), folded. */
static void fields(FILE *f, const json_t *job) {
  const char *key;
  json_t *v;
  fputs("<details id=\"fields\"><summary>All fields of the job row</summary>"
        "<div class=\"scroll\"><table id=\"job\">",
        f);
  json_object_foreach((json_t *)job, key, v) {
    if (!strcmp(key, "tries") || !strcmp(key, "request"))
      continue;
    fputs("<tr><th>", f);
    esc(f, key);
    fputs(!strcmp(key, "last_error") ? "</th><td class=\"err\">" : "</th><td class=\"w\">", f);
    mqproc__page_val(f, v);
    fputs("</td></tr>", f);
  }
  fputs("</table></div></details>", f);
}

char *mqproc__page_job(const json_t *job, const char *log_tail, const mqproc__page_opts_t *o,
                       size_t *len) {
  char *buf = NULL, *s;
  FILE *f = mqproc__page_begin(&buf, len, o, 0);
  int64_t now = mqproc__page_now(o);
  if (f == NULL)
    return NULL;
  fputs("<h2 class=\"jh\">Job <span class=\"id\">", f);
  esc(f, str(job, "job_id"));
  fputs("</span> ", f);
  mqproc__page_badge(f, str(job, "state"));
  fputs("</h2>", f);
  if (o->admin == MQPROC__PAGE_SIGNED_IN)
    actions(f, job);
  facts(f, job, now);
  error_box(f, job);
  if (o->hide) { /* a token was given: requests and logs are for those who have one */
    fputs("<h3>Log</h3><p id=\"hidden\"><a href=\"/login\">sign in</a> to see the request and "
          "log</p>",
          f);
  } else {
    fputs("<h3>Log <span class=\"muted\">(its end)</span></h3><div class=\"log\" id=\"log-box\">"
          "<pre id=\"log\">",
          f);
    esc(f, log_tail != NULL ? log_tail
                            : "(no log here: a running first try keeps its output until it "
                              "ends, and a log file is on the host that ran the job)");
    fputs("</pre></div>", f);
  }
  fputs("<h3>Tries</h3>", f);
  mqproc__page_table(f, "tries", "try", TRY_COLS, json_object_get(job, "tries"), "none yet", now);
  if (!o->hide) {
    fputs("<details id=\"request-box\"><summary>Request</summary><pre id=\"request\">", f);
    s = json_dumps(json_object_get(job, "request"), JSON_INDENT(2) | JSON_ENCODE_ANY);
    esc(f, s != NULL ? s : "-");
    free(s);
    fputs("</pre></details>", f);
  }
  fields(f, job);
  return mqproc__page_end(f, &buf, 0);
}
