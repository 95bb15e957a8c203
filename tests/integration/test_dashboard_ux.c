/* The status page as a person meets it, in headless Chromium (tests/support/browser.h)
 * against the real servers (issue 32, items 1, 7 and 14): /login shows its form and
 * signing in reaches the buttons; every error page has a body and no link of the nav
 * leads to a 404 (a server's page and the dashboard's); a job's page shows its error and
 * the last line of its log without scrolling, the internals folded; the overview charts
 * the last hour with axes and scales and lists the dead letters; and the page's HTML
 * alone (no server): times, scales, escaping. Screenshots are kept
 * under the build's tests/tmp/, and in docs/img/ with MQPROC_DOCS_SCREENSHOTS=1. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "browser.h"
#include "harness.h"
#include "http/page.h"
#include "http/page_int.h"

#define TOKEN "0123456789abcdef-ux-token"
#define WIDTH 1280
#define HEIGHT 800

TestSuite(dashboard_ux, .fini = it_cleanup);

static char *token_file(void) {
  char *path = it_fmt("%s/ux-token", it_tmpdir());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f, "%s\n", TOKEN);
  fclose(f);
  cr_assert_eq(chmod(path, 0600), 0);
  return path;
}

static void submit(const char *proc, const char *id) {
  char *out;
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", "/m.xml", "-I", "IN",
                     "--job-id", id, NULL),
               0);
}

static int is_true(it_browser_t *b, const char *expr) {
  json_t *v = it_browser_eval(b, expr);
  int yes = json_is_true(v);
  json_decref(v);
  return yes;
}

/* A string the page computes (owned by the harness; "" for a non-string). */
static char *text_of(it_browser_t *b, const char *expr) {
  json_t *v = it_browser_eval(b, expr);
  char *s = it_fmt("%s", json_is_string(v) ? json_string_value(v) : "");
  json_decref(v);
  return s;
}

/* ---- item 1: sign-in, error pages, the nav ------------------------------------------ */

Test(dashboard_ux, login_shows_its_form_and_signing_in_in_chromium_reaches_the_buttons) {
  char *proc = it_name("login"), *body;
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  const char *extra[] = {"--http",         "127.0.0.1:0", "--http-admin-token",
                         token_file(),     "--retries",   "0",
                         "--max-requeues", "0",           NULL};
  const char *post[] = {"-X", "POST", NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  int port = it_http_port(srv);
  char *base = it_fmt("http://127.0.0.1:%d", port);
  it_browser_t *b;

  submit(proc, "login-bad-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'login-bad-1'", "FAILED"));
  /* the answers themselves: the form, and the 401 page of a POST without a session */
  cr_expect_eq(it_http_get(port, "/login", &body), 200);
  cr_expect(strstr(body, "<form method=\"post\" action=\"/login\">") != NULL, "GET /login: '%s'",
            body);
  cr_expect_eq(it_http_req(port, "/jobs/login-bad-1/retry", post, &body), 401);
  cr_expect(strstr(body, "sign in first") != NULL && strstr(body, "action=\"/login\"") != NULL,
            "the 401 page: '%s'", body);

  b = it_browser_open(WIDTH, HEIGHT);
  it_browser_goto(b, it_fmt("%s/login", base));
  cr_assert(is_true(b, "document.querySelector('form[action=\"/login\"] input[name=token]')"
                       " !== null"),
            "no sign-in form in Chromium: '%s'", text_of(b, "document.body.innerHTML"));
  cr_expect(!is_true(b, "document.querySelector('#pause') !== null"), "no buttons yet");
  cr_assert(is_true(b, "document.querySelector('input[name=token]').value = '" TOKEN "';"
                       "document.querySelector('form[action=\"/login\"] button').click(); true"));
  cr_assert(it_browser_until(b, "location.pathname === '/' &&"
                                " document.querySelector('button#pause') !== null"),
            "signing in does not reach the buttons: %s",
            text_of(b, "location.href + ' ' + document.body.innerHTML"));
  cr_expect(is_true(b, "document.body.textContent.indexOf('signed in') >= 0"));
  it_browser_goto(b, it_fmt("%s/jobs/login-bad-1", base));
  cr_expect(is_true(b, "document.querySelector('button#retry') !== null"),
            "the job's retry button: %s", text_of(b, "document.body.innerHTML"));
  it_browser_close(b);
  it_server_stop(srv);
}

