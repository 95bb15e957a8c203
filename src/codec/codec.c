/* Codec: message bytes -> json_t (JSON or YAML), OCR-D schema validation, result encoding.
 *
 * API (see codec.h): mqproc__codec_parse(), mqproc__doc_job_id(), mqproc__msg_validate(),
 * mqproc__msg_free(), mqproc__doc_encode(), mqproc__result_encode(). The YAML side lives
 * in codec_yaml*.c.
 *
 * Validation follows OCR-D core's message_processing.schema.yml with these deliberate
 * differences: callback URLs may be https:// (core's `^http?://` rejects it by accident),
 * created_time must be a JSON/YAML integer (jsonschema would take 5.0), strings must not
 * hold NUL characters, and job_id, path_to_mets, workspace_id, result_queue_name and file
 * group names must be non-empty. An empty page_id is treated as absent (core omits it).
 *
 * A message that names no workspace and no file groups (none of path_to_mets,
 * workspace_id, input_file_grps, output_file_grps, page_id) is the job of a processor
 * that is not an OCR-D processor: it needs only processor_name; job_id and created_time
 * may be given (checked as above) or are made by the server (delivery.c). Whether the
 * server's processor takes such jobs is the server's to say. Any OCR-D key makes the
 * message an OCR-D job, validated as OCR-D's schema says.
 *
 * To accept a new message key: add one line to key_rules[] (and a field to mqproc__msg_t
 * if the server needs it).
 */
#include "codec/codec.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/util.h"

/* ---------------------------------------------------------------------------------------
 * Parsing: sanity checks on the raw bytes, then JSON or YAML.
 * ------------------------------------------------------------------------------------- */

/* Offset of the first NUL byte or malformed UTF-8 sequence, or len when there is none. */
static size_t first_bad_byte(const unsigned char *s, size_t len) {
  size_t i = 0;
  while (i < len) {
    size_t k = s[i] == 0 ? 0 : mqproc__utf8_seq_len(s + i, len - i);
    if (k == 0)
      return i;
    i += k;
  }
  return len;
}

/* 1-based line and character column of byte offset off (the prefix is valid UTF-8). */
static void line_col(const unsigned char *s, size_t off, size_t *line, size_t *col) {
  size_t i;
  *line = 1;
  *col = 1;
  for (i = 0; i < off; i++) {
    if (s[i] == '\n') {
      (*line)++;
      *col = 1;
    } else if ((s[i] & 0xC0) != 0x80) {
      (*col)++;
    }
  }
}

static int check_bytes(const unsigned char *s, size_t len, char *err) {
  size_t off = first_bad_byte(s, len);
  size_t line;
  size_t col;
  if (off == len)
    return 0;
  line_col(s, off, &line, &col);
  if (s[off] == 0)
    return mqproc__err(err, MQPROC_ECODEC_SYNTAX,
                       "message contains a NUL byte at line %zu, column %zu (offset %zu)", line,
                       col, off);
  return mqproc__err(err, MQPROC_ECODEC_SYNTAX,
                     "message is not valid UTF-8 at line %zu, column %zu (offset %zu, byte 0x%02X)",
                     line, col, off, s[off]);
}

/* Whether a JSON error may mean the body is YAML flow text after all (`{job_id: x}`):
 * only a plain syntax error. A body that is JSON but holds what JSON cannot carry here
 * (a number out of range, a \u0000, a duplicate key) is reported as the JSON error it
 * is: read as YAML, `1e400` would become the string "1e400". */
static int yaml_may_read_it(const json_error_t *jerr) {
  enum json_error_code code = json_error_code(jerr);
  return code == json_error_invalid_syntax || code == json_error_premature_end_of_input ||
         code == json_error_end_of_input_expected;
}

/* JSON first for bodies that look like JSON; YAML (which also reads JSON-ish flow text
 * such as `{job_id: x}`) when that fails with a plain syntax error. Both failures are
 * reported then. */
