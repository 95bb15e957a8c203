/* OCR-D's processor command line, as OCR-D's processing worker runs a processor. */
#ifndef MQPROC_OCRD_CLI_H
#define MQPROC_OCRD_CLI_H

#include "codec/codec.h"

/* Builds base (the --exec words, NULL-terminated) followed by OCR-D's arguments for msg:
 *   --working-dir <dir of mets> --mets <mets> --log-level <level> [--page-id <page_id>]
 *   --input-file-grp A,B [--output-file-grp C,D] --parameter '<json>'
 * in that order, as OCR-D core's worker does (file groups joined with ','; parameters
 * as Python's json.dumps() writes them, see pyjson.h; "{}" when empty). *out is a
 * NULL-terminated malloc()ed array of malloc()ed strings (mqproc__argv_free()). */
int mqproc__ocrd_argv(char *const *base, const mqproc__msg_t *msg, const char *mets,
                      const char *log_level, char ***out, char *err);

/* Whether a command looks like an OCR-D processor (its program's basename starts with
 * "ocrd-"): the default of --ocrd-cli=auto. */
int mqproc__ocrd_is_processor(const char *program);

/* The METS path of a message: path_to_mets, or <workspace_root>/<workspace_id>/mets.xml
 * (workspace ids containing '/' or equal to "." or ".." are refused). *out malloc()ed. */
int mqproc__ocrd_mets_path(const mqproc__msg_t *msg, const char *workspace_root, char **out,
                           char *err);

#endif
