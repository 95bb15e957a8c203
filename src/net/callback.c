/* Callbacks: POST a result message as JSON to a URL with libcurl, with timeout, retries and
 * an address policy (allow/deny lists of CIDR ranges) checked on every socket curl opens. */
#include "net/callback.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

/* A response body is read and dropped; past this many bytes the transfer is aborted. */
#define RESPONSE_CAP (64 * 1024)
/* No single wait between tries is longer than this. */
#define BACKOFF_MAX_MS 60000L
/* Longest list entry looked at: an IPv6 address with an IPv4 tail, then "/128". */
#define ENTRY_MAX (INET6_ADDRSTRLEN + 4)
/* At most this much of a bad item or entry is quoted in an error. */
#define SHOWN_MAX 80

/* ---- Address lists ------------------------------------------------------------------------ */

/* ::ffff:0:0/96, the IPv4-mapped IPv6 addresses. */
static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* Parses the digits after a '/' (s; NULL = no '/') into *prefix, at most max. */
static bool parse_prefix(const char *s, int max, int *prefix) {
  int v = 0;
  if (s == NULL) {
    *prefix = max;
    return true;
  }
  if (*s == '\0' || strlen(s) > 3)
    return false;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9')
      return false;
    v = v * 10 + (*s - '0');
  }
  if (v > max)
    return false;
  *prefix = v;
  return true;
}

/* Clears the bits of addr (16 bytes) after the first prefix bits. */
static void clear_host_bits(unsigned char *addr, int prefix) {
  for (int i = 0; i < 16; i++) {
    int keep = prefix - i * 8; /* bits of byte i that belong to the network */
    if (keep < 8)
      addr[i] &= keep <= 0 ? 0 : (unsigned char)(0xff << (8 - keep));
  }
}

/* Parses one trimmed entry ("a.b.c.d", "x::y", either with "/prefix") into c; the
 * entry's '/' is overwritten. */
static bool parse_entry(char *entry, mqproc__cidr_t *c) {
  char *slash = strchr(entry, '/');
  if (slash != NULL)
    *slash = '\0';
  memset(c, 0, sizeof(*c));
  if (inet_pton(AF_INET, entry, c->addr) == 1)
    c->family = AF_INET;
  else if (inet_pton(AF_INET6, entry, c->addr) == 1)
    c->family = AF_INET6;
  else
    return false;
  if (!parse_prefix(slash != NULL ? slash + 1 : NULL, c->family == AF_INET ? 32 : 128, &c->prefix))
    return false;
  if (c->family == AF_INET6 && c->prefix >= 96 && memcmp(c->addr, v4_mapped, 12) == 0) {
    memmove(c->addr, c->addr + 12, 4); /* the same hosts, as an IPv4 range */
    memset(c->addr + 4, 0, 12);
    c->family = AF_INET;
    c->prefix -= 96;
  }
  clear_host_bits(c->addr, c->prefix);
  return true;
}

static int bad_entry(char *err, const char *s, size_t n) {
  return mqproc__err(err, MQPROC_ECONFIG, "'%.*s%s' is not an IP address or CIDR range",
                     (int)(n < SHOWN_MAX ? n : SHOWN_MAX), s, n > SHOWN_MAX ? "..." : "");
}

/* Parses the n bytes at s (one entry of item, untrimmed) and appends the range to l. */
static int add_entry(const char *s, size_t n, const char *item, mqproc__cidr_list_t *l, char *err) {
  char entry[ENTRY_MAX + 1];
  mqproc__cidr_t c;
  mqproc__cidr_t *grown;
  while (n > 0 && isspace((unsigned char)s[0])) {
    s++;
    n--;
  }
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    n--;
  if (n == 0)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "empty entry in '%.*s': expected an IP address or CIDR range", SHOWN_MAX,
                       item);
  if (n > ENTRY_MAX)
    return bad_entry(err, s, n);
  memcpy(entry, s, n);
  entry[n] = '\0';
  if (!parse_entry(entry, &c))
    return bad_entry(err, s, n);
  grown = mqproc__realloc(l->items, (l->len + 1) * sizeof(*grown));
  if (grown == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory for an address list");
  l->items = grown;
  l->items[l->len++] = c;
  return MQPROC_OK;
}

