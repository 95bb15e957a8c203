/* systemd notifications (see notify.h). The server keeps what it last told systemd
 * (struct mqproc__sd, owned by the server) and says only what changed. */
#include "server/notify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/fleet.h"
#include "base/log.h"
#include "base/util.h"

int mqproc__sd_notify(const char *text) {
  const char *path = getenv("NOTIFY_SOCKET");
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t n, len;
  ssize_t rc;
  int fd;
  if (path == NULL || path[0] == '\0')
    return 0;
  n = strlen(path);
  if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path)) {
    errno = EINVAL;
    return -1;
  }
  memcpy(sa.sun_path, path, n);
  if (path[0] == '@')
    sa.sun_path[0] = '\0'; /* abstract namespace */
  len = offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/' ? 1 : 0);
  if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0)
    return -1;
  do
    rc = sendto(fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa, (socklen_t)len);
  while (rc < 0 && errno == EINTR);
  close(fd);
  return rc < 0 ? -1 : 1;
}

int64_t mqproc__sd_watchdog_ms(void) {
  const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
  char *end;
  long long us;
  if (usec == NULL || (pid != NULL && atoll(pid) != (long long)getpid()))
    return 0;
  errno = 0;
  us = strtoll(usec, &end, 10);
  if (errno != 0 || *end != '\0' || us <= 0)
    return 0;
  return us / 1000 > 0 ? us / 1000 : 1;
}

struct mqproc__sd {
  int ready;           /* READY=1 sent */
  int stopping;        /* STOPPING=1 sent */
  int failed;          /* a send failed: logged once */
  int64_t watchdog_ms; /* the timer's interval: half of WATCHDOG_USEC */
  uint64_t timer;
  char status[128]; /* the last STATUS= sent */
};

static void send_text(mqproc__server_t *srv, const char *text) {
  if (mqproc__sd_notify(text) < 0 && !srv->sd->failed) {
    srv->sd->failed = 1;
    MQPROC__WARN("cannot notify systemd through $NOTIFY_SOCKET: %s", strerror(errno));
  }
}

static void on_watchdog(mqproc__loop_t *loop, void *ud) {
  mqproc__server_t *srv = ud;
  send_text(srv, "WATCHDOG=1");
  srv->sd->timer = mqproc__loop_timer(loop, srv->sd->watchdog_ms, on_watchdog, srv);
}

void mqproc__sd_start(mqproc__server_t *srv) {
  const char *path = getenv("NOTIFY_SOCKET");
  if (path == NULL || path[0] == '\0' || (srv->sd = mqproc__calloc(1, sizeof(*srv->sd))) == NULL)
    return;
  /* what this server runs (an --exec command, its children) must not talk to systemd
     as if it were us: the children's environment is clean already; keep it so */
  if ((srv->sd->watchdog_ms = mqproc__sd_watchdog_ms() / 2) > 0) {
    MQPROC__INFO("systemd watchdog: WATCHDOG=1 every %lld ms", (long long)srv->sd->watchdog_ms);
    srv->sd->timer = mqproc__loop_timer(srv->loop, 0, on_watchdog, srv);
  }
}

/* What the server does now, for STATUS=. */
static void status_of(const mqproc__server_t *srv, char *out, size_t n) {
  if (!srv->broker_up)
    snprintf(out, n, "broker down: reconnecting");
  else if (srv->window.store_paused)
    snprintf(out, n, "database down: waiting for it");
  else if (srv->stopping)
    snprintf(out, n, "draining: %d job(s) left", srv->inflight.running);
  else if (mqproc__fleet_holds_back(srv->fleet))
    snprintf(out, n, "paused%s", srv->inflight.running > 0 ? ": finishing the jobs in hand" : "");
  else if (srv->inflight.running > 0)
    snprintf(out, n, "%d job(s) running", srv->inflight.running);
  else
    snprintf(out, n, "idle");
}

void mqproc__sd_update(mqproc__server_t *srv) {
  char status[128], text[160];
  int ready;
  if (srv->sd == NULL || srv->sd->stopping)
    return;
  status_of(srv, status, sizeof(status));
  /* ready: connected with the topology declared, and the database answered */
  ready = !srv->sd->ready && srv->broker_up && mqproc__fleet_store_seen(srv->fleet) &&
          !srv->window.store_paused;
  if (!ready && strcmp(status, srv->sd->status) == 0)
    return;
  snprintf(text, sizeof(text), "%sSTATUS=%s", ready ? "READY=1\n" : "", status);
  send_text(srv, text);
  snprintf(srv->sd->status, sizeof(srv->sd->status), "%s", status);
  srv->sd->ready |= ready;
}

void mqproc__sd_stopping(mqproc__server_t *srv) {
  if (srv->sd == NULL || srv->sd->stopping)
    return;
  srv->sd->stopping = 1;
  send_text(srv, srv->inflight.running > 0
                     ? "STOPPING=1\nSTATUS=stopping: finishing the jobs in hand"
                     : "STOPPING=1\nSTATUS=stopping");
}

void mqproc__sd_free(mqproc__server_t *srv) {
  if (srv->sd == NULL)
    return;
  if (srv->sd->timer != 0)
    mqproc__loop_timer_cancel(srv->loop, srv->sd->timer);
  free(srv->sd);
  srv->sd = NULL;
}
