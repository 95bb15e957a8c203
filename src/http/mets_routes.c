/* The METS server's routes (mets_server.h): OCR-D core 3.12.1's OcrdMetsServer.startup()
 * (ocrd/mets_server.py), answered as FastAPI 0.92 with pydantic 1.10 answers them there:
 * text routes text/plain; charset=utf-8, JSON ones compact application/json; a
 * FileExistsError or a bad regular expression 400 with a JSON string, a request that fails
 * validation 422 {"detail": [{"loc", "msg", "type"}]}, OCR-D's ValueErrors 500 "Internal
 * Server Error" (what an exception FastAPI has no handler for gives), an unknown path 404,
 * a wrong method 405. mqproc's own refusal: a local_filename outside the workspace (as text,
 * or through a link on disk that leads out), 400. */
#include "http/mets_server_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/util.h"

#define TEXT "text/plain; charset=utf-8"

/* ---- answers --------------------------------------------------------------------------- */

static void text(mqproc__http_req_t *req, int status, const char *t) {
  mqproc__http_reply_text(req, status, TEXT, t);
}

/* o (taken) as FastAPI writes JSON: compact, UTF-8 as it is, no newline. */
static char *json_text(json_t *o) {
  char *s = json_dumps(o, JSON_COMPACT | JSON_ENCODE_ANY);
  json_decref(o);
  return s;
}

static void json(mqproc__http_req_t *req, int status, json_t *o) {
  char *s = json_text(o);
  if (s == NULL)
    text(req, 500, "Internal Server Error");
  else
    mqproc__http_reply(req, status, "application/json", s, strlen(s));
}

/* An exception FastAPI has no handler for (OCR-D's ValueError, IndexError, ...). */
static void internal_error(mqproc__http_req_t *req, const char *why) {
  MQPROC__WARN("%s %s: 500 (%s)", mqproc__http_method(req), mqproc__http_path(req), why);
  text(req, 500, "Internal Server Error");
}

/* One of FastAPI's validation errors (pydantic 1's words). */
static json_t *invalid(const char *field, const char *msg, const char *type) {
  return field != NULL
             ? json_pack("{s:[s,s], s:s, s:s}", "loc", "body", field, "msg", msg, "type", type)
             : json_pack("{s:[s], s:s, s:s}", "loc", "body", "msg", msg, "type", type);
}

static void unprocessable(mqproc__http_req_t *req, json_t *errors) {
  json(req, 422, json_pack("{s:o}", "detail", errors));
}

/* ---- reading --------------------------------------------------------------------------- */

static void get_unique_identifier(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char *id = NULL;
  if (mqproc__mets_unique_identifier(s->mets, &id) < 0)
    internal_error(req, "out of memory");
  else
    text(req, 200, id != NULL ? id : ""); /* None: an empty body, as Response(content=None) */
  free(id);
}

static void get_workspace_path(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  text(req, 200, s->dir);
}

static void get_physical_pages(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  json(req, 200, json_pack("{s:o*}", "physical_pages", mqproc__mets_physical_pages(s->mets)));
}

static void get_file_groups(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  json(req, 200, json_pack("{s:o*}", "file_groups", mqproc__mets_file_groups(s->mets)));
}

static void get_agents(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  json(req, 200, json_pack("{s:o*}", "agents", mqproc__mets_agents(s->mets)));
}

/* A file as OcrdFileModel.create() gives it: url "" when it has none (OcrdFile.url). */
static json_t *file_model(const json_t *f) {
  const char *url = json_string_value(json_object_get(f, "url"));
  return json_pack("{s:O, s:O, s:O, s:O, s:s, s:O}", "file_grp", json_object_get(f, "file_grp"),
                   "file_id", json_object_get(f, "file_id"), "mimetype",
                   json_object_get(f, "mimetype"), "page_id", json_object_get(f, "page_id"), "url",
                   url != NULL ? url : "", "local_filename", json_object_get(f, "local_filename"));
}

static void get_files(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char err[MQPROC_ERR_LEN];
  mqproc__mets_query_t q = {.file_grp = mqproc__http_arg(req, "file_grp"),
                            .file_id = mqproc__http_arg(req, "file_id"),
                            .page_id = mqproc__http_arg(req, "page_id"),
                            .mimetype = mqproc__http_arg(req, "mimetype"),
                            .url = mqproc__http_arg(req, "url"),
                            .local_filename = mqproc__http_arg(req, "local_filename")};
  mqproc__mets_why_t why;
  json_t *files, *f, *out = json_array();
  size_t i;
  if (mqproc__mets_query(s->mets, &q, &files, &why, err) != MQPROC_OK) {
    json_decref(out);
    if (why == MQPROC__METS_WHY_REGEX) /* OCR-D's handler of re.error */
      json(req, 400, json_string(err));
    else
      internal_error(req, err);
    return;
  }
  json_array_foreach(files, i, f) json_array_append_new(out, file_model(f));
  json_decref(files);
  json(req, 200, json_pack("{s:o}", "files", out));
}

