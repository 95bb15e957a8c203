/* The spawn helper (runner_helper.c) and what the server says to it (runner_spawner.c).
 *
 * Two SEQPACKET socket pairs link the server and the helper: requests (SPAWN with four
 * fds: the plan's three and a memfd holding the path, argv and envp, and the job log's
 * dir, sub and name when log_inline_max > 0; or KILL) with one
 * reply per SPAWN, which the helper sends right after its fork; and events (one EXIT per
 * supervisor the helper reaped, which the loop reads). */
#ifndef MQPROC_RUNNER_HELPER_H
#define MQPROC_RUNNER_HELPER_H

#include <stdint.h>
#include <sys/types.h>

#define MQPROC__HELPER_FDS 4 /* in, log, report, the memfd with path, argv and envp */

enum { MQPROC__HELPER_SPAWN = 1, MQPROC__HELPER_KILL = 2 };

typedef struct mqproc__helper_req {
  uint32_t kind;
  int32_t pid, sig;       /* KILL */
  uint32_t argc, envc;    /* SPAWN: the memfd holds path, argc args, envc entries, each
                             NUL-terminated */
  int64_t max_log_bytes;  /* the plan's */
  int64_t log_inline_max; /* the plan's; > 0: the memfd ends with the log's three strings */
  uint64_t core_cur, core_max;
} mqproc__helper_req_t;

typedef struct mqproc__helper_reply {
  int32_t pid; /* > 0, or -1 with err */
  int32_t err;
} mqproc__helper_reply_t;

typedef struct mqproc__helper_event {
  int32_t pid;
  int32_t wstatus;
} mqproc__helper_event_t;

/* The helper's life: serves requests on req_fd and reports ended supervisors on ev_fd
 * until the server (pid server, its parent) closes req_fd or dies. It runs either as a
 * small static program of its own (spawn_helper/main.c, exec'd from a memfd the server
 * fills with its image: forking it per try copies a few page tables, not the server's
 * two hundred mappings) or, where that exec is refused, in a plain fork of the server. */
__attribute__((noreturn)) void mqproc__helper_main(pid_t server, int req_fd, int ev_fd);

/* The static program's bytes, linked into libmqproc (runner_helper_image.c). */
extern const unsigned char mqproc__helper_image[], mqproc__helper_image_end[];

#endif
