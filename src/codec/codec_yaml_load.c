/* YAML loader: libyaml parser events -> json_t, one document, as PyYAML's safe_load reads it.
 *
 * Choices worth knowing:
 * - TIMESTAMP plain scalars (2024-01-01, 2001-12-14 21:59:43.10 -5) load as JSON strings with
 *   their source text: JSON has no date type and every message field that could hold one is a
 *   string (PyYAML would build a datetime, which the OCR-D schema then rejects).
 * - .inf/.nan and floats beyond double range are errors: JSON cannot carry them.
 * - Integers beyond long long are errors (PyYAML has big ints).
 * - Non-string scalar keys (`1: x`, `yes: x`) are taken by their source text.
 * - Anchors, aliases, merge keys (<<) and tags other than !!str/int/float/bool/null/map/seq
 *   are rejected; so are duplicate keys (PyYAML keeps the last one) and a second document.
 */
#include "codec/codec.h"
#include "codec/codec_yaml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "base/util.h"

#define TAG_PREFIX "tag:yaml.org,2002:"

/* ---------------------------------------------------------------------------------------
 * Loader: libyaml parser events -> json_t, one document, depth-limited.
 * ------------------------------------------------------------------------------------- */

struct loader {
  yaml_parser_t parser;
  const char *buf;
  size_t len;
  char *err;
};

static int mark_err(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int mark_err(struct loader *ld, const yaml_mark_t *mark, const char *fmt, ...) {
  char reason[MQPROC_ERR_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof(reason), fmt, ap);
  va_end(ap);
  return mqproc__err(ld->err, MQPROC_ECODEC_SYNTAX, "line %zu, column %zu: %s", mark->line + 1,
                     mark->column + 1, reason);
}

/* Reader errors carry a byte offset only: turn it into a line and a character column. */
static int reader_err(struct loader *ld) {
  yaml_mark_t mark = {0, 0, 0};
  size_t off = ld->parser.problem_offset;
  size_t i;
  for (i = 0; i < off && i < ld->len; i++) {
    if (ld->buf[i] == '\n') {
      mark.line++;
      mark.column = 0;
    } else if (((unsigned char)ld->buf[i] & 0xC0) != 0x80) {
      mark.column++;
    }
  }
  return mark_err(ld, &mark, "%s (byte 0x%02X at offset %zu)",
                  ld->parser.problem ? ld->parser.problem : "unreadable input",
                  (unsigned)ld->parser.problem_value & 0xFF, off);
}

static int parser_err(struct loader *ld) {
  const yaml_parser_t *p = &ld->parser;
  if (p->error == YAML_MEMORY_ERROR)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory while parsing YAML");
  if (p->error == YAML_READER_ERROR)
    return reader_err(ld);
  if (p->context != NULL)
    return mark_err(ld, &p->problem_mark, "%s (%s)", p->problem ? p->problem : "invalid YAML",
                    p->context);
  return mark_err(ld, &p->problem_mark, "%s", p->problem ? p->problem : "invalid YAML");
}

static int next_event(struct loader *ld, yaml_event_t *ev) {
  if (!yaml_parser_parse(&ld->parser, ev))
    return parser_err(ld);
  return 0;
}

/* Maps an explicit scalar tag to the type it forces; -1 for unsupported tags. */
static int scalar_tag_type(const char *tag, mqproc__yaml_type_t *type) {
  static const struct {
    const char *name;
    mqproc__yaml_type_t type;
  } tags[] = {{TAG_PREFIX "str", MQPROC__YAML_STR},
              {TAG_PREFIX "int", MQPROC__YAML_INT},
              {TAG_PREFIX "float", MQPROC__YAML_FLOAT},
              {TAG_PREFIX "bool", MQPROC__YAML_BOOL},
              {TAG_PREFIX "null", MQPROC__YAML_NULL}};
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(tags); i++) {
    if (strcmp(tag, tags[i].name) == 0) {
      *type = tags[i].type;
      return 0;
    }
  }
  return -1;
}

/* How a scalar event is typed: implicit resolution for plain (or `!`-tagged) scalars,
 * string for quoted/block ones, else its explicit tag. */
static int scalar_type(struct loader *ld, const yaml_event_t *ev, mqproc__yaml_type_t *type) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  const char *tag = (const char *)ev->data.scalar.tag;
  if (ev->data.scalar.plain_implicit) {
    if (mqproc__yaml_is_merge_or_value(v, n))
      return mark_err(ld, &ev->start_mark, "plain '%s' must be quoted (YAML 1.1 %s key)", v,
                      v[0] == '=' ? "value" : "merge");
    *type = mqproc__yaml_plain_type(v, n);
    return 0;
  }
  *type = MQPROC__YAML_STR;
  if (tag != NULL && scalar_tag_type(tag, type) != 0)
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported", tag);
  return 0;
}

