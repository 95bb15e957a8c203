/* The job handed to a C processing function: read-only views of the message plus a log
 * and an error slot. Lives for one try; used only by the worker thread or the worker
 * process running it.
 *
 * Its log (mqproc_job_log) goes to one of: the job's log file (an fd); memory, starting
 * with the try's header (the thread runner: mqproc__job_log_buffered), until the try ends
 * or outgrows --log-inline-max; or a memfd the server reads at the try's end (the worker
 * process: mqproc__job_log_memfd), likewise. Output that outgrows the maximum makes the
 * job's log file (joblog.h) there and then, with what was kept first; a file that cannot
 * be made fails the try (mqproc__job_log_error) and the rest of its lines are dropped. */
#include "runner/job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"
#include "runner/int.h"
#include "runner/joblog.h"

#define MQPROC_API __attribute__((visibility("default")))

struct mqproc_job {
  const mqproc__msg_t *msg;    /* borrowed: the delivery outlives the try */
  const char *mets_path;       /* borrowed likewise */
  const char *mets_server_url; /* borrowed likewise; NULL when none */
  int attempt;
  int try_no;
  int log_fd;    /* the job's log file, or the worker's memfd while kept (-1: none) */
  long log_left; /* bytes mqproc_job_log may still write in this try (--max-log-size) */
  /* while the output is kept (log_max > 0): in log_buf (the thread runner's) or in the memfd
   * log_fd, log_len bytes so far; the file is made in log_dir/log_sub/log_name (borrowed
   * for the try) once they would exceed log_max */
  size_t log_max, log_len, log_cap;
  char *log_buf;
  const char *log_dir, *log_sub, *log_name;
  char log_err[MQPROC_ERR_LEN]; /* "" unless the file could not be made */
  char *params_json;
  char *request_json;
  char *headers_json; /* "{}" when none */
  json_t *headers;    /* name -> value as text (mqproc_job_header) */
  char error[MQPROC_ERR_LEN];
  volatile int cancelled; /* set by the loop's thread (atomically), read by the function's */
};

/* Each header's value as text, for mqproc_job_header(): strings as they are, anything
 * else in its JSON form. NULL only when out of memory. */
static json_t *header_texts(const char *headers_json) {
  json_t *in = json_loads(headers_json, 0, NULL), *out = json_object(), *v;
  const char *k;
  json_object_foreach(in, k, v) {
    char *text = json_is_string(v) ? NULL : json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    json_object_set_new(out, k, json_string(text != NULL ? text : json_string_value(v)));
    free(text);
  }
  json_decref(in);
  return out;
}

