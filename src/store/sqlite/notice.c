/* The operators' notices of an SQLite store: see notice.h. */
#include "store/sqlite/notice.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"

#define NOTICE_SUFFIX "-control"
#define NOTICE_MAX_FILE 65536 /* the sender starts the file again beyond this */
#define NOTICE_LINE_MAX 512
/* A backlog past this was not written by senders (they start the file again past
 * NOTICE_MAX_FILE): only its last part is read, so one wake reads a bounded amount (issue
 * 38, F17: 110 MB appended stalled the loop 0.45 s). Notices are hints: what a skipped line
 * asked for reaches the server with its next refresh. */
#define NOTICE_READ_MAX (4 * NOTICE_MAX_FILE)

struct mqproc__sq_notice {
  mqproc__loop_t *loop;
  char db_path[PATH_MAX], path[PATH_MAX];
  int ino;   /* inotify fd, watched by the loop */
  int fd;    /* the notice file, read from off */
  off_t off; /* what was read (or there at the start) */
  void (*cb)(void *ud, const char *payload);
  void *ud;
};

static void notice_path(const char *db_path, char *out, size_t size) {
  snprintf(out, size, "%s%s", db_path, NOTICE_SUFFIX);
}

/* Calls back every whole line appended since off (a file started again: from its start). */
static void read_lines(mqproc__sq_notice_t *n) {
  char buf[4096];
  struct stat st;
  if (fstat(n->fd, &st) != 0)
    return;
  int partial = 0; /* skipped into a line: its rest is not a notice */
  if (st.st_size < n->off)
    n->off = 0; /* the sender started it again */
  if (st.st_size - n->off > NOTICE_READ_MAX) {
    MQPROC__WARN("operators' notices: %lld bytes appended to %s at once (senders keep it "
                 "under %d): only the last %d are read",
                 (long long)(st.st_size - n->off), n->path, NOTICE_MAX_FILE, NOTICE_READ_MAX);
    n->off = st.st_size - NOTICE_READ_MAX;
    partial = 1;
  }
  while (n->off < st.st_size) {
    ssize_t r = pread(n->fd, buf, sizeof(buf) - 1, n->off);
    char *line, *nl;
    size_t used = 0;
    if (r <= 0)
      return;
    buf[r] = '\0';
    for (line = buf; (nl = memchr(line, '\n', (size_t)(buf + r - line))) != NULL; line = nl + 1) {
      *nl = '\0';
      if (!partial && line[0] != '\0' && strlen(line) < NOTICE_LINE_MAX)
        n->cb(n->ud, line);
      partial = 0;
      used = (size_t)(nl + 1 - buf);
    }
    if (used == 0) { /* no whole line yet (or one too long): wait, or skip it */
      if (r == (ssize_t)sizeof(buf) - 1)
        n->off += r;
      return;
    }
    n->off += (off_t)used;
  }
}

/* The mode a notice file is made with: the database's, so whoever may write the database
 * may send notices (as SQLite does for its -wal file); mqproc__file_mode() without one. */
static mode_t notice_mode(const char *db_path) {
  struct stat db;
  return stat(db_path, &db) == 0 ? (db.st_mode & 0666) : mqproc__file_mode();
}

/* Opens (makes) the notice file and watches it; 0, or -1 with errno (and *why set when the
 * file is refused). Never blocks: opened O_NONBLOCK (a FIFO planted there by whoever may
 * write the database's directory would otherwise stop the loop until someone writes to
 * it), then only a regular file of this server's user is kept. */
static int open_watch(mqproc__sq_notice_t *n, off_t *size, const char **why) {
  struct stat st;
  mode_t mode = notice_mode(n->db_path);
  int e;
  *why = NULL;
  if ((n->fd = open(n->path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                    mode)) >= 0)
    (void)fchmod(n->fd, mode); /* made now: the umask does not narrow it */
  else if (errno == EEXIST)
    n->fd = open(n->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (n->fd < 0)
    return -1;
  if (fstat(n->fd, &st) != 0)
    goto out_close;
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    *why = !S_ISREG(st.st_mode) ? "it is not a regular file" : "another user owns it";
    errno = EPERM;
    goto out_close;
  }
  if (inotify_add_watch(n->ino, n->path, IN_MODIFY | IN_DELETE_SELF | IN_MOVE_SELF) >= 0) {
    *size = st.st_size;
    return 0;
  }
out_close:
  e = errno;
  close(n->fd);
  n->fd = -1;
  errno = e;
  return -1;
}

