/* Unit: a C processor's OCR-D command line at the library's entry (runner/ocrd_run.c,
 * entry/entry.c): --dump-json with and without a declared tool description, and a program built
 * against 0.1.0's header, whose mqproc_processor_t ends before ocrd_tool_json. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <mqproc/mqproc.h>
#include <stdio.h>

static int process(mqproc_job_t *job, void *userdata) {
  (void)job;
  (void)userdata;
  return 0;
}

static char prog[] = "ocrd-unit", dump[] = "-J";
static char *argv_dump[] = {prog, dump, NULL};

Test(ocrd_run, dump_json_without_a_description_prints_a_minimal_one, .init = cr_redirect_stdout) {
  const mqproc_processor_t p = {.name = "ocrd-unit", .description = "a unit", .process = process};
  cr_assert_eq(mqproc_main(2, argv_dump, &p), 0);
  fflush(stdout);
  cr_assert_stdout_eq_str("{\n \"executable\": \"ocrd-unit\",\n \"description\": \"a unit\",\n"
                          " \"categories\": [],\n \"steps\": [],\n \"parameters\": {}\n}\n");
}

Test(ocrd_run, dump_json_prints_the_declared_description, .init = cr_redirect_stdout) {
  const mqproc_processor_t p = {
      .name = "ocrd-unit", .process = process, .ocrd_tool_json = "{\"executable\": \"ocrd-unit\"}"};
  cr_assert_eq(mqproc_main(2, argv_dump, &p), 0);
  fflush(stdout);
  cr_assert_stdout_eq_str("{\n \"executable\": \"ocrd-unit\"\n}\n");
}

Test(ocrd_run, a_declared_description_that_is_not_json_fails_the_dump) {
  const mqproc_processor_t p = {.name = "ocrd-unit", .process = process, .ocrd_tool_json = "{x"};
  cr_expect_eq(mqproc_main(2, argv_dump, &p), 1);
}

/* The function mqproc_main (not the macro) is 0.1.0's entry: it never reads the field a
 * program of then does not have, whatever lies there. */
Test(ocrd_run, a_program_of_0_1_0_is_read_only_to_its_struct_s_end, .init = cr_redirect_stdout) {
  const mqproc_processor_t p = {.name = "ocrd-unit", .process = process, .ocrd_tool_json = "{x"};
  cr_assert_eq((mqproc_main)(2, argv_dump, &p), 0);
  fflush(stdout);
  cr_assert_stdout_eq_str("{\n \"executable\": \"ocrd-unit\",\n \"description\": \"ocrd-unit\",\n"
                          " \"categories\": [],\n \"steps\": [],\n \"parameters\": {}\n}\n");
}

Test(ocrd_run, a_processor_without_a_function_is_refused) {
  const mqproc_processor_t p = {.name = "ocrd-unit"};
  cr_expect_eq(mqproc_main(2, argv_dump, &p), 2);
  cr_expect_eq(mqproc_main_sized(2, argv_dump, NULL, 0), 2);
}
