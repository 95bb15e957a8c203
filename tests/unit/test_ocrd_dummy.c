/* ocrd-dummy on generated workspaces (tools/ocrd-dummy): METS and PAGE-XML checked element by
 * element with XPath for image and PAGE input, copy_files, page selection, existing output,
 * --overwrite, the working directory and the errors that must leave the METS untouched. */
#include <criterion/criterion.h>
#include <libxml/tree.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ocrd-dummy/dummy.h"
#include "ocrd_dummy_check.h"
#include "ocrd_workspace.h"

TestSuite(ocrd_dummy, .init = ws_setup, .fini = ws_teardown);

/* ---- processing --------------------------------------------------------------------- */

Test(ocrd_dummy, image_input_gets_page_skeletons) {
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']"), 1);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 3);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0001", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0001.xml",
              "PHYS_0001");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0002.xml",
              "PHYS_0002");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0003", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0003.xml",
              "PHYS_0003");
  cr_assert_eq(xcount(doc, "/mets:mets/mets:metsHdr/mets:agent"), 1);
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": false}", "");
  assert_xstr(doc, "2024-01-01T00:00:00", "/mets:mets/mets:metsHdr/@CREATEDATE");
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-IMG']/mets:file"), 3, "input kept");
  xmlFreeDoc(doc);
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0001.xml", "OCR-D-DUMMY_0001",
              "OCR-D-IMG/OCR-D-IMG_0001.png", "2", "3", "False");
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0002.xml", "OCR-D-DUMMY_0002",
              "OCR-D-IMG/OCR-D-IMG_0002.png", "7", "5", "False");
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0003.xml", "OCR-D-DUMMY_0003",
              "OCR-D-IMG/OCR-D-IMG_0003.png", "1", "1", "False");
  assert_no_temp_files();
}

Test(ocrd_dummy, copy_files_copies_images) {
  char id[64], href[128], page_href[128];
  size_t a_len, b_len;
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, "{\"copy_files\": true}");
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 6);
  for (int i = 1; i <= 3; i++) {
    char page[16], *a, *b;
    snprintf(page, sizeof(page), "PHYS_%04d", i);
    snprintf(id, sizeof(id), "OCR-D-DUMMY_%04d", i);
    snprintf(href, sizeof(href), "OCR-D-DUMMY/%s.png", id);
    assert_file(doc, "OCR-D-DUMMY", id, "image/png", href, page);
    snprintf(page_href, sizeof(page_href), "OCR-D-DUMMY/%s_PAGE.xml", id);
    strcat(id, "_PAGE");
    assert_file(doc, "OCR-D-DUMMY", id, PAGE_MIME, page_href, page);
    a = ows_read(wpath("OCR-D-IMG/OCR-D-IMG_%04d.png", i), &a_len);
    b = ows_read(wpath("%s", href), &b_len);
    cr_assert(a != NULL && b != NULL && a_len == b_len && memcmp(a, b, a_len) == 0,
              "%s is a copy of the input image", href);
    free(a);
    free(b);
  }
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": true}", "");
  xmlFreeDoc(doc);
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0002_PAGE.xml", "OCR-D-DUMMY_0002_PAGE",
              "OCR-D-DUMMY/OCR-D-DUMMY_0002.png", "7", "5", "True");
  assert_no_temp_files();
}

Test(ocrd_dummy, page_range_selects_only_those_pages) {
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0001..PHYS_0002", NULL);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 2);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0001", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0001.xml",
              "PHYS_0001");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0002.xml",
              "PHYS_0002");
  cr_assert_eq(xcount(doc, "//mets:div[@ID='PHYS_0003']/mets:fptr"), 1, "page 3 untouched");
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": false}",
               "PHYS_0001..PHYS_0002");
  xmlFreeDoc(doc);
  cr_assert_not(ws_exists(wpath("OCR-D-DUMMY/OCR-D-DUMMY_0003.xml")));
}

Test(ocrd_dummy, second_run_fails_and_keeps_mets) {
  char err[DUMMY_ERR_LEN], *before, *after;
  size_t before_len, after_len;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL);
  before = ows_read(ws_mets, &before_len);
  cr_assert_eq(ws_run("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL, false, err), -1);
  cr_assert(strstr(err, "Output fileGrp[@USE='OCR-D-DUMMY'] already contains output for page "
                        "PHYS_0001") != NULL,
            "%s", err);
  after = ows_read(ws_mets, &after_len);
  cr_assert(before_len == after_len && memcmp(before, after, before_len) == 0,
            "the METS is byte-identical");
  free(before);
  free(after);
  assert_no_temp_files();
}

Test(ocrd_dummy, page_subsets_accumulate) {
  char err[DUMMY_ERR_LEN];
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0001", NULL);
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0002", NULL);
  cr_assert_eq(ws_run("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0002..PHYS_0003", NULL, false, err), -1);
  cr_assert(strstr(err, "already contains output for page PHYS_0002") != NULL, "%s", err);
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "//PHYS_000[3]", NULL);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']"), 1);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 3);
  cr_assert_eq(xcount(doc, "/mets:mets/mets:metsHdr/mets:agent"), 3);
  assert_agent(doc, 3, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": false}", "//PHYS_000[3]");
  xmlFreeDoc(doc);
}

