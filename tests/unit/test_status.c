/* Unit: every status code in every range has its own message (rabbitmq-c's habit). */
#include <criterion/criterion.h>
#include <string.h>

#include "mqproc/mqproc.h"

Test(status, every_code_up_to_each_sentinel_has_a_message) {
  static const int ranges[][2] = {
      {MQPROC_ENOMEM, MQPROC__GENERAL_NEXT},       {MQPROC_EBROKER_CONNECT, MQPROC__BROKER_NEXT},
      {MQPROC_ESTORE_CONNECT, MQPROC__STORE_NEXT}, {MQPROC_ECODEC_SYNTAX, MQPROC__CODEC_NEXT},
      {MQPROC_ERUNNER_SPAWN, MQPROC__RUNNER_NEXT}, {MQPROC_ECALLBACK, MQPROC__CALLBACK_NEXT}};
  for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
    for (int code = ranges[r][0]; code > ranges[r][1]; code--) {
      const char *s = mqproc_strerror(code);
      cr_expect(strcmp(s, "unknown status") != 0 && strcmp(s, "(sentinel)") != 0,
                "code %d has no message", code);
    }
  }
  cr_expect_str_eq(mqproc_strerror(MQPROC_OK), "success");
  cr_expect_str_eq(mqproc_strerror(-0x7777), "unknown status");
}
