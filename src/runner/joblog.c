/* Per-job log files (see joblog.h). */
#include "runner/joblog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "runner/int.h"

#define PLAIN_MAX 200 /* a longer job_id is hashed */
#define PREFIX_LEN 64 /* readable start kept before the hash */

static int plain_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

void mqproc__joblog_name(const char *job_id, char *out, size_t n) {
  size_t len = strlen(job_id), i;
  unsigned char sha[32];
  char prefix[PREFIX_LEN + 1];
  int plain = len > 0 && len <= PLAIN_MAX && job_id[0] != '.';
  for (i = 0; plain && i < len; i++)
    plain = plain_char(job_id[i]);
  if (plain) {
    snprintf(out, n, "%s.log", job_id);
    return;
  }
  for (i = 0; i < len && i < PREFIX_LEN; i++)
    prefix[i] = plain_char(job_id[i]) && (i > 0 || job_id[i] != '.') ? job_id[i] : '_';
  prefix[i] = '\0';
  mqproc__sha256(job_id, len, sha);
  snprintf(out, n, "%s~%02x%02x%02x%02x%02x%02x%02x%02x.log", prefix, sha[0], sha[1], sha[2],
           sha[3], sha[4], sha[5], sha[6], sha[7]);
}

/* mkdir -p for dir, with 0750 for what it creates. */
static int make_dirs(const char *dir) {
  char *path = mqproc__strdup(dir), *p;
  int rc = 0;
  if (path == NULL)
    return -1;
  for (p = path + 1; rc == 0; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    char c = *p;
    *p = '\0';
    if (mkdir(path, 0750) < 0 && errno != EEXIST)
      rc = -1;
    *p = c;
    if (c == '\0')
      break;
  }
  free(path);
  return rc;
}

int mqproc__joblog_prepare(const char *dir, char *err) {
  struct stat st;
  if (make_dirs(dir) < 0 || stat(dir, &st) < 0)
    return mqproc__err(err, MQPROC_ECONFIG, "--log-dir %s: %s", dir, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return mqproc__err(err, MQPROC_ECONFIG, "--log-dir %s: not a directory", dir);
  if (st.st_mode & S_IWOTH)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--log-dir %s: every user may write there (mode %04o): choose a private "
                       "directory for the job logs",
                       dir, (unsigned)(st.st_mode & 07777));
  return MQPROC_OK;
}

/* The sub-directory opened last, kept open: the next job's log there costs an lstat of it
 * (the same directory still, and still ours?), the file's openat and its fstat, not a walk
 * from dir with a mkdir each time. Runner threads may open logs at once: under lock. */
static struct {
  pthread_mutex_t lock;
  char path[PATH_MAX]; /* dir/sub */
  int fd;              /* -1: none */
  dev_t dev;
  ino_t ino;
} cached = {PTHREAD_MUTEX_INITIALIZER, "", -1, 0, 0};

static uid_t euid_value;
static pthread_once_t euid_once = PTHREAD_ONCE_INIT;

static void euid_init(void) {
  euid_value = geteuid();
}

/* Runner threads open logs too: read once, safely. */
static uid_t euid(void) {
  pthread_once(&euid_once, euid_init);
  return euid_value;
}

const char *mqproc__joblog_why(int e) {
  return e == ELOOP                                 ? "it is a symbolic link"
         : e == ENXIO || e == EISDIR || e == ENODEV ? "it is not a regular file"
         : e == EPERM ? "it is not a plain file of this server's user (another user's, or more "
                        "than one link)"
                      : strerror(e);
}

/* Opened without blocking (a FIFO a processor planted there would wait for a reader: the
 * server's loop with it) and following no link; then it must be a regular file of ours
 * with one link, and O_NONBLOCK is cleared again (spawn/sys.c). */
static int open_in(int sfd, const char *dir, const char *sub, const char *name, char *err) {
  int fd = mqproc__joblog_file_open(sfd, name, euid());
  if (fd < 0)
    return mqproc__err(err, -1, "cannot open job log %s/%s/%s: %s", dir, sub, name,
                       mqproc__joblog_why(errno));
  return fd;
}

