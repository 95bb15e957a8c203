/* Whether an OCR-D try that exited 0 left its output in the METS (issue 37: "no silent
 * success"). OCR-D's processors skip a page they fail on (OCRD_MISSING_OUTPUT=SKIP, core
 * 3's default), and a processor that writes mets.xml beside another one loses entries
 * while its files stay on disk: in both cases it exits 0. So after an OCR-D try's exit 0
 * the server asks the METS, or the METS server the try went through, which pages have a
 * file in each output group:
 *
 *   the pages the job names = the pages page_id selects (every page when it has none)
 *                             that have a file in every input group (what the processor
 *                             had to work on; OCR-D's zip_input_files)
 *   each output group must list a file for each of them
 *
 * and a try whose output misses pages fails, naming them, and is retried as usual.
 * --ocrd-check-output=false turns it off (a processor that legitimately skips pages).
 *
 * mqproc__ocrd_check_run blocks (a METS parse, or a few HTTP requests with a timeout):
 * it runs on a work thread; _new copies what it needs, so the thread shares nothing. */
#ifndef MQPROC_RUNNER_OCRD_CHECK_H
#define MQPROC_RUNNER_OCRD_CHECK_H

#include "codec/codec.h"

#define MQPROC__OCRD_CHECK_WHY 1024

typedef struct mqproc__ocrd_check {
  /* in (owned) */
  char *mets;            /* the METS file */
  char *mets_server_url; /* the METS server the try went through, or NULL: the file */
  char *page_id;         /* NULL: every page */
  char **inputs;         /* NULL-terminated */
  char **outputs;        /* NULL-terminated */
  /* out */
  int failed; /* 1: pages are missing, or the METS could not be asked (why says which) */
  char why[MQPROC__OCRD_CHECK_WHY];
} mqproc__ocrd_check_t;

/* A check of msg's output (its METS at mets, through mets_server_url when not NULL); NULL
 * when out of memory, or when msg names no output group (nothing to check). */
mqproc__ocrd_check_t *mqproc__ocrd_check_new(const mqproc__msg_t *msg, const char *mets,
                                             const char *mets_server_url);
/* Runs it (blocking): sets failed and why. */
void mqproc__ocrd_check_run(mqproc__ocrd_check_t *c);
void mqproc__ocrd_check_free(mqproc__ocrd_check_t *c);

#endif