/* The hrefs of a page's nav (its <header>), each once. */
static json_t *nav_links(const char *html) {
  const char *h = strstr(html, "<header"), *end = h != NULL ? strstr(h, "</header>") : NULL;
  json_t *out;
  cr_assert(h != NULL && end != NULL, "no nav: %s", html);
  out = json_array();
  for (const char *p = h; (p = strstr(p, "href=\"")) != NULL && p < end;) {
    const char *q = strchr(p + 6, '"');
    char *href = it_fmt("%.*s", (int)(q - p - 6), p + 6);
    size_t i;
    json_t *v;
    int seen = 0;
    json_array_foreach(out, i, v) seen |= !strcmp(json_string_value(v), href);
    if (!seen)
      json_array_append_new(out, json_string(href));
    p = q;
  }
  return out;
}

/* Every link of the nav of each page (path) answers 200 with a body. */
static void nav_answers(int port, const char *const *paths) {
  for (; *paths != NULL; paths++) {
    char *page, *body;
    json_t *links, *v;
    size_t i;
    cr_assert_eq(it_http_get(port, *paths, &page), 200, "%s: %s", *paths, page);
    links = nav_links(page);
    cr_expect_geq(json_array_size(links), 3, "%s", page);
    json_array_foreach(links, i, v) {
      /* the markup's &amp; is the link's & */
      char *href = it_fmt("%s", json_string_value(v)), *amp;
      while ((amp = strstr(href, "&amp;")) != NULL)
        memmove(amp + 1, amp + 5, strlen(amp + 5) + 1);
      cr_expect_eq(it_http_get(port, href, &body), 200, "the nav of %s links %s: %s", *paths, href,
                   body);
      cr_expect(body != NULL && body[0] != '\0', "%s has an empty body", href);
    }
    json_decref(links);
  }
}

Test(dashboard_ux, every_error_page_has_a_body_and_no_nav_link_leads_to_a_404) {
  char *proc = it_name("nav"), *body;
  const char *extra[] = {"--http", "127.0.0.1:0", "--http-admin-token", token_file(), NULL};
  const char *dash_args[] = {"dashboard",   "--database", it_db_url(),   "--queue",
                             it_amqp_url(), "--http",     "127.0.0.1:0", NULL};
  const char *pages[] = {"/", "/jobs", "/jobs/nav-ok-1", "/login", NULL};
  const char *dash_pages[] = {"/", "/jobs", "/jobs/nav-ok-1", NULL};
  struct {
    const char *path;
    const char *const *args;
    int status;
  } errors[] = {
      {"/nowhere", NULL, 404},
      {"/jobs/no-such-job", NULL, 404},
      {"/", (const char *const[]){"-X", "PUT", NULL}, 405},
      {"/jobs/nav-ok-1/retry", (const char *const[]){"-X", "POST", NULL}, 401},
      {"/jobs/nav-ok-1/nonsense",
       (const char *const[]){"-X", "POST", "-H", "Authorization: Bearer " TOKEN, NULL}, 404},
      {"/login", (const char *const[]){"--data-urlencode", "token=wrong-wrong-wrong", NULL}, 403},
      {"/jobs/%FF/retry",
       (const char *const[]){"-X", "POST", "-H", "Authorization: Bearer " TOKEN, NULL}, 400},
  };
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL), *dash;
  int port = it_http_port(srv);

  submit(proc, "nav-ok-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'nav-ok-1'", "SUCCESS"));
  for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
    int st = errors[i].args != NULL ? it_http_req(port, errors[i].path, errors[i].args, &body)
                                    : it_http_get(port, errors[i].path, &body);
    cr_expect_eq(st, errors[i].status, "%s: %d %s", errors[i].path, st, body);
    cr_expect(body != NULL && strlen(body) > 5, "%s answers %d with an empty body", errors[i].path,
              st);
  }
  nav_answers(port, pages);

  /* the dashboard serves no /metrics: its nav does not link one */
  dash = it_mqproc_spawn("dashboard", dash_args);
  port = it_http_port(dash);
  nav_answers(port, dash_pages);
  cr_expect_eq(it_http_get(port, "/nowhere", &body), 404);
  cr_expect(body != NULL && strlen(body) > 5, "the dashboard's 404 has a body");
  it_server_stop(dash);
  it_server_stop(srv);
}

