/* Shared checks of the ocrd-dummy tests: a generated workspace per test, runs, and XPath
 * assertions over METS and PAGE-XML (every helper fails the test through cr_assert). */
#ifndef MQPROC_TEST_OCRD_DUMMY_CHECK_H
#define MQPROC_TEST_OCRD_DUMMY_CHECK_H

#include <libxml/tree.h>
#include <stdbool.h>

#define PAGE_MIME "application/vnd.prima.page+xml"

extern char *ws_dir;  /* this test's workspace directory */
extern char *ws_mets; /* <ws_dir>/mets.xml */

/* Suite .init/.fini: a workspace with a 3-page METS and PNGs of 2x3, 7x5 and 1x1 pixels in
 * fileGrp OCR-D-IMG (see ows_create()); removed again by ws_teardown(). */
void ws_setup(void);
void ws_teardown(void);

/* <ws_dir>/<fmt...> in a static buffer (valid until the next call). */
const char *wpath(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* dummy_run() on ws_mets; err (DUMMY_ERR_LEN) gets the message. */
int ws_run(const char *in, const char *out, const char *page_id, const char *params, bool overwrite,
           char *err);
/* ws_run() that must succeed. */
void ws_run_ok(const char *in, const char *out, const char *page_id, const char *params);
/* ws_run() must fail with why in its message and leave the METS byte-identical. */
void assert_fails(const char *in, const char *out, const char *page_id, const char *params,
                  const char *why);
/* Rewrites the METS with the first occurrence of from replaced by to. */
void edit_mets(const char *from, const char *to);

/* A parsed XML file (xmlFreeDoc() it). */
xmlDoc *ws_load(const char *path);
/* count(<fmt...>) with the prefixes mets, xlink, ocrd and pc. */
int xcount(xmlDoc *doc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* string(<fmt...>) must equal want. */
void assert_xstr(xmlDoc *doc, const char *want, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* mets:file ID=id is in fileGrp grp once, with MIMETYPE mime and a local FLocat
 * (LOCTYPE OTHER, OTHERLOCTYPE FILE) href, and exactly one fptr to it, in page's div. */
void assert_file(xmlDoc *doc, const char *grp, const char *id, const char *mime, const char *href,
                 const char *page);
/* The n-th (from 1) mets:agent in metsHdr is ocrd-dummy's, with these four notes. */
void assert_agent(xmlDoc *doc, int n, const char *in, const char *out, const char *param,
                  const char *page_id);
/* The PAGE-XML at <ws_dir>/<href> has this pcGtsId, Page image and size, and ends its
 * Metadata with ocrd-dummy's MetadataItem with this copy_files label. */
void assert_page(const char *href, const char *id, const char *image, const char *w, const char *h,
                 const char *copy_files);
/* No ".*.tmp" file in the workspace or in OCR-D-DUMMY. */
void assert_no_temp_files(void);
bool ws_exists(const char *path);

#endif
