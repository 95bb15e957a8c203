/* ocrd-dummy file helpers: errors, paths, whole-file reads, atomic writes, the METS lock. */
#include "fsio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dummy.h"

int (*dummy_fsio_commit_hook)(const char *tmp_path, const char *path) = NULL;

int dummy_err(char *err, const char *fmt, ...) {
  va_list ap;
  if (err == NULL)
    return -1;
  va_start(ap, fmt);
  vsnprintf(err, DUMMY_ERR_LEN, fmt, ap);
  va_end(ap);
  return -1;
}

char *dummy_path_join(const char *dir, const char *rel) {
  char *out = NULL;
  if (rel[0] == '/' || dir == NULL)
    return strdup(rel);
  if (asprintf(&out, "%s/%s", dir, rel) < 0)
    return NULL;
  return out;
}

char *dummy_dirname(const char *path) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return strdup(".");
  if (slash == path)
    return strdup("/");
  return strndup(path, (size_t)(slash - path));
}

int dummy_read_fd(int fd, const char *name, char **data, size_t *len, char *err) {
  size_t cap = 8192, n = 0;
  char *buf = malloc(cap), *grown;
  ssize_t r;
  while (buf != NULL) {
    if (n + 1 >= cap) {
      if ((grown = realloc(buf, cap * 2)) == NULL)
        break;
      buf = grown;
      cap *= 2;
    }
    r = pread(fd, buf + n, cap - n - 1, (off_t)n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(buf);
      return dummy_err(err, "cannot read %s: %s", name, strerror(errno));
    }
    if (r == 0) {
      buf[n] = '\0';
      *data = buf;
      *len = n;
      return 0;
    }
    n += (size_t)r;
  }
  free(buf);
  return dummy_err(err, "cannot read %s: out of memory", name);
}

static int write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Creates a new temp file next to path, named .<base>.<pid>.<n>.tmp; returns its fd. */
static int open_temp(const char *path, char **tmp_path, char *err) {
  static atomic_ulong counter;
  const char *slash = strrchr(path, '/');
  int dirlen = slash != NULL ? (int)(slash - path + 1) : 0;
  for (int tries = 0; tries < 100; tries++) {
    unsigned long n = atomic_fetch_add(&counter, 1);
    int fd;
    if (asprintf(tmp_path, "%.*s.%s.%ld.%lu.tmp", dirlen, path, path + dirlen, (long)getpid(), n) <
        0) {
      *tmp_path = NULL;
      return dummy_err(err, "out of memory");
    }
    fd = open(*tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0)
      return fd;
    if (errno != EEXIST) {
      dummy_err(err, "cannot create %s: %s", *tmp_path, strerror(errno));
      free(*tmp_path);
      *tmp_path = NULL;
      return -1;
    }
    free(*tmp_path);
  }
  *tmp_path = NULL;
  return dummy_err(err, "cannot create a temp file next to %s", path);
}

/* fsync()s the directory holding path (EINVAL: a file system that cannot, ignored). */
static int sync_dir(const char *path, char *err) {
  char *dir = dummy_dirname(path);
  int fd, rc = 0;
  if (dir == NULL)
    return dummy_err(err, "out of memory");
  fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL))
    rc = dummy_err(err, "cannot sync directory %s: %s", dir, strerror(errno));
  if (fd >= 0)
    close(fd);
  free(dir);
  return rc;
}

int dummy_write_atomic(const char *path, int mode, dummy_fill_cb fill, void *ud, char *err) {
  char *tmp = NULL;
  int fd = open_temp(path, &tmp, err);
  if (fd < 0)
    return -1;
  if (fill(fd, ud, err) != 0)
    goto out_unlink;
  if (mode >= 0 && fchmod(fd, (mode_t)mode) != 0) {
    dummy_err(err, "cannot chmod %s: %s", tmp, strerror(errno));
    goto out_unlink;
  }
  if (fsync(fd) != 0) {
    dummy_err(err, "cannot sync %s: %s", tmp, strerror(errno));
    goto out_unlink;
  }
  if (close(fd) != 0) {
    fd = -1;
    dummy_err(err, "cannot write %s: %s", tmp, strerror(errno));
    goto out_unlink;
  }
  fd = -1;
  if (dummy_fsio_commit_hook != NULL && dummy_fsio_commit_hook(tmp, path) != 0) {
    dummy_err(err, "cannot write %s: interrupted before the rename", path);
    goto out_unlink;
  }
  if (rename(tmp, path) != 0) {
    dummy_err(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    goto out_unlink;
  }
  free(tmp);
  return sync_dir(path, err);
out_unlink:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
  free(tmp);
  return -1;
}

typedef struct buf_src {
  const void *data;
  size_t len;
} buf_src_t;

static int fill_buf(int fd, void *ud, char *err) {
  const buf_src_t *b = ud;
  if (write_all(fd, b->data, b->len) != 0)
    return dummy_err(err, "cannot write: %s", strerror(errno));
  return 0;
}

int dummy_write_buf_atomic(const char *path, int mode, const void *data, size_t len, char *err) {
  buf_src_t b = {data, len};
  return dummy_write_atomic(path, mode, fill_buf, &b, err);
}

typedef struct copy_src {
  const char *path;
  int fd;
} copy_src_t;

static int fill_copy(int fd, void *ud, char *err) {
  const copy_src_t *src = ud;
  char buf[65536];
  for (;;) {
    ssize_t r = read(src->fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return dummy_err(err, "cannot read %s: %s", src->path, strerror(errno));
    if (r == 0)
      return 0;
    if (write_all(fd, buf, (size_t)r) != 0)
      return dummy_err(err, "cannot write: %s", strerror(errno));
  }
}

int dummy_copy_atomic(const char *src, const char *dst, char *err) {
  copy_src_t c = {src, open(src, O_RDONLY | O_CLOEXEC)};
  int rc;
  if (c.fd < 0)
    return dummy_err(err, "cannot open %s: %s", src, strerror(errno));
  rc = dummy_write_atomic(dst, -1, fill_copy, &c, err);
  close(c.fd);
  return rc;
}

int dummy_mkdir(const char *path, char *err) {
  struct stat st;
  if (mkdir(path, 0777) == 0)
    return 0;
  if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    return 0;
  return dummy_err(err, "cannot create directory %s: %s", path, strerror(errno));
}

/* Whether the mqproc server that started this run holds the workspace lock on the file fd
 * is open on, for this run (MQPROC_WORKSPACE_LOCK names its METS). */
static int held_for_us(int fd) {
  const char *held = getenv("MQPROC_WORKSPACE_LOCK");
  struct stat a, b;
  return held != NULL && held[0] != '\0' && stat(held, &a) == 0 && fstat(fd, &b) == 0 &&
         a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int dummy_lock(const char *path, int *fd_out, char *err) {
  for (;;) {
    struct stat held, now;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return dummy_err(err, "cannot open METS %s: %s", path, strerror(errno));
    while (flock(fd, held_for_us(fd) ? LOCK_EX | LOCK_NB : LOCK_EX) != 0) {
      if (errno == EWOULDBLOCK) { /* the server that started us holds it for us */
        *fd_out = fd;
        return 0;
      }
      if (errno != EINTR) {
        dummy_err(err, "cannot lock METS %s: %s", path, strerror(errno));
        close(fd);
        return -1;
      }
    }
    /* Another run may have replaced the file while we waited: lock the new one. */
    if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      *fd_out = fd;
      return 0;
    }
    close(fd);
  }
}