/* ---- screenshots -------------------------------------------------------------------- */

/* Chromium's --screenshot of url at w x h into the run's tests/tmp/NAME.png and, with
 * MQPROC_DOCS_SCREENSHOTS=1, into docs/img/NAME.png of the source tree (what the docs
 * show); returns the first path. */
static char *screenshot(const char *url, const char *name, int w, int h) {
  char *shot = it_fmt("%s/../%s.png", it_tmpdir(), name), *data;
  /* Chromium's chatter (no D-Bus here, ...) goes to a file of the test's */
  const char *argv[] = {"/bin/sh",
                        "-c",
                        "exec \"$@\" 2>>\"$SHOT_LOG\"",
                        "sh",
                        "/usr/bin/chromium",
                        "--headless",
                        "--no-sandbox",
                        "--disable-gpu",
                        "--hide-scrollbars",
                        it_fmt("--user-data-dir=%s/chromium-shot-%s", it_tmpdir(), name),
                        it_fmt("--window-size=%d,%d", w, h),
                        it_fmt("--screenshot=%s", shot),
                        url,
                        NULL};
  const char *envp[] = {it_fmt("SHOT_LOG=%s/chromium-shot-%s.log", it_tmpdir(), name), NULL};
  const char *docs = getenv("MQPROC_DOCS_SCREENSHOTS");
  cr_expect_eq(it_run(argv, envp, NULL, NULL), 0, "chromium --screenshot %s", url);
  cr_expect_not_null(data = it_read_file(shot), "the screenshot is kept: %s", shot);
  if (docs != NULL && !strcmp(docs, "1")) {
    const char *cp[] = {"/bin/cp", shot, it_fmt("%s/docs/img/%s.png", MQPROC_SOURCE_DIR, name),
                        NULL};
    cr_expect_eq(it_run(cp, NULL, NULL, NULL), 0, "docs/img/%s.png", name);
  }
  return shot;
}

/* ---- item 14: a job's page ---------------------------------------------------------- */

/* A processor with a long log: 300 lines, the last one on stderr, then exit 3. */
static char *long_log_script(void) {
  char *path = it_fmt("%s/long-log.sh", it_tmpdir());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("#!/bin/sh\n"
        "i=1\n"
        "while [ $i -le 300 ]; do\n"
        "  echo \"page $i of 300: binarized, segmented, 42 regions, 17 lines recognized\"\n"
        "  i=$((i + 1))\n"
        "done\n"
        "echo \"LAST LINE of $MQPROC_JOB_ID: no text region on page 301\" >&2\n"
        "exit 3\n",
        f);
  fclose(f);
  cr_assert_eq(chmod(path, 0700), 0);
  return path;
}

/* Where the error and the log's last line are drawn, measured in the page: the error is
 * #error (the old page's: the job table's error cell), the log's box #log-box (the old
 * page's: the <pre> itself). */
static const char MEASURE[] =
    "(function () {"
    "  var err = document.querySelector('#error') || document.querySelector('#job td.err');"
    "  var box = document.querySelector('#log-box') || document.querySelector('#log');"
    "  var pre = document.querySelector('#log');"
    "  if (!err || !box || !pre || !pre.firstChild) return {missing: true};"
    "  var t = pre.firstChild, s = t.data, end = s.replace(/\\s+$/, '').length;"
    "  var start = s.lastIndexOf('\\n', end - 1) + 1, r = document.createRange();"
    "  r.setStart(t, start); r.setEnd(t, end);"
    "  var q = r.getBoundingClientRect(), b = box.getBoundingClientRect(),"
    "      e = err.getBoundingClientRect();"
    "  return {line: s.slice(start, end), error: err.textContent, height: innerHeight,"
    "          line_top: q.top, line_bottom: q.bottom, box_top: b.top, box_bottom: b.bottom,"
    "          error_top: e.top, error_bottom: e.bottom,"
    "          wide: document.documentElement.scrollWidth > innerWidth};"
    "})()";

