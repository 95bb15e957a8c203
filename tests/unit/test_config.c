/* Unit: options from the environment and the command line (config.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/config.h"
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
  cr_expect_eq(c.result_format, MQPROC__RESULT_AUTO);
  cr_expect_eq(c.queue_type, MQPROC__QUEUE_CLASSIC);
  cr_expect_eq(c.tls_verify, MQPROC__TLS_VERIFY_FULL);
  cr_expect_eq(c.ocrd_cli, MQPROC__OCRD_CLI_AUTO);
  cr_expect_eq(c.log_level, MQPROC__LOG_INFO);
  cr_expect_eq(c.log_format, MQPROC__LOG_TEXT);
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
  cr_expect_eq(c.isolation, MQPROC__ISOLATION_THREAD);
  mqproc__config_free(&c);
  cr_assert_eq(mqproc__config_load(&c, MQPROC__CLI_C, 1, process, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.isolation, MQPROC__ISOLATION_PROCESS);
  mqproc__config_free(&c);
  setenv("MQPROC_ISOLATION", "process", 1);
  cr_assert_eq(mqproc__config_load(&c, MQPROC__CLI_C, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.isolation, MQPROC__ISOLATION_PROCESS, "read from MQPROC_ISOLATION");
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
  cr_expect_eq(c.isolation, MQPROC__ISOLATION_THREAD);
  mqproc__config_free(&c);
  unsetenv("MQPROC_ISOLATION");
}

/* Writes text to a fresh file under the test's temporary directory; returns its path. */
static char *url_file(const char *text, mode_t mode) {
  static char path[128];
  int fd;
  snprintf(path, sizeof(path), "/tmp/mqproc-test-url-%d-XXXXXX", (int)getpid());
  fd = mkstemp(path);
  cr_assert(fd >= 0);
  cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  fchmod(fd, mode);
  close(fd);
  return path;
}

Test(config, urls_from_files_keep_passwords_off_the_command_line) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN], qarg[200], darg[200];
  char *q =
      strdup(url_file("# the broker\n  amqp://u:s3cret@h1/v  \r\n\namqp://u:s3cret@h2/v\n", 0600));
  char *d = strdup(url_file("postgresql://u:pw@db/jobs\n", 0600));
  char *argv[] = {qarg, darg};
  snprintf(qarg, sizeof(qarg), "--queue-file=%s", q);
  snprintf(darg, sizeof(darg), "--database-file=%s", d);
  cr_assert_eq(load(&c, 2, argv, err), MQPROC_OK, "%s", err);
  cr_expect_str_eq(c.queue_url, "amqp://u:s3cret@h1/v,amqp://u:s3cret@h2/v");
  cr_expect_str_eq(c.database, "postgresql://u:pw@db/jobs");
  cr_expect_null(c.warning, "%s", c.warning);
  mqproc__config_free(&c);
  unlink(q);
  unlink(d);
  free(q);
  free(d);
}

Test(config, the_stronger_source_wins_and_the_same_source_twice_is_an_error) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN], farg[200];
  char *f = strdup(url_file("amqp://from-file\n", 0600));
  char *a1[] = {farg}, *a2[] = {"--queue=amqp://argv"}, *a3[] = {"--queue=amqp://argv", farg};
  snprintf(farg, sizeof(farg), "--queue-file=%s", f);
  setenv("MQPROC_QUEUE", "amqp://env", 1);
  cr_assert_eq(load(&c, 1, a1, err), MQPROC_OK, "%s", err); /* argv file over env URL */
  cr_expect_str_eq(c.queue_url, "amqp://from-file");
  mqproc__config_free(&c);
  unsetenv("MQPROC_QUEUE");
  setenv("MQPROC_QUEUE_FILE", f, 1);
  cr_assert_eq(load(&c, 1, a2, err), MQPROC_OK, "%s", err); /* argv URL over env file */
  cr_expect_str_eq(c.queue_url, "amqp://argv");
  mqproc__config_free(&c);
  cr_assert_eq(load(&c, 0, NULL, err), MQPROC_OK, "%s", err); /* env file alone */
  cr_expect_str_eq(c.queue_url, "amqp://from-file");
  mqproc__config_free(&c);
  cr_expect_eq(load(&c, 2, a3, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "--queue and --queue-file are both given") != NULL, "%s", err);
  mqproc__config_free(&c);
  setenv("MQPROC_QUEUE", "amqp://env", 1);
  cr_expect_eq(load(&c, 0, NULL, err), MQPROC_ECONFIG);
  cr_expect(strstr(err, "MQPROC_QUEUE and MQPROC_QUEUE_FILE are both given") != NULL, "%s", err);
  mqproc__config_free(&c);
  unlink(f);
  free(f);
}

