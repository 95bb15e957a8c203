/* Files another party can write, as a hostile producer, processor or local user would plant
 * them (docs/security.md, "Files"): on a dir:// queue (with the store of the run: PostgreSQL,
 * and SQLite in the @dir+sqlite run), an entry of new/ or cur/ that is no regular file (a
 * FIFO, a directory, a link) goes to failed/ once with its reason, unread and never waited
 * on; a file over --max-message-size moves there unread; a queue directory that is a link
 * is refused, one swapped for a link while the server runs is never followed, nor a result
 * queue that is a link; a message cannot name the dead-letter queue nor make queue
 * directories; a flood of names is bounded. A processor that swaps its job log for a FIFO
 * or a link fails its own try at most: the server's loop, its --on-failure handler, `mqproc
 * jobs log` and the page never block on it nor read through it. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker/dirq.h"
#include "harness.h"
#include "mqproc/mqproc.h"

#define WAIT_MS 30000

TestSuite(hostile_files, .fini = it_cleanup);

/* ---- the test's queue --------------------------------------------------------------- */

static char *spool(void) {
  char *path = it_fmt("%s/spool", it_tmpdir());
  mkdir(path, 0700);
  return path;
}

/* SPOOL/proc with its directories (as a server or `mqproc submit` makes them). */
static char *make_queue(const char *proc) {
  char err[MQPROC_ERR_LEN], qdir[MQPROC__DIRQ_QDIR_MAX];
  cr_assert_eq(mqproc__dirq_make(spool(), proc, qdir, err), MQPROC_OK, "%s", err);
  return it_fmt("%s", qdir);
}

/* A producer's job file: written into tmp/, renamed into new/NAME. */
static void put_file(const char *q, const char *name, const char *body) {
  char *tmp = it_fmt("%s/tmp/%s", q, name);
  FILE *f = fopen(tmp, "w");
  cr_assert_not_null(f, "%s", tmp);
  fputs(body, f);
  cr_assert_eq(fclose(f), 0);
  cr_assert_eq(rename(tmp, it_fmt("%s/new/%s", q, name)), 0);
}

static void put_job(const char *q, const char *proc, const char *id, const char *extra) {
  put_file(q, it_fmt("50-%s", id), it_job_json(proc, id, extra));
}

/* Starts a server of proc on the test's spool with extra args (NULL-terminated) and env. */
static it_server_t *start_exec(const char *proc, const char *exec, const char *const *more,
                               const char *const *envp) {
  const char *extra[24] = {"--queue", it_fmt("dir://%s", spool()), "--http", "127.0.0.1:0"};
  int n = 4;
  for (; more != NULL && *more != NULL && n < 23; more++)
    extra[n++] = *more;
  extra[n] = NULL;
  return it_server_start(proc, exec, extra, envp);
}

static it_server_t *start(const char *proc, const char *const *more, const char *const *envp) {
  return start_exec(proc, it_proc("proc.sh"), more, envp);
}

static void expect_state(const char *id, const char *state) {
  cr_assert(it_sql_becomes(it_fmt("SELECT state FROM mqproc_jobs WHERE job_id = '%s'", id), state),
            "job %s never became %s", id, state);
}

/* What lstat says an entry is: 'f' file, 'p' FIFO, 'd' directory, 'l' link, '-' none. */
static char kind(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return '-';
  return S_ISREG(st.st_mode)    ? 'f'
         : S_ISFIFO(st.st_mode) ? 'p'
         : S_ISDIR(st.st_mode)  ? 'd'
         : S_ISLNK(st.st_mode)  ? 'l'
                                : '?';
}

/* The server answers /healthz, and SIGTERM stops it (a wedged loop does neither). */
static void expect_alive_and_stoppable(it_server_t *srv) {
  int port = it_http_port(srv), st;
  char *body;
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200, "/healthz");
  it_server_signal(srv, SIGTERM);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_expect(st != -1 && WIFEXITED(st), "SIGTERM stopped the server (wait status %d)", st);
  it_server_stop(srv);
}

