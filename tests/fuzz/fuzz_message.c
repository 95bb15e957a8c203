/* Fuzz target: a processing message as it comes off the queue (JSON or OCR-D's YAML):
 * parse, validate and, when it is valid, the result messages and the re-encoded request.
 * Properties: a valid message's result message (JSON and YAML) parses back with its
 * job_id, state and path_to_mets; the request encoded again in either format parses back
 * equal and is still valid. */
#include <jansson.h>
#include <string.h>

#include "codec/codec.h"
#include "fuzz.h"

static void check_result(const mqproc__msg_t *msg, mqproc__format_t fmt) {
  char *out = NULL, err[MQPROC_ERR_LEN];
  size_t len = 0;
  json_t *back = NULL;
  mqproc__format_t got;
  const char *want_path = msg->path_to_mets != NULL ? msg->path_to_mets : "";
  FUZZ_CHECK(mqproc__result_encode(msg, "SUCCESS", fmt, &out, &len) == MQPROC_OK, "encode");
  FUZZ_CHECK(strlen(out) == len, "the result holds a NUL byte");
  FUZZ_CHECK(mqproc__codec_parse(out, len, &back, &got, err) == MQPROC_OK, "%s: %s", err, out);
  FUZZ_CHECK(json_is_object(back), "%s", out);
  FUZZ_CHECK(json_string_value(json_object_get(back, "job_id")) != NULL &&
                 strcmp(json_string_value(json_object_get(back, "job_id")), msg->job_id) == 0,
             "job_id changed: %s", out);
  FUZZ_CHECK(json_string_value(json_object_get(back, "state")) != NULL &&
                 strcmp(json_string_value(json_object_get(back, "state")), "SUCCESS") == 0,
             "state changed: %s", out);
  FUZZ_CHECK(json_string_value(json_object_get(back, "path_to_mets")) != NULL &&
                 strcmp(json_string_value(json_object_get(back, "path_to_mets")), want_path) == 0,
             "path_to_mets changed: %s", out);
  json_decref(back);
  free(out);
}

static void check_reencoded(const mqproc__msg_t *msg, mqproc__format_t fmt) {
  char *out = NULL, err[MQPROC_ERR_LEN];
  size_t len = 0;
  json_t *back = NULL;
  mqproc__format_t got;
  mqproc__msg_t *again = NULL;
  if (mqproc__doc_encode(msg->doc, fmt, &out, &len, err) != MQPROC_OK)
    return; /* a document the format cannot hold is refused with a reason, not a crash */
  FUZZ_CHECK(mqproc__codec_parse(out, len, &back, &got, err) == MQPROC_OK, "%s: %s", err, out);
  FUZZ_CHECK(json_equal(back, msg->doc), "the re-encoded request differs: %s", out);
  FUZZ_CHECK(mqproc__msg_validate(back, got, NULL, &again, err) == MQPROC_OK, "%s: %s", err, out);
  mqproc__msg_free(again);
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_t *doc = NULL;
  mqproc__format_t fmt;
  mqproc__msg_t *msg = NULL;
  char err[MQPROC_ERR_LEN];
  if (size > 1 << 20)
    return 0; /* the server refuses bodies over --max-message-size before decoding */
  if (mqproc__codec_parse(data, size, &doc, &fmt, err) != MQPROC_OK) {
    FUZZ_CHECK(doc == NULL && err[0] != '\0', "a syntax error without a reason");
    return 0;
  }
  (void)mqproc__doc_job_id(doc);
  if (mqproc__msg_validate(doc, fmt, NULL, &msg, err) != MQPROC_OK) {
    FUZZ_CHECK(msg == NULL && err[0] != '\0', "an invalid message without a reason");
    return 0;
  }
  check_result(msg, MQPROC__FMT_JSON);
  check_result(msg, MQPROC__FMT_YAML);
  check_reencoded(msg, MQPROC__FMT_JSON);
  check_reencoded(msg, MQPROC__FMT_YAML);
  mqproc__msg_free(msg);
  return 0;
}
