/* The operator commands' shared parts (see admin.h) and their dispatch. */
#include "admin.h"

#include <limits.h>
#include <pwd.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "base/util.h"
#include "store/queue.h"

/* ---- arguments ---------------------------------------------------------------------- */

static const mqproc__opt_t *find(const mqproc__opt_t *opts, const char *name, size_t len,
                                 char shrt) {
  for (; opts->name != NULL; opts++)
    if ((shrt != 0 && opts->shrt == shrt) ||
        (shrt == 0 && strlen(opts->name) == len && strncmp(opts->name, name, len) == 0))
      return opts;
  return NULL;
}

/* Records an option's value; -1 after printing why not (more than ARGS_MAX options). */
static int add(args_t *a, const char *name, const char *val) {
  if (a->n >= ARGS_MAX) {
    fprintf(stderr, "mqproc %s: more than %d options\n", a->cmd, ARGS_MAX);
    return -1;
  }
  a->names[a->n] = name;
  a->vals[a->n++] = val;
  return 0;
}

/* --NAME-file (or its environment variable): read the URL from the file when no stronger
 * source gives --NAME (argv over environment, --NAME over --NAME-file), and add it as
 * --NAME's value. The text lives in a static slot: one command line per process. */
static int url_from_file(args_t *a, const char *name, int slot, const char *cmd) {
  static char text[2][8200];
  char file_opt[32], err[512], *url;
  const mqproc__opt_t *u, *f;
  const char *path = NULL;
  int others;
  snprintf(file_opt, sizeof(file_opt), "%s-file", name);
  if ((u = find(a->opts, name, strlen(name), 0)) == NULL ||
      (f = find(a->opts, file_opt, strlen(file_opt), 0)) == NULL || mqproc__has(a, name))
    return 0;
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->names[i], file_opt))
      path = a->vals[i];
  if (path == NULL && (u->env == NULL || getenv(u->env) == NULL) && f->env != NULL)
    path = getenv(f->env);
  if (path == NULL)
    return 0;
  if ((url = mqproc__read_url_file(path, &others, err)) == NULL) {
    fprintf(stderr, "mqproc %s: --%s: %s\n", cmd, file_opt, err);
    return 2;
  }
  if (others)
    fprintf(stderr, "mqproc %s: warning: --%s: every user of this host can read %s: chmod o-r it\n",
            cmd, file_opt, path);
  snprintf(text[slot], sizeof(text[slot]), "%s", url); /* the reader caps it at 8 KiB */
  free(url);
  return add(a, u->name, text[slot]) != 0 ? 2 : 0;
}

int mqproc__args_parse(args_t *a, const mqproc__opt_t *opts, int argc, char **argv,
                       const char *cmd) {
  int rc;
  memset(a, 0, sizeof(*a));
  a->opts = opts;
  a->cmd = cmd;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i], *eq, *val = NULL;
    const mqproc__opt_t *o;
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      if (add(a, "help", "") != 0)
        return 2;
      continue;
    }
    if (strncmp(s, "--", 2) == 0 && s[2] != '\0') {
      eq = strchr(s + 2, '=');
      o = find(opts, s + 2, eq != NULL ? (size_t)(eq - s - 2) : strlen(s + 2), 0);
      val = eq != NULL ? eq + 1 : NULL;
    } else if (s[0] == '-' && s[1] != '\0' && s[2] == '\0') {
      o = find(opts, NULL, 0, s[1]);
    } else {
      if (a->npos >= ARGS_MAX) {
        fprintf(stderr, "mqproc %s: more than %d arguments\n", cmd, ARGS_MAX);
        return 2;
      }
      a->pos[a->npos++] = s;
      continue;
    }
    if (o == NULL) {
      fprintf(stderr, "mqproc %s: unknown option '%s' (see --help)\n", cmd, s);
      return 2;
    }
    if (o->type != MQPROC__OPT_BOOL && val == NULL) {
      if (i + 1 >= argc) {
        fprintf(stderr, "mqproc %s: --%s needs a value\n", cmd, o->name);
        return 2;
      }
      val = argv[++i];
    } else if (o->type == MQPROC__OPT_BOOL && val != NULL) {
      fprintf(stderr, "mqproc %s: --%s takes no value\n", cmd, o->name);
      return 2;
    }
    if (add(a, o->name, val != NULL ? val : "") != 0)
      return 2;
  }
  if (mqproc__has(a, "help"))
    return 0;
  if (find(opts, "group-access", 12, 0) != NULL) { /* before the command makes a file */
    const char *env = getenv("MQPROC_GROUP_ACCESS");
    if (!mqproc__has(a, "group-access") && env != NULL && mqproc__parse_bool(env) < 0) {
      fprintf(stderr, "mqproc %s: MQPROC_GROUP_ACCESS: expected true or false\n", cmd);
      return 2;
    }
    mqproc__set_group_access(mqproc__has(a, "group-access") || mqproc__parse_bool(env) == 1);
  }
  if ((rc = url_from_file(a, "database", 0, cmd)) != 0)
    return rc;
  return url_from_file(a, "queue", 1, cmd);
}

