/* mqproc: turn a processing function into a message-broker-backed processing server.
 *
 * This is the whole public API. A C processor fills an mqproc_processor_t and hands
 * it to mqproc_main() from its own main():
 *
 *   static int process(mqproc_job_t *job, void *userdata) {
 *     mqproc_job_log(job, "working on %s", mqproc_job_path_to_mets(job));
 *     return 0;                       // 0 = success, anything else = failure
 *   }
 *   int main(int argc, char **argv) {
 *     static const mqproc_processor_t p = {.name = "ocrd-foo", .version = "1.0",
 *                                          .process = process};
 *     return mqproc_main(argc, argv, &p);
 *   }
 *
 * and gets `ocrd-foo processing-server --queue=amqp://… --database=postgresql://…`, and
 * OCR-D's processor command line, one job here and now (no queue, no database):
 * `ocrd-foo -m mets.xml -I OCR-D-IMG -O OCR-D-FOO -P key value` (exit status 0 on success).
 *
 * Ownership: every const char * returned by an mqproc_job_* accessor is owned by the
 * job and valid until the processing function returns; do not free it.
 */
#ifndef MQPROC_MQPROC_H
#define MQPROC_MQPROC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MQPROC_VERSION "0.1.0"

/* Length of the error buffers that internal calls fill (anet style). */
#define MQPROC_ERR_LEN 512

/* Status codes: 0 on success, negative on error, one range per module; each range
 * ends with a sentinel so a test can walk it. Generated with mqproc_strerror(). */
#define MQPROC_STATUS_MAP(X)                                                                       \
  X(OK, 0, "success")                                                                              \
  X(ENOMEM, -0x0001, "out of memory")                                                              \
  X(EINVAL, -0x0002, "invalid argument")                                                           \
  X(ESYS, -0x0003, "system call failed")                                                           \
  X(ECONFIG, -0x0004, "invalid configuration")                                                     \
  X(ESTATE, -0x0005, "operation not allowed in this state")                                        \
  X(_GENERAL_NEXT, -0x0006, "(sentinel)")                                                          \
  X(EBROKER_CONNECT, -0x0100, "cannot connect to the broker")                                      \
  X(EBROKER_CLOSED, -0x0101, "broker connection or channel closed")                                \
  X(EBROKER_PROTOCOL, -0x0102, "broker protocol error")                                            \
  X(EBROKER_UNROUTABLE, -0x0103, "message returned by the broker as unroutable")                   \
  X(EBROKER_NACKED, -0x0104, "message nacked by the broker")                                       \
  X(EBROKER_DECLARE, -0x0105, "broker refused a declaration")                                      \
  X(EBROKER_BLOCKED, -0x0106, "broker blocked publishing (resource alarm)")                        \
  X(_BROKER_NEXT, -0x0107, "(sentinel)")                                                           \
  X(ESTORE_CONNECT, -0x0200, "cannot connect to the job store")                                    \
  X(ESTORE_QUERY, -0x0201, "job store query failed")                                               \
  X(ESTORE_FENCED, -0x0202, "write refused: a newer attempt owns the job")                         \
  X(ESTORE_NOTFOUND, -0x0203, "job not found in the store")                                        \
  X(ESTORE_DATA, -0x0204, "job store refused the data (the message caused it)")                    \
  X(_STORE_NEXT, -0x0205, "(sentinel)")                                                            \
  X(ECODEC_SYNTAX, -0x0300, "message is neither valid JSON nor valid YAML")                        \
  X(ECODEC_INVALID, -0x0301, "message does not follow the processing-message schema")              \
  X(ECODEC_TOO_LARGE, -0x0302, "message exceeds the size limit")                                   \
  X(_CODEC_NEXT, -0x0303, "(sentinel)")                                                            \
  X(ERUNNER_SPAWN, -0x0400, "cannot start the processor")                                          \
  X(ERUNNER_FAILED, -0x0401, "processor failed")                                                   \
  X(ERUNNER_TIMEOUT, -0x0402, "processor exceeded its time limit")                                 \
  X(_RUNNER_NEXT, -0x0403, "(sentinel)")                                                           \
  X(ECALLBACK, -0x0500, "callback request failed")                                                 \
  X(_CALLBACK_NEXT, -0x0501, "(sentinel)")

typedef enum mqproc_status {
#define MQPROC__STATUS_ENUM(name, value, text) MQPROC_##name = value,
  MQPROC_STATUS_MAP(MQPROC__STATUS_ENUM)
#undef MQPROC__STATUS_ENUM
} mqproc_status_t;

/* Returns a static string describing status; never NULL, never to be freed. */
const char *mqproc_strerror(int status);

/* One job as the processing function sees it (opaque). */
typedef struct mqproc_job mqproc_job_t;

/* The processing function: runs in a worker thread of the server (--isolation=thread, the
 * default) or in a worker process (--isolation=process), never in the server's event loop.
 * Returns 0 on success, anything else on failure (then mqproc_job_fail() says why).
 * Returning the server's --final-exit-code says the job can never succeed: it is FAILED
 * at once, without local retries or requeue.
 * It may be called again for the same job (retries, redeliveries): make its effects
 * idempotent or let them fail cleanly on existing output. */
