/* A METS server for every workspace mqproc's Processing Server dispatches to (ocrd.h,
 * "METS servers"), as OCR-D's Processing Server starts one per workspace: OCR-D's
 * processors load mets.xml, add their files and save it, so two of them on one workspace
 * at once overwrite each other's entries; through a METS server (which holds the METS in
 * memory and takes every change in turn) they do not.
 *
 * The server of a workspace listens on <sockets_dir>/<safe_filename(its directory)>.sock
 * (OCR-D's name for it); before jobs of a workspace are published, keep() asks that socket
 * for its workspace_path and starts a server when nothing answers. The jobs name it in
 * their x-mqproc-mets-server header, and the processing servers pass it to the processors
 * as --mets-server-url. A server is started detached (its own session, the init process
 * its parent once its starter ends), so a restart of the API, or the end of `mqproc
 * submit`, leaves it serving; mqproc's own server (`mqproc mets-server`) stops when its
 * workspace has no job left to run (it watches the job table), OCR-D's own (`ocrd
 * workspace server start`) when a sweep finds it idle (mqproc__mets_servers_sweep). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/argv.h"
#include "base/log.h"
#include "base/util.h"
#include "ops/ocrd.h"
#include "ops/ocrd_int.h"
#include "runner/ocrd_argv.h"

extern char **environ;

#define PROBE_TIMEOUT_MS 3000
#define START_TIMEOUT_MS 30000 /* OCR-D's own server takes ~2 s to import its modules */
#define LOOK_EVERY_MS 50       /* OCR-D's server gives no sign of readiness: its socket is asked */
#define SOCKET_PATH_MAX 108    /* sizeof(sockaddr_un.sun_path) */

static size_t on_data(char *p, size_t size, size_t n, void *ud) {
  char *buf = ud;
  size_t have = strlen(buf), len = size * n;
  if (have + len >= PATH_MAX) /* a workspace path: anything longer is not one */
    return 0;
  memcpy(buf + have, p, len);
  buf[have + len] = '\0';
  return len;
}

/* What the METS server on sock says its workspace is (out, PATH_MAX): 0; -1 when nothing
 * answers there (or not as a METS server). */
static int probe(const char *sock, char *out) {
  CURL *h = curl_easy_init();
  long status = 0;
  CURLcode rc = CURLE_OUT_OF_MEMORY;
  out[0] = '\0';
  if (h != NULL) {
    rc = curl_easy_setopt(h, CURLOPT_URL, "http://localhost/workspace_path");
    rc |= curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
    rc |= curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    rc |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)PROBE_TIMEOUT_MS);
    rc |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    rc |= curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    if (rc == CURLE_OK)
      rc = curl_easy_perform(h);
    if (rc == CURLE_OK)
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
  }
  return rc == CURLE_OK && status == 200 && out[0] == '/' ? 0 : -1;
}

/* The sockets' directory, made private when missing; it must be a directory of ours (or
 * root's) that others cannot write to, else anyone could put a socket of theirs where a
 * processor will send the METS. 0, or -1 with err. */
static int sockets_dir_ok(const char *dir, char *err) {
  struct stat st;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST)
    return mqproc__err(err, -1, "cannot make the METS servers' directory %.300s: %s", dir,
                       strerror(errno));
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return mqproc__err(err, -1, "the METS servers' directory %.300s is not a directory", dir);
  if ((st.st_uid != geteuid() && st.st_uid != 0) ||
      ((st.st_mode & 0002) != 0 && (st.st_mode & S_ISVTX) == 0))
    return mqproc__err(err, -1,
                       "the METS servers' directory %.300s belongs to another user or is "
                       "writable by all: sockets there cannot be trusted",
                       dir);
  return 0;
}

/* Starts argv (envp) detached: a new session, stdin /dev/null, stdout and stderr appended
 * to log, ready_w (or -1) as fd 3; its parent is init once the middle process ended.
 * 0, or -1 with err. Only async-signal-safe calls after fork (the API has threads). */
