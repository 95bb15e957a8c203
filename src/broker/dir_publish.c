/* The dir:// backend's publishing (broker/dir_int.h): a message goes to the queue
 * directory its routing key names (SPOOL/KEY/new/), a dead letter to the job queue's
 * failed/ with its reason beside it. Durable (the default): the file is written into tmp/
 * on the loop and handed to the flusher (dir_flush.h), which makes it durable and renames
 * it into place off the loop; its confirm comes when the flusher reports it. Relaxed
 * (dir:///spool?synchronous=normal): written and renamed at once, no fdatasync and no
 * directory fsync (a crash of the server loses nothing, a power cut may), confirmed at the
 * next pump. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/dir_int.h"
#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

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

const mqproc__dirq_q_t *mqproc__dir_queue(dirb_t *b, const char *name, int create, int *rc,
                                          char *err) {
  rqueue_t *r;
  if (strcmp(name, b->topo->queue) == 0 && b->q.fd >= 0)
    return &b->q;
  for (int i = 0; i < b->n_rqueues; i++)
    if (strcmp(b->rqueues[i].name, name) == 0)
      return &b->rqueues[i].q;
  if (b->rqueues == NULL && (b->rqueues = calloc(DIRB_RQUEUES, sizeof(*b->rqueues))) == NULL) {
    *rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return NULL;
  }
  if (b->n_rqueues == DIRB_RQUEUES) /* many queues named: start over (none is in use then) */
    mqproc__dir_close_queues(b);
  r = &b->rqueues[b->n_rqueues];
  if ((*rc = mqproc__dirq_open(b->spool, name, create, &r->q, err)) != MQPROC_OK)
    return NULL;
  snprintf(r->name, sizeof(r->name), "%s", name);
  b->n_rqueues++;
  return &r->q;
}

void mqproc__dir_close_queues(dirb_t *b) {
  if (b->n_rqueues == 0)
    return;
  if (b->flusher != NULL) /* files handed over may still be renamed into them */
    mqproc__dirq_flusher_drain(b->flusher);
  for (int i = 0; i < b->n_rqueues; i++)
    mqproc__dirq_close(&b->rqueues[i].q);
  b->n_rqueues = 0;
}

/* Forgets a result queue whose directory went away (removed by an operator): the next
 * publish opens it again, or finds it gone. */
static void forget_queue(dirb_t *b, const mqproc__dirq_q_t *q) {
  for (int i = 0; i < b->n_rqueues; i++)
    if (&b->rqueues[i].q == q) {
      if (b->flusher != NULL)
        mqproc__dirq_flusher_drain(b->flusher);
      mqproc__dirq_close(&b->rqueues[i].q);
      b->rqueues[i] = b->rqueues[--b->n_rqueues];
      return;
    }
}

int mqproc__dir_publish(mqproc__broker_t *base, const mqproc__publish_t *p, uint64_t *seq,
                        char *err) {
  dirb_t *b = (dirb_t *)base;
  char name[MQPROC__DIRQ_NAME_MAX];
  char *headers = NULL;
  const mqproc__dirq_q_t *q;
  /* a dead letter is one the server says it is, never one a message's queue name makes */
  int dead = p->dead_letter, rc, fd = -1;
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
  q = dead ? &b->q : mqproc__dir_queue(b, p->routing_key, 0, &rc, err);
  if (q != NULL && (rc = mqproc__dirq_write(q, &m, name, &fd, err)) == MQPROC_EBROKER_UNROUTABLE &&
      q != &b->q) { /* removed since it was opened: once more, as it is now */
    forget_queue(b, q);
    if ((q = mqproc__dir_queue(b, p->routing_key, 0, &rc, err)) != NULL)
      rc = mqproc__dirq_write(q, &m, name, &fd, err);
  }
  free(headers);
  if (rc != MQPROC_OK && rc != MQPROC_EBROKER_UNROUTABLE)
    return rc;
  *seq = ++b->next_seq;
  if (rc == MQPROC_OK && dead) { /* the reason first, whole, as for a rejected job */
    const char *why = header(p, "x-mqproc-reason");
    mqproc__dirq_write_reason(q, name, why != NULL ? why : "dead-lettered");
  }
  if (rc == MQPROC_OK && b->durable) /* confirmed when the flusher reports it */
    return mqproc__dirq_flusher_add(b->flusher, *seq, fd, q->sub[MQPROC__DIRQ_TMP],
                                    q->sub[dead ? MQPROC__DIRQ_FAILED : MQPROC__DIRQ_NEW], name,
                                    err);
  if (rc == MQPROC_OK && mqproc__dirq_place(fd, 0, q->sub[MQPROC__DIRQ_TMP],
                                            q->sub[dead ? MQPROC__DIRQ_FAILED : MQPROC__DIRQ_NEW],
                                            name, err) != MQPROC_OK)
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
