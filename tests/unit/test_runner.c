/* Unit tests for what the runners share (src/runner/common.c: the texts a try ends with,
 * the fd helpers; the spawn helper where policy refuses executable memfds) and for the worker
 * runner's wire format (src/runner/worker_proto.c: pack/unpack, and one request with its two fds
 * over a real socketpair). */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codec/codec.h"
#include "runner/int.h"
#include "runner/spawn/spawner.h"
#include "runner/worker_int.h"
#include "base/util.h"

/* ---- texts -------------------------------------------------------------------------- */

/* A wait status as waitpid() reports it, made by a real child. */
static int wait_status_of(int exit_code, int sig) {
  int st;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    if (sig != 0) {
      signal(sig, SIG_DFL);
      raise(sig);
    }
    _exit(exit_code);
  }
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  return st;
}

Test(runner, a_crash_names_the_signal_or_the_exit_status) {
  mqproc__run_result_t r;
  mqproc__runner_describe_crash(wait_status_of(0, SIGSEGV), &r);
  cr_expect_str_eq(r.error, "processor crashed: killed by signal 11 (Segmentation fault)");
  cr_expect_eq(r.status, MQPROC_ERUNNER_FAILED);
  cr_expect_eq(r.term_signal, SIGSEGV);
  cr_expect_eq(r.exit_code, -1);
  mqproc__runner_describe_crash(wait_status_of(3, 0), &r);
  cr_expect_str_eq(r.error, "processor crashed: exited with status 3");
  cr_expect_eq(r.term_signal, 0);
  cr_expect_eq(r.exit_code, -1, "not the function's return value");
  mqproc__runner_describe_crash(wait_status_of(0, 0), &r);
  cr_expect_str_eq(r.error, "processor crashed: exited with status 0");
  cr_expect_eq(r.status, MQPROC_ERUNNER_FAILED, "a worker that exits mid-try failed it");
}

Test(runner, a_time_limit_reads_in_seconds_when_it_is_whole_seconds) {
  mqproc__run_result_t r;
  mqproc__runner_describe_timeout(2000, &r);
  cr_expect_str_eq(r.error, "processor exceeded its time limit of 2 s (process group killed)");
  cr_expect_eq(r.status, MQPROC_ERUNNER_TIMEOUT);
  cr_expect_eq(r.term_signal, SIGKILL);
  cr_expect_eq(r.exit_code, -1);
  mqproc__runner_describe_timeout(1500, &r);
  cr_expect_str_eq(r.error, "processor exceeded its time limit of 1500 ms (process group killed)");
}

Test(runner, a_function_result_prefers_its_own_reason) {
  mqproc__run_result_t r;
  mqproc__runner_function_result(0, NULL, 12, &r);
  cr_expect_eq(r.status, MQPROC_OK);
  cr_expect_str_eq(r.error, "");
  cr_expect_eq(r.duration_ms, 12);
  mqproc__runner_function_result(1, "no pages", 5, &r);
  cr_expect_eq(r.status, MQPROC_ERUNNER_FAILED);
  cr_expect_eq(r.exit_code, 1);
  cr_expect_str_eq(r.error, "no pages");
  mqproc__runner_function_result(7, "", 5, &r);
  cr_expect_str_eq(r.error, "processing function returned 7");
}

Test(runner, a_child_report_names_the_failed_step) {
  char text[MQPROC_ERR_LEN];
  mqproc__child_report_t exec = {MQPROC__STAGE_EXEC, ENOENT};
  mqproc__child_report_t dup = {MQPROC__STAGE_DUP2, EBADF};
  mqproc__child_report_text(&exec, text, sizeof(text));
  cr_expect_str_eq(text, "No such file or directory");
  mqproc__child_report_text(&dup, text, sizeof(text));
  cr_expect_str_eq(text, "dup2: Bad file descriptor");
}

/* ---- fds ---------------------------------------------------------------------------- */

