/* Runner for C processors (--isolation=thread, the default): the processing function runs
 * on one of --concurrency worker threads of the server, created once (the loop's pool),
 * with a mqproc_job_t (job.c) and reports back through the loop's work completion. The cheapest way
 * to run trusted code; a crash takes the server down and a thread cannot be stopped
 * (worker.c isolates both). A job's first try keeps its output in memory (job.c):
 * when it succeeds within --log-inline-max the text goes back with the result (the store
 * keeps it in the job's row) and no file is made; a try that fails or outgrows it makes
 * the job's log file on the pool thread (a new file: on ext4 without a journal its inode
 * alone can cost a fraction of a millisecond), which also closes it. A later try opens the
 * file first, as every try once did; a log that cannot be opened fails the try (then as a
 * start failure would: nothing ran). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "runner/job.h"
#include "runner/int.h"
#include "base/util.h"

typedef struct thread_runner {
  struct mqproc__runner base; /* first: klass */
  const mqproc_processor_t *proc;
} thread_runner_t;

struct mqproc__run {
  const mqproc_processor_t *proc;
  mqproc_job_t *job;
  const char *log_dir, *log_sub, *log_name; /* borrowed: the delivery outlives the try */
  char log_head[512];
  int log_head_len;
  int log_inline; /* the output is kept in memory at first (run_spec_t.log_inline_max) */
  long log_max;
  int log_failed; /* the log could not be opened: nothing ran (log_err says why) */
  int log_lost;   /* the log file could not be made during or after the run (log_err) */
  char log_err[MQPROC_ERR_LEN];
  char *log_text; /* the output of a try that succeeded within the maximum */
  int log_file;   /* the output is in the job's log file */
  int rc;
  int64_t started_ms;
  int64_t ended_ms;
  mqproc__run_done_cb done;
  void *ud;
};

static void work(void *arg) {
  mqproc__run_t *run = arg;
  int log_fd = -1;
  if (run->log_inline)
    mqproc__job_log_buffered(run->job, run->log_dir, run->log_sub, run->log_name, run->log_head,
                             (size_t)run->log_head_len, (size_t)run->log_max);
  else if ((log_fd = mqproc__runner_open_log_at(run->log_dir, run->log_sub, run->log_name,
                                                run->log_head, run->log_head_len, run->log_err)) <
           0)
    run->log_failed = 1;
  if (!run->log_failed) {
    if (log_fd >= 0)
      mqproc__job_set_log(run->job, log_fd);
    run->rc = run->proc->process(run->job, run->proc->userdata);
    if (mqproc__job_log_end(run->job, run->rc == 0, &run->log_text, &run->log_file) < 0) {
      run->log_lost = 1;
      snprintf(run->log_err, sizeof(run->log_err), "%s", mqproc__job_log_error(run->job));
    }
  }
  run->ended_ms = mqproc__now_ms();
}

static void after(mqproc__loop_t *loop, void *arg) {
  mqproc__run_t *run = arg;
  mqproc__run_result_t res;
  (void)loop;
  mqproc__runner_function_result(run->rc, mqproc__job_error(run->job),
                                 run->ended_ms - run->started_ms, &res);
  if (run->log_failed) { /* as if the start had failed (delivery.c's run_try) */
    res.status = MQPROC_ERUNNER_SPAWN;
    res.exit_code = -1;
    snprintf(res.error, sizeof(res.error), "%s", run->log_err);
  } else if (run->log_lost) {
    mqproc__runner_log_lost(&res, run->log_err);
  }
  res.log_file = run->log_file;
  res.log_text = run->log_text; /* done's to free */
  run->done(run->ud, &res);
  mqproc__job_free(run->job);
  free(run);
}

static int thread_start(mqproc__runner_t *base, mqproc__loop_t *loop,
                        const mqproc__run_spec_t *spec, mqproc__run_done_cb done, void *ud,
                        mqproc__run_t **out, char *err) {
  thread_runner_t *r = (thread_runner_t *)base;
  mqproc__run_t *run = mqproc__calloc(1, sizeof(*run));
  int rc;
  if (run == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = mqproc__job_new(&run->job, spec, -1, err)) != MQPROC_OK) {
    free(run);
    return rc;
  }
  run->log_dir = spec->log_dir;
  run->log_sub = spec->log_sub;
  run->log_name = spec->log_name;
  run->log_head_len = mqproc__runner_log_head(spec, run->log_head, sizeof(run->log_head));
  run->log_inline = mqproc__runner_log_inline(spec, run->log_head_len);
  run->log_max = spec->log_inline_max;
  run->proc = r->proc;
  run->done = done;
  run->ud = ud;
  run->started_ms = mqproc__now_ms();
  if ((rc = mqproc__loop_work_pooled(loop, work, after, run)) != MQPROC_OK) {
    mqproc__job_free(run->job);
    free(run);
    return mqproc__err(err, MQPROC_ERUNNER_SPAWN, "cannot start a worker thread");
  }
  *out = run;
  return MQPROC_OK;
}

static void thread_kill(mqproc__runner_t *base, mqproc__run_t *run, int sig) {
  /* A thread cannot be killed safely: the function is asked to return
   * (mqproc_job_cancelled) and the job finishes on its own. */
  (void)base;
  (void)sig;
  mqproc__job_cancel(run->job);
}

static void thread_destroy(mqproc__runner_t *base) {
  free(base);
}

static const struct mqproc__runner_class thread_class = {
    "function",     /* name */
    0,              /* killable: a thread cannot be stopped safely */
    thread_start,   /* start */
    thread_kill,    /* kill */
    thread_destroy, /* destroy */
};

int mqproc__runner_thread_new(mqproc__runner_t **out, const mqproc_processor_t *processor,
                              mqproc__loop_t *loop, int threads, char *err) {
  thread_runner_t *r = mqproc__calloc(1, sizeof(*r));
  if (r == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (mqproc__loop_pool(loop, threads) != MQPROC_OK) {
    free(r);
    return mqproc__err(err, MQPROC_ESYS, "cannot start %d worker thread(s)", threads);
  }
  r->base.klass = &thread_class;
  r->proc = processor;
  *out = &r->base;
  return MQPROC_OK;
}
