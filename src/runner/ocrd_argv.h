/* OCR-D's processor command line, as OCR-D's processing worker runs a processor. */
#ifndef MQPROC_OCRD_CLI_H
#define MQPROC_OCRD_CLI_H

#include "base/config.h"
#include "codec/codec.h"

/* Builds base (the --exec words, NULL-terminated) followed by OCR-D's arguments for msg:
 *   --working-dir <dir of mets> --mets <mets> --log-level <level> [--page-id <page_id>]
 *   --input-file-grp A,B [--output-file-grp C,D] --parameter '<json>'
 *   [--mets-server-url <mets_server_url>]
 * in that order, as OCR-D core's worker does (run_cli: file groups joined with ',';
 * parameters as Python's json.dumps() writes them, see pyjson.h; "{}" when empty; the
 * METS server last, when mets_server_url is not NULL). *out is a NULL-terminated
 * malloc()ed array of malloc()ed strings (mqproc__argv_free()). */
int mqproc__ocrd_argv(char *const *base, const mqproc__msg_t *msg, const char *mets,
                      const char *log_level, const char *mets_server_url, char ***out, char *err);

/* The METS server OCR-D's worker would pass a processor for msg (its METS at mets), or
 * NULL in *out when there is none.
 *
 * OCR-D's worker reads the workspace's mets_server_url from MongoDB, where OCR-D's
 * Processing Server writes it before it publishes a job: for every job it publishes, it
 * first starts a METS server for the METS's directory. mqproc reads no MongoDB; what it
 * has instead is the message: only the Processing Server sets internal_callback_url (its
 * /result_callback; a client cannot). So a message with internal_callback_url gets, by
 * mode: SOCKET the Processing Server's socket for the workspace,
 *   <sockets_dir>/<safe_filename(dirname(mets))>.sock (ocrd_network/utils.py get_uds_path;
 *   dirname as Python's Path.parent, safe_filename: every run of characters other than
 *   [A-Za-z0-9_] and non-ASCII ones, Python's \w roughly, becomes one '_');
 * TCP its multiplexing endpoint, internal_callback_url with /result_callback replaced by
 *   /tcp_mets (MQPROC_EINVAL when it does not end so: then the endpoint is unknown);
 * OFF none. A message without internal_callback_url, or without a METS, gets none.
 * *out malloc()ed. */
/* The header of a message whose sender names the METS server that holds its workspace
 * (mqproc processing-api's and `mqproc submit --workflow`'s jobs): the server's Unix
 * socket (an absolute path) or http(s):// URL, passed to the processor as
 * --mets-server-url; "none": there is none although internal_callback_url is set (the
 * processor writes mets.xml itself, under the workspace's lock). A message without it gets
 * what mqproc__ocrd_mets_server_url() derives. */
#define MQPROC__HEADER_METS_SERVER "x-mqproc-mets-server"
#define MQPROC__METS_SERVER_URL_MAX 1024

/* Whether v is a value that header may have: "none", an absolute path or an http(s):// URL
 * of at most MQPROC__METS_SERVER_URL_MAX bytes, without control characters. */
int mqproc__ocrd_mets_server_named(const char *v);

int mqproc__ocrd_mets_server_url(const mqproc__msg_t *msg, const char *mets,
                                 mqproc__ocrd_mets_server_t mode, const char *sockets_dir,
                                 char **out, char *err);

/* The socket name OCR-D gives the METS server of the workspace whose METS is mets (see
 * above): "<safe_filename(Path(mets).parent)>.sock", malloc()ed; NULL when out of memory. */
char *mqproc__ocrd_socket_name(const char *mets);

/* Whether a command looks like an OCR-D processor (its program's basename starts with
 * "ocrd-"): the default of --ocrd-cli=auto. */
int mqproc__ocrd_is_processor(const char *program);

/* The METS path of a message: path_to_mets, or <workspace_root>/<workspace_id>/mets.xml
 * (workspace ids containing '/' or equal to "." or ".." are refused). *out malloc()ed. */
int mqproc__ocrd_mets_path(const mqproc__msg_t *msg, const char *workspace_root, char **out,
                           char *err);

#endif
