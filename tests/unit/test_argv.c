/* Unit tests for src/base/argv.c: sh-like word splitting without expansion. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/argv.h"
#include "base/util.h"

/* Splits cmd, expects success and exactly the n words in want. */
static void expect_words(const char *cmd, const char *const *want, int n) {
  char err[MQPROC_ERR_LEN] = "";
  char **argv = NULL;
  int argc = -1;
  int rc = mqproc__argv_split(cmd, &argv, &argc, err);
  cr_assert_eq(rc, MQPROC_OK, "split(%s) failed: %s", cmd, err);
  cr_assert_eq(argc, n, "split(%s): %d words, want %d", cmd, argc, n);
  for (int i = 0; i < n; i++)
    cr_expect_str_eq(argv[i], want[i], "split(%s) word %d", cmd, i);
  cr_assert_null(argv[n], "argv is not NULL-terminated");
  mqproc__argv_free(argv);
}

#define EXPECT_WORDS(cmd, ...)                                                                     \
  do {                                                                                             \
    static const char *const want_[] = {__VA_ARGS__};                                              \
    expect_words(cmd, want_, (int)MQPROC__ARRAY_LEN(want_));                                       \
  } while (0)

/* Splits cmd, expects MQPROC_EINVAL and err containing msg. */
static void expect_error(const char *cmd, const char *msg) {
  char err[MQPROC_ERR_LEN] = "";
  char **argv = (char **)&err; /* must be reset to NULL */
  int argc = -1;
  int rc = mqproc__argv_split(cmd, &argv, &argc, err);
  cr_assert_eq(rc, MQPROC_EINVAL, "split(%s) returned %d", cmd, rc);
  cr_expect_null(argv);
  cr_expect_eq(argc, 0);
  cr_expect(strstr(err, msg) != NULL, "split(%s): err \"%s\" lacks \"%s\"", cmd, err, msg);
}

Test(argv, plain_words) {
  EXPECT_WORDS("ocrd-foo -I OCR-D-IMG -O OCR-D-BIN", "ocrd-foo", "-I", "OCR-D-IMG", "-O",
               "OCR-D-BIN");
}

Test(argv, single_word) {
  EXPECT_WORDS("/usr/bin/true", "/usr/bin/true");
}

Test(argv, single_quoted_command_is_one_word) {
  EXPECT_WORDS("'/usr/bin/ocrd-foo-wrapper --fast'", "/usr/bin/ocrd-foo-wrapper --fast");
}

Test(argv, mixed_quotes_join_into_one_word) {
  EXPECT_WORDS("a'b c'\"d e\"", "ab cd e");
  EXPECT_WORDS("x 'a'\"b\"c y", "x", "abc", "y");
}

Test(argv, escaped_spaces) {
  EXPECT_WORDS("/opt/my\\ tools/run\\ me --x", "/opt/my tools/run me", "--x");
}

Test(argv, backslash_escapes_any_byte_outside_quotes) {
  EXPECT_WORDS("\\a\\'b\\\"c\\\\d", "a'b\"c\\d");
}

Test(argv, backslash_newline_outside_quotes_vanishes) {
  EXPECT_WORDS("foo \\\n--bar", "foo", "--bar");
  EXPECT_WORDS("ab\\\ncd", "abcd");
}

Test(argv, empty_quoted_args_are_words) {
  EXPECT_WORDS("''", "");
  EXPECT_WORDS("\"\"", "");
  EXPECT_WORDS("cmd '' x \"\" ''''", "cmd", "", "x", "", "");
}

Test(argv, tabs_newlines_and_runs_of_blanks_separate) {
  EXPECT_WORDS("  a\tb\n\nc \r\n d\t\t", "a", "b", "c", "d");
}

Test(argv, blanks_inside_quotes_are_kept) {
  EXPECT_WORDS("'a\tb\nc'", "a\tb\nc");
  EXPECT_WORDS("\"  \"", "  ");
}

Test(argv, single_quotes_keep_backslashes_and_double_quotes) {
  EXPECT_WORDS("'a\\b\\'", "a\\b\\");
  EXPECT_WORDS("'say \"hi\"'", "say \"hi\"");
}

Test(argv, double_quotes_escape_only_special_bytes) {
  EXPECT_WORDS("\"a\\\"b\"", "a\"b");
  EXPECT_WORDS("\"a\\\\b\"", "a\\b");
  EXPECT_WORDS("\"\\$HOME \\`x\\`\"", "$HOME `x`");
  EXPECT_WORDS("\"a\\nb\\'c\"", "a\\nb\\'c");
  EXPECT_WORDS("\"a\\\nb\"", "ab");
  EXPECT_WORDS("\"it's\"", "it's");
}

Test(argv, no_expansion_of_any_kind) {
  EXPECT_WORDS("echo $HOME ${USER} ~ ~/x *.txt [ab] $(id) `id`", "echo", "$HOME", "${USER}", "~",
               "~/x", "*.txt", "[ab]", "$(id)", "`id`");
  EXPECT_WORDS("a;b | c && d > e # f", "a;b", "|", "c", "&&", "d", ">", "e", "#", "f");
}

Test(argv, utf8_bytes_pass_through) {
  EXPECT_WORDS("ocrd-tesserocr 'Fraktur – ä'", "ocrd-tesserocr", "Fraktur – ä");
}

Test(argv, many_words_grow_the_array) {
  char cmd[400] = "";
  for (int i = 0; i < 100; i++)
    strcat(cmd, "w ");
  char err[MQPROC_ERR_LEN];
  char **argv;
  int argc;
  cr_assert_eq(mqproc__argv_split(cmd, &argv, &argc, err), MQPROC_OK);
  cr_assert_eq(argc, 100);
  cr_assert_str_eq(argv[99], "w");
  cr_assert_null(argv[100]);
  mqproc__argv_free(argv);
}

Test(argv, argc_out_may_be_null) {
  char **argv;
  cr_assert_eq(mqproc__argv_split("a b", &argv, NULL, NULL), MQPROC_OK);
  cr_assert_str_eq(argv[1], "b");
  mqproc__argv_free(argv);
}

Test(argv, unclosed_single_quote_reports_its_position) {
  expect_error("foo 'bar", "unclosed single quote opened at byte 4");
  expect_error("'", "unclosed single quote opened at byte 0");
  expect_error("\"it's\" 'x", "unclosed single quote opened at byte 7");
}

Test(argv, unclosed_double_quote_reports_its_position) {
  expect_error("ab \"cd", "unclosed double quote opened at byte 3");
  expect_error("\"x\\\"", "unclosed double quote opened at byte 0");
  expect_error("\"x\\", "unclosed double quote opened at byte 0");
}

Test(argv, trailing_backslash_reports_its_position) {
  expect_error("foo\\", "trailing backslash at byte 3");
  expect_error("a b \\", "trailing backslash at byte 4");
}

Test(argv, empty_and_blank_commands_are_errors) {
  expect_error("", "empty command");
  expect_error("   \t\n ", "empty command");
}

Test(argv, null_arguments_are_errors) {
  char **argv;
  cr_assert_eq(mqproc__argv_split(NULL, &argv, NULL, NULL), MQPROC_EINVAL);
  cr_assert_null(argv);
  cr_assert_eq(mqproc__argv_split("a", NULL, NULL, NULL), MQPROC_EINVAL);
}

Test(argv, free_accepts_null) {
  mqproc__argv_free(NULL);
}
