/* Unit tests for the loop's work threads (src/loop.c): a fixed pool runs every piece of
 * work once and hands each back to the loop's thread (after()), also when many end at the
 * same moment (under the sanitizers, a pool thread touching work the loop already freed
 * shows up here); one-off threads likewise. */
#include <criterion/criterion.h>
#include <pthread.h>
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
