/* ocrd-dummy run: resolve the workspace, lock and read the METS, plan, write the output
 * files, then replace the METS atomically (dummy_run, see dummy.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dummy.h"
#include "fsio.h"
#include "imgsize.h"
#include "mets.h"
#include "metsserver.h"
#include "pagexml.h"
#include "params.h"
#include "plan.h"
#include "xmlutil.h"

typedef struct run {
  const dummy_opts_t *opts;
  dummy_params_t params;
  char *mets_path;    /* resolved (realpath) */
  char *dir;          /* the workspace directory */
  int lock_fd;        /* open on mets_path, flock()ed */
  dummy_msrv_t *msrv; /* the METS server (opts->mets_server_url), or NULL */
  dummy_mets_t *mets;
  dummy_plan_t plan;
  char now[48];
} run_t;

void dummy_logf(const dummy_opts_t *opts, dummy_log_level_t level, const char *fmt, ...) {
  char line[2048];
  va_list ap;
  if (opts == NULL || opts->log == NULL)
    return;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  opts->log(opts->log_ud, level, line);
}

/* The METS path and workspace directory as core's resolve_mets_arguments() has them: -m
 * alone gives its directory; -w alone means <dir>/mets.xml; with both, a bare -m name is
 * looked up in -w, and a path must lie in -w (a workspace is never copied). */
static int resolve_paths(run_t *r, char *err) {
  const char *mets = r->opts->mets, *wd = r->opts->working_dir;
  char *joined = NULL, *mets_dir;
  int rc = 0;
  if (mets != NULL && strstr(mets, "://") != NULL)
    return dummy_err(err, "METS %s is remote: only a local METS file is supported", mets);
  if (wd != NULL && (r->dir = realpath(wd, NULL)) == NULL)
    return dummy_err(err, "--working-dir %s: %s", wd, strerror(errno));
  if (mets == NULL || (wd != NULL && strchr(mets, '/') == NULL))
    joined = dummy_path_join(r->dir != NULL ? r->dir : ".", mets != NULL ? mets : "mets.xml");
  if ((r->mets_path = realpath(joined != NULL ? joined : mets, NULL)) == NULL)
    rc = dummy_err(err, "METS not found: %s: %s", joined != NULL ? joined : mets, strerror(errno));
  free(joined);
  if (rc != 0 || (mets_dir = dummy_dirname(r->mets_path)) == NULL)
    return rc != 0 ? rc : dummy_err(err, "out of memory");
  if (r->dir == NULL)
    r->dir = mets_dir;
  else {
    if (mets != NULL && strchr(mets, '/') != NULL && strcmp(mets_dir, r->dir) != 0)
      rc = dummy_err(err,
                     "--mets %s is not in --working-dir %s (copying a workspace is not "
                     "supported)",
                     mets, wd);
    free(mets_dir);
  }
  return rc;
}

/* The METS as the METS server holds it, once the server said it serves this workspace
 * (core's Workspace checks the same: another workspace's server would get our files). */
static int load_remote(run_t *r, char *err) {
  char *served = NULL, *real = NULL;
  int rc = dummy_msrv_open(&r->msrv, r->opts->mets_server_url, r->dir, err);
  if (rc == 0)
    rc = dummy_msrv_workspace_path(r->msrv, &served, err);
  if (rc == 0 && ((real = realpath(served, NULL)) == NULL || strcmp(real, r->dir) != 0))
    rc = dummy_err(err, "the METS server %s serves the workspace %s, not %s",
                   r->opts->mets_server_url, served, r->dir);
  free(served);
  free(real);
  if (rc == 0) {
    dummy_logf(r->opts, DUMMY_LOG_INFO, "the METS is read and changed through the METS server %s",
               r->opts->mets_server_url);
    rc = dummy_msrv_load(r->msrv, &r->mets, err);
  }
  return rc;
}

