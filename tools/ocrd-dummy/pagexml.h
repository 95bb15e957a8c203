/* ocrd-dummy PAGE-XML: the skeleton for an image, the identity copy of a PAGE file. */
#ifndef OCRD_DUMMY_PAGEXML_H
#define OCRD_DUMMY_PAGEXML_H

#include <jansson.h>
#include <stddef.h>

/* What goes into every PAGE-XML output. */
typedef struct dummy_page_meta {
  const char *pcgts_id; /* the output file's ID */
  const json_t *params; /* the parameters, one pc:Label each */
  const char *now;      /* Created/LastChange of a new skeleton */
} dummy_page_meta_t;

/* A new PcGts (PAGE 2019-07-15) whose pc:Page has imageFilename, imageWidth, imageHeight,
 * with pc:Metadata (Creator, Created, LastChange, the processing step's MetadataItem).
 * *data malloc()ed, NUL-terminated. */
int dummy_page_skeleton(const char *image_filename, unsigned long width, unsigned long height,
                        const dummy_page_meta_t *meta, char **data, size_t *len, char *err);

/* The PAGE file at path, unchanged but for a new pcGtsId and a MetadataItem for this
 * processing step appended to pc:Metadata (re-indented, like core's re-serialization). */
int dummy_page_copy(const char *path, const dummy_page_meta_t *meta, char **data, size_t *len,
                    char *err);

#endif
