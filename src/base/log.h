/* Logging: one line per event on stderr, with passwords masked. */
#ifndef MQPROC_LOG_H
#define MQPROC_LOG_H

#include <stddef.h>

typedef enum mqproc__log_level {
  MQPROC__LOG_DEBUG = 0,
  MQPROC__LOG_INFO,
  MQPROC__LOG_WARN,
  MQPROC__LOG_ERROR
} mqproc__log_level_t;

/* --log-format (base/config.c parses it, as --log-level). */
typedef enum mqproc__log_format {
  MQPROC__LOG_TEXT = 0, /* one text line per event */
  MQPROC__LOG_JSON      /* one JSON object per line */
} mqproc__log_format_t;

void mqproc__log_set_level(mqproc__log_level_t level);
/* Tag printed on every line (worker id); copied. */
void mqproc__log_set_tag(const char *tag);
/* --log-format: 0 = text lines, 1 = one JSON object per line ({"ts", "level", "worker_id",
 * "msg"} and, on job lines, "job_id", "attempt", "try", "processor"). */
void mqproc__log_set_json(int json);

/* The job this thread works for now: its lines carry the job's fields in JSON logs, read
 * through these pointers when a line is written (so they follow the job as it is decoded,
 * claimed and tried). enter() returns what was set before, for leave() to restore (calls
 * nest); everything is borrowed until then. A line "job ID: ..." outside a context still
 * gets its job_id. */
typedef struct mqproc__log_job {
  char *const *job_id; /* *job_id NULL: not known (yet) */
  const char *processor;
  const int *attempt; /* 0: not claimed */
  const int *try_no;  /* 0: no try */
} mqproc__log_job_t;
mqproc__log_job_t mqproc__log_enter_job(char *const *job_id, const char *processor,
                                        const int *attempt, const int *try_no);
void mqproc__log_leave_job(mqproc__log_job_t prev);

/* Lines written once per loop turn: after batch_begin(), the calling thread's lines below
 * WARN wait in a buffer (64 KiB) until mqproc__log_flush(), which the server's loop calls
 * before it sleeps; a warning or an error, a line of another thread, a full buffer, exit()
 * and a fatal signal write what waits first, so no line is lost or reordered. Lines of
 * other threads, and every line when no thread batches, are written at once (one
 * write(2) each). batch_end() writes what waits and stops (on the thread that began). */
void mqproc__log_batch_begin(void);
void mqproc__log_flush(void);
void mqproc__log_batch_end(void);

void mqproc__log(mqproc__log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define MQPROC__DEBUG(...) mqproc__log(MQPROC__LOG_DEBUG, __VA_ARGS__)
#define MQPROC__INFO(...) mqproc__log(MQPROC__LOG_INFO, __VA_ARGS__)
#define MQPROC__WARN(...) mqproc__log(MQPROC__LOG_WARN, __VA_ARGS__)
#define MQPROC__ERROR(...) mqproc__log(MQPROC__LOG_ERROR, __VA_ARGS__)

/* Copies url into out (size n) with the password of any "scheme://user:password@" part
 * replaced by "***". Also masks "password=..." key/value pairs of libpq conninfo
 * strings. Always NUL-terminates (truncating when needed). */
void mqproc__mask_secret(const char *url, char *out, size_t n);

#endif
