/* Small helpers shared by every module: error buffers, allocation, clocks. */
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

int mqproc__err(char *err, int status, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, MQPROC_ERR_LEN, fmt, ap);
    va_end(ap);
  }
  return status;
}

void *mqproc__malloc(size_t n) {
  return malloc(n == 0 ? 1 : n);
}

void *mqproc__calloc(size_t n, size_t size) {
  return calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
}

void *mqproc__realloc(void *p, size_t n) {
  return realloc(p, n == 0 ? 1 : n);
}

char *mqproc__strdup(const char *s) {
  return s == NULL ? NULL : mqproc__strndup(s, strlen(s));
}

char *mqproc__strndup(const char *s, size_t n) {
  char *d;
  if (s == NULL)
    return NULL;
  d = mqproc__malloc(n + 1);
  if (d == NULL)
    return NULL;
  memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

char *mqproc__asprintf(const char *fmt, ...) {
  va_list ap;
  char *out = NULL;
  va_start(ap, fmt);
  if (vasprintf(&out, fmt, ap) < 0)
    out = NULL;
  va_end(ap);
  return out;
}

static int64_t clock_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- modes of the files mqproc makes (util.h) ---- */

static int g_group_access; /* written once at start, before any thread runs */

void mqproc__set_group_access(int on) {
  g_group_access = on != 0;
}

mode_t mqproc__file_mode(void) {
  return g_group_access ? 0660 : 0600;
}

mode_t mqproc__dir_mode(void) {
  return g_group_access ? 0770 : 0700;
}

int mqproc__mkdirat(int dirfd, const char *name) {
  mode_t mode = mqproc__dir_mode();
  if (mkdirat(dirfd, name, mode) != 0)
    return -1;
  /* made now: the umask (022 is usual) would take the group's write bit away */
  if (g_group_access && fchmodat(dirfd, name, mode, 0) != 0) {
    int e = errno;
    unlinkat(dirfd, name, AT_REMOVEDIR);
    errno = e;
    return -1;
  }
  return 0;
}

int mqproc__mkdir(const char *path) {
  return mqproc__mkdirat(AT_FDCWD, path);
}

int mqproc__openat_new(int dirfd, const char *name, int flags) {
  mode_t mode = mqproc__file_mode();
  int fd = openat(dirfd, name, flags | O_CREAT, mode);
  if (fd >= 0 && (flags & O_EXCL) != 0 && g_group_access && fchmod(fd, mode) != 0) {
    int e = errno;
    close(fd);
    unlinkat(dirfd, name, 0);
    errno = e;
    return -1;
  }
  return fd;
}

int mqproc__open_new(const char *path, int flags) {
  return mqproc__openat_new(AT_FDCWD, path, flags);
}

FILE *mqproc__fopen_new(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mqproc__file_mode());
  FILE *f = NULL;
  if (fd < 0)
    return NULL;
  if ((g_group_access && fchmod(fd, mqproc__file_mode()) != 0) || (f = fdopen(fd, "w")) == NULL) {
    int e = errno;
    close(fd);
    errno = e;
    return NULL;
  }
  return f;
}

int mqproc__url_has_scheme(const char *url, const char *scheme) {
  size_t n = strlen(scheme);
  return url != NULL && strncmp(url, scheme, n) == 0 && strncmp(url + n, "://", 3) == 0;
}

int mqproc__parse_bool(const char *v) {
  if (v == NULL)
    return -1;
  if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on"))
    return 1;
  if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off"))
    return 0;
  return -1;
}

int64_t mqproc__now_ms(void) {
  return clock_ms(CLOCK_MONOTONIC);
}

int64_t mqproc__wall_ms(void) {
  return clock_ms(CLOCK_REALTIME);
}

