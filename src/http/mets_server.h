/* mqproc's METS server: OCR-D core 3.12.1's METS server protocol (ocrd/mets_server.py,
 * OcrdMetsServer.startup()) over one workspace's mets.xml, on a Unix socket or TCP, inside
 * an mqproc loop, so OCR-D's own processors (ClientSideOcrdMets, --mets-server-url) read and
 * change the METS through it unchanged. The document is codec/mets.h's model.
 *
 * Routes, answers and status codes as FastAPI gives them there: PUT / (save), DELETE / (save,
 * answer, then stop), POST /reload, GET /unique_identifier, /workspace_path, /physical_pages,
 * /file_groups, GET and POST /agent, GET /file (find_files), POST /file (add_file).
 *
 * Beyond OCR-D's:
 * - every change is in the journal (mets_journal.h), durable, before its 200 goes out (one
 *   fdatasync for all the changes of a loop turn); start replays it;
 * - it holds the workspace lock (base/wslock.h) on mets.xml from start to free, across its
 *   own saves; another holder makes start fail (MQPROC_ESTATE);
 * - it saves every save_interval_ms while there are unsaved changes, on PUT /, DELETE /,
 *   and when its owner calls mqproc__mets_server_save() (on a signal);
 * - a local_filename outside the workspace (absolute elsewhere, climbing out with "..", or
 *   through a link on disk that leads out) is refused (400); bodies, forms and connections
 *   are bounded.
 *
 *   mqproc__mets_server_start(&s, loop, &cfg, err)   lock, load, replay, listen
 *   ... the loop runs; on_stop is called once DELETE /'s answer is out
 *   mqproc__mets_server_save(s, err)                 save now if anything is unsaved
 *   mqproc__mets_server_free(s)                      stop listening (socket file removed),
 *                                                    release the lock; does not save (the
 *                                                    journal stays when anything is unsaved) */
#ifndef MQPROC_HTTP_METS_SERVER_H
#define MQPROC_HTTP_METS_SERVER_H

#include <stdint.h>

#include "loop/loop.h"

#define MQPROC__METS_SERVER_SAVE_MS 5000   /* the default save interval */
#define MQPROC__METS_SERVER_BODY_MAX 65536 /* the largest request body (POST /agent, /file) */

typedef struct mqproc__mets_server mqproc__mets_server_t;

typedef struct mqproc__mets_server_cfg {
  const char *mets;     /* the workspace's METS file */
  const char *listen;   /* "unix:PATH", or "HOST:PORT" (port 0: any) */
  int save_interval_ms; /* <= 0: MQPROC__METS_SERVER_SAVE_MS */
  /* called from the loop once DELETE / was answered (or the client went first): the owner
   * stops the loop and frees the server */
  void (*on_stop)(void *ud);
  void *ud;
} mqproc__mets_server_cfg_t;

/* Takes the workspace lock on cfg->mets without waiting, loads it, replays the journal
 * (saving when it held changes), listens. MQPROC_OK with *out; MQPROC_ESTATE when another
 * holds the lock (another METS server of the workspace, or a writer of it); another error
 * with err (nothing is then held or left listening). cfg is copied. */
int mqproc__mets_server_start(mqproc__mets_server_t **out, mqproc__loop_t *loop,
                              const mqproc__mets_server_cfg_t *cfg, char *err);
/* The TCP port it listens on (0 on a Unix socket). */
int mqproc__mets_server_port(const mqproc__mets_server_t *s);
/* The loop time (ms) of the last request it was sent (of its start before the first). */
int64_t mqproc__mets_server_last_request(const mqproc__mets_server_t *s);
/* The workspace directory it serves (what GET /workspace_path answers). */
const char *mqproc__mets_server_workspace(const mqproc__mets_server_t *s);
/* Saves now when there are unsaved changes: MQPROC_OK, or an error with err (the journal
 * still holds them). */
int mqproc__mets_server_save(mqproc__mets_server_t *s, char *err);
/* Stops listening (answers what waits with 503, removes its socket file), closes the
 * journal (removed when nothing is unsaved), releases the lock. Does not save: call
 * mqproc__mets_server_save() first. NULL is ignored. */
void mqproc__mets_server_free(mqproc__mets_server_t *s);

#endif
