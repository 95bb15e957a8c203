/* AMQP backend: a write buffer under rabbitmq-c's TCP socket, so that the frames of one loop
 * turn (publishes: a method, a header and a body frame each; acks; heartbeats) leave in one
 * send(2), and a read that emptied the socket is known as such.
 *
 * rabbitmq-c 0.11 sends every frame with its own send(2) (a publish is three, with MSG_MORE
 * holding back the first two) and has no public way to give it a socket of one's own
 * (amqp_set_socket is not exported). Every rabbitmq-c socket object starts with a pointer to
 * its class, a table of six functions (librabbitmq/amqp_socket.h: send, recv, open, close,
 * get_sockfd, delete; the same from 0.8 to 0.16). mqproc__amqp_wbuf_install() points the
 * TCP socket's class pointer at a copy of ours, first member of our state, whose functions
 * call the TCP socket's own:
 *   send    copies the frame into the buffer (WBUF_CAP); what does not fit first writes
 *           what waits, and a large frame (a big body, WBUF_DIRECT) goes out directly
 *           after what waits, without the copy;
 *   recv    writes what waits first (rabbitmq-c reads only when it waits for something,
 *           and an RPC's reply comes only after its request went out), then reads and
 *           notes whether the read emptied the socket (a short read, or EAGAIN);
 *   close   writes what waits if the socket takes it now (a close-ok, say), then closes;
 *   delete  frees the TCP socket and our state.
 * mqproc__amqp_wbuf_flush() writes what waits: the server calls it once per loop turn,
 * before the loop sleeps (broker.h flush). A write the socket cannot take now waits in
 * poll(), as rabbitmq-c's own send does, under the caller's write deadline
 * (amqp_write_guard.h: it shuts the socket down, which ends the wait with an error).
 * After a failed write the buffer is dropped and every later call fails: the connection is
 * lost, as after any failed send.
 *
 * Only plain TCP and a rabbitmq-c version known to have this layout: elsewhere (TLS, whose
 * writes go through OpenSSL, or an unknown version) install() changes nothing and the
 * library writes as before.
 */
#include "broker/amqp_wbuf.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "base/util.h"

#define WBUF_CAP 65536
#define WBUF_DIRECT 32768 /* frames this large are not copied */
/* librabbitmq/amqp_private.h: a non-blocking socket's EAGAIN */
#define RMQ_NEEDREAD (-0x1301)
#define RMQ_NEEDWRITE (-0x1302)

/* librabbitmq/amqp_socket.h's struct amqp_socket_class_t, slot for slot. */
typedef struct rmq_socket_class {
  ssize_t (*send)(void *sock, const void *buf, size_t len, int flags);
  ssize_t (*recv)(void *sock, void *buf, size_t len, int flags);
  int (*open)(void *sock, const char *host, int port, const struct timeval *timeout);
  int (*close)(void *sock, int force);
  int (*get_sockfd)(void *sock);
  void (*delete)(void *sock);
} rmq_socket_class_t;

typedef struct wbuf {
  rmq_socket_class_t klass;        /* first: the socket's class pointer points here */
  const rmq_socket_class_t *inner; /* the TCP socket's own class */
  void *sock;                      /* the TCP socket object (rabbitmq-c's) */
  int failed;                      /* a write failed: the connection is lost */
  int drained;                     /* the last read emptied the socket */
  size_t len;
  char buf[WBUF_CAP];
} wbuf_t;

/* The class pointer every rabbitmq-c socket object starts with. */
static const rmq_socket_class_t **class_of(void *sock) {
  return (const rmq_socket_class_t **)sock;
}

static wbuf_t *of(void *sock) {
  return (wbuf_t *)(void *)*class_of(sock);
}

/* Writes p[0..n) through the TCP socket, waiting for room when it has none. */
static int write_out(wbuf_t *w, const char *p, size_t n) {
  while (n > 0) {
    ssize_t rc = w->inner->send(w->sock, p, n, 0);
    if (rc > 0) {
      p += rc;
      n -= (size_t)rc;
    } else if (rc == RMQ_NEEDWRITE) {
      struct pollfd pfd = {.fd = w->inner->get_sockfd(w->sock), .events = POLLOUT};
      if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
        return AMQP_STATUS_SOCKET_ERROR;
    } else {
      return rc < 0 ? (int)rc : AMQP_STATUS_SOCKET_ERROR;
    }
  }
  return AMQP_STATUS_OK;
}