int mqproc__args_parse_pick(args_t *a, const mqproc__opt_t *catalog, const char *const *names,
                            int argc, char **argv, const char *cmd) {
  mqproc__opt_t picked[ARGS_OPTS_MAX + 1];
  int n = 0, rc;
  for (const mqproc__opt_t *o = catalog; o->name != NULL; o++)
    for (const char *const *k = names; *k != NULL && n < ARGS_OPTS_MAX; k++)
      if (!strcmp(*k, o->name))
        picked[n++] = *o;
  memset(&picked[n], 0, sizeof(picked[n]));
  rc = mqproc__args_parse(a, picked, argc, argv, cmd); /* (clears a) */
  memcpy(a->picked, picked, sizeof(picked));
  a->opts = a->picked;
  return rc;
}

const char *mqproc__args_first_word(const mqproc__opt_t *catalog, int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    const mqproc__opt_t *o = NULL;
    if (strncmp(s, "--", 2) == 0 && s[2] != '\0') {
      if (strchr(s, '=') != NULL)
        continue;
      o = find(catalog, s + 2, strlen(s + 2), 0);
    } else if (s[0] == '-' && s[1] != '\0' && s[2] == '\0') {
      o = find(catalog, NULL, 0, s[1]);
    } else {
      return s;
    }
    if (o != NULL && o->type != MQPROC__OPT_BOOL)
      i++; /* its value */
  }
  return NULL;
}

int mqproc__sub_parse(const char *cmd, const char *usage, const mqproc__opt_t *catalog,
                      const mqproc__sub_t *subs, size_t n, int argc, char **argv,
                      const mqproc__sub_t **sub, args_t *a) {
  const char *word = mqproc__args_first_word(catalog, argc, argv);
  int rc;
  *sub = NULL;
  for (size_t i = 0; word != NULL && i < n; i++)
    if (!strcmp(word, subs[i].name))
      *sub = &subs[i];
  if (*sub == NULL) { /* `CMD --help`, `CMD`, `CMD frobnicate` */
    int help = argc > 0 && (!strcmp(argv[argc - 1], "--help") || !strcmp(argv[argc - 1], "-h"));
    if (word != NULL)
      fprintf(stderr, "mqproc %s: unknown command '%s' (see --help)\n", cmd, word);
    else
      fputs(usage, help ? stdout : stderr);
    return word == NULL && help ? 0 : 2;
  }
  if ((rc = mqproc__args_parse_pick(a, catalog, (*sub)->opts, argc, argv, cmd)) != 0)
    return rc;
  if (mqproc__has(a, "help")) {
    mqproc__args_usage((*sub)->usage, a->opts);
    return 0;
  }
  return -1;
}

const char *mqproc__arg(const args_t *a, const char *name) {
  for (int i = a->n - 1; i >= 0; i--)
    if (!strcmp(a->names[i], name))
      return a->vals[i];
  for (const mqproc__opt_t *o = a->opts; o != NULL && o->name != NULL; o++)
    if (!strcmp(o->name, name) && o->env != NULL)
      return getenv(o->env);
  return NULL;
}

int mqproc__arg_enum(const args_t *a, const char *name) {
  const mqproc__opt_t *o = find(a->opts, name, strlen(name), 0);
  const char *v = mqproc__arg(a, name);
  char src[80], err[MQPROC_ERR_LEN];
  int value, given;
  if (o == NULL || o->type != MQPROC__OPT_ENUM) { /* not reached: the command's own row */
    fprintf(stderr, "mqproc %s: --%s is no option of this command\n", a->cmd, name);
    return -1;
  }
  given = mqproc__has(a, name) || o->env == NULL; /* else the text is its variable's */
  snprintf(src, sizeof(src), "%s%s", given ? "--" : "", given ? o->name : o->env);
  if ((value = mqproc__opt_enum_parse(o, v != NULL ? v : o->def, src, err)) < 0)
    fprintf(stderr, "mqproc %s: %s\n", a->cmd, err);
  return value;
}

