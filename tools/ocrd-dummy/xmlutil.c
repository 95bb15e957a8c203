/* ocrd-dummy libxml2 helpers: namespaces, element lookup, attribute copies, parse and dump. */
#include "xmlutil.h"

#include <libxml/parser.h>
#include <libxml/xmlsave.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fsio.h"

bool dummy_xml_is(const xmlNode *n, const char *ns, const char *name) {
  if (n == NULL || n->type != XML_ELEMENT_NODE || strcmp(CS(n->name), name) != 0)
    return false;
  if (ns == NULL)
    return true;
  return n->ns != NULL && n->ns->href != NULL && strcmp(CS(n->ns->href), ns) == 0;
}

xmlNode *dummy_xml_next(const xmlNode *after, const char *ns, const char *name) {
  for (xmlNode *n = after->next; n != NULL; n = n->next)
    if (dummy_xml_is(n, ns, name))
      return n;
  return NULL;
}

xmlNode *dummy_xml_child(const xmlNode *parent, const char *ns, const char *name) {
  for (xmlNode *n = parent->children; n != NULL; n = n->next)
    if (dummy_xml_is(n, ns, name))
      return n;
  return NULL;
}

char *dummy_xml_attr(const xmlNode *n, const char *ns, const char *name) {
  xmlChar *v = ns != NULL ? xmlGetNsProp(n, BX(name), BX(ns)) : xmlGetNoNsProp(n, BX(name));
  char *copy;
  if (v == NULL)
    return NULL;
  copy = strdup(CS(v));
  xmlFree(v);
  return copy;
}

bool dummy_xml_attr_eq(const xmlNode *n, const char *name, const char *value) {
  xmlChar *v = xmlGetNoNsProp(n, BX(name));
  bool eq = v != NULL && strcmp(CS(v), value) == 0;
  xmlFree(v);
  return eq;
}

xmlNode *dummy_xml_add(xmlNode *parent, xmlNs *ns, const char *name, ...) {
  xmlNode *n = xmlNewDocNode(parent->doc, ns, BX(name), NULL);
  const char *attr;
  va_list ap;
  if (n == NULL)
    return NULL;
  va_start(ap, name);
  while ((attr = va_arg(ap, const char *)) != NULL) {
    const char *value = va_arg(ap, const char *);
    if (xmlNewProp(n, BX(attr), BX(value)) == NULL) {
      va_end(ap);
      xmlFreeNode(n);
      return NULL;
    }
  }
  va_end(ap);
  return xmlAddChild(parent, n);
}

static void parse_error(xmlParserCtxt *ctxt, const char *name, char *err) {
  const xmlError *e = xmlCtxtGetLastError(ctxt);
  size_t len;
  if (e == NULL || e->message == NULL) {
    dummy_err(err, "%s: not well-formed XML", name);
    return;
  }
  dummy_err(err, "%s:%d: %s", name, e->line, e->message);
  len = strlen(err);
  while (len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' '))
    err[--len] = '\0';
}

static int parse_options(bool noblanks) {
  return XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
         (noblanks ? XML_PARSE_NOBLANKS : 0);
}

xmlDoc *dummy_xml_parse(const char *data, size_t len, const char *name, bool noblanks, char *err) {
  xmlParserCtxt *ctxt;
  xmlDoc *doc;
  if (len > INT_MAX) {
    dummy_err(err, "%s: too large", name);
    return NULL;
  }
  if ((ctxt = xmlNewParserCtxt()) == NULL) {
    dummy_err(err, "out of memory");
    return NULL;
  }
  doc = xmlCtxtReadMemory(ctxt, data, (int)len, name, NULL, parse_options(noblanks));
  if (doc == NULL)
    parse_error(ctxt, name, err);
  xmlFreeParserCtxt(ctxt);
  return doc;
}

xmlDoc *dummy_xml_parse_file(const char *path, bool noblanks, char *err) {
  xmlParserCtxt *ctxt = xmlNewParserCtxt();
  xmlDoc *doc;
  if (ctxt == NULL) {
    dummy_err(err, "out of memory");
    return NULL;
  }
  doc = xmlCtxtReadFile(ctxt, path, NULL, parse_options(noblanks));
  if (doc == NULL)
    parse_error(ctxt, path, err);
  xmlFreeParserCtxt(ctxt);
  return doc;
}

int dummy_xml_dump(xmlDoc *doc, bool format, char **data, size_t *len, char *err) {
  xmlBuffer *buf = xmlBufferCreate();
  xmlSaveCtxt *save;
  int rc = -1;
  if (buf == NULL)
    return dummy_err(err, "out of memory");
  save = xmlSaveToBuffer(buf, "UTF-8", format ? XML_SAVE_FORMAT : 0);
  if (save != NULL && xmlSaveDoc(save, doc) >= 0 && xmlSaveClose(save) >= 0) {
    save = NULL;
    *len = (size_t)xmlBufferLength(buf);
    if ((*data = malloc(*len + 1)) != NULL) {
      memcpy(*data, xmlBufferContent(buf), *len);
      (*data)[*len] = '\0';
      rc = 0;
    }
  }
  if (save != NULL)
    xmlSaveClose(save);
  xmlBufferFree(buf);
  if (rc != 0)
    dummy_err(err, "cannot serialize XML");
  return rc;
}

void dummy_xml_now(char *buf, size_t size) {
  struct timespec ts;
  struct tm tm;
  size_t n;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf + n, size - n, ".%06ld", ts.tv_nsec / 1000);
}
