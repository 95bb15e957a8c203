/* libFuzzer targets (docs/security.md#fuzzing): each file defines LLVMFuzzerTestOneInput
 * for one decoder of input that comes from outside. Built with clang's libFuzzer by
 * bench/fuzz.sh (-DMQPROC_FUZZ=ON), and under gcc with replay_main.c, which runs every
 * input of tests/fuzz/corpus/<target>/ once: the corpus is an ordinary test in every CI
 * run. A target aborts (FUZZ_CHECK) when a property it checks does not hold. */
#ifndef MQPROC_FUZZ_H
#define MQPROC_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #cond);                  \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#endif