Test(ocrd_dummy, overwrite_replaces) {
  char err[DUMMY_ERR_LEN];
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, "{\"copy_files\": true}");
  cr_assert_eq(ws_run("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0002", "{\"copy_files\": true}", true, err),
               0, "%s", err);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 6);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002", "image/png",
              "OCR-D-DUMMY/OCR-D-DUMMY_0002.png", "PHYS_0002");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002_PAGE", PAGE_MIME,
              "OCR-D-DUMMY/OCR-D-DUMMY_0002_PAGE.xml", "PHYS_0002");
  cr_assert_eq(xcount(doc, "/mets:mets/mets:metsHdr/mets:agent"), 2);
  xmlFreeDoc(doc);
  /* an unrelated file (here: the input image OCR-D-IMG_0001) is never overwritten */
  ws_run_ok("OCR-D-IMG", "OCR-D-SEG", NULL, NULL);
  cr_assert_eq(ws_run("OCR-D-SEG", "OCR-D-IMG", NULL, NULL, true, err), -1);
  cr_assert(strstr(err, "cannot overwrite mets:file OCR-D-IMG_0001 (page PHYS_0001): it is "
                        "unrelated") != NULL,
            "%s", err);
}

Test(ocrd_dummy, page_input_is_copied_with_new_id) {
  xmlDoc *doc;
  ws_run_ok("OCR-D-IMG", "OCR-D-SEG", NULL, NULL);
  ws_run_ok("OCR-D-SEG", "OCR-D-COPY", NULL, "{\"copy_files\": true}");
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-COPY']/mets:file"), 3,
               "PAGE input is never copied as an image");
  assert_file(doc, "OCR-D-COPY", "OCR-D-COPY_0003", PAGE_MIME, "OCR-D-COPY/OCR-D-COPY_0003.xml",
              "PHYS_0003");
  cr_assert_eq(xcount(doc, "/mets:mets/mets:metsHdr/mets:agent"), 2);
  assert_agent(doc, 2, "OCR-D-SEG", "OCR-D-COPY", "{\"copy_files\": true}", "");
  xmlFreeDoc(doc);
  assert_page("OCR-D-COPY/OCR-D-COPY_0003.xml", "OCR-D-COPY_0003", "OCR-D-IMG/OCR-D-IMG_0003.png",
              "1", "1", "True");
  doc = ws_load(wpath("OCR-D-COPY/OCR-D-COPY_0003.xml"));
  cr_assert_eq(xcount(doc, "/pc:PcGts/pc:Metadata/pc:MetadataItem"), 2, "one item per step");
  xmlFreeDoc(doc);
}

Test(ocrd_dummy, working_dir_resolution) {
  char err[DUMMY_ERR_LEN] = "";
  dummy_opts_t o = {
      .mets = "mets.xml", .working_dir = ws_dir, .input_grp = "OCR-D-IMG", .output_grp = "OCR-D-A"};
  cr_assert_eq(dummy_run(&o, err), 0, "-m basename -w dir: %s", err);
  o = (dummy_opts_t){.working_dir = ws_dir, .input_grp = "OCR-D-IMG", .output_grp = "OCR-D-B"};
  cr_assert_eq(dummy_run(&o, err), 0, "-w dir alone: %s", err);
  o = (dummy_opts_t){
      .mets = ws_mets, .working_dir = ws_dir, .input_grp = "OCR-D-IMG", .output_grp = "OCR-D-D"};
  cr_assert_eq(dummy_run(&o, err), 0, "-m path -w its dir (OCR-D's worker): %s", err);
  o = (dummy_opts_t){
      .mets = ws_mets, .working_dir = "/tmp", .input_grp = "OCR-D-IMG", .output_grp = "OCR-D-C"};
  cr_assert_eq(dummy_run(&o, err), -1);
  cr_assert(strstr(err, "is not in --working-dir") != NULL, "%s", err);
  cr_assert(ws_exists(wpath("OCR-D-B/OCR-D-B_0001.xml")));
}

/* ---- errors ------------------------------------------------------------------------- */

