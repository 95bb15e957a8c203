/* Test workspaces for ocrd-dummy: tiny images and a METS, written with libc only. */
#include "ocrd_workspace.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int ows_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  int rc;
  if (f == NULL)
    return -1;
  rc = fwrite(data, 1, len, f) == len ? 0 : -1;
  if (fclose(f) != 0)
    rc = -1;
  return rc;
}

char *ows_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long size;
  if (f == NULL)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)size + 1)) != NULL) {
    if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
      free(buf);
      buf = NULL;
    } else {
      buf[size] = '\0';
      if (len != NULL)
        *len = (size_t)size;
    }
  }
  fclose(f);
  return buf;
}

/* ---- PNG ------------------------------------------------------------------------------ */

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
  crc = ~crc;
  while (n-- > 0) {
    crc ^= *p++;
    for (int k = 0; k < 8; k++)
      crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

static unsigned char *put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
  return p + 4;
}

/* Appends a chunk (length, type, data, CRC over type and data) at p. */
static unsigned char *put_chunk(unsigned char *p, const char *type, const unsigned char *data,
                                size_t n) {
  unsigned char *crc_start = p + 4;
  p = put32(p, (uint32_t)n);
  memcpy(p, type, 4);
  if (n > 0)
    memcpy(p + 4, data, n);
  p += 4 + n;
  return put32(p, crc32_update(0, crc_start, n + 4));
}

/* A zlib stream with one stored (uncompressed) deflate block; raw_len <= 65535. */
static size_t zlib_stored(unsigned char *out, const unsigned char *raw, size_t raw_len) {
  uint32_t a = 1, b = 0;
  out[0] = 0x78; /* CM 8, 32K window */
  out[1] = 0x01; /* FCHECK: 0x7801 % 31 == 0 */
  out[2] = 0x01; /* BFINAL, BTYPE 00 */
  out[3] = (unsigned char)raw_len;
  out[4] = (unsigned char)(raw_len >> 8);
  out[5] = (unsigned char)~raw_len;
  out[6] = (unsigned char)(~raw_len >> 8);
  memcpy(out + 7, raw, raw_len);
  for (size_t i = 0; i < raw_len; i++) {
    a = (a + raw[i]) % 65521;
    b = (b + a) % 65521;
  }
  put32(out + 7 + raw_len, b << 16 | a);
  return 7 + raw_len + 4;
}

int ows_write_png(const char *path, unsigned w, unsigned h) {
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  size_t raw_len = (size_t)h * (w + 1);
  unsigned char ihdr[13], *raw, *z, *png, *p;
  int rc = -1;
  if (raw_len > 65535)
    return -1;
  raw = malloc(raw_len);
  z = malloc(raw_len + 16);
  png = malloc(raw_len + 128);
  if (raw != NULL && z != NULL && png != NULL) {
    for (size_t i = 0; i < raw_len; i++)
      raw[i] = i % (w + 1) == 0 ? 0 : 0xFF; /* filter byte 0, white pixels */
    put32(put32(ihdr, w), h);
    memcpy(ihdr + 8, "\x08\x00\x00\x00\x00", 5); /* depth 8, gray, deflate, no filter/interlace */
    memcpy(png, sig, 8);
    p = put_chunk(png + 8, "IHDR", ihdr, sizeof(ihdr));
    p = put_chunk(p, "IDAT", z, zlib_stored(z, raw, raw_len));
    p = put_chunk(p, "IEND", NULL, 0);
    rc = ows_write_file(path, png, (size_t)(p - png));
  }
  free(raw);
  free(z);
  free(png);
  return rc;
}

/* ---- TIFF and JPEG -------------------------------------------------------------------- */

static unsigned char *tput(unsigned char *p, uint32_t v, int bytes, int be) {
  for (int i = 0; i < bytes; i++)
    p[i] = (unsigned char)(v >> (8 * (be ? bytes - 1 - i : i)));
  return p + bytes;
}

/* One IFD entry; SHORT values are left-justified in the 4-byte value field. */
static unsigned char *tentry(unsigned char *p, uint16_t tag, uint16_t type, uint32_t v, int be) {
  p = tput(p, tag, 2, be);
  p = tput(p, type, 2, be);
  p = tput(p, 1, 4, be);
  if (type == 3)
    return tput(tput(p, v, 2, be), 0, 2, be);
  return tput(p, v, 4, be);
}

