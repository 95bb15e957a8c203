/* The pieces of the runner that need nothing but libc (runner/int.h declares them): the
 * spawn helper, a static program of its own (helper_main.c), is built from this
 * file, helper.c and runner/child.c alone. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/int.h"

int mqproc__fd_lift(int fd, int min) {
  int hi, e;
  if (fd >= min)
    return fd;
  hi = fcntl(fd, F_DUPFD_CLOEXEC, min);
  e = errno;
  close(fd);
  errno = e;
  return hi;
}

int mqproc__fd_slurp(int fd, char **out, size_t *len) {
  struct stat st;
  size_t off = 0;
  char *buf;
  if (fstat(fd, &st) < 0)
    return -1;
  if (st.st_size < 0 || st.st_size > (1L << 31)) {
    errno = EFBIG;
    return -1;
  }
  if ((buf = malloc((size_t)st.st_size + 1)) == NULL) {
    errno = ENOMEM;
    return -1;
  }
  while (off < (size_t)st.st_size) {
    ssize_t n = pread(fd, buf + off, (size_t)st.st_size - off, (off_t)off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int e = n < 0 ? errno : EIO; /* shorter than it said */
      free(buf);
      errno = e;
      return -1;
    }
    off += (size_t)n;
  }
  buf[off] = '\0';
  *out = buf;
  *len = off;
  return 0;
}

int mqproc__fd_copy(int from, int to) {
  char buf[16384];
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(from, buf, sizeof(buf), off), w = 0;
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? -1 : 0;
    while (w < n) {
      ssize_t k = write(to, buf + w, (size_t)(n - w));
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        return -1;
      w += k;
    }
    off += n;
  }
}

/* ---- job log files, opened as joblog.h says ----------------------------------------- */

int mqproc__joblog_sub_open(const char *dir, const char *sub, uid_t uid) {
  struct stat st;
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), sfd = -1, e;
  if (dfd < 0)
    return -1;
  if (mkdirat(dfd, sub, 0750) == 0 || errno == EEXIST)
    sfd = openat(dfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  e = errno;
  close(dfd);
  if (sfd >= 0 && (fstat(sfd, &st) < 0 || st.st_uid != uid)) {
    e = EPERM; /* another user's directory: refused */
    close(sfd);
    sfd = -1;
  }
  errno = e == ENOTDIR ? ELOOP : e; /* O_NOFOLLOW|O_DIRECTORY on a link */
  return sfd;
}

int mqproc__joblog_file_open(int sfd, const char *name, uid_t uid) {
  struct stat st;
  int fd =
      openat(sfd, name,
             O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0640);
  if (fd < 0)
    return -1;
  if (fstat(fd, &st) < 0 || st.st_uid != uid || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
      fcntl(fd, F_SETFL, O_APPEND) != 0) {
    close(fd);
    errno = EPERM;
    return -1;
  }
  return fd;
}

/* ---- messages with fds (the worker runner's and the spawn helper's sockets) ----------- */

#define MAX_PASSED_FDS 4

typedef union fd_control {
  struct cmsghdr align;
  char buf[CMSG_SPACE(MAX_PASSED_FDS * sizeof(int))];
} fd_control_t;

int mqproc__send_with_fds(int sock, const void *buf, size_t len, const int *fds, int nfds) {
  struct iovec iov = {(void *)buf, len};
  struct msghdr mh;
  fd_control_t ctl;
  ssize_t n;
  memset(&mh, 0, sizeof(mh));
  memset(&ctl, 0, sizeof(ctl));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (nfds > 0) {
    struct cmsghdr *c;
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
  }
  do
    n = sendmsg(sock, &mh, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n >= 0 && n != (ssize_t)len) {
    errno = EMSGSIZE;
    n = -1;
  }
  return n < 0 ? -1 : 0;
}

ssize_t mqproc__recv_fds(int sock, void *buf, size_t size, int *fds, int max_fds, int *nfds,
                         int flags) {
  struct iovec iov = {buf, size};
  struct msghdr mh;
  fd_control_t ctl;
  ssize_t n;
  int got = 0;
  memset(&mh, 0, sizeof(mh));
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = ctl.buf;
  mh.msg_controllen = sizeof(ctl.buf);
  *nfds = 0;
  do
    n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | flags);
  while (n < 0 && errno == EINTR);
  if (n <= 0)
    return n;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
      continue;
    for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (got < max_fds)
        fds[got++] = fd;
      else
        close(fd);
    }
  }
  if (!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
    *nfds = got;
    return n;
  }
  while (got > 0)
    close(fds[--got]);
  errno = EPROTO;
  return -1;
}

int mqproc__recv_with_fds(int sock, void *buf, size_t len, int *fds, int max_fds, int *nfds) {
  ssize_t n = mqproc__recv_fds(sock, buf, len, fds, max_fds, nfds, 0);
  if (n <= 0 || n == (ssize_t)len)
    return n < 0 ? -1 : (int)(n > 0);
  while (*nfds > 0)
    close(fds[--*nfds]);
  errno = EPROTO;
  return -1;
}

/* ---- in a child between fork and execve ---------------------------------------------- */

__attribute__((noreturn)) void mqproc__child_fail(int report_fd, int stage) {
  mqproc__child_report_t rep = {stage, errno};
  /* one write below PIPE_BUF is atomic; if it fails the parent sees an exit status */
  ssize_t n = write(report_fd, &rep, sizeof(rep));
  (void)n;
  _exit(127);
}
