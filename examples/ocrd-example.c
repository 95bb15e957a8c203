/* ocrd-example: a C processor built on libmqproc, used by the demo and the tests.
 *
 * It logs what it was asked to do (and its parameters) into the job log, then follows its
 * parameters:
 *   "sleep_ms": N        work for N ms
 *   "fail": true         fail every try (the error is recorded)
 *   "fail_tries": N      fail the first N tries of the job, then succeed
 *   "marker": "/path"    append "<job_id> <attempt> <try>\n" to this file (a visible
 *                        side effect: how many times did the job really run?)
 *   "log_header": "name" log "header name=<value>" (the message's AMQP header)
 *   "log_lines": N       log N more lines (a chatty job: its log outgrows memory)
 * and, for the tests of --isolation=process (on a thread they take the server down or
 * hold its slot for good):
 *   "crash": true        die of SIGSEGV
 *   "hang": true         never return
 *
 *   ocrd-example processing-server --queue=amqp://… --database=postgresql://…
 *   ocrd-example -m /data/ws/mets.xml -I OCR-D-IMG -P sleep_ms 100     (one job, here)
 */
#include <jansson.h>
#include <mqproc/mqproc.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static int append_marker(mqproc_job_t *job, const char *path) {
  FILE *f = fopen(path, "a");
  if (f == NULL) {
    mqproc_job_fail(job, "cannot open marker file %s", path);
    return -1;
  }
  fprintf(f, "%s %d %d\n", mqproc_job_id(job), mqproc_job_attempt(job), mqproc_job_try(job));
  fclose(f);
  return 0;
}

static int process(mqproc_job_t *job, void *userdata) {
  json_t *params = json_loads(mqproc_job_parameters_json(job), 0, NULL);
  const char *marker = json_string_value(json_object_get(params, "marker"));
  long sleep = (long)json_integer_value(json_object_get(params, "sleep_ms"));
  long fail_tries = (long)json_integer_value(json_object_get(params, "fail_tries"));
  long lines = (long)json_integer_value(json_object_get(params, "log_lines"));
  int rc = 0;
  (void)userdata;
  mqproc_job_log(job, "ocrd-example: job %s, METS %s, %zu input group(s), first %s",
                 mqproc_job_id(job),
                 mqproc_job_path_to_mets(job) ? mqproc_job_path_to_mets(job) : "(workspace)",
                 mqproc_job_input_file_grp_count(job), mqproc_job_input_file_grp(job, 0));
  mqproc_job_log(job, "parameters %s", mqproc_job_parameters_json(job));
  if (json_is_string(json_object_get(params, "log_header"))) {
    const char *name = json_string_value(json_object_get(params, "log_header"));
    const char *value = mqproc_job_header(job, name);
    mqproc_job_log(job, "header %s=%s (all: %s)", name, value != NULL ? value : "(none)",
                   mqproc_job_headers_json(job));
  }
  for (long i = 1; i <= lines; i++)
    mqproc_job_log(job, "ocrd-example: line %ld of %ld", i, lines);
  if (json_is_true(json_object_get(params, "crash")))
    raise(SIGSEGV);
  while (json_is_true(json_object_get(params, "hang")))
    pause();
  if (sleep > 0)
    sleep_ms(sleep);
  if (marker != NULL)
    rc = append_marker(job, marker);
  if (rc == 0 &&
      (json_is_true(json_object_get(params, "fail")) || mqproc_job_try(job) <= fail_tries)) {
    mqproc_job_fail(job, "failing on purpose (try %d)", mqproc_job_try(job));
    rc = 1;
  }
  json_decref(params);
  return rc;
}

/* Its ocrd-tool description: what --dump-json prints and --help lists. */
static const char TOOL_JSON[] =
    "{\"executable\": \"ocrd-example\","
    " \"description\": \"example C processor: logs the job, optionally sleeps, fails or marks\","
    " \"categories\": [], \"steps\": [],"
    " \"parameters\": {"
    "  \"sleep_ms\": {\"type\": \"number\", \"format\": \"integer\", \"default\": 0,"
    "   \"description\": \"work for this many milliseconds\"},"
    "  \"fail\": {\"type\": \"boolean\", \"default\": false, \"description\": \"fail every try\"},"
    "  \"fail_tries\": {\"type\": \"number\", \"format\": \"integer\", \"default\": 0,"
    "   \"description\": \"fail the first N tries of the job, then succeed\"},"
    "  \"marker\": {\"type\": \"string\", \"required\": false,"
    "   \"description\": \"append '<job_id> <attempt> <try>' to this file\"},"
    "  \"log_header\": {\"type\": \"string\", \"required\": false,"
    "   \"description\": \"log the value of this AMQP header of the message\"},"
    "  \"crash\": {\"type\": \"boolean\", \"default\": false,"
    "   \"description\": \"die of SIGSEGV (tests of --isolation=process)\"},"
    "  \"hang\": {\"type\": \"boolean\", \"default\": false,"
    "   \"description\": \"never return (tests of --isolation=process)\"}}}";

int main(int argc, char **argv) {
  static const mqproc_processor_t processor = {
      .name = "ocrd-example",
      .version = "1.0.0",
      .description = "example C processor: logs the job, optionally sleeps, fails or marks",
      .process = process,
      .ocrd_tool_json = TOOL_JSON,
  };
  return mqproc_main(argc, argv, &processor);
}
