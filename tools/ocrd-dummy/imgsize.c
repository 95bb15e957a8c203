/* ocrd-dummy image headers: width and height of PNG, TIFF and JPEG files without decoding. */
#include "imgsize.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "fsio.h"

/* Reads exactly n bytes at off; false on error or end of file. */
static bool rd(int fd, uint64_t off, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    got += (size_t)r;
  }
  return true;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint16_t be16(const unsigned char *p) {
  return (uint16_t)(p[0] << 8 | p[1]);
}

static int png_size(int fd, unsigned long *w, unsigned long *h) {
  unsigned char b[24];
  if (!rd(fd, 0, b, sizeof(b)) || memcmp(b + 12, "IHDR", 4) != 0)
    return -1;
  *w = be32(b + 16);
  *h = be32(b + 20);
  return 0;
}

/* TIFF integers in the file's byte order. */
static uint32_t tiff32(const unsigned char *p, bool le) {
  return le ? (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0] : be32(p);
}
static uint16_t tiff16(const unsigned char *p, bool le) {
  return le ? (uint16_t)(p[1] << 8 | p[0]) : be16(p);
}

/* ImageWidth (256) and ImageLength (257) from IFD0; SHORT or LONG values. */
static int tiff_size(int fd, const unsigned char *hdr, unsigned long *w, unsigned long *h) {
  bool le = hdr[0] == 'I';
  uint32_t ifd = tiff32(hdr + 4, le);
  unsigned char cnt[2], e[12];
  *w = *h = 0;
  if (!rd(fd, ifd, cnt, 2))
    return -1;
  for (uint16_t i = 0, n = tiff16(cnt, le); i < n; i++) {
    uint16_t tag, type;
    uint32_t value;
    if (!rd(fd, (uint64_t)ifd + 2 + 12u * i, e, sizeof(e)))
      return -1;
    tag = tiff16(e, le);
    type = tiff16(e + 2, le);
    if (type != 3 && type != 4)
      continue;
    value = type == 3 ? tiff16(e + 8, le) : tiff32(e + 8, le);
    if (tag == 256)
      *w = value;
    else if (tag == 257)
      *h = value;
  }
  return *w > 0 && *h > 0 ? 0 : -1;
}

/* Walks the JPEG segments up to the first SOFn (not DHT C4, JPG C8, DAC CC). */
static int jpeg_size(int fd, unsigned long *w, unsigned long *h) {
  uint64_t off = 2;
  unsigned char m[2], seg[7];
  for (int guard = 0; guard < 4096; guard++) {
    if (!rd(fd, off, m, 2) || m[0] != 0xFF)
      return -1;
    if (m[1] == 0xFF) { /* fill byte */
      off++;
      continue;
    }
    if (m[1] == 0x01 || (m[1] >= 0xD0 && m[1] <= 0xD7)) { /* no length */
      off += 2;
      continue;
    }
    if (m[1] == 0xD9 || m[1] == 0xDA || !rd(fd, off + 2, seg, sizeof(seg)))
      return -1;
    if (m[1] >= 0xC0 && m[1] <= 0xCF && m[1] != 0xC4 && m[1] != 0xC8 && m[1] != 0xCC) {
      *h = be16(seg + 3);
      *w = be16(seg + 5);
      return 0;
    }
    off += 2 + be16(seg);
  }
  return -1;
}

int dummy_image_size(const char *path, unsigned long *width, unsigned long *height, char *err) {
  static const unsigned char png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  unsigned char hdr[8];
  int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;
  bool known = true;
  if (fd < 0)
    return dummy_err(err, "cannot open image %s: %s", path, strerror(errno));
  if (!rd(fd, 0, hdr, sizeof(hdr)))
    known = false;
  else if (memcmp(hdr, png_sig, 8) == 0)
    rc = png_size(fd, width, height);
  else if (memcmp(hdr, "II*\0", 4) == 0 || memcmp(hdr, "MM\0*", 4) == 0)
    rc = tiff_size(fd, hdr, width, height);
  else if (hdr[0] == 0xFF && hdr[1] == 0xD8)
    rc = jpeg_size(fd, width, height);
  else
    known = false;
  close(fd);
  if (!known)
    return dummy_err(err, "cannot read the size of image %s: not PNG, TIFF or JPEG", path);
  if (rc != 0 || *width == 0 || *height == 0)
    return dummy_err(err, "cannot read the size of image %s: truncated or invalid header", path);
  return 0;
}
