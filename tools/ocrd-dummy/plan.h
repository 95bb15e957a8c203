/* ocrd-dummy plan: which input file of which page becomes which output files, checked
 * against the METS before anything is written. */
#ifndef OCRD_DUMMY_PLAN_H
#define OCRD_DUMMY_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "dummy.h"
#include "mets.h"

/* The work for one page. Strings are owned by the task. */
typedef struct dummy_task {
  size_t page; /* index into the METS's physical pages */
  char *in_id; /* the input mets:file */
  char *in_mime;
  char *in_href;   /* its FLocat/@xlink:href */
  char *in_path;   /* its local path */
  bool in_is_page; /* PAGE-XML input (else an image) */
  char *out_id;    /* the PAGE-XML output: ID and href "<OUT>/<out_id>.xml" */
  char *out_href;
  char *img_id;     /* copy_files with image input: the copied image, else NULL */
  char *img_href;   /* "<OUT>/<img_id><ext>" */
  xmlNode *old_out; /* --overwrite: the existing mets:file with out_id / img_id, or NULL */
  xmlNode *old_img;
} dummy_task_t;

typedef struct dummy_plan {
  dummy_task_t *tasks;
  size_t n;
} dummy_plan_t;

/* What the plan is made from. */
typedef struct dummy_plan_req {
  const dummy_opts_t *opts; /* groups, page_id, overwrite; for logging */
  dummy_mets_t *mets;
  const char *dir; /* the workspace directory: relative hrefs start here */
  bool copy_files;
} dummy_plan_req_t;

/* Checks the groups, selects the pages, picks each page's input file (PAGE-XML before an
 * image, as core), derives the output IDs and refuses existing output unless overwrite.
 * Returns 0 (plan->tasks may be empty) or -1 with err set and *plan empty. */
int dummy_plan_build(dummy_plan_t *plan, const dummy_plan_req_t *req, char *err);
void dummy_plan_free(dummy_plan_t *plan);

/* core's make_file_id(): the input ID with the input fileGrp replaced by out_grp, else
 * out_grp + "_" + page_id (when page_id is not part of the ID), else out_grp + "_" + ID;
 * then made a valid xml:id (':' and '/' become '_', other invalid characters are dropped,
 * "id_" is prepended before a non-letter). malloc()ed; NULL when out of memory. */
char *dummy_make_file_id(const char *id, const char *grp, const char *page_id, const char *out_grp);
/* Whether s is a valid mets:file/@ID or fileGrp/@USE: ^[a-zA-Z_][\w.-]*$. */
bool dummy_is_xml_id(const char *s);
/* The file extension core uses for a MIME type ("" when unknown). Static. */
const char *dummy_mime_ext(const char *mime);

#endif