Test(ocrd_dummy, errors_leave_mets_unchanged) {
  const char *dummy = "OCR-D-DUMMY";
  char err[DUMMY_ERR_LEN];
  dummy_opts_t missing = {.mets = wpath("nope.xml"), .input_grp = "A", .output_grp = "B"};
  cr_assert_eq(dummy_run(&missing, err), -1);
  cr_assert(strstr(err, "METS not found") != NULL, "%s", err);
  assert_fails("NOPE", dummy, NULL, NULL, "Input fileGrp[@USE='NOPE'] not in METS!");
  assert_fails("OCR-D-IMG", dummy, "PHYS_0042", NULL,
               "page_id 'PHYS_0042' matches none of the pages");
  assert_fails("OCR-D-IMG", dummy, "PHYS_0000..PHYS_0002", NULL, "its start matches no page");
  assert_fails("OCR-D-IMG", dummy, NULL, "{\"copy_files\": tru", "invalid parameter JSON");
  assert_fails("OCR-D-IMG", dummy, NULL, "{\"colour\": 1}", "unknown parameter 'colour'");
  assert_fails("OCR-D-IMG", dummy, NULL, "{\"copy_files\": 1}", "must be of type boolean");
  assert_fails("OCR-D-IMG,OCR-D-X", dummy, NULL, NULL, "exactly one input and one output");
  assert_fails("OCR-D-IMG", "1BAD", NULL, NULL, "not an xs:ID");
  assert_fails("OCR-D-IMG", "OCR-D-IMG", NULL, NULL, "must differ");
  assert_fails("OCR-D-IMG", NULL, NULL, NULL, "-O/--output-file-grp is required");
  cr_assert_not(ws_exists(wpath("OCR-D-DUMMY")), "nothing was written");
}

Test(ocrd_dummy, bad_input_files_write_nothing) {
  cr_assert_eq(unlink(wpath("OCR-D-IMG/OCR-D-IMG_0002.png")), 0);
  assert_fails("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL, "input file OCR-D-IMG_0002 not found");
  cr_assert_not(ws_exists(wpath("OCR-D-DUMMY")), "no page was written");
  cr_assert_eq(ows_write_file(wpath("OCR-D-IMG/OCR-D-IMG_0002.png"), "GIF89a", 6), 0);
  assert_fails("OCR-D-IMG", "OCR-D-DUMMY", NULL, NULL, "not PNG, TIFF or JPEG");
  assert_fails("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0002", "{\"copy_files\": true}",
               "not PNG, TIFF or JPEG");
}

/* Rewrites the METS with the first occurrence of from replaced by to. */
Test(ocrd_dummy, tiff_and_jpeg_input) {
  xmlDoc *doc;
  /* page 1 becomes a TIFF, page 2 a JPEG (core's MIME aliases image/tif and image/jpg) */
  cr_assert_eq(ows_write_tiff(wpath("OCR-D-IMG/p1.tif"), 640, 480, 1), 0);
  cr_assert_eq(ows_write_jpeg_header(wpath("OCR-D-IMG/p2.jpg"), 33, 44), 0);
  edit_mets("image/png", "image/tif");
  edit_mets("OCR-D-IMG_0001.png", "p1.tif");
  edit_mets("image/png", "image/jpg");
  edit_mets("OCR-D-IMG_0002.png", "p2.jpg");
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", NULL, "{\"copy_files\": true}");
  doc = ws_load(ws_mets);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0001", "image/tif",
              "OCR-D-DUMMY/OCR-D-DUMMY_0001.tif", "PHYS_0001");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002", "image/jpg",
              "OCR-D-DUMMY/OCR-D-DUMMY_0002.jpg", "PHYS_0002");
  xmlFreeDoc(doc);
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0001_PAGE.xml", "OCR-D-DUMMY_0001_PAGE",
              "OCR-D-DUMMY/OCR-D-DUMMY_0001.tif", "640", "480", "True");
  assert_page("OCR-D-DUMMY/OCR-D-DUMMY_0002_PAGE.xml", "OCR-D-DUMMY_0002_PAGE",
              "OCR-D-DUMMY/OCR-D-DUMMY_0002.jpg", "33", "44", "True");
}

Test(ocrd_dummy, fallback_ids_and_negation) {
  xmlDoc *doc;
  edit_mets("ID=\"OCR-D-IMG_0003\"", "ID=\"scan:3\"");
  edit_mets("FILEID=\"OCR-D-IMG_0003\"", "FILEID=\"scan:3\"");
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "~PHYS_0001", NULL);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "//mets:fileGrp[@USE='OCR-D-DUMMY']/mets:file"), 2);
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_0002", PAGE_MIME, "OCR-D-DUMMY/OCR-D-DUMMY_0002.xml",
              "PHYS_0002");
  assert_file(doc, "OCR-D-DUMMY", "OCR-D-DUMMY_PHYS_0003", PAGE_MIME,
              "OCR-D-DUMMY/OCR-D-DUMMY_PHYS_0003.xml", "PHYS_0003");
  xmlFreeDoc(doc);
}

Test(ocrd_dummy, creates_missing_mets_hdr) {
  xmlDoc *doc;
  edit_mets("<mets:metsHdr CREATEDATE=\"2024-01-01T00:00:00\"/>", "");
  ws_run_ok("OCR-D-IMG", "OCR-D-DUMMY", "PHYS_0003", NULL);
  doc = ws_load(ws_mets);
  cr_assert_eq(xcount(doc, "/mets:mets/*[1][self::mets:metsHdr]"), 1, "metsHdr comes first");
  assert_agent(doc, 1, "OCR-D-IMG", "OCR-D-DUMMY", "{\"copy_files\": false}", "PHYS_0003");
  xmlFreeDoc(doc);
}
