/* OCR-D's processor command line for a C processor: every OCR-D processor is also a
 * program one runs by hand (`ocrd-foo -m mets.xml -I OCR-D-IMG -O OCR-D-FOO`), and a C
 * processor on libmqproc gets that for free from mqproc_main().
 *
 * One job, here and now: the options become a processing message (the codec checks it as
 * a server would), the METS path is made absolute, the process moves into the working
 * directory (as OCR-D does) and process() runs once on the calling thread with a job like
 * the one a server's try gets (job.c): attempt 1, try 1, its log lines on stderr or in
 * --log-file. No queue, no database, no retries. Exit status: 0 success, 1 the job failed
 * or could not run, 2 bad arguments (OCR-D's processors exit 2 on a usage error, too).
 *
 * Options as OCR-D core's (ocrd_cli_options): -m -w -I -O -g -p (JSON text or a file,
 * repeatable, merged) -P KEY VALUE (repeatable; VALUE as JSON when it parses, else a
 * string) -l -J -h -V; -U (a METS server) is refused; --log-file is mqproc's own.
 */
#include "runner/ocrd_run.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/util.h"
#include "codec/codec.h"
#include "runner/int.h"
#include "runner/job.h"

typedef enum { A_RUN, A_HELP, A_VERSION, A_DUMP_JSON } action_t;

typedef enum {
  O_METS,
  O_WORKING_DIR,
  O_INPUT,
  O_OUTPUT,
  O_PAGE_ID,
  O_PARAMETER,
  O_PARAM_OVERRIDE,
  O_LOG_LEVEL,
  O_LOG_FILE,
  O_METS_SERVER,
  O_DUMP_JSON,
  O_HELP,
  O_VERSION,
} opt_id_t;

typedef struct cli_opt {
  char short_name; /* 0: long form only */
  const char *long_name;
  int n_args;
  opt_id_t id;
  const char *arg;  /* its value(s) as --help names them */
  const char *help; /* continued lines start with \n */
} cli_opt_t;

#define HELP_INDENT "\n                                   "

static const cli_opt_t OPTS[] = {
    {'m', "mets", 1, O_METS, "PATH", "the METS file [mets.xml]"},
    {'w', "working-dir", 1, O_WORKING_DIR, "DIR",
     "the workspace: a relative -m is taken in it and" HELP_INDENT
     "the job runs in it [the METS's directory]"},
    {'I', "input-file-grp", 1, O_INPUT, "GRP", "input file group(s), comma-separated"},
    {'O', "output-file-grp", 1, O_OUTPUT, "GRP", "output file group(s), comma-separated"},
    {'g', "page-id", 1, O_PAGE_ID, "ID", "the physical page(s) to process [all]"},
    {'p', "parameter", 1, O_PARAMETER, "JSON",
     "parameters: a JSON object or a file holding one" HELP_INDENT "(repeatable, merged)"},
    {'P', "param-override", 2, O_PARAM_OVERRIDE, "KEY VALUE",
     "set one parameter: VALUE as JSON when it parses," HELP_INDENT "else a string (repeatable)"},
    {'l', "log-level", 1, O_LOG_LEVEL, "LEVEL",
     "mqproc's own lines: OFF, ERROR, WARN, INFO, DEBUG," HELP_INDENT
     "TRACE [INFO]; the processor's log lines are always" HELP_INDENT "written"},
    {0, "log-file", 1, O_LOG_FILE, "PATH", "the processor's log lines go here [stderr]"},
    {'U', "mets-server-url", 1, O_METS_SERVER, "URL", "not supported (refused)"},
    {'J', "dump-json", 0, O_DUMP_JSON, "", "print the ocrd-tool description (JSON)"},
    {'h', "help", 0, O_HELP, "", "show this help"},
    {'V', "version", 0, O_VERSION, "", "show the version"},
};

typedef struct cli {
  const char *mets, *working_dir, *input, *output, *page_id, *log_file;
  json_t *params; /* -p merged, then -P */
  mqproc__log_level_t level;
  action_t action;
} cli_t;

