/* The dir:// broker backend (broker.h) on the directory queue of dirq.h: the job queue is
 * SPOOL/PROCESSOR; results go to the sibling queue their routing key names, dead letters
 * into the job queue's failed/ with the reason beside them.
 *
 * Waiting: an inotify watch on new/ (IN_MOVED_TO, IN_CREATE; a full read of new/ after
 * IN_Q_OVERFLOW) feeds a heap of the ready names, so a claim costs the same however long
 * the queue is. A look (a timerfd in the fd the loop watches) reads new/ again when the
 * heap is empty and looks at every file of cur/ for dead holders: every 0.9 s on a network
 * filesystem (inotify reports no other host's files), every 30 s elsewhere, where it is a
 * backstop only: nothing wakes an idle server but work.
 *
 * Claiming: open new/NAME (for reading; for writing on a network filesystem, where an
 * exclusive flock needs it), flock(LOCK_EX|LOCK_NB), rename to cur/NAME: two servers cannot
 * both win (the loser's lock or rename fails). The lock stays until the delivery is
 * settled; the kernel drops it when the server dies. The holder keeps a second descriptor
 * open for writing: its last close is an IN_CLOSE_WRITE on cur/, which every server on the
 * host watches (not on a network filesystem): the file still there and its lock free means
 * its holder died, and it goes back to new/ at once (marked ".r", delivered before). A
 * settled file left cur/ before its close, and losers and lookers read (IN_CLOSE_NOWRITE:
 * not watched). The
 * job table, not the queue, says whether the job already ran (the delivery's claim there
 * is fenced by its attempt), so a claim and an ack need no fsync: a power cut that undoes
 * one redelivers a job the table knows. What a producer was told is durable is: a publish
 * is confirmed only once its file and directory entry are fsynced (one directory fsync
 * for all publishes of a pump).
 *
 * Settling: ack = unlink cur/NAME; nack with requeue = a new name at the end of new/
 * (SERIF's rule: a failed job goes to the end of the queue); nack without = failed/. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "broker/dir_int.h"
#include "base/log.h"
#include "mqproc/mqproc.h"
#include "base/util.h"

#define MAX_FILE (256 << 20) /* a job file beyond this goes to failed/ */

/* ---- the heap of ready names -------------------------------------------------------- */

static void heap_push(dirb_t *b, const char *name) {
  size_t i;
  if (b->n >= b->heap_max) { /* bounded: a flood of names (many gone by now) costs no more */
    if (!b->truncated)
      MQPROC__INFO("dir queue %s: more than %zu ready names: the others are read from new/ "
                   "once these are claimed",
                   b->qdir, b->heap_max);
    b->truncated = 1;
    return;
  }
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    char **h = realloc(b->heap, cap * sizeof(*h));
    if (h == NULL)
      return; /* found again by the next read of new/ */
    b->heap = h;
    b->cap = cap;
  }
  if ((b->heap[b->n] = strdup(name)) == NULL)
    return;
  for (i = b->n++; i > 0 && strcmp(b->heap[(i - 1) / 2], b->heap[i]) > 0; i = (i - 1) / 2) {
    char *t = b->heap[i];
    b->heap[i] = b->heap[(i - 1) / 2];
    b->heap[(i - 1) / 2] = t;
  }
}

static char *heap_pop(dirb_t *b) {
  char *top;
  size_t i = 0;
  if (b->n == 0)
    return NULL;
  top = b->heap[0];
  b->heap[0] = b->heap[--b->n];
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < b->n && strcmp(b->heap[l], b->heap[m]) < 0)
      m = l;
    if (r < b->n && strcmp(b->heap[r], b->heap[m]) < 0)
      m = r;
    if (m == i)
      break;
    char *t = b->heap[i];
    b->heap[i] = b->heap[m];
    b->heap[m] = t;
    i = m;
  }
  return top;
}

static void heap_clear(dirb_t *b) {
  while (b->n > 0)
    free(b->heap[--b->n]);
}

