/* mqproc's METS server (mets_server.h): its life. Start takes the workspace lock, loads the
 * METS, replays the journal; each change is journaled and its answer held until one
 * fdatasync per loop turn (a before-poll hook) has made the turn's entries durable; saves
 * come on a timer while something is unsaved, on request and from the owner; each save
 * resets the journal for the file it wrote. OCR-D's routes are in mets_routes.c. */
#include "http/mets_server_int.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "base/wslock.h"

/* ---- entries: what a change is, applied live or replayed ------------------------------- */

static const char *str(const json_t *o, const char *key) {
  return json_string_value(json_object_get(o, key));
}

/* Whether the file entry e describes is there as it describes it. */
static int file_there(const mqproc__mets_server_t *s, const json_t *e) {
  mqproc__mets_query_t q = {.file_grp = str(e, "file_grp"), .file_id = str(e, "file_id")};
  json_t *files = NULL, *f;
  int there = 0;
  if (mqproc__mets_find(s->mets, &q, &files, NULL) == MQPROC_OK &&
      (f = json_array_get(files, 0)) != NULL) {
    static const char *const KEYS[] = {"page_id", "mimetype", "url", "local_filename"};
    there = 1;
    for (size_t i = 0; i < MQPROC__ARRAY_LEN(KEYS); i++) {
      const char *a = str(f, KEYS[i]), *b = str(e, KEYS[i]);
      a = a != NULL && *a != '\0' ? a : NULL;
      b = b != NULL && *b != '\0' ? b : NULL;
      there &= a == NULL ? b == NULL : b != NULL && !strcmp(a, b);
    }
  }
  json_decref(files);
  return there;
}

/* An agent's JSON as mqproc__mets_agents gives it after a save and reload ("" as null). */
static json_t *agent_as_listed(const json_t *e) {
  json_t *notes = json_array(), *note;
  size_t i;
  const char *othertype = str(e, "othertype"), *otherrole = str(e, "otherrole");
  json_array_foreach(json_object_get(e, "notes"), i, note) {
    json_t *attrs = json_object(), *v;
    const char *k, *text = json_string_value(json_array_get(note, 1));
    json_object_foreach(json_array_get(note, 0), k, v) {
      char *key = mqproc__asprintf("{https://ocr-d.de}%s", k);
      if (key != NULL)
        json_object_set(attrs, key, v);
      free(key);
    }
    json_array_append_new(notes, json_pack("[o, s?]", attrs, text != NULL && *text ? text : NULL));
  }
  return json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:o}", "name", str(e, "name"), "type",
                   othertype != NULL ? "OTHER" : str(e, "type"), "role",
                   otherrole != NULL ? "OTHER" : str(e, "role"), "otherrole", otherrole,
                   "othertype", othertype, "notes", notes);
}

/* Whether an agent equal to entry e is in the METS (texts "" and none alike). */
static int agent_there(const mqproc__mets_server_t *s, const json_t *e) {
  json_t *want = agent_as_listed(e), *agents = mqproc__mets_agents(s->mets), *a, *note;
  size_t i, k;
  int there = 0;
  json_array_foreach(agents, i, a) {
    json_array_foreach(json_object_get(a, "notes"), k, note) {
      const char *t = json_string_value(json_array_get(note, 1));
      if (t != NULL && *t == '\0')
        json_array_set_new(note, 1, json_null());
    }
    there |= json_equal(a, want);
  }
  json_decref(want);
  json_decref(agents);
  return there;
}

