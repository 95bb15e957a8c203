/* Queue side of the chaos benchmark (bench/chaos.sh): publish the jobs, drain the results,
 * over AMQP or a directory queue (URL dir:///SPOOL, docs/dir-queue.md).
 *
 *   chaos_client publish URL PROCESSOR RESULT_QUEUE JOBS_FILE
 *       Declares exchange ocrd-network-default (direct, non-durable, as mqproc and OCR-D
 *       declare it), the job queue PROCESSOR and RESULT_QUEUE (durable, no arguments,
 *       bound with routing key = queue name), then publishes one JSON processing message
 *       per line of JOBS_FILE (a job_id) — persistent, mandatory, with publisher
 *       confirms. Exits non-zero unless every message was confirmed and routed.
 *
 *   chaos_client drain URL RESULT_QUEUE OUT_FILE IDLE_MS
 *       Consumes RESULT_QUEUE (manual acks) until no message arrived for IDLE_MS and
 *       writes one line per result message: "job_id state redelivered message_id attempt". Prints
 * the count.
 *
 * With URL dir:///SPOOL the same over files, as a producer in another program would: publish
 * writes each job into SPOOL/PROCESSOR/tmp/ and renames it into new/ (docs/dir-queue.md,
 * "Writing a job from another program"; no fsync: the bench kills servers, not the power);
 * drain reads and removes the files of SPOOL/RESULT_QUEUE/new/ (IDLE_MS: how long no new
 * file arrived before it stops).
 *
 * Build: cc -O2 bench/chaos_client.c $(pkg-config --cflags --libs librabbitmq jansson)
 */
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define EXCHANGE "ocrd-network-default"
#define CH 1
#define WINDOW 256 /* messages in flight before waiting for confirms */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("chaos_client: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void check_rpc(amqp_connection_state_t c, const char *what) {
  amqp_rpc_reply_t r = amqp_get_rpc_reply(c);
  if (r.reply_type == AMQP_RESPONSE_NORMAL)
    return;
  if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
    amqp_channel_close_t *m = r.reply.decoded;
    die("%s: channel closed by the broker: %d %.*s", what, m->reply_code, (int)m->reply_text.len,
        (char *)m->reply_text.bytes);
  }
  if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
    die("%s: %s", what, amqp_error_string2(r.library_error));
  die("%s: failed (reply type %d)", what, r.reply_type);
}

/* Connects to url_in, or to the first node of a comma-separated list that answers (a
 * cluster with a node down). */
static amqp_connection_state_t connect_url(const char *url_in) {
  struct amqp_connection_info ci;
  char *list = strdup(url_in), *save = NULL, *url = NULL;
  amqp_connection_state_t c = NULL;
  amqp_socket_t *s;
  for (char *u = strtok_r(list, ",", &save); u != NULL && c == NULL;
       u = strtok_r(NULL, ",", &save)) {
    free(url);
    url = strdup(u);
    if (amqp_parse_url(url, &ci) != AMQP_STATUS_OK)
      die("bad AMQP URL");
    c = amqp_new_connection();
    s = amqp_tcp_socket_new(c);
    if (s == NULL || amqp_socket_open(s, ci.host, ci.port) != AMQP_STATUS_OK) {
      amqp_destroy_connection(c);
      c = NULL;
    }
  }
  free(list);
  if (c == NULL)
    die("cannot connect to %s", url_in);
  amqp_rpc_reply_t r =
      amqp_login(c, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
  if (r.reply_type != AMQP_RESPONSE_NORMAL)
    die("login failed");
  amqp_channel_open(c, CH);
  check_rpc(c, "channel.open");
  free(url);
  return c;
}

static void declare_queue(amqp_connection_state_t c, const char *q) {
  amqp_queue_declare(c, CH, amqp_cstring_bytes(q), 0, 1, 0, 0, amqp_empty_table);
  check_rpc(c, "queue.declare");
  amqp_queue_bind(c, CH, amqp_cstring_bytes(q), amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(q),
                  amqp_empty_table);
  check_rpc(c, "queue.bind");
}

/* The processing message of one job. */
static char *job_body(const char *job_id, const char *proc, const char *resq) {
  json_t *o =
      json_pack("{s:s, s:s, s:I, s:[s], s:[s], s:s, s:{}, s:s}", "job_id", job_id, "processor_name",
                proc, "created_time", (json_int_t)time(NULL), "input_file_grps", "OCR-D-IMG",
                "output_file_grps", "OCR-D-CHAOS", "path_to_mets", "/data/chaos/mets.xml",
                "parameters", "result_queue_name", resq);
  char *body = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (body == NULL)
    die("out of memory");
  return body;
}

/* ---- publish -------------------------------------------------------------------------- */

static uint64_t g_confirmed, g_returned, g_nacked;

/* Reads frames until every published message up to seq is confirmed. */
static void wait_confirms(amqp_connection_state_t c, uint64_t seq) {
  while (g_confirmed < seq) {
    amqp_frame_t f;
    struct timeval tv = {30, 0};
    int rc = amqp_simple_wait_frame_noblock(c, &f, &tv);
    if (rc != AMQP_STATUS_OK)
      die("waiting for confirms: %s", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_METHOD)
      continue;
    switch (f.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
      amqp_basic_ack_t *a = f.payload.method.decoded;
      g_confirmed = a->delivery_tag; /* with or without multiple: all up to it */
      break;
    }
    case AMQP_BASIC_NACK_METHOD: {
      amqp_basic_nack_t *n = f.payload.method.decoded;
      g_nacked++;
      g_confirmed = n->delivery_tag;
      break;
    }
    case AMQP_BASIC_RETURN_METHOD: { /* unroutable: the content follows */
      amqp_message_t m;
      g_returned++;
      if (amqp_read_message(c, f.channel, &m, 0).reply_type == AMQP_RESPONSE_NORMAL)
        amqp_destroy_message(&m);
      break;
    }
    case AMQP_CHANNEL_CLOSE_METHOD:
    case AMQP_CONNECTION_CLOSE_METHOD:
      die("broker closed the channel while publishing");
    default:
      break;
    }
    amqp_maybe_release_buffers(c);
  }
}

