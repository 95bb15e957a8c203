/* The dir:// broker's looks (broker/dir.c): dead holders' files in cur/ taken back, at a
 * holder's last close (IN_CLOSE_WRITE) or by a look at all of cur/; files abandoned in
 * tmp/ purged; the timerfd armed for the next look, purge or recheck. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "broker/dir_int.h"
#include "base/log.h"
#include "base/util.h"

/* ---- dead holders ------------------------------------------------------------------- */

/* cur/NAME back to new/, marked, when nobody holds its lock (ours are held by our own
 * fds): 1 when it went back, -1 when it is held, 0 when it is gone (settled, or taken back
 * by another server). Opened for reading: no IN_CLOSE_WRITE for the other servers; without
 * blocking and following no link: an entry that is no regular file goes to failed/. */
static int take_back_one(dirb_t *b, const char *name) {
  char to[NAME_MAX + 1];
  const char *what;
  struct stat st;
  size_t len = strlen(name);
  int fd, moved = 0, again = len > 2 && strcmp(name + len - 2, ".r") == 0;
  int curd = b->q.sub[MQPROC__DIRQ_CUR], newd = b->q.sub[MQPROC__DIRQ_NEW];
  if ((fd = mqproc__dirq_open_entry(curd, name, DIRB_LOCK_OPEN(b), &st, &what)) == -2) {
    char why[160];
    snprintf(why, sizeof(why), "%s in cur/, not a regular file: never opened", what);
    if (mqproc__dirq_to_failed(&b->q, MQPROC__DIRQ_CUR, name, why) == 1)
      MQPROC__WARN("dir queue %s: cur/%s is %s: moved to failed/ unread", b->qdir, name, what);
    return 0;
  }
  if (fd < 0)
    return 0;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && !b->warned) { /* not tried: left where it is, said once */
      b->warned = 1;
      MQPROC__WARN("dir queue %s: cannot try the lock of cur/%s: %s", b->qdir, name,
                   strerror(errno));
    }
    close(fd);
    return -1;
  }
  snprintf(to, sizeof(to), "%.*s%s", NAME_MAX - 2, name, again ? "" : ".r");
  if (renameat2(curd, name, newd, to, RENAME_NOREPLACE) == 0) {
    moved = 1;
  } else if (errno == EEXIST) {
    char fresh[MQPROC__DIRQ_NAME_MAX]; /* never over another job: a fresh name */
    mqproc__dirq_name(mqproc__dirq_name_priority(name), 1, fresh, sizeof(fresh));
    moved = renameat(curd, name, newd, fresh) == 0;
  }
  close(fd);
  return moved;
}

void mqproc__dir_check_tree(dirb_t *b) {
  static const char *const names[MQPROC__DIRQ_NSUB] = {"tmp", "new", "cur", "failed"};
  struct stat held, now;
  for (int i = 0; i < MQPROC__DIRQ_NSUB && !b->replaced; i++) {
    if (fstat(b->q.sub[i], &held) != 0)
      continue;
    if (held.st_nlink == 0 || fstatat(b->q.fd, names[i], &now, AT_SYMLINK_NOFOLLOW) != 0 ||
        now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
      b->replaced = 1;
      MQPROC__ERROR("dir queue %s: %s/ was removed or replaced (by a link?) since this server "
                    "opened it: the server goes on with the directory it opened and never "
                    "follows the new entry; restore the queue's directories and restart the "
                    "server",
                    b->qdir, names[i]);
    }
  }
}

/* Files in cur/ nobody holds a lock on: their server died. Back to new/, marked. */
void mqproc__dir_take_back(dirb_t *b) {
  int fd = openat(b->q.sub[MQPROC__DIRQ_CUR], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), n = 0;
  DIR *d;
  struct dirent *e;
  if (fd < 0 || (d = fdopendir(fd)) == NULL) {
    if (fd >= 0)
      close(fd);
    return;
  }
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.' && take_back_one(b, e->d_name) == 1)
      n++;
  closedir(d);
  if (n > 0)
    MQPROC__INFO("dir queue %s: %d job(s) of a server that died went back to new/", b->qdir, n);
}

/* A holder closed cur/NAME for the last time (IN_CLOSE_WRITE): when the file is still
 * there, unlocked, its holder died; when the lock still shows, the close was reported
 * before the kernel dropped it: looked at again shortly (4 times: 5, 20, 80, 320 ms). */
