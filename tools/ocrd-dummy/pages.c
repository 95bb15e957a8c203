/* ocrd-dummy page selection: OCR-D page_id expressions over the physical page IDs. */
#include "pages.h"

#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsio.h"

typedef enum { ITEM_ATOM, ITEM_RANGE, ITEM_REGEX } item_kind_t;

typedef struct item {
  item_kind_t kind;
  const char *text;  /* the item without "~" and "//" */
  regex_t re;        /* ITEM_REGEX */
  size_t prefix_len; /* ITEM_RANGE: the common prefix is text[0..prefix_len) */
  unsigned long long lo, hi;
  int width;         /* digits of the start's number */
  const char *start; /* ITEM_RANGE: the start ID (text up to ".."), NUL-terminated copy */
} item_t;

/* Length of the run of digits that ends s (at most 18 digits are accepted). */
static size_t trailing_digits(const char *s, size_t len) {
  size_t d = 0;
  while (d < len && isdigit((unsigned char)s[len - 1 - d]))
    d++;
  return d;
}

static int parse_range(item_t *it, const char *raw, char *err) {
  const char *dots = strstr(it->text, ".."), *end = dots + 2;
  size_t slen = (size_t)(dots - it->text), elen = strlen(end);
  size_t sd = trailing_digits(it->text, slen), ed = trailing_digits(end, elen);
  if (sd == 0 || ed == 0 || sd > 18 || ed > 18)
    return dummy_err(err, "invalid page_id range '%s': could not find the numeric part", raw);
  if (slen - sd != elen - ed || strncmp(it->text, end, slen - sd) != 0)
    return dummy_err(err, "invalid page_id range '%s': the parts before the numbers differ", raw);
  it->kind = ITEM_RANGE;
  it->prefix_len = slen - sd;
  it->lo = strtoull(it->text + it->prefix_len, NULL, 10);
  it->hi = strtoull(end + it->prefix_len, NULL, 10);
  it->width = (int)sd;
  if ((it->start = strndup(it->text, slen)) == NULL)
    return dummy_err(err, "out of memory");
  return 0;
}

static int parse_item(item_t *it, const char *raw, bool *neg, char *err) {
  char *anchored = NULL;
  int rc;
  it->text = raw;
  *neg = it->text[0] == '~';
  it->text += *neg;
  if (it->text[0] == '\0')
    return dummy_err(err, "invalid page_id '%s': empty item", raw);
  if (strncmp(it->text, "//", 2) == 0) {
    it->text += 2;
    if (it->text[0] == '\0' || asprintf(&anchored, "^(%s)$", it->text) < 0)
      return dummy_err(err, "invalid page_id '%s': empty regex", raw);
    rc = regcomp(&it->re, anchored, REG_EXTENDED | REG_NOSUB);
    free(anchored);
    if (rc != 0)
      return dummy_err(err, "invalid page_id '%s': bad regular expression", raw);
    it->kind = ITEM_REGEX;
    return 0;
  }
  if (strstr(it->text, "..") != NULL)
    return parse_range(it, raw, err);
  it->kind = ITEM_ATOM;
  return 0;
}

static bool item_matches(const item_t *it, const char *id) {
  char num[32];
  const char *rest;
  unsigned long long v;
  if (it->kind == ITEM_ATOM)
    return strcmp(it->text, id) == 0;
  if (it->kind == ITEM_REGEX)
    return regexec(&it->re, id, 0, NULL, 0) == 0;
  if (strncmp(id, it->text, it->prefix_len) != 0)
    return false;
  rest = id + it->prefix_len;
  if (rest[0] == '\0' || strlen(rest) > 18 || trailing_digits(rest, strlen(rest)) != strlen(rest))
    return false;
  v = strtoull(rest, NULL, 10);
  snprintf(num, sizeof(num), "%0*llu", it->width, v);
  return v >= it->lo && v <= it->hi && strcmp(num, rest) == 0;
}

static void item_free(item_t *it) {
  if (it->kind == ITEM_REGEX)
    regfree(&it->re);
  free((char *)it->start);
}

/* Applies one item to the pos/neg marks; errors when it matches nothing. */
static int apply_item(const char *raw, const char *const *ids, size_t n, bool *pos, bool *neg,
                      bool *any_pos, char *err) {
  item_t it = {0};
  bool is_neg, matched = false, start_matched = false;
  int rc = parse_item(&it, raw, &is_neg, err);
  if (rc != 0) {
    item_free(&it);
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    if (!item_matches(&it, ids[i]))
      continue;
    matched = true;
    (is_neg ? neg : pos)[i] = true;
    if (it.kind == ITEM_RANGE && strcmp(ids[i], it.start) == 0)
      start_matched = true;
  }
  *any_pos |= !is_neg;
  if (!matched)
    rc = dummy_err(err, "page_id '%s' matches none of the pages", raw);
  else if (it.kind == ITEM_RANGE && !start_matched)
    rc = dummy_err(err, "page_id range '%s': its start matches no page", raw);
  item_free(&it);
  return rc;
}

int dummy_pages_select(const char *expr, const char *const *ids, size_t n, bool *selected,
                       char *err) {
  bool *pos = calloc(n + 1, sizeof(bool)), *neg = calloc(n + 1, sizeof(bool)), any_pos = false;
  char *copy = strdup(expr), *item = copy, *comma;
  int rc = 0;
  if (pos == NULL || neg == NULL || copy == NULL)
    rc = dummy_err(err, "out of memory");
  while (rc == 0 && item != NULL) {
    if ((comma = strchr(item, ',')) != NULL)
      *comma = '\0';
    rc = apply_item(item, ids, n, pos, neg, &any_pos, err);
    item = comma != NULL ? comma + 1 : NULL;
  }
  for (size_t i = 0; rc == 0 && i < n; i++)
    selected[i] = (pos[i] || !any_pos) && !neg[i];
  free(pos);
  free(neg);
  free(copy);
  return rc;
}
