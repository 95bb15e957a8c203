/* Unit tests for the loop's work threads (src/loop/loop.c): a fixed pool runs every piece of
 * work once and hands each back to the loop's thread (after()), also when many end at the
 * same moment (under the sanitizers, a pool thread touching work the loop already freed
 * shows up here); one-off threads likewise. The hand-offs are batched: a batch of finished
 * work wakes the loop once, queued work wakes an idle thread at most once, and after()
 * runs in the order the work finished. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "loop/loop.h"
#include "base/util.h"

typedef struct {
  mqproc__loop_t *loop;
  pthread_t loop_thread;
  atomic_int worked;
  int after, wrong_thread, total;
} count_t;

static void work(void *ud) {
  count_t *c = ud;
  atomic_fetch_add(&c->worked, 1);
}

static void after(mqproc__loop_t *loop, void *ud) {
  count_t *c = ud;
  c->wrong_thread += !pthread_equal(pthread_self(), c->loop_thread);
  if (++c->after == c->total)
    mqproc__loop_stop(loop);
}

static void run_works(int pool, int total) {
  char err[MQPROC_ERR_LEN];
  count_t c = {.loop_thread = pthread_self(), .total = total};
  cr_assert_eq(mqproc__loop_new(&c.loop, err), MQPROC_OK, "%s", err);
  if (pool > 0)
    cr_assert_eq(mqproc__loop_pool(c.loop, pool), MQPROC_OK);
  for (int i = 0; i < total; i++)
    cr_assert_eq(mqproc__loop_work_pooled(c.loop, work, after, &c), MQPROC_OK);
  mqproc__loop_run(c.loop);
  cr_expect_eq(atomic_load(&c.worked), total, "each piece of work ran once");
  cr_expect_eq(c.after, total, "each came back to the loop once");
  cr_expect_eq(c.wrong_thread, 0, "after() runs on the loop's thread");
  mqproc__loop_free(c.loop);
}

Test(loop, a_pool_runs_every_piece_of_work_once_and_hands_it_back) {
  run_works(8, 100000);
}

Test(loop, without_a_pool_each_piece_of_work_gets_its_own_thread) {
  run_works(0, 200);
}

/* ---- batched hand-offs ------------------------------------------------------------------ */

/* Work that waits at a gate until the test opens it, then notes the order it ran in. */
typedef struct {
  mqproc__loop_t *loop;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open;
  int total, ran, after;
  int ran_order[64], after_order[64];
  int pool;
  int idle_seen; /* the timer saw every pool thread idle again in time */
} gate_t;

typedef struct {
  gate_t *g;
  int i;
} gated_t;

static void gated_work(void *ud) {
  gated_t *w = ud;
  pthread_mutex_lock(&w->g->lock);
  while (!w->g->open)
    pthread_cond_wait(&w->g->cond, &w->g->lock);
  w->g->ran_order[w->g->ran++] = w->i;
  pthread_mutex_unlock(&w->g->lock);
}

static void gated_after(mqproc__loop_t *loop, void *ud) {
  gated_t *w = ud;
  w->g->after_order[w->g->after++] = w->i;
  if (w->g->after == w->g->total)
    mqproc__loop_stop(loop);
}

/* On the loop's thread: opens the gate and holds the loop until every piece of work has
 * finished (every pool thread waits for work again), so they all finish in one batch. */
static void open_and_hold(mqproc__loop_t *loop, void *ud) {
  gate_t *g = ud;
  mqproc__loop_stats_t st;
  int64_t deadline = mqproc__now_ms() + 20000;
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
  do {
    sched_yield();
    mqproc__loop_get_stats(loop, &st);
  } while (st.pool_idle < g->pool && mqproc__now_ms() < deadline);
  g->idle_seen = st.pool_idle == g->pool;
}

/* Queues total gated pieces of work on a pool of n threads, opens the gate from a timer
 * and runs the loop until every after() ran; st gets the loop's counts. */
static void run_gated(gate_t *g, int pool, int total, mqproc__loop_stats_t *st) {
  char err[MQPROC_ERR_LEN];
  gated_t w[64];
  *g = (gate_t){.total = total, .pool = pool};
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  cr_assert_eq(mqproc__loop_new(&g->loop, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__loop_pool(g->loop, pool), MQPROC_OK);
  for (int i = 0; i < total; i++) {
    w[i] = (gated_t){g, i};
    cr_assert_eq(mqproc__loop_work_pooled(g->loop, gated_work, gated_after, &w[i]), MQPROC_OK);
  }
  cr_assert_neq(mqproc__loop_timer(g->loop, 0, open_and_hold, g), 0);
  mqproc__loop_run(g->loop);
  mqproc__loop_get_stats(g->loop, st);
  cr_assert(g->idle_seen, "the pool threads went idle after the last piece of work");
  cr_expect_eq(g->after, total, "each piece of work came back once");
  mqproc__loop_free(g->loop);
  pthread_cond_destroy(&g->cond);
  pthread_mutex_destroy(&g->lock);
}

Test(loop, work_finished_in_one_batch_wakes_the_loop_once) {
  gate_t g;
  mqproc__loop_stats_t st;
  run_gated(&g, 4, 64, &st);
  cr_expect_eq(st.wake_writes, 1, "one eventfd write for the batch, not one per piece (%llu)",
               (unsigned long long)st.wake_writes);
}

Test(loop, queued_work_wakes_each_idle_thread_at_most_once) {
  gate_t g;
  mqproc__loop_stats_t st;
  run_gated(&g, 8, 64, &st);
  /* the 8 threads take the first 8 pieces (woken once each, or never slept); the other 56
   * are taken by threads as they finish, without a wake */
  cr_expect_leq(st.pool_wakes, 8, "at most one wake per idle thread, not one per piece (%llu)",
                (unsigned long long)st.pool_wakes);
}

Test(loop, after_runs_in_the_order_the_work_finished) {
  gate_t g;
  mqproc__loop_stats_t st;
  run_gated(&g, 1, 10, &st);
  for (int i = 0; i < 10; i++) {
    cr_expect_eq(g.ran_order[i], i, "one thread runs the queue in order");
    cr_expect_eq(g.after_order[i], g.ran_order[i], "after() %d in the order the work finished", i);
  }
}
