/* The event loop: one epoll instance that owns every fd, timer, signal and child of a
 * server process.
 *
 * API:
 *   mqproc__loop_new() / _free() / _run() / _stop()
 *   mqproc__loop_io()            watch an fd (readable), or stop watching it (cb NULL)
 *   mqproc__loop_io_write()      also (or no longer) call the fd's cb when it is writable
 *   mqproc__loop_timer()         one-shot timer in ms; _timer_cancel()
 *   mqproc__loop_child()         call cb when a child pid exits (reaped here)
 *   mqproc__loop_on_signal()     SIGTERM/SIGINT/SIGHUP delivered as loop events
 *   mqproc__loop_work()          run work() on a new thread, then after() on the loop
 *   mqproc__loop_pool()          start a fixed pool of threads for _work_pooled()
 *   mqproc__loop_work_pooled()   run work() on a pool thread, then after() on the loop
 *   mqproc__loop_set_prepare()   hook run before every poll; returns a max wait (ms)
 *   mqproc__loop_get_stats()     counts of loop turns and thread hand-offs
 *   mqproc__loop_before_poll()   more such hooks, after it (a module's end of a loop turn)
 *
 * Threading: only mqproc__loop_work()'s work function runs off the loop thread, and it
 * must not call any loop function; its completion is posted back through an eventfd
 * (the one door between threads, as libuv's uv_async_send).
 *
 * Signals: mqproc__loop_new() blocks SIGCHLD, SIGTERM, SIGINT, SIGHUP in the calling
 * thread (call it before any thread exists) and reads them from a signalfd; it ignores
 * SIGPIPE. Children must restore both (mqproc__child_reset_signals() in runner/common.c;
 * an --exec try's processor: runner/spawn/helper.c).
 */
#ifndef MQPROC_LOOP_H
#define MQPROC_LOOP_H

#include <stdint.h>
#include <sys/types.h>

typedef struct mqproc__loop mqproc__loop_t;

typedef void (*mqproc__io_cb)(mqproc__loop_t *loop, int fd, void *ud);
typedef void (*mqproc__timer_cb)(mqproc__loop_t *loop, void *ud);
typedef void (*mqproc__child_cb)(mqproc__loop_t *loop, pid_t pid, int wstatus, void *ud);
typedef void (*mqproc__signal_cb)(mqproc__loop_t *loop, int signo, void *ud);
typedef void (*mqproc__work_cb)(void *ud);
typedef void (*mqproc__after_work_cb)(mqproc__loop_t *loop, void *ud);
/* Returns the longest the loop may sleep in ms (-1 = no limit, 0 = do not sleep). */
typedef int (*mqproc__prepare_cb)(mqproc__loop_t *loop, void *ud);

int mqproc__loop_new(mqproc__loop_t **out, char *err);
/* Frees the loop. Work threads still running are joined first. */
void mqproc__loop_free(mqproc__loop_t *loop);
/* Runs until mqproc__loop_stop(); returns 0 or an error from epoll. */
int mqproc__loop_run(mqproc__loop_t *loop);
void mqproc__loop_stop(mqproc__loop_t *loop);

/* Watches fd for readability (and errors); cb NULL removes the watch. One watch per fd. */
int mqproc__loop_io(mqproc__loop_t *loop, int fd, mqproc__io_cb cb, void *ud);
/* Whether the watched fd's cb also runs when fd is writable (a non-blocking writer waiting
 * for room); MQPROC_EINVAL when fd is not watched. */
int mqproc__loop_io_write(mqproc__loop_t *loop, int fd, int on);

/* One-shot timer; returns its id (> 0) or 0 when out of memory. */
uint64_t mqproc__loop_timer(mqproc__loop_t *loop, int64_t delay_ms, mqproc__timer_cb cb, void *ud);
/* Cancels a pending timer; unknown or fired ids are ignored. */
void mqproc__loop_timer_cancel(mqproc__loop_t *loop, uint64_t id);

/* Calls cb once when pid exits (the loop reaps it). */
int mqproc__loop_child(mqproc__loop_t *loop, pid_t pid, mqproc__child_cb cb, void *ud);
/* Drops the watch of pid (its cb is not called): the caller reaps pid itself. */
void mqproc__loop_child_forget(mqproc__loop_t *loop, pid_t pid);

void mqproc__loop_on_signal(mqproc__loop_t *loop, mqproc__signal_cb cb, void *ud);

/* Starts a thread running work(ud); when it returns, after(loop, ud) runs on the loop.
 * If this returns an error neither callback is called. */
int mqproc__loop_work(mqproc__loop_t *loop, mqproc__work_cb work, mqproc__after_work_cb after,
                      void *ud);

/* Starts n threads, created once, that run _work_pooled() work in order. */
int mqproc__loop_pool(mqproc__loop_t *loop, int n);
/* Like mqproc__loop_work(), on the pool (a new thread when there is none). */
int mqproc__loop_work_pooled(mqproc__loop_t *loop, mqproc__work_cb work,
                             mqproc__after_work_cb after, void *ud);

void mqproc__loop_set_prepare(mqproc__loop_t *loop, mqproc__prepare_cb cb, void *ud);

/* What the loop and its work threads did so far: the system calls and wake-ups they cost
 * (tests and measurements; read on the loop's thread). */
typedef struct mqproc__loop_stats {
  uint64_t turns;       /* epoll_wait calls that returned */
  uint64_t wake_writes; /* eventfd writes telling the loop that work finished (one per batch) */
  uint64_t pool_wakes;  /* pool threads woken for queued work (one per batch; a woken thread
                           wakes the next while work is left) */
  int pool_idle;        /* pool threads waiting for work now */
} mqproc__loop_stats_t;
void mqproc__loop_get_stats(mqproc__loop_t *loop, mqproc__loop_stats_t *out);
/* A hook of a module below the loop's owner, run before every poll after the prepare hook
 * (in the order they were added), so it sees all that the loop turn made, the prepare
 * hook's work included: the PostgreSQL store sends the requests a turn gathered as one
 * round there. Its cb returns a max wait as the prepare hook's does. The caller owns the
 * struct and keeps it until _before_poll_stop(); a cb must not stop another hook. */
typedef struct mqproc__loop_hook {
  mqproc__prepare_cb cb;
  void *ud;
  struct mqproc__loop_hook *next; /* private */
} mqproc__loop_hook_t;
void mqproc__loop_before_poll(mqproc__loop_t *loop, mqproc__loop_hook_t *hook,
                              mqproc__prepare_cb cb, void *ud);
void mqproc__loop_before_poll_stop(mqproc__loop_t *loop, mqproc__loop_hook_t *hook);

/* Current loop time (monotonic ms, refreshed once per iteration). */
int64_t mqproc__loop_now(const mqproc__loop_t *loop);

#endif
