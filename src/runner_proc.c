/* Runner for external commands: posix_spawn (no shell) of an argv array per try.
 *
 * The child gets: stdin = a memfd holding the job as JSON (so a command that never
 * reads it cannot block us), stdout+stderr appended to the job's log file, its own
 * process group (so a kill reaches its children), default signal dispositions and an
 * empty signal mask, and MQPROC_JOB_ID, MQPROC_ATTEMPT, MQPROC_TRY, MQPROC_LOG_FILE in
 * its environment. When it exits, leftovers of its process group are killed.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "argv.h"
#include "runner.h"
#include "util.h"

extern char **environ;

typedef struct proc_runner {
  struct mqproc__runner base; /* first: klass */
  char **argv;
} proc_runner_t;

struct mqproc__run {
  pid_t pid;
  int64_t started_ms;
  mqproc__run_done_cb done;
  void *ud;
};

/* ---- child setup -------------------------------------------------------------------- */

static int stdin_memfd(const char *json, char *err) {
  int fd = memfd_create("mqproc-job", MFD_CLOEXEC);
  size_t len = strlen(json), off = 0;
  if (fd < 0)
    return mqproc__err(err, -1, "memfd_create: %s", strerror(errno));
  while (off < len) {
    ssize_t n = write(fd, json + off, len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      mqproc__err(err, -1, "writing the job to stdin: %s", strerror(errno));
      close(fd);
      return -1;
    }
    off += (size_t)n;
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

/* environ + the MQPROC_* job variables (which replace inherited ones). */
static char **build_env(const mqproc__run_spec_t *spec) {
  size_t n = 0, k = 0;
  char **env;
  while (environ[n] != NULL)
    n++;
  env = mqproc__calloc(n + 5, sizeof(char *));
  if (env == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++) {
    if (strncmp(environ[i], "MQPROC_JOB_ID=", 14) == 0 ||
        strncmp(environ[i], "MQPROC_ATTEMPT=", 15) == 0 ||
        strncmp(environ[i], "MQPROC_TRY=", 11) == 0 ||
        strncmp(environ[i], "MQPROC_LOG_FILE=", 16) == 0)
      continue;
    env[k++] = environ[i];
  }
  env[k++] = mqproc__asprintf("MQPROC_JOB_ID=%s", spec->msg->job_id);
  env[k++] = mqproc__asprintf("MQPROC_ATTEMPT=%d", spec->attempt);
  env[k++] = mqproc__asprintf("MQPROC_TRY=%d", spec->try_no);
  env[k++] = mqproc__asprintf("MQPROC_LOG_FILE=%s", spec->log_path);
  env[k] = NULL;
  for (size_t i = k - 4; i < k; i++) {
    if (env[i] == NULL) {
      for (size_t j = k - 4; j < k; j++)
        free(env[j]);
      free(env);
      return NULL;
    }
  }
  return env;
}

static void free_env(char **env) {
  size_t n = 0;
  if (env == NULL)
    return;
  while (env[n] != NULL)
    n++;
  for (size_t i = n - 4; i < n; i++)
    free(env[i]);
  free(env);
}

static int spawn(proc_runner_t *r, const mqproc__run_spec_t *spec, int in_fd, int log_fd,
                 pid_t *pid, char *err) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, all;
  char **env = build_env(spec);
  int rc;
  if (env == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, log_fd, 2);
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  rc = posix_spawnp(pid, r->argv[0], &fa, &at, r->argv, env);
  posix_spawnattr_destroy(&at);
  posix_spawn_file_actions_destroy(&fa);
  free_env(env);
  if (rc != 0)
    return mqproc__err(err, MQPROC_ERUNNER_SPAWN, "cannot start %s: %s", r->argv[0], strerror(rc));
  return MQPROC_OK;
}

/* ---- the try ------------------------------------------------------------------------ */

static void on_exit_(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  mqproc__run_t *run = ud;
  mqproc__run_result_t res;
  memset(&res, 0, sizeof(res));
  kill(-pid, SIGKILL); /* whatever the command left behind in its group */
  res.duration_ms = mqproc__loop_now(loop) - run->started_ms;
  mqproc__runner_describe(wstatus, &res);
  run->done(run->ud, &res);
  free(run);
}

static int proc_start(mqproc__runner_t *base, mqproc__loop_t *loop, const mqproc__run_spec_t *spec,
                      mqproc__run_done_cb done, void *ud, mqproc__run_t **out, char *err) {
  proc_runner_t *r = (proc_runner_t *)base;
  mqproc__run_t *run = mqproc__calloc(1, sizeof(*run));
  int in_fd = -1, log_fd = -1, rc = MQPROC_ERUNNER_SPAWN;
  if (run == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if ((log_fd = mqproc__runner_open_log(spec, err)) < 0)
    goto out_free;
  if ((in_fd = stdin_memfd(spec->request_json, err)) < 0)
    goto out_close;
  if ((rc = spawn(r, spec, in_fd, log_fd, &run->pid, err)) != MQPROC_OK)
    goto out_close;
  run->started_ms = mqproc__now_ms();
  run->done = done;
  run->ud = ud;
  if ((rc = mqproc__loop_child(loop, run->pid, on_exit_, run)) != MQPROC_OK) {
    kill(-run->pid, SIGKILL);
    waitpid(run->pid, NULL, 0);
    mqproc__err(err, rc, "out of memory");
    goto out_close;
  }
  close(in_fd);
  close(log_fd);
  *out = run;
  return MQPROC_OK;
out_close:
  if (in_fd >= 0)
    close(in_fd);
  if (log_fd >= 0)
    close(log_fd);
out_free:
  free(run);
  return rc;
}

static void proc_kill(mqproc__runner_t *base, mqproc__run_t *run, int sig) {
  (void)base;
  kill(-run->pid, sig);
}

static void proc_destroy(mqproc__runner_t *base) {
  proc_runner_t *r = (proc_runner_t *)base;
  mqproc__argv_free(r->argv);
  free(r);
}

static const struct mqproc__runner_class proc_class = {
    "command",    /* name */
    proc_start,   /* start */
    proc_kill,    /* kill */
    proc_destroy, /* destroy */
};

int mqproc__runner_proc_new(mqproc__runner_t **out, char *const *argv, char *err) {
  proc_runner_t *r = mqproc__calloc(1, sizeof(*r));
  size_t n = 0;
  if (r == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  while (argv[n] != NULL)
    n++;
  r->argv = mqproc__calloc(n + 1, sizeof(char *));
  for (size_t i = 0; r->argv != NULL && i < n; i++) {
    if ((r->argv[i] = mqproc__strdup(argv[i])) == NULL) {
      mqproc__argv_free(r->argv);
      r->argv = NULL;
    }
  }
  if (r->argv == NULL) {
    free(r);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  r->base.klass = &proc_class;
  *out = &r->base;
  return MQPROC_OK;
}

/* ---- shared helpers ----------------------------------------------------------------- */

static int mkdirs(const char *path) {
  char *dir = mqproc__strdup(path), *p;
  if (dir == NULL)
    return -1;
  for (p = dir + 1; *p != '\0'; p++) {
    if (*p == '/') {
      *p = '\0';
      if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        free(dir);
        return -1;
      }
      *p = '/';
    }
  }
  free(dir);
  return 0;
}

int mqproc__runner_open_log(const mqproc__run_spec_t *spec, char *err) {
  char head[512];
  int fd, n;
  if (mkdirs(spec->log_path) < 0 ||
      (fd = open(spec->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) < 0)
    return mqproc__err(err, -1, "cannot open job log %s: %s", spec->log_path, strerror(errno));
  n = snprintf(head, sizeof(head), "=== mqproc: job %s attempt %d try %d on %s ===\n",
               spec->msg->job_id, spec->attempt, spec->try_no, spec->worker_id);
  if (n > 0 && write(fd, head, (size_t)n < sizeof(head) ? (size_t)n : sizeof(head) - 1) < 0) {
    /* a log header that cannot be written is not a reason to fail the try */
  }
  return fd;
}

void mqproc__runner_describe(int wstatus, mqproc__run_result_t *r) {
  r->exit_code = -1;
  r->term_signal = 0;
  if (WIFEXITED(wstatus)) {
    r->exit_code = WEXITSTATUS(wstatus);
    r->status = r->exit_code == 0 ? MQPROC_OK : MQPROC_ERUNNER_FAILED;
    if (r->exit_code != 0)
      snprintf(r->error, sizeof(r->error), "processor exited with status %d", r->exit_code);
  } else if (WIFSIGNALED(wstatus)) {
    r->term_signal = WTERMSIG(wstatus);
    r->status = MQPROC_ERUNNER_FAILED;
    snprintf(r->error, sizeof(r->error), "processor killed by signal %d (%s)", r->term_signal,
             strsignal(r->term_signal));
  } else {
    r->status = MQPROC_ERUNNER_FAILED;
    snprintf(r->error, sizeof(r->error), "processor ended with wait status %d", wstatus);
  }
}
