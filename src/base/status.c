/* mqproc_strerror(): the text of every status code, generated from MQPROC_STATUS_MAP. */
#include "mqproc/mqproc.h"

__attribute__((visibility("default"))) const char *mqproc_strerror(int status) {
  switch (status) {
#define MQPROC__STATUS_TEXT(name, value, text)                                                     \
  case value:                                                                                      \
    return text;
    MQPROC_STATUS_MAP(MQPROC__STATUS_TEXT)
#undef MQPROC__STATUS_TEXT
  default:
    return "unknown status";
  }
}
