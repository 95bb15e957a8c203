/* Callbacks: POST a result message as JSON to a URL (libcurl), with a timeout, a few
 * retries and an address policy against SSRF. Blocking: call it from a worker thread,
 * never from the event loop.
 *
 * API: mqproc__callback_post(); the address lists it checks: mqproc__cidr_list_parse(),
 * mqproc__cidr_list_match(), mqproc__cidr_list_free(). */
#ifndef MQPROC_CALLBACK_H
#define MQPROC_CALLBACK_H

#include "base/config.h"
#include <stddef.h>

struct sockaddr;

/* ---- Address lists --------------------------------------------------------------------- */

/* (MQPROC__CALLBACK_DENY_DEFAULT, the ranges always refused, is in base/config.h: the
 * options' help names it) */

/* One range: the network address (host bits cleared) and the prefix length. */
typedef struct mqproc__cidr {
  int family;             /* AF_INET or AF_INET6 */
  unsigned char addr[16]; /* network byte order; the first 4 bytes for AF_INET */
  int prefix;             /* 0..32 (AF_INET) or 0..128 (AF_INET6) */
} mqproc__cidr_t;

/* A list of ranges. All zeros ({0}) is the empty list. */
typedef struct mqproc__cidr_list {
  mqproc__cidr_t *items; /* owned; freed by mqproc__cidr_list_free() */
  size_t len;
} mqproc__cidr_list_t;

/* Parses items (NULL-terminated; items == NULL is the same as none) into *out, which is
 * overwritten. Each item is one entry or a comma-separated list of them; whitespace around
 * an entry is ignored. An entry is an address ("192.168.1.5" = /32, "::1" = /128) or
 * address/prefix ("10.0.0.0/8", "fe80::/10"); host bits below the prefix are ignored. An
 * IPv4-mapped entry (::ffff:a.b.c.d/n, n >= 96) is stored as the IPv4 range
 * a.b.c.d/(n - 96). An empty entry is an error.
 * Returns MQPROC_OK, MQPROC_ENOMEM or MQPROC_ECONFIG with err naming the entry, e.g.
 * "'10.0.0.0/33' is not an IP address or CIDR range" (the caller prefixes its option:
 * "--callback-deny: ..."). On error *out is the empty list. Free with
 * mqproc__cidr_list_free(). */
int mqproc__cidr_list_parse(const char *const *items, mqproc__cidr_list_t *out, char *err);

/* Frees l's ranges and leaves l the empty list; NULL is allowed. */
void mqproc__cidr_list_free(mqproc__cidr_list_t *l);

/* 1 when the address of sa (AF_INET or AF_INET6; the port is ignored) lies in a range of
 * l, else 0 (also for l == NULL and other families). An IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d) matches the IPv6 ranges that contain it and, too, the IPv4 ranges that
 * contain a.b.c.d: it reaches the same host. */
int mqproc__cidr_list_match(const mqproc__cidr_list_t *l, const struct sockaddr *sa);

/* ---- POST ------------------------------------------------------------------------------ */

/* The address policy, checked on every address curl is about to connect to (after DNS, so
 * a name that resolves differently the second time cannot slip past it):
 *   1. an address in allow is permitted;
 *   2. else an address in MQPROC__CALLBACK_DENY_DEFAULT or in deny is refused;
 *   3. else, when allow is not empty, the address is refused;
 *   4. else it is permitted.
 * When curl goes through a proxy (http_proxy and friends) the address checked is the
 * proxy's, not the callback host's. */
typedef struct mqproc__callback_opts {
  long timeout_ms;                  /* whole-request timeout per try (connect included) */
  int retries;                      /* extra tries after the first (0 = one try) */
  long backoff_ms;                  /* wait before the first retry; doubled each retry */
  const mqproc__cidr_list_t *allow; /* --callback-allow; NULL = empty; not copied */
  const mqproc__cidr_list_t *deny;  /* --callback-deny; NULL = empty; not copied */
  /* NULL, or the caller's own listen address (port included; not copied): always refused,
   * before the lists, as is its port on any address of this host when it is a wildcard
   * address (0.0.0.0, ::). A callback to oneself would wait for oneself. */
  const struct sockaddr *self;
} mqproc__callback_opts_t;

/* POSTs body (JSON text, NUL-terminated) to url with Content-Type: application/json.
 * Success = a 2xx answer. Any other answer, a connection error or a timeout is retried;
 * after the last try returns MQPROC_ECALLBACK and err says what the last try got
 * (e.g. "HTTP 500 from http://host/cb" or "timeout after 5000 ms"). A try whose every
 * address the policy above refused is not retried: MQPROC_ECALLBACK at once, err e.g.
 * "callback to http://169.254.169.254/x refused: address 169.254.169.254 is denied
 * (--callback-deny / built-in link-local and metadata ranges)", or "... refused: address
 * 127.0.0.1 port 8000 is this process's own"; nothing was sent. A
 * password in url is shown as "***" in err. *tries_out (may be NULL) gets the number of
 * tries made. Thread-safe (one curl easy handle per call; the lists are only read);
 * mqproc__callback_init() must have been called, from one thread, before. */
int mqproc__callback_post(const char *url, const char *body, const mqproc__callback_opts_t *opts,
                          int *tries_out, char *err);

/* libcurl's global set-up, made on first need (not at start: it costs an idle server about
 * 2 MB of resident memory, TLS libraries included). Not thread-safe: call it from the
 * loop's thread before handing posts to other threads; repeated calls do nothing. */
int mqproc__callback_init(void);
/* Undoes mqproc__callback_init() at exit, if it was made. */
void mqproc__callback_shutdown(void);

#endif