/* Sets err; returns code (2: the arguments, 1: the run). */
static int fail(int code, char *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(int code, char *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, MQPROC_ERR_LEN, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- the options ------------------------------------------------------------------ */

static const cli_opt_t *find_opt(const char *arg, const char **inline_value) {
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  *inline_value = NULL;
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    if (arg[1] != '-' && OPTS[i].short_name != 0 && OPTS[i].short_name == arg[1]) {
      *inline_value = arg[2] != '\0' ? arg + 2 : NULL;
      return &OPTS[i];
    }
    if (arg[1] == '-' && strlen(OPTS[i].long_name) == len &&
        strncmp(OPTS[i].long_name, name, len) == 0) {
      *inline_value = eq != NULL ? eq + 1 : NULL;
      return &OPTS[i];
    }
  }
  return NULL;
}

/* -p: a JSON object, verbatim or in a file (taken relative to where the program was
 * started); merged over earlier ones. */
static int merge_parameter(json_t *params, const char *value, char *err) {
  const char *p = value;
  json_error_t jerr;
  json_t *v;
  while (isspace((unsigned char)*p))
    p++;
  if (*p != '{' && access(value, F_OK) != 0)
    return fail(2, err, "-p %.200s: neither a JSON object nor a file (%s)", value, strerror(errno));
  v = *p == '{' ? json_loads(value, JSON_REJECT_DUPLICATES, &jerr)
                : json_load_file(value, JSON_REJECT_DUPLICATES, &jerr);
  if (v == NULL)
    return fail(2, err, "-p %.200s: invalid JSON: %s (line %d, column %d)", value, jerr.text,
                jerr.line, jerr.column);
  if (!json_is_object(v)) {
    json_decref(v);
    return fail(2, err, "-p %.200s: not a JSON object", value);
  }
  json_object_update(params, v);
  json_decref(v);
  return 0;
}

/* -P KEY VALUE: VALUE as JSON when it parses (42, true, [1], "s"), else as a string, as
 * OCR-D core does. */
static int override_parameter(json_t *params, const char *key, const char *value, char *err) {
  json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
  if (v == NULL)
    v = json_string(value);
  if (v == NULL || json_object_set_new(params, key, v) != 0)
    return fail(2, err, "-P %.100s: not a valid key or value (UTF-8?)", key);
  return 0;
}

/* OCR-D's levels, mapped to mqproc's (TRACE is DEBUG; OFF keeps only a failure's reason). */
static int parse_level(cli_t *cli, const char *v, char *err) {
  static const struct {
    const char *name;
    mqproc__log_level_t level;
  } levels[] = {{"OFF", MQPROC__LOG_ERROR},    {"CRITICAL", MQPROC__LOG_ERROR},
                {"ERROR", MQPROC__LOG_ERROR},  {"WARN", MQPROC__LOG_WARN},
                {"WARNING", MQPROC__LOG_WARN}, {"INFO", MQPROC__LOG_INFO},
                {"DEBUG", MQPROC__LOG_DEBUG},  {"TRACE", MQPROC__LOG_DEBUG}};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(levels); i++)
    if (strcasecmp(v, levels[i].name) == 0) {
      cli->level = levels[i].level;
      return 0;
    }
  return fail(2, err, "-l %.100s: expected OFF, ERROR, WARN, INFO, DEBUG or TRACE", v);
}

