/* Shared checks of the ocrd-dummy tests: a generated workspace per test, runs, and XPath
 * assertions over METS and PAGE-XML. */
#include "ocrd_dummy_check.h"

#include <criterion/criterion.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ocrd-dummy/dummy.h"
#include "ocrd-dummy/fsio.h"
#include "ocrd_workspace.h"

/* Three pages of different sizes, so that a wrong image would show. */
static const ows_page_t PAGES[] = {{2, 3}, {7, 5}, {1, 1}};

char *ws_dir;  /* the workspace directory */
char *ws_mets; /* <ws_dir>/mets.xml */

void ws_setup(void) {
  xmlInitParser();
  cr_assert_not_null(ws_dir = ows_mkdtemp());
  cr_assert_eq(ows_create(ws_dir, PAGES, 3), 0);
  cr_assert_neq(asprintf(&ws_mets, "%s/mets.xml", ws_dir), -1);
}

void ws_teardown(void) {
  dummy_fsio_commit_hook = NULL;
  ows_rmtree(ws_dir);
  free(ws_dir);
  free(ws_mets);
}

/* <ws_dir>/<rel> in a static buffer (one at a time). */
const char *wpath(const char *fmt, ...) {
  static char buf[4096];
  int n = snprintf(buf, sizeof(buf), "%s/", ws_dir);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
  va_end(ap);
  return buf;
}

int ws_run(const char *in, const char *out, const char *page_id, const char *params, bool overwrite,
           char *err) {
  dummy_opts_t o = {.mets = ws_mets,
                    .input_grp = in,
                    .output_grp = out,
                    .page_id = page_id,
                    .parameter_json = params,
                    .overwrite = overwrite};
  err[0] = '\0';
  return dummy_run(&o, err);
}

void ws_run_ok(const char *in, const char *out, const char *page_id, const char *params) {
  char err[DUMMY_ERR_LEN];
  cr_assert_eq(ws_run(in, out, page_id, params, false, err), 0, "%s", err);
}

/* ---- XPath over a document ---------------------------------------------------------- */

xmlDoc *ws_load(const char *path) {
  xmlDoc *doc = xmlReadFile(path, NULL, XML_PARSE_NONET);
  cr_assert_not_null(doc, "cannot parse %s", path);
  return doc;
}

/* Evaluates expr with the prefixes mets, xlink, ocrd and pc. */
static xmlXPathObject *eval(xmlDoc *doc, const char *expr) {
  xmlXPathContext *ctx = xmlXPathNewContext(doc);
  xmlXPathObject *res;
  xmlXPathRegisterNs(ctx, BAD_CAST "mets", BAD_CAST "http://www.loc.gov/METS/");
  xmlXPathRegisterNs(ctx, BAD_CAST "xlink", BAD_CAST "http://www.w3.org/1999/xlink");
  xmlXPathRegisterNs(ctx, BAD_CAST "ocrd", BAD_CAST "https://ocr-d.de");
  xmlXPathRegisterNs(ctx, BAD_CAST "pc",
                     BAD_CAST "http://schema.primaresearch.org/PAGE/gts/pagecontent/2019-07-15");
  res = xmlXPathEvalExpression(BAD_CAST expr, ctx);
  xmlXPathFreeContext(ctx);
  cr_assert_not_null(res, "bad XPath %s", expr);
  return res;
}

/* count(<fmt>) */
int xcount(xmlDoc *doc, const char *fmt, ...) {
  char expr[2048] = "count(";
  va_list ap;
  xmlXPathObject *res;
  int n;
  va_start(ap, fmt);
  vsnprintf(expr + 6, sizeof(expr) - 8, fmt, ap);
  va_end(ap);
  strcat(expr, ")");
  res = eval(doc, expr);
  n = (int)res->floatval;
  xmlXPathFreeObject(res);
  return n;
}

/* string(<fmt>) must equal want. */
void assert_xstr(xmlDoc *doc, const char *want, const char *fmt, ...) {
  char expr[2048] = "string(";
  va_list ap;
  xmlXPathObject *res;
  va_start(ap, fmt);
  vsnprintf(expr + 7, sizeof(expr) - 9, fmt, ap);
  va_end(ap);
  strcat(expr, ")");
  res = eval(doc, expr);
  cr_assert_str_eq((const char *)res->stringval, want, "%s", expr);
  xmlXPathFreeObject(res);
}

/* The mets:file ID=id exists once in fileGrp grp with this MIMETYPE and a local FLocat with
 * this href, and exactly one fptr to it sits in the div of page. */
