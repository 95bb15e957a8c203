/* The status page's HTML (page.h). Written with fprintf into a memory stream; every text
 * that came from a message, a processor or the database goes through esc() (HTML) and,
 * inside a link, through url() first. */
#include "http/page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clang-format off */
static const char CSS[] =
    "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}"
    "header{background:#223;color:#fff;padding:.5em 1em;display:flex;gap:1.5em;align-items:center}"
    "header a{color:#fff;text-decoration:none}header .t{font-weight:bold}"
    "header .g{margin-left:auto;opacity:.7;font-size:12px}"
    "main{padding:0 1em 2em}h2{font-size:16px;margin:1.4em 0 .4em}"
    "table{border-collapse:collapse;background:#fff;font-size:13px}"
    "th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}"
    "th{background:#eef}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    ".b{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;background:#ddd}"
    ".running,.SUCCESS{background:#cfc}.paused,.draining,.QUEUED,.RUNNING{background:#ffd}"
    ".dead,.FAILED,.stopped{background:#fcc}.CANCELLED{background:#ddd}"
    ".err{color:#a00;max-width:60em;overflow-wrap:anywhere}pre{background:#fff;border:1px "
    "solid #ddd;padding:.5em;overflow:auto;max-height:30em}"
    "svg rect{fill:#58c}form.i{display:inline;margin:0 .3em 0 0}"
    "header form.i button{font-size:12px}";

static const char SCRIPT[] =
    "setInterval(function(){fetch(location.href,{cache:'no-store'}).then(function(r){"
    "return r.ok?r.text():null}).then(function(t){if(!t)return;var d=new DOMParser()"
    ".parseFromString(t,'text/html'),m=d.querySelector('main');if(m)document."
    "querySelector('main').replaceWith(m)}).catch(function(){})},5000);";
/* clang-format on */

static void esc(FILE *f, const char *s) {
  for (; s != NULL && *s != '\0'; s++) {
    switch (*s) {
    case '&':
      fputs("&amp;", f);
      break;
    case '<':
      fputs("&lt;", f);
      break;
    case '>':
      fputs("&gt;", f);
      break;
    case '"':
      fputs("&quot;", f);
      break;
    case '\'':
      fputs("&#39;", f);
      break;
    default:
      fputc(*s, f);
    }
  }
}

/* A link argument: percent-encoded (then HTML-safe as it is). */
static void url(FILE *f, const char *s) {
  for (; s != NULL && *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        strchr("-_.~", c) != NULL)
      fputc(c, f);
    else
      fprintf(f, "%%%02X", c);
  }
}

char *mqproc__page_job_href(const char *id) {
  char *buf = NULL;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL)
    return NULL;
  fputs("/jobs/", f);
  url(f, id);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

static const char *str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

/* A value as text: strings as they are, null as "-", the rest as compact JSON. */
static void val(FILE *f, const json_t *v) {
  char *s;
  if (v == NULL || json_is_null(v)) {
    fputs("-", f);
    return;
  }
  if (json_is_string(v)) {
    esc(f, json_string_value(v));
    return;
  }
  s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
  esc(f, s);
  free(s);
}

static void job_link(FILE *f, const char *id) {
  fputs("<a href=\"/jobs/", f);
  url(f, id);
  fputs("\">", f);
  esc(f, id);
  fputs("</a>", f);
}

static void badge(FILE *f, const char *state) {
  fputs("<span class=\"b ", f);
  esc(f, state);
  fputs("\">", f);
  esc(f, state);
  fputs("</span>", f);
}

/* A button that POSTs to PREFIX ARG /ACTION (the admin token's actions). */
static void button(FILE *f, const char *prefix, const char *arg, const char *action,
                   const char *label) {
  fprintf(f, "<form method=\"post\" class=\"i\" action=\"%s", prefix);
  url(f, arg);
  fprintf(f, "/%s\"><button id=\"%s\">%s</button></form>", action, action, label);
}

