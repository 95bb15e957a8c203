/* Runner interface: run one try of a job off the event loop and report how it ended.
 *
 * Backends: proc.c (an external command: fork + execve of an argv array, the job
 * as JSON on stdin, output to the job's log file, in its own process group),
 * thread.c (a C processing function on a worker thread: --isolation=thread) and
 * worker.c (a C processing function in pre-started worker processes:
 * --isolation=process). The loop learns of the end through a child watch, a work
 * completion or a worker's reply; the runner never touches the broker or the store.
 * What the backends share is in int.h.
 */
#ifndef MQPROC_RUNNER_H
#define MQPROC_RUNNER_H

#include <stdint.h>

#include "codec/codec.h"
#include "loop/loop.h"
#include "mqproc/mqproc.h"

typedef struct mqproc__runner mqproc__runner_t;
typedef struct mqproc__run mqproc__run_t; /* one try in progress */

typedef struct mqproc__run_spec {
  const mqproc__msg_t *msg;    /* borrowed until done */
  const char *request_json;    /* the message as JSON text (stdin of a command) */
  const char *headers_json;    /* its AMQP headers as a JSON object text, or NULL: a command
                                  finds them under "headers" on stdin */
  const char *mets_path;       /* path_to_mets, or the workspace_id's METS; NULL if neither */
  const char *mets_server_url; /* the METS server OCR-D's worker would pass (ocrd_argv.h),
                                  NULL when none: --mets-server-url, mqproc_job_mets_server_url */
  int attempt;
  int try_no;           /* over the whole job, as recorded in the store */
  const char *log_path; /* appended to: log_dir/log_sub/log_name (runner_open_log) */
  const char *log_dir;
  const char *log_sub;
  const char *log_name;
  const char *worker_id;
  int64_t time_limit_ms; /* 0 = none: kill the try after this long */
  long max_log_bytes;    /* a try's output beyond this kills it (0 = no limit) */
  /* > 0: the try's output (its header line included) is kept in memory while it stays within
   * this many bytes, and handed back in the result when the try succeeds: the job's log file
   * is made only for a try that fails or outgrows it (then with that output first). 0: the
   * output goes to the file from the start (a later try of a job whose file may exist). */
  long log_inline_max;
} mqproc__run_spec_t;

/* Room for a try's error text: the reason, and for a command the end of its output
 * (MQPROC__TAIL_SHOWN bytes at most, int.h). */
#define MQPROC__RUN_ERROR_LEN 2048

typedef struct mqproc__run_result {
  int status;      /* MQPROC_OK, MQPROC_ERUNNER_FAILED, _SPAWN or _TIMEOUT */
  int exit_code;   /* -1 when the process did not exit normally */
  int term_signal; /* 0 unless killed by a signal */
  int64_t duration_ms;
  char error[MQPROC__RUN_ERROR_LEN]; /* "" on success */
  int log_file;   /* the try's output is in the job's log file (made or appended to) */
  char *log_text; /* else, for a try that succeeded: its output (NUL-terminated UTF-8 without
                     NUL bytes, the header line first); malloc'ed, the done callback's to free */
} mqproc__run_result_t;

/* Called on the loop when the try ended (owning r->log_text); the run handle is freed right
 * after. */
typedef void (*mqproc__run_done_cb)(void *ud, const mqproc__run_result_t *r);

struct mqproc__runner_class {
  const char *name;
  /* killable: kill() really stops a try (a process can be killed, a thread cannot). */
  int killable;
  /* start: begin a try; on error done is never called and *out is untouched. */
  int (*start)(mqproc__runner_t *r, mqproc__loop_t *loop, const mqproc__run_spec_t *spec,
               mqproc__run_done_cb done, void *ud, mqproc__run_t **out, char *err);
  /* kill: ask a try to stop (signal for a process group; ignored by threads). */
  void (*kill)(mqproc__runner_t *r, mqproc__run_t *run, int sig);
  /* destroy: free the runner (no try may be in progress). */
  void (*destroy)(mqproc__runner_t *r);
};

struct mqproc__runner {
  const struct mqproc__runner_class *klass;
};

typedef struct mqproc__proc_opts {
  int ocrd_cli;               /* append OCR-D's processor arguments per job (ocrd_argv.h) */
  const char *ocrd_log_level; /* their --log-level (copied) */
  int ocrd_check;             /* check the output of an OCR-D try that exited 0 (ocrd_check.h) */
  char *const *pass_env;      /* --pass-env: NAME or PREFIX* (copied; NULL = none) */
} mqproc__proc_opts_t;

/* Whether the variable kv ("NAME=value") of the server's environment reaches processors
 * (common.c has the list); pass as mqproc__proc_opts_t.pass_env. */
int mqproc__env_passes(const char *kv, char *const *pass);

/* argv: NULL-terminated, copied. Fails with MQPROC_ECONFIG and the reason when argv[0]
 * cannot be started now (not in PATH, a directory, not executable): checked at start. */
int mqproc__runner_proc_new(mqproc__runner_t **out, char *const *argv,
                            const mqproc__proc_opts_t *opts, char *err);
/* processor: borrowed for the runner's lifetime. */
int mqproc__runner_thread_new(mqproc__runner_t **out, const mqproc_processor_t *processor,
                              mqproc__loop_t *loop, int threads, char *err);
/* Starts n_workers worker processes running processor (borrowed) now, watched by loop
 * (which must outlive the runner), with the environment children get (pass_env as
 * --pass-env); fails when one cannot start. */
int mqproc__runner_worker_new(mqproc__runner_t **out, mqproc__loop_t *loop,
                              const mqproc_processor_t *processor, int n_workers,
                              char *const *pass_env, char *err);
/* The worker process's main (`<program> __mqproc-worker`, worker_main.c); returns
 * the exit code once the server closes its socket. */
int mqproc__runner_worker_main(const mqproc_processor_t *processor);

static inline int mqproc__runner_start(mqproc__runner_t *r, mqproc__loop_t *loop,
                                       const mqproc__run_spec_t *spec, mqproc__run_done_cb done,
                                       void *ud, mqproc__run_t **out, char *err) {
  return r->klass->start(r, loop, spec, done, ud, out, err);
}
static inline void mqproc__runner_kill(mqproc__runner_t *r, mqproc__run_t *run, int sig) {
  r->klass->kill(r, run, sig);
}
/* Whether kill() really stops a try (a process can be killed, a thread cannot). */
static inline int mqproc__runner_killable(const mqproc__runner_t *r) {
  return r->klass->killable;
}
static inline void mqproc__runner_destroy(mqproc__runner_t *r) {
  if (r != NULL)
    r->klass->destroy(r);
}

/* Whether spec's try keeps its output in memory at first (spec->log_inline_max, and a
 * header of head_len bytes that fits in it). */
int mqproc__runner_log_inline(const mqproc__run_spec_t *spec, int head_len);
/* A try's job log: the header line of this try (into head, n bytes; its length), then the
 * open (creating its directory as needed, privately, following no link: joblog.h) for
 * appending and the write of head: an fd, or -1 with err set. Callable from any thread
 * (the C runner's pool threads open their jobs' logs themselves: a new file's inode is the
 * loop's costliest system call on some filesystems). */
int mqproc__runner_log_head(const mqproc__run_spec_t *spec, char *head, size_t n);
int mqproc__runner_open_log_at(const char *dir, const char *sub, const char *name, const char *head,
                               int head_len, char *err);

/* Describes a wait status ("exit status 3", "killed by signal 9 (Killed)") into r. */
void mqproc__runner_describe(int wstatus, mqproc__run_result_t *r);

#endif
