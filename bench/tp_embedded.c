/* Raw limits of the embedded pair for bench/embedded.sh, with no mqproc code:
 *
 *   tp_embedded dir DIR N       a directory queue's durable enqueue: per job write a file
 *                               in DIR/tmp, fdatasync it, rename it into DIR/new, fsync
 *                               DIR/new; then claim + settle each (rename new -> cur,
 *                               unlink), no fsync (as the dir:// backend does)
 *   tp_embedded fill DIR N BODY N files of BODY into DIR/new (tmp + rename, no fsync):
 *                               a queue filled before a run
 *   tp_embedded put DIR N MS BODY  N jobs enqueued durably (as above) one every MS ms;
 *                               prints "job_index enqueued_at_us" per job (wall clock,
 *                               taken at the rename that queues it)
 *   tp_embedded sqlite DB N B   a job table in SQLite (WAL, synchronous=FULL unless the
 *                               environment says SYNC=NORMAL): claim (INSERT ... ON
 *                               CONFLICT ... RETURNING) and complete (UPDATE ... WHERE
 *                               attempt = ?) per job, B jobs per BEGIN IMMEDIATE ... COMMIT
 *
 * Prints one line of key=value.
 * Build: cc -O2 tp_embedded.c $(pkg-config --cflags --libs sqlite3)
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what) {
  fprintf(stderr, "tp_embedded: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Writes body into dir/tmp/name, renames it into dir/new; with sync, fdatasync before the
 * rename and an fsync of new/ after. at_us (may be NULL): the wall clock at the rename. */
static void put(const char *dir, const char *name, const char *body, int sync, long long *at_us) {
  char tmp[4096], dst[4096];
  struct timespec ts;
  int fd;
  snprintf(tmp, sizeof(tmp), "%s/tmp/%s", dir, name);
  snprintf(dst, sizeof(dst), "%s/new/%s", dir, name);
  if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644)) < 0)
    die(tmp);
  if (write(fd, body, strlen(body)) != (ssize_t)strlen(body) || (sync && fdatasync(fd) != 0))
    die("write");
  close(fd);
  clock_gettime(CLOCK_REALTIME, &ts);
  if (at_us != NULL)
    *at_us = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
  if (rename(tmp, dst) != 0)
    die("rename");
  if (sync) {
    snprintf(tmp, sizeof(tmp), "%s/new", dir);
    if ((fd = open(tmp, O_RDONLY | O_DIRECTORY)) < 0 || fsync(fd) != 0)
      die("fsync new/");
    close(fd);
  }
}

static void make_dirs(const char *dir) {
  const char *subs[] = {"", "/tmp", "/new", "/cur", "/failed"};
  char p[4096];
  for (int i = 0; i < 5; i++) {
    snprintf(p, sizeof(p), "%s%s", dir, subs[i]);
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
      die(p);
  }
}

static int dir_mode(const char *dir, int n) {
  char name[64], from[4096], to[4096];
  double t0, t1, t2;
  make_dirs(dir);
  t0 = now_s();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof(name), "50-%016x-tp", i);
    put(dir, name, "{\"job_id\": \"x\"}", 1, NULL);
  }
  t1 = now_s();
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof(name), "50-%016x-tp", i);
    snprintf(from, sizeof(from), "%s/new/%s", dir, name);
    snprintf(to, sizeof(to), "%s/cur/%s", dir, name);
    if (rename(from, to) != 0 || unlink(to) != 0)
      die("claim");
  }
  t2 = now_s();
  printf("dir_enqueue_per_s=%.0f dir_claim_settle_per_s=%.0f\n", n / (t1 - t0), n / (t2 - t1));
  return 0;
}

static int fill_mode(const char *dir, int n, const char *body_fmt) {
  char name[64], body[8192];
  make_dirs(dir);
  for (int i = 0; i < n; i++) {
    snprintf(name, sizeof(name), "50-%016x-fill", i);
    snprintf(body, sizeof(body), body_fmt, i);
    put(dir, name, body, 0, NULL);
  }
  return 0;
}