Test(config, bad_url_files_are_refused_with_the_reason) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN], arg[9000], big[9000];
  char *argv[] = {arg};
  const char *cases[][2] = {{"/nonexistent/queue.url", "cannot open /nonexistent/queue.url"},
                            {"/tmp", "/tmp is not a regular file"},
                            {NULL, "holds no URL"},
                            {"", "larger than 8 KiB"}};
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  for (size_t i = 0; i < 4; i++) {
    char *path = cases[i][0] != NULL && cases[i][0][0] == '/'
                     ? strdup(cases[i][0])
                     : strdup(url_file(cases[i][0] == NULL ? "# only a comment\n\n" : big, 0600));
    snprintf(arg, sizeof(arg), "--database-file=%s", path);
    cr_expect_eq(load(&c, 1, argv, err), MQPROC_ECONFIG, "case %zu", i);
    cr_expect(strstr(err, "--database-file: ") == err, "case %zu: %s", i, err);
    cr_expect(strstr(err, cases[i][1]) != NULL, "case %zu: %s", i, err);
    mqproc__config_free(&c);
    if (path[1] != 'n' && strcmp(path, "/tmp") != 0)
      unlink(path);
    free(path);
  }
}

Test(config, a_url_file_every_user_can_read_is_used_with_a_warning) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN], arg[200];
  char *f = strdup(url_file("amqp://u:p@h/\n", 0644));
  char *argv[] = {arg};
  snprintf(arg, sizeof(arg), "--queue-file=%s", f);
  cr_assert_eq(load(&c, 1, argv, err), MQPROC_OK, "%s", err);
  cr_expect_str_eq(c.queue_url, "amqp://u:p@h/");
  cr_assert_not_null(c.warning);
  cr_expect(strstr(c.warning, "every user of this host can read") != NULL, "%s", c.warning);
  cr_expect(strstr(c.warning, "u:p@") == NULL, "the warning shows the secret: %s", c.warning);
  mqproc__config_free(&c);
  unlink(f);
  free(f);
}

/* ---- enum options: one row each, its choices in the row ---------------------------- */

Test(config, enum_options_are_read_from_the_environment_and_argv_wins) {
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"--tls-verify", "none", "--result-format=json", "--log-level=Debug"};
  setenv("MQPROC_QUEUE_TYPE", "quorum", 1);
  setenv("MQPROC_TLS_VERIFY", "ca", 1);
  setenv("MQPROC_RESULT_FORMAT", "yaml", 1);
  setenv("MQPROC_LOG_LEVEL", "ERROR", 1); /* any case, as --log-level always took */
  setenv("MQPROC_LOG_FORMAT", "json", 1);
  setenv("MQPROC_OCRD_CLI", "false", 1);
  cr_assert_eq(load(&c, 0, NULL, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.queue_type, MQPROC__QUEUE_QUORUM);
  cr_expect_eq(c.tls_verify, MQPROC__TLS_VERIFY_CA);
  cr_expect_eq(c.result_format, MQPROC__RESULT_YAML);
  cr_expect_eq(c.log_level, MQPROC__LOG_ERROR);
  cr_expect_eq(c.log_format, MQPROC__LOG_JSON);
  cr_expect_eq(c.ocrd_cli, MQPROC__OCRD_CLI_FALSE);
  mqproc__config_free(&c);
  cr_assert_eq(load(&c, 4, argv, err), MQPROC_OK, "%s", err);
  cr_expect_eq(c.tls_verify, MQPROC__TLS_VERIFY_NONE);
  cr_expect_eq(c.result_format, MQPROC__RESULT_JSON);
  cr_expect_eq(c.log_level, MQPROC__LOG_DEBUG);
  cr_expect_eq(c.queue_type, MQPROC__QUEUE_QUORUM, "the environment's where argv is silent");
  mqproc__config_free(&c);
}

