/* Workflows (ocrd.h): scripts of OCR-D's task lines (`NAME -I A,B -O C [-p JSON] [-P K V]`,
 * as ocrd.task_sequence.ProcessorTask.parse reads them), stored with their md5 as OCR-D
 * stores them, and their runs: one processing job per task (or per task and page with
 * page_wise), each depending on the jobs of its chain that write the groups it reads, so
 * the later tasks start CACHED and are released as the earlier ones succeed (or cancelled
 * when one fails: ocrd_settle.c). A task's processor is ocrd-NAME, as OCR-D names it; a
 * name that is no OCR-D processor here but a processor of its own (a live server, a queue)
 * is taken as it is, so a chain of any processors runs the same way. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/argv.h"
#include "codec/ocrd_params.h"
#include "ops/ocrd.h"
#include "ops/ocrd_int.h"

#define TASKS_MAX 256
#define RUN_JOBS_MAX 20000 /* jobs one run may make (pages x tasks) */

/* One task line. */
typedef struct task {
  char name[256];      /* NAME as written */
  char processor[300]; /* the processor it runs on (resolved at run time) */
  json_t *inputs, *outputs, *params;
} task_t;

static void tasks_free(task_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    json_decref(t[i].inputs);
    json_decref(t[i].outputs);
    json_decref(t[i].params);
  }
  free(t);
}

/* "a,b" appended to arr as strings. */
static void add_groups(json_t *arr, const char *list) {
  for (const char *p = list; *p != '\0';) {
    size_t n = strcspn(p, ",");
    json_array_append_new(arr, json_stringn(p, n));
    p += n + (p[n] == ',');
  }
}

/* The words of one line into t: 0, or -1 with why. */
static int parse_words(char **w, int n, task_t *t, char *why, size_t wn) {
  snprintf(t->name, sizeof(t->name), "%s", w[0]);
  t->inputs = json_array();
  t->outputs = json_array();
  t->params = json_object();
  for (int i = 1; i < n;) {
    if ((!strcmp(w[i], "-I") || !strcmp(w[i], "-O")) && i + 1 < n) {
      add_groups(!strcmp(w[i], "-I") ? t->inputs : t->outputs, w[i + 1]);
      i += 2;
    } else if (!strcmp(w[i], "-p") && i + 1 < n) {
      json_t *p = json_loads(w[i + 1], 0, NULL);
      if (!json_is_object(p)) { /* a file on this server is not read for a client */
        json_decref(p);
        snprintf(why, wn, "-p '%.100s': not a JSON object", w[i + 1]);
        return -1;
      }
      json_object_update(t->params, p);
      json_decref(p);
      i += 2;
    } else if (!strcmp(w[i], "-P") && i + 2 < n) {
      json_t *v = json_loads(w[i + 2], JSON_DECODE_ANY, NULL);
      json_object_set_new(t->params, w[i + 1], v != NULL ? v : json_string(w[i + 2]));
      i += 3;
    } else {
      snprintf(why, wn, "tokens remaining: '%.100s'", w[i]);
      return -1;
    }
  }
  return 0;
}

