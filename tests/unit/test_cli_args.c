/* Unit: the operator commands' argument parsing (src/cli/admin.c) at the bounds of its
 * fixed arrays: ARGS_MAX options (--help included: it used to be stored unchecked, past
 * the array) and ARGS_MAX positional arguments (more used to be dropped without a word),
 * the --http-host names of mqproc dashboard and mqproc processing-api (the latter used to
 * drop names past 32 and read no MQPROC_HTTP_HOST), and mqproc submit's --header (it used
 * to drop those past 32). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "base/util.h"
#include "broker/dirq.h"

static const mqproc__opt_t OPTS[] = {
    {.name = "state"},
    {.name = "http-host", .env = "MQPROC_HTTP_HOST"},
    {.name = "yes", .type = MQPROC__OPT_BOOL},
    {0},
};

/* argv of n copies of word (or of word%d, numbered, when it has a %d); freed with
 * free_words(). */
static char **words(int n, const char *word) {
  char **v = calloc((size_t)n + 1, sizeof(char *));
  cr_assert_not_null(v);
  for (int i = 0; i < n; i++) {
    char w[64];
    snprintf(w, sizeof(w), word, i);
    cr_assert_not_null(v[i] = strdup(w));
  }
  return v;
}

static void free_words(char **v) {
  for (char **w = v; *w != NULL; w++)
    free(*w);
  free(v);
}

Test(cli_args, help_as_often_as_options_fit_and_then_refused) {
  const char *forms[] = {"--help", "-h"};
  for (size_t f = 0; f < 2; f++) {
    for (int n = ARGS_MAX - 1; n <= ARGS_MAX + 50; n += n < ARGS_MAX + 1 ? 1 : 49) {
      char **v = words(n, forms[f]);
      args_t a;
      int rc = mqproc__args_parse(&a, OPTS, n, v, "test");
      cr_assert_eq(rc, n <= ARGS_MAX ? 0 : 2, "%d x %s: %d", n, forms[f], rc);
      cr_assert_leq(a.n, ARGS_MAX);
      if (rc == 0)
        cr_expect(mqproc__has(&a, "help"));
      free_words(v);
    }
  }
}

Test(cli_args, options_up_to_the_bound_then_refused) {
  for (int n = ARGS_MAX - 1; n <= ARGS_MAX + 1; n++) {
    char **v = words(n, "--state=S%d");
    args_t a;
    int rc = mqproc__args_parse(&a, OPTS, n, v, "test");
    cr_assert_eq(rc, n <= ARGS_MAX ? 0 : 2, "%d options: %d", n, rc);
    cr_assert_leq(a.n, ARGS_MAX);
    if (rc == 0) {
      char last[32];
      snprintf(last, sizeof(last), "S%d", n - 1);
      cr_expect_str_eq(mqproc__arg(&a, "state"), last);
      cr_expect_null(mqproc__arg_nth(&a, "state", n));
    }
    free_words(v);
  }
  { /* ARGS_MAX options and then --help: refused as well, never stored past the end */
    char **v = words(ARGS_MAX + 1, "--yes");
    args_t a;
    free(v[ARGS_MAX]);
    v[ARGS_MAX] = strdup("--help");
    cr_expect_eq(mqproc__args_parse(&a, OPTS, ARGS_MAX + 1, v, "test"), 2);
    cr_expect_eq(a.n, ARGS_MAX);
    free_words(v);
  }
}

/* `mqproc jobs cancel ID...`: every id is kept, or the line is refused; none is dropped. */
Test(cli_args, positional_arguments_up_to_the_bound_then_refused) {
  for (int n = ARGS_MAX - 1; n <= ARGS_MAX + 1; n++) {
    char **v = words(n, "id-%d");
    args_t a;
    int rc = mqproc__args_parse(&a, OPTS, n, v, "test");
    cr_assert_eq(rc, n <= ARGS_MAX ? 0 : 2, "%d arguments: %d", n, rc);
    if (rc == 0) {
      cr_assert_eq(a.npos, n);
      cr_expect_str_eq(a.pos[n - 1], v[n - 1]);
    }
    free_words(v);
  }
}

/* The names of a parsed line, as "a b c". */
static void expect_hosts(int argc, char **argv, const char *env, int want_rc, const char *want) {
  args_t a;
  mqproc__http_hosts_t h;
  char got[4096] = "";
  if (env != NULL)
    setenv("MQPROC_HTTP_HOST", env, 1);
  else
    unsetenv("MQPROC_HTTP_HOST");
  cr_assert_eq(mqproc__args_parse(&a, OPTS, argc, argv, "test"), 0);
  memset(h.names, 0xbe, sizeof(h.names)); /* each name set, and the NULL after them */
  cr_assert_eq(mqproc__arg_http_hosts(&a, &h), want_rc);
  if (want_rc != 0)
    return;
  for (size_t i = 0; i < MQPROC__HTTP_HOSTS_MAX + 1 && h.names[i] != NULL; i++)
    snprintf(got + strlen(got), sizeof(got) - strlen(got), "%s%s", i > 0 ? " " : "", h.names[i]);
  cr_expect_str_eq(got, want);
}

