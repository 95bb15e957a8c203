/* Unit tests for src/base/log.c: secret masking and the line format (--log-level and
 * --log-format are option rows: unit/test_config.c). */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* ---- Masking ------------------------------------------------------------------------------- */

static void expect_masked(const char *in, const char *want) {
  char out[MQPROC_ERR_LEN];
  mqproc__mask_secret(in, out, sizeof(out));
  cr_expect_str_eq(out, want, "mask(%s)", in);
}

Test(mask, amqp_and_amqps_passwords) {
  expect_masked("amqp://admin:s3cret@rabbit:5672/%2f", "amqp://admin:***@rabbit:5672/%2f");
  expect_masked("amqps://u:p@broker.example.org/vhost", "amqps://u:***@broker.example.org/vhost");
}

Test(mask, postgres_passwords) {
  expect_masked("postgresql://ocrd:pw@db:5432/jobs?sslmode=require",
                "postgresql://ocrd:***@db:5432/jobs?sslmode=require");
  expect_masked("postgres://ocrd:pw@db/jobs", "postgres://ocrd:***@db/jobs");
}

Test(mask, any_scheme_is_masked) {
  expect_masked("https://bot:tok@cb.example.org/hook", "https://bot:***@cb.example.org/hook");
}

Test(mask, urls_without_password_are_unchanged) {
  expect_masked("amqp://guest@localhost", "amqp://guest@localhost");
  expect_masked("amqp://localhost:5672/", "amqp://localhost:5672/");
  expect_masked("postgresql:///jobs?host=/run/postgresql",
                "postgresql:///jobs?host=/run/postgresql");
  expect_masked("http://host:8080/a@b:c", "http://host:8080/a@b:c");
  expect_masked("amqp://user:@host", "amqp://user:@host");
  expect_masked("plain text, no url", "plain text, no url");
  expect_masked("", "");
}

Test(mask, at_sign_inside_the_password) {
  expect_masked("amqp://user:p@ss@w0rd@host/vh", "amqp://user:***@host/vh");
  expect_masked("postgresql://u:a:b@c@db", "postgresql://u:***@db");
}

Test(mask, several_urls_in_free_text) {
  expect_masked("from amqp://a:x@h1 to postgres://b:y@h2/db done",
                "from amqp://a:***@h1 to postgres://b:***@h2/db done");
}

Test(mask, conninfo_key_values) {
  /* libpq skips blanks after '=', so here the password is "host=db". */
  expect_masked("password= host=db", "password= ***");
  expect_masked("host=db user=ocrd password=secret dbname=jobs",
                "host=db user=ocrd password=*** dbname=jobs");
  expect_masked("password = 'se cret' host=db", "password = *** host=db");
  expect_masked("password='it\\'s \\\\ x' port=5432", "password=*** port=5432");
  expect_masked("host=db PASSWORD=x", "host=db PASSWORD=***");
  expect_masked("sslpassword=k sslmode=verify-full", "sslpassword=*** sslmode=verify-full");
  expect_masked("password='unclosed and more", "password=***");
  /* bytes glued to the closing quote go with it, so masking twice changes nothing (the
   * input fuzz_url found: tests/fuzz/corpus/url/regress-quoted-password-glued-bytes) */
  expect_masked("password='a b'\xe1\xe1 dbname=x", "password=*** dbname=x");
  expect_masked("password='a b'x&y", "password=***");
}

Test(mask, masking_twice_changes_nothing) {
  /* a '/' in a key's value ended the URL's authority early, so the URL's password was left
   * to a second pass (tests/fuzz/corpus/url/regress-url-cut-by-a-slash-in-a-keyword-value) */
  expect_masked("amqp://mo&password=a/b&k=xu:p@h1/v", "amqp://mo&password=***&k=xu:***@h1/v");
}

Test(mask, conninfo_without_password_value_is_unchanged) {
  expect_masked("host=db user=ocrd", "host=db user=ocrd");
  expect_masked("password=", "password=");
  expect_masked("the password is wrong", "the password is wrong");
}

Test(mask, password_in_url_query) {
  expect_masked("postgresql://db/jobs?user=u&password=pw&sslmode=require",
                "postgresql://db/jobs?user=u&password=***&sslmode=require");
}

Test(mask, null_input_and_tiny_buffers) {
  char out[4] = "xyz";
  mqproc__mask_secret(NULL, out, sizeof(out));
  cr_expect_str_eq(out, "");
  mqproc__mask_secret("abcdef", out, 1);
  cr_expect_str_eq(out, "");
  mqproc__mask_secret("abcdef", out, 0); /* writes nothing */
  mqproc__mask_secret("abcdef", out, sizeof(out));
  cr_expect_str_eq(out, "abc");
}