void mqproc__dir_closed_in_cur(dirb_t *b, const char *name, int tries, int64_t now) {
  int r;
  for (const held_t *h = b->held; h != NULL; h = h->next)
    if (strcmp(h->name, name) == 0)
      return; /* ours */
  for (int i = 0; tries == 0 && i < b->n_rechecks; i++)
    if (strcmp(b->rechecks[i].name, name) == 0)
      return; /* looked at again already */
  r = take_back_one(b, name);
  if (r == 1)
    MQPROC__INFO("dir queue %s: job %s of a server that died went back to new/", b->qdir, name);
  if (r != -1 || tries >= 4)
    return;
  if (b->n_rechecks == DIRB_RECHECKS) { /* too many at once: a full look soon instead */
    b->looked_ms = now - b->look_every_ms + LOOK_REREAD_MS;
    return;
  }
  recheck_t *c = &b->rechecks[b->n_rechecks++];
  snprintf(c->name, sizeof(c->name), "%.*s", NAME_MAX, name);
  c->tries = tries + 1;
  c->due_ms = now + (5 << (2 * tries));
}

void mqproc__dir_run_rechecks(dirb_t *b, int64_t now) {
  int n = b->n_rechecks, nd = 0;
  recheck_t due[DIRB_RECHECKS];
  if (n == 0)
    return; /* every pump: nothing to copy */
  b->n_rechecks = 0;
  for (int i = 0; i < n; i++) /* keep what is not due; mqproc__dir_closed_in_cur() may add again */
    if (b->rechecks[i].due_ms <= now)
      due[nd++] = b->rechecks[i];
    else
      b->rechecks[b->n_rechecks++] = b->rechecks[i];
  for (int i = 0; i < nd; i++)
    mqproc__dir_closed_in_cur(b, due[i].name, due[i].tries, now);
}

/* The look's interval: LOOK_REREAD_MS while a name passed over waits to be read again. */
int64_t mqproc__dir_look_due(const dirb_t *b) {
  return b->looked_ms +
         (b->reread && b->look_every_ms > LOOK_REREAD_MS ? LOOK_REREAD_MS : b->look_every_ms);
}

/* Arms the timerfd for the earliest of the look, the purge and the rechecks (a system
 * call only when that changed). */
void mqproc__dir_arm(dirb_t *b, int64_t now) {
  int64_t due = mqproc__dir_look_due(b), in;
  struct itimerspec its = {0};
  if (b->purged_ms + PURGE_EVERY_MS < due)
    due = b->purged_ms + PURGE_EVERY_MS;
  for (int i = 0; i < b->n_rechecks; i++)
    if (b->rechecks[i].due_ms < due)
      due = b->rechecks[i].due_ms;
  if (due == b->armed_ms)
    return;
  in = due > now ? due - now : 1;
  its.it_value.tv_sec = in / 1000;
  its.it_value.tv_nsec = (long)(in % 1000) * 1000000L;
  if (timerfd_settime(b->tfd, 0, &its, NULL) == 0)
    b->armed_ms = due;
}

/* Files in tmp/ nobody finished (a producer or a server that died between its write and
 * its rename): removed once untouched for b->abandoned_ms (an hour), as Directory::Queue's purge
 * does; a slow writer's file is touched by its writes. Untouched by the later of its mtime
 * and ctime: a file copied in with its old mtime kept (cp -p, rsync -t, tar) was changed
 * (ctime) when it arrived. Only regular files, never through a link. */
void mqproc__dir_purge_tmp(dirb_t *b) {
  int tmpd = b->q.sub[MQPROC__DIRQ_TMP], fd = openat(tmpd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d;
  struct dirent *e;
  struct stat st;
  int64_t now = mqproc__wall_ms();
  int n = 0;
  if (fd < 0 || (d = fdopendir(fd)) == NULL) {
    if (fd >= 0)
      close(fd);
    return;
  }
  while ((e = readdir(d)) != NULL) {
    int64_t mtime, ctime;
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
      continue;
    if (fstatat(tmpd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    mtime = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    ctime = (int64_t)st.st_ctim.tv_sec * 1000 + st.st_ctim.tv_nsec / 1000000;
    if (now - (mtime > ctime ? mtime : ctime) > b->abandoned_ms &&
        unlinkat(tmpd, e->d_name, 0) == 0)
      n++;
  }
  closedir(d);
  if (n > 0)
    MQPROC__WARN("dir queue %s: removed %d abandoned file(s) from tmp/ (untouched for %lld s: "
                 "their writer died before its rename)",
                 b->qdir, n, (long long)(b->abandoned_ms / 1000));
}
