/* The supervisor of --instances (see supervisor.h). Single-threaded, one loop: children
 * are watched through the loop's SIGCHLD handling, restarts are timers, signals come as
 * loop events.
 *
 * Restart policy: a child that ran for STABLE_MS or longer and then died is started again
 * at once (a kill -9, an OOM kill: back within a fraction of a second); one that dies
 * sooner is in a crash loop and waits 1 s, doubling up to 60 s, before each start (the
 * delay is logged and the child gets it as MQPROC_RESTARTS / MQPROC_RESTART_DELAY_MS, which
 * its workers row shows). A child that exits 0 drained (an operator's `mqproc drain`) and
 * stays down; MQPROC__EXIT_RECYCLE (--max-jobs-per-child) restarts it at once; 2 (a
 * configuration error) stops them all.
 *
 * systemd: the children report to the supervisor's own notify socket; the supervisor says
 * READY=1 once every child did, STATUS= with the count of live instances, STOPPING=1 and
 * the watchdog pings for the whole group. Under a watchdog (WATCHDOG_USEC) each child gets
 * the same interval with WATCHDOG_PID its own pid, so its loop pings the supervisor; the
 * supervisor passes WATCHDOG=1 on only while every child that has begun pinging pinged
 * within the interval. A child silent longer than that (a frozen loop) is killed with
 * SIGKILL and started again like any dead child; one that does not die within another
 * interval stops the pings, and systemd restarts the whole group.
 *
 * --http ADDR:PORT with a port: instance k serves on PORT + k - 1 (mqproc__instance_http),
 * so every instance can listen. */
#include "server/supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "loop/loop.h"
#include "server/notify.h"
#include "base/util.h"

#define STABLE_MS 10000
#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000

typedef struct child {
  struct sup *sup;
  int instance; /* 1-based */
  pid_t pid;    /* 0: not running */
  int64_t started_ms;
  int64_t backoff_ms; /* the next crash-loop delay */
  int64_t last_delay; /* the delay before the current start */
  int restarts;
  int ready; /* sent READY=1 */
  int done;  /* drained (exit 0): not restarted */
  uint64_t timer;
  int64_t pinged_ms; /* its last WATCHDOG=1 (0: none yet since it started) */
  int64_t killed_ms; /* killed for its silence (0: not) */
} child_t;

typedef struct sup {
  const mqproc__config_t *cfg;
  mqproc__loop_t *loop;
  char exe[4096];
  char **argv;
  child_t *kids;
  int n;
  int stopping;
  int signals;
  int exit_code;
  int notify_fd; /* the children's $NOTIFY_SOCKET, -1 when not under systemd */
  char notify_name[108];
  int told_ready;
  uint64_t watchdog_timer;
  int64_t watchdog_ms;    /* the pings' interval: half of WATCHDOG_USEC (0: no watchdog) */
  char watchdog_usec[24]; /* WATCHDOG_USEC, passed on to the children */
  int watchdog_held;      /* a ping was held back (logged once until they ping again) */
} sup_t;

static void start_child(sup_t *s, child_t *c);

static int live(const sup_t *s) {
  int n = 0;
  for (int i = 0; i < s->n; i++)
    n += s->kids[i].pid > 0 || s->kids[i].timer != 0; /* running, or waiting to restart */
  return n;
}

static void tell_systemd(sup_t *s) {
  char text[160];
  int ready = 0;
  if (s->notify_fd < 0)
    return;
  for (int i = 0; i < s->n; i++)
    ready += s->kids[i].pid > 0 && s->kids[i].ready;
  snprintf(text, sizeof(text), "%sSTATUS=%d of %d instances running, %d ready",
           !s->told_ready && ready == s->n && !s->stopping ? "READY=1\n" : "", live(s), s->n,
           ready);
  s->told_ready |= ready == s->n;
  if (!s->stopping)
    mqproc__sd_notify(text);
}

static void on_restart_timer(mqproc__loop_t *loop, void *ud) {
  child_t *c = ud;
  (void)loop;
  c->timer = 0;
  if (!c->sup->stopping)
    start_child(c->sup, c);
}

