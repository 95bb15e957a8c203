/* The sweeper (sweeper.c): republishes jobs of dead early-acked holders and sends the
 * outcomes their holders never sent. */
#ifndef MQPROC_SWEEPER_H
#define MQPROC_SWEEPER_H

#include "server/server.h"

/* One sweep, if one is due (every half lease; never while the store is away, the broker
 * is down or blocked, or the server stops). Called from the server's tick. */
void mqproc__sweeper_run(mqproc__server_t *srv);
/* The broker settled the republish of job_id with status. */
void mqproc__sweeper_confirmed(mqproc__server_t *srv, const char *job_id, int status);

#endif