/* CACHED: a job of mqproc processing-api waiting for a page lock or a dependency */
const mqproc__opt_choice_t mqproc__job_states[] = {{"QUEUED", 0}, {"RUNNING", 1},   {"SUCCESS", 2},
                                                   {"FAILED", 3}, {"CANCELLED", 4}, {"CACHED", 5},
                                                   {NULL, 0}};

const char *mqproc__arg_state(const args_t *a, int *bad) {
  int v;
  *bad = 0;
  if (!mqproc__has(a, "state"))
    return NULL;
  if ((v = mqproc__arg_enum(a, "state")) < 0) {
    *bad = 1;
    return NULL;
  }
  return mqproc__job_states[v].name;
}

int mqproc__has(const args_t *a, const char *name) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->names[i], name))
      return 1;
  return 0;
}

const char *mqproc__arg_nth(const args_t *a, const char *name, int k) {
  for (int i = 0; i < a->n; i++)
    if (!strcmp(a->names[i], name) && k-- == 0)
      return a->vals[i];
  return NULL;
}

/* Adds the names of list (comma-separated) to h (n names, used bytes of its text so far);
 * -1 after printing why not. */
static int add_hosts(const args_t *a, const char *list, mqproc__http_hosts_t *h, size_t *n,
                     size_t *used) {
  for (const char *p = list; *p != '\0';) {
    size_t len = strcspn(p, ",");
    if (len > 0 && (*n == MQPROC__HTTP_HOSTS_MAX || *used + len + 1 > sizeof(h->buf))) {
      fprintf(stderr, "mqproc %s: --http-host: at most %d names (%zu bytes)\n", a->cmd,
              MQPROC__HTTP_HOSTS_MAX, sizeof(h->buf));
      return -1;
    }
    if (len > 0) {
      h->names[(*n)++] = memcpy(h->buf + *used, p, len);
      h->buf[*used + len] = '\0';
      *used += len + 1;
    }
    p += len + (p[len] == ',');
  }
  return 0;
}

int mqproc__arg_http_hosts(const args_t *a, mqproc__http_hosts_t *h) {
  size_t n = 0, used = 0;
  const char *v;
  if (mqproc__arg_nth(a, "http-host", 0) == NULL) {
    if ((v = mqproc__arg(a, "http-host")) != NULL && add_hosts(a, v, h, &n, &used) < 0)
      return -1;
  } else {
    for (int i = 0; (v = mqproc__arg_nth(a, "http-host", i)) != NULL; i++)
      if (add_hosts(a, v, h, &n, &used) < 0)
        return -1;
  }
  h->names[n] = NULL;
  return 0;
}

void mqproc__args_usage(const char *usage, const mqproc__opt_t *opts) {
  printf("%s\nOptions:\n", usage);
  for (; opts->name != NULL; opts++) {
    char flag[128], meta[96] = " X";
    const char *def = opts->type != MQPROC__OPT_BOOL ? opts->def : NULL; /* a flag is off */
    if (opts->type == MQPROC__OPT_BOOL)
      meta[0] = '\0';
    else if (opts->type == MQPROC__OPT_ENUM) /* --tls-verify full|ca|none */
      mqproc__opt_choices(opts, "|", meta + 1, sizeof(meta) - 1);
    snprintf(flag, sizeof(flag), "%s%c%s--%s%s", opts->shrt ? "-" : "",
             opts->shrt ? opts->shrt : ' ', opts->shrt ? ", " : "  ", opts->name, meta);
    printf("  %-28s %s", opts->shrt ? flag : flag + 1, opts->help);
    if (opts->env != NULL && def != NULL)
      printf(" (env %s; default %s)", opts->env, def);
    else if (opts->env != NULL)
      printf(" (env %s)", opts->env);
    else if (def != NULL)
      printf(" (default %s)", def);
    putchar('\n');
  }
  printf("  %-28s %s\n", " --help", "this text");
}

