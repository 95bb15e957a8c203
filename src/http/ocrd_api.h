/* OCR-D's Processing Server API on mqproc's HTTP server (`mqproc processing-api`, the
 * routes of OCR-D core 3.12.1's processing_server.py; docs/ocrd.md):
 *
 *   GET  /                               the home page's JSON
 *   GET  /processor                      the processors that can take jobs
 *   GET  /processor/info/{p}             p's ocrd-tool description
 *   POST /processor/run/{p}              a job (PYJobInput JSON) -> PYJobOutput
 *   GET  /processor/job/{id}             PYJobOutput
 *   GET  /processor/log/{id}             the job's log (text)
 *   POST /result_callback                a worker's {job_id, state, ...}
 *   POST /workflow                       a script (multipart field "workflow") -> 201
 *   GET  /workflow/{id}, PUT /workflow/{id}
 *   POST /workflow/run?mets_path=&page_id=&page_wise=&workflow_id=&workflow_callback_url=
 *   GET  /workflow/job-simple/{id}, /workflow/job/{id}
 *
 * Every answer that reads or writes the store or the queue is made on a worker thread of
 * its own (one at a time, blocking clients of ops/ocrd.h), never on the loop; at most
 * MQPROC__HTTP_READS_MAX wait for it (503 beyond). A sweep runs there every sweep_ms:
 * the release pass of ops/ocrd.h over every workspace with waiting jobs, so a lost
 * callback or a restart strands nothing. With an admin token, the routes that submit or
 * store (POST /processor/run, POST and PUT /workflow, POST /workflow/run) need
 * "Authorization: Bearer TOKEN" (401, and the back-off of http/auth.h); the reading routes
 * and the workers' /result_callback do not. Errors are {"detail": "..."}, as OCR-D's.
 * Workflow callbacks are POSTed on a thread of their own, one at a time, never to the
 * API's own address, at least once (ocrd_api.c). */
#ifndef MQPROC_HTTP_OCRD_API_H
#define MQPROC_HTTP_OCRD_API_H

#include <jansson.h>
#include <sys/socket.h>

#include "broker/broker.h"
#include "net/callback.h"
#include "http/http.h"
#include "loop/loop.h"
#include "ops/ocrd.h"

typedef struct mqproc__api mqproc__api_t;

typedef struct mqproc__api_cfg {
  const char *database;        /* the job store URL */
  const char *queue;           /* the queue URL (AMQP or dir://) */
  const char *exchange;        /* NULL: ocrd-network-default */
  const char *ws_root;         /* --workspace-root, NULL: workspace_id is unknown */
  const char *result_url;      /* the internal callback URL put in every job (NULL: none) */
  const char *admin_token;     /* FILE: its token guards the submitting routes; NULL: open */
  const char *read_token;      /* FILE: its token (or the admin's) guards every read; NULL:
                                  the reads are open, but for a job's log and its path while
                                  an admin token is set */
  json_t *tools;               /* --ocrd-tool's {name: tool} (borrowed; may be NULL) */
  mqproc__tls_t tls;           /* for amqps:// (its strings borrowed) */
  int sweep_ms;                /* the release sweep's interval */
  mqproc__callback_opts_t cb;  /* the workflow callbacks (its lists borrowed) */
  mqproc__mets_servers_t mets; /* the workspaces' METS servers (its strings borrowed) */
  const struct sockaddr_storage *self; /* NULL, or the API's own address (copied): a
                                          workflow callback to it is refused */
} mqproc__api_cfg_t;

int mqproc__api_new(mqproc__api_t **out, mqproc__loop_t *loop, const mqproc__api_cfg_t *cfg,
                    char *err);
/* Answers req when its path is the API's (1), else 0. */
int mqproc__api_handle(mqproc__api_t *api, mqproc__http_req_t *req);
/* Whether the store answers (a ping on the worker thread); cb on the loop: NULL or why. */
void mqproc__api_ping(mqproc__api_t *api, void (*cb)(void *ud, const char *problem), void *ud);
/* Before the HTTP server stops: work still queued is dropped. NULL is ignored. */
void mqproc__api_stop(mqproc__api_t *api);
/* After the loop was freed (its worker joined). NULL is ignored. */
void mqproc__api_free(mqproc__api_t *api);

#endif
