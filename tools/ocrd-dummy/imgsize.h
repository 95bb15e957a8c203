/* ocrd-dummy image headers: width and height of PNG, TIFF and JPEG files without decoding. */
#ifndef OCRD_DUMMY_IMGSIZE_H
#define OCRD_DUMMY_IMGSIZE_H

/* Reads the pixel size of the image at path from its header (PNG IHDR, the first TIFF
 * IFD in either byte order, the JPEG SOFn segment). Returns 0, or -1 with err set for an
 * unreadable file, an unknown format or a truncated header. */
int dummy_image_size(const char *path, unsigned long *width, unsigned long *height, char *err);

#endif
