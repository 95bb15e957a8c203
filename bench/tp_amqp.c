/* AMQP side of bench/throughput.sh, on rabbitmq-c alone (no mqproc code): the raw broker
 * limits, the job messages for the servers under test, and their results.
 *
 * clang-format off
 *   tp_amqp publish URL QUEUE N WINDOW [RESULT_QUEUE]
 *       Declares exchange ocrd-network-default (direct, non-durable, as mqproc and OCR-D
 *       do), QUEUE (and RESULT_QUEUE) durable and bound by their names, then publishes N
 *       OCR-D processing messages (JSON, persistent, mandatory) with publisher confirms,
 *       at most WINDOW unconfirmed. job_id = QUEUE-0000001..., processor_name = QUEUE.
 *       Measures: first publish -> last confirm.
 *   tp_amqp consume URL QUEUE N PREFETCH ACK_EVERY
 *       basic.qos PREFETCH, consumes N messages with manual acks: one basic.ack per
 *       message (ACK_EVERY 1) or one multiple=true ack per ACK_EVERY messages.
 *       Measures: first delivery -> last ack sent.
 *   tp_amqp relay URL QUEUE RESULT_QUEUE N PREFETCH ACK_EVERY
 *       The broker's share of the full protocol: consume QUEUE as above and publish one
 *       SUCCESS result per job to RESULT_QUEUE (persistent, confirms, window 100), with
 *       no database and no processor. Measures: first delivery -> last confirm.
 *   tp_amqp collect URL RESULT_QUEUE N IDLE_S MAX_S
 *       Consumes result messages until N arrived, none came for IDLE_S seconds, or MAX_S
 *       seconds passed; counts the SUCCESS ones. Measures: first result -> last result
 *       (wall clock, so the script can relate first_ms to a server's start).
 *   tp_amqp latency URL QUEUE RESULT_QUEUE RATE SECONDS DRAIN_S
 *       A publisher thread sends RATE jobs/s for SECONDS, paced by an absolute timer, each
 *       job_id carrying its send time (lat-SEQ-MONOTONIC_US); the main thread consumes
 *       RESULT_QUEUE and takes receive time - send time, until every result came or DRAIN_S
 *       after the last send. Prints p50/p99/max over the results received.
 *   tp_amqp delete URL QUEUE...
 *       queue.delete (missing queues are fine)
 * clang-format on
 *
 * Prints one line of key=value pairs; exit 1 on any error or timeout.
 * Build: cc -O2 -pthread tp_amqp.c $(pkg-config --cflags --libs librabbitmq jansson)
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXCHANGE "ocrd-network-default"
#define CH 1

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("tp_amqp: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static double now_s(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void check_rpc(amqp_connection_state_t c, const char *what) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
  if (r.reply_type == AMQP_RESPONSE_NORMAL)
    return;
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    die("%s: %s", what, amqp_error_string2(r.library_error));
  die("%s: refused by the broker", what);
}

static amqp_connection_state_t connect_url(const char *url_in) {
  struct amqp_connection_info ci;
  char *url = strdup(url_in);
  amqp_connection_state_t c = amqp_new_connection();
  amqp_socket_t *s = amqp_tcp_socket_new(c);
  struct timeval tv = {10, 0};
  if (url == NULL || amqp_parse_url(url, &ci) != AMQP_STATUS_OK)
    die("bad AMQP URL");
  if (s == NULL || amqp_socket_open_noblock(s, ci.host, ci.port, &tv) != AMQP_STATUS_OK)
    die("cannot connect to %s:%d", ci.host, ci.port);
  if (amqp_login(c, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password)
          .reply_type != AMQP_RESPONSE_NORMAL)
    die("login failed");
  amqp_channel_open(c, CH);
  check_rpc(c, "channel.open");
  free(url);
  return c;
}

static void declare(amqp_connection_state_t c, const char *q) {
  amqp_exchange_declare(c, CH, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("direct"), 0, 0, 0,
                        0, amqp_empty_table);
  check_rpc(c, "exchange.declare");
  amqp_queue_declare(c, CH, amqp_cstring_bytes(q), 0, 1, 0, 0, amqp_empty_table);
  check_rpc(c, "queue.declare");
  amqp_queue_bind(c, CH, amqp_cstring_bytes(q), amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(q),
                  amqp_empty_table);
  check_rpc(c, "queue.bind");
}

/* Publishes one OCR-D processing message for job_id (as tests/support/harness.c shapes it). */
static void publish_job(amqp_connection_state_t c, const char *queue, const char *job_id,
                        const char *resq) {
  char body[1024];
  amqp_basic_properties_t p = {
      ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG,
      .content_type = amqp_cstring_bytes("application/json"),
      .delivery_mode = AMQP_DELIVERY_PERSISTENT,
  };
  int n = snprintf(body, sizeof(body),
                   "{\"job_id\":\"%s\",\"processor_name\":\"%s\",\"created_time\":%lld,"
                   "\"input_file_grps\":[\"OCR-D-IMG\"],\"output_file_grps\":[\"OCR-D-OUT\"],"
                   "\"path_to_mets\":\"/data/ws1/mets.xml\",\"parameters\":{}%s%s%s}",
                   job_id, queue, (long long)time(NULL), resq ? ",\"result_queue_name\":\"" : "",
                   resq ? resq : "", resq ? "\"" : "");
  if (n < 0 || (size_t)n >= sizeof(body))
    die("job message too long");
  if (amqp_basic_publish(c, CH, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(queue), 1, 0, &p,
                         amqp_cstring_bytes(body)) != AMQP_STATUS_OK)
    die("publish failed");
}

