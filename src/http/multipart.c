/* multipart/form-data, one field at a time (multipart.h). Bounded by the body: every
 * search stays within [body, body + len). */
#include "http/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The boundary parameter of a multipart/form-data Content-Type into b (n bytes): 0. */
static int boundary_of(const char *ct, char *b, size_t n) {
  const char *p;
  size_t len;
  if (ct == NULL || strncasecmp(ct, "multipart/form-data", 19) != 0 ||
      (p = strcasestr(ct, "boundary=")) == NULL)
    return -1;
  p += 9;
  if (*p == '"') {
    p++;
    len = strcspn(p, "\"");
  } else {
    len = strcspn(p, "; \t");
  }
  if (len == 0 || len + 3 > n)
    return -1;
  b[0] = b[1] = '-';
  memcpy(b + 2, p, len);
  b[len + 2] = '\0';
  return 0;
}

/* The next occurrence of the n bytes of needle in [p, end), NULL. */
static const char *find(const char *p, const char *end, const char *needle, size_t n) {
  for (; p + n <= end; p++) {
    const char *q = memchr(p, needle[0], (size_t)(end - p));
    if (q == NULL || q + n > end)
      return NULL;
    if (memcmp(q, needle, n) == 0)
      return q;
    p = q;
  }
  return NULL;
}

/* Whether the headers [h, end) of a part name field name. */
static int names(const char *h, const char *end, const char *name) {
  char want[300];
  int n = snprintf(want, sizeof(want), "name=\"%s\"", name);
  for (const char *line = h; line < end;) {
    const char *eol = find(line, end, "\r\n", 2);
    size_t ll = (size_t)((eol != NULL ? eol : end) - line);
    if (ll > 20 && strncasecmp(line, "Content-Disposition:", 20) == 0 &&
        find(line, line + ll, want, (size_t)n) != NULL)
      return 1;
    line = eol != NULL ? eol + 2 : end;
  }
  return 0;
}

int mqproc__multipart_field(const char *content_type, const char *body, size_t len,
                            const char *name, const char **out, size_t *out_len, char *why,
                            size_t n) {
  char b[256];
  size_t bl;
  const char *end = body + len, *p;
  if (body == NULL || boundary_of(content_type, b, sizeof(b)) != 0) {
    snprintf(why, n, "the body is no multipart/form-data with a boundary");
    return -1;
  }
  bl = strlen(b);
  for (p = find(body, end, b, bl); p != NULL;) {
    const char *h = p + bl, *hend, *next;
    if (h + 2 > end || !memcmp(h, "--", 2)) /* the closing boundary */
      break;
    if (memcmp(h, "\r\n", 2) != 0 || (hend = find(h + 2, end, "\r\n\r\n", 4)) == NULL)
      break;
    next = find(hend + 4, end, b, bl);
    if (next == NULL || next - 2 < hend + 4 || memcmp(next - 2, "\r\n", 2) != 0)
      break;
    if (names(h + 2, hend + 2, name)) {
      *out = hend + 4;
      *out_len = (size_t)(next - 2 - (hend + 4));
      return 0;
    }
    p = next;
  }
  snprintf(why, n, "the form has no field '%s'", name);
  return -1;
}
