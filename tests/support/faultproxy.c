/* The fault proxy of faultproxy.h: one thread polls the listener and every connection
 * pair; the mode is read on each pass. */
#include "faultproxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAIRS 64
#define BUF 65536

typedef struct chunk {
  struct chunk *next;
  long long due_ms; /* FP_DELAY: when it may be written */
  size_t len, off;
  char data[];
} chunk_t;

typedef struct side {
  int fd;
  int ended;               /* read EOF or an error while blackholing: kept open, no longer polled */
  chunk_t *out, *out_tail; /* what waits to be written to fd */
} side_t;

typedef struct pair {
  side_t s[2]; /* 0: the client's, 1: the target's */
  int used;
} pair_t;

struct faultproxy {
  int listen_fd, port, target_port;
  atomic_int mode, delay_ms, stop, reset, accepted;
  pthread_t thread;
  pair_t pairs[MAX_PAIRS];
};

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void close_pair(pair_t *pr, int rst) {
  for (int i = 0; i < 2; i++) {
    if (rst) {
      struct linger l = {1, 0};
      setsockopt(pr->s[i].fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(pr->s[i].fd);
    while (pr->s[i].out != NULL) {
      chunk_t *c = pr->s[i].out;
      pr->s[i].out = c->next;
      free(c);
    }
    pr->s[i].out_tail = NULL;
  }
  pr->used = 0;
}

static int dial(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                          .sin_port = htons((uint16_t)port)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static void accept_one(faultproxy_t *p) {
  int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC), t;
  if (c < 0)
    return;
  atomic_fetch_add(&p->accepted, 1);
  if ((t = dial(p->target_port)) < 0) {
    close(c);
    return;
  }
  for (int i = 0; i < MAX_PAIRS; i++)
    if (!p->pairs[i].used) {
      p->pairs[i] = (pair_t){.s = {{.fd = c}, {.fd = t}}, .used = 1};
      return;
    }
  close(c);
  close(t);
}

/* Reads what side `from` of pr has and queues it for the other side (or drops it). */
static int pump_in(faultproxy_t *p, pair_t *pr, int from, int mode) {
  char buf[BUF];
  ssize_t n = read(pr->s[from].fd, buf, sizeof(buf));
  side_t *to = &pr->s[1 - from];
  chunk_t *c;
  if (n <= 0)
    return n == 0 || (errno != EINTR && errno != EAGAIN) ? -1 : 0;
  if (mode == FP_BLACKHOLE || (mode == FP_ONE_WAY && from == 1))
    return 0;
  if ((c = malloc(sizeof(*c) + (size_t)n)) == NULL)
    return -1;
  c->next = NULL;
  c->len = (size_t)n;
  c->off = 0;
  c->due_ms = now_ms() + (mode == FP_DELAY ? atomic_load(&p->delay_ms) : 0);
  memcpy(c->data, buf, (size_t)n);
  if (to->out_tail != NULL)
    to->out_tail->next = c;
  else
    to->out = c;
  to->out_tail = c;
  return 0;
}

static int pump_out(side_t *s) {
  while (s->out != NULL && s->out->due_ms <= now_ms()) {
    chunk_t *c = s->out;
    ssize_t n = send(s->fd, c->data + c->off, c->len - c->off, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0)
      return errno == EAGAIN ? 0 : -1;
    c->off += (size_t)n;
    if (c->off < c->len)
      return 0;
    s->out = c->next;
    if (s->out == NULL)
      s->out_tail = NULL;
    free(c);
  }
  return 0;
}

static void *run(void *arg) {
  faultproxy_t *p = arg;
  while (!atomic_load(&p->stop)) {
    struct pollfd fds[1 + 2 * MAX_PAIRS];
    int idx[1 + 2 * MAX_PAIRS], n = 0, mode = atomic_load(&p->mode);
    if (atomic_exchange(&p->reset, 0))
      for (int i = 0; i < MAX_PAIRS; i++)
        if (p->pairs[i].used)
          close_pair(&p->pairs[i], 1);
    fds[n] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
    idx[n++] = -1;
    for (int i = 0; i < MAX_PAIRS; i++) {
      pair_t *pr = &p->pairs[i];
      if (pr->used && mode != FP_BLACKHOLE && (pr->s[0].ended || pr->s[1].ended))
        close_pair(pr, 0); /* the blackhole is over: the FIN it held back goes through */
      if (!pr->used)
        continue;
      for (int k = 0; k < 2; k++) {
        const side_t *s = &pr->s[k];
        /* frozen or ended: not polled at all (a hung-up socket would report POLLHUP
         * forever); POLLOUT only once the first chunk is due (delay mode) */
        int polled = mode != FP_FREEZE && !s->ended;
        short ev = POLLIN;
        if (s->out != NULL && s->out->due_ms <= now_ms())
          ev |= POLLOUT;
        fds[n] = (struct pollfd){.fd = polled ? s->fd : -1, .events = ev};
        idx[n++] = i * 2 + k;
      }
    }
    if (poll(fds, (nfds_t)n, 10) < 0 && errno != EINTR)
      break;
    for (int j = 0; j < n; j++) {
      pair_t *pr;
      int k, bad = 0;
      if (idx[j] < 0) {
        if (fds[j].revents & POLLIN)
          accept_one(p);
        continue;
      }
      pr = &p->pairs[idx[j] / 2];
      k = idx[j] % 2;
      if (!pr->used || fds[j].fd < 0)
        continue;
      if (fds[j].revents & (POLLIN | POLLHUP | POLLERR))
        bad = pump_in(p, pr, k, mode) < 0;
      if (!bad)
        bad = pump_out(&pr->s[k]) < 0;
      if (bad && mode == FP_BLACKHOLE) /* a real blackhole passes no FIN either */
        pr->s[k].ended = 1;
      else if (bad)
        close_pair(pr, 0);
    }
  }
  return NULL;
}

faultproxy_t *fp_start(int target_port) {
  faultproxy_t *p = calloc(1, sizeof(*p));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  if (p == NULL)
    return NULL;
  p->target_port = target_port;
  p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
      listen(p->listen_fd, 64) != 0 ||
      getsockname(p->listen_fd, (struct sockaddr *)&a, &len) != 0) {
    close(p->listen_fd);
    free(p);
    return NULL;
  }
  p->port = ntohs(a.sin_port);
  pthread_create(&p->thread, NULL, run, p);
  return p;
}

int fp_port(const faultproxy_t *p) {
  return p->port;
}

void fp_set_mode(faultproxy_t *p, fp_mode_t mode) {
  atomic_store(&p->mode, (int)mode);
}

void fp_set_delay(faultproxy_t *p, int ms) {
  atomic_store(&p->delay_ms, ms);
}

void fp_reset(faultproxy_t *p) {
  atomic_store(&p->reset, 1);
  while (atomic_load(&p->reset))
    usleep(1000);
}

int fp_accepted(faultproxy_t *p) {
  return atomic_load(&p->accepted);
}

void fp_stop(faultproxy_t *p) {
  if (p == NULL)
    return;
  atomic_store(&p->stop, 1);
  pthread_join(p->thread, NULL);
  for (int i = 0; i < MAX_PAIRS; i++)
    if (p->pairs[i].used)
      close_pair(&p->pairs[i], 0);
  close(p->listen_fd);
  free(p);
}
