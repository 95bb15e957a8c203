/* The job handed to a C processing function (the public mqproc_job_t). */
#ifndef MQPROC_JOB_H
#define MQPROC_JOB_H

#include "mqproc/mqproc.h"
#include "runner/runner.h"

/* Builds a job for one try; on success takes ownership of log_fd (closed by
 * mqproc__job_free), on failure leaves it to the caller. */
int mqproc__job_new(mqproc_job_t **out, const mqproc__run_spec_t *spec, int log_fd, char *err);
void mqproc__job_free(mqproc_job_t *job);
/* Gives the job its log (owned from now on), for a job made with log_fd -1. */
void mqproc__job_set_log(mqproc_job_t *job, int log_fd);
/* The text set by mqproc_job_fail(), or NULL. */
const char *mqproc__job_error(const mqproc_job_t *job);
/* An operator cancelled the job: mqproc_job_cancelled() says so from now on. */
void mqproc__job_cancel(mqproc_job_t *job);

#endif
