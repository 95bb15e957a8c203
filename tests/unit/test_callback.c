/* Unit tests for src/net/callback.c: mqproc__callback_post against the test HTTP listener, its
 * address policy, and the CIDR lists it checks. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/callback.h"
#include "http_listener.h"
#include "base/util.h"

static test_http_t *http;

static void setup(void) {
  cr_assert_eq(mqproc__callback_init(), MQPROC_OK);
  http = test_http_start(200);
  cr_assert_not_null(http);
}

static void teardown(void) {
  test_http_stop(http);
  http = NULL;
  mqproc__callback_shutdown();
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

/* ---- Address policy ---------------------------------------------------------------------- */

/* A list parsed from one item (which may hold several comma-separated entries). */
static mqproc__cidr_list_t list_of(const char *item) {
  const char *items[] = {item, NULL};
  mqproc__cidr_list_t l = {0};
  char err[MQPROC_ERR_LEN] = "";
  cr_assert_eq(mqproc__cidr_list_parse(items, &l, err), MQPROC_OK, "%s: %s", item, err);
  return l;
}

/* The message a refused try leaves for url and addr. */
static void expect_denied(const char *err, const char *url, const char *addr) {
  char want[MQPROC_ERR_LEN];
  snprintf(want, sizeof(want),
           "callback to %s refused: address %s is denied (--callback-deny / built-in link-local "
           "and metadata ranges)",
           url, addr);
  cr_expect_str_eq(err, want);
}

Test(callback, denied_address_is_refused_before_connecting_and_not_retried) {
  mqproc__cidr_list_t deny = list_of("127.0.0.0/8");
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 3, .backoff_ms = 5, .deny = &deny};
  char *url = test_http_url(http, "/cb");
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_eq(tries, 1);
  expect_denied(err, url, "127.0.0.1");
  cr_expect_eq(test_http_wait(http, 1, 200), 0);
  free(url);
  mqproc__cidr_list_free(&deny);
}

Test(callback, allow_wins_over_deny) {
  mqproc__cidr_list_t allow = list_of("127.0.0.1");
  mqproc__cidr_list_t deny = list_of("127.0.0.0/8");
  mqproc__callback_opts_t opts = {
      .timeout_ms = 2000, .retries = 0, .backoff_ms = 5, .allow = &allow, .deny = &deny};
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  cr_expect_eq(post("/cb", "{}", &opts, &tries, err), MQPROC_OK, "%s", err);
  cr_expect_eq(tries, 1);
  cr_expect_eq(test_http_count(http), 1);
  mqproc__cidr_list_free(&allow);
  mqproc__cidr_list_free(&deny);
}

Test(callback, non_empty_allow_list_refuses_what_it_does_not_name) {
  mqproc__cidr_list_t allow = list_of("10.0.0.0/8");
  mqproc__callback_opts_t opts = {
      .timeout_ms = 2000, .retries = 2, .backoff_ms = 5, .allow = &allow};
  char *url = test_http_url(http, "/cb");
  char want[MQPROC_ERR_LEN];
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_eq(tries, 1);
  snprintf(want, sizeof(want),
           "callback to %s refused: address 127.0.0.1 is not in --callback-allow", url);
  cr_expect_str_eq(err, want);
  cr_expect_eq(test_http_wait(http, 1, 200), 0);
  free(url);
  mqproc__cidr_list_free(&allow);
}

Test(callback, empty_lists_permit_loopback) {
  mqproc__cidr_list_t empty = {0};
  mqproc__callback_opts_t opts = {
      .timeout_ms = 2000, .retries = 0, .backoff_ms = 5, .allow = &empty, .deny = &empty};
  char err[MQPROC_ERR_LEN] = "";
  cr_expect_eq(post("/cb", "{}", &opts, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_eq(test_http_count(http), 1);
}

/* The metadata service is refused by the built-in list: at once (no socket, so no connect
 * timeout) and without retries. */
Test(callback, metadata_service_is_refused_by_default_without_connecting) {
  mqproc__callback_opts_t opts = {.timeout_ms = 5000, .retries = 2, .backoff_ms = 1000};
  const char *url = "http://169.254.169.254/latest/meta-data/";
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  int64_t start = mqproc__now_ms();
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_lt(mqproc__now_ms() - start, 1000);
  cr_expect_eq(tries, 1);
  expect_denied(err, url, "169.254.169.254");
}

Test(callback, ipv6_metadata_service_is_refused_by_default) {
  mqproc__callback_opts_t opts = {.timeout_ms = 5000, .retries = 2, .backoff_ms = 1000};
  const char *url = "http://[fd00:ec2::254]/latest/meta-data/";
  char err[MQPROC_ERR_LEN] = "";
  int tries = 0;
  int fd = socket(AF_INET6, SOCK_DGRAM, 0); /* curl resolves IPv6 literals only then */
  if (fd < 0)
    cr_skip_test("no IPv6 sockets here");
  close(fd);
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, &tries, err), MQPROC_ECALLBACK);
  cr_expect_eq(tries, 1);
  expect_denied(err, url, "fd00:ec2::254");
}

