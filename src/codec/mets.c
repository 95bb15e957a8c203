/* The METS model (mets.h): loading, the walks the other files share, the reading calls, and
 * the atomic save. find_files is in mets_find.c, add_file and add_agent in mets_add.c. */
#include "codec/mets_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <libxml/parser.h>
#include <libxml/xmlsave.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "base/wslock.h"

/* ---- element tests and walks ----------------------------------------------------------- */

int mqproc__mets_is(const xmlNode *n, const char *ns, const char *local) {
  return n != NULL && n->type == XML_ELEMENT_NODE && n->ns != NULL &&
         !strcmp(SX(n->ns->href), ns != NULL ? ns : METS_NS) && !strcmp(SX(n->name), local);
}

const char *mqproc__mets_attr_ns(const xmlNode *n, const char *ns, const char *name) {
  const xmlAttr *a;
  if (n == NULL || n->type != XML_ELEMENT_NODE)
    return NULL;
  for (a = n->properties; a != NULL; a = a->next) {
    if (strcmp(SX(a->name), name) != 0 ||
        (ns == NULL ? a->ns != NULL : a->ns == NULL || strcmp(SX(a->ns->href), ns) != 0))
      continue;
    /* one text child: what the parser and xmlSetProp make (no DTD: no entity references) */
    if (a->children != NULL && a->children->type == XML_TEXT_NODE && a->children->next == NULL)
      return a->children->content != NULL ? SX(a->children->content) : "";
    return "";
  }
  return NULL;
}

const char *mqproc__mets_attr(const xmlNode *n, const char *name) {
  return mqproc__mets_attr_ns(n, NULL, name);
}

xmlNode *mqproc__mets_next(xmlNode *n, const char *local, const char *attr, const char *value) {
  for (; n != NULL; n = n->next) {
    const char *v;
    if (!mqproc__mets_is(n, NULL, local))
      continue;
    if (attr == NULL || ((v = mqproc__mets_attr(n, attr)) != NULL && !strcmp(v, value)))
      return n;
  }
  return NULL;
}

xmlNode *mqproc__mets_child(const xmlNode *parent, const char *local, const char *attr,
                            const char *value) {
  return parent != NULL ? mqproc__mets_next(parent->children, local, attr, value) : NULL;
}

char *mqproc__mets_text(const xmlNode *n, int *oom) {
  size_t len = 0;
  const xmlNode *c;
  char *s;
  int any = 0;
  *oom = 0;
  for (c = n->children;
       c != NULL && (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE); c = c->next) {
    len += c->content != NULL ? strlen(SX(c->content)) : 0;
    any = 1;
  }
  if (!any)
    return NULL;
  if ((s = mqproc__malloc(len + 1)) == NULL) {
    *oom = 1;
    return NULL;
  }
  len = 0;
  for (c = n->children;
       c != NULL && (c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE); c = c->next) {
    size_t k = c->content != NULL ? strlen(SX(c->content)) : 0;
    memcpy(s + len, c->content, k);
    len += k;
  }
  s[len] = '\0';
  return s;
}

xmlNode *mqproc__mets_walk(xmlNode *n, const xmlNode *top) {
  if (n->type == XML_ELEMENT_NODE && n->children != NULL)
    n = n->children;
  else {
    while (n != top && n->next == NULL)
      n = n->parent;
    if (n == top)
      return NULL;
    n = n->next;
  }
  while (n != NULL && n->type != XML_ELEMENT_NODE) { /* text, comments: on to an element */
    if (n->next != NULL) {
      n = n->next;
      continue;
    }
    do
      n = n->parent;
    while (n != top && n->next == NULL);
    if (n == top)
      return NULL;
    n = n->next;
  }
  return n;
}

int mqproc__mets_page_divs(const mqproc__mets_t *m, xmlNode ***divs, size_t *n) {
  size_t cap = 0;
  *divs = NULL;
  *n = 0;
  for (xmlNode *sm = mqproc__mets_child(m->root, "structMap", "TYPE", "PHYSICAL"); sm != NULL;
       sm = mqproc__mets_next(sm->next, "structMap", "TYPE", "PHYSICAL"))
    for (xmlNode *seq = mqproc__mets_child(sm, "div", "TYPE", "physSequence"); seq != NULL;
         seq = mqproc__mets_next(seq->next, "div", "TYPE", "physSequence"))
      for (xmlNode *p = mqproc__mets_child(seq, "div", "TYPE", "page"); p != NULL;
           p = mqproc__mets_next(p->next, "div", "TYPE", "page")) {
        if (*n == cap) {
          xmlNode **more = mqproc__realloc(*divs, (cap = cap ? cap * 2 : 64) * sizeof(*more));
          if (more == NULL) {
            free(*divs);
            *divs = NULL;
            *n = 0;
            return -1;
          }
          *divs = more;
        }
        (*divs)[(*n)++] = p;
      }
  return 0;
}

