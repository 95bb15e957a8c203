/* Callbacks: POST a result message as JSON to a URL with libcurl, with timeout and retries. */
#include "callback.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "log.h"
#include "util.h"

/* A response body is read and dropped; past this many bytes the transfer is aborted. */
#define RESPONSE_CAP (64 * 1024)
/* No single wait between tries is longer than this. */
#define BACKOFF_MAX_MS 60000L

/* What one POST (one easy handle, reused across tries) needs. */
typedef struct post {
  CURL *curl;
  struct curl_slist *headers;
  const char *url;
  char shown_url[MQPROC_ERR_LEN / 2]; /* url with any password masked, for messages */
  long timeout_ms;
  size_t received; /* response bytes of the current try */
  char curl_err[CURL_ERROR_SIZE];
} post_t;

/* How one try ended. */
enum outcome { TRY_OK, TRY_RETRY, TRY_GIVE_UP };

static size_t discard_body(char *data, size_t size, size_t nmemb, void *userdata) {
  post_t *p = userdata;
  (void)data;
  p->received += size * nmemb;
  return p->received > RESPONSE_CAP ? 0 : size * nmemb; /* 0 aborts the transfer */
}

static bool is_http_url(const char *url) {
  return strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0;
}

static int check_args(const char *url, const char *body, const mqproc__callback_opts_t *opts,
                      char *err) {
  char shown[MQPROC_ERR_LEN / 2];
  if (url == NULL || body == NULL || opts == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "callback: url, body and options are required");
  if (opts->timeout_ms <= 0 || opts->retries < 0 || opts->backoff_ms < 0)
    return mqproc__err(err, MQPROC_EINVAL,
                       "callback: timeout must be > 0, retries and backoff "
                       ">= 0");
  if (!is_http_url(url)) {
    mqproc__mask_secret(url, shown, sizeof(shown));
    return mqproc__err(err, MQPROC_EINVAL, "callback URL %s: only http and https are allowed",
                       shown);
  }
  return MQPROC_OK;
}

/* Sets every option once; the handle is then reused for each try. */
static int setup(post_t *p, const char *body) {
  CURL *c = p->curl;
  CURLcode rc = CURLE_OK;
  rc |= curl_easy_setopt(c, CURLOPT_URL, p->url);
  rc |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  rc |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  rc |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  rc |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, p->timeout_ms);
  rc |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, p->timeout_ms);
  rc |= curl_easy_setopt(c, CURLOPT_USERAGENT, "mqproc/" MQPROC_VERSION);
  rc |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, p->headers);
  rc |= curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
  rc |= curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
  rc |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard_body);
  rc |= curl_easy_setopt(c, CURLOPT_WRITEDATA, p);
  rc |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, p->curl_err);
  return rc == CURLE_OK ? MQPROC_OK : MQPROC_ECALLBACK; /* e.g. a libcurl older than 7.85 */
}

static int post_init(post_t *p, const char *url, const char *body, long timeout_ms) {
  struct curl_slist *h;
  memset(p, 0, sizeof(*p));
  p->url = url;
  mqproc__mask_secret(url, p->shown_url, sizeof(p->shown_url));
  p->timeout_ms = timeout_ms;
  p->curl = curl_easy_init();
  if (p->curl == NULL)
    return MQPROC_ENOMEM;
  /* "Expect:" stops curl from waiting for a 100-continue on bigger bodies. */
  static const char *const lines[] = {"Content-Type: application/json", "Expect:"};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(lines); i++) {
    h = curl_slist_append(p->headers, lines[i]);
    if (h == NULL)
      return MQPROC_ENOMEM;
    p->headers = h;
  }
  return setup(p, body);
}

static void post_cleanup(post_t *p) {
  curl_easy_cleanup(p->curl);
  curl_slist_free_all(p->headers);
}

/* Errors that another try cannot fix. */
static bool is_permanent(CURLcode rc) {
  return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
         rc == CURLE_OUT_OF_MEMORY || rc == CURLE_NOT_BUILT_IN;
}

/* Describes a failed try in msg (with the URL masked). */
static void describe(const post_t *p, CURLcode rc, long status, char *msg, size_t n) {
  const char *why = p->curl_err[0] != '\0' ? p->curl_err : curl_easy_strerror(rc);
  if (rc == CURLE_OPERATION_TIMEDOUT)
    snprintf(msg, n, "timeout after %ld ms posting to %s (%s)", p->timeout_ms, p->shown_url, why);
  else if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && status != 0))
    snprintf(msg, n, "%s posting to %s", why, p->shown_url);
  else
    snprintf(msg, n, "HTTP %ld from %s", status, p->shown_url);
}

/* One POST. On failure msg says why. */
static enum outcome try_once(post_t *p, char *msg, size_t n) {
  long status = 0;
  CURLcode rc;
  p->received = 0;
  p->curl_err[0] = '\0';
  rc = curl_easy_perform(p->curl);
  curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &status);
  /* A 2xx whose (dropped) body went past the cap still counts as delivered. */
  if ((rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && p->received > RESPONSE_CAP)) &&
      status >= 200 && status <= 299)
    return TRY_OK;
  describe(p, rc, status, msg, n);
  return is_permanent(rc) ? TRY_GIVE_UP : TRY_RETRY;
}

static void sleep_ms(long ms) {
  struct timespec left = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR)
    ;
}

/* Tries up to opts->retries + 1 times, waiting backoff, 2*backoff, ... in between. */
static int post_with_retries(post_t *p, const mqproc__callback_opts_t *opts, int *tries, char *msg,
                             size_t n) {
  long wait_ms = opts->backoff_ms < BACKOFF_MAX_MS ? opts->backoff_ms : BACKOFF_MAX_MS;
  for (;;) {
    enum outcome o = try_once(p, msg, n);
    ++*tries;
    if (o == TRY_OK)
      return MQPROC_OK;
    if (o == TRY_GIVE_UP || *tries > opts->retries)
      return MQPROC_ECALLBACK;
    MQPROC__DEBUG("callback try %d failed, next in %ld ms", *tries, wait_ms);
    sleep_ms(wait_ms);
    wait_ms = wait_ms > BACKOFF_MAX_MS / 2 ? BACKOFF_MAX_MS : wait_ms * 2;
  }
}

int mqproc__callback_post(const char *url, const char *body, const mqproc__callback_opts_t *opts,
                          int *tries_out, char *err) {
  char msg[MQPROC_ERR_LEN + CURL_ERROR_SIZE];
  post_t p;
  int tries = 0;
  int rc;
  if (tries_out != NULL)
    *tries_out = 0;
  rc = check_args(url, body, opts, err);
  if (rc != MQPROC_OK)
    return rc;
  rc = post_init(&p, url, body, opts->timeout_ms);
  if (rc != MQPROC_OK) {
    post_cleanup(&p);
    return mqproc__err(err, rc, "callback: cannot set up a curl handle: %s", mqproc_strerror(rc));
  }
  rc = post_with_retries(&p, opts, &tries, msg, sizeof(msg));
  post_cleanup(&p);
  if (tries_out != NULL)
    *tries_out = tries;
  if (rc != MQPROC_OK && err != NULL)
    mqproc__mask_secret(msg, err, MQPROC_ERR_LEN); /* belt and braces: curl's text too */
  return rc;
}