Test(callback, password_is_masked_in_a_refusal) {
  mqproc__cidr_list_t deny = list_of("127.0.0.0/8");
  mqproc__callback_opts_t opts = {.timeout_ms = 2000, .retries = 0, .backoff_ms = 5, .deny = &deny};
  char url[128];
  char want[MQPROC_ERR_LEN];
  char err[MQPROC_ERR_LEN] = "";
  snprintf(url, sizeof(url), "http://bot:s3cret@127.0.0.1:%d/cb", test_http_port(http));
  cr_assert_eq(mqproc__callback_post(url, "{}", &opts, NULL, err), MQPROC_ECALLBACK);
  cr_expect(strstr(err, "s3cret") == NULL, "err: %s", err);
  snprintf(want, sizeof(want),
           "callback to http://bot:***@127.0.0.1:%d/cb refused: ", test_http_port(http));
  cr_expect(strncmp(err, want, strlen(want)) == 0, "err: %s", err);
  /* the same through the built-in list */
  err[0] = '\0';
  cr_assert_eq(mqproc__callback_post("http://u:s3cret@169.254.169.254/x", "{}", &fast, NULL, err),
               MQPROC_ECALLBACK);
  cr_expect(strstr(err, "s3cret") == NULL, "err: %s", err);
  cr_expect(strstr(err, "http://u:***@169.254.169.254/x refused") != NULL, "err: %s", err);
  mqproc__cidr_list_free(&deny);
}

/* ---- CIDR lists -------------------------------------------------------------------------- */

/* ip (IPv4 or IPv6 text) as a sockaddr; port 443, which matching ignores. */
static const struct sockaddr *sa_of(const char *ip, struct sockaddr_storage *ss) {
  struct sockaddr_in *in = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  memset(ss, 0, sizeof(*ss));
  if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(443);
  } else {
    cr_assert_eq(inet_pton(AF_INET6, ip, &in6->sin6_addr), 1, "%s", ip);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(443);
  }
  return (const struct sockaddr *)ss;
}

static void expect_match(const mqproc__cidr_list_t *l, const char *ip, int want) {
  struct sockaddr_storage ss;
  cr_expect_eq(mqproc__cidr_list_match(l, sa_of(ip, &ss)), want, "%s should %smatch", ip,
               want ? "" : "not ");
}

Test(cidr, parse_splits_commas_and_trims_whitespace) {
  const char *items[] = {" 10.0.0.0/8 ,192.168.1.5", "::1", "\tfe80::/10\n", NULL};
  mqproc__cidr_list_t l = {0};
  char err[MQPROC_ERR_LEN] = "";
  cr_assert_eq(mqproc__cidr_list_parse(items, &l, err), MQPROC_OK, "%s", err);
  cr_assert_eq(l.len, 4);
  cr_expect_eq(l.items[0].family, AF_INET);
  cr_expect_eq(l.items[0].prefix, 8);
  cr_expect_eq(l.items[1].prefix, 32);
  cr_expect_eq(l.items[2].family, AF_INET6);
  cr_expect_eq(l.items[2].prefix, 128);
  cr_expect_eq(l.items[3].prefix, 10);
  mqproc__cidr_list_free(&l);
  cr_expect_null(l.items);
  cr_expect_eq(l.len, 0);
  mqproc__cidr_list_free(NULL);
}

Test(cidr, no_items_is_the_empty_list) {
  const char *none[] = {NULL};
  mqproc__cidr_list_t l = {0};
  cr_expect_eq(mqproc__cidr_list_parse(NULL, &l, NULL), MQPROC_OK);
  cr_expect_eq(l.len, 0);
  cr_expect_eq(mqproc__cidr_list_parse(none, &l, NULL), MQPROC_OK);
  cr_expect_eq(l.len, 0);
  expect_match(&l, "127.0.0.1", 0);
  expect_match(NULL, "127.0.0.1", 0);
}

static void expect_parse_error(const char *item, const char *want) {
  const char *items[] = {"10.0.0.0/8", item, NULL};
  mqproc__cidr_list_t l = {0};
  char err[MQPROC_ERR_LEN] = "";
  cr_expect_eq(mqproc__cidr_list_parse(items, &l, err), MQPROC_ECONFIG, "%s", item);
  cr_expect_str_eq(err, want);
  cr_expect_null(l.items); /* the good first item was freed (LeakSanitizer checks) */
  cr_expect_eq(l.len, 0);
}

