/* Integration: `mqproc processing-api` against hostile requests (issue 38): a workflow
 * callback URL that never answers (a tarpit) or that points at the API itself holds no
 * route (F5: callbacks leave the API's worker thread); a FIFO, or a link to one, as a METS
 * (mets_path, path_to_mets, a workspace's mets.xml) is refused with its reason instead of
 * holding the worker in open() (F6); after a database restart the API's first publish on a
 * table queue is not lost to the dead connection (F16: private services only, its own
 * ctest entry). Runs on the default pair and on MQPROC_TEST_QUEUE=dir
 * MQPROC_TEST_STORE=sqlite. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "harness_int.h" /* it_tq_cleanup */
#include "ocrd_workspace.h"

#define WAIT_MS 60000
#define CALLBACK_TIMEOUT_MS 15000
#define DUMMY MQPROC_BUILD_DIR "/tools/ocrd-dummy/ocrd-dummy"

TestSuite(api_hardening, .fini = it_cleanup);

static int api_json(const it_api_t *a, const char *path, const char *json, char **out) {
  const char *args[] = {"-X", "POST", "-H", "Content-Type: application/json", "--data-binary",
                        json, NULL};
  return it_http_req(a->port, path, args, out);
}

/* POST /workflow/run?mets_path=mets&query with script as the multipart "workflow". */
static int run_wf(const it_api_t *a, const char *mets, const char *query, const char *script,
                  char **out) {
  char *file = it_fmt("%s/wf-%d.txt", it_tmpdir(), rand());
  FILE *f = fopen(file, "w");
  const char *args[] = {"-X", "POST", "-F", it_fmt("workflow=@%s", file), NULL};
  cr_assert_not_null(f);
  fputs(script, f);
  fclose(f);
  return it_http_req(a->port, it_fmt("/workflow/run?mets_path=%s%s", mets, query), args, out);
}

static const char *detail(const char *body) {
  json_t *o = it_json(body);
  const char *d = it_fmt("%s", json_string_value(json_object_get(o, "detail")) != NULL
                                   ? json_string_value(json_object_get(o, "detail"))
                                   : "(none)");
  json_decref(o);
  return d;
}

static it_server_t *dummy_server(const char *name) {
  it_server_t *s = it_server_start(name, DUMMY, NULL, NULL);
  cr_assert(it_server_wait_log(s, "stored its ocrd-tool description", WAIT_MS), "no tool stored");
  return s;
}

/* ---- F6: FIFOs as a METS ----------------------------------------------------------------- */

/* Opens the FIFO for writing (no wait), a few times: an API still in open() for reading
 * goes on (each request that blocked there, in turn). */
static void release(const char *fifo) {
  for (int i = 0; i < 20; i++) {
    int w = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0)
      close(w);
    usleep(50000);
  }
}

Test(api_hardening, a_fifo_as_a_mets_is_refused_with_its_reason) {
  char *proc = it_name("dummy"), *root = it_fmt("%s/root", it_tmpdir()), *out;
  char *fifo = it_fmt("%s/fifo.xml", it_tmpdir()), *link = it_fmt("%s/link.xml", it_tmpdir());
  it_server_t *srv = dummy_server(proc);
  it_api_t a;
  int status;
  mkdir(root, 0755);
  mkdir(it_fmt("%s/wsf", root), 0755);
  cr_assert_eq(mkfifo(fifo, 0644), 0);
  cr_assert_eq(mkfifo(it_fmt("%s/wsf/mets.xml", root), 0644), 0);
  cr_assert_eq(symlink(fifo, link), 0);
  a = it_api_start((const char *const[]){"--workspace-root", root, NULL});
  /* /workflow/run reads the METS: refused, not opened blocking */
  status = run_wf(&a, fifo, "", "dummy -I OCR-D-IMG -O F1\n", &out);
  cr_expect(status >= 400 && status < 500, "mets_path FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz after a FIFO: %s", out);
  status = run_wf(&a, link, "", "dummy -I OCR-D-IMG -O F1\n", &out);
  cr_expect(status >= 400 && status < 500, "mets_path link to a FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "link") != NULL || strstr(detail(out), "FIFO") != NULL,
            "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz after a link: %s", out);
  /* /processor/run: path_to_mets and workspace_id alike */
  status = api_json(&a, it_fmt("/processor/run/%s", proc),
                    it_fmt("{\"path_to_mets\": \"%s\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                           " \"output_file_grps\": [\"F2\"]}",
                           link),
                    &out);
  cr_expect(status >= 400 && status < 500, "path_to_mets link to a FIFO: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  status = api_json(&a, it_fmt("/processor/run/%s", proc),
                    "{\"workspace_id\": \"wsf\", \"input_file_grps\": [\"OCR-D-IMG\"],"
                    " \"output_file_grps\": [\"F3\"]}",
                    &out);
  cr_expect(status >= 400 && status < 500, "workspace_id with a FIFO mets.xml: %d %s", status, out);
  cr_expect(strstr(detail(out), "FIFO") != NULL, "the reason: %s", out);
  cr_expect_eq(it_http_get(a.port, "/readyz", &out), 200, "/readyz at the end: %s", out);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs", 0), 0, "no job was made");
  release(fifo); /* (an API that blocked in open() goes on, and can stop) */
  release(it_fmt("%s/wsf/mets.xml", root));
  it_server_stop(a.proc);
  it_server_stop(srv);
}
