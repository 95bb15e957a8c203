/* Runner for external commands: execve (no shell) of an argv array per try.
 *
 * Each try is started by the server's spawn helper (spawn/spawner.c, one small process
 * started at the first try), which runs the processor as its own child in a process group
 * of its own and supervises it (runner/child.c, spawn/helper.c). The processor gets: stdin
 * = a memfd holding the job as JSON (so a command that never reads it cannot block us),
 * stdout+stderr copied by the helper into the job's log file (at most --max-log-size bytes
 * per try: a runaway writer is killed; a job's first try copies into a memfd instead,
 * which the server reads when the try ended: a success within --log-inline-max keeps its
 * text in the job's row and makes no file, a failure's is moved into the file then, and
 * output that outgrows the memfd is moved there by the helper at once), default signal
 * dispositions and an empty signal mask, no fds but 0-2, and a clean environment: PATH,
 * HOME, LANG, LANGUAGE, LC_*, TZ, TMPDIR, what --pass-env names, and MQPROC_JOB_ID,
 * MQPROC_ATTEMPT, MQPROC_TRY, MQPROC_LOG_FILE; never the server's MQPROC_QUEUE,
 * MQPROC_DATABASE, PGPASSWORD or the like. A time limit kills the whole process group;
 * when the main process exits, leftovers of its group are killed too; when the server
 * dies, the helper kills every group.
 *
 * Why not posix_spawn from the server: posix_spawn cannot set a parent-death signal or
 * supervise, and the server is multi-threaded (curl workers) with two hundred mappings.
 * Everything the helper needs (the program's path, argv, envp) is prepared here and sent
 * with the request; the loop does not wait for the helper: the try counts as started when
 * the request is made, and a step that failed before execve comes back as the try's end
 * ("cannot start ...").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/argv.h"
#include "base/log.h"
#include "base/util.h"
#include "base/wslock.h"
#include "runner/child.h"
#include "runner/int.h"
#include "runner/joblog.h"
#include "runner/ocrd_argv.h"
#include "runner/ocrd_check.h"
#include "runner/spawn/spawner.h"

/* A try waiting for its workspace's lock looks again after this long, doubled up to
 * LOCK_LOOK_MAX_MS (at once when a try of this server on the same METS ends). */
#define LOCK_LOOK_MS 50
#define LOCK_LOOK_MAX_MS 1000

typedef struct proc_runner {
  struct mqproc__runner base; /* first: klass */
  char **argv;                /* the --exec words */
  int ocrd_cli;               /* append OCR-D's processor arguments per job */
  char *ocrd_log_level;
  char **pass_env;             /* --pass-env: NAME or PREFIX* */
  int ocrd_check;              /* check an OCR-D try's output after its exit 0 (ocrd_check.h) */
  int lock_said;               /* the log said once that tries lock their workspace */
  struct mqproc__run *waiting; /* tries waiting for a workspace's lock */
  mqproc__spawner_t *spawner;  /* started with the first try */
} proc_runner_t;

/* The processor's stdin: the message as JSON, plus its AMQP headers under "headers" (a
 * key no valid message has: the codec refuses unknown keys). */
static int stdin_memfd(const mqproc__run_spec_t *spec, char *err) {
  size_t rl = strlen(spec->request_json), hl;
  char *text;
  int fd;
  if (spec->headers_json == NULL || rl < 2 || spec->request_json[rl - 1] != '}')
    return mqproc__runner_memfd("mqproc-job", spec->request_json, rl, err);
  hl = strlen(spec->headers_json);
  if ((text = mqproc__malloc(rl + hl + 16)) == NULL) {
    mqproc__err(err, MQPROC_ENOMEM, "out of memory");
    return -1;
  }
  /* {...} -> {...,"headers":{...}} (compact JSON: the object's last byte is its brace) */
  memcpy(text, spec->request_json, rl - 1);
  rl = rl - 1 +
       (size_t)sprintf(text + rl - 1, "%s\"headers\":%s}",
                       spec->request_json[rl - 2] == '{' ? "" : ",", spec->headers_json);
  fd = mqproc__runner_memfd("mqproc-job", text, rl, err);
  free(text);
  return fd;
}

