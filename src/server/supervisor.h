/* `processing-server --instances N`: a supervisor process that runs N servers as its
 * children (its own program again, same arguments, MQPROC_INSTANCE=k in the environment),
 * restarts one that dies or whose loop stopped (the systemd watchdog), slows down crash
 * loops, forwards SIGTERM/SIGINT for the graceful stop of all and speaks for them to
 * systemd. */
#ifndef MQPROC_SUPERVISOR_H
#define MQPROC_SUPERVISOR_H

#include "base/config.h"

/* A server that ends with this status asks to be started again at once: it recycled
 * itself after --max-jobs-per-child jobs (EX_TEMPFAIL). */
#define MQPROC__EXIT_RECYCLE 75

/* The environment variable that marks a supervised server (its instance number). */
#define MQPROC__INSTANCE_ENV "MQPROC_INSTANCE"

/* A supervised server's --http (instance k, 1-based): ADDR:PORT becomes ADDR:PORT+k-1,
 * so N instances on one host each listen (port 0 stays 0: each picks one). MQPROC_ECONFIG
 * with err past port 65535. */
int mqproc__instance_http(mqproc__config_t *cfg, int instance, char *err);

/* Runs the supervisor until its children are gone after a stop; returns the exit code
 * (0 after a graceful stop or when every child drained; 2 when a child reported a
 * configuration error). argv: the program's own, passed on to the children. */
int mqproc__supervise(const mqproc__config_t *cfg, int argc, char **argv);

#endif
