/* Runner for C processors with --isolation=process: the processing function runs in
 * pre-started worker processes, one per --prefetch slot (like Celery's prefork pool), so
 * a crash fails only its try, a time limit can stop a try, and so can a forced shutdown.
 *
 * Why re-executed, not merely forked: the server is multi-threaded (callback threads), and
 * a forked copy that went on to run arbitrary code could deadlock on a lock another thread
 * held at the fork. So a worker is this very program started again (execve of
 * /proc/self/exe, argv {argv0, "__mqproc-worker"}), which mqproc_main() sends to
 * mqproc__runner_worker_main() (worker_main.c) with the compiled-in processor.
 * Between fork and execve the child makes only async-signal-safe calls (int.h).
 * The worker gets: its socket as fd 3, stdin /dev/null, stdout and stderr = the server's
 * stderr (a job's own output goes to its log), no other fds, default signal dispositions
 * and an empty mask, PR_SET_PDEATHSIG = SIGKILL (it dies with the server), and its own
 * process group (a terminal's Ctrl-C is for the server, which decides when tries stop;
 * a kill reaches whatever the function started).
 *
 * One try: the request (JSON, METS path, worker id) is written into a memfd (never
 * blocks) and one SEQPACKET message carries a small header, the memfd and the job log fd
 * (worker_int.h); the worker answers with one message {rc, duration, error}. A
 * job's first try gets a memfd for its log instead of the file (no file is made for a try
 * that succeeds within --log-inline-max): the server reads it when the try ended, and
 * moves it into the job's log file when the try failed (a crash included).
 *
 * How a try ends, exactly once: at the reply, or when the loop reaps the worker (child
 * watch): "processor crashed: killed by signal 11 (Segmentation fault)". A reply still
 * queued when the worker died counts. EOF on the socket never ends a try: it closes the
 * socket and kills the worker (one that closed its end and lives on is of no use), and
 * the reaping that follows ends the try with the real wait status.
 *
 * A time limit or kill() sends SIGKILL to the worker's group. A dead worker is replaced
 * lazily, when a try needs its slot: a worker that keeps dying at start cannot become a
 * busy fork loop, and the next try pays only one fork + exec. The processing function
 * itself is compiled into the program the worker runs: the runner never calls it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "runner/int.h"
#include "runner/worker_int.h"
#include "base/util.h"

#define STOP_GRACE_MS 3000 /* destroy: how long idle workers get to exit after EOF */

typedef struct worker_runner worker_runner_t;

typedef struct worker {
  worker_runner_t *r;
  pid_t pid;          /* 0: no process (not started, or reaped) */
  int sock;           /* our end of its socket; -1 when closed */
  int doomed;         /* killed, not reaped yet: gets no new try (its last may have replied) */
  mqproc__run_t *run; /* the try it runs; NULL when idle */
} worker_t;

struct worker_runner {
  struct mqproc__runner base; /* first: klass */
  mqproc__loop_t *loop;
  char *argv[3]; /* argv0 (copied), MQPROC_WORKER_COMMAND, NULL */
  char **envp;   /* the server's environment as children get it (mqproc__runner_env) */
  int n;
  worker_t *workers; /* n slots */
};

struct mqproc__run {
  worker_t *w;
  int log_memfd;                            /* the try's output while kept; -1: the file */
  long log_max;                             /* what it keeps stays within this */
  const char *log_dir, *log_sub, *log_name; /* borrowed: the delivery outlives the try */
  int64_t started_ms;
  int64_t time_limit_ms;
  uint64_t timer; /* the time limit; 0 when none is pending */
  int timed_out;  /* the time limit killed the worker */
  int killed;     /* kill() killed the worker */
  mqproc__run_done_cb done;
  void *ud;
};

/* Everything the child needs, prepared before fork (the child may not allocate). */
typedef struct worker_plan {
  const char *path;
  char *const *argv;
  char *const *envp;
  int null_fd, sock_fd; /* both >= MQPROC__CHILD_MIN_FD */
  int report_fd;
  pid_t server;
  int max_fd;
} worker_plan_t;

