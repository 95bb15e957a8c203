/* Integration: a 3-node RabbitMQ cluster (scripts/cluster.sh, started by a ctest fixture)
 * with the job queue a quorum queue (issue "secure and scaled out", items 3-5). Two
 * servers get the list of all three nodes; jobs flow while (1) the queue's leader node is
 * killed, then (2) the node one server is connected to is killed (it fails over to
 * another URL of its list). Each time: every job SUCCESS, none lost, none run to success
 * twice; the time from the kill until jobs finish again is logged (the closing note
 * quotes it: speed is the bench's business, not an assertion). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define JOBS 400
#define WAIT_MS 30000

TestSuite(cluster, .fini = it_cleanup);

static const char *cluster_dir(void) {
  const char *d = getenv("MQPROC_CLUSTER_DIR");
  cr_assert_not_null(d, "MQPROC_CLUSTER_DIR: run through ctest (the cluster fixture starts it)");
  return d;
}

/* A KEY='value' of the cluster's env file. */
static const char *cluster_env(const char *key) {
  char *text = it_read_file(it_fmt("%s/env", cluster_dir())), *p, *end;
  const char *k = it_fmt("%s='", key);
  cr_assert_not_null(text, "no cluster env in %s", cluster_dir());
  cr_assert_not_null(p = strstr(text, k), "no %s", key);
  p += strlen(k);
  cr_assert_not_null(end = strchr(p, '\''));
  return it_fmt("%.*s", (int)(end - p), p);
}

static char *cluster_cmd(const char *args) {
  char line[256];
  FILE *p = popen(it_fmt("bash %s/scripts/cluster.sh %s", MQPROC_SOURCE_DIR, args), "r");
  cr_assert_not_null(p);
  line[0] = '\0';
  if (fgets(line, sizeof(line), p) == NULL)
    line[0] = '\0';
  cr_assert_eq(pclose(p), 0, "cluster.sh %s failed", args);
  line[strcspn(line, "\n")] = '\0';
  return it_fmt("%s", line);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long successes(void) {
  return it_sql_long("SELECT count(*) FROM mqproc_jobs WHERE state = 'SUCCESS'", 0);
}

static void submit(const char *proc, const char *prefix) {
  it_server_t *cli = it_mqproc_spawn(
      "submit", (const char *const[]){"submit", "--queue", cluster_env("MQPROC_CLUSTER_URLS"),
                                      "--processor", proc, "--mets", "/data/m.xml", "-I", "A",
                                      "--count", it_fmt("%d", JOBS), "--job-id", prefix, NULL});
  cr_assert_eq(it_server_wait_exit(cli, 120000), 0, "submit to the cluster failed");
  it_server_stop(cli);
}

/* Kills node n once `before` jobs of this round succeeded, then waits for all of them:
 * every one SUCCESS, no job with two successful tries; logs the gap. */
static void round_with_kill(const char *proc, const char *prefix, long base, const char *what,
                            int (*pick)(void *), void *ud) {
  double killed, resumed = -1;
  long at_kill;
  int node = pick(ud); /* before the jobs: asking the cluster takes a while */
  cr_assert(node >= 1 && node <= 3, "no node to kill (%d)", node);
  submit(proc, prefix);
  for (int i = 0; i < 1200 && successes() < base + JOBS / 5; i++)
    usleep(20 * 1000);
  cluster_cmd(it_fmt("kill %s %d", cluster_dir(), node));
  killed = now_s();
  at_kill = successes();
  for (int i = 0; i < 3600 && successes() < base + JOBS; i++) { /* up to 3 min */
    /* past what the consumers held at the kill (2 servers x prefetch 4): new deliveries */
    if (resumed < 0 && successes() > at_kill + 10)
      resumed = now_s();
    usleep(50 * 1000);
  }
  fprintf(stderr,
          "cluster: %s (node %d): killed with %ld of %d done; new deliveries finishing %.1f s "
          "after the kill; all done %.1f s after it\n",
          what, node, at_kill - base, JOBS, resumed < 0 ? -1.0 : resumed - killed,
          now_s() - killed);
  cr_expect_eq(successes(), base + JOBS, "%s: lost jobs (%ld of %d SUCCESS)", what,
               successes() - base, JOBS);
  cr_expect_eq(it_sql_long("SELECT count(*) FROM (SELECT job_id FROM mqproc_all_tries WHERE ok "
                           "GROUP BY job_id HAVING count(*) > 1) twice",
                           0),
               0, "%s: a job ran to success twice", what);
  cluster_cmd(it_fmt("start-node %s %d", cluster_dir(), node)); /* it rejoins */
}

static int leader_of(void *proc) {
  return atoi(cluster_cmd(it_fmt("leader %s %s", cluster_dir(), (const char *)proc)));
}

/* The node the server is connected to now: its last "broker 127.0.0.1:PORT" line. */
static int node_of(void *srv) {
  char *last = NULL;
  for (size_t i = 0;; i++) {
    char *line = it_server_line(srv, i);
    if (line == NULL)
      break;
    if (strstr(line, "(of 3 in the list)") != NULL)
      last = line;
  }
  cr_assert_not_null(last, "the server never said which broker it took");
  for (int n = 1; n <= 3; n++)
    if (strstr(last, it_fmt(":%s ", cluster_env(it_fmt("MQPROC_CLUSTER_PORT_%d", n)))) != NULL)
      return n;
  return 0;
}

Test(cluster, quorum_queue_jobs_survive_a_leader_kill_and_a_connected_node_kill) {
  char *proc = it_name("cl");
  const char *urls = cluster_env("MQPROC_CLUSTER_URLS");
  const char *extra[] = {it_fmt("--queue=%s", urls), "--queue-type=quorum", "--prefetch=4",
                         "--concurrency=2",          "--heartbeat=5",       NULL};
  const char *envp[] = {"PROC_SLEEP=0.05", NULL};
  it_server_t *a, *b;
  if (it_queue_is_dir() || it_store_is_sqlite())
    cr_skip_test("the cluster: RabbitMQ + PostgreSQL only");
  a = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  b = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  round_with_kill(proc, "leader-", 0, "leader kill", leader_of, proc);
  round_with_kill(proc, "conn-", JOBS, "connected-node kill", node_of, a);
  cr_expect_gt(it_server_connections(a), 1, "server a never reconnected after its node died");
  it_server_stop(a);
  it_server_stop(b);
}