static int start_detached(char *const *argv, char *const *envp, const char *log, int ready_w,
                          char *err) {
  int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  int nfd = open("/dev/null", O_RDONLY | O_CLOEXEC), st = 0;
  pid_t pid;
  if (lfd < 0 || nfd < 0) {
    mqproc__err(err, -1, "cannot open %.300s: %s", lfd < 0 ? log : "/dev/null", strerror(errno));
    if (lfd >= 0)
      close(lfd);
    if (nfd >= 0)
      close(nfd);
    return -1;
  }
  if ((pid = fork()) == 0) {
    if (setsid() < 0 || fork() != 0)
      _exit(0); /* the middle process: its child goes on in a session of its own */
    if (dup2(nfd, 0) < 0 || dup2(lfd, 1) < 0 || dup2(lfd, 2) < 0 ||
        (ready_w >= 0 && dup2(ready_w, 3) < 0))
      _exit(126);
    close_range(ready_w >= 0 ? 4 : 3, ~0U, 0);
    execve(argv[0], argv, envp);
    _exit(127);
  }
  close(lfd);
  close(nfd);
  if (pid < 0)
    return mqproc__err(err, -1, "cannot start a METS server: fork: %s", strerror(errno));
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
    ;
  return 0;
}

/* The environment of a started server: ours, with MQPROC_DATABASE set to database (not on
 * its command line, where every user can read it). NULL when out of memory. */
static char **server_env(const char *database) {
  size_t n = 0, k = 0;
  char **env;
  while (environ[n] != NULL)
    n++;
  if ((env = calloc(n + 2, sizeof(char *))) == NULL)
    return NULL;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "MQPROC_DATABASE=", 16) != 0)
      env[k++] = environ[i];
  if (database != NULL && (env[k++] = mqproc__asprintf("MQPROC_DATABASE=%s", database)) == NULL) {
    free(env);
    return NULL;
  }
  return env;
}

/* Waits for fd (the server's --ready-fd) to say "ready": 0; -1 at its end (the server
 * exited: its log says why) or after START_TIMEOUT_MS. */
static int await_ready(int fd) {
  char buf[64];
  size_t have = 0;
  int64_t end = mqproc__now_ms() + START_TIMEOUT_MS;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int64_t left = end - mqproc__now_ms();
    ssize_t n;
    int r;
    if (left <= 0)
      return -1;
    if ((r = poll(&p, 1, (int)left)) < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return -1;
    if ((n = read(fd, buf + have, sizeof(buf) - 1 - have)) <= 0)
      return -1;
    have += (size_t)n;
    buf[have] = '\0';
    if (strstr(buf, "ready") != NULL)
      return 0;
    if (have == sizeof(buf) - 1)
      return -1;
  }
}

/* Starts the server of kind k->kind for the workspace of mets (its directory dir) on sock,
 * and waits until it answers there. 0, or -1 with err. */
static int start_server(const mqproc__mets_servers_t *k, const char *mets, const char *dir,
                        const char *key, const char *sock, char *err) {
  char log[PATH_MAX + 8], seen[PATH_MAX], **argv = NULL, **env = NULL, *db_var = NULL;
  int ready[2] = {-1, -1}, argc = 0, rc = -1;
  snprintf(log, sizeof(log), "%.*s.log", (int)(strlen(sock) - 5), sock);
  if (k->kind == MQPROC__METS_SERVERS_OCRD) {
    /* ocrd workspace -U SOCK -d DIR server start */
    char *cmd = mqproc__asprintf("%s workspace", k->ocrd_command);
    int bad = cmd == NULL || mqproc__argv_split(cmd, &argv, &argc, err) != MQPROC_OK;
    free(cmd);
    if (bad || (argv = realloc(argv, (size_t)(argc + 7) * sizeof(char *))) == NULL) {
      mqproc__argv_free(argv);
      return mqproc__err(err, -1, "--ocrd-command: %s", bad ? err : "out of memory");
    }
    argv[argc++] = mqproc__strdup("-U");
    argv[argc++] = mqproc__strdup(sock);
    argv[argc++] = mqproc__strdup("-d");
    argv[argc++] = mqproc__strdup(dir);
    argv[argc++] = mqproc__strdup("server");
    argv[argc++] = mqproc__strdup("start");
    argv[argc] = NULL;
    env = server_env(NULL);
  } else {
    const char *words[] = {k->program,   "mets-server", "--mets",      mets, "--socket", sock,
                           "--ready-fd", "3",           "--workspace", key,  NULL};
    if (mqproc__argv_copy((char *const *)words, &argv) < 0)
      argv = NULL;
    if ((env = server_env(k->database)) != NULL && k->database != NULL)
      for (size_t i = 0; env[i] != NULL; i++)
        db_var = env[i]; /* the last: the one string of ours */
    if (pipe2(ready, O_CLOEXEC) != 0)
      ready[0] = ready[1] = -1;
  }
  if (argv == NULL || env == NULL || (k->kind != MQPROC__METS_SERVERS_OCRD && ready[0] < 0)) {
    mqproc__err(err, -1, "cannot start a METS server: out of memory (or no pipe)");
    goto out;
  }
  MQPROC__INFO("starting a METS server for %s on %s (its log: %s)", dir, sock, log);
  if (start_detached(argv, env, log, ready[1], err) != 0)
    goto out;
  if (ready[1] >= 0) {
    close(ready[1]);
    ready[1] = -1;
    if (await_ready(ready[0]) == 0 && probe(sock, seen) == 0) {
      rc = 0;
      goto out;
    }
  } else { /* OCR-D's server gives no sign: its socket is asked until it answers */
    for (int64_t end = mqproc__now_ms() + START_TIMEOUT_MS; mqproc__now_ms() < end;) {
      struct timespec ts = {0, LOOK_EVERY_MS * 1000000L};
      if (probe(sock, seen) == 0) {
        rc = 0;
        goto out;
      }
      nanosleep(&ts, NULL);
    }
  }
  /* another starter's server may have won the workspace: then it answers */
  if (probe(sock, seen) == 0)
    rc = 0;
  else
    mqproc__err(err, -1, "the METS server for %.300s did not start (its log: %.300s)", dir, log);
out:
  if (ready[0] >= 0)
    close(ready[0]);
  if (ready[1] >= 0)
    close(ready[1]);
  mqproc__argv_free(argv);
  free(db_var);
  free(env);
  return rc;
}

