/* The spawn helper of the command runner (spawn/spawner.c): one small process per server,
 * started at the first try, that runs every try's processor as its own child and
 * supervises it (spawn/helper.c), so the server's own image is never copied per try and
 * a try costs one process, the processor's. The helper is a static program of its own,
 * exec'd from a memfd (spawn/helper.h), so the processes it starts copy a dozen
 * mappings, not the two hundred of a server linked to libpq, libcurl and OpenSSL.
 *
 * The loop only sends a request and goes on: the helper says when a try's processor runs
 * (its pid) and when the try has ended (its wait status, a step that failed, the end of a
 * failed processor's output), both as events the loop reads. The helper keeps the
 * guarantees: every processor leads its own process group and is its child (it reaps it,
 * kills what the try left in its group, and tells the server); it dies with the server
 * (PR_SET_PDEATHSIG), killing every try's group first, and its processors die with it
 * (theirs); when it dies alone, every try ends as killed and this side kills the groups it
 * was told of. It holds no fd of the server's but its two sockets. A helper that does not
 * say a try runs within 10 s of the request is taken for hung: it is killed, and its
 * tries end (those it never started as "cannot start"); the next try starts a new one. */
#ifndef MQPROC_RUNNER_SPAWNER_H
#define MQPROC_RUNNER_SPAWNER_H

#include <stdint.h>
#include <sys/types.h>

#include "loop/loop.h"
#include "runner/child.h"
#include "runner/int.h"

typedef struct mqproc__spawner mqproc__spawner_t;

/* How a try ended, as the helper saw it. */
typedef struct mqproc__spawn_end {
  int wstatus;                 /* the processor's (SIGXFSZ: killed for a full log) */
  int step_failed;             /* it never ran, or its job log could not be made: */
  mqproc__child_report_t step; /* the step and its errno */
  const char *tail;            /* a failed processor's last output (tail_len bytes) */
  size_t tail_len;
  int tail_cut; /* more output came before it */
} mqproc__spawn_end_t;

/* Called on the loop once the try has ended; end is valid during the call only. */
typedef void (*mqproc__spawner_end_cb)(void *ud, const mqproc__spawn_end_t *end);

/* Forks the helper (from the calling thread, which must live as long as the server: the
 * helper dies with it) and watches it on loop. */
int mqproc__spawner_new(mqproc__spawner_t **out, mqproc__loop_t *loop, char *err);

/* Has the helper start plan's processor; returns at once. The fds of plan are passed, not
 * taken: the caller closes its copies (the helper writes the output into its log_fd until
 * the try has ended). Returns 0 with the try's *id, or -1 with *rep (the helper is gone and
 * cannot be started again, or the request could not be made). cb runs once when the try
 * has ended, never from within this call. */
int mqproc__spawner_spawn(mqproc__spawner_t *s, const mqproc__child_plan_t *plan,
                          mqproc__spawner_end_cb cb, void *ud, uint64_t *id,
                          mqproc__child_report_t *rep);

/* Sends sig to the try's process group (and its processor) unless it has ended. */
void mqproc__spawner_kill(mqproc__spawner_t *s, uint64_t id, int sig);

/* The try's processor (its group's id) once the helper said it runs; else 0. */
pid_t mqproc__spawner_pid(const mqproc__spawner_t *s, uint64_t id);

/* Stops the helper (it kills what runs) and forgets every pending try without calling
 * its cb. */
void mqproc__spawner_free(mqproc__spawner_t *s);

#endif
