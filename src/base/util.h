/* Small helpers shared by every module: error buffers, allocation, clocks. */
#ifndef MQPROC_UTIL_H
#define MQPROC_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

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

/* ---- modes of the files mqproc makes ------------------------------------------------
 * The SQLite database (its -wal, -shm and -control files follow its mode), the dir://
 * spool's directories and its job, result, dead-letter and reason files hold requests,
 * errors and dead-letter bodies: they are made private, 0600 (directories 0700; a umask can
 * only narrow that). --group-access (MQPROC_GROUP_ACCESS) shares them with the group
 * instead, 0660 and 0770 exactly (the usual umask 022 would drop the group's write bit),
 * for operators in the server's group. Files and directories
 * that exist already keep the mode they have: an operator's chmod is never undone. Set
 * once at start, before the first file is made; every thread reads it. */
void mqproc__set_group_access(int on);
mode_t mqproc__file_mode(void);
mode_t mqproc__dir_mode(void);
/* mkdir(path) with mqproc__dir_mode() (a shared one exactly: the umask does not narrow
 * it); 0, or -1 with errno as mkdir's (EEXIST: there already, left as it is). */
int mqproc__mkdir(const char *path);
/* The same relative to dirfd (AT_FDCWD: as mqproc__mkdir). */
int mqproc__mkdirat(int dirfd, const char *name);
/* open(path, flags | O_CREAT, mqproc__file_mode()); with O_EXCL in flags (this call made
 * the file) a shared mode is set exactly, as mqproc__mkdir does; without it a file that
 * was there keeps its mode. The fd, or -1 with errno. */
int mqproc__open_new(const char *path, int flags);
/* The same relative to dirfd. */
int mqproc__openat_new(int dirfd, const char *name, int flags);
/* Opens a file a client named (a request's METS, a workspace's mets.xml) the one way such
 * files are opened: read-only, non-blocking (a FIFO or a device never holds the caller),
 * no controlling terminal, close-on-exec, and, with nofollow, not through a symbolic link
 * as its last part; then fstat: a regular file only, of at most max bytes (0: any size).
 * The fd (its size in *size, may be NULL); -1 when there is no such file (ENOENT,
 * ENOTDIR); -2 when there is one but it is refused (a link, a FIFO, too large, no
 * permission). err (MQPROC_ERR_LEN) says why in words, without the path. */
int mqproc__open_untrusted(const char *path, int nofollow, size_t max, size_t *size, char *err);
/* The whole of such a file, NUL-terminated, malloc()ed (its length in *len); NULL with
 * *why as mqproc__open_untrusted's -1 or -2 (-2 also: it cannot be read), err. */
char *mqproc__read_untrusted(const char *path, int nofollow, size_t max, size_t *len, int *why,
                             char *err);
/* fopen(path, "w") for a file of mqproc's own (a dead letter's reason): made with
 * mqproc__file_mode() (a shared mode exactly), no symlink followed; NULL with errno. */
FILE *mqproc__fopen_new(const char *path);
/* Whether url starts with scheme "://" (NULL: no). */
int mqproc__url_has_scheme(const char *url, const char *scheme);
/* "true"/"1"/"yes"/"on" 1, "false"/"0"/"no"/"off" 0, anything else (NULL too) -1. */
int mqproc__parse_bool(const char *text);

/* SHA-256 of len bytes (libcrypto). */
void mqproc__sha256(const void *data, size_t len, unsigned char out[32]);

#define MQPROC__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
