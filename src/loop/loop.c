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
#include <semaphore.h>
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
  struct work *prev, *next; /* every work not yet handed back (the loop's thread only) */
  struct work *link;        /* the pool's queue, then the finished list (under work_lock) */
} work_t;

/* A pool thread; an idle one waits on its own semaphore, on the pool's idle stack. */
typedef struct pool_thread {
  pthread_t thread;
  sem_t wake;
  mqproc__loop_t *loop;
  struct pool_thread *next_idle;
} pool_thread_t;

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
  work_t *works;             /* not yet handed back, newest first (the loop's thread only) */
  pthread_mutex_t work_lock; /* guards the pool's queue, the finished list and the counts */
  pool_thread_t *pool;       /* fixed threads running pooled work (mqproc__loop_pool) */
  int pool_n, pool_stop;
  pool_thread_t *pool_idle_top; /* idle threads, each waiting on its semaphore */
  int pool_idle;                /* how many */
  int pool_waking;              /* threads woken (taken off the stack) not yet running */
  work_t *pool_head, **pool_tail;
  work_t *finished;           /* finished work, newest first; the first one in writes the eventfd */
  mqproc__loop_stats_t stats; /* the counts of the threads' hand-offs (under work_lock) */
  uint64_t turns;             /* the loop's own (its thread only) */
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

/* Hand-offs are batched both ways, to spend as few system calls and wake-ups per piece of
 * work as possible:
 *   - loop -> pool: queued work wakes an idle thread only when no wake is on its way
 *     already; a woken thread that leaves work in the queue wakes the next idle one (the
 *     wakes form a chain off the loop's thread), and a thread that finishes takes the next
 *     queued work before it would sleep;
 *   - pool -> loop: finished work goes on one list, and only the first one onto an empty
 *     list writes the eventfd; the loop takes the whole list at once (one lock) and runs
 *     the after() callbacks in the order the work finished. */

/* Under work_lock: puts finished work on the list; returns whether the loop must be woken
 * (the list was empty: nobody woke it for this batch yet). Once w is on the list the
 * loop's thread may free it at any moment: nothing of w after that. */
static int finish_locked(mqproc__loop_t *loop, work_t *w) {
  int first = loop->finished == NULL;
  w->link = loop->finished;
  loop->finished = w;
  if (first)
    loop->stats.wake_writes++;
  return first;
}

static void wake_loop(mqproc__loop_t *loop) {
  uint64_t one = 1;
  if (write(loop->wakefd, &one, sizeof(one)) < 0) {
    /* eventfd write fails only on counter overflow; the loop still polls. */
  }
}

static void *work_main(void *arg) {
  work_t *w = arg;
  mqproc__loop_t *loop = w->loop;
  int wake;
  w->work(w->ud);
  pthread_mutex_lock(&loop->work_lock);
  wake = finish_locked(loop, w);
  pthread_mutex_unlock(&loop->work_lock);
  if (wake)
    wake_loop(loop);
  return NULL;
}

/* Under work_lock: the idle pool thread to wake for queued work (NULL: none): not when a
 * wake is already on its way (the woken thread passes it on while work is left) or no
 * thread is idle (a running one takes the work when it finishes). The caller posts its
 * semaphore after unlocking. A semaphore, not a condition variable: a thread woken from
 * pthread_cond_wait() takes the mutex back marked contended, which costs one more futex
 * call per hand-off when it unlocks. */
static pool_thread_t *pool_wake_due_locked(mqproc__loop_t *loop) {
  pool_thread_t *t = loop->pool_idle_top;
  if (loop->pool_head == NULL || t == NULL || loop->pool_waking > 0)
    return NULL;
  loop->pool_idle_top = t->next_idle;
  loop->pool_idle--;
  loop->pool_waking++;
  loop->stats.pool_wakes++;
  return t;
}

static void pool_post(pool_thread_t *t) {
  if (t != NULL)
    sem_post(&t->wake);
}