/* ---- publish -------------------------------------------------------------------------- */

/* Reads confirms until at most `outstanding` of the `sent` messages are unconfirmed. */
static void wait_confirms(amqp_connection_state_t c, uint64_t sent, uint64_t *confirmed,
                          uint64_t outstanding) {
  while (sent - *confirmed > outstanding) {
    amqp_frame_t f;
    struct timeval tv = {30, 0};
    int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
    if (rc != AMQP_STATUS_OK)
      die("waiting for confirms: %s", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD)
      continue;
    if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
      amqp_basic_ack_t *a = f.payload.method.decoded;
      *confirmed = a->delivery_tag; /* with multiple or without: all up to it */
    } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
      die("the broker nacked a message");
    } else if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
      die("a message was unroutable");
    } else if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
               f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
      die("the broker closed the channel");
    }
    amqp_maybe_release_buffers(c);
  }
}

static int cmd_publish(const char *url, const char *queue, long n, long window, const char *resq) {
  amqp_connection_state_t c = connect_url(url);
  uint64_t confirmed = 0;
  char job_id[256];
  declare(c, queue);
  if (resq != NULL)
    declare(c, resq);
  amqp_confirm_select(c, CH);
  check_rpc(c, "confirm.select");
  double t0 = now_s(CLOCK_MONOTONIC);
  for (long i = 1; i <= n; i++) {
    snprintf(job_id, sizeof(job_id), "%.200s-%07ld", queue, i);
    publish_job(c, queue, job_id, resq);
    wait_confirms(c, (uint64_t)i, &confirmed, (uint64_t)window);
  }
  wait_confirms(c, (uint64_t)n, &confirmed, 0);
  double secs = now_s(CLOCK_MONOTONIC) - t0;
  printf("n=%ld secs=%.3f rate=%.1f\n", n, secs, n / secs);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return 0;
}

/* ---- consume / collect ---------------------------------------------------------------- */

/* Waits up to idle_s for the next delivery; 0 on timeout. */
static int next_delivery(amqp_connection_state_t c, amqp_envelope_t *env, double idle_s) {
  struct timeval tv = {(long)idle_s, (long)((idle_s - (long)idle_s) * 1e6)};
  amqp_maybe_release_buffers(c);
  amqp_rpc_reply_t r = amqp_consume_message(c, env, &tv, 0);
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
    return 0;
  if (r.reply_type != AMQP_RESPONSE_NORMAL)
    die("consume failed (reply type %d)", r.reply_type);
  return 1;
}