static int parse_json_or_yaml(const char *s, size_t len, json_t **doc, mqproc__format_t *fmt,
                              char *err) {
  json_error_t jerr;
  char yerr[MQPROC_ERR_LEN];
  int rc;
  *doc = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr);
  if (*doc != NULL) {
    *fmt = MQPROC__FMT_JSON;
    return 0;
  }
  if (json_error_code(&jerr) == json_error_out_of_memory)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory while parsing JSON");
  if (!yaml_may_read_it(&jerr))
    return mqproc__err(err, MQPROC_ECODEC_SYNTAX, "JSON: line %d, column %d: %s", jerr.line,
                       jerr.column, jerr.text);
  yerr[0] = '\0';
  rc = mqproc__yaml_load(s, len, doc, yerr);
  if (rc == 0) {
    *fmt = MQPROC__FMT_YAML;
    return 0;
  }
  if (rc == MQPROC_ENOMEM)
    return mqproc__err(err, rc, "%s", yerr);
  return mqproc__err(err, MQPROC_ECODEC_SYNTAX, "JSON: line %d, column %d: %s; YAML: %s", jerr.line,
                     jerr.column, jerr.text, yerr);
}

int mqproc__codec_parse(const void *body, size_t len, json_t **doc, mqproc__format_t *fmt,
                        char *err) {
  const char *s = body;
  char yerr[MQPROC_ERR_LEN];
  mqproc__format_t dummy;
  size_t i = 0;
  int rc;
  if (doc == NULL || (body == NULL && len > 0))
    return mqproc__err(err, MQPROC_EINVAL, "invalid argument");
  *doc = NULL;
  if (fmt == NULL)
    fmt = &dummy;
  while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
    i++;
  if (i == len)
    return mqproc__err(err, MQPROC_ECODEC_SYNTAX, "empty message");
  if ((rc = check_bytes((const unsigned char *)s, len, err)) != 0)
    return rc;
  if (s[i] == '{' || s[i] == '[')
    return parse_json_or_yaml(s, len, doc, fmt, err);
  yerr[0] = '\0';
  if ((rc = mqproc__yaml_load(s, len, doc, yerr)) != 0)
    return rc == MQPROC_ECODEC_SYNTAX ? mqproc__err(err, rc, "YAML: %s", yerr)
                                      : mqproc__err(err, rc, "%s", yerr);
  *fmt = MQPROC__FMT_YAML;
  return 0;
}

const char *mqproc__doc_job_id(const json_t *doc) {
  const json_t *v = json_is_object(doc) ? json_object_get(doc, "job_id") : NULL;
  const char *s = json_string_value(v);
  return s != NULL && s[0] != '\0' ? s : NULL;
}

/* ---- what operators see: passwords masked ------------------------------------------ */

/* Masks the strings under v (apply) or only looks whether one would change (stops at the
 * first); returns how many. Strings without "://" or "password" are left unread by the
 * masker: the common message has none. */
static int mask_walk(json_t *v, int apply) {
  const char *key, *s;
  json_t *x;
  size_t i;
  int n = 0;
  if (json_is_object(v)) {
    json_object_foreach(v, key, x) {
      if ((n += mask_walk(x, apply)) > 0 && !apply)
        return n;
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, x) {
      if ((n += mask_walk(x, apply)) > 0 && !apply)
        return n;
    }
  } else if ((s = json_string_value(v)) != NULL &&
             (strstr(s, "://") != NULL || strcasestr(s, "password") != NULL)) {
    size_t cap = 2 * strlen(s) + 64; /* a mask adds at most 2 bytes per 7 it replaces */
    char *masked = malloc(cap);
    if (masked == NULL) /* cannot tell: hide it all */
      return apply ? (json_string_set(v, "***"), 1) : 1;
    mqproc__mask_secret(s, masked, cap);
    if (strcmp(masked, s) != 0) {
      n = 1;
      if (apply && json_string_set(v, masked) != 0)
        json_string_set(v, "***");
    }
    free(masked);
  }
  return n;
}

int mqproc__doc_mask(json_t *doc) {
  return mask_walk(doc, 1);
}

json_t *mqproc__doc_masked(const json_t *doc) {
  json_t *copy;
  if (mask_walk((json_t *)doc, 0) == 0) /* only read */
    return NULL;
  if ((copy = json_deep_copy(doc)) != NULL)
    mqproc__doc_mask(copy);
  return copy;
}

/* ---------------------------------------------------------------------------------------
 * Validation: one rule per key, data-driven.
 * ------------------------------------------------------------------------------------- */

