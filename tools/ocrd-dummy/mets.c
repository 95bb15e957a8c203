/* ocrd-dummy METS: read the physical pages and fileGrps, add files, fptrs and agents, dump. */
#include "mets.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"
#include "xmlutil.h"

/* Indexes every mets:file of fileSec/fileGrp by ID. */
static void index_files(dummy_mets_t *m) {
  xmlNode *sec = dummy_xml_child(m->root, METS_NS, "fileSec");
  for (xmlNode *g = sec ? dummy_xml_child(sec, METS_NS, "fileGrp") : NULL; g != NULL;
       g = dummy_xml_next(g, METS_NS, "fileGrp")) {
    for (xmlNode *f = dummy_xml_child(g, METS_NS, "file"); f != NULL;
         f = dummy_xml_next(f, METS_NS, "file")) {
      xmlChar *id = xmlGetNoNsProp(f, BX("ID"));
      if (id != NULL)
        xmlHashAddEntry(m->files, id, f); /* a duplicate ID keeps the first */
      xmlFree(id);
    }
  }
}

/* The physSequence div of the PHYSICAL structMap, or NULL. */
static xmlNode *phys_sequence(const dummy_mets_t *m) {
  for (xmlNode *s = dummy_xml_child(m->root, METS_NS, "structMap"); s != NULL;
       s = dummy_xml_next(s, METS_NS, "structMap")) {
    if (!dummy_xml_attr_eq(s, "TYPE", "PHYSICAL"))
      continue;
    for (xmlNode *d = dummy_xml_child(s, METS_NS, "div"); d != NULL;
         d = dummy_xml_next(d, METS_NS, "div"))
      if (dummy_xml_attr_eq(d, "TYPE", "physSequence"))
        return d;
  }
  return NULL;
}

static bool is_page_div(const xmlNode *d) {
  return dummy_xml_attr_eq(d, "TYPE", "page") && xmlHasProp(d, BX("ID")) != NULL;
}

/* Records page i and the files its fptrs point at. */
static void index_fptrs(dummy_mets_t *m, size_t i) {
  for (xmlNode *p = dummy_xml_child(m->page_divs[i], METS_NS, "fptr"); p != NULL;
       p = dummy_xml_next(p, METS_NS, "fptr")) {
    xmlChar *fid = xmlGetNoNsProp(p, BX("FILEID"));
    if (fid != NULL)
      xmlHashAddEntry(m->file_pg, fid, (void *)(uintptr_t)(i + 1));
    xmlFree(fid);
  }
}

static int index_pages(dummy_mets_t *m, char *err) {
  xmlNode *seq = phys_sequence(m);
  size_t n = 0;
  for (xmlNode *d = seq ? dummy_xml_child(seq, METS_NS, "div") : NULL; d != NULL;
       d = dummy_xml_next(d, METS_NS, "div"))
    n += is_page_div(d);
  m->page_divs = calloc(n + 1, sizeof(*m->page_divs));
  m->page_ids = calloc(n + 1, sizeof(*m->page_ids));
  if (m->page_divs == NULL || m->page_ids == NULL)
    return dummy_err(err, "out of memory");
  for (xmlNode *d = seq ? dummy_xml_child(seq, METS_NS, "div") : NULL; d != NULL;
       d = dummy_xml_next(d, METS_NS, "div")) {
    if (!is_page_div(d))
      continue;
    m->page_divs[m->n_pages] = d;
    if ((m->page_ids[m->n_pages] = dummy_xml_attr(d, NULL, "ID")) == NULL)
      return dummy_err(err, "out of memory");
    index_fptrs(m, m->n_pages++);
  }
  return 0;
}

int dummy_mets_parse(dummy_mets_t **out, const char *data, size_t len, const char *name,
                     char *err) {
  xmlDoc *doc = dummy_xml_parse(data, len, name, true, err);
  return doc != NULL ? dummy_mets_from_doc(out, doc, name, err) : -1;
}

int dummy_mets_from_doc(dummy_mets_t **out, xmlDoc *doc, const char *name, char *err) {
  dummy_mets_t *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    xmlFreeDoc(doc);
    return dummy_err(err, "out of memory");
  }
  m->doc = doc;
  m->root = xmlDocGetRootElement(m->doc);
  if (!dummy_xml_is(m->root, METS_NS, "mets")) {
    dummy_err(err, "%s: not a METS document (the root is not mets:mets)", name);
    goto out_free;
  }
  m->ns = m->root->ns;
  m->files = xmlHashCreate(64);
  m->file_pg = xmlHashCreate(64);
  if (m->files == NULL || m->file_pg == NULL) {
    dummy_err(err, "out of memory");
    goto out_free;
  }
  index_files(m);
  if (index_pages(m, err) != 0)
    goto out_free;
  *out = m;
  return 0;
