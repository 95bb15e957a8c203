/* Python's json.dumps() for jansson values: the text OCR-D's Python side passes. */
#ifndef MQPROC_PYJSON_H
#define MQPROC_PYJSON_H

#include <jansson.h>

/* v as Python 3's json.dumps(v) writes it, byte for byte: ", " and ": " separators, keys
 * in insertion order, ensure_ascii escapes with lowercase hex, floats as float.__repr__.
 * [in] v (not NULL). Returns a malloc()ed NUL-terminated string the caller frees, or NULL
 * when out of memory. */
char *mqproc__json_python(const json_t *v);

#endif
