/* The status page's tokens and sessions. The admin token (--http-admin-token FILE) lets
 * the page act; a read token (--http-read-token FILE) only lets it show what the page
 * hides without a token: the stored requests and the job logs. A browser signs in once
 * with either token at /login and gets a session of its own: a random cookie value
 * (HttpOnly, SameSite=Strict) kept on the server in a table of MQPROC__AUTH_SESSIONS (the
 * oldest is dropped when a sign-in finds it full), valid for --http-session-ttl and
 * forgotten at sign-out. A script sends "Authorization: Bearer TOKEN". Wrong tokens back
 * off per client address (after MQPROC__AUTH_FREE_TRIES, refused for 1 s, 2 s, ... up to
 * a minute; their WARN lines are bounded). Every POST is also checked for coming from
 * the page itself (Sec-Fetch-Site, Origin against Host), so another site cannot make a
 * signed-in browser act. Everything runs on the loop: no locks. */
#ifndef MQPROC_HTTP_AUTH_H
#define MQPROC_HTTP_AUTH_H

#include "http/http.h"

typedef struct mqproc__auth mqproc__auth_t;

/* How a request proves a token. */
enum { MQPROC__AUTH_NONE, MQPROC__AUTH_COOKIE, MQPROC__AUTH_BEARER };
/* What that token allows. */
enum { MQPROC__SCOPE_NONE, MQPROC__SCOPE_READ, MQPROC__SCOPE_ADMIN };

#define MQPROC__AUTH_SESSIONS 64
#define MQPROC__AUTH_FREE_TRIES 5
#define MQPROC__AUTH_SESSION_TTL_S 43200 /* 12 h */

/* Reads the tokens (either file may be NULL, not both): each the file's first line, at
 * least 16 characters and shorter than 1023; a file every user may read, or equal
 * tokens, are refused. session_ttl_s <= 0: 12 h. MQPROC_ECONFIG with err. */
int mqproc__auth_new(mqproc__auth_t **out, const char *admin_file, const char *read_file,
                     int session_ttl_s, char *err);
void mqproc__auth_free(mqproc__auth_t *a);
/* Whether an admin token was given (the page may act). */
int mqproc__auth_can_act(const mqproc__auth_t *a);
/* How req proves a token (MQPROC__AUTH_*), its MQPROC__SCOPE_* into *scope (NULL: not
 * wanted). An expired or signed-out session is none. */
int mqproc__auth_check(const mqproc__auth_t *a, const mqproc__http_req_t *req, int *scope);
/* Signs a browser in with token (a sign-in form's, compared in constant time): a new
 * session and its Set-Cookie value into cookie (n bytes); returns its scope, or
 * MQPROC__SCOPE_NONE for a wrong token (counted against peer, see below). */
int mqproc__auth_sign_in(mqproc__auth_t *a, const char *token, const char *peer, char *cookie,
                         size_t n);
/* Forgets req's session (sign-out): its cookie no longer signs anything in. */
void mqproc__auth_sign_out(mqproc__auth_t *a, const mqproc__http_req_t *req);
/* The seconds peer must wait before a token of its is looked at again; 0: now. */
int mqproc__auth_backoff(const mqproc__auth_t *a, const char *peer);
/* A wrong token from peer (a sign-in form's or a Bearer's): counted, logged (bounded). */
void mqproc__auth_failed(mqproc__auth_t *a, const char *peer);
/* The Set-Cookie value that signs a browser out. */
extern const char MQPROC__AUTH_COOKIE_CLEAR[];
/* NULL when req may act (from this page, or from a client that is no browser); else why
 * it is refused. */
const char *mqproc__auth_cross_site(const mqproc__http_req_t *req, char *why, size_t n);

#endif
