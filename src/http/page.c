/* The status page's HTML (page.h): the frame every page shares (head, CSS, the nav),
 * text, times and tables (page_int.h), the overview, the list of jobs, the sign-in and
 * error pages. A job's page is page_job.c, the hour's charts page_chart.c. Written with
 * fprintf into a memory stream; every text that came from a message, a processor or the
 * database goes through esc() (HTML) and, inside a link, through url() first. */
#include "http/page.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "http/page_int.h"

/* clang-format off */
/* Cells do not wrap (a table too wide scrolls sideways in its .scroll box) but errors and
 * reasons; the header's title gives way (an ellipsis) before its links do. */
static const char CSS[] =
    "*{box-sizing:border-box}"
    "body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#222;background:#f6f7f9}"
    "header{background:#223;color:#fff;padding:.5em 1em;display:flex;gap:1.3em;"
    "align-items:center;white-space:nowrap}"
    "header a{color:#fff;text-decoration:none}header a:hover{text-decoration:underline}"
    "header .t{font-weight:bold;overflow:hidden;text-overflow:ellipsis;min-width:5em}"
    "header .g{margin-left:auto;opacity:.8;font-size:12px}"
    "main{padding:0 1em 2em}h2{font-size:16px;margin:1.4em 0 .5em}"
    "h3{font-size:14px;margin:1.1em 0 .4em}"
    ".scroll{overflow-x:auto;max-width:100%}"
    "table{border-collapse:collapse;background:#fff;font-size:13px}"
    "th,td{border:1px solid #dde;padding:3px 7px;text-align:left;vertical-align:top;"
    "white-space:nowrap}"
    "th{background:#eef;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}"
    "td.w{white-space:normal}"
    ".b{display:inline-block;padding:0 7px;border-radius:8px;font-size:12px;background:#ddd}"
    ".running,.SUCCESS{background:#cfc}.paused,.draining,.QUEUED,.RUNNING{background:#ffd}"
    ".dead,.FAILED,.stopped{background:#fcc}.CANCELLED{background:#ddd}"
    ".err{color:#a00;overflow-wrap:anywhere}td.err{white-space:normal;min-width:16em;"
    "max-width:50em}"
    "pre{background:#fff;border:1px solid #dde;padding:.5em;overflow:auto;max-height:30em;"
    "margin:.3em 0}"
    "time{white-space:nowrap}form.i{display:inline;margin:0 .3em 0 0}"
    "header form.i button{font-size:12px}.muted{color:#667}"
    /* the hour's charts */
    ".charts{display:flex;flex-wrap:wrap;gap:.4em 1.5em;align-items:flex-start;"
    "background:#fff;border:1px solid #dde;padding:.4em .8em;margin:0 0 .8em}"
    ".charts h3{flex:1 0 100%;margin:.2em 0;white-space:nowrap;overflow:hidden;"
    "text-overflow:ellipsis}"
    "svg.c text{font:10px system-ui,sans-serif;fill:#556}svg.c .ttl{font-weight:600;fill:#222}"
    "svg.c .grid{stroke:#e4e6ea}svg.c .axis{stroke:#99a}"
    "svg.c .fin{fill:#4a7fc1}svg.c .fail{fill:#d0453f}svg.c .wait{fill:#8a63b8}"
    /* one job */
    ".jh{display:flex;align-items:center;gap:.6em;flex-wrap:wrap}"
    ".jh .id{font-family:ui-monospace,monospace;overflow-wrap:anywhere}"
    ".facts{display:grid;grid-template-columns:repeat(auto-fill,minmax(12em,1fr));"
    "gap:.4em 1.2em;margin:.5em 0;padding:.5em .8em;background:#fff;border:1px solid #dde}"
    ".facts div{min-width:0}.facts dt{font-size:11px;color:#667;text-transform:uppercase;"
    "letter-spacing:.03em}.facts dd{margin:0;white-space:nowrap;overflow:hidden;"
    "text-overflow:ellipsis}"
    ".errbox{border:1px solid #ebbcbc;border-left:4px solid #c33;background:#fff6f6;"
    "padding:.4em .8em;margin:.6em 0}.errbox b{color:#a00}"
    ".errbox pre{margin:.2em 0 0;white-space:pre-wrap;overflow-wrap:anywhere;max-height:9em;"
    "color:#a00;background:none;border:0;padding:0}"
    /* column-reverse: the box opens scrolled to its end, the log's last line, without a
     * script (the page's CSP allows none to be needed) */
    ".log{display:flex;flex-direction:column-reverse;overflow:auto;max-height:45vh;"
    "background:#1d1f23;border-radius:4px}"
    ".log pre{margin:0;padding:.5em .8em;background:none;border:0;color:#e2e2e2;"
    "white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;max-height:none;"
    "overflow:visible}"
    "details{margin:.8em 0}summary{cursor:pointer;font-weight:600}";