struct mqproc__run {
  uint64_t id;  /* the spawn helper's name for the try */
  int log_fd;   /* the job's log (the file, or the memfd while kept), for that text */
  int log_kept; /* log_fd is the memfd of the try's output (child.h) */
  long log_max; /* the output kept there stays within this (--log-inline-max) */
  const char *log_dir, *log_sub, *log_name; /* borrowed: the delivery outlives the try */
  const char *prog;                         /* the runner's argv[0], for that text */
  int64_t started_ms;
  int64_t time_limit_ms;
  uint64_t timer; /* the time limit; 0 when none is pending */
  int timed_out;  /* the time limit fired and the group was killed */
  mqproc__loop_t *loop;
  proc_runner_t *runner;
  mqproc__run_done_cb done;
  void *ud;
  /* until the processor is started: all it gets (owned; plan points into them) */
  mqproc__child_plan_t plan;
  char *path, **env, **job_argv;
  int in_fd;
  /* an OCR-D try without a METS server takes its workspace's lock first (base/wslock.h)
   * and holds it until the try ended: tries of one workspace run one at a time */
  char *lock_path;  /* its METS; NULL: no lock */
  int lock_fd;      /* held; -1 */
  int pending;      /* waiting for the lock: nothing runs yet */
  int killed;       /* killed (the signal) while pending */
  uint64_t look;    /* the next look at the lock */
  int64_t look_ms;  /* the wait before that look */
  int64_t since_ms; /* waiting since */
  struct mqproc__run *next_waiting;
  /* after an exit 0: the output check, on a work thread, and the result it may change */
  mqproc__ocrd_check_t *check;
  int checking;
  mqproc__run_result_t res;
};

/* ---- the child's environment, built in the parent ---------------------------------- */

/* The job variables the child gets after the allowed part of environ (owned). The last,
 * MQPROC_WORKSPACE_LOCK=METS, tells an OCR-D try that the runner holds the workspace lock
 * (base/wslock.h) on its METS for it: a processor that takes that lock itself (mqproc's
 * ocrd-dummy) must not wait for it. It is always there ("" when no lock is held), so the
 * count of owned entries is fixed. */
#define JOB_VARS 5

