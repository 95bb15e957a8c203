/* Integration: OCR-D core's own processors lose no page (issue 37).
 *
 * OCR-D core 3.12.1's Python processors (../shared/ocrd: ocrd-dummy, sleeping before each
 * page as ocrd-dummy-slow, and ocrd-filter), run page-wise and in parallel on one
 * workspace, each load mets.xml, add their files and save it: concurrent saves overwrite
 * each other's entries (6 to 75 % of the pages were lost, every job SUCCESS). Here, every
 * way mqproc runs them must end with every page of every step in mets.xml:
 *   - plain jobs without a METS server: tries of one workspace run one at a time, under
 *     the workspace's lock;
 *   - `mqproc processing-api` and `mqproc submit --workflow --page-wise`: the workspace is
 *     held by a METS server (mqproc's own, or OCR-D's with --mets-server=ocrd);
 *   - jobs as OCR-D's Processing Server sends them, OCR-D's own METS server in front (the
 *     argv of a job with a page id, output groups and a METS server used to overflow);
 *   - a try whose output is missing from the METS is no SUCCESS (--ocrd-check-output).
 * The METS is read back with core's own `ocrd workspace find`. Without ../shared/ocrd the
 * tests are skipped, saying so. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "http_listener.h"
#include "runner/ocrd_argv.h"

#define OCRD MQPROC_SOURCE_DIR "/../shared/ocrd"
#define WAIT_MS 180000
#define PAGES 8
#define SLOW "0.4" /* seconds ocrd-dummy-slow spends on a page: tries overlap */

TestSuite(ocrd_core, .fini = it_cleanup);

static void need_ocrd(void) {
  if (access(OCRD "/bin/ocrd-dummy", X_OK) != 0)
    cr_skip_test("OCR-D core's processors are not here (%s): these tests need ../shared/ocrd "
                 "beside the checkout and its Debian packages (scripts/setup.sh --tests)",
                 OCRD);
}

/* A workspace of n pages made by core's own `ocrd workspace init` and `bulk-add`, in a short
 * directory under /tmp (a METS server's socket is named after it): its METS path. */
static char *workspace(int n) {
  char *dir = it_fmt("/tmp/mqws-%s", it_name("w") + 5), *out;
  const char *argv[] = {OCRD "/bin/mkws", dir, it_fmt("%d", n), NULL};
  cr_assert_eq(it_run(argv, NULL, NULL, &out), 0, "mkws failed: %s", out);
  return it_fmt("%s/mets.xml", dir);
}

static void remove_workspace(const char *mets) {
  char *dir = it_fmt("%.*s", (int)(strrchr(mets, '/') - mets), mets);
  const char *argv[] = {"/bin/rm", "-rf", dir, it_fmt("%s.mkws.log", dir), NULL};
  char *out;
  it_run(argv, NULL, NULL, &out);
}

/* How many pages of group grp mets.xml lists, by core's `ocrd workspace find`. */
static int pages_listed(const char *mets, const char *grp) {
  char *dir = it_fmt("%.*s", (int)(strrchr(mets, '/') - mets), mets), *out, *line, *save = NULL;
  const char *argv[] = {OCRD "/bin/ocrd", "workspace", "-d", dir, "find", "-G", grp, "-k",
                        "page_id",        NULL};
  json_t *seen = json_object();
  int n;
  cr_assert_eq(it_run(argv, NULL, NULL, &out), 0, "ocrd workspace find: %s", out);
  for (line = strtok_r(out, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save))
    if (strncmp(line, "PHYS_", 5) == 0)
      json_object_set_new(seen, line, json_true());
  n = (int)json_object_size(seen);
  json_decref(seen);
  return n;
}

/* A server of processor name running OCR-D's program prog (from ../shared/ocrd/bin) with
 * --concurrency 4, OCRD_DUMMY_SLOW passed on. */
static it_server_t *ocrd_server(const char *name, const char *prog, const char *const *more) {
  const char *extra[16] = {"--concurrency=4", "--prefetch=4", "--pass-env=OCRD_DUMMY_SLOW",
                           "--retries=1", "--retry-backoff-ms=100"};
  const char *envp[] = {"OCRD_DUMMY_SLOW=" SLOW, NULL};
  size_t n = 5;
  for (; more != NULL && *more != NULL && n < 15; more++)
    extra[n++] = *more;
  extra[n] = NULL;
  return it_server_start(name, it_fmt(OCRD "/bin/%s", prog), extra, envp);
}