Test(config, log_level_takes_warning_as_warn_and_nothing_else) {
  static const char *const good[][2] = {{"debug", "0"},   {"info", "1"},  {"warn", "2"},
                                        {"warning", "2"}, {"error", "3"}, {"Info", "1"}};
  static const char *const bad[] = {"verbose", "", "info "};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    mqproc__config_t c;
    char err[MQPROC_ERR_LEN], arg[64], *argv[] = {arg};
    snprintf(arg, sizeof(arg), "--log-level=%s", good[i][0]);
    cr_assert_eq(load(&c, 1, argv, err), MQPROC_OK, "%s: %s", arg, err);
    cr_expect_eq((int)c.log_level, atoi(good[i][1]), "%s", arg);
    mqproc__config_free(&c);
  }
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    mqproc__config_t c;
    char err[MQPROC_ERR_LEN], arg[64], *argv[] = {arg};
    snprintf(arg, sizeof(arg), "--log-level=%s", bad[i]);
    cr_expect_eq(load(&c, 1, argv, err), MQPROC_ECONFIG, "%s", arg);
    cr_expect(strstr(err, "expected debug, info, warn or error, got '") != NULL, "%s", err);
    mqproc__config_free(&c);
  }
}

Test(config, a_bad_enum_value_names_the_option_and_its_choices) {
  static const char *const cases[][2] = {
      {"--queue-type=stream", "--queue-type: expected classic or quorum, got 'stream'"},
      {"--tls-verify=off", "--tls-verify: expected full, ca or none, got 'off'"},
      {"--result-format=xml", "--result-format: expected auto, json or yaml, got 'xml'"},
      {"--log-level=verbose", "--log-level: expected debug, info, warn or error, got 'verbose'"},
      {"--log-format=logfmt", "--log-format: expected text or json, got 'logfmt'"},
      {"--ocrd-cli=maybe", "--ocrd-cli: expected auto, true or false, got 'maybe'"}};
  mqproc__config_t c;
  char err[MQPROC_ERR_LEN];
  char *isolation[] = {"--isolation", "fork"};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *argv[] = {(char *)cases[i][0]};
    cr_expect_eq(load(&c, 1, argv, err), MQPROC_ECONFIG, "%s", cases[i][0]);
    cr_expect_str_eq(err, cases[i][1]);
    mqproc__config_free(&c);
  }
  cr_expect_eq(mqproc__config_load(&c, MQPROC__CLI_C, 2, isolation, err), MQPROC_ECONFIG);
  cr_expect_str_eq(err, "--isolation: expected thread or process, got 'fork'");
  mqproc__config_free(&c);
  setenv("MQPROC_TLS_VERIFY", "off", 1); /* from the environment: named by its variable */
  cr_expect_eq(load(&c, 0, NULL, err), MQPROC_ECONFIG);
  cr_expect_str_eq(err, "MQPROC_TLS_VERIFY: expected full, ca or none, got 'off'");
  mqproc__config_free(&c);
  unsetenv("MQPROC_TLS_VERIFY");
}

/* The option list of --help for kind, as one string (freed by the caller). */
static char *help_text(mqproc__cli_kind_t kind) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  cr_assert_not_null(out);
  mqproc__config_help(out, kind);
  fclose(out);
  return text;
}

Test(config, help_lists_the_choices_of_every_enum_option) {
  char *generic = help_text(MQPROC__CLI_GENERIC), *c_proc = help_text(MQPROC__CLI_C);
  static const char *const both[] = {"\n  --tls-verify=full|ca|none\n",
                                     "\n  --queue-type=classic|quorum\n",
                                     "\n  --result-format=auto|json|yaml\n",
                                     "\n  --log-level=debug|info|warn|error\n", /* no alias */
                                     "\n  --log-format=text|json\n"};
  for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++) {
    cr_expect(strstr(generic, both[i]) != NULL, "mqproc: %s", both[i]);
    cr_expect(strstr(c_proc, both[i]) != NULL, "a C processor: %s", both[i]);
  }
  cr_expect(strstr(generic, "\n  --ocrd-cli=auto|true|false\n") != NULL);
  cr_expect(strstr(c_proc, "\n  --isolation=thread|process\n") != NULL);
  cr_expect(strstr(generic, "\n  --isolation=") == NULL &&
                strstr(c_proc, "\n  --ocrd-cli=") == NULL,
            "an option of the other program is listed");
  cr_expect(strstr(generic, "env MQPROC_TLS_VERIFY; default full\n") != NULL);
  /* the rows shared with the operator commands are the server's too */
  cr_expect(strstr(generic, "\n  --queue-file=TEXT\n") != NULL);
  cr_expect(strstr(generic, "\n  --group-access[=BOOL]\n") != NULL);
  free(generic);
  free(c_proc);
}
