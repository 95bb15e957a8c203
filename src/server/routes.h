/* A processing server's --http endpoint: /metrics, /healthz, /readyz and the status page,
 * served from the server's loop (http.h), the page's reads on its reader (dash.h). */
#ifndef MQPROC_HTTP_SERVE_H
#define MQPROC_HTTP_SERVE_H

#include "server/server.h"

typedef struct mqproc__serve mqproc__serve_t;

/* Starts listening when --http is given (else does nothing); MQPROC_ECONFIG with err. */
int mqproc__serve_start(mqproc__server_t *srv, char *err);
/* Stops listening (answers what waits); the loop still exists. */
void mqproc__serve_stop(mqproc__server_t *srv);
/* Frees it all; after the loop stopped. */
void mqproc__serve_free(mqproc__server_t *srv);

#endif