typedef int (*mqproc_process_cb)(mqproc_job_t *job, void *userdata);

typedef struct mqproc_processor {
  const char *name;          /* queue name, e.g. "ocrd-foo"; required */
  const char *version;       /* printed by --version; may be NULL */
  const char *description;   /* one line for --help; may be NULL */
  mqproc_process_cb process; /* required */
  void *userdata;            /* passed to process() unchanged */
  /* Added after 0.1.0 (read only from programs built with a header that has it, see
   * mqproc_main): the processor's OCR-D tool description, the object ocrd-tool.json holds
   * under "tools" for this executable ({"executable": …, "description": …, "parameters":
   * {…}, …}), as JSON text; printed by `--dump-json`, its parameters listed by `--help`.
   * May be NULL: --dump-json then prints a minimal description (name, description). */
  const char *ocrd_tool_json;
} mqproc_processor_t;

/* Entry point for a C processor: parses argv (`processing-server`, `migrate`, `--help`,
 * `--version`, or OCR-D's processor options: one job run here), runs the chosen command
 * and returns the process exit code. processor is borrowed until it returns.
 *
 * mqproc_main() is a macro that passes the size of the program's mqproc_processor_t, so a
 * program built against an older header (a shorter struct) keeps working with a newer
 * library: the library reads only the fields the program's struct has. The function
 * mqproc_main (its address, or a call with the macro suppressed) takes a struct of
 * 0.1.0's fields. */
int mqproc_main_sized(int argc, char **argv, const mqproc_processor_t *processor,
                      size_t processor_size);
int mqproc_main(int argc, char **argv, const mqproc_processor_t *processor);
#define mqproc_main(argc, argv, processor)                                                         \
  mqproc_main_sized((argc), (argv), (processor), sizeof(*(processor)))

/* With --isolation=process the server starts its worker processes by running its own
 * program again as `<program> __mqproc-worker`: a main() that hands only some commands to
 * mqproc_main() must hand this one to it too (argv unchanged). */
#define MQPROC_WORKER_COMMAND "__mqproc-worker"

/* Job accessors. Strings are NULL when the message did not carry the field. */
const char *mqproc_job_id(const mqproc_job_t *job);
const char *mqproc_job_processor_name(const mqproc_job_t *job);
int mqproc_job_attempt(const mqproc_job_t *job); /* claim number, the fencing token */
int mqproc_job_try(const mqproc_job_t *job);     /* 1-based try within this attempt */
/* path_to_mets, or for a workspace_id the METS under --workspace-root (else NULL). */
const char *mqproc_job_path_to_mets(const mqproc_job_t *job);
/* Added after 0.1.0. The METS server the job's METS must be changed through, or NULL:
 * for a job from OCR-D's Processing Server, which keeps the workspace's METS in a METS
 * server while it has jobs for it and at their end writes its copy over mets.xml, the URL
 * OCR-D's worker would pass its processors as --mets-server-url (a Unix socket path, or
 * an http:// URL; --ocrd-mets-server says which). A function that writes mets.xml itself
 * while this is set loses its changes to that copy: use the METS server's HTTP API. */
const char *mqproc_job_mets_server_url(const mqproc_job_t *job);
const char *mqproc_job_workspace_id(const mqproc_job_t *job);
const char *mqproc_job_page_id(const mqproc_job_t *job);
size_t mqproc_job_input_file_grp_count(const mqproc_job_t *job);
const char *mqproc_job_input_file_grp(const mqproc_job_t *job, size_t i);
size_t mqproc_job_output_file_grp_count(const mqproc_job_t *job);
const char *mqproc_job_output_file_grp(const mqproc_job_t *job, size_t i);
/* The `parameters` object as compact JSON text ("{}" when absent). */
const char *mqproc_job_parameters_json(const mqproc_job_t *job);
/* The whole decoded processing message as compact JSON text. */
const char *mqproc_job_request_json(const mqproc_job_t *job);
/* The value of the message's AMQP header `name` as text (a string as it is, a number or
 * boolean in its JSON form, a nested table or array as JSON text), or NULL when the
 * message has no such header. */
const char *mqproc_job_header(const mqproc_job_t *job, const char *name);
/* All AMQP headers of the message as a compact JSON object text ("{}" when none). */
const char *mqproc_job_headers_json(const mqproc_job_t *job);

/* Append a line to the job's log file (its path is recorded in the job row). */
void mqproc_job_log(mqproc_job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Nonzero once an operator cancelled this job (`mqproc jobs cancel`): a long-running
 * function should check it now and then and return; the job ends CANCELLED whatever it
 * returns. (A function running in a worker process, --isolation=process, is killed
 * instead.) Safe to call from the function's thread at any time. */
int mqproc_job_cancelled(const mqproc_job_t *job);
/* Set the error recorded for a failing try (last call wins). */
void mqproc_job_fail(mqproc_job_t *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif
#endif
