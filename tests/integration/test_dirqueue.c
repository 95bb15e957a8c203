/* The dir:// queue (broker/dir.c) with the PostgreSQL store, on a real filesystem: jobs
 * from `mqproc submit` and from a shell producer (a file written in tmp/, moved into new/)
 * are run, their results land in the sibling queue their message names; priorities order
 * the queue and headers reach the processor; a job that fails every try goes to the end of
 * the queue, then into failed/ with its reason beside it; a garbage file is dead-lettered
 * there too; a killed server's claimed job is taken back and finished exactly once. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(dirqueue, .fini = it_cleanup);

/* This test's spool directory and its dir:// URL. */
static char *spool(void) {
  char *path = it_fmt("%s/spool", it_tmpdir());
  mkdir(path, 0775);
  return path;
}

static char *url(void) {
  return it_fmt("dir://%s", spool());
}

/* The first file of dir whose name ends with suffix ("" any), its content; NULL: none. */
static char *first_file(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  struct dirent *e;
  char *out = NULL;
  if (d == NULL)
    return NULL;
  while (out == NULL && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name), s = strlen(suffix);
    if (e->d_name[0] != '.' && n >= s && strcmp(e->d_name + n - s, suffix) == 0)
      out = it_read_file(it_fmt("%s/%s", dir, e->d_name));
  }
  closedir(d);
  return out;
}

static void submit(const char *proc, const char *id, const char *const *more) {
  const char *argv[32] = {"submit", "--queue", url(), "--processor", proc, "--mets",
                          "/m.xml", "-I",      "IN",  "--job-id",    id};
  char *out, *cmd = it_mqproc_bin();
  int n = 11;
  for (; more != NULL && *more != NULL && n < 30; more++)
    argv[n++] = *more;
  argv[n] = NULL;
  {
    const char *full[34] = {cmd};
    const char *env[] = {it_fmt("MQPROC_DATABASE=%s", it_db_url()), NULL};
    for (int i = 0; i <= n; i++)
      full[i + 1] = argv[i];
    cr_assert_eq(it_run(full, env, NULL, &out), 0, "submit %s", id);
  }
}

static it_server_t *start(const char *proc, const char *const *more, const char *const *envp) {
  const char *extra[24] = {"--queue", url()};
  int n = 2;
  for (; more != NULL && *more != NULL && n < 23; more++)
    extra[n++] = *more;
  extra[n] = NULL;
  return it_server_start(proc, it_proc("proc.sh"), extra, envp);
}

Test(dirqueue, jobs_from_submit_and_a_shell_producer_run_and_results_land_beside) {
  char *proc = it_name("dq"), *q = it_fmt("%s/%s", spool(), proc);
  char *rq = it_fmt("%s-results", proc), *tmpf, *newf, *res;
  it_server_t *srv = start(proc, NULL, NULL);
  FILE *f;
  submit(proc, "dq-cli-1", (const char *const[]){"--result-queue", rq, NULL});
  /* a producer in another language: write into tmp/, then rename into new/ */
  tmpf = it_fmt("%s/tmp/shell-job", q);
  newf = it_fmt("%s/new/50-shell-job-1", q);
  f = fopen(tmpf, "w");
  cr_assert_not_null(f);
  fputs(it_job_json(proc, "dq-shell-1", NULL), f);
  fclose(f);
  cr_assert_eq(rename(tmpf, newf), 0);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dq-cli-1'", "SUCCESS"));
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dq-shell-1'", "SUCCESS"));
  cr_expect(it_files_become(it_fmt("%s/cur", q), 0), "every claimed file was settled");
  cr_expect_eq(it_files_in(it_fmt("%s/new", q)), 0);
  cr_assert(it_files_become(it_fmt("%s/%s/new", spool(), rq), 1),
            "the result in the sibling queue");
  res = first_file(it_fmt("%s/%s/new", spool(), rq), "");
  cr_expect(strstr(res, "\"job_id\": \"dq-cli-1\"") != NULL || strstr(res, "dq-cli-1") != NULL,
            "%s", res);
  cr_expect(strstr(res, "SUCCESS") != NULL, "%s", res);
  it_server_stop(srv);
}

