/* The wire format between the worker runner and its worker processes (described in
 * worker_int.h): packing a try's request into a header and a payload, checking and
 * unpacking it on the other side, one SEQPACKET message carrying the header and two fds,
 * and the reply. Pure except for the socket calls; tests/unit/test_runner.c covers it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "codec/codec.h"
#include "runner/int.h"
#include "runner/worker_int.h"
#include "base/util.h"

/* The length of an optional part as the header gives it: -1 when it is absent. */
static int32_t opt_len(const char *s) {
  return s != NULL ? (int32_t)strlen(s) : -1;
}

/* Appends s and its NUL at p + *at when s is not NULL. */
static void put(char *p, size_t *at, const char *s) {
  size_t n;
  if (s == NULL)
    return;
  n = strlen(s) + 1;
  memcpy(p + *at, s, n);
  *at += n;
}

int mqproc__worker_pack(const mqproc__run_spec_t *spec, mqproc__worker_req_t *req, char **payload,
                        size_t *len, char *err) {
  const char *wid = spec->worker_id != NULL ? spec->worker_id : "";
  const char *log[3] = {spec->log_dir, spec->log_sub, spec->log_name};
  int with_log = spec->log_inline_max > 0 && log[0] != NULL && log[1] != NULL && log[2] != NULL;
  const char *parts[] = {spec->request_json,
                         spec->mets_path,
                         spec->mets_server_url,
                         spec->headers_json,
                         wid,
                         with_log ? log[0] : NULL,
                         with_log ? log[1] : NULL,
                         with_log ? log[2] : NULL};
  size_t total = 0, at = 0;
  char *p;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(parts); i++) {
    if (parts[i] != NULL && strlen(parts[i]) >= INT32_MAX)
      return mqproc__err(err, MQPROC_EINVAL, "the job is too large for a worker process");
    total += parts[i] != NULL ? strlen(parts[i]) + 1 : 0;
  }
  if ((p = mqproc__malloc(total)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(parts); i++)
    put(p, &at, parts[i]);
  *req = (mqproc__worker_req_t){.attempt = spec->attempt,
                                .try_no = spec->try_no,
                                .format = (int32_t)spec->msg->format,
                                .mets_len = opt_len(spec->mets_path),
                                .max_log_bytes = spec->max_log_bytes,
                                .request_len = (uint32_t)strlen(spec->request_json),
                                .worker_id_len = (uint32_t)strlen(wid),
                                .headers_len = opt_len(spec->headers_json),
                                .mets_server_len = opt_len(spec->mets_server_url),
                                .log_inline_max = with_log ? spec->log_inline_max : 0,
                                .log_lens = {with_log ? (uint32_t)strlen(log[0]) + 1 : 0,
                                             with_log ? (uint32_t)strlen(log[1]) + 1 : 0,
                                             with_log ? (uint32_t)strlen(log[2]) + 1 : 0}};
  *payload = p;
  *len = total;
  return MQPROC_OK;
}

/* Takes the next string of n bytes and its NUL from p[*off..len); 0 when it is not there
 * exactly (too short, a NUL inside, no NUL after). */
static int take(const char *p, size_t len, size_t *off, size_t n, const char **out) {
  if (n >= len - *off || memchr(p + *off, '\0', n) != NULL || p[*off + n] != '\0')
    return 0;
  *out = p + *off;
  *off += n + 1;
  return 1;
}

int mqproc__worker_unpack(const mqproc__worker_req_t *req, const char *payload, size_t len,
                          mqproc__worker_job_t *job, char *err) {
  size_t off = 0;
  memset(job, 0, sizeof(*job));
  if (req->format != MQPROC__FMT_JSON && req->format != MQPROC__FMT_YAML)
    return mqproc__err(err, MQPROC_EINVAL, "malformed job: unknown format %d", (int)req->format);
  if (req->mets_len < -1 || req->headers_len < -1 || req->mets_server_len < -1 ||
      (req->log_lens[0] > 0) != (req->log_lens[1] > 0 && req->log_lens[2] > 0) ||
      !take(payload, len, &off, req->request_len, &job->request_json) ||
      (req->mets_len >= 0 && !take(payload, len, &off, (size_t)req->mets_len, &job->mets_path)) ||
      (req->mets_server_len >= 0 &&
       !take(payload, len, &off, (size_t)req->mets_server_len, &job->mets_server_url)) ||
      (req->headers_len >= 0 &&
       !take(payload, len, &off, (size_t)req->headers_len, &job->headers_json)) ||
      !take(payload, len, &off, req->worker_id_len, &job->worker_id) ||
      (req->log_lens[0] > 0 &&
       (!take(payload, len, &off, (size_t)req->log_lens[0] - 1, &job->log_dir) ||
        !take(payload, len, &off, (size_t)req->log_lens[1] - 1, &job->log_sub) ||
        !take(payload, len, &off, (size_t)req->log_lens[2] - 1, &job->log_name))) ||
      off != len) {
    memset(job, 0, sizeof(*job));
    return mqproc__err(err, MQPROC_EINVAL, "malformed job: %zu bytes do not match the header", len);
  }
  return MQPROC_OK;
}

int mqproc__worker_send_req(int sock, const mqproc__worker_req_t *req, int memfd, int log_fd) {
  int fds[2] = {memfd, log_fd};
  return mqproc__send_with_fds(sock, req, sizeof(*req), fds, 2);
}

int mqproc__worker_recv_req(int sock, mqproc__worker_req_t *req, int fds[2]) {
  int got, rc = mqproc__recv_with_fds(sock, req, sizeof(*req), fds, 2, &got);
  if (rc == 1 && got != 2) {
    while (got > 0)
      close(fds[--got]);
    errno = EPROTO;
    rc = -1;
  }
  if (rc != 1)
    fds[0] = fds[1] = -1;
  return rc;
}

int mqproc__worker_recv_reply(int sock, mqproc__worker_reply_t *rep) {
  ssize_t n;
  do
    n = recv(sock, rep, sizeof(*rep), MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return 0;
  if (n != (ssize_t)sizeof(*rep))
    return -1;
  rep->error[sizeof(rep->error) - 1] = '\0';
  return 1;
}
