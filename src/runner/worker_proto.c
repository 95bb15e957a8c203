/* The wire format between the worker runner and its worker processes (described in
 * runner_worker_int.h): packing a try's request into a header and a payload, checking and
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

int mqproc__worker_pack(const mqproc__run_spec_t *spec, mqproc__worker_req_t *req, char **payload,
                        size_t *len, char *err) {
  const char *wid = spec->worker_id != NULL ? spec->worker_id : "";
  const char *log[3] = {spec->log_dir, spec->log_sub, spec->log_name};
  int with_log = spec->log_inline_max > 0 && log[0] != NULL && log[1] != NULL && log[2] != NULL;
  size_t rl = strlen(spec->request_json), wl = strlen(wid), ll[3] = {0, 0, 0};
  size_t ml = spec->mets_path != NULL ? strlen(spec->mets_path) : 0;
  size_t hl = spec->headers_json != NULL ? strlen(spec->headers_json) : 0;
  size_t total, tail = 0;
  char *p;
  for (int i = 0; with_log && i < 3; i++)
    tail += (ll[i] = strlen(log[i])) + 1;
  total = rl + 1 + (spec->mets_path != NULL ? ml + 1 : 0) +
          (spec->headers_json != NULL ? hl + 1 : 0) + wl + 1 + tail;
  if (rl >= INT32_MAX || ml >= INT32_MAX || hl >= INT32_MAX || wl >= INT32_MAX || tail >= INT32_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "the job is too large for a worker process");
  if ((p = mqproc__malloc(total)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  memcpy(p, spec->request_json, rl + 1);
  if (spec->mets_path != NULL)
    memcpy(p + rl + 1, spec->mets_path, ml + 1);
  if (spec->headers_json != NULL)
    memcpy(p + total - tail - wl - 1 - hl - 1, spec->headers_json, hl + 1);
  memcpy(p + total - tail - wl - 1, wid, wl + 1);
  for (size_t i = 0, off = total - tail; with_log && i < 3; off += ll[i] + 1, i++)
    memcpy(p + off, log[i], ll[i] + 1);
  *req = (mqproc__worker_req_t){.attempt = spec->attempt,
                                .try_no = spec->try_no,
                                .format = (int32_t)spec->msg->format,
                                .mets_len = spec->mets_path != NULL ? (int32_t)ml : -1,
                                .max_log_bytes = spec->max_log_bytes,
                                .request_len = (uint32_t)rl,
                                .worker_id_len = (uint32_t)wl,
                                .headers_len = spec->headers_json != NULL ? (int32_t)hl : -1,
                                .log_inline_max = with_log ? spec->log_inline_max : 0,
                                .log_lens = {with_log ? (uint32_t)ll[0] + 1 : 0,
                                             with_log ? (uint32_t)ll[1] + 1 : 0,
                                             with_log ? (uint32_t)ll[2] + 1 : 0}};
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
  if (req->mets_len < -1 || req->headers_len < -1 ||
      (req->log_lens[0] > 0) != (req->log_lens[1] > 0 && req->log_lens[2] > 0) ||
      !take(payload, len, &off, req->request_len, &job->request_json) ||
      (req->mets_len >= 0 && !take(payload, len, &off, (size_t)req->mets_len, &job->mets_path)) ||
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
