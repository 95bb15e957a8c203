/* Integration: a processor run by hand and the checks of --exec (issue 32, items 3 and 9).
 *
 * - A C processor on libmqproc is an OCR-D processor program too (runner/ocrd_run.c):
 *   examples/ocrd-example run once with OCR-D's options, no queue, no database: its exit
 *   status, -p/-P reaching the job's parameters, -w, --dump-json, -h, bad arguments (exit 2),
 *   and its commands (processing-server, migrate) unchanged.
 * - `--exec` is checked at start (a missing or unusable program: exit 2 with the reason),
 *   and a failed command's last output is in its try's error: the job row's last_error and
 *   `mqproc submit --wait`'s report. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(processor_cli, .fini = it_cleanup);

/* Runs prog with the arguments (NULL-terminated) and envp, its stderr and stdout both
 * into *out; returns its exit status. */
static int run_both(char **out, const char *const *envp, const char *prog, ...) {
  const char *argv[64] = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", prog};
  int n = 4;
  va_list ap;
  va_start(ap, prog);
  for (const char *s; n < 63 && (s = va_arg(ap, const char *)) != NULL;)
    argv[n++] = s;
  va_end(ap);
  argv[n] = NULL;
  return it_run(argv, envp, NULL, out);
}

#define EXAMPLE(out, ...) run_both(out, NULL, MQPROC_EXAMPLE_BIN, __VA_ARGS__, NULL)

