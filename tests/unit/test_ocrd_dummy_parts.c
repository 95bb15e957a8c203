/* Unit tests of ocrd-dummy's parts: page_id selection, output file IDs, image headers,
 * parameters, the command line and atomic writes (tools/ocrd-dummy). */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ocrd-dummy/cli.h"
#include "ocrd-dummy/fsio.h"
#include "ocrd-dummy/imgsize.h"
#include "ocrd_workspace.h"
#include "ocrd-dummy/pages.h"
#include "ocrd-dummy/params.h"
#include "ocrd-dummy/plan.h"

/* ---- page_id ------------------------------------------------------------------------ */

static const char *const IDS[] = {"PHYS_0001", "PHYS_0002", "PHYS_0003",
                                  "PHYS_0004", "PHYS_0005", "PHYS_0010"};
#define N_IDS (sizeof(IDS) / sizeof(IDS[0]))

/* Selects expr over IDS and compares with want, one '1'/'0' per page. */
static void assert_selects(const char *expr, const char *want) {
  bool sel[N_IDS];
  char err[DUMMY_ERR_LEN] = "", got[N_IDS + 1];
  cr_assert_eq(dummy_pages_select(expr, IDS, N_IDS, sel, err), 0, "%s: %s", expr, err);
  for (size_t i = 0; i < N_IDS; i++)
    got[i] = sel[i] ? '1' : '0';
  got[N_IDS] = '\0';
  cr_assert_str_eq(got, want, "page_id %s", expr);
}

static void assert_select_fails(const char *expr, const char *why) {
  bool sel[N_IDS];
  char err[DUMMY_ERR_LEN] = "";
  cr_assert_eq(dummy_pages_select(expr, IDS, N_IDS, sel, err), -1, "%s should fail", expr);
  cr_assert(strstr(err, why) != NULL, "%s: '%s' lacks '%s'", expr, err, why);
}

Test(pages, ids_and_lists) {
  assert_selects("PHYS_0002", "010000");
  assert_selects("PHYS_0005,PHYS_0001", "100010");
}

Test(pages, ranges_by_trailing_number) {
  assert_selects("PHYS_0001..PHYS_0002", "110000");
  assert_selects("PHYS_0002..PHYS_0010", "011111");
  assert_selects("PHYS_0001..PHYS_0001,PHYS_0010", "100001");
}

Test(pages, regex_and_negation) {
  assert_selects("//PHYS_000[13]", "101000");
  assert_selects("//.*1.*", "100001");
  assert_selects("~PHYS_0002", "101111");
  assert_selects("PHYS_0001..PHYS_0004,~PHYS_0003", "110100");
  assert_selects("~//PHYS_000.", "000001");
}

Test(pages, errors_like_core) {
  assert_select_fails("PHYS_0042", "matches none of the pages");
  assert_select_fails("PHYS_0001,PHYS_0042", "'PHYS_0042' matches none");
  assert_select_fails("PHYS_0000..PHYS_0002", "its start matches no page");
  assert_select_fails("PHYS_A..PHYS_B", "could not find the numeric part");
  assert_select_fails("PHYS_0001..PAGE_0003", "parts before the numbers differ");
  assert_select_fails("PHYS_0001,,PHYS_0002", "empty item");
  assert_select_fails("//(", "bad regular expression");
  assert_select_fails("~", "empty item");
}

/* ---- file IDs ----------------------------------------------------------------------- */

static void assert_file_id(const char *id, const char *grp, const char *page, const char *out,
                           const char *want) {
  char *got = dummy_make_file_id(id, grp, page, out);
  cr_assert_str_eq(got, want, "make_file_id(%s, %s, %s, %s)", id, grp, page, out);
  free(got);
}

Test(file_id, like_core_make_file_id) {
  assert_file_id("OCR-D-IMG_0001", "OCR-D-IMG", "PHYS_0001", "OCR-D-DUMMY", "OCR-D-DUMMY_0001");
  assert_file_id("img1", "OCR-D-IMG", "PHYS_0001", "OUT", "OUT_PHYS_0001");
  assert_file_id("PHYS_0001_img", "IMG", "PHYS_0001", "OUT", "OUT_PHYS_0001_img");
  assert_file_id("img1", "IMG", NULL, "OUT", "OUT_img1");
  assert_file_id("urn:x", "IMG", "P:1", "OUT", "OUT_P_1");
  assert_file_id("a/b", "IMG", "a/b", "OUT", "OUT_a_b");
  assert_file_id("IMG#1", "IMG", "p1", "OUT", "OUT1");
}