const char *mqproc__mets_page_of(const mqproc__mets_t *m, const char *id) {
  for (xmlNode *sm = mqproc__mets_child(m->root, "structMap", "TYPE", "PHYSICAL"); sm != NULL;
       sm = mqproc__mets_next(sm->next, "structMap", "TYPE", "PHYSICAL"))
    for (xmlNode *seq = mqproc__mets_child(sm, "div", "TYPE", "physSequence"); seq != NULL;
         seq = mqproc__mets_next(seq->next, "div", "TYPE", "physSequence"))
      for (xmlNode *p = mqproc__mets_child(seq, "div", "TYPE", "page"); p != NULL;
           p = mqproc__mets_next(p->next, "div", "TYPE", "page"))
        if (mqproc__mets_child(p, "fptr", "FILEID", id) != NULL)
          return mqproc__mets_attr(p, "ID");
  return NULL;
}

xmlNode *mqproc__mets_flocat(const xmlNode *file, int local) {
  for (xmlNode *l = mqproc__mets_child(file, "FLocat", NULL, NULL); l != NULL;
       l = mqproc__mets_next(l->next, "FLocat", NULL, NULL)) {
    const char *type = mqproc__mets_attr(l, "LOCTYPE"), *other;
    if (type == NULL)
      continue;
    if (!local && !strcmp(type, "URL"))
      return l;
    if (local && !strcmp(type, "OTHER") && (other = mqproc__mets_attr(l, "OTHERLOCTYPE")) != NULL &&
        !strcmp(other, "FILE"))
      return l;
  }
  return NULL;
}

/* ---- regular expressions ---------------------------------------------------------------- */

pcre2_code *mqproc__mets_re(const char *pattern, char *err) {
  int code;
  PCRE2_SIZE off;
  pcre2_code *re =
      pcre2_compile(BX(pattern), PCRE2_ZERO_TERMINATED,
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C, &code, &off, NULL);
  if (re == NULL) {
    PCRE2_UCHAR msg[256];
    if (pcre2_get_error_message(code, msg, sizeof(msg)) < 0)
      snprintf((char *)msg, sizeof(msg), "error %d", code);
    mqproc__err(err, MQPROC_EINVAL, "%s at position %zu", SX(msg), (size_t)off);
  }
  return re;
}

/* A backtracking budget: a pattern that would take Python's re minutes is refused here. */
#define MATCH_LIMIT 10000000u
#define DEPTH_LIMIT 100000u

int mqproc__mets_fullmatch(const pcre2_code *re, const char *s, char *err) {
  pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
  pcre2_match_context *mc = pcre2_match_context_create(NULL);
  int rc = -1;
  if (md != NULL && mc != NULL) {
    pcre2_set_match_limit(mc, MATCH_LIMIT);
    pcre2_set_depth_limit(mc, DEPTH_LIMIT);
    rc = pcre2_match(re, BX(s), PCRE2_ZERO_TERMINATED, 0, PCRE2_ANCHORED | PCRE2_ENDANCHORED, md,
                     mc);
    rc = rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
  }
  if (rc < 0)
    mqproc__err(err, MQPROC_EINVAL, "the match of '%.100s' went beyond its limits", s);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
  return rc;
}

/* ---- loading ------------------------------------------------------------------------- */

static int parse_error(xmlParserCtxt *ctxt, const char *name, char *err) {
  const xmlError *e = xmlCtxtGetLastError(ctxt);
  size_t len;
  if (e == NULL || e->message == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "%.300s: not well-formed XML", name);
  mqproc__err(err, MQPROC_EINVAL, "%.300s:%d: %.300s", name, e->line, e->message);
  if (err != NULL)
    for (len = strlen(err); len > 0 && (err[len - 1] == '\n' || err[len - 1] == ' ');)
      err[--len] = '\0';
  return MQPROC_EINVAL;
}

