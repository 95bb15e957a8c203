/* OCR-D's processor command line, METS paths and METS servers (see ocrd_argv.h). */
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

/* A command line being built: a NULL-terminated array of malloc()ed strings that grows
 * with each word, so no count of the words has to be kept by hand; bad once a word or
 * the array could not be allocated (v is then freed whole). */
typedef struct {
  char **v;
  size_t n, cap;
  int bad;
} words_t;

/* Appends s, taking ownership; a NULL s means out of memory. */
static void push(words_t *w, char *s) {
  if (s != NULL && w->n + 1 >= w->cap) { /* room for s and the NULL after it */
    size_t cap = 2 * w->cap + 16;
    char **v = mqproc__realloc(w->v, cap * sizeof(char *));
    if (v == NULL) {
      free(s);
      s = NULL;
    } else {
      w->v = v;
      w->cap = cap;
    }
  }
  if (s == NULL) {
    w->bad = 1;
    return;
  }
  w->v[w->n++] = s;
  w->v[w->n] = NULL;
}

/* Appends an option and its value (value taken, as by push()). */
static void push_opt(words_t *w, const char *flag, char *value) {
  push(w, mqproc__strdup(flag));
  push(w, value);
}

int mqproc__ocrd_argv(char *const *base, const mqproc__msg_t *msg, const char *mets,
                      const char *log_level, const char *mets_server_url, char ***out, char *err) {
  words_t w = {0};
  for (size_t i = 0; base[i] != NULL; i++)
    push(&w, mqproc__strdup(base[i]));
  push_opt(&w, "--working-dir", dir_of(mets));
  push_opt(&w, "--mets", mqproc__strdup(mets));
  push_opt(&w, "--log-level", mqproc__strdup(log_level));
  if (msg->page_id != NULL)
    push_opt(&w, "--page-id", mqproc__strdup(msg->page_id));
  push_opt(&w, "--input-file-grp", join_grps(msg->input_file_grps));
  if (msg->output_file_grps != NULL)
    push_opt(&w, "--output-file-grp", join_grps(msg->output_file_grps));
  /* json.dumps(parameters), as OCR-D's worker writes it */
  push_opt(&w, "--parameter", mqproc__json_python(msg->parameters));
  /* the METS server last, as run_cli() appends it */
  if (mets_server_url != NULL)
    push_opt(&w, "--mets-server-url", mqproc__strdup(mets_server_url));
  if (w.bad) {
    mqproc__argv_free(w.v);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  *out = w.v;
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

/* Python's Path(p).parent as text: the path without its last component, "." and empty
 * components dropped ("/a//b/./m.xml" -> "/a/b", "m.xml" -> ".", "/m.xml" -> "/").
 * malloc()ed; NULL when out of memory. */
static char *py_parent(const char *p) {
  size_t len = strlen(p), at = 0, last = 0;
  char *out = mqproc__malloc(len + 2);
  int absolute = p[0] == '/';
  if (out == NULL)
    return NULL;
  if (absolute)
    out[at++] = '/';
  for (const char *c = p; *c != '\0';) {
    size_t n = strcspn(c, "/");
    if (n > 0 && !(n == 1 && c[0] == '.')) {
      last = at; /* where this component starts, its separator included */
      if (at > (size_t)absolute)
        out[at++] = '/';
      memcpy(out + at, c, n);
      at += n;
    }
    c += n + (c[n] == '/');
  }
  at = last; /* the last component goes */
  if (at == 0)
    out[at++] = absolute ? '/' : '.';
  out[at] = '\0';
  return out;
}

char *mqproc__ocrd_socket_name(const char *mets) {
  char *dir = py_parent(mets), *out, *o;
  int in_run = 0;
  if (dir == NULL || (out = o = mqproc__malloc(strlen(dir) + sizeof(".sock"))) == NULL) {
    free(dir);
    return NULL;
  }
  /* ocrd_utils.safe_filename: re.sub(r'[^\w]+', '_', …); the dots it would then strip
   * are gone with the runs already */
  for (const unsigned char *c = (const unsigned char *)dir; *c != '\0'; c++) {
    int word = (*c >= '0' && *c <= '9') || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
               *c == '_' || *c >= 0x80;
    if (word)
      *o++ = (char)*c;
    else if (!in_run)
      *o++ = '_';
    in_run = !word;
  }
  strcpy(o, ".sock");
  free(dir);
  return out;
}

int mqproc__ocrd_mets_server_url(const mqproc__msg_t *msg, const char *mets,
                                 mqproc__ocrd_mets_server_t mode, const char *sockets_dir,
                                 char **out, char *err) {
  static const char cb[] = "/result_callback";
  const char *icb = msg->internal_callback_url;
  size_t n = icb != NULL ? strlen(icb) : 0;
  char *name;
  *out = NULL;
  if (icb == NULL || mets == NULL || mode == MQPROC__OCRD_METS_OFF)
    return MQPROC_OK;
  if (mode == MQPROC__OCRD_METS_TCP) {
    if (n < sizeof(cb) - 1 || strcmp(icb + n - (sizeof(cb) - 1), cb) != 0)
      return mqproc__err(err, MQPROC_EINVAL,
                         "internal_callback_url '%.200s' does not end in /result_callback, so "
                         "the Processing Server's /tcp_mets (--ocrd-mets-server=tcp) is unknown",
                         icb);
    *out = mqproc__asprintf("%.*s/tcp_mets", (int)(n - (sizeof(cb) - 1)), icb);
  } else if ((name = mqproc__ocrd_socket_name(mets)) != NULL) {
    size_t dl = strlen(sockets_dir);
    while (dl > 1 && sockets_dir[dl - 1] == '/')
      dl--;
    *out = mqproc__asprintf("%.*s/%s", (int)dl, sockets_dir, name);
    free(name);
  }
  return *out != NULL ? MQPROC_OK : mqproc__err(err, MQPROC_ENOMEM, "out of memory");
}

int mqproc__ocrd_mets_server_named(const char *v) {
  size_t n = strlen(v);
  if (n == 0 || n > MQPROC__METS_SERVER_URL_MAX)
    return 0;
  for (const unsigned char *c = (const unsigned char *)v; *c != '\0'; c++)
    if (*c < 0x20 || *c == 0x7f)
      return 0;
  return strcmp(v, "none") == 0 || v[0] == '/' || strncmp(v, "http://", 7) == 0 ||
         strncmp(v, "https://", 8) == 0;
}
