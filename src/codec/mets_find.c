/* find_files (mets.h): OCR-D's OcrdMets.find_files and get_physical_pages' page language,
 * step by step as ocrd_models/ocrd_mets.py 3.12.1 does them without its caches, quirks
 * included (which tokens are errors, which pages a pattern may still match once it matched,
 * the range whose start never matched), so a query answers here as it answers there.
 *
 * A page_id is a comma list of tokens; each becomes a pattern (an atom, a range, a regular
 * expression) on a list of div attributes (the physical page's ID, ORDER, ORDERLABEL,
 * LABEL, CONTENTIDS, then the logical divs' ID, DMDID, TYPE, LABEL, which reach pages through
 * mets:structLink), or, after "~", an anti-pattern. The pages are walked once per list;
 * a pattern settles on the first attribute it matches; an atom is used up by its first page,
 * a range value by its page, and what never matched, or a range whose start never did, is a
 * ValueError. */
#include "codec/mets_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* The attributes a pattern may look at, in OCR-D's order (METS_PAGE_DIV_ATTRIBUTE, then
 * METS_STRUCT_DIV_ATTRIBUTE). */
enum { P_ID, P_ORDER, P_ORDERLABEL, P_LABEL, P_CONTENTIDS, L_ID, L_DMDID, L_TYPE, L_LABEL, NATTR };
#define PHYSICAL_ATTRS 0x1fu
#define LOGICAL_ATTRS 0x1e0u
static const char *const ATTR_NAME[NATTR] = {"ID", "ORDER", "ORDERLABEL", "LABEL", "CONTENTIDS",
                                             "ID", "DMDID", "TYPE",       "LABEL"};
static const char *const ATTR_PREFIX[NATTR] = {
    "physical:id:",    "physical:order:",      "physical:orderlabel:",
    "physical:label:", "physical:contentids:", "logical:id:",
    "logical:dmdid:",  "logical:type:",        "logical:label:"};

typedef enum { ATOM, RANGE, REGEX } kind_t;

typedef struct pat {
  kind_t kind;
  char *raw;       /* the token as given, for messages */
  unsigned attrs;  /* bits of the attributes still possible, tried in order */
  char *atom;      /* ATOM */
  json_t *values;  /* RANGE: the values not yet matched ({value: true}) */
  char *start;     /* RANGE: its first value */
  pcre2_code *re;  /* REGEX */
  int has_matched; /* matched some value somewhere */
  int active;      /* not used up */
} pat_t;

typedef struct pats {
  pat_t *p;
  size_t n;
} pats_t;

static void pats_free(pats_t *ps) {
  for (size_t i = 0; i < ps->n; i++) {
    free(ps->p[i].raw);
    free(ps->p[i].atom);
    json_decref(ps->p[i].values);
    free(ps->p[i].start);
    pcre2_code_free(ps->p[i].re);
  }
  free(ps->p);
  ps->p = NULL;
  ps->n = 0;
}

static int fail(mqproc__mets_why_t *why, mqproc__mets_why_t w, int rc, char *err, const char *fmt,
                const char *a, const char *b) {
  if (why != NULL)
    *why = w;
  return mqproc__err(err, rc, fmt, a, b);
}

/* ---- generate_range -------------------------------------------------------------------- */

/* The last run of ASCII digits in s: its offset and length (0 when there is none). */
static size_t last_digits(const char *s, size_t *off) {
  size_t len = strlen(s), end = len;
  while (end > 0 && (s[end - 1] < '0' || s[end - 1] > '9'))
    end--;
  *off = end;
  while (*off > 0 && s[*off - 1] >= '0' && s[*off - 1] <= '9')
    (*off)--;
  return end - *off;
}

/* Python's s[:-k]: the bytes of s but its last k characters. */
static size_t cut_chars(const char *s, size_t k) {
  size_t n = strlen(s);
  while (k > 0 && n > 0) {
    n--;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80) /* back to a character's start */
      n--;
    k--;
  }
  return n;
}

