/* What the runner backends share (common.c): the texts a try ends with, and the
 * pieces of starting a child process from a multi-threaded server.
 *
 * Starting a child: everything the child needs is prepared before fork (it may not
 * allocate: another thread may hold the allocator's lock); the child makes only
 * async-signal-safe calls until execve, and reports a failed step through a CLOEXEC
 * pipe, which the parent reads: EOF means execve succeeded.
 */
#ifndef MQPROC_RUNNER_INT_H
#define MQPROC_RUNNER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runner/runner.h"

/* ---- the environment of a child ---------------------------------------------------- */

/* The part of the server's environment children get (mqproc__env_passes, runner.h), with
 * room for extra more entries before the NULL; the strings are environ's own (free only
 * the array). NULL when out of memory. */
char **mqproc__runner_env(char *const *pass, size_t extra);

/* ---- how a try ended ---------------------------------------------------------------- */

/* "processor exceeded its time limit of 2 s (process group killed)" into r. */
void mqproc__runner_describe_timeout(int64_t limit_ms, mqproc__run_result_t *r);
/* A worker process that died during a try: "processor crashed: killed by signal 11
 * (Segmentation fault)" or "processor crashed: exited with status 3" into r (always a
 * failure, exit_code -1). */
void mqproc__runner_describe_crash(int wstatus, mqproc__run_result_t *r);
/* The processing function returned rc; why is mqproc_job_fail()'s text (NULL or "" when
 * it was not called). */
void mqproc__runner_function_result(int rc, const char *why, int64_t duration_ms,
                                    mqproc__run_result_t *r);

/* ---- a try's output kept in memory (common.c) --------------------------------------- */

/* Whether n bytes at s may be stored as a job's log text: UTF-8 without NUL bytes (else
 * the bytes go to the file as they are). */
int mqproc__runner_log_clean(const char *s, size_t n);
/* Appends len bytes of text to the job's log file dir/sub/name (made now, joblog.h); 0, or
 * -1 with err set. */
int mqproc__runner_log_spill(const char *dir, const char *sub, const char *name, const char *text,
                             size_t len, char *err);
/* The log of a try that failed for it (its file could not be made: why), into res: a
 * failed try, saying so after what else went wrong. */
void mqproc__runner_log_lost(mqproc__run_result_t *res, const char *why);
/* A memfd (CLOEXEC, writable) holding head: where a worker process, or the spawn helper
 * for an --exec try, writes the try's output while it stays within --log-inline-max; -1
 * with err. */
int mqproc__runner_log_memfd(const char *head, size_t len, char *err);
/* The end of a try whose output went to memfd (closed here): what stayed within max
 * bytes, or nothing once its writer moved it into the job's log file. A success's clean
 * text becomes res->log_text; any other is appended to the file dir/sub/name, made now
 * (when it cannot be, the try fails saying why). Sets res->log_file. */
void mqproc__runner_log_finish(mqproc__run_result_t *res, int memfd, size_t max, const char *dir,
                               const char *sub, const char *name);

/* ---- starting a child --------------------------------------------------------------- */

/* The fds a child sets up are 0-3; every fd it inherits from the parent is moved at or
 * above this first, so a dup2 onto 0-3 cannot clobber one of its own sources. */
#define MQPROC__CHILD_MIN_FD 4

/* What a child writes to the report pipe when a step before execve fails. */
typedef struct mqproc__child_report {
  int stage; /* MQPROC__STAGE_* */
  int err;   /* errno */
} mqproc__child_report_t;

enum {
  MQPROC__STAGE_EXEC,
  MQPROC__STAGE_SETPGID,
  MQPROC__STAGE_PRCTL,
  MQPROC__STAGE_DUP2,
  MQPROC__STAGE_RLIMIT,
  MQPROC__STAGE_PIPE,
  MQPROC__STAGE_FORK,
  MQPROC__STAGE_SIGNALFD,
  MQPROC__STAGE_JOBLOG /* the spawn helper could not make an --exec try's job log file */
};

/* The end of a failed processor's output: the spawn helper (runner/child.c) keeps the last
 * MQPROC__TAIL_BYTES bytes an --exec processor wrote (stdout and stderr share the job
 * log's pipe) and, when the processor failed, sends them with the try's end
 * (spawn/helper.h). */
#define MQPROC__TAIL_BYTES 2048
/* At most this many lines and bytes of it are shown in a try's error text. */
#define MQPROC__TAIL_LINES 10
#define MQPROC__TAIL_SHOWN 1024

/* The text shown of raw[0..n), a processor's last output (cut: it began earlier): its last
 * MQPROC__TAIL_LINES non-empty lines, valid UTF-8 (a malformed byte is '?'), without
 * control characters or terminal escape sequences (a tab is a space), lines joined by
 * " | ", at most MQPROC__TAIL_SHOWN bytes (the start cut off, then led by "…"). Into out
 * (size >= MQPROC__TAIL_SHOWN + 1); returns its length ("" when nothing is left). */
