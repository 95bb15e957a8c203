/* ocrd-dummy parameters and tool description: the ocrd-tool.json entry, validation, defaults. */
#ifndef OCRD_DUMMY_PARAMS_H
#define OCRD_DUMMY_PARAMS_H

#include <jansson.h>
#include <stdbool.h>

typedef struct dummy_params {
  bool copy_files; /* also copy image input into the output fileGrp */
  json_t *values;  /* owned: every parameter, defaults filled in, in the tool's order */
  char *json;      /* owned: values as Python's json.dumps() writes it (the agent note) */
} dummy_params_t;

/* Validates text (a JSON object; NULL or "" means {}) against the tool's parameters: no
 * unknown key, each value of its declared type; fills in defaults. Returns 0, or -1 with
 * err set and *out zeroed. */
int dummy_params_parse(const char *text, dummy_params_t *out, char *err);
void dummy_params_free(dummy_params_t *p);

/* The ocrd-tool.json entry of ocrd-dummy (new reference; NULL when out of memory). */
json_t *dummy_tool_json(void);

#endif