/* Reads all of fd (a regular file of at most the limit) from its start into *data. */
static int read_all(int fd, const char *name, char **data, size_t *len, char *err) {
  struct stat st;
  size_t cap, n = 0;
  char *buf;
  if (fstat(fd, &st) != 0)
    return mqproc__err(err, MQPROC_ESYS, "%.300s: %s", name, strerror(errno));
  if (!S_ISREG(st.st_mode))
    return mqproc__err(err, MQPROC_EINVAL, "%.300s: not a regular file", name);
  if (st.st_size > (off_t)MQPROC__METS_MAX_BYTES)
    return mqproc__err(err, MQPROC_EINVAL, "%.300s: larger than %u MiB", name,
                       MQPROC__METS_MAX_BYTES >> 20);
  cap = (size_t)st.st_size + 1;
  if ((buf = mqproc__malloc(cap + 1)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (;;) { /* to its end, which may have moved since the fstat */
    ssize_t r = pread(fd, buf + n, cap - n, (off_t)n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(buf);
      return mqproc__err(err, MQPROC_ESYS, "%.300s: %s", name, strerror(errno));
    }
    if (r == 0)
      break;
    n += (size_t)r;
    if (n == cap) {
      char *more;
      if (cap > MQPROC__METS_MAX_BYTES || (more = mqproc__realloc(buf, cap * 2 + 1)) == NULL) {
        free(buf);
        return cap > MQPROC__METS_MAX_BYTES
                   ? mqproc__err(err, MQPROC_EINVAL, "%.300s: larger than %u MiB", name,
                                 MQPROC__METS_MAX_BYTES >> 20)
                   : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
      }
      buf = more;
      cap *= 2;
    }
  }
  buf[n] = '\0';
  *data = buf;
  *len = n;
  return MQPROC_OK;
}

static int from_memory(const char *data, size_t len, const char *name, mqproc__mets_t **out,
                       char *err) {
  xmlParserCtxt *ctxt;
  mqproc__mets_t *m;
  char why[MQPROC_ERR_LEN];
  int rc;
  if (len > INT_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "%.300s: too large", name);
  if ((m = mqproc__calloc(1, sizeof(*m))) == NULL || (ctxt = xmlNewParserCtxt()) == NULL) {
    free(m);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  m->doc = xmlCtxtReadMemory(ctxt, data, (int)len, name, NULL,
                             XML_PARSE_NONET | XML_PARSE_NOBLANKS | XML_PARSE_NOERROR |
                                 XML_PARSE_NOWARNING);
  rc = m->doc == NULL ? parse_error(ctxt, name, err) : MQPROC_OK;
  xmlFreeParserCtxt(ctxt);
  if (rc == MQPROC_OK && (m->doc->intSubset != NULL || m->doc->extSubset != NULL))
    rc = mqproc__err(err, MQPROC_EINVAL, "%.300s: a METS with a DOCTYPE is refused", name);
  if (rc == MQPROC_OK && !mqproc__mets_is(m->root = xmlDocGetRootElement(m->doc), NULL, "mets"))
    rc = mqproc__err(err, MQPROC_EINVAL, "%.300s: the root element is not mets:mets", name);
  if (rc == MQPROC_OK && (m->id = mqproc__mets_re("^[a-zA-Z_][\\w.-]*$", why)) == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "%s", why);
  if (rc != MQPROC_OK) {
    mqproc__mets_free(m);
    return rc;
  }
  *out = m;
  return MQPROC_OK;
}

int mqproc__mets_load_fd(int fd, const char *name, mqproc__mets_t **out, char *err) {
  char *data = NULL;
  size_t len = 0;
  int rc;
  *out = NULL;
  if ((rc = read_all(fd, name, &data, &len, err)) != MQPROC_OK)
    return rc;
  rc = from_memory(data, len, name, out, err);
  free(data);
  return rc;
}

int mqproc__mets_load(const char *path, mqproc__mets_t **out, char *err) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), rc;
  *out = NULL;
  if (fd < 0)
    return mqproc__err(err, MQPROC_ESYS, "cannot open the METS %.300s: %s", path,
                       errno == ELOOP ? "a symbolic link" : strerror(errno));
  rc = mqproc__mets_load_fd(fd, path, out, err);
  close(fd);
  return rc;
}

void mqproc__mets_free(mqproc__mets_t *m) {
  if (m == NULL)
    return;
  pcre2_code_free(m->id);
  xmlFreeDoc(m->doc);
  free(m);
}

/* ---- reading ------------------------------------------------------------------------- */

/* Appends s (NULL: null) to a; -1 without memory. */
static int push_str(json_t *a, const char *s) {
  return json_array_append_new(a, s != NULL ? json_string(s) : json_null());
}

json_t *mqproc__mets_physical_pages(const mqproc__mets_t *m) {
  json_t *a = json_array();
  xmlNode **divs;
  size_t n;
  if (a == NULL || mqproc__mets_page_divs(m, &divs, &n) != 0) {
    json_decref(a);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    const char *id = mqproc__mets_attr(divs[i], "ID");
    if (id != NULL && push_str(a, id) != 0) {
      json_decref(a);
      a = NULL;
      break;
    }
  }
  free(divs);
  return a;
}

json_t *mqproc__mets_file_groups(const mqproc__mets_t *m) {
  json_t *a = json_array();
  for (xmlNode *n = m->root; a != NULL && (n = mqproc__mets_walk(n, m->root)) != NULL;)
    if (mqproc__mets_is(n, NULL, "fileGrp") && push_str(a, mqproc__mets_attr(n, "USE")) != 0) {
      json_decref(a);
      a = NULL;
    }
  return a;
}

/* An attribute's name as lxml's attrib keys it: "{URI}local", or local without a namespace. */
static char *clark(const xmlAttr *a) {
  return a->ns != NULL ? mqproc__asprintf("{%s}%s", SX(a->ns->href), SX(a->name))
                       : mqproc__strdup(SX(a->name));
}

/* [{attributes}, text] of one mets:note. */
static json_t *note_of(xmlNode *note) {
  json_t *attrs = json_object(), *pair;
  char *text;
  int oom;
  for (xmlAttr *a = note->properties; attrs != NULL && a != NULL; a = a->next) {
    char *key = clark(a);
    const char *v = a->ns != NULL ? mqproc__mets_attr_ns(note, SX(a->ns->href), SX(a->name))
                                  : mqproc__mets_attr(note, SX(a->name));
    if (key == NULL || json_object_set_new(attrs, key, json_string(v != NULL ? v : "")) != 0) {
      json_decref(attrs);
      attrs = NULL;
    }
    free(key);
  }
  text = mqproc__mets_text(note, &oom);
  if (attrs == NULL || oom) {
    json_decref(attrs);
    free(text);
    return NULL;
  }
  pair = json_pack("[o, s?]", attrs, text); /* takes attrs, failing too */
  free(text);
  return pair;
}

static json_t *agent_of(xmlNode *el) {
  xmlNode *name_el = mqproc__mets_child(el, "name", NULL, NULL);
  json_t *notes = json_array(), *o;
  char *name = NULL;
  int oom = 0;
  if (name_el != NULL)
    name = mqproc__mets_text(name_el, &oom);
  for (xmlNode *n = mqproc__mets_child(el, "note", NULL, NULL); notes != NULL && n != NULL;
       n = mqproc__mets_next(n->next, "note", NULL, NULL))
    if (json_array_append_new(notes, note_of(n)) != 0) {
      json_decref(notes);
      notes = NULL;
    }
  o = notes != NULL && !oom
          ? json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:o}", "name", name, "type",
                      mqproc__mets_attr(el, "TYPE"), "role", mqproc__mets_attr(el, "ROLE"),
                      "otherrole", mqproc__mets_attr(el, "OTHERROLE"), "othertype",
                      mqproc__mets_attr(el, "OTHERTYPE"), "notes", notes)
          : (json_decref(notes), NULL);
  free(name);
  return o;
}