/* it_sql_becomes() with the patience of OCR-D's Python processors: each start imports OCR-D
 * core (about a second of CPU), and a busy CI machine runs many tests beside this one. */
static int becomes(const char *sql, const char *want) {
  for (int i = 0; i < 3600; i++) {
    char *v = it_sql(sql, 0);
    if (v != NULL && strcmp(v, want) == 0)
      return 1;
    usleep(50 * 1000);
  }
  return 0;
}

static long count_state(const char *proc, const char *state) {
  return it_sql_long(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s'"
                            " AND state = '%s'",
                            proc, state),
                     0);
}

static int all_succeed(const char *proc, int n) {
  return becomes(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s'"
                        " AND state IN ('SUCCESS', 'FAILED', 'CANCELLED')",
                        proc),
                 it_fmt("%d", n)) &&
         count_state(proc, "SUCCESS") == n;
}

/* ---- no METS server: the workspace's lock ---------------------------------------------- */

Test(ocrd_core, page_jobs_without_a_mets_server_take_turns_and_lose_nothing) {
  char *proc, *mets, *out;
  it_server_t *srv;
  need_ocrd();
  proc = it_name("dlock");
  mets = workspace(PAGES);
  srv = ocrd_server(proc, "ocrd-dummy-slow", NULL);
  for (int i = 1; i <= PAGES; i++)
    cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", mets, "-I", "OCR-D-IMG", "-O",
                       "OCR-D-DUMMY", "--page-id", it_fmt("PHYS_%04d", i), NULL),
                 0, "%s", out);
  cr_assert(all_succeed(proc, PAGES), "not every page job succeeded");
  cr_expect_eq(pages_listed(mets, "OCR-D-DUMMY"), PAGES, "pages lost from mets.xml");
  cr_expect_eq(it_server_count_log(srv, "run one at a time per workspace, under a lock"), 1,
               "the lock is not said once in the server's log");
  /* four tries at once on one workspace: some waited for the lock (said in their logs) */
  cr_expect_gt(it_sql_long(it_q("SELECT count(*) FROM mqproc_jobs WHERE processor_name = $1"
                                " AND log_text LIKE '%waited % ms for the lock%'",
                                "SELECT count(*) FROM mqproc_jobs WHERE processor_name = ?1"
                                " AND log_text LIKE '%waited % ms for the lock%'"),
                           1, proc),
               0, "no try waited for the lock");
  it_server_stop(srv);
  remove_workspace(mets);
}

/* ---- no silent success ------------------------------------------------------------------ */

/* A processor that exits 0 and writes nothing (core's ocrd-dummy with a page id that has no
 * input would too): its try fails, naming the page; --ocrd-check-output=false lets it. */
