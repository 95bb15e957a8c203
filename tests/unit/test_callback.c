/* Unit tests for src/callback.c: mqproc__callback_post against the test HTTP listener. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "callback.h"
#include "http_listener.h"
#include "util.h"

static test_http_t *http;

static void setup(void) {
  cr_assert_eq(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
  http = test_http_start(200);
  cr_assert_not_null(http);
}

static void teardown(void) {
  test_http_stop(http);
  http = NULL;
  curl_global_cleanup();
}

TestSuite(callback, .init = setup, .fini = teardown, .timeout = 30);

static const mqproc__callback_opts_t fast = {.timeout_ms = 2000, .retries = 0, .backoff_ms = 10};

/* Posts body to path on the listener; returns the status, fills tries and err. */
static int post(const char *path, const char *body, const mqproc__callback_opts_t *opts, int *tries,
                char *err) {
  char *url = test_http_url(http, path);
  cr_assert_not_null(url);
  int rc = mqproc__callback_post(url, body, opts, tries, err);
  free(url);
  return rc;
}

static void expect_request(size_t i, const char *header, const char *want) {
  char *got = test_http_header(http, i, header);
  cr_expect_not_null(got, "request %zu has no %s", i, header);
  if (got != NULL)
    cr_expect_str_eq(got, want);
  free(got);
}

Test(callback, ok_200_delivers_body_and_headers) {
  const char *body = "{\"job_id\":\"j-1\",\"state\":\"SUCCESS\",\"text\":\"ä \\\"q\\\"\"}";
  char err[MQPROC_ERR_LEN] = "";
  int tries = -1;
  cr_assert_eq(post("/cb/result", body, &fast, &tries, err), MQPROC_OK, "%s", err);
  cr_expect_eq(tries, 1);
  cr_assert_eq(test_http_count(http), 1);
  char *method = test_http_method(http, 0);
  char *path = test_http_path(http, 0);
  char *got = test_http_body(http, 0);
  cr_expect_str_eq(method, "POST");
  cr_expect_str_eq(path, "/cb/result");
  cr_expect_str_eq(got, body);
  cr_expect_eq(test_http_body_len(http, 0), strlen(body));
  free(method);
  free(path);
  free(got);
  expect_request(0, "Content-Type", "application/json");
  expect_request(0, "user-agent", "mqproc/" MQPROC_VERSION);
}

Test(callback, large_body_arrives_whole) {
  size_t n = 300 * 1024;
  char *body = malloc(n + 1);
  cr_assert_not_null(body);
  body[0] = '"';
  for (size_t i = 1; i < n - 1; i++)
    body[i] = (char)('a' + i % 26);
  body[n - 1] = '"';
  body[n] = '\0';
  char err[MQPROC_ERR_LEN] = "";
  cr_assert_eq(post("/big", body, &fast, NULL, err), MQPROC_OK, "%s", err);
  char *got = test_http_body(http, 0);
  cr_expect_eq(test_http_body_len(http, 0), n);
  cr_expect(got != NULL && strcmp(got, body) == 0, "body differs");
  free(got);
  free(body);
}

Test(callback, any_2xx_is_success) {
  char err[MQPROC_ERR_LEN] = "";
  test_http_set_status(http, 204);
  cr_expect_eq(post("/cb", "{}", &fast, NULL, err), MQPROC_OK, "%s", err);
}

Test(callback, http_500_is_retried_then_fails) {
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 2, .backoff_ms = 5};
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  test_http_set_status(http, 500);
  cr_assert_eq(post("/cb", "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_eq(tries, 3);
  cr_expect_eq(test_http_count(http), 3);
  cr_expect(strstr(err, "HTTP 500") != NULL, "err: %s", err);
  cr_expect(strstr(err, "/cb") != NULL, "err: %s", err);
}

Test(callback, redirects_are_not_followed) {
  char err[MQPROC_ERR_LEN] = "";
  test_http_set_status(http, 302);
  cr_expect_eq(post("/cb", "{}", &fast, NULL, err), MQPROC_ECALLBACK);
  cr_expect(strstr(err, "HTTP 302") != NULL, "err: %s", err);
  cr_expect_eq(test_http_count(http), 1);
}

Test(callback, succeeds_after_two_503s) {
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 5, .backoff_ms = 5};
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  test_http_set_status_seq(http, 2, 503, 200);
  cr_assert_eq(post("/cb", "{\"n\":1}", &opts, &tries, err), MQPROC_OK, "%s", err);
  cr_expect_eq(tries, 3);
  cr_expect_eq(test_http_count(http), 3);
  for (size_t i = 0; i < 3; i++) {
    char *got = test_http_body(http, i);
    cr_expect_str_eq(got, "{\"n\":1}");
    free(got);
  }
}