Test(file_id, xml_id_and_extensions) {
  cr_assert(dummy_is_xml_id("OCR-D-IMG_0001"));
  cr_assert(dummy_is_xml_id("_a.b-c"));
  cr_assert_not(dummy_is_xml_id("1abc"));
  cr_assert_not(dummy_is_xml_id("a,b"));
  cr_assert_not(dummy_is_xml_id(""));
  cr_assert_str_eq(dummy_mime_ext("image/png"), ".png");
  cr_assert_str_eq(dummy_mime_ext("image/tiff"), ".tif");
  cr_assert_str_eq(dummy_mime_ext("image/jpeg"), ".jpg");
  cr_assert_str_eq(dummy_mime_ext("image/x-unknown"), "");
}

/* ---- image headers ------------------------------------------------------------------ */

static char *tmp_dir;
static void tmp_setup(void) {
  cr_assert_not_null(tmp_dir = ows_mkdtemp());
}
static void tmp_teardown(void) {
  ows_rmtree(tmp_dir);
  free(tmp_dir);
}

/* A path in the test's temp dir (static buffer). */
static const char *tmp_path(const char *name) {
  static char buf[4096];
  snprintf(buf, sizeof(buf), "%s/%s", tmp_dir, name);
  return buf;
}

static void assert_size(const char *path, unsigned long w, unsigned long h) {
  unsigned long gw = 0, gh = 0;
  char err[DUMMY_ERR_LEN] = "";
  cr_assert_eq(dummy_image_size(path, &gw, &gh, err), 0, "%s", err);
  cr_assert_eq(gw, w, "%s: width %lu", path, gw);
  cr_assert_eq(gh, h, "%s: height %lu", path, gh);
}

Test(imgsize, png_tiff_jpeg, .init = tmp_setup, .fini = tmp_teardown) {
  cr_assert_eq(ows_write_png(tmp_path("a.png"), 7, 5), 0);
  assert_size(tmp_path("a.png"), 7, 5);
  cr_assert_eq(ows_write_tiff(tmp_path("le.tif"), 300, 2, 0), 0);
  assert_size(tmp_path("le.tif"), 300, 2);
  cr_assert_eq(ows_write_tiff(tmp_path("be.tif"), 3, 70000, 1), 0);
  assert_size(tmp_path("be.tif"), 3, 70000);
  cr_assert_eq(ows_write_jpeg_header(tmp_path("a.jpg"), 640, 480), 0);
  assert_size(tmp_path("a.jpg"), 640, 480);
}

Test(imgsize, unknown_and_truncated, .init = tmp_setup, .fini = tmp_teardown) {
  unsigned long w, h;
  char err[DUMMY_ERR_LEN] = "", *png;
  size_t len;
  cr_assert_eq(ows_write_file(tmp_path("x.txt"), "hello world", 11), 0);
  cr_assert_eq(dummy_image_size(tmp_path("x.txt"), &w, &h, err), -1);
  cr_assert(strstr(err, "not PNG, TIFF or JPEG") != NULL, "%s", err);
  cr_assert_eq(ows_write_png(tmp_path("a.png"), 2, 2), 0);
  cr_assert_not_null(png = ows_read(tmp_path("a.png"), &len));
  cr_assert_eq(ows_write_file(tmp_path("cut.png"), png, 12), 0);
  free(png);
  cr_assert_eq(dummy_image_size(tmp_path("cut.png"), &w, &h, err), -1);
  cr_assert(strstr(err, "truncated") != NULL, "%s", err);
  cr_assert_eq(dummy_image_size(tmp_path("missing.png"), &w, &h, err), -1);
  cr_assert(strstr(err, "cannot open image") != NULL, "%s", err);
}

/* ---- parameters --------------------------------------------------------------------- */

