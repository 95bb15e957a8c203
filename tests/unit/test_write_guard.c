/* Unit: the write deadline (broker/amqp_write_guard.c) really ends a write nobody reads. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mqproc/mqproc.h"
#include "broker/amqp_write_guard.h"

Test(write_guard, a_write_nobody_reads_ends_at_the_deadline, .timeout = 20) {
  mqproc__guard_t *g;
  char err[MQPROC_ERR_LEN], *buf = calloc(1, 1 << 20);
  int sv[2], fired;
  ssize_t n = 0;
  cr_assert_eq(mqproc__guard_new(&g, err), MQPROC_OK, "%s", err);
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* sv[1] is never read: the writes block once the buffers are full */
  mqproc__guard_arm(g, sv[0], 300);
  for (int i = 0; i < 64 && n >= 0; i++)
    n = send(sv[0], buf, 1 << 20, MSG_NOSIGNAL);
  fired = mqproc__guard_disarm(g);
  cr_expect_lt(n, 0, "the blocked write returned with an error");
  cr_expect_eq(errno, EPIPE);
  cr_expect_eq(fired, 1);
  close(sv[0]);
  close(sv[1]);
  mqproc__guard_free(g);
  free(buf);
}

Test(write_guard, calls_within_the_deadline_are_untouched) {
  mqproc__guard_t *g;
  char err[MQPROC_ERR_LEN], c;
  int sv[2];
  cr_assert_eq(mqproc__guard_new(&g, err), MQPROC_OK, "%s", err);
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (int i = 0; i < 1000; i++) {
    mqproc__guard_arm(g, sv[0], 10000);
    mqproc__guard_arm(g, sv[0], 10000); /* nested: the outer deadline holds */
    cr_assert_eq(send(sv[0], "x", 1, MSG_NOSIGNAL), 1);
    cr_assert_eq(recv(sv[1], &c, 1, 0), 1);
    cr_assert_eq(mqproc__guard_disarm(g), 0);
    cr_assert_eq(mqproc__guard_disarm(g), 0);
  }
  cr_expect_eq(send(sv[0], "y", 1, MSG_NOSIGNAL), 1, "the socket is still open");
  close(sv[0]);
  close(sv[1]);
  mqproc__guard_free(g);
}