/* Checks value v of key; returns 0 or MQPROC_ECODEC_INVALID with err "key: problem". */
typedef int (*check_fn)(const char *key, const json_t *v, char *err);

/* Where a checked value goes in mqproc__msg_t. */
enum slot { SLOT_NONE, SLOT_STR, SLOT_JSON, SLOT_INT };

/* Whether a key must be there: in every message, or in an OCR-D job's only. */
enum need { OPTIONAL = 0, NEEDED_BY_OCRD, NEEDED };

struct key_rule {
  const char *name;
  check_fn check;
  enum slot slot;
  size_t offset; /* offsetof(mqproc__msg_t, field) unless SLOT_NONE */
  enum need required;
  int ocrd; /* the key makes a message an OCR-D job: it names a workspace or file groups */
};

/* "a string", "a sequence"...: the type of v for error messages (YAML words). */
static const char *type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "a mapping";
  case JSON_ARRAY:
    return "a sequence";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a float";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
  default:
    return "null";
  }
}

static int invalid(char *err, const char *key, const char *what, const json_t *v) {
  return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: must be %s, got %s", key, what, type_name(v));
}

/* A string without NUL characters (jansson strings may hold them, C strings cannot). */
static int is_clean_string(const json_t *v) {
  return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v);
}

static int check_string(const char *key, const json_t *v, char *err) {
  if (!json_is_string(v))
    return invalid(err, key, "a string", v);
  if (!is_clean_string(v))
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: must not contain NUL characters", key);
  return 0;
}

static int check_nonempty_string(const char *key, const json_t *v, char *err) {
  int rc = check_string(key, v, err);
  if (rc == 0 && json_string_length(v) == 0)
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: must be a non-empty string", key);
  return rc;
}

/* What AMQP can carry: job_id becomes the result's message_id, result_queue_name a routing
 * key and queue name, both short strings of at most 255 bytes. Refused here, at decode,
 * rather than by the AMQP library when the result is published. */
static int check_short_string(const char *key, const json_t *v, const char *why, char *err) {
  int rc = check_nonempty_string(key, v, err);
  if (rc == 0 && json_string_length(v) > MQPROC__MAX_SHORT_STRING)
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: must be at most %d bytes (%s), got %zu",
                       key, MQPROC__MAX_SHORT_STRING, why, json_string_length(v));
  return rc;
}

static int check_job_id(const char *key, const json_t *v, char *err) {
  return check_short_string(key, v, "it is the AMQP message_id of the result", err);
}

static int check_queue_name(const char *key, const json_t *v, char *err) {
  return check_short_string(key, v, "an AMQP queue name", err);
}

/* Any name, not only OCR-D's ocrd-*: a message must name the server's own processor,
 * which mqproc__msg_validate checks. */
static int check_processor_name(const char *key, const json_t *v, char *err) {
  return check_short_string(key, v, "an AMQP queue name", err);
}

static int check_created_time(const char *key, const json_t *v, char *err) {
  if (!json_is_integer(v))
    return invalid(err, key, "an integer >= 0", v);
  if (json_integer_value(v) < 0)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: must be an integer >= 0, got %" JSON_INTEGER_FORMAT, key,
                       json_integer_value(v));
  if (json_integer_value(v) > MQPROC__MAX_CREATED_TIME)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: must be Unix time in seconds, at most %lld (9999-12-31), got "
                       "%" JSON_INTEGER_FORMAT " (milliseconds or microseconds?)",
                       key, MQPROC__MAX_CREATED_TIME, json_integer_value(v));
  return 0;
}

static int check_file_grps(const char *key, const json_t *v, char *err) {
  size_t i, total = 0;
  if (!json_is_array(v))
    return invalid(err, key, "a non-empty sequence of strings", v);
  if (json_array_size(v) == 0)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: must be a non-empty sequence of strings, got an empty sequence", key);
  if (json_array_size(v) > MQPROC__MAX_FILE_GRPS)
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: at most %d file groups, got %zu", key,
                       MQPROC__MAX_FILE_GRPS, json_array_size(v));
  for (i = 0; i < json_array_size(v); i++) {
    const json_t *item = json_array_get(v, i);
    if (!is_clean_string(item) || json_string_length(item) == 0)
      return mqproc__err(err, MQPROC_ECODEC_INVALID,
                         "%s: item %zu must be a non-empty string without NUL, got %s", key, i + 1,
                         type_name(item));
    total += json_string_length(item) + 1;
  }
  if (total > MQPROC__MAX_FILE_GRPS_BYTES)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: the file group names take %zu bytes, at most %d are allowed", key,
                       total, MQPROC__MAX_FILE_GRPS_BYTES);
  return 0;
}

