/* The page's tokens, sessions and sign-in back-off (auth.h). */
#include "http/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

#define COOKIE "mqproc_session"
#define TOKEN_MIN 16
#define LINE_MAX_ 1024       /* a token line must fit with its newline */
#define SESSION_BYTES 32     /* random bytes of a session, hex in its cookie */
#define PEERS 64             /* addresses whose wrong tokens are remembered */
#define BACKOFF_MAX_S 60     /* the longest refusal */
#define FORGET_MS 900000     /* a peer's wrong tokens are forgotten after 15 min */
#define LOG_LINES_PER_MIN 10 /* WARN lines about wrong tokens, all peers together */

typedef struct session {
  char id[2 * SESSION_BYTES + 1]; /* "" when the slot is free */
  int scope;
  int64_t made_ms, expires_ms;
} session_t;

typedef struct peer {
  char addr[64]; /* "" when the slot is free */
  int failures;
  int64_t last_ms;  /* the last wrong token */
  int64_t until_ms; /* refused until then */
} peer_t;

struct mqproc__auth {
  char *admin, *read; /* the tokens (NULL: not given) */
  int ttl_s;
  session_t sessions[MQPROC__AUTH_SESSIONS];
  peer_t peers[PEERS];
  int64_t log_window_ms; /* the minute the WARN lines are counted in */
  int log_lines, log_dropped;
};

const char MQPROC__AUTH_COOKIE_CLEAR[] = COOKIE "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0";

static int same(const char *a, const char *b) { /* constant time in b's length */
  size_t la = strlen(a), lb = strlen(b);
  unsigned char d = la != lb;
  for (size_t i = 0; i < lb; i++)
    d |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
  return d == 0;
}

