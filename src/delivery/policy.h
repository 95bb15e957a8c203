/* Policy: the pure decisions of the delivery state machine (no I/O), unit-tested alone.
 *
 *   mqproc__policy_after_claim()   what to do with a delivery given its job's row
 *   mqproc__policy_after_try()     retry locally or give the attempt up
 *   mqproc__policy_backoff_ms()    wait before local retry n (exponential, jittered)
 *   mqproc__policy_defer_ms()      how long to hold a delivery whose job runs elsewhere
 *   mqproc__policy_depth_*()       the automatic depth of a dir:// server's window
 *   mqproc__job_state_*()          the job states and their allowed transitions
 */
#ifndef MQPROC_POLICY_H
#define MQPROC_POLICY_H

#include <stdint.h>

#include "store/store.h"

#define MQPROC__JOB_STATES(X)                                                                      \
  X(QUEUED)                                                                                        \
  X(RUNNING)                                                                                       \
  X(SUCCESS)                                                                                       \
  X(FAILED)                                                                                        \
  X(CANCELLED)

typedef enum mqproc__job_state {
#define MQPROC__JOB_STATE_ENUM(name) MQPROC__JOB_##name,
  MQPROC__JOB_STATES(MQPROC__JOB_STATE_ENUM)
#undef MQPROC__JOB_STATE_ENUM
      MQPROC__JOB_NSTATES
} mqproc__job_state_t;

/* "QUEUED" … ; NULL for an invalid value. Static strings. */
const char *mqproc__job_state_name(mqproc__job_state_t s);
/* -1 when the name is unknown. */
int mqproc__job_state_parse(const char *name);
/* Whether the job table may go from one state to the other (claims, outcomes, lease
 * takeovers; a new row starts RUNNING, or FAILED for a dead-lettered message). */
int mqproc__job_state_transition_ok(mqproc__job_state_t from, mqproc__job_state_t to);
int mqproc__job_state_is_final(mqproc__job_state_t s);

typedef enum mqproc__claim_action {
  MQPROC__CLAIM_RUN,      /* we own a new attempt: run the processor */
  MQPROC__CLAIM_REPLAY,   /* SUCCESS already, but the result or callbacks never went out */
  MQPROC__CLAIM_ACK,      /* finished before (SUCCESS with everything sent, CANCELLED): ack */
  MQPROC__CLAIM_DEAD,     /* FAILED before: dead-letter this copy, do not run */
  MQPROC__CLAIM_DEFER,    /* RUNNING under another live lease: hold, then requeue */
  MQPROC__CLAIM_EXHAUSTED /* claimable but out of attempts (--max-attempts): FAILED */
} mqproc__claim_action_t;

mqproc__claim_action_t mqproc__policy_after_claim(const mqproc__claim_t *c, int wants_result,
                                                  int wants_callbacks);

typedef enum mqproc__try_action {
  MQPROC__TRY_RETRY,   /* try again locally after a backoff */
  MQPROC__TRY_GIVE_UP, /* the attempt failed: record it (requeue or FAILED) */
  MQPROC__TRY_FINAL    /* the processor said the job cannot succeed: FAILED now */
} mqproc__try_action_t;

/* After a failed try. tries_in_attempt: tries made so far in this attempt (>= 1);
 * retries: --retries; exit_code: the try's exit code (-1 when it did not exit normally;
 * a C processor's return value); final_exit_code: --final-exit-code (0 = none). */
mqproc__try_action_t mqproc__policy_after_try(int tries_in_attempt, int retries, int exit_code,
                                              int final_exit_code);

/* Backoff before local retry number n (1-based): base * 2^(n-1), capped at 60 s, then
 * scaled by a factor in [0.8, 1.2) chosen by rnd (any 32-bit value). */
int64_t mqproc__policy_backoff_ms(int base_ms, int n, uint32_t rnd);

/* Hold time for a deferred delivery: until the other holder's lease may have expired,
 * at least 1 s, at most lease_ms, plus up to 25 % jitter from rnd. */
int64_t mqproc__policy_defer_ms(int64_t lease_left_ms, int lease_ms, uint32_t rnd);

/* The automatic depth (a dir:// queue with neither --prefetch nor --claim-ahead given):
 * how many deliveries a server holds at once, between base (the default --prefetch) and
 * MQPROC__DEPTH_MAX (or base when that is larger). A run slot that frees with no claimed
 * job waiting for it while the window is full ("starved": the claims' commits are slower
 * than the runs) grows the window by one slot's worth (concurrency); a busy tick without
 * such a starvation shrinks it by a quarter of what it has above base; an idle server
 * goes back to base. Long jobs never starve a slot (the claimed-ahead job is ready long
 * before), so they keep the base window and a fleet shares its queue as before; long jobs
 * right behind short ones, claimed ahead by a deep window, are handed back once one has
 * waited a second for a slot (server/flow.c). */
#define MQPROC__DEPTH_MAX 64
int mqproc__policy_depth_grow(int depth, int base, int concurrency);
int mqproc__policy_depth_shrink(int depth, int base);

#endif
