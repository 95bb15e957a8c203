/* The admin token and its session cookie (auth.h). */
#include "http/auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>

#include "mqproc/mqproc.h"
#include "base/util.h"

#define COOKIE "mqproc_admin"
#define TOKEN_MIN 16

struct mqproc__auth {
  char *token;
  char session[65]; /* 32 random bytes, hex */
  char set_cookie[160];
};

const char MQPROC__AUTH_COOKIE_CLEAR[] = COOKIE "=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0";

static int same(const char *a, const char *b) { /* constant time in b's length */
  size_t la = strlen(a), lb = strlen(b);
  unsigned char d = la != lb;
  for (size_t i = 0; i < lb; i++)
    d |= (unsigned char)(a[i < la ? i : 0] ^ b[i]);
  return d == 0;
}

int mqproc__auth_new(mqproc__auth_t **out, const char *file, char *err) {
  mqproc__auth_t *a;
  struct stat st;
  unsigned char rnd[32];
  char line[1024];
  FILE *f;
  size_t n;
  *out = NULL;
  if ((f = fopen(file, "r")) == NULL)
    return mqproc__err(err, MQPROC_ECONFIG, "--http-admin-token %s: %s", file, strerror(errno));
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH)) {
    fclose(f);
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--http-admin-token %s: every user may read it; chmod 600 it first", file);
  }
  if (fgets(line, sizeof(line), f) == NULL)
    line[0] = '\0';
  fclose(f);
  n = strlen(line);
  while (n > 0 &&
         (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
    line[--n] = '\0';
  if (n < TOKEN_MIN)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--http-admin-token %s: the token (its first line) needs at least %d "
                       "characters (e.g. openssl rand -hex 32)",
                       file, TOKEN_MIN);
  if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
    return mqproc__err(err, MQPROC_ESYS, "no random bytes for the session: %s", strerror(errno));
  if ((a = calloc(1, sizeof(*a))) == NULL || (a->token = strdup(line)) == NULL) {
    free(a);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < sizeof(rnd); i++)
    snprintf(a->session + 2 * i, 3, "%02x", rnd[i]);
  snprintf(a->set_cookie, sizeof(a->set_cookie), COOKIE "=%s; HttpOnly; SameSite=Strict; Path=/",
           a->session);
  memset(line, 0, sizeof(line));
  *out = a;
  return MQPROC_OK;
}

void mqproc__auth_free(mqproc__auth_t *a) {
  if (a == NULL)
    return;
  memset(a->token, 0, strlen(a->token));
  free(a->token);
  free(a);
}

int mqproc__auth_token_ok(const mqproc__auth_t *a, const char *token) {
  return token != NULL && same(token, a->token);
}

int mqproc__auth_check(const mqproc__auth_t *a, const mqproc__http_req_t *req) {
  const char *h = mqproc__http_header(req, "Authorization"), *c;
  if (h != NULL && strncmp(h, "Bearer ", 7) == 0 && same(h + 7, a->token))
    return MQPROC__AUTH_BEARER;
  c = mqproc__http_cookie(req, COOKIE);
  if (c != NULL && same(c, a->session))
    return MQPROC__AUTH_COOKIE;
  return MQPROC__AUTH_NONE;
}

const char *mqproc__auth_cookie(const mqproc__auth_t *a) {
  return a->set_cookie;
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