static int load_mets(run_t *r, char *err) {
  char *data = NULL;
  size_t len = 0;
  int rc;
  if (r->opts->mets_server_url != NULL)
    return load_remote(r, err);
  if (dummy_lock(r->mets_path, &r->lock_fd, err) != 0 ||
      dummy_read_fd(r->lock_fd, r->mets_path, &data, &len, err) != 0)
    return -1;
  rc = dummy_mets_parse(&r->mets, data, len, r->mets_path, err);
  free(data);
  return rc;
}

/* PAGE-XML for one task: the input PAGE updated, or a skeleton for the image. */
static int page_content(run_t *r, const dummy_task_t *t, char **xml, size_t *len, char *err) {
  dummy_page_meta_t meta = {t->out_id, r->params.values, r->now};
  unsigned long w, h;
  if (t->in_is_page)
    return dummy_page_copy(t->in_path, &meta, xml, len, err);
  if (dummy_image_size(t->in_path, &w, &h, err) != 0)
    return -1;
  return dummy_page_skeleton(t->img_href != NULL ? t->img_href : t->in_href, w, h, &meta, xml, len,
                             err);
}

static int write_task(run_t *r, const dummy_task_t *t, char *err) {
  const char *page = r->mets->page_ids[t->page];
  char *img_path = NULL, *page_path = dummy_path_join(r->dir, t->out_href), *xml = NULL;
  size_t len = 0;
  int rc = page_path != NULL ? 0 : dummy_err(err, "out of memory");
  dummy_logf(r->opts, DUMMY_LOG_INFO, "processing page %s", page);
  if (rc == 0 && t->img_id != NULL) {
    dummy_logf(r->opts, DUMMY_LOG_INFO, "cp %s %s # %s -> %s", t->in_href, t->img_href, t->in_id,
               t->img_id);
    if ((img_path = dummy_path_join(r->dir, t->img_href)) == NULL)
      rc = dummy_err(err, "out of memory");
    else
      rc = dummy_copy_atomic(t->in_path, img_path, err);
  }
  if (rc == 0)
    rc = page_content(r, t, &xml, &len, err);
  if (rc == 0)
    rc = dummy_write_buf_atomic(page_path, -1, xml, len, err);
  if (rc == 0)
    dummy_logf(r->opts, DUMMY_LOG_INFO, "Add PAGE-XML %s generated for %s", t->out_id, t->in_id);
  free(xml);
  free(img_path);
  free(page_path);
  return rc;
}

/* Every output file, before the METS is touched. */
static int write_outputs(run_t *r, char *err) {
  char *out_dir;
  int rc;
  if (r->plan.n == 0)
    return 0;
  if ((out_dir = dummy_path_join(r->dir, r->opts->output_grp)) == NULL)
    return dummy_err(err, "out of memory");
  rc = dummy_mkdir(out_dir, err);
  free(out_dir);
  for (size_t i = 0; rc == 0 && i < r->plan.n; i++)
    rc = write_task(r, &r->plan.tasks[i], err);
  return rc;
}

/* The files, then the agent, added through the METS server, which then writes its copy
 * (core's save_mets()); --overwrite replaces with force, as core's add_file(force=True). */
static int apply_remote(run_t *r, const dummy_note_t *notes, size_t n_notes, char *err) {
  const char *out = r->opts->output_grp;
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < r->plan.n; i++) {
    const dummy_task_t *t = &r->plan.tasks[i];
    const char *page = r->mets->page_ids[t->page];
    dummy_msrv_file_t img = {out, t->img_id, page, t->in_mime, t->img_href, r->opts->overwrite};
    dummy_msrv_file_t xml = {out, t->out_id, page, MIMETYPE_PAGE, t->out_href, r->opts->overwrite};
    if (t->img_id != NULL)
      rc = dummy_msrv_add_file(r->msrv, &img, err);
    if (rc == 0)
      rc = dummy_msrv_add_file(r->msrv, &xml, err);
  }
  if (rc == 0)
    rc = dummy_msrv_add_agent(r->msrv, DUMMY_NAME " v" DUMMY_VERSION, DUMMY_STEP, notes, n_notes,
                              err);
  return rc == 0 ? dummy_msrv_save(r->msrv, err) : rc;
}

