/* Codec: processing messages (JSON or OCR-D's YAML) in, result messages out.
 *
 * API:
 *   mqproc__codec_parse()      bytes -> json_t document (syntax only), remembers the format
 *   mqproc__doc_job_id()       best-effort job_id of a document that failed validation
 *   mqproc__doc_masked()       a document as operators may see it: URL passwords masked
 *   mqproc__msg_validate()     document -> validated mqproc__msg_t (precise reason on error)
 *   mqproc__msg_free()
 *   mqproc__result_encode()    {job_id, state, path_to_mets, workspace_id} in JSON or YAML
 *   mqproc__yaml_load()/_dump() the YAML <-> json_t bridge (libyaml), YAML 1.1 core typing
 *   mqproc__yaml_plain_type()  how YAML 1.1 would resolve a plain scalar (used by both ways)
 *
 * To accept a new message key: add it to the key table in codec.c (with its type check).
 */
#ifndef MQPROC_CODEC_H
#define MQPROC_CODEC_H

#include <jansson.h>
#include <stddef.h>

#include "mqproc/mqproc.h"

typedef enum mqproc__format { MQPROC__FMT_JSON = 0, MQPROC__FMT_YAML = 1 } mqproc__format_t;

/* Limits a valid message keeps (docs/security.md lists them with their reasons). */
#define MQPROC__MAX_SHORT_STRING 255 /* job_id, result_queue_name, processor_name: AMQP */
#define MQPROC__MAX_CREATED_TIME 253402300799LL /* 9999-12-31T23:59:59Z in Unix seconds */
#define MQPROC__MAX_TIME_LIMIT_S 31536000       /* a year, like --time-limit */
#define MQPROC__MAX_FILE_GRPS 256               /* per input_file_grps / output_file_grps */
#define MQPROC__MAX_FILE_GRPS_BYTES 65536       /* their names joined with commas */

/* A validated processing message. All const char * / json_t * fields are borrowed
 * views into doc and live as long as the message; NULL when absent. */
typedef struct mqproc__msg {
  json_t *doc;             /* owned: the decoded request (a JSON object) */
  mqproc__format_t format; /* how the request was encoded */
  int ocrd;                /* an OCR-D job (a workspace, file groups); else a job of a
                              processor of one's own: only processor_name is certain */
  const char *job_id;      /* NULL only in a job that is not OCR-D's (the server makes one) */
  const char *processor_name;
  long long created_time;   /* -1 when absent */
  json_t *input_file_grps;  /* array of strings, >= 1 item (OCR-D jobs; else NULL) */
  json_t *output_file_grps; /* array of strings or NULL */
  const char *path_to_mets; /* OCR-D jobs: exactly one of path_to_mets / workspace_id */
  const char *workspace_id;
  const char *page_id;
  json_t *parameters; /* object; an empty object when absent */
  const char *result_queue_name;
  const char *callback_url;
  const char *internal_callback_url;
  long long time_limit; /* seconds per try (mqproc extension), -1 when absent */
} mqproc__msg_t;

/* Parses body (len bytes, need not be NUL-terminated) as JSON when it looks like JSON
 * and parses as such, else as YAML. On success *doc is a new reference (caller
 * json_decref()s it) and *fmt says which syntax matched. On failure returns
 * MQPROC_ECODEC_SYNTAX and err (MQPROC_ERR_LEN) says where (line/column) and why. */
int mqproc__codec_parse(const void *body, size_t len, json_t **doc, mqproc__format_t *fmt,
                        char *err);

/* Returns doc["job_id"] if doc is an object and that is a non-empty string, else NULL.
 * Borrowed from doc. */
const char *mqproc__doc_job_id(const json_t *doc);

/* Masks, in place, every string of doc (any depth) that holds a URL with a password
 * ("scheme://user:PASSWORD@host") or a conninfo password=, as mqproc__mask_secret() does
 * for log lines ("user:***@host"); returns how many strings it changed. */
int mqproc__doc_mask(json_t *doc);
/* A masked copy of doc (new reference) for what is stored and shown (the job table's
 * `request`), or NULL when nothing in it needs masking (show doc itself). */
json_t *mqproc__doc_masked(const json_t *doc);

/* Validates doc against the processing-message schema (OCR-D's rules: required keys,
 * types, no unknown keys, exactly one of path_to_mets/workspace_id, processor_name ==
 * processor when processor is not NULL, http(s) callback URLs). A message with no OCR-D
 * key (no workspace, no file groups) is a job that is not OCR-D's (msg->ocrd 0): it needs
 * only processor_name, and job_id may be NULL. Takes ownership of doc
 * in every case. On success *out is a new message (mqproc__msg_free()). On failure
 * returns MQPROC_ECODEC_INVALID, *out is NULL and err names the field and the problem,
 * e.g. "input_file_grps: must be a non-empty array of strings". */
int mqproc__msg_validate(json_t *doc, mqproc__format_t fmt, const char *processor,
                         mqproc__msg_t **out, char *err);

void mqproc__msg_free(mqproc__msg_t *msg);

/* Encodes the result message {job_id, state, path_to_mets, workspace_id} for msg
 * (missing path/workspace become "") in fmt. *out is malloc()ed, NUL-terminated,
 * *len excludes the NUL; caller free()s. */
int mqproc__result_encode(const mqproc__msg_t *msg, const char *state, mqproc__format_t fmt,
                          char **out, size_t *len);

/* The request_format names stored in the job table: "yaml" or "json". */
mqproc__format_t mqproc__format_parse(const char *name);
const char *mqproc__format_name(mqproc__format_t fmt);

/* Encodes a stored request document again in fmt (JSON compact with sorted keys, or YAML
 * as yaml.dump() writes it), e.g. to republish or dead-letter it when the original body is
 * gone. *out malloc()ed, NUL-terminated, *len (may be NULL) excludes the NUL; caller
 * free()s. */
int mqproc__doc_encode(const json_t *doc, mqproc__format_t fmt, char **out, size_t *len, char *err);

/* YAML (1.1, one document, as PyYAML safe_load accepts; no aliases, no custom tags)
 * to a json_t. Mapping keys must be scalars and unique. */
int mqproc__yaml_load(const char *buf, size_t len, json_t **out, char *err);

/* json_t to YAML as PyYAML's yaml.dump() writes it: block style, keys sorted, indentless
 * sequences, width 80, ASCII only, strings quoted where YAML 1.1 would read them as
 * another type. *out malloc()ed and NUL-terminated; caller free()s. */
int mqproc__yaml_dump(const json_t *v, char **out, size_t *len, char *err);

typedef enum mqproc__yaml_type {
  MQPROC__YAML_STR = 0,
  MQPROC__YAML_NULL,
  MQPROC__YAML_BOOL,
  MQPROC__YAML_INT,
  MQPROC__YAML_FLOAT,
  MQPROC__YAML_TIMESTAMP
} mqproc__yaml_type_t;

/* How YAML 1.1 (PyYAML's resolver) types the plain scalar s of length n. */
mqproc__yaml_type_t mqproc__yaml_plain_type(const char *s, size_t n);

#endif