/* The tasks of a script (NULL with why: empty, or a line that does not parse). */
static task_t *parse_script(const char *content, size_t len, size_t *n, char *why, size_t wn) {
  task_t *t = calloc(TASKS_MAX, sizeof(*t));
  char *copy = strndup(content, len), *save = NULL, *line;
  *n = 0;
  if (t == NULL || copy == NULL || memchr(content, '\0', len) != NULL) {
    snprintf(why, wn, t == NULL || copy == NULL ? "out of memory" : "it holds a NUL byte");
    free(copy);
    free(t);
    return NULL;
  }
  for (line = strtok_r(copy, "\r\n", &save); line != NULL; line = strtok_r(NULL, "\r\n", &save)) {
    char **w = NULL, e[256];
    int nw = 0;
    if (strspn(line, " \t") == strlen(line))
      continue;
    if (*n == TASKS_MAX || mqproc__argv_split(line, &w, &nw, e) != MQPROC_OK ||
        parse_words(w, nw, &t[*n], e, sizeof(e)) != 0) {
      snprintf(why, wn, "Failed parsing task description '%.200s': %s", line,
               *n == TASKS_MAX ? "too many tasks" : e);
      mqproc__argv_free(w);
      if (*n < TASKS_MAX)
        (*n)++; /* its half-made json is freed with the rest (no task past the last one) */
      tasks_free(t, *n);
      free(copy);
      return NULL;
    }
    mqproc__argv_free(w);
    (*n)++;
  }
  free(copy);
  if (*n == 0) {
    snprintf(why, wn, "Workflow is invalid, empty.");
    free(t);
    return NULL;
  }
  return t;
}

/* md5 of content as hex (OCR-D's content_hash). */
static void md5_hex(const char *content, size_t len, char out[33]) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(content, len, d, &n, EVP_md5(), NULL);
  for (unsigned i = 0; i < n && i < 16; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
  out[32] = '\0';
}

/* ---- scripts ------------------------------------------------------------------------------ */

