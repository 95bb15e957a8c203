/* The spawn helper (spawn/helper.c) and what the server says to it (spawn/spawner.c).
 *
 * Two SEQPACKET socket pairs link the server and the helper. Requests, server → helper:
 * SPAWN {id, limits} with the job's memfd and the log's fd, followed in the same message
 * by the payload (the program's path, argv, envp, and the job log's dir, sub and name when
 * log_inline_max > 0, each NUL-terminated), or with a third fd, a memfd holding it, when
 * it is larger than MQPROC__HELPER_INLINE; KILL {id, sig}; or PING {id}. Events, helper →
 * server: STARTED {id, pid} once a try's processor runs; ENDED {id, wait status, a failed
 * step, the output's tail} once it was reaped, its group killed and its output copied;
 * PONG {id} for each PING (a helper that stops answering is hung: a processor can
 * SIGSTOP its parent). A try that never ran gets ENDED alone. Tries are named by the server's id,
 * never by pid: a request for a try that has ended is ignored. */
#ifndef MQPROC_RUNNER_HELPER_H
#define MQPROC_RUNNER_HELPER_H

#include <stdint.h>
#include <sys/types.h>

#include "runner/int.h"

#define MQPROC__HELPER_FDS 3          /* the job, the log, the payload's memfd (large ones) */
#define MQPROC__HELPER_INLINE (32768) /* larger payloads go in a memfd */

enum { MQPROC__HELPER_SPAWN = 1, MQPROC__HELPER_KILL = 2, MQPROC__HELPER_PING = 3 };
enum { MQPROC__HELPER_STARTED = 1, MQPROC__HELPER_ENDED = 2, MQPROC__HELPER_PONG = 3 };

typedef struct mqproc__helper_req {
  uint32_t kind;
  int32_t sig;         /* KILL */
  uint64_t id;         /* the try */
  uint32_t argc, envc; /* SPAWN: the payload holds path, argc args, envc entries */
  uint32_t inline_len; /* the payload's length when it follows; 0: it is in the memfd */
  uint32_t pad;
  int64_t max_log_bytes;  /* the plan's */
  int64_t log_inline_max; /* the plan's; > 0: the payload ends with the log's three strings */
  uint64_t core_cur, core_max;
} mqproc__helper_req_t;

typedef struct mqproc__helper_event {
  uint32_t kind;
  int32_t pid; /* the processor (STARTED; ENDED: 0 when it never ran) */
  uint64_t id;
  int32_t wstatus;     /* ENDED: as the server is to see it (SIGXFSZ for a full log) */
  int32_t step_failed; /* ENDED: the step below failed (no execve, or no job log file) */
  mqproc__child_report_t step;
  uint32_t tail_len; /* ENDED: a failed try's last output follows, this many bytes */
  int32_t tail_cut;  /* more output came before it */
} mqproc__helper_event_t;

/* The longest event, tail included. */
#define MQPROC__HELPER_EVENT_MAX (sizeof(mqproc__helper_event_t) + MQPROC__TAIL_BYTES)

/* The helper's life: serves requests on req_fd and reports on ev_fd until the server
 * (pid server, its parent) closes req_fd or dies; then it kills every try's process group
 * and every process left to it, and exits. It runs either as a small static program of its
 * own (spawn/helper_main.c, exec'd from a memfd the server fills with its image: what it
 * forks per try copies a few page tables, not the server's two hundred mappings) or, where
 * that exec is refused, in a plain fork of the server. */
__attribute__((noreturn)) void mqproc__helper_main(pid_t server, int req_fd, int ev_fd);

/* The static program's bytes, linked into libmqproc (spawn/helper_image.c). */
extern const unsigned char mqproc__helper_image[], mqproc__helper_image_end[];

#endif
