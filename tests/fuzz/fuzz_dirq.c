/* Fuzz target: a directory queue's job file as any producer may write it (an optional
 * "MQPROC-ENVELOPE 1 {JSON}" line, then the body) and its name. Properties: the body is
 * a suffix of the file; the name's priority is within 0..99. */
#include <jansson.h>
#include <string.h>

#include "broker/dirq.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mqproc__dirq_msg_t m;
  json_t *meta = NULL;
  char name[MQPROC__DIRQ_NAME_MAX + 1];
  size_t nlen = size < MQPROC__DIRQ_NAME_MAX ? size : MQPROC__DIRQ_NAME_MAX;
  int prio;
  memset(&m, 0, sizeof(m));
  if (mqproc__dirq_parse((const char *)data, size, &m, &meta) == 0) {
    FUZZ_CHECK(m.len <= size, "body of %zu bytes in a file of %zu", m.len, size);
    FUZZ_CHECK(m.len == 0 || (const uint8_t *)m.body + m.len == data + size,
               "the body is not the file's end");
  }
  json_decref(meta);
  memcpy(name, data, nlen);
  name[nlen] = '\0';
  prio = mqproc__dirq_name_priority(name);
  FUZZ_CHECK(prio >= 0 && prio <= MQPROC__DIRQ_MAX_PRIORITY, "priority %d of '%s'", prio, name);
  return 0;
}