static int cmd_publish(const char *url, const char *proc, const char *resq, const char *jobs) {
  amqp_connection_state_t c = connect_url(url);
  FILE *in = fopen(jobs, "r");
  char line[512];
  uint64_t seq = 0;
  amqp_basic_properties_t p;
  if (in == NULL)
    die("cannot open %s", jobs);
  amqp_exchange_declare(c, CH, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes("direct"), 0, 0, 0,
                        0, amqp_empty_table);
  check_rpc(c, "exchange.declare");
  if (getenv("CHAOS_QUORUM") != NULL) {
    /* the servers declared the job queue (a quorum queue, their arguments); the results
     * get a quorum queue too, so a node's death loses none */
    amqp_table_entry_t e = {
        .key = amqp_cstring_bytes("x-queue-type"),
        .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("quorum")}};
    amqp_queue_declare(c, CH, amqp_cstring_bytes(resq), 0, 1, 0, 0,
                       (amqp_table_t){.num_entries = 1, .entries = &e});
    check_rpc(c, "queue.declare (quorum)");
    amqp_queue_bind(c, CH, amqp_cstring_bytes(resq), amqp_cstring_bytes(EXCHANGE),
                    amqp_cstring_bytes(resq), amqp_empty_table);
    check_rpc(c, "queue.bind");
  } else {
    declare_queue(c, proc);
    declare_queue(c, resq);
  }
  amqp_confirm_select(c, CH);
  check_rpc(c, "confirm.select");
  memset(&p, 0, sizeof(p));
  p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
  p.content_type = amqp_cstring_bytes("application/json");
  p.delivery_mode = AMQP_DELIVERY_PERSISTENT;
  while (fgets(line, sizeof(line), in) != NULL) {
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '\0')
      continue;
    char *body = job_body(line, proc, resq);
    int rc = amqp_basic_publish(c, CH, amqp_cstring_bytes(EXCHANGE), amqp_cstring_bytes(proc), 1, 0,
                                &p, amqp_cstring_bytes(body));
    free(body);
    if (rc != AMQP_STATUS_OK)
      die("publish: %s", amqp_error_string2(rc));
    seq++;
    if (seq - g_confirmed >= WINDOW)
      wait_confirms(c, seq - WINDOW / 2);
  }
  fclose(in);
  wait_confirms(c, seq);
  amqp_channel_close(c, CH, AMQP_REPLY_SUCCESS);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  printf("published %llu, confirmed %llu, nacked %llu, unroutable %llu\n", (unsigned long long)seq,
         (unsigned long long)g_confirmed, (unsigned long long)g_nacked,
         (unsigned long long)g_returned);
  return g_nacked == 0 && g_returned == 0 ? 0 : 1;
}

/* ---- a directory queue ------------------------------------------------------------------- */

