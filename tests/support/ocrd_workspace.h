/* Test workspaces for ocrd-dummy: tiny valid PNG and TIFF images, a JPEG header, and a
 * METS listing one image per page, written with libc only (no image or zlib library).
 *
 * Every function returns 0 on success and -1 on failure (errno set by the failing call);
 * strings returned are malloc()ed and the caller frees them.
 */
#ifndef MQPROC_TEST_OCRD_WORKSPACE_H
#define MQPROC_TEST_OCRD_WORKSPACE_H

#include <stddef.h>

typedef struct ows_page {
  unsigned width;
  unsigned height;
} ows_page_t;

/* Creates <dir>/mets.xml and <dir>/OCR-D-IMG/OCR-D-IMG_000<i>.png for pages[0..n): fileGrp
 * OCR-D-IMG with files ID=OCR-D-IMG_000<i> MIMETYPE=image/png, and a PHYSICAL structMap
 * whose div TYPE=page ID=PHYS_000<i> ORDER=<i> holds an fptr to that file (i from 1). */
int ows_create(const char *dir, const ows_page_t *pages, size_t n);

/* A grayscale 8-bit PNG of w x h white pixels (signature, IHDR, one IDAT holding a zlib
 * stream with a stored block, IEND; every CRC and the Adler-32 are real). */
int ows_write_png(const char *path, unsigned w, unsigned h);
/* An uncompressed 8-bit grayscale baseline TIFF, little- or big-endian (ImageWidth as a
 * SHORT in the big-endian one, LONG in the little-endian one). */
int ows_write_tiff(const char *path, unsigned w, unsigned h, int big_endian);
/* SOI, a JFIF APP0 segment and a SOF0 segment giving w x h, then EOI (no image data). */
int ows_write_jpeg_header(const char *path, unsigned w, unsigned h);

/* Writes len bytes to path (created or truncated). */
int ows_write_file(const char *path, const void *data, size_t len);
/* The whole file, NUL-terminated (*len may be NULL); NULL on error. */
char *ows_read(const char *path, size_t *len);
/* A new directory /tmp/ocrd-dummy-test.XXXXXX; NULL on error. */
char *ows_mkdtemp(void);
/* Removes dir and everything below it. */
int ows_rmtree(const char *dir);
/* How many entries of dir (not recursive) are leftover temp files: ".*.tmp". */
int ows_count_temp(const char *dir);

#endif
