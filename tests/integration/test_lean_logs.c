/* Integration: the hot path's system calls (issue 30, "fewer syscalls"). A job writes one
 * INFO line, at its end, with what an operator wants of it (outcome, attempt, tries, run
 * time); its claim and start are DEBUG lines. The server's lines are written once per loop
 * turn and its broker frames leave together; every line and every result still arrives. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define WAIT_MS 30000
#define JOBS 5

TestSuite(lean_logs, .fini = it_cleanup);

Test(lean_logs, a_job_writes_one_info_line_at_its_end) {
  char *proc = it_name("lean"), *results = it_name("lean-result");
  const char *extra[] = {"--log-level=info", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, NULL, extra, NULL);
  for (int i = 0; i < JOBS; i++) {
    char id[64], more[256];
    snprintf(id, sizeof(id), "lean-%d", i);
    snprintf(more, sizeof(more), "{\"result_queue_name\": \"%s\"}", results);
    it_publish(proc, it_job_json(proc, id, more));
  }
  for (int i = 0; i < JOBS; i++) {
    it_msg_t m;
    cr_assert(it_get(results, WAIT_MS, &m), "only %d results arrived", i);
    cr_expect(strstr(m.body, "SUCCESS") != NULL, "%s", m.body);
    it_msg_free(&m);
  }
  cr_assert(it_server_wait_count(srv, ": SUCCESS in ", JOBS, WAIT_MS));
  for (int i = 0; i < JOBS; i++) {
    char *of_job = it_fmt("job lean-%d: ", i);
    char *end = it_fmt("job lean-%d: SUCCESS in ", i);
    cr_expect_eq(it_server_count_log(srv, of_job), 1, "one line of job lean-%d", i);
    cr_expect_eq(it_server_count_log(srv, end), 1, "and it is the end of job lean-%d", i);
  }
  cr_expect_eq(it_server_count_log(srv, "(attempt 1 try 1; 1 try in this attempt)"), JOBS,
               "the end line says the attempt and its tries");
  cr_expect_eq(it_server_count_log(srv, ": claimed, attempt"), 0, "claims are DEBUG lines");
  cr_expect_eq(it_server_count_log(srv, " started (log "), 0, "starts are DEBUG lines");
  it_server_stop(srv);
}

Test(lean_logs, at_debug_the_claim_and_the_start_are_there_too) {
  char *proc = it_name("leandbg");
  it_server_t *srv = it_server_start(proc, NULL, NULL, NULL); /* the harness: debug */
  it_publish(proc, it_job_json(proc, "dbg-1", NULL));
  cr_assert(it_server_wait_log(srv, "job dbg-1: SUCCESS in ", WAIT_MS));
  cr_expect(it_server_wait_log(srv, "job dbg-1: claimed, attempt 1", 0));
  cr_expect(it_server_wait_log(srv, "job dbg-1: attempt 1 try 1 started", 0));
  it_server_stop(srv);
}
