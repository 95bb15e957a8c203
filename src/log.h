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

void mqproc__log_set_level(mqproc__log_level_t level);
/* Parses "debug|info|warn|error"; returns -1 when unknown. */
int mqproc__log_level_parse(const char *s);
/* Tag printed on every line (worker id); copied. */
void mqproc__log_set_tag(const char *tag);

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