/* Whether any regular file of dir holds text. */
static int any_file_holds(const char *dir, const char *text) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  while (d != NULL && !found && (e = readdir(d)) != NULL) {
    char *path = it_fmt("%s/%s", dir, e->d_name), *body;
    if (kind(path) == 'f' && (body = it_read_file(path)) != NULL)
      found = strstr(body, text) != NULL;
  }
  if (d != NULL)
    closedir(d);
  return found;
}

/* ---- 1. entries of the queue that are no regular file ------------------------------- */

Test(hostile_files, a_fifo_in_new_goes_to_failed_unread_and_blocks_nothing) {
  char *proc = it_name("ffn"), *q = make_queue(proc);
  it_server_t *srv = start(proc, NULL, NULL);
  cr_assert_eq(mkfifo(it_fmt("%s/tmp/f", q), 0600), 0);
  cr_assert_eq(rename(it_fmt("%s/tmp/f", q), it_fmt("%s/new/40-fifo", q)), 0);
  put_job(q, proc, "ffn-after", NULL);
  expect_state("ffn-after", "SUCCESS");
  cr_expect_eq(kind(it_fmt("%s/failed/40-fifo", q)), 'p', "the FIFO itself is in failed/");
  cr_expect_not_null(strstr(it_read_file(it_fmt("%s/failed/40-fifo.reason", q)), "a FIFO"));
  cr_expect(it_server_wait_log(srv, "new/40-fifo is a FIFO: moved to failed/ unread", 1000));
  expect_alive_and_stoppable(srv);
}

Test(hostile_files, a_fifo_left_in_cur_does_not_stop_a_server_from_starting) {
  char *proc = it_name("ffc"), *q = make_queue(proc);
  it_server_t *srv;
  cr_assert_eq(mkfifo(it_fmt("%s/cur/40-stale", q), 0600), 0);
  put_job(q, proc, "ffc-1", NULL);
  srv = start(proc, NULL, NULL); /* its look at cur/ comes before it consumes */
  expect_state("ffc-1", "SUCCESS");
  cr_expect_eq(kind(it_fmt("%s/failed/40-stale", q)), 'p');
  cr_expect_eq(kind(it_fmt("%s/cur/40-stale", q)), '-');
  expect_alive_and_stoppable(srv);
}

Test(hostile_files, a_directory_in_new_goes_to_failed_once) {
  char *proc = it_name("fdir"), *q = make_queue(proc);
  it_server_t *srv = start(proc, NULL, NULL), *second;
  cr_assert_eq(mkdir(it_fmt("%s/tmp/d1", q), 0700), 0);
  cr_assert_eq(rename(it_fmt("%s/tmp/d1", q), it_fmt("%s/new/40-dir", q)), 0);
  put_job(q, proc, "fdir-1", NULL);
  expect_state("fdir-1", "SUCCESS");
  cr_expect_eq(kind(it_fmt("%s/failed/40-dir", q)), 'd');
  cr_expect(it_files_become(it_fmt("%s/failed", q), 2), "the directory and its reason");
  /* a second server's start looks at all of cur/ and new/: nothing comes back */
  second = start(proc, NULL, NULL);
  put_job(q, proc, "fdir-2", NULL);
  expect_state("fdir-2", "SUCCESS");
  cr_expect_eq(it_files_in(it_fmt("%s/failed", q)), 2, "dead-lettered once, not again");
  cr_expect(it_files_become(it_fmt("%s/cur", q), 0), "settled files leave cur/ (the flusher)");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0,
               "nothing was read, so nothing was recorded as a message");
  it_server_stop(second);
  expect_alive_and_stoppable(srv);
}

