/* One field of a multipart/form-data body (RFC 7578), as OCR-D's client sends a workflow
 * script (`files={"workflow": open(path)}`): the boundary from the Content-Type, the part
 * whose Content-Disposition names the field. */
#ifndef MQPROC_HTTP_MULTIPART_H
#define MQPROC_HTTP_MULTIPART_H

#include <stddef.h>

/* The content of field name in body (len bytes) sent with content_type: 0 with *out
 * pointing into body and *out_len; -1 when the body is no multipart form or the field is
 * missing, with why (n bytes). */
int mqproc__multipart_field(const char *content_type, const char *body, size_t len,
                            const char *name, const char **out, size_t *out_len, char *why,
                            size_t n);

#endif