static int number_to_json(struct loader *ld, const yaml_event_t *ev, mqproc__yaml_type_t type,
                          json_t **out) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  long long i = 0;
  double d = 0.0;
  int rc;
  if (type == MQPROC__YAML_INT) {
    rc = mqproc__yaml_match_int(v, n) ? mqproc__yaml_int_value(v, n, &i) : INT_MALFORMED;
    if (rc == INT_OUT_OF_RANGE)
      return mark_err(ld, &ev->start_mark, "integer %.60s is out of range", v);
    if (rc != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!int value '%.60s'", v);
    *out = json_integer(i);
  } else {
    rc = mqproc__yaml_float_value(v, n, &d);
    if (rc == MQPROC_ENOMEM)
      return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
    if (rc == FLOAT_UNREPRESENTABLE)
      return mark_err(ld, &ev->start_mark, "float %.60s cannot be represented in JSON", v);
    if (rc != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!float value '%.60s'", v);
    *out = json_real(d);
  }
  return *out == NULL ? mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory") : 0;
}

static int scalar_to_json(struct loader *ld, const yaml_event_t *ev, json_t **out) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  mqproc__yaml_type_t type;
  int b;
  int rc = scalar_type(ld, ev, &type);
  if (rc != 0)
    return rc;
  switch (type) {
  case MQPROC__YAML_INT:
  case MQPROC__YAML_FLOAT:
    return number_to_json(ld, ev, type, out);
  case MQPROC__YAML_BOOL:
    if (mqproc__yaml_bool_value(v, n, &b) != 0)
      return mark_err(ld, &ev->start_mark, "invalid !!bool value '%.60s'", v);
    *out = json_boolean(b);
    break;
  case MQPROC__YAML_NULL:
    *out = json_null();
    break;
  case MQPROC__YAML_STR:
  case MQPROC__YAML_TIMESTAMP: /* kept as text, see the file comment */
  default:
    *out = json_stringn(v, n);
    break;
  }
  return *out == NULL ? mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory") : 0;
}

static int load_node(struct loader *ld, yaml_event_t *ev, int depth, json_t **out);

static int load_sequence(struct loader *ld, int depth, json_t **out) {
  json_t *arr = json_array();
  json_t *item;
  yaml_event_t ev;
  int rc = 0;
  if (arr == NULL)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  for (;;) {
    if ((rc = next_event(ld, &ev)) != 0)
      break;
    if (ev.type == YAML_SEQUENCE_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if ((rc = load_node(ld, &ev, depth + 1, &item)) != 0)
      break;
    if (json_array_append_new(arr, item) != 0) {
      rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
      break;
    }
  }
  if (rc != 0)
    json_decref(arr);
  else
    *out = arr;
  return rc;
}

/* Checks a mapping key event (a scalar, allowed tag, no merge, no NUL, not yet in obj). */
static int check_key(struct loader *ld, const yaml_event_t *ev, const json_t *obj) {
  const char *v = (const char *)ev->data.scalar.value;
  size_t n = ev->data.scalar.length;
  mqproc__yaml_type_t type;
  if (ev->type == YAML_ALIAS_EVENT)
    return mark_err(ld, &ev->start_mark, "aliases are not supported");
  if (ev->type != YAML_SCALAR_EVENT)
    return mark_err(ld, &ev->start_mark, "mapping keys must be scalars");
  if (ev->data.scalar.anchor != NULL)
    return mark_err(ld, &ev->start_mark, "anchors and aliases are not supported");
  if (ev->data.scalar.plain_implicit && n == 2 && memcmp(v, "<<", 2) == 0)
    return mark_err(ld, &ev->start_mark, "merge keys ('<<') are not supported");
  if (!ev->data.scalar.plain_implicit && ev->data.scalar.tag != NULL &&
      scalar_tag_type((const char *)ev->data.scalar.tag, &type) != 0)
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported",
                    (const char *)ev->data.scalar.tag);
  if (memchr(v, '\0', n) != NULL)
    return mark_err(ld, &ev->start_mark, "mapping key contains a NUL character");
  if (json_object_get(obj, v) != NULL)
    return mark_err(ld, &ev->start_mark, "duplicate key '%.100s'", v);
  return 0;
}

/* Loads one key (*kev, consumed) and its value into obj. */
static int load_pair(struct loader *ld, json_t *obj, yaml_event_t *kev, int depth) {
  char *key = NULL;
  json_t *val = NULL;
  yaml_event_t vev;
  int rc = check_key(ld, kev, obj);
  if (rc == 0 && (key = mqproc__strdup((const char *)kev->data.scalar.value)) == NULL)
    rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  yaml_event_delete(kev);
  if (rc == 0)
    rc = next_event(ld, &vev);
  if (rc == 0)
    rc = load_node(ld, &vev, depth + 1, &val);
  if (rc == 0 && json_object_set_new(obj, key, val) != 0)
    rc = mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  free(key);
  return rc;
}

static int load_mapping(struct loader *ld, int depth, json_t **out) {
  json_t *obj = json_object();
  yaml_event_t ev;
  int rc = 0;
  if (obj == NULL)
    return mqproc__err(ld->err, MQPROC_ENOMEM, "out of memory");
  for (;;) {
    if ((rc = next_event(ld, &ev)) != 0)
      break;
    if (ev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&ev);
      break;
    }
    if ((rc = load_pair(ld, obj, &ev, depth)) != 0)
      break;
  }
  if (rc != 0)
    json_decref(obj);
  else
    *out = obj;
  return rc;
}