Test(runner, a_memfd_holds_the_bytes_from_the_start) {
  char err[MQPROC_ERR_LEN], buf[16] = "";
  int fd = mqproc__runner_memfd("t", "abc\0def", 7, err);
  cr_assert_geq(fd, 0, "%s", err);
  cr_expect_eq(read(fd, buf, sizeof(buf)), 7);
  cr_expect_eq(memcmp(buf, "abc\0def", 7), 0);
  /* sealed: whoever gets it (a processor's stdin) cannot change or grow the bytes */
  errno = 0;
  cr_expect_eq(pwrite(fd, "x", 1, 0), -1, "a memfd was written after it was filled");
  cr_expect_eq(errno, EPERM);
  cr_expect_neq(ftruncate(fd, 0), 0, "a memfd was truncated");
  close(fd);
}

/* ---- where policy refuses executable memfds (vm.memfd_noexec=2, Linux 6.3) ------------- */

typedef struct try_end {
  mqproc__loop_t *loop;
  int wstatus, ended, step_failed;
} try_end_t;

static void on_try_end(void *ud, const mqproc__spawn_end_t *end) {
  try_end_t *e = ud;
  e->wstatus = end->wstatus;
  e->step_failed = end->step_failed;
  e->ended = 1;
  mqproc__loop_stop(e->loop);
}

static void on_guard(mqproc__loop_t *loop, void *ud) {
  (void)ud;
  mqproc__loop_stop(loop);
}

/* The spawn helper's program is not a memfd of this process's: the helper runs in a fork. */
static int helper_is_a_fork(void) {
  char self[256], exe[256], path[64];
  pid_t kid;
  FILE *f = fopen("/proc/thread-self/children", "r");
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  int found = 0;
  if (f == NULL || n <= 0)
    return 0;
  self[n] = '\0';
  while (fscanf(f, "%d", &kid) == 1) {
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)kid);
    if ((n = readlink(path, exe, sizeof(exe) - 1)) > 0) {
      exe[n] = '\0';
      found |= strcmp(exe, self) == 0;
    }
  }
  fclose(f);
  return found;
}

/* In a pid namespace with vm.memfd_noexec=2: exit 0 when the job memfds work, the helper's
 * image is refused, and a try runs all the same; 10+ says which step failed. */
