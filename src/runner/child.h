/* The child side of the command runner (runner_child.c): what runs between fork and
 * execve, where only async-signal-safe calls are allowed (the server has threads).
 * runner_proc.c prepares a plan before fork; mqproc__runner_fork_exec (runner_int.h)
 * forks and reads the report pipe. */
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
  pid_t server;       /* its parent's pid (the spawn helper), to tell its death from a signal */
  long max_log_bytes; /* output of one try beyond this kills it (0 = no limit) */
  struct rlimit core; /* the server's core limit: the processor gets it back */
  /* > 0: log_fd is a memfd holding the try's output so far (its header), which the server
   * reads when the try ended; output that would take it past this many bytes makes the
   * job's log file log_dir/log_sub/log_name (joblog.h's rules), the memfd's bytes are
   * moved there and it is emptied. 0: log_fd is the job's log file. */
  long log_inline_max;
  const char *log_dir, *log_sub, *log_name;
} mqproc__child_plan_t;

/* The forked child (an mqproc__child_main_fn for mqproc__runner_fork_exec, plan a
 * mqproc__child_plan_t): the supervisor of one try, see runner_child.c. Never returns. */
__attribute__((noreturn)) void mqproc__child_main(void *plan);

#endif
