/* The harness's second backends: with MQPROC_TEST_QUEUE=dir the tests' queue is a
 * directory queue in the test's tmpdir (dir://TMP/spool) and the AMQP helpers (declare,
 * publish, get, requeue, counts, dead letters) act on its files; with
 * MQPROC_TEST_STORE=sqlite the job store is TMP/jobs.db and it_sql reads it. The same
 * test sources then run on every backend pair (tests/CMakeLists.txt registers them). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/dirq.h"
#include "harness.h"
#include "harness_int.h"
#include "mqproc/mqproc.h"
#include "store/store.h"

int it_queue_is_dir(void) {
  const char *q = getenv("MQPROC_TEST_QUEUE");
  return q != NULL && strcmp(q, "dir") == 0;
}

int it_store_is_sqlite(void) {
  const char *s = getenv("MQPROC_TEST_STORE");
  return s != NULL && strcmp(s, "sqlite") == 0;
}

/* ---- dir:// ------------------------------------------------------------------------- */

static const char *spool(void) {
  char *path = it_fmt("%s/spool", it_tmpdir());
  mkdir(path, 0775);
  return path;
}

const char *it_dir_url(void) {
  return it_fmt("dir://%s", spool());
}

static char *qdir(const char *queue) {
  char err[MQPROC_ERR_LEN], q[MQPROC__DIRQ_QDIR_MAX];
  cr_assert_eq(mqproc__dirq_make(spool(), queue, q, err), MQPROC_OK, "%s", err);
  return it_fmt("%s", q);
}

void it_dir_declare(const char *queue) {
  qdir(queue);
}

/* A queue "P.dead" that is no directory of its own is P's failed/ (gone: dead letters of
 * P are refused as unroutable). */
static char *dead_dir(const char *queue) {
  size_t n = strlen(queue);
  struct stat st;
  if (n > 5 && strcmp(queue + n - 5, ".dead") == 0 &&
      stat(it_fmt("%s/%s", spool(), queue), &st) != 0)
    return it_fmt("%s/%.*s/failed", spool(), (int)(n - 5), queue);
  return NULL;
}

void it_dir_delete(const char *queue) {
  char *dead = dead_dir(queue);
  char *cmd = dead != NULL ? it_fmt("rm -rf '%s'", dead) : it_fmt("rm -rf '%s/%s'", spool(), queue);
  cr_assert_eq(system(cmd), 0);
}

void it_dir_publish(const char *rk, const void *body, size_t len) {
  char err[MQPROC_ERR_LEN], name[MQPROC__DIRQ_NAME_MAX];
  mqproc__dirq_msg_t m = {.body = body, .len = len, .content_type = "application/json"};
  mqproc__dirq_q_t q;
  cr_assert_eq(mqproc__dirq_open(spool(), rk, 1, &q, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__dirq_put(&q, MQPROC__DIRQ_NEW, &m, 1, name, err), MQPROC_OK, "%s", err);
  mqproc__dirq_close(&q);
}

/* The first job file of dir by name (not .reason, not a dot file); NULL when none. */
static char *first_name(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char *best = NULL;
  if (d == NULL)
    return NULL;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || (n > 7 && strcmp(e->d_name + n - 7, ".reason") == 0))
      continue;
    if (best == NULL || strcmp(e->d_name, best) < 0) {
      free(best);
      best = strdup(e->d_name);
    }
  }
  closedir(d);
  if (best != NULL) {
    char *kept = it_fmt("%s", best);
    free(best);
    return kept;
  }
  return NULL;
}

/* A job file as a message; its priority is the one its name says (docs/dir-queue.md). */
static void fill(it_msg_t *out, const char *name, const char *data, size_t len) {
  int redelivered = strlen(name) > 2 && strcmp(name + strlen(name) - 2, ".r") == 0;
  mqproc__dirq_msg_t m;
  json_t *meta = NULL, *h, *v;
  const char *k;
  mqproc__dirq_parse(data, len, &m, &meta);
  memset(out, 0, sizeof(*out));
  out->body = malloc(m.len + 1);
  memcpy(out->body, m.body, m.len);
  out->body[m.len] = '\0';
  out->len = m.len;
  out->redelivered = redelivered;
  out->content_type = strdup(m.content_type != NULL ? m.content_type : "");
  out->message_id = strdup(m.message_id != NULL ? m.message_id : "");
  out->priority = mqproc__dirq_name_priority(name);
  out->headers = it_fmt("%s", "");
  h = json_object_get(meta, "headers");
  json_object_foreach(h, k, v) {
    if (!json_is_string(v))
      continue;
    out->headers = it_fmt("%s%s=%s\n", out->headers, k, json_string_value(v));
    if (!strcmp(k, "x-mqproc-reason"))
      out->reason = strdup(json_string_value(v));
    else if (!strcmp(k, "x-mqproc-attempt"))
      out->attempt = strdup(json_string_value(v));
  }
  if (out->reason == NULL)
    out->reason = strdup("");
  if (out->attempt == NULL)
    out->attempt = strdup("");
  json_decref(meta);
}

/* A queue's ready files: QUEUE/new, or for "P.dead" P's failed/ (where dir:// puts them). */
static char *ready_dir(const char *queue) {
  char *dead = dead_dir(queue);
  return dead != NULL ? dead : it_fmt("%s/%s/new", spool(), queue);
}

