/* The server's side of the spawn helper (see spawn/spawner.h; the helper itself and the
 * protocol: spawn/helper.h). Nothing here blocks the loop: requests are sent without
 * waiting (what the socket has no room for waits in a queue, sent when it drains) and the
 * helper's events are read when they come.
 */
#include "runner/spawn/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "runner/spawn/helper.h"

extern char **environ;

#define STOP_GRACE_MS 2000    /* a helper told to stop has killed its tries by then */
#define PING_EVERY_MS 2000    /* while tries run, the helper is asked to answer a PING */
#define PING_TIMEOUT_MS 10000 /* one that has not answered by then is hung */

typedef struct pending {
  uint64_t id;
  pid_t pid;    /* the processor, once the helper said it runs */
  int answered; /* the helper said it runs, or that it ended */
  mqproc__spawner_end_cb cb;
  void *ud;
  struct pending *next;
} pending_t;

/* A request the socket had no room for: its bytes and its own copies of its fds. */
typedef struct queued {
  char *msg;
  size_t len;
  int fds[MQPROC__HELPER_FDS], nfds;
  struct queued *next;
} queued_t;

struct mqproc__spawner {
  mqproc__loop_t *loop;
  pid_t pid; /* the helper; 0 once it is gone */
  int req_fd, ev_fd;
  uint64_t last_id;
  pending_t *runs;    /* tries that have not ended */
  pending_t *orphans; /* tries whose helper died: ended on the next loop turn */
  uint64_t orphan_timer, ping_timer;
  uint64_t ping_seq, ping_out; /* the last PING's id; ping_out: the one unanswered, or 0 */
  int64_t ping_sent_ms;
  queued_t *queue, **queue_end; /* requests waiting for room on req_fd, in order */
  char event[MQPROC__HELPER_EVENT_MAX];
};

/* ---- the helper's life ------------------------------------------------------------------ */

static void on_event(mqproc__loop_t *loop, int fd, void *ud);
static void on_helper_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud);

static void queued_free(queued_t *q) {
  for (int i = 0; i < q->nfds; i++)
    close(q->fds[i]);
  free(q->msg);
  free(q);
}

static void drop_queue(mqproc__spawner_t *s) {
  while (s->queue != NULL) {
    queued_t *q = s->queue;
    s->queue = q->next;
    queued_free(q);
  }
  s->queue_end = &s->queue;
}

/* Kills the helper unless the loop reaped it already and drops its sockets. */
static void helper_stop(mqproc__spawner_t *s) {
  if (s->pid > 0) {
    kill(s->pid, SIGKILL);
    mqproc__loop_child_forget(s->loop, s->pid);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
  }
  if (s->ev_fd >= 0) {
    mqproc__loop_io(s->loop, s->ev_fd, NULL, NULL);
    close(s->ev_fd);
  }
  if (s->req_fd >= 0) {
    if (s->queue != NULL)
      mqproc__loop_io(s->loop, s->req_fd, NULL, NULL);
    close(s->req_fd);
  }
  s->req_fd = s->ev_fd = -1;
  drop_queue(s);
}

/* The groups of the tries the helper said run, once it is gone: its processors died with
 * it (their parent-death signal), not what they started. A group keeps its id while a
 * member lives. */
static void kill_groups(const pending_t *r) {
  for (; r != NULL; r = r->next)
    if (r->pid > 0) {
      kill(-r->pid, SIGKILL);
      kill(r->pid, SIGKILL);
    }
}

static void end_orphans(mqproc__loop_t *loop, void *ud) {
  mqproc__spawner_t *s = ud;
  (void)loop;
  s->orphan_timer = 0;
  while (s->orphans != NULL) {
    pending_t *r = s->orphans;
    mqproc__spawn_end_t end;
    memset(&end, 0, sizeof(end));
    if (r->answered) {
      end.wstatus = SIGKILL; /* a wait status: killed by SIGKILL */
    } else {                 /* never started, as far as the server knows */
      end.step_failed = 1;
      end.step = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    }
    s->orphans = r->next;
    r->cb(r->ud, &end);
    free(r);
  }
}

/* Every pending try ends, on the next loop turn (this may run inside a spawn or a kill):
 * those the helper said run as killed (their groups are killed here), the others as not
 * started. */
