/* OCR-D's checks of a decoded message, a part of the delivery's DECODE step (delivery.c)
 * kept apart from the generic ones: an OCR-D processor takes only OCR-D's jobs; a job's
 * METS is its path_to_mets or its workspace_id's under --workspace-root; it goes through
 * the METS server its sender names (mqproc processing-api and submit --workflow), else
 * the one OCR-D's Processing Server started for it (runner/ocrd_argv.h). */
#include "delivery/int.h"

#include <stdio.h>
#include <string.h>

#include "runner/ocrd_argv.h"
#include "base/util.h"

/* The METS server the message's sender holds its workspace in (MQPROC__HEADER_METS_SERVER,
 * ocrd_argv.h): 0 when the header is absent; 1 with *url NULL for "none", else a copy of
 * the URL or socket path; -1 when the value is neither (err says why). */
static int named_mets_server(const char *headers_json, char **url, char *err) {
  json_t *h = headers_json != NULL ? json_loads(headers_json, 0, NULL) : NULL;
  json_t *jv = json_object_get(h, MQPROC__HEADER_METS_SERVER);
  const char *v = json_string_value(jv);
  int rc = 1;
  *url = NULL;
  if (jv == NULL)
    rc = 0;
  else if (v == NULL || !mqproc__ocrd_mets_server_named(v))
    rc = mqproc__err(err, -1,
                     "header %s is neither \"none\", a socket's absolute path nor an http(s):// "
                     "URL (at most %d bytes)",
                     MQPROC__HEADER_METS_SERVER, MQPROC__METS_SERVER_URL_MAX);
  else if (strcmp(v, "none") != 0 && (*url = mqproc__strdup(v)) == NULL)
    rc = -2;
  json_decref(h);
  return rc;
}

int mqproc__delivery_ocrd_checks(mqproc__delivery_t *d) {
  char err[MQPROC_ERR_LEN];
  int rc;
  if (!d->msg->ocrd && d->host->ocrd_processor) {
    mqproc__delivery_to_dead_letter(
        d, S_ACK,
        "invalid message: '%.100s' is an OCR-D processor: its jobs name path_to_mets (or "
        "workspace_id) and input_file_grps (and job_id, created_time)",
        d->host->processor);
    return 1;
  }
  if (d->msg->ocrd && (d->msg->path_to_mets != NULL || cfg(d)->workspace_root != NULL) &&
      mqproc__ocrd_mets_path(d->msg, cfg(d)->workspace_root, &d->mets_path, err) != MQPROC_OK) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "invalid message: %s", err);
    return 1;
  }
  if (d->mets_path == NULL && d->host->needs_mets) {
    mqproc__delivery_to_dead_letter(
        d, S_ACK,
        "invalid message: workspace_id '%.200s' given, but this server has no "
        "--workspace-root to find its METS",
        d->msg->workspace_id);
    return 1;
  }
  rc = named_mets_server(d->headers_json, &d->mets_server_url, err);
  if (rc == -2)
    return mqproc__delivery_wait_timer(d, S_DEFER, 1000); /* out of memory: give it back */
  if (rc == -1) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "invalid message: %s", err);
    return 1;
  }
  rc = rc == 1 ? MQPROC_OK
               : mqproc__ocrd_mets_server_url(d->msg, d->mets_path, cfg(d)->ocrd_mets_server,
                                              cfg(d)->ocrd_sockets_dir, &d->mets_server_url, err);
  if (rc == MQPROC_EINVAL) {
    mqproc__delivery_to_dead_letter(d, S_ACK, "invalid message: %s", err);
    return 1;
  }
  if (rc != MQPROC_OK)
    return mqproc__delivery_wait_timer(d, S_DEFER, 1000); /* out of memory: give it back */
  return 0;
}
