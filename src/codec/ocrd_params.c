/* Parameters against an ocrd-tool description, in OCR-D's words (ocrd_params.h). The
 * schema OCR-D builds is {"type": "object", "required": [...], "additionalProperties":
 * false, "properties": <the tool's parameters>}, and jsonschema reports its errors in the
 * schema's key order: the required ones, the unknown ones, then each property's. */
#include "codec/ocrd_params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/pyjson.h"

/* ---- a growing text ------------------------------------------------------------------- */

typedef struct text {
  char *p;
  size_t len, cap;
  int nomem;
} text_t;

static void put(text_t *t, const char *s, size_t n) {
  if (t->nomem)
    return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap > 0 ? t->cap : 64;
    char *p;
    while (cap < t->len + n + 1)
      cap *= 2;
    if ((p = realloc(t->p, cap)) == NULL) {
      t->nomem = 1;
      return;
    }
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, s, n);
  t->len += n;
  t->p[t->len] = '\0';
}

static void puts_(text_t *t, const char *s) {
  put(t, s, strlen(s));
}

/* A string as Python's repr(): single quotes unless it holds one and no double quote. */
static void put_pystr(text_t *t, const char *s) {
  char q = strchr(s, '\'') != NULL && strchr(s, '"') == NULL ? '"' : '\'';
  put(t, &q, 1);
  for (const unsigned char *c = (const unsigned char *)s; *c != '\0'; c++) {
    char esc[8];
    if (*c == '\\' || *c == (unsigned char)q) {
      esc[0] = '\\';
      esc[1] = (char)*c;
      put(t, esc, 2);
    } else if (*c == '\n' || *c == '\r' || *c == '\t') {
      put(t, *c == '\n' ? "\\n" : *c == '\r' ? "\\r" : "\\t", 2);
    } else if (*c < 0x20 || *c == 0x7f) {
      snprintf(esc, sizeof(esc), "\\x%02x", *c);
      puts_(t, esc);
    } else {
      put(t, (const char *)c, 1);
    }
  }
  put(t, &q, 1);
}

static void put_repr(text_t *t, const json_t *v) {
  size_t i;
  const char *k;
  json_t *x;
  char *num;
  switch (json_typeof(v)) {
  case JSON_STRING:
    put_pystr(t, json_string_value(v));
    return;
  case JSON_TRUE:
    puts_(t, "True");
    return;
  case JSON_FALSE:
    puts_(t, "False");
    return;
  case JSON_NULL:
    puts_(t, "None");
    return;
  case JSON_ARRAY:
    puts_(t, "[");
    json_array_foreach(v, i, x) {
      if (i > 0)
        puts_(t, ", ");
      put_repr(t, x);
    }
    puts_(t, "]");
    return;
  case JSON_OBJECT:
    puts_(t, "{");
    i = 0;
    json_object_foreach((json_t *)v, k, x) {
      if (i++ > 0)
        puts_(t, ", ");
      put_pystr(t, k);
      puts_(t, ": ");
      put_repr(t, x);
    }
    puts_(t, "}");
    return;
  default: /* numbers: json.dumps writes them as repr() does */
    if ((num = mqproc__json_python(v)) == NULL) {
      t->nomem = 1;
      return;
    }
    puts_(t, num);
    free(num);
  }
}

char *mqproc__py_repr(const json_t *v) {
  text_t t = {0};
  put_repr(&t, v);
  if (t.nomem) {
    free(t.p);
    return NULL;
  }
  return t.p;
}

/* ---- the checks ----------------------------------------------------------------------- */