static int check_time_limit(const char *key, const json_t *v, char *err) {
  if (!json_is_integer(v) || json_integer_value(v) <= 0)
    return invalid(err, key, "an integer > 0 (seconds)", v);
  if (json_integer_value(v) > MQPROC__MAX_TIME_LIMIT_S)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: must be at most %d seconds, got %" JSON_INTEGER_FORMAT, key,
                       MQPROC__MAX_TIME_LIMIT_S, json_integer_value(v));
  return 0;
}

static int check_object(const char *key, const json_t *v, char *err) {
  return json_is_object(v) ? 0 : invalid(err, key, "a mapping", v);
}

static int check_agent_type(const char *key, const json_t *v, char *err) {
  const char *s = json_string_value(v);
  if (s == NULL || (strcmp(s, "worker") != 0 && strcmp(s, "server") != 0))
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: must be 'worker' or 'server'", key);
  return 0;
}

/* http:// or https:// (OCR-D's `^http?://` would refuse https by accident). */
static int check_http_url(const char *key, const json_t *v, char *err) {
  int rc = check_string(key, v, err);
  const char *s = json_string_value(v);
  if (rc == 0 && strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "%s: must be an http:// or https:// URL, got '%.100s'", key, s);
  return rc;
}

#define FIELD(f) offsetof(mqproc__msg_t, f)

/* The processing-message schema, one key per line. */
static const struct key_rule key_rules[] = {
    {"job_id", check_job_id, SLOT_STR, FIELD(job_id), NEEDED_BY_OCRD, 0},
    {"processor_name", check_processor_name, SLOT_STR, FIELD(processor_name), NEEDED, 0},
    {"created_time", check_created_time, SLOT_INT, FIELD(created_time), NEEDED_BY_OCRD, 0},
    {"input_file_grps", check_file_grps, SLOT_JSON, FIELD(input_file_grps), NEEDED_BY_OCRD, 1},
    {"output_file_grps", check_file_grps, SLOT_JSON, FIELD(output_file_grps), OPTIONAL, 1},
    {"path_to_mets", check_nonempty_string, SLOT_STR, FIELD(path_to_mets), OPTIONAL, 1},
    {"workspace_id", check_nonempty_string, SLOT_STR, FIELD(workspace_id), OPTIONAL, 1},
    {"page_id", check_string, SLOT_STR, FIELD(page_id), OPTIONAL, 1},
    {"parameters", check_object, SLOT_JSON, FIELD(parameters), OPTIONAL, 0},
    {"agent_type", check_agent_type, SLOT_NONE, 0, OPTIONAL, 0},
    {"result_queue_name", check_queue_name, SLOT_STR, FIELD(result_queue_name), OPTIONAL, 0},
    {"callback_url", check_http_url, SLOT_STR, FIELD(callback_url), OPTIONAL, 0},
    {"internal_callback_url", check_http_url, SLOT_STR, FIELD(internal_callback_url), OPTIONAL, 0},
    /* mqproc extension (OCR-D's server never sends it): per-message time limit */
    {"time_limit", check_time_limit, SLOT_INT, FIELD(time_limit), OPTIONAL, 0},
};

static void store(mqproc__msg_t *m, const struct key_rule *r, json_t *v) {
  char *field = (char *)m + r->offset;
  switch (r->slot) {
  case SLOT_STR:
    *(const char **)(void *)field = json_string_value(v);
    break;
  case SLOT_JSON:
    *(json_t **)(void *)field = v;
    break;
  case SLOT_INT:
    *(long long *)(void *)field = json_integer_value(v);
    break;
  case SLOT_NONE:
  default:
    break;
  }
}