/* The allowed part of environ + the MQPROC_* job variables. */
static char **build_env(const mqproc__run_spec_t *spec, char *const *pass, const char *lock_path) {
  size_t k = 0;
  char **env = mqproc__runner_env(pass, JOB_VARS);
  if (env == NULL)
    return NULL;
  while (env[k] != NULL)
    k++;
  env[k++] = mqproc__asprintf("MQPROC_JOB_ID=%s", spec->msg->job_id);
  env[k++] = mqproc__asprintf("MQPROC_ATTEMPT=%d", spec->attempt);
  env[k++] = mqproc__asprintf("MQPROC_TRY=%d", spec->try_no);
  env[k++] = mqproc__asprintf("MQPROC_LOG_FILE=%s", spec->log_path);
  env[k++] = mqproc__asprintf("MQPROC_WORKSPACE_LOCK=%s", lock_path != NULL ? lock_path : "");
  env[k] = NULL;
  for (size_t i = k - JOB_VARS; i < k; i++) {
    if (env[i] == NULL) {
      for (size_t j = k - JOB_VARS; j < k; j++)
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
  for (size_t i = n - JOB_VARS; i < n; i++)
    free(env[i]);
  free(env);
}

/* ---- the program and limits, resolved in the parent --------------------------------- */

/* The PATH execvp searches: the server's (which its processors get too). */
static const char *search_path(void) {
  const char *dirs = getenv("PATH");
  return dirs != NULL ? dirs : "/bin:/usr/bin";
}

/* Finds prog as execvp would (a name with a slash is taken as it is; otherwise the first
 * executable regular file along $PATH, an empty entry meaning the current directory).
 * Done in the parent because the child may not allocate. Returns a malloc'd path, or
 * NULL with *e = ENOENT, EACCES or ENOMEM; denied (may be NULL) gets the first regular
 * file found that is not executable (malloc'd; NULL when none). */
static char *resolve_program(const char *prog, int *e, char **denied) {
  const char *p, *end;
  char *first_denied = NULL;
  if (strchr(prog, '/') != NULL) {
    char *path = mqproc__strdup(prog);
    *e = path == NULL ? ENOMEM : 0;
    return path;
  }
  for (p = search_path();; p = end + 1) {
    struct stat st;
    char *cand;
    int regular;
    end = strchrnul(p, ':');
    cand = end == p ? mqproc__strdup(prog) : mqproc__asprintf("%.*s/%s", (int)(end - p), p, prog);
    if (cand == NULL) {
      free(first_denied);
      *e = ENOMEM;
      return NULL;
    }
    regular = stat(cand, &st) == 0 && S_ISREG(st.st_mode); /* execvp skips directories */
    if (regular && access(cand, X_OK) == 0) {
      free(first_denied);
      return cand;
    }
    if (regular && first_denied == NULL)
      first_denied = cand; /* kept */
    else
      free(cand);
    if (*end == '\0')
      break;
  }
  *e = first_denied != NULL ? EACCES : ENOENT;
  if (denied != NULL)
    *denied = first_denied;
  else
    free(first_denied);
  return NULL;
}

/* The user the server (and so its processors) runs as, for the texts below. */
static const char *user_name(char *buf, size_t n) {
  struct passwd *pw = getpwuid(geteuid());
  if (pw != NULL)
    snprintf(buf, n, "%s", pw->pw_name);
  else
    snprintf(buf, n, "uid %d", (int)geteuid());
  return buf;
}

/* A program named with a slash (relative ones from the current directory), as execve
 * would take it: a regular file this user may execute. */
static int check_path(const char *prog, char *err) {
  char cwd[PATH_MAX] = "", user[64];
  struct stat st;
  const char *where = "";
  if (prog[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL)
    where = cwd;
  if (stat(prog, &st) < 0)
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.300s: %s%s%.300s%s", prog, strerror(errno),
                       where[0] ? " (relative to " : "", where, where[0] ? ")" : "");
  if (S_ISDIR(st.st_mode))
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.300s: is a directory", prog);
  if (!S_ISREG(st.st_mode))
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.300s: not a regular file", prog);
  if (access(prog, X_OK) < 0)
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.300s: not executable by %s (mode %04o)",
                       prog, user_name(user, sizeof(user)), (unsigned)(st.st_mode & 07777));
  return MQPROC_OK;
}

/* Whether the program of --exec can be started, checked once at start: a typo or a
 * missing program is refused with the reason (exit 2) rather than failing every job. It
 * is looked up again per try (resolve_program), so one that goes away later fails its
 * tries with "cannot start". */
static int check_program(const char *prog, char *err) {
  char *found, *denied = NULL, user[64];
  int e = 0;
  if (prog[0] == '\0')
    return mqproc__err(err, MQPROC_ECONFIG, "--exec: the program's name is empty");
  if (strchr(prog, '/') != NULL)
    return check_path(prog, err);
  if ((found = resolve_program(prog, &e, &denied)) != NULL) {
    free(found);
    return MQPROC_OK;
  }
  if (e == ENOMEM)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (denied != NULL) {
    mqproc__err(err, MQPROC_ECONFIG,
                "--exec: %.200s: %.300s is not executable by %s, and no other in PATH (%.300s) "
                "is",
                prog, denied, user_name(user, sizeof(user)), search_path());
    free(denied);
    return MQPROC_ECONFIG;
  }
  return mqproc__err(err, MQPROC_ECONFIG, "--exec: %.200s: not found in PATH (%.600s; user %s)",
                     prog, search_path(), user_name(user, sizeof(user)));
}

/* ---- starting the child ------------------------------------------------------------- */

/* "cannot start X: why" into err, and into the job log for whoever reads only that. */
static int spawn_failed(const char *prog, int log_fd, const mqproc__child_report_t *rep,
                        char *err) {
  char why[MQPROC_ERR_LEN], what[160];
  mqproc__child_report_text(rep, what, sizeof(what));
  snprintf(why, sizeof(why), "cannot start %.300s: %s", prog, what);
  dprintf(log_fd, "mqproc: %s\n", why);
  return mqproc__err(err, MQPROC_ERUNNER_SPAWN, "%s", why);
}

static void on_end(void *ud, const mqproc__spawn_end_t *end);
static void on_time_limit(mqproc__loop_t *loop, void *ud);

/* Everything the processor gets, prepared at the try's start (the spec is the caller's
 * only until start returns): run->plan with the program found, its environment, argv
 * (job_argv, taken; NULL: the --exec words), in_fd (taken). */
static int prepare(proc_runner_t *r, mqproc__run_t *run, const mqproc__run_spec_t *spec,
                   char **job_argv, int in_fd, char *err) {
  mqproc__child_report_t rep = {MQPROC__STAGE_EXEC, 0};
  run->job_argv = job_argv;
  run->in_fd = in_fd;
  run->plan = (mqproc__child_plan_t){.argv = job_argv != NULL ? job_argv : r->argv,
                                     .in_fd = in_fd,
                                     .log_fd = run->log_fd,
                                     .max_log_bytes = spec->max_log_bytes,
                                     .log_inline_max = run->log_kept ? spec->log_inline_max : 0,
                                     .log_dir = spec->log_dir,
                                     .log_sub = spec->log_sub,
                                     .log_name = spec->log_name};
  if ((run->path = resolve_program(r->argv[0], &rep.err, NULL)) == NULL)
    return spawn_failed(r->argv[0], run->log_fd, &rep, err);
  if ((run->env = build_env(spec, r->pass_env, run->lock_path)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  run->plan.path = run->path;
  run->plan.envp = run->env;
  if (getrlimit(RLIMIT_CORE, &run->plan.core) < 0)
    run->plan.core = (struct rlimit){0, 0};
  return MQPROC_OK;
}

/* What prepare() made, once the helper has it (or the try will not run). */
static void unprepare(mqproc__run_t *run) {
  free(run->path);
  free_env(run->env);
  mqproc__argv_free(run->job_argv);
  if (run->in_fd >= 0)
    close(run->in_fd);
  run->path = NULL;
  run->env = run->job_argv = NULL;
  run->in_fd = -1;
}

/* Has the spawn helper start the processor and returns at once (the loop never waits for
 * an execve); a step before the processor's execve that failed comes back as the try's
 * end (on_end). The time limit starts now. */
static int launch(mqproc__run_t *run, char *err) {
  proc_runner_t *r = run->runner;
  mqproc__child_report_t rep = {MQPROC__STAGE_EXEC, 0};
  int failed;
  if (r->spawner == NULL && mqproc__spawner_new(&r->spawner, run->loop, err) != MQPROC_OK)
    return MQPROC_ERUNNER_SPAWN;
  /* the time limit's timer first: once the processor runs, nothing may fail */
  if (run->time_limit_ms > 0 &&
      (run->timer = mqproc__loop_timer(run->loop, run->time_limit_ms, on_time_limit, run)) == 0)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  failed = mqproc__spawner_spawn(r->spawner, &run->plan, on_end, run, &run->id, &rep) < 0;
  unprepare(run);
  if (failed) {
    if (run->timer != 0)
      mqproc__loop_timer_cancel(run->loop, run->timer);
    run->timer = 0;
    return spawn_failed(r->argv[0], run->log_fd, &rep, err);
  }
  run->started_ms = mqproc__now_ms();
  return MQPROC_OK;
}

/* ---- the try ------------------------------------------------------------------------ */

static void run_free(mqproc__run_t *run) {
  unprepare(run);
  if (run->log_fd >= 0)
    close(run->log_fd);
  if (run->lock_fd >= 0)
    close(run->lock_fd);
  free(run->lock_path);
  mqproc__ocrd_check_free(run->check);
  free(run);
}

/* Where the ended try's output is (res): its file, or the memfd's text moved into res or
 * into the file now (common.c: a failure's, on the loop: at most --log-inline-max
 * bytes); lost when the helper could not make the file (log_failed: res says so). */
static void settle_log(mqproc__run_t *run, mqproc__run_result_t *res, int log_failed) {
  if (!run->log_kept)
    res->log_file = 1;
  else if (!log_failed)
    mqproc__runner_log_finish(res, run->log_fd, (size_t)run->log_max, run->log_dir, run->log_sub,
                              run->log_name);
  else
    close(run->log_fd);
  if (run->log_kept)
    run->log_fd = -1;
}

/* The try is over: its result goes to the caller, the run is freed. */
static void finish(mqproc__run_t *run, mqproc__run_result_t *res, int log_failed) {
  settle_log(run, res, log_failed);
  run->done(run->ud, res);
  run_free(run);
}

static void check_work(void *ud) {
  mqproc__run_t *run = ud;
  mqproc__ocrd_check_run(run->check);
}

/* The output check is done: a try whose output is missing failed (said in its log too). */
static void check_after(mqproc__loop_t *loop, void *ud) {
  mqproc__run_t *run = ud;
  (void)loop;
  if (run->check->failed) {
    run->res.status = MQPROC_ERUNNER_FAILED;
    snprintf(run->res.error, sizeof(run->res.error), "%s", run->check->why);
    dprintf(run->log_fd, "mqproc: %s\n", run->check->why);
    MQPROC__WARN("%s", run->check->why);
  }
  finish(run, &run->res, 0);
}

static void look_at_lock(mqproc__loop_t *loop, void *ud);

/* The tries waiting for lock_path look again at once (its holder let go). */
static void wake_waiters(proc_runner_t *r, const char *lock_path) {
  for (mqproc__run_t *w = r->waiting; w != NULL; w = w->next_waiting)
    if (w->look != 0 && strcmp(w->lock_path, lock_path) == 0) {
      mqproc__loop_timer_cancel(w->loop, w->look);
      w->look = mqproc__loop_timer(w->loop, 0, look_at_lock, w);
    }
}

/* The try ended: the helper reaped its processor and killed what its group left behind. */
static void on_end(void *ud, const mqproc__spawn_end_t *end) {
  mqproc__run_t *run = ud;
  mqproc__run_result_t *res = &run->res;
  int log_failed = end->step_failed && end->step.stage == MQPROC__STAGE_JOBLOG;
  memset(res, 0, sizeof(*res));
  if (run->timer != 0)
    mqproc__loop_timer_cancel(run->loop, run->timer);
  run->timer = 0;
  res->duration_ms = mqproc__loop_now(run->loop) - run->started_ms;
  if (log_failed) { /* the processor ran (and was killed): its output is lost */
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s/%s", run->log_dir, run->log_sub, run->log_name);
    snprintf(res->error, sizeof(res->error),
             "cannot open job log %.300s: %.120s (the try's output is lost)", path,
             mqproc__joblog_why(end->step.err));
    res->status = MQPROC_ERUNNER_FAILED;
    res->exit_code = -1;
  } else if (end->step_failed) { /* it never ran */
    res->status = spawn_failed(run->prog, run->log_fd, &end->step, res->error);
    res->exit_code = -1;
  } else if (run->timed_out && WIFSIGNALED(end->wstatus) && WTERMSIG(end->wstatus) == SIGKILL)
    /* a process that exited on its own just as the limit fired keeps its own status */
    mqproc__runner_describe_timeout(run->time_limit_ms, res);
  else
    mqproc__runner_describe(end->wstatus, res);
  if (res->status != MQPROC_OK && end->tail_len > 0) /* why it failed, in its own words */
    mqproc__runner_add_tail(res, end->tail, end->tail_len, end->tail_cut);
  if (run->lock_fd >= 0) { /* the next try of the workspace may go */
    close(run->lock_fd);
    run->lock_fd = -1;
    wake_waiters(run->runner, run->lock_path);
  }
  if (res->status == MQPROC_OK && run->check != NULL && !log_failed &&
      mqproc__loop_work(run->loop, check_work, check_after, run) == MQPROC_OK) {
    run->checking = 1;
    return; /* check_after() finishes it */
  }
  finish(run, res, log_failed);
}

/* The time limit: kill the group now; on_end reports the timeout once the helper has
 * reaped the processor. */
static void on_time_limit(mqproc__loop_t *loop, void *ud) {
  mqproc__run_t *run = ud;
  (void)loop;
  run->timer = 0;
  run->timed_out = 1;
  MQPROC__WARN("processor pid %d exceeded its time limit of %lld ms: killing its process group",
               (int)mqproc__spawner_pid(run->runner->spawner, run->id),
               (long long)run->time_limit_ms);
  mqproc__spawner_kill(run->runner->spawner, run->id, SIGKILL);
}

/* ---- the workspace's lock, for an OCR-D try without a METS server ------------------- */

static void unlink_waiting(mqproc__run_t *run) {
  for (mqproc__run_t **p = &run->runner->waiting; *p != NULL; p = &(*p)->next_waiting)
    if (*p == run) {
      *p = run->next_waiting;
      break;
    }
  run->next_waiting = NULL;
  run->pending = 0;
}

/* A try that never ran ends: why (a failure to lock or to start, or a kill) in its log. */
static void end_unstarted(mqproc__run_t *run, int killed, const char *why) {
  mqproc__run_result_t *res = &run->res;
  memset(res, 0, sizeof(*res));
  res->duration_ms = mqproc__loop_now(run->loop) - run->since_ms;
  if (killed) {
    mqproc__runner_describe(killed & 0x7f, res); /* as if it had died of the signal */
    snprintf(res->error + strlen(res->error), sizeof(res->error) - strlen(res->error),
             " while waiting for the lock on its workspace's METS %.300s", run->lock_path);
  } else {
    res->status = MQPROC_ERUNNER_SPAWN;
    res->exit_code = -1;
    snprintf(res->error, sizeof(res->error), "%s", why);
  }
  dprintf(run->log_fd, "mqproc: %s\n", res->error);
  finish(run, res, 0);
}

/* Another holds the lock: look again later (at once when a try of ours lets it go). */
static int wait_for_lock(mqproc__run_t *run, char *err) {
  proc_runner_t *r = run->runner;
  run->look_ms = run->look_ms == 0                     ? LOCK_LOOK_MS
                 : 2 * run->look_ms > LOCK_LOOK_MAX_MS ? LOCK_LOOK_MAX_MS
                                                       : 2 * run->look_ms;
  if ((run->look = mqproc__loop_timer(run->loop, run->look_ms, look_at_lock, run)) == 0)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  if (!run->pending) {
    run->pending = 1;
    run->next_waiting = r->waiting;
    r->waiting = run;
  }
  return MQPROC_OK;
}

static void look_at_lock(mqproc__loop_t *loop, void *ud) {
  mqproc__run_t *run = ud;
  char err[MQPROC_ERR_LEN];
  int rc;
  (void)loop;
  run->look = 0;
  if (run->killed) {
    unlink_waiting(run);
    end_unstarted(run, run->killed, NULL);
    return;
  }
  rc = mqproc__wslock(run->lock_path, 0, &run->lock_fd, err);
  if (rc == 1 && wait_for_lock(run, err) == MQPROC_OK)
    return;
  unlink_waiting(run);
  if (rc == 0) {
    dprintf(run->log_fd,
            "mqproc: waited %lld ms for the lock on the workspace's METS %s (no METS server: "
            "OCR-D tries of one workspace run one at a time)\n",
            (long long)(mqproc__loop_now(run->loop) - run->since_ms), run->lock_path);
    if (launch(run, err) == MQPROC_OK)
      return;
  }
  end_unstarted(run, 0, err);
}

/* The lock of run's workspace, taken now when it is free: MQPROC_OK (taken, or waited
 * for: run->pending), or an error (the METS cannot be locked) with err. */
static int take_lock(mqproc__run_t *run, char *err) {
  proc_runner_t *r = run->runner;
  int rc = mqproc__wslock(run->lock_path, 0, &run->lock_fd, err);
  if (!r->lock_said) {
    r->lock_said = 1;
    MQPROC__INFO("OCR-D jobs without a METS server run one at a time per workspace, under a lock "
                 "on its METS (%s, ...): page-wise parallelism needs a METS server (docs/ocrd.md)",
                 run->lock_path);
  }
  if (rc < 0 && access(run->lock_path, F_OK) != 0 && errno == ENOENT) {
    /* nothing to lock, nothing to overwrite: the processor says what it misses */
    dprintf(run->log_fd, "mqproc: no METS at %s: the try runs without the workspace lock\n",
            run->lock_path);
    return MQPROC_OK;
  }
  if (rc < 0) {
    dprintf(run->log_fd, "mqproc: %s\n", err);
    return MQPROC_ERUNNER_SPAWN;
  }
  if (rc == 0)
    return MQPROC_OK;
  MQPROC__DEBUG("waiting for the lock on %s: another try of the workspace runs", run->lock_path);
  return wait_for_lock(run, err);
}

/* ---- starting a try ----------------------------------------------------------------- */

static int proc_start(mqproc__runner_t *base, mqproc__loop_t *loop, const mqproc__run_spec_t *spec,
                      mqproc__run_done_cb done, void *ud, mqproc__run_t **out, char *err) {
  proc_runner_t *r = (proc_runner_t *)base;
  mqproc__run_t *run = mqproc__calloc(1, sizeof(*run));
  char **job_argv = NULL, head[512];
  int in_fd = -1, log_fd = -1, rc = MQPROC_ERUNNER_SPAWN, head_len;
  if (run == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  head_len = mqproc__runner_log_head(spec, head, sizeof(head));
  run->log_kept = mqproc__runner_log_inline(spec, head_len);
  run->log_max = spec->log_inline_max;
  run->log_dir = spec->log_dir;
  run->log_sub = spec->log_sub;
  run->log_name = spec->log_name;
  run->loop = loop;
  run->runner = r;
  run->time_limit_ms = spec->time_limit_ms;
  run->done = done;
  run->ud = ud;
  run->prog = r->argv[0];
  run->in_fd = run->lock_fd = -1;
  run->since_ms = mqproc__loop_now(loop);
  if ((log_fd = run->log_kept
                    ? mqproc__runner_log_memfd(head, (size_t)head_len, err)
                    : mqproc__runner_open_log_at(spec->log_dir, spec->log_sub, spec->log_name, head,
                                                 head_len, err)) < 0 ||
      (log_fd = mqproc__runner_lift_fd(log_fd, MQPROC__CHILD_MIN_FD, err)) < 0) {
    free(run);
    return rc;
  }
  run->log_fd = log_fd;
  if ((in_fd = stdin_memfd(spec, err)) < 0 ||
      (in_fd = mqproc__runner_lift_fd(in_fd, MQPROC__CHILD_MIN_FD, err)) < 0)
    goto out_free;
  if (r->ocrd_cli) {
    if (spec->mets_path == NULL) {
      close(in_fd);
      rc = mqproc__err(err, MQPROC_ERUNNER_SPAWN, "an OCR-D processor needs a METS");
      goto out_free;
    }
    if ((rc = mqproc__ocrd_argv(r->argv, spec->msg, spec->mets_path, r->ocrd_log_level,
                                spec->mets_server_url, &job_argv, err)) != MQPROC_OK) {
      close(in_fd);
      goto out_free;
    }
    /* without a METS server, the try writes mets.xml: one try of a workspace at a time */
    if (spec->mets_server_url == NULL && (run->lock_path = mqproc__strdup(spec->mets_path)) == NULL)
      rc = MQPROC_ENOMEM;
    if (r->ocrd_check &&
        (run->check = mqproc__ocrd_check_new(spec->msg, spec->mets_path, spec->mets_server_url)) ==
            NULL &&
        spec->msg->output_file_grps != NULL && json_array_size(spec->msg->output_file_grps) > 0)
      rc = MQPROC_ENOMEM;
    if (rc == MQPROC_ENOMEM) {
      mqproc__argv_free(job_argv);
      close(in_fd);
      mqproc__err(err, rc, "out of memory");
      goto out_free;
    }
  }
  if ((rc = prepare(r, run, spec, job_argv, in_fd, err)) != MQPROC_OK ||
      (run->lock_path != NULL && (rc = take_lock(run, err)) != MQPROC_OK) ||
      (!run->pending && (rc = launch(run, err)) != MQPROC_OK))
    goto out_free;
  *out = run;
  return MQPROC_OK;
out_free:
  if (run->pending)
    unlink_waiting(run);
  if (run->look != 0)
    mqproc__loop_timer_cancel(loop, run->look);
  run_free(run); /* closes log_fd, in_fd and what prepare() made */
  return rc;
}

static void proc_kill(mqproc__runner_t *base, mqproc__run_t *run, int sig) {
  proc_runner_t *r = (proc_runner_t *)base;
  if (run->pending) { /* it never ran: it ends on the loop's next turn, killed */
    run->killed = sig;
    mqproc__loop_timer_cancel(run->loop, run->look);
    run->look = mqproc__loop_timer(run->loop, 0, look_at_lock, run);
    return;
  }
  if (run->checking)
    return; /* the processor has ended */
  mqproc__spawner_kill(r->spawner, run->id, sig);
}

static void proc_destroy(mqproc__runner_t *base) {
  proc_runner_t *r = (proc_runner_t *)base;
  mqproc__spawner_free(r->spawner);
  mqproc__argv_free(r->argv);
  mqproc__argv_free(r->pass_env);
  free(r->ocrd_log_level);
  free(r);
}

static const struct mqproc__runner_class proc_class = {
    "command",    /* name */
    1,            /* killable */
    proc_start,   /* start */
    proc_kill,    /* kill */
    proc_destroy, /* destroy */
};

int mqproc__runner_proc_new(mqproc__runner_t **out, char *const *argv,
                            const mqproc__proc_opts_t *opts, char *err) {
  proc_runner_t *r = mqproc__calloc(1, sizeof(*r));
  int rc;
  if (r == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  r->ocrd_cli = opts != NULL && opts->ocrd_cli;
  r->ocrd_check = r->ocrd_cli && opts->ocrd_check;
  if (mqproc__argv_copy(argv, &r->argv) < 0 || r->argv == NULL ||
      mqproc__argv_copy(opts != NULL ? opts->pass_env : NULL, &r->pass_env) < 0 ||
      (r->ocrd_cli && (r->ocrd_log_level = mqproc__strdup(opts->ocrd_log_level)) == NULL)) {
    mqproc__argv_free(r->argv);
    mqproc__argv_free(r->pass_env);
    free(r);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  r->base.klass = &proc_class;
  if ((rc = check_program(r->argv[0], err)) != MQPROC_OK) {
    proc_destroy(&r->base);
    return rc;
  }
  *out = &r->base;
  return MQPROC_OK;
}
