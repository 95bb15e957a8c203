/* A job's parameters checked against its processor's ocrd-tool description, as OCR-D's
 * Processing Server checks them (ocrd_validators' ParameterValidator: JSON Schema over the
 * tool's "parameters"): the types, enum, minimum and maximum of each parameter, the
 * required ones, and no parameter the tool does not declare. Defaults are not filled in:
 * the job carries what was asked for, as with OCR-D. The reasons read as jsonschema words
 * them ("[level] 'x' is not of type 'integer'"), so a client sees OCR-D's message. */
#ifndef MQPROC_CODEC_OCRD_PARAMS_H
#define MQPROC_CODEC_OCRD_PARAMS_H

#include <jansson.h>

/* Checks params (a JSON object) against tool (an ocrd-tool.json entry; its "parameters"
 * may be missing: then no parameter is allowed). Returns NULL when they pass, else the
 * list of reasons as OCR-D prints it (Python's repr of a list of strings, e.g.
 * ["[] 'level' is a required property"]), malloc()ed: the caller frees it. */
char *mqproc__ocrd_params_check(const json_t *tool, const json_t *params);

/* v as Python's repr() writes the value json.loads would make of it ('text', True, None,
 * 1.5, ['a'], {'k': 1}); malloc()ed, NULL when out of memory. */
char *mqproc__py_repr(const json_t *v);

#endif
