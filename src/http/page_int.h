/* What the status page's files share (page.c: the frame, text and tables; page_job.c:
 * one job; page_chart.c: the hour's charts). Each writes into a memory stream; every text
 * that came from a message, a processor or the database goes through mqproc__page_esc()
 * (HTML) and, inside a link, mqproc__page_url() first. */
#ifndef MQPROC_HTTP_PAGE_INT_H
#define MQPROC_HTTP_PAGE_INT_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "http/page.h"

/* ---- text --------------------------------------------------------------------------- */

/* s HTML-escaped (NULL writes nothing). */
void mqproc__page_esc(FILE *f, const char *s);
/* s percent-encoded for a link (then HTML-safe as it is). */
void mqproc__page_url(FILE *f, const char *s);
/* o[k] when it is a string, else NULL (borrowed). */
const char *mqproc__page_str(const json_t *o, const char *k);
/* A value as text: strings as they are, null as "-", the rest as compact JSON. */
void mqproc__page_val(FILE *f, const json_t *v);
void mqproc__page_badge(FILE *f, const char *state);
void mqproc__page_job_link(FILE *f, const char *id);
/* A button that POSTs to PREFIX ARG /ACTION (the admin token's actions). */
void mqproc__page_button(FILE *f, const char *prefix, const char *arg, const char *action,
                         const char *label);

/* ---- times -------------------------------------------------------------------------- */

/* The time of "2026-11-23T14:51:14.882Z" (SQLite's and to_char's form) or
 * "2026-11-23T15:51:14.882123+01:00" (to_jsonb's) in ms since the epoch; 0 when it is
 * neither. */
int mqproc__page_parse_time(const char *iso, int64_t *ms);
/* A time as a person reads it, relative to now_ms ("3 min ago", "in 20 s"), the exact
 * time in UTC on hover: <time datetime=ISO title="2026-11-23 14:51:14.882 UTC">. NULL
 * writes "-", a text that is no time is written as it is (escaped). */
void mqproc__page_when(FILE *f, const char *iso, int64_t now_ms);
/* A duration: "850 ms", "4.2 s", "3 min 5 s", "2 h 10 min". */
void mqproc__page_duration(FILE *f, double ms);

/* ---- frame -------------------------------------------------------------------------- */

/* A page's start: head, the header with its nav, <main>. refresh: the overview's and
 * the list's refresh of <main>. NULL without memory. */
FILE *mqproc__page_begin(char **buf, size_t *len, const mqproc__page_opts_t *o, int refresh);
/* Its end: the stream closed, the document (*buf) returned, NULL without memory. */
char *mqproc__page_end(FILE *f, char **buf, int refresh);
/* The page's clock: o->now_ms, or the wall clock when that is 0. */
int64_t mqproc__page_now(const mqproc__page_opts_t *o);

/* ---- tables of rows ----------------------------------------------------------------- */

/* C_OF: "key / key2"; C_JOB_IF: a job id, linked when the row's key2 is true (else the
 * job table has no such job); C_WHEN: a relative time; C_SIZE: bytes; C_WRAP: text that
 * may wrap (cells do not: a table too wide scrolls sideways in its box). */
typedef enum {
  C_TEXT,
  C_NUM,
  C_STATE,
  C_JOB,
  C_JOB_IF,
  C_JOBS,
  C_ERR,
  C_OF,
  C_WHEN,
  C_SIZE,
  C_WRAP
} col_kind_t;

/* A column: its heading, the row's key, how it is written. */
typedef struct mqproc__page_col {
  const char *title, *key;
  col_kind_t kind;
  const char *key2;
} mqproc__page_col_t;

/* <div class="scroll"><table id=ID> with a heading row and one row (class CLS) per element
 * of rows; empty: the one row's text when there are none (HTML, not escaped), or NULL. */
void mqproc__page_table(FILE *f, const char *id, const char *cls, const mqproc__page_col_t *cols,
                        const json_t *rows, const char *empty, int64_t now_ms);

/* ---- the hour's charts (page_chart.c) ------------------------------------------------ */

/* One processor's last hour ({"finished", "failed", "wait_ms"}: 60 values each, the
 * oldest minute first): three charts with axes and scales. */
void mqproc__page_hour(FILE *f, const json_t *hour);

#endif
