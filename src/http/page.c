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
    "solid #ddd;padding:.5em;overflow:auto;max-height:30em}.msg{background:#ffd;padding:.5em}"
    "svg rect{fill:#58c}form.i{display:inline}";

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
        "<a href=\"/metrics\">metrics</a></header><main>",
        f);
  if (o->message != NULL) {
    fputs("<p class=\"msg\" id=\"message\">", f);
    esc(f, o->message);
    fputs("</p>", f);
  }
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

static void processors(FILE *f, const json_t *procs) {
  size_t i;
  json_t *p;
  fputs("<section id=\"processors\"><h2>Processors</h2><table><tr><th>processor</th>"
        "<th>queue</th><th>consumers</th><th>queued</th><th>running</th><th>success 24 h</th>"
        "<th>failed 24 h</th><th>cancelled 24 h</th><th>per min (15 m)</th>"
        "<th>exec p50 / p95 ms</th><th>failure rate (60 m)</th><th>live workers</th>"
        "<th>last hour</th></tr>",
        f);
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
    fputs("</td></tr>", f);
  }
  if (json_array_size(procs) == 0)
    fputs("<tr><td colspan=\"13\">no processor has had a server in the last day</td></tr>", f);
  fputs("</table></section>", f);
}

static void workers(FILE *f, const json_t *ws) {
  size_t i, k;
  json_t *w, *id;
  fputs("<section id=\"workers\"><h2>Workers</h2><table><tr><th>worker</th><th>processor</th>"
        "<th>state</th><th>host</th><th>pid</th><th>jobs now</th><th>current jobs</th>"
        "<th>done</th><th>failed</th><th>restarts</th><th>last seen</th><th>version</th>"
        "<th>note</th></tr>",
        f);
  json_array_foreach(ws, i, w) {
    fputs("<tr class=\"worker\"><td>", f);
    esc(f, str(w, "worker_id"));
    fputs("</td><td>", f);
    esc(f, str(w, "processor_name"));
    fputs("</td><td>", f);
    badge(f, str(w, "state"));
    fputs("</td><td>", f);
    esc(f, str(w, "host"));
    fputs("</td>", f);
    num(f, json_object_get(w, "pid"));
    fprintf(f, "<td class=\"n\">%lld / %lld</td><td>",
            (long long)json_integer_value(json_object_get(w, "in_flight")),
            (long long)json_integer_value(json_object_get(w, "concurrency")));
    json_array_foreach(json_object_get(w, "current_jobs"), k, id) {
      if (k > 0)
        fputs(" ", f);
      job_link(f, json_string_value(id));
    }
    fputs("</td>", f);
    num(f, json_object_get(w, "jobs_done"));
    num(f, json_object_get(w, "jobs_failed"));
    num(f, json_object_get(w, "restarts"));
    fputs("<td>", f);
    val(f, json_object_get(w, "last_seen"));
    fputs("</td><td>", f);
    val(f, json_object_get(w, "version"));
    fputs("</td><td>", f);
    val(f, json_object_get(w, "note"));
    fputs("</td></tr>", f);
  }
  if (json_array_size(ws) == 0)
    fputs("<tr><td colspan=\"13\">no server seen in the last hour</td></tr>", f);
  fputs("</table></section>", f);
}

static void failures(FILE *f, const json_t *fs) {
  size_t i;
  json_t *j;
  fputs("<section id=\"failures\"><h2>Last failures</h2><table><tr><th>job</th>"
        "<th>processor</th><th>ended</th><th>attempt</th><th>tries</th><th>error</th></tr>",
        f);
  json_array_foreach(fs, i, j) {
    fputs("<tr class=\"failure\"><td>", f);
    job_link(f, str(j, "job_id"));
    fputs("</td><td>", f);
    esc(f, str(j, "processor_name"));
    fputs("</td><td>", f);
    val(f, json_object_get(j, "end_time"));
    fputs("</td>", f);
    num(f, json_object_get(j, "attempt"));
    num(f, json_object_get(j, "tries"));
    fputs("<td class=\"err\">", f);
    val(f, json_object_get(j, "last_error"));
    fputs("</td></tr>", f);
  }
  if (json_array_size(fs) == 0)
    fputs("<tr><td colspan=\"6\">none</td></tr>", f);
  fputs("</table></section>", f);
}

