/* ocrd-dummy processing-server mode: an mqproc job becomes one dummy_run(). */
#ifndef OCRD_DUMMY_WORKER_H
#define OCRD_DUMMY_WORKER_H

#include <mqproc/mqproc.h>

/* The processor handed to mqproc_main(): name ocrd-dummy, process = dummy_worker_process. */
extern const mqproc_processor_t dummy_processor;

/* The mqproc processing function: path_to_mets, the one input and output fileGrp, page_id
 * and parameters from the job; log lines go to the job log. Returns 0, or 1 after
 * mqproc_job_fail() said why. */
int dummy_worker_process(mqproc_job_t *job, void *userdata);

#endif
