/* Unit: the delivery state machine's decisions (policy.c) and the job state table. */
#include <criterion/criterion.h>
#include <string.h>

#include "delivery/policy.h"

static mqproc__claim_t row(int claimed, const char *state) {
  mqproc__claim_t c;
  memset(&c, 0, sizeof(c));
  c.claimed = claimed;
  strcpy(c.state, state);
  return c;
}

Test(policy, a_claimed_job_runs) {
  mqproc__claim_t c = row(1, "RUNNING");
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_RUN);
}

Test(policy, a_finished_job_is_acked_when_everything_was_sent) {
  mqproc__claim_t c = row(0, "SUCCESS");
  c.result_published = 1;
  c.callbacks_done = 1;
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_ACK);
  c.result_published = 0; /* nothing to publish: no result queue */
  cr_expect_eq(mqproc__policy_after_claim(&c, 0, 1), MQPROC__CLAIM_ACK);
}

Test(policy, a_finished_job_replays_what_was_not_sent) {
  mqproc__claim_t c = row(0, "SUCCESS");
  c.callbacks_done = 1;
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_REPLAY);
  c.result_published = 1;
  c.callbacks_done = 0;
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_REPLAY);
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 0), MQPROC__CLAIM_ACK);
}

Test(policy, a_success_whose_holder_still_sends_it_is_acked_not_replayed) {
  mqproc__claim_t c = {.claimed = 0, .state = "SUCCESS", .outbox_pending = 1};
  /* the holder acked its delivery at the success and sends the result: a copy (the
   * broker's redelivery after a reconnect) would send it twice */
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_ACK);
  c.outbox_pending = 0;
  cr_expect_eq(mqproc__policy_after_claim(&c, 1, 1), MQPROC__CLAIM_REPLAY);
}

Test(policy, failed_cancelled_and_running_jobs_are_not_run) {
  mqproc__claim_t f = row(0, "FAILED"), x = row(0, "CANCELLED"), r = row(0, "RUNNING");
  r.lease_live = 1;
  cr_expect_eq(mqproc__policy_after_claim(&f, 1, 1), MQPROC__CLAIM_DEAD);
  /* cancelled: its result and callbacks say so, once */
  cr_expect_eq(mqproc__policy_after_claim(&x, 1, 1), MQPROC__CLAIM_REPLAY);
  x.result_published = x.callbacks_done = 1;
  cr_expect_eq(mqproc__policy_after_claim(&x, 1, 1), MQPROC__CLAIM_ACK);
  cr_expect_eq(mqproc__policy_after_claim(&r, 1, 1), MQPROC__CLAIM_DEFER);
}

Test(policy, a_claimable_job_the_claim_refused_is_out_of_attempts) {
  mqproc__claim_t q = row(0, "QUEUED"), r = row(0, "RUNNING");
  r.lease_live = 0; /* expired: a takeover the attempt limit forbade */
  cr_expect_eq(mqproc__policy_after_claim(&q, 1, 1), MQPROC__CLAIM_EXHAUSTED);
  cr_expect_eq(mqproc__policy_after_claim(&r, 1, 1), MQPROC__CLAIM_EXHAUSTED);
}

Test(policy, three_local_retries_by_default_then_give_up) {
  cr_expect_eq(mqproc__policy_after_try(1, 3, 1, 0), MQPROC__TRY_RETRY);
  cr_expect_eq(mqproc__policy_after_try(3, 3, 1, 0), MQPROC__TRY_RETRY);
  cr_expect_eq(mqproc__policy_after_try(4, 3, 1, 0), MQPROC__TRY_GIVE_UP);
  cr_expect_eq(mqproc__policy_after_try(1, 0, 1, 0), MQPROC__TRY_GIVE_UP);
}

Test(policy, the_final_exit_code_ends_the_job_at_the_first_try) {
  cr_expect_eq(mqproc__policy_after_try(1, 3, 75, 75), MQPROC__TRY_FINAL);
  cr_expect_eq(mqproc__policy_after_try(1, 3, 1, 75), MQPROC__TRY_RETRY, "other codes retry");
  cr_expect_eq(mqproc__policy_after_try(1, 3, -1, 75), MQPROC__TRY_RETRY, "a signal retries");
  cr_expect_eq(mqproc__policy_after_try(4, 3, 75, 75), MQPROC__TRY_FINAL);
  cr_expect_eq(mqproc__policy_after_try(1, 3, 0, 0), MQPROC__TRY_RETRY, "0 means no final code");
}

