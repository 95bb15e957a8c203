/* ocrd-dummy parameters and tool description: the ocrd-tool.json entry, validation, defaults. */
#include "params.h"

#include <stdlib.h>
#include <string.h>

#include "dummy.h"
#include "fsio.h"

json_t *dummy_tool_json(void) {
  return json_pack(
      "{s:s, s:s, s:[s], s:[s], s:i, s:i, s:{s:{s:s, s:b, s:s}}}", "executable", DUMMY_NAME,
      "description",
      "Bare-bones processor creates PAGE-XML and optionally copies file from input group to "
      "output group",
      "steps", DUMMY_STEP, "categories", "Image preprocessing", "input_file_grp_cardinality", 1,
      "output_file_grp_cardinality", 1, "parameters", "copy_files", "type", "boolean", "default", 0,
      "description",
      "Whether to actually copy files (true) or just create PAGE-XML as a side effect (false)");
}

/* Whether value has the JSON schema type named by type. */
static bool type_ok(const char *type, const json_t *value) {
  if (strcmp(type, "boolean") == 0)
    return json_is_boolean(value);
  if (strcmp(type, "string") == 0)
    return json_is_string(value);
  if (strcmp(type, "number") == 0)
    return json_is_number(value);
  if (strcmp(type, "integer") == 0)
    return json_is_integer(value);
  if (strcmp(type, "object") == 0)
    return json_is_object(value);
  if (strcmp(type, "array") == 0)
    return json_is_array(value);
  return true;
}

/* Checks every key of given against the declared parameters. */
static int check_given(const json_t *given, const json_t *decl, char *err) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)given, key, value) {
    const json_t *spec = json_object_get(decl, key);
    const char *type = json_string_value(json_object_get(spec, "type"));
    if (spec == NULL)
      return dummy_err(err, "unknown parameter '%s' (%s accepts: copy_files)", key, DUMMY_NAME);
    if (type != NULL && !type_ok(type, value))
      return dummy_err(err, "parameter '%s' must be of type %s", key, type);
  }
  return 0;
}

/* Declared order, given values over defaults. */
static json_t *with_defaults(const json_t *given, const json_t *decl) {
  json_t *out = json_object();
  const char *key;
  json_t *spec;
  json_object_foreach((json_t *)decl, key, spec) {
    json_t *v = json_object_get(given, key);
    if (v == NULL)
      v = json_object_get(spec, "default");
    if (out != NULL && v != NULL && json_object_set(out, key, v) != 0) {
      json_decref(out);
      return NULL;
    }
  }
  return out;
}

int dummy_params_parse(const char *text, dummy_params_t *out, char *err) {
  json_t *tool = dummy_tool_json(), *given = NULL;
  const json_t *decl = json_object_get(tool, "parameters");
  json_error_t jerr;
  int rc = -1;
  memset(out, 0, sizeof(*out));
  if (tool == NULL)
    return dummy_err(err, "out of memory");
  given = text != NULL && text[0] != '\0' ? json_loads(text, JSON_REJECT_DUPLICATES, &jerr)
                                          : json_object();
  if (given == NULL)
    dummy_err(err, "invalid parameter JSON: %s (line %d, column %d)", jerr.text, jerr.line,
              jerr.column);
  else if (!json_is_object(given))
    dummy_err(err, "invalid parameter JSON: not an object");
  else if (check_given(given, decl, err) == 0) {
    out->values = with_defaults(given, decl);
    out->json = out->values != NULL ? json_dumps(out->values, 0) : NULL;
    out->copy_files = json_is_true(json_object_get(out->values, "copy_files"));
    rc = out->json != NULL ? 0 : dummy_err(err, "out of memory");
  }
  json_decref(given);
  json_decref(tool);
  if (rc != 0)
    dummy_params_free(out);
  return rc;
}

void dummy_params_free(dummy_params_t *p) {
  json_decref(p->values);
  free(p->json);
  memset(p, 0, sizeof(*p));
}