Test(dirqueue, priorities_order_the_queue_and_headers_reach_the_processor) {
  char *proc = it_name("dqp"), *marker = it_fmt("%s/dqp-marker", it_tmpdir());
  char *copy = it_fmt("%s/dqp-copy", it_tmpdir()), *lines, *in;
  const char *envp[] = {it_fmt("PROC_MARKER=%s", marker), it_fmt("PROC_COPY=%s", copy), NULL};
  it_server_t *srv;
  mkdir(copy, 0775);
  /* queued before any server: submit makes the queue */
  submit(proc, "low", (const char *const[]){"--priority", "1", NULL});
  submit(proc, "high", (const char *const[]){"--priority", "9", "--header", "tenant=acme", NULL});
  submit(proc, "mid", (const char *const[]){"--priority", "5", NULL});
  srv = start(proc, NULL, envp);
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", "3"));
  lines = it_read_file(marker);
  cr_assert_not_null(lines);
  cr_expect(strstr(lines, "high") < strstr(lines, "mid") &&
                strstr(lines, "mid") < strstr(lines, "low"),
            "highest priority first: %s", lines);
  in = it_read_file(it_fmt("%s/high.json", copy));
  cr_expect(in != NULL && strstr(in, "\"tenant\":\"acme\"") != NULL, "the header on stdin: %s", in);
  it_server_stop(srv);
}

Test(dirqueue, a_failing_job_goes_to_the_end_then_to_failed_with_its_reason) {
  char *proc = it_name("dqf"), *q = it_fmt("%s/%s", spool(), proc);
  char *marker = it_fmt("%s/dqf-marker", it_tmpdir()), *lines, *reason;
  const char *envp[] = {"PROC_FAIL_MATCH=fail", it_fmt("PROC_MARKER=%s", marker), NULL};
  const char *more[] = {"--retries", "1", "--max-requeues", "1", NULL};
  it_server_t *srv;
  submit(proc, "dqf-fail-1", NULL);
  submit(proc, "dqf-ok-1", NULL);
  submit(proc, "dqf-ok-2", NULL);
  srv = start(proc, more, envp);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqf-fail-1'", "FAILED"));
  cr_assert(it_files_become(it_fmt("%s/failed", q), 2), "the message and its reason in failed/");
  lines = it_read_file(marker);
  /* two tries, then the others, then two more tries at the end of the queue */
  cr_expect(strstr(lines, "dqf-ok-2") < strstr(lines, "dqf-fail-1 2 "), "requeued to the end: %s",
            lines);
  cr_expect_eq(it_file_lines(marker), 6, "%s", lines);
  reason = first_file(it_fmt("%s/failed", q), ".reason");
  cr_expect(reason != NULL && strstr(reason, "exited with status 3") != NULL, "%s", reason);
  cr_expect(it_files_become(it_fmt("%s/cur", q), 0));
  cr_expect_eq(it_files_in(it_fmt("%s/new", q)), 0, "nothing left behind");
  it_server_stop(srv);
}

/* A file is abandoned when untouched for the later of its mtime and ctime: one copied in
 * with its old mtime kept (cp -p, rsync -t, tar) arrived now and stays. The limit is an
 * hour; MQPROC_DIR_TMP_ABANDONED_MS makes it 1.5 s here, so the test waits for a file to
 * age (the clock is what is tested: there is no event to await). */