void mqproc__ocrd_wf_store(const mqproc__ocrd_env_t *e, const char *id, const char *content,
                           size_t len, mqproc__ocrd_answer_t *a) {
  char why[512], err[512], hash[33], newid[37];
  size_t n;
  task_t *t = parse_script(content, len, &n, why, sizeof(why));
  const char *vals[3];
  mqproc__ores_t *r;
  char *text;
  if (t == NULL) {
    mqproc__ocrd_fail(a, 422,
                      "Provided workflow script is invalid, failed to parse "
                      "ProcessorTasks. %s",
                      why);
    return;
  }
  tasks_free(t, n);
  md5_hex(content, len, hash);
  if ((text = strndup(content, len)) == NULL) {
    mqproc__ocrd_fail(a, 500, "out of memory");
    return;
  }
  if (id == NULL) { /* the same content once */
    vals[0] = hash;
    r = mqproc__odb_q(e->db, "SELECT workflow_id FROM mqproc_workflows WHERE content_hash = $1",
                      "SELECT workflow_id FROM mqproc_workflows WHERE content_hash = ?1", 1, vals,
                      err);
    if (r != NULL && mqproc__ores_rows(r) > 0) {
      mqproc__ocrd_fail(a, 409, "The same workflow script already exists, workflow id: %s",
                        mqproc__ores_get(r, 0, 0));
      mqproc__ores_free(r);
      free(text);
      return;
    }
    mqproc__ores_free(r);
    mqproc__ocrd_uuid(newid);
  }
  vals[0] = id != NULL ? id : newid;
  vals[1] = text;
  vals[2] = hash;
  r = id == NULL ? mqproc__odb_q(e->db,
                                 "INSERT INTO mqproc_workflows (workflow_id, content, content_hash)"
                                 " VALUES ($1, $2, $3) RETURNING workflow_id",
                                 "INSERT INTO mqproc_workflows (workflow_id, content, content_hash,"
                                 " created_at, updated_at) VALUES (?1, ?2, ?3, mq_now(), mq_now())"
                                 " RETURNING workflow_id",
                                 3, vals, err)
                 : mqproc__odb_q(e->db,
                                 "UPDATE mqproc_workflows SET content = $2, content_hash = $3,"
                                 " updated_at = now() WHERE workflow_id = $1 RETURNING workflow_id",
                                 "UPDATE mqproc_workflows SET content = ?2, content_hash = ?3,"
                                 " updated_at = mq_now() WHERE workflow_id = ?1"
                                 " RETURNING workflow_id",
                                 3, vals, err);
  free(text);
  if (r == NULL) {
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  if (mqproc__ores_rows(r) == 0) {
    mqproc__ores_free(r);
    mqproc__ocrd_fail(a, 404, "Workflow script not existing for id '%s'.", id);
    return;
  }
  a->status = id == NULL ? 201 : 200;
  a->body = json_pack("{s:s}", "workflow_id", mqproc__ores_get(r, 0, 0));
  mqproc__ores_free(r);
}

/* A stored script's content (malloc()ed), NULL when there is none (or on error, err). */
static char *script_of(const mqproc__ocrd_env_t *e, const char *id, char *err) {
  const char *vals[1] = {id};
  char *out = NULL;
  mqproc__ores_t *r =
      mqproc__odb_q(e->db, "SELECT content FROM mqproc_workflows WHERE workflow_id = $1",
                    "SELECT content FROM mqproc_workflows WHERE workflow_id = ?1", 1, vals, err);
  if (r != NULL && mqproc__ores_rows(r) == 1)
    out = strdup(mqproc__ores_get(r, 0, 0));
  if (r != NULL)
    err[0] = '\0';
  mqproc__ores_free(r);
  return out;
}

void mqproc__ocrd_wf_get(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a) {
  char err[512];
  char *content = script_of(e, id, err);
  if (content == NULL) {
    if (err[0] != '\0')
      mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    else
      mqproc__ocrd_fail(a, 404, "Workflow script not existing for id '%s'.", id);
    return;
  }
  a->status = 200;
  a->text = content;
  a->text_len = strlen(content);
}

/* ---- runs ---------------------------------------------------------------------------------- */

/* Each task's processor (ocrd-NAME, else NAME when only that one takes jobs), and its
 * parameters checked against its tool: 0, or the answer's status (406 with the missing
 * processors, 400 with the first failing check). */
static int resolve_tasks(const mqproc__ocrd_env_t *e, task_t *t, size_t n,
                         mqproc__ocrd_answer_t *a) {
  json_t *missing = json_array();
  for (size_t i = 0; i < n; i++) {
    snprintf(t[i].processor, sizeof(t[i].processor), "ocrd-%s", t[i].name);
    if (!mqproc__ocrd_takes_jobs(e, t[i].processor) && mqproc__ocrd_takes_jobs(e, t[i].name))
      snprintf(t[i].processor, sizeof(t[i].processor), "%s", t[i].name);
    else if (!mqproc__ocrd_takes_jobs(e, t[i].processor))
      json_array_append_new(missing, json_pack("[s]", t[i].processor));
  }
  if (json_array_size(missing) > 0) { /* OCR-D prints a list of Python sets */
    char *text = mqproc__py_repr(missing);
    for (char *c = text; c != NULL && *c != '\0'; c++)
      *c = *c == '[' && c != text ? '{' : *c == ']' && c[1] != '\0' ? '}' : *c;
    mqproc__ocrd_fail(a, 406,
                      "Workflow validation has failed. The desired Processing Worker was not "
                      "found. Missing Processing Workers: %s",
                      text != NULL ? text : "?");
    free(text);
    json_decref(missing);
    return 406;
  }
  json_decref(missing);
  for (size_t i = 0; i < n; i++) {
    json_t *tool = mqproc__ocrd_tool_of(e, t[i].processor);
    char *why = tool != NULL ? mqproc__ocrd_params_check(tool, t[i].params) : NULL;
    json_decref(tool);
    if (why != NULL) {
      mqproc__ocrd_fail(a, 400,
                        "Failed to validate processing job input against the tool json of "
                        "processor: %s\n%s",
                        t[i].processor, why);
      free(why);
      return 400;
    }
  }
  return 0;
}

/* What the run's row needs when it goes in with its jobs. */
typedef struct run_row {
  const mqproc__ocrd_wf_run_t *r;
  const char *job_id;
  json_t *pages; /* the pages of a page-wise run; NULL: one chain */
  size_t ntasks;
  json_t *by_page; /* out: {page: [ids]} */
} run_row_t;

static int insert_run(const mqproc__ocrd_env_t *e, void *ud, const mqproc__ocrd_new_t *jobs,
                      size_t n, char *err) {
  run_row_t *rr = ud;
  size_t chains = n / rr->ntasks;
  char *ids;
  const char *vals[7];
  mqproc__ores_t *res;
  rr->by_page = json_object();
  for (size_t c = 0; c < chains; c++) {
    json_t *list = json_array();
    for (size_t k = 0; k < rr->ntasks; k++)
      json_array_append_new(list, json_string(jobs[c * rr->ntasks + k].job_id));
    json_object_set_new(rr->by_page,
                        rr->pages != NULL        ? json_string_value(json_array_get(rr->pages, c))
                        : rr->r->page_id != NULL ? rr->r->page_id
                                                 : "",
                        list);
  }
  ids = mqproc__ocrd_dumps(rr->by_page);
  vals[0] = rr->job_id;
  vals[1] = rr->r->workflow_id;
  vals[2] = rr->r->mets;
  vals[3] = rr->r->page_id != NULL ? rr->r->page_id : "";
  vals[4] = rr->r->page_wise ? "1" : "0";
  vals[5] = ids;
  vals[6] = rr->r->callback_url;
  res = mqproc__odb_q(e->db,
                      "INSERT INTO mqproc_workflow_jobs (job_id, workflow_id, path_to_mets,"
                      " page_id, page_wise, processing_job_ids, callback_url)"
                      " VALUES ($1, $2, $3, $4, $5::int = 1, $6::jsonb, $7)",
                      "INSERT INTO mqproc_workflow_jobs (job_id, workflow_id, path_to_mets,"
                      " page_id, page_wise, processing_job_ids, callback_url, created_at)"
                      " VALUES (?1, ?2, ?3, ?4, CAST(?5 AS INTEGER), ?6, ?7, mq_now())",
                      7, vals, err);
  free(ids);
  mqproc__ores_free(res);
  return res != NULL ? 0 : -1;
}

/* Adds to deps the job of the latest task before k in the chain at base that writes group
 * g (OCR-D's producer of an input group), unless it is there. */
static void add_producer(mqproc__ocrd_new_t *chain, task_t *t, size_t k, const json_t *g,
                         json_t *deps) {
  for (size_t p = k; p-- > 0;) {
    size_t i, d;
    json_t *o, *x;
    int writes = 0;
    json_array_foreach(t[p].outputs, i, o) writes |= json_equal(o, g);
    if (!writes)
      continue;
    json_array_foreach(deps, d, x) if (!strcmp(json_string_value(x), chain[p].job_id)) return;
    json_array_append_new(deps, json_string(chain[p].job_id));
    return;
  }
}

/* The jobs of a run: chains (one, or one per page) of the tasks, their ids made here, each
 * task depending on the latest earlier task of its chain that writes a group it reads. */
static mqproc__ocrd_new_t *make_jobs(const mqproc__ocrd_env_t *e, const mqproc__ocrd_wf_run_t *r,
                                     task_t *t, size_t nt, json_t *pages, const char *job_id,
                                     size_t *n) {
  size_t chains = pages != NULL ? json_array_size(pages) : 1;
  mqproc__ocrd_new_t *jobs = calloc(chains * nt + 1, sizeof(*jobs));
  *n = jobs != NULL ? chains * nt : 0;
  for (size_t i = 0; i < *n; i++)
    mqproc__ocrd_uuid(jobs[i].job_id);
  for (size_t c = 0; jobs != NULL && c < chains; c++) {
    const char *page = pages != NULL ? json_string_value(json_array_get(pages, c)) : r->page_id;
    for (size_t k = 0; k < nt; k++) {
      mqproc__ocrd_new_t *j = &jobs[c * nt + k];
      char why[256];
      json_t *in = json_pack("{s:s, s:O, s:O, s:O}", "path_to_mets", r->mets, "input_file_grps",
                             t[k].inputs, "output_file_grps", t[k].outputs, "parameters",
                             t[k].params),
             *g;
      size_t i;
      if (page != NULL && page[0] != '\0')
        json_object_set_new(in, "page_id", json_string(page));
      j->processor = t[k].processor;
      j->msg = mqproc__ocrd_message(e, t[k].processor, in);
      j->workspace = r->mets;
      if (pages != NULL)
        j->pages = json_pack("[s]", page);
      else if (page != NULL && page[0] != '\0') /* NULL for a //regex: every page */
        j->pages = mqproc__page_ids(page, why, sizeof(why));
      j->depends_on = json_array();
      j->workflow_job = job_id;
      json_array_foreach(t[k].inputs, i, g) add_producer(&jobs[c * nt], t, k, g, j->depends_on);
      json_decref(in);
    }
  }
  return jobs;
}

static void jobs_free(mqproc__ocrd_new_t *jobs, size_t n) {
  for (size_t i = 0; jobs != NULL && i < n; i++) {
    json_decref(jobs[i].msg);
    json_decref(jobs[i].pages);
    json_decref(jobs[i].depends_on);
  }
  free(jobs);
}

/* The pages a run writes: page_id's, or every page of the METS; NULL answered (422). */
static json_t *run_pages(const mqproc__ocrd_wf_run_t *r, const mqproc__mets_info_t *m,
                         mqproc__ocrd_answer_t *a) {
  char why[512];
  json_t *pages;
  if (r->page_id == NULL || r->page_id[0] == '\0')
    return json_incref(m->pages);
  if ((pages = mqproc__page_ids(r->page_id, why, sizeof(why))) == NULL)
    mqproc__ocrd_fail(a, 422, "Failed to determine page range for mets path: %s %s", r->mets,
                      why[0] != '\0' ? why : "(a //regex page_id cannot be run page-wise)");
  return pages;
}

/* The script of a run (its content, malloc()ed) and its tasks; NULL answered. */
static task_t *run_tasks(const mqproc__ocrd_env_t *e, const mqproc__ocrd_wf_run_t *r, size_t *nt,
                         mqproc__ocrd_answer_t *a) {
  char err[512], why[512], *content = NULL;
  task_t *t;
  if (r->workflow_id != NULL) {
    if ((content = script_of(e, r->workflow_id, err)) == NULL) {
      mqproc__ocrd_fail(a, err[0] != '\0' ? 503 : 404, "Workflow with id '%s' not found",
                        r->workflow_id);
      return NULL;
    }
  } else if (r->content == NULL) {
    mqproc__ocrd_fail(a, 422,
                      "Either 'workflow' must be uploaded as a file or 'workflow_id' must be "
                      "provided. Both are missing.");
    return NULL;
  }
  t = parse_script(content != NULL ? content : r->content,
                   content != NULL ? strlen(content) : r->len, nt, why, sizeof(why));
  free(content);
  if (t == NULL)
    mqproc__ocrd_fail(a, 422, "Failed parsing processing tasks from a workflow. %s", why);
  return t;
}

/* Whether every input group of the first task is in the METS (422 answered if not). */
static int first_inputs_ok(const task_t *t, const mqproc__mets_info_t *m,
                           const mqproc__ocrd_wf_run_t *r, mqproc__ocrd_answer_t *a) {
  size_t i, k;
  json_t *g, *h;
  json_array_foreach(t[0].inputs, i, g) {
    int found = 0;
    json_array_foreach(m->groups, k, h) found |= json_equal(g, h);
    if (!found) {
      char *list = mqproc__py_repr(t[0].inputs);
      mqproc__ocrd_fail(a, 422, "Input file group '%s' of the first processor not found: %s",
                        json_string_value(g), list != NULL ? list : "?");
      free(list);
      (void)r;
      return -1;
    }
  }
  return 0;
}

void mqproc__ocrd_wf_run(const mqproc__ocrd_env_t *e, const mqproc__ocrd_wf_run_t *r,
                         mqproc__ocrd_answer_t *a) {
  mqproc__mets_info_t m = {0};
  mqproc__ocrd_new_t *jobs = NULL;
  json_t *pages = NULL;
  char err[512], job_id[37];
  size_t nt = 0, nj = 0;
  int rc;
  task_t *t = NULL;
  run_row_t rr = {.r = r, .job_id = job_id};
  if (r->mets == NULL || r->mets[0] == '\0') {
    mqproc__ocrd_fail(a, 422, "query.mets_path: Field required");
    return;
  }
  if (mqproc__ocrd_outside_root(e, r->mets)) {
    mqproc__ocrd_fail(a, 422, "Mets file path refused: %s: outside --workspace-root", r->mets);
    return;
  }
  if ((rc = mqproc__mets_read(r->mets, &m, err)) != 0) {
    if (rc == -1)
      mqproc__ocrd_fail(a, 404, "Mets file path not existing: %s", r->mets);
    else /* a FIFO would hold the API's worker: nothing is opened that could */
      mqproc__ocrd_fail(a, 422, "Mets file path refused: %s: %s", r->mets, err);
    return;
  }
  if ((t = run_tasks(e, r, &nt, a)) == NULL || first_inputs_ok(t, &m, r, a) != 0 ||
      resolve_tasks(e, t, nt, a) != 0)
    goto out;
  if (r->page_id != NULL && r->page_id[0] != '\0') { /* a malformed range is refused */
    char why[256];
    json_t *ids = mqproc__page_ids(r->page_id, why, sizeof(why));
    json_decref(ids);
    if (ids == NULL && why[0] != '\0') {
      mqproc__ocrd_fail(a, 422, "Failed to determine page range for mets path: %s %s", r->mets,
                        why);
      goto out;
    }
  }
  if (r->page_wise && (pages = run_pages(r, &m, a)) == NULL)
    goto out;
  if (pages != NULL && json_array_size(pages) == 0) {
    mqproc__ocrd_fail(a, 422, "Failed to determine page range for mets path: %s (no pages)",
                      r->mets);
    goto out;
  }
  if ((pages != NULL ? json_array_size(pages) : 1) * nt > RUN_JOBS_MAX) {
    mqproc__ocrd_fail(a, 422, "a run of more than %d jobs is refused", RUN_JOBS_MAX);
    goto out;
  }
  mqproc__ocrd_uuid(job_id);
  if ((jobs = make_jobs(e, r, t, nt, pages, job_id, &nj)) == NULL) {
    mqproc__ocrd_fail(a, 500, "out of memory");
    goto out;
  }
  rr.pages = pages;
  rr.ntasks = nt;
  if (mqproc__ocrd_submit(e, jobs, nj, insert_run, &rr, err) != 0) {
    mqproc__ocrd_fail(a, 500, "Processing server has failed to record the workflow: %s", err);
    goto out;
  }
  a->status = 200;
  a->body =
      json_pack("{s:O, s:s, s:s, s:s}", "processing_job_ids", rr.by_page, "page_id",
                r->page_id != NULL ? r->page_id : "", "job_id", job_id, "path_to_mets", r->mets);
  if (r->page_wise)
    json_object_set_new(a->body, "page_wise", json_true());
out:
  json_decref(rr.by_page);
  jobs_free(jobs, nj);
  json_decref(pages);
  if (t != NULL)
    tasks_free(t, nt);
  mqproc__mets_info_free(&m);
}

/* ---- a run's state --------------------------------------------------------------------------- */

void mqproc__ocrd_wf_status(const mqproc__ocrd_env_t *e, const char *id, int simple,
                            mqproc__ocrd_answer_t *a) {
  const char *vals[1] = {id};
  char err[512], *ids = NULL;
  json_t *by_page, *list, *flat = json_array(), *out;
  const char *k, *state = "UNSET";
  long long success = 0;
  int failed = 0, running = 0;
  mqproc__ores_t *r = mqproc__odb_q(
      e->db, "SELECT processing_job_ids::text FROM mqproc_workflow_jobs WHERE job_id = $1",
      "SELECT processing_job_ids FROM mqproc_workflow_jobs WHERE job_id = ?1", 1, vals, err);
  if (r == NULL || mqproc__ores_rows(r) == 0) {
    if (r == NULL)
      mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    else
      mqproc__ocrd_fail(a, 404, "Workflow job with id '%s' not found in the DB.", id);
    mqproc__ores_free(r);
    json_decref(flat);
    return;
  }
  by_page = json_loads(mqproc__ores_get(r, 0, 0), 0, NULL);
  mqproc__ores_free(r);
  json_object_foreach(by_page, k, list) json_array_extend(flat, list);
  json_decref(by_page);
  ids = mqproc__ocrd_dumps(flat);
  vals[0] = ids;
  r = mqproc__odb_q(e->db,
                    "SELECT j.job_id, j.processor_name, j.state, o.pages::text FROM mqproc_jobs j"
                    " LEFT JOIN mqproc_ocrd_jobs o ON o.job_id = j.job_id WHERE j.job_id IN"
                    " (SELECT jsonb_array_elements_text($1::jsonb))",
                    "SELECT j.job_id, j.processor_name, j.state, o.pages FROM mqproc_jobs j"
                    " LEFT JOIN mqproc_ocrd_jobs o ON o.job_id = j.job_id WHERE j.job_id IN"
                    " (SELECT value FROM json_each(?1))",
                    1, vals, err);
  free(ids);
  if (r == NULL) {
    json_decref(flat);
    mqproc__ocrd_fail(a, 503, "the job store: %s", err);
    return;
  }
  out = json_object();
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    const char *proc = mqproc__ores_get(r, i, 1), *st = mqproc__ores_get(r, i, 2);
    json_t *per = json_object_get(out, proc), *n;
    failed |= !strcmp(st, "FAILED") || !strcmp(st, "CANCELLED");
    running |= !strcmp(st, "RUNNING");
    success += !strcmp(st, "SUCCESS");
    if (per == NULL)
      json_object_set_new(out, proc, per = json_object());
    n = json_object_get(per, st);
    json_object_set_new(per, st, json_integer(json_integer_value(n) + 1));
    if (!strcmp(st, "FAILED")) { /* OCR-D lists the failed tasks with their pages */
      json_t *ft = json_object_get(out, "failed-processor-tasks"), *pl;
      json_t *pages = json_loads(mqproc__ores_get(r, i, 3), JSON_DECODE_ANY, NULL);
      if (ft == NULL)
        json_object_set_new(out, "failed-processor-tasks", ft = json_object());
      if ((pl = json_object_get(ft, proc)) == NULL)
        json_object_set_new(ft, proc, pl = json_array());
      json_array_append_new(pl,
                            json_pack("{s:s, s:O?}", "job_id", mqproc__ores_get(r, i, 0), "page_id",
                                      json_is_array(pages) ? json_array_get(pages, 0) : NULL));
      json_decref(pages);
    }
  }
  /* OCR-D's verdict: a failed or cancelled job fails it, a running one runs it, all
     succeeded is SUCCESS, else UNSET */
  state = failed ? "FAILED" : running ? "RUNNING" : "UNSET";
  if (!failed && success == (long long)json_array_size(flat))
    state = "SUCCESS";
  mqproc__ores_free(r);
  json_decref(flat);
  a->status = 200;
  if (simple) {
    json_decref(out);
    a->body = json_pack("{s:s}", "state", state);
  } else {
    a->body = out;
  }
}
