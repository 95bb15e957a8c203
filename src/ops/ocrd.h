/* OCR-D's Processing Server over the job table: what `mqproc processing-api` (http/
 * ocrd_api.c) and `mqproc submit --workflow` do, blocking, over the operators' store and
 * queue clients. Each call answers as OCR-D's Processing Server answers the route it
 * serves (docs/ocrd.md; the facts from OCR-D core 3.12.1): an HTTP status, a JSON body, or
 * an error's detail ({"detail": …} on the wire).
 *
 * Jobs are rows of mqproc_jobs from their submission: QUEUED (published at once) or CACHED
 * (waiting for a page lock or a job it depends on; sql/009_ocrd_api.sql). A job holds the
 * pages of its output groups in its workspace while its row is QUEUED or RUNNING, so the
 * locks live in the table and a waiting job is released by whoever looks next: a result
 * callback, the API's sweep (mqproc__ocrd_settle), `mqproc submit --workflow --wait`.
 * Every change of a workspace's jobs is made under a lock of that workspace (PostgreSQL:
 * an advisory transaction lock; SQLite: the one writer), so two API processes, or one
 * restarted, never release two jobs that write the same pages of a group.
 *
 * Files: ocrd_jobs.c (processors, tools, one job: submit, read, log), ocrd_settle.c (the
 * release pass, callbacks), ocrd_workflow.c (workflow scripts and runs), ocrd_mets.c (a
 * METS's pages and groups, page_id ranges). */
#ifndef MQPROC_OPS_OCRD_H
#define MQPROC_OPS_OCRD_H

#include <jansson.h>
#include <stddef.h>

#include "broker/client.h"
#include "net/callback.h"
#include "store/odb.h"

/* The METS servers the jobs of a workspace go through (ocrd_mets_servers.c): mqproc's own
 * (`mqproc mets-server`), OCR-D's (`ocrd workspace server start`), or none (the processors
 * write mets.xml, one at a time per workspace under its lock). */
typedef enum mqproc__mets_servers_kind {
  MQPROC__METS_SERVERS_OFF,
  MQPROC__METS_SERVERS_MQPROC,
  MQPROC__METS_SERVERS_OCRD,
} mqproc__mets_servers_kind_t;

typedef struct mqproc__mets_servers {
  mqproc__mets_servers_kind_t kind;
  const char *program;      /* the mqproc program (MQPROC) */
  const char *ocrd_command; /* OCR-D's CLI, split like sh words (OCRD; "ocrd") */
  const char *sockets_dir;  /* where their sockets are: <dir>/<safe_filename(workspace)>.sock */
  const char *database;     /* the job store, which mqproc's servers watch to know when to stop */
} mqproc__mets_servers_t;

/* What every call works with. */
typedef struct mqproc__ocrd_env {
  mqproc__odb_t *db;                  /* the store (blocking) */
  mqproc__qclient_t *q;               /* the queue; NULL: released jobs wait for a server's sweep */
  const char *exchange;               /* NULL: ocrd-network-default */
  const json_t *tools;                /* --ocrd-tool: {"name": tool, ...}; NULL: none */
  const char *ws_root;                /* --workspace-root: workspace_id W is ROOT/W/mets.xml */
  const char *result_url;             /* the internal callback URL put in every job (NULL: none) */
  const char *actor;                  /* who submits, for the audit (user@host, api:ADDR) */
  const mqproc__callback_opts_t *cb;  /* the workflow callbacks' timeout and policy */
  const mqproc__mets_servers_t *mets; /* NULL, or kind OFF: no METS servers */
  int *publish_failed; /* NULL, or set to 1 when a publish failed (the caller may make its
                          queue client again: the connection may be gone) */
  json_t *callbacks;   /* NULL: a workflow run's callback is POSTed when it ends, blocking;
                          else {"job_id", "url", "body"} is appended for the caller to POST
                          and record (mqproc__ocrd_callback_record) off this thread */
} mqproc__ocrd_env_t;

/* An answer: status, and a JSON body (taken by the caller) or a text body (malloc()ed) or
 * the detail of an error (status >= 400). */
typedef struct mqproc__ocrd_answer {
  int status;
  json_t *body;
  char *text;
  size_t text_len;
  char detail[2048];
} mqproc__ocrd_answer_t;