int ows_write_tiff(const char *path, unsigned w, unsigned h, int big_endian) {
  size_t pixels = (size_t)w * h, ifd_len = 2 + 8 * 12 + 4, data_off = 8 + ifd_len;
  unsigned char *buf = calloc(1, data_off + pixels), *p;
  int rc;
  if (buf == NULL)
    return -1;
  memcpy(buf, big_endian ? "MM\0*" : "II*\0", 4);
  p = tput(buf + 4, 8, 4, big_endian);
  p = tput(p, 8, 2, big_endian); /* 8 entries, ascending tags */
  p = tentry(p, 256, big_endian ? 3 : 4, w, big_endian);
  p = tentry(p, 257, 4, h, big_endian);
  p = tentry(p, 258, 3, 8, big_endian);
  p = tentry(p, 259, 3, 1, big_endian);
  p = tentry(p, 262, 3, 1, big_endian);
  p = tentry(p, 273, 4, (uint32_t)data_off, big_endian);
  p = tentry(p, 278, 4, h, big_endian);
  p = tentry(p, 279, 4, (uint32_t)pixels, big_endian);
  tput(p, 0, 4, big_endian); /* no next IFD */
  memset(buf + data_off, 0xFF, pixels);
  rc = ows_write_file(path, buf, data_off + pixels);
  free(buf);
  return rc;
}

int ows_write_jpeg_header(const char *path, unsigned w, unsigned h) {
  unsigned char b[] = {0xFF, 0xD8,                                              /* SOI */
                       0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F', 0, 1, 1,          /* APP0 */
                       0,    0,    1, 0,  1,   0,   0,                          /* */
                       0xFF, 0xC0, 0, 11, 8,   0,   0,   0,   0, 1, 1, 0x11, 0, /* SOF0 */
                       0xFF, 0xD9};                                             /* EOI */
  b[25] = (unsigned char)(h >> 8);
  b[26] = (unsigned char)h;
  b[27] = (unsigned char)(w >> 8);
  b[28] = (unsigned char)w;
  return ows_write_file(path, b, sizeof(b));
}

/* ---- METS ----------------------------------------------------------------------------- */

static int write_mets(const char *dir, size_t n) {
  char path[4096];
  FILE *f;
  snprintf(path, sizeof(path), "%s/mets.xml", dir);
  if ((f = fopen(path, "w")) == NULL)
    return -1;
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<mets:mets xmlns:mets=\"http://www.loc.gov/METS/\" "
             "xmlns:xlink=\"http://www.w3.org/1999/xlink\">\n"
             "  <mets:metsHdr CREATEDATE=\"2024-01-01T00:00:00\"/>\n"
             "  <mets:fileSec>\n    <mets:fileGrp USE=\"OCR-D-IMG\">\n");
  for (size_t i = 1; i <= n; i++)
    fprintf(f,
            "      <mets:file ID=\"OCR-D-IMG_%04zu\" MIMETYPE=\"image/png\">\n"
            "        <mets:FLocat LOCTYPE=\"OTHER\" OTHERLOCTYPE=\"FILE\" "
            "xlink:href=\"OCR-D-IMG/OCR-D-IMG_%04zu.png\"/>\n      </mets:file>\n",
            i, i);
  fprintf(f, "    </mets:fileGrp>\n  </mets:fileSec>\n"
             "  <mets:structMap TYPE=\"PHYSICAL\">\n    <mets:div TYPE=\"physSequence\">\n");
  for (size_t i = 1; i <= n; i++)
    fprintf(f,
            "      <mets:div TYPE=\"page\" ID=\"PHYS_%04zu\" ORDER=\"%zu\">\n"
            "        <mets:fptr FILEID=\"OCR-D-IMG_%04zu\"/>\n      </mets:div>\n",
            i, i, i);
  fprintf(f, "    </mets:div>\n  </mets:structMap>\n</mets:mets>\n");
  return fclose(f) == 0 ? 0 : -1;
}

int ows_create(const char *dir, const ows_page_t *pages, size_t n) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/OCR-D-IMG", dir);
  if (mkdir(path, 0777) != 0 && errno != EEXIST)
    return -1;
  for (size_t i = 0; i < n; i++) {
    snprintf(path, sizeof(path), "%s/OCR-D-IMG/OCR-D-IMG_%04zu.png", dir, i + 1);
    if (ows_write_png(path, pages[i].width, pages[i].height) != 0)
      return -1;
  }
  return write_mets(dir, n);
}

char *ows_mkdtemp(void) {
  char *dir = strdup("/tmp/ocrd-dummy-test.XXXXXX");
  if (dir != NULL && mkdtemp(dir) == NULL) {
    free(dir);
    return NULL;
  }
  return dir;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int ows_rmtree(const char *dir) {
  return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int ows_count_temp(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int n = 0;
  if (d == NULL)
    return 0;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' && len > 4 && strcmp(e->d_name + len - 4, ".tmp") == 0)
      n++;
  }
  closedir(d);
  return n;
}
