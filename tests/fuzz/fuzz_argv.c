/* Fuzz target: --exec / --on-failure word splitting (sh-like quoting, no expansion).
 * Properties: the words are as many as argc says; each word quoted again for sh and split
 * again gives the same words. */
#include <string.h>

#include "base/argv.h"
#include "fuzz.h"
#include "mqproc/mqproc.h"

/* The words joined as sh would need them: each in '...', a ' as '\''. */
static char *requote(char **argv) {
  size_t need = 1;
  char *out, *p;
  for (char **w = argv; *w != NULL; w++)
    need += 4 * strlen(*w) + 3;
  out = p = malloc(need);
  if (out == NULL)
    abort();
  for (char **w = argv; *w != NULL; w++) {
    *p++ = '\'';
    for (const char *c = *w; *c != '\0'; c++) {
      if (*c == '\'') {
        memcpy(p, "'\\''", 4);
        p += 4;
      } else {
        *p++ = *c;
      }
    }
    *p++ = '\'';
    *p++ = ' ';
  }
  *p = '\0';
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *cmd, **argv = NULL, **again = NULL, *quoted, err[MQPROC_ERR_LEN];
  int argc = 0, argc2 = 0, n = 0;
  if (size > 65536)
    return 0;
  if ((cmd = malloc(size + 1)) == NULL)
    abort();
  memcpy(cmd, data, size);
  cmd[size] = '\0'; /* options are C strings: a NUL ends them */
  if (mqproc__argv_split(cmd, &argv, &argc, err) != MQPROC_OK) {
    FUZZ_CHECK(argv == NULL && err[0] != '\0', "an error without a reason");
    free(cmd);
    return 0;
  }
  while (argv[n] != NULL)
    n++;
  FUZZ_CHECK(n == argc && argc > 0, "argc %d, words %d", argc, n);
  quoted = requote(argv);
  FUZZ_CHECK(mqproc__argv_split(quoted, &again, &argc2, err) == MQPROC_OK, "%s: %s", err, quoted);
  FUZZ_CHECK(argc2 == argc, "%d words, then %d: %s", argc, argc2, quoted);
  for (int i = 0; i < argc; i++)
    FUZZ_CHECK(strcmp(argv[i], again[i]) == 0, "word %d: '%s' then '%s'", i, argv[i], again[i]);
  mqproc__argv_free(argv);
  mqproc__argv_free(again);
  free(quoted);
  free(cmd);
  return 0;
}