/* A pool thread: runs queued work until the pool stops and its queue is empty. Finishing
 * one piece of work and taking the next is one hold of the lock. */
static void *pool_main(void *arg) {
  pool_thread_t *self = arg;
  mqproc__loop_t *loop = self->loop;
  work_t *w = NULL;
  int wake = 0;
  pthread_mutex_lock(&loop->work_lock);
  for (;;) {
    pool_thread_t *next = NULL;
    if (w != NULL)
      wake = finish_locked(loop, w) || wake;
    if (loop->pool_head == NULL && !loop->pool_stop) { /* idle until a waker posts */
      self->next_idle = loop->pool_idle_top;
      loop->pool_idle_top = self;
      loop->pool_idle++;
      pthread_mutex_unlock(&loop->work_lock);
      if (wake)
        wake_loop(loop); /* the loop hears of the finished work before this one sleeps */
      wake = 0;
      w = NULL;
      while (sem_wait(&self->wake) != 0 && errno == EINTR)
        ;
      pthread_mutex_lock(&loop->work_lock);
      loop->pool_waking--; /* the waker took this one off the stack */
      continue;
    }
    w = loop->pool_head;
    if (w != NULL) {
      loop->pool_head = w->link;
      if (loop->pool_head == NULL)
        loop->pool_tail = &loop->pool_head;
      next = pool_wake_due_locked(loop); /* work left: the next idle thread */
    }
    pthread_mutex_unlock(&loop->work_lock);
    pool_post(next);
    if (wake)
      wake_loop(loop);
    wake = 0;
    if (w == NULL)
      return NULL; /* stopped, and the queue is empty */
    w->work(w->ud);
    pthread_mutex_lock(&loop->work_lock);
  }
}

int mqproc__loop_pool(mqproc__loop_t *loop, int n) {
  if (loop->pool != NULL)
    return MQPROC_ESTATE;
  if ((loop->pool = mqproc__calloc((size_t)n, sizeof(pool_thread_t))) == NULL)
    return MQPROC_ENOMEM;
  for (; loop->pool_n < n; loop->pool_n++) {
    pool_thread_t *t = &loop->pool[loop->pool_n];
    t->loop = loop;
    if (sem_init(&t->wake, 0, 0) != 0)
      break;
    if (pthread_create(&t->thread, NULL, pool_main, t) != 0) {
      sem_destroy(&t->wake);
      break;
    }
  }
  if (loop->pool_n == 0) { /* no pool: work gets threads of its own */
    free(loop->pool);
    loop->pool = NULL;
    return MQPROC_ESYS;
  }
  return MQPROC_OK; /* fewer threads than asked still serve */
}

/* Wakes every idle thread to see the stop; the others see it when they finish. */
static void pool_stop(mqproc__loop_t *loop) {
  pool_thread_t *idle;
  pthread_mutex_lock(&loop->work_lock);
  loop->pool_stop = 1;
  idle = loop->pool_idle_top;
  loop->pool_idle_top = NULL;
  loop->pool_waking += loop->pool_idle;
  loop->pool_idle = 0;
  pthread_mutex_unlock(&loop->work_lock);
  for (pool_thread_t *t = idle, *next; t != NULL; t = next) {
    next = t->next_idle;
    pool_post(t);
  }
  for (int i = 0; i < loop->pool_n; i++) {
    pthread_join(loop->pool[i].thread, NULL);
    sem_destroy(&loop->pool[i].wake);
  }
  free(loop->pool);
  loop->pool = NULL;
  loop->pool_n = 0;
}

static work_t *work_new(mqproc__loop_t *loop, mqproc__work_cb work, mqproc__after_work_cb after,
                        void *ud) {
  work_t *w = mqproc__calloc(1, sizeof(*w));
  if (w == NULL)
    return NULL;
  w->loop = loop;
  w->work = work;
  w->after = after;
  w->ud = ud;
  return w;
}