static FILE *begin(char **buf, size_t *len, const mqproc__page_opts_t *o, int refresh) {
  FILE *f = open_memstream(buf, len);
  if (f == NULL)
    return NULL;
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>",
        f);
  esc(f, o->title);
  fputs("</title>", f);
  if (refresh)
    fputs("<noscript><meta http-equiv=\"refresh\" content=\"10\"></noscript>", f);
  fprintf(f, "<style>%s</style></head><body><header><a class=\"t\" href=\"/\">", CSS);
  esc(f, o->title);
  fputs("</a><a href=\"/jobs\">jobs</a><a href=\"/jobs?state=FAILED\">failed</a>"
        "<a href=\"/metrics\">metrics</a>",
        f);
  if (o->admin == MQPROC__PAGE_SIGN_IN)
    fprintf(f, "<a class=\"g\" href=\"/login\">sign in to %s</a>", o->acts ? "act" : "read");
  else if (o->admin == MQPROC__PAGE_SIGNED_IN || o->admin == MQPROC__PAGE_READER)
    fprintf(f,
            "<span class=\"g\">signed in%s</span><form method=\"post\" class=\"i\" "
            "action=\"/logout\"><button>sign out</button></form>",
            o->admin == MQPROC__PAGE_READER ? " to read" : "");
  fputs("</header><main>", f);
  return f;
}

static char *end(FILE *f, char **buf, int refresh) {
  fputs("</main>", f);
  if (refresh)
    fprintf(f, "<script>%s</script>", SCRIPT);
  fputs("</body></html>\n", f);
  if (fclose(f) != 0) {
    free(*buf);
    return NULL;
  }
  return *buf;
}

/* ---- the overview ------------------------------------------------------------------- */

static void chart(FILE *f, const json_t *per_minute) {
  long long max = 1, sum = 0;
  size_t i, n = json_array_size(per_minute);
  json_t *v;
  json_array_foreach(per_minute, i, v) {
    long long x = json_integer_value(v);
    max = x > max ? x : max;
    sum += x;
  }
  fprintf(f,
          "<svg width=\"180\" height=\"30\" viewBox=\"0 0 180 30\" role=\"img\" "
          "aria-label=\"jobs finished per minute, last hour: %lld in all, at most %lld\">"
          "<title>jobs finished per minute over the last hour (oldest left): %lld in all, at "
          "most %lld a minute</title>",
          sum, max, sum, max);
  for (i = 0; i < n; i++) {
    long long x = json_integer_value(json_array_get(per_minute, i));
    int h = x > 0 ? (int)(1 + 28 * x / max) : 0;
    if (h > 0)
      fprintf(f, "<rect x=\"%zu\" y=\"%d\" width=\"2\" height=\"%d\"/>", i * 3, 30 - h, h);
  }
  fputs("</svg>", f);
}

static void num(FILE *f, const json_t *v) {
  fputs("<td class=\"n\">", f);
  if (json_is_integer(v))
    fprintf(f, "%lld", (long long)json_integer_value(v));
  else if (json_is_real(v))
    fprintf(f, "%.1f", json_real_value(v));
  else
    fputs("-", f);
  fputs("</td>", f);
}