Test(policy, backoff_doubles_with_bounded_jitter_and_a_cap) {
  for (uint32_t r = 0; r < 4000; r += 7) {
    int64_t b1 = mqproc__policy_backoff_ms(200, 1, r), b3 = mqproc__policy_backoff_ms(200, 3, r);
    cr_assert(b1 >= 160 && b1 < 240, "retry 1: %lld", (long long)b1);
    cr_assert(b3 >= 640 && b3 < 960, "retry 3: %lld", (long long)b3);
    cr_assert(mqproc__policy_backoff_ms(200, 40, r) < 72000, "capped at 60 s + jitter");
  }
  cr_expect_neq(mqproc__policy_backoff_ms(200, 2, 1), mqproc__policy_backoff_ms(200, 2, 399),
                "jitter spreads retries");
}

Test(policy, defer_waits_for_the_other_lease_within_bounds) {
  cr_expect_geq(mqproc__policy_defer_ms(0, 30000, 0), 1000, "never a hot requeue loop");
  cr_expect_eq(mqproc__policy_defer_ms(12000, 30000, 0), 12000);
  cr_expect_leq(mqproc__policy_defer_ms(1000000, 30000, 999), 30000 + 30000 / 4);
}

Test(policy, the_automatic_depth_grows_by_a_slots_worth_and_stays_within_bounds) {
  int d = 4, steps = 0;
  cr_expect_eq(mqproc__policy_depth_grow(4, 4, 2), 6);
  while (d < MQPROC__DEPTH_MAX && steps++ < 100)
    d = mqproc__policy_depth_grow(d, 4, 2);
  cr_expect_eq(d, MQPROC__DEPTH_MAX, "grows to the cap in steps of --concurrency");
  cr_expect_eq(steps, (MQPROC__DEPTH_MAX - 4) / 2);
  cr_expect_eq(mqproc__policy_depth_grow(MQPROC__DEPTH_MAX, 4, 2), MQPROC__DEPTH_MAX);
  cr_expect_eq(mqproc__policy_depth_grow(63, 4, 5), MQPROC__DEPTH_MAX, "never past the cap");
  /* a base above the cap (--concurrency 100: 200) is its own cap: never shrunk below */
  cr_expect_eq(mqproc__policy_depth_grow(200, 200, 100), 200);
  cr_expect_eq(mqproc__policy_depth_shrink(200, 200), 200);
}

Test(policy, the_automatic_depth_shrinks_by_a_quarter_of_its_surplus_down_to_base) {
  int d = MQPROC__DEPTH_MAX, ticks = 0;
  cr_expect_eq(mqproc__policy_depth_shrink(64, 4), 49);
  cr_expect_eq(mqproc__policy_depth_shrink(5, 4), 4, "at least one step");
  cr_expect_eq(mqproc__policy_depth_shrink(4, 4), 4);
  cr_expect_eq(mqproc__policy_depth_shrink(2, 4), 4, "never below base");
  while (d > 4 && ticks++ < 100)
    d = mqproc__policy_depth_shrink(d, 4);
  cr_expect_eq(d, 4);
  cr_expect_lt(ticks, 20, "back at base within %d busy ticks", ticks);
}

Test(job_state, names_round_trip) {
  for (int s = 0; s < MQPROC__JOB_NSTATES; s++)
    cr_expect_eq(mqproc__job_state_parse(mqproc__job_state_name(s)), s);
  cr_expect_eq(mqproc__job_state_parse("CACHED"), -1);
  cr_expect_null(mqproc__job_state_name(MQPROC__JOB_NSTATES));
}

Test(job_state, transitions_follow_the_documented_table) {
  /* rows: from; columns: to (QUEUED RUNNING SUCCESS FAILED CANCELLED) */
  static const int ok[5][5] = {
      {0, 1, 0, 0, 1}, /* QUEUED: claimed or cancelled */
      {1, 1, 1, 1, 1}, /* RUNNING: requeue/release, takeover, outcomes, cancel */
      {0, 0, 0, 0, 0}, /* SUCCESS is final */
      {0, 0, 0, 0, 0}, /* FAILED is final */
      {0, 0, 0, 0, 0}, /* CANCELLED is final */
  };
  for (int f = 0; f < 5; f++)
    for (int t = 0; t < 5; t++)
      cr_expect_eq(mqproc__job_state_transition_ok(f, t), ok[f][t], "%s -> %s",
                   mqproc__job_state_name(f), mqproc__job_state_name(t));
  cr_expect(mqproc__job_state_is_final(MQPROC__JOB_SUCCESS));
  cr_expect_not(mqproc__job_state_is_final(MQPROC__JOB_RUNNING));
}
