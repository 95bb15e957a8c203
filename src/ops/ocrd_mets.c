/* A METS's physical pages and file groups, and OCR-D's page_id ranges (ocrd.h). The METS
 * is scanned tag by tag, not parsed as XML: what the API needs (the page divs of the
 * PHYSICAL structMap, the fileGrp USEs) sits in attributes of start tags, whatever the
 * namespace prefix. Comments, processing instructions and CDATA are skipped; a file
 * larger than METS_MAX is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "ops/ocrd.h"

#define METS_MAX (256u << 20)
#define RANGE_MAX 100000 /* pages one A..B range may name */

/* The local name of the tag starting at t (after '<'): its length, prefix skipped. */
static size_t local_name(const char **t) {
  const char *p = *t, *colon = NULL;
  size_t n = strcspn(p, " \t\r\n/>");
  for (size_t i = 0; i < n; i++)
    if (p[i] == ':')
      colon = p + i;
  if (colon != NULL) {
    n -= (size_t)(colon + 1 - p);
    *t = colon + 1;
  }
  return n;
}

/* The value of attribute name within the tag text [p, end) (a copy, NULL when absent). */
static char *attr(const char *p, const char *end, const char *name) {
  size_t nl = strlen(name);
  for (const char *a = p; a + nl + 2 < end; a++) {
    const char *v;
    char q;
    if ((a[-1] != ' ' && a[-1] != '\t' && a[-1] != '\n' && a[-1] != '\r') ||
        strncmp(a, name, nl) != 0)
      continue;
    v = a + nl;
    while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'))
      v++;
    if (v >= end || *v != '=')
      continue;
    v++;
    while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'))
      v++;
    if (v >= end || (*v != '"' && *v != '\''))
      continue;
    q = *v++;
    for (const char *e = v; e < end; e++)
      if (*e == q)
        return strndup(v, (size_t)(e - v));
    return NULL;
  }
  return NULL;
}

/* Skips what is no start or end tag: comments, CDATA, <? ?> and <! > declarations. */
static const char *skip_special(const char *p) {
  const char *e;
  if (!strncmp(p, "<!--", 4))
    return (e = strstr(p + 4, "-->")) != NULL ? e + 3 : NULL;
  if (!strncmp(p, "<![CDATA[", 9))
    return (e = strstr(p + 9, "]]>")) != NULL ? e + 3 : NULL;
  if (p[1] == '?' || p[1] == '!')
    return (e = strchr(p, '>')) != NULL ? e + 1 : NULL;
  return p;
}

int mqproc__mets_read(const char *path, mqproc__mets_info_t *out, char *err) {
  size_t len;
  int why;
  char *buf = mqproc__read_untrusted(path, 1, METS_MAX, &len, &why, err);
  int physical = 0, depth = 0; /* inside the PHYSICAL structMap: its element depth */
  out->pages = out->groups = NULL;
  if (buf == NULL)
    return why;
  out->pages = json_array();
  out->groups = json_array();
  for (const char *p = strchr(buf, '<'); p != NULL; p = strchr(p, '<')) {
    const char *s = skip_special(p), *name, *end;
    size_t n;
    int closing, empty;
    if (s == NULL)
      break;
    if (s != p) {
      p = s;
      continue;
    }
    closing = p[1] == '/';
    name = p + 1 + closing;
    n = local_name(&name);
    if ((end = strchr(name, '>')) == NULL)
      break;
    empty = end > name && end[-1] == '/';
    if (n == 9 && !strncmp(name, "structMap", 9)) {
      if (closing) {
        physical = 0;
      } else {
        char *type = attr(name, end, "TYPE");
        physical = type != NULL && !strcmp(type, "PHYSICAL") && !empty;
        free(type);
        depth = 0;
      }
    } else if (physical && n == 3 && !strncmp(name, "div", 3)) {
      if (closing) {
        depth--;
      } else {
        char *type = attr(name, end, "TYPE"), *id = attr(name, end, "ID");
        if (type != NULL && !strcmp(type, "page") && id != NULL)
          json_array_append_new(out->pages, json_string(id));
        free(type);
        free(id);
        depth += !empty;
      }
    } else if (!closing && n == 7 && !strncmp(name, "fileGrp", 7)) {
      char *use = attr(name, end, "USE");
      if (use != NULL)
        json_array_append_new(out->groups, json_string(use));
      free(use);
    }
    p = end + 1;
  }
  free(buf);
  return 0;
}

void mqproc__mets_info_free(mqproc__mets_info_t *m) {
  json_decref(m->pages);
  json_decref(m->groups);
  m->pages = m->groups = NULL;
}

/* The last run of digits in s: its start and length (0 when none). */
static size_t last_number(const char *s, size_t n, size_t *at) {
  size_t end = n;
  while (end > 0 && (s[end - 1] < '0' || s[end - 1] > '9'))
    end--;
  *at = end;
  while (*at > 0 && s[*at - 1] >= '0' && s[*at - 1] <= '9')
    (*at)--;
  return end - *at;
}

/* "A..B" as ocrd_utils.generate_range: the last number of A counted up to B's, A's text
 * around it kept (zero-padded to A's width). -1 with err when malformed. */
static int add_range(json_t *ids, const char *tok, size_t n, char *err, size_t errlen) {
  const char *dots = strstr(tok, "..");
  size_t al = (size_t)(dots - tok), bl = n - al - 2, aat, bat;
  const char *b = dots + 2;
  size_t an = last_number(tok, al, &aat), bn = last_number(b, bl, &bat);
  long long from, to;
  if (an == 0 || bn == 0 || an > 18 || bn > 18) {
    snprintf(err, errlen, "Range '%.*s': could not find numeric part", (int)n, tok);
    return -1;
  }
  if (aat != bat || strncmp(tok, b, aat) != 0) {
    snprintf(err, errlen, "Range '%.*s' differ in their non-numeric part", (int)n, tok);
    return -1;
  }
  from = strtoll(tok + aat, NULL, 10);
  to = strtoll(b + bat, NULL, 10);
  if (to - from >= RANGE_MAX) {
    snprintf(err, errlen, "Range '%.*s' names more than %d pages", (int)n, tok, RANGE_MAX);
    return -1;
  }
  for (long long i = from; i <= to; i++) {
    char num[24];
    snprintf(num, sizeof(num), "%0*lld", (int)an, i);
    json_array_append_new(
        ids, json_sprintf("%.*s%s%.*s", (int)aat, tok, num, (int)(al - aat - an), tok + aat + an));
  }
  return 0;
}

json_t *mqproc__page_ids(const char *page_id, char *err, size_t errlen) {
  json_t *ids = json_array();
  err[0] = '\0';
  for (const char *p = page_id; p != NULL && *p != '\0';) {
    size_t n = strcspn(p, ",");
    char *tok = strndup(p, n);
    int rc = 0;
    if (tok == NULL) {
      snprintf(err, errlen, "out of memory");
      rc = -1;
    } else if (!strncmp(tok, "//", 2)) { /* a regex: any page may be meant */
      free(tok);
      json_decref(ids);
      return NULL;
    } else if (strstr(tok, "..") != NULL) {
      rc = add_range(ids, tok, n, err, errlen);
    } else if (n > 0) {
      json_array_append_new(ids, json_string(tok));
    }
    free(tok);
    if (rc != 0) {
      json_decref(ids);
      return NULL;
    }
    p += n + (p[n] == ',');
  }
  return ids;
}