Test(hostile_files, a_link_in_new_is_never_followed) {
  char *proc = it_name("flnk"), *q = make_queue(proc);
  char *secret = it_fmt("%s/admin-token", it_tmpdir());
  it_server_t *srv;
  FILE *f = fopen(secret, "w");
  cr_assert_not_null(f);
  fputs("s3cret-token-0123456789\n", f);
  fclose(f);
  cr_assert_eq(chmod(secret, 0600), 0);
  srv = start(proc, NULL, NULL);
  cr_assert_eq(symlink(secret, it_fmt("%s/tmp/l", q)), 0);
  cr_assert_eq(rename(it_fmt("%s/tmp/l", q), it_fmt("%s/new/40-link", q)), 0);
  put_job(q, proc, "flnk-1", NULL);
  expect_state("flnk-1", "SUCCESS");
  cr_expect_eq(kind(it_fmt("%s/failed/40-link", q)), 'l', "the link itself, moved");
  cr_expect_not_null(
      strstr(it_read_file(it_fmt("%s/failed/40-link.reason", q)), "a symbolic link"));
  cr_expect(!any_file_holds(it_fmt("%s/failed", q), "s3cret"), "no copy of the target");
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0,
               "the target was never read, so never recorded");
  expect_alive_and_stoppable(srv);
}

/* ---- 15. a file over --max-message-size ---------------------------------------------- */

Test(hostile_files, a_file_over_the_size_limit_moves_to_failed_unread) {
  char *proc = it_name("fbig"), *q = make_queue(proc), *tmp = it_fmt("%s/tmp/big", q);
  const char *more[] = {"--max-message-size=4096", NULL};
  struct stat before, after;
  it_server_t *srv = start(proc, more, NULL);
  FILE *f = fopen(tmp, "w");
  cr_assert_not_null(f);
  for (int i = 0; i < 1024; i++)
    fputs(it_fmt("%01023d\n", i), f);
  fclose(f);
  cr_assert_eq(stat(tmp, &before), 0);
  cr_assert_eq(rename(tmp, it_fmt("%s/new/40-big", q)), 0);
  put_job(q, proc, "fbig-1", NULL);
  expect_state("fbig-1", "SUCCESS");
  cr_assert_eq(stat(it_fmt("%s/failed/40-big", q), &after), 0, "moved under its own name");
  cr_expect_eq(after.st_ino, before.st_ino, "renamed, not copied");
  cr_expect_not_null(strstr(it_read_file(it_fmt("%s/failed/40-big.reason", q)),
                            "1048576 bytes exceeds the limit of 4096 bytes"));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 0, "never read");
  it_server_stop(srv);
}

/* ---- 14. the queue's own directories ------------------------------------------------- */

Test(hostile_files, a_queue_directory_that_is_a_link_is_refused_at_start) {
  char *proc = it_name("fqln"), *q = make_queue(proc), *victim = it_fmt("%s/victim", it_tmpdir());
  const char *extra[] = {"--queue", it_fmt("dir://%s", spool()), NULL};
  it_server_t *srv;
  int st;
  cr_assert_eq(mkdir(victim, 0700), 0);
  put_file(q, "unused", "x"); /* (a name in new/; the victim's file is what matters) */
  cr_assert_eq(system(it_fmt("echo precious > '%s/data1.txt'", victim)), 0);
  cr_assert_eq(rmdir(it_fmt("%s/cur", q)), 0);
  cr_assert_eq(symlink(victim, it_fmt("%s/cur", q)), 0);
  srv = it_server_spawn(proc, it_proc("proc.sh"), extra, NULL);
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "wait status %d", st);
  cr_expect(it_server_wait_log(srv, "cur is a symbolic link: refused", 1000));
  cr_expect_eq(kind(it_fmt("%s/data1.txt", victim)), 'f', "the victim's file stays where it is");
  it_server_stop(srv);
}

/* cur/ swapped for a link while the server runs: its look says so, and the files the link
 * leads to are never taken back, moved or removed. Showing that nothing happens takes a
 * few of the server's looks (every 100 ms here) after the one that noticed. */