static void on_child_exit(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud) {
  child_t *c = ud;
  sup_t *s = c->sup;
  int64_t ran = mqproc__now_ms() - c->started_ms, delay = 0;
  int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1;
  c->pid = 0;
  c->ready = 0;
  c->pinged_ms = c->killed_ms = 0;
  if (s->stopping) {
    MQPROC__INFO("instance %d (pid %d) stopped", c->instance, (int)pid);
    if (live(s) == 0)
      mqproc__loop_stop(loop);
    return;
  }
  if (code == 0) {
    MQPROC__INFO("instance %d (pid %d) drained and exited: not restarted", c->instance, (int)pid);
    c->done = 1;
    if (live(s) == 0)
      mqproc__loop_stop(loop);
    tell_systemd(s);
    return;
  }
  if (code == 2) {
    MQPROC__ERROR("instance %d (pid %d) reported a configuration error: stopping all", c->instance,
                  (int)pid);
    s->exit_code = 2;
    s->stopping = 1;
    for (int i = 0; i < s->n; i++) {
      if (s->kids[i].timer != 0)
        mqproc__loop_timer_cancel(loop, s->kids[i].timer);
      s->kids[i].timer = 0;
      if (s->kids[i].pid > 0)
        kill(s->kids[i].pid, SIGTERM);
    }
    if (live(s) == 0)
      mqproc__loop_stop(loop);
    return;
  }
  if (code == MQPROC__EXIT_RECYCLE) {
    MQPROC__INFO("instance %d (pid %d) recycled after --max-jobs-per-child: starting a new one",
                 c->instance, (int)pid);
    c->backoff_ms = BACKOFF_MIN_MS;
  } else {
    if (ran >= STABLE_MS) {
      c->backoff_ms = BACKOFF_MIN_MS; /* it had been running fine: back at once */
    } else {
      delay = c->backoff_ms;
      c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    }
    c->restarts++;
    if (WIFSIGNALED(wstatus))
      MQPROC__WARN("instance %d (pid %d) killed by signal %d (%s) after %lld ms: restart %d in "
                   "%lld ms",
                   c->instance, (int)pid, WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)),
                   (long long)ran, c->restarts, (long long)delay);
    else
      MQPROC__WARN(
          "instance %d (pid %d) exited with status %d after %lld ms: restart %d in %lld ms",
          c->instance, (int)pid, code, (long long)ran, c->restarts, (long long)delay);
  }
  tell_systemd(s);
  c->last_delay = delay;
  if (delay == 0)
    start_child(s, c);
  else
    c->timer = mqproc__loop_timer(loop, delay, on_restart_timer, c);
}

static void start_child(sup_t *s, child_t *c) {
  char inst[16], restarts[16], delay[24];
  pid_t pid, parent;
  snprintf(inst, sizeof(inst), "%d", c->instance);
  snprintf(restarts, sizeof(restarts), "%d", c->restarts);
  snprintf(delay, sizeof(delay), "%lld", (long long)c->last_delay);
  parent = getpid();
  pid = fork();
  if (pid < 0) {
    MQPROC__ERROR("instance %d: cannot fork: %s; trying again in 1 s", c->instance,
                  strerror(errno));
    c->timer = mqproc__loop_timer(s->loop, 1000, on_restart_timer, c);
    return;
  }
  if (pid == 0) { /* the supervisor is single-threaded: anything goes before execv */
    sigset_t none;
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* the supervisor died: stop gracefully */
    if (getppid() != parent)          /* it died before that took effect */
      _exit(1);
    setpgid(0, 0); /* a terminal's Ctrl-C reaches the supervisor only, which forwards it once */
    setenv(MQPROC__INSTANCE_ENV, inst, 1);
    setenv("MQPROC_RESTARTS", restarts, 1);
    setenv("MQPROC_RESTART_DELAY_MS", delay, 1);
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    if (s->notify_fd >= 0 && s->watchdog_ms > 0) { /* it pings us (on_notify) */
      char self[16];
      snprintf(self, sizeof(self), "%d", (int)getpid());
      setenv("WATCHDOG_USEC", s->watchdog_usec, 1);
      setenv("WATCHDOG_PID", self, 1);
    }
    if (s->notify_fd >= 0)
      setenv("NOTIFY_SOCKET", s->notify_name, 1);
    else /* systemd's socket accepts the supervisor only (NotifyAccess=main) */
      unsetenv("NOTIFY_SOCKET");
    signal(SIGPIPE, SIG_DFL);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execv(s->exe, s->argv);
    fprintf(stderr, "mqproc: instance %d: cannot run %s: %s\n", c->instance, s->exe,
            strerror(errno));
    _exit(127);
  }
  c->pid = pid;
  c->started_ms = mqproc__now_ms();
  c->pinged_ms = c->killed_ms = 0;
  mqproc__loop_child(s->loop, pid, on_child_exit, c);
  MQPROC__INFO("instance %d started (pid %d)", c->instance, (int)pid);
}

