/* The AMQP headers of a delivery as a JSON object: what the job table stores (`jobs
 * show`) and what a processor gets (the "headers" key of its stdin JSON,
 * mqproc_job_header()). Every field kind maps to its JSON kind (tables to objects, arrays
 * to arrays, timestamps to integers, decimals to numbers); a string that is not UTF-8 and
 * a byte array become "\xNN" hex text. Nesting deeper than MAX_DEPTH and tables beyond
 * MAX_JSON bytes are cut (the job still runs: headers are metadata, never the job). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "broker/amqp_int.h"
#include "base/util.h"

#define MAX_DEPTH 8
#define MAX_JSON (64 * 1024)

static json_t *bytes_json(amqp_bytes_t b, int hex) {
  json_t *s = hex ? NULL : json_stringn(b.bytes, b.len);
  char *t;
  if (s != NULL)
    return s;
  if (b.len > MAX_JSON / 4 || (t = mqproc__malloc(4 * b.len + 1)) == NULL)
    return json_string("(too long)");
  for (size_t i = 0; i < b.len; i++)
    snprintf(t + 4 * i, 5, "\\x%02x", ((const unsigned char *)b.bytes)[i]);
  s = json_string(t);
  free(t);
  return s;
}

static json_t *table_json(const amqp_table_t *t, int depth);

static json_t *value_json(const amqp_field_value_t *v, int depth) {
  json_t *a;
  switch (v->kind) {
  case AMQP_FIELD_KIND_BOOLEAN:
    return json_boolean(v->value.boolean);
  case AMQP_FIELD_KIND_I8:
    return json_integer(v->value.i8);
  case AMQP_FIELD_KIND_U8:
    return json_integer(v->value.u8);
  case AMQP_FIELD_KIND_I16:
    return json_integer(v->value.i16);
  case AMQP_FIELD_KIND_U16:
    return json_integer(v->value.u16);
  case AMQP_FIELD_KIND_I32:
    return json_integer(v->value.i32);
  case AMQP_FIELD_KIND_U32:
    return json_integer(v->value.u32);
  case AMQP_FIELD_KIND_I64:
    return json_integer(v->value.i64);
  case AMQP_FIELD_KIND_U64:
  case AMQP_FIELD_KIND_TIMESTAMP: /* above JSON's (and jansson's) int64: a real, not negative */
    return v->value.u64 > INT64_MAX ? json_real((double)v->value.u64)
                                    : json_integer((json_int_t)v->value.u64);
  case AMQP_FIELD_KIND_F32:
    return json_real(v->value.f32); /* NULL (dropped) for NaN and infinities */
  case AMQP_FIELD_KIND_F64:
    return json_real(v->value.f64);
  case AMQP_FIELD_KIND_DECIMAL: {
    double d = v->value.decimal.value;
    for (int i = 0; i < v->value.decimal.decimals; i++)
      d /= 10;
    return json_real(d);
  }
  case AMQP_FIELD_KIND_UTF8:
    return bytes_json(v->value.bytes, 0);
  case AMQP_FIELD_KIND_BYTES:
    return bytes_json(v->value.bytes, 1);
  case AMQP_FIELD_KIND_TABLE:
    return table_json(&v->value.table, depth + 1);
  case AMQP_FIELD_KIND_ARRAY:
    if (depth >= MAX_DEPTH || (a = json_array()) == NULL)
      return json_string("(nested too deep)");
    for (int i = 0; i < v->value.array.num_entries; i++)
      json_array_append_new(a,
                            value_json(&v->value.array.entries[i], depth + 1)); /* NULL: skipped */
    return a;
  default:
    return json_null();
  }
}

static json_t *table_json(const amqp_table_t *t, int depth) {
  json_t *o;
  char key[256];
  if (depth >= MAX_DEPTH || (o = json_object()) == NULL)
    return json_string("(nested too deep)");
  for (int i = 0; i < t->num_entries; i++) {
    const amqp_table_entry_t *e = &t->entries[i];
    snprintf(key, sizeof(key), "%.*s", (int)e->key.len, (const char *)e->key.bytes);
    if (depth == 0 && strcmp(key, SEQ_HEADER) == 0)
      continue; /* our own bookkeeping on what we publish */
    json_object_set_new(o, key, value_json(&e->value, depth)); /* NULL: not set */
  }
  return o;
}

char *mqproc__amqp_headers_json(const amqp_table_t *t) {
  json_t *o;
  char *text;
  if (t->num_entries == 0)
    return NULL;
  if ((o = table_json(t, 0)) == NULL || json_object_size(o) == 0) {
    json_decref(o);
    return NULL;
  }
  text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(o);
  if (text != NULL && strlen(text) > MAX_JSON) {
    free(text);
    text = mqproc__strdup("{\"mqproc-note\":\"headers over 64 KiB were not kept\"}");
  }
  return text;
}