Test(hostile_files, a_queue_directory_swapped_for_a_link_is_never_followed) {
  char *proc = it_name("fqsw"), *q = make_queue(proc), *victim = it_fmt("%s/victim", it_tmpdir());
  const char *envp[] = {"MQPROC_DIR_LOOK_MS=100", NULL};
  struct timespec looks = {0, 500 * 1000 * 1000};
  it_server_t *srv = start(proc, NULL, envp);
  put_job(q, proc, "fqsw-1", NULL);
  expect_state("fqsw-1", "SUCCESS");
  /* the ack (the file leaves cur/) follows the success's commit */
  cr_assert(it_files_become(it_fmt("%s/cur", q), 0), "the job's file stayed in cur/");
  cr_assert_eq(mkdir(victim, 0700), 0);
  cr_assert_eq(system(it_fmt("echo precious > '%s/data1.txt'", victim)), 0);
  cr_assert_eq(rmdir(it_fmt("%s/cur", q)), 0);
  cr_assert_eq(symlink(victim, it_fmt("%s/cur", q)), 0);
  cr_expect(it_server_wait_log(srv, "cur/ was removed or replaced", WAIT_MS));
  nanosleep(&looks, NULL);
  cr_expect_eq(kind(it_fmt("%s/data1.txt", victim)), 'f', "the victim's file stays");
  cr_expect_eq(it_files_in(it_fmt("%s/new", q)), 0, "nothing was taken back from it");
  cr_expect_eq(it_files_in(it_fmt("%s/failed", q)), 0);
  it_server_stop(srv);
}

Test(hostile_files, a_result_queue_that_is_a_link_is_not_followed) {
  char *proc = it_name("frql"), *q = make_queue(proc), *rq = it_name("frql-result");
  char *victim = make_queue(it_name("frql-victim"));
  it_server_t *srv = start(proc, NULL, NULL);
  cr_assert_eq(symlink(victim, it_fmt("%s/%s", spool(), rq)), 0);
  put_job(q, proc, "frql-1", it_fmt("{\"result_queue_name\": \"%s\"}", rq));
  expect_state("frql-1", "SUCCESS");
  cr_expect(it_server_wait_log(srv, "is a symbolic link: refused", WAIT_MS));
  cr_expect_eq(it_files_in(it_fmt("%s/new", victim)), 0, "no result where the link leads");
  it_server_stop(srv);
}

/* ---- 17. names a message may give ---------------------------------------------------- */

Test(hostile_files, a_message_can_neither_fake_a_dead_letter_nor_make_queues) {
  char *proc = it_name("frqn"), *q = make_queue(proc), *made = it_name("frqn-new");
  it_server_t *srv = start(proc, NULL, NULL);
  put_job(q, proc, "frqn-dead", it_fmt("{\"result_queue_name\": \"%s.dead\"}", proc));
  put_job(q, proc, "frqn-make", it_fmt("{\"result_queue_name\": \"%s\"}", made));
  put_job(q, proc, "frqn-ok", NULL);
  expect_state("frqn-ok", "SUCCESS");
  expect_state("frqn-make", "SUCCESS");
  cr_expect(it_server_wait_log(srv, "is this server's dead-letter queue", WAIT_MS));
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'frqn-dead'", 0), 0,
               "dead-lettered as invalid, never run");
  cr_expect_eq(kind(it_fmt("%s/%s.dead", spool(), proc)), '-', "no such queue made");
  cr_expect_eq(kind(it_fmt("%s/%s", spool(), made)), '-',
               "no --result-queue-pattern: no queue directory made by a message");
  cr_expect(it_server_wait_log(srv, "result message unroutable", WAIT_MS));
  cr_expect(it_files_become(it_fmt("%s/failed", q), 2), "one dead letter and its reason");
  it_server_stop(srv);
}

Test(hostile_files, a_result_queue_pattern_lets_messages_make_queues) {
  char *proc = it_name("frqp"), *q = make_queue(proc), *made = it_name("frqp-result");
  const char *more[] = {"--result-queue-pattern", ".*-result", NULL};
  it_server_t *srv = start(proc, more, NULL);
  put_job(q, proc, "frqp-1", it_fmt("{\"result_queue_name\": \"%s\"}", made));
  expect_state("frqp-1", "SUCCESS");
  cr_expect(it_files_become(it_fmt("%s/%s/new", spool(), made), 1), "the result, in its queue");
  it_server_stop(srv);
}

/* ---- 16. a flood of names ------------------------------------------------------------ */

/* The names a server keeps are bounded (MQPROC_DIR_HEAP_MAX, 4 here; 65536 by default):
 * names created (and removed again) while its only slot is busy do not pile up, and every
 * job is still found, by reading new/ again. */
