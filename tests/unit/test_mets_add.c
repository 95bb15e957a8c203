/* Unit tests for src/codec/mets_add.c: add_file and add_agent as OCR-D core 3.12.1's
 * OcrdMets does them (the expected answers are what core gave on the same documents):
 * a new file, a new fileGrp and page, a duplicate (FileExistsError, OCR-D's text), force,
 * an unrelated duplicate, IDs that are no xs:ID, an ID in another fileGrp, agents. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "codec/mets.h"

#define FIND_XML MQPROC_TEST_DATA "/mets/find.xml"

static mqproc__mets_t *m;

static void load(void) {
  char err[MQPROC_ERR_LEN];
  cr_assert_eq(mqproc__mets_load(FIND_XML, &m, err), MQPROC_OK, "%s", err);
}

static void unload(void) {
  mqproc__mets_free(m);
}

TestSuite(mets_add, .init = load, .fini = unload);

/* The answer to a query as compact JSON (the caller frees). */
static char *find(const mqproc__mets_query_t *q) {
  char err[MQPROC_ERR_LEN], *s;
  json_t *files;
  cr_assert_eq(mqproc__mets_find(m, q, &files, err), MQPROC_OK, "%s", err);
  s = json_dumps(files, JSON_COMPACT);
  json_decref(files);
  return s;
}

static char *dumps(json_t *v) {
  char *s = json_dumps(v, JSON_COMPACT);
  json_decref(v);
  return s;
}

static int add(const mqproc__mets_file_t *f, int force, mqproc__mets_why_t *why, char *err) {
  return mqproc__mets_add_file(m, f, force, why, err);
}

Test(mets_add, a_new_file_on_a_page) {
  char err[MQPROC_ERR_LEN], *s;
  mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG",
                           .file_id = "IMG_0005",
                           .page_id = "PHYS_0002",
                           .mimetype = "image/png",
                           .local_filename = "OCR-D-IMG/IMG_0005.png"};
  cr_assert_eq(add(&f, 0, NULL, err), MQPROC_OK, "%s", err);
  s = find(&(mqproc__mets_query_t){.page_id = "PHYS_0002"});
  cr_expect_str_eq(
      s, "[{\"file_grp\":\"OCR-D-IMG\",\"file_id\":\"IMG_0002\",\"page_id\":\"PHYS_0002\","
         "\"mimetype\":\"image/png\",\"url\":null,\"local_filename\":\"OCR-D-IMG/"
         "IMG_0002.png\"},{\"file_grp\":\"OCR-D-IMG\",\"file_id\":\"IMG_0005\","
         "\"page_id\":\"PHYS_0002\",\"mimetype\":\"image/png\",\"url\":null,"
         "\"local_filename\":\"OCR-D-IMG/IMG_0005.png\"}]");
  free(s);
}

Test(mets_add, a_new_group_and_a_new_page_come_last) {
  char err[MQPROC_ERR_LEN], *s;
  mqproc__mets_file_t f = {.file_grp = "OUT",
                           .file_id = "OUT_9",
                           .page_id = "PHYS_0009",
                           .mimetype = "text/xml",
                           .url = "http://x/9",
                           .local_filename = "OUT/9.xml"};
  cr_assert_eq(add(&f, 0, NULL, err), MQPROC_OK, "%s", err);
  s = dumps(mqproc__mets_file_groups(m));
  cr_expect_str_eq(s, "[\"OCR-D-IMG\",\"OCR-D-GT\",\"OUT\"]");
  free(s);
  s = dumps(mqproc__mets_physical_pages(m));
  cr_expect_str_eq(s, "[\"PHYS_0001\",\"PHYS_0002\",\"PHYS_0003\",\"PHYS_0004\",\"PHYS_0009\"]");
  free(s);
  s = find(&(mqproc__mets_query_t){.file_grp = "OUT"});
  cr_expect_str_eq(s, "[{\"file_grp\":\"OUT\",\"file_id\":\"OUT_9\",\"page_id\":\"PHYS_0009\","
                      "\"mimetype\":\"text/xml\",\"url\":\"http://x/9\",\"local_filename\":"
                      "\"OUT/9.xml\"}]");
  free(s);
}

Test(mets_add, a_file_without_a_page) {
  char err[MQPROC_ERR_LEN], *s;
  mqproc__mets_file_t f = {.file_grp = "OUT", .file_id = "LOOSE", .page_id = "", .mimetype = "a/b"};
  cr_assert_eq(add(&f, 0, NULL, err), MQPROC_OK, "%s", err);
  s = find(&(mqproc__mets_query_t){.file_id = "LOOSE"});
  cr_expect_str_eq(s, "[{\"file_grp\":\"OUT\",\"file_id\":\"LOOSE\",\"page_id\":null,\"mimetype\":"
                      "\"a/b\",\"url\":null,\"local_filename\":null}]");
  free(s);
}