/* Python's s.replace(old, new): every occurrence, left to right, not overlapping. */
static char *replace_all(const char *s, const char *old, const char *new_) {
  size_t ol = strlen(old), nl = strlen(new_), count = 0, len;
  char *out, *w;
  for (const char *p = s; (p = strstr(p, old)) != NULL; p += ol)
    count++;
  len = strlen(s) + count * nl - count * ol;
  if ((out = w = mqproc__malloc(len + 1)) == NULL)
    return NULL;
  for (const char *p = s, *q; *p != '\0';) {
    if ((q = strstr(p, old)) == NULL) {
      strcpy(w, p);
      return out;
    }
    memcpy(w, p, (size_t)(q - p));
    w += q - p;
    memcpy(w, new_, nl);
    w += nl;
    p = q + ol;
  }
  *w = '\0';
  return out;
}

/* ocrd_utils.generate_range(start, end) into pat (values and start): MQPROC_OK, or
 * MQPROC_EINVAL with err (as OCR-D's ValueError; an empty or too large range too). */
static int make_range(pat_t *pat, const char *start, const char *end, char *err) {
  size_t so, eo, sl = last_digits(start, &so), el = last_digits(end, &eo);
  char num[24], *digits;
  unsigned long long from, to;
  if (sl == 0 || el == 0)
    return mqproc__err(err, MQPROC_EINVAL, "Range '%.200s..%.200s': could not find numeric part",
                       start, end);
  {
    size_t a = cut_chars(start, sl), b = cut_chars(end, el);
    if (a != b || memcmp(start, end, a) != 0)
      return mqproc__err(err, MQPROC_EINVAL,
                         "Range '%.200s..%.200s' differ in their non-numeric part", start, end);
  }
  if (sl > 18 || el > 18)
    return mqproc__err(err, MQPROC_EINVAL, "Range '%.200s..%.200s': numbers too large", start, end);
  from = strtoull(start + so, NULL, 10);
  to = strtoull(end + eo, NULL, 10);
  if (to < from)
    return mqproc__err(err, MQPROC_EINVAL, "Range '%.200s..%.200s' is empty", start, end);
  if (to - from >= MQPROC__METS_RANGE_MAX)
    return mqproc__err(err, MQPROC_EINVAL, "Range '%.200s..%.200s' has more than %d values", start,
                       end, MQPROC__METS_RANGE_MAX);
  if ((digits = mqproc__strndup(start + so, sl)) == NULL || (pat->values = json_object()) == NULL) {
    free(digits);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  for (unsigned long long i = from; i <= to; i++) {
    char *v;
    snprintf(num, sizeof(num), "%0*llu", (int)sl, i); /* str(i).zfill(len(start_num)) */
    if ((v = replace_all(start, digits, num)) == NULL ||
        json_object_set_new(pat->values, v, json_true()) != 0 ||
        (i == from && (pat->start = mqproc__strdup(v)) == NULL)) {
      free(v);
      free(digits);
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    }
    free(v);
  }
  free(digits);
  return MQPROC_OK;
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* The attributes a token's prefix names (all without one), and where its value starts. */
static unsigned attrs_of(const char **token) {
  static const struct {
    const char *prefix;
    unsigned attrs, first;
  } TYPES[] = {{"logical:", LOGICAL_ATTRS, L_ID}, {"physical:", PHYSICAL_ATTRS, P_ID}};
  for (size_t t = 0; t < MQPROC__ARRAY_LEN(TYPES); t++) {
    if (strncmp(*token, TYPES[t].prefix, strlen(TYPES[t].prefix)) != 0)
      continue;
    for (unsigned a = TYPES[t].first; a < NATTR && (TYPES[t].attrs >> a & 1u); a++)
      if (!strncmp(*token, ATTR_PREFIX[a], strlen(ATTR_PREFIX[a]))) {
        *token += strlen(ATTR_PREFIX[a]);
        return 1u << a;
      }
    *token += strlen(TYPES[t].prefix);
    return TYPES[t].attrs;
  }
  return PHYSICAL_ATTRS | LOGICAL_ATTRS;
}

static int add_pat(pats_t *ps, pat_t **out) {
  pat_t *more = mqproc__realloc(ps->p, (ps->n + 1) * sizeof(*more));
  if (more == NULL)
    return -1;
  ps->p = more;
  *out = memset(&ps->p[ps->n++], 0, sizeof(**out));
  (*out)->active = 1;
  return 0;
}

/* One token (raw: as given, for messages) into a pattern of pos or neg. */
static int parse_token(const char *raw, pats_t *pos, pats_t *neg, mqproc__mets_why_t *why,
                       char *err) {
  const char *t = raw, *dots;
  char msg[MQPROC_ERR_LEN];
  unsigned attrs = attrs_of(&t);
  pats_t *into = pos;
  pat_t *p;
  if (*t == '\0')
    return fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err,
                "invalid pageId syntax '%.200s': empty after type prefix%s", raw, "");
  if (*t == '~') {
    into = neg;
    if (*++t == '\0')
      return fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err,
                  "invalid pageId syntax '%.200s': empty after negator prefix%s", raw, "");
  }
  if (add_pat(into, &p) != 0)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  p->attrs = attrs;
  if ((p->raw = mqproc__strdup(raw)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (!strncmp(t, "//", 2)) {
    p->kind = REGEX;
    if (t[2] == '\0')
      return fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err,
                  "invalid pageId syntax '%.200s': empty after regex prefix%s", raw, "");
    if ((p->re = mqproc__mets_re(t + 2, msg)) == NULL)
      return fail(why, MQPROC__METS_WHY_REGEX, MQPROC_EINVAL, err, "invalid regex: %s%s", msg, "");
  } else if ((dots = strstr(t, "..")) != NULL) {
    char *start = mqproc__strndup(t, (size_t)(dots - t));
    int rc;
    p->kind = RANGE;
    if (start == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    rc = make_range(p, start, dots + 2, msg);
    free(start);
    if (rc != MQPROC_OK)
      return rc == MQPROC_ENOMEM ? mqproc__err(err, rc, "out of memory")
                                 : fail(why, MQPROC__METS_WHY_VALUE, rc, err,
                                        "invalid pageId syntax '%.200s': %s", raw, msg);
  } else {
    p->kind = ATOM;
    if ((p->atom = mqproc__strdup(t)) == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  return MQPROC_OK;
}

static int parse_page_id(const char *page_id, pats_t *pos, pats_t *neg, mqproc__mets_why_t *why,
                         char *err) {
  char *copy = mqproc__strdup(page_id), *tok, *next;
  int rc = MQPROC_OK;
  if (copy == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (tok = copy; rc == MQPROC_OK && tok != NULL; tok = next) { /* re.split(',') keeps ""s */
    if ((next = strchr(tok, ',')) != NULL)
      *next++ = '\0';
    rc = parse_token(tok, pos, neg, why, err);
  }
  free(copy);
  return rc;
}

/* ---- matching ----------------------------------------------------------------------------- */

/* OCR-D's struct cache: per logical attribute, its values in document order, each mapped to
 * the physical page IDs its divs link to ({value: [ID, ...]}). */
typedef struct logical {
  json_t *by[NATTR]; /* L_ID .. L_LABEL */
} logical_t;

static void logical_free(logical_t *lg) {
  for (int a = 0; a < NATTR; a++)
    json_decref(lg->by[a]);
}

static int logical_make(const mqproc__mets_t *m, logical_t *lg) {
  json_t *links = json_object(); /* smLink's xlink:from -> [xlink:to, ...] */
  int rc = -1;
  memset(lg, 0, sizeof(*lg));
  for (int a = L_ID; a < NATTR; a++)
    if ((lg->by[a] = json_object()) == NULL)
      goto out;
  if (links == NULL)
    goto out;
  for (xmlNode *sl = mqproc__mets_child(m->root, "structLink", NULL, NULL); sl != NULL;
       sl = mqproc__mets_next(sl->next, "structLink", NULL, NULL))
    for (xmlNode *l = mqproc__mets_child(sl, "smLink", NULL, NULL); l != NULL;
         l = mqproc__mets_next(l->next, "smLink", NULL, NULL)) {
      const char *from = mqproc__mets_attr_ns(l, XLINK_NS, "from");
      const char *to = mqproc__mets_attr_ns(l, XLINK_NS, "to");
      json_t *list = json_object_get(links, from != NULL ? from : "None");
      if (list == NULL &&
          json_object_set_new(links, from != NULL ? from : "None", list = json_array()) != 0)
        goto out;
      if (json_array_append_new(list, to != NULL ? json_string(to) : json_null()) != 0)
        goto out;
    }
  for (xmlNode *sm = mqproc__mets_child(m->root, "structMap", "TYPE", "LOGICAL"); sm != NULL;
       sm = mqproc__mets_next(sm->next, "structMap", "TYPE", "LOGICAL"))
    for (xmlNode *d = sm; (d = mqproc__mets_walk(d, sm)) != NULL;) {
      const char *id = mqproc__mets_attr(d, "ID");
      json_t *to = json_object_get(links, id != NULL ? id : "None");
      if (!mqproc__mets_is(d, NULL, "div"))
        continue;
      for (int a = L_ID; a < NATTR; a++) {
        const char *v = mqproc__mets_attr(d, ATTR_NAME[a]);
        json_t *list;
        if (v == NULL || *v == '\0') /* "avoid mapping None indiscriminately" */
          continue;
        if ((list = json_object_get(lg->by[a], v)) == NULL &&
            json_object_set_new(lg->by[a], v, list = json_array()) != 0)
          goto out;
        if (to != NULL && json_array_extend(list, to) != 0)
          goto out;
      }
    }
  rc = 0;
out:
  json_decref(links);
  return rc;
}

/* Whether pat matches value v (and notes that it did): 1, 0, -1 with err. */
static int matches(pat_t *pat, const char *v, char *err) {
  int r;
  switch (pat->kind) {
  case ATOM:
    r = !strcmp(pat->atom, v);
    break;
  case RANGE:
    r = json_object_get(pat->values, v) != NULL;
    break;
  default:
    if ((r = mqproc__mets_fullmatch(pat->re, v, err)) < 0)
      return -1;
  }
  pat->has_matched |= r;
  return r;
}

/* Removes the first s from list (a JSON array of strings). */
static void list_remove(json_t *list, const char *s) {
  for (size_t i = 0; i < json_array_size(list); i++)
    if (json_is_string(json_array_get(list, i)) &&
        !strcmp(json_string_value(json_array_get(list, i)), s)) {
      json_array_remove(list, i);
      return;
    }
}

/* One logical attribute of pattern pat on page div: OCR-D's "cache_keys" (the values of the
 * attribute that pat matches) and, of those, the first whose divs link to the page. *hit:
 * matched some value (the attribute is settled); *take: the page is selected. */
static int match_logical(pat_t *pat, json_t *by, const char *page_id, int *hit, int *take,
                         char *err) {
  const char *key, *first = NULL;
  json_t *list;
  *hit = *take = 0;
  json_object_foreach(by, key, list) {
    size_t i;
    json_t *v;
    int r = matches(pat, key, err);
    if (r < 0)
      return -1;
    if (!r)
      continue;
    *hit = 1;
    if (first != NULL || page_id == NULL)
      continue;
    json_array_foreach(list, i,
                       v) if (json_is_string(v) && !strcmp(json_string_value(v), page_id)) {
      first = key;
      break;
    }
  }
  if (first != NULL) {
    list = json_object_get(by, first);
    *take = 1;
    list_remove(list, page_id);
    if (json_array_size(list) == 0) {
      if (pat->kind == ATOM)
        pat->active = 0;
      else if (pat->kind == RANGE) {
        json_object_del(pat->values, first);
        if (json_object_size(pat->values) == 0)
          pat->active = 0;
      }
    }
  }
  return 0;
}

/* Pattern pat on one page: whether the page is selected (OCR-D's loop over pat.attr). */
static int match_page(pat_t *pat, xmlNode *page, logical_t *lg, int *take, char *err) {
  *take = 0;
  for (int a = 0; a < NATTR; a++) {
    int hit = 0;
    if (!(pat->attrs >> a & 1u))
      continue;
    if (pat->kind == RANGE && (a == L_TYPE || a == L_LABEL)) /* no ranges of those */
      continue;
    if (a < L_ID) {
      const char *v = mqproc__mets_attr(page, ATTR_NAME[a]);
      int r = matches(pat, v != NULL ? v : "", err);
      if (r < 0)
        return -1;
      if ((hit = r) != 0) {
        *take = 1;
        if (pat->kind == ATOM)
          pat->active = 0;
        else if (pat->kind == RANGE) {
          json_object_del(pat->values, v != NULL ? v : "");
          if (json_object_size(pat->values) == 0)
            pat->active = 0;
        }
      }
    } else if (match_logical(pat, lg->by[a], mqproc__mets_attr(page, "ID"), &hit, take, err) != 0) {
      return -1;
    }
    if (hit) {
      pat->attrs = 1u << a; /* settled: the next pages look at this attribute alone */
      return 0;
    }
  }
  return 0;
}

/* get_physical_page_patterns: the divs of the pages ps selects, in page order, a page once
 * per pattern selecting it (sel[i] counts). */
static int select_pages(const mqproc__mets_t *m, xmlNode **divs, size_t n, pats_t *ps, int *sel,
                        mqproc__mets_why_t *why, char *err) {
  logical_t lg;
  int rc = MQPROC_OK;
  if (logical_make(m, &lg) != 0) {
    logical_free(&lg);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  for (size_t i = 0; rc == MQPROC_OK && i < n; i++)
    for (size_t k = 0; rc == MQPROC_OK && k < ps->n; k++) {
      int take;
      if (!ps->p[k].active) /* used up on an earlier page */
        continue;
      if (match_page(&ps->p[k], divs[i], &lg, &take, err) != 0) {
        if (why != NULL)
          *why = MQPROC__METS_WHY_REGEX;
        rc = MQPROC_EINVAL;
      }
      sel[i] += take;
    }
  logical_free(&lg);
  for (size_t k = 0; rc == MQPROC_OK && k < ps->n; k++)
    if (!ps->p[k].has_matched)
      rc = fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err,
                "Patterns [%.200s] match none of the pages%s", ps->p[k].raw, "");
  for (size_t k = 0; rc == MQPROC_OK && k < ps->n; k++)
    if (ps->p[k].kind == RANGE && json_object_get(ps->p[k].values, ps->p[k].start) != NULL)
      rc = fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err,
                "Start of range patterns [%.200s] not matched - invalid range", ps->p[k].raw, "");
  return rc;
}

/* The file IDs (a new {ID: true}) of the pages page_id selects. */
static int page_files(const mqproc__mets_t *m, const char *page_id, json_t **ids,
                      mqproc__mets_why_t *why, char *err) {
  pats_t pos = {0}, neg = {0};
  xmlNode **divs = NULL;
  size_t n = 0;
  int *sel = NULL, *anti = NULL, rc;
  *ids = NULL;
  if ((rc = parse_page_id(page_id, &pos, &neg, why, err)) != MQPROC_OK)
    goto out;
  rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (mqproc__mets_page_divs(m, &divs, &n) != 0 ||
      (sel = mqproc__calloc(n + 1, sizeof(int))) == NULL ||
      (anti = mqproc__calloc(n + 1, sizeof(int))) == NULL || (*ids = json_object()) == NULL)
    goto out;
  if (pos.n > 0) {
    if ((rc = select_pages(m, divs, n, &pos, sel, why, err)) != MQPROC_OK)
      goto out;
  } else { /* only anti-patterns: every page first (a //.* on the ID) */
    for (size_t i = 0; i < n; i++)
      sel[i] = 1;
  }
  if (neg.n > 0 && (rc = select_pages(m, divs, n, &neg, anti, why, err)) != MQPROC_OK)
    goto out;
  rc = MQPROC_OK;
  for (size_t i = 0; rc == MQPROC_OK && i < n; i++) {
    if (!sel[i] || anti[i])
      continue;
    for (xmlNode *f = mqproc__mets_child(divs[i], "fptr", NULL, NULL); f != NULL;
         f = mqproc__mets_next(f->next, "fptr", NULL, NULL)) {
      const char *id = mqproc__mets_attr(f, "FILEID");
      if (id != NULL && json_object_set_new(*ids, id, json_true()) != 0) {
        rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
        break;
      }
    }
  }
out:
  if (rc != MQPROC_OK) {
    json_decref(*ids);
    *ids = NULL;
  }
  pats_free(&pos);
  pats_free(&neg);
  free(divs);
  free(sel);
  free(anti);
  return rc;
}

/* ---- find_files ----------------------------------------------------------------------- */

/* One of a query's values: none, a text compared as it is, or a regular expression. */
typedef struct filter {
  const char *text; /* NULL: no filter */
  pcre2_code *re;   /* set for a "//" value */
} filter_t;

static int filter_make(const char *v, int may_be_regex, filter_t *f, mqproc__mets_why_t *why,
                       char *err) {
  char msg[MQPROC_ERR_LEN];
  f->text = v != NULL && *v != '\0' ? v : NULL; /* OCR-D's `if ID:` */
  f->re = NULL;
  if (f->text == NULL || !may_be_regex || strncmp(v, "//", 2) != 0)
    return MQPROC_OK;
  if ((f->re = mqproc__mets_re(v + 2, msg)) == NULL)
    return fail(why, MQPROC__METS_WHY_REGEX, MQPROC_EINVAL, err, "invalid regex: %s%s", msg, "");
  return MQPROC_OK;
}

/* Whether value (NULL: absent) passes f: 1, 0, -1 with err. */
static int filter_pass(const filter_t *f, const char *value, char *err) {
  if (f->text == NULL)
    return 1;
  if (value == NULL)
    return 0;
  return f->re != NULL ? mqproc__mets_fullmatch(f->re, value, err) : !strcmp(f->text, value);
}

/* {file ID: the @ID of the page whose div has its first fptr}, as get_physical_page_for_file. */
static json_t *page_index(const mqproc__mets_t *m) {
  json_t *idx = json_object();
  xmlNode **divs;
  size_t n;
  if (idx == NULL || mqproc__mets_page_divs(m, &divs, &n) != 0) {
    json_decref(idx);
    return NULL;
  }
  for (size_t i = 0; idx != NULL && i < n; i++) {
    const char *page = mqproc__mets_attr(divs[i], "ID");
    for (xmlNode *f = mqproc__mets_child(divs[i], "fptr", NULL, NULL); idx != NULL && f != NULL;
         f = mqproc__mets_next(f->next, "fptr", NULL, NULL)) {
      const char *id = mqproc__mets_attr(f, "FILEID");
      if (id == NULL || json_object_get(idx, id) != NULL)
        continue;
      if (json_object_set_new(idx, id, page != NULL ? json_string(page) : json_null()) != 0) {
        json_decref(idx);
        idx = NULL;
      }
    }
  }
  free(divs);
  return idx;
}

static json_t *file_json(xmlNode *file, json_t *idx) {
  const char *id = mqproc__mets_attr(file, "ID");
  json_t *page = id != NULL ? json_object_get(idx, id) : NULL;
  xmlNode *url = mqproc__mets_flocat(file, 0), *local = mqproc__mets_flocat(file, 1);
  return json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:s?}", "file_grp",
                   mqproc__mets_attr(file->parent, "USE"), "file_id", id, "page_id",
                   json_string_value(page), "mimetype", mqproc__mets_attr(file, "MIMETYPE"), "url",
                   mqproc__mets_attr_ns(url, XLINK_NS, "href"), "local_filename",
                   mqproc__mets_attr_ns(local, XLINK_NS, "href"));
}

/* Whether file passes the query's filters (the page's first: its file IDs in pages). */
static int file_passes(xmlNode *file, json_t *pages, const filter_t *f, char *err) {
  const char *id = mqproc__mets_attr(file, "ID");
  xmlNode *url = f[3].text != NULL ? mqproc__mets_flocat(file, 0) : NULL;
  xmlNode *local = f[4].text != NULL ? mqproc__mets_flocat(file, 1) : NULL;
  const char *mime = mqproc__mets_attr(file, "MIMETYPE");
  int r;
  if ((r = filter_pass(&f[0], id, err)) != 1)
    return r;
  if (pages != NULL && (id == NULL || json_object_get(pages, id) == NULL))
    return 0;
  if ((r = filter_pass(&f[1], mqproc__mets_attr(file->parent, "USE"), err)) != 1)
    return r;
  if ((r = filter_pass(&f[2], f[2].re != NULL && mime == NULL ? "" : mime, err)) != 1)
    return r;
  if (f[3].text != NULL &&
      (r = filter_pass(&f[3], mqproc__mets_attr_ns(url, XLINK_NS, "href"), err)) != 1)
    return r;
  return filter_pass(&f[4], mqproc__mets_attr_ns(local, XLINK_NS, "href"), err);
}

/* Every mets:file in document order that passes: appended to out. */
static int collect(const mqproc__mets_t *m, json_t *pages, const filter_t *f, json_t *out,
                   mqproc__mets_why_t *why, char *err) {
  json_t *idx = NULL;
  for (xmlNode *n = m->root; (n = mqproc__mets_walk(n, m->root)) != NULL;) {
    int r;
    if (!mqproc__mets_is(n, NULL, "file"))
      continue;
    if ((r = file_passes(n, pages, f, err)) < 0) { /* a match beyond its limits */
      json_decref(idx);
      if (why != NULL)
        *why = MQPROC__METS_WHY_REGEX;
      return MQPROC_EINVAL;
    }
    if (r == 0)
      continue;
    if ((idx == NULL && (idx = page_index(m)) == NULL) ||
        json_array_append_new(out, file_json(n, idx)) != 0) {
      json_decref(idx);
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    }
  }
  json_decref(idx);
  return MQPROC_OK;
}

int mqproc__mets_query(const mqproc__mets_t *m, const mqproc__mets_query_t *q, json_t **files,
                       mqproc__mets_why_t *why, char *err) {
  const char *values[] = {q->file_id, q->file_grp,       q->mimetype,
                          q->url,     q->local_filename, q->page_id};
  filter_t f[5] = {{0}};
  json_t *pages = NULL;
  int rc = MQPROC_OK;
  *files = NULL;
  if (why != NULL)
    *why = MQPROC__METS_WHY_NONE;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(values); i++) {
    char *copy = NULL;
    if (values[i] != NULL && mqproc__utf8_clean(values[i], &copy) != values[i]) {
      free(copy);
      return fail(why, MQPROC__METS_WHY_VALUE, MQPROC_EINVAL, err, "a query value is not UTF-8%s%s",
                  "", "");
    }
  }
  /* OCR-D's order: the pages first (ValueError, re.error), then the regular expressions */
  if (q->page_id != NULL && *q->page_id != '\0')
    rc = page_files(m, q->page_id, &pages, why, err);
  else if (q->page_id != NULL && (pages = json_object()) == NULL) /* "": no page, no file */
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (size_t i = 0; rc == MQPROC_OK && i < 5; i++) /* ID, fileGrp, mimetype, url, local */
    rc = filter_make(values[i], i < 4, &f[i], why, err);
  if (rc == MQPROC_OK && (*files = json_array()) == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (rc == MQPROC_OK && (rc = collect(m, pages, f, *files, why, err)) != MQPROC_OK) {
    json_decref(*files);
    *files = NULL;
  }
  for (size_t i = 0; i < 5; i++)
    pcre2_code_free(f[i].re);
  json_decref(pages);
  return rc;
}

int mqproc__mets_find(const mqproc__mets_t *m, const mqproc__mets_query_t *q, json_t **files,
                      char *err) {
  return mqproc__mets_query(m, q, files, NULL, err);
}
