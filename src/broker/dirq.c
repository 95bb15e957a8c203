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

#include "log.h"
#include "mqproc/mqproc.h"
#include "util.h"

static const char *const SUBDIRS[] = {"tmp", "new", "cur", "failed"};

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

int mqproc__dirq_sync(const char *dir, char *err) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
  if (fd < 0)
    return mqproc__err(err, MQPROC_ESYS, "%s: %s", dir, strerror(errno));
  rc = fsync(fd);
  close(fd);
  if (rc != 0)
    return mqproc__err(err, MQPROC_ESYS, "fsync %s: %s", dir, strerror(errno));
  return MQPROC_OK;
}

/* mkdir when missing; a new directory is fsynced into its parent. */
static int make_dir(const char *path, const char *parent, char *err) {
  if (mqproc__mkdir(path) == 0) /* private, or the group's: util.h */
    return mqproc__dirq_sync(parent, err);
  if (errno == EEXIST) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
      return MQPROC_OK;
    return mqproc__err(err, MQPROC_ESYS, "%s exists and is no directory", path);
  }
  return mqproc__err(err, MQPROC_ESYS, "cannot create %s: %s", path, strerror(errno));
}

/* mkdir -p of the spool itself (each missing parent made and fsynced into its own). */
static int make_spool(const char *spool, char *err) {
  char path[MQPROC__DIRQ_SPOOL_MAX], parent[MQPROC__DIRQ_SPOOL_MAX];
  struct stat st;
  int rc;
  if (stat(spool, &st) == 0)
    return S_ISDIR(st.st_mode) ? MQPROC_OK
                               : mqproc__err(err, MQPROC_ESYS, "%s is no directory", spool);
  snprintf(path, sizeof(path), "%s", spool);
  for (char *p = path + 1;; p++) {
    if (*p != '/' && *p != '\0')
      continue;
    {
      char c = *p;
      *p = '\0';
      snprintf(parent, sizeof(parent), "%s", path);
      {
        char *slash = strrchr(parent, '/');
        if (slash == parent)
          slash[1] = '\0';
        else if (slash != NULL)
          *slash = '\0';
      }
      if ((rc = make_dir(path, parent, err)) != MQPROC_OK)
        return rc;
      *p = c;
      if (c == '\0')
        return MQPROC_OK;
    }
  }
}

int mqproc__dirq_make(const char *spool, const char *queue, char *qdir, char *err) {
  char sub[PATH_MAX];
  int rc;
  if ((rc = make_spool(spool, err)) != MQPROC_OK)
    return rc;
  if (queue[0] == '\0' || queue[0] == '.' || strchr(queue, '/') != NULL ||
      strlen(queue) > MQPROC__DIRQ_NAME_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "'%s' cannot name a queue directory", queue);
  snprintf(qdir, MQPROC__DIRQ_QDIR_MAX, "%s/%s", spool, queue);
  if ((rc = make_dir(qdir, spool, err)) != MQPROC_OK)
    return rc;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(SUBDIRS); i++) {
    snprintf(sub, sizeof(sub), "%s/%s", qdir, SUBDIRS[i]);
    if ((rc = make_dir(sub, qdir, err)) != MQPROC_OK)
      return rc;
  }
  return MQPROC_OK;
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

int mqproc__dirq_write(const char *qdir, const char *sub, const mqproc__dirq_msg_t *m,
                       char *name_out, char *tmp, char *dst, int *fd_out, char *err) {
  char q[MQPROC__DIRQ_QDIR_MAX], dir[MQPROC__DIRQ_QDIR_MAX + 16];
  char *env = NULL;
  struct stat st;
  int fd, ok;
  *fd_out = -1;
  if (strlen(qdir) >= sizeof(q) || strlen(sub) > 8)
    return mqproc__err(err, MQPROC_EINVAL, "the queue's path is too long: %s", qdir);
  snprintf(q, sizeof(q), "%s", qdir);
  snprintf(dir, sizeof(dir), "%s/%s", q, sub);
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return mqproc__err(err, MQPROC_EBROKER_UNROUTABLE, "no queue directory %s", dir);
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
  snprintf(tmp, PATH_MAX, "%s/tmp/%s", q, name_out);
  snprintf(dst, PATH_MAX, "%s/%s", dir, name_out);
  if ((fd = mqproc__open_new(tmp, O_WRONLY | O_EXCL | O_CLOEXEC)) < 0) { /* 0600/0660 */
    free(env);
    return mqproc__err(err, errno == ENOENT ? MQPROC_EBROKER_UNROUTABLE : MQPROC_ESYS,
                       "cannot create %s: %s", tmp, strerror(errno));
  }
  ok = (env == NULL || write_all(fd, env, strlen(env)) == 0) && write_all(fd, m->body, m->len) == 0;
  free(env);
  if (!ok) {
    int e = errno;
    close(fd);
    unlink(tmp);
    return mqproc__err(err, MQPROC_ESYS, "cannot write %s: %s", tmp, strerror(e));
  }
  *fd_out = fd;
  return MQPROC_OK;
}

void mqproc__dirq_remove(const char *path, int fd, int wfd) {
  if (path != NULL && unlink(path) != 0 && errno != ENOENT)
    MQPROC__WARN("dir queue: cannot remove %s: %s", path, strerror(errno));
  if (fd >= 0)
    close(fd); /* the lock first, then the writer's close (the event) */
  if (wfd >= 0)
    close(wfd);
}

int mqproc__dirq_place(int fd, int flush, const char *tmp, const char *dst, char *err) {
  int ok = !flush || fdatasync(fd) == 0, e = errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    e = errno;
  }
  if (!ok) {
    unlink(tmp);
    return mqproc__err(err, MQPROC_ESYS, "cannot write %s: %s", tmp, strerror(e));
  }
  if (rename(tmp, dst) != 0) {
    e = errno;
    unlink(tmp);
    return mqproc__err(err, MQPROC_ESYS, "cannot move %s to %s: %s", tmp, dst, strerror(e));
  }
  return MQPROC_OK;
}

int mqproc__dirq_put(const char *qdir, const char *sub, const mqproc__dirq_msg_t *m, int sync_dir,
                     char *name_out, char *err) {
  char tmp[PATH_MAX], dst[PATH_MAX];
  int fd, rc = mqproc__dirq_write(qdir, sub, m, name_out, tmp, dst, &fd, err);
  if (rc == MQPROC_OK)
    rc = mqproc__dirq_place(fd, 1, tmp, dst, err);
  if (rc == MQPROC_OK && sync_dir) {
    *strrchr(dst, '/') = '\0';
    rc = mqproc__dirq_sync(dst, err);
  }
  return rc;
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

long mqproc__dirq_count(const char *qdir) {
  char dir[PATH_MAX];
  DIR *d;
  struct dirent *e;
  long n = 0;
  snprintf(dir, sizeof(dir), "%s/new", qdir);
  if ((d = opendir(dir)) == NULL)
    return -1;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}