/* Appends the ranges of item (entries separated by commas) to l. */
static int parse_item(const char *item, mqproc__cidr_list_t *l, char *err) {
  const char *p = item;
  for (;;) {
    size_t n = strcspn(p, ",");
    int rc = add_entry(p, n, item, l, err);
    if (rc != MQPROC_OK || p[n] == '\0')
      return rc;
    p += n + 1;
  }
}

int mqproc__cidr_list_parse(const char *const *items, mqproc__cidr_list_t *out, char *err) {
  mqproc__cidr_list_t l = {0};
  int rc = MQPROC_OK;
  for (size_t i = 0; items != NULL && items[i] != NULL && rc == MQPROC_OK; i++)
    rc = parse_item(items[i], &l, err);
  if (rc != MQPROC_OK)
    mqproc__cidr_list_free(&l);
  *out = l;
  return rc;
}

void mqproc__cidr_list_free(mqproc__cidr_list_t *l) {
  if (l == NULL)
    return;
  free(l->items);
  l->items = NULL;
  l->len = 0;
}

/* Whether address a (4 or 16 bytes, as c's family) lies in range c. */
static bool in_range(const unsigned char *a, const mqproc__cidr_t *c) {
  size_t full = (size_t)c->prefix / 8;
  int rest = c->prefix % 8;
  if (memcmp(a, c->addr, full) != 0)
    return false;
  return rest == 0 || (a[full] & (unsigned char)(0xff << (8 - rest))) == c->addr[full];
}

static bool list_has(const mqproc__cidr_list_t *l, int family, const unsigned char *a) {
  for (size_t i = 0; i < l->len; i++)
    if (l->items[i].family == family && in_range(a, &l->items[i]))
      return true;
  return false;
}