Test(mets_add, a_duplicate_is_refused_with_ocrds_words) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_why_t why;
  mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG",
                           .file_id = "IMG_0001",
                           .page_id = "PHYS_0001",
                           .mimetype = "image/png",
                           .local_filename = "x.png"};
  cr_assert_eq(add(&f, 0, &why, err), MQPROC_EINVAL);
  cr_expect_eq(why, MQPROC__METS_WHY_EXISTS);
  cr_expect_str_eq(err, "A file with ID==IMG_0001 already exists <OcrdFile fileGrp=OCR-D-IMG "
                        "ID=IMG_0001, mimetype=image/png, url=---, local_filename=OCR-D-IMG/"
                        "IMG_0001.png]/>  and neither force nor ignore are set");
}

/* force replaces it; the page div it leaves empty goes, and comes back last (as OCR-D). */
Test(mets_add, force_replaces_it) {
  char err[MQPROC_ERR_LEN], *s;
  mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG",
                           .file_id = "IMG_0002",
                           .page_id = "PHYS_0002",
                           .mimetype = "image/png",
                           .local_filename = "new.png"};
  cr_assert_eq(add(&f, 1, NULL, err), MQPROC_OK, "%s", err);
  s = find(&(mqproc__mets_query_t){.file_grp = "OCR-D-IMG"});
  cr_expect(strstr(s, "\"file_id\":\"IMG_0004\"") < strstr(s, "\"file_id\":\"IMG_0002\""),
            "the new one is not last: %s", s);
  cr_expect(strstr(s, "\"local_filename\":\"new.png\"") != NULL, "%s", s);
  cr_expect(strstr(s, "IMG_0002.png") == NULL, "the old one is still there: %s", s);
  free(s);
  s = dumps(mqproc__mets_physical_pages(m));
  cr_expect_str_eq(s, "[\"PHYS_0001\",\"PHYS_0003\",\"PHYS_0004\",\"PHYS_0002\"]");
  free(s);
}

Test(mets_add, an_unrelated_duplicate_is_refused_even_with_force) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_why_t why;
  mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG",
                           .file_id = "IMG_0001",
                           .page_id = "PHYS_0001",
                           .mimetype = "image/tiff"};
  cr_assert_eq(add(&f, 1, &why, err), MQPROC_EINVAL);
  cr_expect_eq(why, MQPROC__METS_WHY_EXISTS);
  cr_expect(strstr(err, "]/>  but unrelated - cannot mitigate") != NULL, "%s", err);
  f.mimetype = "image/png";
  f.page_id = "PHYS_0002"; /* another page */
  cr_assert_eq(add(&f, 1, &why, err), MQPROC_EINVAL);
  cr_expect(strstr(err, "but unrelated") != NULL, "%s", err);
}

Test(mets_add, ids_that_are_no_xs_id_are_refused) {
  static const char *const BAD[] = {"1x", "a b", "a/b", "a:b", "-a", "é1"};
  char err[MQPROC_ERR_LEN], *before = find(&(mqproc__mets_query_t){0}), *after;
  mqproc__mets_why_t why;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(BAD); i++) {
    mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG", .file_id = BAD[i], .mimetype = "a/b"};
    cr_expect_eq(add(&f, 0, &why, err), MQPROC_EINVAL, "%s accepted", BAD[i]);
    cr_expect_eq(why, MQPROC__METS_WHY_VALUE);
    f = (mqproc__mets_file_t){.file_grp = BAD[i], .file_id = "ok", .mimetype = "a/b"};
    cr_expect_eq(add(&f, 0, &why, err), MQPROC_EINVAL, "fileGrp %s accepted", BAD[i]);
  }
  {
    mqproc__mets_file_t f = {.file_grp = "G", .file_id = "", .mimetype = "a/b"};
    cr_expect_eq(add(&f, 0, &why, err), MQPROC_EINVAL);
    f.file_id = "a\u00e9\u0663_1.x-y"; /* Unicode letters and digits are \w, as in Python */
    cr_expect_eq(add(&f, 0, &why, err), MQPROC_OK, "%s", err);
    f.file_id = "ctl";
    f.local_filename = "a\x01b"; /* not XML text: lxml refuses it */
    cr_expect_eq(add(&f, 0, &why, err), MQPROC_EINVAL);
    cr_expect_eq(why, MQPROC__METS_WHY_VALUE);
  }
  after = find(&(mqproc__mets_query_t){.file_grp = "//OCR-D-.*"});
  cr_expect_str_eq(after, before, "a refused file changed the METS");
  free(before);
  free(after);
}

/* OCR-D allows an ID that another fileGrp has; the ID's fptr moves to the new page. */
Test(mets_add, an_id_of_another_group) {
  char err[MQPROC_ERR_LEN], *s;
  mqproc__mets_file_t f = {.file_grp = "OCR-D-IMG",
                           .file_id = "GT_0001",
                           .page_id = "PHYS_0003",
                           .mimetype = "image/png"};
  cr_assert_eq(add(&f, 0, NULL, err), MQPROC_OK, "%s", err);
  s = find(&(mqproc__mets_query_t){.file_id = "GT_0001"});
  cr_expect(
      strstr(s, "\"file_grp\":\"OCR-D-IMG\",\"file_id\":\"GT_0001\",\"page_id\":\"PHYS_0003\""),
      "%s", s);
  cr_expect(
      strstr(s, "\"file_grp\":\"OCR-D-GT\",\"file_id\":\"GT_0001\",\"page_id\":\"PHYS_0003\""),
      "%s", s);
  free(s);
}