int mqproc__job_new(mqproc_job_t **out, const mqproc__run_spec_t *spec, int log_fd, char *err) {
  mqproc_job_t *job = mqproc__calloc(1, sizeof(*job));
  if (job == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  job->msg = spec->msg;
  job->mets_path = spec->mets_path;
  job->mets_server_url = spec->mets_server_url;
  job->attempt = spec->attempt;
  job->try_no = spec->try_no;
  job->log_fd = log_fd;
  job->log_left = spec->max_log_bytes > 0 ? spec->max_log_bytes : -1;
  job->params_json = json_dumps(spec->msg->parameters, JSON_COMPACT | JSON_SORT_KEYS);
  job->request_json = mqproc__strdup(spec->request_json);
  job->headers_json = mqproc__strdup(spec->headers_json != NULL ? spec->headers_json : "{}");
  job->headers = header_texts(job->headers_json);
  if (job->params_json == NULL || job->request_json == NULL || job->headers_json == NULL ||
      job->headers == NULL) {
    job->log_fd = -1; /* still the caller's */
    mqproc__job_free(job);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  *out = job;
  return MQPROC_OK;
}

void mqproc__job_set_log(mqproc_job_t *job, int log_fd) {
  job->log_fd = log_fd;
}

void mqproc__job_log_buffered(mqproc_job_t *job, const char *dir, const char *sub, const char *name,
                              const char *head, size_t head_len, size_t max) {
  job->log_dir = dir;
  job->log_sub = sub;
  job->log_name = name;
  job->log_max = max;
  job->log_cap = head_len + 256 < max ? head_len + 256 : max;
  if ((job->log_buf = mqproc__malloc(job->log_cap + 1)) == NULL) {
    job->log_max = 0; /* no memory: the file from the start, as without a maximum */
    job->log_fd = mqproc__runner_open_log_at(dir, sub, name, head, (int)head_len, job->log_err);
    return;
  }
  memcpy(job->log_buf, head, head_len);
  job->log_len = head_len;
}

void mqproc__job_log_memfd(mqproc_job_t *job, int memfd, size_t held, const char *dir,
                           const char *sub, const char *name, size_t max) {
  job->log_fd = memfd;
  job->log_dir = dir;
  job->log_sub = sub;
  job->log_name = name;
  job->log_max = max;
  job->log_len = held;
}

/* The kept output outgrew the maximum (or the try failed): the job's log file is made, what
 * was kept goes first (a memfd is emptied then: the server finds it so and knows). 0, or
 * -1 when it could not be made (log_err says why; nothing is logged from then on). */
static int spill(mqproc_job_t *job) {
  int fd = mqproc__joblog_open(job->log_dir, job->log_sub, job->log_name, job->log_err);
  if (fd >= 0 && job->log_buf != NULL && job->log_len > 0 &&
      write(fd, job->log_buf, job->log_len) < 0) {
    /* the job log is best effort once it exists */
  }
  if (fd >= 0 && job->log_buf == NULL && job->log_fd >= 0) {
    if (mqproc__fd_copy(job->log_fd, fd) == 0 && ftruncate(job->log_fd, 0) == 0) {
      /* moved: the server reads an empty memfd as "in the file" */
    }
  }
  if (job->log_buf == NULL && job->log_fd >= 0)
    close(job->log_fd); /* the memfd: the server holds its own */
  free(job->log_buf);
  job->log_buf = NULL;
  job->log_max = job->log_len = 0;
  job->log_fd = fd;
  return fd >= 0 ? 0 : -1;
}

/* n bytes of the try's output, where they go now. */
static void log_write(mqproc_job_t *job, const char *s, size_t n) {
  if (job->log_max > 0 && job->log_len + n > job->log_max && spill(job) < 0)
    return;
  if (job->log_max > 0 && job->log_buf != NULL) {
    if (job->log_len + n > job->log_cap) {
      size_t cap = job->log_cap * 2 > job->log_len + n ? job->log_cap * 2 : job->log_len + n;
      char *grown;
      cap = cap < job->log_max ? cap : job->log_max; /* len + n <= max here */
      grown = mqproc__realloc(job->log_buf, cap + 1);
      if (grown == NULL) { /* no memory: the file, then */
        if (spill(job) < 0)
          return;
        log_write(job, s, n);
        return;
      }
      job->log_buf = grown;
      job->log_cap = cap;
    }
    memcpy(job->log_buf + job->log_len, s, n);
    job->log_len += n;
    return;
  }
  if (job->log_fd >= 0 && write(job->log_fd, s, n) >= 0 && job->log_max > 0)
    job->log_len += n;
}

int mqproc__job_log_end(mqproc_job_t *job, int ok, char **text, int *in_file) {
  *text = NULL;
  *in_file = 0;
  if (job->log_err[0] != '\0')
    return -1;
  if (job->log_max > 0 && job->log_buf != NULL && ok &&
      mqproc__runner_log_clean(job->log_buf, job->log_len)) {
    job->log_buf[job->log_len] = '\0';
    *text = job->log_buf; /* the caller's now */
    job->log_buf = NULL;
    job->log_max = job->log_len = 0;
    return 0;
  }
  if (job->log_max > 0 && job->log_buf != NULL && spill(job) < 0)
    return -1;
  *in_file = job->log_fd >= 0;
  if (job->log_fd >= 0) /* closed by the thread that wrote it, not the loop */
    close(job->log_fd);
  job->log_fd = -1;
  return 0;
}

const char *mqproc__job_log_error(const mqproc_job_t *job) {
  return job->log_err[0] != '\0' ? job->log_err : NULL;
}

void mqproc__job_free(mqproc_job_t *job) {
  if (job == NULL)
    return;
  if (job->log_fd >= 0)
    close(job->log_fd);
  free(job->log_buf);
  free(job->params_json);
  free(job->request_json);
  free(job->headers_json);
  json_decref(job->headers);
  free(job);
}

void mqproc__job_cancel(mqproc_job_t *job) {
  __atomic_store_n(&job->cancelled, 1, __ATOMIC_RELEASE);
}

MQPROC_API int mqproc_job_cancelled(const mqproc_job_t *job) {
  return __atomic_load_n(&job->cancelled, __ATOMIC_ACQUIRE);
}

const char *mqproc__job_error(const mqproc_job_t *job) {
  return job->error[0] != '\0' ? job->error : NULL;
}

MQPROC_API const char *mqproc_job_id(const mqproc_job_t *job) {
  return job->msg->job_id;
}
MQPROC_API const char *mqproc_job_processor_name(const mqproc_job_t *job) {
  return job->msg->processor_name;
}
MQPROC_API int mqproc_job_attempt(const mqproc_job_t *job) {
  return job->attempt;
}
MQPROC_API int mqproc_job_try(const mqproc_job_t *job) {
  return job->try_no;
}
MQPROC_API const char *mqproc_job_path_to_mets(const mqproc_job_t *job) {
  return job->mets_path;
}
MQPROC_API const char *mqproc_job_mets_server_url(const mqproc_job_t *job) {
  return job->mets_server_url;
}
MQPROC_API const char *mqproc_job_workspace_id(const mqproc_job_t *job) {
  return job->msg->workspace_id;
}
MQPROC_API const char *mqproc_job_page_id(const mqproc_job_t *job) {
  return job->msg->page_id;
}

static size_t grp_count(const json_t *arr) {
  return arr != NULL ? json_array_size(arr) : 0;
}

static const char *grp_at(const json_t *arr, size_t i) {
  return arr != NULL ? json_string_value(json_array_get(arr, i)) : NULL;
}

MQPROC_API size_t mqproc_job_input_file_grp_count(const mqproc_job_t *job) {
  return grp_count(job->msg->input_file_grps);
}
MQPROC_API const char *mqproc_job_input_file_grp(const mqproc_job_t *job, size_t i) {
  return grp_at(job->msg->input_file_grps, i);
}
MQPROC_API size_t mqproc_job_output_file_grp_count(const mqproc_job_t *job) {
  return grp_count(job->msg->output_file_grps);
}
MQPROC_API const char *mqproc_job_output_file_grp(const mqproc_job_t *job, size_t i) {
  return grp_at(job->msg->output_file_grps, i);
}
MQPROC_API const char *mqproc_job_parameters_json(const mqproc_job_t *job) {
  return job->params_json;
}
MQPROC_API const char *mqproc_job_request_json(const mqproc_job_t *job) {
  return job->request_json;
}
MQPROC_API const char *mqproc_job_header(const mqproc_job_t *job, const char *name) {
  return name != NULL ? json_string_value(json_object_get(job->headers, name)) : NULL;
}
MQPROC_API const char *mqproc_job_headers_json(const mqproc_job_t *job) {
  return job->headers_json;
}

MQPROC_API void mqproc_job_log(mqproc_job_t *job, const char *fmt, ...) {
  char line[4096];
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0)
    return;
  if ((size_t)n > sizeof(line) - 2)
    n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  if (job->log_left == 0)
    return; /* --max-log-size reached: the rest of this try's lines are dropped */
  if (job->log_left > 0 && n >= job->log_left) {
    static const char full[] = "mqproc: --max-log-size reached, later lines dropped\n";
    n = (int)job->log_left;
    job->log_left = 0;
    log_write(job, line, (size_t)n); /* best effort, as below */
    log_write(job, full, sizeof(full) - 1);
    return;
  }
  if (job->log_left > 0)
    job->log_left -= n;
  log_write(job, line, (size_t)n); /* the job log is best effort */
}

MQPROC_API void mqproc_job_fail(mqproc_job_t *job, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(job->error, sizeof(job->error), fmt, ap);
  va_end(ap);
}