static int apply(cli_t *cli, const cli_opt_t *o, const char *const *v, char *err) {
  switch (o->id) {
  case O_METS:
    cli->mets = v[0];
    return 0;
  case O_WORKING_DIR:
    cli->working_dir = v[0];
    return 0;
  case O_INPUT:
    cli->input = v[0];
    return 0;
  case O_OUTPUT:
    cli->output = v[0];
    return 0;
  case O_PAGE_ID:
    cli->page_id = v[0];
    return 0;
  case O_PARAMETER:
    return merge_parameter(cli->params, v[0], err);
  case O_PARAM_OVERRIDE:
    return override_parameter(cli->params, v[0], v[1], err);
  case O_LOG_LEVEL:
    return parse_level(cli, v[0], err);
  case O_LOG_FILE:
    cli->log_file = v[0];
    return 0;
  case O_METS_SERVER:
    return fail(2, err, "--mets-server-url is not supported: the processor reads the METS file");
  case O_DUMP_JSON:
  case O_HELP:
  case O_VERSION:
    if (cli->action == A_RUN) /* the first one given wins */
      cli->action = o->id == O_HELP ? A_HELP : o->id == O_VERSION ? A_VERSION : A_DUMP_JSON;
    return 0;
  }
  return 0;
}

/* Parses argv[*i] and its values (advancing *i). */
static int parse_one(int argc, char **argv, int *i, cli_t *cli, char *err) {
  const char *a = argv[*i], *inline_value, *v[2] = {NULL, NULL};
  const cli_opt_t *o;
  if (a[0] != '-' || a[1] == '\0' || (a[1] == '-' && a[2] == '\0'))
    return fail(2, err, "unexpected argument '%.100s'", a);
  if ((o = find_opt(a, &inline_value)) == NULL)
    return fail(2, err, "unknown option '%.100s'", a);
  if (o->n_args == 0 && inline_value != NULL)
    return fail(2, err, "option '%.100s' takes no value", a);
  for (int k = 0; k < o->n_args; k++) {
    if (k == 0 && inline_value != NULL)
      v[k] = inline_value;
    else if (*i + 1 < argc)
      v[k] = argv[++*i];
    else
      return fail(2, err, "option '%.100s' needs %s", a, o->n_args == 2 ? "KEY VALUE" : "a value");
  }
  return apply(cli, o, v, err);
}

static int parse(int argc, char **argv, cli_t *cli, char *err) {
  int rc = 0;
  memset(cli, 0, sizeof(*cli));
  cli->level = MQPROC__LOG_INFO;
  if ((cli->params = json_object()) == NULL)
    return fail(1, err, "out of memory");
  for (int i = 1; rc == 0 && i < argc; i++)
    rc = parse_one(argc, argv, &i, cli, err);
  return rc;
}

/* ---- the job ---------------------------------------------------------------------- */

static void uuid4(char out[37]) {
  unsigned char b[16];
  if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) /* cannot fail for 16 bytes; still */
    for (size_t i = 0; i < sizeof(b); i++)
      b[i] = (unsigned char)random();
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
  snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
           b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
           b[15]);
}

/* "A,B" -> ["A", "B"]; an empty name, or one that is not UTF-8, is refused. */
static int split_grps(json_t *doc, const char *key, const char *opt, const char *list, char *err) {
  json_t *arr = json_array();
  const char *p = list;
  for (;;) {
    const char *end = strchrnul(p, ',');
    if (end == p || json_array_append_new(arr, json_stringn(p, (size_t)(end - p))) != 0) {
      json_decref(arr);
      return fail(2, err, "%s %.200s: %s", opt, list,
                  end == p ? "an empty file group name" : "not valid UTF-8");
    }
    if (*end == '\0')
      break;
    p = end + 1;
  }
  json_object_set_new(doc, key, arr);
  return 0;
}

/* The option a message key comes from, for the codec's reasons. */
static const char *option_of(const char *reason) {
  static const char *const keys[][2] = {{"input_file_grps", "-I"},
                                        {"output_file_grps", "-O"},
                                        {"page_id", "-g"},
                                        {"parameters", "-p/-P"},
                                        {"path_to_mets", "-m"}};
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(keys); i++)
    if (strncmp(reason, keys[i][0], strlen(keys[i][0])) == 0)
      return keys[i][1];
  return NULL;
}

/* The processing message a server would get for these options, checked as a server checks
 * it (the codec); *out on success. */
