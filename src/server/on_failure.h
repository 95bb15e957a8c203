/* --on-failure 'CMD ARGS…' (Batch Master's error handler): a command run once when a job
 * of this server ends FAILED. It gets on stdin
 *   {"job_id", "processor_name", "state": "FAILED", "attempt", "error", "log_path",
 *    "worker_id", "request": {the job message}}
 * and appends its output to the job's log; it runs in a process group of its own with the
 * processors' clean environment (no shell, argv as split at start), is killed with its
 * group after --on-failure-timeout, and how it ended is logged. It is never retried, and
 * runs at most once per FAILED outcome (a server that dies between recording FAILED and
 * starting it does not run it). The loop never waits for it: its end is a child event.
 * At most --on-failure-max run at once: the handlers of further FAILED jobs wait in order
 * (up to 1000; beyond that one is not run, logged with its job) and start as running ones
 * end; those still waiting at exit are not run (logged). */
#ifndef MQPROC_ON_FAILURE_H
#define MQPROC_ON_FAILURE_H

#include "server/server.h"

/* Splits --on-failure (when given); MQPROC_ECONFIG with err when it does not split. */
int mqproc__on_failure_init(mqproc__server_t *srv, char *err);
/* Starts the handler for a job that just ended FAILED, or queues it while
 * --on-failure-max run (no-op without --on-failure). */
void mqproc__on_failure_run(mqproc__server_t *srv, const char *job_id, int attempt,
                            const char *error, const char *request_json, const char *log_path);
/* Kills the process groups of handlers still running and frees what they and the waiting
 * ones hold. */
void mqproc__on_failure_free(mqproc__server_t *srv);

#endif
