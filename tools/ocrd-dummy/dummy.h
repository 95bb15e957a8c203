/* ocrd-dummy: the one entry point (dummy_run) shared by the OCR-D CLI and the server mode.
 *
 * dummy_run() does what OCR-D/core's ocrd-dummy does for one workspace: for every selected
 * page of the input fileGrp it writes a PAGE-XML file (and with copy_files also the image)
 * into the output fileGrp, then adds the files, their fptrs and an agent to the METS, which
 * it replaces atomically. Nothing is written to the METS unless every output file was.
 * With a METS server (--mets-server-url) the METS is read from and changed through the
 * server instead, as core's processors do: mets.xml is neither read nor written.
 *
 * Modules: cli.c (argv), worker.c (mqproc jobs), run.c (this entry point), plan.c (what to
 * write), mets.c / pagexml.c (the XML), metsserver.c (OCR-D's METS server, for
 * --mets-server-url), pages.c (page_id), params.c (parameters, tool JSON), imgsize.c
 * (image headers), fsio.c (atomic files), xmlutil.c (libxml2 helpers).
 */
#ifndef OCRD_DUMMY_DUMMY_H
#define OCRD_DUMMY_DUMMY_H

#include <stdbool.h>
#include <stddef.h>

#define DUMMY_NAME "ocrd-dummy"
#define DUMMY_VERSION "1.0.0" /* the version in core's ocrd-tool.json */
#define DUMMY_STEP "preprocessing/optimization"
#define DUMMY_ERR_LEN 1024 /* size of every err buffer below */

typedef enum dummy_log_level {
  DUMMY_LOG_ERROR = 0,
  DUMMY_LOG_WARN = 1,
  DUMMY_LOG_INFO = 2,
  DUMMY_LOG_DEBUG = 3,
} dummy_log_level_t;

/* Receives one log line (no trailing newline). */
typedef void (*dummy_log_cb)(void *ud, dummy_log_level_t level, const char *msg);

/* What to process. Strings are borrowed for the duration of dummy_run(). */
typedef struct dummy_opts {
  const char *mets;            /* --mets; NULL: <working_dir>/mets.xml */
  const char *working_dir;     /* --working-dir; NULL: the METS's directory */
  const char *input_grp;       /* --input-file-grp: exactly one fileGrp */
  const char *output_grp;      /* --output-file-grp: exactly one fileGrp */
  const char *page_id;         /* --page-id; NULL or "": all pages */
  const char *parameter_json;  /* a JSON object; NULL: {} */
  bool overwrite;              /* replace existing output instead of failing */
  const char *mets_server_url; /* --mets-server-url: the METS is read and changed through
                                  this METS server (metsserver.h), mets.xml is not touched;
                                  NULL: mets.xml is read and replaced */
  dummy_log_cb log;            /* may be NULL */
  void *log_ud;
} dummy_opts_t;

/* Runs ocrd-dummy on one workspace. Returns 0, or -1 with err (DUMMY_ERR_LEN bytes) set;
 * on -1 the METS is unchanged (output files already written may remain; through a METS
 * server, the files added before the failing request remain added: it has no undo).
 * Thread-safe for different workspaces; runs on the same METS file are serialized by a
 * lock on it, runs through a METS server by the server. */
int dummy_run(const dummy_opts_t *opts, char *err);

/* Sends a formatted line to opts->log (nothing when it is NULL). */
void dummy_logf(const dummy_opts_t *opts, dummy_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