static int flush_buf(wbuf_t *w) {
  int rc;
  if (w->failed)
    return AMQP_STATUS_SOCKET_ERROR;
  if (w->len == 0)
    return AMQP_STATUS_OK;
  rc = write_out(w, w->buf, w->len);
  w->len = 0;
  if (rc != AMQP_STATUS_OK)
    w->failed = 1;
  return rc;
}

static ssize_t wb_send(void *sock, const void *buf, size_t len, int flags) {
  wbuf_t *w = of(sock);
  int rc;
  (void)flags; /* MSG_MORE: everything waits for the flush */
  if ((len >= WBUF_DIRECT || w->len + len > WBUF_CAP) && (rc = flush_buf(w)) != AMQP_STATUS_OK)
    return rc;
  if (w->failed)
    return AMQP_STATUS_SOCKET_ERROR;
  if (len >= WBUF_DIRECT) {
    if ((rc = write_out(w, buf, len)) != AMQP_STATUS_OK) {
      w->failed = 1;
      return rc;
    }
    return (ssize_t)len;
  }
  memcpy(w->buf + w->len, buf, len);
  w->len += len;
  return (ssize_t)len;
}

static ssize_t wb_recv(void *sock, void *buf, size_t len, int flags) {
  wbuf_t *w = of(sock);
  ssize_t rc;
  int st = flush_buf(w);
  if (st != AMQP_STATUS_OK)
    return st;
  rc = w->inner->recv(sock, buf, len, flags);
  w->drained = rc == RMQ_NEEDREAD || (rc > 0 && (size_t)rc < len);
  return rc;
}

static int wb_open(void *sock, const char *host, int port, const struct timeval *timeout) {
  return of(sock)->inner->open(sock, host, port, timeout);
}

static int wb_close(void *sock, int force) {
  wbuf_t *w = of(sock);
  int fd = w->inner->get_sockfd(sock);
  if (!w->failed && w->len > 0 && fd >= 0) /* only what the socket takes now */
    (void)send(fd, w->buf, w->len, MSG_DONTWAIT | MSG_NOSIGNAL);
  w->len = 0;
  return w->inner->close(sock, force);
}

static int wb_get_sockfd(void *sock) {
  return of(sock)->inner->get_sockfd(sock);
}

static void wb_delete(void *sock) {
  wbuf_t *w = of(sock);
  w->inner->delete (sock);
  free(w);
}

static const rmq_socket_class_t wbuf_class = {
    wb_send,       /* send */
    wb_recv,       /* recv */
    wb_open,       /* open */
    wb_close,      /* close */
    wb_get_sockfd, /* get_sockfd */
    wb_delete      /* delete */
};

/* Our state when the connection's socket is wrapped, else NULL. */
static wbuf_t *find(amqp_connection_state_t conn) {
  amqp_socket_t *sock = conn != NULL ? amqp_get_socket(conn) : NULL;
  if (sock == NULL || (*class_of(sock))->send != wb_send)
    return NULL;
  return of(sock);
}

/* The versions whose socket objects are laid out as above (checked in their sources). */
static int layout_known(void) {
  uint32_t v = amqp_version_number() >> 8; /* 0xMMmmpp */
  return v >= 0x000800 && v < 0x001100;
}

int mqproc__amqp_wbuf_install(amqp_socket_t *sock) {
  wbuf_t *w;
  if (sock == NULL || !layout_known())
    return 0;
  if ((w = mqproc__calloc(1, sizeof(*w))) == NULL)
    return 0;
  w->klass = wbuf_class;
  w->inner = *class_of(sock);
  w->sock = sock;
  *class_of(sock) = &w->klass;
  return 1;
}

size_t mqproc__amqp_wbuf_pending(amqp_connection_state_t conn) {
  wbuf_t *w = find(conn);
  return w != NULL ? w->len : 0;
}

int mqproc__amqp_wbuf_flush(amqp_connection_state_t conn) {
  wbuf_t *w = find(conn);
  return w != NULL ? flush_buf(w) : AMQP_STATUS_OK;
}

int mqproc__amqp_wbuf_drained(amqp_connection_state_t conn) {
  wbuf_t *w = find(conn);
  return w != NULL ? w->drained : -1;
}