Test(params, defaults_and_values) {
  dummy_params_t p;
  char err[DUMMY_ERR_LEN] = "";
  cr_assert_eq(dummy_params_parse(NULL, &p, err), 0, "%s", err);
  cr_assert_not(p.copy_files);
  cr_assert_str_eq(p.json, "{\"copy_files\": false}"); /* as Python's json.dumps() */
  dummy_params_free(&p);
  cr_assert_eq(dummy_params_parse("{\"copy_files\": true}", &p, err), 0, "%s", err);
  cr_assert(p.copy_files);
  cr_assert_str_eq(p.json, "{\"copy_files\": true}");
  dummy_params_free(&p);
}

static void assert_params_fail(const char *text, const char *why) {
  dummy_params_t p;
  char err[DUMMY_ERR_LEN] = "";
  cr_assert_eq(dummy_params_parse(text, &p, err), -1, "%s should fail", text);
  cr_assert(strstr(err, why) != NULL, "%s: '%s' lacks '%s'", text, err, why);
  cr_assert_null(p.values);
  cr_assert_null(p.json);
}

Test(params, rejected) {
  assert_params_fail("{\"colour\": 1}", "unknown parameter 'colour'");
  assert_params_fail("{\"copy_files\": \"yes\"}", "'copy_files' must be of type boolean");
  assert_params_fail("{\"copy_files\": tru", "invalid parameter JSON");
  assert_params_fail("[true]", "not an object");
  assert_params_fail("{\"copy_files\": true, \"copy_files\": false}", "invalid parameter JSON");
}

Test(params, tool_json) {
  json_t *tool = dummy_tool_json();
  cr_assert_str_eq(json_string_value(json_object_get(tool, "executable")), "ocrd-dummy");
  cr_assert_eq(json_integer_value(json_object_get(tool, "input_file_grp_cardinality")), 1);
  cr_assert(json_is_false(json_object_get(
      json_object_get(json_object_get(tool, "parameters"), "copy_files"), "default")));
  json_decref(tool);
}

/* ---- command line ------------------------------------------------------------------- */

static int parse(dummy_cli_t *cli, char *err, const char **args) {
  char *argv[32] = {"ocrd-dummy"};
  int argc = 1;
  while (args[argc - 1] != NULL)
    argv[argc] = (char *)args[argc - 1], argc++;
  return dummy_cli_parse(argc, argv, cli, err);
}

Test(cli, short_and_long_forms) {
  const char *args[] = {"-m",        "/w/mets.xml", "--input-file-grp=IMG",
                        "-O",        "OUT",         "--page-id",
                        "PHYS_0001", "-wdir",       "-l",
                        "debug",     "--overwrite", "--debug",
                        NULL};
  char err[DUMMY_ERR_LEN] = "";
  dummy_cli_t cli;
  cr_assert_eq(parse(&cli, err, args), 0, "%s", err);
  cr_assert_eq(cli.action, DUMMY_CLI_RUN);
  cr_assert_str_eq(cli.opts.mets, "/w/mets.xml");
  cr_assert_str_eq(cli.opts.input_grp, "IMG");
  cr_assert_str_eq(cli.opts.output_grp, "OUT");
  cr_assert_str_eq(cli.opts.page_id, "PHYS_0001");
  cr_assert_str_eq(cli.opts.working_dir, "dir");
  cr_assert_eq(cli.level, DUMMY_LOG_DEBUG);
  cr_assert(cli.opts.overwrite);
  cr_assert_str_eq(cli.opts.parameter_json, "{}");
  dummy_cli_free(&cli);
}

Test(cli, parameters_merge, .init = tmp_setup, .fini = tmp_teardown) {
  const char *json = "{\"copy_files\": true, \"x\": 1}";
  const char *args[] = {"-p",    NULL, "-p", "{\"x\": 2}", "-P", "copy_files",
                        "false", "-P", "y",  "text",       NULL};
  char err[DUMMY_ERR_LEN] = "";
  dummy_cli_t cli;
  cr_assert_eq(ows_write_file(tmp_path("p.json"), json, strlen(json)), 0);
  args[1] = tmp_path("p.json");
  cr_assert_eq(parse(&cli, err, args), 0, "%s", err);
  cr_assert_str_eq(cli.opts.parameter_json, "{\"copy_files\":false,\"x\":2,\"y\":\"text\"}");
  dummy_cli_free(&cli);
}