char *mqproc__mets_server_of(const mqproc__mets_servers_t *k, const char *mets) {
  char *name = mqproc__ocrd_socket_name(mets), *sock;
  size_t dl = strlen(k->sockets_dir);
  if (name == NULL)
    return NULL;
  while (dl > 1 && k->sockets_dir[dl - 1] == '/')
    dl--;
  sock = mqproc__asprintf("%.*s/%s", (int)dl, k->sockets_dir, name);
  if (sock != NULL && strlen(sock) >= SOCKET_PATH_MAX) {
    /* a deep workspace: its name would not fit a Unix socket's address; a hash does */
    unsigned char sha[32];
    char hex[33];
    mqproc__sha256(name, strlen(name), sha);
    for (int i = 0; i < 16; i++)
      snprintf(hex + 2 * i, 3, "%02x", sha[i]);
    free(sock);
    sock = mqproc__asprintf("%.*s/ws-%s.sock", (int)dl, k->sockets_dir, hex);
  }
  free(name);
  return sock;
}

int mqproc__mets_servers_keep(const mqproc__mets_servers_t *k, const char *mets, const char *key,
                              char **url, char *err) {
  char real[PATH_MAX], dir[PATH_MAX + 8], seen[PATH_MAX], *slash, *sock;
  int rc = -1;
  *url = NULL;
  if (realpath(mets, real) == NULL)
    return mqproc__err(err, -1, "the METS %.300s: %s", mets, strerror(errno));
  snprintf(dir, sizeof(dir), "%s", real);
  if ((slash = strrchr(dir, '/')) == dir)
    dir[1] = '\0';
  else if (slash != NULL)
    *slash = '\0';
  if (sockets_dir_ok(k->sockets_dir, err) != 0)
    return -1;
  /* OCR-D's name: that of the METS's directory, as ocrd_argv.c makes it of a METS path */
  if ((sock = mqproc__mets_server_of(k, real)) == NULL)
    return mqproc__err(err, -1, "out of memory");
  if (strlen(sock) >= SOCKET_PATH_MAX) {
    mqproc__err(err, -1, "the socket path %.300s is too long for a Unix socket", sock);
  } else if (probe(sock, seen) == 0) {
    if (strcmp(seen, dir) == 0)
      rc = 0;
    else
      mqproc__err(err, -1, "the METS server on %.300s serves %.300s, not %.300s", sock, seen, dir);
  } else {
    rc = start_server(k, real, dir, key, sock, err);
  }
  if (rc == 0)
    *url = sock;
  else
    free(sock);
  return rc;
}

/* The METS of a workspace key of the job table: a METS path, or a workspace_id under the
 * workspace root (into buf, n bytes); NULL when there is none. */
static const char *mets_of_key(const mqproc__ocrd_env_t *e, const char *key, char *buf, size_t n) {
  if (key[0] == '/')
    return key;
  if (e->ws_root == NULL || (size_t)snprintf(buf, n, "%s/%s/mets.xml", e->ws_root, key) >= n)
    return NULL;
  return buf;
}

