/* Splitting a command string into an argv array with POSIX-shell-like quoting. */
#ifndef MQPROC_ARGV_H
#define MQPROC_ARGV_H

/* Splits cmd into words the way sh would, without any expansion: blanks separate
 * words; '...' keeps everything literally; "..." keeps everything but \" \\ \$ \` and
 * backslash-newline; outside quotes a backslash escapes the next character. Unclosed
 * quotes, a trailing backslash or an empty command are errors (MQPROC_EINVAL, err says
 * which and at which byte). On success *argv_out is a NULL-terminated malloc()ed array
 * of malloc()ed strings (free with mqproc__argv_free()) and *argc_out its length. */
int mqproc__argv_split(const char *cmd, char ***argv_out, int *argc_out, char *err);
void mqproc__argv_free(char **argv);
/* A deep copy of a NULL-terminated string vector into *out (NULL stays NULL); -1 when out
 * of memory. */
int mqproc__argv_copy(char *const *v, char ***out);

#endif