static void mkdirs(const char *spool, const char *q) {
  char p[4096];
  const char *subs[] = {"", "/tmp", "/new", "/cur", "/failed"};
  snprintf(p, sizeof(p), "%s", spool);
  if (mkdir(p, 0755) != 0 && errno != EEXIST)
    die("mkdir %s: %s", p, strerror(errno));
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), "%s/%s%s", spool, q, subs[i]);
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      die("mkdir %s: %s", p, strerror(errno));
  }
}

static int dir_publish(const char *spool, const char *proc, const char *resq, const char *jobs) {
  FILE *in = fopen(jobs, "r");
  char line[512], tmp[4096], dst[4096], name[256];
  long n = 0;
  if (in == NULL)
    die("cannot open %s", jobs);
  mkdirs(spool, proc);
  mkdirs(spool, resq);
  while (fgets(line, sizeof(line), in) != NULL) {
    struct timespec ts;
    line[strcspn(line, "\r\n")] = '\0';
    if (line[0] == '\0')
      continue;
    char *body = job_body(line, proc, resq);
    clock_gettime(CLOCK_REALTIME, &ts);
    /* priority 0 (99 - 0), microseconds in 16 hex digits (FIFO), who wrote it */
    snprintf(name, sizeof(name), "99-%016llx-chaos-%d-%ld",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000,
             (int)getpid(), n);
    snprintf(tmp, sizeof(tmp), "%s/%s/tmp/%s", spool, proc, name);
    snprintf(dst, sizeof(dst), "%s/%s/new/%s", spool, proc, name);
    FILE *f = fopen(tmp, "w");
    if (f == NULL || fputs(body, f) == EOF || fclose(f) != 0)
      die("write %s: %s", tmp, strerror(errno));
    if (rename(tmp, dst) != 0)
      die("rename %s: %s", tmp, strerror(errno));
    free(body);
    n++;
  }
  fclose(in);
  printf("published %ld job files\n", n);
  return 0;
}

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "r");
  char *buf = NULL;
  size_t cap = 0;
  *len = 0;
  if (f == NULL)
    return NULL;
  for (;;) {
    if (*len + 4096 + 1 > cap && (buf = realloc(buf, cap = 2 * cap + 8192)) == NULL)
      die("out of memory");
    size_t k = fread(buf + *len, 1, 4096, f);
    *len += k;
    if (k < 4096)
      break;
  }
  fclose(f);
  buf[*len] = '\0';
  return buf;
}

/* One result file as a line of the drain's output; the envelope carries message_id and
 * headers (docs/dir-queue.md). */
static int dir_result(FILE *out, const char *path, int redelivered) {
  size_t len;
  char *data = slurp(path, &len), *body = data;
  json_t *meta = NULL, *o;
  const char *env = "MQPROC-ENVELOPE 1 ";
  if (data == NULL)
    return -1;
  if (strncmp(data, env, strlen(env)) == 0 && (body = strchr(data, '\n')) != NULL) {
    meta = json_loadb(data + strlen(env), (size_t)(body - data) - strlen(env), 0, NULL);
    body++;
  } else
    body = data;
  o = json_loads(body, 0, NULL);
  const char *jid = json_string_value(json_object_get(o, "job_id"));
  const char *st = json_string_value(json_object_get(o, "state"));
  const char *mid = json_string_value(json_object_get(meta, "message_id"));
  const char *att =
      json_string_value(json_object_get(json_object_get(meta, "headers"), "x-mqproc-attempt"));
  if (jid == NULL || st == NULL)
    fprintf(out, "(undecodable) ? %d - -\n", redelivered);
  else
    fprintf(out, "%s %s %d %s %s\n", jid, st, redelivered, mid != NULL && *mid ? mid : "-",
            att != NULL && *att ? att : "-");
  json_decref(o);
  json_decref(meta);
  free(data);
  return jid != NULL && st != NULL ? 0 : 1;
}

static int dir_drain(const char *spool, const char *resq, const char *out_path, int idle_ms) {
  FILE *out = fopen(out_path, "w");
  char dir[4096], path[8192];
  long n = 0, bad = 0;
  struct timespec last, now;
  if (out == NULL)
    die("cannot open %s", out_path);
  snprintf(dir, sizeof(dir), "%s/%s/new", spool, resq);
  clock_gettime(CLOCK_MONOTONIC, &last);
  for (;;) {
    DIR *d = opendir(dir);
    struct dirent *e;
    long got = 0;
    if (d == NULL)
      die("cannot read %s: %s", dir, strerror(errno));
    while ((e = readdir(d)) != NULL) {
      size_t k = strlen(e->d_name);
      if (e->d_name[0] == '.')
        continue;
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      int rc = dir_result(out, path, k > 2 && strcmp(e->d_name + k - 2, ".r") == 0);
      if (rc < 0)
        continue;
      bad += rc;
      if (unlink(path) != 0)
        die("unlink %s: %s", path, strerror(errno));
      got++;
    }
    closedir(d);
    n += got;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (got > 0)
      last = now;
    else if ((now.tv_sec - last.tv_sec) * 1000 + (now.tv_nsec - last.tv_nsec) / 1000000 >= idle_ms)
      break;
    else
      usleep(100 * 1000);
  }
  fclose(out);
  printf("drained %ld result files (%ld undecodable)\n", n, bad);
  return 0;
}