/* Whatever the buffer size, the output is a prefix of the full masked text and never
 * contains a byte of the secret. */
Test(mask, truncation_never_exposes_the_secret) {
  static const char *const inputs[] = {"amqp://user:SECRETX@host/vh", "amqp://user:SECRETX@x@host",
                                       "password='SECRETX' a=b", "host=h password=SECRETX",
                                       "x postgresql://u:SECRETX@h/d?password=SECRETX"};
  for (size_t k = 0; k < MQPROC__ARRAY_LEN(inputs); k++) {
    char full[256];
    mqproc__mask_secret(inputs[k], full, sizeof(full));
    for (size_t n = 1; n <= strlen(inputs[k]) + 2; n++) {
      char out[256];
      mqproc__mask_secret(inputs[k], out, n);
      cr_assert(strlen(out) <= n - 1);
      cr_assert(strncmp(out, full, strlen(out)) == 0, "n=%zu: '%s' vs '%s'", n, out, full);
      cr_assert(strstr(out, "SE") == NULL && strstr(out, "TX") == NULL, "n=%zu: '%s'", n, out);
    }
  }
}

/* ---- Lines (stderr redirected to a file; each test runs in its own process) ---------------- */

static char capture_path[64];
static int saved_stderr = -1;

static void capture_start(void) {
  int fd;
  saved_stderr = dup(STDERR_FILENO);
  cr_assert(saved_stderr >= 0);
  snprintf(capture_path, sizeof(capture_path), "/tmp/mqproc-test-log-XXXXXX");
  fd = mkstemp(capture_path);
  cr_assert(fd >= 0);
  close(fd);
  fd = open(capture_path, O_WRONLY | O_APPEND);
  cr_assert(fd >= 0);
  cr_assert(dup2(fd, STDERR_FILENO) == STDERR_FILENO);
  close(fd);
}

/* Returns everything logged so far (malloc'd), restores stderr and removes the file. */
static char *capture_end(void) {
  FILE *f = fopen(capture_path, "rb");
  char *buf = calloc(1, 1 << 22);
  size_t n;
  cr_assert(f != NULL && buf != NULL);
  n = fread(buf, 1, (1 << 22) - 1, f);
  buf[n] = '\0';
  fclose(f);
  unlink(capture_path);
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  return buf;
}

static bool matches(const char *text, const char *pattern) {
  regex_t re;
  int rc;
  cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
  rc = regexec(&re, text, 0, NULL, 0);
  regfree(&re);
  return rc == 0;
}

TestSuite(log_line, .init = capture_start);

Test(log_line, format) {
  mqproc__log_set_tag("worker-1");
  MQPROC__INFO("job %s done in %d ms", "j-42", 17);
  MQPROC__ERROR("boom");
  char *out = capture_end();
  cr_expect(matches(out, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                         "INFO  \\[worker-1\\] job j-42 done in 17 ms\n"
                         "[-0-9T:.]{23}Z ERROR \\[worker-1\\] boom\n$"),
            "got: %s", out);
  free(out);
}

Test(log_line, level_filter) {
  MQPROC__DEBUG("hidden by default");
  MQPROC__INFO("shown");
  mqproc__log_set_level(MQPROC__LOG_WARN);
  MQPROC__INFO("hidden");
  MQPROC__WARN("warned");
  mqproc__log_set_level(MQPROC__LOG_DEBUG);
  MQPROC__DEBUG("debugged");
  char *out = capture_end();
  cr_expect(matches(out, "^[^\n]* INFO  \\[mqproc\\] shown\n"
                         "[^\n]* WARN  \\[mqproc\\] warned\n"
                         "[^\n]* DEBUG \\[mqproc\\] debugged\n$"),
            "got: %s", out);
  free(out);
}

Test(log_line, secrets_masked_and_newlines_escaped) {
  MQPROC__WARN("connect amqp://u:hunter2@rabbit failed\nretrying with password=hunter2");
  char *out = capture_end();
  cr_expect(strstr(out, "hunter2") == NULL, "got: %s", out);
  cr_expect(strstr(out, "amqp://u:***@rabbit failed\\nretrying with password=***\n") != NULL,
            "got: %s", out);
  free(out);
}