static void helper_gone(mqproc__spawner_t *s, const char *why) {
  pending_t *runs = s->runs;
  if (s->pid > 0)
    MQPROC__ERROR("spawn helper (pid %d) %s; %s", (int)s->pid, why,
                  runs != NULL ? "its running tries were killed"
                               : "a new one starts on the next try");
  helper_stop(s);
  kill_groups(runs);
  s->runs = NULL;
  if (s->ping_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->ping_timer);
  s->ping_timer = 0;
  s->ping_out = 0;
  while (runs != NULL) {
    pending_t *r = runs;
    runs = r->next;
    r->next = s->orphans;
    s->orphans = r;
  }
  if (s->orphans != NULL && s->orphan_timer == 0)
    s->orphan_timer = mqproc__loop_timer(s->loop, 0, end_orphans, s);
}

static int helper_start(mqproc__spawner_t *s, char *err) {
  int req[2], ev[2], image;
  pid_t server = getpid(), pid;
  char args[3][16], *argv[5];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, req) < 0)
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: socketpair: %s", strerror(errno));
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ev) < 0) {
    close(req[0]);
    close(req[1]);
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: socketpair: %s", strerror(errno));
  }
  /* everything the child needs is made before fork (the server has threads), first the
   * helper's static program (a helper starts once per server, again only if one dies) */
  image = mqproc__runner_exec_memfd("mqproc-spawn-helper", mqproc__helper_image,
                                    (size_t)(mqproc__helper_image_end - mqproc__helper_image), err);
  if (image < 0)
    MQPROC__INFO("spawn helper: %s: it runs in a fork of the server instead", err);
  snprintf(args[0], sizeof(args[0]), "%d", (int)server);
  snprintf(args[1], sizeof(args[1]), "%d", req[1]);
  snprintf(args[2], sizeof(args[2]), "%d", ev[1]);
  argv[0] = "mqproc-spawn-helper";
  for (int i = 0; i < 3; i++)
    argv[i + 1] = args[i];
  argv[4] = NULL;
  if ((pid = fork()) == 0) {
    close(req[0]);
    close(ev[0]);
    if (image >= 0 && fcntl(req[1], F_SETFD, 0) == 0 && fcntl(ev[1], F_SETFD, 0) == 0)
      execveat(image, "", argv, environ, AT_EMPTY_PATH);
    mqproc__helper_main(server, req[1], ev[1]); /* the exec was refused: serve from here */
  }
  if (image >= 0)
    close(image);
  close(req[1]);
  close(ev[1]);
  if (pid < 0 || mqproc__loop_child(s->loop, pid, on_helper_exit, s) != MQPROC_OK) {
    int e = errno;
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
    }
    close(req[0]);
    close(ev[0]);
    return mqproc__err(err, MQPROC_ESYS, "spawn helper: %s",
                       pid < 0 ? strerror(e) : "out of memory");
  }
  s->pid = pid;
  s->req_fd = req[0];
  s->ev_fd = ev[0];
  fcntl(s->req_fd, F_SETFL, O_NONBLOCK);
  fcntl(s->ev_fd, F_SETFL, O_NONBLOCK);
  if (mqproc__loop_io(s->loop, s->ev_fd, on_event, s) != MQPROC_OK) {
    helper_stop(s);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  MQPROC__DEBUG("spawn helper started (pid %d)", (int)pid);
  return MQPROC_OK;
}

int mqproc__spawner_new(mqproc__spawner_t **out, mqproc__loop_t *loop, char *err) {
  mqproc__spawner_t *s = mqproc__calloc(1, sizeof(*s));
  int rc;
  if (s == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  s->loop = loop;
  s->req_fd = s->ev_fd = -1;
  s->queue_end = &s->queue;
  if ((rc = helper_start(s, err)) != MQPROC_OK) {
    free(s);
    return rc;
  }
  *out = s;
  return MQPROC_OK;
}

static void on_helper_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  mqproc__spawner_t *s = ud;
  char why[64];
  (void)loop;
  (void)pid;
  on_event(s->loop, s->ev_fd, s); /* what it reported before it died */
  if (WIFSIGNALED(wstatus))
    snprintf(why, sizeof(why), "was killed by signal %d", WTERMSIG(wstatus));
  else
    snprintf(why, sizeof(why), "exited with status %d", WEXITSTATUS(wstatus));
  s->pid = 0; /* reaped by the loop */
  MQPROC__ERROR("spawn helper (pid %d) %s", (int)pid, why);
  helper_gone(s, why);
}