int mqproc__ocrd_mets_header(const mqproc__ocrd_env_t *e, const char *workspace, char *hdr,
                             size_t n, char *err) {
  char buf[PATH_MAX], *url = NULL;
  const char *mets;
  if (e->mets == NULL || e->mets->kind == MQPROC__METS_SERVERS_OFF) {
    snprintf(hdr, n, "%s=none", MQPROC__HEADER_METS_SERVER);
    return 0;
  }
  if ((mets = mets_of_key(e, workspace, buf, sizeof(buf))) == NULL)
    return mqproc__err(err, -1, "workspace %.300s: no METS path for its METS server", workspace);
  if (mqproc__mets_servers_keep(e->mets, mets, workspace, &url, err) != 0)
    return -1;
  snprintf(hdr, n, "%s=%s", MQPROC__HEADER_METS_SERVER, url);
  free(url);
  return 0;
}

/* DELETE / to the server on sock (OCR-D's: it saves, then stops). */
static void stop_server(const char *sock) {
  CURL *h = curl_easy_init();
  if (h == NULL)
    return;
  curl_easy_setopt(h, CURLOPT_URL, "http://localhost/");
  curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
  curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
  curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)START_TIMEOUT_MS);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
  {
    char sink[PATH_MAX] = "";
    curl_easy_setopt(h, CURLOPT_WRITEDATA, (void *)sink);
    curl_easy_perform(h);
  }
  curl_easy_cleanup(h);
}

int mqproc__mets_workspace_busy(mqproc__odb_t *db, const char *const *keys, char *err) {
  for (; *keys != NULL; keys++) {
    mqproc__ores_t *r = mqproc__odb_q(
        db,
        "SELECT 1 FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j ON j.job_id = o.job_id"
        " WHERE o.workspace = $1 AND j.state IN ('QUEUED', 'RUNNING', 'CACHED') LIMIT 1",
        "SELECT 1 FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j ON j.job_id = o.job_id"
        " WHERE o.workspace = ?1 AND j.state IN ('QUEUED', 'RUNNING', 'CACHED') LIMIT 1",
        1, keys, err);
    int rows;
    if (r == NULL)
      return -1;
    rows = mqproc__ores_rows(r);
    mqproc__ores_free(r);
    if (rows > 0)
      return 1;
  }
  return 0;
}

int mqproc__mets_servers_sweep(const mqproc__ocrd_env_t *e, json_t *idle, char *err) {
  mqproc__ores_t *r;
  json_t *live;
  const char *sock;
  json_t *v;
  void *tmp;
  if (e->mets == NULL || e->mets->kind == MQPROC__METS_SERVERS_OFF)
    return 0;
  r = mqproc__odb_q(e->db,
                    "SELECT DISTINCT o.workspace FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j"
                    " ON j.job_id = o.job_id WHERE j.state IN ('QUEUED', 'RUNNING', 'CACHED')",
                    "SELECT DISTINCT o.workspace FROM mqproc_ocrd_jobs o JOIN mqproc_jobs j"
                    " ON j.job_id = o.job_id WHERE j.state IN ('QUEUED', 'RUNNING', 'CACHED')",
                    0, NULL, err);
  if (r == NULL)
    return -1;
  live = json_object();
  for (int i = 0; i < mqproc__ores_rows(r); i++) {
    char buf[PATH_MAX], why[512], *url = NULL;
    const char *key = mqproc__ores_get(r, i, 0), *mets = mets_of_key(e, key, buf, sizeof(buf));
    if (mets == NULL)
      continue;
    if (mqproc__mets_servers_keep(e->mets, mets, key, &url, why) != 0)
      MQPROC__WARN("workspace %s: no METS server: %s", key, why);
    else
      json_object_set_new(live, url, json_true());
    free(url);
  }
  mqproc__ores_free(r);
  /* OCR-D's servers do not stop by themselves: those this process started, idle twice */
  json_object_foreach_safe(idle, tmp, sock, v) {
    if (json_object_get(live, sock) != NULL) {
      json_object_del(idle, sock);
    } else if (json_integer_value(v) >= 1) {
      MQPROC__INFO("stopping the idle METS server on %s", sock);
      stop_server(sock);
      json_object_del(idle, sock);
    } else {
      json_object_set_new(idle, sock, json_integer(1));
    }
  }
  if (e->mets->kind == MQPROC__METS_SERVERS_OCRD)
    json_object_foreach(live, sock, v) {
      if (json_object_get(idle, sock) == NULL)
        json_object_set_new(idle, sock, json_integer(0));
    }
  json_decref(live);
  return 0;
}
