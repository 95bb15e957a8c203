/* What the files of the METS model (mets.c, mets_find.c, mets_add.c) share: the document,
 * element tests and walks in OCR-D's terms, PCRE2 matching as Python's re.fullmatch. */
#ifndef MQPROC_CODEC_METS_INT_H
#define MQPROC_CODEC_METS_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <libxml/tree.h>
#include <pcre2.h>

#include "codec/mets.h"

#define METS_NS "http://www.loc.gov/METS/"
#define MODS_NS "http://www.loc.gov/mods/v3"
#define XLINK_NS "http://www.w3.org/1999/xlink"
#define OCRD_NS "https://ocr-d.de"

#define BX(s) ((const xmlChar *)(s))
#define SX(s) ((const char *)(s))

struct mqproc__mets {
  xmlDoc *doc;
  xmlNode *root;  /* mets:mets */
  pcre2_code *id; /* OCR-D's REGEX_FILE_ID, ^[a-zA-Z_][\w.-]*$ */
};

/* Whether n is the element <local> of namespace ns (METS_NS when ns is NULL). */
int mqproc__mets_is(const xmlNode *n, const char *ns, const char *local);
/* n itself or its first following sibling that is mets:<local> with attr == value (attr
 * NULL: any such element); NULL when none is. */
xmlNode *mqproc__mets_next(xmlNode *n, const char *local, const char *attr, const char *value);
/* The first child of parent as mqproc__mets_next finds it. */
xmlNode *mqproc__mets_child(const xmlNode *parent, const char *local, const char *attr,
                            const char *value);
/* The value of n's attribute name (no namespace; ns: of that namespace), NULL when absent;
 * it points into the tree. */
const char *mqproc__mets_attr(const xmlNode *n, const char *name);
const char *mqproc__mets_attr_ns(const xmlNode *n, const char *ns, const char *name);
/* An element's text as lxml's .text gives it: the text before its first child that is not
 * text, malloc()ed; NULL when there is none (*oom set when the copy failed). */
char *mqproc__mets_text(const xmlNode *n, int *oom);
/* The next element after n in document order (descending into n), below top; NULL at the
 * end. */
xmlNode *mqproc__mets_walk(xmlNode *n, const xmlNode *top);

/* The physical pages' divs (structMap[@TYPE=PHYSICAL]/div[@TYPE=physSequence]/
 * div[@TYPE=page]) in order: a malloc()ed array (NULL and *n 0 when there is none; -1 when
 * out of memory). */
int mqproc__mets_page_divs(const mqproc__mets_t *m, xmlNode ***divs, size_t *n);
/* The @ID of the page whose div (as above) has the first fptr to file id, NULL if none. */
const char *mqproc__mets_page_of(const mqproc__mets_t *m, const char *id);
/* The FLocat a file's url (LOCTYPE=URL) or local_filename (LOCTYPE=OTHER
 * OTHERLOCTYPE=FILE) is in; NULL when it has none. */
xmlNode *mqproc__mets_flocat(const xmlNode *file, int local);

/* Compiles a Python-style regular expression for fullmatch: NULL with err (re.error's
 * place: "invalid regex: ..." is the caller's). */
pcre2_code *mqproc__mets_re(const char *pattern, char *err);
/* Whether re matches all of s: 1, 0, or -1 with err (a match limit reached). */
int mqproc__mets_fullmatch(const pcre2_code *re, const char *s, char *err);

#endif
