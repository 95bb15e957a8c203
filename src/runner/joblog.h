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
 *   mqproc__joblog_open_read() open a job's log for reading (the page, the CLI)
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
 * name, never blocking (a FIFO is refused), and only a regular file of ours with one link;
 * an fd (O_CLOEXEC), or -1 with err set. */
int mqproc__joblog_open(const char *dir, const char *sub, const char *name, char *err);
/* Why an open of a job log failed with errno e, as the refusals of joblog.h say it: "it is
 * a symbolic link", "it is not a regular file", ... (a static string). */
const char *mqproc__joblog_why(int e);
/* The same for a job's log_path (DIR/SUB/NAME). */
int mqproc__joblog_open_path(const char *path, char *err);
/* Opens a job's log_path for reading (the page, `mqproc jobs log`, maybe another user than
 * the server's) as the writer opens it: following no link in SUB or NAME, never blocking,
 * and only a regular file of one link owned by SUB's owner (the server's user); an fd, or
 * -1 with err. */
int mqproc__joblog_open_read(const char *path, char *err);

#endif