/* A file of this test's tmpdir with content and mode. */
static char *write_file(const char *name, const char *content, mode_t mode) {
  char *path = it_fmt("%s/%s", it_tmpdir(), name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs(content, f);
  fclose(f);
  cr_assert_eq(chmod(path, mode), 0);
  return path;
}

/* ---- a C processor run once, with OCR-D's options ------------------------------------- */

Test(processor_cli, one_job_runs_here_and_exits_0) {
  char *mets = it_fmt("%s/mets.xml", it_tmpdir()), *marker = it_fmt("%s/marker", it_tmpdir());
  char *log = it_fmt("%s/job.log", it_tmpdir()), *out, *text;
  cr_assert_eq(EXAMPLE(&out, "-m", mets, "-I", "OCR-D-IMG,OCR-D-GT", "-O", "OCR-D-OUT", "-g",
                       "PHYS_0001", "-P", "marker", marker, "--log-file", log),
               0, "%s", out);
  cr_expect(strstr(out, "SUCCESS") != NULL, "%s", out);
  text = it_read_file(marker);
  cr_assert_not_null(text, "the job did not run");
  cr_expect(strstr(text, " 1 1\n") != NULL, "one attempt, one try: %s", text);
  cr_expect_eq(it_file_lines(marker), 1);
  text = it_read_file(log);
  cr_assert_not_null(text, "no job log in --log-file");
  cr_expect(strstr(text, it_fmt("METS %s, 2 input group(s), first OCR-D-IMG", mets)) != NULL, "%s",
            text);
}

Test(processor_cli, a_failed_job_exits_1_with_its_reason) {
  char *mets = it_fmt("%s/mets.xml", it_tmpdir()), *out;
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I", "OCR-D-IMG", "-P", "fail", "true"), 1, "%s", out);
  cr_expect(strstr(out, "FAILED: failing on purpose (try 1)") != NULL, "%s", out);
}

/* -p (JSON text or a file, merged in order) then each -P, VALUE as JSON when it parses. */
Test(processor_cli, parameters_and_overrides_reach_the_job) {
  char *mets = it_fmt("%s/mets.xml", it_tmpdir()), *out;
  char *file = write_file("params.json", "{\"b\": \"from file\", \"c\": 1}", 0644);
  cr_assert_eq(EXAMPLE(&out, "-m", mets, "-I", "IN", "-p", "{\"a\": 1, \"b\": \"x\"}", "-p", file,
                       "-P", "c", "2", "-P", "d", "[1, \"y\"]", "-P", "e", "plain text", "-P", "f",
                       "true"),
               0, "%s", out);
  cr_expect(strstr(out, "parameters {\"a\":1,\"b\":\"from file\",\"c\":2,\"d\":[1,\"y\"],"
                        "\"e\":\"plain text\",\"f\":true}") != NULL,
            "%s", out);
  /* an override changes what the processor does: fail_tries 1 fails its only try */
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I", "IN", "-P", "fail_tries", "1"), 1, "%s", out);
}

/* -w: a relative -m is taken in it, and the job runs there (relative paths are its). */
Test(processor_cli, the_job_runs_in_the_working_directory) {
  char *ws = it_fmt("%s/ws", it_tmpdir()), *out;
  cr_assert_eq(mkdir(ws, 0755), 0);
  cr_assert_eq(EXAMPLE(&out, "-w", ws, "-m", "mets.xml", "-I", "IN", "-P", "marker", "m.txt"), 0,
               "%s", out);
  cr_expect(strstr(out, it_fmt("METS %s/mets.xml,", ws)) != NULL, "%s", out);
  cr_expect_eq(it_file_lines(it_fmt("%s/m.txt", ws)), 1, "the marker is not in -w");
}

Test(processor_cli, dump_json_prints_the_tool_description) {
  char *out;
  json_t *tool;
  cr_assert_eq(run_both(&out, NULL, MQPROC_EXAMPLE_BIN, "--dump-json", NULL), 0, "%s", out);
  tool = it_json(out);
  cr_expect_str_eq(json_string_value(json_object_get(tool, "executable")), "ocrd-example");
  cr_expect(json_is_object(json_object_get(json_object_get(tool, "parameters"), "sleep_ms")), "%s",
            out);
  json_decref(tool);
  cr_assert_eq(run_both(&out, NULL, MQPROC_EXAMPLE_BIN, "-J", NULL), 0, "%s", out);
  json_decref(it_json(out));
}

Test(processor_cli, help_lists_the_ocrd_options_and_the_commands) {
  const char *want[] = {"-m, --mets",
                        "-w, --working-dir",
                        "-I, --input-file-grp",
                        "-O, --output-file-grp",
                        "-g, --page-id",
                        "-p, --parameter",
                        "-P, --param-override",
                        "-l, --log-level",
                        "-J, --dump-json",
                        "-h, --help",
                        "-V, --version",
                        "\"sleep_ms\" [number - 0]",
                        "processing-server",
                        "migrate",
                        NULL};
  char *out;
  cr_assert_eq(run_both(&out, NULL, MQPROC_EXAMPLE_BIN, "-h", NULL), 0, "%s", out);
  for (int i = 0; want[i] != NULL; i++)
    cr_expect(strstr(out, want[i]) != NULL, "no %s in: %s", want[i], out);
  cr_assert_eq(run_both(&out, NULL, MQPROC_EXAMPLE_BIN, "--help", NULL), 0);
  cr_expect(strstr(out, "-P, --param-override") != NULL, "%s", out);
  cr_assert_eq(run_both(&out, NULL, MQPROC_EXAMPLE_BIN, "-V", NULL), 0);
  cr_expect(strstr(out, "ocrd-example 1.0.0 (mqproc ") != NULL, "%s", out);
}

/* Usage errors exit 2 with the reason, and nothing runs. */
Test(processor_cli, bad_arguments_are_a_clear_error_with_exit_2) {
  char *mets = it_fmt("%s/mets.xml", it_tmpdir()), *marker = it_fmt("%s/marker", it_tmpdir());
  char *out;
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I", "IN", "--frobnicate", "-P", "marker", marker), 2);
  cr_expect(strstr(out, "ocrd-example: error: unknown option '--frobnicate' (see --help)") != NULL,
            "%s", out);
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I"), 2);
  cr_expect(strstr(out, "option '-I' needs a value") != NULL, "%s", out);
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I", "IN", "-p", "{not json"), 2);
  cr_expect(strstr(out, "-p {not json: invalid JSON") != NULL, "%s", out);
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-O", "OUT"), 2); /* no -I: not a valid job */
  cr_expect(strstr(out, "input_file_grps") != NULL && strstr(out, "-I") != NULL, "%s", out);
  cr_expect_eq(EXAMPLE(&out, "-m", mets, "-I", "IN", "-U", "http://localhost:8080"), 2);
  cr_expect(strstr(out, "--mets-server-url is not supported") != NULL, "%s", out);
  cr_expect_eq(EXAMPLE(&out, "frobnicate"), 2);
  cr_expect(strstr(out, "unknown command 'frobnicate'") != NULL, "%s", out);
  cr_expect_eq(access(marker, F_OK), -1, "a job ran");
}

/* The commands of a C processor are unchanged beside its OCR-D options. */
Test(processor_cli, processing_server_and_migrate_still_work) {
  const char *env[] = {it_fmt("MQPROC_DATABASE=%s", it_db_url()), NULL};
  char *proc = it_name("cli"), *results = it_name("cli-result"), *out;
  it_server_t *srv;
  it_msg_t m;
  cr_assert_eq(run_both(&out, env, MQPROC_EXAMPLE_BIN, "migrate", NULL), 0, "%s", out);
  cr_expect(strstr(out, "schema is up to date") != NULL, "%s", out);
  it_declare(results);
  srv = it_server_start(proc, NULL, NULL, NULL);
  it_publish(proc, it_job_json(proc, "cli-1", it_fmt("{\"result_queue_name\":\"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
}

/* ---- --exec: checked at start, and a failure's last output in its error ----------------- */

/* A server whose --exec cannot start exits 2 at once with why, and takes no job. */
static void expect_refused(const char *suffix, const char *exec, const char *why) {
  char *proc = it_name(suffix);
  it_server_t *srv = it_server_spawn(proc, exec, NULL, NULL);
  int st = it_server_wait_exit(srv, WAIT_MS);
  cr_assert_neq(st, -1, "the server for --exec %s still runs", exec);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "--exec %s: wait status %d", exec, st);
  cr_expect(it_server_wait_log(srv, why, 1000), "--exec %s: no \"%s\" in its log", exec, why);
  cr_expect_eq(it_server_count_log(srv, "consuming from queue"), 0);
  it_server_stop(srv);
}

Test(processor_cli, a_program_not_in_path_is_refused_at_start) {
  expect_refused("nopath", "mqproc-no-such-program --flag",
                 "cannot start: --exec: mqproc-no-such-program: not found in PATH (");
}

Test(processor_cli, an_unusable_program_path_is_refused_at_start) {
  char *plain = write_file("not-executable.sh", "#!/bin/sh\nexit 0\n", 0644);
  expect_refused("nodir", "./mqproc-no-such-dir/prog",
                 "--exec: ./mqproc-no-such-dir/prog: No such file or directory (relative to /");
  expect_refused("isdir", it_tmpdir(), it_fmt("--exec: %s: is a directory", it_tmpdir()));
  expect_refused("noexec", plain, it_fmt("--exec: %s: not executable by ", plain));
}

/* "ERROR: disk full" on stderr, exit 4: the job's last_error and the try's error say so,
 * and `mqproc submit --wait` prints it with the job. */
Test(processor_cli, a_failed_command_s_last_output_is_its_error) {
  char *proc = it_name("diskfull"), *out, *err;
  char *script = write_file("diskfull.sh",
                            "#!/bin/sh\necho 'reading the METS'\n"
                            "printf '\\033[31mERROR:\\033[0m disk full\\n' >&2\nexit 4\n",
                            0755);
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  const char *env[] = {it_fmt("MQPROC_QUEUE=%s", it_amqp_url()),
                       it_fmt("MQPROC_DATABASE=%s", it_db_url()), NULL};
  const char *want = "processor exited with status 4 \xe2\x80\x94 last output: reading the METS | "
                     "ERROR: disk full";
  it_server_t *srv = it_server_start(proc, script, extra, NULL);
  cr_expect_eq(run_both(&out, env, it_mqproc_bin(), "submit", "--processor", proc, "--mets",
                        "/data/ws/mets.xml", "-I", "IN", "--job-id", "full-1", "--wait",
                        "--timeout", "60", NULL),
               1, "%s", out);
  cr_expect(strstr(out, it_fmt("job full-1 FAILED: %s", want)) != NULL, "%s", out);
  err = it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = 'full-1'", 0);
  cr_assert_not_null(err);
  cr_expect_str_eq(err, want);
  cr_expect_str_eq(it_sql("SELECT error FROM mqproc_job_tries WHERE job_id = 'full-1'", 0), want);
  it_server_stop(srv);
}
