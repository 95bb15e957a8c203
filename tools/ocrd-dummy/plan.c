/* ocrd-dummy plan: which input file of which page becomes which output files, checked
 * against the METS before anything is written. */
#include "plan.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fsio.h"
#include "pages.h"
#include "xmlutil.h"

static bool word_char(unsigned char c) {
  return isalnum(c) || c == '_' || c >= 0x80; /* non-ASCII: Python's \w, roughly */
}

bool dummy_is_xml_id(const char *s) {
  if (!isalpha((unsigned char)s[0]) && s[0] != '_')
    return false;
  for (const char *p = s + 1; *p != '\0'; p++)
    if (!word_char((unsigned char)*p) && *p != '.' && *p != '-')
      return false;
  return true;
}

const char *dummy_mime_ext(const char *mime) {
  static const char *const table[][2] = {
      {"image/tiff", ".tif"},
      {"image/tif", ".tif"},
      {"image/png", ".png"},
      {"image/jpg", ".jpg"},
      {"image/jpeg", ".jpg"},
      {"image/jp2", ".jp2"},
      {MIMETYPE_PAGE, ".xml"},
      {"image/x-portable-pixmap", ".ppm"},
      {"image/x-portable-anymap", ".pnm"},
      {"image/x-portable-bitmap", ".pbm"},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(mime, table[i][0]) == 0)
      return table[i][1];
  return "";
}

/* s with every occurrence of from (non-empty) replaced by to, like Python's str.replace. */
static char *replace_all(const char *s, const char *from, const char *to) {
  size_t flen = strlen(from), tlen = strlen(to), n = 0;
  char *out, *o;
  for (const char *p = s; flen > 0 && (p = strstr(p, from)) != NULL; p += flen)
    n++;
  if ((out = o = malloc(strlen(s) + n * tlen + 1)) == NULL)
    return NULL;
  for (const char *p = s, *hit; *p != '\0'; p = hit + flen) {
    if (flen == 0 || (hit = strstr(p, from)) == NULL) {
      strcpy(o, p);
      return out;
    }
    memcpy(o, p, (size_t)(hit - p));
    o += hit - p;
    memcpy(o, to, tlen);
    o += tlen;
  }
  *o = '\0';
  return out;
}

/* core's make_xml_id(); takes ownership of id. */
static char *make_xml_id(char *id) {
  char *out, *o;
  if (id == NULL || dummy_is_xml_id(id))
    return id;
  for (char *p = id; *p != '\0'; p++)
    if (*p == ':' || *p == '/')
      *p = '_';
  if ((out = o = malloc(strlen(id) + 4)) != NULL) {
    if (!isalpha((unsigned char)id[0]) && id[0] != '_')
      o = stpcpy(o, "id_");
    for (const char *p = id; *p != '\0'; p++)
      if (word_char((unsigned char)*p) || *p == '.' || *p == '-')
        *o++ = *p;
    *o = '\0';
  }
  free(id);
  return out;
}

char *dummy_make_file_id(const char *id, const char *grp, const char *page_id,
                         const char *out_grp) {
  char *ret = replace_all(id, grp, out_grp);
  if (ret != NULL && strcmp(ret, id) == 0 && strcmp(out_grp, grp) != 0) {
    const char *suffix =
        page_id != NULL && page_id[0] != '\0' && strstr(id, page_id) == NULL ? page_id : id;
    free(ret);
    if (asprintf(&ret, "%s_%s", out_grp, suffix) < 0)
      ret = NULL;
  }
  return make_xml_id(ret);
}

static void task_free(dummy_task_t *t) {
  free(t->in_id);
  free(t->in_mime);
  free(t->in_href);
  free(t->in_path);
  free(t->out_id);
  free(t->out_href);
  free(t->img_id);
  free(t->img_href);
}

void dummy_plan_free(dummy_plan_t *plan) {
  for (size_t i = 0; plan->tasks != NULL && i < plan->n; i++)
    task_free(&plan->tasks[i]);
  free(plan->tasks);
  plan->tasks = NULL;
  plan->n = 0;
}

/* One input and one output fileGrp, both valid, different, the input in the METS. */
static int check_groups(const dummy_plan_req_t *req, xmlNode **in_grp, char *err) {
  const char *in = req->opts->input_grp, *out = req->opts->output_grp;
  if (in == NULL || in[0] == '\0')
    return dummy_err(err, "-I/--input-file-grp is required");
  if (out == NULL || out[0] == '\0')
    return dummy_err(err, "-O/--output-file-grp is required");
  if (strchr(in, ',') != NULL || strchr(out, ',') != NULL)
    return dummy_err(err, "%s takes exactly one input and one output fileGrp (got '%s', '%s')",
                     DUMMY_NAME, in, out);
  if (!dummy_is_xml_id(out))
    return dummy_err(err, "invalid output fileGrp '%s' (not an xs:ID)", out);
  if (strcmp(in, out) == 0)
    return dummy_err(err, "input and output fileGrp must differ (both '%s')", in);
  if ((*in_grp = dummy_mets_grp(req->mets, in)) == NULL)
    return dummy_err(err, "Input fileGrp[@USE='%s'] not in METS!", in);
  return 0;
}

