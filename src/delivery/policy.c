/* Policy: the pure decisions of the delivery state machine (see policy.h). */
#include "delivery/policy.h"

#include <string.h>

static const char *const STATE_NAMES[] = {
#define MQPROC__JOB_STATE_NAME(name) #name,
    MQPROC__JOB_STATES(MQPROC__JOB_STATE_NAME)
#undef MQPROC__JOB_STATE_NAME
};

const char *mqproc__job_state_name(mqproc__job_state_t s) {
  return (unsigned)s < MQPROC__JOB_NSTATES ? STATE_NAMES[s] : NULL;
}

int mqproc__job_state_parse(const char *name) {
  for (int i = 0; name != NULL && i < MQPROC__JOB_NSTATES; i++)
    if (strcmp(name, STATE_NAMES[i]) == 0)
      return i;
  return -1;
}

int mqproc__job_state_is_final(mqproc__job_state_t s) {
  return s == MQPROC__JOB_SUCCESS || s == MQPROC__JOB_FAILED || s == MQPROC__JOB_CANCELLED;
}

int mqproc__job_state_transition_ok(mqproc__job_state_t from, mqproc__job_state_t to) {
  switch (from) {
  case MQPROC__JOB_QUEUED: /* claim, or cancellation by an operator */
    return to == MQPROC__JOB_RUNNING || to == MQPROC__JOB_CANCELLED;
  case MQPROC__JOB_RUNNING: /* outcome, requeue/release, or a takeover (RUNNING again) */
    return to == MQPROC__JOB_SUCCESS || to == MQPROC__JOB_FAILED || to == MQPROC__JOB_QUEUED ||
           to == MQPROC__JOB_RUNNING || to == MQPROC__JOB_CANCELLED;
  default: /* final states stay */
    return 0;
  }
}

mqproc__claim_action_t mqproc__policy_after_claim(const mqproc__claim_t *c, int wants_result,
                                                  int wants_callbacks) {
  if (c->claimed)
    return MQPROC__CLAIM_RUN;
  switch (mqproc__job_state_parse(c->state)) {
  case MQPROC__JOB_SUCCESS:
  case MQPROC__JOB_CANCELLED: /* cancelled before it ran, or while it ran */
    if (c->outbox_pending)    /* its holder (or the outbox sweep) sends what is not sent yet */
      return MQPROC__CLAIM_ACK;
    if ((wants_result && !c->result_published) || (wants_callbacks && !c->callbacks_done))
      return MQPROC__CLAIM_REPLAY;
    return MQPROC__CLAIM_ACK;
  case MQPROC__JOB_FAILED:
    return MQPROC__CLAIM_DEAD;
  case MQPROC__JOB_QUEUED: /* the claim refused a claimable row: attempt limit */
    return MQPROC__CLAIM_EXHAUSTED;
  case MQPROC__JOB_RUNNING:
    return c->lease_live ? MQPROC__CLAIM_DEFER : MQPROC__CLAIM_EXHAUSTED;
  default:
    return MQPROC__CLAIM_DEFER;
  }
}

mqproc__try_action_t mqproc__policy_after_try(int tries_in_attempt, int retries, int exit_code,
                                              int final_exit_code) {
  if (final_exit_code != 0 && exit_code == final_exit_code)
    return MQPROC__TRY_FINAL;
  return tries_in_attempt <= retries ? MQPROC__TRY_RETRY : MQPROC__TRY_GIVE_UP;
}

int64_t mqproc__policy_backoff_ms(int base_ms, int n, uint32_t rnd) {
  int64_t ms = base_ms;
  for (int i = 1; i < n && ms < 60000; i++)
    ms *= 2;
  if (ms > 60000)
    ms = 60000;
  /* factor in [0.8, 1.2): 800..1199 per mille */
  return ms * (800 + (int64_t)(rnd % 400)) / 1000;
}

static int depth_max(int base) {
  return base > MQPROC__DEPTH_MAX ? base : MQPROC__DEPTH_MAX;
}

int mqproc__policy_depth_grow(int depth, int base, int concurrency) {
  int max = depth_max(base);
  depth += concurrency > 0 ? concurrency : 1;
  return depth > max ? max : depth < base ? base : depth;
}

int mqproc__policy_depth_shrink(int depth, int base) {
  if (depth <= base)
    return base;
  depth -= (depth - base + 3) / 4; /* a quarter of the surplus, at least one */
  return depth > depth_max(base) ? depth_max(base) : depth;
}

int64_t mqproc__policy_defer_ms(int64_t lease_left_ms, int lease_ms, uint32_t rnd) {
  int64_t ms = lease_left_ms;
  if (ms < 1000)
    ms = 1000;
  if (ms > lease_ms)
    ms = lease_ms;
  return ms + (int64_t)(rnd % 1000) * ms / 4000;
}
