/* What the files of OCR-D's Processing Server share (ops/ocrd.h): ocrd_jobs.c,
 * ocrd_settle.c, ocrd_workflow.c. Not an API. */
#ifndef MQPROC_OPS_OCRD_INT_H
#define MQPROC_OPS_OCRD_INT_H

#include "ops/ocrd.h"

/* A random (version 4) UUID, as OCR-D's ids. */
void mqproc__ocrd_uuid(char out[37]);
/* Whether path (a METS a request names) lies outside --workspace-root, when one is given:
 * by its text first (so whether it exists is not told), then by where it resolves to (a
 * link out). 0 without a root. (Issue 38, F13.) */
int mqproc__ocrd_outside_root(const mqproc__ocrd_env_t *e, const char *path);
/* Begins a transaction holding workspace's lock (PostgreSQL: an advisory transaction lock
 * of its name; SQLite: BEGIN IMMEDIATE, the one writer): 0, or -1 with err. */
int mqproc__ocrd_lock(const mqproc__ocrd_env_t *e, const char *workspace, char *err);
/* v as compact JSON text, malloc()ed (NULL for NULL). */
char *mqproc__ocrd_dumps(const json_t *v);
/* Whether two jobs write a page of the same group: an output group in common, and pages in
 * common (NULL pages: every page). */
int mqproc__ocrd_overlap(const json_t *out_a, const json_t *pages_a, const json_t *out_b,
                         const json_t *pages_b);
/* Whether p can take jobs: a live server, or its queue exists. */
int mqproc__ocrd_takes_jobs(const mqproc__ocrd_env_t *e, const char *p);
/* p's ocrd-tool description (a server's, else --ocrd-tool's), a new reference; NULL. */
json_t *mqproc__ocrd_tool_of(const mqproc__ocrd_env_t *e, const char *p);
/* The processing message of a PYJobInput-like request in, without job_id (new). */
json_t *mqproc__ocrd_message(const mqproc__ocrd_env_t *e, const char *p, const json_t *in);
/* Publishes a job released or submitted QUEUED (its row's republish cleared once
 * confirmed; else logged: a server's sweep sends it), with its workspace's
 * x-mqproc-mets-server header (mqproc__ocrd_mets_header). */
void mqproc__ocrd_publish(const mqproc__ocrd_env_t *e, const char *job_id, const char *processor,
                          const void *body, size_t len, const char *mets_header);

#endif
