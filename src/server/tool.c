/* A server's ocrd-tool description, stored at start (tool.h). The thread owns what it
 * works with (a copy of the names, the program's words): it frees it itself, so a server
 * that stops first (the loop joins the thread, after() is not run then) leaks nothing. */
#include "server/tool.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/argv.h"
#include "base/log.h"
#include "base/util.h"
#include "ops/ocrd.h"
#include "store/odb.h"

#define TOOL_MAX (4u << 20)

extern char **environ;

typedef struct tool_job {
  char *database, *processor, *worker_id;
  char *tool;  /* a C processor's description, or NULL and: */
  char **argv; /* the --exec program's words, with --dump-json */
} tool_job_t;

static void job_free(tool_job_t *t) {
  free(t->database);
  free(t->processor);
  free(t->worker_id);
  free(t->tool);
  mqproc__argv_free(t->argv);
  free(t);
}

/* Reads fd until its end, TOOL_MAX bytes or the deadline: the text (malloc()ed), NULL. */
static char *read_until(int fd, int64_t deadline_ms) {
  size_t len = 0, cap = 65536;
  char *buf = malloc(cap + 1);
  while (buf != NULL) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int64_t left = deadline_ms - mqproc__now_ms();
    ssize_t n;
    if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
      free(buf);
      return NULL;
    }
    if ((n = read(fd, buf + len, cap - len)) == 0)
      break;
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (len += (size_t)n) >= TOOL_MAX) {
      free(buf);
      return NULL;
    }
    if (len == cap) {
      char *more = realloc(buf, 2 * cap + 1);
      if (more == NULL)
        free(buf);
      buf = more;
      cap *= 2;
    }
  }
  if (buf != NULL)
    buf[len] = '\0';
  return buf;
}

/* Runs `PROGRAM... --dump-json` (stdout read, stderr dropped) with a deadline: its output,
 * or NULL with why. The thread's signal mask (the loop's blocked signals) is not the
 * child's. */
static char *dump_json(char **argv, char *why, size_t wn) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none, dflt;
  int fds[2], status;
  pid_t pid = -1;
  char *out = NULL;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    snprintf(why, wn, "pipe: %s", strerror(errno));
    return NULL;
  }
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGPIPE);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_init(&at);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dflt);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  errno = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(fds[1]);
  if (errno != 0 || pid <= 0) {
    snprintf(why, wn, "cannot run %s: %s", argv[0], strerror(errno));
    close(fds[0]);
    return NULL;
  }
  out = read_until(fds[0], mqproc__now_ms() + MQPROC__TOOL_DEADLINE_S * 1000LL);
  close(fds[0]);
  if (out == NULL)
    kill(pid, SIGKILL); /* too slow or too much */
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (out != NULL && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
    free(out);
    out = NULL;
  }
  if (out == NULL)
    snprintf(why, wn, "`%s --dump-json` printed no description within %d s (or failed)", argv[0],
             MQPROC__TOOL_DEADLINE_S);
  return out;
}

static void store_tool(void *ud) {
  tool_job_t *t = ud;
  char why[MQPROC_ERR_LEN], err[512], *text = t->tool != NULL ? t->tool : NULL, *compact = NULL;
  json_t *doc;
  mqproc__odb_t *db;
  if (text == NULL && (text = dump_json(t->argv, why, sizeof(why))) == NULL) {
    MQPROC__WARN("no ocrd-tool description for the processing API: %s", why);
    job_free(t);
    return;
  }
  doc = json_loads(text, 0, NULL);
  if (!json_is_object(doc) || (compact = json_dumps(doc, JSON_COMPACT)) == NULL) {
    MQPROC__WARN("no ocrd-tool description for the processing API: it is not a JSON object");
  } else if ((db = mqproc__odb_open(t->database, 10000, err)) == NULL ||
             mqproc__ocrd_tool_store(db, t->processor, compact, t->worker_id, err) != 0) {
    err[strcspn(err, "\n")] = '\0';
    MQPROC__WARN("the ocrd-tool description is not stored (the processing API needs schema "
                 "9: mqproc migrate): %s",
                 err);
    mqproc__odb_close(db);
  } else {
    MQPROC__INFO("stored its ocrd-tool description for the processing API");
    mqproc__odb_close(db);
  }
  json_decref(doc);
  free(compact);
  if (text != t->tool)
    free(text);
  job_free(t);
}

static void stored(mqproc__loop_t *loop, void *ud) {
  (void)loop;
  (void)ud;
}

/* The --exec program's words with --dump-json, when it is run as an OCR-D processor. */
static char **exec_words(const mqproc__server_t *srv) {
  char **w = NULL, **out, err[MQPROC_ERR_LEN];
  int n = 0;
  if (!srv->needs_mets || srv->cfg->exec == NULL ||
      mqproc__argv_split(srv->cfg->exec, &w, &n, err) != MQPROC_OK)
    return NULL;
  if ((out = realloc(w, (size_t)(n + 2) * sizeof(char *))) == NULL) {
    mqproc__argv_free(w);
    return NULL;
  }
  out[n] = mqproc__strdup("--dump-json");
  out[n + 1] = NULL;
  return out;
}

void mqproc__server_tool_start(mqproc__server_t *srv, const mqproc_processor_t *proc) {
  tool_job_t *t;
  if ((proc == NULL || proc->ocrd_tool_json == NULL) && !srv->needs_mets)
    return; /* no OCR-D processor: nothing to describe */
  if ((t = calloc(1, sizeof(*t))) == NULL)
    return;
  t->database = mqproc__strdup(srv->cfg->database);
  t->processor = mqproc__strdup(srv->processor);
  t->worker_id = mqproc__strdup(srv->worker_id);
  if (proc != NULL && proc->ocrd_tool_json != NULL)
    t->tool = mqproc__strdup(proc->ocrd_tool_json);
  else
    t->argv = exec_words(srv);
  if (t->database == NULL || t->processor == NULL || t->worker_id == NULL ||
      (t->tool == NULL && t->argv == NULL) ||
      mqproc__loop_work(srv->loop, store_tool, stored, t) != MQPROC_OK)
    job_free(t);
}