static int make_msg(const cli_t *cli, const mqproc_processor_t *proc, const char *mets,
                    mqproc__msg_t **out, char *err) {
  char id[37], why[MQPROC_ERR_LEN];
  json_t *doc;
  const char *opt;
  uuid4(id);
  doc = json_pack("{s:s, s:s, s:I, s:s, s:O}", "job_id", id, "processor_name", proc->name,
                  "created_time", (json_int_t)time(NULL), "path_to_mets", mets, "parameters",
                  cli->params);
  if (doc == NULL)
    return fail(2, err, "the processor's name or the METS path is not valid UTF-8");
  if ((cli->input != NULL && split_grps(doc, "input_file_grps", "-I", cli->input, err) != 0) ||
      (cli->output != NULL && split_grps(doc, "output_file_grps", "-O", cli->output, err) != 0)) {
    json_decref(doc);
    return 2;
  }
  if (cli->page_id != NULL && json_object_set_new(doc, "page_id", json_string(cli->page_id)) != 0) {
    json_decref(doc);
    return fail(2, err, "-g: not valid UTF-8");
  }
  if (mqproc__msg_validate(doc, MQPROC__FMT_JSON, proc->name, out, why) == MQPROC_OK)
    return 0;
  opt = option_of(why);
  return fail(2, err, "not a valid job: %s%s%s%s", why, opt != NULL ? " (option " : "",
              opt != NULL ? opt : "", opt != NULL ? ")" : "");
}

/* realpath() of dir, or NULL with err set. */
static char *real_dir(const char *dir, const char *what, char *err) {
  char *real = realpath(dir, NULL);
  if (real == NULL)
    fail(1, err, "%s %.300s: %s", what, dir, strerror(errno));
  return real;
}

/* The METS as an absolute path and the directory to run in, as OCR-D resolves them: -m
 * defaults to mets.xml and a relative one is taken in -w when given; -w defaults to the
 * METS's directory. A file:// URL is a path; other URLs are refused. */
static int resolve_mets(const cli_t *cli, char **mets, char **wd, char *err) {
  const char *m = cli->mets != NULL ? cli->mets : "mets.xml", *slash;
  char *joined, *dir;
  if (strncmp(m, "file://", 7) == 0)
    m += 7;
  if (strstr(m, "://") != NULL)
    return fail(2, err, "-m %.300s: a remote METS is not supported (give a local path)", m);
  if (m[0] == '\0')
    return fail(2, err, "-m: an empty path");
  joined = m[0] == '/' ? mqproc__strdup(m)
                       : mqproc__asprintf("%s/%s", cli->working_dir ? cli->working_dir : ".", m);
  if (joined == NULL)
    return fail(1, err, "out of memory");
  slash = strrchr(joined, '/');
  dir = slash == joined ? mqproc__strdup("/") : mqproc__strndup(joined, (size_t)(slash - joined));
  *wd = dir != NULL ? real_dir(dir, "the METS's directory", err) : NULL;
  if (*wd != NULL)
    *mets = mqproc__asprintf("%s/%s", strcmp(*wd, "/") == 0 ? "" : *wd, slash + 1);
  if (dir == NULL || (*wd != NULL && *mets == NULL))
    fail(1, err, "out of memory");
  free(dir);
  free(joined);
  if (*wd == NULL || *mets == NULL)
    return 1;
  if (cli->working_dir == NULL)
    return 0;
  free(*wd); /* -w given: the job runs there, wherever the METS is */
  return (*wd = real_dir(cli->working_dir, "-w", err)) != NULL ? 0 : 1;
}