static void check(sqlite3 *db, int rc, const char *what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fprintf(stderr, "tp_embedded: %s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
  }
}

static int sqlite_mode(const char *path, int n, int batch) {
  const char *sync = getenv("SYNC");
  char pragma[128], id[32];
  sqlite3 *db;
  sqlite3_stmt *claim, *complete;
  double t0;
  unlink(path);
  check(NULL, sqlite3_open(path, &db), "open");
  snprintf(pragma, sizeof(pragma), "PRAGMA journal_mode = WAL; PRAGMA synchronous = %s",
           sync != NULL ? sync : "FULL");
  check(db, sqlite3_exec(db, pragma, NULL, NULL, NULL), "pragma");
  check(db,
        sqlite3_exec(db,
                     "CREATE TABLE jobs (job_id text PRIMARY KEY, state text NOT NULL, attempt "
                     "integer NOT NULL, worker_id text, lease_until integer)",
                     NULL, NULL, NULL),
        "create");
  check(db,
        sqlite3_prepare_v2(db,
                           "INSERT INTO jobs VALUES (?1, 'RUNNING', 1, 'tp', 30000)"
                           " ON CONFLICT (job_id) DO UPDATE SET state = 'RUNNING', attempt ="
                           " attempt + 1 WHERE state = 'QUEUED' RETURNING attempt",
                           -1, &claim, NULL),
        "prepare");
  check(db,
        sqlite3_prepare_v2(db,
                           "UPDATE jobs SET state = 'SUCCESS', lease_until = NULL WHERE job_id ="
                           " ?1 AND attempt = ?2 AND state = 'RUNNING'",
                           -1, &complete, NULL),
        "prepare");
  t0 = now_s();
  for (int i = 0; i < n;) {
    check(db, sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), "begin");
    for (int k = 0; k < batch && i < n; k++, i++) {
      int attempt = 0;
      snprintf(id, sizeof(id), "job-%d", i);
      sqlite3_bind_text(claim, 1, id, -1, SQLITE_TRANSIENT);
      if (sqlite3_step(claim) == SQLITE_ROW)
        attempt = sqlite3_column_int(claim, 0);
      sqlite3_reset(claim);
      sqlite3_bind_text(complete, 1, id, -1, SQLITE_TRANSIENT);
      sqlite3_bind_int(complete, 2, attempt);
      check(db, sqlite3_step(complete), "complete");
      sqlite3_reset(complete);
    }
    check(db, sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), "commit");
  }
  printf("sqlite_jobs_per_s=%.0f batch=%d sync=%s\n", n / (now_s() - t0), batch,
         sync != NULL ? sync : "FULL");
  sqlite3_finalize(claim);
  sqlite3_finalize(complete);
  sqlite3_close(db);
  return 0;
}

static int put_mode(const char *dir, int n, int ms, const char *body_fmt) {
  char name[64], body[8192];
  make_dirs(dir);
  for (int i = 0; i < n; i++) {
    struct timespec ts;
    long long at;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(name, sizeof(name), "50-%016llx-put-%d",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000, i);
    snprintf(body, sizeof(body), body_fmt, i);
    put(dir, name, body, 1, &at);
    printf("%d %lld\n", i, at);
    fflush(stdout);
    usleep((useconds_t)ms * 1000);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 6 && !strcmp(argv[1], "put"))
    return put_mode(argv[2], atoi(argv[3]), atoi(argv[4]), argv[5]);
  if (argc >= 4 && !strcmp(argv[1], "dir"))
    return dir_mode(argv[2], atoi(argv[3]));
  if (argc >= 5 && !strcmp(argv[1], "fill"))
    return fill_mode(argv[2], atoi(argv[3]), argv[4]);
  if (argc >= 5 && !strcmp(argv[1], "sqlite"))
    return sqlite_mode(argv[2], atoi(argv[3]), atoi(argv[4]));
  fprintf(stderr,
          "usage: tp_embedded dir DIR N | fill DIR N BODY | put DIR N MS BODY | sqlite DB N B\n");
  return 2;
}
