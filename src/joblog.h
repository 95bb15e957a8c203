/* Per-job log files: private, one per job, never shared, never followed through a link.
 *
 * Layout: <log dir>/<processor>/<name>.log, where name is the job_id itself when it is a
 * plain file name (letters, digits, '.', '_', '-'; at most 200 bytes; not starting with
 * '.'), else a readable prefix of it, '~' and 16 hex digits of its SHA-256: "a/b", "a:b"
 * and "a_b", or two long ids with a common start, get different files (a literal id can
 * contain no '~', so it never collides with a hashed one).
 *
 * Directories are created 0750 and files 0640; the processor directory and the file are
 * opened relative to their parent's fd with O_NOFOLLOW and must be ours: a link or a file
 * another user planted is refused, not written through. The log dir itself is the
 * operator's choice (symlinks allowed) but may not be writable by every user.
 *
 * API:
 *   mqproc__joblog_prepare()  create / check the log dir at startup
 *   mqproc__joblog_name()     the file name of a job's log
 *   mqproc__joblog_open()     open (create) a job's log for appending
 */
#ifndef MQPROC_JOBLOG_H
#define MQPROC_JOBLOG_H

#include <stddef.h>

/* Creates dir (and missing parents, 0750) and checks it is a directory no other user may
 * write to. MQPROC_ECONFIG with err saying why when it is not usable. */
int mqproc__joblog_prepare(const char *dir, char *err);

/* The log file name for job_id (with ".log") into out (n >= 128 bytes). */
void mqproc__joblog_name(const char *job_id, char *out, size_t n);

/* Opens dir/sub/name for appending (creating sub and name), following no link in sub or
 * name; an fd (O_CLOEXEC), or -1 with err set. */
int mqproc__joblog_open(const char *dir, const char *sub, const char *name, char *err);

#endif
