/* The worker process of --isolation=process: `<program> __mqproc-worker`, started by
 * worker.c (which says why and how) with its socket as fd 3. It runs one try at a
 * time for as long as the server keeps the socket open: receive a request
 * (worker_int.h), build the same mqproc_job_t the thread runner would (the request
 * is parsed and validated again here: the server's parsed message cannot cross a process
 * boundary), call the processing function, reply with its return value, duration and
 * error text. EOF on the socket means the server is done with this worker: it exits 0.
 *
 * --max-log-size bounds what mqproc_job_log writes in one try (job.c drops the rest);
 * the files the function writes are not limited. With --log-inline-max the log fd is a
 * memfd the server reads at the try's end: the output goes there while it fits, and past
 * that into the job's log file, which this process makes (job.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "codec/codec.h"
#include "runner/job.h"
#include "base/log.h"
#include "runner/int.h"
#include "runner/worker_int.h"
#include "base/util.h"

/* The message of the payload, validated as the server did (the processor name aside: the
 * server already checked it against its queue). */
static int decode(const mqproc__worker_req_t *req, const char *payload, size_t len,
                  mqproc__worker_job_t *wj, mqproc__msg_t **msg, char *err) {
  mqproc__format_t syntax;
  json_t *doc;
  int rc;
  if ((rc = mqproc__worker_unpack(req, payload, len, wj, err)) != MQPROC_OK)
    return rc;
  if ((rc = mqproc__codec_parse(wj->request_json, req->request_len, &doc, &syntax, err)) !=
      MQPROC_OK)
    return rc;
  return mqproc__msg_validate(doc, (mqproc__format_t)req->format, NULL, msg, err);
}

/* The log of job: log_fd is the job's log file, or a memfd holding what the try wrote so
 * far (its header) while it stays within req->log_inline_max. */
static void set_log(mqproc_job_t *job, const mqproc__worker_req_t *req,
                    const mqproc__worker_job_t *wj, int log_fd) {
  struct stat st;
  if (req->log_inline_max > 0 && wj->log_dir != NULL && fstat(log_fd, &st) == 0)
    mqproc__job_log_memfd(job, log_fd, (size_t)st.st_size, wj->log_dir, wj->log_sub, wj->log_name,
                          (size_t)req->log_inline_max);
  else
    mqproc__job_set_log(job, log_fd);
}

/* The function returned rc (its mqproc_job_fail text: why) but its log file could not be
 * made: the try fails, saying so (the server then leaves the memfd alone). */
static void log_lost(const mqproc_job_t *job, int rc, mqproc__worker_reply_t *rep) {
  mqproc__run_result_t res;
  mqproc__runner_function_result(rc, rep->error, 0, &res);
  mqproc__runner_log_lost(&res, mqproc__job_log_error(job));
  rep->rc = rc != 0 ? rc : -1;
  rep->log_lost = 1;
  snprintf(rep->error, sizeof(rep->error), "%.*s", (int)sizeof(rep->error) - 1, res.error);
}

/* Runs one try; log_fd is the job log (closed here). */
static void run_try(const mqproc_processor_t *proc, const mqproc__worker_req_t *req, int memfd,
                    int log_fd, mqproc__worker_reply_t *rep) {
  char err[MQPROC_ERR_LEN], *payload = NULL;
  mqproc__worker_job_t wj;
  mqproc__msg_t *msg = NULL;
  mqproc_job_t *job = NULL;
  mqproc__run_spec_t spec;
  size_t len = 0;
  int64_t t0;
  int rc;
  memset(rep, 0, sizeof(*rep));
  rc = mqproc__runner_read_fd(memfd, &payload, &len, err);
  if (rc == MQPROC_OK)
    rc = decode(req, payload, len, &wj, &msg, err);
  if (rc == MQPROC_OK) {
    spec = (mqproc__run_spec_t){.msg = msg,
                                .request_json = wj.request_json,
                                .headers_json = wj.headers_json,
                                .mets_path = wj.mets_path,
                                .mets_server_url = wj.mets_server_url,
                                .attempt = req->attempt,
                                .try_no = req->try_no,
                                .worker_id = wj.worker_id,
                                .max_log_bytes = (long)req->max_log_bytes};
    if ((rc = mqproc__job_new(&job, &spec, -1, err)) == MQPROC_OK)
      set_log(job, req, &wj, log_fd);
  }
  if (rc != MQPROC_OK) {
    rep->rc = -1;
    snprintf(rep->error, sizeof(rep->error), "worker process %d cannot run the job: %.400s",
             (int)getpid(), err);
    close(log_fd);
  } else {
    t0 = mqproc__now_ms();
    rep->rc = proc->process(job, proc->userdata);
    rep->duration_ms = mqproc__now_ms() - t0;
    if (mqproc__job_error(job) != NULL)
      snprintf(rep->error, sizeof(rep->error), "%s", mqproc__job_error(job));
    if (mqproc__job_log_error(job) != NULL)
      log_lost(job, rep->rc, rep);
    mqproc__job_free(job); /* closes log_fd */
  }
  mqproc__msg_free(msg);
  free(payload);
}

int mqproc__runner_worker_main(const mqproc_processor_t *proc) {
  int sock = MQPROC__WORKER_FD, type = 0;
  socklen_t tlen = sizeof(type);
  char tag[64];
  if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 || type != SOCK_SEQPACKET) {
    fprintf(stderr, "%s: %s is started by a processing server with --isolation=process\n",
            proc->name, MQPROC_WORKER_COMMAND);
    return 2;
  }
  fcntl(sock, F_SETFD, FD_CLOEXEC); /* not for programs the processing function runs */
  snprintf(tag, sizeof(tag), "%s worker %d", proc->name, (int)getpid());
  mqproc__log_set_tag(tag);
  for (;;) {
    mqproc__worker_req_t req;
    mqproc__worker_reply_t rep;
    int fds[2], got = mqproc__worker_recv_req(sock, &req, fds);
    if (got == 0)
      return 0; /* the server closed our socket: done */
    if (got < 0) {
      MQPROC__ERROR("cannot receive a job from the server: %s", strerror(errno));
      return 1;
    }
    run_try(proc, &req, fds[0], fds[1], &rep);
    close(fds[0]);
    if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep)) {
      MQPROC__ERROR("cannot reply to the server: %s", strerror(errno));
      return 1;
    }
  }
}
