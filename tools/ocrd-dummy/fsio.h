/* ocrd-dummy file helpers: errors, paths, whole-file reads, atomic writes, the METS lock. */
#ifndef OCRD_DUMMY_FSIO_H
#define OCRD_DUMMY_FSIO_H

#include <stddef.h>

/* Formats into err (DUMMY_ERR_LEN bytes; NULL allowed) and returns -1. */
int dummy_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "<dir>/<rel>" (or a copy of rel when it is absolute), malloc()ed; NULL when out of
 * memory. */
char *dummy_path_join(const char *dir, const char *rel);

/* malloc()ed copy of the directory part of path ("." when there is none). */
char *dummy_dirname(const char *path);

/* Reads all of fd from offset 0 into a malloc()ed, NUL-terminated *data (*len excludes the
 * NUL); name is for messages. */
int dummy_read_fd(int fd, const char *name, char **data, size_t *len, char *err);

/* Writes the content of a new file to fd; 0 or -1 with err set. */
typedef int (*dummy_fill_cb)(int fd, void *ud, char *err);

/* Replaces path atomically: fill() writes a temp file in the same directory, which gets
 * mode (-1: the default of open(), 0666 & ~umask), is fsync()ed and renamed over path;
 * then the directory is fsync()ed. On error the temp file is removed and path is as
 * before. */
int dummy_write_atomic(const char *path, int mode, dummy_fill_cb fill, void *ud, char *err);
int dummy_write_buf_atomic(const char *path, int mode, const void *data, size_t len, char *err);
/* Copies the file src to dst (atomically, as above). */
int dummy_copy_atomic(const char *src, const char *dst, char *err);

/* Creates the directory path unless it already is one. */
int dummy_mkdir(const char *path, char *err);

/* Opens path and takes an exclusive flock() on it, again if the file was replaced while
 * waiting; *fd holds the lock until it is closed. When the mqproc server that started this
 * run holds that lock for it (MQPROC_WORKSPACE_LOCK names the file), *fd is the file
 * unlocked: the server's lock covers the run. */
int dummy_lock(const char *path, int *fd, char *err);

/* Test hook: when set, called by dummy_write_atomic() between the fsync() and the rename();
 * a non-zero return fails the write. */
extern int (*dummy_fsio_commit_hook)(const char *tmp_path, const char *path);

#endif
