/* ocrd-dummy's client of OCR-D's METS server (ocrd/mets_server.py): with --mets-server-url
 * the METS is read from and changed through the server that holds it, never in mets.xml.
 *
 * OCR-D's Processing Server starts a METS server per workspace while it has jobs for it
 * and, when the last one has called back, makes it write its in-memory copy over
 * mets.xml: an edit of mets.xml made meanwhile is lost. Its processors talk HTTP to it:
 *
 *   GET  /workspace_path   the workspace directory (text)      (a liveness check, too)
 *   GET  /physical_pages   {"physical_pages": [ID, ...]}
 *   GET  /file             {"files": [{file_grp, file_id, mimetype, page_id, url,
 *                           local_filename}, ...]} (every file; query filters unused)
 *   POST /file             form file_grp, file_id, page_id, mimetype, local_filename[, force]
 *   POST /agent            JSON {name, type, role, otherrole, othertype, notes: [[{option:
 *                           O}, text], ...]}
 *   PUT  /                 write the copy to mets.xml (what a processor's save_mets() does)
 *
 * over a Unix socket (a URL that is a path) or TCP (http://HOST:PORT). The Processing
 * Server's own /tcp_mets endpoint (ps_config.yml use_tcp_mets) multiplexes every
 * workspace's socket: each request is then a POST of {workspace_path, method_type,
 * response_type, request_url, request_data} to it, answered with the route's JSON, text
 * as {"text": …}, or a failure as {"error": …} (ocrd_network/tcp_to_uds_mets_proxy.py).
 */
#ifndef OCRD_DUMMY_METSSERVER_H
#define OCRD_DUMMY_METSSERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "mets.h"

typedef struct dummy_msrv dummy_msrv_t;

/* A client of the METS server at url (an http:// or https:// URL, multiplexed when its
 * path ends in /tcp_mets, else the path of a Unix socket) for the workspace ws_dir (the
 * multiplexer's key). Nothing is sent yet. Returns 0 or -1 with err set. */
int dummy_msrv_open(dummy_msrv_t **out, const char *url, const char *ws_dir, char *err);
void dummy_msrv_close(dummy_msrv_t *s);

/* GET /workspace_path: the directory the server's METS is in; *out malloc()ed. Fails with
 * "cannot reach the METS server …" when nothing answers there. */
int dummy_msrv_workspace_path(dummy_msrv_t *s, char **out, char *err);

/* GET /physical_pages and GET /file, made into a METS document that holds what the
 * server's copy does for ocrd-dummy's plan: the pages in order, each file in its fileGrp
 * (FLocat OTHER/FILE with its local_filename, else URL with its url) and the fptr of its
 * page. *out: dummy_mets_free(). */
int dummy_msrv_load(dummy_msrv_t *s, dummy_mets_t **out, char *err);

/* One file to add (POST /file); strings borrowed. */
typedef struct dummy_msrv_file {
  const char *file_grp;
  const char *file_id;
  const char *page_id;
  const char *mimetype;
  const char *local_filename; /* relative to the workspace */
  bool force;                 /* replace a file of this ID, page and MIMETYPE (--overwrite) */
} dummy_msrv_file_t;

int dummy_msrv_add_file(dummy_msrv_t *s, const dummy_msrv_file_t *f, char *err);

/* POST /agent: TYPE OTHER, OTHERTYPE SOFTWARE, ROLE OTHER, OTHERROLE role, the notes. */
int dummy_msrv_add_agent(dummy_msrv_t *s, const char *name, const char *role,
                         const dummy_note_t *notes, size_t n_notes, char *err);

/* PUT /: the server writes its copy to mets.xml (as core's processors do at their end). */
int dummy_msrv_save(dummy_msrv_t *s, char *err);

#endif