Test(callback, backoff_doubles) {
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 3, .backoff_ms = 40};
  int64_t start = mqproc__now_ms();
  test_http_set_status(http, 500);
  cr_assert_eq(post("/cb", "{}", &opts, NULL, NULL), MQPROC_ECALLBACK);
  cr_expect_geq(mqproc__now_ms() - start, 40 + 80 + 160);
}

Test(callback, timeout_is_reported) {
  mqproc__callback_opts_t opts = {.timeout_ms = 200, .retries = 0, .backoff_ms = 0};
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  test_http_set_delay_ms(http, 10000);
  int64_t start = mqproc__now_ms();
  cr_assert_eq(post("/slow", "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_lt(mqproc__now_ms() - start, 5000);
  cr_expect_eq(tries, 1);
  cr_expect(strstr(err, "timeout after 200 ms") != NULL, "err: %s", err);
  cr_expect_eq(test_http_wait(http, 1, 2000), 1);
}

/* A loopback port that refuses connections: bound, never listening. */
static int refusing_port(int *fd) {
  struct sockaddr_in addr = {.sin_family = AF_INET};
  socklen_t len = sizeof(addr);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(*fd >= 0);
  cr_assert_eq(bind(*fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
  cr_assert_eq(getsockname(*fd, (struct sockaddr *)&addr, &len), 0);
  return ntohs(addr.sin_port);
}

Test(callback, connection_refused_is_retried_then_fails) {
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 1, .backoff_ms = 5};
  char url[64];
  char err[MQPROC_ERR_LEN] = "";
  int fd;
  int tries = 0;
  snprintf(url, sizeof(url), "http://127.0.0.1:%d/cb", refusing_port(&fd));
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  close(fd);
  cr_expect_eq(tries, 2);
  cr_expect(strstr(err, url) != NULL, "err: %s", err);
  cr_expect(strstr(err, "onnect") != NULL, "err: %s", err);
}

Test(callback, non_http_urls_are_refused_without_a_try) {
  static const char *const urls[] = {"ftp://127.0.0.1/cb", "file:///etc/passwd", "gopher://x/",
                                     "127.0.0.1/cb", "dict://u:pw@h/"};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(urls); i++) {
    char err[MQPROC_ERR_LEN] = "";
    int tries = -1;
    cr_expect_eq(mqproc__callback_post(urls[i], "{}", &fast, &tries, err), MQPROC_EINVAL, "%s",
                 urls[i]);
    cr_expect_eq(tries, 0);
    cr_expect(strstr(err, "only http and https") != NULL, "err: %s", err);
    cr_expect(strstr(err, "pw") == NULL, "err: %s", err);
  }
}

Test(callback, password_in_url_is_masked_in_err) {
  char url[128];
  char err[MQPROC_ERR_LEN] = "";
  snprintf(url, sizeof(url), "http://bot:t0psecret@127.0.0.1:%d/cb", test_http_port(http));
  test_http_set_status(http, 401);
  cr_assert_eq(mqproc__callback_post(url, "{}", &fast, NULL, err), MQPROC_ECALLBACK);
  cr_expect(strstr(err, "t0psecret") == NULL, "err: %s", err);
  cr_expect(strstr(err, "HTTP 401 from http://bot:***@127.0.0.1:") != NULL, "err: %s", err);
}

Test(callback, bad_arguments) {
  mqproc__callback_opts_t bad = {.timeout_ms = 0, .retries = 0, .backoff_ms = 0};
  char err[MQPROC_ERR_LEN] = "";
  cr_expect_eq(mqproc__callback_post(NULL, "{}", &fast, NULL, err), MQPROC_EINVAL);
  cr_expect_eq(post("/cb", NULL, &fast, NULL, err), MQPROC_EINVAL);
  cr_expect_eq(post("/cb", "{}", NULL, NULL, err), MQPROC_EINVAL);
  cr_expect_eq(post("/cb", "{}", &bad, NULL, NULL), MQPROC_EINVAL);
  cr_expect_eq(test_http_count(http), 0);
}