static void assert_cli_fails(int code, const char *why, const char **args) {
  char err[DUMMY_ERR_LEN] = "";
  dummy_cli_t cli;
  cr_assert_eq(parse(&cli, err, args), code, "%s: expected exit %d", args[0], code);
  cr_assert(strstr(err, why) != NULL, "'%s' lacks '%s'", err, why);
  dummy_cli_free(&cli);
}

Test(cli, errors) {
  assert_cli_fails(2, "unknown option '--bogus'", (const char *[]){"--bogus", NULL});
  assert_cli_fails(2, "requires a value", (const char *[]){"-I", "IMG", "-m", NULL});
  assert_cli_fails(2, "requires KEY VALUE", (const char *[]){"-P", "k", NULL});
  assert_cli_fails(2, "unexpected argument 'stray'", (const char *[]){"stray", NULL});
  assert_cli_fails(2, "takes no value", (const char *[]){"--overwrite=yes", NULL});
  assert_cli_fails(1, "--mets-server-url is empty", (const char *[]){"-U", "", NULL});
  assert_cli_fails(1, "invalid parameter JSON", (const char *[]){"-p", "{\"copy_files\"", NULL});
  assert_cli_fails(1, "neither a JSON object nor an existing file",
                   (const char *[]){"-p", "/nonexistent/p.json", NULL});
  assert_cli_fails(1, "--log-level LOUD", (const char *[]){"-l", "LOUD", NULL});
}

Test(cli, actions) {
  char err[DUMMY_ERR_LEN] = "";
  dummy_cli_t cli;
  cr_assert_eq(parse(&cli, err, (const char *[]){"--version", NULL}), 0);
  cr_assert_eq(cli.action, DUMMY_CLI_VERSION);
  dummy_cli_free(&cli);
  cr_assert_eq(parse(&cli, err, (const char *[]){"-J", NULL}), 0);
  cr_assert_eq(cli.action, DUMMY_CLI_DUMP_JSON);
  dummy_cli_free(&cli);
  cr_assert_eq(parse(&cli, err, (const char *[]){"-I", "X", "--help", NULL}), 0);
  cr_assert_eq(cli.action, DUMMY_CLI_HELP);
  dummy_cli_free(&cli);
}

/* ---- atomic files ------------------------------------------------------------------- */

static int refuse(const char *tmp, const char *path) {
  struct stat st;
  (void)path;
  cr_assert_eq(stat(tmp, &st), 0, "the temp file exists at the hook");
  cr_assert_eq(st.st_size, 3);
  return 1;
}

Test(fsio, atomic_write, .init = tmp_setup, .fini = tmp_teardown) {
  char err[DUMMY_ERR_LEN] = "", *got;
  struct stat st;
  cr_assert_eq(dummy_write_buf_atomic(tmp_path("f"), 0640, "old", 3, err), 0, "%s", err);
  cr_assert_eq(stat(tmp_path("f"), &st), 0);
  cr_assert_eq(st.st_mode & 07777, 0640);
  dummy_fsio_commit_hook = refuse;
  cr_assert_eq(dummy_write_buf_atomic(tmp_path("f"), 0640, "new", 3, err), -1);
  dummy_fsio_commit_hook = NULL;
  cr_assert(strstr(err, "interrupted before the rename") != NULL, "%s", err);
  cr_assert_str_eq(got = ows_read(tmp_path("f"), NULL), "old");
  free(got);
  cr_assert_eq(ows_count_temp(tmp_dir), 0, "no temp file is left behind");
  cr_assert_eq(dummy_write_buf_atomic(tmp_path("f"), -1, "new", 3, err), 0, "%s", err);
  cr_assert_str_eq(got = ows_read(tmp_path("f"), NULL), "new");
  free(got);
  cr_assert_eq(dummy_write_buf_atomic(tmp_path("nodir/f"), -1, "x", 1, err), -1);
  cr_assert(strstr(err, "cannot create") != NULL, "%s", err);
}