int mqproc__mets_server_apply(mqproc__mets_server_t *s, const json_t *e, int replay,
                              int dedupe_agents, mqproc__mets_why_t *why, char *err) {
  const char *op = str(e, "op");
  *why = MQPROC__METS_WHY_NONE;
  if (op != NULL && !strcmp(op, "file")) {
    mqproc__mets_file_t f = {.file_grp = str(e, "file_grp"),
                             .file_id = str(e, "file_id"),
                             .page_id = str(e, "page_id"),
                             .mimetype = str(e, "mimetype"),
                             .url = str(e, "url"),
                             .local_filename = str(e, "local_filename")};
    if (replay && file_there(s, e))
      return MQPROC_OK;
    return mqproc__mets_add_file(s->mets, &f, replay || json_is_true(json_object_get(e, "force")),
                                 why, err);
  }
  if (op != NULL && !strcmp(op, "agent")) {
    mqproc__mets_agent_t a = {.name = str(e, "name"),
                              .type = str(e, "type"),
                              .othertype = str(e, "othertype"),
                              .role = str(e, "role"),
                              .otherrole = str(e, "otherrole"),
                              .notes = json_object_get(e, "notes")};
    if (replay && dedupe_agents && agent_there(s, e))
      return MQPROC_OK;
    return mqproc__mets_add_agent(s->mets, &a, err);
  }
  *why = MQPROC__METS_WHY_VALUE;
  return mqproc__err(err, MQPROC_EINVAL, "an entry of no known kind");
}

/* ---- saves ----------------------------------------------------------------------------- */

int mqproc__mets_server_save_now(mqproc__mets_server_t *s, char *err) {
  char why[MQPROC_ERR_LEN];
  int rc = mqproc__mets_save(s->mets, s->path, &s->lock, err);
  if (rc != MQPROC_OK) {
    MQPROC__ERROR("cannot save %s (the journal keeps the changes): %s", s->path, err);
    return rc;
  }
  s->dirty = 0;
  if (s->save_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->save_timer);
  s->save_timer = 0;
  if (mqproc__mets_journal_reset(s->journal, s->lock, why) != MQPROC_OK) /* they are saved */
    MQPROC__WARN("%s (its entries are in %s already)", why, s->path);
  return MQPROC_OK;
}

int mqproc__mets_server_save(mqproc__mets_server_t *s, char *err) {
  return s->dirty ? mqproc__mets_server_save_now(s, err) : MQPROC_OK;
}

static void on_save_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__mets_server_t *s = ud;
  char err[MQPROC_ERR_LEN];
  s->save_timer = 0;
  if (mqproc__mets_server_save(s, err) != MQPROC_OK) /* (logged) again later */
    s->save_timer = mqproc__loop_timer(loop, s->save_ms, on_save_timer, s);
}

static void dirtied(mqproc__mets_server_t *s) {
  s->dirty++;
  if (s->save_timer == 0)
    s->save_timer = mqproc__loop_timer(s->loop, s->save_ms, on_save_timer, s);
}

int mqproc__mets_server_reload(mqproc__mets_server_t *s, char *err) {
  struct stat held, now;
  mqproc__mets_t *m;
  int rc;
  if (fstat(s->lock, &held) != 0 || lstat(s->path, &now) != 0)
    return mqproc__err(err, MQPROC_ESYS, "%.300s: %s", s->path, strerror(errno));
  if (held.st_dev != now.st_dev || held.st_ino != now.st_ino) { /* replaced: lock the new one */
    int fd = -1, r = mqproc__wslock(s->path, 0, &fd, err);
    if (r != 0)
      return r == 1 ? mqproc__err(err, MQPROC_ESTATE, "%.300s was replaced, and another holds it",
                                  s->path)
                    : MQPROC_ESYS;
    close(s->lock);
    s->lock = fd;
  }
  if ((rc = mqproc__mets_load_fd(s->lock, s->path, &m, err)) != MQPROC_OK)
    return rc;
  mqproc__mets_free(s->mets);
  s->mets = m;
  s->dirty = 0; /* what was unsaved is dropped, as OCR-D drops it: from the journal too */
  if ((rc = mqproc__mets_journal_reset(s->journal, s->lock, err)) != MQPROC_OK)
    MQPROC__WARN("%s", err);
  return MQPROC_OK;
}

/* ---- answers after the journal's sync -------------------------------------------------- */

static void reply_json_text(mqproc__http_req_t *req, int status, char *body) {
  mqproc__http_reply(req, status, "application/json", body, strlen(body));
}

