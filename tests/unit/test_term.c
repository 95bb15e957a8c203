/* What an operator's terminal is shown of processor output and error texts
 * (mqproc__term_escape): control bytes that would move the cursor, recolour or retitle
 * the terminal are made visible; text, newlines, tabs and UTF-8 stay as they are. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

static void expect_escaped(const char *in, size_t n, const char *want) {
  char *got = mqproc__term_escape(in, n);
  cr_assert_not_null(got);
  cr_expect_str_eq(got, want);
  free(got);
}

Test(term, escape_sequences_become_visible_and_text_stays) {
  expect_escaped("plain text\n\twith a tab", 22, "plain text\n\twith a tab");
  expect_escaped("\x1b]0;owned\x07red\x1b[31m", 18, "\\x1b]0;owned\\x07red\\x1b[31m");
  expect_escaped("del\x7f cr\r", 8, "del\\x7f cr\\x0d");
  expect_escaped("nul\0x", 5, "nul\\x00x");
}

Test(term, c1_controls_in_utf8_are_escaped_and_other_utf8_is_not) {
  /* C2 9B is CSI; é (C3 A9), “ (E2 80 9C) and ā (C4 81) hold bytes 80..9F but are text */
  expect_escaped("\xc2\x9b"
                 "31m",
                 5, "\\x9b31m");
  expect_escaped("\xc3\xa9 \xe2\x80\x9c \xc4\x81", 9, "\xc3\xa9 \xe2\x80\x9c \xc4\x81");
}
