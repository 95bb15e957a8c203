/* --on-failure: the error handler (see on_failure.h). */
#include "server/on_failure.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/argv.h"
#include "runner/joblog.h"
#include "base/log.h"
#include "runner/int.h"
#include "base/util.h"

/* At most this many handlers wait for a free place (--on-failure-max) beyond the running
 * ones; a FAILED job's handler beyond that is not run (logged with its job). */
#define WAIT_MAX 1000

typedef struct handler {
  mqproc__server_t *srv;
  pid_t pid; /* also its process group */
  uint64_t timer;
  char job_id[256];
  struct handler *next;
} handler_t;

/* A handler waiting for a free place: copies of what it gets when it starts. */
typedef struct waiting {
  char *job_id, *error, *request_json, *log_path;
  int attempt;
  struct waiting *next;
} waiting_t;

struct mqproc__on_failure {
  char **argv;
  handler_t *running;
  int n_running;
  waiting_t *waiting, **waiting_tail; /* FIFO: the oldest FAILED job's handler first */
  int n_waiting;
};

static void start(mqproc__server_t *srv, const char *job_id, int attempt, const char *error,
                  const char *request_json, const char *log_path);

int mqproc__on_failure_init(mqproc__server_t *srv, char *err) {
  char why[MQPROC_ERR_LEN];
  int argc;
  if (srv->cfg->on_failure == NULL || srv->cfg->on_failure[0] == '\0')
    return MQPROC_OK;
  if ((srv->on_failure = mqproc__calloc(1, sizeof(*srv->on_failure))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  srv->on_failure->waiting_tail = &srv->on_failure->waiting;
  if (mqproc__argv_split(srv->cfg->on_failure, &srv->on_failure->argv, &argc, why) != MQPROC_OK ||
      argc == 0)
    return mqproc__err(err, MQPROC_ECONFIG, "--on-failure: %s", argc == 0 ? "empty" : why);
  return MQPROC_OK;
}

static void unlink_handler(mqproc__server_t *srv, handler_t *h) {
  for (handler_t **p = &srv->on_failure->running; *p != NULL; p = &(*p)->next)
    if (*p == h) {
      *p = h->next;
      srv->on_failure->n_running--;
      break;
    }
}

/* --on-failure-max (at least one: a handler never waits for nothing). */
static int places(const mqproc__server_t *srv) {
  return srv->cfg->on_failure_max > 0 ? srv->cfg->on_failure_max : 1;
}

static void waiting_free(waiting_t *w) {
  free(w->job_id);
  free(w->error);
  free(w->request_json);
  free(w->log_path);
  free(w);
}

/* Starts waiting handlers, oldest first, while there is a free place. */
static void start_waiting(mqproc__server_t *srv) {
  struct mqproc__on_failure *of = srv->on_failure;
  while (of->waiting != NULL && of->n_running < places(srv)) {
    waiting_t *w = of->waiting;
    if ((of->waiting = w->next) == NULL)
      of->waiting_tail = &of->waiting;
    of->n_waiting--;
    start(srv, w->job_id, w->attempt, w->error, w->request_json, w->log_path);
    waiting_free(w);
  }
}

/* No free place: the handler waits its turn (copies of its inputs), unless WAIT_MAX wait
 * already, which is logged. */
static void wait_turn(mqproc__server_t *srv, const char *job_id, int attempt, const char *error,
                      const char *request_json, const char *log_path) {
  struct mqproc__on_failure *of = srv->on_failure;
  waiting_t *w = NULL;
  if (of->n_waiting >= WAIT_MAX) {
    MQPROC__WARN("job %s: FAILED: --on-failure handler not run: %d handlers run (--on-failure-max) "
                 "and %d wait already",
                 job_id, of->n_running, of->n_waiting);
    return;
  }
  if ((w = mqproc__calloc(1, sizeof(*w))) == NULL || (w->job_id = mqproc__strdup(job_id)) == NULL ||
      (error != NULL && (w->error = mqproc__strdup(error)) == NULL) ||
      (request_json != NULL && (w->request_json = mqproc__strdup(request_json)) == NULL) ||
      (log_path != NULL && (w->log_path = mqproc__strdup(log_path)) == NULL)) {
    MQPROC__ERROR("job %s: --on-failure handler not run: out of memory", job_id);
    if (w != NULL)
      waiting_free(w);
    return;
  }
  w->attempt = attempt;
  *of->waiting_tail = w;
  of->waiting_tail = &w->next;
  of->n_waiting++;
  MQPROC__INFO("job %s: FAILED: --on-failure handler waits for a free place (%d running, %d "
               "waiting)",
               job_id, of->n_running, of->n_waiting);
}

static void on_exit_(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  handler_t *h = ud;
  (void)pid;
  mqproc__loop_timer_cancel(loop, h->timer);
  kill(-h->pid, SIGKILL); /* what it left behind in its group */
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
    MQPROC__INFO("job %s: --on-failure handler done", h->job_id);
  else if (WIFEXITED(wstatus))
    MQPROC__WARN("job %s: --on-failure handler exited with status %d (not retried)", h->job_id,
                 WEXITSTATUS(wstatus));
  else
    MQPROC__WARN("job %s: --on-failure handler killed by signal %d (not retried)", h->job_id,
                 WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
  unlink_handler(h->srv, h);
  start_waiting(h->srv); /* its place is free */
  free(h);
}

static void on_timeout(mqproc__loop_t *loop, void *ud) {
  handler_t *h = ud;
  (void)loop;
  h->timer = 0;
  MQPROC__WARN("job %s: --on-failure handler still running after %d s: killing its process group",
               h->job_id, h->srv->cfg->on_failure_timeout_s);
  kill(-h->pid, SIGKILL);
}

/* The JSON the handler reads on stdin. */
static char *input_json(const mqproc__server_t *srv, const char *job_id, int attempt,
                        const char *error, const char *request_json, const char *log_path) {
  json_t *req = request_json != NULL ? json_loads(request_json, 0, NULL) : NULL;
  json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:s, s:s?, s:s, s:o}", "job_id", job_id,
                        "processor_name", srv->processor, "state", "FAILED", "attempt", attempt,
                        "error", error != NULL ? error : "", "log_path", log_path, "worker_id",
                        srv->worker_id, "request", req != NULL ? req : json_null());
  char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  return text;
}

/* posix_spawn: no page of the server is copied, and the attributes reset what the loop
 * set up (blocked signals, SIGPIPE ignored) before the command runs. */
static int spawn(mqproc__server_t *srv, int in_fd, int out_fd, char **env, pid_t *pid) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, all;
  int rc;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawn_file_actions_init(&fa);
  posix_spawnattr_init(&at);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  rc = posix_spawnp(pid, srv->on_failure->argv[0], &fa, &at, srv->on_failure->argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return rc;
}

void mqproc__on_failure_run(mqproc__server_t *srv, const char *job_id, int attempt,
                            const char *error, const char *request_json, const char *log_path) {
  if (srv->on_failure == NULL)
    return;
  if (srv->on_failure->n_running >= places(srv) || srv->on_failure->waiting != NULL)
    wait_turn(srv, job_id, attempt, error, request_json, log_path);
  else
    start(srv, job_id, attempt, error, request_json, log_path);
}

/* Starts a handler now (its place is free). */
static void start(mqproc__server_t *srv, const char *job_id, int attempt, const char *error,
                  const char *request_json, const char *log_path) {
  char *text, **env = NULL, *vars[2] = {NULL, NULL}, err[MQPROC_ERR_LEN];
  handler_t *h = NULL;
  int in_fd = -1, out_fd = -1, rc;
  size_t n = 0;
  if ((text = input_json(srv, job_id, attempt, error, request_json, log_path)) == NULL ||
      (h = mqproc__calloc(1, sizeof(*h))) == NULL ||
      (env = mqproc__runner_env(srv->cfg->pass_env, 2)) == NULL ||
      (vars[0] = mqproc__asprintf("MQPROC_JOB_ID=%s", job_id)) == NULL ||
      (vars[1] = mqproc__asprintf("MQPROC_ATTEMPT=%d", attempt)) == NULL) {
    MQPROC__ERROR("job %s: --on-failure handler not started: out of memory", job_id);
    goto out;
  }
  while (env[n] != NULL)
    n++;
  env[n] = vars[0];
  env[n + 1] = vars[1];
  if ((in_fd = mqproc__runner_memfd("mqproc-on-failure", text, strlen(text), err)) < 0) {
    MQPROC__ERROR("job %s: --on-failure handler not started: %s", job_id, err);
    goto out;
  }
  /* the job's log as the runner opens it: a processor may have swapped it for a FIFO or a
   * link (never blocking, never followed); then the handler's output is dropped */
  if (log_path == NULL || log_path[0] == '\0' ||
      (out_fd = mqproc__joblog_open_path(log_path, err)) < 0) {
    if (log_path != NULL && log_path[0] != '\0')
      MQPROC__WARN("job %s: --on-failure handler's output not logged: %s", job_id, err);
    out_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  }
  h->srv = srv;
  snprintf(h->job_id, sizeof(h->job_id), "%s", job_id);
  if (out_fd < 0 || (rc = spawn(srv, in_fd, out_fd, env, &h->pid)) != 0) {
    MQPROC__WARN("job %s: --on-failure handler '%s' not started: %s (not retried)", job_id,
                 srv->on_failure->argv[0], strerror(out_fd < 0 ? errno : rc));
    goto out;
  }
  if (mqproc__loop_child(srv->loop, h->pid, on_exit_, h) != MQPROC_OK) {
    kill(-h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    MQPROC__ERROR("job %s: --on-failure handler killed: out of memory", job_id);
    goto out;
  }
  h->timer = mqproc__loop_timer(srv->loop, srv->cfg->on_failure_timeout_s * 1000LL, on_timeout, h);
  h->next = srv->on_failure->running;
  srv->on_failure->running = h;
  srv->on_failure->n_running++;
  MQPROC__INFO("job %s: FAILED: --on-failure handler started (pid %d)", job_id, (int)h->pid);
  h = NULL;
out:
  if (in_fd >= 0)
    close(in_fd);
  if (out_fd >= 0)
    close(out_fd);
  free(vars[0]);
  free(vars[1]);
  free(env);
  free(text);
  free(h);
}

void mqproc__on_failure_free(mqproc__server_t *srv) {
  if (srv->on_failure == NULL)
    return;
  while (srv->on_failure->running != NULL) {
    handler_t *h = srv->on_failure->running;
    srv->on_failure->running = h->next;
    MQPROC__WARN("job %s: --on-failure handler still running at exit: killed", h->job_id);
    mqproc__loop_child_forget(srv->loop, h->pid);
    kill(-h->pid, SIGKILL);
    waitpid(h->pid, NULL, 0);
    free(h);
  }
  if (srv->on_failure->n_waiting > 0)
    MQPROC__WARN("%d --on-failure handler(s) still waiting at exit: not run (the first: job %s)",
                 srv->on_failure->n_waiting, srv->on_failure->waiting->job_id);
  while (srv->on_failure->waiting != NULL) {
    waiting_t *w = srv->on_failure->waiting;
    srv->on_failure->waiting = w->next;
    waiting_free(w);
  }
  mqproc__argv_free(srv->on_failure->argv);
  free(srv->on_failure);
  srv->on_failure = NULL;
}
