/* Pure parts of observability: bucket parsing and histogram counting, the exposition's
 * escaping, and the page's HTML escaping and URL encoding. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/page.h"
#include "base/metrics.h"

Test(metrics, buckets_parse_and_refuse_nonsense) {
  mqproc__metrics_t m;
  char err[256];
  cr_assert_eq(mqproc__metrics_init(&m, NULL, err), 0);
  cr_expect_eq(m.n_bounds, 16);
  cr_expect_eq(m.bounds[0], 0.1);
  cr_expect_eq(m.bounds[15], 14400);
  cr_expect_neq(mqproc__metrics_init(&m, "1,0.5", err), 0);
  cr_expect(strstr(err, "ascend") != NULL, "%s", err);
  cr_expect_neq(mqproc__metrics_init(&m, "1,x", err), 0);
  cr_expect_neq(mqproc__metrics_init(&m, "", err), 0);
  cr_expect_neq(mqproc__metrics_init(&m, "-1", err), 0);
}

Test(metrics, histogram_buckets_are_cumulative_with_inf) {
  mqproc__metrics_t m;
  mqproc__metrics_now_t now = {.processor = "p\"x\\y", .queue_messages = -1, .now_ms = 5000};
  char err[256], *text;
  size_t len;
  cr_assert_eq(mqproc__metrics_init(&m, "1,10", err), 0);
  mqproc__metrics_observe(&m, &m.run_time, 0.5);
  mqproc__metrics_observe(&m, &m.run_time, 1);
  mqproc__metrics_observe(&m, &m.run_time, 5);
  mqproc__metrics_observe(&m, &m.run_time, 100);
  mqproc__metrics_down(&m.db_down_since, 1000);
  text = mqproc__metrics_render(&m, &now, &len);
  cr_assert_not_null(text);
  cr_expect(strstr(text, "mqproc_job_run_seconds_bucket{processor=\"p\\\"x\\\\y\",le=\"1\"} 2\n") !=
                NULL,
            "%s", text);
  cr_expect(strstr(text, ",le=\"10\"} 3\n") != NULL);
  cr_expect(strstr(text, ",le=\"+Inf\"} 4\n") != NULL);
  cr_expect(strstr(text, "mqproc_job_run_seconds_sum{processor=\"p\\\"x\\\\y\"} 106.5\n") != NULL);
  cr_expect(strstr(text, "peer=\"database\"} 4\n") != NULL, "an ongoing outage counts: %s", text);
  cr_expect(strstr(text, "mqproc_queue_messages") == NULL, "unknown depth: no series");
  cr_expect(strstr(text, "mqproc_broker_blocked{processor=\"p\\\"x\\\\y\"} 0\n") != NULL, "%s",
            text);
  free(text);
  now.broker_blocked = 1;
  text = mqproc__metrics_render(&m, &now, &len);
  cr_expect(strstr(text, "mqproc_broker_blocked{processor=\"p\\\"x\\\\y\"} 1\n") != NULL, "%s",
            text);
  free(text);
}

/* The exposition format: every sample belongs to the family whose # TYPE line came last
 * (histograms: NAME_bucket/_sum/_count), and no family is declared twice. */
Test(metrics, each_family_is_one_group) {
  mqproc__metrics_t m;
  mqproc__metrics_now_t now = {
      .processor = "p", .queue_messages = 3, .queue_consumers = 1, .now_ms = 5000};
  char err[256], *text, family[128] = "", seen[8192] = " ";
  size_t len;
  int n = 0;
  cr_assert_eq(mqproc__metrics_init(&m, "1,10", err), 0);
  text = mqproc__metrics_render(&m, &now, &len);
  cr_assert_not_null(text);
  for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
    char name[128];
    size_t k;
    if (sscanf(line, "# TYPE %127s", family) == 1) {
      char key[132];
      snprintf(key, sizeof(key), " %s ", family);
      cr_expect_null(strstr(seen, key), "%s declared twice", family);
      strncat(seen, key + 1, sizeof(seen) - strlen(seen) - 1);
      continue;
    }
    if (line[0] == '#')
      continue;
    k = strcspn(line, "{ ");
    cr_assert_lt(k, sizeof(name));
    memcpy(name, line, k);
    name[k] = '\0';
    n++;
    cr_expect(strcmp(name, family) == 0 || (strncmp(name, family, strlen(family)) == 0 &&
                                            (!strcmp(name + strlen(family), "_bucket") ||
                                             !strcmp(name + strlen(family), "_sum") ||
                                             !strcmp(name + strlen(family), "_count"))),
              "the sample '%s' is not in its family's group (under %s)", line, family);
  }
  cr_expect_gt(n, 20);
  free(text);
}

Test(page, every_user_text_is_escaped_and_links_encoded) {
  json_t *job = json_pack("{s:s, s:s, s:s, s:[{s:i, s:s}], s:{s:s}}", "job_id", "a<b>&\"'", "state",
                          "FAILED", "last_error", "<img src=x onerror=alert(1)>", "tries", "try", 1,
                          "error", "</td><script>", "request", "p", "<svg onload=x>");
  json_t *ov = json_pack("{s:[], s:[], s:[{s:s, s:s, s:s}]}", "processors", "workers", "failures",
                         "job_id", "j/../<x>", "processor_name", "<p>", "last_error", "<e>");
  mqproc__page_opts_t o = {.title = "<t>"};
  size_t len;
  char *html = mqproc__page_job(job, "log <line>", &o, &len);
  cr_assert_not_null(html);
  cr_expect(strstr(html, "a&lt;b&gt;&amp;&quot;&#39;") != NULL, "%s", html);
  cr_expect(strstr(html, "<img") == NULL && strstr(html, "<svg onload") == NULL &&
            strstr(html, "</td><script>") == NULL && strstr(html, "<t>") == NULL);
  cr_expect(strstr(html, "log &lt;line&gt;") != NULL);
  free(html);
  html = mqproc__page_overview(ov, &o, &len);
  cr_expect(strstr(html, "href=\"/jobs/j%2F..%2F%3Cx%3E\"") != NULL, "%s", html);
  cr_expect(strstr(html, "<p>") == NULL && strstr(html, "<e>") == NULL);
  free(html);
  json_decref(job);
  json_decref(ov);
}