static int noexec_policy_main(void) {
  char err[MQPROC_ERR_LEN];
  char *argv[] = {"true", NULL}, *envp[] = {NULL};
  int sysctl = open("/proc/sys/vm/memfd_noexec", O_WRONLY | O_CLOEXEC);
  try_end_t end = {NULL, 0, 0, 0};
  mqproc__spawner_t *sp;
  mqproc__child_report_t cr;
  mqproc__child_plan_t plan = {.path = "/bin/true", .argv = argv, .envp = envp};
  uint64_t id;
  if (sysctl < 0 || write(sysctl, "2", 1) != 1)
    return 77; /* a kernel before 6.3 */
  if ((plan.in_fd = mqproc__runner_memfd("t", "{}", 2, err)) < 0)
    return 10;
  if (mqproc__runner_exec_memfd("t", "x", 1, err) >= 0)
    return 11; /* the policy did not take */
  if ((plan.log_fd = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
    return 12;
  if (mqproc__loop_new(&end.loop, err) != MQPROC_OK ||
      mqproc__spawner_new(&sp, end.loop, err) != 0 ||
      mqproc__spawner_spawn(sp, &plan, on_try_end, &end, &id, &cr) != 0)
    return 13;
  if (!helper_is_a_fork())
    return 14;
  mqproc__loop_timer(end.loop, 60000, on_guard, NULL); /* a hang fails the test */
  mqproc__loop_run(end.loop);
  if (end.step_failed)
    return 16; /* the helper reported a failed exec */
  if (!end.ended || !WIFEXITED(end.wstatus) || WEXITSTATUS(end.wstatus) != 0)
    return 15;
  mqproc__spawner_free(sp);
  mqproc__loop_free(end.loop);
  return 0;
}

Test(runner, a_try_runs_where_policy_refuses_executable_memfds) {
  int st;
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) { /* the policy is per pid namespace: set it in a new one, not here */
    pid_t inner;
    if (unshare(CLONE_NEWPID) < 0)
      _exit(77);
    if ((inner = fork()) == 0)
      _exit(noexec_policy_main());
    _exit(inner > 0 && waitpid(inner, &st, 0) == inner && WIFEXITED(st) ? WEXITSTATUS(st) : 99);
  }
  cr_assert_eq(waitpid(pid, &st, 0), pid);
  cr_assert(WIFEXITED(st), "status %d", st);
  if (WEXITSTATUS(st) == 77)
    cr_skip_test("no pid namespace or no vm.memfd_noexec here");
  cr_expect_eq(WEXITSTATUS(st), 0, "step %d failed (see noexec_policy_main)", WEXITSTATUS(st));
}

Test(runner, a_lifted_fd_is_moved_above_the_minimum) {
  int fd = dup(0), hi = mqproc__runner_lift_fd(fd, 40, NULL);
  cr_assert_geq(hi, 40);
  cr_expect(fcntl(fd, F_GETFD) < 0 || fd >= 40, "the low fd was not closed");
  cr_expect(fcntl(hi, F_GETFD) & FD_CLOEXEC);
  close(hi);
}

/* ---- the worker's wire format ------------------------------------------------------- */

static mqproc__run_spec_t spec_of(const mqproc__msg_t *msg, const char *mets) {
  return (mqproc__run_spec_t){.msg = msg,
                              .request_json = "{\"job_id\":\"j1\"}",
                              .mets_path = mets,
                              .attempt = 2,
                              .try_no = 5,
                              .worker_id = "host:42",
                              .max_log_bytes = 4096};
}

Test(runner, a_request_unpacks_to_what_was_packed) {
  mqproc__msg_t msg = {.format = MQPROC__FMT_YAML};
  const char *mets[] = {"/data/ws/mets.xml", "", NULL, NULL};
  const char *headers[] = {"{\"trace\":\"t-1\"}", NULL, "{}", NULL};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(mets); i++) {
    mqproc__run_spec_t spec = spec_of(&msg, mets[i]);
    spec.headers_json = headers[i];
    mqproc__worker_req_t req;
    mqproc__worker_job_t job;
    char err[MQPROC_ERR_LEN], *payload;
    size_t len;
    cr_assert_eq(mqproc__worker_pack(&spec, &req, &payload, &len, err), MQPROC_OK, "%s", err);
    cr_expect_eq(req.attempt, 2);
    cr_expect_eq(req.try_no, 5);
    cr_expect_eq(req.format, MQPROC__FMT_YAML);
    cr_expect_eq(req.max_log_bytes, 4096);
    cr_assert_eq(mqproc__worker_unpack(&req, payload, len, &job, err), MQPROC_OK, "%s", err);
    cr_expect_str_eq(job.request_json, spec.request_json);
    cr_expect_str_eq(job.worker_id, "host:42");
    if (mets[i] == NULL)
      cr_expect_null(job.mets_path, "no METS must stay NULL, not \"\"");
    else
      cr_expect_str_eq(job.mets_path, mets[i]);
    if (headers[i] == NULL)
      cr_expect_null(job.headers_json);
    else
      cr_expect_str_eq(job.headers_json, headers[i]);
    free(payload);
  }
}

/* Unpacking payload (len bytes) against req fails without pointing anywhere. */
static void expect_malformed(const mqproc__worker_req_t *req, const char *payload, size_t len) {
  mqproc__worker_job_t job;
  char err[MQPROC_ERR_LEN] = "";
  cr_expect_eq(mqproc__worker_unpack(req, payload, len, &job, err), MQPROC_EINVAL);
  cr_expect(strstr(err, "malformed job") != NULL, "%s", err);
  cr_expect_null(job.request_json);
}

