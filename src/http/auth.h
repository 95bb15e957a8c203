/* The admin token of the status page's actions (--http-admin-token FILE): a browser signs
 * in once with the token and gets a session cookie (HttpOnly, SameSite=Strict, valid while
 * this process lives); a script sends "Authorization: Bearer TOKEN". Every POST is also
 * checked for coming from the page itself (Sec-Fetch-Site, Origin against Host), so
 * another site cannot make a signed-in browser act. */
#ifndef MQPROC_HTTP_AUTH_H
#define MQPROC_HTTP_AUTH_H

#include "http/http.h"

typedef struct mqproc__auth mqproc__auth_t;

enum { MQPROC__AUTH_NONE, MQPROC__AUTH_COOKIE, MQPROC__AUTH_BEARER };

/* Reads the token: the file's first line, at least 16 characters; a file every user may
 * read is refused. MQPROC_ECONFIG with err. */
int mqproc__auth_new(mqproc__auth_t **out, const char *token_file, char *err);
void mqproc__auth_free(mqproc__auth_t *a);
/* How req proves the token: MQPROC__AUTH_BEARER, _COOKIE or _NONE. */
int mqproc__auth_check(const mqproc__auth_t *a, const mqproc__http_req_t *req);
/* Whether token (a sign-in form's) is the token; compared in constant time. */
int mqproc__auth_token_ok(const mqproc__auth_t *a, const char *token);
/* The Set-Cookie value that signs a browser in. */
const char *mqproc__auth_cookie(const mqproc__auth_t *a);
/* The Set-Cookie value that signs it out. */
extern const char MQPROC__AUTH_COOKIE_CLEAR[];
/* NULL when req may act (from this page, or from a client that is no browser); else why
 * it is refused. */
const char *mqproc__auth_cross_site(const mqproc__http_req_t *req, char *why, size_t n);

#endif
