/* Unit: the end of a failed command's output as its try's error shows it
 * (mqproc__runner_tail_text and mqproc__runner_add_tail, runner/common.c): the last lines,
 * valid UTF-8, no control characters or escape sequences, bounded. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/util.h"
#include "runner/int.h"

static char out[MQPROC__TAIL_SHOWN + 1];

static const char *tail_n(const char *raw, size_t n, int cut) {
  size_t len = mqproc__runner_tail_text(raw, n, cut, out, sizeof(out));
  cr_assert_eq(len, strlen(out));
  cr_assert_leq(len, MQPROC__TAIL_SHOWN);
  return out;
}

static const char *tail(const char *raw, int cut) {
  return tail_n(raw, strlen(raw), cut);
}

Test(output_tail, lines_are_joined_trimmed_and_blank_ones_dropped) {
  cr_expect_str_eq(tail("reading the METS\nERROR: disk full\n", 0),
                   "reading the METS | ERROR: disk full");
  cr_expect_str_eq(tail("  \n\tindented  \r\n\n\nlast", 0), "indented | last");
  cr_expect_str_eq(tail("", 0), "");
  cr_expect_str_eq(tail(" \n\t\r\n", 0), "");
}

Test(output_tail, only_the_last_ten_lines) {
  char raw[256] = "";
  for (int i = 1; i <= 15; i++)
    snprintf(raw + strlen(raw), sizeof(raw) - strlen(raw), "line %d\n", i);
  cr_expect_str_eq(tail(raw, 0), "line 6 | line 7 | line 8 | line 9 | line 10 | line 11 | line 12 "
                                 "| line 13 | line 14 | line 15");
}

Test(output_tail, control_characters_and_escape_sequences_are_dropped) {
  cr_expect_str_eq(tail("\x1b[1;31mERROR:\x1b[0m disk\a full\x01\x7f", 0), "ERROR: disk full");
  cr_expect_str_eq(tail("a\xc2\x85"
                        "b\x1b"
                        "Mc",
                        0),
                   "abc"); /* a C1 control; ESC M */
  cr_expect_str_eq(tail("progress 10%\rprogress 100%\r\n", 0), "progress 10% | progress 100%");
}

Test(output_tail, malformed_utf8_becomes_question_marks_and_valid_stays) {
  cr_expect_str_eq(tail("caf\xc3 ok \xff\xfe", 0), "caf? ok ??");
  cr_expect_str_eq(tail("Gr\xc3\xb6\xc3\x9f"
                        "e \xe2\x80\x94 \xf0\x9f\x92\xa5",
                        0),
                   "Gr\xc3\xb6\xc3\x9f"
                   "e \xe2\x80\x94 \xf0\x9f\x92\xa5");
  cr_expect_str_eq(tail("\xed\xa0\x80", 0), "???"); /* a surrogate is not UTF-8 */
}

/* cut: more output came before; its first line is only the end of one. */
Test(output_tail, a_cut_start_drops_the_partial_line) {
  cr_expect_str_eq(tail("of a line\nwhole line\n", 1), "whole line");
  cr_expect_str_eq(tail("\x80\xbf"
                        "end of one long line",
                        1),
                   "\xe2\x80\xa6"
                   "end of one long line");
}

/* Long lines: at most MQPROC__TAIL_SHOWN bytes, the start cut at a character boundary. */
Test(output_tail, long_output_is_bounded_from_its_start) {
  char raw[MQPROC__TAIL_BYTES * 2 + 1];
  const char *t;
  size_t n = 0;
  while (n + 3 < sizeof(raw) - 1) { /* "é" and a line break now and then */
    memcpy(raw + n, n % 301 == 0 ? "\n\xc3\xa9" : "\xc3\xa9x", 3);
    n += 3;
  }
  memcpy(raw + n - 5, "\nEND", 4);
  raw[n - 1] = '\0';
  t = tail_n(raw, strlen(raw), 0);
  cr_expect_eq(strncmp(t, "\xe2\x80\xa6", 3), 0, "%s", t);
  cr_expect(((unsigned char)t[3] & 0xc0) != 0x80, "the cut splits a character");
  cr_expect_eq(strcmp(t + strlen(t) - 3, "END"), 0, "%s", t);
  cr_expect_leq(strlen(t), MQPROC__TAIL_SHOWN);
  cr_expect_eq(mqproc__utf8_clean(t, &(char *){NULL}), t, "not valid UTF-8");
}

Test(output_tail, the_error_gets_the_tail_when_there_is_one) {
  mqproc__run_result_t r;
  memset(&r, 0, sizeof(r));
  snprintf(r.error, sizeof(r.error), "processor exited with status 4");
  mqproc__runner_add_tail(&r, "\n \n", 3, 0);
  cr_expect_str_eq(r.error, "processor exited with status 4");
  mqproc__runner_add_tail(&r, "ERROR: disk full\n", 17, 0);
  cr_expect_str_eq(r.error,
                   "processor exited with status 4 \xe2\x80\x94 last output: ERROR: disk full");
}