size_t mqproc__runner_tail_text(const char *raw, size_t n, int cut, char *out, size_t size);
/* Appends " — last output: <that text>" to r->error when there is any. */
void mqproc__runner_add_tail(mqproc__run_result_t *r, const char *raw, size_t n, int cut);

/* "No such file or directory" for a failed execve, else "setpgid: Operation not
 * permitted" (the step, then errno), into out. */
void mqproc__child_report_text(const mqproc__child_report_t *rep, char *out, size_t n);

/* Moves fd to at least min (CLOEXEC), closing the original; returns the new fd, or -1 with
 * err set (the original is closed then too). */
int mqproc__runner_lift_fd(int fd, int min, char *err);
/* The same with errno (spawn/sys.c: libc only, as are the next three). */
int mqproc__fd_lift(int fd, int min);
/* The whole content of the file fd, NUL-terminated (*len without the NUL), malloc'ed: 0,
 * or -1 with errno. */
int mqproc__fd_slurp(int fd, char **out, size_t *len);
/* Appends the whole content of the file from (read from its start, whatever its offset) to
 * to: 0, or -1 with errno. */
int mqproc__fd_copy(int from, int to);
/* A job log's directory and file, opened as joblog.h says, with libc alone (joblog.c, and
 * the spawn helper, which makes an --exec try's log file when its output outgrows memory):
 * dir/sub (sub made 0750 when missing), entered following no link, must belong to uid;
 * sub's fd, or -1 with errno (ELOOP: a link or no directory; EPERM: another user's). */
int mqproc__joblog_sub_open(const char *dir, const char *sub, uid_t uid);
/* name in the directory sfd, opened (made 0640) for appending, following no link, never
 * blocking, and kept only when it is a regular file of uid with one link; an fd (CLOEXEC,
 * blocking again), or -1 with errno (ELOOP: a link; ENXIO, EISDIR: no regular file; EPERM:
 * not a plain file of uid's). */
int mqproc__joblog_file_open(int sfd, const char *name, uid_t uid);
/* A CLOEXEC memfd holding len bytes of data, positioned at 0 (a reader can never block
 * the writer), sealed (no one, not the processor it is given to, can change or resize
 * the bytes); -1 with err set. */
int mqproc__runner_memfd(const char *name, const void *data, size_t len, char *err);
/* The same for a program to execveat: -1 where policy (vm.memfd_noexec=2) refuses that. */
int mqproc__runner_exec_memfd(const char *name, const void *data, size_t len, char *err);
/* Sends len bytes of buf as one message with nfds (<= 4) fds as SCM_RIGHTS: 0, or -1 with
 * errno (EMSGSIZE: sent short). */
int mqproc__send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds);
/* Receives one message of exactly len bytes into buf and up to max_fds fds (CLOEXEC; more
 * are closed) into fds, their count into *nfds: 1, 0 at EOF, -1 with errno (EPROTO: not
 * such a message; its fds are closed). */
int mqproc__recv_with_fds(int sock, void *buf, size_t len, int *fds, int max_fds, int *nfds);
/* The same for a message of at most size bytes, recvmsg's flags added: its length, 0 at
 * EOF, -1 with errno (EPROTO: longer than size, or more control data; its fds are
 * closed). */
ssize_t mqproc__recv_fds(int sock, void *buf, size_t size, int *fds, int max_fds, int *nfds,
                         int flags);
/* The whole content of the file fd (a memfd handed over with a request), NUL-terminated
 * (*len without the NUL). */
int mqproc__runner_read_fd(int fd, char **out, size_t *len, char *err);
/* The highest fd number a child might hold, for closing fds without close_range. */
int mqproc__runner_max_fd(void);

/* The child's entry: must never return (execve or mqproc__child_fail). */
typedef void (*mqproc__child_main_fn)(void *plan);

/* Forks; the child runs child_main(plan) after *report_fd (a field of plan) was set to
 * the write end of the report pipe. Returns 0 with *pid once the child's execve
 * succeeded; -1 with *rep saying which step failed (the child is reaped then). */
int mqproc__runner_fork_exec(mqproc__child_main_fn child_main, void *plan, int *report_fd,
                             pid_t *pid, mqproc__child_report_t *rep);

/* In the child, between fork and execve (async-signal-safe): */
/* Reports stage and errno on report_fd and exits 127. */
__attribute__((noreturn)) void mqproc__child_fail(int report_fd, int stage);
/* Default dispositions for every signal (the server ignores SIGPIPE; an ignored signal
 * stays ignored across execve), then on_term for SIGTERM when not NULL, then an empty
 * signal mask (the server blocks SIGCHLD/TERM/INT/HUP for its signalfd). */
void mqproc__child_reset_signals(void (*on_term)(int));
/* Marks every fd from first on CLOEXEC (close_range, or a loop up to max_fd), so only
 * 0..first-1 reach the program and a report pipe stays open until execve. */
void mqproc__child_cloexec_from(int first, int max_fd);

#endif