int it_dir_take(const char *queue, int timeout_ms, it_msg_t *out, int requeue) {
  const char *dir = ready_dir(queue);
  for (int waited = 0; waited <= timeout_ms; waited += 20) {
    char *name = first_name(dir), *path, *data, *reason;
    struct stat st;
    if (name == NULL) {
      usleep(20 * 1000);
      continue;
    }
    path = it_fmt("%s/%s", dir, name);
    if (stat(path, &st) != 0 || (data = it_read_file(path)) == NULL)
      continue; /* a server took it meanwhile */
    /* a file failed/ got by a rename (unread: no envelope) has its reason beside it only */
    reason = it_read_file(it_fmt("%s.reason", path));
    if (requeue) { /* delivered again, marked so */
      if (rename(path, it_fmt("%s.r", path)) != 0)
        continue;
    } else {
      if (unlink(path) != 0)
        continue;
      unlink(it_fmt("%s.reason", path));
    }
    if (out != NULL)
      fill(out, name, data, (size_t)st.st_size);
    if (out != NULL && out->reason[0] == '\0' && reason != NULL) {
      free(out->reason);
      out->reason = strdup(reason);
      out->reason[strcspn(out->reason, "\n")] = '\0';
    }
    return 1;
  }
  return 0;
}

void it_dir_counts(const char *queue, long *ready, long *unacked) {
  char *q = it_fmt("%s/%s", spool(), queue), *dead = dead_dir(queue);
  if (dead != NULL) { /* dead letters: the files of failed/ but their reasons */
    DIR *d = opendir(dead);
    struct dirent *e;
    *ready = *unacked = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
      size_t n = strlen(e->d_name);
      *ready += e->d_name[0] != '.' && !(n > 7 && strcmp(e->d_name + n - 7, ".reason") == 0);
    }
    if (d != NULL)
      closedir(d);
    return;
  }
  {
    char err[MQPROC_ERR_LEN];
    mqproc__dirq_q_t dq;
    *ready =
        mqproc__dirq_open(spool(), queue, 0, &dq, err) == MQPROC_OK ? mqproc__dirq_count(&dq) : -1;
    mqproc__dirq_close(&dq);
  }
  {
    DIR *d = opendir(it_fmt("%s/cur", q));
    struct dirent *e;
    *unacked = 0;
    if (d != NULL) {
      while ((e = readdir(d)) != NULL)
        *unacked += e->d_name[0] != '.';
      closedir(d);
    }
  }
  cr_assert_geq(*ready, 0, "no queue directory %s", q);
}

/* ---- sqlite:// ---------------------------------------------------------------------- */

static sqlite3 *g_db;

const char *it_sqlite_url(void) {
  static char *url;
  char err[MQPROC_ERR_LEN];
  mqproc__store_t *st;
  char *want = it_fmt("sqlite://%s/jobs.db", it_tmpdir());
  if (url != NULL && strcmp(url, want) == 0)
    return url;
  free(url);
  url = strdup(want);
  cr_assert_eq(mqproc__store_sqlite_new(&st, url, NULL, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__store_migrate(st, err), MQPROC_OK, "migrate: %s", err);
  mqproc__store_destroy(st);
  return url;
}

char *it_sqlite_first(const char *sql, int n, va_list ap, int *found) {
  sqlite3_stmt *st;
  char *out = NULL;
  int rc;
  if (g_db == NULL) {
    cr_assert_eq(sqlite3_open(it_sqlite_url() + 9, &g_db), SQLITE_OK);
    sqlite3_busy_timeout(g_db, 30000);
  }
  rc = sqlite3_prepare_v2(g_db, sql, -1, &st, NULL);
  cr_assert_eq(rc, SQLITE_OK, "SQL for SQLite: %s: %s", sqlite3_errmsg(g_db), sql);
  for (int i = 0; i < n; i++)
    sqlite3_bind_text(st, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
  rc = sqlite3_step(st);
  cr_assert(rc == SQLITE_ROW || rc == SQLITE_DONE, "SQL for SQLite: %s: %s", sqlite3_errmsg(g_db),
            sql);
  *found = rc == SQLITE_ROW;
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
    out = it_fmt("%s", (const char *)sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return out;
}

void it_backends_cleanup(void) {
  if (g_db != NULL)
    sqlite3_close(g_db);
  g_db = NULL;
}

const char *it_q(const char *pg, const char *sqlite) {
  return it_store_is_sqlite() ? sqlite : pg;
}

/* ---- spans -------------------------------------------------------------------------- */

typedef struct span {
  long long ns;
  int start;
} span_t;

static int by_time(const void *a, const void *b) {
  const span_t *x = a, *y = b;
  if (x->ns != y->ns)
    return x->ns < y->ns ? -1 : 1;
  return x->start - y->start; /* an end before a start at the same instant */
}

int it_most_at_once(const char *spans_path) {
  char *text = it_read_file(spans_path), *save = NULL;
  span_t *v = NULL;
  size_t n = 0, cap = 0;
  int running = 0, most = 0;
  cr_assert_not_null(text, "no spans file %s", spans_path);
  for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
    char kind[16];
    long long ns;
    if (sscanf(line, "%15s %lld", kind, &ns) != 2)
      continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      v = realloc(v, cap * sizeof(*v));
      cr_assert_not_null(v);
    }
    v[n++] = (span_t){ns, strcmp(kind, "start") == 0};
  }
  qsort(v, n, sizeof(*v), by_time);
  for (size_t i = 0; i < n; i++) {
    running += v[i].start ? 1 : -1;
    most = running > most ? running : most;
  }
  free(v);
  return most;
}
