/* Unit tests for the write buffer under rabbitmq-c's TCP socket (src/broker/amqp_wbuf.c),
 * on a socketpair instead of a broker: a publish (three frames) and an ack wait until the
 * flush and then leave in one write, whole and in order; a read writes what waits first (an
 * RPC's request goes out before its reply is awaited); a large frame goes out directly,
 * after what waited, and what does not fit writes what waits first; a write to a closed peer fails,
 * and so does every later one; a read that empties the socket is known as such. */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <criterion/criterion.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "broker/amqp_wbuf.h"

typedef struct {
  amqp_connection_state_t conn;
  int peer; /* the broker's end */
} pair_t;

static pair_t pair_new(void) {
  pair_t p;
  int fds[2];
  amqp_socket_t *sock;
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  p.conn = amqp_new_connection();
  cr_assert_not_null(p.conn);
  sock = amqp_tcp_socket_new(p.conn);
  cr_assert_not_null(sock);
  amqp_tcp_socket_set_sockfd(sock, fds[0]);
  cr_assert_eq(mqproc__amqp_wbuf_install(sock), 1, "rabbitmq-c %s is of a known layout",
               amqp_version());
  p.peer = fds[1];
  return p;
}

static void pair_free(pair_t *p) {
  amqp_destroy_connection(p->conn); /* closes and frees the socket and the buffer */
  close(p->peer);
}

/* What the peer can read now (0 when nothing waits). */
static size_t peer_read(pair_t *p, void *buf, size_t cap) {
  ssize_t n = recv(p->peer, buf, cap, MSG_DONTWAIT);
  return n > 0 ? (size_t)n : 0;
}

static int publish(pair_t *p, size_t body_len) {
  char *body = calloc(1, body_len + 1);
  int rc;
  memset(body, 'x', body_len);
  rc = amqp_basic_publish(p->conn, 2, amqp_cstring_bytes("ex"), amqp_cstring_bytes("rk"), 0, 0,
                          NULL, (amqp_bytes_t){.len = body_len, .bytes = body});
  free(body);
  return rc;
}

Test(amqp_wbuf, a_publish_and_an_ack_leave_together_at_the_flush) {
  pair_t p = pair_new();
  unsigned char buf[4096];
  size_t waiting, n;
  cr_assert_eq(publish(&p, 100), AMQP_STATUS_OK);
  cr_assert_eq(amqp_basic_ack(p.conn, 1, 7, 1), AMQP_STATUS_OK);
  cr_expect_eq(peer_read(&p, buf, sizeof(buf)), 0, "nothing is written before the flush");
  waiting = mqproc__amqp_wbuf_pending(p.conn);
  cr_expect_gt(waiting, 100, "the three frames of the publish and the ack wait");
  cr_assert_eq(mqproc__amqp_wbuf_flush(p.conn), AMQP_STATUS_OK);
  cr_expect_eq(mqproc__amqp_wbuf_pending(p.conn), 0);
  n = peer_read(&p, buf, sizeof(buf));
  cr_expect_eq(n, waiting, "one write carried it all");
  /* the frames in order: method (1), header (2), body (3), then the ack's method (1) */
  cr_expect_eq(buf[0], AMQP_FRAME_METHOD);
  cr_expect_eq(buf[n - 1], AMQP_FRAME_END);
  cr_expect_eq(buf[n - 21], AMQP_FRAME_METHOD, "the ack (a 21-byte frame) comes last");
  pair_free(&p);
}

Test(amqp_wbuf, a_read_writes_what_waits_first) {
  pair_t p = pair_new();
  unsigned char buf[4096];
  struct timeval zero = {0, 0};
  amqp_frame_t f;
  cr_assert_eq(amqp_basic_ack(p.conn, 1, 1, 0), AMQP_STATUS_OK);
  cr_expect_eq(peer_read(&p, buf, sizeof(buf)), 0);
  /* the read finds nothing (the peer said nothing), but the ack went out before it */
  cr_expect_eq(amqp_simple_wait_frame_noblock(p.conn, &f, &zero), AMQP_STATUS_TIMEOUT);
  cr_expect_eq(peer_read(&p, buf, sizeof(buf)), 21, "the ack was written before the read");
  cr_expect_eq(mqproc__amqp_wbuf_drained(p.conn), 1, "the read found the socket empty");
  pair_free(&p);
}