char *mqproc__page_overview(const json_t *ov, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 1);
  if (f == NULL)
    return NULL;
  processors(f, json_object_get(ov, "processors"));
  workers(f, json_object_get(ov, "workers"));
  failures(f, json_object_get(ov, "failures"));
  return end(f, &buf, 1);
}

/* ---- jobs --------------------------------------------------------------------------- */

static const char *const STATES[] = {"QUEUED", "RUNNING", "SUCCESS", "FAILED", "CANCELLED", NULL};

char *mqproc__page_jobs(const json_t *rows, const char *state, const char *processor,
                        const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = begin(&buf, len, o, 1);
  size_t i;
  json_t *j;
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
  fputs("\"> <button>show</button></form><table id=\"jobs\"><tr><th>job</th><th>processor</th>"
        "<th>state</th><th>attempt</th><th>tries</th><th>worker</th><th>queued</th>"
        "<th>ended</th><th>exec ms</th><th>last error</th></tr>",
        f);
  json_array_foreach(rows, i, j) {
    fputs("<tr class=\"job\"><td>", f);
    job_link(f, str(j, "job_id"));
    fputs("</td><td>", f);
    esc(f, str(j, "processor_name"));
    fputs("</td><td>", f);
    badge(f, str(j, "state"));
    fputs("</td>", f);
    num(f, json_object_get(j, "attempt"));
    num(f, json_object_get(j, "tries"));
    fputs("<td>", f);
    val(f, json_object_get(j, "worker_id"));
    fputs("</td><td>", f);
    val(f, json_object_get(j, "queued_at"));
    fputs("</td><td>", f);
    val(f, json_object_get(j, "end_time"));
    fputs("</td>", f);
    num(f, json_object_get(j, "exec_time_ms"));
    fputs("<td class=\"err\">", f);
    val(f, json_object_get(j, "last_error"));
    fputs("</td></tr>", f);
  }
  fputs("</table>", f);
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
  json_t *v, *t;
  size_t i;
  if (f == NULL)
    return NULL;
  fputs("<h2>Job ", f);
  esc(f, str(job, "job_id"));
  fputs(" ", f);
  badge(f, str(job, "state"));
  fputs("</h2>", f);
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
  fputs("</table><h2>Tries</h2><table id=\"tries\"><tr><th>try</th><th>attempt</th>"
        "<th>worker</th><th>started</th><th>ended</th><th>ms</th><th>exit</th><th>signal</th>"
        "<th>error</th></tr>",
        f);
  json_array_foreach(json_object_get(job, "tries"), i, t) {
    fputs("<tr class=\"try\">", f);
    num(f, json_object_get(t, "try"));
    num(f, json_object_get(t, "attempt"));
    fputs("<td>", f);
    val(f, json_object_get(t, "worker_id"));
    fputs("</td><td>", f);
    val(f, json_object_get(t, "started_at"));
    fputs("</td><td>", f);
    val(f, json_object_get(t, "ended_at"));
    fputs("</td>", f);
    num(f, json_object_get(t, "duration_ms"));
    num(f, json_object_get(t, "exit_code"));
    num(f, json_object_get(t, "term_signal"));
    fputs("<td class=\"err\">", f);
    val(f, json_object_get(t, "error"));
    fputs("</td></tr>", f);
  }
  fputs("</table><h2>Request</h2><pre id=\"request\">", f);
  s = json_dumps(json_object_get(job, "request"), JSON_INDENT(2) | JSON_ENCODE_ANY);
  esc(f, s != NULL ? s : "-");
  free(s);
  fputs("</pre><h2>Log (its end)</h2><pre id=\"log\">", f);
  esc(f, log_tail != NULL ? log_tail : "(no log here: it is on the host that ran the job)");
  fputs("</pre>", f);
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