static void start_consumer(amqp_connection_state_t c, const char *queue, int prefetch) {
  amqp_basic_qos(c, CH, 0, (uint16_t)prefetch, 0);
  check_rpc(c, "basic.qos");
  amqp_basic_consume(c, CH, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  check_rpc(c, "basic.consume");
}

static int cmd_consume(const char *url, const char *queue, long n, int prefetch, long ack_every) {
  amqp_connection_state_t c = connect_url(url);
  amqp_envelope_t env;
  double t0 = 0;
  start_consumer(c, queue, prefetch);
  for (long i = 1; i <= n; i++) {
    if (!next_delivery(c, &env, 10))
      die("no message for 10 s after %ld of %ld", i - 1, n);
    if (i == 1)
      t0 = now_s(CLOCK_MONOTONIC);
    if (ack_every <= 1 || i % ack_every == 0 || i == n)
      if (amqp_basic_ack(c, CH, env.delivery_tag, ack_every > 1) != AMQP_STATUS_OK)
        die("ack failed");
    amqp_destroy_envelope(&env);
  }
  double secs = now_s(CLOCK_MONOTONIC) - t0;
  printf("n=%ld secs=%.3f rate=%.1f\n", n, secs, (n - 1) / secs);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return 0;
}

/* The result's job_id and whether its state is SUCCESS; NULL id when undecodable. */
static json_t *decode_result(const amqp_envelope_t *env, const char **job_id, int *success) {
  json_t *o = json_loadb(env->message.body.bytes, env->message.body.len, 0, NULL);
  const char *st = json_string_value(json_object_get(o, "state"));
  *job_id = json_string_value(json_object_get(o, "job_id"));
  *success = st != NULL && strcmp(st, "SUCCESS") == 0;
  return o;
}

static int cmd_collect(const char *url, const char *resq, long n, double idle_s, double max_s) {
  amqp_connection_state_t c = connect_url(url);
  amqp_envelope_t env;
  long got = 0, ok = 0;
  double first = 0, last = 0, deadline = now_s(CLOCK_MONOTONIC) + max_s;
  start_consumer(c, resq, 1000);
  while (got < n && now_s(CLOCK_MONOTONIC) < deadline && next_delivery(c, &env, idle_s)) {
    const char *id;
    int success;
    json_t *o = decode_result(&env, &id, &success);
    last = now_s(CLOCK_REALTIME);
    if (got++ == 0)
      first = last;
    ok += success;
    json_decref(o);
    if (got % 100 == 0 || got == n)
      amqp_basic_ack(c, CH, env.delivery_tag, 1);
    amqp_destroy_envelope(&env);
  }
  printf("received=%ld success=%ld first_ms=%.1f last_ms=%.1f rate=%.1f\n", got, ok, first * 1e3,
         last * 1e3, got > 1 ? (got - 1) / (last - first) : 0.0);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return got == n ? 0 : 1;
}

/* ---- latency -------------------------------------------------------------------------- */

struct pacer {
  const char *url, *queue, *resq;
  long total;
  double rate, t0; /* t0: CLOCK_MONOTONIC of the first send */
  volatile long sent;
};

static void *pace(void *arg) {
  struct pacer *p = arg;
  amqp_connection_state_t c = connect_url(p->url);
  char job_id[64];
  for (long i = 0; i < p->total; i++) {
    double due = p->t0 + i / p->rate;
    struct timespec ts = {(time_t)due, (long)((due - (time_t)due) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0)
      ;
    snprintf(job_id, sizeof(job_id), "lat-%07ld-%.0f", i, now_s(CLOCK_MONOTONIC) * 1e6);
    publish_job(c, p->queue, job_id, p->resq);
    p->sent = i + 1;
  }
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmd_latency(const char *url, const char *queue, const char *resq, double rate,
                       double secs, double drain) {
  amqp_connection_state_t c = connect_url(url);
  struct pacer p = {url, queue, resq, (long)(rate * secs), rate, 0, 0};
  double *lat = calloc((size_t)p.total + 1, sizeof(double));
  long got = 0, ok = 0;
  amqp_envelope_t env;
  pthread_t th;
  if (lat == NULL || p.total < 1)
    die("bad rate or duration");
  declare(c, queue);
  declare(c, resq);
  start_consumer(c, resq, 1000);
  p.t0 = now_s(CLOCK_MONOTONIC) + 0.2;
  double deadline = p.t0 + secs + drain;
  if (pthread_create(&th, NULL, pace, &p) != 0)
    die("pthread_create failed");
  while (got < p.total && now_s(CLOCK_MONOTONIC) < deadline &&
         next_delivery(c, &env, deadline - now_s(CLOCK_MONOTONIC) + 0.001)) {
    const char *id;
    int success;
    long seq;
    double sent_us;
    json_t *o = decode_result(&env, &id, &success);
    if (id != NULL && sscanf(id, "lat-%ld-%lf", &seq, &sent_us) == 2)
      lat[got++] = now_s(CLOCK_MONOTONIC) * 1e3 - sent_us / 1e3;
    ok += success;
    json_decref(o);
    amqp_basic_ack(c, CH, env.delivery_tag, 0);
    amqp_destroy_envelope(&env);
  }
  pthread_join(th, NULL);
  qsort(lat, (size_t)got, sizeof(double), cmp_double);
  printf("sent=%ld received=%ld success=%ld p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n", p.sent, got, ok,
         got ? lat[got / 2] : 0.0, got ? lat[(long)(got * 0.99)] : 0.0, got ? lat[got - 1] : 0.0);
  free(lat);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return got == p.total ? 0 : 1;
}

/* ---- relay --------------------------------------------------------------------------- */

/* The broker's share of the full protocol, without a database or a processor: consume
 * QUEUE (basic.qos PREFETCH, one multiple ack per ACK_EVERY deliveries) and for each job
 * publish a SUCCESS result to RESULT_QUEUE on a second connection (persistent, mandatory,
 * confirms, at most 100 unconfirmed), as a server does. Measures: first delivery -> last
 * confirm (the bench's collector times the results as for the mqproc rows). */
static int cmd_relay(const char *url, const char *queue, const char *resq, long n, int prefetch,
                     long ack_every) {
  amqp_connection_state_t in = connect_url(url), out = connect_url(url);
  amqp_basic_properties_t p = {
      ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG,
      .content_type = amqp_cstring_bytes("application/json"),
      .delivery_mode = AMQP_DELIVERY_PERSISTENT,
  };
  amqp_envelope_t env;
  uint64_t confirmed = 0;
  double t0 = 0;
  char body[512];
  declare(out, resq);
  amqp_confirm_select(out, CH);
  check_rpc(out, "confirm.select");
  start_consumer(in, queue, prefetch);
  for (long i = 1; i <= n; i++) {
    const char *job_id;
    int ok, len;
    json_t *job;
    if (!next_delivery(in, &env, 10))
      die("no message for 10 s after %ld of %ld", i - 1, n);
    if (i == 1)
      t0 = now_s(CLOCK_MONOTONIC);
    job = decode_result(&env, &job_id, &ok); /* the job's id, as the result's */
    len = snprintf(body, sizeof(body), "{\"job_id\":\"%.200s\",\"state\":\"SUCCESS\"}",
                   job_id != NULL ? job_id : "?");
    json_decref(job);
    p.message_id = amqp_cstring_bytes(job_id != NULL ? job_id : "?");
    p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
    if (amqp_basic_publish(out, CH, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(resq), 1, 0,
                           &p, (amqp_bytes_t){(size_t)len, body}) != AMQP_STATUS_OK)
      die("publish failed");
    if (ack_every <= 1 || i % ack_every == 0 || i == n)
      if (amqp_basic_ack(in, CH, env.delivery_tag, ack_every > 1) != AMQP_STATUS_OK)
        die("ack failed");
    amqp_destroy_envelope(&env);
    wait_confirms(out, (uint64_t)i, &confirmed, 100);
  }
  wait_confirms(out, (uint64_t)n, &confirmed, 0);
  double secs = now_s(CLOCK_MONOTONIC) - t0;
  printf("n=%ld secs=%.3f rate=%.1f\n", n, secs, (n - 1) / secs);
  amqp_connection_close(in, AMQP_REPLY_SUCCESS);
  amqp_connection_close(out, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(in);
  amqp_destroy_connection(out);
  return 0;
}

static int cmd_delete(const char *url, char **queues, int n) {
  amqp_connection_state_t c = connect_url(url);
  for (int i = 0; i < n; i++) {
    amqp_queue_delete(c, CH, amqp_cstring_bytes(queues[i]), 0, 0);
    check_rpc(c, "queue.delete");
  }
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  return 0;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  if (strcmp(cmd, "publish") == 0 && (argc == 6 || argc == 7))
    return cmd_publish(argv[2], argv[3], atol(argv[4]), atol(argv[5]), argc == 7 ? argv[6] : NULL);
  if (strcmp(cmd, "consume") == 0 && argc == 7)
    return cmd_consume(argv[2], argv[3], atol(argv[4]), atoi(argv[5]), atol(argv[6]));
  if (strcmp(cmd, "collect") == 0 && argc == 7)
    return cmd_collect(argv[2], argv[3], atol(argv[4]), atof(argv[5]), atof(argv[6]));
  if (strcmp(cmd, "latency") == 0 && argc == 8)
    return cmd_latency(argv[2], argv[3], argv[4], atof(argv[5]), atof(argv[6]), atof(argv[7]));
  if (strcmp(cmd, "relay") == 0 && argc == 8)
    return cmd_relay(argv[2], argv[3], argv[4], atol(argv[5]), atoi(argv[6]), atol(argv[7]));
  if (strcmp(cmd, "delete") == 0 && argc >= 4)
    return cmd_delete(argv[2], argv + 3, argc - 3);
  fprintf(stderr, "usage: see the comment at the top of bench/tp_amqp.c\n");
  return 2;
}
