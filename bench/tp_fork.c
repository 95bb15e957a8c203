/* Raw process limit of bench/throughput.sh: how many times per second this machine can
 * start a program and wait for it — the floor under any server that runs each job as a
 * process (mqproc --exec).
 *
 *   tp_fork N [PROGRAM]      (PROGRAM defaults to /bin/true)
 *
 * N times: fork(), execve(PROGRAM) with an empty environment in the child, waitpid() in
 * the parent; the child must exit 0. Prints one key=value line.
 *
 * Build: cc -O2 tp_fork.c
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct timespec t0, t1;
  if (argc < 2 || argc > 3 || atol(argv[1]) < 1) {
    fprintf(stderr, "usage: tp_fork N [PROGRAM]\n");
    return 2;
  }
  long n = atol(argv[1]);
  char *prog = argc == 3 ? argv[2] : "/bin/true";
  char *const args[] = {prog, NULL}, *const env[] = {NULL};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    int status;
    pid_t pid = fork();
    if (pid < 0) {
      perror("tp_fork: fork");
      return 1;
    }
    if (pid == 0) {
      execve(prog, args, env);
      _exit(127);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "tp_fork: %s did not exit 0\n", prog);
      return 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("n=%ld secs=%.3f rate=%.1f\n", n, secs, n / secs);
  return 0;
}
