/* ocrd-dummy's METS replacement and its two ways in (tools/ocrd-dummy): a failed or crashed
 * commit keeps the old METS whole, concurrent runs serialize on the METS lock, the mqproc
 * processing function runs a decoded job, and the ocrd-dummy program runs as a subprocess. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <jansson.h>
#include <libxml/tree.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec/codec.h"
#include "runner/job.h"
#include "ocrd-dummy/dummy.h"
#include "ocrd-dummy/fsio.h"
#include "ocrd-dummy/worker.h"
#include "ocrd_dummy_check.h"
#include "ocrd_workspace.h"

TestSuite(ocrd_dummy, .init = ws_setup, .fini = ws_teardown);

/* ---- atomic METS -------------------------------------------------------------------- */

static bool is_mets(const char *path) {
  size_t len = strlen(path);
  return len >= 9 && strcmp(path + len - 9, "/mets.xml") == 0;
}

/* Fails the METS's rename (the output files pass), checking the complete temp file first. */
static int refuse_mets(const char *tmp, const char *path) {
  xmlDoc *doc;
  if (!is_mets(path))
    return 0;
  doc = ws_load(tmp);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 3);
  xmlFreeDoc(doc);
  return 1;
}

Test(ocrd_dummy, failed_commit_keeps_mets_and_no_temp) {
  xmlDoc *doc;
  dummy_fsio_commit_hook = refuse_mets;
  assert_fails("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL, "interrupted before the rename");
  dummy_fsio_commit_hook = NULL;
  assert_no_temp_files();
  cr_assert(ws_exists(wpath("OCR-D-DUMMY/OCR-D-DUMMY_0001.xml")), "outputs come before the METS");
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL); /* unreferenced outputs are rewritten */
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 3);
  xmlFreeDoc(doc);
}

/* A crash between the METS's fsync and its rename. */
static int crash_at_mets(const char *tmp, const char *path) {
  (void)tmp;
  if (is_mets(path))
    _exit(42);
  return 0;
}

Test(ocrd_dummy, crash_before_rename_keeps_mets) {
  char *before = ows_read(ws_mets, NULL), *after;
  int status;
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    char err[DUMMY_ERR_LEN];
    dummy_fsio_commit_hook = crash_at_mets;
    ws_run("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL, false, err);
    _exit(0);
  }
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 42, "the child crashed at the rename");
  cr_assert_str_eq(after = ows_read(ws_mets, NULL), before, "the METS is the old one, whole");
  cr_assert_eq(ows_count_temp(ws_dir), 1, "the crash leaves the complete temp file, not the METS");
  free(after);
  free(before);
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL);
}

Test(ocrd_dummy, keeps_mets_permissions) {
  struct stat st;
  cr_assert_eq(chmod(ws_mets, 0640), 0);
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL);
  cr_assert_eq(stat(ws_mets, &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0640);
}

typedef struct conc {
  const char *out;
  int rc;
  char err[DUMMY_ERR_LEN];
} conc_t;

static void *conc_run(void *arg) {
  conc_t *c = arg;
  c->rc = ws_run("OCR-D-IMG", c->out, NULL, NULL, false, c->err);
  return NULL;
}

Test(ocrd_dummy, concurrent_runs_on_one_mets_serialize) {
  conc_t c[4] = {{.out = "OUT-A"}, {.out = "OUT-B"}, {.out = "OUT-C"}, {.out = "OUT-D"}};
  pthread_t t[4];
  xmlDoc *doc;
  for (int i = 0; i < 4; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, conc_run, &c[i]), 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    cr_assert_eq(c[i].rc, 0, "%s: %s", c[i].out, c[i].err);
  }
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "/mets:mets/mets:metsHdr/mets:agent"), 4, "no update was lost");
  for (int i = 0; i < 4; i++)
    cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='%s']/mets:file", c[i].out), 3);
  xmlFreeDoc(doc);
}

/* ---- processing-server mode: the mqproc processing function ----------------------- */

/* Runs dummy_worker_process() on a job decoded from a processing message, as the server's
 * worker thread would; returns its result and copies the job's error into err. */
