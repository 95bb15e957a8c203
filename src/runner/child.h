/* One --exec try as the spawn helper runs it (runner/child.c): the processor, started with
 * vfork straight from the helper into a process group of its own, and its output, which the
 * helper copies into the job's log. libc alone: the helper is a static program of its own
 * (spawn/helper.h).
 *
 * API (the helper's, in this order for a try):
 *   mqproc__child_start   vfork + execve of the plan's program; a step that failed before
 *                         execve is known when it returns (the child wrote it into the
 *                         helper's memory, which vfork shares)
 *   mqproc__child_read    copies what the processor wrote (the helper's loop calls it when
 *                         the pipe is readable): log, --log-inline-max spill, --max-log-size
 *   mqproc__child_reaped  the processor's wait status; what it left in the pipe is copied
 *   mqproc__child_tail    the end of its output, for the report of a failed try
 *   mqproc__child_free
 */
#ifndef MQPROC_RUNNER_CHILD_H
#define MQPROC_RUNNER_CHILD_H

#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "runner/int.h"

/* Everything a try needs, prepared by the server (runner/proc.c) and carried to the helper
 * (spawn/spawner.c); the strings are borrowed. */
typedef struct mqproc__child_plan {
  const char *path; /* resolved like execvp */
  char *const *argv;
  char *const *envp;
  int in_fd;          /* the job as JSON: the processor's stdin */
  int log_fd;         /* the job's log: its stdout and stderr go there, copied */
  long max_log_bytes; /* output of one try beyond this kills its group (0 = no limit) */
  struct rlimit core; /* the server's core limit: the processor gets it */
  /* > 0: log_fd is a memfd holding the try's output so far (its header), which the server
   * reads when the try ended; output that would take it past this many bytes makes the
   * job's log file log_dir/log_sub/log_name (joblog.h's rules), the memfd's bytes are
   * moved there and it is emptied. 0: log_fd is the job's log file. */
  long log_inline_max;
  const char *log_dir, *log_sub, *log_name;
} mqproc__child_plan_t;

/* The last MQPROC__TAIL_BYTES bytes of a processor's output, a ring. */
typedef struct mqproc__child_tail {
  char ring[MQPROC__TAIL_BYTES];
  unsigned long long seen; /* bytes ever added */
} mqproc__child_tail_t;

typedef struct mqproc__child {
  /* public: set by the helper before mqproc__child_start, then read-only */
  uint64_t id; /* the server's number for the try */
  mqproc__child_plan_t plan;
  int stopped; /* the server killed it: its end is no failure of its own, no tail */
  int ep;      /* the epoll set watching out_fd, or -1: out_fd leaves it before it is
                  closed (a processor's execve holds a copy of it for a moment, and a
                  closed fd's registration lives on while a copy does) */
  /* read-only */
  pid_t pid;           /* the processor and its group's id; 0 when it never ran */
  int out_fd;          /* the read end of its stdout+stderr (non-blocking); -1 once
                          closed */
  int reaped, wstatus; /* its wait status, as the server is to see it */
  int step_failed;     /* a step failed: step says which (no execve, or no log file) */
  mqproc__child_report_t step;
  /* private */
  int log_fd;       /* the plan's, or the job's log file once the output spilled there */
  long long copied; /* bytes of output copied into the log */
  long long kept;   /* bytes in the memfd log; -1 once the log is the file */
  int log_full;     /* killed at --max-log-size: it ends as killed by SIGXFSZ */
  mqproc__child_tail_t tail;
  struct mqproc__child *next; /* the helper's list of tries */
} mqproc__child_t;

/* Sets c's fds to none (c was zeroed): then the plan's in_fd and log_fd are c's to close. */
void mqproc__child_init(mqproc__child_t *c);

/* Starts c->plan's processor as a child of the calling process (the helper, pid helper):
 * leader of a new process group, dying with the helper (PR_SET_PDEATHSIG), its stdin the
 * job, its stdout and stderr a pipe (c->out_fd), no other fd, default signals, the plan's
 * core limit. 0 with c->pid; -1 when it never ran (c->step says why; nothing to reap).
 * Closes the plan's in_fd either way. */
int mqproc__child_start(mqproc__child_t *c, pid_t helper);

/* Copies what the processor wrote into the log (one read of at most size bytes into buf):
 * 1 when it read some, 0 when nothing is left to read (the pipe is closed: EOF, or the try
 * was cut off), -1 when nothing is there now (EAGAIN). Past --max-log-size, or when the
 * job's log file cannot be made, the group is killed and the pipe closed. */
int mqproc__child_read(mqproc__child_t *c, char *buf, size_t size);

/* The processor was reaped with wstatus (its group already killed): what is still in the
 * pipe is copied, the pipe closed. */
void mqproc__child_reaped(mqproc__child_t *c, int wstatus, char *buf, size_t size);

/* Signals the processor's group (and the processor, had it left it) unless it was reaped. */
void mqproc__child_kill(mqproc__child_t *c, int sig);

/* The end of the output when the try failed (into out, MQPROC__TAIL_BYTES; its length, 0
 * when the try succeeded or wrote nothing); *cut: more came before it. */
size_t mqproc__child_tail(const mqproc__child_t *c, char *out, int *cut);

/* Closes what c holds and frees c (one malloc'ed block; NULL allowed). */
void mqproc__child_free(mqproc__child_t *c);

#endif