static double num_of(const json_t *o, const char *k) {
  return json_number_value(json_object_get(o, k));
}

Test(dashboard_ux, a_job_page_shows_the_error_and_the_log_end_without_scrolling_in_chromium) {
  char *proc = it_name("job");
  const char *extra[] = {"--http", "127.0.0.1:0", "--retries", "0", "--max-requeues", "0", NULL};
  it_server_t *srv = it_server_start(proc, long_log_script(), extra, NULL);
  int port = it_http_port(srv);
  char *url = it_fmt("http://127.0.0.1:%d/jobs/ux-fail-1", port), *last;
  it_browser_t *b;
  json_t *m;

  submit(proc, "ux-fail-1");
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'ux-fail-1'", "FAILED"));
  b = it_browser_open(WIDTH, HEIGHT);
  it_browser_goto(b, url);
  m = it_browser_eval(b, MEASURE);
  cr_assert(!json_is_true(json_object_get(m, "missing")), "no error or log: %s",
            text_of(b, "document.body.innerHTML"));
  last = it_fmt("%s", json_string_value(json_object_get(m, "line")));
  cr_expect_str_eq(last, "LAST LINE of ux-fail-1: no text region on page 301", "the log's end");
  cr_expect(strstr(json_string_value(json_object_get(m, "error")), "status 3") != NULL, "%s",
            json_string_value(json_object_get(m, "error")));
  cr_expect(num_of(m, "error_top") >= 0 && num_of(m, "error_bottom") <= HEIGHT,
            "the error is not in view without scrolling: drawn at %.0f..%.0f of %d",
            num_of(m, "error_top"), num_of(m, "error_bottom"), HEIGHT);
  cr_expect(num_of(m, "line_top") >= num_of(m, "box_top") - 1 &&
                num_of(m, "line_bottom") <= num_of(m, "box_bottom") + 1,
            "the log's box does not show its last line (line %.0f..%.0f, box %.0f..%.0f)",
            num_of(m, "line_top"), num_of(m, "line_bottom"), num_of(m, "box_top"),
            num_of(m, "box_bottom"));
  cr_expect(num_of(m, "line_top") >= 0 && num_of(m, "line_bottom") <= HEIGHT,
            "the log's last line is not in view without scrolling: drawn at %.0f..%.0f of %d",
            num_of(m, "line_top"), num_of(m, "line_bottom"), HEIGHT);
  cr_expect(!json_is_true(json_object_get(m, "wide")), "the page is wider than the window");
  json_decref(m);

  /* the internals are folded; times are relative, the exact time on hover */
  cr_expect(is_true(b, "document.querySelector('details#fields') !== null &&"
                       " !document.querySelector('details#fields').open &&"
                       " document.querySelector('details#fields #job') !== null"),
            "the job row's columns are not folded");
  cr_expect(is_true(b, "document.querySelector('details#request-box #request') !== null"),
            "the request is not folded");
  cr_expect(is_true(b, "(function () { var t = document.querySelectorAll('#facts time');"
                       " return t.length >= 3 && Array.prototype.every.call(t, function (x) {"
                       " return /^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3} UTC$/"
                       ".test(x.title) && /( ago|^now)$/.test(x.textContent); }); })()"),
            "relative times with the exact time on hover: %s",
            text_of(b, "document.querySelector('#facts').innerHTML"));
  it_browser_close(b);
  screenshot(url, "job", WIDTH, HEIGHT);
  it_server_stop(srv);
}

/* ---- item 14 and 7: the overview ---------------------------------------------------- */

/* 150 jobs of proc that ended over the last hour (more of them lately), every 25th FAILED,
 * each having waited 2..58 s and run 30 s: what the charts draw. */
