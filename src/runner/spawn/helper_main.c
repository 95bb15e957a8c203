/* The spawn helper as a program of its own (helper.h): linked statically against
 * libc alone, embedded in libmqproc (helper_image.c) and exec'd by the server from
 * a memfd (spawner.c), so that what it forks per try is a process of a few
 * mappings, not a copy of the server's.
 *
 *     mqproc-spawn-helper SERVER_PID REQ_FD EV_FD
 */
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "runner/spawn/helper.h"

static int number(const char *s, long *out) {
  char *end;
  *out = strtol(s, &end, 10);
  return *s != '\0' && *end == '\0' && *out >= 0 && *out < 1L << 30;
}

int main(int argc, char **argv) {
  long server, req_fd, ev_fd;
  if (argc != 4 || !number(argv[1], &server) || !number(argv[2], &req_fd) ||
      !number(argv[3], &ev_fd)) {
    static const char usage[] = "mqproc-spawn-helper: started by an mqproc server only\n";
    ssize_t n = write(2, usage, sizeof(usage) - 1);
    (void)n;
    return 2;
  }
  prctl(PR_SET_NAME, "mqproc-spawn");
  mqproc__helper_main((pid_t)server, (int)req_fd, (int)ev_fd);
}
