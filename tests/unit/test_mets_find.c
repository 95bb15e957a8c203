/* Unit tests for src/codec/mets_find.c: find_files and OCR-D's page language, against
 * answers OCR-D core 3.12.1's own OcrdMets.find_all_files gave on the same document
 * (tests/data/mets/find.xml): every kind of page_id token (IDs, attributes of the physical
 * pages and of the logical divs linked to them, prefixes, ranges, regular expressions,
 * negation) and the errors OCR-D raises (ValueError, re.error). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

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

TestSuite(mets_find, .init = load, .fini = unload);

/* The file IDs of a find's answer, space-separated (the caller frees). */
static char *ids_of(json_t *files) {
  size_t i, len = 1;
  json_t *f;
  char *s;
  json_array_foreach(files, i, f) len +=
      strlen(json_string_value(json_object_get(f, "file_id"))) + 1;
  s = calloc(1, len);
  json_array_foreach(files, i, f) {
    if (i > 0)
      strcat(s, " ");
    strcat(s, json_string_value(json_object_get(f, "file_id")));
  }
  return s;
}

typedef struct fcase {
  mqproc__mets_query_t q;
  mqproc__mets_why_t why;
  const char *ids; /* NULL: refused */
} fcase_t;

/* What OCR-D's find_all_files answered (tests/data/mets/find.xml). */
static const fcase_t CASES[] = {
    {{}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003 GT_LOOSE"},
    {{.page_id = "PHYS_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "PHYS_0001,PHYS_0003"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0003 GT_0001 GT_0003"},
    {{.page_id = "PHYS_0002..PHYS_0004"},
     MQPROC__METS_WHY_NONE,
     "IMG_0002 IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "~PHYS_0001"}, MQPROC__METS_WHY_NONE, "IMG_0002 IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "//PHYS_000[12]"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 GT_0001"},
    {{.page_id = "~//PHYS_000[12]"}, MQPROC__METS_WHY_NONE, "IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "1..2"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 GT_0001"},
    {{.page_id = "ii"}, MQPROC__METS_WHY_NONE, "IMG_0002"},
    {{.page_id = "title"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "urn:page:3"}, MQPROC__METS_WHY_NONE, "IMG_0003 GT_0003"},
    {{.page_id = "LOG_1"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 GT_0001"},
    {{.page_id = "Intro"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 GT_0001"},
    {{.page_id = "chapter"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "monograph"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "DMDLOG_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "logical:LOG_2"}, MQPROC__METS_WHY_NONE, "IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "physical:order:3"}, MQPROC__METS_WHY_NONE, "IMG_0003 GT_0003"},
    {{.page_id = "physical:orderlabel:1"}, MQPROC__METS_WHY_NONE, "IMG_0003 GT_0003"},
    {{.page_id = "physical:label:title"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "physical:contentids:urn:page:3"}, MQPROC__METS_WHY_NONE, "IMG_0003 GT_0003"},
    {{.page_id = "physical:id:PHYS_0004"}, MQPROC__METS_WHY_NONE, "IMG_0004"},
    {{.page_id = "logical:label:Main"}, MQPROC__METS_WHY_NONE, "IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "logical:dmdid:DMDLOG_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "PHYS_0009"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "PHYS_0003..PHYS_0009"}, MQPROC__METS_WHY_NONE, "IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "PHYS_0000..PHYS_0002"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "PHYS_0004..PHYS_0002"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "A1..B2"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "A..B"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "~"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "physical:"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "logical:id:"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "//"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "~//"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "//(("}, MQPROC__METS_WHY_REGEX, NULL},
    {{.page_id = "PHYS_0001,,PHYS_0002"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = ","}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = ""}, MQPROC__METS_WHY_NONE, ""},
    {{.page_id = "~PHYS_0009"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "PHYS_0001,PHYS_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "//.*,~ii"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "1..3,~//PHYS_0002"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0003 GT_0001 GT_0003"},
    {{.page_id = "~PHYS_0001,~PHYS_0002"}, MQPROC__METS_WHY_NONE, "IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "~PHYS_0001..PHYS_0003"}, MQPROC__METS_WHY_NONE, "IMG_0004"},
    {{.page_id = "i..ii"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "chapter,chapter"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "physical:PHYS_0002"}, MQPROC__METS_WHY_NONE, "IMG_0002"},
    {{.page_id = "logical:id:LOG_1..LOG_2"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "LOG_1..LOG_2"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "//L.*"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "//Intro|title"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "2..3"}, MQPROC__METS_WHY_NONE, "IMG_0002 IMG_0003 GT_0003"},
    {{.page_id = "logical:chapter"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "~logical:chapter"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "logical:type:chapter"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "logical:type:chapter..chapter"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "Intro,Main"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003"},
    {{.page_id = "PHYS_0001..PHYS_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001 GT_0001"},
    {{.page_id = "PHYS_1..PHYS_0004"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "PHYS_0002..PHYS_4"}, MQPROC__METS_WHY_NONE, "IMG_0002 IMG_0003 IMG_0004 GT_0003"},
    {{.page_id = "PHYS_0002..X_0003"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "physical:ID:PHYS_0001"}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "//PHYS_000[1-4],~//PHYS_000[34]"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 GT_0001"},
    {{.page_id = "PHYS_0001,//(("}, MQPROC__METS_WHY_REGEX, NULL},
    {{.page_id = "~,//(("}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "//((,~"}, MQPROC__METS_WHY_REGEX, NULL},
    {{.file_grp = "OCR-D-GT"}, MQPROC__METS_WHY_NONE, "GT_0001 GT_0003 GT_LOOSE"},
    {{.file_grp = "//OCR-D-.*"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001 GT_0003 GT_LOOSE"},
    {{.file_grp = "//OCR"}, MQPROC__METS_WHY_NONE, ""},
    {{.file_grp = "//"}, MQPROC__METS_WHY_NONE, ""},
    {{.file_grp = "NOPE"}, MQPROC__METS_WHY_NONE, ""},
    {{.file_id = "IMG_0002"}, MQPROC__METS_WHY_NONE, "IMG_0002"},
    {{.file_id = "//IMG_000[13]"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0003"},
    {{.file_id = "//(("}, MQPROC__METS_WHY_REGEX, NULL},
    {{.file_id = "//a{2"}, MQPROC__METS_WHY_NONE, ""},
    {{.mimetype = "image/png"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 IMG_0004"},
    {{.mimetype = "//image/.*"}, MQPROC__METS_WHY_NONE, "IMG_0001 IMG_0002 IMG_0003 IMG_0004"},
    {{.mimetype = "//"}, MQPROC__METS_WHY_NONE, "GT_LOOSE"},
    {{.url = "//http://.*"}, MQPROC__METS_WHY_NONE, "IMG_0004 GT_0001"},
    {{.url = "http://example.org/GT_0001.xml"}, MQPROC__METS_WHY_NONE, "GT_0001"},
    {{.url = "//[z-a]"}, MQPROC__METS_WHY_REGEX, NULL},
    {{.local_filename = "OCR-D-GT/GT_0003.xml"}, MQPROC__METS_WHY_NONE, "GT_0003"},
    {{.local_filename = "//.*"}, MQPROC__METS_WHY_NONE, ""},
    {{.page_id = "PHYS_0001", .file_grp = "OCR-D-IMG"}, MQPROC__METS_WHY_NONE, "IMG_0001"},
    {{.page_id = "PHYS_0009", .file_id = "//(("}, MQPROC__METS_WHY_VALUE, NULL},
    {{.page_id = "", .file_id = "//(("}, MQPROC__METS_WHY_REGEX, NULL},
    {{.page_id = "PHYS_0003", .mimetype = "//image/.*", .file_grp = "//OCR-D-(IMG|GT)"},
     MQPROC__METS_WHY_NONE,
     "IMG_0003"},
    {{.file_id = "//IMG_.*|GT_0001"},
     MQPROC__METS_WHY_NONE,
     "IMG_0001 IMG_0002 IMG_0003 IMG_0004 GT_0001"},
    {{.file_id = "//(?i)img_0001"}, MQPROC__METS_WHY_NONE, "IMG_0001"},
};

static void show(const mqproc__mets_query_t *q, char *out, size_t n) {
  snprintf(out, n, "grp=%s id=%s page=%s mime=%s url=%s local=%s", q->file_grp ? q->file_grp : "-",
           q->file_id ? q->file_id : "-", q->page_id ? q->page_id : "-",
           q->mimetype ? q->mimetype : "-", q->url ? q->url : "-",
           q->local_filename ? q->local_filename : "-");
}

Test(mets_find, answers_as_ocrd_does) {
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(CASES); i++) {
    const fcase_t *c = &CASES[i];
    char err[MQPROC_ERR_LEN] = "", q[512];
    json_t *files = NULL;
    mqproc__mets_why_t why;
    int rc = mqproc__mets_query(m, &c->q, &files, &why, err);
    show(&c->q, q, sizeof(q));
    if (c->ids == NULL) {
      cr_expect_eq(rc, MQPROC_EINVAL, "%s: accepted, OCR-D refuses it", q);
      cr_expect_eq(why, c->why, "%s: refused as %d, OCR-D as %d (%s)", q, why, c->why, err);
      cr_expect_null(files);
      cr_expect_neq(err[0], '\0', "%s: no reason given", q);
    } else {
      char *ids;
      cr_assert_eq(rc, MQPROC_OK, "%s: %s", q, err);
      ids = ids_of(files);
      cr_expect_str_eq(ids, c->ids, "%s", q);
      free(ids);
    }
    json_decref(files);
  }
}

Test(mets_find, a_file_as_ocrd_lists_it) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_query_t q = {.file_id = "GT_0001"};
  json_t *files, *f;
  cr_assert_eq(mqproc__mets_find(m, &q, &files, err), MQPROC_OK, "%s", err);
  cr_assert_eq(json_array_size(files), 1);
  f = json_array_get(files, 0);
  cr_expect_str_eq(json_string_value(json_object_get(f, "file_grp")), "OCR-D-GT");
  cr_expect_str_eq(json_string_value(json_object_get(f, "page_id")), "PHYS_0001");
  cr_expect_str_eq(json_string_value(json_object_get(f, "mimetype")),
                   "application/vnd.prima.page+xml");
  cr_expect_str_eq(json_string_value(json_object_get(f, "url")), "http://example.org/GT_0001.xml");
  cr_expect_str_eq(json_string_value(json_object_get(f, "local_filename")), "OCR-D-GT/GT_0001.xml");
  json_decref(files);
  q = (mqproc__mets_query_t){.file_id = "GT_LOOSE"}; /* no page, no mimetype, no URL */
  cr_assert_eq(mqproc__mets_find(m, &q, &files, err), MQPROC_OK, "%s", err);
  f = json_array_get(files, 0);
  cr_expect(json_is_null(json_object_get(f, "page_id")));
  cr_expect(json_is_null(json_object_get(f, "mimetype")));
  cr_expect(json_is_null(json_object_get(f, "url")));
  cr_expect_str_eq(json_string_value(json_object_get(f, "local_filename")), "OCR-D-GT/loose.xml");
  json_decref(files);
}

Test(mets_find, a_regex_error_says_why) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_query_t q = {.file_grp = "//(("};
  json_t *files;
  cr_assert_eq(mqproc__mets_find(m, &q, &files, err), MQPROC_EINVAL);
  cr_expect(!strncmp(err, "invalid regex: ", 15), "%s", err);
}

/* A range beyond the limit is refused, not expanded (Python would build the list). */
Test(mets_find, a_huge_range_is_refused) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_query_t q = {.page_id = "PHYS_0001..PHYS_99999999"};
  json_t *files;
  mqproc__mets_why_t why;
  cr_assert_eq(mqproc__mets_query(m, &q, &files, &why, err), MQPROC_EINVAL);
  cr_expect_eq(why, MQPROC__METS_WHY_VALUE);
  q.page_id = "PHYS_0001..PHYS_9999999999999999999999";
  cr_assert_eq(mqproc__mets_query(m, &q, &files, &why, err), MQPROC_EINVAL);
}

/* A pattern that backtracks without end is stopped (Python's re would hang). */
Test(mets_find, a_catastrophic_regex_is_stopped) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_query_t q = {.file_id =
                                "//(a*)*b|(I|IM|IMG|_|0|1|2|3|4|M|G)*(I|IM|IMG|_|0|1|2|3|4|M|G)*x"};
  json_t *files;
  int rc = mqproc__mets_find(m, &q, &files, err);
  cr_assert(rc == MQPROC_OK || rc == MQPROC_EINVAL);
  if (rc == MQPROC_OK)
    json_decref(files);
}

Test(mets_find, pages_groups_and_identifier) {
  json_t *pages = mqproc__mets_physical_pages(m), *groups = mqproc__mets_file_groups(m);
  char *id = NULL, *s;
  cr_assert_not_null(pages);
  s = json_dumps(pages, JSON_COMPACT);
  cr_expect_str_eq(s, "[\"PHYS_0001\",\"PHYS_0002\",\"PHYS_0003\",\"PHYS_0004\"]");
  free(s);
  s = json_dumps(groups, JSON_COMPACT);
  cr_expect_str_eq(s, "[\"OCR-D-IMG\",\"OCR-D-GT\"]");
  free(s);
  cr_assert_eq(mqproc__mets_unique_identifier(m, &id), 1);
  cr_expect_str_eq(id, "urn:nbn:de:example-1"); /* urn before url */
  free(id);
  json_decref(pages);
  json_decref(groups);
}

Test(mets_find, agents_with_their_notes) {
  json_t *agents = mqproc__mets_agents(m);
  char *s = json_dumps(agents, JSON_COMPACT);
  cr_expect_str_eq(
      s,
      "[{\"name\":\"ocrd/core v3.12.1\",\"type\":\"OTHER\",\"role\":\"CREATOR\",\"otherrole\":"
      "null,\"othertype\":\"SOFTWARE\",\"notes\":[]},{\"name\":\"ocrd-dummy v1\",\"type\":"
      "\"OTHER\",\"role\":\"OTHER\",\"otherrole\":\"preprocessing/optimization\",\"othertype\":"
      "\"SOFTWARE\",\"notes\":[[{\"{https://ocr-d.de}option\":\"input-file-grp\"},\"OCR-D-IMG\"],"
      "[{\"{https://ocr-d.de}option\":\"page-id\"},null]]}]");
  free(s);
  json_decref(agents);
}