/* Without --overwrite no selected page may have a file in the output fileGrp yet. */
static int check_existing(const dummy_plan_req_t *req, const bool *selected, char *err) {
  xmlNode *grp = dummy_mets_grp(req->mets, req->opts->output_grp);
  if (grp == NULL || req->opts->overwrite)
    return 0;
  for (size_t i = 0; i < req->mets->n_pages; i++)
    if (selected[i] && dummy_mets_page_has_grp(req->mets, i, grp))
      return dummy_err(err, "Output fileGrp[@USE='%s'] already contains output for page %s",
                       req->opts->output_grp, req->mets->page_ids[i]);
  return 0;
}

/* The input file of page i: its one PAGE-XML file, else its one other file. */
static int pick_input(const dummy_plan_req_t *req, const xmlNode *in_grp, size_t i, xmlNode **out,
                      char *err) {
  xmlNode *page = NULL, *other = NULL;
  size_t n_other = 0;
  for (xmlNode *p = dummy_xml_child(req->mets->page_divs[i], METS_NS, "fptr"); p != NULL;
       p = dummy_xml_next(p, METS_NS, "fptr")) {
    char *fid = dummy_xml_attr(p, NULL, "FILEID");
    xmlNode *f = fid != NULL ? dummy_mets_file(req->mets, fid) : NULL;
    free(fid);
    if (f == NULL || f->parent != in_grp)
      continue;
    if (dummy_xml_attr_eq(f, "MIMETYPE", MIMETYPE_PAGE)) {
      if (page != NULL)
        return dummy_err(err, "page %s has more than one PAGE-XML file in fileGrp %s",
                         req->mets->page_ids[i], req->opts->input_grp);
      page = f;
    } else if (n_other++ == 0)
      other = f;
  }
  if (page == NULL && n_other > 1)
    return dummy_err(err, "page %s has %zu files in fileGrp %s and none is PAGE-XML",
                     req->mets->page_ids[i], n_other, req->opts->input_grp);
  *out = page != NULL ? page : other;
  return 0;
}

/* The local path of href (relative to dir); remote URLs are refused. */
static int local_path(const char *dir, const char *href, const char *id, char **out, char *err) {
  if (href == NULL || href[0] == '\0')
    return dummy_err(err, "mets:file %s has no FLocat/@xlink:href", id);
  if (strncmp(href, "file://", 7) == 0)
    href += 7;
  else if (strstr(href, "://") != NULL)
    return dummy_err(err, "mets:file %s is remote (%s): downloading is not supported", id, href);
  if ((*out = dummy_path_join(dir, href)) == NULL)
    return dummy_err(err, "out of memory");
  if (access(*out, R_OK) != 0)
    return dummy_err(err, "input file %s not found: %s", id, *out);
  return 0;
}

/* Output IDs and hrefs (core: copied image <ID><ext> and PAGE <ID>_PAGE.xml). */
static int name_outputs(dummy_task_t *t, const dummy_plan_req_t *req, char *err) {
  const char *out = req->opts->output_grp, *page_id = req->mets->page_ids[t->page];
  char *id = dummy_make_file_id(t->in_id, req->opts->input_grp, page_id, out);
  int rc = 0;
  if (id == NULL)
    return dummy_err(err, "out of memory");
  if (req->copy_files && !t->in_is_page) {
    t->img_id = id;
    if (asprintf(&t->img_href, "%s/%s%s", out, id, dummy_mime_ext(t->in_mime)) < 0 ||
        asprintf(&t->out_id, "%s_PAGE", id) < 0)
      rc = -1;
  } else
    t->out_id = id;
  if (rc != 0 || t->out_id == NULL || asprintf(&t->out_href, "%s/%s.xml", out, t->out_id) < 0)
    return dummy_err(err, "out of memory");
  return 0;
}