static int check_unknown_keys(json_t *doc, char *err) {
  const char *key;
  json_t *v;
  json_object_foreach(doc, key, v) {
    size_t i;
    for (i = 0; i < MQPROC__ARRAY_LEN(key_rules); i++)
      if (strcmp(key, key_rules[i].name) == 0)
        break;
    if (i == MQPROC__ARRAY_LEN(key_rules))
      return mqproc__err(err, MQPROC_ECODEC_INVALID, "unknown key '%.100s'", key);
  }
  return 0;
}

/* An OCR-D job names a workspace or file groups; a message with none of those keys is a
 * job of a processor of one's own, which needs only processor_name. */
static int is_ocrd_job(const json_t *doc) {
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(key_rules); i++)
    if (key_rules[i].ocrd && json_object_get(doc, key_rules[i].name) != NULL)
      return 1;
  return 0;
}

static int apply_rules(mqproc__msg_t *m, char *err) {
  size_t i;
  m->ocrd = is_ocrd_job(m->doc);
  for (i = 0; i < MQPROC__ARRAY_LEN(key_rules); i++) {
    const struct key_rule *r = &key_rules[i];
    json_t *v = json_object_get(m->doc, r->name);
    int rc;
    if (v == NULL) {
      if (r->required == NEEDED || (r->required == NEEDED_BY_OCRD && m->ocrd))
        return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: required key missing", r->name);
      continue;
    }
    if ((rc = r->check(r->name, v, err)) != 0)
      return rc;
    store(m, r, v);
  }
  return 0;
}

/* No string anywhere in the document (parameters included) may hold a NUL character:
 * PostgreSQL's jsonb and text refuse it, and C strings would cut it short. YAML's "\0"
 * escape is the way one gets in (jansson's JSON parser refuses \u0000 already). */
static int check_no_nul(const json_t *v, const char *path, int depth, char *err) {
  const char *key;
  json_t *item;
  size_t i;
  char sub[160];
  if (json_is_string(v))
    return is_clean_string(v) ? 0
                              : mqproc__err(err, MQPROC_ECODEC_INVALID,
                                            "%s: must not contain NUL characters", path);
  if (depth > 1000)
    return mqproc__err(err, MQPROC_ECODEC_INVALID, "%s: nested too deeply", path);
  if (json_is_object(v)) {
    json_object_foreach((json_t *)v, key, item) {
      snprintf(sub, sizeof(sub), "%s%s%.60s", path, path[0] != '\0' ? "." : "", key);
      if (check_no_nul(item, sub, depth + 1, err) != 0)
        return MQPROC_ECODEC_INVALID;
    }
  } else if (json_is_array(v)) {
    json_array_foreach(v, i, item) {
      snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
      if (check_no_nul(item, sub, depth + 1, err) != 0)
        return MQPROC_ECODEC_INVALID;
    }
  }
  return 0;
}

/* The rules no single key can check: an OCR-D job's path/workspace oneOf, and our
 * processor name. */
static int check_message(mqproc__msg_t *m, const char *processor, char *err) {
  if (m->path_to_mets != NULL && m->workspace_id != NULL)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "path_to_mets and workspace_id are mutually exclusive");
  if (m->ocrd && m->path_to_mets == NULL && m->workspace_id == NULL)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "one of path_to_mets or workspace_id is required");
  if (processor != NULL && strcmp(m->processor_name, processor) != 0)
    return mqproc__err(err, MQPROC_ECODEC_INVALID,
                       "processor_name: message is for '%.100s', this server runs '%.100s'",
                       m->processor_name, processor);
  if (m->page_id != NULL && m->page_id[0] == '\0')
    m->page_id = NULL; /* core omits an empty page_id; so does the runner */
  return 0;
}

/* parameters is optional in the schema but always present for the runner. */
static int default_parameters(mqproc__msg_t *m, char *err) {
  json_t *p;
  if (m->parameters != NULL)
    return 0;
  p = json_object();
  if (p == NULL || json_object_set_new(m->doc, "parameters", p) != 0)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  m->parameters = p;
  return 0;
}

