/* The event loop: epoll over fds, a signalfd, an eventfd for finished work, and timers.
 *
 * One iteration (mqproc__loop_run):
 *   1. prepare hook (the broker says whether it has buffered frames), then the
 *      before-poll hooks (the store sends what the turn gathered)
 *   2. epoll_wait until the next timer, the prepare limit, or an event
 *   3. dispatch fd events (signals and finished work are fds too)
 *   4. run due timers
 */
#include "loop/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/util.h"

typedef struct io_watch {
  int fd;
  int writable; /* also watched for writability */
  mqproc__io_cb cb;
  void *ud;
  struct io_watch *next;
} io_watch_t;

typedef struct timer {
  uint64_t id;
  int64_t due;
  mqproc__timer_cb cb;
  void *ud;
  struct timer *next;
} timer_t_;

typedef struct child_watch {
  pid_t pid;
  mqproc__child_cb cb;
  void *ud;
  struct child_watch *next;
} child_watch_t;

typedef struct work {
  pthread_t thread; /* its own thread (mqproc__loop_work), or none (pooled) */
  int pooled;
  mqproc__loop_t *loop;
  mqproc__work_cb work;
  mqproc__after_work_cb after;
  void *ud;
  int done;
  struct work *next;
  struct work *queued; /* the pool's queue */
} work_t;

struct mqproc__loop {
  int epfd;
  int sigfd;
  int wakefd;
  int stop;
  int64_t now;
  io_watch_t *ios;
  timer_t_ *timers; /* sorted by due, then id */
  uint64_t next_timer_id;
  child_watch_t *children;
  work_t *works;
  pthread_mutex_t work_lock; /* guards work_t.done, the pool's queue and its stop flag */
  pthread_cond_t pool_cond;  /* the pool's threads wait here for work */
  pthread_t *pool;           /* fixed threads running pooled work (mqproc__loop_pool) */
  int pool_n, pool_stop;
  work_t *pool_head, **pool_tail;
  mqproc__signal_cb sig_cb;
  void *sig_ud;
  mqproc__prepare_cb prepare_cb;
  void *prepare_ud;
  mqproc__loop_hook_t *hooks; /* before-poll hooks, in the order they were added */
};

static int add_fd(mqproc__loop_t *loop, int fd) {
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  return epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev);
}

int mqproc__loop_new(mqproc__loop_t **out, char *err) {
  mqproc__loop_t *loop = mqproc__calloc(1, sizeof(*loop));
  sigset_t set;
  if (loop == NULL)
    return mqproc__err(err, MQPROC_ENOMEM, "out of memory");
  loop->epfd = loop->sigfd = loop->wakefd = -1;
  pthread_mutex_init(&loop->work_lock, NULL);
  pthread_cond_init(&loop->pool_cond, NULL);
  loop->pool_tail = &loop->pool_head;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  signal(SIGPIPE, SIG_IGN);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0)
    goto fail;
  loop->epfd = epoll_create1(EPOLL_CLOEXEC);
  loop->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  loop->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (loop->epfd < 0 || loop->sigfd < 0 || loop->wakefd < 0)
    goto fail;
  if (add_fd(loop, loop->sigfd) < 0 || add_fd(loop, loop->wakefd) < 0)
    goto fail;
  loop->now = mqproc__now_ms();
  *out = loop;
  return MQPROC_OK;
fail:
  mqproc__err(err, MQPROC_ESYS, "event loop setup failed: %s", strerror(errno));
  mqproc__loop_free(loop);
  return MQPROC_ESYS;
}

static void join_finished_work(mqproc__loop_t *loop, int wait_all);

static void pool_stop(mqproc__loop_t *loop);

void mqproc__loop_free(mqproc__loop_t *loop) {
  if (loop == NULL)
    return;
  pool_stop(loop);
  join_finished_work(loop, 1);
  while (loop->ios != NULL) {
    io_watch_t *w = loop->ios;
    loop->ios = w->next;
    free(w);
  }
  while (loop->timers != NULL) {
    timer_t_ *t = loop->timers;
    loop->timers = t->next;
    free(t);
  }
  while (loop->children != NULL) {
    child_watch_t *c = loop->children;
    loop->children = c->next;
    free(c);
  }
  if (loop->epfd >= 0)
    close(loop->epfd);
  if (loop->sigfd >= 0)
    close(loop->sigfd);
  if (loop->wakefd >= 0)
    close(loop->wakefd);
  pthread_mutex_destroy(&loop->work_lock);
  pthread_cond_destroy(&loop->pool_cond);
  free(loop);
}

