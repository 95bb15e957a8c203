/* The directory queue's on-disk format (dirq.h). */
#include "broker/dirq.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

int mqproc__dirq_is_url(const char *url) {
  return url != NULL && strncmp(url, MQPROC__DIRQ_SCHEME, strlen(MQPROC__DIRQ_SCHEME)) == 0;
}

int mqproc__dirq_spool(const char *url, char *out, int *durable, char *err) {
  const char *p = url + strlen(MQPROC__DIRQ_SCHEME), *q;
  size_t len;
  if (!mqproc__dirq_is_url(url) || p[0] != '/' || p[1] == '\0' || p[1] == '?')
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--queue %s: expected dir:///ABSOLUTE/PATH[?synchronous=normal] (a spool "
                       "directory)",
                       url);
  q = strchr(p, '?');
  if (q != NULL && strcmp(q, "?synchronous=normal") != 0 && strcmp(q, "?synchronous=full") != 0)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--queue %s: the only option is ?synchronous=normal (or full)", url);
  if (durable != NULL)
    *durable = q == NULL || strcmp(q, "?synchronous=normal") != 0;
  len = q != NULL ? (size_t)(q - p) : strlen(p);
  while (len > 1 && p[len - 1] == '/')
    len--;
  if (len >= MQPROC__DIRQ_SPOOL_MAX)
    return mqproc__err(err, MQPROC_ECONFIG, "--queue %s: the path is too long", url);
  memcpy(out, p, len);
  out[len] = '\0';
  return MQPROC_OK;
}

int mqproc__dirq_sync(int dirfd, const char *what, char *err) {
  if (fsync(dirfd) != 0)
    return mqproc__err(err, MQPROC_ESYS, "fsync %s: %s", what, strerror(errno));
  return MQPROC_OK;
}

/* fsync() of the directory at path. */
static int sync_path(const char *path, char *err) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
  if (fd < 0)
    return mqproc__err(err, MQPROC_ESYS, "%s: %s", path, strerror(errno));
  rc = mqproc__dirq_sync(fd, path, err);
  close(fd);
  return rc;
}

/* mkdir -p of the spool itself (each missing parent made and fsynced into its own): the
 * operator's path, links allowed. */
static int make_spool(const char *spool, char *err) {
  char path[MQPROC__DIRQ_SPOOL_MAX], parent[MQPROC__DIRQ_SPOOL_MAX];
  struct stat st;
  if (stat(spool, &st) == 0)
    return S_ISDIR(st.st_mode) ? MQPROC_OK
                               : mqproc__err(err, MQPROC_ESYS, "%s is no directory", spool);
  snprintf(path, sizeof(path), "%s", spool);
  for (char *p = path + 1;; p++) {
    char c = *p, *slash;
    if (c != '/' && c != '\0')
      continue;
    *p = '\0';
    snprintf(parent, sizeof(parent), "%s", path);
    slash = strrchr(parent, '/');
    if (slash == parent)
      slash[1] = '\0';
    else if (slash != NULL)
      *slash = '\0';
    if (mqproc__mkdir(path) == 0) { /* private, or the group's: util.h */
      int rc = sync_path(parent, err);
      if (rc != MQPROC_OK)
        return rc;
    } else if (errno != EEXIST || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
      return mqproc__err(err, MQPROC_ESYS, "cannot create %s: %s", path,
                         errno == EEXIST ? "it exists and is no directory" : strerror(errno));
    }
    *p = c;
    if (c == '\0')
      return MQPROC_OK;
  }
}

/* Opens parent/name as a directory into *fd, following no link; made first when create
 * (a new one fsynced into parent). path names it in err. */
static int open_dir_at(int parent, const char *name, int create, const char *path, int *fd,
                       char *err) {
  struct stat st;
  if (create && mqproc__mkdirat(parent, name) == 0 && fsync(parent) != 0)
    return mqproc__err(err, MQPROC_ESYS, "fsync of the directory holding %s: %s", path,
                       strerror(errno));
  if ((*fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
    return MQPROC_OK;
  if (errno == ELOOP || errno == ENOTDIR)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "%s is %s: refused (a queue's directories are used as they are, never "
                       "through a link)",
                       path,
                       fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)
                           ? "a symbolic link"
                           : "no directory");
  if (errno == ENOENT)
    return mqproc__err(err, MQPROC_EBROKER_UNROUTABLE, "no queue directory %s", path);
  return mqproc__err(err, MQPROC_ESYS, "cannot open %s: %s", path, strerror(errno));
}

static const char *const SUB_NAMES[MQPROC__DIRQ_NSUB] = {"tmp", "new", "cur", "failed"};