size_t mqproc__utf8_seq_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0], lo = 0x80, hi = 0xBF;
  size_t len, i;
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4;
  else
    return 0;
  if (c == 0xE0)
    lo = 0xA0;
  else if (c == 0xED)
    hi = 0x9F;
  else if (c == 0xF0)
    lo = 0x90;
  else if (c == 0xF4)
    hi = 0x8F;
  if (n < len || s[1] < lo || s[1] > hi)
    return 0;
  for (i = 2; i < len; i++)
    if ((s[i] & 0xC0) != 0x80)
      return 0;
  return len;
}

const char *mqproc__utf8_clean(const char *s, char **copy) {
  const unsigned char *u = (const unsigned char *)s;
  size_t n = strlen(s), i = 0;
  *copy = NULL;
  while (i < n && mqproc__utf8_seq_len(u + i, n - i) != 0)
    i += mqproc__utf8_seq_len(u + i, n - i);
  if (i == n)
    return s;
  if ((*copy = mqproc__strdup(s)) == NULL)
    return NULL;
  while (i < n) {
    size_t k = mqproc__utf8_seq_len(u + i, n - i);
    if (k == 0) {
      (*copy)[i] = '?';
      k = 1;
    }
    i += k;
  }
  return *copy;
}

void mqproc__utf8_truncate(char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max)
    return;
  while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
    max--; /* s[max] continues a character: cut before its first byte */
  s[max] = '\0';
}

void mqproc__sha256(const void *data, size_t len, unsigned char out[32]) {
  unsigned int n = 32;
  if (EVP_Digest(data, len, out, &n, EVP_sha256(), NULL) != 1)
    memset(out, 0, 32); /* only without memory; a zero hash is recognisably not one */
}

const char *mqproc__network_fs(const char *dir, int *looked) {
  static const struct {
    unsigned long magic;
    const char *name;
  } NET[] = {{0x6969, "NFS"},       {0x517B, "SMB"},      {0xFF534D42, "CIFS"},
             {0xFE534D42, "SMB2"},  {0x00C36400, "Ceph"}, {0x5346414F, "AFS"},
             {0x73757245, "Coda"},  {0x01021997, "9P"},   {0x47504653, "GPFS"},
             {0x0BD00BD0, "Lustre"}};
  struct statfs fs;
  *looked = statfs(dir, &fs) == 0;
  if (!*looked)
    return NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(NET); i++)
    if ((unsigned long)fs.f_type == NET[i].magic)
      return NET[i].name;
  return NULL;
}

int mqproc__pid_is_zombie(int pid) {
  char path[64], buf[512], *paren;
  ssize_t n;
  int fd;
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
    return 0;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = '\0';
  paren = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold anything */
  return paren != NULL && paren[1] == ' ' && paren[2] == 'Z';
}

/* A file that holds a URL (a secret kept off the command line): at most 8 KiB, one URL
 * per line (several: joined by commas, the form --queue takes for a broker list), blank
 * lines and lines starting with '#' skipped, surrounding blanks and CR trimmed. */
char *mqproc__read_url_file(const char *path, int *others_can_read, char *err) {
  char buf[8193], *out = NULL;
  size_t len = 0, used = 0;
  struct stat st;
  ssize_t n;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  *others_can_read = 0;
  if (fd < 0) {
    mqproc__err(err, MQPROC_ECONFIG, "cannot open %s: %s", path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    mqproc__err(err, MQPROC_ECONFIG, "%s is not a regular file", path);
    return NULL;
  }
  *others_can_read = (st.st_mode & S_IROTH) != 0;
  while (len < sizeof(buf) && (n = read(fd, buf + len, sizeof(buf) - len)) != 0) {
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      mqproc__err(err, MQPROC_ECONFIG, "cannot read %s: %s", path, strerror(errno));
      close(fd);
      return NULL;
    }
    len += (size_t)n;
  }
  close(fd);
  if (len >= sizeof(buf)) {
    mqproc__err(err, MQPROC_ECONFIG, "%s is larger than 8 KiB: not a URL file", path);
    return NULL;
  }
  if ((out = mqproc__malloc(len + 1)) == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return NULL;
  }
  for (size_t i = 0; i < len;) {
    size_t end = i, a, b;
    while (end < len && buf[end] != '\n')
      end++;
    for (a = i; a < end && (buf[a] == ' ' || buf[a] == '\t' || buf[a] == '\r'); a++)
      ;
    for (b = end; b > a && (buf[b - 1] == ' ' || buf[b - 1] == '\t' || buf[b - 1] == '\r'); b--)
      ;
    if (b > a && buf[a] != '#') {
      if (memchr(buf + a, '\0', b - a) != NULL) {
        free(out);
        mqproc__err(err, MQPROC_ECONFIG, "%s holds a NUL byte: not a URL file", path);
        return NULL;
      }
      if (used > 0)
        out[used++] = ',';
      memcpy(out + used, buf + a, b - a);
      used += b - a;
    }
    i = end + 1;
  }
  out[used] = '\0';
  if (used == 0) {
    free(out);
    mqproc__err(err, MQPROC_ECONFIG, "%s holds no URL", path);
    return NULL;
  }
  return out;
}

