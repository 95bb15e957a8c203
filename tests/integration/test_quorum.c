/* Integration: --queue-type=quorum (issue "secure and scaled out", item 4) on the test
 * run's RabbitMQ (a one-node cluster: a quorum queue with one replica behaves the same
 * towards a client). The job and dead-letter queues are quorum queues; returns come back
 * with x-delivery-count, which the server logs and counts; x-delivery-limit is the
 * broker's backstop, and what it stops lands in the dead-letter queue, never dropped;
 * priorities and a classic queue of the same name are refused with the reason. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"

#define WAIT_MS 30000

TestSuite(quorum, .fini = it_cleanup);

/* What RabbitMQ reports of a queue in one column of rabbitmqctl list_queues ("type":
 * "quorum", "classic"; "arguments": its x-arguments), NULL when there is no such queue. */
static char *queue_info(const char *queue, const char *column) {
  char line[2048], *value = NULL;
  FILE *p = popen(it_fmt("bash %s/scripts/services.sh rabbitmqctl %s list_queues -q name %s "
                         "2>/dev/null",
                         MQPROC_SOURCE_DIR, getenv("MQPROC_SERVICES_DIR"), column),
                  "r");
  cr_assert_not_null(p);
  while (fgets(line, sizeof(line), p) != NULL) {
    size_t k = strcspn(line, " \t");
    if (k == strlen(queue) && strncmp(line, queue, k) == 0) {
      value = it_fmt("%s", line + k + strspn(line + k, " \t"));
      value[strcspn(value, "\n")] = '\0';
    }
  }
  pclose(p);
  return value;
}

static char *queue_type(const char *queue) {
  return queue_info(queue, "type");
}

static void skip_unless_amqp(void) {
  if (it_queue_is_dir())
    cr_skip_test("quorum queues: RabbitMQ only");
}