/* A token file's first line into *out (malloc()ed), blanks at its end cut. */
static int read_token(const char *opt, const char *file, char **out, char *err) {
  struct stat st;
  char line[LINE_MAX_];
  FILE *f;
  size_t n;
  *out = NULL;
  if ((f = fopen(file, "r")) == NULL)
    return mqproc__err(err, MQPROC_ECONFIG, "--%s %s: %s", opt, file, strerror(errno));
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH)) {
    fclose(f);
    return mqproc__err(err, MQPROC_ECONFIG, "--%s %s: every user may read it; chmod 600 it first",
                       opt, file);
  }
  if (fgets(line, sizeof(line), f) == NULL)
    line[0] = '\0';
  fclose(f);
  n = strlen(line);
  if (n == sizeof(line) - 1 && line[n - 1] != '\n') { /* cut, and would never match */
    memset(line, 0, sizeof(line));
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--%s %s: the token (its first line) is longer than %d characters", opt,
                       file, LINE_MAX_ - 2);
  }
  while (n > 0 &&
         (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
    line[--n] = '\0';
  if (n < TOKEN_MIN)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--%s %s: the token (its first line) needs at least %d characters (e.g. "
                       "openssl rand -hex 32)",
                       opt, file, TOKEN_MIN);
  *out = strdup(line);
  memset(line, 0, sizeof(line));
  return *out != NULL ? MQPROC_OK : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
}

int mqproc__auth_new(mqproc__auth_t **out, const char *admin_file, const char *read_file,
                     int session_ttl_s, char *err) {
  mqproc__auth_t *a = calloc(1, sizeof(*a));
  int rc = MQPROC_OK;
  *out = NULL;
  if (a == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  a->ttl_s = session_ttl_s > 0 ? session_ttl_s : MQPROC__AUTH_SESSION_TTL_S;
  if (admin_file != NULL)
    rc = read_token("http-admin-token", admin_file, &a->admin, err);
  if (rc == MQPROC_OK && read_file != NULL)
    rc = read_token("http-read-token", read_file, &a->read, err);
  if (rc == MQPROC_OK && a->admin != NULL && a->read != NULL && strcmp(a->admin, a->read) == 0)
    rc = mqproc__err(err, MQPROC_ECONFIG,
                     "--http-read-token is the admin token: give readers a token of their own");
  if (rc != MQPROC_OK) {
    mqproc__auth_free(a);
    return rc;
  }
  *out = a;
  return MQPROC_OK;
}

static void forget(char *token) {
  if (token != NULL)
    memset(token, 0, strlen(token));
  free(token);
}

void mqproc__auth_free(mqproc__auth_t *a) {
  if (a == NULL)
    return;
  forget(a->admin);
  forget(a->read);
  memset(a->sessions, 0, sizeof(a->sessions));
  free(a);
}

int mqproc__auth_can_act(const mqproc__auth_t *a) {
  return a != NULL && a->admin != NULL;
}

/* The scope of a token, MQPROC__SCOPE_NONE for a wrong one; both compared every time. */
static int token_scope(const mqproc__auth_t *a, const char *token) {
  int admin = a->admin != NULL && same(token, a->admin);
  int read = a->read != NULL && same(token, a->read);
  return admin ? MQPROC__SCOPE_ADMIN : read ? MQPROC__SCOPE_READ : MQPROC__SCOPE_NONE;
}

/* The live session whose id is value, or NULL; every slot is compared (no early exit). */
static const session_t *session_of(const mqproc__auth_t *a, const char *value) {
  const session_t *found = NULL;
  int64_t now = mqproc__now_ms();
  for (int i = 0; i < MQPROC__AUTH_SESSIONS; i++) {
    const session_t *s = &a->sessions[i];
    int match = same(value, s->id);
    if (s->id[0] != '\0' && s->expires_ms > now && match)
      found = s;
  }
  return found;
}

int mqproc__auth_check(const mqproc__auth_t *a, const mqproc__http_req_t *req, int *scope) {
  const char *h = mqproc__http_header(req, "Authorization"), *c;
  const session_t *s;
  int sc;
  if (scope != NULL)
    *scope = MQPROC__SCOPE_NONE;
  if (h != NULL && strncmp(h, "Bearer ", 7) == 0 &&
      (sc = token_scope(a, h + 7)) != MQPROC__SCOPE_NONE) {
    if (scope != NULL)
      *scope = sc;
    return MQPROC__AUTH_BEARER;
  }
  c = mqproc__http_cookie(req, COOKIE);
  if (c != NULL && (s = session_of(a, c)) != NULL) {
    if (scope != NULL)
      *scope = s->scope;
    return MQPROC__AUTH_COOKIE;
  }
  return MQPROC__AUTH_NONE;
}

/* A free or expired slot, else the oldest session's (it is signed out). */
static session_t *slot(mqproc__auth_t *a, int64_t now) {
  session_t *oldest = &a->sessions[0];
  for (int i = 0; i < MQPROC__AUTH_SESSIONS; i++) {
    session_t *s = &a->sessions[i];
    if (s->id[0] == '\0' || s->expires_ms <= now)
      return s;
    if (s->made_ms < oldest->made_ms)
      oldest = s;
  }
  return oldest;
}

static peer_t *peer_of(mqproc__auth_t *a, const char *addr) {
  for (int i = 0; i < PEERS; i++)
    if (a->peers[i].addr[0] != '\0' && strcmp(a->peers[i].addr, addr) == 0)
      return &a->peers[i];
  return NULL;
}

int mqproc__auth_sign_in(mqproc__auth_t *a, const char *token, const char *peer, char *cookie,
                         size_t n) {
  unsigned char rnd[SESSION_BYTES];
  int64_t now = mqproc__now_ms();
  int sc = token != NULL ? token_scope(a, token) : MQPROC__SCOPE_NONE;
  session_t *s;
  peer_t *p;
  if (sc == MQPROC__SCOPE_NONE) {
    mqproc__auth_failed(a, peer);
    return sc;
  }
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
    MQPROC__ERROR("http: no random bytes for a session: %s", strerror(errno));
    return MQPROC__SCOPE_NONE;
  }
  s = slot(a, now);
  for (size_t i = 0; i < sizeof(rnd); i++)
    snprintf(s->id + 2 * i, 3, "%02x", rnd[i]);
  s->scope = sc;
  s->made_ms = now;
  s->expires_ms = now + (int64_t)a->ttl_s * 1000;
  snprintf(cookie, n, COOKIE "=%s; HttpOnly; SameSite=Strict; Path=/; Max-Age=%d", s->id, a->ttl_s);
  if ((p = peer_of(a, peer)) != NULL) /* a right token: its address starts afresh */
    memset(p, 0, sizeof(*p));
  return sc;
}

void mqproc__auth_sign_out(mqproc__auth_t *a, const mqproc__http_req_t *req) {
  const char *c = mqproc__http_cookie(req, COOKIE);
  session_t *s = c != NULL ? (session_t *)session_of(a, c) : NULL;
  if (s != NULL)
    memset(s, 0, sizeof(*s));
}

int mqproc__auth_backoff(const mqproc__auth_t *a, const char *peer) {
  int64_t now = mqproc__now_ms();
  for (int i = 0; i < PEERS; i++) {
    const peer_t *p = &a->peers[i];
    if (p->addr[0] != '\0' && p->until_ms > now && strcmp(p->addr, peer) == 0)
      return (int)((p->until_ms - now + 999) / 1000);
  }
  return 0;
}

/* A WARN line about wrong tokens, at most LOG_LINES_PER_MIN a minute (the rest counted and
 * told with the next line that may be written). */
static void warn_bounded(mqproc__auth_t *a, const char *line) {
  int64_t now = mqproc__now_ms();
  if (now - a->log_window_ms >= 60000) {
    if (a->log_dropped > 0)
      MQPROC__WARN("http: %d more lines about wrong tokens were not logged", a->log_dropped);
    a->log_window_ms = now;
    a->log_lines = a->log_dropped = 0;
  }
  if (a->log_lines++ < LOG_LINES_PER_MIN)
    MQPROC__WARN("%s", line);
  else
    a->log_dropped++;
}

void mqproc__auth_failed(mqproc__auth_t *a, const char *peer) {
  int64_t now = mqproc__now_ms();
  peer_t *p = peer_of(a, peer);
  char line[200];
  if (p == NULL) { /* a free slot, else the one quiet longest */
    for (int i = 0; i < PEERS; i++) {
      peer_t *q = &a->peers[i];
      if (q->addr[0] == '\0') {
        p = q;
        break;
      }
      if (p == NULL || q->last_ms < p->last_ms)
        p = q;
    }
    memset(p, 0, sizeof(*p));
    snprintf(p->addr, sizeof(p->addr), "%s", peer);
  } else if (now - p->last_ms > FORGET_MS) {
    p->failures = 0;
  }
  p->failures++;
  p->last_ms = now;
  if (p->failures < MQPROC__AUTH_FREE_TRIES) {
    snprintf(line, sizeof(line), "http: a wrong token from %s", peer);
  } else {
    int shift = p->failures - MQPROC__AUTH_FREE_TRIES, s = shift >= 6 ? BACKOFF_MAX_S : 1 << shift;
    s = s > BACKOFF_MAX_S ? BACKOFF_MAX_S : s;
    p->until_ms = now + (int64_t)s * 1000;
    snprintf(line, sizeof(line), "http: %d wrong tokens from %s: its tokens are refused for %d s",
             p->failures, peer, s);
  }
  warn_bounded(a, line);
}

const char *mqproc__auth_cross_site(const mqproc__http_req_t *req, char *why, size_t n) {
  const char *site = mqproc__http_header(req, "Sec-Fetch-Site");
  const char *origin = mqproc__http_header(req, "Origin"), *host = mqproc__http_header(req, "Host");
  if (site != NULL && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0) {
    snprintf(why, n, "refused: a %.40s request (Sec-Fetch-Site), not from this page\n", site);
    return why;
  }
  if (origin != NULL) { /* browsers send it on every POST: it must be this page's */
    const char *o = strncmp(origin, "http://", 7) == 0    ? origin + 7
                    : strncmp(origin, "https://", 8) == 0 ? origin + 8
                                                          : NULL;
    if (o == NULL || host == NULL || strcmp(o, host) != 0) {
      snprintf(why, n, "refused: a request from %.200s, not from this page\n", origin);
      return why;
    }
  }
  return NULL;
}