/* Fills the task for page i from its input file f. */
static int fill_task(dummy_task_t *t, const dummy_plan_req_t *req, xmlNode *f, char *err) {
  t->in_href = dummy_mets_href(f);
  t->in_id = dummy_xml_attr(f, NULL, "ID");
  t->in_mime = dummy_xml_attr(f, NULL, "MIMETYPE");
  if (t->in_id == NULL || t->in_mime == NULL)
    return dummy_err(err, "a mets:file of page %s lacks ID or MIMETYPE",
                     req->mets->page_ids[t->page]);
  t->in_is_page = strcmp(t->in_mime, MIMETYPE_PAGE) == 0;
  if (local_path(req->dir, t->in_href, t->in_id, &t->in_path, err) != 0)
    return -1;
  if (!t->in_is_page && strncmp(t->in_mime, "image/", 6) != 0)
    return dummy_err(err, "mets:file %s of page %s has MIMETYPE %s: neither PAGE-XML nor an image",
                     t->in_id, req->mets->page_ids[t->page], t->in_mime);
  return name_outputs(t, req, err);
}

/* Adds the task for page i, if the page has a file in the input fileGrp. */
static int plan_page(dummy_plan_t *plan, const dummy_plan_req_t *req, const xmlNode *in_grp,
                     size_t i, char *err) {
  xmlNode *f = NULL;
  dummy_task_t *t = &plan->tasks[plan->n];
  if (pick_input(req, in_grp, i, &f, err) != 0)
    return -1;
  if (f == NULL) {
    dummy_logf(req->opts, DUMMY_LOG_WARN, "Found no file for page %s in file group %s",
               req->mets->page_ids[i], req->opts->input_grp);
    return 0;
  }
  plan->n++;
  t->page = i;
  return fill_task(t, req, f, err);
}

/* An output ID must be unique and new, or with overwrite the same file again. */
static int check_id(const dummy_plan_req_t *req, xmlHashTable *seen, const dummy_task_t *t,
                    const char *id, const char *mime, xmlNode **old, char *err) {
  xmlNode *f = dummy_mets_file(req->mets, id);
  const char *page = req->mets->page_ids[t->page];
  if (xmlHashAddEntry(seen, BX(id), (void *)t) != 0)
    return dummy_err(err, "output file ID %s would be written twice (page %s)", id, page);
  if (f == NULL)
    return 0;
  if (!req->opts->overwrite)
    return dummy_err(err, "A file with ID==%s already exists in the METS (page %s)", id, page);
  /* like core's add_file(force=True): only the same fileGrp, page and MIMETYPE */
  if (!dummy_xml_attr_eq(f->parent, "USE", req->opts->output_grp) ||
      !dummy_xml_attr_eq(f, "MIMETYPE", mime) ||
      dummy_mets_file_page(req->mets, id) != (long)t->page)
    return dummy_err(err,
                     "cannot overwrite mets:file %s (page %s): it is unrelated (another "
                     "fileGrp, page or MIMETYPE)",
                     id, page);
  *old = f;
  return 0;
}

static int check_ids(dummy_plan_t *plan, const dummy_plan_req_t *req, char *err) {
  xmlHashTable *seen = xmlHashCreate(64);
  int rc = seen != NULL ? 0 : dummy_err(err, "out of memory");
  for (size_t i = 0; rc == 0 && i < plan->n; i++) {
    dummy_task_t *t = &plan->tasks[i];
    if (t->img_id != NULL)
      rc = check_id(req, seen, t, t->img_id, t->in_mime, &t->old_img, err);
    if (rc == 0)
      rc = check_id(req, seen, t, t->out_id, MIMETYPE_PAGE, &t->old_out, err);
  }
  xmlHashFree(seen, NULL);
  return rc;
}

int dummy_plan_build(dummy_plan_t *plan, const dummy_plan_req_t *req, char *err) {
  size_t n = req->mets->n_pages;
  bool *selected = calloc(n + 1, sizeof(bool));
  const char *page_id = req->opts->page_id;
  xmlNode *in_grp = NULL;
  int rc = 0;
  memset(plan, 0, sizeof(*plan));
  plan->tasks = calloc(n + 1, sizeof(*plan->tasks));
  if (selected == NULL || plan->tasks == NULL)
    rc = dummy_err(err, "out of memory");
  if (rc == 0)
    rc = check_groups(req, &in_grp, err);
  if (rc == 0 && page_id != NULL && page_id[0] != '\0')
    rc = dummy_pages_select(page_id, (const char *const *)req->mets->page_ids, n, selected, err);
  else if (rc == 0)
    memset(selected, 1, n * sizeof(bool));
  if (rc == 0)
    rc = check_existing(req, selected, err);
  for (size_t i = 0; rc == 0 && i < n; i++)
    if (selected[i])
      rc = plan_page(plan, req, in_grp, i, err);
  if (rc == 0)
    rc = check_ids(plan, req, err);
  free(selected);
  if (rc != 0)
    dummy_plan_free(plan);
  return rc;
}