static char worker_command[] = MQPROC_WORKER_COMMAND;

static void on_readable(mqproc__loop_t *loop, int fd, void *ud);
static void on_exit_(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud);

/* ---- starting a worker -------------------------------------------------------------- */

/* In the child, between fork and execve: async-signal-safe calls only. */
__attribute__((noreturn)) static void worker_child(void *arg) {
  const worker_plan_t *p = arg;
  if (setpgid(0, 0) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_SETPGID);
  mqproc__child_reset_signals(NULL);
  /* The signal follows the forking thread: the loop thread, as long-lived as the server. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_PRCTL);
  if (getppid() != p->server)
    _exit(127); /* the server died before prctl: nothing would tell us later */
  if (dup2(p->null_fd, 0) < 0 || dup2(2, 1) < 0 || dup2(p->sock_fd, MQPROC__WORKER_FD) < 0)
    mqproc__child_fail(p->report_fd, MQPROC__STAGE_DUP2);
  mqproc__child_cloexec_from(MQPROC__WORKER_FD + 1, p->max_fd);
  execve(p->path, p->argv, p->envp);
  mqproc__child_fail(p->report_fd, MQPROC__STAGE_EXEC);
}

static void kill_worker(worker_t *w) {
  w->doomed = 1;
  kill(-w->pid, SIGKILL);
  kill(w->pid, SIGKILL); /* had it left its group: not reaped yet, so the pid is still it */
}

static void close_sock(worker_t *w) {
  mqproc__loop_io(w->r->loop, w->sock, NULL, NULL);
  close(w->sock);
  w->sock = -1;
}

/* Hands a started worker to the loop. The child watch comes first: it cannot be taken
 * back, and once it is set the slot is freed by the reaping whatever happens next. */