Test(quorum, jobs_flow_and_returns_come_back_with_their_delivery_count) {
  char *proc = it_name("qq"), *results = it_name("qq-result");
  const char *extra[] = {"--queue-type=quorum", "--retries=0", "--max-requeues=1", NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=bad", NULL};
  it_server_t *srv;
  it_msg_t m;
  skip_unless_amqp();
  it_declare(results);
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  cr_expect_str_eq(queue_type(proc), "quorum");
  cr_expect_str_eq(queue_type(it_fmt("%s.dead", proc)), "quorum");
  it_publish(proc,
             it_job_json(proc, "qq-good", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_get(results, WAIT_MS, &m), "no result through a quorum queue");
  cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  /* fails, goes back to the queue once (a return: x-delivery-count 1), then FAILED */
  it_publish(proc, it_job_json(proc, "qq-bad", NULL));
  cr_expect(it_server_wait_log(srv,
                               "job qq-bad: claimed, attempt 2 (redelivered; "
                               "x-delivery-count 1)",
                               WAIT_MS),
            "no x-delivery-count in the log");
  it_expect_dead(proc, "");
  it_server_stop(srv);
}

Test(quorum, past_the_delivery_limit_the_broker_dead_letters_never_drops) {
  char *proc = it_name("qqlimit");
  const char *extra[] = {"--queue-type=quorum", "--delivery-limit=1", "--retries=0",
                         "--max-requeues=5",    "--max-attempts=10",  NULL};
  const char *envp[] = {"PROC_FAIL_MATCH=limit", NULL};
  it_server_t *srv;
  it_msg_t m;
  char *args;
  skip_unless_amqp();
  srv = it_server_start(proc, it_proc("proc.sh"), extra, envp);
  /* the broker's dead-lettering of a quorum queue is at most once unless told otherwise */
  args = queue_info(proc, "arguments");
  cr_assert_not_null(args, "no queue %s", proc);
  cr_expect(strstr(args, "at-least-once") != NULL && strstr(args, "reject-publish") != NULL, "%s",
            args);
  it_publish(proc, it_job_json(proc, "qq-limit", NULL));
  /* returned twice: the second return passes x-delivery-limit 1; the broker moves it */
  cr_assert(it_get(it_fmt("%s.dead", proc), WAIT_MS, &m), "the broker dropped the message");
  cr_expect(strstr(m.body, "qq-limit") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
}

Test(quorum, priorities_and_a_classic_queue_of_the_name_are_refused_with_the_reason) {
  char *proc = it_name("qqbad");
  const char *prio[] = {"--queue-type=quorum", "--max-priority=5", NULL};
  const char *quorum[] = {"--queue-type=quorum", NULL};
  it_server_t *srv;
  skip_unless_amqp();
  srv = it_server_spawn(proc, it_proc("proc.sh"), prio, NULL);
  cr_expect_eq(it_server_wait_exit(srv, WAIT_MS), 2 << 8);
  cr_expect(it_server_wait_log(srv, "quorum queues have no priorities", 1000));
  it_server_stop(srv);
  it_declare(proc); /* a classic queue of that name */
  srv = it_server_spawn(proc, it_proc("proc.sh"), quorum, NULL);
  cr_expect_eq(it_server_wait_exit(srv, WAIT_MS), 1 << 8);
  cr_expect(it_server_wait_log(srv, "a classic queue cannot become a quorum queue", 1000));
  it_server_stop(srv);
  cr_expect_str_eq(queue_type(proc), "classic", "the classic queue was touched");
}

/* A result queue that refuses messages for a while (a classic queue, full with
 * x-overflow=reject-publish: exact, where a quorum queue's length limit is soft; a quorum
 * queue electing its leader nacks likewise): the result is sent again until it is
 * taken, not recorded as lost after the first nack. */
Test(quorum, a_refused_result_is_sent_again_until_the_queue_takes_it) {
  char *proc = it_name("nack"), *results = it_name("nack-result");
  it_server_t *srv;
  it_msg_t m;
  char *cmd;
  skip_unless_amqp();
  cmd = it_fmt("curl -sf -u guest:guest -X PUT -H 'content-type: application/json' "
               "-d '{\"durable\":true,\"arguments\":{"
               "\"x-max-length\":1,\"x-overflow\":\"reject-publish\"}}' "
               "%s/api/queues/%%2f/%s",
               getenv("MQPROC_TEST_RMQ_MGMT_URL"), results);
  cr_assert_eq(system(cmd), 0, "cannot declare %s through the management API", results);
  srv = it_server_start(proc, NULL, NULL, NULL);
  it_publish(proc, it_job_json(proc, "nack-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_sql_becomes("SELECT count(*) FROM mqproc_jobs WHERE job_id = 'nack-1' AND "
                           "result_published",
                           "1"),
            "the first result was not taken");
  it_publish(proc, it_job_json(proc, "nack-2", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(
      srv, "job nack-2: the broker refused the result message (nack 1 of 5)", WAIT_MS));
  cr_assert(it_get(results, WAIT_MS, &m)); /* room for one again */
  cr_expect(strstr(m.body, "nack-1") != NULL, "%s", m.body);
  it_msg_free(&m);
  cr_assert(it_get(results, WAIT_MS, &m), "the refused result was not sent again");
  cr_expect(strstr(m.body, "nack-2") != NULL && strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
  it_msg_free(&m);
  it_server_stop(srv);
}

/* A server told to stop now (the second SIGTERM) does not wait out the backoff of a refused
 * result: it sends it once more, records the refusal (the row's outbox mark stays for a
 * sweep) and exits. */
Test(quorum, a_forced_stop_sends_a_refused_result_once_more_and_exits) {
  char *proc = it_name("nackstop"), *results = it_name("nackstop-result");
  it_server_t *srv;
  int before, st;
  skip_unless_amqp();
  cr_assert_eq(system(it_fmt("curl -sf -u guest:guest -X PUT -H 'content-type: application/json' "
                             "-d '{\"durable\":true,\"arguments\":{"
                             "\"x-max-length\":1,\"x-overflow\":\"reject-publish\"}}' "
                             "%s/api/queues/%%2f/%s",
                             getenv("MQPROC_TEST_RMQ_MGMT_URL"), results)),
               0, "cannot declare %s through the management API", results);
  srv = it_server_start(proc, NULL, NULL, NULL);
  it_publish(proc, it_job_json(proc, "ns-1", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_sql_becomes(
      "SELECT count(*) FROM mqproc_jobs WHERE job_id = 'ns-1' AND result_published", "1"));
  it_publish(proc, it_job_json(proc, "ns-2", it_fmt("{\"result_queue_name\": \"%s\"}", results)));
  cr_assert(it_server_wait_log(srv, "job ns-2: the broker refused the result message (nack 1 of 5)",
                               WAIT_MS));
  it_server_signal(srv, SIGTERM);
  cr_assert(it_server_wait_log(srv, "stopping; no new jobs", WAIT_MS));
  it_server_signal(srv, SIGTERM); /* the second: stop now */
  before = it_server_count_log(srv, "job ns-2: the broker refused the result message (nack");
  cr_assert(it_server_wait_log(srv, "job ns-2: result message not confirmed", WAIT_MS),
            "the refusal was not recorded: waiting out the backoff?");
  st = it_server_wait_exit(srv, WAIT_MS);
  cr_expect(st != -1 && WIFEXITED(st), "the server did not exit (wait status %d)", st);
  /* at most one send that was already under way when the signal came */
  cr_expect_leq(it_server_count_log(srv, "job ns-2: the broker refused the result message (nack"),
                before + 1, "it kept sending the result again after the forced stop");
  cr_expect_str_eq(it_sql(it_q("SELECT state || ' ' || result_published::int FROM mqproc_jobs"
                               " WHERE job_id = 'ns-2'",
                               "SELECT state || ' ' || result_published FROM mqproc_jobs"
                               " WHERE job_id = 'ns-2'"),
                          0),
                   "SUCCESS 0", "the outcome is kept with its outbox mark");
  it_server_stop(srv);
}