/* The job's log: --log-file (appended to, made if missing) or a copy of stderr. */
static int open_log(const cli_t *cli, int *fd, char *err) {
  if (cli->log_file == NULL)
    *fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
  else
    *fd = open(cli->log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (*fd < 0)
    return fail(1, err, "cannot open the log %.300s: %s",
                cli->log_file != NULL ? cli->log_file : "(stderr)", strerror(errno));
  return 0;
}

/* process() once on msg; the job owns log_fd from here on. 0 success, 1 failure. */
static int run_once(const mqproc_processor_t *proc, const mqproc__msg_t *msg, const char *mets,
                    int log_fd) {
  char err[MQPROC_ERR_LEN], *request = json_dumps(msg->doc, JSON_COMPACT | JSON_SORT_KEYS);
  mqproc__run_spec_t spec = {.msg = msg,
                             .request_json = request,
                             .mets_path = mets,
                             .attempt = 1,
                             .try_no = 1,
                             .worker_id = "local"};
  mqproc__run_result_t res;
  mqproc_job_t *job = NULL;
  int64_t started;
  int rc;
  if (request == NULL || mqproc__job_new(&job, &spec, log_fd, err) != MQPROC_OK) {
    MQPROC__ERROR("job %s: cannot run: out of memory", msg->job_id);
    close(log_fd);
    free(request);
    return 1;
  }
  MQPROC__DEBUG("job %s: %s on %s", msg->job_id, proc->name, request);
  started = mqproc__now_ms();
  rc = proc->process(job, proc->userdata); /* before mqproc__job_error() reads its error */
  mqproc__runner_function_result(rc, mqproc__job_error(job), mqproc__now_ms() - started, &res);
  mqproc__job_free(job);
  free(request);
  if (res.status == MQPROC_OK) {
    MQPROC__INFO("job %s: SUCCESS in %lld ms", msg->job_id, (long long)res.duration_ms);
    return 0;
  }
  MQPROC__ERROR("job %s: FAILED: %s", msg->job_id, res.error);
  return 1;
}

static int run(const cli_t *cli, const mqproc_processor_t *proc, char *err) {
  char *mets = NULL, *wd = NULL;
  mqproc__msg_t *msg = NULL;
  int log_fd = -1, rc;
  if ((rc = resolve_mets(cli, &mets, &wd, err)) == 0 &&
      (rc = make_msg(cli, proc, mets, &msg, err)) == 0 && (rc = open_log(cli, &log_fd, err)) == 0 &&
      chdir(wd) < 0) /* as OCR-D does: relative paths are the workspace's */
    rc = fail(1, err, "cannot enter %.300s: %s", wd, strerror(errno));
  if (rc == 0) {
    rc = run_once(proc, msg, mets, log_fd);
    log_fd = -1;
    err[0] = '\0'; /* said in the log */
  }
  if (log_fd >= 0)
    close(log_fd);
  mqproc__msg_free(msg);
  free(mets);
  free(wd);
  return rc;
}

/* ---- -J, -h -------------------------------------------------------------------------- */

/* The processor's ocrd-tool description (a new reference), or a minimal valid one; NULL
 * with err set when the declared text is not a JSON object. */
static json_t *tool_json(const mqproc_processor_t *proc, char *err) {
  json_error_t jerr;
  json_t *tool;
  if (proc->ocrd_tool_json == NULL)
    return json_pack("{s:s, s:s, s:[], s:[], s:{}}", "executable", proc->name, "description",
                     proc->description != NULL ? proc->description : proc->name, "categories",
                     "steps", "parameters");
  if ((tool = json_loads(proc->ocrd_tool_json, JSON_REJECT_DUPLICATES, &jerr)) == NULL)
    fail(1, err, "the processor's ocrd_tool_json is not valid JSON: %s (line %d, column %d)",
         jerr.text, jerr.line, jerr.column);
  else if (!json_is_object(tool)) {
    json_decref(tool);
    tool = NULL;
    fail(1, err, "the processor's ocrd_tool_json is not a JSON object");
  }
  return tool;
}

static int dump_json(const mqproc_processor_t *proc, char *err) {
  json_t *tool = tool_json(proc, err);
  char *text = tool != NULL ? json_dumps(tool, JSON_INDENT(1)) : NULL;
  json_decref(tool);
  if (text == NULL)
    return tool != NULL ? fail(1, err, "out of memory") : 1;
  printf("%s\n", text);
  free(text);
  return 0;
}

/* The parameters the tool description declares: name [type - default], description. */
static void usage_params(FILE *out, const mqproc_processor_t *proc) {
  char err[MQPROC_ERR_LEN];
  json_t *tool = proc->ocrd_tool_json != NULL ? tool_json(proc, err) : NULL, *p;
  json_t *params = json_object_get(tool, "parameters");
  const char *name;
  if (json_object_size(params) > 0)
    fprintf(out, "\nParameters (-p, -P):\n");
  json_object_foreach(params, name, p) {
    json_t *def = json_object_get(p, "default");
    char *text = def != NULL ? json_dumps(def, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    const char *type = json_string_value(json_object_get(p, "type"));
    const char *desc = json_string_value(json_object_get(p, "description"));
    fprintf(out, "  \"%s\" [%s%s%s]\n", name, type != NULL ? type : "any",
            text != NULL                                   ? " - "
            : json_is_true(json_object_get(p, "required")) ? ", required"
                                                           : "",
            text != NULL ? text : "");
    if (desc != NULL)
      fprintf(out, "      %s\n", desc);
    free(text);
  }
  json_decref(tool);
}

void mqproc__ocrd_run_usage(FILE *out, const mqproc_processor_t *proc) {
  const char *n = proc->name;
  if (proc->description != NULL)
    fprintf(out, "%s: %s\n\n", n, proc->description);
  fprintf(out,
          "Usage: %s [-m METS] -I GRP [-O GRP] [-g PAGES] [-p JSON] [-P KEY VALUE]...\n"
          "       %s processing-server --queue=URL --database=URL [OPTIONS]\n"
          "       %s migrate --database=URL\n"
          "       %s -h | -V | -J\n\n"
          "With OCR-D's processor options it runs one job here and now, as an OCR-D processor\n"
          "does: no queue, no database, one try; exit status 0 on success, 1 when the job\n"
          "failed, 2 for bad arguments.\n\nOptions:\n",
          n, n, n, n);
  for (size_t i = 0; i < MQPROC__ARRAY_LEN(OPTS); i++) {
    char left[64];
    if (OPTS[i].short_name != 0)
      snprintf(left, sizeof(left), "-%c, --%s %s", OPTS[i].short_name, OPTS[i].long_name,
               OPTS[i].arg);
    else
      snprintf(left, sizeof(left), "    --%s %s", OPTS[i].long_name, OPTS[i].arg);
    fprintf(out, "  %-32s %s\n", left, OPTS[i].help);
  }
  usage_params(out, proc);
  fprintf(out,
          "\nCommands:\n"
          "  processing-server  consume jobs from the queue named after the processor, run\n"
          "                     them, record them in the job store (its options:\n"
          "                     `%s processing-server --help`)\n"
          "  migrate            create or upgrade the job tables\n",
          n);
}

int mqproc__ocrd_run_main(int argc, char **argv, const mqproc_processor_t *proc) {
  char err[MQPROC_ERR_LEN] = "";
  cli_t cli;
  int rc = parse(argc, argv, &cli, err);
  if (rc == 0 && cli.action == A_HELP)
    mqproc__ocrd_run_usage(stdout, proc);
  else if (rc == 0 && cli.action == A_VERSION)
    printf("%s %s (mqproc %s)\n", proc->name, proc->version != NULL ? proc->version : "0",
           MQPROC_VERSION);
  else if (rc == 0 && cli.action == A_DUMP_JSON)
    rc = dump_json(proc, err);
  else if (rc == 0) {
    mqproc__log_set_tag(proc->name);
    mqproc__log_set_level(cli.level);
    rc = run(&cli, proc, err);
  }
  if (rc != 0 && err[0] != '\0')
    fprintf(stderr, "%s: error: %s%s\n", proc->name, err, rc == 2 ? " (see --help)" : "");
  json_decref(cli.params);
  return rc;
}