/* ---- drain ---------------------------------------------------------------------------- */

static int cmd_drain(const char *url, const char *resq, const char *out_path, int idle_ms) {
  amqp_connection_state_t c = connect_url(url);
  FILE *out = fopen(out_path, "w");
  long n = 0, bad = 0;
  if (out == NULL)
    die("cannot open %s", out_path);
  amqp_basic_qos(c, CH, 0, 500, 0);
  check_rpc(c, "basic.qos");
  amqp_basic_consume(c, CH, amqp_cstring_bytes(resq), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
  check_rpc(c, "basic.consume");
  for (;;) {
    amqp_envelope_t env;
    struct timeval tv = {idle_ms / 1000, (idle_ms % 1000) * 1000};
    amqp_maybe_release_buffers(c);
    amqp_rpc_reply_t r = amqp_consume_message(c, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
      break;
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
      die("consume: reply type %d (%s)", r.reply_type,
          r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error)
                                                          : "server exception");
    json_error_t e;
    json_t *o = json_loadb(env.message.body.bytes, env.message.body.len, 0, &e);
    const char *jid = o ? json_string_value(json_object_get(o, "job_id")) : NULL;
    const char *st = o ? json_string_value(json_object_get(o, "state")) : NULL;
    if (jid == NULL || st == NULL) {
      bad++;
      fprintf(out, "(undecodable) ? %d - -\n", env.redelivered);
    } else {
      amqp_basic_properties_t *p = &env.message.properties;
      int has_id = (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len > 0;
      amqp_bytes_t att = amqp_cstring_bytes("-");
      if (p->_flags & AMQP_BASIC_HEADERS_FLAG)
        for (int i = 0; i < p->headers.num_entries; i++) {
          amqp_table_entry_t *e = &p->headers.entries[i];
          if (e->key.len == 16 && memcmp(e->key.bytes, "x-mqproc-attempt", 16) == 0 &&
              e->value.kind == AMQP_FIELD_KIND_UTF8 && e->value.value.bytes.len > 0)
            att = e->value.value.bytes;
        }
      fprintf(out, "%s %s %d %.*s %.*s\n", jid, st, env.redelivered,
              has_id ? (int)p->message_id.len : 1, has_id ? (const char *)p->message_id.bytes : "-",
              (int)att.len, (const char *)att.bytes);
    }
    json_decref(o);
    if (amqp_basic_ack(c, CH, env.delivery_tag, 0) != AMQP_STATUS_OK)
      die("ack failed");
    amqp_destroy_envelope(&env);
    n++;
  }
  fclose(out);
  amqp_channel_close(c, CH, AMQP_REPLY_SUCCESS);
  amqp_connection_close(c, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(c);
  printf("drained %ld result messages (%ld undecodable)\n", n, bad);
  return 0;
}

int main(int argc, char **argv) {
  const char *dirq = "dir://";
  if (argc == 6 && strncmp(argv[2], dirq, strlen(dirq)) == 0) {
    const char *spool = argv[2] + strlen(dirq);
    if (strcmp(argv[1], "publish") == 0)
      return dir_publish(spool, argv[3], argv[4], argv[5]);
    if (strcmp(argv[1], "drain") == 0)
      return dir_drain(spool, argv[3], argv[4], atoi(argv[5]));
  }
  if (argc == 6 && strcmp(argv[1], "publish") == 0)
    return cmd_publish(argv[2], argv[3], argv[4], argv[5]);
  if (argc == 6 && strcmp(argv[1], "drain") == 0)
    return cmd_drain(argv[2], argv[3], argv[4], atoi(argv[5]));
  fprintf(stderr,
          "usage: %s publish URL PROCESSOR RESULT_QUEUE JOBS_FILE\n"
          "       %s drain URL RESULT_QUEUE OUT_FILE IDLE_MS\n",
          argv[0], argv[0]);
  return 2;
}
