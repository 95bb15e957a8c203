/* Unit: OCR-D's processor command line (runner/ocrd_argv.c), compared with what OCR-D core's
 * worker runs. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/argv.h"
#include "codec/codec.h"
#include "runner/ocrd_argv.h"

static mqproc__msg_t *msg(const char *json) {
  char err[MQPROC_ERR_LEN];
  json_t *doc;
  mqproc__format_t fmt;
  mqproc__msg_t *m;
  cr_assert_eq(mqproc__codec_parse(json, strlen(json), &doc, &fmt, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__msg_validate(doc, fmt, NULL, &m, err), MQPROC_OK, "%s", err);
  return m;
}

static void expect_argv(char **got, const char *const *want) {
  size_t i;
  for (i = 0; want[i] != NULL; i++) {
    cr_assert_not_null(got[i], "argv too short at %zu (want %s)", i, want[i]);
    cr_expect_str_eq(got[i], want[i], "argv[%zu]", i);
  }
  cr_expect_null(got[i], "argv too long: %s", got[i]);
}

Test(ocrd_cli, the_exact_argv_of_ocrd_core) {
  mqproc__msg_t *m =
      msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-dummy\", "
          "\"created_time\": 1, \"input_file_grps\": [\"OCR-D-IMG\", \"OCR-D-SEG\"],"
          " \"output_file_grps\": [\"OCR-D-OUT\"], \"page_id\": \"PHYS_0001..PHYS_0003\","
          " \"path_to_mets\": \"/data/ws1/mets.xml\","
          " \"parameters\": {\"copy_files\": true, \"level\": \"line\"}}");
  char *base[] = {"ocrd-dummy", NULL}, **argv, err[MQPROC_ERR_LEN];
  const char *want[] = {"ocrd-dummy",
                        "--working-dir",
                        "/data/ws1",
                        "--mets",
                        "/data/ws1/mets.xml",
                        "--log-level",
                        "DEBUG",
                        "--page-id",
                        "PHYS_0001..PHYS_0003",
                        "--input-file-grp",
                        "OCR-D-IMG,OCR-D-SEG",
                        "--output-file-grp",
                        "OCR-D-OUT",
                        "--parameter",
                        "{\"copy_files\": true, \"level\": \"line\"}",
                        NULL};
  cr_assert_eq(mqproc__ocrd_argv(base, m, m->path_to_mets, "DEBUG", NULL, &argv, err), MQPROC_OK);
  expect_argv(argv, want);
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}

Test(ocrd_cli, optional_arguments_are_left_out_and_base_words_kept) {
  mqproc__msg_t *m = msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", \"created_time\": 1,"
                         " \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"mets.xml\"}");
  char *base[] = {"/opt/venv/bin/ocrd-x", "--fast", NULL}, **argv, err[MQPROC_ERR_LEN];
  const char *want[] = {"/opt/venv/bin/ocrd-x",
                        "--fast",
                        "--working-dir",
                        ".",
                        "--mets",
                        "mets.xml",
                        "--log-level",
                        "INFO",
                        "--input-file-grp",
                        "IN",
                        "--parameter",
                        "{}",
                        NULL};
  cr_assert_eq(mqproc__ocrd_argv(base, m, m->path_to_mets, "INFO", NULL, &argv, err), MQPROC_OK);
  expect_argv(argv, want);
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}

Test(ocrd_cli, unicode_parameters_are_ascii_escaped_like_json_dumps) {
  mqproc__msg_t *m = msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", \"created_time\": 1,"
                         " \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"/w/m.xml\","
                         " \"parameters\": {\"name\": \"F\\u00fcr\"}}");
  char *base[] = {"ocrd-x", NULL}, **argv, err[MQPROC_ERR_LEN];
  cr_assert_eq(mqproc__ocrd_argv(base, m, "/w/m.xml", "DEBUG", NULL, &argv, err), MQPROC_OK);
  cr_expect_str_eq(argv[10], "{\"name\": \"F\\u00fcr\"}");
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}

/* jansson alone would pass 0.10000000000000001; OCR-D's json.dumps() passes 0.1. */
Test(ocrd_cli, float_parameters_as_python_prints_them) {
  mqproc__msg_t *m = msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", \"created_time\": 1,"
                         " \"input_file_grps\": [\"IN\"], \"path_to_mets\": \"/w/m.xml\","
                         " \"parameters\": {\"x\": 0.1}}");
  char *base[] = {"ocrd-x", NULL}, **argv, err[MQPROC_ERR_LEN];
  cr_assert_eq(mqproc__ocrd_argv(base, m, "/w/m.xml", "DEBUG", NULL, &argv, err), MQPROC_OK);
  cr_expect_str_eq(argv[9], "--parameter");
  cr_expect_str_eq(argv[10], "{\"x\": 0.1}");
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}

Test(ocrd_cli, processors_are_recognised_by_name) {
  cr_expect(mqproc__ocrd_is_processor("ocrd-dummy"));
  cr_expect(mqproc__ocrd_is_processor("/usr/local/bin/ocrd-tesserocr-recognize"));
  cr_expect_not(mqproc__ocrd_is_processor("/usr/bin/my-ocrd-wrapper"));
  cr_expect_not(mqproc__ocrd_is_processor("sh"));
}

Test(ocrd_cli, workspace_ids_map_below_the_root) {
  mqproc__msg_t *m = msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", \"created_time\": 1,"
                         " \"input_file_grps\": [\"IN\"], \"workspace_id\": \"ws-42\"}");
  mqproc__msg_t *bad =
      msg("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", \"created_time\": 1,"
          " \"input_file_grps\": [\"IN\"], \"workspace_id\": \"..\"}");
  char *path = NULL, err[MQPROC_ERR_LEN];
  cr_assert_eq(mqproc__ocrd_mets_path(m, "/data/workspaces", &path, err), MQPROC_OK);
  cr_expect_str_eq(path, "/data/workspaces/ws-42/mets.xml");
  free(path);
  cr_expect_eq(mqproc__ocrd_mets_path(m, NULL, &path, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--workspace-root") != NULL, "%s", err);
  cr_expect_eq(mqproc__ocrd_mets_path(bad, "/data", &path, err), MQPROC_EINVAL);
  mqproc__msg_free(m);
  mqproc__msg_free(bad);
}