Test(log_line, long_lines_are_cut_at_4_KiB_with_an_ellipsis) {
  char *big = malloc(10000);
  cr_assert(big != NULL);
  memset(big, 'x', 9999);
  big[9999] = '\0';
  memcpy(big + 4000, "\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4\xc3\xa4", 14);
  MQPROC__INFO("%s", big);
  MQPROC__INFO("next");
  free(big);
  char *out = capture_end();
  char *nl = strchr(out, '\n');
  cr_assert(nl != NULL);
  cr_expect_leq((size_t)(nl - out) + 1, 4096);
  cr_expect(strncmp(nl - 3, "\xe2\x80\xa6", 3) == 0, "no ellipsis at the end");
  cr_expect_neq((unsigned char)nl[-4] & 0xC0, 0xC0, "a UTF-8 character was cut in half");
  cr_expect(strstr(nl + 1, "INFO  [mqproc] next\n") != NULL);
  free(out);
}

static void *log_many(void *arg) {
  char payload[1500];
  memset(payload, 'a' + (int)(intptr_t)arg, sizeof(payload) - 1);
  payload[sizeof(payload) - 1] = '\0';
  for (int i = 0; i < 200; i++)
    MQPROC__INFO("t%d %s", (int)(intptr_t)arg, payload);
  return NULL;
}

Test(log_line, lines_from_threads_never_interleave) {
  pthread_t th[4];
  for (intptr_t i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&th[i], NULL, log_many, (void *)i), 0);
  for (int i = 0; i < 4; i++)
    pthread_join(th[i], NULL);
  char *out = capture_end();
  int lines = 0;
  for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n"), lines++) {
    char *msg = strstr(line, "] t");
    cr_assert(msg != NULL, "broken line: %.80s", line);
    char set[2] = {(char)('a' + (msg[3] - '0')), '\0'};
    size_t run = strspn(msg + 5, set);
    cr_assert_eq(run, 1499, "interleaved line (%zu): %.80s|%s", run, line, msg + 5 + run);
  }
  cr_expect_eq(lines, 800);
  free(out);
}

/* ---- JSON lines ---------------------------------------------------------------------------- */

static json_t *json_line(const char *line) {
  json_error_t e;
  json_t *o = json_loads(line, JSON_DISABLE_EOF_CHECK, &e);
  cr_assert_not_null(o, "not JSON (%s): %s", e.text, line);
  return o;
}

Test(log_line, json_lines_carry_the_fields_and_escape_everything) {
  char *job_id = "j-7";
  int attempt = 2, try_no = 5;
  mqproc__log_job_t prev;
  json_t *o;
  char *out, *second;
  mqproc__log_set_json(1);
  mqproc__log_set_tag("host:1");
  MQPROC__WARN("job x\"y: quote \"q\" \\ tab\t bell\a bad \xff\xfe and amqp://u:hunter2@h");
  prev = mqproc__log_enter_job(&job_id, "ocrd-a", &attempt, &try_no);
  MQPROC__INFO("in context");
  mqproc__log_leave_job(prev);
  mqproc__log_set_json(0);
  out = capture_end();
  cr_expect(strstr(out, "hunter2") == NULL, "got: %s", out);
  o = json_line(out);
  cr_expect_str_eq(json_string_value(json_object_get(o, "level")), "warn");
  cr_expect_str_eq(json_string_value(json_object_get(o, "worker_id")), "host:1");
  cr_expect_str_eq(json_string_value(json_object_get(o, "job_id")), "x\"y");
  cr_expect(strstr(json_string_value(json_object_get(o, "msg")), "tab\t bell\a bad \xef\xbf\xbd") !=
                NULL,
            "%s", out);
  cr_expect_null(json_object_get(o, "attempt"), "outside a context: no attempt");
  json_decref(o);
  second = strchr(out, '\n');
  cr_assert(second != NULL);
  o = json_line(second + 1);
  cr_expect_str_eq(json_string_value(json_object_get(o, "job_id")), "j-7");
  cr_expect_str_eq(json_string_value(json_object_get(o, "processor")), "ocrd-a");
  cr_expect_eq(json_integer_value(json_object_get(o, "attempt")), 2);
  cr_expect_eq(json_integer_value(json_object_get(o, "try")), 5);
  json_decref(o);
  free(out);
}

Test(log_line, a_long_json_line_is_cut_and_stays_json) {
  char *big = malloc(10000);
  json_t *o;
  char *out;
  cr_assert(big != NULL);
  for (int i = 0; i < 9999; i++)
    big[i] = "\"\\\x01x"[i % 4];
  big[9999] = '\0';
  mqproc__log_set_json(1);
  MQPROC__INFO("%s", big);
  mqproc__log_set_json(0);
  free(big);
  out = capture_end();
  cr_expect_leq(strlen(out), 4096);
  o = json_line(out);
  cr_expect(strstr(json_string_value(json_object_get(o, "msg")), "\xe2\x80\xa6") != NULL);
  json_decref(o);
  free(out);
}