/* On the loop's thread: w is outstanding until join_finished_work() hands it back. */
static void works_add(mqproc__loop_t *loop, work_t *w) {
  w->next = loop->works;
  if (w->next != NULL)
    w->next->prev = w;
  loop->works = w;
}

static void works_remove(mqproc__loop_t *loop, work_t *w) {
  if (w->prev != NULL)
    w->prev->next = w->next;
  else
    loop->works = w->next;
  if (w->next != NULL)
    w->next->prev = w->prev;
}

int mqproc__loop_work_pooled(mqproc__loop_t *loop, mqproc__work_cb work,
                             mqproc__after_work_cb after, void *ud) {
  work_t *w;
  pool_thread_t *next;
  if (loop->pool == NULL)
    return mqproc__loop_work(loop, work, after, ud);
  if ((w = work_new(loop, work, after, ud)) == NULL)
    return MQPROC_ENOMEM;
  w->pooled = 1;
  works_add(loop, w);
  pthread_mutex_lock(&loop->work_lock);
  *loop->pool_tail = w;
  loop->pool_tail = &w->link;
  next = pool_wake_due_locked(loop);
  pthread_mutex_unlock(&loop->work_lock);
  pool_post(next);
  return MQPROC_OK;
}

int mqproc__loop_work(mqproc__loop_t *loop, mqproc__work_cb work, mqproc__after_work_cb after,
                      void *ud) {
  work_t *w = work_new(loop, work, after, ud);
  if (w == NULL)
    return MQPROC_ENOMEM;
  if (pthread_create(&w->thread, NULL, work_main, w) != 0) {
    free(w);
    return MQPROC_ESYS;
  }
  works_add(loop, w);
  return MQPROC_OK;
}

/* Hands finished work back: takes the finished list at once and runs each after() in the
 * order the work finished (after() may queue new work: it goes on the next list). With
 * wait_all (shutdown, the pool already stopped and drained), waits for every thread still
 * running and frees all work without calling after(). */
static void join_finished_work(mqproc__loop_t *loop, int wait_all) {
  work_t *done, *in_order = NULL;
  pthread_mutex_lock(&loop->work_lock);
  done = loop->finished;
  loop->finished = NULL;
  pthread_mutex_unlock(&loop->work_lock);
  while (done != NULL) { /* newest first: reverse */
    work_t *w = done;
    done = w->link;
    w->link = in_order;
    in_order = w;
  }
  while (in_order != NULL) {
    work_t *w = in_order;
    in_order = w->link;
    if (!w->pooled)
      pthread_join(w->thread, NULL); /* it is past its last touch of w */
    works_remove(loop, w);
    if (!wait_all)
      w->after(loop, w->ud);
    free(w);
  }
  while (wait_all && loop->works != NULL) {
    work_t *w = loop->works;
    if (!w->pooled)
      pthread_join(w->thread, NULL);
    works_remove(loop, w);
    free(w);
  }
  if (wait_all)
    loop->finished = NULL; /* the threads just joined put freed work there */
}

static void on_wakefd(mqproc__loop_t *loop) {
  uint64_t n;
  /* read first, then take the list: work finishing in between finds the list non-empty
   * and writes nothing, and is taken with the rest */
  if (read(loop->wakefd, &n, sizeof(n)) < 0) {
    /* EAGAIN: nothing pending */
  }
  join_finished_work(loop, 0);
}

void mqproc__loop_get_stats(mqproc__loop_t *loop, mqproc__loop_stats_t *out) {
  pthread_mutex_lock(&loop->work_lock);
  *out = loop->stats;
  out->pool_idle = loop->pool_idle;
  pthread_mutex_unlock(&loop->work_lock);
  out->turns = loop->turns;
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
    loop->turns++;
    loop->now = mqproc__now_ms();
    for (int i = 0; i < n && !loop->stop; i++)
      dispatch(loop, evs[i].data.fd);
    if (!loop->stop)
      run_timers(loop);
  }
  return MQPROC_OK;
}