int mqproc__cidr_list_match(const mqproc__cidr_list_t *l, const struct sockaddr *sa) {
  const unsigned char *a;
  if (l == NULL || sa == NULL)
    return 0;
  if (sa->sa_family == AF_INET) {
    a = (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    return list_has(l, AF_INET, a);
  }
  if (sa->sa_family != AF_INET6)
    return 0;
  a = ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
  if (list_has(l, AF_INET6, a))
    return 1;
  return memcmp(a, v4_mapped, sizeof(v4_mapped)) == 0 && list_has(l, AF_INET, a + 12);
}

/* ---- POST --------------------------------------------------------------------------------- */

/* What the address policy says about one address. */
enum verdict { ADDR_OK, ADDR_DENIED, ADDR_NOT_ALLOWED, ADDR_SELF };

/* What one POST (one easy handle, reused across tries) needs. */
typedef struct post {
  CURL *curl;
  struct curl_slist *headers;
  const char *url;
  char shown_url[MQPROC_ERR_LEN / 2]; /* url with any password masked, for messages */
  long timeout_ms;
  const mqproc__cidr_list_t *allow; /* NULL = empty */
  const mqproc__cidr_list_t *deny;  /* NULL = empty */
  const struct sockaddr *self;      /* NULL = none */
  size_t received;                  /* response bytes of the current try */
  int opened;                       /* sockets opened in the current try */
  enum verdict refused;             /* the current try's first refusal; ADDR_OK = none */
  char refused_addr[INET6_ADDRSTRLEN + 16];
  char curl_err[CURL_ERROR_SIZE];
} post_t;

/* MQPROC__CALLBACK_DENY_DEFAULT, parsed once by mqproc__callback_init(). */
static mqproc__cidr_list_t builtin_deny;

/* How one try ended. */
enum outcome { TRY_OK, TRY_RETRY, TRY_GIVE_UP };

static size_t discard_body(char *data, size_t size, size_t nmemb, void *userdata) {
  post_t *p = userdata;
  (void)data;
  p->received += size * nmemb;
  return p->received > RESPONSE_CAP ? 0 : size * nmemb; /* 0 aborts the transfer */
}

/* sa's port (network order). */
static in_port_t port_of(const struct sockaddr *sa) {
  return sa->sa_family == AF_INET ? ((const struct sockaddr_in *)(const void *)sa)->sin_port
                                  : ((const struct sockaddr_in6 *)(const void *)sa)->sin6_port;
}

/* sa's address bytes (4 or 16) and their count. */
static const unsigned char *addr_bytes(const struct sockaddr *sa, size_t *n) {
  *n = sa->sa_family == AF_INET ? 4 : 16;
  return sa->sa_family == AF_INET
             ? (const unsigned char *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr
             : ((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr.s6_addr;
}

/* Whether sa is an address of this host: one a socket can be bound to. */
static bool is_local(const struct sockaddr *sa) {
  struct sockaddr_storage ss;
  socklen_t len =
      sa->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  int fd = socket(sa->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  bool local;
  if (fd < 0)
    return false;
  memcpy(&ss, sa, len);
  if (ss.ss_family == AF_INET)
    ((struct sockaddr_in *)&ss)->sin_port = 0;
  else
    ((struct sockaddr_in6 *)&ss)->sin6_port = 0;
  local = bind(fd, (struct sockaddr *)&ss, len) == 0;
  close(fd);
  return local;
}

/* Whether a connection to sa reaches self (mqproc__callback_opts_t). */
static bool is_self(const struct sockaddr *self, const struct sockaddr *sa) {
  size_t ns, na;
  const unsigned char *s, *a;
  bool any = true;
  if (self == NULL || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
      (self->sa_family != AF_INET && self->sa_family != AF_INET6) || port_of(self) != port_of(sa))
    return false;
  s = addr_bytes(self, &ns);
  a = addr_bytes(sa, &na);
  for (size_t i = 0; i < ns; i++)
    any &= s[i] == 0;
  if (any) /* listening on every address: any address of this host */
    return is_local(sa);
  if (ns == na)
    return memcmp(s, a, ns) == 0;
  if (na == 16 && memcmp(a, v4_mapped, sizeof(v4_mapped)) == 0) /* ::ffff:a.b.c.d */
    return memcmp(s, a + 12, 4) == 0;
  return false;
}

/* The address policy (see mqproc__callback_opts_t). */
static enum verdict judge(const post_t *p, const struct sockaddr *sa) {
  if (is_self(p->self, sa))
    return ADDR_SELF;
  if (mqproc__cidr_list_match(p->allow, sa))
    return ADDR_OK;
  if (mqproc__cidr_list_match(&builtin_deny, sa) || mqproc__cidr_list_match(p->deny, sa))
    return ADDR_DENIED;
  if (p->allow != NULL && p->allow->len > 0)
    return ADDR_NOT_ALLOWED;
  return ADDR_OK;
}

static void address_text(const struct sockaddr *sa, char *out, size_t n) {
  const void *a = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
  if (sa->sa_family == AF_INET)
    a = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
  if (inet_ntop(sa->sa_family, a, out, (socklen_t)n) == NULL)
    snprintf(out, n, "of family %d", (int)sa->sa_family);
}

/* curl's socket opener: the policy sees each address curl is about to connect to (after
 * DNS), so a refused address never gets a connection attempt. */
static curl_socket_t open_socket(void *clientp, curlsocktype purpose, struct curl_sockaddr *a) {
  post_t *p = clientp;
  enum verdict v = judge(p, &a->addr);
  (void)purpose;
  if (v != ADDR_OK) {
    if (p->refused == ADDR_OK) {
      p->refused = v;
      address_text(&a->addr, p->refused_addr, sizeof(p->refused_addr));
      if (v == ADDR_SELF) {
        size_t used = strlen(p->refused_addr);
        snprintf(p->refused_addr + used, sizeof(p->refused_addr) - used, " port %u",
                 (unsigned)ntohs(port_of(&a->addr)));
      }
    }
    return CURL_SOCKET_BAD; /* curl then tries the host's next address, if any */
  }
  p->opened++;
  return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* Whether the policy refused every address of the current try: nothing was sent. */
static bool all_refused(const post_t *p) {
  return p->refused != ADDR_OK && p->opened == 0;
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
  rc |= curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  rc |= curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, p);
  return rc == CURLE_OK ? MQPROC_OK : MQPROC_ECALLBACK; /* e.g. a libcurl older than 7.85 */
}

static int curl_ready;

int mqproc__callback_init(void) {
  static const char *const builtin[] = {MQPROC__CALLBACK_DENY_DEFAULT, NULL};
  if (curl_ready)
    return MQPROC_OK;
  /* the text is a constant: only ENOMEM can fail it */
  if (mqproc__cidr_list_parse(builtin, &builtin_deny, NULL) != MQPROC_OK)
    return MQPROC_ENOMEM;
  if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
    mqproc__cidr_list_free(&builtin_deny);
    return MQPROC_ENOMEM;
  }
  curl_ready = 1;
  return MQPROC_OK;
}

void mqproc__callback_shutdown(void) {
  if (curl_ready) {
    curl_global_cleanup();
    mqproc__cidr_list_free(&builtin_deny);
  }
  curl_ready = 0;
}

static int post_init(post_t *p, const char *url, const char *body,
                     const mqproc__callback_opts_t *opts) {
  struct curl_slist *h;
  memset(p, 0, sizeof(*p));
  p->url = url;
  mqproc__mask_secret(url, p->shown_url, sizeof(p->shown_url));
  p->timeout_ms = opts->timeout_ms;
  p->allow = opts->allow;
  p->deny = opts->deny;
  p->self = opts->self;
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

/* Errors that another try cannot fix (besides an address the policy refused). */
static bool is_permanent(CURLcode rc) {
  return rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT ||
         rc == CURLE_OUT_OF_MEMORY || rc == CURLE_NOT_BUILT_IN;
}

/* Describes a failed try in msg (with the URL masked). */
static void describe(const post_t *p, CURLcode rc, long status, char *msg, size_t n) {
  const char *why = p->curl_err[0] != '\0' ? p->curl_err : curl_easy_strerror(rc);
  if (all_refused(p) && p->refused == ADDR_SELF)
    snprintf(msg, n, "callback to %s refused: address %s is this process's own", p->shown_url,
             p->refused_addr);
  else if (all_refused(p) && p->refused == ADDR_NOT_ALLOWED)
    snprintf(msg, n, "callback to %s refused: address %s is not in --callback-allow", p->shown_url,
             p->refused_addr);
  else if (all_refused(p))
    snprintf(msg, n,
             "callback to %s refused: address %s is denied (--callback-deny / built-in "
             "link-local and metadata ranges)",
             p->shown_url, p->refused_addr);
  else if (rc == CURLE_OPERATION_TIMEDOUT)
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
  p->opened = 0;
  p->refused = ADDR_OK;
  p->curl_err[0] = '\0';
  rc = curl_easy_perform(p->curl);
  curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &status);
  /* A 2xx whose (dropped) body went past the cap still counts as delivered. */
  if ((rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && p->received > RESPONSE_CAP)) &&
      status >= 200 && status <= 299)
    return TRY_OK;
  describe(p, rc, status, msg, n);
  return is_permanent(rc) || all_refused(p) ? TRY_GIVE_UP : TRY_RETRY;
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
  rc = post_init(&p, url, body, opts);
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