/* The tag of a collection start event must be absent, `!`, or the standard one. */
static int collection_tag_ok(const yaml_char_t *tag, const char *standard) {
  return tag == NULL || strcmp((const char *)tag, "!") == 0 ||
         strcmp((const char *)tag, standard) == 0;
}

static int check_node(struct loader *ld, const yaml_event_t *ev, int depth) {
  const yaml_char_t *anchor = NULL;
  const yaml_char_t *tag = NULL;
  const char *standard = NULL;
  if (ev->type == YAML_ALIAS_EVENT)
    return mark_err(ld, &ev->start_mark, "aliases are not supported");
  if (ev->type == YAML_SCALAR_EVENT)
    anchor = ev->data.scalar.anchor;
  if (ev->type == YAML_SEQUENCE_START_EVENT) {
    anchor = ev->data.sequence_start.anchor;
    tag = ev->data.sequence_start.tag;
    standard = TAG_PREFIX "seq";
  }
  if (ev->type == YAML_MAPPING_START_EVENT) {
    anchor = ev->data.mapping_start.anchor;
    tag = ev->data.mapping_start.tag;
    standard = TAG_PREFIX "map";
  }
  if (anchor != NULL)
    return mark_err(ld, &ev->start_mark, "anchors and aliases are not supported");
  if (standard != NULL && !collection_tag_ok(tag, standard))
    return mark_err(ld, &ev->start_mark, "tag '%.100s' is not supported", (const char *)tag);
  if (depth > MAX_DEPTH)
    return mark_err(ld, &ev->start_mark, "nesting deeper than %d levels", MAX_DEPTH);
  return 0;
}

/* Loads the node that starts with *ev (consumed) into *out (a new reference). */
static int load_node(struct loader *ld, yaml_event_t *ev, int depth, json_t **out) {
  int rc = check_node(ld, ev, depth);
  if (rc == 0) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT:
      rc = scalar_to_json(ld, ev, out);
      break;
    case YAML_SEQUENCE_START_EVENT:
      rc = load_sequence(ld, depth, out);
      break;
    case YAML_MAPPING_START_EVENT:
      rc = load_mapping(ld, depth, out);
      break;
    default:
      rc = mark_err(ld, &ev->start_mark, "unexpected YAML event");
      break;
    }
  }
  yaml_event_delete(ev);
  return rc;
}

/* Reads the next event and requires it to be of type want (then deletes it).
 * Returns 1 (event kept in *ev) when it is of another type. */
static int expect_event(struct loader *ld, yaml_event_t *ev, yaml_event_type_t want) {
  int rc = next_event(ld, ev);
  if (rc != 0)
    return rc;
  if (ev->type != want)
    return 1;
  yaml_event_delete(ev);
  return 0;
}

/* stream-start document-start node document-end stream-end, nothing else. */
static int load_stream(struct loader *ld, json_t **out) {
  yaml_event_t ev;
  json_t *root = NULL;
  int rc = expect_event(ld, &ev, YAML_STREAM_START_EVENT);
  if (rc == 0 && (rc = expect_event(ld, &ev, YAML_STREAM_END_EVENT)) == 0)
    return mqproc__err(ld->err, MQPROC_ECODEC_SYNTAX, "empty message (no YAML document)");
  if (rc == 1) /* the document start */
    yaml_event_delete(&ev);
  if (rc == 1 && (rc = next_event(ld, &ev)) == 0)
    rc = load_node(ld, &ev, 1, &root);
  if (rc == 0)
    rc = expect_event(ld, &ev, YAML_DOCUMENT_END_EVENT);
  if (rc == 0 && (rc = expect_event(ld, &ev, YAML_STREAM_END_EVENT)) == 1) {
    rc = mark_err(ld, &ev.start_mark, "only one YAML document is allowed");
    yaml_event_delete(&ev);
  }
  if (rc == 1) { /* cannot happen with libyaml's grammar; be safe */
    rc = mark_err(ld, &ev.start_mark, "unexpected YAML event");
    yaml_event_delete(&ev);
  }
  if (rc != 0)
    json_decref(root);
  else
    *out = root;
  return rc;
}

int mqproc__yaml_load(const char *buf, size_t len, json_t **out, char *err) {
  struct loader ld;
  int rc;
  if (out == NULL || (buf == NULL && len > 0))
    return mqproc__err(err, MQPROC_EINVAL, "invalid argument");
  *out = NULL;
  memset(&ld, 0, sizeof(ld));
  if (!yaml_parser_initialize(&ld.parser))
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  ld.buf = buf != NULL ? buf : "";
  ld.len = len;
  ld.err = err;
  yaml_parser_set_input_string(&ld.parser, (const unsigned char *)ld.buf, len);
  yaml_parser_set_encoding(&ld.parser, YAML_UTF8_ENCODING);
  rc = load_stream(&ld, out);
  yaml_parser_delete(&ld.parser);
  return rc;
}