static int run_job(const char *grps_out, const char *page_id, const char *params, char *err) {
  char codec_err[MQPROC_ERR_LEN], *body;
  json_t *doc = NULL;
  mqproc__format_t fmt;
  mqproc__msg_t *msg = NULL;
  mqproc_job_t *job = NULL;
  int rc, log_fd = open(wpath("job.log"), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  cr_assert_neq(asprintf(&body,
                         "{\"job_id\": \"j-1\", \"processor_name\": \"ocrd-dummy\", "
                         "\"created_time\": 1718000000, \"path_to_mets\": \"%s\", "
                         "\"input_file_grps\": [\"OCR-D-IMG\"], \"output_file_grps\": %s, "
                         "\"page_id\": \"%s\", \"parameters\": %s}",
                         ws_mets, grps_out, page_id, params),
                -1);
  cr_assert_eq(mqproc__codec_parse(body, strlen(body), &doc, &fmt, codec_err), MQPROC_OK, "%s",
               codec_err);
  cr_assert_eq(mqproc__msg_validate(doc, fmt, "ocrd-dummy", &msg, codec_err), MQPROC_OK, "%s",
               codec_err);
  mqproc__run_spec_t spec = {
      .msg = msg, .request_json = body, .mets_path = msg->path_to_mets, .attempt = 1, .try_no = 1};
  cr_assert_eq(mqproc__job_new(&job, &spec, log_fd, codec_err), MQPROC_OK, "%s", codec_err);
  rc = dummy_worker_process(job, NULL);
  snprintf(err, DUMMY_ERR_LEN, "%s", mqproc__job_error(job) ? mqproc__job_error(job) : "");
  mqproc__job_free(job);
  mqproc__msg_free(msg);
  free(body);
  return rc;
}

Test(ocrd_dummy, mqproc_job) {
  char err[DUMMY_ERR_LEN], *log;
  xmlDoc *doc;
  cr_assert_eq(run_job("[\"OCR-D-DUMMY\"]", "PHYS_0002", "{\"copy_files\": true}", err), 0, "%s",
               err);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 2);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002_PAGE", PAGE_MIME,
              "OCR-D-DUMMY/OCR-D-DUMMY_0002_PAGE.xml", "PHYS_0002");
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": true}", "PHYS_0002");
  xmlFreeDoc(doc);
  log = ows_read(wpath("job.log"), NULL);
  cr_assert(log != NULL && strstr(log, "INFO ocrd-dummy - processing page PHYS_0002"), "%s", log);
  free(log);
  /* a redelivered job finds its output and fails, as OCR-D's processors do */
  cr_assert_eq(run_job("[\"OCR-D-DUMMY\"]", "PHYS_0002", "{\"copy_files\": true}", err), 1);
  cr_assert(strstr(err, "already contains output for page PHYS_0002") != NULL, "%s", err);
  cr_assert_eq(run_job("[\"A\", \"B\"]", "PHYS_0001", "{}", err), 1);
  cr_assert(strstr(err, "exactly one input and one output fileGrp (got 1, 2)") != NULL, "%s", err);
  cr_assert_eq(run_job("[\"OCR-D-NEW\"]", "PHYS_0001", "{\"copy\": 1}", err), 1);
  cr_assert(strstr(err, "unknown parameter 'copy'") != NULL, "%s", err);
  log = ows_read(wpath("job.log"), NULL);
  cr_assert(strstr(log, "ERROR ocrd-dummy - unknown parameter 'copy'") != NULL, "%s", log);
  free(log);
}

/* ---- the program -------------------------------------------------------------------- */

typedef struct proc_out {
  int status; /* exit code, or 128 + signal */
  char *out;  /* stdout */
  char *err;  /* stderr */
} proc_out_t;

/* Runs OCRD_DUMMY_BIN with args (NULL-terminated) in the workspace directory; its stderr
 * is echoed to ours, so that sanitizer reports of the child fail the test too. */
static proc_out_t run_bin(const char *const *args) {
  char *argv[32] = {OCRD_DUMMY_BIN}, out_path[4096], err_path[4096];
  proc_out_t r;
  int argc = 1, status;
  pid_t pid;
  while (args[argc - 1] != NULL)
    argv[argc] = (char *)args[argc - 1], argc++;
  snprintf(out_path, sizeof(out_path), "%s/.out", ws_dir);
  snprintf(err_path, sizeof(err_path), "%s/.err", ws_dir);
  cr_assert_neq(pid = fork(), -1);
  if (pid == 0) {
    if (chdir(ws_dir) != 0 || !freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr))
      _exit(99);
    execv(argv[0], argv);
    _exit(98);
  }
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ows_read(out_path, NULL);
  r.err = ows_read(err_path, NULL);
  cr_assert(r.out != NULL && r.err != NULL);
  fprintf(stderr, "%s", r.err);
  return r;
}

static void proc_out_free(proc_out_t *r) {
  free(r->out);
  free(r->err);
}

Test(ocrd_dummy, cli_program) {
  proc_out_t r = run_bin((const char *[]){"-m", "mets.xml", "-I", "OCR-D-IMG", "-O", "OCR-D-DUMMY",
                                          "-p", "{\"copy_files\": true}", "-g",
                                          "PHYS_0001..PHYS_0002", "-l", "DEBUG", NULL});
  json_t *tool;
  xmlDoc *doc;
  cr_assert_eq(r.status, 0, "%s", r.err);
  cr_assert(strstr(r.err, "INFO ocrd.processor.ocrd-dummy - processing page PHYS_0002"));
  proc_out_free(&r);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 4);
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": true}",
               "PHYS_0001..PHYS_0002");
  xmlFreeDoc(doc);
  r = run_bin((const char *[]){"--mets", ws_mets, "--input-file-grp", "OCR-D-IMG",
                               "--output-file-grp=OCR-D-DUMMY", NULL});
  cr_assert_eq(r.status, 1);
  cr_assert(strstr(r.err, "error: Output fileGrp[@USE='OCR-D-DUMMY'] already contains output "
                          "for page PHYS_0001"));
  proc_out_free(&r);
  r = run_bin((const char *[]){"--dump-json", NULL});
  cr_assert_eq(r.status, 0);
  cr_assert_not_null(tool = json_loads(r.out, 0, NULL), "%s", r.out);
  cr_assert_str_eq(json_string_value(json_object_get(tool, "executable")), "ocrd-dummy");
  json_decref(tool);
  proc_out_free(&r);
  r = run_bin((const char *[]){"--version", NULL});
  cr_assert_str_eq(r.out, "Version " DUMMY_VERSION ", mqproc " MQPROC_VERSION "\n");
  proc_out_free(&r);
  r = run_bin((const char *[]){"-I", "OCR-D-IMG", "-O", "X", "-U", "/tmp/m.sock", NULL});
  cr_assert_eq(r.status, 1);
  /* the METS goes through the METS server: none there fails the run before anything */
  cr_assert(strstr(r.err, "cannot reach the METS server /tmp/m.sock"));
  proc_out_free(&r);
  r = run_bin((const char *[]){"--bogus", NULL});
  cr_assert_eq(r.status, 2);
  proc_out_free(&r);
  r = run_bin((const char *[]){"--help", NULL});
  cr_assert(r.status == 0 && strstr(r.out, "--input-file-grp") && strstr(r.out, "copy_files"));
  proc_out_free(&r);
}