/* Answers what waits for the journal: 200 once it is durable, else 500 for each. */
static int flush(mqproc__loop_t *loop, void *ud) {
  mqproc__mets_server_t *s = ud;
  char err[MQPROC_ERR_LEN];
  pending_t *p;
  int rc;
  (void)loop;
  if (s->pending == NULL)
    return -1;
  if ((rc = mqproc__mets_journal_sync(s->journal, err)) != MQPROC_OK && s->broken == NULL) {
    MQPROC__ERROR("%s: changes are refused from now on (the unsaved ones are saved on stop)", err);
    s->broken = mqproc__strdup(err);
  }
  while ((p = s->pending) != NULL) {
    s->pending = p->next;
    if (rc == MQPROC_OK) {
      reply_json_text(p->req, 200, p->body);
    } else {
      free(p->body);
      mqproc__http_reply_text(p->req, 500, "application/json",
                              "\"the METS server cannot make the change durable\"");
    }
    free(p);
  }
  s->pending_tail = &s->pending;
  return -1;
}

void mqproc__mets_server_changed(mqproc__mets_server_t *s, mqproc__http_req_t *req,
                                 const json_t *entry, char *body) {
  char err[MQPROC_ERR_LEN];
  pending_t *p = mqproc__calloc(1, sizeof(*p));
  dirtied(s);
  if (p == NULL || mqproc__mets_journal_append(s->journal, entry, err) != MQPROC_OK) {
    if (p != NULL) {
      MQPROC__ERROR("%s: changes are refused from now on", err);
      free(s->broken);
      s->broken = mqproc__strdup(err);
    }
    free(p);
    free(body);
    mqproc__http_reply_text(req, 500, "application/json",
                            "\"the METS server cannot make the change durable\"");
    return;
  }
  p->req = req;
  p->body = body;
  *s->pending_tail = p;
  s->pending_tail = &p->next;
}

/* ---- start ----------------------------------------------------------------------------- */