json_t *mqproc__mets_agents(const mqproc__mets_t *m) {
  json_t *a = json_array();
  for (xmlNode *hdr = mqproc__mets_child(m->root, "metsHdr", NULL, NULL); a != NULL && hdr != NULL;
       hdr = mqproc__mets_next(hdr->next, "metsHdr", NULL, NULL))
    for (xmlNode *ag = mqproc__mets_child(hdr, "agent", NULL, NULL); a != NULL && ag != NULL;
         ag = mqproc__mets_next(ag->next, "agent", NULL, NULL))
      if (json_array_append_new(a, agent_of(ag)) != 0) {
        json_decref(a);
        a = NULL;
      }
  return a;
}

int mqproc__mets_unique_identifier(const mqproc__mets_t *m, char **out) {
  static const char *const TYPES[] = {"purl", "urn", "doi", "url"};
  *out = NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(TYPES); i++)
    for (xmlNode *n = m->root; (n = mqproc__mets_walk(n, m->root)) != NULL;) {
      const char *type = mqproc__mets_attr(n, "type");
      int oom;
      if (!mqproc__mets_is(n, MODS_NS, "identifier") || type == NULL || strcmp(type, TYPES[i]))
        continue;
      *out = mqproc__mets_text(n, &oom);
      return oom ? -1 : 1;
    }
  return 0;
}

/* ---- writing ------------------------------------------------------------------------- */