Test(dirqueue, an_abandoned_file_in_tmp_is_removed_and_a_fresh_one_is_not) {
  char *proc = it_name("dqt"), *q = it_fmt("%s/%s", spool(), proc);
  char *old, *fresh, *copied;
  struct timeval two_hours_ago[2];
  struct timespec age = {1, 600 * 1000 * 1000};
  const char *envp[] = {"MQPROC_DIR_TMP_ABANDONED_MS=1500", NULL};
  it_server_t *srv;
  FILE *f;
  submit(proc, "dqt-1", NULL); /* makes the queue */
  old = it_fmt("%s/tmp/old-writer", q);
  fresh = it_fmt("%s/tmp/fresh-writer", q);
  copied = it_fmt("%s/tmp/copied-with-its-mtime", q);
  cr_assert_not_null(f = fopen(old, "w"));
  fputs("half a job", f);
  fclose(f);
  nanosleep(&age, NULL);
  cr_assert_not_null(f = fopen(fresh, "w"));
  fputs("half a job", f);
  fclose(f);
  cr_assert_not_null(f = fopen(copied, "w"));
  fputs("a whole job, copied in", f);
  fclose(f);
  gettimeofday(&two_hours_ago[0], NULL);
  two_hours_ago[0].tv_sec -= 7200;
  two_hours_ago[1] = two_hours_ago[0];
  cr_assert_eq(utimes(copied, two_hours_ago), 0);
  srv = start(proc, NULL, envp);
  /* the server looks at tmp/ when it opens the queue, before its first claim */
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqt-1'", "SUCCESS"));
  cr_expect_neq(access(old, F_OK), 0, "untouched for 1.6 s: removed");
  cr_expect_eq(access(fresh, F_OK), 0, "a file being written stays");
  cr_expect_eq(access(copied, F_OK), 0, "an old mtime, but it arrived just now: stays");
  cr_expect(it_server_wait_log(srv, "removed 1 abandoned file(s) from tmp/", WAIT_MS));
  it_server_stop(srv);
}

Test(dirqueue, a_file_that_is_no_job_is_dead_lettered_and_the_queue_goes_on) {
  char *proc = it_name("dqb"), *q = it_fmt("%s/%s", spool(), proc), *reason;
  it_server_t *srv = start(proc, NULL, NULL);
  FILE *f = fopen(it_fmt("%s/tmp/junk", q), "w");
  cr_assert_not_null(f);
  fputs("\x01\x02 this is neither JSON nor YAML: [", f);
  fclose(f);
  cr_assert_eq(rename(it_fmt("%s/tmp/junk", q), it_fmt("%s/new/50-junk", q)), 0);
  submit(proc, "dqb-ok-1", NULL);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqb-ok-1'", "SUCCESS"));
  cr_assert(it_files_become(it_fmt("%s/failed", q), 2), "the junk and its reason");
  reason = first_file(it_fmt("%s/failed", q), ".reason");
  cr_expect_not_null(reason);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_dead_letters", 0), 1, "recorded too");
  it_server_stop(srv);
}

Test(dirqueue, a_killed_servers_job_is_taken_back_and_finished_once) {
  char *proc = it_name("dqk"), *q = it_fmt("%s/%s", spool(), proc);
  char *gate = it_fmt("%s/dqk-gate", it_tmpdir()), *marker = it_fmt("%s/dqk-marker", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), it_fmt("PROC_MARKER=%s", marker), NULL};
  it_server_t *a = start(proc, NULL, envp), *b;
  int st;
  submit(proc, "dqk-1", NULL);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqk-1'", "RUNNING"));
  cr_expect_eq(it_files_in(it_fmt("%s/cur", q)), 1, "claimed");
  it_server_signal(a, SIGKILL);
  st = it_server_wait_exit(a, WAIT_MS);
  cr_assert(WIFSIGNALED(st));
  it_server_stop(a);
  it_open_gate(gate);
  b = start(proc, NULL, envp);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqk-1'", "SUCCESS"));
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'dqk-1'", 0), 2,
               "a new attempt (the fencing token grew)");
  cr_expect(it_files_become(it_fmt("%s/cur", q), 0));
  cr_expect_eq(it_files_in(it_fmt("%s/new", q)), 0);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0), 1);
  it_server_stop(b);
}

