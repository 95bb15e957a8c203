/* The dir:// backend's publishing (broker/dir_int.h): a message goes to the queue
 * directory its routing key names (SPOOL/KEY/new/), a dead letter to the job queue's
 * failed/ with its reason beside it. Durable (the default): the file is written into tmp/
 * on the loop and handed to the flusher (dir_flush.h), which makes it durable and renames
 * it into place off the loop; its confirm comes when the flusher reports it. Relaxed
 * (dir:///spool?synchronous=normal): written and renamed at once, no fdatasync and no
 * directory fsync (a crash of the server loses nothing, a power cut may), confirmed at the
 * next pump. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/dir_int.h"
#include "log.h"
#include "mqproc/mqproc.h"
#include "util.h"

void mqproc__dir_write_reason(const char *qdir, const char *name, const char *why) {
  char tmp[PATH_MAX], path[PATH_MAX];
  FILE *f;
  snprintf(tmp, sizeof(tmp), "%s/tmp/%s.reason", qdir, name);
  snprintf(path, sizeof(path), "%s/failed/%s.reason", qdir, name);
  if ((f = mqproc__fopen_new(tmp)) == NULL) { /* 0600/0660 (util.h) */
    MQPROC__WARN("dir queue: cannot write %s: %s", tmp, strerror(errno));
    return;
  }
  fprintf(f, "%s\n", why);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    MQPROC__WARN("dir queue: cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
  }
}

static const char *header(const mqproc__publish_t *p, const char *key) {
  for (size_t i = 0; i < p->n_headers; i++)
    if (!strcmp(p->headers[i].key, key))
      return p->headers[i].value;
  return NULL;
}

/* Room for one more confirm to report at the next pump. */
static int confirm_room(dirb_t *b, char *err) {
  if (b->n_confirms == b->cap_confirms) {
    size_t cap = b->cap_confirms ? 2 * b->cap_confirms : 64;
    confirm_t *c = realloc(b->confirms, cap * sizeof(*c));
    if (c == NULL)
      return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    b->confirms = c;
    b->cap_confirms = cap;
  }
  return MQPROC_OK;
}

int mqproc__dir_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                        char *err) {
  dirb_t *b = (dirb_t *)base;
  char qdir[MQPROC__DIRQ_QDIR_MAX], name[MQPROC__DIRQ_NAME_MAX], tmp[PATH_MAX], dst[PATH_MAX];
  char *headers = NULL;
  int dead = b->topo->dead_queue != NULL && !strcmp(p->routing_key, b->topo->dead_queue), rc, fd;
  mqproc__dirq_msg_t m = {.body = p->body,
                          .len = p->len,
                          .content_type = p->content_type,
                          .message_id = p->message_id,
                          .priority = p->priority};
  if (b->ino < 0)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "the dir queue is not open");
  if (p->routing_key[0] == '\0' || p->routing_key[0] == '.' || strchr(p->routing_key, '/'))
    return mqproc__err(err, MQPROC_EINVAL, "'%s' cannot name a queue directory", p->routing_key);
  if ((rc = confirm_room(b, err)) != MQPROC_OK)
    return rc;
  if (p->n_headers > 0) {
    json_t *o = json_object();
    for (size_t i = 0; i < p->n_headers; i++)
      json_object_set_new(o, p->headers[i].key, json_string(p->headers[i].value));
    headers = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    m.headers_json = headers;
  }
  snprintf(qdir, sizeof(qdir), "%s/%s", b->spool, dead ? b->topo->queue : p->routing_key);
  rc = mqproc__dirq_write(qdir, dead ? "failed" : "new", &m, name, tmp, dst, &fd, err);
  free(headers);
  if (rc != MQPROC_OK && rc != MQPROC_EBROKER_UNROUTABLE)
    return rc;
  *seq = ++b->next_seq;
  if (rc == MQPROC_OK && dead) { /* the reason first, whole, as for a rejected job */
    const char *why = header(p, "x-mqproc-reason");
    mqproc__dir_write_reason(qdir, name, why != NULL ? why : "dead-lettered");
  }
  if (rc == MQPROC_OK && b->durable) /* confirmed when the flusher reports it */
    return mqproc__dirq_flusher_add(b->flusher, *seq, fd, tmp, dst, err);
  if (rc == MQPROC_OK && mqproc__dirq_place(fd, 0, tmp, dst, err) != MQPROC_OK)
    rc = MQPROC_EBROKER_NACKED;
  b->confirms[b->n_confirms++] =
      (confirm_t){*seq, rc == MQPROC_EBROKER_UNROUTABLE && !p->mandatory ? MQPROC_OK : rc};
  return MQPROC_OK;
}

static void flushed(void *ud, uint64_t seq, int rc) {
  dirb_t *b = ud;
  b->ev.on_confirm(b->ev.ud, seq, rc == MQPROC_OK ? MQPROC_OK : MQPROC_EBROKER_NACKED);
}

static void flushed_closing(void *ud, uint64_t seq, int rc) {
  dirb_t *b = ud;
  (void)rc;
  b->ev.on_confirm(b->ev.ud, seq, MQPROC_EBROKER_CLOSED);
}

void mqproc__dir_confirms(dirb_t *b, int closing) {
  if (b->flusher != NULL) {
    if (closing)
      mqproc__dirq_flusher_drain(b->flusher);
    mqproc__dirq_flusher_take(b->flusher, closing ? flushed_closing : flushed, b);
  }
  /* a callback may publish again: those wait for the next pump, in a list of their own */
  while (b->n_confirms > 0) {
    size_t n = b->n_confirms;
    confirm_t *list = b->confirms;
    b->confirms = NULL;
    b->n_confirms = b->cap_confirms = 0;
    for (size_t i = 0; i < n; i++)
      b->ev.on_confirm(b->ev.ud, list[i].seq, closing ? MQPROC_EBROKER_CLOSED : list[i].status);
    free(list);
    if (!closing)
      break;
  }
}
