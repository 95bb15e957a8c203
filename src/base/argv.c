/* Splitting a command string into an argv array with sh-like quoting, without expansion. */
#include "base/argv.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* State of one split: the input, the word being built and the words so far. */
typedef struct splitter {
  const char *cmd; /* input, NUL-terminated */
  size_t pos;      /* next byte of cmd to read */
  char *word;      /* current word (strlen(cmd) + 1 bytes: a word never grows past cmd) */
  size_t wlen;     /* bytes in word */
  char **argv;     /* NULL-terminated words so far */
  int argc;
  int cap; /* slots in argv, the NULL included */
} splitter_t;

static bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Moves the current word into argv (which stays NULL-terminated). */
static int push_word(splitter_t *s, char *err) {
  char *copy;
  if (s->argc + 2 > s->cap) {
    int cap = s->cap == 0 ? 8 : s->cap * 2;
    char **grown = mqproc__realloc(s->argv, (size_t)cap * sizeof(*grown));
    if (grown == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory splitting the command");
    s->argv = grown;
    s->cap = cap;
  }
  copy = mqproc__strndup(s->word, s->wlen);
  if (copy == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory splitting the command");
  s->argv[s->argc++] = copy;
  s->argv[s->argc] = NULL;
  s->wlen = 0;
  return MQPROC_OK;
}

/* '...': everything up to the next ' is literal. pos is on the opening quote. */
static int scan_single(splitter_t *s, char *err) {
  size_t open = s->pos++;
  while (s->cmd[s->pos] != '\'') {
    if (s->cmd[s->pos] == '\0')
      return mqproc__err(err, MQPROC_EINVAL, "unclosed single quote opened at byte %zu", open);
    s->word[s->wlen++] = s->cmd[s->pos++];
  }
  s->pos++;
  return MQPROC_OK;
}

/* "...": a backslash only escapes " \ $ ` and newline (backslash-newline vanishes). */
static int scan_double(splitter_t *s, char *err) {
  size_t open = s->pos++;
  for (;;) {
    char c = s->cmd[s->pos];
    if (c == '\0')
      return mqproc__err(err, MQPROC_EINVAL, "unclosed double quote opened at byte %zu", open);
    s->pos++;
    if (c == '"')
      return MQPROC_OK;
    if (c == '\\' && s->cmd[s->pos] != '\0' && strchr("\"\\$`\n", s->cmd[s->pos]) != NULL) {
      c = s->cmd[s->pos++];
      if (c == '\n')
        continue;
    }
    s->word[s->wlen++] = c;
  }
}

/* Outside quotes a backslash takes the next byte literally; backslash-newline vanishes. */
static int scan_backslash(splitter_t *s, char *err) {
  size_t at = s->pos++;
  char c = s->cmd[s->pos];
  if (c == '\0')
    return mqproc__err(err, MQPROC_EINVAL, "trailing backslash at byte %zu", at);
  s->pos++;
  if (c != '\n')
    s->word[s->wlen++] = c;
  return MQPROC_OK;
}

/* Reads one word starting at a non-blank byte and appends it to argv. */
static int scan_word(splitter_t *s, char *err) {
  int rc = MQPROC_OK;
  char c;
  while (rc == MQPROC_OK && (c = s->cmd[s->pos]) != '\0' && !is_blank(c)) {
    if (c == '\'')
      rc = scan_single(s, err);
    else if (c == '"')
      rc = scan_double(s, err);
    else if (c == '\\')
      rc = scan_backslash(s, err);
    else
      s->word[s->wlen++] = s->cmd[s->pos++];
  }
  return rc == MQPROC_OK ? push_word(s, err) : rc;
}

static int split_all(splitter_t *s, char *err) {
  for (;;) {
    while (is_blank(s->cmd[s->pos]))
      s->pos++;
    if (s->cmd[s->pos] == '\0')
      return MQPROC_OK;
    int rc = scan_word(s, err);
    if (rc != MQPROC_OK)
      return rc;
  }
}

int mqproc__argv_split(const char *cmd, char ***argv_out, int *argc_out, char *err) {
  splitter_t s = {.cmd = cmd};
  int rc;
  if (argv_out != NULL)
    *argv_out = NULL;
  if (argc_out != NULL)
    *argc_out = 0;
  if (cmd == NULL || argv_out == NULL)
    return mqproc__err(err, MQPROC_EINVAL, "no command given");
  s.word = mqproc__malloc(strlen(cmd) + 1);
  if (s.word == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory splitting the command");
  rc = split_all(&s, err);
  if (rc == MQPROC_OK && s.argc == 0)
    rc = mqproc__err(err, MQPROC_EINVAL, "empty command");
  free(s.word);
  if (rc != MQPROC_OK) {
    mqproc__argv_free(s.argv);
    return rc;
  }
  *argv_out = s.argv;
  if (argc_out != NULL)
    *argc_out = s.argc;
  return MQPROC_OK;
}

void mqproc__argv_free(char **argv) {
  if (argv == NULL)
    return;
  for (char **p = argv; *p != NULL; p++)
    free(*p);
  free(argv);
}

int mqproc__argv_copy(char *const *v, char ***out) {
  size_t n = 0;
  *out = NULL;
  if (v == NULL)
    return 0;
  while (v[n] != NULL)
    n++;
  if ((*out = mqproc__calloc(n + 1, sizeof(char *))) == NULL)
    return -1;
  for (size_t i = 0; i < n; i++) {
    if (((*out)[i] = mqproc__strdup(v[i])) == NULL) {
      mqproc__argv_free(*out);
      *out = NULL;
      return -1;
    }
  }
  return 0;
}