out_free:
  dummy_mets_free(m);
  return -1;
}

void dummy_mets_free(dummy_mets_t *m) {
  if (m == NULL)
    return;
  for (size_t i = 0; m->page_ids != NULL && i < m->n_pages; i++)
    free(m->page_ids[i]);
  free(m->page_ids);
  free(m->page_divs);
  xmlHashFree(m->files, NULL);
  xmlHashFree(m->file_pg, NULL);
  xmlFreeDoc(m->doc);
  free(m);
}

xmlNode *dummy_mets_grp(const dummy_mets_t *m, const char *use) {
  xmlNode *sec = dummy_xml_child(m->root, METS_NS, "fileSec");
  for (xmlNode *g = sec ? dummy_xml_child(sec, METS_NS, "fileGrp") : NULL; g != NULL;
       g = dummy_xml_next(g, METS_NS, "fileGrp"))
    if (dummy_xml_attr_eq(g, "USE", use))
      return g;
  return NULL;
}

xmlNode *dummy_mets_file(const dummy_mets_t *m, const char *id) {
  return xmlHashLookup(m->files, BX(id));
}

long dummy_mets_file_page(const dummy_mets_t *m, const char *id) {
  return (long)(uintptr_t)xmlHashLookup(m->file_pg, BX(id)) - 1;
}

bool dummy_mets_page_has_grp(const dummy_mets_t *m, size_t i, const xmlNode *grp) {
  for (xmlNode *p = dummy_xml_child(m->page_divs[i], METS_NS, "fptr"); p != NULL;
       p = dummy_xml_next(p, METS_NS, "fptr")) {
    xmlChar *fid = xmlGetNoNsProp(p, BX("FILEID"));
    xmlNode *f = fid != NULL ? xmlHashLookup(m->files, fid) : NULL;
    xmlFree(fid);
    if (f != NULL && f->parent == grp)
      return true;
  }
  return false;
}

char *dummy_mets_href(const xmlNode *file) {
  xmlNode *first = dummy_xml_child(file, METS_NS, "FLocat");
  for (xmlNode *l = first; l != NULL; l = dummy_xml_next(l, METS_NS, "FLocat"))
    if (dummy_xml_attr_eq(l, "LOCTYPE", "OTHER") && dummy_xml_attr_eq(l, "OTHERLOCTYPE", "FILE"))
      return dummy_xml_attr(l, XLINK_NS, "href");
  return first != NULL ? dummy_xml_attr(first, XLINK_NS, "href") : NULL;
}

/* A namespace usable for attributes (so with a prefix) in scope at node, declared on
 * decl_on when missing. */
static xmlNs *attr_ns(xmlNode *node, xmlNode *decl_on, const char *href, const char *prefix) {
  xmlNs *ns = xmlSearchNsByHref(node->doc, node, BX(href));
  if (ns != NULL && ns->prefix != NULL)
    return ns;
  return xmlNewNs(decl_on, BX(href), BX(prefix));
}

/* The fileGrp USE=use, with the fileSec (before the first structMap) when missing. */
static xmlNode *ensure_grp(dummy_mets_t *m, const char *use) {
  xmlNode *grp = dummy_mets_grp(m, use), *sec, *smap;
  if (grp != NULL)
    return grp;
  if ((sec = dummy_xml_child(m->root, METS_NS, "fileSec")) == NULL) {
    if ((sec = xmlNewDocNode(m->doc, m->ns, BX("fileSec"), NULL)) == NULL)
      return NULL;
    smap = dummy_xml_child(m->root, METS_NS, "structMap");
    sec = smap != NULL ? xmlAddPrevSibling(smap, sec) : xmlAddChild(m->root, sec);
  }
  return dummy_xml_add(sec, m->ns, "fileGrp", "USE", use, NULL);
}