static void an_hour_of_jobs(const char *proc) {
  it_sql(it_q("INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, tries,"
              " created_time, queued_at, start_time, end_time, exec_time_ms, last_error)"
              " SELECT 'hour-' || g, $1, CASE WHEN g % 25 = 0 THEN 'FAILED' ELSE 'SUCCESS' END,"
              " 1, 1, e - interval '30 seconds' - w, e - interval '30 seconds' - w,"
              " e - interval '30 seconds', e, 30000,"
              " CASE WHEN g % 25 = 0 THEN 'page 3: no text region found' END"
              " FROM generate_series(1, 150) g,"
              " LATERAL (SELECT now() - (g * g / 7 + 5) * interval '1 second' AS e,"
              "  (g % 9 * 7 + 2) * interval '1 second' AS w) t",
              "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < 150),"
              " t AS (SELECT g, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
              "   - (g * g / 7 + 5) * 1000 AS e, (g % 9 * 7 + 2) * 1000 AS w FROM s)"
              " INSERT INTO mqproc_jobs (job_id, processor_name, state, attempt, tries,"
              " created_time, queued_at, start_time, end_time, exec_time_ms, last_error)"
              " SELECT 'hour-' || g, ?1, CASE WHEN g % 25 = 0 THEN 'FAILED' ELSE 'SUCCESS' END,"
              " 1, 1, e - 30000 - w, e - 30000 - w, e - 30000, e, 30000,"
              " CASE WHEN g % 25 = 0 THEN 'page 3: no text region found' END FROM t"),
         1, proc);
  cr_assert_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id LIKE 'hour-%'", 0), 150);
}

/* Whether every text of the elements sel matches is drawn on one line (nothing wraps). */
static char *wrapped(it_browser_t *b, const char *sel) {
  return text_of(b, it_fmt("(function () { var bad = [];"
                           " document.querySelectorAll('%s').forEach(function (el) {"
                           "  var r = document.createRange(); r.selectNodeContents(el);"
                           "  var tops = Array.prototype.filter.call(r.getClientRects(),"
                           "   function (q) { return q.width > 0; }).map(function (q) {"
                           "   return q.top; }).sort(function (x, y) { return x - y; });"
                           /* a line's boxes (a badge's padding) differ by a few pixels;
                            * lines by a line's height */
                           "  if (tops.length > 1 && tops[tops.length - 1] - tops[0] > 9)"
                           "   bad.push(el.textContent); });"
                           " return bad.join(' | '); })()",
                           sel));
}

Test(dashboard_ux, the_overview_charts_the_hour_with_axes_and_lists_the_dead_letters) {
  char *proc = it_name("hour"), *body, *url;
  const char *extra[] = {"--http", "127.0.0.1:0", "--worker-id", it_fmt("%s-w1", proc), NULL};
  it_server_t *srv = it_server_start(proc, it_proc("proc.sh"), extra, NULL);
  int port = it_http_port(srv);
  it_browser_t *b;

  an_hour_of_jobs(proc);
  /* two messages no server can take: not a message at all, and one that is invalid */
  it_publish(proc, "this is not a processing message");
  it_publish(proc, "{\"job_id\": \"<b>dl-2</b>\", \"processor_name\": \"someone-else\"}");
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_dead_letters", "2"));

  cr_assert_eq(it_http_get(port, "/", &body), 200);
  cr_expect(strstr(body, "<section id=\"dead-letters\">") != NULL, "%s", body);
  cr_expect(strstr(body, "<p id=\"dead-count\">2 dead letters") != NULL, "%s", body);
  cr_expect(strstr(body, "&lt;b&gt;dl-2&lt;/b&gt;") != NULL && strstr(body, "<b>dl-2") == NULL,
            "the job id as read, escaped: %s", body);
  cr_expect(strstr(body, "href=\"/jobs/%3Cb%3Edl-2") == NULL, "no job row: no link");

  url = it_fmt("http://127.0.0.1:%d/", port);
  b = it_browser_open(WIDTH, HEIGHT);
  it_browser_goto(b, url);
  cr_expect(is_true(b, "document.querySelectorAll('#hour svg.c').length === 3"), "three charts: %s",
            text_of(b, "document.querySelector('main').innerHTML"));
  /* axes and scales: y labels 0, the half and the top, x labels from -60 min to now */
  cr_expect_str_eq(
      text_of(b, "Array.prototype.map.call(document.querySelectorAll('#hour svg.c')[0]"
                 ".querySelectorAll('text.x'), function (t) { return t.textContent; }).join()"),
      "-60 min,-45 min,-30 min,-15 min,now");
  cr_expect(is_true(b, "Array.prototype.every.call(document.querySelectorAll('#hour svg.c'),"
                       " function (s) { return s.querySelectorAll('text.y').length >= 2 &&"
                       " s.querySelectorAll('line.axis').length >= 2 &&"
                       " s.querySelectorAll('rect').length >= 5; })"),
            "each chart has axes, a scale and bars: %s",
            text_of(b, "document.querySelector('#hour').innerHTML"));
  cr_expect(strstr(text_of(b, "document.querySelectorAll('#hour svg.c')[0]"
                              ".querySelector('title').textContent"),
                   "150 in all") != NULL,
            "throughput");
  cr_expect(strstr(text_of(b, "document.querySelectorAll('#hour svg.c')[1]"
                              ".querySelector('title').textContent"),
                   "6 in all") != NULL,
            "failures");
  cr_expect(strstr(text_of(b, "document.querySelectorAll('#hour svg.c')[2]"
                              ".querySelector('title').textContent"),
                   "at most") != NULL,
            "queue wait");
  /* headers and names on one line each */
  {
    char *th = wrapped(b, "th"),
         *names =
             wrapped(b, "#processors td:first-child, #worker-table td:nth-child(-n+2), .charts h3");
    cr_expect_str_empty(th, "headers wrap: %s", th);
    cr_expect_str_empty(names, "names wrap: %s", names);
  }
  cr_expect(is_true(b, "document.querySelectorAll('#dead-table tr.dl').length === 2"));
  cr_expect(is_true(b, "document.querySelectorAll('#worker-table time[title]').length === 1"),
            "the worker's last-seen time is relative, exact on hover");
  it_browser_close(b);
  screenshot(url, "overview", WIDTH, 1300);
  it_server_stop(srv);
}

