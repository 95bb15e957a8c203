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
/* The try's output is kept in memory, starting with head (head_len bytes), while it stays
 * within max bytes; beyond, the job's log file dir/sub/name (borrowed for the try) is made
 * and takes it. For a job made with log_fd -1 (the thread runner). */
void mqproc__job_log_buffered(mqproc_job_t *job, const char *dir, const char *sub, const char *name,
                              const char *head, size_t head_len, size_t max);
/* The same with the output in memfd (owned from now on), which holds held bytes already:
 * the worker process's, whose server reads the memfd when the try ended (an empty one: the
 * output went to the file). For a job made with log_fd -1. */
void mqproc__job_log_memfd(mqproc_job_t *job, int memfd, size_t held, const char *dir,
                           const char *sub, const char *name, size_t max);
/* The try ended (ok: it succeeded) and its output is settled: kept in memory, clean text
 * and ok, it is handed over in *text (malloc'ed, the caller's); else it goes to the log
 * file, made now when it was not (*in_file: the output is in the file), which is closed.
 * -1 when the file could not be made (mqproc__job_log_error says why: the try fails). */
int mqproc__job_log_end(mqproc_job_t *job, int ok, char **text, int *in_file);
/* Why the job's log file could not be made, or NULL. */
const char *mqproc__job_log_error(const mqproc_job_t *job);
/* The text set by mqproc_job_fail(), or NULL. */
const char *mqproc__job_error(const mqproc_job_t *job);
/* An operator cancelled the job: mqproc_job_cancelled() says so from now on. */
void mqproc__job_cancel(mqproc_job_t *job);

#endif
