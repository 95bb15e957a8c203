/* ocrd-dummy libxml2 helpers: namespaces, element lookup, attribute copies, parse and dump. */
#ifndef OCRD_DUMMY_XMLUTIL_H
#define OCRD_DUMMY_XMLUTIL_H

#include <libxml/tree.h>
#include <stdbool.h>
#include <stddef.h>

#define METS_NS "http://www.loc.gov/METS/"
#define XLINK_NS "http://www.w3.org/1999/xlink"
#define OCRD_NS "https://ocr-d.de"
#define PAGE_NS "http://schema.primaresearch.org/PAGE/gts/pagecontent/2019-07-15"
#define XSI_NS "http://www.w3.org/2001/XMLSchema-instance"
#define MIMETYPE_PAGE "application/vnd.prima.page+xml"

/* libxml2 speaks unsigned char: these casts keep call sites readable. */
#define BX(s) ((const xmlChar *)(s))
#define CS(s) ((const char *)(s))

/* Whether n is an element named name in namespace ns (NULL: any namespace). */
bool dummy_xml_is(const xmlNode *n, const char *ns, const char *name);
/* The first element child of parent (or the next element sibling after `after`) that
 * dummy_xml_is(ns, name); NULL when none. */
xmlNode *dummy_xml_child(const xmlNode *parent, const char *ns, const char *name);
xmlNode *dummy_xml_next(const xmlNode *after, const char *ns, const char *name);
/* malloc()ed copy of attribute name (ns NULL: without namespace), NULL when absent. */
char *dummy_xml_attr(const xmlNode *n, const char *ns, const char *name);
/* Whether attribute name (no namespace) equals value. */
bool dummy_xml_attr_eq(const xmlNode *n, const char *name, const char *value);
/* A new element in ns under parent (appended), with attributes given as NULL-terminated
 * name, value pairs. NULL when out of memory. */
xmlNode *dummy_xml_add(xmlNode *parent, xmlNs *ns, const char *name, ...) __attribute__((sentinel));

/* Parses a document from memory (name is for messages) or a file, without network access,
 * dropping ignorable blanks when noblanks; NULL with err set ("file:line: why"). */
xmlDoc *dummy_xml_parse(const char *data, size_t len, const char *name, bool noblanks, char *err);
xmlDoc *dummy_xml_parse_file(const char *path, bool noblanks, char *err);
/* Serializes doc as UTF-8 with an XML declaration, indented when format; *data is
 * malloc()ed and NUL-terminated. */
int dummy_xml_dump(xmlDoc *doc, bool format, char **data, size_t *len, char *err);

/* The current local time as xsd:dateTime with microseconds (like Python's isoformat()). */
void dummy_xml_now(char *buf, size_t size);

#endif
