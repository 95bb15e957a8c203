/* The server's side of the spawn helper (see runner_spawner.h; the helper itself and the
 * protocol: runner_helper.h).
 */
#include "runner/spawn/spawner.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "runner/spawn/helper.h"
#include "base/util.h"

extern char **environ;

#define REPLY_TIMEOUT_MS 10000 /* a helper that does not answer a fork by then is hung */
typedef struct pending {
  pid_t pid;
  mqproc__spawner_exit_cb cb;
  void *ud;
  struct pending *next;
} pending_t;

struct mqproc__spawner {
  mqproc__loop_t *loop;
  pid_t pid; /* the helper; 0 once it is gone */
  int req_fd, ev_fd;
  pending_t *runs;    /* tries whose supervisor has not been reported ended */
  pending_t *orphans; /* tries whose helper died: ended on the next loop turn */
  uint64_t orphan_timer;
};

/* ---- the server's side ---------------------------------------------------------------- */

static void on_event(mqproc__loop_t *loop, int fd, void *ud);
static void on_helper_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud);

static void end_orphans(mqproc__loop_t *loop, void *ud) {
  mqproc__spawner_t *s = ud;
  (void)loop;
  s->orphan_timer = 0;
  while (s->orphans != NULL) {
    pending_t *r = s->orphans;
    s->orphans = r->next;
    r->cb(r->ud, r->pid, SIGKILL); /* a wait status: killed by SIGKILL */
    free(r);
  }
}

/* Kills the helper unless the loop reaped it already (its supervisors kill their groups)
 * and drops its sockets. */
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
  if (s->req_fd >= 0)
    close(s->req_fd);
  s->req_fd = s->ev_fd = -1;
}

/* Every pending try ends as killed (its supervisor died with the helper), on the next
 * loop turn: this may run inside a spawn. */
static void helper_gone(mqproc__spawner_t *s, const char *why) {
  pending_t *runs = s->runs;
  if (s->pid > 0)
    MQPROC__ERROR("spawn helper (pid %d) %s; %s", (int)s->pid, why,
                  runs != NULL ? "its running tries were killed"
                               : "a new one starts on the next try");
  helper_stop(s);
  s->runs = NULL;
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
  if ((rc = helper_start(s, err)) != MQPROC_OK) {
    free(s);
    return rc;
  }
  *out = s;
  return MQPROC_OK;
}

static void on_event(mqproc__loop_t *loop, int fd, void *ud) {
  mqproc__spawner_t *s = ud;
  mqproc__helper_event_t ev;
  ssize_t n;
  (void)loop;
  while ((n = recv(fd, &ev, sizeof(ev), 0)) == (ssize_t)sizeof(ev)) {
    pending_t **pp = &s->runs, *r;
    while (*pp != NULL && (*pp)->pid != ev.pid)
      pp = &(*pp)->next;
    if ((r = *pp) == NULL)
      continue;
    *pp = r->next;
    r->cb(r->ud, r->pid, ev.wstatus);
    free(r);
  }
  if (n == 0) /* EOF: the helper is gone; its exit watch tells the rest */
    mqproc__loop_io(s->loop, fd, NULL, NULL);
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

int mqproc__spawner_spawn(mqproc__spawner_t *s, const mqproc__child_plan_t *plan,
                          mqproc__spawner_exit_cb cb, void *ud, pid_t *pid,
                          mqproc__child_report_t *rep) {
  char err[MQPROC_ERR_LEN], *payload = NULL, *p;
  char *const log[] = {(char *)plan->log_dir, (char *)plan->log_sub, (char *)plan->log_name, NULL};
  int fds[MQPROC__HELPER_FDS] = {plan->in_fd, plan->log_fd, plan->report_fd, -1};
  pending_t *r = mqproc__calloc(1, sizeof(*r));
  struct pollfd pf;
  mqproc__helper_reply_t reply;
  size_t len;
  uint32_t nlog = 0;
  mqproc__helper_req_t q;
  memset(&q, 0, sizeof(q));
  q.kind = MQPROC__HELPER_SPAWN;
  len = strlen(plan->path) + 1 + vec_len(plan->argv, &q.argc) + vec_len(plan->envp, &q.envc);
  if (plan->log_inline_max > 0)
    len += vec_len(log, &nlog);
  q.max_log_bytes = plan->max_log_bytes;
  q.log_inline_max = plan->log_inline_max > 0 && nlog == 3 ? plan->log_inline_max : 0;
  q.core_cur = plan->core.rlim_cur;
  q.core_max = plan->core.rlim_max;
  *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, ENOMEM};
  if (r == NULL || (payload = malloc(len)) == NULL)
    goto fail;
  p = vec_put(payload, (char *const[]){(char *)plan->path}, 1);
  p = vec_put(p, plan->argv, q.argc);
  p = vec_put(p, plan->envp, q.envc);
  vec_put(p, log, nlog);
  if ((fds[3] = mqproc__runner_memfd("mqproc-spawn", payload, len, NULL)) < 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_PIPE, errno};
    goto fail;
  }
  if (s->pid == 0 && helper_start(s, err) != MQPROC_OK) {
    MQPROC__ERROR("%s", err);
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  pf = (struct pollfd){.fd = s->req_fd, .events = POLLIN};
  if (mqproc__send_with_fds(s->req_fd, &q, sizeof(q), fds, MQPROC__HELPER_FDS) < 0 ||
      poll(&pf, 1, REPLY_TIMEOUT_MS) != 1 ||
      recv(s->req_fd, &reply, sizeof(reply), 0) != (ssize_t)sizeof(reply)) {
    helper_gone(s, "does not answer");
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, EAGAIN};
    goto fail;
  }
  if (reply.pid <= 0) {
    *rep = (mqproc__child_report_t){MQPROC__STAGE_FORK, reply.err};
    goto fail;
  }
  close(fds[3]);
  free(payload);
  r->pid = *pid = reply.pid;
  r->cb = cb;
  r->ud = ud;
  r->next = s->runs;
  s->runs = r;
  return 0;
fail:
  if (fds[3] >= 0)
    close(fds[3]);
  free(payload);
  free(r);
  return -1;
}

void mqproc__spawner_kill(mqproc__spawner_t *s, pid_t pid, int sig) {
  mqproc__helper_req_t q;
  if (s == NULL || s->pid == 0)
    return;
  memset(&q, 0, sizeof(q));
  q.kind = MQPROC__HELPER_KILL;
  q.pid = pid;
  q.sig = sig;
  if (mqproc__send_with_fds(s->req_fd, &q, sizeof(q), NULL, 0) < 0)
    helper_gone(s, "does not answer");
}

static void free_list(pending_t *r) {
  while (r != NULL) {
    pending_t *next = r->next;
    free(r);
    r = next;
  }
}

void mqproc__spawner_free(mqproc__spawner_t *s) {
  if (s == NULL)
    return;
  helper_stop(s);
  if (s->orphan_timer != 0)
    mqproc__loop_timer_cancel(s->loop, s->orphan_timer);
  free_list(s->runs);
  free_list(s->orphans);
  free(s);
}