/* Every ready name of new/ (after an overflow, at connect, and as the poll of NFS); beyond
 * DIRB_HEAP_MAX names, those read first (and read again once these are claimed). */
static void read_new(dirb_t *b) {
  int fd = openat(b->q.sub[MQPROC__DIRQ_NEW], ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d;
  struct dirent *e;
  if (fd < 0 || (d = fdopendir(fd)) == NULL) {
    if (fd >= 0)
      close(fd);
    return;
  }
  heap_clear(b);
  b->truncated = 0;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.')
      heap_push(b, e->d_name);
  closedir(d);
}

/* ---- deliveries --------------------------------------------------------------------- */

/* The file's size bytes (as fstat said after the open: what it held then). */
static int read_file(int fd, off_t size, char **out, size_t *len) {
  char *buf;
  size_t got = 0;
  if (size < 0 || size > MAX_FILE)
    return -1;
  if ((buf = malloc((size_t)size + 1)) == NULL)
    return -1;
  while (got < (size_t)size) {
    ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  buf[got] = '\0';
  *out = buf;
  *len = got;
  return 0;
}

/* An entry of new/ that is no job file (a FIFO, a directory, a link, ...): to failed/
 * with the reason, never opened for reading; once (a peer that lost the race finds it
 * gone). */
static void not_a_file(dirb_t *b, const char *name, const char *what) {
  char why[160];
  snprintf(why, sizeof(why),
           "%s, not a regular file: never opened (write job files into tmp/, "
           "then rename them into new/)",
           what);
  if (mqproc__dirq_to_failed(&b->q, MQPROC__DIRQ_NEW, name, why) == 1)
    MQPROC__WARN("dir queue %s: new/%s is %s: moved to failed/ unread", b->qdir, name, what);
}

/* Claims the next ready job and hands it over; 0 when there was none. */
static int deliver_one(dirb_t *b) {
  char *name, *data = NULL, *headers = NULL, why[200];
  const char *what;
  mqproc__dirq_msg_t m;
  mqproc__broker_msg_t msg;
  struct stat st;
  json_t *meta = NULL;
  held_t *h;
  size_t len = 0;
  int fd, wfd, newd = b->q.sub[MQPROC__DIRQ_NEW], curd = b->q.sub[MQPROC__DIRQ_CUR];
  if (b->n == 0 && b->truncated)
    read_new(b); /* names were left out: the next of them */
  while ((name = heap_pop(b)) != NULL) {
    /* for reading (a loser's close is no IN_CLOSE_WRITE for the others), but for writing
     * where the filesystem's exclusive locks need it; a FIFO never blocks, a link is never
     * followed, anything but a regular file goes to failed/ unread */
    fd = mqproc__dirq_open_entry(newd, name, DIRB_LOCK_OPEN(b), &st, &what);
    if (fd == -2) {
      not_a_file(b, name, what);
      free(name);
      continue;
    }
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && renameat(newd, name, curd, name) == 0)
      break; /* ours */
    if (errno != ENOENT)
      b->reread = 1; /* locked (a peer claims it, or one that put it back still holds it), or
                        not tried (out of fds): read new/ again at the next look */
    if (fd >= 0)
      close(fd);
    free(name); /* another server's, or gone */
  }
  if (name == NULL)
    return 0;
  if (b->topo->max_message_bytes > 0 && st.st_size > (off_t)b->topo->max_message_bytes) {
    /* never read: the whole file moves to failed/ by a rename */
    snprintf(why, sizeof(why),
             "job file of %lld bytes exceeds the limit of %zu bytes (--max-message-size): "
             "moved here unread",
             (long long)st.st_size, b->topo->max_message_bytes);
    MQPROC__WARN("dir queue %s: %s: %s", b->qdir, name, why);
    mqproc__dirq_to_failed(&b->q, MQPROC__DIRQ_CUR, name, why);
    close(fd);
    free(name);
    return 1;
  }
  /* a writer on it: its last close (our death) is what the others watch for; a file we may
   * not write is held all the same, its holder's death found by the look */
  wfd = b->wcur >= 0 ? openat(curd, name, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
  if (wfd < 0 && b->wcur >= 0 && !b->warned) {
    b->warned = 1;
    MQPROC__WARN("dir queue %s: cannot open a claimed job for writing (%s): if this server "
                 "dies, its jobs come back with the next look (every %d s), not at once",
                 b->qdir, strerror(errno), b->look_every_ms / 1000);
  }
  if (read_file(fd, st.st_size, &data, &len) != 0 || (h = calloc(1, sizeof(*h))) == NULL) {
    mqproc__dirq_to_failed(&b->q, MQPROC__DIRQ_CUR, name,
                           "cannot read the job file (or it is larger than 256 MiB)");
    close(fd);
    if (wfd >= 0)
      close(wfd);
    free(data);
    free(name);
    return 1;
  }
  h->tag = ++b->next_tag;
  h->consumer = b->consumer;
  h->fd = fd;
  h->wfd = wfd;
  snprintf(h->name, sizeof(h->name), "%s", name);
  h->next = b->held;
  b->held = h;
  b->n_held++;
  mqproc__dirq_parse(data, len, &m, &meta);
  if (json_is_object(json_object_get(meta, "headers")))
    headers = json_dumps(json_object_get(meta, "headers"), JSON_COMPACT);
  msg = (mqproc__broker_msg_t){.epoch = b->epoch,
                               .tag = h->tag,
                               .consumer = b->consumer,
                               .redelivered =
                                   strlen(name) > 2 && strcmp(name + strlen(name) - 2, ".r") == 0,
                               .body = m.body,
                               .len = m.len,
                               .content_type = m.content_type != NULL ? m.content_type : "",
                               .message_id = m.message_id != NULL ? m.message_id : "",
                               .routing_key = b->topo->queue,
                               .headers_json = headers,
                               .priority = mqproc__dirq_name_priority(name),
                               .delivery_count = -1};
  b->ev.on_message(b->ev.ud, &msg);
  free(headers);
  json_decref(meta);
  free(data);
  free(name);
  return 1;
}

static held_t **find_held(dirb_t *b, uint64_t tag) {
  for (held_t **p = &b->held; *p != NULL; p = &(*p)->next)
    if ((*p)->tag == tag)
      return p;
  return NULL;
}

/* Takes *p off the list; its descriptors and h are the caller's. */
static held_t *take_held(dirb_t *b, held_t **p) {
  held_t *h = *p;
  *p = h->next;
  b->n_held--;
  return h;
}

/* Lets a held file go where it is (its descriptors closed, the lock first). */
static void drop_held(dirb_t *b, held_t **p) {
  held_t *h = take_held(b, p);
  mqproc__dirq_remove(-1, NULL, h->fd, h->wfd);
  free(h);
}

/* ---- the class ---------------------------------------------------------------------- */

static int d_fd(mqproc__broker_t *base) {
  return ((dirb_t *)base)->epfd;
}

/* Deliveries of the current consumer not settled: its prefetch counts these only (the
 * server counts an older consumer's itself, as for AMQP's per-consumer basic.qos). */
static int held_now(const dirb_t *b) {
  int n = 0;
  for (const held_t *h = b->held; h != NULL; h = h->next)
    n += h->consumer == b->consumer;
  return n;
}

static int d_pending(mqproc__broker_t *base) {
  dirb_t *b = (dirb_t *)base;
  return b->ino >= 0 &&
         (b->n_confirms > 0 || (b->consuming && b->n > 0 && held_now(b) < b->prefetch));
}

static int d_pump(mqproc__broker_t *base, char *err) {
  dirb_t *b = (dirb_t *)base;
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  int64_t now = mqproc__now_ms();
  ssize_t r;
  int overflow = 0;
  uint64_t fired;
  (void)err;
  if (b->ino < 0)
    return MQPROC_OK;
  if (b->armed_ms != 0 && now >= b->armed_ms) { /* the timerfd is readable: clear it */
    if (read(b->tfd, &fired, sizeof(fired)) < 0 && errno != EAGAIN)
      MQPROC__DEBUG("dir queue: timerfd: %s", strerror(errno));
    b->armed_ms = 0;
  }
  while ((r = read(b->ino, buf, sizeof(buf))) > 0) {
    for (char *p = buf; p < buf + r;) {
      const struct inotify_event *e = (const struct inotify_event *)p;
      if (e->mask & IN_Q_OVERFLOW)
        overflow = 1; /* events were lost: read all of new/, look at all of cur/ */
      else if (e->len == 0 || e->name[0] == '.')
        ;
      else if (b->wcur >= 0 && e->wd == b->wcur)
        mqproc__dir_closed_in_cur(b, e->name, 0, now);
      else
        heap_push(b, e->name);
      p += sizeof(*e) + e->len;
    }
  }
  mqproc__dir_run_rechecks(b, now);
  if (now - b->purged_ms >= PURGE_EVERY_MS) {
    b->purged_ms = now;
    mqproc__dir_purge_tmp(b);
  }
  if (now >= mqproc__dir_look_due(b) || overflow) {
    b->looked_ms = now;
    mqproc__dir_check_tree(b);
    mqproc__dir_take_back(b);
    overflow |= b->n == 0 || b->reread; /* what inotify cannot see: other hosts' files on
                                           NFS; names passed over while locked */
    b->reread = 0;
  }
  if (overflow || (b->truncated && b->n == 0))
    read_new(b);
  while (b->consuming && b->ino >= 0 && held_now(b) < b->prefetch && deliver_one(b))
    ;
  mqproc__dir_confirms(b, 0); /* the flusher's finished files, and the others due */
  mqproc__dir_arm(b, now);
  return MQPROC_OK;
}

/* An inotify watch of an open directory: through its descriptor (/proc/self/fd), so the
 * watch is on the directory the server uses, not on whatever its path names by now. */
static int watch_dir(int ino, int dirfd, uint32_t mask) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", dirfd);
  return inotify_add_watch(ino, path, mask | IN_ONLYDIR);
}

static int d_connect(mqproc__broker_t *base, char *err) {
  dirb_t *b = (dirb_t *)base;
  const char *net, *every = getenv("MQPROC_DIR_LOOK_MS"),
                   *abandoned = getenv("MQPROC_DIR_TMP_ABANDONED_MS"),
                   *heap_max = getenv("MQPROC_DIR_HEAP_MAX");
  int rc, looked;
  mqproc__dirq_close(&b->q); /* (open only while connected) */
  if ((rc = mqproc__dirq_open(b->spool, b->topo->queue, 1, &b->q, err)) != MQPROC_OK)
    return rc == MQPROC_EINVAL ? MQPROC_ECONFIG : rc;
  b->qdir = b->q.path;
  mqproc__dirq_mark_served(&b->q); /* submit's check that the queue has a server */
  if ((b->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
    rc = errno;
    mqproc__dirq_close(&b->q);
    return mqproc__err(err, MQPROC_ESYS, "inotify: %s", strerror(rc));
  }
  /* inotify sees this host's files only: on a network filesystem, look often; there the
   * look finds dead holders (an exclusive lock needs a writer, whose probe's close would
   * be an IN_CLOSE_WRITE for the others: no watch of cur/) */
  net = mqproc__network_fs(b->qdir, &looked);
  b->wcur = -1;
  if (watch_dir(b->ino, b->q.sub[MQPROC__DIRQ_NEW], IN_MOVED_TO | IN_CREATE) < 0 ||
      (net == NULL &&
       (b->wcur = watch_dir(b->ino, b->q.sub[MQPROC__DIRQ_CUR], IN_CLOSE_WRITE)) < 0) ||
      (b->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) < 0 ||
      (b->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
      epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->ino, &(struct epoll_event){.events = EPOLLIN}) != 0 ||
      epoll_ctl(b->epfd, EPOLL_CTL_ADD, b->tfd, &(struct epoll_event){.events = EPOLLIN}) != 0 ||
      (b->flusher != NULL && epoll_ctl(b->epfd, EPOLL_CTL_ADD, mqproc__dirq_flusher_fd(b->flusher),
                                       &(struct epoll_event){.events = EPOLLIN}) != 0)) {
    rc = errno;
    close(b->ino);
    if (b->tfd >= 0)
      close(b->tfd);
    if (b->epfd >= 0)
      close(b->epfd);
    b->ino = b->epfd = b->tfd = -1;
    mqproc__err(err, MQPROC_ESYS, "inotify on %s: %s", b->qdir, strerror(rc));
    mqproc__dirq_close(&b->q);
    return MQPROC_ESYS;
  }
  b->look_every_ms = net != NULL ? LOOK_NET_MS : LOOK_LOCAL_MS;
  if (every != NULL && atoi(every) > 0)
    b->look_every_ms = atoi(every);
  b->abandoned_ms = abandoned != NULL && atoll(abandoned) > 0 ? atoll(abandoned) : TMP_ABANDONED_MS;
  b->heap_max = heap_max != NULL && atol(heap_max) > 0 ? (size_t)atol(heap_max) : DIRB_HEAP_MAX;
  if (net != NULL)
    MQPROC__INFO("dir queue %s is on %s: looking for other hosts' jobs and dead holders every "
                 "%d ms",
                 b->qdir, net, b->look_every_ms);
  b->armed_ms = 0;
  b->n_rechecks = 0;
  b->replaced = 0;
  b->epoch++;
  b->looked_ms = 0;
  b->purged_ms = mqproc__now_ms();
  mqproc__dir_purge_tmp(b);
  mqproc__dir_take_back(b);
  read_new(b);
  b->looked_ms = mqproc__now_ms();
  mqproc__dir_arm(b, b->looked_ms);
  return MQPROC_OK;
}

static int d_ack(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int multiple, char *err) {
  dirb_t *b = (dirb_t *)base;
  int curd = b->q.sub[MQPROC__DIRQ_CUR];
  if (b->ino < 0 || epoch != b->epoch)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "the delivery is of a closed connection");
  for (held_t **p = &b->held; *p != NULL;) {
    if ((*p)->tag == tag || (multiple && (*p)->tag < tag)) {
      held_t *h = take_held(b, p);
      if (b->flusher != NULL) /* the unlink and the inode's release off the loop */
        mqproc__dirq_flusher_remove(b->flusher, curd, h->name, h->fd, h->wfd);
      else
        mqproc__dirq_remove(curd, h->name, h->fd, h->wfd);
      free(h);
    } else {
      p = &(*p)->next;
    }
  }
  return MQPROC_OK;
}

static int d_nack(mqproc__broker_t *base, uint64_t epoch, uint64_t tag, int requeue, char *err) {
  dirb_t *b = (dirb_t *)base;
  held_t **p = find_held(b, tag);
  char name[MQPROC__DIRQ_NAME_MAX];
  if (b->ino < 0 || epoch != b->epoch || p == NULL)
    return mqproc__err(err, MQPROC_EBROKER_CLOSED, "the delivery is of a closed connection");
  if (!requeue) {
    mqproc__dirq_to_failed(&b->q, MQPROC__DIRQ_CUR, (*p)->name,
                           "rejected by the server (nack without requeue)");
  } else { /* to the end of the queue, under a new name of the same priority */
    mqproc__dirq_name(mqproc__dirq_name_priority((*p)->name), 1, name, sizeof(name));
    if (renameat(b->q.sub[MQPROC__DIRQ_CUR], (*p)->name, b->q.sub[MQPROC__DIRQ_NEW], name) != 0)
      MQPROC__WARN("dir queue %s: cannot requeue cur/%s: %s", b->qdir, (*p)->name, strerror(errno));
  }
  drop_held(b, p);
  return MQPROC_OK;
}

static int d_declare_queue(mqproc__broker_t *base, const char *queue, char *err) {
  int rc;
  return mqproc__dir_queue((dirb_t *)base, queue, 1, &rc, err) != NULL ? MQPROC_OK : rc;
}

static int d_cancel(mqproc__broker_t *base, char *err) {
  (void)err;
  ((dirb_t *)base)->consuming = 0;
  return MQPROC_OK;
}

static int d_consume(mqproc__broker_t *base, int prefetch, uint64_t *consumer, char *err) {
  dirb_t *b = (dirb_t *)base;
  (void)err;
  b->consuming = 1;
  b->prefetch = prefetch > 0 ? prefetch : 1;
  *consumer = ++b->consumer;
  return MQPROC_OK;
}

static int d_resize(mqproc__broker_t *base, int prefetch, char *err) {
  (void)err;
  ((dirb_t *)base)->prefetch = prefetch > 0 ? prefetch : 1; /* the next pump claims more */
  return MQPROC_OK;
}

static uint64_t d_epoch(mqproc__broker_t *base) {
  return ((dirb_t *)base)->epoch;
}

static void d_disconnect(mqproc__broker_t *base) {
  dirb_t *b = (dirb_t *)base;
  if (b->ino < 0)
    return;
  if (b->ev.on_closing != NULL)
    b->ev.on_closing(b->ev.ud, b->epfd);
  close(b->ino);
  close(b->tfd);
  close(b->epfd);
  b->ino = b->epfd = b->tfd = -1;
  while (b->held != NULL) /* their files stay in cur/: whoever looks next takes them back */
    drop_held(b, &b->held);
  mqproc__dir_confirms(b, 1); /* the flusher is drained: nothing uses the directories now */
  mqproc__dir_close_queues(b);
  mqproc__dirq_close(&b->q);
  b->qdir = b->spool;
  heap_clear(b);
  b->truncated = 0;
  b->consuming = 0;
}

static void d_destroy(mqproc__broker_t *base) {
  dirb_t *b = (dirb_t *)base;
  d_disconnect(base);
  free(b->heap);
  free(b->rqueues);
  mqproc__dirq_flusher_free(b->flusher);
  free(b->confirms);
  free(b);
}

static const struct mqproc__broker_class DIR_CLASS = {
    .name = "dir",
    .claim_ahead = 1,
    .declare_needs_pattern = 1,
    .dead_in_failed = 1,
    .empty_hint = "a job file is written in the queue's tmp/ and then renamed into new/, so "
                  "that no server sees it before it is whole (docs/dir-queue.md)",
    .connect = d_connect,
    .fd = d_fd,
    .pending = d_pending,
    .pump = d_pump,
    .ack = d_ack,
    .nack = d_nack,
    .publish = mqproc__dir_publish,
    .declare_queue = d_declare_queue,
    .cancel = d_cancel,
    .consume = d_consume,
    .resize = d_resize,
    .epoch = d_epoch,
    .disconnect = d_disconnect,
    .destroy = d_destroy,
};

int mqproc__broker_dir_new(mqproc__broker_t **out, const char *url, const mqproc__topology_t *topo,
                           const mqproc__broker_events_t *ev, char *err) {
  dirb_t *b;
  int rc;
  *out = NULL;
  if (topo->quorum)
    return mqproc__err(err, MQPROC_ECONFIG, "--queue-type=quorum is for RabbitMQ, not dir://");
  if ((b = calloc(1, sizeof(*b))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((rc = mqproc__dirq_spool(url, b->spool, &b->durable, err)) != MQPROC_OK ||
      (b->durable && (rc = mqproc__dirq_flusher_new(&b->flusher, 1, err)) != MQPROC_OK)) {
    free(b);
    return rc;
  }
  b->base.klass = &DIR_CLASS;
  b->topo = topo;
  b->ev = *ev;
  b->ino = b->epfd = b->tfd = -1;
  mqproc__dirq_init(&b->q);
  b->qdir = b->spool;
  *out = &b->base;
  return MQPROC_OK;
}