int dummy_mets_add_file(dummy_mets_t *m, const char *use, const char *id, const char *mime,
                        const char *href, size_t page, char *err) {
  xmlNode *grp = ensure_grp(m, use), *file = NULL, *loc = NULL;
  xmlNs *xl;
  if (grp != NULL)
    file = dummy_xml_add(grp, m->ns, "file", "ID", id, "MIMETYPE", mime, NULL);
  if (file != NULL)
    loc = dummy_xml_add(file, m->ns, "FLocat", "LOCTYPE", "OTHER", "OTHERLOCTYPE", "FILE", NULL);
  if (loc == NULL || (xl = attr_ns(loc, m->root, XLINK_NS, "xlink")) == NULL ||
      xmlNewNsProp(loc, xl, BX("href"), BX(href)) == NULL)
    return dummy_err(err, "cannot add mets:file %s to the METS", id);
  if (xmlHashAddEntry(m->files, BX(id), file) != 0 ||
      dummy_xml_add(m->page_divs[page], m->ns, "fptr", "FILEID", id, NULL) == NULL)
    return dummy_err(err, "cannot add mets:file %s to the METS", id);
  xmlHashAddEntry(m->file_pg, BX(id), (void *)(uintptr_t)(page + 1));
  return 0;
}

void dummy_mets_remove_file(dummy_mets_t *m, xmlNode *file) {
  xmlChar *id = xmlGetNoNsProp(file, BX("ID"));
  for (size_t i = 0; id != NULL && i < m->n_pages; i++) {
    xmlNode *p = dummy_xml_child(m->page_divs[i], METS_NS, "fptr"), *next;
    for (; p != NULL; p = next) {
      next = dummy_xml_next(p, METS_NS, "fptr");
      if (dummy_xml_attr_eq(p, "FILEID", CS(id))) {
        xmlUnlinkNode(p);
        xmlFreeNode(p);
      }
    }
  }
  if (id != NULL) {
    xmlHashRemoveEntry(m->files, id, NULL);
    xmlHashRemoveEntry(m->file_pg, id, NULL);
  }
  xmlFree(id);
  xmlUnlinkNode(file);
  xmlFreeNode(file);
}

/* mets:metsHdr, created as the first child of the root when missing. */
static xmlNode *ensure_hdr(dummy_mets_t *m) {
  xmlNode *hdr = dummy_xml_child(m->root, METS_NS, "metsHdr");
  if (hdr != NULL || (hdr = xmlNewDocNode(m->doc, m->ns, BX("metsHdr"), NULL)) == NULL)
    return hdr;
  return m->root->children != NULL ? xmlAddPrevSibling(m->root->children, hdr)
                                   : xmlAddChild(m->root, hdr);
}

/* Places agent after the last mets:agent of hdr, else first. */
static xmlNode *insert_agent(xmlNode *hdr, xmlNode *agent) {
  xmlNode *last = NULL;
  for (xmlNode *a = dummy_xml_child(hdr, METS_NS, "agent"); a != NULL;
       a = dummy_xml_next(a, METS_NS, "agent"))
    last = a;
  if (last != NULL)
    return xmlAddNextSibling(last, agent);
  return hdr->children != NULL ? xmlAddPrevSibling(hdr->children, agent) : xmlAddChild(hdr, agent);
}

static int add_note(xmlNode *agent, xmlNs *ns, const dummy_note_t *note) {
  xmlNode *el = xmlNewTextChild(agent, ns, BX("note"), BX(note->text));
  xmlNs *ocrd = el != NULL ? attr_ns(el, el, OCRD_NS, "ocrd") : NULL;
  return ocrd != NULL && xmlNewNsProp(el, ocrd, BX("option"), BX(note->option)) != NULL ? 0 : -1;
}

int dummy_mets_add_agent(dummy_mets_t *m, const char *name, const char *role,
                         const dummy_note_t *notes, size_t n_notes, char *err) {
  xmlNode *hdr = ensure_hdr(m), *agent = xmlNewDocNode(m->doc, m->ns, BX("agent"), NULL);
  if (hdr == NULL || agent == NULL) {
    xmlFreeNode(agent);
    return dummy_err(err, "cannot add mets:agent to the METS");
  }
  insert_agent(hdr, agent);
  if (xmlNewProp(agent, BX("TYPE"), BX("OTHER")) == NULL ||
      xmlNewProp(agent, BX("OTHERTYPE"), BX("SOFTWARE")) == NULL ||
      xmlNewProp(agent, BX("ROLE"), BX("OTHER")) == NULL ||
      xmlNewProp(agent, BX("OTHERROLE"), BX(role)) == NULL ||
      xmlNewTextChild(agent, m->ns, BX("name"), BX(name)) == NULL)
    return dummy_err(err, "cannot add mets:agent to the METS");
  for (size_t i = 0; i < n_notes; i++)
    if (add_note(agent, m->ns, &notes[i]) != 0)
      return dummy_err(err, "cannot add mets:note to the METS");
  return 0;
}

int dummy_mets_dump(const dummy_mets_t *m, char **data, size_t *len, char *err) {
  return dummy_xml_dump(m->doc, true, data, len, err);
}
