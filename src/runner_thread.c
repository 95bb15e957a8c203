/* Runner for C processors (--isolation=thread, the default): the processing function runs
 * on one of --concurrency worker threads of the server, created once (the loop's pool),
 * with a mqproc_job_t (job.c) and reports back through the loop's work completion. The cheapest way
 * to run trusted code; a crash takes the server down and a thread cannot be stopped
 * (runner_worker.c isolates both). */
#include <stdlib.h>
#include <unistd.h>

#include "job.h"
#include "runner_int.h"
#include "util.h"

typedef struct thread_runner {
  struct mqproc__runner base; /* first: klass */
  const mqproc_processor_t *proc;
} thread_runner_t;

struct mqproc__run {
  const mqproc_processor_t *proc;
  mqproc_job_t *job;
  int rc;
  int64_t started_ms;
  int64_t ended_ms;
  mqproc__run_done_cb done;
  void *ud;
};

static void work(void *arg) {
  mqproc__run_t *run = arg;
  run->rc = run->proc->process(run->job, run->proc->userdata);
  run->ended_ms = mqproc__now_ms();
}

static void after(mqproc__loop_t *loop, void *arg) {
  mqproc__run_t *run = arg;
  mqproc__run_result_t res;
  (void)loop;
  mqproc__runner_function_result(run->rc, mqproc__job_error(run->job),
                                 run->ended_ms - run->started_ms, &res);
  run->done(run->ud, &res);
  mqproc__job_free(run->job);
  free(run);
}

static int thread_start(mqproc__runner_t *base, mqproc__loop_t *loop,
                        const mqproc__run_spec_t *spec, mqproc__run_done_cb done, void *ud,
                        mqproc__run_t **out, char *err) {
  thread_runner_t *r = (thread_runner_t *)base;
  mqproc__run_t *run = mqproc__calloc(1, sizeof(*run));
  int log_fd, rc;
  if (run == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((log_fd = mqproc__runner_open_log(spec, err)) < 0) {
    free(run);
    return MQPROC_ERUNNER_SPAWN;
  }
  if ((rc = mqproc__job_new(&run->job, spec, log_fd, err)) != MQPROC_OK) {
    close(log_fd);
    free(run);
    return rc;
  }
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
