/* One delivery's state machine (see delivery.c for the states). */
#ifndef MQPROC_DELIVERY_H
#define MQPROC_DELIVERY_H

#include "broker/broker.h"
#include "delivery/host.h"

/* Copies what it needs from msg; NULL when out of memory (the message then stays
 * unacked and comes back after a reconnect). */
mqproc__delivery_t *mqproc__delivery_new(mqproc__delivery_host_t *host,
                                         const mqproc__broker_msg_t *msg);
/* A delivery with no broker message behind it that sends the outcome of a final job whose
 * early-acked holder died (the store's sweep_outbox); NULL when the row is unusable. */
mqproc__delivery_t *mqproc__delivery_new_outbox(mqproc__delivery_host_t *host,
                                                const mqproc__outbox_row_t *r);
/* Runs the machine until it waits for something. */
void mqproc__delivery_start(mqproc__delivery_t *d);
/* The publish this delivery waited for ended with status. */
void mqproc__delivery_on_confirm(mqproc__delivery_t *d, int status);
/* Periodic work (lease renewal); called about once a second. */
void mqproc__delivery_tick(mqproc__delivery_t *d);
/* Shutdown: requeue what has not started; with force, also stop a running try. */
void mqproc__delivery_stop(mqproc__delivery_t *d, int force);
/* An operator cancelled d's job: stop its try (a process group is killed, a C function
 * sees mqproc_job_cancelled()) and record CANCELLED, which its result carries. */
void mqproc__delivery_cancel(mqproc__delivery_t *d);
/* The job d holds (claimed, no outcome yet), or NULL. */
const char *mqproc__delivery_job_held(const mqproc__delivery_t *d);
void mqproc__delivery_free(mqproc__delivery_t *d);

/* Whether d is running attempt `attempt` of job_id (claimed, no outcome yet). */
int mqproc__delivery_holds(const mqproc__delivery_t *d, const char *job_id, int attempt);
/* Whether d was released at shutdown while its try still runs on a thread. */
int mqproc__delivery_abandoned(const mqproc__delivery_t *d);
/* Whether d occupies a slot that consumer (of connection epoch) does not count as unacked:
 * acked early, from a lost connection, or pushed to an older consumer. */
int mqproc__delivery_holds_slot(const mqproc__delivery_t *d, uint64_t epoch, uint64_t consumer);
/* d's delivery (epoch, tag); 1 when its tag is settled (acked, nacked, or waiting for the
 * server's ack flush) or it has none (an outbox delivery). */
int mqproc__delivery_tag(const mqproc__delivery_t *d, uint64_t *epoch, uint64_t *tag);
/* The server took d's tag to ack. */
void mqproc__delivery_settled(mqproc__delivery_t *d);
/* What d waits for in SLOT_WAIT: 0 nothing, 1 a slot or a claim pass (to claim), 2 a run
 * slot (claimed: to start a try); and: what it waits for is free. */
int mqproc__delivery_waits_for_slot(const mqproc__delivery_t *d);
void mqproc__delivery_slot_free(mqproc__delivery_t *d);
/* How long (ms) d has waited for a run slot holding a claim it made ahead and never ran
 * (a --claim-ahead pass), -1 when it is no such delivery. */
int64_t mqproc__delivery_ahead_waited_ms(const mqproc__delivery_t *d, int64_t now);
/* Such a delivery's job is released for another server without costing an attempt (the
 * automatic window's hand-back, server/flow.c); 0 when d is no such delivery. */
int mqproc__delivery_hand_back(mqproc__delivery_t *d);
/* The broker connected, went away, or (un)blocked publishing: a delivery waiting to
 * publish tries again. */
void mqproc__delivery_broker_changed(mqproc__delivery_t *d);
/* The store answers again: retry a parked write now, renew the lease at the next tick. */
void mqproc__delivery_store_back(mqproc__delivery_t *d);
/* Whether d has not claimed its job yet (it can be requeued as it is). */
int mqproc__delivery_before_claim(const mqproc__delivery_t *d);

/* The name of d's state (DECODE, CLAIM, ...: the diagram in delivery.c). */
const char *mqproc__delivery_state(const mqproc__delivery_t *d);
/* When set, called with each state a delivery's machine is in as it runs (every state it
 * steps through, and the waiting state it stops in): tests and debugging; NULL in a
 * server. */
extern void (*mqproc__delivery_trace)(const mqproc__delivery_t *d, const char *state);

/* List links, owned by the server. */
mqproc__delivery_t **mqproc__delivery_next(mqproc__delivery_t *d);

#endif