Test(mets_add, agents_after_the_last) {
  char err[MQPROC_ERR_LEN], *s;
  json_t *notes = json_pack("[[{s:s}, s], [{s:s}, s], [{s:s}, n]]", "option", "input-file-grp",
                            "OCR-D-IMG", "option", "page-id", "", "option", "parameter");
  mqproc__mets_agent_t a = {.name = "ocrd-x 1.0",
                            .type = "OTHER",
                            .othertype = "SOFTWARE",
                            .role = "OTHER",
                            .otherrole = "layout/analysis",
                            .notes = notes};
  json_t *agents;
  cr_assert_eq(mqproc__mets_add_agent(m, &a, err), MQPROC_OK, "%s", err);
  agents = mqproc__mets_agents(m);
  cr_assert_eq(json_array_size(agents), 3);
  s = json_dumps(json_array_get(agents, 2), JSON_COMPACT);
  cr_expect_str_eq(s,
                   "{\"name\":\"ocrd-x 1.0\",\"type\":\"OTHER\",\"role\":\"OTHER\",\"otherrole\":"
                   "\"layout/analysis\",\"othertype\":\"SOFTWARE\",\"notes\":[[{\"{https://"
                   "ocr-d.de}option\":\"input-file-grp\"},\"OCR-D-IMG\"],[{\"{https://ocr-d.de}"
                   "option\":\"page-id\"},\"\"],[{\"{https://ocr-d.de}option\":\"parameter\"},"
                   "null]]}");
  free(s);
  json_decref(agents);
  json_decref(notes);
  notes = json_pack("[[{s:s}]]", "option", "x"); /* not [attrs, text] */
  a.notes = notes;
  cr_expect_eq(mqproc__mets_add_agent(m, &a, err), MQPROC_EINVAL);
  json_decref(notes);
  notes = json_pack("[[{s:s}, s]]", "not a name", "x", "text");
  a.notes = notes;
  cr_expect_eq(mqproc__mets_add_agent(m, &a, err), MQPROC_EINVAL);
  json_decref(notes);
  agents = mqproc__mets_agents(m);
  cr_expect_eq(json_array_size(agents), 3, "a refused agent was added");
  json_decref(agents);
}

/* A METS without fileSec, structMap or agents gets them as OCR-D makes them. */
Test(mets_add, a_bare_mets_grows_what_it_lacks) {
  static const char BARE[] = "<mets:mets xmlns:mets=\"http://www.loc.gov/METS/\"/>";
  char dir[] = "/tmp/mqproc-mets-add-XXXXXX", path[64], err[MQPROC_ERR_LEN], *xml;
  size_t len;
  FILE *f;
  mqproc__mets_t *b;
  mqproc__mets_file_t file = {.file_grp = "G",
                              .file_id = "F1",
                              .page_id = "P1",
                              .mimetype = "text/plain",
                              .url = "http://x/y",
                              .local_filename = "G/F1.txt"};
  mqproc__mets_agent_t a = {.name = "n", .role = "CREATOR"};
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/mets.xml", dir);
  cr_assert_not_null(f = fopen(path, "w"));
  fputs(BARE, f);
  fclose(f);
  cr_assert_eq(mqproc__mets_load(path, &b, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_add_file(b, &file, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_add_agent(b, &a, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__mets_dump(b, &xml, &len, err), MQPROC_OK, "%s", err);
  cr_expect_str_eq(xml, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<mets:mets xmlns:mets=\"http://www.loc.gov/METS/\" "
                        "xmlns:xlink=\"http://www.w3.org/1999/xlink\">\n"
                        "  <mets:metsHdr>\n"
                        "    <mets:agent ROLE=\"CREATOR\">\n"
                        "      <mets:name>n</mets:name>\n"
                        "    </mets:agent>\n"
                        "  </mets:metsHdr>\n"
                        "  <mets:fileSec>\n"
                        "    <mets:fileGrp USE=\"G\">\n"
                        "      <mets:file ID=\"F1\" MIMETYPE=\"text/plain\">\n"
                        "        <mets:FLocat xlink:href=\"G/F1.txt\" LOCTYPE=\"OTHER\" "
                        "OTHERLOCTYPE=\"FILE\"/>\n"
                        "        <mets:FLocat xlink:href=\"http://x/y\" LOCTYPE=\"URL\"/>\n"
                        "      </mets:file>\n"
                        "    </mets:fileGrp>\n"
                        "  </mets:fileSec>\n"
                        "  <mets:structMap TYPE=\"PHYSICAL\">\n"
                        "    <mets:div TYPE=\"physSequence\">\n"
                        "      <mets:div TYPE=\"page\" ID=\"P1\">\n"
                        "        <mets:fptr FILEID=\"F1\"/>\n"
                        "      </mets:div>\n"
                        "    </mets:div>\n"
                        "  </mets:structMap>\n"
                        "</mets:mets>\n");
  free(xml);
  mqproc__mets_free(b);
  unlink(path);
  rmdir(dir);
}