static const char SCRIPT[] =
    "setInterval(function(){fetch(location.href,{cache:'no-store'}).then(function(r){"
    "return r.ok?r.text():null}).then(function(t){if(!t)return;var d=new DOMParser()"
    ".parseFromString(t,'text/html'),m=d.querySelector('main');if(m)document."
    "querySelector('main').replaceWith(m)}).catch(function(){})},5000);";
/* clang-format on */

/* ---- text --------------------------------------------------------------------------- */

void mqproc__page_esc(FILE *f, const char *s) {
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

void mqproc__page_url(FILE *f, const char *s) {
  for (; s != NULL && *s != '\0'; s++) {
    unsigned char c = (unsigned char)*s;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        strchr("-_.~", c) != NULL)
      fputc(c, f);
    else
      fprintf(f, "%%%02X", c);
  }
}

#define esc mqproc__page_esc
#define url mqproc__page_url
#define str mqproc__page_str

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

const char *mqproc__page_str(const json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

void mqproc__page_val(FILE *f, const json_t *v) {
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

void mqproc__page_job_link(FILE *f, const char *id) {
  fputs("<a href=\"/jobs/", f);
  url(f, id);
  fputs("\">", f);
  esc(f, id);
  fputs("</a>", f);
}

void mqproc__page_badge(FILE *f, const char *state) {
  fputs("<span class=\"b ", f);
  esc(f, state);
  fputs("\">", f);
  esc(f, state);
  fputs("</span>", f);
}

void mqproc__page_button(FILE *f, const char *prefix, const char *arg, const char *action,
                         const char *label) {
  fprintf(f, "<form method=\"post\" class=\"i\" action=\"%s", prefix);
  url(f, arg);
  fprintf(f, "/%s\"><button id=\"%s\">%s</button></form>", action, action, label);
}

/* ---- times -------------------------------------------------------------------------- */

/* n digits at *p as a number (advancing *p); -1 when they are not digits. */
static int digits(const char **p, int n) {
  int v = 0;
  for (int i = 0; i < n; i++, (*p)++) {
    if (**p < '0' || **p > '9')
      return -1;
    v = v * 10 + (**p - '0');
  }
  return v;
}

int mqproc__page_parse_time(const char *iso, int64_t *ms) {
  const char *p = iso;
  struct tm tm = {0};
  int frac = 0, scale = 1000, off = 0, sign;
  if (p == NULL || (tm.tm_year = digits(&p, 4)) < 0 || *p++ != '-' ||
      (tm.tm_mon = digits(&p, 2)) < 1 || *p++ != '-' || (tm.tm_mday = digits(&p, 2)) < 1 ||
      (*p != 'T' && *p != ' ') || (++p, tm.tm_hour = digits(&p, 2)) < 0 || *p++ != ':' ||
      (tm.tm_min = digits(&p, 2)) < 0 || *p++ != ':' || (tm.tm_sec = digits(&p, 2)) < 0)
    return 0;
  if (*p == '.') /* milliseconds of any number of digits */
    for (p++; *p >= '0' && *p <= '9'; p++)
      if (scale > 1)
        frac += (*p - '0') * (scale /= 10);
  if (*p == '+' || *p == '-') {
    int h, m = 0;
    sign = *p++ == '-' ? -1 : 1;
    if ((h = digits(&p, 2)) < 0)
      return 0;
    if (*p == ':')
      p++;
    if (*p != '\0' && (m = digits(&p, 2)) < 0)
      return 0;
    off = sign * (h * 60 + m);
  } else if (*p == 'Z') {
    p++;
  }
  if (*p != '\0')
    return 0;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  *ms = ((int64_t)timegm(&tm) - (int64_t)off * 60) * 1000 + frac;
  return 1;
}

void mqproc__page_when(FILE *f, const char *iso, int64_t now_ms) {
  int64_t t, d, s;
  time_t secs;
  struct tm tm;
  const char *unit;
  if (iso == NULL) {
    fputs("-", f);
    return;
  }
  if (!mqproc__page_parse_time(iso, &t)) {
    esc(f, iso);
    return;
  }
  secs = (time_t)(t / 1000);
  gmtime_r(&secs, &tm);
  fputs("<time datetime=\"", f);
  esc(f, iso);
  fprintf(f, "\" title=\"%04d-%02d-%02d %02d:%02d:%02d.%03d UTC\">", tm.tm_year + 1900,
          tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(t % 1000));
  d = now_ms - t;
  s = (d < 0 ? -d : d) / 1000;
  if (s < 60)
    unit = "s";
  else if ((s /= 60) < 60)
    unit = "min";
  else if ((s /= 60) < 48)
    unit = "h";
  else
    s /= 24, unit = "d";
  if (d < -1000)
    fprintf(f, "in %lld %s", (long long)s, unit);
  else if (d < 1000)
    fputs("now", f);
  else
    fprintf(f, "%lld %s ago", (long long)s, unit);
  fputs("</time>", f);
}

void mqproc__page_duration(FILE *f, double ms) {
  long long s = (long long)(ms / 1000);
  if (ms < 1000)
    fprintf(f, "%.0f ms", ms);
  else if (ms < 60000 && (long long)ms % 1000 == 0)
    fprintf(f, "%.0f s", ms / 1000);
  else if (ms < 60000)
    fprintf(f, "%.1f s", ms / 1000);
  else if (s < 3600 && s % 60 == 0)
    fprintf(f, "%lld min", s / 60);
  else if (s < 3600)
    fprintf(f, "%lld min %lld s", s / 60, s % 60);
  else if (s / 60 % 60 == 0)
    fprintf(f, "%lld h", s / 3600);
  else
    fprintf(f, "%lld h %lld min", s / 3600, s / 60 % 60);
}

int64_t mqproc__page_now(const mqproc__page_opts_t *o) {
  return o->now_ms != 0 ? o->now_ms : mqproc__wall_ms();
}

/* ---- frame -------------------------------------------------------------------------- */

FILE *mqproc__page_begin(char **buf, size_t *len, const mqproc__page_opts_t *o, int refresh) {
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
  fprintf(f, "<style>%s</style></head><body><header><a class=\"t\" href=\"/\" title=\"", CSS);
  esc(f, o->title);
  fputs("\">", f);
  esc(f, o->title);
  /* every link here answers on this page's server: /metrics only where it is served */
  fputs("</a><a href=\"/jobs\">jobs</a><a href=\"/jobs?state=FAILED\">failed</a>"
        "<a href=\"/#dead-letters\">dead letters</a>",
        f);
  if (o->metrics)
    fputs("<a href=\"/metrics\">metrics</a>", f);
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

char *mqproc__page_end(FILE *f, char **buf, int refresh) {
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

/* ---- tables of rows ----------------------------------------------------------------- */

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

static void size(FILE *f, const json_t *v) {
  double n = (double)json_integer_value(v);
  fputs("<td class=\"n\">", f);
  if (!json_is_integer(v))
    fputs("-", f);
  else if (n < 1024)
    fprintf(f, "%.0f B", n);
  else if (n < 1024 * 1024)
    fprintf(f, "%.1f KiB", n / 1024);
  else
    fprintf(f, "%.1f MiB", n / 1024 / 1024);
  fputs("</td>", f);
}

static void cell(FILE *f, const json_t *row, const mqproc__page_col_t *c, int64_t now_ms) {
  const json_t *v = json_object_get(row, c->key), *id;
  size_t k;
  switch (c->kind) {
  case C_NUM:
    num(f, v);
    return;
  case C_SIZE:
    size(f, v);
    return;
  case C_OF:
    fprintf(f, "<td class=\"n\">%lld / %lld</td>", (long long)json_integer_value(v),
            (long long)json_integer_value(json_object_get(row, c->key2)));
    return;
  case C_STATE:
    fputs("<td>", f);
    mqproc__page_badge(f, json_string_value(v));
    break;
  case C_JOB:
    fputs("<td>", f);
    mqproc__page_job_link(f, json_string_value(v));
    break;
  case C_JOB_IF:
    fputs("<td>", f);
    if (json_is_true(json_object_get(row, c->key2)))
      mqproc__page_job_link(f, json_string_value(v));
    else if (json_is_string(v)) /* a message that never became a job: nothing to link */
      esc(f, json_string_value(v));
    else
      fputs("<span class=\"muted\">none</span>", f);
    break;
  case C_JOBS:
    fputs("<td class=\"w\">", f);
    json_array_foreach(v, k, id) {
      if (k > 0)
        fputs(" ", f);
      mqproc__page_job_link(f, json_string_value(id));
    }
    break;
  case C_ERR:
    fputs("<td class=\"err\">", f);
    mqproc__page_val(f, v);
    break;
  case C_WHEN:
    fputs("<td>", f);
    mqproc__page_when(f, json_string_value(v), now_ms);
    break;
  case C_WRAP:
    fputs("<td class=\"w\">", f);
    mqproc__page_val(f, v);
    break;
  case C_TEXT:
    fputs("<td>", f);
    mqproc__page_val(f, v);
    break;
  }
  fputs("</td>", f);
}

void mqproc__page_table(FILE *f, const char *id, const char *cls, const mqproc__page_col_t *cols,
                        const json_t *rows, const char *empty, int64_t now_ms) {
  size_t i, n = 0;
  const json_t *row;
  fprintf(f, "<div class=\"scroll\"><table id=\"%s\"><tr>", id);
  for (; cols[n].title != NULL; n++)
    fprintf(f, "<th>%s</th>", cols[n].title);
  fputs("</tr>", f);
  json_array_foreach(rows, i, row) {
    fprintf(f, "<tr class=\"%s\">", cls);
    for (size_t c = 0; c < n; c++)
      cell(f, row, &cols[c], now_ms);
    fputs("</tr>", f);
  }
  if (json_array_size(rows) == 0 && empty != NULL)
    fprintf(f, "<tr><td colspan=\"%zu\" class=\"w\">%s</td></tr>", n, empty);
  fputs("</table></div>", f);
}

/* ---- the overview ------------------------------------------------------------------- */

static const char *const PROC_HEADS[] = {"processor",
                                         "queue",
                                         "consumers",
                                         "queued",
                                         "running",
                                         "done 24 h",
                                         "failed 24 h",
                                         "cancelled 24 h",
                                         "per min (15 m)",
                                         "exec p50 / p95",
                                         "failures (60 m)",
                                         "live workers",
                                         NULL};

static void processor_row(FILE *f, const json_t *p, int admin) {
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
  if (json_is_number(json_object_get(e, "p50"))) {
    mqproc__page_duration(f, json_number_value(json_object_get(e, "p50")));
    fputs(" / ", f);
    mqproc__page_duration(f, json_number_value(json_object_get(e, "p95")));
  } else {
    fputs("-", f);
  }
  fprintf(f, "</td><td class=\"n\">%.1f %%</td>",
          100 * json_number_value(json_object_get(p, "failure_rate_60m")));
  num(f, json_object_get(p, "live_workers"));
  if (admin == MQPROC__PAGE_SIGNED_IN) {
    fputs("<td>", f);
    mqproc__page_button(f, "/processors/", str(p, "processor"), "pause", "pause");
    mqproc__page_button(f, "/processors/", str(p, "processor"), "resume", "resume");
    fputs("</td>", f);
  }
  fputs("</tr>", f);
}

static void processors(FILE *f, const json_t *procs, int admin) {
  size_t i, n = 0;
  json_t *p;
  fputs("<section id=\"processors\"><h2>Processors</h2><div class=\"scroll\"><table><tr>", f);
  for (; PROC_HEADS[n] != NULL; n++)
    fprintf(f, "<th>%s</th>", PROC_HEADS[n]);
  fputs(admin == MQPROC__PAGE_SIGNED_IN ? "<th>act</th></tr>" : "</tr>", f);
  json_array_foreach(procs, i, p) processor_row(f, p, admin);
  if (json_array_size(procs) == 0)
    fprintf(f, "<tr><td colspan=\"%zu\">no processor has had a server in the last day</td></tr>",
            n);
  fputs("</table></div></section>", f);
}

/* Per processor, the last hour: jobs finished, failed, and how long they had waited. */
static void hours(FILE *f, const json_t *procs) {
  size_t i;
  json_t *p;
  if (json_array_size(procs) == 0)
    return;
  fputs("<section id=\"hour\"><h2>The last hour</h2>", f);
  json_array_foreach(procs, i, p) {
    fputs("<div class=\"charts\"><h3>", f);
    esc(f, str(p, "processor"));
    fputs("</h3>", f);
    mqproc__page_hour(f, json_object_get(p, "hour"));
    fputs("</div>", f);
  }
  fputs("</section>", f);
}

static const mqproc__page_col_t WORKER_COLS[] = {{"worker", "worker_id", C_TEXT, NULL},
                                                 {"processor", "processor_name", C_TEXT, NULL},
                                                 {"state", "state", C_STATE, NULL},
                                                 {"host", "host", C_TEXT, NULL},
                                                 {"pid", "pid", C_NUM, NULL},
                                                 {"jobs now", "in_flight", C_OF, "concurrency"},
                                                 {"current jobs", "current_jobs", C_JOBS, NULL},
                                                 {"done", "jobs_done", C_NUM, NULL},
                                                 {"failed", "jobs_failed", C_NUM, NULL},
                                                 {"restarts", "restarts", C_NUM, NULL},
                                                 {"last seen", "last_seen", C_WHEN, NULL},
                                                 {"version", "version", C_WRAP, NULL},
                                                 {"note", "note", C_WRAP, NULL},
                                                 {NULL, NULL, C_TEXT, NULL}};

static const mqproc__page_col_t FAILURE_COLS[] = {
    {"job", "job_id", C_JOB, NULL},      {"processor", "processor_name", C_TEXT, NULL},
    {"ended", "end_time", C_WHEN, NULL}, {"attempt", "attempt", C_NUM, NULL},
    {"tries", "tries", C_NUM, NULL},     {"error", "last_error", C_ERR, NULL},
    {NULL, NULL, C_TEXT, NULL}};

static const mqproc__page_col_t DEAD_COLS[] = {{"id", "id", C_NUM, NULL},
                                               {"received", "received_at", C_WHEN, NULL},
                                               {"processor", "processor_name", C_TEXT, NULL},
                                               {"job", "job_id", C_JOB_IF, "has_job"},
                                               {"reason", "reason", C_ERR, NULL},
                                               {"size", "body_len", C_SIZE, NULL},
                                               {"worker", "worker_id", C_TEXT, NULL},
                                               {NULL, NULL, C_TEXT, NULL}};

/* The dead letters: the messages of failed jobs and those no server could read or take
 * (undecodable, invalid, for another processor), which are in no other list: how many, by
 * processor, and the newest. */
static void dead_letters(FILE *f, const json_t *dl, int64_t now_ms) {
  const json_t *by = json_object_get(dl, "by_processor"), *n;
  const char *proc;
  long long total = json_integer_value(json_object_get(dl, "total"));
  int k = 0;
  fputs("<section id=\"dead-letters\"><h2>Dead letters</h2>", f);
  if (dl == NULL || json_is_null(dl)) {
    fputs("<p class=\"err\">the dead letters cannot be read now</p></section>", f);
    return;
  }
  fprintf(f, "<p id=\"dead-count\">%s%lld dead letter%s",
          json_is_true(json_object_get(dl, "more")) ? "more than " : "", total,
          total == 1 ? "" : "s");
  json_object_foreach((json_t *)by, proc, n) {
    fputs(k++ == 0 ? ": " : ", ", f);
    esc(f, proc);
    fprintf(f, " %lld", (long long)json_integer_value(n));
  }
  fputs(" <span class=\"muted\">(failed jobs' messages, and messages no server could read or "
        "take; newest first; <code>mqproc dead-letters show ID</code> has the message)</span></p>",
        f);
  if (total > 0)
    mqproc__page_table(f, "dead-table", "dl", DEAD_COLS, json_object_get(dl, "rows"), NULL, now_ms);
  fputs("</section>", f);
}

char *mqproc__page_overview(const json_t *ov, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = mqproc__page_begin(&buf, len, o, 1);
  int64_t now = mqproc__page_now(o);
  if (f == NULL)
    return NULL;
  processors(f, json_object_get(ov, "processors"), o->admin);
  fputs("<section id=\"workers\"><h2>Workers</h2>", f);
  mqproc__page_table(f, "worker-table", "worker", WORKER_COLS, json_object_get(ov, "workers"),
                     "no server seen in the last hour", now);
  fputs("</section><section id=\"failures\"><h2>Last failures</h2>", f);
  mqproc__page_table(f, "failure-table", "failure", FAILURE_COLS, json_object_get(ov, "failures"),
                     "none", now);
  fputs("</section>", f);
  dead_letters(f, json_object_get(ov, "dead_letters"), now);
  hours(f, json_object_get(ov, "processors"));
  return mqproc__page_end(f, &buf, 1);
}

/* ---- jobs --------------------------------------------------------------------------- */

static const char *const STATES[] = {"QUEUED", "RUNNING", "SUCCESS", "FAILED", "CANCELLED", NULL};

static const mqproc__page_col_t JOB_COLS[] = {{"job", "job_id", C_JOB, NULL},
                                              {"processor", "processor_name", C_TEXT, NULL},
                                              {"state", "state", C_STATE, NULL},
                                              {"attempt", "attempt", C_NUM, NULL},
                                              {"tries", "tries", C_NUM, NULL},
                                              {"worker", "worker_id", C_TEXT, NULL},
                                              {"queued", "queued_at", C_WHEN, NULL},
                                              {"ended", "end_time", C_WHEN, NULL},
                                              {"exec ms", "exec_time_ms", C_NUM, NULL},
                                              {"last error", "last_error", C_ERR, NULL},
                                              {NULL, NULL, C_TEXT, NULL}};

char *mqproc__page_jobs(const json_t *rows, const char *state, const char *processor,
                        const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = mqproc__page_begin(&buf, len, o, 1);
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
  mqproc__page_table(f, "jobs", "job", JOB_COLS, rows, "no such jobs", mqproc__page_now(o));
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
  return mqproc__page_end(f, &buf, 1);
}

/* ---- sign-in and errors ------------------------------------------------------------- */

char *mqproc__page_login(const char *problem, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = mqproc__page_begin(&buf, len, o, 0);
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
        "autocomplete=\"off\" required autofocus> <button>sign in</button></form>",
        f);
  return mqproc__page_end(f, &buf, 0);
}

char *mqproc__page_error(const char *what, const mqproc__page_opts_t *o, size_t *len) {
  char *buf = NULL;
  FILE *f = mqproc__page_begin(&buf, len, o, 0);
  if (f == NULL)
    return NULL;
  fputs("<h2>Not available</h2><p class=\"err\" id=\"error\">", f);
  esc(f, what);
  fputs("</p><p><a href=\"/\">the overview</a> · <a href=\"/jobs\">the jobs</a></p>", f);
  return mqproc__page_end(f, &buf, 0);
}
