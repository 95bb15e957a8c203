/* Unit tests for src/broker/amqp_headers.c: a delivery's AMQP headers table as the JSON
 * object the job table stores and processors read. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp_int.h"

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v) {
  return (amqp_table_entry_t){.key = amqp_cstring_bytes(key), .value = v};
}

static json_t *converted(amqp_table_entry_t *e, int n) {
  amqp_table_t t = {n, e};
  char *text = mqproc__amqp_headers_json(&t);
  json_t *o;
  cr_assert_not_null(text);
  o = json_loads(text, 0, NULL);
  cr_assert_not_null(o, "not JSON: %s", text);
  free(text);
  return o;
}

Test(headers, every_kind_maps_to_its_json_kind) {
  amqp_table_entry_t inner[1], e[7];
  amqp_field_value_t arr_items[2];
  json_t *o;
  inner[0] = entry("queue", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_UTF8,
                                                 .value.bytes = amqp_cstring_bytes("q1")});
  arr_items[0] = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_TABLE, .value.table = {1, inner}};
  arr_items[1] = (amqp_field_value_t){.kind = AMQP_FIELD_KIND_I32, .value.i32 = -7};
  e[0] = entry("tenant", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_UTF8,
                                              .value.bytes = amqp_cstring_bytes("acme")});
  e[1] = entry("n", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_I64, .value.i64 = 1234567890123});
  e[2] = entry("ok", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1});
  e[3] = entry("x-death",
               (amqp_field_value_t){.kind = AMQP_FIELD_KIND_ARRAY, .value.array = {2, arr_items}});
  e[4] = entry("bad", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_UTF8,
                                           .value.bytes = {2, (void *)"\xff\x41"}});
  e[5] = entry("x-mqproc-seq", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_U64, .value.u64 = 9});
  e[6] = entry("dec", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_DECIMAL,
                                           .value.decimal = {.decimals = 2, .value = 314}});
  o = converted(e, 7);
  cr_expect_str_eq(json_string_value(json_object_get(o, "tenant")), "acme");
  cr_expect_eq(json_integer_value(json_object_get(o, "n")), 1234567890123);
  cr_expect(json_is_true(json_object_get(o, "ok")));
  cr_expect_str_eq(
      json_string_value(json_object_get(json_array_get(json_object_get(o, "x-death"), 0), "queue")),
      "q1");
  cr_expect_eq(json_integer_value(json_array_get(json_object_get(o, "x-death"), 1)), -7);
  cr_expect_str_eq(json_string_value(json_object_get(o, "bad")), "\\xff\\x41",
                   "malformed UTF-8 must become hex text");
  cr_expect_null(json_object_get(o, "x-mqproc-seq"), "our own bookkeeping is left out");
  cr_expect_float_eq(json_real_value(json_object_get(o, "dec")), 3.14, 1e-9);
  json_decref(o);
}

Test(headers, none_is_null_and_deep_nesting_is_cut) {
  amqp_table_t empty = {0, NULL};
  amqp_table_entry_t levels[12];
  json_t *o, *v;
  int depth = 0;
  cr_expect_null(mqproc__amqp_headers_json(&empty));
  for (int i = 11; i >= 0; i--)
    levels[i] = entry("d", i == 11 ? (amqp_field_value_t){.kind = AMQP_FIELD_KIND_I8, .value.i8 = 1}
                                   : (amqp_field_value_t){.kind = AMQP_FIELD_KIND_TABLE,
                                                          .value.table = {1, &levels[i + 1]}});
  o = converted(levels, 1);
  for (v = o; json_is_object(v); v = json_object_get(v, "d"))
    depth++;
  cr_expect_leq(depth, 9, "nesting kept to %d levels", depth);
  cr_expect_str_eq(json_string_value(v), "(nested too deep)");
  json_decref(o);
}

Test(headers, a_u64_above_int64_stays_positive) {
  amqp_table_entry_t e[2];
  json_t *o;
  e[0] = entry("big", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_U64,
                                           .value.u64 = 18446744073709551615ULL});
  e[1] = entry("small", (amqp_field_value_t){.kind = AMQP_FIELD_KIND_U64, .value.u64 = 42});
  o = converted(e, 2);
  cr_expect(json_is_real(json_object_get(o, "big")));
  cr_expect_gt(json_real_value(json_object_get(o, "big")), 1.8e19);
  cr_expect_eq(json_integer_value(json_object_get(o, "small")), 42);
  json_decref(o);
}
