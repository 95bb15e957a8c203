/* Unit: the dir:// backend's flusher (broker/dir_flush.c) on a real directory queue: files
 * land in new/ and are reported in the order they were handed over, a file that cannot be
 * placed is reported failed and leaves nothing behind, and the queue URL's
 * ?synchronous=normal turns the flushing off. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/dir_flush.h"
#include "broker/dirq.h"
#include "mqproc/mqproc.h"

typedef struct {
  uint64_t seq[64];
  int rc[64];
  size_t n;
} got_t;

static void done(void *ud, uint64_t seq, int rc) {
  got_t *g = ud;
  if (g->n < 64) {
    g->seq[g->n] = seq;
    g->rc[g->n++] = rc;
  }
}

/* Takes reports until n came (waiting on the eventfd, as the loop does). */
static void take_all(mqproc__dirq_flusher_t *f, got_t *g, size_t n) {
  for (int i = 0; i < 100 && g->n < n; i++) {
    struct pollfd p = {.fd = mqproc__dirq_flusher_fd(f), .events = POLLIN};
    if (poll(&p, 1, 100) > 0)
      mqproc__dirq_flusher_take(f, done, g);
  }
}

static long files_in(const char *qdir, const char *sub) {
  char dir[PATH_MAX];
  DIR *d;
  struct dirent *e;
  long n = 0;
  snprintf(dir, sizeof(dir), "%s/%s", qdir, sub);
  if ((d = opendir(dir)) == NULL)
    return -1;
  while ((e = readdir(d)) != NULL)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The test's queue, open (one per test process). */
static mqproc__dirq_q_t Q;

/* A fresh spool with the queue q, opened into Q; its path. */
static char *queue_dir(void) {
  static char spool[64];
  char err[MQPROC_ERR_LEN], *qdir;
  snprintf(spool, sizeof(spool), "/tmp/mqproc-flush-XXXXXX");
  cr_assert_not_null(mkdtemp(spool));
  cr_assert_eq(mqproc__dirq_open(spool, "q", 1, &Q, err), MQPROC_OK, "%s", err);
  qdir = strdup(Q.path);
  cr_assert_not_null(qdir);
  return qdir;
}

/* Closes Q, removes the spool around qdir and frees it. */
static void drop(char *qdir) {
  char cmd[PATH_MAX + 16];
  mqproc__dirq_close(&Q);
  *strrchr(qdir, '/') = '\0';
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", qdir);
  cr_expect_eq(system(cmd), 0);
  free(qdir);
}

/* Writes a message into Q's tmp/ and hands it over as seq, for new/. */
static void hand_over(mqproc__dirq_flusher_t *f, uint64_t seq, char *name) {
  char err[MQPROC_ERR_LEN], body[32];
  mqproc__dirq_msg_t m = {.body = body, .priority = 5};
  int fd;
  m.len = (size_t)snprintf(body, sizeof(body), "{\"n\": %llu}", (unsigned long long)seq);
  cr_assert_eq(mqproc__dirq_write(&Q, &m, name, &fd, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__dirq_flusher_add(f, seq, fd, Q.sub[MQPROC__DIRQ_TMP],
                                        Q.sub[MQPROC__DIRQ_NEW], name, err),
               MQPROC_OK, "%s", err);
}

static void flushes_in_order(int flush) {
  mqproc__dirq_flusher_t *f;
  char err[MQPROC_ERR_LEN], name[MQPROC__DIRQ_NAME_MAX], *qdir = queue_dir();
  got_t g = {0};
  cr_assert_eq(mqproc__dirq_flusher_new(&f, flush, err), MQPROC_OK, "%s", err);
  for (uint64_t i = 1; i <= 40; i++)
    hand_over(f, i, name);
  take_all(f, &g, 40);
  cr_assert_eq(g.n, 40, "every file reported");
  for (size_t i = 0; i < g.n; i++) {
    cr_expect_eq(g.seq[i], i + 1, "in the order handed over");
    cr_expect_eq(g.rc[i], MQPROC_OK);
  }
  cr_expect_eq(files_in(qdir, "new"), 40);
  cr_expect_eq(files_in(qdir, "tmp"), 0, "nothing left in tmp/");
  cr_expect_eq(mqproc__dirq_flusher_take(f, done, &g), 0, "nothing outstanding");
  mqproc__dirq_flusher_free(f);
  drop(qdir);
}

Test(dir_flush, files_land_in_new_and_are_reported_in_order, .timeout = 30) {
  flushes_in_order(1);
}

Test(dir_flush, relaxed_files_land_in_order_too, .timeout = 30) {
  flushes_in_order(0);
}

Test(dir_flush, a_landed_file_is_the_message_with_its_priority, .timeout = 30) {
  mqproc__dirq_flusher_t *f;
  char err[MQPROC_ERR_LEN], name[MQPROC__DIRQ_NAME_MAX], path[PATH_MAX], buf[64] = "";
  char *qdir = queue_dir();
  got_t g = {0};
  FILE *in;
  cr_assert_eq(mqproc__dirq_flusher_new(&f, 1, err), MQPROC_OK, "%s", err);
  hand_over(f, 7, name);
  mqproc__dirq_flusher_drain(f);
  snprintf(path, sizeof(path), "%s/new/%s", qdir, name);
  cr_assert_not_null(in = fopen(path, "r"), "in place once drained: %s", path);
  cr_expect_not_null(fgets(buf, sizeof(buf), in));
  fclose(in);
  cr_expect_str_eq(buf, "{\"n\": 7}");
  cr_expect_eq(mqproc__dirq_name_priority(name), 5);
  mqproc__dirq_flusher_take(f, done, &g);
  cr_expect_eq(g.n, 1);
  mqproc__dirq_flusher_free(f);
  drop(qdir);
}

Test(dir_flush, a_file_that_cannot_be_placed_is_reported_failed_and_removed, .timeout = 30) {
  mqproc__dirq_flusher_t *f;
  char err[MQPROC_ERR_LEN], name[MQPROC__DIRQ_NAME_MAX], path[PATH_MAX], *qdir = queue_dir();
  got_t g = {0};
  mqproc__dirq_msg_t m = {.body = "{}", .len = 2};
  int fd;
  cr_assert_eq(mqproc__dirq_flusher_new(&f, 1, err), MQPROC_OK, "%s", err);
  hand_over(f, 1, name);
  mqproc__dirq_flusher_drain(f);
  /* written, then new/ goes before it is handed over: its rename fails */
  cr_assert_eq(mqproc__dirq_write(&Q, &m, name, &fd, err), MQPROC_OK, "%s", err);
  snprintf(path, sizeof(path), "rm -rf '%s/new'", qdir);
  cr_assert_eq(system(path), 0);
  cr_assert_eq(mqproc__dirq_flusher_add(f, 2, fd, Q.sub[MQPROC__DIRQ_TMP], Q.sub[MQPROC__DIRQ_NEW],
                                        name, err),
               MQPROC_OK, "%s", err);
  take_all(f, &g, 2);
  cr_assert_eq(g.n, 2);
  cr_expect_eq(g.rc[0], MQPROC_OK);
  cr_expect_neq(g.rc[1], MQPROC_OK, "not in place: not confirmed");
  cr_expect_eq(files_in(qdir, "tmp"), 0, "its tmp/ file is removed");
  mqproc__dirq_flusher_free(f);
  drop(qdir);
}

/* A settled job's file handed over for removal: gone, and its two descriptors closed, by
 * the time the flusher is drained; nothing is reported for it (no confirm). */
Test(dir_flush, a_settled_file_is_removed_and_its_descriptors_closed_unreported, .timeout = 30) {
  mqproc__dirq_flusher_t *f;
  char err[MQPROC_ERR_LEN], path[PATH_MAX], *qdir = queue_dir();
  got_t g = {0};
  int fd, wfd;
  cr_assert_eq(mqproc__dirq_flusher_new(&f, 1, err), MQPROC_OK, "%s", err);
  snprintf(path, sizeof(path), "%s/cur/50-settled", qdir);
  cr_assert_geq(fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC, 0600), 0);
  cr_assert_geq(wfd = open(path, O_WRONLY | O_CLOEXEC), 0);
  mqproc__dirq_flusher_remove(f, Q.sub[MQPROC__DIRQ_CUR], "50-settled", fd, wfd);
  mqproc__dirq_flusher_drain(f);
  cr_expect_eq(files_in(qdir, "cur"), 0, "the file is gone");
  cr_expect(fcntl(fd, F_GETFD) < 0 && errno == EBADF, "its reading descriptor is closed");
  cr_expect(fcntl(wfd, F_GETFD) < 0 && errno == EBADF, "its writing descriptor is closed");
  cr_expect_eq(mqproc__dirq_flusher_take(f, done, &g), 0, "nothing to confirm");
  mqproc__dirq_flusher_free(f);
  drop(qdir);
}

Test(dir_flush, the_queue_url_says_whether_publishes_are_flushed) {
  char err[MQPROC_ERR_LEN], spool[MQPROC__DIRQ_SPOOL_MAX];
  int durable = -1;
  cr_assert_eq(mqproc__dirq_spool("dir:///var/spool/mq/", spool, &durable, err), MQPROC_OK);
  cr_expect_str_eq(spool, "/var/spool/mq");
  cr_expect_eq(durable, 1, "flushed by default");
  cr_assert_eq(mqproc__dirq_spool("dir:///var/spool/mq?synchronous=normal", spool, &durable, err),
               MQPROC_OK);
  cr_expect_str_eq(spool, "/var/spool/mq");
  cr_expect_eq(durable, 0);
  cr_assert_eq(mqproc__dirq_spool("dir:///s?synchronous=full", spool, &durable, err), MQPROC_OK);
  cr_expect_eq(durable, 1);
  cr_expect_eq(mqproc__dirq_spool("dir:///s?synchronous=off", spool, &durable, err),
               MQPROC_ECONFIG);
  cr_expect(strstr(err, "synchronous=normal") != NULL, "%s", err);
  cr_expect_eq(mqproc__dirq_spool("dir:///?synchronous=normal", spool, &durable, err),
               MQPROC_ECONFIG);
}