Test(ocrd_core, a_try_that_leaves_no_output_is_not_a_success) {
  char *proc, *mets, *out, *err;
  const char *off[] = {"--ocrd-check-output=false", NULL};
  it_server_t *srv;
  need_ocrd();
  proc = it_name("quiet");
  mets = workspace(2);
  srv = it_server_start(
      proc, it_proc("ocrd-exit0"),
      (const char *[]){"--retries=1", "--retry-backoff-ms=50", "--max-requeues=0", NULL}, NULL);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", mets, "-I", "OCR-D-IMG", "-O",
                     "OUT", "--page-id", "PHYS_0002", "--job-id", it_fmt("%s-1", proc), NULL),
               0, "%s", out);
  cr_assert(becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s-1'", proc), "FAILED"));
  err = it_sql(it_fmt("SELECT last_error FROM mqproc_jobs WHERE job_id = '%s-1'", proc), 0);
  cr_expect(err != NULL && strstr(err, "lists no file in OUT for 1 of 1 pages (PHYS_0002)"), "%s",
            err != NULL ? err : "(no error)");
  it_server_stop(srv);
  srv = it_server_start(proc, it_proc("ocrd-exit0"), off, NULL);
  cr_assert_eq(it_mq(&out, "submit", "--processor", proc, "--mets", mets, "-I", "OCR-D-IMG", "-O",
                     "OUT", "--page-id", "PHYS_0002", "--job-id", it_fmt("%s-2", proc), NULL),
               0, "%s", out);
  cr_expect(
      becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s-2'", proc), "SUCCESS"));
  it_server_stop(srv);
  remove_workspace(mets);
}

/* ---- mqproc as the Processing Server: a METS server per workspace ---------------------- */

static int call(const it_api_t *a, const char *method, const char *path, char **out) {
  const char *args[] = {"-X", method, NULL};
  return it_http_req(a->port, path, args, out);
}

/* POST /workflow/run of script, page-wise, on mets; the workflow job's id. */
static char *run_workflow(const it_api_t *a, const char *mets, const char *script) {
  char *file = it_fmt("%s/wf-%d.txt", it_tmpdir(), rand()), *out, *id;
  FILE *f = fopen(file, "w");
  const char *args[] = {"-X", "POST", "-F", it_fmt("workflow=@%s", file), NULL};
  json_t *o;
  cr_assert_not_null(f);
  fputs(script, f);
  fclose(f);
  cr_assert_eq(
      it_http_req(a->port, it_fmt("/workflow/run?mets_path=%s&page_wise=true", mets), args, &out),
      200, "%s", out);
  o = it_json(out);
  id = it_fmt("%s", json_string_value(json_object_get(o, "job_id")));
  json_decref(o);
  return id;
}

/* dummy -> filter, page-wise, through `mqproc processing-api` with the METS servers of kind
 * (mqproc or ocrd): every page in both groups, every job and the workflow SUCCESS, and each
 * job named its workspace's server. */
static void api_workflow(const char *kind) {
  char *dummy = it_name("pwd"), *filter = it_name("pwf"), *mets = workspace(PAGES), *wf, *out;
  char *sockets = it_fmt("/tmp/mqms-%s", dummy + 5);
  const char *api_args[] = {"--mets-server",  kind, "--mets-sockets-dir", sockets, "--ocrd-command",
                            OCRD "/bin/ocrd", NULL};
  it_server_t *d = ocrd_server(dummy, "ocrd-dummy-slow", NULL);
  it_server_t *f = ocrd_server(filter, "ocrd-filter", NULL);
  it_api_t a = it_api_start(api_args);
  wf = run_workflow(
      &a, mets,
      it_fmt("%s -I OCR-D-IMG -O OCR-D-DUMMY\n%s -I OCR-D-DUMMY -O OCR-D-FILTER\n", dummy, filter));
  cr_assert(
      becomes(it_fmt("SELECT state FROM mqproc_workflow_jobs WHERE job_id = '%s'", wf), "SUCCESS"),
      "the workflow did not succeed: %s",
      it_sql(it_q("SELECT string_agg(processor_name || ' ' || state || ' ' ||"
                  " coalesce(last_error, ''), '; ') FROM mqproc_jobs"
                  " WHERE processor_name IN ($1, $2)",
                  "SELECT group_concat(processor_name || ' ' || state || ' ' ||"
                  " coalesce(last_error, ''), '; ') FROM mqproc_jobs"
                  " WHERE processor_name IN (?1, ?2)"),
             2, dummy, filter));
  cr_expect_eq(count_state(dummy, "SUCCESS"), PAGES);
  cr_expect_eq(count_state(filter, "SUCCESS"), PAGES);
  cr_assert_eq(call(&a, "GET", it_fmt("/workflow/job-simple/%s", wf), &out), 200, "%s", out);
  cr_expect(strstr(out, "\"SUCCESS\"") != NULL, "%s", out);
  /* the jobs went through the METS server of their workspace */
  cr_expect_eq(
      it_sql_long(it_q("SELECT count(*) FROM mqproc_jobs WHERE processor_name IN ($1, $2)"
                       " AND headers->>'" MQPROC__HEADER_METS_SERVER "' LIKE $3",
                       "SELECT count(*) FROM mqproc_jobs WHERE processor_name IN (?1, ?2)"
                       " AND json_extract(headers, '$." MQPROC__HEADER_METS_SERVER "') LIKE ?3"),
                  3, dummy, filter, it_fmt("%s/%%.sock", sockets)),
      2 * PAGES);
  cr_expect_eq(pages_listed(mets, "OCR-D-DUMMY"), PAGES, "step 1 lost pages");
  cr_expect_eq(pages_listed(mets, "OCR-D-FILTER"), PAGES, "step 2 lost pages");
  it_server_stop(a.proc);
  it_server_stop(d);
  it_server_stop(f);
  remove_workspace(mets);
}

Test(ocrd_core, a_page_wise_workflow_through_mqprocs_mets_server_loses_no_page) {
  need_ocrd();
  api_workflow("mqproc");
}

Test(ocrd_core, a_page_wise_workflow_through_ocrds_own_mets_server_loses_no_page) {
  need_ocrd();
  api_workflow("ocrd");
}

Test(ocrd_core, submit_workflow_page_wise_loses_no_page) {
  char *dummy, *filter, *mets, *file, *out;
  it_server_t *d, *f;
  FILE *fp;
  need_ocrd();
  dummy = it_name("swd");
  filter = it_name("swf");
  mets = workspace(PAGES);
  file = it_fmt("%s/wf.txt", it_tmpdir());
  d = ocrd_server(dummy, "ocrd-dummy-slow", NULL);
  f = ocrd_server(filter, "ocrd-filter", NULL);
  cr_assert_not_null(fp = fopen(file, "w"));
  fprintf(fp, "%s -I OCR-D-IMG -O OCR-D-DUMMY\n%s -I OCR-D-DUMMY -O OCR-D-FILTER\n", dummy, filter);
  fclose(fp);
  cr_assert_eq(it_mq(&out, "submit", "--workflow", file, "--mets", mets, "--page-wise", "--wait",
                     "--timeout", "170", "--mets-sockets-dir", it_fmt("/tmp/mqms-%s", dummy + 5),
                     NULL),
               0, "%s", out);
  cr_expect_eq(count_state(dummy, "SUCCESS"), PAGES);
  cr_expect_eq(count_state(filter, "SUCCESS"), PAGES);
  cr_expect_eq(pages_listed(mets, "OCR-D-DUMMY"), PAGES, "step 1 lost pages");
  cr_expect_eq(pages_listed(mets, "OCR-D-FILTER"), PAGES, "step 2 lost pages");
  it_server_stop(d);
  it_server_stop(f);
  remove_workspace(mets);
}

/* ---- OCR-D's Processing Server in front ------------------------------------------------- */

/* Jobs as OCR-D's Processing Server sends them (YAML, internal_callback_url, one page each)
 * while OCR-D's own METS server holds the workspace on the socket it would start: every
 * page is listed once the METS server saved; and the argv of such a job (a page id, output
 * groups and a METS server) no longer overflows. */
Test(ocrd_core, jobs_of_ocrds_processing_server_through_its_mets_server) {
  char *proc, *mets, *dir, *sockets, *sock, *name, *out;
  const char *extra[4];
  it_server_t *srv, *msrv;
  test_http_t *cb;
  need_ocrd();
  proc = it_name("psd");
  mets = workspace(PAGES);
  dir = it_fmt("%.*s", (int)(strrchr(mets, '/') - mets), mets);
  sockets = it_fmt("/tmp/mqps-%s", proc + 5);
  mkdir(sockets, 0700);
  cr_assert_not_null(name = mqproc__ocrd_socket_name(mets));
  sock = it_fmt("%s/%s", sockets, name);
  free(name);
  msrv = it_program_spawn("ocrd-mets-server",
                          (const char *[]){OCRD "/bin/ocrd", "workspace", "-U", sock, "-d", dir,
                                           "server", "start", NULL},
                          NULL);
  cr_assert_not_null(cb = test_http_start(200));
  extra[0] = it_fmt("--ocrd-sockets-dir=%s", sockets);
  extra[1] = NULL;
  srv = ocrd_server(proc, "ocrd-dummy-slow", extra);
  for (int i = 1; i <= PAGES; i++) {
    char *job = it_fmt("%s-%d", proc, i);
    it_publish(proc, it_fmt("job_id: %s\nprocessor_name: %s\npath_to_mets: %s\ninput_file_grps:\n"
                            "- OCR-D-IMG\noutput_file_grps:\n- OCR-D-DUMMY\npage_id: PHYS_%04d\n"
                            "parameters: {}\ncreated_time: 1700000000\ninternal_callback_url: "
                            "http://127.0.0.1:%d/result_callback\n",
                            job, proc, mets, i, test_http_port(cb)));
  }
  cr_assert(all_succeed(proc, PAGES), "not every page job succeeded");
  cr_expect_eq(it_server_count_log(srv, "double free"), 0);
  /* as OCR-D's Processing Server does once the workspace's last job called back */
  cr_assert_eq(it_run((const char *[]){"/usr/bin/curl", "-sS", "--unix-socket", sock, "-X",
                                       "DELETE", "http://localhost/", NULL},
                      NULL, NULL, &out),
               0, "%s", out);
  cr_expect_neq(it_server_wait_exit(msrv, 30000), -1, "OCR-D's METS server did not stop");
  it_server_stop(msrv);
  cr_expect_eq(pages_listed(mets, "OCR-D-DUMMY"), PAGES, "pages lost from mets.xml");
  it_server_stop(srv);
  test_http_stop(cb);
  remove_workspace(mets);
}
