/* Integration: OCR-D's processor command line (--ocrd-cli) and workspace_id messages
 * (--workspace-root). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(ocrd, .fini = it_cleanup);

/* Waits for the job's result, then compares the recorded argv with want. */
static void expect_argv(const char *results, const char *job, const char *const *want) {
  char line[4096];
  FILE *f;
  it_msg_t m;
  size_t i = 0;
  cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", job);
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  f = fopen(it_fmt("%s/%s.argv", it_tmpdir(), job), "r");
  cr_assert_not_null(f, "the processor recorded no argv");
  for (; fgets(line, sizeof(line), f) != NULL; i++) {
    line[strcspn(line, "\n")] = '\0';
    cr_assert_not_null(want[i], "extra argument %zu: %s", i, line);
    cr_expect_str_eq(line, want[i], "argument %zu", i);
  }
  fclose(f);
  cr_expect_null(want[i], "missing argument %zu: %s", i, want[i]);
}

Test(ocrd, an_ocrd_processor_gets_ocrds_exact_command_line) {
  char *proc = it_name("cli"), *results = it_name("cli-result");
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  const char *extra[] = {"--ocrd-log-level=INFO", NULL};
  const char *want[] = {"--working-dir",
                        "/data/ws1",
                        "--mets",
                        "/data/ws1/mets.xml",
                        "--log-level",
                        "INFO",
                        "--page-id",
                        "PHYS_0001..PHYS_0003",
                        "--input-file-grp",
                        "OCR-D-IMG",
                        "--output-file-grp",
                        "OCR-D-OUT",
                        "--parameter",
                        "{\"copy_files\": true}",
                        NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  cr_expect(it_server_wait_log(srv, "with OCR-D's processor arguments", 1000));
  it_publish(proc, it_job_yaml(proc, "cli-1", results));
  expect_argv(results, "cli-1", want);
  it_server_stop(srv);
}

Test(ocrd, workspace_ids_resolve_below_the_workspace_root) {
  char *proc = it_name("ws"), *results = it_name("ws-result");
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  const char *extra[] = {"--workspace-root=/srv/workspaces", NULL};
  const char *want[] = {"--working-dir",
                        "/srv/workspaces/ws-7",
                        "--mets",
                        "/srv/workspaces/ws-7/mets.xml",
                        "--log-level",
                        "DEBUG",
                        "--input-file-grp",
                        "IN",
                        "--parameter",
                        "{}",
                        NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  it_publish(proc, it_fmt("{\"job_id\": \"ws-1\", \"processor_name\": \"%s\", \"created_time\": "
                          "1, \"input_file_grps\": [\"IN\"], \"workspace_id\": \"ws-7\", "
                          "\"result_queue_name\": \"%s\"}",
                          proc, results));
  expect_argv(results, "ws-1", want);
  it_server_stop(srv);
}

Test(ocrd, a_workspace_id_without_a_root_is_dead_lettered) {
  char *proc = it_name("noroot"), *dead = it_fmt("%s.dead", it_name("noroot"));
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  it_server_t *srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), NULL, envp);
  it_msg_t m;
  it_publish(proc, it_fmt("{\"job_id\": \"nr-1\", \"processor_name\": \"%s\", \"created_time\": "
                          "1, \"input_file_grps\": [\"IN\"], \"workspace_id\": \"ws-7\"}",
                          proc));
  cr_assert(it_get(dead, WAIT_MS, &m));
  cr_expect(strstr(m.reason, "no --workspace-root") != NULL, "%s", m.reason);
  it_msg_free(&m);
  it_server_stop(srv);
}

Test(ocrd, ocrd_cli_false_runs_an_ocrd_named_command_as_it_is) {
  char *proc = it_name("plain"), *results = it_name("plain-result");
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  const char *extra[] = {"--ocrd-cli=false", NULL};
  const char *want[] = {NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  it_publish(proc,
             it_job_json(proc, "plain-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  expect_argv(results, "plain-1", want);
  it_server_stop(srv);
}