static void processors(FILE *f, const json_t *procs, int admin) {
  size_t i;
  json_t *p;
  fputs("<section id=\"processors\"><h2>Processors</h2><table><tr><th>processor</th>"
        "<th>queue</th><th>consumers</th><th>queued</th><th>running</th><th>success 24 h</th>"
        "<th>failed 24 h</th><th>cancelled 24 h</th><th>per min (15 m)</th>"
        "<th>exec p50 / p95 ms</th><th>failure rate (60 m)</th><th>live workers</th>"
        "<th>last hour</th>",
        f);
  fputs(admin == MQPROC__PAGE_SIGNED_IN ? "<th>act</th></tr>" : "</tr>", f);
  json_array_foreach(procs, i, p) {
    const json_t *j = json_object_get(p, "jobs"), *e = json_object_get(p, "exec_time_ms_60m");
    fputs("<tr class=\"processor\"><td><a href=\"/jobs?processor=", f);
    url(f, str(p, "processor"));
    fputs("\">", f);
    esc(f, str(p, "processor"));
    fputs("</a></td>", f);
    num(f, json_object_get(p, "queue_depth"));
    num(f, json_object_get(p, "consumers"));
    num(f, json_object_get(j, "QUEUED"));
    num(f, json_object_get(j, "RUNNING"));
    num(f, json_object_get(j, "SUCCESS_24h"));
    num(f, json_object_get(j, "FAILED_24h"));
    num(f, json_object_get(j, "CANCELLED_24h"));
    num(f, json_object_get(json_object_get(p, "finished_per_minute"), "15m"));
    fputs("<td class=\"n\">", f);
    if (json_is_number(json_object_get(e, "p50")))
      fprintf(f, "%.0f / %.0f", json_number_value(json_object_get(e, "p50")),
              json_number_value(json_object_get(e, "p95")));
    else
      fputs("-", f);
    fprintf(f, "</td><td class=\"n\">%.1f %%</td>",
            100 * json_number_value(json_object_get(p, "failure_rate_60m")));
    num(f, json_object_get(p, "live_workers"));
    fputs("<td>", f);
    chart(f, json_object_get(p, "per_minute"));
    fputs("</td>", f);
    if (admin == MQPROC__PAGE_SIGNED_IN) {
      fputs("<td>", f);
      button(f, "/processors/", str(p, "processor"), "pause", "pause");
      button(f, "/processors/", str(p, "processor"), "resume", "resume");
      fputs("</td>", f);
    }
    fputs("</tr>", f);
  }
  if (json_array_size(procs) == 0)
    fputs("<tr><td colspan=\"13\">no processor has had a server in the last day</td></tr>", f);
  fputs("</table></section>", f);
}

/* ---- tables of rows ----------------------------------------------------------------- */

typedef enum { C_TEXT, C_NUM, C_STATE, C_JOB, C_JOBS, C_ERR, C_OF } col_kind_t;

/* A column: its heading, the row's key, how it is written (C_OF: "key / key2"). */
typedef struct col {
  const char *title, *key;
  col_kind_t kind;
  const char *key2;
} col_t;

static void cell(FILE *f, const json_t *row, const col_t *c) {
  const json_t *v = json_object_get(row, c->key), *id;
  size_t k;
  switch (c->kind) {
  case C_NUM:
    num(f, v);
    return;
  case C_OF:
    fprintf(f, "<td class=\"n\">%lld / %lld</td>", (long long)json_integer_value(v),
            (long long)json_integer_value(json_object_get(row, c->key2)));
    return;
  case C_STATE:
    fputs("<td>", f);
    badge(f, json_string_value(v));
    break;
  case C_JOB:
    fputs("<td>", f);
    job_link(f, json_string_value(v));
    break;
  case C_JOBS:
    fputs("<td>", f);
    json_array_foreach(v, k, id) {
      if (k > 0)
        fputs(" ", f);
      job_link(f, json_string_value(id));
    }
    break;
  case C_ERR:
    fputs("<td class=\"err\">", f);
    val(f, v);
    break;
  case C_TEXT:
    fputs("<td>", f);
    val(f, v);
    break;
  }
  fputs("</td>", f);
}

/* <table id=ID> with a heading row and one row (class CLS) per element of rows. */
static void table(FILE *f, const char *id, const char *cls, const col_t *cols, const json_t *rows,
                  const char *empty) {
  size_t i, n = 0;
  const json_t *row;
  fprintf(f, "<table id=\"%s\"><tr>", id);
  for (; cols[n].title != NULL; n++)
    fprintf(f, "<th>%s</th>", cols[n].title);
  fputs("</tr>", f);
  json_array_foreach(rows, i, row) {
    fprintf(f, "<tr class=\"%s\">", cls);
    for (size_t c = 0; c < n; c++)
      cell(f, row, &cols[c]);
    fputs("</tr>", f);
  }
  if (json_array_size(rows) == 0 && empty != NULL)
    fprintf(f, "<tr><td colspan=\"%zu\">%s</td></tr>", n, empty);
  fputs("</table>", f);
}

