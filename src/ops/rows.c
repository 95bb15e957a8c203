/* Job-table rows as JSON (the CLI's --json and the status page). */
#include <stdlib.h>
#include <string.h>

#include "ops/ops.h"

static int listed(const char *name, const char *const *list) {
  for (; list != NULL && *list != NULL; list++)
    if (!strcmp(name, *list))
      return 1;
  return 0;
}

json_t *mqproc__rows_json(const mqproc__ores_t *res, const char *const *ints,
                          const char *const *jsons) {
  json_t *arr = json_array();
  for (int i = 0; i < mqproc__ores_rows(res); i++) {
    json_t *o = json_object();
    for (int k = 0; k < mqproc__ores_cols(res); k++) {
      const char *name = mqproc__ores_name(res, k), *v = mqproc__ores_get(res, i, k);
      json_t *x;
      if (mqproc__ores_null(res, i, k))
        x = json_null();
      else if (listed(name, ints))
        x = json_integer(strtoll(v, NULL, 10));
      else if (listed(name, jsons) && (x = json_loads(v, JSON_DECODE_ANY, NULL)) != NULL)
        ;
      else
        x = json_string(v);
      json_object_set_new(o, name, x != NULL ? x : json_null());
    }
    json_array_append_new(arr, o);
  }
  return arr;
}