/* A child's notification: READY=1 marks it ready, WATCHDOG=1 says its loop turns. The
 * sender is known by its pid (SO_PASSCRED). */
static void on_notify(mqproc__loop_t *loop, int fd, void *ud) {
  sup_t *s = ud;
  (void)loop;
  for (;;) {
    char buf[512], ctl[CMSG_SPACE(sizeof(struct ucred))];
    struct iovec iov = {buf, sizeof(buf) - 1};
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl)};
    struct cmsghdr *cm;
    ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
    pid_t from = 0;
    if (n < 0)
      return;
    buf[n] = '\0';
    for (cm = CMSG_FIRSTHDR(&m); cm != NULL; cm = CMSG_NXTHDR(&m, cm))
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
        struct ucred cred;
        memcpy(&cred, CMSG_DATA(cm), sizeof(cred));
        from = cred.pid;
      }
    for (int i = 0; i < s->n; i++) {
      if (from <= 0 || s->kids[i].pid != from)
        continue;
      if (strstr(buf, "WATCHDOG=1") != NULL)
        s->kids[i].pinged_ms = mqproc__now_ms();
      if (strstr(buf, "READY=1") != NULL) {
        s->kids[i].ready = 1;
        tell_systemd(s);
      }
    }
  }
}

/* Whether child c's loop still turns, as far as the watchdog goes: it pinged within the
 * interval (WATCHDOG_USEC), or has not begun pinging (starting up: waiting for the
 * database at start, as systemd's watchdog waits for READY=1), or is gone. One silent
 * longer is killed to be started again; it counts as live again once killed, unless it
 * does not die within another interval. */
static int child_turns(sup_t *s, child_t *c, int64_t now) {
  int64_t limit = 2 * s->watchdog_ms;
  if (c->pid <= 0 || c->pinged_ms == 0 || now - c->pinged_ms <= limit)
    return 1;
  if (c->killed_ms == 0) {
    MQPROC__WARN("instance %d (pid %d) sent no watchdog ping for %lld ms (WATCHDOG_USEC is "
                 "%s): its loop is stuck; killing it (SIGKILL) to start it again",
                 c->instance, (int)c->pid, (long long)(now - c->pinged_ms), s->watchdog_usec);
    kill(c->pid, SIGKILL);
    c->killed_ms = now;
  }
  return now - c->killed_ms <= limit;
}

static void on_watchdog(mqproc__loop_t *loop, void *ud) {
  sup_t *s = ud;
  int64_t now = mqproc__now_ms();
  int turns = 1;
  for (int i = 0; i < s->n; i++)
    turns &= child_turns(s, &s->kids[i], now);
  if (turns)
    mqproc__sd_notify("WATCHDOG=1");
  else if (!s->watchdog_held)
    MQPROC__ERROR("an instance killed for its silence is still there: no more watchdog pings, "
                  "so systemd restarts the whole service");
  s->watchdog_held = !turns;
  s->watchdog_timer = mqproc__loop_timer(loop, s->watchdog_ms, on_watchdog, s);
}