/* ---- changing -------------------------------------------------------------------------- */

/* Changes are refused once the journal has failed. */
static int refused(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  if (s->broken == NULL)
    return 0;
  json(req, 500, json_sprintf("the METS server cannot make changes durable: %s", s->broken));
  return 1;
}

/* A form field as FastAPI's Form() reads it: an empty value is none. */
static const char *field(mqproc__http_req_t *req, const char *name) {
  const char *v = mqproc__http_form(req, name);
  return v != NULL && *v != '\0' ? v : NULL;
}

/* pydantic 1's bool: 1, 0, -1 when it is none of its words. */
static int py_bool(const char *v) {
  static const char *const YES[] = {"1", "on", "t", "true", "y", "yes"};
  static const char *const NO[] = {"0", "off", "f", "false", "n", "no"};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(YES); i++) {
    if (!strcasecmp(v, YES[i]))
      return 1;
    if (!strcasecmp(v, NO[i]))
      return 0;
  }
  return -1;
}

/* Whether local_filename stays in the workspace: a relative path that does not climb above
 * it, or an absolute one below its directory (resolved, or as given), compared as text. */
static int inside(const mqproc__mets_server_t *s, const char *path) {
  const char *p = path;
  size_t base = 0;
  int depth = 0;
  if (path[0] == '/') {
    const char *dirs[] = {s->dir, s->given_dir};
    for (size_t i = 0; i < 2 && base == 0; i++) {
      size_t n = strlen(dirs[i]);
      while (n > 1 && dirs[i][n - 1] == '/')
        n--;
      if (!strncmp(path, dirs[i], n) && (path[n] == '/' || path[n] == '\0'))
        base = n;
    }
    if (base == 0)
      return 0;
    p = path + base;
  }
  while (*p != '\0') { /* the components after the workspace: never above it */
    size_t n;
    while (*p == '/')
      p++;
    n = strcspn(p, "/");
    if (n == 2 && !strncmp(p, "..", 2) && --depth < 0)
      return 0;
    if (n > 0 && !(n == 1 && p[0] == '.') && !(n == 2 && !strncmp(p, "..", 2)))
      depth++;
    p += n;
  }
  return 1;
}

/* Whether path, resolved through the links on disk, stays in the workspace: the deepest part
 * of it that exists (the file, else its directory, ...) must resolve below the workspace's
 * resolved directory, so a link that leads out (a directory or the file itself) is outside;
 * a dangling link in its place is refused as well. */
static int resolves_inside(const mqproc__mets_server_t *s, const char *path) {
  char *full = path[0] == '/' ? mqproc__strdup(path) : mqproc__asprintf("%s/%s", s->dir, path);
  char real[PATH_MAX], *slash;
  struct stat st;
  size_t n = strlen(s->dir);
  int in = 0;
  while (full != NULL) {
    const char *p = full[0] != '\0' ? full : "/";
    if (realpath(p, real) != NULL) {
      in = n == 1 || (!strncmp(real, s->dir, n) && (real[n] == '/' || real[n] == '\0'));
      break;
    }
    if ((errno != ENOENT && errno != ENOTDIR) || lstat(p, &st) == 0 ||
        (slash = strrchr(full, '/')) == NULL)
      break; /* unreadable, or a dangling link: refused */
    *slash = '\0';
  }
  free(full);
  return in;
}

