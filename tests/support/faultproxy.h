/* A TCP proxy on 127.0.0.1 that injects network faults between a server under test and
 * the broker or the database (the kernel here has no netem): a thread of the test
 * process, switched between modes while connections stay open. */
#ifndef MQPROC_TEST_FAULTPROXY_H
#define MQPROC_TEST_FAULTPROXY_H

typedef enum fp_mode {
  FP_PASS = 0,  /* forward both ways */
  FP_BLACKHOLE, /* read both ways and drop it: the peer looks alive, nothing arrives */
  FP_FREEZE,    /* stop reading: the kernel buffers fill, writers block */
  FP_DELAY,     /* forward after fp_set_delay()'s milliseconds */
  FP_ONE_WAY    /* forward towards the target, drop what comes back: requests arrive, no
                   answer or confirm does */
} fp_mode_t;

typedef struct faultproxy faultproxy_t;

/* Listens on an ephemeral port of 127.0.0.1 and forwards to 127.0.0.1:target_port. */
faultproxy_t *fp_start(int target_port);
int fp_port(const faultproxy_t *p);
void fp_set_mode(faultproxy_t *p, fp_mode_t mode);
void fp_set_delay(faultproxy_t *p, int ms);
/* Resets every open connection (RST both ways); new ones are accepted as the mode says. */
void fp_reset(faultproxy_t *p);
/* Connections accepted so far. */
int fp_accepted(faultproxy_t *p);
void fp_stop(faultproxy_t *p);

#endif
