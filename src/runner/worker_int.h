/* The wire format between the worker runner (worker.c, in the server) and its
 * worker processes (worker_main.c), implemented in worker_proto.c.
 *
 * One try = one request and one reply on the worker's SOCK_SEQPACKET socket (a message
 * arrives whole or not at all, and EOF says the peer is gone):
 *
 *   server -> worker  mqproc__worker_req_t, with two fds (SCM_RIGHTS): a memfd holding
 *                     the payload "request_json\0[mets_path\0][mets_server_url\0]
 *                     [headers_json\0]worker_id\0[log_dir\0log_sub\0log_name\0]" (the
 *                     lengths are in the header; the METS part is absent when mets_len is
 *                     -1, the METS server when mets_server_len is -1, the headers when
 *                     headers_len is -1, the log's place when log_lens[0] is 0),
 *                     and the job log, open for appending: the job's log file, or (when
 *                     log_inline_max > 0) a memfd holding the try's header, to which the
 *                     output goes while it stays within log_inline_max bytes; beyond, the
 *                     worker makes the log file (log_dir/log_sub/log_name), moves the
 *                     memfd's bytes there and empties it
 *   worker -> server  mqproc__worker_reply_t
 *
 * Both ends are the same program (the worker is the server's own binary re-executed), so
 * the structs go as they are in memory.
 */
#ifndef MQPROC_RUNNER_WORKER_INT_H
#define MQPROC_RUNNER_WORKER_INT_H

#include <stddef.h>
#include <stdint.h>

#include "runner/runner.h"

/* The worker's end of its socket, in the worker process. */
#define MQPROC__WORKER_FD 3

typedef struct mqproc__worker_req {
  int32_t attempt;
  int32_t try_no;
  int32_t format;   /* mqproc__format_t of the original message */
  int32_t mets_len; /* -1: no METS */
  int64_t max_log_bytes;
  uint32_t request_len;
  uint32_t worker_id_len;
  int32_t headers_len;     /* -1: no headers */
  int32_t mets_server_len; /* -1: no METS server */
  int64_t log_inline_max;  /* > 0: the log fd is a memfd, kept while within this many bytes */
  uint32_t log_lens[3];    /* log_dir, log_sub, log_name: each one's length + 1; 0: none */
} mqproc__worker_req_t;

typedef struct mqproc__worker_reply {
  int32_t rc;       /* what the processing function returned */
  int32_t log_lost; /* the log file could not be made (error says why): the memfd is not
                       moved there again */
  int64_t duration_ms;
  char error[MQPROC_ERR_LEN]; /* mqproc_job_fail()'s text, or why the worker could not run
                                 the job; "" when neither */
} mqproc__worker_reply_t;

/* A request's payload, unpacked: views into the payload buffer. */
typedef struct mqproc__worker_job {
  const char *request_json;
  const char *mets_path;       /* NULL when the job has none */
  const char *mets_server_url; /* NULL when the job has none */
  const char *headers_json;    /* NULL when the message had none */
  const char *worker_id;
  const char *log_dir, *log_sub, *log_name; /* NULL when not sent */
} mqproc__worker_job_t;

/* Builds the header and the payload of spec's try; *payload is malloc()ed (the caller
 * frees it), *len its size. */
int mqproc__worker_pack(const mqproc__run_spec_t *spec, mqproc__worker_req_t *req, char **payload,
                        size_t *len, char *err);
/* Checks payload (len bytes) against req and points job into it; MQPROC_EINVAL when the
 * lengths, the NULs or the format do not match. */
int mqproc__worker_unpack(const mqproc__worker_req_t *req, const char *payload, size_t len,
                          mqproc__worker_job_t *job, char *err);

/* Sends req with memfd and log_fd (the caller keeps and closes its copies); 0, or -1 with
 * errno. */
int mqproc__worker_send_req(int sock, const mqproc__worker_req_t *req, int memfd, int log_fd);
/* Receives one request: 1 with fds[0] = the memfd and fds[1] = the job log (CLOEXEC, the
 * caller closes them), 0 at EOF, -1 with errno (EPROTO: not a well-formed request; any
 * fds that came with it are closed). */
int mqproc__worker_recv_req(int sock, mqproc__worker_req_t *req, int fds[2]);
/* Reads one reply without blocking: 1 with *rep (its error NUL-terminated), 0 when there
 * is none yet, -1 at EOF, on an error or for anything but a reply. */
int mqproc__worker_recv_reply(int sock, mqproc__worker_reply_t *rep);

#endif