void mqproc__dirq_init(mqproc__dirq_q_t *q) {
  q->fd = -1;
  for (int i = 0; i < MQPROC__DIRQ_NSUB; i++)
    q->sub[i] = -1;
  q->path[0] = '\0';
}

void mqproc__dirq_close(mqproc__dirq_q_t *q) {
  if (q->fd >= 0)
    close(q->fd);
  for (int i = 0; i < MQPROC__DIRQ_NSUB; i++)
    if (q->sub[i] >= 0)
      close(q->sub[i]);
  mqproc__dirq_init(q);
}

int mqproc__dirq_open(const char *spool, const char *queue, int create, mqproc__dirq_q_t *q,
                      char *err) {
  char sub[MQPROC__DIRQ_QDIR_MAX + 16];
  int sfd, rc;
  mqproc__dirq_init(q);
  if (queue[0] == '\0' || queue[0] == '.' || strchr(queue, '/') != NULL ||
      strlen(queue) > MQPROC__DIRQ_NAME_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "'%s' cannot name a queue directory", queue);
  if (create && (rc = make_spool(spool, err)) != MQPROC_OK)
    return rc;
  if ((sfd = open(spool, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
    return mqproc__err(err, errno == ENOENT ? MQPROC_EBROKER_UNROUTABLE : MQPROC_ESYS,
                       "the spool %s: %s", spool, strerror(errno));
  snprintf(q->path, sizeof(q->path), "%s/%s", spool, queue);
  rc = open_dir_at(sfd, queue, create, q->path, &q->fd, err);
  close(sfd);
  for (int i = 0; rc == MQPROC_OK && i < MQPROC__DIRQ_NSUB; i++) {
    snprintf(sub, sizeof(sub), "%s/%s", q->path, SUB_NAMES[i]);
    rc = open_dir_at(q->fd, SUB_NAMES[i], create, sub, &q->sub[i], err);
  }
  if (rc != MQPROC_OK)
    mqproc__dirq_close(q);
  return rc;
}

int mqproc__dirq_make(const char *spool, const char *queue, char *qdir, char *err) {
  mqproc__dirq_q_t q;
  int rc = mqproc__dirq_open(spool, queue, 1, &q, err);
  if (rc == MQPROC_OK)
    snprintf(qdir, MQPROC__DIRQ_QDIR_MAX, "%s", q.path);
  mqproc__dirq_close(&q);
  return rc;
}

void mqproc__dirq_name(int priority, int again, char *out, size_t n) {
  static atomic_ulong counter;
  static char host[64];
  struct timeval tv;
  if (host[0] == '\0') { /* the name's separators and path characters stay out of it */
    char h[64] = "localhost";
    gethostname(h, sizeof(h) - 1);
    h[sizeof(h) - 1] = '\0';
    for (char *c = h; *c != '\0'; c++)
      if (*c == '/' || *c == '-' || *c == '.')
        *c = '_';
    snprintf(host, sizeof(host), "%s", h);
  }
  priority = priority < 0 ? 0 : priority > MQPROC__DIRQ_MAX_PRIORITY ? 99 : priority;
  gettimeofday(&tv, NULL);
  snprintf(out, n, "%02d-%016llx-%s-%d-%lu%s", MQPROC__DIRQ_MAX_PRIORITY - priority,
           (unsigned long long)tv.tv_sec * 1000000ULL + (unsigned long long)tv.tv_usec, host,
           (int)getpid(), (unsigned long)atomic_fetch_add(&counter, 1), again ? ".r" : "");
}

int mqproc__dirq_name_priority(const char *name) {
  if (name[0] >= '0' && name[0] <= '9' && name[1] >= '0' && name[1] <= '9' && name[2] == '-')
    return MQPROC__DIRQ_MAX_PRIORITY - ((name[0] - '0') * 10 + (name[1] - '0'));
  return 0;
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    len -= (size_t)w;
  }
  return 0;
}

int mqproc__dirq_write(const mqproc__dirq_q_t *q, const mqproc__dirq_msg_t *m, char *name_out,
                       int *fd_out, char *err) {
  char *env = NULL;
  int fd, ok;
  *fd_out = -1;
  if (m->content_type != NULL || m->message_id != NULL || m->headers_json != NULL) {
    json_t *meta = json_object(),
           *h = m->headers_json != NULL ? json_loads(m->headers_json, 0, NULL) : NULL;
    char *text;
    if (m->content_type != NULL)
      json_object_set_new(meta, "content_type", json_string(m->content_type));
    if (m->message_id != NULL)
      json_object_set_new(meta, "message_id", json_string(m->message_id));
    if (json_is_object(h))
      json_object_set(meta, "headers", h);
    json_decref(h);
    text = json_dumps(meta, JSON_COMPACT);
    json_decref(meta);
    env = text != NULL ? mqproc__asprintf(MQPROC__DIRQ_ENVELOPE "%s\n", text) : NULL;
    free(text);
    if (env == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  mqproc__dirq_name(m->priority, 0, name_out, MQPROC__DIRQ_NAME_MAX);
  if ((fd = mqproc__openat_new(q->sub[MQPROC__DIRQ_TMP], name_out,
                               O_WRONLY | O_EXCL | O_NOFOLLOW | O_CLOEXEC)) < 0) { /* 0600/0660 */
    int e = errno;
    free(env);
    return mqproc__err(err, e == ENOENT ? MQPROC_EBROKER_UNROUTABLE : MQPROC_ESYS,
                       "cannot create %s/tmp/%s: %s", q->path, name_out, strerror(e));
  }
  ok = (env == NULL || write_all(fd, env, strlen(env)) == 0) && write_all(fd, m->body, m->len) == 0;
  free(env);
  if (!ok) {
    int e = errno;
    close(fd);
    unlinkat(q->sub[MQPROC__DIRQ_TMP], name_out, 0);
    return mqproc__err(err, MQPROC_ESYS, "cannot write %s/tmp/%s: %s", q->path, name_out,
                       strerror(e));
  }
  *fd_out = fd;
  return MQPROC_OK;
}

void mqproc__dirq_remove(int dirfd, const char *name, int fd, int wfd) {
  if (name != NULL && unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
    MQPROC__WARN("dir queue: cannot remove %s: %s", name, strerror(errno));
  if (fd >= 0)
    close(fd); /* the lock first, then the writer's close (the event) */
  if (wfd >= 0)
    close(wfd);
}

int mqproc__dirq_place(int fd, int flush, int tmp_dir, int dst_dir, const char *name, char *err) {
  int ok = !flush || fdatasync(fd) == 0, e = errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    e = errno;
  }
  if (!ok) {
    unlinkat(tmp_dir, name, 0);
    return mqproc__err(err, MQPROC_ESYS, "cannot write tmp/%s: %s", name, strerror(e));
  }
  if (renameat(tmp_dir, name, dst_dir, name) != 0) {
    e = errno;
    unlinkat(tmp_dir, name, 0);
    return mqproc__err(err, MQPROC_ESYS, "cannot move tmp/%s into place: %s", name, strerror(e));
  }
  return MQPROC_OK;
}

int mqproc__dirq_put(const mqproc__dirq_q_t *q, int sub, const mqproc__dirq_msg_t *m, int sync_dir,
                     char *name_out, char *err) {
  int fd, rc = mqproc__dirq_write(q, m, name_out, &fd, err);
  if (rc == MQPROC_OK)
    rc = mqproc__dirq_place(fd, 1, q->sub[MQPROC__DIRQ_TMP], q->sub[sub], name_out, err);
  if (rc == MQPROC_OK && sync_dir)
    rc = mqproc__dirq_sync(q->sub[sub], q->path, err);
  return rc;
}

/* What a directory entry is, for a reason given to a person. */
static const char *kind_of(mode_t mode) {
  return S_ISDIR(mode)                    ? "a directory"
         : S_ISFIFO(mode)                 ? "a FIFO"
         : S_ISLNK(mode)                  ? "a symbolic link"
         : S_ISSOCK(mode)                 ? "a socket"
         : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
                                          : "not a regular file";
}

int mqproc__dirq_open_entry(int dirfd, const char *name, int flags, struct stat *st,
                            const char **why) {
  int fd = openat(dirfd, name, flags | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC), e;
  *why = NULL;
  if (fd < 0) {
    e = errno;
    if (e == ELOOP || e == EISDIR || e == ENXIO || e == ENODEV || e == ETXTBSY) {
      /* a link, a directory opened for writing, a socket, ...: what is it? */
      *why = fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) == 0 ? kind_of(st->st_mode)
                                                                : "not a regular file";
      return -2;
    }
    errno = e;
    return -1;
  }
  if (fstat(fd, st) != 0) {
    e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *why = kind_of(st->st_mode);
    close(fd);
    return -2;
  }
  if (fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) { /* reads block as a file's do */
    e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

void mqproc__dirq_write_reason(const mqproc__dirq_q_t *q, const char *name, const char *why) {
  char rname[NAME_MAX + 8];
  size_t len = strlen(why);
  int fd, ok;
  snprintf(rname, sizeof(rname), "%.*s.reason", NAME_MAX - 7, name);
  if ((fd = mqproc__openat_new(q->sub[MQPROC__DIRQ_TMP], rname,
                               O_WRONLY | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0 &&
      errno == EEXIST && unlinkat(q->sub[MQPROC__DIRQ_TMP], rname, 0) == 0)
    fd = mqproc__openat_new(q->sub[MQPROC__DIRQ_TMP], rname,
                            O_WRONLY | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    MQPROC__WARN("dir queue: cannot write %s/tmp/%s: %s", q->path, rname, strerror(errno));
    return;
  }
  ok = write_all(fd, why, len) == 0 && write_all(fd, "\n", 1) == 0;
  if (close(fd) != 0 || !ok ||
      renameat(q->sub[MQPROC__DIRQ_TMP], rname, q->sub[MQPROC__DIRQ_FAILED], rname) != 0) {
    MQPROC__WARN("dir queue: cannot write %s/failed/%s: %s", q->path, rname, strerror(errno));
    unlinkat(q->sub[MQPROC__DIRQ_TMP], rname, 0);
  }
}

/* Removes failed/NAME.reason (a reason written for a message that did not come). */
static void drop_reason(const mqproc__dirq_q_t *q, const char *name) {
  char rname[NAME_MAX + 8];
  snprintf(rname, sizeof(rname), "%.*s.reason", NAME_MAX - 7, name);
  unlinkat(q->sub[MQPROC__DIRQ_FAILED], rname, 0);
}

/* The reason goes first, so whoever sees the message in failed/ finds why beside it. */
int mqproc__dirq_to_failed(const mqproc__dirq_q_t *q, int from, const char *name, const char *why) {
  char fresh[MQPROC__DIRQ_NAME_MAX];
  const char *to = name;
  int e;
  for (int round = 0;; round++) {
    if (round > 0 || faccessat(q->sub[MQPROC__DIRQ_FAILED], name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
      /* a name there already (the same job failed before): a fresh one, never over it */
      mqproc__dirq_name(mqproc__dirq_name_priority(name), 0, fresh, sizeof(fresh));
      to = fresh;
    }
    mqproc__dirq_write_reason(q, to, why);
    if (renameat2(q->sub[from], name, q->sub[MQPROC__DIRQ_FAILED], to, RENAME_NOREPLACE) == 0)
      return 1;
    e = errno;
    drop_reason(q, to);
    errno = e;
    if (errno == ENOENT) /* gone meanwhile (another server took it) */
      return 0;
    if (errno != EEXIST || round > 0) {
      MQPROC__WARN("dir queue: cannot move %s/%s/%s to failed/: %s", q->path, SUB_NAMES[from], name,
                   strerror(errno));
      return -1;
    }
  }
}

int mqproc__dirq_parse(const char *data, size_t len, mqproc__dirq_msg_t *m, json_t **meta) {
  size_t el = strlen(MQPROC__DIRQ_ENVELOPE);
  const char *nl;
  memset(m, 0, sizeof(*m));
  *meta = NULL;
  m->body = data;
  m->len = len;
  if (len < el || memcmp(data, MQPROC__DIRQ_ENVELOPE, el) != 0)
    return 0;
  if ((nl = memchr(data + el, '\n', len - el)) == NULL ||
      (*meta = json_loadb(data + el, (size_t)(nl - data) - el, 0, NULL)) == NULL ||
      !json_is_object(*meta)) {
    json_decref(*meta);
    *meta = NULL;
    return -1;
  }
  m->body = nl + 1;
  m->len = len - (size_t)(nl + 1 - data);
  m->content_type = json_string_value(json_object_get(*meta, "content_type"));
  m->message_id = json_string_value(json_object_get(*meta, "message_id"));
  return 0;
}

long mqproc__dirq_count(const mqproc__dirq_q_t *q) {
  int fd = openat(q->sub[MQPROC__DIRQ_NEW], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d;
  struct dirent *e;
  long n = 0;
  if (fd < 0 || (d = fdopendir(fd)) == NULL) {
    if (fd >= 0)
      close(fd);
    return -1;
  }
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

void mqproc__dirq_mark_served(const mqproc__dirq_q_t *q) {
  int fd;
  if (faccessat(q->fd, MQPROC__DIRQ_SERVED, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
    return;
  if ((fd = mqproc__openat_new(q->fd, MQPROC__DIRQ_SERVED, O_WRONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    MQPROC__DEBUG("dir queue %s: cannot leave its %s mark: %s", q->path, MQPROC__DIRQ_SERVED,
                  strerror(errno));
  else
    close(fd);
}

int mqproc__dirq_served(const char *spool, const char *queue) {
  char path[MQPROC__DIRQ_QDIR_MAX + 16];
  struct stat st;
  if (queue[0] == '\0' || queue[0] == '.' || strchr(queue, '/') != NULL)
    return -1;
  snprintf(path, sizeof(path), "%s/%s/%s", spool, queue, MQPROC__DIRQ_SERVED);
  if (lstat(path, &st) == 0)
    return 1;
  return errno == ENOENT || errno == ENOTDIR ? 0 : -1;
}