char *mqproc__term_escape(const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  char *out = malloc(4 * n + 1), *o = out;
  if (out == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
        (unsigned char)s[i + 1] <= 0x9f)
      c = (unsigned char)s[++i]; /* a C1 control in UTF-8 (CSI is C2 9B): its code point */
    else if (!((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f)) {
      *o++ = (char)c;
      continue;
    }
    *o++ = '\\';
    *o++ = 'x';
    *o++ = hex[c >> 4];
    *o++ = hex[c & 15];
  }
  *o = '\0';
  return out;
}

void mqproc__print_term(FILE *out, const char *s, size_t n) {
  char *e;
  if (!isatty(fileno(out)) || (e = mqproc__term_escape(s, n)) == NULL) {
    fwrite(s, 1, n, out);
    return;
  }
  fputs(e, out);
  free(e);
}

/* ---- files a client names ---------------------------------------------------------------- */

static const char *kind_of(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISDIR(m)  ? "a directory"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "of another kind";
}

int mqproc__open_untrusted(const char *path, int nofollow, size_t max, size_t *size, char *err) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    int e = errno;
    mqproc__err(err, MQPROC_ESYS, "%s", e == ELOOP ? "a symbolic link" : strerror(e));
    return e == ENOENT || e == ENOTDIR ? -1 : -2;
  }
  if (fstat(fd, &st) != 0) {
    mqproc__err(err, MQPROC_ESYS, "%s", strerror(errno));
    close(fd);
    return -2;
  }
  if (!S_ISREG(st.st_mode)) {
    mqproc__err(err, MQPROC_EINVAL, "not a regular file (%s)", kind_of(st.st_mode));
    close(fd);
    return -2;
  }
  if (max > 0 && (uintmax_t)st.st_size > (uintmax_t)max) {
    mqproc__err(err, MQPROC_EINVAL, "larger than %zu bytes", max);
    close(fd);
    return -2;
  }
  if (size != NULL)
    *size = (size_t)st.st_size;
  return fd;
}

char *mqproc__read_untrusted(const char *path, int nofollow, size_t max, size_t *len, int *why,
                             char *err) {
  size_t size, n = 0;
  char *buf;
  int fd = mqproc__open_untrusted(path, nofollow, max, &size, err);
  *why = fd;
  if (fd < 0)
    return NULL;
  *why = -2;
  if ((buf = mqproc__malloc(size + 1)) == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    close(fd);
    return NULL;
  }
  while (n < size) { /* what the fstat saw: a file that grows meanwhile is read so far */
    ssize_t r = read(fd, buf + n, size - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      mqproc__err(err, MQPROC_ESYS, "cannot be read: %s", strerror(errno));
      free(buf);
      close(fd);
      return NULL;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  close(fd);
  buf[n] = '\0';
  *len = n;
  *why = 0;
  return buf;
}
