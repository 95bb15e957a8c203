/* The workspace lock (wslock.h). */
#include "base/wslock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"

int mqproc__wslock(const char *path, int wait, int *fd, char *err) {
  for (;;) {
    struct stat held, now;
    int f = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), r;
    if (f < 0)
      return mqproc__err(err, -1, "cannot open the METS %.300s: %s", path,
                         errno == ELOOP ? "a symbolic link" : strerror(errno));
    if (fstat(f, &held) != 0 || !S_ISREG(held.st_mode)) {
      close(f);
      return mqproc__err(err, -1, "the METS %.300s is not a regular file", path);
    }
    while ((r = flock(f, LOCK_EX | (wait ? 0 : LOCK_NB))) != 0 && errno == EINTR)
      ;
    if (r != 0) {
      int e = errno;
      close(f);
      if (e == EWOULDBLOCK)
        return 1;
      return mqproc__err(err, -1, "cannot lock the METS %.300s: %s", path, strerror(e));
    }
    /* the holder before us may have replaced the file: then lock the one there now */
    if (fstat(f, &held) == 0 && lstat(path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino) {
      *fd = f;
      return 0;
    }
    close(f);
  }
}

int mqproc__wslock_replace(int tmp_fd, char *err) {
  if (flock(tmp_fd, LOCK_EX | LOCK_NB) != 0)
    return mqproc__err(err, -1, "cannot lock the new METS: %s", strerror(errno));
  return 0;
}
