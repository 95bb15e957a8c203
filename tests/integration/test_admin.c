/* Integration: operating a fleet against the real RabbitMQ and PostgreSQL — any processor
 * name, --help of every command, the admin CLI (submit, jobs, workers, stats, retry,
 * cancel, purge, pause/resume/drain) and the audit trail. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(admin, .fini = it_cleanup);

/* A processor name of this test that does not start with ocrd-. */
static char *plain_name(const char *what) {
  return it_fmt("%s-t%d", what, (int)getpid());
}

Test(admin, a_processor_without_the_ocrd_prefix_processes_jobs) {
  char *proc = plain_name("thumbnails"), *results = it_fmt("%s-results", proc);
  it_server_t *srv;
  it_msg_t m;
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), NULL, NULL);
  it_publish(proc, it_job_json(proc, "thumb-1", it_fmt("{\"result_queue_name\":\"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result");
  cr_expect(strstr(m.body, "\"SUCCESS\"") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_expect_str_eq(it_sql("SELECT state FROM mqproc_jobs WHERE job_id = 'thumb-1'", 0), "SUCCESS");
  it_server_stop(srv);
}

Test(admin, processing_server_help_prints_the_options) {
  const char *generic[] = {it_mqproc_bin(), "processing-server", "--help", NULL};
  const char *c_proc[] = {MQPROC_EXAMPLE_BIN, "processing-server", "--queue=x", "--help", NULL};
  char *out;
  cr_assert_eq(it_run(generic, NULL, NULL, &out), 0);
  cr_expect(strstr(out, "Usage: mqproc processing-server") != NULL, "%s", out);
  cr_expect(strstr(out, "--exec") != NULL, "%s", out);
  cr_assert_eq(it_run(c_proc, NULL, NULL, &out), 0);
  cr_expect(strstr(out, "processing-server") != NULL && strstr(out, "--isolation") != NULL, "%s",
            out);
}