static void post_file(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  static const char *const REQUIRED[] = {"file_grp", "file_id", "mimetype"};
  char err[MQPROC_ERR_LEN];
  const char *force_text = field(req, "force"), *local = field(req, "local_filename");
  json_t *errors = json_array(), *entry;
  mqproc__mets_why_t why;
  int force = force_text != NULL ? py_bool(force_text) : 0;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(REQUIRED); i++)
    if (field(req, REQUIRED[i]) == NULL)
      json_array_append_new(errors, invalid(REQUIRED[i], "field required", "value_error.missing"));
  if (force < 0)
    json_array_append_new(
        errors, invalid("force", "value could not be parsed to a boolean", "type_error.bool"));
  if (json_array_size(errors) > 0) {
    unprocessable(req, errors);
    return;
  }
  json_decref(errors);
  if (local != NULL && (!inside(s, local) || !resolves_inside(s, local))) {
    json(req, 400,
         json_sprintf("local_filename '%.500s' is outside the workspace %s", local, s->dir));
    return;
  }
  if (refused(s, req))
    return;
  entry = json_pack("{s:s, s:s, s:s, s:s?, s:s, s:s?, s:s?, s:b}", "op", "file", "file_grp",
                    field(req, "file_grp"), "file_id", field(req, "file_id"), "page_id",
                    field(req, "page_id"), "mimetype", field(req, "mimetype"), "url",
                    field(req, "url"), "local_filename", local, "force", force || s->overwrite);
  if (entry == NULL) { /* (a value that is not UTF-8: jansson refuses it, so did Python) */
    json(req, 400, json_string("a form value is not UTF-8"));
    return;
  }
  if (mqproc__mets_server_apply(s, entry, 0, 0, &why, err) != MQPROC_OK) {
    if (why == MQPROC__METS_WHY_EXISTS) /* OCR-D's handler of FileExistsError */
      json(req, 400, json_string(err));
    else
      internal_error(req, err);
  } else {
    mqproc__mets_server_changed(
        s, req, entry,
        json_text(json_pack("{s:O, s:O, s:O, s:O, s:O, s:O}", "file_grp",
                            json_object_get(entry, "file_grp"), "file_id",
                            json_object_get(entry, "file_id"), "mimetype",
                            json_object_get(entry, "mimetype"), "page_id",
                            json_object_get(entry, "page_id"), "url", json_object_get(entry, "url"),
                            "local_filename", json_object_get(entry, "local_filename"))));
  }
  json_decref(entry);
}

/* One of OcrdAgentModel's text fields of body: into *out (NULL: null), or an error. */
static int agent_text(const json_t *body, const char *name, int optional, const char **out,
                      json_t *errors) {
  const json_t *v = json_object_get(body, name);
  *out = json_string_value(v);
  if (json_is_string(v) || (optional && (v == NULL || json_is_null(v))))
    return 0;
  json_array_append_new(
      errors, v == NULL ? invalid(name, "field required", "value_error.missing")
              : json_is_null(v)
                  ? invalid(name, "none is not an allowed value", "type_error.none.not_allowed")
                  : invalid(name, "str type expected", "type_error.str"));
  return -1;
}

/* notes: null, or [[{str: str}, str or null], ...] (pydantic's List[Tuple[Dict, Optional]]). */
static int agent_notes(const json_t *notes, json_t *errors) {
  size_t i;
  const json_t *n;
  if (notes == NULL || json_is_null(notes))
    return 0;
  if (!json_is_array(notes)) {
    json_array_append_new(errors, invalid("notes", "value is not a valid list", "type_error.list"));
    return -1;
  }
  json_array_foreach(notes, i, n) {
    const json_t *attrs = json_array_get(n, 0), *t = json_array_get(n, 1), *v;
    const char *k;
    int ok = json_is_array(n) && json_array_size(n) == 2 && json_is_object(attrs) &&
             (json_is_string(t) || json_is_null(t));
    json_object_foreach((json_t *)(ok ? attrs : NULL), k, v) ok &= json_is_string(v);
    if (!ok) {
      json_array_append_new(errors, json_pack("{s:[s,s,i], s:s, s:s}", "loc", "body", "notes",
                                              (int)i, "msg", "value is not a valid tuple", "type",
                                              "type_error.tuple"));
      return -1;
    }
  }
  return 0;
}