/* Whether v has the JSON Schema type name. */
static int has_type(const char *name, const json_t *v) {
  if (!strcmp(name, "string"))
    return json_is_string(v);
  if (!strcmp(name, "boolean"))
    return json_is_boolean(v);
  if (!strcmp(name, "integer")) /* 2.0 is an integer to JSON Schema */
    return json_is_integer(v) ||
           (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
  if (!strcmp(name, "number"))
    return json_is_number(v);
  if (!strcmp(name, "object"))
    return json_is_object(v);
  if (!strcmp(name, "array"))
    return json_is_array(v);
  if (!strcmp(name, "null"))
    return json_is_null(v);
  return 1; /* a type this check does not know: not refused */
}

/* One reason, "[path] message", appended to the list of reasons. */
static void reason(json_t *reasons, const char *path, const text_t *msg) {
  json_array_append_new(reasons, json_sprintf("[%s] %s", path, msg->p != NULL ? msg->p : ""));
}

static void check_type(json_t *reasons, const char *name, const json_t *spec, const json_t *v) {
  const json_t *type = json_object_get(spec, "type");
  text_t m = {0};
  size_t i;
  json_t *x;
  int ok = type == NULL;
  if (json_is_string(type))
    ok = has_type(json_string_value(type), v);
  json_array_foreach(type, i, x) ok |= json_is_string(x) && has_type(json_string_value(x), v);
  if (ok)
    return;
  put_repr(&m, v);
  puts_(&m, " is not of type ");
  if (json_is_string(type)) {
    put_pystr(&m, json_string_value(type));
  } else {
    json_array_foreach(type, i, x) {
      if (i > 0)
        puts_(&m, ", ");
      put_repr(&m, x);
    }
  }
  reason(reasons, name, &m);
  free(m.p);
}

static void check_enum(json_t *reasons, const char *name, const json_t *spec, const json_t *v) {
  const json_t *en = json_object_get(spec, "enum");
  text_t m = {0};
  size_t i;
  json_t *x;
  if (!json_is_array(en))
    return;
  json_array_foreach(en, i, x) if (json_equal(x, (json_t *)v)) return;
  put_repr(&m, v);
  puts_(&m, " is not one of ");
  put_repr(&m, en);
  reason(reasons, name, &m);
  free(m.p);
}

static void check_bounds(json_t *reasons, const char *name, const json_t *spec, const json_t *v) {
  const json_t *min = json_object_get(spec, "minimum"), *max = json_object_get(spec, "maximum");
  text_t m = {0};
  if (!json_is_number(v))
    return;
  if (json_is_number(min) && json_number_value(v) < json_number_value(min)) {
    put_repr(&m, v);
    puts_(&m, " is less than the minimum of ");
    put_repr(&m, min);
  } else if (json_is_number(max) && json_number_value(v) > json_number_value(max)) {
    put_repr(&m, v);
    puts_(&m, " is greater than the maximum of ");
    put_repr(&m, max);
  } else {
    return;
  }
  reason(reasons, name, &m);
  free(m.p);
}

static int by_name(const void *a, const void *b) {
  return strcmp(json_string_value(*(json_t *const *)a), json_string_value(*(json_t *const *)b));
}

/* Sorts an array of strings in place (by code point, as Python's sorted()). */
static void qsort_names(json_t *names) {
  size_t n = json_array_size(names);
  json_t **v = n > 0 ? malloc(n * sizeof(*v)) : NULL;
  if (v == NULL)
    return;
  for (size_t i = 0; i < n; i++)
    v[i] = json_incref(json_array_get(names, i));
  qsort(v, n, sizeof(*v), by_name);
  json_array_clear(names);
  for (size_t i = 0; i < n; i++)
    json_array_append_new(names, v[i]);
  free(v);
}

/* The required parameters that are missing, then those not declared (jsonschema's one
 * line for all of them). */
static void check_keys(json_t *reasons, const json_t *decl, const json_t *params) {
  const char *k;
  json_t *spec, *v;
  text_t m = {0};
  int extra = 0;
  json_object_foreach((json_t *)decl, k, spec) {
    if (json_is_true(json_object_get(spec, "required")) && json_object_get(params, k) == NULL) {
      text_t r = {0};
      put_pystr(&r, k);
      puts_(&r, " is a required property");
      reason(reasons, "", &r);
      free(r.p);
    }
  }
  { /* jsonschema names them sorted */
    json_t *names = json_array();
    size_t i;
    json_object_foreach((json_t *)params, k, v) if (json_object_get(decl, k) == NULL)
        json_array_append_new(names, json_string(k));
    qsort_names(names);
    json_array_foreach(names, i, v) {
      puts_(&m, extra++ == 0 ? "Additional properties are not allowed (" : ", ");
      put_pystr(&m, json_string_value(v));
    }
    json_decref(names);
  }
  if (extra == 0)
    return;
  puts_(&m, extra == 1 ? " was unexpected)" : " were unexpected)");
  reason(reasons, "", &m);
  free(m.p);
}

char *mqproc__ocrd_params_check(const json_t *tool, const json_t *params) {
  const json_t *decl = json_object_get(tool, "parameters");
  json_t *reasons = json_array(), *spec, *v;
  const char *k;
  char *out = NULL;
  if (!json_is_object(params)) {
    text_t m = {0};
    put_repr(&m, params);
    puts_(&m, " is not of type 'object'");
    reason(reasons, "", &m);
    free(m.p);
  } else {
    check_keys(reasons, decl, params);
    json_object_foreach((json_t *)decl, k, spec) {
      if ((v = json_object_get(params, k)) == NULL)
        continue;
      check_type(reasons, k, spec, v);
      check_enum(reasons, k, spec, v);
      check_bounds(reasons, k, spec, v);
    }
  }
  if (json_array_size(reasons) > 0 && (out = mqproc__py_repr(reasons)) == NULL)
    out = strdup("[out of memory]");
  json_decref(reasons);
  return out;
}
