/* The child side of the command runner (runner_child.c): what runs between fork and
 * execve, where only async-signal-safe calls are allowed (the server has threads).
 * runner_proc.c prepares a plan before fork and reads the report pipe after it. */
#ifndef MQPROC_RUNNER_CHILD_H
#define MQPROC_RUNNER_CHILD_H

#include <sys/resource.h>
#include <sys/types.h>

/* Everything the child needs, prepared before fork (the child may not allocate). */
typedef struct mqproc__child_plan {
  const char *path; /* resolved like execvp */
  char *const *argv;
  char *const *envp;
  int in_fd;          /* the job as JSON: the processor's stdin */
  int log_fd;         /* the job's log: its stdout and stderr go there, copied */
  int report_fd;      /* write end of the CLOEXEC pipe: EOF in the parent = exec succeeded */
  pid_t server;       /* the server's pid, to tell its death from a signal */
  long max_log_bytes; /* output of one try beyond this kills it (0 = no limit) */
  struct rlimit core; /* the server's core limit: the processor gets it back */
} mqproc__child_plan_t;

/* What the child writes to the report pipe when it cannot exec. */
typedef struct mqproc__child_report {
  int stage; /* MQPROC__STAGE_* */
  int err;   /* errno */
} mqproc__child_report_t;

enum {
  MQPROC__STAGE_EXEC,
  MQPROC__STAGE_SETPGID,
  MQPROC__STAGE_PRCTL,
  MQPROC__STAGE_DUP2,
  MQPROC__STAGE_PIPE,
  MQPROC__STAGE_FORK,
  MQPROC__STAGE_SIGNALFD
};
extern const char *const mqproc__stage_names[];

/* The forked child: the supervisor of one try (see runner_child.c). Never returns. */
__attribute__((noreturn)) void mqproc__child_main(const mqproc__child_plan_t *p);

#endif