/* Puts n jobs of proc into its queue as a shell producer would (tmp/, then new/); extra:
 * more JSON members of each message (NULL: none). */
static void fill_with(const char *proc, const char *prefix, int n, const char *extra) {
  char *q = it_fmt("%s/%s", spool(), proc);
  mkdir(q, 0775);
  mkdir(it_fmt("%s/tmp", q), 0775);
  mkdir(it_fmt("%s/new", q), 0775);
  for (int i = 0; i < n; i++) {
    char *tmpf = it_fmt("%s/tmp/%s-%d", q, prefix, i);
    FILE *f = fopen(tmpf, "w");
    cr_assert_not_null(f);
    fputs(it_job_json(proc, it_fmt("%s-%d", prefix, i), extra), f);
    fclose(f);
    cr_assert_eq(rename(tmpf, it_fmt("%s/new/50-%s-%06d", q, prefix, i)), 0);
  }
}

static void fill(const char *proc, const char *prefix, int n) {
  fill_with(proc, prefix, n, NULL);
}

/* The automatic window (no --prefetch, no --claim-ahead): no-op jobs end long before the
 * next ones' claims commit, so the window deepens past its start (2 x --concurrency) and
 * goes back to it once the queue is empty; jobs of half a second never starve a slot and
 * keep it (a fleet shares a queue of long jobs as before). */
Test(dirqueue, short_jobs_deepen_the_window_and_long_ones_keep_it) {
  char *fast = it_name("dqwf"), *slow = it_name("dqws");
  const char *more[] = {"--queue", url(), "--concurrency", "2", "--log-level", "debug", NULL};
  it_server_t *srv;
  fill(fast, "w", 300);
  srv = it_server_start(fast, NULL, more, NULL);
  cr_assert(it_sql_becomes(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s' "
                                  "AND state = 'SUCCESS'",
                                  fast),
                           "300"));
  cr_expect(it_server_wait_log(srv, "window: 6 deliveries (was 4)", WAIT_MS), "it deepened");
  cr_expect(it_server_wait_log(srv, "window: 4 deliveries", WAIT_MS), "and came back when idle");
  it_server_stop(srv);

  fill(slow, "l", 8);
  srv = it_server_start(slow, it_proc("proc.sh"), more,
                        (const char *const[]){"PROC_SLEEP=0.5", NULL});
  cr_assert(it_sql_becomes(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s' "
                                  "AND state = 'SUCCESS'",
                                  slow),
                           "8"));
  cr_expect_eq(it_server_count_log(srv, "window:"), 0, "long jobs keep the window of 4");
  it_server_stop(srv);
}

/* Long jobs queued right behind a burst of short ones meet a deep window: server A claims
 * many of them ahead. Once one has waited a second for a slot, A's window goes back to its
 * start and the jobs claimed ahead beyond its passes are handed back: server B, started
 * then, runs some of them, and no job paid an attempt for the hand-back. */