Test(cli_args, http_hosts_up_to_the_bound_then_refused) {
  char want[4096] = "";
  for (int i = 0; i < MQPROC__HTTP_HOSTS_MAX; i++)
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "%sh%d.example", i > 0 ? " " : "",
             i);
  for (int n = MQPROC__HTTP_HOSTS_MAX - 1; n <= MQPROC__HTTP_HOSTS_MAX + 1; n++) {
    char **v = words(n, "--http-host=h%d.example");
    char part[4096];
    snprintf(part, sizeof(part), "%s", want);
    if (n < MQPROC__HTTP_HOSTS_MAX)
      *strrchr(part, ' ') = '\0';
    expect_hosts(n, v, NULL, n <= MQPROC__HTTP_HOSTS_MAX ? 0 : -1, part);
    free_words(v);
  }
}

Test(cli_args, http_hosts_from_lists_and_the_environment) {
  char *argv[] = {"--http-host", "a.example,b.example", "--http-host=c.example", NULL};
  char *none[] = {NULL};
  char env33[1024] = "";
  expect_hosts(2 + 1, argv, "env.example", 0, "a.example b.example c.example");
  expect_hosts(0, none, "x.example,,y.example", 0, "x.example y.example");
  expect_hosts(0, none, NULL, 0, "");
  for (int i = 0; i <= MQPROC__HTTP_HOSTS_MAX; i++)
    snprintf(env33 + strlen(env33), sizeof(env33) - strlen(env33), "e%d,", i);
  expect_hosts(0, none, env33, -1, NULL);
  { /* more text than the names' buffer holds */
    char *big = malloc(4000), *long_argv[] = {"--http-host", big, NULL};
    memset(big, 'n', 3999);
    big[3999] = '\0';
    expect_hosts(2, long_argv, NULL, -1, NULL);
    free(big);
  }
}

/* The headers of the one job file in dir's new/ (its envelope's object). */
static json_t *queued_headers(const char *dir) {
  char path[512], *data = NULL;
  DIR *d;
  struct dirent *e;
  FILE *f;
  long len;
  mqproc__dirq_msg_t m;
  json_t *meta = NULL, *headers;
  snprintf(path, sizeof(path), "%s/new", dir);
  cr_assert_not_null(d = opendir(path), "%s", path);
  while ((e = readdir(d)) != NULL && e->d_name[0] == '.')
    ;
  cr_assert_not_null(e, "no job in %s", path);
  snprintf(path, sizeof(path), "%s/new/%s", dir, e->d_name);
  closedir(d);
  cr_assert_not_null(f = fopen(path, "rb"));
  fseek(f, 0, SEEK_END);
  len = ftell(f);
  rewind(f);
  cr_assert_not_null(data = malloc((size_t)len + 1));
  cr_assert_eq(fread(data, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  cr_assert_eq(mqproc__dirq_parse(data, (size_t)len, &m, &meta), 0);
  cr_assert_not_null(headers = json_incref(json_object_get(meta, "headers")), "no headers");
  json_decref(meta);
  free(data);
  return headers;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* `mqproc submit --header` 32 times: all sent; 33 times: refused, nothing sent. */
Test(cli_args, submit_headers_up_to_the_bound_then_refused) {
  char spool[] = "/tmp/mqproc-cli-args-XXXXXX", queue[128], qdir[160];
  cr_assert_not_null(mkdtemp(spool));
  snprintf(queue, sizeof(queue), "--queue=dir://%s", spool);
  snprintf(qdir, sizeof(qdir), "%s/hdr-test", spool);
  unsetenv("MQPROC_DATABASE");
  unsetenv("MQPROC_DATABASE_FILE");
  for (int n = 33; n >= 32; n--) {
    char **v = words(n + 3, "--header=k%d=v");
    json_t *h;
    free(v[n]);
    free(v[n + 1]);
    free(v[n + 2]);
    v[n] = strdup("--processor=hdr-test");
    v[n + 1] = strdup(queue);
    v[n + 2] = strdup("--job-id=j1");
    cr_assert_eq(mqproc__cmd_submit(n + 3, v), n <= 32 ? 0 : 2, "%d headers", n);
    if (n > 32) {
      DIR *d = opendir(qdir);
      cr_expect_null(d, "a refused line queued a job"); /* (the queue is made on sending) */
      if (d != NULL)
        closedir(d);
    } else {
      cr_assert_not_null(h = queued_headers(qdir));
      cr_expect_eq(json_object_size(h), 32);
      cr_expect_str_eq(json_string_value(json_object_get(h, "k31")), "v");
      json_decref(h);
    }
    free_words(v);
  }
  nftw(spool, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
