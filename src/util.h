/* Small helpers shared by every module: error buffers, allocation, clocks. */
#ifndef MQPROC_UTIL_H
#define MQPROC_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "mqproc/mqproc.h"

/* Formats into err (MQPROC_ERR_LEN bytes) when err is not NULL; returns status so a
 * caller can write `return mqproc__err(err, MQPROC_EINVAL, "bad %s", x);`. */
int mqproc__err(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Allocation that aborts on failure is NOT used: callers get NULL and return
 * MQPROC_ENOMEM. These wrappers exist so a test can fail the Nth allocation. */
void *mqproc__malloc(size_t n);
void *mqproc__calloc(size_t n, size_t size);
void *mqproc__realloc(void *p, size_t n);
char *mqproc__strdup(const char *s); /* NULL in, NULL out */
char *mqproc__strndup(const char *s, size_t n);
char *mqproc__asprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Monotonic milliseconds (for timers and durations). */
int64_t mqproc__now_ms(void);
/* Wall-clock milliseconds since the epoch (for logs and records). */
int64_t mqproc__wall_ms(void);
/* Whether pid is a zombie (dead, not yet reaped by its parent). */
int mqproc__pid_is_zombie(int pid);
/* The name of the network filesystem dir is on ("NFS", "CIFS", ...), NULL when it is local;
 * errno set and NULL when dir cannot be looked at (*looked = 0). */
const char *mqproc__network_fs(const char *dir, int *looked);

/* Reads a file holding a URL, or one URL per line (joined by commas; blank and '#'
 * lines skipped): a secret kept off the command line, where every user can read it in
 * /proc/PID/cmdline. Sets *others_can_read when the file's mode lets every user read it.
 * NULL (err says why) when it cannot be read, is not a regular file, is over 8 KiB or
 * holds no URL. The caller frees the result. */
char *mqproc__read_url_file(const char *path, int *others_can_read, char *err);

/* Length of the UTF-8 sequence at s[0..n), or 0 when it is malformed (overlong forms,
 * surrogates and code points above U+10FFFF included). n >= 1. */
size_t mqproc__utf8_seq_len(const unsigned char *s, size_t n);
/* s itself when it is valid UTF-8; otherwise a copy in *copy (caller frees) with each
 * malformed byte replaced by '?'. NULL when out of memory. Text for PostgreSQL (which
 * refuses malformed UTF-8) that may hold bytes from elsewhere: a processor's error text,
 * an excerpt cut in the middle of a character. */
const char *mqproc__utf8_clean(const char *s, char **copy);
/* s[0..n) with what a terminal would act on made visible: C0 control bytes but newline and
 * tab, DEL and the C1 controls (UTF-8 C2 80..C2 9F, or such a byte alone) as \xHH; a new
 * NUL-terminated string (the caller frees it), NULL without memory. */
char *mqproc__term_escape(const char *s, size_t n);
/* Writes s[0..n) to out, escaped as above when out is a terminal (processor output and
 * error texts shown to an operator can carry escape sequences), else as it is. */
void mqproc__print_term(FILE *out, const char *s, size_t n);
/* Cuts s (NUL-terminated, valid UTF-8) to at most max bytes at a character boundary. */
void mqproc__utf8_truncate(char *s, size_t max);

/* SHA-256 of len bytes (libcrypto). */
void mqproc__sha256(const void *data, size_t len, unsigned char out[32]);

#define MQPROC__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