/* ---- the HTML alone ----------------------------------------------------------------- */

/* A page's HTML for the checks below (owned by the harness). */
static char *kept(char *html) {
  char *out;
  cr_assert_not_null(html);
  out = it_fmt("%s", html);
  free(html);
  return out;
}

Test(dashboard_ux, times_read_both_stores_forms_and_tell_relative_with_the_exact_time) {
  int64_t ms;
  char *buf = NULL;
  size_t len;
  FILE *f;
  const int64_t t = 1795963874882; /* 2026-11-29T14:51:14.882Z */
  cr_assert(mqproc__page_parse_time("2026-11-29T14:51:14.882Z", &ms));
  cr_expect_eq(ms, t, "SQLite's and to_char's form");
  cr_assert(mqproc__page_parse_time("2026-11-29T15:51:14.882+01:00", &ms));
  cr_expect_eq(ms, t, "to_jsonb's form, an offset");
  cr_assert(mqproc__page_parse_time("2026-11-29T14:51:14.882123+00:00", &ms));
  cr_expect_eq(ms, t, "microseconds");
  cr_expect(!mqproc__page_parse_time("yesterday", &ms) &&
            !mqproc__page_parse_time("2026-11-29T14:51:14.882Zjunk", &ms));
  cr_assert_not_null(f = open_memstream(&buf, &len));
  mqproc__page_when(f, "2026-11-29T14:51:14.882Z", t + 3 * 60000 + 5000);
  fputs("|", f);
  mqproc__page_when(f, "2026-11-29T14:51:14.882Z", t - 20000);
  fputs("|", f);
  mqproc__page_when(f, "<not a time>", t);
  fputs("|", f);
  mqproc__page_when(f, NULL, t);
  fputs("|", f);
  mqproc__page_duration(f, 150000);
  fclose(f);
  cr_expect_str_eq(buf,
                   "<time datetime=\"2026-11-29T14:51:14.882Z\" title=\"2026-11-29 14:51:14.882 "
                   "UTC\">3 min ago</time>|<time datetime=\"2026-11-29T14:51:14.882Z\" "
                   "title=\"2026-11-29 14:51:14.882 UTC\">in 20 s</time>|&lt;not a time&gt;|-|"
                   "2 min 30 s");
  free(buf);
}