int mqproc__msg_validate(json_t *doc, mqproc__format_t fmt, const char *processor,
                         mqproc__msg_t **out, char *err) {
  mqproc__msg_t *m;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (doc == NULL || out == NULL) {
    json_decref(doc);
    return mqproc__err(err, MQPROC_EINVAL, "invalid argument");
  }
  if (!json_is_object(doc)) {
    rc = mqproc__err(err, MQPROC_ECODEC_INVALID, "message must be a mapping, got %s",
                     type_name(doc));
    json_decref(doc);
    return rc;
  }
  if ((m = mqproc__calloc(1, sizeof(*m))) == NULL) {
    json_decref(doc);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  m->doc = doc;
  m->format = fmt;
  m->created_time = -1;
  m->time_limit = -1;
  rc = check_unknown_keys(doc, err);
  if (rc == 0)
    rc = apply_rules(m, err);
  if (rc == 0)
    rc = check_no_nul(doc, "", 0, err);
  if (rc == 0)
    rc = check_message(m, processor, err);
  if (rc == 0)
    rc = default_parameters(m, err);
  if (rc != 0) {
    mqproc__msg_free(m);
    return rc;
  }
  *out = m;
  return 0;
}

void mqproc__msg_free(mqproc__msg_t *msg) {
  if (msg == NULL)
    return;
  json_decref(msg->doc);
  free(msg);
}

/* ---------------------------------------------------------------------------------------
 * Result messages.
 * ------------------------------------------------------------------------------------- */

static int is_job_state(const char *state) {
  static const char *const states[] = {"CACHED",  "CANCELLED", "QUEUED", "RUNNING",
                                       "SUCCESS", "FAILED",    "UNSET"};
  size_t i;
  for (i = 0; i < MQPROC__ARRAY_LEN(states); i++)
    if (strcmp(state, states[i]) == 0)
      return 1;
  return 0;
}

static json_t *result_object(const mqproc__msg_t *msg, const char *state) {
  json_t *o = json_object();
  const char *job_id = msg->job_id != NULL ? msg->job_id : "";
  const char *path = msg->path_to_mets != NULL ? msg->path_to_mets : "";
  const char *ws = msg->workspace_id != NULL ? msg->workspace_id : "";
  if (o == NULL || json_object_set_new(o, "job_id", json_string(job_id)) != 0 ||
      json_object_set_new(o, "state", json_string(state)) != 0 ||
      json_object_set_new(o, "path_to_mets", json_string(path)) != 0 ||
      json_object_set_new(o, "workspace_id", json_string(ws)) != 0) {
    json_decref(o);
    return NULL;
  }
  return o;
}

/* Compact JSON with sorted keys and \uXXXX escapes, in a mqproc__malloc() buffer. */
static int dump_json(const json_t *o, char **out, size_t *len) {
  const size_t flags = JSON_COMPACT | JSON_SORT_KEYS | JSON_ENSURE_ASCII;
  size_t n = json_dumpb(o, NULL, 0, flags);
  char *buf;
  if (n == 0 || (buf = mqproc__malloc(n + 1)) == NULL)
    return MQPROC_ENOMEM;
  if (json_dumpb(o, buf, n, flags) != n) {
    free(buf);
    return MQPROC_ENOMEM;
  }
  buf[n] = '\0';
  *out = buf;
  if (len != NULL)
    *len = n;
  return 0;
}

mqproc__format_t mqproc__format_parse(const char *name) {
  return name != NULL && strcmp(name, "yaml") == 0 ? MQPROC__FMT_YAML : MQPROC__FMT_JSON;
}

const char *mqproc__format_name(mqproc__format_t fmt) {
  return fmt == MQPROC__FMT_YAML ? "yaml" : "json";
}

int mqproc__doc_encode(const json_t *doc, mqproc__format_t fmt, char **out, size_t *len,
                       char *err) {
  *out = NULL;
  if (len != NULL)
    *len = 0;
  if (fmt == MQPROC__FMT_YAML)
    return mqproc__yaml_dump(doc, out, len, err);
  if (dump_json(doc, out, len) != MQPROC_OK)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory encoding a request");
  return MQPROC_OK;
}

int mqproc__result_encode(const mqproc__msg_t *msg, const char *state, mqproc__format_t fmt,
                          char **out, size_t *len) {
  json_t *o;
  int rc;
  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  if (msg == NULL || state == NULL || out == NULL || !is_job_state(state))
    return MQPROC_EINVAL;
  if ((o = result_object(msg, state)) == NULL)
    return MQPROC_ENOMEM;
  rc = mqproc__doc_encode(o, fmt, out, len, NULL);
  json_decref(o);
  return rc;
}