/* The METS's directory as given, absolute (cwd prepended), and resolved. */
static int dirs_of(mqproc__mets_server_t *s, char *err) {
  char *copy = mqproc__strdup(s->path), *d, cwd[PATH_MAX], real[PATH_MAX];
  int rc = MQPROC_OK;
  if (copy == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  d = dirname(copy);
  if (realpath(d, real) == NULL)
    rc = mqproc__err(err, MQPROC_ESYS, "the directory of %.300s: %s", s->path, strerror(errno));
  else if (d[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL)
    rc = mqproc__err(err, MQPROC_ESYS, "getcwd: %s", strerror(errno));
  else if ((s->dir = mqproc__strdup(real)) == NULL ||
           (s->given_dir = d[0] == '/' ? mqproc__strdup(d) : mqproc__asprintf("%s/%s", cwd, d)) ==
               NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  free(copy);
  return rc;
}

/* Replays the journal's entries onto the METS just loaded; saves when they changed it. */
static int replay(mqproc__mets_server_t *s, json_t *entries, int same, char *err) {
  json_t *e;
  size_t i, applied = 0;
  json_array_foreach(entries, i, e) {
    mqproc__mets_why_t why;
    char msg[MQPROC_ERR_LEN];
    if (mqproc__mets_server_apply(s, e, 1, !same, &why, msg) != MQPROC_OK)
      MQPROC__WARN("journal entry %zu not replayed: %s", i + 1, msg);
    else
      applied++;
  }
  if (json_array_size(entries) > 0)
    MQPROC__INFO("replayed %zu of %zu journal entries onto %s", applied, json_array_size(entries),
                 s->path);
  if (json_array_size(entries) > 0)
    return mqproc__mets_server_save_now(s, err);
  return mqproc__mets_journal_reset(s->journal, s->lock, err);
}

static int lock_and_load(mqproc__mets_server_t *s, char *err) {
  struct stat st;
  json_t *entries = NULL;
  int same = 0, r = mqproc__wslock(s->path, 0, &s->lock, err), rc;
  if (r == 1) {
    s->lock = -1;
    return mqproc__err(err, MQPROC_ESTATE,
                       "%.300s is held by another: a METS server of this workspace, or a "
                       "processor writing it",
                       s->path);
  }
  if (r != 0) {
    s->lock = -1;
    return MQPROC_ESYS;
  }
  if ((rc = mqproc__mets_load_fd(s->lock, s->path, &s->mets, err)) != MQPROC_OK)
    return rc;
  if (fstat(s->lock, &st) != 0)
    return mqproc__err(err, MQPROC_ESYS, "%.300s: %s", s->path, strerror(errno));
  if ((rc = mqproc__mets_journal_open(s->path, s->lock, st.st_mode & 0666, &s->journal, &entries,
                                      &same, err)) != MQPROC_OK)
    return rc;
  rc = replay(s, entries, same, err);
  json_decref(entries);
  return rc;
}

int mqproc__mets_server_start(mqproc__mets_server_t **out, mqproc__loop_t *loop,
                              const mqproc__mets_server_cfg_t *cfg, char *err) {
  mqproc__mets_server_t *s = mqproc__calloc(1, sizeof(*s));
  const char *ow = getenv("OCRD_EXISTING_OUTPUT");
  int rc;
  *out = NULL;
  if (s == NULL || (s->path = mqproc__strdup(cfg->mets)) == NULL) {
    free(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  s->lock = -1;
  s->loop = loop;
  s->last_request = mqproc__loop_now(loop);
  s->cfg = *cfg;
  s->cfg.mets = s->path;
  s->cfg.listen = NULL; /* (not kept) */
  s->save_ms = cfg->save_interval_ms > 0 ? cfg->save_interval_ms : MQPROC__METS_SERVER_SAVE_MS;
  s->overwrite = ow != NULL && !strcmp(ow, "OVERWRITE");
  s->pending_tail = &s->pending;
  if ((rc = dirs_of(s, err)) != MQPROC_OK || (rc = lock_and_load(s, err)) != MQPROC_OK ||
      (rc = mqproc__http_start(&s->http, loop, cfg->listen, NULL, mqproc__mets_server_handle, s,
                               err)) != MQPROC_OK) {
    mqproc__mets_server_free(s);
    return rc;
  }
  mqproc__http_set_body_max(s->http, MQPROC__METS_SERVER_BODY_MAX);
  mqproc__http_set_form_max(s->http, 32, 8192, MQPROC__METS_SERVER_BODY_MAX);
  mqproc__loop_before_poll(loop, &s->hook, flush, s);
  MQPROC__INFO("serving the METS %s of workspace %s on %s", s->path, s->dir, cfg->listen);
  *out = s;
  return MQPROC_OK;
}

int mqproc__mets_server_port(const mqproc__mets_server_t *s) {
  return mqproc__http_port(s->http);
}

int64_t mqproc__mets_server_last_request(const mqproc__mets_server_t *s) {
  return s->last_request;
}

const char *mqproc__mets_server_workspace(const mqproc__mets_server_t *s) {
  return s->dir;
}

void mqproc__mets_server_free(mqproc__mets_server_t *s) {
  if (s == NULL)
    return;
  if (s->http != NULL) {
    flush(s->loop, s); /* what waits for the journal: answered before the connections go */
    mqproc__loop_before_poll_stop(s->loop, &s->hook);
    mqproc__http_stop(s->http);
  }
  if (s->save_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->save_timer);
  /* nothing unsaved: the journal is not needed (removed while the lock is still held) */
  mqproc__mets_journal_close(s->journal, s->journal != NULL && !s->dirty &&
                                             !mqproc__mets_journal_unsynced(s->journal));
  mqproc__mets_free(s->mets);
  if (s->lock >= 0)
    close(s->lock);
  free(s->broken);
  free(s->path);
  free(s->dir);
  free(s->given_dir);
  free(s);
}