void mqproc__ocrd_answer_free(mqproc__ocrd_answer_t *a);
/* Sets a's status and detail (printf-style); returns status. */
int mqproc__ocrd_fail(mqproc__ocrd_answer_t *a, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- processors (ocrd_jobs.c) --------------------------------------------------------- */

/* GET /processor: the processors that can take jobs: those with a live server, and those
 * of the tool lists whose queue exists. */
void mqproc__ocrd_processors(const mqproc__ocrd_env_t *e, mqproc__ocrd_answer_t *a);
/* GET /processor/info/{p}: the tool description (a server's, else --ocrd-tool's); 404. */
void mqproc__ocrd_info(const mqproc__ocrd_env_t *e, const char *p, mqproc__ocrd_answer_t *a);
/* Stores the tool description a server of p printed (the upsert of mqproc_ocrd_tools):
 * 0, or -1 with err (512 bytes). */
int mqproc__ocrd_tool_store(mqproc__odb_t *db, const char *p, const char *tool_json,
                            const char *worker_id, char *err);

/* ---- one job (ocrd_jobs.c) ------------------------------------------------------------ */

/* POST /processor/run/{p}: input is the request's JSON (PYJobInput); checked in OCR-D's
 * order (queue 422, job_id 422, tool 404, path/workspace 422, parameters 400, METS or
 * workspace 404), then a row QUEUED or CACHED and, when QUEUED, its message: 200
 * PYJobOutput. */
void mqproc__ocrd_run(const mqproc__ocrd_env_t *e, const char *p, const json_t *input,
                      mqproc__ocrd_answer_t *a);
/* GET /processor/job/{id}: PYJobOutput; unknown: 422 as OCR-D answers. */
void mqproc__ocrd_job(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a);
/* GET /processor/log/{id}: the job's log as text (its last 8 MiB); unknown 422; none yet
 * 404. */
void mqproc__ocrd_log(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a);
/* POST /result_callback: {job_id, state, ...}; the job's workspace is settled (the table,
 * not the message, says how the job ended); 200 null; unknown job 404. */
void mqproc__ocrd_result(const mqproc__ocrd_env_t *e, const json_t *msg, mqproc__ocrd_answer_t *a);

/* What submitting one job needs (a /processor/run request, or a task of a workflow). */
typedef struct mqproc__ocrd_new {
  const char *processor;
  json_t *msg;              /* the processing message without job_id (borrowed) */
  const char *workspace;    /* the lock's key: path_to_mets, else workspace_id */
  json_t *pages;            /* the page ids it writes (borrowed); NULL: every page */
  json_t *depends_on;       /* job ids (borrowed); NULL: none */
  const char *workflow_job; /* its workflow run, or NULL */
  char job_id[40];          /* the id: "" makes one (out) */
  const char *state;        /* out: QUEUED or CACHED */
} mqproc__ocrd_new_t;

/* Called in the submission's transaction once every job has its id and rows (a workflow
 * run's own row goes in with them): 0, or -1 with err (the transaction is rolled back). */
typedef int (*mqproc__ocrd_before_commit_cb)(const mqproc__ocrd_env_t *e, void *ud,
                                             const mqproc__ocrd_new_t *jobs, size_t n, char *err);

/* The rows of jobs[0..n) in one transaction under their workspace's lock (all of one
 * workspace), each QUEUED or CACHED as its locks and dependencies say (a job's
 * dependencies are earlier jobs of the batch or jobs that exist), then the messages of the
 * QUEUED ones: 0, or -1 with err (512 bytes; nothing was written). before may be NULL. */
int mqproc__ocrd_submit(const mqproc__ocrd_env_t *e, mqproc__ocrd_new_t *jobs, size_t n,
                        mqproc__ocrd_before_commit_cb before, void *ud, char *err);

/* ---- the release pass (ocrd_settle.c) --------------------------------------------------- */

/* Under the lock of workspace (NULL: every workspace with CACHED jobs): CACHED jobs whose
 * dependency FAILED or was CANCELLED become CANCELLED (and theirs after them), then, in
 * the order they came, those whose dependencies all succeeded and whose pages no earlier
 * job holds become QUEUED and are published; then the workflow runs whose jobs all ended
 * are ended and their callback URLs called. Returns how many jobs it released or
 * cancelled, -1 with err. */
int mqproc__ocrd_settle(const mqproc__ocrd_env_t *e, const char *workspace, char *err);
/* Appends to e->callbacks (at most max) the runs that ended within a day whose callback
 * has no recorded outcome (its sender stopped, or it was not sent yet): 0, -1 with err. */
int mqproc__ocrd_callbacks_due(const mqproc__ocrd_env_t *e, int max, char *err);
/* Records how run id's callback went (error NULL: OK, else FAILED with it; logged): 0, or
 * -1 when the store did not take it. */
int mqproc__ocrd_callback_record(const mqproc__ocrd_env_t *e, const char *id, const char *error);

/* ---- workflows (ocrd_workflow.c) -------------------------------------------------------- */

/* POST /workflow (id NULL: 201 {"workflow_id"}, 409 on the same content) and PUT
 * /workflow/{id} (200; 404). content is the script, checked (422 empty or unparsable). */
void mqproc__ocrd_wf_store(const mqproc__ocrd_env_t *e, const char *id, const char *content,
                           size_t len, mqproc__ocrd_answer_t *a);
/* GET /workflow/{id}: the script as text; 404. */
void mqproc__ocrd_wf_get(const mqproc__ocrd_env_t *e, const char *id, mqproc__ocrd_answer_t *a);

typedef struct mqproc__ocrd_wf_run {
  const char *mets;        /* mets_path (required) */
  const char *page_id;     /* NULL or "": every page */
  int page_wise;           /* the chain once per page */
  const char *workflow_id; /* a stored script, or NULL and content */
  const char *content;
  size_t len;
  const char *callback_url; /* workflow_callback_url, or NULL */
} mqproc__ocrd_wf_run_t;
/* POST /workflow/run: its processing jobs (the later tasks CACHED on the earlier ones
 * whose output groups they read), 200 PYWorkflowJobOutput. */
void mqproc__ocrd_wf_run(const mqproc__ocrd_env_t *e, const mqproc__ocrd_wf_run_t *r,
                         mqproc__ocrd_answer_t *a);
/* GET /workflow/job-simple/{id} (simple) and /workflow/job/{id}; 404. */
void mqproc__ocrd_wf_status(const mqproc__ocrd_env_t *e, const char *id, int simple,
                            mqproc__ocrd_answer_t *a);

/* ---- METS servers (ocrd_mets_servers.c) ------------------------------------------------- */

/* The socket of the METS server of mets's workspace: <sockets_dir>/<safe_filename(its
 * directory)>.sock, malloc()ed (NULL: out of memory). */
char *mqproc__mets_server_of(const mqproc__mets_servers_t *k, const char *mets);
/* Makes sure a METS server of kind k holds the workspace of mets (key: its jobs' workspace
 * in the job table), starting one when nothing answers on its socket, and waits until it
 * answers: 0 with *url (its socket, malloc()ed), or -1 with err (512 bytes). Blocking. */
int mqproc__mets_servers_keep(const mqproc__mets_servers_t *k, const char *mets, const char *key,
                              char **url, char *err);
/* The x-mqproc-mets-server header (key=value, into hdr of n bytes) of the jobs of
 * workspace (a METS path, or a workspace_id under e->ws_root): its server's socket, the
 * server kept (above); "none" without METS servers. 0, or -1 with err. */
int mqproc__ocrd_mets_header(const mqproc__ocrd_env_t *e, const char *workspace, char *hdr,
                             size_t n, char *err);
/* The API's sweep: a server is kept for every workspace with jobs to run (one that died is
 * started again); OCR-D's own servers (which do not stop by themselves) of workspaces whose
 * jobs all ended are stopped once two sweeps in a row found them so (idle: the sweeps'
 * memory, a JSON object the caller owns). 0, or -1 with err. */
int mqproc__mets_servers_sweep(const mqproc__ocrd_env_t *e, json_t *idle, char *err);
/* Whether a job of any of the workspaces keys (NULL-terminated; the job table's workspace
 * column) is QUEUED, RUNNING or CACHED: what `mqproc mets-server --workspace` watches. 1,
 * 0, or -1 with err (512 bytes). Blocking. */
int mqproc__mets_workspace_busy(mqproc__odb_t *db, const char *const *keys, char *err);

/* ---- METS and page ids (ocrd_mets.c) ---------------------------------------------------- */

/* The physical pages (the IDs of the PHYSICAL structMap's page divs, in order) and the
 * fileGrp USEs of the METS at path, read without a full XML parser (opened as every file a
 * request names: mqproc__open_untrusted, no link as its last part); 0, or -1 when there is
 * no such file, -2 when it is refused (a link, a FIFO, too large), err saying why. */
typedef struct mqproc__mets_info {
  json_t *pages;  /* array of strings */
  json_t *groups; /* array of strings */
} mqproc__mets_info_t;
int mqproc__mets_read(const char *path, mqproc__mets_info_t *out, char *err);
void mqproc__mets_info_free(mqproc__mets_info_t *m);
/* page_id as OCR-D expands it (comma-separated ids, "A..B" ranges of the last number);
 * an array of ids (new reference), NULL when it holds a //regex (it may name any page) or
 * with err when a range is malformed (*err set, NULL returned). */
json_t *mqproc__page_ids(const char *page_id, char *err, size_t errlen);

#endif
