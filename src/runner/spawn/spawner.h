/* The spawn helper of the command runner (runner_spawner.c): one small process per
 * server, started once, that forks each try's supervisor, so the server's own image is not
 * copied per try (a fork of the multi-threaded server cost page-table copies and, while
 * the supervisor lived, a copy-on-write fault with a TLB shootdown for every page the
 * server wrote: most of an `--exec` try's cost). The helper is a static program of its
 * own, exec'd from a memfd (runner_helper.h), so its forks copy a dozen mappings, not the
 * two hundred of a server linked to libpq, libcurl and OpenSSL.
 *
 * The helper keeps the guarantees the server gave when it forked supervisors itself:
 * every supervisor is its child (it reaps them, kills what a finished try left in its
 * group, and reports the exit status to the server), it dies with the server
 * (PR_SET_PDEATHSIG), and its supervisors die with it (theirs). It holds no fd of the
 * server's but its two sockets. */
#ifndef MQPROC_RUNNER_SPAWNER_H
#define MQPROC_RUNNER_SPAWNER_H

#include <sys/types.h>

#include "loop/loop.h"
#include "runner/child.h"
#include "runner/int.h"

typedef struct mqproc__spawner mqproc__spawner_t;

/* Called on the loop when the supervisor pid ended, with its wait status. */
typedef void (*mqproc__spawner_exit_cb)(void *ud, pid_t pid, int wstatus);

/* Forks the helper (from the calling thread, which must live as long as the server: the
 * helper dies with it) and watches it on loop. */
int mqproc__spawner_new(mqproc__spawner_t **out, mqproc__loop_t *loop, char *err);

/* Has the helper fork a supervisor running mqproc__child_main(plan) (plan->server is
 * ignored: the helper is its parent). The fds of plan are passed, not taken: the caller
 * closes its copies. Returns 0 with *pid, or -1 with *rep (the helper could not fork, or
 * is gone: a later call starts a new one). cb runs once when pid has ended. */
int mqproc__spawner_spawn(mqproc__spawner_t *s, const mqproc__child_plan_t *plan,
                          mqproc__spawner_exit_cb cb, void *ud, pid_t *pid,
                          mqproc__child_report_t *rep);

/* Sends sig to pid's process group (to pid itself when the group is gone) unless pid has
 * already ended. */
void mqproc__spawner_kill(mqproc__spawner_t *s, pid_t pid, int sig);

/* Kills the helper (its supervisors kill their groups) and forgets every pending exit. */
void mqproc__spawner_free(mqproc__spawner_t *s);

#endif