/* ---- what the helper says --------------------------------------------------------------- */

static pending_t *find(pending_t *r, uint64_t id) {
  while (r != NULL && r->id != id)
    r = r->next;
  return r;
}

static void ended(mqproc__spawner_t *s, const mqproc__helper_event_t *ev, size_t n) {
  pending_t **pp = &s->runs, *r;
  mqproc__spawn_end_t end;
  while (*pp != NULL && (*pp)->id != ev->id)
    pp = &(*pp)->next;
  if ((r = *pp) == NULL)
    return;
  *pp = r->next;
  memset(&end, 0, sizeof(end));
  end.wstatus = ev->wstatus;
  end.step_failed = ev->step_failed != 0;
  end.step = ev->step;
  end.tail = s->event + sizeof(*ev);
  end.tail_len = ev->tail_len < n - sizeof(*ev) ? ev->tail_len : n - sizeof(*ev);
  end.tail_cut = ev->tail_cut != 0;
  r->cb(r->ud, &end);
  free(r);
}

static void on_event(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__spawner_t *s = ud;
  mqproc__helper_event_t ev;
  ssize_t n;
  (void)loop;
  while (fd >= 0 && fd == s->ev_fd &&
         (n = recv(fd, s->event, sizeof(s->event), MSG_DONTWAIT)) != 0) {
    pending_t *r;
    if (n < 0) {
      if (errno != EINTR)
        return;
      continue;
    }
    if ((size_t)n < sizeof(ev))
      continue;
    memcpy(&ev, s->event, sizeof(ev));
    if (ev.kind == MQPROC__HELPER_STARTED && (r = find(s->runs, ev.id)) != NULL) {
      r->pid = ev.pid;
      r->answered = 1;
    } else if (ev.kind == MQPROC__HELPER_ENDED) {
      ended(s, &ev, (size_t)n);
    } else if (ev.kind == MQPROC__HELPER_PONG && ev.id == s->ping_out) {
      s->ping_out = 0;
    }
  }
  if (fd >= 0 && fd == s->ev_fd) /* EOF: the helper is gone; its exit watch tells the rest */
    mqproc__loop_io(s->loop, fd, NULL, NULL);
}

static int request(mqproc__spawner_t *s, char *msg, size_t len, const int *fds, int nfds);

/* While tries run, a PING every PING_EVERY_MS; a helper that leaves one unanswered for
 * PING_TIMEOUT_MS is hung: it is killed and its tries end. The helper serves requests in
 * order and answers a SPAWN before it reads the next request, so a PONG also says that
 * every try asked for before it was answered: one watch covers a helper that never starts
 * a try and one that a processor stopped (SIGSTOP to its parent: its tries would never
 * end, time limits would do nothing, and the server would renew their leases for ever). */
static void on_ping_timer(mqproc__loop_t *loop, void *ud) {
  mqproc__spawner_t *s = ud;
  int64_t now = mqproc__loop_now(loop);
  mqproc__helper_req_t *q;
  s->ping_timer = 0;
  if (s->pid == 0 || s->runs == NULL) { /* nothing to watch: the next spawn starts it again */
    s->ping_out = 0;
    return;
  }
  if (s->ping_out != 0) {
    if (now - s->ping_sent_ms >= PING_TIMEOUT_MS) {
      helper_gone(s, "does not answer (stopped?)");
      return;
    }
  } else if ((q = mqproc__calloc(1, sizeof(*q))) != NULL) {
    q->kind = MQPROC__HELPER_PING;
    q->id = s->ping_out = ++s->ping_seq;
    s->ping_sent_ms = now;
    if (request(s, (char *)q, sizeof(*q), NULL, 0) < 0) {
      helper_gone(s, "does not answer");
      return;
    }
  }
  s->ping_timer = mqproc__loop_timer(loop, PING_EVERY_MS, on_ping_timer, s);
}

/* ---- what the server says --------------------------------------------------------------- */

