/* Fuzz target: the YAML bridge alone (libyaml events -> json_t, and back as PyYAML's
 * yaml.dump() writes it). Property: what loads, dumps, and the dump loads back equal. */
#include <jansson.h>
#include <string.h>

#include "codec/codec.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *v = NULL, *back = NULL;
  char *out = NULL, err[MQPROC_ERR_LEN];
  size_t len = 0;
  if (size > 1 << 20)
    return 0;
  if (mqproc__yaml_load((const char *)data, size, &v, err) != MQPROC_OK) {
    FUZZ_CHECK(v == NULL && err[0] != '\0', "an error without a reason");
    return 0;
  }
  if (mqproc__yaml_dump(v, &out, &len, err) == MQPROC_OK) {
    FUZZ_CHECK(strlen(out) == len, "the dump holds a NUL byte");
    FUZZ_CHECK(mqproc__yaml_load(out, len, &back, err) == MQPROC_OK, "%s: %s", err, out);
    FUZZ_CHECK(json_equal(v, back), "the dump loads back different: %s", out);
    json_decref(back);
    free(out);
  }
  json_decref(v);
  return 0;
}