/* Under systemd: a socket of our own for the children's notifications. */
static void open_notify(sup_t *s) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  int one = 1;
  s->notify_fd = -1;
  if (getenv("NOTIFY_SOCKET") == NULL)
    return;
  if ((s->watchdog_ms = mqproc__sd_watchdog_ms() / 2) > 0) {
    snprintf(s->watchdog_usec, sizeof(s->watchdog_usec), "%s", getenv("WATCHDOG_USEC"));
    s->watchdog_timer = mqproc__loop_timer(s->loop, 0, on_watchdog, s);
  }
  snprintf(s->notify_name, sizeof(s->notify_name), "@mqproc-supervisor-%d-%lld", (int)getpid(),
           (long long)mqproc__now_ms());
  memcpy(sa.sun_path + 1, s->notify_name + 1, strlen(s->notify_name) - 1);
  if ((s->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0 ||
      setsockopt(s->notify_fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0 ||
      bind(s->notify_fd, (struct sockaddr *)&sa,
           (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(s->notify_name))) != 0 ||
      mqproc__loop_io(s->loop, s->notify_fd, on_notify, s) != MQPROC_OK) {
    MQPROC__WARN("no notify socket for the instances (%s): READY=1 is sent at once",
                 strerror(errno));
    if (s->notify_fd >= 0)
      close(s->notify_fd);
    s->notify_fd = -1;
    mqproc__sd_notify("READY=1");
  }
}

static void on_signal(mqproc__loop_t *loop, int signo, void *ud) {
  sup_t *s = ud;
  if (signo == SIGHUP) {
    MQPROC__INFO("SIGHUP ignored");
    return;
  }
  s->signals++;
  if (!s->stopping) {
    MQPROC__INFO("%s: stopping every instance (their running jobs finish first)", strsignal(signo));
    mqproc__sd_notify("STOPPING=1");
  }
  s->stopping = 1;
  for (int i = 0; i < s->n; i++) {
    if (s->kids[i].timer != 0)
      mqproc__loop_timer_cancel(loop, s->kids[i].timer);
    s->kids[i].timer = 0;
    if (s->kids[i].pid > 0)
      kill(s->kids[i].pid, signo == SIGINT ? SIGINT : SIGTERM);
  }
  if (live(s) == 0)
    mqproc__loop_stop(loop);
}

/* --http's port (the text after the last ':'), 0 when it is none or 0: nothing to move. */
static long http_port(const char *http, size_t *host_len) {
  const char *colon = http != NULL ? strrchr(http, ':') : NULL;
  char *end;
  long port;
  if (colon == NULL || colon[1] == '\0')
    return 0;
  errno = 0;
  port = strtol(colon + 1, &end, 10);
  if (errno != 0 || *end != '\0' || port <= 0 || port > 65535)
    return 0; /* not a port: the server's own check explains it */
  *host_len = (size_t)(colon - http);
  return port;
}

int mqproc__instance_http(mqproc__config_t *cfg, int instance, char *err) {
  size_t host_len = 0;
  long port = http_port(cfg->http, &host_len);
  char *moved;
  if (port == 0 || instance <= 1)
    return MQPROC_OK;
  if (port + instance - 1 > 65535)
    return mqproc__err(err, MQPROC_ECONFIG,
                       "--http %s with --instances: instance %d would serve on port %ld, "
                       "beyond 65535",
                       cfg->http, instance, port + instance - 1);
  if ((moved = mqproc__asprintf("%.*s:%ld", (int)host_len, cfg->http, port + instance - 1)) == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  free(cfg->http);
  cfg->http = moved;
  return MQPROC_OK;
}

int mqproc__supervise(const mqproc__config_t *cfg, int argc, char **argv) {
  sup_t s;
  char err[MQPROC_ERR_LEN];
  size_t host_len = 0;
  long port = http_port(cfg->http, &host_len);
  ssize_t n;
  (void)argc;
  if (port > 0 && port + cfg->instances - 1 > 65535) {
    MQPROC__ERROR("--http %s with --instances %d: instance k serves on port %ld + k - 1, and "
                  "the last would be beyond 65535",
                  cfg->http, cfg->instances, port);
    return 2;
  }
  if (port > 0)
    MQPROC__INFO("--http %s: instance k serves on port %ld + k - 1 (%ld to %ld)", cfg->http, port,
                 port, port + cfg->instances - 1);
  memset(&s, 0, sizeof(s));
  s.cfg = cfg;
  s.argv = argv;
  s.n = cfg->instances;
  if ((n = readlink("/proc/self/exe", s.exe, sizeof(s.exe) - 1)) <= 0) {
    MQPROC__ERROR("cannot find the own program (/proc/self/exe): %s", strerror(errno));
    return 1;
  }
  s.exe[n] = '\0';
  if (mqproc__loop_new(&s.loop, err) != MQPROC_OK) {
    MQPROC__ERROR("cannot start the supervisor: %s", err);
    return 1;
  }
  if ((s.kids = mqproc__calloc((size_t)s.n, sizeof(*s.kids))) == NULL) {
    mqproc__loop_free(s.loop);
    return 1;
  }
  mqproc__loop_on_signal(s.loop, on_signal, &s);
  open_notify(&s);
  MQPROC__INFO("supervising %d instances of %s", s.n, cfg->processor);
  for (int i = 0; i < s.n; i++) {
    s.kids[i] = (child_t){.sup = &s, .instance = i + 1, .backoff_ms = BACKOFF_MIN_MS};
    start_child(&s, &s.kids[i]);
  }
  mqproc__loop_run(s.loop);
  for (int i = 0; i < s.n; i++) /* the loop ended early (an epoll error): take them along */
    if (s.kids[i].pid > 0) {
      kill(s.kids[i].pid, SIGTERM);
      waitpid(s.kids[i].pid, NULL, 0);
    }
  MQPROC__INFO("supervisor stopped");
  if (s.notify_fd >= 0)
    close(s.notify_fd);
  free(s.kids);
  mqproc__loop_free(s.loop);
  return s.exit_code;
}