Test(cidr, parse_errors_name_the_bad_entry) {
  expect_parse_error("1.2.3.4/33", "'1.2.3.4/33' is not an IP address or CIDR range");
  expect_parse_error("fe80::/129", "'fe80::/129' is not an IP address or CIDR range");
  expect_parse_error("abc", "'abc' is not an IP address or CIDR range");
  expect_parse_error("::1, abc ", "'abc' is not an IP address or CIDR range");
  expect_parse_error("", "empty entry in '': expected an IP address or CIDR range");
  expect_parse_error("10.0.0.0/8,,::1",
                     "empty entry in '10.0.0.0/8,,::1': expected an IP address or CIDR range");
  static const char *const bad[] = {"10.0.0.0/",    "10.0.0.0/-1", "10.0.0.0/ 8", "10.0.0.0/8/8",
                                    "10.0.0.0/0x8", "1.2.3",       "/8",          "10.0.0.0/0008",
                                    "256.0.0.1",    "fe80:::1",    "[::1]",       "fe80::1%eth0"};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(bad); i++) {
    char want[MQPROC_ERR_LEN];
    snprintf(want, sizeof(want), "'%s' is not an IP address or CIDR range", bad[i]);
    expect_parse_error(bad[i], want);
  }
}

Test(cidr, ipv4_ranges) {
  mqproc__cidr_list_t l = list_of("172.16.0.0/12, 192.168.1.5, 10.1.2.3/8");
  expect_match(&l, "172.16.0.0", 1);
  expect_match(&l, "172.31.255.255", 1);
  expect_match(&l, "172.32.0.0", 0);
  expect_match(&l, "172.15.255.255", 0);
  expect_match(&l, "192.168.1.5", 1);
  expect_match(&l, "192.168.1.6", 0);
  expect_match(&l, "10.200.0.1", 1); /* host bits of 10.1.2.3/8 are ignored */
  expect_match(&l, "11.0.0.0", 0);
  expect_match(&l, "::ffff:172.20.0.1", 1);
  expect_match(&l, "::ffff:192.168.1.6", 0);
  expect_match(&l, "::172.20.0.1", 0); /* IPv4-compatible is not IPv4-mapped */
  expect_match(&l, "2001:db8::ac10:1", 0);
  mqproc__cidr_list_free(&l);
}

Test(cidr, ipv6_ranges) {
  mqproc__cidr_list_t l = list_of("fe80::/10,2001:db8::/32,::1");
  expect_match(&l, "fe80::1", 1);
  expect_match(&l, "febf:ffff::1", 1);
  expect_match(&l, "fec0::1", 0);
  expect_match(&l, "2001:db8:ffff::1", 1);
  expect_match(&l, "2001:db9::", 0);
  expect_match(&l, "::1", 1);
  expect_match(&l, "::2", 0);
  expect_match(&l, "127.0.0.1", 0); /* IPv4 sockaddrs never match IPv6 ranges */
  mqproc__cidr_list_free(&l);
}

Test(cidr, ipv4_mapped_addresses_and_entries) {
  mqproc__cidr_list_t all6 = list_of("::/0");
  mqproc__cidr_list_t mapped = list_of("::ffff:192.168.0.0/112");
  expect_match(&all6, "::ffff:10.0.0.1", 1); /* an IPv6 range containing it */
  expect_match(&all6, "10.0.0.1", 0);
  /* an IPv4-mapped entry is the IPv4 range 192.168.0.0/16 */
  cr_expect_eq(mapped.items[0].family, AF_INET);
  cr_expect_eq(mapped.items[0].prefix, 16);
  expect_match(&mapped, "192.168.3.4", 1);
  expect_match(&mapped, "::ffff:192.168.3.4", 1);
  expect_match(&mapped, "192.169.0.0", 0);
  mqproc__cidr_list_free(&all6);
  mqproc__cidr_list_free(&mapped);
}

Test(cidr, other_families_never_match) {
  mqproc__cidr_list_t l = list_of("0.0.0.0/0,::/0");
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof(ss));
  ss.ss_family = AF_UNIX;
  cr_expect_eq(mqproc__cidr_list_match(&l, (const struct sockaddr *)&ss), 0);
  cr_expect_eq(mqproc__cidr_list_match(&l, NULL), 0);
  mqproc__cidr_list_free(&l);
}

Test(cidr, built_in_deny_list) {
  mqproc__cidr_list_t l = list_of(MQPROC__CALLBACK_DENY_DEFAULT);
  cr_expect_eq(l.len, 4);
  expect_match(&l, "169.254.169.254", 1);
  expect_match(&l, "169.254.0.1", 1);
  expect_match(&l, "::ffff:169.254.169.254", 1);
  expect_match(&l, "fe80::a9fe:a9fe", 1);
  expect_match(&l, "fd00:ec2::254", 1);
  expect_match(&l, "fd00:ec2::253", 0);
  expect_match(&l, "100.100.100.200", 1);
  expect_match(&l, "100.100.100.201", 0);
  expect_match(&l, "169.255.0.1", 0);
  expect_match(&l, "127.0.0.1", 0);
  expect_match(&l, "10.0.0.1", 0);
  expect_match(&l, "::1", 0);
  mqproc__cidr_list_free(&l);
}