int mqproc__mets_dump(const mqproc__mets_t *m, char **data, size_t *len, char *err) {
  xmlBuffer *buf = xmlBufferCreate();
  xmlSaveCtxt *save;
  int rc = MQPROC_ENOMEM;
  *data = NULL;
  *len = 0;
  if (buf == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((save = xmlSaveToBuffer(buf, "UTF-8", XML_SAVE_FORMAT)) != NULL) {
    long r = xmlSaveDoc(save, m->doc);
    if (xmlSaveClose(save) >= 0 && r >= 0 && (*data = mqproc__malloc(xmlBufferLength(buf) + 1))) {
      *len = (size_t)xmlBufferLength(buf);
      memcpy(*data, xmlBufferContent(buf), *len);
      (*data)[*len] = '\0';
      rc = MQPROC_OK;
    }
  }
  xmlBufferFree(buf);
  return rc == MQPROC_OK ? rc : mqproc__err(err, rc, "cannot serialise the METS: out of memory");
}

static int write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, data, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    data += w;
    len -= (size_t)w;
  }
  return 0;
}

/* A new file ".BASE.mqproc-XXXXXX" in dirfd, mode as the file it replaces (else 0644 as the
 * umask allows): its fd, its name in tmp; -1 with errno. */
static int make_tmp(int dirfd, const char *base, mode_t mode, char *tmp, size_t n) {
  static const char CH[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned long r =
        (unsigned long)random() ^ (unsigned long)mqproc__now_ms() ^ (unsigned long)getpid();
    char suffix[7];
    int fd;
    for (int i = 0; i < 6; i++, r /= 62)
      suffix[i] = CH[r % 62];
    suffix[6] = '\0';
    if ((size_t)snprintf(tmp, n, ".%s.mqproc-%s", base, suffix) >= n) {
      errno = ENAMETOOLONG;
      return -1;
    }
    fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST)
      return fd;
  }
  errno = EEXIST;
  return -1;
}

/* Splits path into its directory (opened) and base name. */
static int open_dir(const char *path, char *base, size_t n, char *err) {
  char *copy = mqproc__strdup(path), *copy2 = mqproc__strdup(path);
  int fd = -1;
  if (copy == NULL || copy2 == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  } else if ((size_t)snprintf(base, n, "%s", basename(copy)) >= n) {
    mqproc__err(err, MQPROC_EINVAL, "%.300s: the name is too long", path);
  } else if ((fd = open(dirname(copy2), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    mqproc__err(err, MQPROC_ESYS, "cannot open the directory of %.300s: %s", path, strerror(errno));
  }
  free(copy);
  free(copy2);
  return fd;
}

int mqproc__mets_save(const mqproc__mets_t *m, const char *path, int *lock_fd, char *err) {
  char base[NAME_MAX + 1], tmp[NAME_MAX + 1], *data;
  size_t len;
  struct stat st;
  mode_t mode = 0644;
  int dirfd, fd = -1, rc;
  if ((rc = mqproc__mets_dump(m, &data, &len, err)) != MQPROC_OK)
    return rc;
  if ((dirfd = open_dir(path, base, sizeof(base), err)) < 0) {
    free(data);
    return err != NULL && strstr(err, "out of memory") ? MQPROC_ENOMEM : MQPROC_ESYS;
  }
  if (fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
    mode = st.st_mode & 07777;
  rc = MQPROC_ESYS;
  if ((fd = make_tmp(dirfd, base, mode, tmp, sizeof(tmp))) < 0)
    mqproc__err(err, rc, "cannot make a new file beside %.300s: %s", path, strerror(errno));
  else if (fchmod(fd, mode) != 0 || write_all(fd, data, len) != 0 || fsync(fd) != 0)
    mqproc__err(err, rc, "cannot write the new METS beside %.300s: %s", path, strerror(errno));
  else if (lock_fd != NULL && mqproc__wslock_replace(fd, err) != 0)
    ;
  else if (renameat(dirfd, tmp, dirfd, base) != 0)
    mqproc__err(err, rc, "cannot rename the new METS over %.300s: %s", path, strerror(errno));
  else
    rc = MQPROC_OK;
  if (rc != MQPROC_OK && fd >= 0) {
    unlinkat(dirfd, tmp, 0);
    close(fd);
  } else if (rc == MQPROC_OK) {
    if (lock_fd != NULL) { /* the new file is the one locked now */
      close(*lock_fd);
      *lock_fd = fd;
    } else {
      close(fd);
    }
    /* the rename itself is durable once this returns (EINVAL: a file system that cannot) */
    if (fsync(dirfd) != 0 && errno != EINVAL)
      rc = mqproc__err(err, MQPROC_ESYS, "renamed over %.300s, but its directory: %s", path,
                       strerror(errno));
  }
  close(dirfd);
  free(data);
  return rc;
}