long long mqproc__parse_duration(const char *s) {
  char *end;
  long long n, unit;
  errno = 0;
  n = s != NULL ? strtoll(s, &end, 10) : -1;
  if (s == NULL || end == s || n < 0 || errno == ERANGE)
    return -1;
  if (*end == '\0' || !strcmp(end, "s"))
    unit = 1;
  else if (!strcmp(end, "m"))
    unit = 60;
  else if (!strcmp(end, "h"))
    unit = 3600;
  else if (!strcmp(end, "d"))
    unit = 86400;
  else
    return -1;
  /* beyond a century is no duration a job table holds, and its seconds must not wrap */
  if (n > MQPROC__DURATION_MAX_S / unit)
    return -1;
  return n * unit;
}

/* ---- broker ------------------------------------------------------------------------- */

int mqproc__admin_tls(const args_t *a, mqproc__tls_t *tls) {
  int v = mqproc__arg_enum(a, "tls-verify");
  if (v < 0)
    return -1;
  *tls = (mqproc__tls_t){mqproc__arg(a, "tls-ca"), mqproc__arg(a, "tls-cert"),
                         mqproc__arg(a, "tls-key"), (mqproc__tls_verify_t)v};
  return 0;
}

mqproc__qclient_t *mqproc__admin_amqp(const args_t *a) {
  mqproc__tls_t tls;
  mqproc__qclient_t *q;
  char err[MQPROC_ERR_LEN];
  if (mqproc__admin_tls(a, &tls) < 0)
    return NULL;
  if ((q = mqproc__qclient_open(mqproc__arg(a, "queue"), &tls, &mqproc__table_qclient, err)) ==
      NULL)
    fprintf(stderr, "mqproc: %s\n", err);
  return q;
}

/* ---- database ----------------------------------------------------------------------- */

mqproc__odb_t *mqproc__admin_db(const args_t *a) {
  const char *url = mqproc__arg(a, "database");
  char masked[512], err[512];
  mqproc__odb_t *c;
  if (url == NULL || url[0] == '\0') {
    fprintf(stderr, "mqproc: --database (or MQPROC_DATABASE) is required\n");
    return NULL;
  }
  if ((c = mqproc__odb_open(url, 30000, err)) == NULL) {
    mqproc__mask_secret(url, masked, sizeof(masked));
    fprintf(stderr, "mqproc: cannot connect to %s: %s", masked, err);
  }
  return c;
}

mqproc__ores_t *mqproc__admin_q(mqproc__odb_t *c, const char *pg, const char *sq, int n,
                                const char *const *vals) {
  char err[512];
  mqproc__ores_t *r = mqproc__odb_q(c, pg, sq, n, vals, err);
  if (r == NULL)
    fprintf(stderr, "mqproc: %s", err);
  return r;
}

const char *mqproc__admin_actor(void) {
  static char actor[300];
  char host[256] = "localhost";
  const struct passwd *pw = getpwuid(getuid());
  gethostname(host, sizeof(host) - 1);
  snprintf(actor, sizeof(actor), "%s@%s", pw != NULL ? pw->pw_name : "?", host);
  return actor;
}

int mqproc__admin_audit(mqproc__odb_t *c, const char *action, const char *target, long long rows,
                        json_t *detail) {
  char err[512],
      *line = mqproc__ops_audit(c, mqproc__admin_actor(), action, target, rows, detail, err);
  if (line == NULL)
    fprintf(stderr, "mqproc: audit: not recorded: %s", err);
  else
    fprintf(stderr, "mqproc: audit: %s\n", line);
  free(line);
  return line != NULL ? 0 : -1;
}

void mqproc__print_audit(json_t *out) {
  const char *line = json_string_value(json_object_get(out, "audit"));
  if (line != NULL)
    fprintf(stderr, "mqproc: audit: %s\n", line);
  else
    fprintf(stderr, "mqproc: audit: not recorded\n");
}

/* ---- output ------------------------------------------------------------------------- */

void mqproc__print_json(json_t *v) {
  char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (s != NULL)
    puts(s);
  free(s);
  json_decref(v);
}

