/* add_file and add_agent (mets.h): OCR-D's OcrdMets.add_file (with OcrdFile's setters and
 * set_physical_page_for_file, remove_one_file for force) and add_agent (with OcrdAgent's
 * setters), building the same elements in the same places. Everything is checked before the
 * tree is touched; a value lxml would refuse (not XML text) is a ValueError here too. */
#include "codec/mets_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Whether s is text lxml takes: UTF-8 of XML 1.0 characters (no C0 controls but tab, LF,
 * CR; no U+FFFE, U+FFFF). NULL passes. */
static int xml_text_ok(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = s != NULL ? strlen(s) : 0;
  while (n > 0) {
    size_t k = mqproc__utf8_seq_len(p, n);
    if (k == 0 || (k == 1 && *p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r'))
      return 0;
    if (k == 3 && p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf))
      return 0;
    p += k;
    n -= k;
  }
  return 1;
}

static int value_error(mqproc__mets_why_t *why, char *err, const char *fmt, const char *a) {
  if (why != NULL)
    *why = MQPROC__METS_WHY_VALUE;
  return mqproc__err(err, MQPROC_EINVAL, fmt, a);
}

static xmlNode *new_el(mqproc__mets_t *m, const char *local) {
  return xmlNewDocNode(m->doc, m->root->ns, BX(local), NULL);
}

/* A namespace for href declared on the root (prefix, else prefix1, prefix2, ...) unless
 * one is in scope there. */
static xmlNs *root_ns(mqproc__mets_t *m, const char *href, const char *prefix) {
  xmlNs *ns = xmlSearchNsByHref(m->doc, m->root, BX(href));
  char alt[64];
  for (int i = 0; ns == NULL && i < 100; i++) {
    snprintf(alt, sizeof(alt), i == 0 ? "%s" : "%s%d", prefix, i);
    if (xmlSearchNs(m->doc, m->root, BX(alt)) == NULL)
      ns = xmlNewNs(m->root, BX(href), BX(alt));
  }
  return ns;
}

/* An attribute set (or changed in place, keeping its position, as lxml does). */
static int set_attr(xmlNode *n, xmlNs *ns, const char *name, const char *value) {
  return (ns != NULL ? xmlSetNsProp(n, ns, BX(name), BX(value))
                     : xmlSetProp(n, BX(name), BX(value))) != NULL
             ? 0
             : -1;
}

/* The element's text set to text (a text node, empty for ""). */
static int set_text(mqproc__mets_t *m, xmlNode *n, const char *text) {
  xmlNode *t = xmlNewDocText(m->doc, BX(text));
  if (t == NULL)
    return -1;
  xmlAddChild(n, t);
  return 0;
}

/* ---- add_file --------------------------------------------------------------------------- */

static int same(const char *a, const char *b) {
  return a == NULL ? b == NULL : b != NULL && !strcmp(a, b);
}

/* The first mets:file in document order of ID id whose parent's USE is grp. */
static xmlNode *find_file(const mqproc__mets_t *m, const char *id, const char *grp) {
  for (xmlNode *n = m->root; (n = mqproc__mets_walk(n, m->root)) != NULL;)
    if (mqproc__mets_is(n, NULL, "file") && same(mqproc__mets_attr(n, "ID"), id) &&
        same(mqproc__mets_attr(n->parent, "USE"), grp))
      return n;
  return NULL;
}

/* Frees n once it is out of the tree. */
static void drop(xmlNode *n) {
  xmlUnlinkNode(n);
  xmlFreeNode(n);
}

/* remove_one_file: every fptr to its ID (a div left without children goes too), then it. */
static int remove_file(mqproc__mets_t *m, xmlNode *file) {
  const char *id = mqproc__mets_attr(file, "ID");
  xmlNode **fptrs = NULL;
  size_t n = 0, cap = 0;
  for (xmlNode *c = m->root; id != NULL && (c = mqproc__mets_walk(c, m->root)) != NULL;) {
    if (!mqproc__mets_is(c, NULL, "fptr") || !same(mqproc__mets_attr(c, "FILEID"), id))
      continue;
    if (n == cap) {
      xmlNode **more = mqproc__realloc(fptrs, (cap = cap ? cap * 2 : 8) * sizeof(*more));
      if (more == NULL) {
        free(fptrs);
        return -1;
      }
      fptrs = more;
    }
    fptrs[n++] = c;
  }
  for (size_t i = 0; i < n; i++) {
    xmlNode *div = fptrs[i]->parent, *c;
    drop(fptrs[i]);
    for (c = div->children; c != NULL && c->type == XML_TEXT_NODE; c = c->next)
      ;
    if (c == NULL && div != m->root) /* lxml's `not list(page_div)`: no child but text */
      drop(div);
  }
  free(fptrs);
  drop(file);
  return 0;
}

/* set_physical_page_for_file: the file's fptrs in the physical pages dropped, one made in
 * page's div (structMap, physSequence and div made when missing). */
static int set_page(mqproc__mets_t *m, const char *page, const char *id) {
  xmlNode **divs, *sm, *seq, *div, *fptr;
  size_t n;
  if (mqproc__mets_page_divs(m, &divs, &n) != 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    for (xmlNode *f = mqproc__mets_child(divs[i], "fptr", "FILEID", id), *next; f != NULL;
         f = next) {
      next = mqproc__mets_next(f->next, "fptr", "FILEID", id);
      drop(f);
    }
  free(divs);
  if ((sm = mqproc__mets_child(m->root, "structMap", "TYPE", "PHYSICAL")) == NULL) {
    if ((sm = new_el(m, "structMap")) == NULL || set_attr(sm, NULL, "TYPE", "PHYSICAL") != 0)
      return xmlFreeNode(sm), -1;
    xmlAddChild(m->root, sm);
  }
  if ((seq = mqproc__mets_child(sm, "div", "TYPE", "physSequence")) == NULL) {
    if ((seq = new_el(m, "div")) == NULL || set_attr(seq, NULL, "TYPE", "physSequence") != 0)
      return xmlFreeNode(seq), -1;
    xmlAddChild(sm, seq);
  }
  if ((div = mqproc__mets_child(seq, "div", "ID", page)) == NULL) { /* any TYPE, as OCR-D */
    if ((div = new_el(m, "div")) == NULL || set_attr(div, NULL, "TYPE", "page") != 0 ||
        set_attr(div, NULL, "ID", page) != 0)
      return xmlFreeNode(div), -1;
    xmlAddChild(seq, div);
  }
  if ((fptr = new_el(m, "fptr")) == NULL || set_attr(fptr, NULL, "FILEID", id) != 0)
    return xmlFreeNode(fptr), -1;
  xmlAddChild(div, fptr);
  return 0;
}

/* The fileGrp of USE grp in fileSec, both made when missing (add_file_group). */
static xmlNode *file_group(mqproc__mets_t *m, const char *grp) {
  xmlNode *sec = mqproc__mets_child(m->root, "fileSec", NULL, NULL), *g;
  if (sec == NULL) {
    if ((sec = new_el(m, "fileSec")) == NULL)
      return NULL;
    xmlAddChild(m->root, sec); /* at the end, as lxml's SubElement */
  }
  if ((g = mqproc__mets_child(sec, "fileGrp", "USE", grp)) == NULL) {
    if ((g = new_el(m, "fileGrp")) == NULL || set_attr(g, NULL, "USE", grp) != 0) {
      xmlFreeNode(g);
      return NULL;
    }
    xmlAddChild(sec, g);
  }
  return g;
}

/* str(OcrdFile): "<OcrdFile fileGrp=G ID=.., mimetype=.., url=.., local_filename=..]/> ". */
static char *file_str(xmlNode *file) {
  const char *grp = mqproc__mets_attr(file->parent, "USE"), *v[4];
  xmlNode *url = mqproc__mets_flocat(file, 0), *local = mqproc__mets_flocat(file, 1);
  v[0] = mqproc__mets_attr(file, "ID");
  v[1] = mqproc__mets_attr(file, "MIMETYPE");
  v[2] = mqproc__mets_attr_ns(url, XLINK_NS, "href");
  v[3] = mqproc__mets_attr_ns(local, XLINK_NS, "href");
  for (int i = 0; i < 4; i++)
    if (v[i] == NULL || *v[i] == '\0')
      v[i] = "---";
  return mqproc__asprintf("<OcrdFile fileGrp=%s ID=%s, mimetype=%s, url=%s, local_filename=%s]/> ",
                          grp != NULL ? grp : "None", v[0], v[1], v[2], v[3]);
}

/* The FileExistsError of an existing file: its text in err. */
static int exists_error(xmlNode *file, const char *id, int related, mqproc__mets_why_t *why,
                        char *err) {
  char *s = file_str(file);
  if (why != NULL)
    *why = MQPROC__METS_WHY_EXISTS;
  mqproc__err(err, MQPROC_EINVAL, "A file with ID==%.200s already exists %.600s %s", id,
              s != NULL ? s : "",
              related ? "and neither force nor ignore are set" : "but unrelated - cannot mitigate");
  free(s);
  return MQPROC_EINVAL;
}

/* The new mets:file: ID, MIMETYPE, then the FLocats (local, url), not in the tree yet. */
static xmlNode *new_file(mqproc__mets_t *m, const mqproc__mets_file_t *f, const char *url,
                         const char *local) {
  xmlNode *file = new_el(m, "file"), *l;
  xmlNs *xlink = url != NULL || local != NULL ? root_ns(m, XLINK_NS, "xlink") : NULL;
  if (file == NULL || set_attr(file, NULL, "ID", f->file_id) != 0 ||
      (f->mimetype != NULL && set_attr(file, NULL, "MIMETYPE", f->mimetype) != 0) ||
      ((url != NULL || local != NULL) && xlink == NULL))
    goto fail;
  for (int i = 0; i < 2; i++) {
    const char *href = i == 0 ? local : url;
    if (href == NULL)
      continue;
    if ((l = new_el(m, "FLocat")) == NULL)
      goto fail;
    xmlAddChild(file, l);
    if (set_attr(l, xlink, "href", href) != 0 ||
        set_attr(l, NULL, "LOCTYPE", i == 0 ? "OTHER" : "URL") != 0 ||
        (i == 0 && set_attr(l, NULL, "OTHERLOCTYPE", "FILE") != 0))
      goto fail;
  }
  return file;
fail:
  xmlFreeNode(file);
  return NULL;
}

static const char *none_if_empty(const char *s) {
  return s != NULL && *s != '\0' ? s : NULL;
}

/* add_file's ValueErrors, before anything is touched. */
static int check_file(const mqproc__mets_t *m, const mqproc__mets_file_t *f,
                      mqproc__mets_why_t *why, char *err) {
  char msg[MQPROC_ERR_LEN];
  const char *all[] = {f->file_grp, f->file_id, f->page_id, f->mimetype, f->url, f->local_filename};
  if (f->file_id == NULL || *f->file_id == '\0')
    return value_error(why, err, "Must set ID of the mets:file%s", "");
  if (f->file_grp == NULL || *f->file_grp == '\0')
    return value_error(why, err, "Must set fileGrp of the mets:file%s", "");
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(all); i++)
    if (!xml_text_ok(all[i]))
      return value_error(why, err, "All strings must be XML compatible: '%.200s'", all[i]);
  if (mqproc__mets_fullmatch(m->id, f->file_id, msg) != 1)
    return value_error(why, err, "Invalid syntax for mets:file/@ID %.200s (not an xs:ID)",
                       f->file_id);
  if (mqproc__mets_fullmatch(m->id, f->file_grp, msg) != 1)
    return value_error(why, err, "Invalid syntax for mets:fileGrp/@USE %.200s (not an xs:ID)",
                       f->file_grp);
  if (f->page_id != NULL && strchr(f->page_id, '"') != NULL) /* lxml's find() fails on it */
    return value_error(why, err, "invalid predicate: a page ID with '\"': %.200s", f->page_id);
  return MQPROC_OK;
}

int mqproc__mets_add_file(mqproc__mets_t *m, const mqproc__mets_file_t *f, int force,
                          mqproc__mets_why_t *why, char *err) {
  const char *page = none_if_empty(f->page_id);
  xmlNode *grp, *old, *file;
  int rc;
  if (why != NULL)
    *why = MQPROC__METS_WHY_NONE;
  if ((rc = check_file(m, f, why, err)) != MQPROC_OK)
    return rc;
  if ((old = find_file(m, f->file_id, f->file_grp)) != NULL) {
    if (!same(mqproc__mets_page_of(m, f->file_id), page) ||
        !same(mqproc__mets_attr(old, "MIMETYPE"), f->mimetype))
      return exists_error(old, f->file_id, 0, why, err);
    if (!force)
      return exists_error(old, f->file_id, 1, why, err);
  }
  if ((file = new_file(m, f, none_if_empty(f->url), none_if_empty(f->local_filename))) == NULL ||
      (grp = file_group(m, f->file_grp)) == NULL) {
    xmlFreeNode(file);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  while ((old = find_file(m, f->file_id, f->file_grp)) != NULL) /* force: the old one goes */
    if (remove_file(m, old) != 0) {
      xmlFreeNode(file);
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    }
  xmlAddChild(grp, file);
  if (page != NULL && set_page(m, page, f->file_id) != 0)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory (the file is added without its page)");
  return MQPROC_OK;
}

/* ---- add_agent ------------------------------------------------------------------------ */

/* Whether notes is null or [[{name: "value", ...}, "text" or null], ...] of XML names and
 * text. */
static int notes_ok(const json_t *notes) {
  size_t i;
  const json_t *note;
  if (notes == NULL || json_is_null(notes))
    return 1;
  if (!json_is_array(notes))
    return 0;
  json_array_foreach(notes, i, note) {
    const json_t *attrs = json_array_get(note, 0), *text = json_array_get(note, 1), *v;
    const char *k;
    if (!json_is_array(note) || json_array_size(note) != 2 || !json_is_object(attrs) ||
        !(json_is_null(text) || (json_is_string(text) && xml_text_ok(json_string_value(text)))))
      return 0;
    json_object_foreach((json_t *)attrs, k, v) {
      if (!json_is_string(v) || !xml_text_ok(json_string_value(v)) ||
          xmlValidateNCName(BX(k), 0) != 0)
        return 0;
    }
  }
  return 1;
}

/* The first mets:metsHdr in document order, made first in the root when missing. */
static xmlNode *mets_hdr(mqproc__mets_t *m) {
  xmlNode *hdr = m->root;
  while ((hdr = mqproc__mets_walk(hdr, m->root)) != NULL && !mqproc__mets_is(hdr, NULL, "metsHdr"))
    ;
  if (hdr != NULL || (hdr = new_el(m, "metsHdr")) == NULL)
    return hdr;
  if (m->root->children != NULL)
    xmlAddPrevSibling(m->root->children, hdr);
  else
    xmlAddChild(m->root, hdr);
  return hdr;
}

/* The agent's attributes and children as OcrdAgent's setters make them. */
static int fill_agent(mqproc__mets_t *m, xmlNode *ag, const mqproc__mets_agent_t *a) {
  xmlNode *name;
  size_t i;
  const json_t *note;
  if (a->name != NULL && ((name = new_el(m, "name")) == NULL ||
                          (xmlAddChild(ag, name), set_text(m, name, a->name)) != 0))
    return xmlFreeNode(name), -1;
  if ((a->type != NULL && set_attr(ag, NULL, "TYPE", a->type) != 0) ||
      (a->othertype != NULL && (set_attr(ag, NULL, "TYPE", "OTHER") != 0 ||
                                set_attr(ag, NULL, "OTHERTYPE", a->othertype) != 0)) ||
      (a->role != NULL && set_attr(ag, NULL, "ROLE", a->role) != 0) ||
      (a->otherrole != NULL && (set_attr(ag, NULL, "ROLE", "OTHER") != 0 ||
                                set_attr(ag, NULL, "OTHERROLE", a->otherrole) != 0)))
    return -1;
  json_array_foreach(json_is_array(a->notes) ? a->notes : NULL, i, note) {
    xmlNode *el = new_el(m, "note");
    xmlNs *ns;
    const char *k;
    const json_t *v, *text = json_array_get(note, 1);
    if (el == NULL)
      return -1;
    xmlAddChild(ag, el);
    if ((ns = xmlNewNs(el, BX(OCRD_NS), BX("ocrd"))) == NULL ||
        (json_is_string(text) && set_text(m, el, json_string_value(text)) != 0))
      return -1;
    json_object_foreach((json_t *)json_array_get(note, 0), k, v) {
      if (set_attr(el, ns, k, json_string_value(v)) != 0)
        return -1;
    }
  }
  return 0;
}

int mqproc__mets_add_agent(mqproc__mets_t *m, const mqproc__mets_agent_t *a, char *err) {
  const char *all[] = {a->name, a->type, a->othertype, a->role, a->otherrole};
  xmlNode *hdr, *ag, *last = NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(all); i++)
    if (!xml_text_ok(all[i]))
      return mqproc__err(err, MQPROC_EINVAL, "All strings must be XML compatible: '%.200s'",
                         all[i]);
  if (!notes_ok(a->notes))
    return mqproc__err(err, MQPROC_EINVAL,
                       "notes: expected [[{name: value, ...}, text or null], ...] of XML names "
                       "and text");
  if ((ag = new_el(m, "agent")) == NULL || fill_agent(m, ag, a) != 0 ||
      (hdr = mets_hdr(m)) == NULL) {
    xmlFreeNode(ag);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  for (xmlNode *c = mqproc__mets_child(hdr, "agent", NULL, NULL); c != NULL;
       c = mqproc__mets_next(c->next, "agent", NULL, NULL))
    last = c;
  if (last != NULL)
    xmlAddNextSibling(last, ag);
  else if (hdr->children != NULL)
    xmlAddPrevSibling(hdr->children, ag);
  else
    xmlAddChild(hdr, ag);
  return MQPROC_OK;
}