int mqproc__joblog_open(const char *dir, const char *sub, const char *name, char *err) {
  int sfd = -1, fd = -1;
  char path[PATH_MAX];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", dir, sub);
  pthread_mutex_lock(&cached.lock);
  if (cached.fd >= 0 && strcmp(cached.path, path) == 0 && lstat(path, &st) == 0 &&
      S_ISDIR(st.st_mode) && st.st_dev == cached.dev && st.st_ino == cached.ino &&
      st.st_uid == euid()) {
    fd = open_in(cached.fd, dir, sub, name, err);
    if (fd >= 0) {
      pthread_mutex_unlock(&cached.lock);
      return fd;
    }
  }
  if (cached.fd >= 0) { /* not this directory, or it failed: the walk, from scratch */
    close(cached.fd);
    cached.fd = -1;
  }
  pthread_mutex_unlock(&cached.lock);
  if ((sfd = mqproc__joblog_sub_open(dir, sub, euid())) < 0)
    return mqproc__err(err, -1, "cannot open %s/%s: %s", dir, sub,
                       errno == ELOOP   ? "not a directory (a link?)"
                       : errno == EPERM ? "it belongs to another user: refused"
                                        : strerror(errno));
  if ((fd = open_in(sfd, dir, sub, name, err)) >= 0 && fstat(sfd, &st) == 0) {
    pthread_mutex_lock(&cached.lock); /* kept for the next job's log */
    if (cached.fd >= 0)
      close(cached.fd);
    snprintf(cached.path, sizeof(cached.path), "%s", path);
    cached.fd = sfd;
    cached.dev = st.st_dev;
    cached.ino = st.st_ino;
    pthread_mutex_unlock(&cached.lock);
    sfd = -1;
  }
  if (sfd >= 0)
    close(sfd);
  return fd;
}

/* Splits DIR/SUB/NAME (a job's log_path) into its three parts (copies in buf): 0, or -1
 * when it has not that shape. */
static int split_path(const char *path, char *buf, size_t n, char **dir, char **sub, char **name) {
  char *s1, *s2;
  if (path == NULL || strlen(path) >= n)
    return -1;
  snprintf(buf, n, "%s", path);
  if ((s2 = strrchr(buf, '/')) == NULL || s2 == buf || s2[1] == '\0')
    return -1;
  *s2 = '\0';
  if ((s1 = strrchr(buf, '/')) == NULL || s1[1] == '\0')
    return -1;
  *s1 = '\0';
  *dir = s1 == buf ? "/" : buf;
  *sub = s1 + 1;
  *name = s2 + 1;
  return 0;
}

int mqproc__joblog_open_path(const char *path, char *err) {
  char buf[PATH_MAX], *dir, *sub, *name;
  if (split_path(path, buf, sizeof(buf), &dir, &sub, &name) != 0)
    return mqproc__err(err, -1, "'%s' is not a job log's path", path != NULL ? path : "");
  return mqproc__joblog_open(dir, sub, name, err);
}

int mqproc__joblog_open_read(const char *path, char *err) {
  char buf[PATH_MAX], *dir, *sub, *name;
  struct stat sst, st;
  int dfd = -1, sfd = -1, fd = -1;
  if (split_path(path, buf, sizeof(buf), &dir, &sub, &name) != 0)
    return mqproc__err(err, -1, "'%s' is not a job log's path", path != NULL ? path : "");
  if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    mqproc__err(err, -1, "cannot open %s: %s", dir, strerror(errno));
    goto out;
  }
  if ((sfd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0 ||
      fstat(sfd, &sst) != 0) {
    mqproc__err(err, -1, "cannot open %s/%s: %s", dir, sub,
                errno == ELOOP || errno == ENOTDIR ? "not a directory (a link?)" : strerror(errno));
    goto out;
  }
  if ((fd = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) < 0) {
    mqproc__err(err, -1, "cannot read job log %s: %s", path, mqproc__joblog_why(errno));
    goto out;
  }
  /* what the server wrote: a regular file of one link, of the directory's owner (the
   * server's user), never what a processor swapped in (a link, a FIFO, another's file) */
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != sst.st_uid ||
      fcntl(fd, F_SETFL, 0) != 0) {
    mqproc__err(err, -1, "job log %s is not a plain file of the server's user: refused", path);
    close(fd);
    fd = -1;
  }
out:
  if (sfd >= 0)
    close(sfd);
  if (dfd >= 0)
    close(dfd);
  return fd;
}