static int watch_worker(worker_t *w, pid_t pid, int sock, char *err) {
  if (mqproc__loop_child(w->r->loop, pid, on_exit_, w) != MQPROC_OK) {
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(sock);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  w->pid = pid;
  if (mqproc__loop_io(w->r->loop, sock, on_readable, w) != MQPROC_OK) {
    close(sock);
    kill_worker(w);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  w->sock = sock;
  MQPROC__DEBUG("worker process %d started", (int)pid);
  return MQPROC_OK;
}

/* The fds of a new worker: /dev/null and a socketpair (our end non-blocking), the child's
 * ones moved above the fds it sets up. -1 with why set on failure. */
static int worker_fds(worker_plan_t *plan, int sv[2], char *why) {
  if ((plan->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0 ||
      socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 ||
      fcntl(sv[0], F_SETFL, O_NONBLOCK) < 0)
    return mqproc__err(why, -1, "%s", strerror(errno));
  if ((plan->null_fd = mqproc__runner_lift_fd(plan->null_fd, MQPROC__CHILD_MIN_FD, why)) < 0 ||
      (sv[1] = mqproc__runner_lift_fd(sv[1], MQPROC__CHILD_MIN_FD, why)) < 0)
    return -1;
  plan->sock_fd = sv[1];
  return 0;
}

/* Starts the worker of slot w (which has no process); the reason in err on failure. */
static int spawn_worker(worker_t *w, char *err) {
  worker_plan_t plan = {.path = "/proc/self/exe",
                        .argv = w->r->argv,
                        .envp = w->r->envp,
                        .null_fd = -1,
                        .sock_fd = -1,
                        .server = getpid(),
                        .max_fd = mqproc__runner_max_fd()};
  mqproc__child_report_t rep;
  char why[MQPROC_ERR_LEN];
  int sv[2] = {-1, -1}, failed = worker_fds(&plan, sv, why) < 0;
  pid_t pid;
  if (!failed &&
      (failed = mqproc__runner_fork_exec(worker_child, &plan, &plan.report_fd, &pid, &rep) < 0))
    mqproc__child_report_text(&rep, why, sizeof(why));
  if (plan.null_fd >= 0)
    close(plan.null_fd);
  if (sv[1] >= 0)
    close(sv[1]);
  if (failed) {
    if (sv[0] >= 0)
      close(sv[0]);
    return mqproc__err(err, MQPROC_ERUNNER_SPAWN, "cannot start a worker process: %.400s", why);
  }
  return watch_worker(w, pid, sv[0], err);
}

/* ---- the end of a try --------------------------------------------------------------- */

/* Ends w's try with res. The slot is settled before done runs: done may start the next
 * try, in this slot too. */
static void end_try(worker_t *w, mqproc__run_result_t *res, int log_lost) {
  mqproc__run_t *run = w->run;
  w->run = NULL;
  if (run->timer != 0)
    mqproc__loop_timer_cancel(w->r->loop, run->timer);
  if (run->log_memfd < 0)
    res->log_file = 1;
  else if (log_lost) /* the worker could not make the file: said so, not tried again */
    close(run->log_memfd);
  else
    mqproc__runner_log_finish(res, run->log_memfd, (size_t)run->log_max, run->log_dir, run->log_sub,
                              run->log_name);
  run->done(run->ud, res);
  free(run);
}

static void on_readable(mqproc__loop_t *loop, int fd, void *ud) {
  worker_t *w = ud;
  mqproc__worker_reply_t rep;
  mqproc__run_result_t res;
  int got = mqproc__worker_recv_reply(fd, &rep);
  (void)loop;
  if (got == 0)
    return; /* nothing after all (the fd number may be a new worker's by now) */
  if (got == 1 && w->run != NULL) {
    mqproc__runner_function_result(rep.rc, rep.error, rep.duration_ms, &res);
    end_try(w, &res, rep.log_lost);
    return;
  }
  /* EOF, an error, or a reply nobody asked for: the reaping ends a try it had */
  MQPROC__DEBUG("worker process %d: its socket closed; killing it", (int)w->pid);
  close_sock(w);
  kill_worker(w);
}

static void describe_death(const mqproc__run_t *run, int wstatus, mqproc__run_result_t *res) {
  int by_sigkill = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL;
  memset(res, 0, sizeof(*res));
  if (run->timed_out && by_sigkill)
    mqproc__runner_describe_timeout(run->time_limit_ms, res);
  else if (run->killed && by_sigkill)
    mqproc__runner_describe(wstatus, res); /* stopped on purpose: not a crash */
  else
    mqproc__runner_describe_crash(wstatus, res);
}

/* The loop reaped worker pid: end its try (with a reply it left behind, if any), free the
 * slot for a new worker and kill what the worker left in its group. */
static void on_exit_(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  worker_t *w = ud;
  mqproc__worker_reply_t rep;
  mqproc__run_result_t res;
  int replied = 0;
  if (w->sock >= 0) {
    replied = w->run != NULL && mqproc__worker_recv_reply(w->sock, &rep) == 1;
    close_sock(w);
  }
  w->pid = 0;
  w->doomed = 0;
  kill(-pid, SIGKILL);
  if (w->run == NULL) {
    mqproc__runner_describe(wstatus, &res);
    MQPROC__WARN("idle worker process %d ended (%s); a new one starts with the next try", (int)pid,
                 res.error[0] != '\0' ? res.error : "exit status 0");
    return;
  }
  if (replied) {
    mqproc__runner_function_result(rep.rc, rep.error, rep.duration_ms, &res);
  } else {
    describe_death(w->run, wstatus, &res);
    res.duration_ms = mqproc__loop_now(loop) - w->run->started_ms;
    MQPROC__WARN("worker process %d: %s; a new one starts with the next try", (int)pid, res.error);
  }
  end_try(w, &res, replied && rep.log_lost);
}

/* The time limit: kill the worker now; on_exit_ reports the timeout once it is reaped. */
static void on_time_limit(mqproc__loop_t *loop, void *ud) {
  mqproc__run_t *run = ud;
  (void)loop;
  run->timer = 0;
  run->timed_out = 1;
  MQPROC__WARN("worker process %d exceeded its time limit of %lld ms: killing it", (int)run->w->pid,
               (long long)run->time_limit_ms);
  kill_worker(run->w);
}

/* ---- the runner --------------------------------------------------------------------- */

/* An idle worker, else a slot without a process (to start one in), else NULL. */
static worker_t *pick(worker_runner_t *r) {
  worker_t *empty = NULL;
  for (int i = 0; i < r->n; i++) {
    worker_t *w = &r->workers[i];
    if (w->run == NULL && w->pid > 0 && w->sock >= 0 && !w->doomed)
      return w;
    if (w->pid == 0 && empty == NULL)
      empty = w;
  }
  return empty;
}

/* The try's log: the job's log file, or (a first try: *kept) a memfd the output goes to
 * while it fits; either holds the try's header and the worker's pid. -1 with err. */
static int open_log(worker_t *w, const mqproc__run_spec_t *spec, int *kept, char *err) {
  char head[640];
  int n = mqproc__runner_log_head(spec, head, sizeof(head) - 64);
  n += snprintf(head + n, sizeof(head) - (size_t)n, "mqproc: in worker process %d\n", (int)w->pid);
  if (!(*kept = mqproc__runner_log_inline(spec, n)))
    return mqproc__runner_open_log_at(spec->log_dir, spec->log_sub, spec->log_name, head, n, err);
  return mqproc__runner_log_memfd(head, (size_t)n, err);
}

/* Writes the job log header and hands the try to worker w; run keeps a memfd log. */
static int send_try(worker_t *w, mqproc__run_t *run, const mqproc__run_spec_t *spec, char *err) {
  mqproc__worker_req_t req;
  char *payload;
  size_t len;
  int memfd, log_fd, kept, rc = MQPROC_OK;
  if ((rc = mqproc__worker_pack(spec, &req, &payload, &len, err)) != MQPROC_OK)
    return rc;
  memfd = mqproc__runner_memfd("mqproc-job", payload, len, err);
  free(payload);
  if (memfd < 0)
    return MQPROC_ERUNNER_SPAWN;
  if ((log_fd = open_log(w, spec, &kept, err)) < 0) {
    close(memfd);
    return MQPROC_ERUNNER_SPAWN;
  }
  if (!kept)
    req.log_inline_max = 0; /* the file from the start */
  if (mqproc__worker_send_req(w->sock, &req, memfd, log_fd) < 0) {
    rc = mqproc__err(err, MQPROC_ERUNNER_SPAWN, "cannot hand the job to worker process %d: %s",
                     (int)w->pid, strerror(errno));
    close_sock(w);
    kill_worker(w); /* the reaping frees its slot */
  }
  close(memfd);
  if (kept && rc == MQPROC_OK)
    run->log_memfd = log_fd; /* read when the try ended */
  else
    close(log_fd);
  return rc;
}

static int worker_start(mqproc__runner_t *base, mqproc__loop_t *loop,
                        const mqproc__run_spec_t *spec, mqproc__run_done_cb done, void *ud,
                        mqproc__run_t **out, char *err) {
  worker_runner_t *r = (worker_runner_t *)base;
  worker_t *w = pick(r);
  mqproc__run_t *run;
  int rc;
  (void)loop; /* the runner's own (the server's) */
  if (w == NULL)
    return mqproc__err(err, MQPROC_ERUNNER_SPAWN, "no idle worker process (all %d busy)", r->n);
  if (w->pid == 0 && (rc = spawn_worker(w, err)) != MQPROC_OK)
    return rc;
  if ((run = mqproc__calloc(1, sizeof(*run))) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  *run = (mqproc__run_t){.w = w,
                         .log_memfd = -1,
                         .log_max = spec->log_inline_max,
                         .log_dir = spec->log_dir,
                         .log_sub = spec->log_sub,
                         .log_name = spec->log_name,
                         .started_ms = mqproc__now_ms(),
                         .time_limit_ms = spec->time_limit_ms,
                         .done = done,
                         .ud = ud};
  if (run->time_limit_ms > 0 &&
      (run->timer = mqproc__loop_timer(r->loop, run->time_limit_ms, on_time_limit, run)) == 0) {
    free(run);
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  }
  if ((rc = send_try(w, run, spec, err)) != MQPROC_OK) {
    if (run->timer != 0)
      mqproc__loop_timer_cancel(r->loop, run->timer);
    free(run);
    return rc;
  }
  w->run = run;
  *out = run;
  return MQPROC_OK;
}

static void worker_kill(mqproc__runner_t *base, mqproc__run_t *run, int sig) {
  (void)base;
  (void)sig; /* always SIGKILL: the try ends only when the worker is gone */
  run->killed = 1;
  kill_worker(run->w);
}

/* Waits up to STOP_GRACE_MS for the workers to exit after their EOF (in sanitizer builds
 * they check for leaks on the way out), then kills the rest. waitpid is fine here: the
 * loop is over. */
static void reap_all(worker_runner_t *r) {
  const struct timespec step = {0, 10 * 1000000L};
  int64_t deadline = mqproc__now_ms() + STOP_GRACE_MS;
  for (int i = 0; i < r->n; i++) {
    worker_t *w = &r->workers[i];
    if (w->pid <= 0)
      continue;
    while (waitpid(w->pid, NULL, WNOHANG) == 0) {
      if (mqproc__now_ms() >= deadline) {
        kill_worker(w);
        waitpid(w->pid, NULL, 0);
        break;
      }
      nanosleep(&step, NULL);
    }
    kill(-w->pid, SIGKILL); /* whatever it left in its group */
    w->pid = 0;
  }
}

static void worker_destroy(mqproc__runner_t *base) {
  worker_runner_t *r = (worker_runner_t *)base;
  for (int i = 0; r->workers != NULL && i < r->n; i++) {
    worker_t *w = &r->workers[i];
    if (w->sock >= 0)
      close_sock(w);      /* EOF: an idle worker exits on its own */
    if (w->run != NULL) { /* no try may be in progress; if one is, it ends unreported */
      kill_worker(w);
      if (w->run->timer != 0)
        mqproc__loop_timer_cancel(r->loop, w->run->timer);
      if (w->run->log_memfd >= 0)
        close(w->run->log_memfd);
      free(w->run);
      w->run = NULL;
    }
  }
  if (r->workers != NULL)
    reap_all(r);
  free(r->argv[0]);
  free(r->envp);
  free(r->workers);
  free(r);
}

static const struct mqproc__runner_class worker_class = {
    "worker-process", /* name */
    1,                /* killable */
    worker_start,     /* start */
    worker_kill,      /* kill */
    worker_destroy,   /* destroy */
};

int mqproc__runner_worker_new(mqproc__runner_t **out, mqproc__loop_t *loop,
                              const mqproc_processor_t *processor, int n_workers,
                              char *const *pass_env, char *err) {
  worker_runner_t *r = mqproc__calloc(1, sizeof(*r));
  int rc = MQPROC_OK;
  if (r == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  r->base.klass = &worker_class;
  r->loop = loop;
  r->n = n_workers;
  r->argv[0] = mqproc__strdup(program_invocation_name);
  r->argv[1] = worker_command;
  r->workers = mqproc__calloc((size_t)n_workers, sizeof(worker_t));
  r->envp = mqproc__runner_env(pass_env, 0);
  if (r->argv[0] == NULL || r->workers == NULL || r->envp == NULL)
    rc = mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  for (int i = 0; r->workers != NULL && i < n_workers; i++)
    r->workers[i] = (worker_t){.r = r, .pid = 0, .sock = -1, .run = NULL};
  for (int i = 0; rc == MQPROC_OK && i < n_workers; i++)
    rc = spawn_worker(&r->workers[i], err);
  if (rc != MQPROC_OK) {
    worker_destroy(&r->base);
    return rc;
  }
  MQPROC__INFO("%d worker process%s started for %s (--isolation=process)", n_workers,
               n_workers == 1 ? "" : "es", processor->name);
  *out = &r->base;
  return MQPROC_OK;
}