/* Sends what waits for room; 0, or -1 when the helper cannot be reached. */
static int flush_queue(mqproc__spawner_t *s) {
  while (s->queue != NULL) {
    queued_t *q = s->queue;
    if (mqproc__send_with_fds(s->req_fd, q->msg, q->len, q->fds, q->nfds) < 0)
      return errno == EAGAIN ? 0 : -1;
    s->queue = q->next;
    queued_free(q);
  }
  s->queue_end = &s->queue;
  mqproc__loop_io(s->loop, s->req_fd, NULL, NULL);
  return 0;
}

static void on_room(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__spawner_t *s = ud;
  (void)loop;
  (void)fd;
  if (flush_queue(s) < 0)
    helper_gone(s, "does not answer");
}

/* A request (msg: malloc'ed, taken) to the helper, in order with those before it: sent
 * now, or queued with copies of its fds until the socket has room. 0, or -1 with errno
 * (the helper cannot be reached: the caller gives it up). */
static int request(mqproc__spawner_t *s, char *msg, size_t len, const int *fds, int nfds) {
  queued_t *q;
  if (s->queue == NULL) {
    if (mqproc__send_with_fds(s->req_fd, msg, len, fds, nfds) == 0) {
      free(msg);
      return 0;
    }
    if (errno != EAGAIN) {
      free(msg);
      return -1;
    }
  }
  if ((q = mqproc__calloc(1, sizeof(*q))) == NULL) {
    free(msg);
    errno = ENOMEM;
    return -1;
  }
  q->msg = msg;
  q->len = len;
  for (int i = 0; i < nfds; i++) {
    if ((q->fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 0)) < 0) {
      queued_free(q);
      return -1;
    }
    q->nfds++;
  }
  if (s->queue == NULL && (mqproc__loop_io(s->loop, s->req_fd, on_room, s) != MQPROC_OK ||
                           mqproc__loop_io_write(s->loop, s->req_fd, 1) != MQPROC_OK)) {
    queued_free(q);
    errno = ENOMEM;
    return -1;
  }
  *s->queue_end = q;
  s->queue_end = &q->next;
  return 0;
}

static size_t vec_len(char *const *v, uint32_t *n) {
  size_t len = 0;
  *n = 0;
  for (; v != NULL && v[*n] != NULL; (*n)++)
    len += strlen(v[*n]) + 1;
  return len;
}

static char *vec_put(char *p, char *const *v, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    size_t k = strlen(v[i]) + 1;
    memcpy(p, v[i], k);
    p += k;
  }
  return p;
}

/* The SPAWN request for plan: its header, then the payload (path, argv, envp, the log's
 * names) when it is small; else the payload in a memfd (*memfd). NULL with *rep. */
static char *spawn_request(const mqproc__child_plan_t *plan, uint64_t id, size_t *len, int *memfd,
                           mqproc__child_report_t *rep) {
  char *const log[] = {(char *)plan->log_dir, (char *)plan->log_sub, (char *)plan->log_name, NULL};
  mqproc__helper_req_t q;
  uint32_t nlog = 0;
  size_t n;
  char *msg, *p;
  memset(&q, 0, sizeof(q));
  q.kind = MQPROC__HELPER_SPAWN;
  q.id = id;
  n = strlen(plan->path) + 1 + vec_len(plan->argv, &q.argc) + vec_len(plan->envp, &q.envc);
  if (plan->log_inline_max > 0)
    n += vec_len(log, &nlog);
  q.max_log_bytes = plan->max_log_bytes;
  q.log_inline_max = plan->log_inline_max > 0 && nlog == 3 ? plan->log_inline_max : 0;
  q.core_cur = plan->core.rlim_cur;
  q.core_max = plan->core.rlim_max;
  q.inline_len = n <= MQPROC__HELPER_INLINE ? (uint32_t)n : 0;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, ENOMEM};
  if ((msg = malloc(sizeof(q) + n)) == NULL)
    return NULL;
  memcpy(msg, &q, sizeof(q));
  p = vec_put(msg + sizeof(q), (char *const[]){(char *)plan->path}, 1);
  p = vec_put(p, plan->argv, q.argc);
  p = vec_put(p, plan->envp, q.envc);
  vec_put(p, log, q.log_inline_max > 0 ? nlog : 0);
  *len = sizeof(q) + q.inline_len;
  if (q.inline_len == 0 &&
      (*memfd = mqproc__runner_memfd("mqproc-spawn", msg + sizeof(q), n, NULL)) < 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    free(msg);
    return NULL;
  }
  return msg;
}