static void post_agent(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char err[MQPROC_ERR_LEN];
  size_t len;
  const char *raw = mqproc__http_body(req, &len), *v[5];
  static const char *const NAMES[] = {"name", "type", "role", "otherrole", "othertype"};
  json_error_t je;
  json_t *body = raw != NULL ? json_loadb(raw, len, 0, &je) : NULL, *errors = json_array(), *entry;
  mqproc__mets_why_t why;
  if (body == NULL) { /* FastAPI: the JSON decoder's words, with the position */
    json_array_append_new(
        errors, json_pack("{s:[s,i], s:s, s:s}", "loc", "body", raw != NULL ? je.position : 0,
                          "msg", raw != NULL ? je.text : "field required", "type",
                          raw != NULL ? "value_error.jsondecode" : "value_error.missing"));
    unprocessable(req, errors);
    return;
  }
  if (!json_is_object(body)) {
    json_array_append_new(errors, invalid(NULL, "value is not a valid dict", "type_error.dict"));
    json_decref(body);
    unprocessable(req, errors);
    return;
  }
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(NAMES); i++)
    agent_text(body, NAMES[i], !strcmp(NAMES[i], "otherrole"), &v[i], errors);
  agent_notes(json_object_get(body, "notes"), errors);
  if (json_array_size(errors) > 0) {
    json_decref(body);
    unprocessable(req, errors);
    return;
  }
  json_decref(errors);
  if (refused(s, req)) {
    json_decref(body);
    return;
  }
  entry = json_pack("{s:s, s:s, s:s, s:s, s:s?, s:s, s:O?}", "op", "agent", "name", v[0], "type",
                    v[1], "role", v[2], "otherrole", v[3], "othertype", v[4], "notes",
                    json_object_get(body, "notes"));
  json_decref(body);
  if (entry == NULL || mqproc__mets_server_apply(s, entry, 0, 0, &why, err) != MQPROC_OK) {
    internal_error(req, entry == NULL ? "out of memory" : err);
  } else {
    json_t *echo = json_deep_copy(entry);
    json_object_del(echo, "op");
    if (json_object_get(echo, "notes") == NULL)
      json_object_set_new(echo, "notes", json_null());
    mqproc__mets_server_changed(s, req, entry, json_text(echo));
  }
  json_decref(entry);
}

/* ---- the workspace --------------------------------------------------------------------- */

static void put_save(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char err[MQPROC_ERR_LEN];
  if (mqproc__mets_server_save_now(s, err) != MQPROC_OK)
    internal_error(req, err);
  else
    text(req, 200, "The Mets Server is writing changes to disk.");
}

static void stopped(void *ud, int sent) {
  mqproc__mets_server_t *s = ud;
  (void)sent;
  if (s->cfg.on_stop != NULL)
    s->cfg.on_stop(s->cfg.ud);
}

static void delete_stop(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char err[MQPROC_ERR_LEN];
  if (mqproc__mets_server_save_now(s, err) != MQPROC_OK) {
    internal_error(req, err);
    return;
  }
  MQPROC__INFO("DELETE /: saved, stopping");
  s->stopping = 1;
  mqproc__http_on_done(req, stopped, s);
  text(req, 200, "The Mets Server will shut down soon...");
}

static void post_reload(mqproc__mets_server_t *s, mqproc__http_req_t *req) {
  char err[MQPROC_ERR_LEN], *t;
  if (mqproc__mets_server_reload(s, err) != MQPROC_OK) {
    internal_error(req, err);
    return;
  }
  t = mqproc__asprintf("Reloaded from %s", s->dir);
  if (t == NULL)
    internal_error(req, "out of memory");
  else
    mqproc__http_reply(req, 200, TEXT, t, strlen(t));
}

/* ---- dispatch -------------------------------------------------------------------------- */

typedef void (*route_fn)(mqproc__mets_server_t *s, mqproc__http_req_t *req);

static const struct route {
  const char *path, *method;
  route_fn fn;
} ROUTES[] = {
    {"/", "PUT", put_save},
    {"/", "DELETE", delete_stop},
    {"/reload", "POST", post_reload},
    {"/unique_identifier", "GET", get_unique_identifier},
    {"/workspace_path", "GET", get_workspace_path},
    {"/physical_pages", "GET", get_physical_pages},
    {"/file_groups", "GET", get_file_groups},
    {"/agent", "GET", get_agents},
    {"/agent", "POST", post_agent},
    {"/file", "GET", get_files},
    {"/file", "POST", post_file},
};

void mqproc__mets_server_handle(void *ud, mqproc__http_req_t *req) {
  mqproc__mets_server_t *s = ud;
  const char *path = mqproc__http_path(req), *method = mqproc__http_method(req);
  const struct route *partial = NULL;
  s->last_request = mqproc__loop_now(s->loop);
  if (!strcmp(method, "HEAD")) /* (Starlette answers HEAD as GET; MHD sends no body) */
    method = "GET";
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(ROUTES); i++) {
    if (strcmp(ROUTES[i].path, path) != 0)
      continue;
    if (!strcmp(ROUTES[i].method, method)) {
      ROUTES[i].fn(s, req);
      return;
    }
    if (partial == NULL)
      partial = &ROUTES[i];
  }
  if (partial != NULL) { /* Starlette: the first route of the path says what it allows */
    const char *allow[] = {"Allow", partial->method, NULL};
    mqproc__http_reply_text_with(req, 405, "application/json",
                                 "{\"detail\":\"Method Not Allowed\"}", allow);
  } else {
    mqproc__http_reply_text(req, 404, "application/json", "{\"detail\":\"Not Found\"}");
  }
}
