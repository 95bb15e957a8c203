/* ocrd-dummy processing-server mode: an mqproc job becomes one dummy_run(). */
#include "worker.h"

#include <stdio.h>

#include "dummy.h"

const mqproc_processor_t dummy_processor = {
    .name = DUMMY_NAME,
    .version = DUMMY_VERSION,
    .description = "Bare-bones processor creates PAGE-XML and optionally copies file from input "
                   "group to output group (OCR-D/core's ocrd-dummy)",
    .process = dummy_worker_process,
    /* the description --dump-json prints (params.c), stored for the processing API */
    .ocrd_tool_json =
        "{\"executable\": \"ocrd-dummy\", \"description\": \"Bare-bones processor creates "
        "PAGE-XML and optionally copies file from input group to output group\", \"steps\": "
        "[\"preprocessing/optimization\"], \"categories\": [\"Image preprocessing\"], "
        "\"input_file_grp_cardinality\": 1, \"output_file_grp_cardinality\": 1, "
        "\"parameters\": {\"copy_files\": {\"type\": \"boolean\", \"default\": false, "
        "\"description\": \"Whether to actually copy files (true) or just create PAGE-XML as a "
        "side effect (false)\"}}}",
};

static void job_log(void *ud, dummy_log_level_t level, const char *msg) {
  static const char *const names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};
  mqproc_job_log(ud, "%s %s - %s", names[level], DUMMY_NAME, msg);
}

/* Sets the job's error (and logs it); returns 1. */
static int fail(mqproc_job_t *job, const char *msg) {
  mqproc_job_log(job, "ERROR %s - %s", DUMMY_NAME, msg);
  mqproc_job_fail(job, "%s", msg);
  return 1;
}

int dummy_worker_process(mqproc_job_t *job, void *userdata) {
  char err[DUMMY_ERR_LEN];
  dummy_opts_t opts = {
      .mets = mqproc_job_path_to_mets(job),
      .page_id = mqproc_job_page_id(job),
      .parameter_json = mqproc_job_parameters_json(job),
      /* a job of OCR-D's Processing Server: its METS server holds the METS */
      .mets_server_url = mqproc_job_mets_server_url(job),
      .log = job_log,
      .log_ud = job,
  };
  (void)userdata;
  if (opts.mets == NULL)
    return fail(job, "the job names no METS (no path_to_mets, no known workspace_id)");
  if (mqproc_job_input_file_grp_count(job) != 1 || mqproc_job_output_file_grp_count(job) != 1) {
    snprintf(err, sizeof(err), "%s takes exactly one input and one output fileGrp (got %zu, %zu)",
             DUMMY_NAME, mqproc_job_input_file_grp_count(job),
             mqproc_job_output_file_grp_count(job));
    return fail(job, err);
  }
  opts.input_grp = mqproc_job_input_file_grp(job, 0);
  opts.output_grp = mqproc_job_output_file_grp(job, 0);
  if (dummy_run(&opts, err) != 0)
    return fail(job, err);
  return 0;
}