int mqproc__spawner_spawn(mqproc__spawner_t *s, const mqproc__child_plan_t *plan,
                          mqproc__spawner_end_cb cb, void *ud, uint64_t *id,
                          mqproc__child_report_t *rep) {
  char err[MQPROC_ERR_LEN], *msg;
  int fds[MQPROC__HELPER_FDS] = {plan->in_fd, plan->log_fd, -1}, sent;
  pending_t *r = mqproc__calloc(1, sizeof(*r));
  size_t len;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, ENOMEM};
  if (r == NULL || (msg = spawn_request(plan, s->last_id + 1, &len, &fds[2], rep)) == NULL) {
    free(r);
    return -1;
  }
  if (s->pid == 0 && helper_start(s, err) != MQPROC_OK) {
    MQPROC__ERROR("%s", err);
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    sent = -1;
    free(msg);
  } else if ((sent = request(s, msg, len, fds, fds[2] >= 0 ? 3 : 2)) < 0) {
    helper_gone(s, "does not answer");
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
  }
  if (fds[2] >= 0)
    close(fds[2]);
  if (sent < 0) {
    free(r);
    return -1;
  }
  r->id = *id = ++s->last_id;
  r->cb = cb;
  r->ud = ud;
  r->next = s->runs;
  s->runs = r;
  if (s->ping_timer == 0)
    s->ping_timer = mqproc__loop_timer(s->loop, PING_EVERY_MS, on_ping_timer, s);
  return 0;
}

void mqproc__spawner_kill(mqproc__spawner_t *s, uint64_t id, int sig) {
  mqproc__helper_req_t *q;
  if (s == NULL || s->pid == 0 || find(s->runs, id) == NULL)
    return;
  if ((q = mqproc__calloc(1, sizeof(*q))) == NULL) {
    helper_gone(s, "cannot be told to kill a try (out of memory)");
    return;
  }
  q->kind = MQPROC__HELPER_KILL;
  q->id = id;
  q->sig = sig;
  if (request(s, (char *)q, sizeof(*q), NULL, 0) < 0)
    helper_gone(s, "does not answer");
}

pid_t mqproc__spawner_pid(const mqproc__spawner_t *s, uint64_t id) {
  const pending_t *r = s != NULL ? find(s->runs, id) : NULL;
  return r != NULL ? r->pid : 0;
}

static void free_list(pending_t *r) {
  while (r != NULL) {
    pending_t *next = r->next;
    free(r);
    r = next;
  }
}

/* Told to stop (its request socket closed), the helper kills every try's group and what
 * is left to it, and exits; one that does not within STOP_GRACE_MS is killed. */
static void helper_close(mqproc__spawner_t *s) {
  struct pollfd pf = {.fd = s->ev_fd, .events = POLLIN};
  int64_t deadline = mqproc__now_ms() + STOP_GRACE_MS;
  char buf[MQPROC__HELPER_EVENT_MAX];
  if (s->pid <= 0 || s->req_fd < 0 || s->ev_fd < 0)
    return;
  if (s->queue != NULL)
    mqproc__loop_io(s->loop, s->req_fd, NULL, NULL);
  drop_queue(s);
  close(s->req_fd);
  s->req_fd = -1;
  for (int64_t left = STOP_GRACE_MS; left > 0; left = deadline - mqproc__now_ms()) {
    if (poll(&pf, 1, (int)left) <= 0)
      break;
    if (recv(s->ev_fd, buf, sizeof(buf), MSG_DONTWAIT) == 0)
      break; /* its end closed: it exited */
  }
}

void mqproc__spawner_free(mqproc__spawner_t *s) {
  if (s == NULL)
    return;
  helper_close(s);
  helper_stop(s);
  kill_groups(s->runs);
  if (s->orphan_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->orphan_timer);
  if (s->ping_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->ping_timer);
  free_list(s->runs);
  free_list(s->orphans);
  free(s);
}