Test(dashboard_ux, the_html_escapes_dead_letters_and_scales_its_charts) {
  mqproc__page_opts_t o = {.title = "t", .now_ms = 1795963874882};
  json_t *hour = json_pack("{s:[], s:[], s:[]}", "finished", "failed", "wait_ms");
  json_t *ov, *job;
  size_t len;
  char *html;
  for (int i = 0; i < 60; i++) {
    json_array_append_new(json_object_get(hour, "finished"), json_integer(i == 59 ? 7 : 0));
    json_array_append_new(json_object_get(hour, "failed"), json_integer(0));
    json_array_append_new(json_object_get(hour, "wait_ms"),
                          i == 59 ? json_real(95000) : json_null());
  }
  ov = json_pack("{s:[{s:s, s:o}], s:[], s:[], s:{s:i, s:b, s:{s:i}, s:[{s:i, s:s, s:s, s:s, "
                 "s:b, s:s, s:i}]}}",
                 "processors", "processor", "<p>", "hour", hour, "workers", "failures",
                 "dead_letters", "total", 1, "more", 0, "by_processor", "<p>", 1, "rows", "id", 1,
                 "processor_name", "<p>", "job_id", "<j>", "reason", "<script>x</script>",
                 "has_job", 0, "received_at", "2026-11-29T14:50:14.882Z", "body_len", 2048);
  html = kept(mqproc__page_overview(ov, &o, &len));
  cr_expect(strstr(html, "<p>") == NULL && strstr(html, "<j>") == NULL &&
                strstr(html, "<script>x") == NULL,
            "%s", html);
  cr_expect(strstr(html, "&lt;script&gt;x&lt;/script&gt;") != NULL, "the reason, escaped");
  cr_expect(strstr(html, "href=\"/jobs/%3Cj%3E\"") == NULL, "no job row: not linked");
  cr_expect(strstr(html, ">1 min ago</time>") != NULL && strstr(html, "2.0 KiB") != NULL, "%s",
            html);
  cr_expect(strstr(html, "7 in all, at most 7 a minute") != NULL, "%s", html);
  /* the scale: 7 jobs round up to 10 (ticks 0, 5, 10); 95 s up to 2 min (0, 1 min, 2 min) */
  cr_expect(strstr(html, "class=\"y\">10</text>") != NULL &&
                strstr(html, "class=\"y\">5</text>") != NULL,
            "%s", html);
  cr_expect(strstr(html, "class=\"y\">2 min</text>") != NULL &&
                strstr(html, "class=\"y\">1 min</text>") != NULL,
            "%s", html);
  cr_expect(strstr(html, "this minute: 7 jobs") != NULL, "a bar's value on hover");
  cr_expect(strstr(html, ">none</text>") != NULL, "no failures: said so");
  cr_expect(strstr(html, "href=\"/metrics\"") == NULL, "no /metrics here: not linked");
  o.metrics = 1;
  html = kept(mqproc__page_overview(ov, &o, &len));
  cr_expect(strstr(html, "href=\"/metrics\"") != NULL, "served here: linked");
  /* a job: the error first, the log's box, the internals folded */
  job = json_pack("{s:s, s:s, s:s, s:[{s:i}], s:{s:s}}", "job_id", "j<1>", "state", "FAILED",
                  "last_error", "<b>boom</b>", "tries", "try", 1, "request", "k", "<v>");
  html = kept(mqproc__page_job(job, "one\n<two>\n", &o, &len));
  cr_expect(strstr(html, "<div class=\"errbox\" id=\"error\"><b>error</b><pre "
                         "id=\"last-error\">&lt;b&gt;boom&lt;/b&gt;</pre>") != NULL,
            "%s", html);
  cr_expect(strstr(html, "<pre id=\"log\">one\n&lt;two&gt;\n</pre>") != NULL, "%s", html);
  cr_expect(strstr(html, "<details id=\"fields\">") != NULL &&
                strstr(html, "<details id=\"request-box\">") != NULL,
            "%s", html);
  cr_expect(strstr(html, "<script") == NULL, "a job's page has no script");
  cr_expect(strstr(html, "<dt>tries</dt><dd>1 ") != NULL, "the tries counted: %s", html);
  json_decref(job);
  json_decref(ov);
}
