/* Unit: options from the environment and the command line (config.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "mqproc/mqproc.h"

static int load(mqproc__config_t *c, int argc, char **argv, char *err) {
  return mqproc__config_load(c, MQPROC__CLI_GENERIC, argc, argv, err);
}

Test(config, defaults) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  cr_assert_eq(load(&c, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.prefetch, 1);
  cr_expect_eq(c.retries, 3);
  cr_expect_eq(c.max_requeues, 1);
  cr_expect_eq(c.heartbeat_s, 30);
  cr_expect_eq(c.queue_durable, 1);
  cr_expect_str_eq(c.exchange, "ocrd-network-default");
  cr_expect_eq(c.result_fmt, MQPROC__RESULT_AUTO);
  cr_expect_null(c.queue_args);
  mqproc__config_free(&c);
}

Test(config, environment_then_command_line_wins) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"--retries=5", "--queue",          "amqp://cli", "--no-queue-durable",
                  "--queue-arg", "x-max-priority=5", "--migrate"};
  setenv("MQPROC_QUEUE", "amqp://env", 1);
  setenv("MQPROC_DATABASE", "postgresql://env/db", 1);
  setenv("MQPROC_RETRIES", "1", 1);
  setenv("MQPROC_QUEUE_ARGS", "x-a=1,x-b=two", 1);
  cr_assert_eq(load(&c, 7, argv, err), MQPROC_OK, "%s", err);
  cr_expect_str_eq(c.queue_url, "amqp://cli");
  cr_expect_str_eq(c.database, "postgresql://env/db");
  cr_expect_eq(c.retries, 5);
  cr_expect_eq(c.queue_durable, 0);
  cr_expect_eq(c.migrate, 1);
  cr_assert_not_null(c.queue_args);
  cr_expect_str_eq(c.queue_args[0], "x-a=1");
  cr_expect_str_eq(c.queue_args[1], "x-b=two");
  cr_expect_str_eq(c.queue_args[2], "x-max-priority=5");
  cr_expect_null(c.queue_args[3]);
  mqproc__config_free(&c);
}

Test(config, bad_values_name_the_option) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *a1[] = {"--prefetch=0"}, *a2[] = {"--bogus"}, *a3[] = {"--retries"},
       *a4[] = {"--queue-durable=maybe"}, *a5[] = {"--result-format=xml"}, *a6[] = {"stray"};
  cr_expect_eq(load(&c, 1, a1, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--prefetch") != NULL, "%s", err);
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 1, a2, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "unknown option '--bogus'") != NULL, "%s", err);
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 1, a3, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--retries needs a value") != NULL, "%s", err);
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 1, a4, err), MQPROC_ECONFIG);
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 1, a5, err), MQPROC_ECONFIG);
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 1, a6, err), MQPROC_ECONFIG);
  mqproc__config_free(&c);
  setenv("MQPROC_PREFETCH", "lots", 1);
  cr_expect_eq(load(&c, 0, NULL, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "MQPROC_PREFETCH") != NULL, "%s", err);
  mqproc__config_free(&c);
}

Test(config, server_needs_urls_processor_and_exec) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"--queue=amqp://x", "--database=postgresql://y", "--processor=ocrd-a"};
  cr_assert_eq(load(&c, 3, argv, err), MQPROC_OK);
  cr_expect_eq(mqproc__config_check_server(&c, MQPROC__CLI_GENERIC, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--exec") != NULL);
  cr_expect_eq(mqproc__config_check_server(&c, MQPROC__CLI_C, err), MQPROC_OK);
  mqproc__config_free(&c);
}

Test(config, exec_is_not_an_option_of_a_c_processor) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"--exec=/bin/true"};
  cr_expect_eq(mqproc__config_load(&c, MQPROC__CLI_C, 1, argv, err), MQPROC_ECONFIG);
  mqproc__config_free(&c);
}

Test(config, empty_and_one_byte_arguments_are_refused_cleanly) {
  /* ASan: the option name used to be read from past the end of "" and "-" */
  static const char *const bad[] = {"", "-", "x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mqproc__config_t c;
    char err[MQPROC_ERR_LEN] = "", *copy = strdup(bad[i]), *argv[] = {copy};
    cr_expect_eq(load(&c, 1, argv, err), MQPROC_ECONFIG, "'%s'", bad[i]);
    cr_expect(strstr(err, "unexpected argument") != NULL, "%s", err);
    mqproc__config_free(&c);
    free(copy);
  }
}

Test(config, isolation_is_thread_or_process_for_a_c_processor) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *process[] = {"--isolation=process"}, *bogus[] = {"--isolation=fork"};
  cr_assert_eq(mqproc__config_load(&c, MQPROC__CLI_C, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_str_eq(c.isolation, "thread");
  cr_expect_eq(c.isolate_process, 0);
  mqproc__config_free(&c);
  cr_assert_eq(mqproc__config_load(&c, MQPROC__CLI_C, 1, process, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.isolate_process, 1);
  mqproc__config_free(&c);
  setenv("MQPROC_ISOLATION", "process", 1);
  cr_assert_eq(mqproc__config_load(&c, MQPROC__CLI_C, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.isolate_process, 1, "read from MQPROC_ISOLATION");
  mqproc__config_free(&c);
  unsetenv("MQPROC_ISOLATION");
  cr_expect_eq(mqproc__config_load(&c, MQPROC__CLI_C, 1, bogus, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--isolation: expected thread or process") != NULL, "%s", err);
  mqproc__config_free(&c);
}

Test(config, isolation_is_not_an_option_of_the_mqproc_program) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"--isolation=process"};
  cr_expect_eq(load(&c, 1, argv, err), MQPROC_ECONFIG, "--exec commands are processes already");
  cr_expect(strstr(err, "unknown option '--isolation'") != NULL, "%s", err);
  mqproc__config_free(&c);
  setenv("MQPROC_ISOLATION", "process", 1);
  cr_expect_eq(load(&c, 0, NULL, err), MQPROC_OK, "the environment is shared: ignored, %s", err);
  cr_expect_eq(c.isolate_process, 0);
  mqproc__config_free(&c);
  unsetenv("MQPROC_ISOLATION");
}