void mqproc__loop_stop(mqproc__loop_t *loop) {
  loop->stop = 1;
}

int64_t mqproc__loop_now(const mqproc__loop_t *loop) {
  return loop->now;
}

/* ---- fds ---------------------------------------------------------------------------- */

int mqproc__loop_io_write(mqproc__loop_t *loop, int fd, int on) {
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.fd = fd};
  for (io_watch_t *w = loop->ios; w != NULL; w = w->next) {
    if (w->fd != fd)
      continue;
    if (w->writable == on)
      return MQPROC_OK;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
      return MQPROC_ESYS;
    w->writable = on;
    return MQPROC_OK;
  }
  return MQPROC_EINVAL;
}

int mqproc__loop_io(mqproc__loop_t *loop, int fd, mqproc__io_cb cb, void *ud) {
  io_watch_t **pp = &loop->ios, *w;
  for (; *pp != NULL; pp = &(*pp)->next)
    if ((*pp)->fd == fd)
      break;
  if (cb == NULL) {
    if (*pp == NULL)
      return MQPROC_OK;
    w = *pp;
    *pp = w->next;
    free(w);
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL); /* fails harmlessly if fd was closed */
    return MQPROC_OK;
  }
  if (*pp != NULL) {
    (*pp)->cb = cb;
    (*pp)->ud = ud;
    return MQPROC_OK;
  }
  w = mqproc__calloc(1, sizeof(*w));
  if (w == NULL)
    return MQPROC_ENOMEM;
  if (add_fd(loop, fd) < 0) {
    free(w);
    return MQPROC_ESYS;
  }
  w->fd = fd;
  w->cb = cb;
  w->ud = ud;
  w->next = loop->ios;
  loop->ios = w;
  return MQPROC_OK;
}

/* ---- timers ------------------------------------------------------------------------- */

uint64_t mqproc__loop_timer(mqproc__loop_t *loop, int64_t delay_ms, mqproc__timer_cb cb, void *ud) {
  timer_t_ *t = mqproc__calloc(1, sizeof(*t)), **pp;
  if (t == NULL)
    return 0;
  t->id = ++loop->next_timer_id;
  t->due = mqproc__now_ms() + (delay_ms < 0 ? 0 : delay_ms);
  t->cb = cb;
  t->ud = ud;
  for (pp = &loop->timers; *pp != NULL && (*pp)->due <= t->due; pp = &(*pp)->next)
    ;
  t->next = *pp;
  *pp = t;
  return t->id;
}

void mqproc__loop_timer_cancel(mqproc__loop_t *loop, uint64_t id) {
  timer_t_ **pp;
  for (pp = &loop->timers; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->id == id) {
      timer_t_ *t = *pp;
      *pp = t->next;
      free(t);
      return;
    }
  }
}

static void run_timers(mqproc__loop_t *loop) {
  /* Only timers due now run; timers they add run in a later iteration. */
  int64_t now = mqproc__now_ms();
  uint64_t last_id = loop->next_timer_id;
  while (loop->timers != NULL && loop->timers->due <= now && loop->timers->id <= last_id) {
    timer_t_ *t = loop->timers;
    loop->timers = t->next;
    t->cb(loop, t->ud);
    free(t);
  }
}

/* ---- children and signals ----------------------------------------------------------- */

int mqproc__loop_child(mqproc__loop_t *loop, pid_t pid, mqproc__child_cb cb, void *ud) {
  child_watch_t *c = mqproc__calloc(1, sizeof(*c));
  if (c == NULL)
    return MQPROC_ENOMEM;
  c->pid = pid;
  c->cb = cb;
  c->ud = ud;
  c->next = loop->children;
  loop->children = c;
  return MQPROC_OK;
}

void mqproc__loop_child_forget(mqproc__loop_t *loop, pid_t pid) {
  for (child_watch_t **pp = &loop->children; *pp != NULL; pp = &(*pp)->next)
    if ((*pp)->pid == pid) {
      child_watch_t *c = *pp;
      *pp = c->next;
      free(c);
      return;
    }
}

void mqproc__loop_on_signal(mqproc__loop_t *loop, mqproc__signal_cb cb, void *ud) {
  loop->sig_cb = cb;
  loop->sig_ud = ud;
}