Test(runner, a_payload_that_does_not_match_its_header_is_refused) {
  mqproc__worker_req_t req = {.format = MQPROC__FMT_JSON,
                              .mets_len = -1,
                              .request_len = 2,
                              .worker_id_len = 1,
                              .headers_len = -1,
                              .mets_server_len = -1};
  mqproc__worker_req_t bad_fmt = req, bad_mets = req, with_mets = req;
  bad_fmt.format = 7;
  bad_mets.mets_len = -2;
  with_mets.mets_len = 0;
  expect_malformed(&req, "{}\0w", 4);         /* the last NUL is missing */
  expect_malformed(&req, "{}\0w\0x", 6);      /* bytes left over */
  expect_malformed(&req, "{\0\0w", 4);        /* a NUL inside the request */
  expect_malformed(&req, "{}x w\0", 5);       /* no NUL after the request */
  expect_malformed(&with_mets, "{}\0w\0", 5); /* the METS part is missing */
  expect_malformed(&bad_fmt, "{}\0w\0", 5);
  expect_malformed(&bad_mets, "{}\0w\0", 5);
  expect_malformed(&req, "", 0);
}

Test(runner, a_request_crosses_a_socket_with_its_two_fds) {
  mqproc__worker_req_t req = {.attempt = 1, .try_no = 3, .request_len = 9}, got;
  int sv[2], fds[2], memfd, pipefd[2];
  char buf[8] = "";
  cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  cr_assert_eq(pipe(pipefd), 0);
  memfd = mqproc__runner_memfd("t", "payload", 7, NULL);
  cr_assert_eq(mqproc__worker_send_req(sv[0], &req, memfd, pipefd[1]), 0, "%s", strerror(errno));
  close(memfd);
  close(pipefd[1]);
  cr_assert_eq(mqproc__worker_recv_req(sv[1], &got, fds), 1, "%s", strerror(errno));
  cr_expect_eq(got.try_no, 3);
  cr_expect_eq(got.request_len, 9);
  cr_expect(fcntl(fds[0], F_GETFD) & FD_CLOEXEC, "received fds are CLOEXEC");
  cr_expect_eq(read(fds[0], buf, sizeof(buf)), 7, "fds[0] is the memfd");
  cr_expect_eq(write(fds[1], "x", 1), 1, "fds[1] is the log");
  close(fds[0]);
  close(fds[1]);
  cr_expect_eq(read(pipefd[0], buf, 1), 1);
  close(pipefd[0]);
  /* a message without fds is not a request; EOF is the end */
  cr_assert_eq(send(sv[0], &req, sizeof(req), 0), (ssize_t)sizeof(req));
  errno = 0;
  cr_expect_eq(mqproc__worker_recv_req(sv[1], &got, fds), -1);
  cr_expect_eq(errno, EPROTO);
  cr_expect_eq(fds[0], -1);
  close(sv[0]);
  cr_expect_eq(mqproc__worker_recv_req(sv[1], &got, fds), 0);
  close(sv[1]);
}

Test(runner, a_reply_is_read_without_blocking) {
  mqproc__worker_reply_t rep = {.rc = 3, .duration_ms = 70}, got;
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  memset(rep.error, 'x', sizeof(rep.error)); /* not terminated: the reader terminates it */
  cr_expect_eq(mqproc__worker_recv_reply(sv[0], &got), 0, "nothing sent yet");
  cr_assert_eq(send(sv[1], &rep, sizeof(rep), 0), (ssize_t)sizeof(rep));
  cr_assert_eq(mqproc__worker_recv_reply(sv[0], &got), 1);
  cr_expect_eq(got.rc, 3);
  cr_expect_eq(got.duration_ms, 70);
  cr_expect_eq(strlen(got.error), sizeof(got.error) - 1);
  cr_assert_eq(send(sv[1], "short", 5, 0), 5);
  cr_expect_eq(mqproc__worker_recv_reply(sv[0], &got), -1, "not a reply");
  close(sv[1]);
  cr_expect_eq(mqproc__worker_recv_reply(sv[0], &got), -1, "EOF");
  close(sv[0]);
}