static const col_t WORKER_COLS[] = {{"worker", "worker_id", C_TEXT, NULL},
                                    {"processor", "processor_name", C_TEXT, NULL},
                                    {"state", "state", C_STATE, NULL},
                                    {"host", "host", C_TEXT, NULL},
                                    {"pid", "pid", C_NUM, NULL},
                                    {"jobs now", "in_flight", C_OF, "concurrency"},
                                    {"current jobs", "current_jobs", C_JOBS, NULL},
                                    {"done", "jobs_done", C_NUM, NULL},
                                    {"failed", "jobs_failed", C_NUM, NULL},
                                    {"restarts", "restarts", C_NUM, NULL},
                                    {"last seen", "last_seen", C_TEXT, NULL},
                                    {"version", "version", C_TEXT, NULL},
                                    {"note", "note", C_TEXT, NULL},
                                    {NULL, NULL, C_TEXT, NULL}};

static const col_t FAILURE_COLS[] = {
    {"job", "job_id", C_JOB, NULL},      {"processor", "processor_name", C_TEXT, NULL},
    {"ended", "end_time", C_TEXT, NULL}, {"attempt", "attempt", C_NUM, NULL},
    {"tries", "tries", C_NUM, NULL},     {"error", "last_error", C_ERR, NULL},
    {NULL, NULL, C_TEXT, NULL}};

static const col_t JOB_COLS[] = {{"job", "job_id", C_JOB, NULL},
                                 {"processor", "processor_name", C_TEXT, NULL},
                                 {"state", "state", C_STATE, NULL},
                                 {"attempt", "attempt", C_NUM, NULL},
                                 {"tries", "tries", C_NUM, NULL},
                                 {"worker", "worker_id", C_TEXT, NULL},
                                 {"queued", "queued_at", C_TEXT, NULL},
                                 {"ended", "end_time", C_TEXT, NULL},
                                 {"exec ms", "exec_time_ms", C_NUM, NULL},
                                 {"last error", "last_error", C_ERR, NULL},
                                 {NULL, NULL, C_TEXT, NULL}};

static const col_t TRY_COLS[] = {
    {"try", "try", C_NUM, NULL},           {"attempt", "attempt", C_NUM, NULL},
    {"worker", "worker_id", C_TEXT, NULL}, {"started", "started_at", C_TEXT, NULL},
    {"ended", "ended_at", C_TEXT, NULL},   {"ms", "duration_ms", C_NUM, NULL},
    {"exit", "exit_code", C_NUM, NULL},    {"signal", "term_signal", C_NUM, NULL},
    {"error", "error", C_ERR, NULL},       {NULL, NULL, C_TEXT, NULL}};

char *mqproc__page_overview(const json_t *ov, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 1);
  if (f == NULL)
    return NULL;
  processors(f, json_object_get(ov, "processors"), o->admin);
  fputs("<section id=\"workers\"><h2>Workers</h2>", f);
  table(f, "worker-table", "worker", WORKER_COLS, json_object_get(ov, "workers"),
        "no server seen in the last hour");
  fputs("</section><section id=\"failures\"><h2>Last failures</h2>", f);
  table(f, "failure-table", "failure", FAILURE_COLS, json_object_get(ov, "failures"), "none");
  fputs("</section>", f);
  return end(f, &buf, 1);
}

/* ---- jobs --------------------------------------------------------------------------- */

static const char *const STATES[] = {"QUEUED", "RUNNING", "SUCCESS", "FAILED", "CANCELLED", NULL};

char *mqproc__page_jobs(const json_t *rows, const char *state, const char *processor,
                        const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 1);
  if (f == NULL)
    return NULL;
  fputs("<h2>Jobs</h2><form method=\"get\" action=\"/jobs\">state <select name=\"state\">"
        "<option value=\"\">any</option>",
        f);
  for (int k = 0; STATES[k] != NULL; k++)
    fprintf(f, "<option%s>%s</option>",
            state != NULL && strcmp(state, STATES[k]) == 0 ? " selected" : "", STATES[k]);
  fputs("</select> processor <input name=\"processor\" value=\"", f);
  esc(f, processor);
  fputs("\"> <button>show</button></form>", f);
  table(f, "jobs", "job", JOB_COLS, rows, "no such jobs");
  if (json_array_size(rows) == 50) {
    fputs("<p><a id=\"next\" href=\"/jobs?after=", f);
    url(f, str(json_array_get(rows, 49), "cursor"));
    if (state != NULL) {
      fputs("&amp;state=", f);
      url(f, state);
    }
    if (processor != NULL) {
      fputs("&amp;processor=", f);
      url(f, processor);
    }
    fputs("\">older jobs</a></p>", f);
  }
  return end(f, &buf, 1);
}