static char *cell(json_t *v) {
  if (v == NULL || json_is_null(v))
    return strdup("-");
  if (json_is_string(v))
    return strdup(json_string_value(v));
  return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

void mqproc__print_rows(json_t *rows, const char *const *cols, int width) {
  int nf = 0, w[64] = {0};
  size_t i;
  json_t *row;
  while (cols[nf] != NULL && nf < 64)
    nf++;
  for (int k = 0; k < nf; k++) {
    w[k] = (int)strlen(cols[k]);
    json_array_foreach(rows, i, row) {
      char *s = cell(json_object_get(row, cols[k]));
      int l = s != NULL ? (int)strlen(s) : 0;
      w[k] = l > w[k] ? l : w[k];
      free(s);
    }
    w[k] = w[k] > width ? width : w[k];
  }
  for (int k = 0; k < nf; k++)
    printf("%-*s%s", w[k], cols[k], k + 1 < nf ? "  " : "\n");
  json_array_foreach(rows, i, row) {
    for (int k = 0; k < nf; k++) {
      char *s = cell(json_object_get(row, cols[k])), *e = NULL;
      if (s != NULL && isatty(STDOUT_FILENO)) /* error texts may carry escape sequences */
        e = mqproc__term_escape(s, strlen(s));
      printf("%-*.*s%s", w[k], w[k], e != NULL ? e : s != NULL ? s : "", k + 1 < nf ? "  " : "\n");
      free(e);
      free(s);
    }
  }
}

int mqproc__term_width(void) {
  const char *env = getenv("COLUMNS");
  struct winsize ws;
  if (env != NULL && atoi(env) > 0)
    return atoi(env);
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 0;
}

/* Characters (UTF-8 sequences) in s; and the bytes of its first n characters. */
static int chars(const char *s) {
  int n = 0;
  for (; *s != '\0'; s++)
    n += ((unsigned char)*s & 0xc0) != 0x80;
  return n;
}

static size_t bytes_of(const char *s, int n) {
  size_t i = 0;
  for (int k = 0; s[i] != '\0'; i++) {
    if (((unsigned char)s[i] & 0xc0) != 0x80 && k++ == n)
      break;
  }
  return i;
}

/* A cell as shown: "-" for null, a time without its milliseconds, control characters
 * escaped on a terminal (error texts may carry escape sequences); malloc()ed. */
static char *shown(json_t *v, const mqproc__col_t *c) {
  char *s = cell(v), *e;
  if (s != NULL && c->time && strlen(s) >= 19 && s[10] == 'T') {
    s[10] = ' ';
    s[19] = '\0';
  }
  for (char *p = s; p != NULL && *p != '\0'; p++) /* one line per row */
    if (*p == '\n' || *p == '\r' || *p == '\t')
      *p = ' ';
  if (s != NULL && isatty(STDOUT_FILENO) && (e = mqproc__term_escape(s, strlen(s))) != NULL) {
    free(s);
    s = e;
  }
  return s;
}

/* Each column's width (0: left out) so that the table fits width (0: any). */
static void fit(const mqproc__col_t *cols, int nc, int *w, int width) {
  int total = 0, shown_n = 0;
  for (int k = 0; k < nc; k++)
    if (w[k] > 0) {
      total += w[k];
      shown_n++;
    }
  total += 2 * (shown_n - 1);
  while (width > 0 && total > width) { /* leave out the first to go */
    int best = -1;
    for (int k = 0; k < nc; k++)
      if (w[k] > 0 && cols[k].drop > 0 && (best < 0 || cols[k].drop > cols[best].drop))
        best = k;
    if (best < 0)
      break;
    total -= w[best] + 2;
    w[best] = 0;
  }
  for (int k = 0; width > 0 && total > width && k < nc; k++) { /* then cut */
    int cut;
    if (w[k] == 0 || cols[k].min <= 0 || w[k] <= cols[k].min)
      continue;
    cut = total - width < w[k] - cols[k].min ? total - width : w[k] - cols[k].min;
    w[k] -= cut;
    total -= cut;
  }
}

static void put_cell(const char *s, int w, int last) {
  int n = chars(s);
  if (n > w) { /* cut, and say so */
    fwrite(s, 1, bytes_of(s, w - 1), stdout);
    putchar('~');
    n = w;
  } else {
    fputs(s, stdout);
  }
  if (!last)
    printf("%*s", w - n + 2, "");
  else
    putchar('\n');
}

void mqproc__print_table(json_t *rows, const mqproc__col_t *cols) {
  int nc = 0, w[64], last = -1;
  size_t i;
  json_t *row;
  while (cols[nc].key != NULL && nc < 64)
    nc++;
  for (int k = 0; k < nc; k++) {
    w[k] = chars(cols[k].title != NULL ? cols[k].title : cols[k].key);
    json_array_foreach(rows, i, row) {
      char *s = shown(json_object_get(row, cols[k].key), &cols[k]);
      int l = s != NULL ? chars(s) : 0;
      w[k] = l > w[k] ? l : w[k];
      free(s);
    }
    if (cols[k].max > 0 && w[k] > cols[k].max)
      w[k] = cols[k].max;
  }
  fit(cols, nc, w, mqproc__term_width());
  for (int k = 0; k < nc; k++)
    last = w[k] > 0 ? k : last;
  for (int k = 0; k < nc; k++)
    if (w[k] > 0)
      put_cell(cols[k].title != NULL ? cols[k].title : cols[k].key, w[k], k == last);
  json_array_foreach(rows, i, row) {
    for (int k = 0; k < nc; k++) {
      char *s;
      if (w[k] == 0)
        continue;
      s = shown(json_object_get(row, cols[k].key), &cols[k]);
      put_cell(s != NULL ? s : "", w[k], k == last);
      free(s);
    }
  }
}

/* ---- dispatch ----------------------------------------------------------------------- */

int mqproc__admin_main(int argc, char **argv) {
  const char *cmd = argv[1];
  mqproc__log_set_level(MQPROC__LOG_WARN);
  if (!strcmp(cmd, "submit"))
    return mqproc__cmd_submit(argc - 2, argv + 2);
  if (!strcmp(cmd, "jobs"))
    return mqproc__cmd_jobs(argc - 2, argv + 2);
  if (!strcmp(cmd, "dead-letters"))
    return mqproc__cmd_dead_letters(argc - 2, argv + 2);
  if (!strcmp(cmd, "workers"))
    return mqproc__cmd_workers(argc - 2, argv + 2);
  if (!strcmp(cmd, "stats"))
    return mqproc__cmd_stats(argc - 2, argv + 2);
  if (!strcmp(cmd, "dashboard"))
    return mqproc__cmd_dashboard(argc - 2, argv + 2);
  if (!strcmp(cmd, "processing-api"))
    return mqproc__cmd_processing_api(argc - 2, argv + 2);
  if (!strcmp(cmd, "results"))
    return mqproc__cmd_results(argc - 2, argv + 2);
  if (!strcmp(cmd, "mets-server"))
    return mqproc__cmd_mets_server(argc - 2, argv + 2);
  if (!strcmp(cmd, "pause") || !strcmp(cmd, "resume") || !strcmp(cmd, "drain"))
    return mqproc__cmd_control(cmd, argc - 2, argv + 2);
  return -1;
}

const mqproc__opt_choice_t mqproc__mets_server_choices[] = {{"off", MQPROC__METS_SERVERS_OFF},
                                                            {"mqproc", MQPROC__METS_SERVERS_MQPROC},
                                                            {"ocrd", MQPROC__METS_SERVERS_OCRD},
                                                            {NULL, 0}};

int mqproc__admin_mets_servers(const args_t *a, mqproc__mets_servers_t *out, char *program,
                               char *dir) {
  int kind = mqproc__arg_enum(a, "mets-server");
  ssize_t n;
  if (kind < 0)
    return -1;
  memset(out, 0, sizeof(*out));
  out->kind = (mqproc__mets_servers_kind_t)kind;
  out->database = mqproc__arg(a, "database");
  out->ocrd_command =
      mqproc__arg(a, "ocrd-command") != NULL ? mqproc__arg(a, "ocrd-command") : "ocrd";
  snprintf(dir, PATH_MAX, "/tmp/mqproc-mets-%d", (int)geteuid());
  out->sockets_dir =
      mqproc__arg(a, "mets-sockets-dir") != NULL ? mqproc__arg(a, "mets-sockets-dir") : dir;
  /* its servers are this very program's `mets-server` */
  if ((n = readlink("/proc/self/exe", program, PATH_MAX - 1)) <= 0) {
    fprintf(stderr, "mqproc %s: cannot find this program (/proc/self/exe): %s\n", a->cmd,
            strerror(errno));
    return -1;
  }
  program[n] = '\0';
  out->program = program;
  return 0;
}