/* Why open_watch failed, for the log. */
static const char *open_failed(const char *why) {
  return why != NULL ? why : strerror(errno);
}

static void on_io(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__sq_notice_t *n = ud;
  char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
  const char *why;
  int gone = 0;
  ssize_t r;
  off_t size;
  (void)loop;
  while ((r = read(fd, ev, sizeof(ev))) > 0) /* "appended to", or the file went away */
    for (char *p = ev; p < ev + r;
         p += sizeof(struct inotify_event) + ((const struct inotify_event *)p)->len)
      gone |= (((const struct inotify_event *)p)->mask &
               (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) != 0;
  read_lines(n);
  if (gone && n->fd >= 0) { /* removed or replaced (a restore): watch the new one */
    close(n->fd);
    n->fd = -1;
    if (open_watch(n, &size, &why) != 0)
      MQPROC__WARN("operators' notices: %s went away and cannot be made again (%s): pause, "
                   "resume and cancel reach this server with its next refresh",
                   n->path, open_failed(why));
    else {
      n->off = 0; /* a sender may have made it with its line already (a line heard twice
                     costs a refresh) */
      read_lines(n);
    }
  }
}

mqproc__sq_notice_t *mqproc__sq_notice_watch(const char *db_path, mqproc__loop_t *loop,
                                             void (*cb)(void *ud, const char *payload), void *ud) {
  mqproc__sq_notice_t *n = calloc(1, sizeof(*n));
  const char *why = NULL;
  off_t size = 0;
  if (n == NULL)
    return NULL;
  snprintf(n->db_path, sizeof(n->db_path), "%s", db_path);
  notice_path(db_path, n->path, sizeof(n->path));
  n->loop = loop;
  n->cb = cb;
  n->ud = ud;
  n->fd = -1;
  if ((n->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0 || open_watch(n, &size, &why) != 0 ||
      mqproc__loop_io(loop, n->ino, on_io, n) != MQPROC_OK) {
    MQPROC__WARN("operators' notices: cannot watch %s (%s): pause, resume and cancel reach this "
                 "server with its next refresh instead",
                 n->path, open_failed(why));
    if (n->fd >= 0)
      close(n->fd);
    if (n->ino >= 0)
      close(n->ino);
    free(n);
    return NULL;
  }
  n->off = size; /* earlier notices are old news */
  return n;
}

void mqproc__sq_notice_free(mqproc__sq_notice_t *n) {
  if (n == NULL)
    return;
  mqproc__loop_io(n->loop, n->ino, NULL, NULL);
  close(n->ino);
  if (n->fd >= 0)
    close(n->fd);
  free(n);
}

int mqproc__sq_notice_send(const char *db_path, const char *payload) {
  char path[PATH_MAX], line[NOTICE_LINE_MAX + 1];
  struct stat st;
  int fd, len, rc = 0;
  notice_path(db_path, path, sizeof(path));
  len = snprintf(line, sizeof(line), "%s\n", payload);
  if (len <= 1 || len >= (int)sizeof(line) || strchr(payload, '\n') != NULL) {
    errno = EINVAL;
    return -1;
  }
  /* not blocking on a FIFO there (no reader: ENXIO; a reader: refused below) */
  if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                 notice_mode(db_path))) < 0)
    return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  if (st.st_size > NOTICE_MAX_FILE && ftruncate(fd, 0) != 0)
    rc = -1;
  if (rc == 0 && write(fd, line, (size_t)len) != len) /* O_APPEND: one write, whole */
    rc = -1;
  close(fd);
  return rc;
}