/* Replaced files out, new files and fptrs in, then the agent (core's add_agent()); through
 * the METS server when there is one. */
static int apply_mets(run_t *r, char *err) {
  const char *out = r->opts->output_grp;
  const dummy_note_t notes[] = {
      {"input-file-grp", r->opts->input_grp},
      {"output-file-grp", out},
      {"parameter", r->params.json},
      {"page-id", r->opts->page_id != NULL ? r->opts->page_id : ""},
  };
  if (r->msrv != NULL)
    return apply_remote(r, notes, sizeof(notes) / sizeof(notes[0]), err);
  for (size_t i = 0; i < r->plan.n; i++) {
    dummy_task_t *t = &r->plan.tasks[i];
    if (t->old_img != NULL)
      dummy_mets_remove_file(r->mets, t->old_img);
    if (t->old_out != NULL)
      dummy_mets_remove_file(r->mets, t->old_out);
  }
  for (size_t i = 0; i < r->plan.n; i++) {
    const dummy_task_t *t = &r->plan.tasks[i];
    if (t->img_id != NULL &&
        dummy_mets_add_file(r->mets, out, t->img_id, t->in_mime, t->img_href, t->page, err) != 0)
      return -1;
    if (dummy_mets_add_file(r->mets, out, t->out_id, MIMETYPE_PAGE, t->out_href, t->page, err) != 0)
      return -1;
  }
  return dummy_mets_add_agent(r->mets, DUMMY_NAME " v" DUMMY_VERSION, DUMMY_STEP, notes,
                              sizeof(notes) / sizeof(notes[0]), err);
}

/* The new METS replaces the old one atomically, keeping its permissions. */
static int save_mets(run_t *r, char *err) {
  struct stat st;
  char *data = NULL;
  size_t len = 0;
  int rc;
  if (fstat(r->lock_fd, &st) != 0)
    return dummy_err(err, "cannot stat %s: %s", r->mets_path, strerror(errno));
  rc = dummy_mets_dump(r->mets, &data, &len, err);
  if (rc == 0)
    rc = dummy_write_buf_atomic(r->mets_path, (int)(st.st_mode & 07777), data, len, err);
  free(data);
  return rc;
}

static void run_free(run_t *r) {
  dummy_plan_free(&r->plan);
  dummy_mets_free(r->mets);
  dummy_msrv_close(r->msrv);
  dummy_params_free(&r->params);
  if (r->lock_fd >= 0)
    close(r->lock_fd);
  free(r->mets_path);
  free(r->dir);
}

int dummy_run(const dummy_opts_t *opts, char *err) {
  run_t r = {.opts = opts, .lock_fd = -1};
  dummy_plan_req_t req;
  int rc;
  dummy_xml_now(r.now, sizeof(r.now));
  rc = dummy_params_parse(opts->parameter_json, &r.params, err);
  if (rc == 0)
    rc = resolve_paths(&r, err);
  if (rc == 0)
    rc = load_mets(&r, err);
  if (rc == 0) {
    req = (dummy_plan_req_t){opts, r.mets, r.dir, r.params.copy_files};
    rc = dummy_plan_build(&r.plan, &req, err);
  }
  if (rc == 0 && r.plan.n == 0)
    dummy_logf(opts, DUMMY_LOG_WARN, "no input files for the selected pages in fileGrp %s",
               opts->input_grp);
  if (rc == 0)
    rc = write_outputs(&r, err);
  if (rc == 0)
    rc = apply_mets(&r, err);
  if (rc == 0 && r.msrv == NULL)
    rc = save_mets(&r, err);
  if (rc == 0)
    dummy_logf(opts, DUMMY_LOG_INFO, "%zu page(s) of %s written to %s in %s%s", r.plan.n,
               opts->input_grp, opts->output_grp, r.msrv != NULL ? "the METS server " : "",
               r.msrv != NULL ? opts->mets_server_url : r.mets_path);
  run_free(&r);
  return rc;
}
