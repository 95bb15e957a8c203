/* What the METS server's files share: mets_server.c (its life: the lock, the journal, saves,
 * reload, stop) and mets_routes.c (OCR-D's routes and FastAPI's answers). */
#ifndef MQPROC_HTTP_METS_SERVER_INT_H
#define MQPROC_HTTP_METS_SERVER_INT_H

#include <jansson.h>
#include <stdint.h>

#include "codec/mets.h"
#include "http/http.h"
#include "http/mets_journal.h"
#include "http/mets_server.h"

/* An answer held until the journal's entries of this loop turn are durable. */
typedef struct pending {
  mqproc__http_req_t *req;
  char *body; /* JSON, taken */
  struct pending *next;
} pending_t;

struct mqproc__mets_server {
  mqproc__loop_t *loop;
  mqproc__http_t *http;
  mqproc__mets_t *mets;
  mqproc__mets_journal_t *journal;
  char *path;      /* the METS as given */
  char *dir;       /* its directory, resolved (GET /workspace_path) */
  char *given_dir; /* its directory as given, made absolute (for local_filename checks) */
  int lock;        /* the fd holding the workspace lock on the METS file */
  int dirty;       /* changes since the last save */
  int save_ms;
  uint64_t save_timer;
  int overwrite; /* OCRD_EXISTING_OUTPUT=OVERWRITE: every add_file forced, as OCR-D's */
  char *broken;  /* why the journal can take no more: changes refused (NULL: it can) */
  pending_t *pending, **pending_tail;
  mqproc__loop_hook_t hook;
  mqproc__mets_server_cfg_t cfg;
  int stopping;
  int64_t last_request; /* loop time of the last request (of the start before any) */
};

/* The HTTP handler (mets_routes.c). */
void mqproc__mets_server_handle(void *ud, mqproc__http_req_t *req);

/* A change made to the model: into the journal, its answer (body, JSON, taken) sent once
 * the journal is durable (mets_server.c). On a journal that fails, the answer is 500. */
void mqproc__mets_server_changed(mqproc__mets_server_t *s, mqproc__http_req_t *req,
                                 const json_t *entry, char *body);
/* Reloads the METS from disk, dropping what is unsaved (OCR-D's reload). */
int mqproc__mets_server_reload(mqproc__mets_server_t *s, char *err);
/* Saves now, whatever the state (PUT /, DELETE /). */
int mqproc__mets_server_save_now(mqproc__mets_server_t *s, char *err);
/* Applies one entry of the journal (or of a request): MQPROC_OK, or an error with err and
 * *why. replay: an entry that is there already is no error, a file's is forced. */
int mqproc__mets_server_apply(mqproc__mets_server_t *s, const json_t *entry, int replay,
                              int dedupe_agents, mqproc__mets_why_t *why, char *err);

#endif