void assert_file(xmlDoc *doc, const char *grp, const char *id, const char *mime, const char *href,
                 const char *page) {
  cr_assert_eq(xcount(doc, "//mets:file[@ID='%s']", id), 1, "one mets:file %s", id);
  assert_xstr(doc, mime, "//mets:fileGrp[@USE='%s']/mets:file[@ID='%s']/@MIMETYPE", grp, id);
  assert_xstr(doc, href,
              "//mets:file[@ID='%s']/mets:FLocat[@LOCTYPE='OTHER'][@OTHERLOCTYPE='FILE']/"
              "@xlink:href",
              id);
  cr_assert_eq(xcount(doc, "//mets:fptr[@FILEID='%s']", id), 1, "one fptr to %s", id);
  cr_assert_eq(xcount(doc,
                      "/mets:mets/mets:structMap[@TYPE='PHYSICAL']/mets:div[@TYPE='physSequence']"
                      "/mets:div[@TYPE='page'][@ID='%s']/mets:fptr[@FILEID='%s']",
                      page, id),
               1, "the fptr to %s is in page %s", id, page);
}

/* The n-th (1-based) agent is ocrd-dummy's with these four notes. */
void assert_agent(xmlDoc *doc, int n, const char *in, const char *out, const char *param,
                  const char *page_id) {
  char a[128];
  snprintf(a, sizeof(a), "/mets:mets/mets:metsHdr/mets:agent[%d]", n);
  assert_xstr(doc, "OTHER", "%s/@TYPE", a);
  assert_xstr(doc, "SOFTWARE", "%s/@OTHERTYPE", a);
  assert_xstr(doc, "OTHER", "%s/@ROLE", a);
  assert_xstr(doc, "preprocessing/optimization", "%s/@OTHERROLE", a);
  assert_xstr(doc, "ocrd-dummy v" DUMMY_VERSION, "%s/mets:name", a);
  cr_assert_eq(xcount(doc, "%s/mets:note", a), 4);
  assert_xstr(doc, in, "%s/mets:note[@ocrd:option='input-file-grp']", a);
  assert_xstr(doc, out, "%s/mets:note[@ocrd:option='output-file-grp']", a);
  assert_xstr(doc, param, "%s/mets:note[@ocrd:option='parameter']", a);
  assert_xstr(doc, page_id, "%s/mets:note[@ocrd:option='page-id']", a);
}

/* The PAGE-XML at <ws_dir>/<href>: its pcGtsId, image and our MetadataItem. */
void assert_page(const char *href, const char *id, const char *image, const char *w, const char *h,
                 const char *copy_files) {
  xmlDoc *doc = ws_load(wpath("%s", href));
  assert_xstr(doc, id, "/pc:PcGts/@pcGtsId");
  assert_xstr(doc, image, "/pc:PcGts/pc:Page/@imageFilename");
  assert_xstr(doc, w, "/pc:PcGts/pc:Page/@imageWidth");
  assert_xstr(doc, h, "/pc:PcGts/pc:Page/@imageHeight");
  cr_assert_eq(xcount(doc, "/pc:PcGts/pc:Metadata/pc:Creator"), 1);
  assert_xstr(doc, "ocrd-dummy",
              "/pc:PcGts/pc:Metadata/pc:MetadataItem[@type='processingStep']"
              "[@name='preprocessing/optimization'][last()]/@value");
  assert_xstr(doc, copy_files,
              "/pc:PcGts/pc:Metadata/pc:MetadataItem[last()]/pc:Labels[@externalId='parameters']"
              "/pc:Label[@type='copy_files']/@value");
  xmlFreeDoc(doc);
}

void assert_no_temp_files(void) {
  cr_assert_eq(ows_count_temp(ws_dir), 0, "temp files left in the workspace");
  cr_assert_eq(ows_count_temp(wpath("OCR-D-DUMMY")), 0, "temp files left in OCR-D-DUMMY");
}

bool ws_exists(const char *path) {
  return access(path, F_OK) == 0;
}

/* ws_run() fails with why in the message and leaves the METS byte-identical. */
void assert_fails(const char *in, const char *out, const char *page_id, const char *params,
                  const char *why) {
  char err[DUMMY_ERR_LEN], *before, *after;
  size_t before_len, after_len;
  before = ows_read(ws_mets, &before_len);
  cr_assert_eq(ws_run(in, out, page_id, params, false, err), -1, "expected: %s", why);
  cr_assert(strstr(err, why) != NULL, "'%s' lacks '%s'", err, why);
  after = ows_read(ws_mets, &after_len);
  cr_assert(before_len == after_len && memcmp(before, after, before_len) == 0,
            "%s: the METS is unchanged", why);
  free(before);
  free(after);
}

void edit_mets(const char *from, const char *to) {
  char *text = ows_read(ws_mets, NULL), *hit, *out;
  cr_assert_not_null(hit = strstr(text, from), "%s in the METS", from);
  cr_assert_neq(asprintf(&out, "%.*s%s%s", (int)(hit - text), text, to, hit + strlen(from)), -1);
  cr_assert_eq(ows_write_file(ws_mets, out, strlen(out)), 0);
  free(text);
  free(out);
}