static void reap_children(mqproc__loop_t *loop) {
  child_watch_t **pp = &loop->children;
  while (*pp != NULL) {
    child_watch_t *c = *pp;
    int wstatus;
    pid_t r = waitpid(c->pid, &wstatus, WNOHANG);
    if (r == c->pid || (r < 0 && errno == ECHILD)) {
      *pp = c->next;
      c->cb(loop, c->pid, r == c->pid ? wstatus : 0, c->ud);
      free(c);
      pp = &loop->children; /* the callback may have changed the list */
    } else {
      pp = &c->next;
    }
  }
}

static void on_signalfd(mqproc__loop_t *loop) {
  struct signalfd_siginfo si;
  int got_child = 0;
  while (read(loop->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    if (si.ssi_signo == SIGCHLD)
      got_child = 1;
    else if (loop->sig_cb != NULL)
      loop->sig_cb(loop, (int)si.ssi_signo, loop->sig_ud);
  }
  if (got_child)
    reap_children(loop);
}

/* ---- work threads ------------------------------------------------------------------- */

/* Once done is set, the loop's thread may free w at any moment: nothing of w after that. */
static void work_done(work_t *w) {
  uint64_t one = 1;
  mqproc__loop_t *loop = w->loop;
  pthread_mutex_lock(&loop->work_lock);
  w->done = 1;
  pthread_mutex_unlock(&loop->work_lock);
  if (write(loop->wakefd, &one, sizeof(one)) < 0) {
    /* eventfd write fails only on counter overflow; the loop still polls. */
  }
}

static void *work_main(void *arg) {
  work_t *w = arg;
  w->work(w->ud);
  work_done(w);
  return NULL;
}

/* A pool thread: runs queued work until the pool stops. */
static void *pool_main(void *arg) {
  mqproc__loop_t *loop = arg;
  for (;;) {
    work_t *w;
    pthread_mutex_lock(&loop->work_lock);
    while (loop->pool_head == NULL && !loop->pool_stop)
      pthread_cond_wait(&loop->pool_cond, &loop->work_lock);
    if (loop->pool_head == NULL) {
      pthread_mutex_unlock(&loop->work_lock);
      return NULL;
    }
    w = loop->pool_head;
    loop->pool_head = w->queued;
    if (loop->pool_head == NULL)
      loop->pool_tail = &loop->pool_head;
    pthread_mutex_unlock(&loop->work_lock);
    w->work(w->ud);
    work_done(w);
  }
}

int mqproc__loop_pool(mqproc__loop_t *loop, int n) {
  if (loop->pool != NULL)
    return MQPROC_ESTATE;
  if ((loop->pool = mqproc__calloc((size_t)n, sizeof(pthread_t))) == NULL)
    return MQPROC_ENOMEM;
  for (; loop->pool_n < n; loop->pool_n++)
    if (pthread_create(&loop->pool[loop->pool_n], NULL, pool_main, loop) != 0)
      return loop->pool_n > 0 ? MQPROC_OK : MQPROC_ESYS; /* fewer threads still serve */
  return MQPROC_OK;
}

static void pool_stop(mqproc__loop_t *loop) {
  pthread_mutex_lock(&loop->work_lock);
  loop->pool_stop = 1;
  pthread_cond_broadcast(&loop->pool_cond);
  pthread_mutex_unlock(&loop->work_lock);
  for (int i = 0; i < loop->pool_n; i++)
    pthread_join(loop->pool[i], NULL);
  free(loop->pool);
  loop->pool = NULL;
  loop->pool_n = 0;
}

int mqproc__loop_work_pooled(mqproc__loop_t *loop, mqproc__work_cb work,
                             mqproc__after_work_cb after, void *ud) {
  work_t *w;
  if (loop->pool == NULL)
    return mqproc__loop_work(loop, work, after, ud);
  if ((w = mqproc__calloc(1, sizeof(*w))) == NULL)
    return MQPROC_ENOMEM;
  w->pooled = 1;
  w->loop = loop;
  w->work = work;
  w->after = after;
  w->ud = ud;
  w->next = loop->works;
  loop->works = w;
  pthread_mutex_lock(&loop->work_lock);
  *loop->pool_tail = w;
  loop->pool_tail = &w->queued;
  pthread_cond_signal(&loop->pool_cond);
  pthread_mutex_unlock(&loop->work_lock);
  return MQPROC_OK;
}

int mqproc__loop_work(mqproc__loop_t *loop, mqproc__work_cb work, mqproc__after_work_cb after,
                      void *ud) {
  work_t *w = mqproc__calloc(1, sizeof(*w));
  if (w == NULL)
    return MQPROC_ENOMEM;
  w->loop = loop;
  w->work = work;
  w->after = after;
  w->ud = ud;
  if (pthread_create(&w->thread, NULL, work_main, w) != 0) {
    free(w);
    return MQPROC_ESYS;
  }
  w->next = loop->works;
  loop->works = w;
  return MQPROC_OK;
}

/* Joins finished work threads and runs their after() callbacks (all of them, waiting,
 * when wait_all: used at shutdown, where after() is skipped). */
static void join_finished_work(mqproc__loop_t *loop, int wait_all) {
  work_t **pp = &loop->works;
  while (*pp != NULL) {
    work_t *w = *pp;
    int done;
    pthread_mutex_lock(&loop->work_lock);
    done = w->done;
    pthread_mutex_unlock(&loop->work_lock);
    if (!done && !wait_all) {
      pp = &w->next;
      continue;
    }
    if (!w->pooled) /* pooled work is done by now: the pool was stopped (drained) first */
      pthread_join(w->thread, NULL);
    *pp = w->next;
    if (!wait_all)
      w->after(loop, w->ud);
    free(w);
    pp = &loop->works; /* after() may have queued new work */
  }
}

static void on_wakefd(mqproc__loop_t *loop) {
  uint64_t n;
  if (read(loop->wakefd, &n, sizeof(n)) < 0) {
    /* EAGAIN: nothing pending */
  }
  join_finished_work(loop, 0);
}

/* ---- the loop ----------------------------------------------------------------------- */

void mqproc__loop_set_prepare(mqproc__loop_t *loop, mqproc__prepare_cb cb, void *ud) {
  loop->prepare_cb = cb;
  loop->prepare_ud = ud;
}

void mqproc__loop_before_poll(mqproc__loop_t *loop, mqproc__loop_hook_t *hook,
                              mqproc__prepare_cb cb, void *ud) {
  mqproc__loop_hook_t **t = &loop->hooks;
  while (*t != NULL)
    t = &(*t)->next;
  hook->cb = cb;
  hook->ud = ud;
  hook->next = NULL;
  *t = hook;
}

void mqproc__loop_before_poll_stop(mqproc__loop_t *loop, mqproc__loop_hook_t *hook) {
  for (mqproc__loop_hook_t **t = &loop->hooks; *t != NULL; t = &(*t)->next)
    if (*t == hook) {
      *t = hook->next;
      return;
    }
}

static int poll_timeout(mqproc__loop_t *loop) {
  int timeout = -1;
  if (loop->prepare_cb != NULL)
    timeout = loop->prepare_cb(loop, loop->prepare_ud);
  for (mqproc__loop_hook_t *h = loop->hooks, *next; h != NULL; h = next) {
    int wait;
    next = h->next; /* a hook may stop itself */
    wait = h->cb(loop, h->ud);
    if (wait >= 0 && (timeout < 0 || wait < timeout))
      timeout = wait;
  }
  if (loop->timers != NULL) {
    int64_t wait = loop->timers->due - mqproc__now_ms();
    if (wait < 0)
      wait = 0;
    if (timeout < 0 || wait < timeout)
      timeout = (int)(wait > 60000 ? 60000 : wait);
  }
  return timeout;
}

static void dispatch(mqproc__loop_t *loop, int fd) {
  io_watch_t *w;
  if (fd == loop->sigfd) {
    on_signalfd(loop);
    return;
  }
  if (fd == loop->wakefd) {
    on_wakefd(loop);
    return;
  }
  for (w = loop->ios; w != NULL; w = w->next) {
    if (w->fd == fd) {
      w->cb(loop, fd, w->ud);
      return;
    }
  }
}

int mqproc__loop_run(mqproc__loop_t *loop) {
  struct epoll_event evs[16];
  loop->stop = 0;
  while (!loop->stop) {
    int timeout = poll_timeout(loop);
    int n = epoll_wait(loop->epfd, evs, (int)MQPROC__ARRAY_LEN(evs), timeout);
    if (n < 0 && errno != EINTR)
      return MQPROC_ESYS;
    loop->now = mqproc__now_ms();
    for (int i = 0; i < n && !loop->stop; i++)
      dispatch(loop, evs[i].data.fd);
    if (!loop->stop)
      run_timers(loop);
  }
  return MQPROC_OK;
}