/* ---- one job ------------------------------------------------------------------------ */

char *mqproc__page_job(const json_t *job, const char *log_tail, const mqproc__page_opts_t *o,
                       size_t *len) {
  char *buf = NULL, *s;
  FILE *f = begin(&buf, len, o, 0);
  const char *key;
  json_t *v;
  if (f == NULL)
    return NULL;
  fputs("<h2>Job ", f);
  esc(f, str(job, "job_id"));
  fputs(" ", f);
  badge(f, str(job, "state"));
  fputs("</h2>", f);
  if (o->admin == MQPROC__PAGE_SIGNED_IN) {
    const char *st = str(job, "state");
    fputs("<p id=\"actions\">", f);
    if (st != NULL && (!strcmp(st, "QUEUED") || !strcmp(st, "RUNNING")))
      button(f, "/jobs/", str(job, "job_id"), "cancel", "cancel");
    else if (json_object_get(job, "request") != NULL &&
             !json_is_null(json_object_get(job, "request")))
      button(f, "/jobs/", str(job, "job_id"), "retry", "retry");
    fputs("</p>", f);
  }
  fputs("<table id=\"job\">", f);
  json_object_foreach((json_t *)job, key, v) {
    if (!strcmp(key, "tries") || !strcmp(key, "request"))
      continue;
    fputs("<tr><th>", f);
    esc(f, key);
    fputs("</th><td", f);
    fputs(!strcmp(key, "last_error") ? " class=\"err\">" : ">", f);
    val(f, v);
    fputs("</td></tr>", f);
  }
  fputs("</table><h2>Tries</h2>", f);
  table(f, "tries", "try", TRY_COLS, json_object_get(job, "tries"), NULL);
  if (o->hide) { /* a token was given: requests and logs are for those who have one */
    fputs("<h2>Request and log</h2><p id=\"hidden\"><a href=\"/login\">sign in</a> to see the "
          "request and log</p>",
          f);
    return end(f, &buf, 0);
  }
  fputs("<h2>Request</h2><pre id=\"request\">", f);
  s = json_dumps(json_object_get(job, "request"), JSON_INDENT(2) | JSON_ENCODE_ANY);
  esc(f, s != NULL ? s : "-");
  free(s);
  fputs("</pre><h2>Log (its end)</h2><pre id=\"log\">", f);
  esc(f, log_tail != NULL ? log_tail
                          : "(no log here: a running first try keeps its output until it ends, "
                            "and a log file is on the host that ran the job)");
  fputs("</pre>", f);
  return end(f, &buf, 0);
}

char *mqproc__page_login(const char *problem, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 0);
  if (f == NULL)
    return NULL;
  fprintf(f,
          "<h2>Sign in</h2><p>%sA job's request and log need a token: the admin token (the "
          "file given with <code>--http-admin-token</code>) or the read token "
          "(<code>--http-read-token</code>).</p>",
          o->acts ? "Retry, cancel, pause and resume need the admin token. " : "");
  if (problem != NULL) {
    fputs("<p class=\"err\" id=\"error\">", f);
    esc(f, problem);
    fputs("</p>", f);
  }
  fputs("<form method=\"post\" action=\"/login\"><input type=\"password\" name=\"token\" "
        "autocomplete=\"off\" required> <button>sign in</button></form>",
        f);
  return end(f, &buf, 0);
}

char *mqproc__page_error(const char *what, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 0);
  if (f == NULL)
    return NULL;
  fputs("<h2>Not available</h2><p class=\"err\" id=\"error\">", f);
  esc(f, what);
  fputs("</p>", f);
  return end(f, &buf, 0);
}
