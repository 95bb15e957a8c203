/* The status page's HTML, rendered from the JSON the fleet reads return (ops/ops.h,
 * ops/page_reads.h). Pure functions: no I/O, every user-supplied text HTML-escaped (job
 * ids, errors, parameters, processor and worker names, dead letters' reasons), every link
 * argument URL-encoded too. One self-contained document per answer: inline CSS, inline
 * SVG charts with axes, times relative with the exact time on hover; on the overview and
 * the list a small inline script refreshes <main> every 5 s (with JavaScript off, a meta
 * refresh does); a job's page has no script (its log box opens at its end by CSS). */
#ifndef MQPROC_HTTP_PAGE_H
#define MQPROC_HTTP_PAGE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* READ_ONLY: no token was given (nothing to sign in for); SIGN_IN: a token was given and
 * the reader is not signed in; SIGNED_IN: with the admin token (buttons); READER: with
 * the read token (no buttons). */
enum { MQPROC__PAGE_READ_ONLY, MQPROC__PAGE_SIGN_IN, MQPROC__PAGE_SIGNED_IN, MQPROC__PAGE_READER };

typedef struct mqproc__page_opts {
  const char *title; /* e.g. "mqproc: ocrd-tesserocr-recognize (host:pid)" */
  int admin;         /* MQPROC__PAGE_*: buttons (retry, cancel, pause, resume) when signed in */
  int acts;          /* an admin token was given: signing in lets the page act */
  int hide;          /* hide a job's request and log ("sign in to see" them instead) */
  int metrics;       /* /metrics is served here: the nav links it (a dashboard has none) */
  int64_t now_ms;    /* the clock relative times are told by (0: the wall clock) */
} mqproc__page_opts_t;

/* overview: {"processors": [stats + "hour" (mqproc__ops_hour())], "workers": [...],
 * "failures": [...], "dead_letters": mqproc__ops_dead_letters_recent()'s or null} */
char *mqproc__page_overview(const json_t *overview, const mqproc__page_opts_t *o, size_t *len);
/* rows: a page of jobs; filters: the state / processor asked for (NULL: any). */
char *mqproc__page_jobs(const json_t *rows, const char *state, const char *processor,
                        const mqproc__page_opts_t *o, size_t *len);
/* job: mqproc__ops_job()'s object; log_tail: the end of its log, or NULL. With o->hide,
 * neither the request nor the log is shown. */
char *mqproc__page_job(const json_t *job, const char *log_tail, const mqproc__page_opts_t *o,
                       size_t *len);
/* The admin token's form (problem: why the last try failed, or NULL). */
char *mqproc__page_login(const char *problem, const mqproc__page_opts_t *o, size_t *len);
/* "/jobs/ID" with ID percent-encoded, malloc()ed. */
char *mqproc__page_job_href(const char *id);
/* An error page (e.g. no such job, the database away). */
char *mqproc__page_error(const char *what, const mqproc__page_opts_t *o, size_t *len);

#endif