Test(amqp_wbuf, a_large_frame_goes_out_directly_in_order) {
  pair_t p = pair_new();
  size_t body = 40000, got = 0;
  unsigned char *buf = malloc(1 << 20);
  int sndbuf = 1 << 20;
  setsockopt(amqp_get_sockfd(p.conn), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  cr_assert_eq(amqp_basic_ack(p.conn, 1, 1, 0), AMQP_STATUS_OK);
  /* its body frame (40008 bytes) is large: the ack, the method and the header go first,
   * then the body frame directly */
  cr_assert_eq(publish(&p, body), AMQP_STATUS_OK);
  cr_expect_eq(mqproc__amqp_wbuf_pending(p.conn), 0, "nothing waits after a direct write");
  for (size_t n; (n = peer_read(&p, buf + got, (1 << 20) - got)) > 0;)
    got += n;
  cr_expect_gt(got, 21 + body + 8, "every frame arrived (%zu bytes)", got);
  cr_expect_eq(buf[0], AMQP_FRAME_METHOD, "the ack first, as it was sent first");
  cr_expect_eq(buf[21], AMQP_FRAME_METHOD, "then the publish's method");
  cr_expect_eq(buf[got - body - 8], AMQP_FRAME_BODY, "the body frame last");
  free(buf);
  pair_free(&p);
}

Test(amqp_wbuf, what_does_not_fit_writes_what_waits_first) {
  pair_t p = pair_new();
  size_t body = 25000, got = 0;
  unsigned char *buf = malloc(1 << 20);
  int sndbuf = 1 << 20;
  setsockopt(amqp_get_sockfd(p.conn), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  cr_assert_eq(publish(&p, body), AMQP_STATUS_OK);
  cr_assert_eq(publish(&p, body), AMQP_STATUS_OK);
  cr_expect_eq(peer_read(&p, buf, 1 << 20), 0, "two publishes fit: they wait");
  cr_assert_eq(publish(&p, body), AMQP_STATUS_OK);
  got = peer_read(&p, buf, 1 << 20);
  cr_expect_gt(got, 2 * body, "the third did not fit: what waited went out (%zu bytes)", got);
  cr_assert_eq(mqproc__amqp_wbuf_flush(p.conn), AMQP_STATUS_OK);
  for (size_t n; (n = peer_read(&p, buf + got, (1 << 20) - got)) > 0;)
    got += n;
  cr_expect_gt(got, 3 * (body + 8), "all three arrived whole (%zu bytes)", got);
  free(buf);
  pair_free(&p);
}

Test(amqp_wbuf, a_write_to_a_closed_peer_fails_and_so_do_later_ones) {
  pair_t p = pair_new();
  cr_assert_eq(amqp_basic_ack(p.conn, 1, 1, 0), AMQP_STATUS_OK);
  close(p.peer);
  p.peer = -1;
  cr_expect_neq(mqproc__amqp_wbuf_flush(p.conn), AMQP_STATUS_OK);
  cr_expect_neq(amqp_basic_ack(p.conn, 1, 2, 0), AMQP_STATUS_OK, "the connection is lost");
  cr_expect_neq(mqproc__amqp_wbuf_flush(p.conn), AMQP_STATUS_OK);
  amqp_destroy_connection(p.conn);
}

Test(amqp_wbuf, a_tls_or_unwrapped_socket_is_left_alone) {
  amqp_connection_state_t conn = amqp_new_connection();
  cr_assert_not_null(amqp_tcp_socket_new(conn));
  cr_expect_eq(mqproc__amqp_wbuf_drained(conn), -1, "not wrapped: unknown");
  cr_expect_eq(mqproc__amqp_wbuf_pending(conn), 0);
  cr_expect_eq(mqproc__amqp_wbuf_flush(conn), AMQP_STATUS_OK, "nothing to do");
  amqp_destroy_connection(conn);
}