Test(hostile_files, more_ready_names_than_are_kept_are_read_again) {
  char *proc = it_name("fheap"), *q = make_queue(proc), *gate = it_fmt("%s/gate", it_tmpdir());
  char *marker = it_fmt("%s/marker", it_tmpdir());
  const char *more[] = {"--prefetch=1", "--claim-ahead=0", NULL};
  const char *envp[] = {"MQPROC_DIR_HEAP_MAX=4", it_fmt("PROC_GATE=%s", gate),
                        "PROC_GATE_MATCH=fheap-gate", it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *srv = start(proc, more, envp);
  put_job(q, proc, "fheap-gate", NULL);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'fheap-gate'", "RUNNING"));
  for (int i = 0; i < 20; i++) { /* names that come and go */
    char *name = it_fmt("%s/new/60-gone-%d", q, i);
    cr_assert_eq(system(it_fmt("touch '%s'", name)), 0);
    cr_assert_eq(unlink(name), 0);
  }
  for (int i = 1; i <= 10; i++)
    put_job(q, proc, it_fmt("fheap-%d", i), NULL);
  cr_expect(it_server_wait_log(srv, "more than 4 ready names", WAIT_MS));
  it_open_gate(gate);
  for (int i = 1; i <= 10; i++)
    expect_state(it_fmt("fheap-%d", i), "SUCCESS");
  cr_expect_eq(it_file_lines(marker), 11, "every job ran once");
  it_server_stop(srv);
}

/* ---- 2. a processor's own job log ---------------------------------------------------- */

/* A processor script: jobs whose id contains "fifo" replace their log by a FIFO, those
 * with "link" by a link to target; then exit with status (the others succeed). Their first
 * try fails without swapping anything: a job's first try has no log file to swap (its
 * output is kept in memory), the failure makes it, and the later tries write there. */
static char *log_swapper(const char *target, int status) {
  char *path = it_fmt("%s/swap-log.sh", it_tmpdir());
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fprintf(f,
          "#!/bin/sh\n"
          "case \"$MQPROC_JOB_ID\" in\n"
          "  *fifo*|*link*) [ \"$MQPROC_TRY\" -gt 1 ] || { echo 'first try: fails'; exit 1; } ;;\n"
          "esac\n"
          "case \"$MQPROC_JOB_ID\" in\n"
          "  *fifo*) rm -f \"$MQPROC_LOG_FILE\"; mkfifo \"$MQPROC_LOG_FILE\"; exit %d ;;\n"
          "  *link*) ln -sf '%s' \"$MQPROC_LOG_FILE.tmp\";"
          " mv -f \"$MQPROC_LOG_FILE.tmp\" \"$MQPROC_LOG_FILE\"; exit %d ;;\n"
          "esac\n"
          "echo \"ran $MQPROC_JOB_ID\"\n",
          status, target, status);
  fclose(f);
  cr_assert_eq(chmod(path, 0755), 0);
  return path;
}

Test(hostile_files, a_processor_that_swaps_its_log_for_a_fifo_fails_only_its_own_tries) {
  char *proc = it_name("flogf"), *q = make_queue(proc);
  const char *more[] = {"--retries=2", "--max-requeues=0", "--on-failure=/bin/true", NULL};
  it_server_t *srv = start_exec(proc, log_swapper("/dev/null", 1), more, NULL);
  put_job(q, proc, "flogf-fifo-1", NULL);
  expect_state("flogf-fifo-1", "FAILED");
  cr_expect_not_null(
      strstr(it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = 'flogf-fifo-1'", 0),
             "it is not a regular file"),
      "the retry fails with the reason");
  cr_expect(it_server_wait_log(srv, "--on-failure handler's output not logged", WAIT_MS));
  put_job(q, proc, "flogf-ok-1", NULL);
  expect_state("flogf-ok-1", "SUCCESS");
  expect_alive_and_stoppable(srv);
}

/* The later job fails (a small success would need no file): making its log meets the
 * FIFO, which is refused, never waited on. */
Test(hostile_files, a_fifo_planted_at_a_later_jobs_log_fails_that_job_only) {
  char *proc = it_name("flogp"), *q = make_queue(proc);
  char *sub = it_fmt("%s/joblogs/%s", it_tmpdir(), proc);
  const char *more[] = {"--retries=0", "--max-requeues=0", NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=later", NULL};
  it_server_t *srv = start(proc, more, envp);
  put_job(q, proc, "flogp-ok-1", NULL);
  expect_state("flogp-ok-1", "SUCCESS");
  mkdir(it_fmt("%s/joblogs", it_tmpdir()), 0750);
  mkdir(sub, 0750); /* a successful job made no log, nor its directory */
  cr_assert_eq(mkfifo(it_fmt("%s/flogp-later.log", sub), 0640), 0);
  put_job(q, proc, "flogp-later", NULL);
  expect_state("flogp-later", "FAILED");
  cr_expect_not_null(
      strstr(it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = 'flogp-later'", 0),
             "it is not a regular file"),
      "the log's FIFO is why");
  put_job(q, proc, "flogp-ok-2", NULL);
  expect_state("flogp-ok-2", "SUCCESS");
  expect_alive_and_stoppable(srv);
}

/* ---- 4. readers of job logs ---------------------------------------------------------- */

Test(hostile_files, a_log_swapped_for_a_link_or_fifo_is_read_by_neither_cli_nor_page) {
  char *proc = it_name("flogr"), *q = make_queue(proc);
  char *secret = it_fmt("%s/server-secret", it_tmpdir()), *out = NULL, *body = NULL;
  const char *log_link[] = {"jobs", "log", "flogr-link-1", NULL};
  const char *log_fifo[] = {"jobs", "log", "flogr-fifo-1", NULL};
  it_server_t *srv;
  FILE *f = fopen(secret, "w");
  int port;
  cr_assert_not_null(f);
  fputs("s3cret-of-the-server\n", f);
  fclose(f);
  cr_assert_eq(chmod(secret, 0600), 0);
  srv = start_exec(proc, log_swapper(secret, 0), NULL, NULL);
  port = it_http_port(srv);
  put_job(q, proc, "flogr-link-1", NULL);
  put_job(q, proc, "flogr-fifo-1", NULL);
  expect_state("flogr-link-1", "SUCCESS");
  expect_state("flogr-fifo-1", "SUCCESS");
  for (int i = 0; i < 2; i++) {
    const char *const *args = i == 0 ? log_link : log_fifo;
    const char *argv[8] = {it_mqproc_bin()};
    const char *env[] = {it_fmt("MQPROC_DATABASE=%s", it_db_url()), NULL};
    for (int k = 0; args[k] != NULL; k++)
      argv[k + 1] = args[k];
    cr_expect_neq(it_run(argv, env, NULL, &out), 0, "%s is refused", args[2]);
    cr_expect(out == NULL || strstr(out, "s3cret") == NULL, "the target never printed: %s", out);
    cr_expect_eq(it_http_get(port, it_fmt("/jobs/%s", args[2]), &body), 200, "the page answers");
    cr_expect(body == NULL || strstr(body, "s3cret") == NULL, "the target never shown");
  }
  cr_expect_eq(it_http_get(port, "/healthz", &body), 200);
  it_server_stop(srv);
}

/* ---- 19. a created_time in the future ------------------------------------------------ */

Test(hostile_files, a_future_created_time_waited_no_time) {
  char *proc = it_name("fctm"), *q = make_queue(proc), *metrics = NULL, *line;
  it_server_t *srv = start(proc, NULL, NULL);
  double sum = -1;
  put_job(q, proc, "fctm-1", "{\"created_time\": 253402300799}");
  expect_state("fctm-1", "SUCCESS");
  cr_assert_eq(it_http_get(it_http_port(srv), "/metrics", &metrics), 200);
  line = strstr(metrics, "\nmqproc_queue_wait_seconds_sum");
  cr_assert_not_null(line, "%s", metrics);
  cr_assert_not_null(line = strchr(line + 1, ' '));
  sum = strtod(line, NULL);
  cr_expect_geq(sum, 0, "the wait's sum is %f", sum);
  it_server_stop(srv);
}