Test(dirqueue, long_jobs_behind_short_ones_are_handed_back_for_another_server) {
  char *proc = it_name("dqh");
  const char *more_a[] = {"--queue", url(), "--concurrency", "2", "--worker-id", "dqh-A", NULL};
  const char *more_b[] = {"--queue", url(), "--concurrency", "2", "--worker-id", "dqh-B", NULL};
  it_server_t *a, *b;
  fill(proc, "a", 300);
  fill_with(proc, "b", 16, "{\"parameters\": {\"sleep_ms\": 1500}}");
  a = it_server_start(proc, NULL, more_a, NULL);
  cr_assert(it_server_wait_log(a, "handed back", WAIT_MS), "no hand-back");
  b = it_server_start(proc, NULL, more_b, NULL);
  cr_assert(it_sql_becomes(it_fmt("SELECT count(*) FROM mqproc_jobs WHERE processor_name = '%s' "
                                  "AND state = 'SUCCESS'",
                                  proc),
                           "316"));
  cr_expect_geq(it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE job_id LIKE 'b-%'"
                            " AND worker_id = 'dqh-B'",
                            0),
                1, "B ran some of the long jobs A handed back");
  cr_expect_eq(it_sql_long("SELECT max(attempt - attempt_base) FROM mqproc_jobs", 0), 1,
               "a hand-back costs no attempt");
  cr_expect_gt(it_sql_long("SELECT max(attempt) FROM mqproc_jobs WHERE job_id LIKE 'b-%'", 0), 1,
               "some were claimed again after their hand-back");
  it_server_stop(b);
  it_server_stop(a);
}

/* A holder's death is seen when the kernel closes its files: the other server on the host
 * takes the job back then, with no look at cur/ (theirs are an hour apart here). */
Test(dirqueue, a_dead_holders_job_is_taken_back_at_its_close_by_a_server_already_running) {
  char *proc = it_name("dqc"), *q = it_fmt("%s/%s", spool(), proc);
  char *gate = it_fmt("%s/dqc-gate", it_tmpdir());
  const char *envp[] = {it_fmt("PROC_GATE=%s", gate), "MQPROC_DIR_LOOK_MS=3600000", NULL};
  it_server_t *a = start(proc, NULL, envp), *b;
  int st;
  submit(proc, "dqc-1", NULL);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqc-1'", "RUNNING"));
  b = start(proc, NULL, envp); /* its first look (at start) finds the job held */
  cr_assert(it_server_wait_log(b, "consuming from queue", WAIT_MS));
  cr_expect_eq(it_files_in(it_fmt("%s/cur", q)), 1, "held by the first server");
  it_server_signal(a, SIGKILL);
  st = it_server_wait_exit(a, WAIT_MS);
  cr_assert(WIFSIGNALED(st));
  it_server_stop(a);
  cr_assert(it_server_wait_log(b, "of a server that died went back to new/", WAIT_MS));
  it_open_gate(gate);
  cr_assert(it_sql_becomes("SELECT state FROM mqproc_jobs WHERE job_id = 'dqc-1'", "SUCCESS"));
  cr_expect_eq(it_sql_long("SELECT attempt FROM mqproc_jobs WHERE job_id = 'dqc-1'", 0), 2);
  cr_expect(it_files_become(it_fmt("%s/cur", q), 0));
  it_server_stop(b);
}

/* URLs that cannot work stop the server at start with the reason (no endless retrying). */
Test(dirqueue, a_bad_queue_or_store_url_stops_the_server_with_the_reason) {
  struct {
    const char *queue, *database, *why;
  } cases[] = {
      {"dir://relative", NULL, "expected dir:///ABSOLUTE/PATH"},
      {NULL, "sqlite://relative.db", "expected sqlite:///ABSOLUTE/PATH"},
      {NULL, it_fmt("sqlite://%s/jobs.db?synchronous=bogus", it_tmpdir()),
       "the only option is ?synchronous=normal"},
      {NULL, it_fmt("sqlite://%s/no-such-dir/jobs.db", it_tmpdir()), "No such file or directory"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *extra[] = {"--queue", cases[i].queue != NULL ? cases[i].queue : url(), "--database",
                           cases[i].database != NULL ? cases[i].database : it_db_url(), NULL};
    it_server_t *srv = it_server_spawn(it_name("dqbad"), it_proc("proc.sh"), extra, NULL);
    int st = it_server_wait_exit(srv, WAIT_MS);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0, "case %zu: wait status %d", i, st);
    cr_expect(it_server_count_log(srv, cases[i].why) > 0, "case %zu: no '%s' in the log", i,
              cases[i].why);
    it_server_stop(srv);
  }
}
