/* OCR-D's processor command line and METS paths (see ocrd_cli.h). */
#include "runner/ocrd_argv.h"

#include <stdlib.h>
#include <string.h>

#include "base/argv.h"
#include "codec/pyjson.h"
#include "base/util.h"

/* "A,B,C" from an array of strings (the codec bounds their number and size). */
static char *join_grps(const json_t *arr) {
  size_t len = 1, i, at = 0;
  char *out;
  for (i = 0; i < json_array_size(arr); i++)
    len += json_string_length(json_array_get(arr, i)) + 1;
  if ((out = mqproc__malloc(len)) == NULL)
    return NULL;
  for (i = 0; i < json_array_size(arr); i++) {
    const json_t *g = json_array_get(arr, i);
    if (i > 0)
      out[at++] = ',';
    memcpy(out + at, json_string_value(g), json_string_length(g));
    at += json_string_length(g);
  }
  out[at] = '\0';
  return out;
}

static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL)
    return mqproc__strdup(".");
  if (slash == path)
    return mqproc__strdup("/");
  return mqproc__strndup(path, (size_t)(slash - path));
}

/* Appends s (taking ownership) to the array; a NULL s means out of memory. */
static int push(char **v, size_t *n, char *s) {
  if (s == NULL)
    return -1;
  v[(*n)++] = s;
  return 0;
}

int mqproc__ocrd_argv(char *const *base, const mqproc__msg_t *msg, const char *mets,
                      const char *log_level, char ***out, char *err) {
  size_t nb = 0, n = 0;
  char **v;
  int bad = 0;
  while (base[nb] != NULL)
    nb++;
  if ((v = mqproc__calloc(nb + 16, sizeof(char *))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (size_t i = 0; i < nb; i++)
    bad |= push(v, &n, mqproc__strdup(base[i]));
  bad |= push(v, &n, mqproc__strdup("--working-dir")) | push(v, &n, dir_of(mets));
  bad |= push(v, &n, mqproc__strdup("--mets")) | push(v, &n, mqproc__strdup(mets));
  bad |= push(v, &n, mqproc__strdup("--log-level")) | push(v, &n, mqproc__strdup(log_level));
  if (msg->page_id != NULL)
    bad |= push(v, &n, mqproc__strdup("--page-id")) | push(v, &n, mqproc__strdup(msg->page_id));
  bad |= push(v, &n, mqproc__strdup("--input-file-grp")) |
         push(v, &n, join_grps(msg->input_file_grps));
  if (msg->output_file_grps != NULL)
    bad |= push(v, &n, mqproc__strdup("--output-file-grp")) |
           push(v, &n, join_grps(msg->output_file_grps));
  /* json.dumps(parameters), as OCR-D's worker writes it */
  bad |= push(v, &n, mqproc__strdup("--parameter")) |
         push(v, &n, mqproc__json_python(msg->parameters));
  v[n] = NULL;
  if (bad) {
    mqproc__argv_free(v);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  *out = v;
  return MQPROC_OK;
}

int mqproc__ocrd_is_processor(const char *program) {
  const char *slash = strrchr(program, '/');
  return strncmp(slash != NULL ? slash + 1 : program, "ocrd-", 5) == 0;
}

int mqproc__ocrd_mets_path(const mqproc__msg_t *msg, const char *workspace_root, char **out,
                           char *err) {
  const char *id = msg->workspace_id;
  if (msg->path_to_mets != NULL) {
    *out = mqproc__strdup(msg->path_to_mets);
  } else if (workspace_root == NULL) {
    return mqproc__err(err, MQPROC_ECONFIG,
                       "workspace_id '%.200s' given, but this server has no --workspace-root to "
                       "find its METS",
                       id);
  } else if (strchr(id, '/') != NULL || strcmp(id, ".") == 0 || strcmp(id, "..") == 0) {
    return mqproc__err(err, MQPROC_EINVAL, "workspace_id '%.200s' is not a directory name", id);
  } else {
    *out = mqproc__asprintf("%s/%s/mets.xml", workspace_root, id);
  }
  return *out != NULL ? MQPROC_OK : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
}
