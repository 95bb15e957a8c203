/* The METS server's journal (mets_journal.h). */
#include "http/mets_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

struct mqproc__mets_journal {
  char *path;
  int fd;       /* O_APPEND */
  int unsynced; /* appended since the last fdatasync */
};

/* The identity of the file fd is, as the journal's first line records it. */
static json_t *identity(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0)
    return NULL;
  return json_pack("{s:I, s:I, s:I, s:I}", "dev", (json_int_t)st.st_dev, "ino",
                   (json_int_t)st.st_ino, "ctime_s", (json_int_t)st.st_ctim.tv_sec, "ctime_ns",
                   (json_int_t)st.st_ctim.tv_nsec);
}

static int write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -1;
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

/* "<dir>/.<name>.mqproc-journal" of the METS at mets_path. */
static char *journal_path(const char *mets_path) {
  char *a = mqproc__strdup(mets_path), *b = mqproc__strdup(mets_path), *p = NULL;
  if (a != NULL && b != NULL)
    p = mqproc__asprintf("%s/.%s.mqproc-journal", dirname(a), basename(b));
  free(a);
  free(b);
  return p;
}

/* Reads all of fd (at most the limit) into a NUL-terminated buffer. */
static int read_all(int fd, const char *path, char **out, size_t *len, char *err) {
  struct stat st;
  char *buf;
  size_t n = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return mqproc__err(err, MQPROC_EINVAL, "the journal %.300s is not a regular file", path);
  if (st.st_size > (off_t)MQPROC__METS_JOURNAL_MAX)
    return mqproc__err(err, MQPROC_EINVAL,
                       "the journal %.300s is larger than %u MiB: look at it, save what it holds "
                       "another way, remove it",
                       path, MQPROC__METS_JOURNAL_MAX >> 20);
  if ((buf = mqproc__malloc((size_t)st.st_size + 1)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  while (n < (size_t)st.st_size) {
    ssize_t r = pread(fd, buf + n, (size_t)st.st_size - n, (off_t)n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  buf[n] = '\0';
  *out = buf;
  *len = n;
  return MQPROC_OK;
}

/* The entries of data (complete lines after the first); *same from the first line. */
static int parse(const char *data, size_t len, json_t *mine, json_t *entries, int *same) {
  const char *p = data, *end = data + len, *nl;
  int first = 1;
  *same = 0;
  for (; p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL; p = nl + 1) {
    json_error_t je;
    json_t *v;
    if ((size_t)(nl - p) > MQPROC__METS_JOURNAL_LINE_MAX ||
        (v = json_loadb(p, (size_t)(nl - p), JSON_REJECT_DUPLICATES, &je)) == NULL ||
        !json_is_object(v)) {
      if (!first || nl > p)
        MQPROC__WARN("METS journal: a line that is no entry is skipped (%.100s)",
                     nl - p > MQPROC__METS_JOURNAL_LINE_MAX ? "too long" : je.text);
      first = 0;
      continue;
    }
    if (first) {
      *same = json_equal(json_object_get(v, "mets"), mine);
      first = 0;
      json_decref(v);
      continue;
    }
    if (json_array_append_new(entries, v) != 0)
      return -1;
  }
  if (p < end)
    MQPROC__WARN("METS journal: its last line was cut short (never acknowledged): dropped");
  return 0;
}

int mqproc__mets_journal_open(const char *mets_path, int mets_fd, unsigned mode,
                              mqproc__mets_journal_t **out, json_t **entries, int *same,
                              char *err) {
  char *path = journal_path(mets_path), *data = NULL;
  mqproc__mets_journal_t *j = mqproc__calloc(1, sizeof(*j));
  json_t *mine = identity(mets_fd);
  size_t len = 0;
  int rc = MQPROC_ENOMEM;
  *out = NULL;
  *entries = json_array();
  if (path == NULL || j == NULL || mine == NULL || *entries == NULL)
    goto out;
  j->path = path;
  path = NULL;
  j->fd = open(j->path, O_RDWR | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  if (j->fd < 0) {
    rc = mqproc__err(err, MQPROC_ESYS, "cannot open the journal %.300s: %s", j->path,
                     errno == ELOOP ? "a symbolic link" : strerror(errno));
    goto out;
  }
  if ((rc = read_all(j->fd, j->path, &data, &len, err)) != MQPROC_OK)
    goto out;
  rc = parse(data, len, mine, *entries, same) == 0 ? MQPROC_OK : MQPROC_ENOMEM;
out:
  if (rc == MQPROC_ENOMEM)
    mqproc__err(err, rc, "out of memory");
  if (rc != MQPROC_OK) {
    json_decref(*entries);
    *entries = NULL;
    mqproc__mets_journal_close(j, 0);
  } else {
    *out = j;
  }
  json_decref(mine);
  free(data);
  free(path);
  return rc;
}

int mqproc__mets_journal_append(mqproc__mets_journal_t *j, const json_t *entry, char *err) {
  char *line = json_dumps(entry, JSON_COMPACT), *full;
  int rc = MQPROC_OK;
  if (line == NULL || (full = mqproc__asprintf("%s\n", line)) == NULL) {
    free(line);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  if (write_all(j->fd, full, strlen(full)) != 0)
    rc = mqproc__err(err, MQPROC_ESYS, "cannot write the journal: %s", strerror(errno));
  j->unsynced = 1;
  free(line);
  free(full);
  return rc;
}

int mqproc__mets_journal_unsynced(const mqproc__mets_journal_t *j) {
  return j->unsynced;
}

int mqproc__mets_journal_sync(mqproc__mets_journal_t *j, char *err) {
  if (!j->unsynced)
    return MQPROC_OK;
  if (fdatasync(j->fd) != 0)
    return mqproc__err(err, MQPROC_ESYS, "cannot sync the journal: %s", strerror(errno));
  j->unsynced = 0;
  return MQPROC_OK;
}

int mqproc__mets_journal_reset(mqproc__mets_journal_t *j, int mets_fd, char *err) {
  json_t *head = json_pack("{s:i, s:o*}", "mqproc_mets_journal", 1, "mets", identity(mets_fd));
  char *line = head != NULL ? json_dumps(head, JSON_COMPACT) : NULL, *full = NULL;
  int rc = MQPROC_OK;
  json_decref(head);
  if (line == NULL || (full = mqproc__asprintf("%s\n", line)) == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  else if (ftruncate(j->fd, 0) != 0 || write_all(j->fd, full, strlen(full)) != 0 ||
           fdatasync(j->fd) != 0)
    rc = mqproc__err(err, MQPROC_ESYS, "cannot reset the journal: %s", strerror(errno));
  else
    j->unsynced = 0;
  free(line);
  free(full);
  return rc;
}

void mqproc__mets_journal_close(mqproc__mets_journal_t *j, int remove) {
  struct stat held, there;
  if (j == NULL)
    return;
  /* (only the file it has open: not another's put there meanwhile) */
  if (remove && j->fd > 0 && fstat(j->fd, &held) == 0 && lstat(j->path, &there) == 0 &&
      held.st_dev == there.st_dev && held.st_ino == there.st_ino)
    unlink(j->path);
  if (j->fd > 0)
    close(j->fd);
  free(j->path);
  free(j);
}
