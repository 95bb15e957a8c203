/* ocrd-dummy command line: OCR-D's processor CLI (-m -I -O -g -p -P -w -l --overwrite ...). */
#include "cli.h"

#include <ctype.h>
#include <jansson.h>
#include <mqproc/mqproc.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "fsio.h"
#include "params.h"

typedef enum {
  O_METS,
  O_WORKING_DIR,
  O_INPUT,
  O_OUTPUT,
  O_PAGE_ID,
  O_PARAMETER,
  O_PARAM_OVERRIDE,
  O_LOG_LEVEL,
  O_METS_SERVER,
  O_OVERWRITE,
  O_DEBUG,
  O_HELP,
  O_VERSION,
  O_DUMP_JSON,
} opt_id_t;

typedef struct cli_opt {
  char short_name; /* 0: long form only */
  const char *long_name;
  int n_args;
  opt_id_t id;
} cli_opt_t;

static const cli_opt_t OPTS[] = {
    {'m', "mets", 1, O_METS},
    {'w', "working-dir", 1, O_WORKING_DIR},
    {'I', "input-file-grp", 1, O_INPUT},
    {'O', "output-file-grp", 1, O_OUTPUT},
    {'g', "page-id", 1, O_PAGE_ID},
    {'p', "parameter", 1, O_PARAMETER},
    {'P', "param-override", 2, O_PARAM_OVERRIDE},
    {'l', "log-level", 1, O_LOG_LEVEL},
    {'U', "mets-server-url", 1, O_METS_SERVER},
    {0, "overwrite", 0, O_OVERWRITE},
    {0, "debug", 0, O_DEBUG},
    {'h', "help", 0, O_HELP},
    {'V', "version", 0, O_VERSION},
    {'J', "dump-json", 0, O_DUMP_JSON},
};
#define N_OPTS (sizeof(OPTS) / sizeof(OPTS[0]))

/* Sets err and returns code (1: bad value, 2: usage). */
static int fail(int code, char *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(int code, char *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, DUMMY_ERR_LEN, fmt, ap);
  va_end(ap);
  return code;
}

static const cli_opt_t *find_opt(const char *arg, const char **inline_value) {
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
  *inline_value = NULL;
  for (size_t i = 0; i < N_OPTS; i++) {
    if (arg[1] != '-' && OPTS[i].short_name == arg[1] && OPTS[i].short_name != 0) {
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

/* -p: a JSON object, verbatim or in a file; merged over earlier ones. */
static int merge_parameter(json_t *params, const char *value, char *err) {
  const char *p = value;
  json_error_t jerr;
  json_t *v;
  while (isspace((unsigned char)*p))
    p++;
  if (*p != '{' && access(value, F_OK) != 0)
    return fail(1, err, "-p %s: neither a JSON object nor an existing file", value);
  v = *p == '{' ? json_loads(value, JSON_REJECT_DUPLICATES, &jerr)
                : json_load_file(value, JSON_REJECT_DUPLICATES, &jerr);
  if (v == NULL)
    return fail(1, err, "invalid parameter JSON in -p %s: %s (line %d, column %d)", value,
                jerr.text, jerr.line, jerr.column);
  if (!json_is_object(v)) {
    json_decref(v);
    return fail(1, err, "invalid parameter JSON in -p %s: not an object", value);
  }
  json_object_update(params, v);
  json_decref(v);
  return 0;
}

/* -P KEY VALUE: VALUE as JSON when it parses, else as a string (like core). */
static int override_parameter(json_t *params, const char *key, const char *value, char *err) {
  json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
  if (v == NULL)
    v = json_string(value);
  if (v == NULL || json_object_set_new(params, key, v) != 0)
    return fail(1, err, "-P %s: invalid value", key);
  return 0;
}

static int parse_level(const char *v, int *level, char *err) {
  static const struct {
    const char *name;
    int level;
  } levels[] = {{"OFF", -1},
                {"CRITICAL", DUMMY_LOG_ERROR},
                {"ERROR", DUMMY_LOG_ERROR},
                {"WARN", DUMMY_LOG_WARN},
                {"WARNING", DUMMY_LOG_WARN},
                {"INFO", DUMMY_LOG_INFO},
                {"DEBUG", DUMMY_LOG_DEBUG},
                {"TRACE", DUMMY_LOG_DEBUG}};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
    if (strcasecmp(v, levels[i].name) == 0) {
      *level = levels[i].level;
      return 0;
    }
  return fail(1, err, "--log-level %s: expected OFF, ERROR, WARN, INFO, DEBUG or TRACE", v);
}

static int apply(dummy_cli_t *cli, const cli_opt_t *o, const char *const *v, json_t *params,
                 char *err) {
  switch (o->id) {
  case O_METS:
    cli->opts.mets = v[0];
    return 0;
  case O_WORKING_DIR:
    cli->opts.working_dir = v[0];
    return 0;
  case O_INPUT:
    cli->opts.input_grp = v[0];
    return 0;
  case O_OUTPUT:
    cli->opts.output_grp = v[0];
    return 0;
  case O_PAGE_ID:
    cli->opts.page_id = v[0];
    return 0;
  case O_PARAMETER:
    return merge_parameter(params, v[0], err);
  case O_PARAM_OVERRIDE:
    return override_parameter(params, v[0], v[1], err);
  case O_LOG_LEVEL:
    return parse_level(v[0], &cli->level, err);
  case O_METS_SERVER:
    if (v[0][0] == '\0')
      return fail(1, err, "--mets-server-url is empty");
    cli->opts.mets_server_url = v[0];
    return 0;
  case O_OVERWRITE:
    cli->opts.overwrite = true;
    return 0;
  case O_DEBUG: /* core: abort on any error, which is what this implementation always does */
    return 0;
  case O_HELP:
  case O_VERSION:
  case O_DUMP_JSON:
    if (cli->action == DUMMY_CLI_RUN)
      cli->action = o->id == O_HELP      ? DUMMY_CLI_HELP
                    : o->id == O_VERSION ? DUMMY_CLI_VERSION
                                         : DUMMY_CLI_DUMP_JSON;
    return 0;
  }
  return 0;
}

/* Parses argv[*i] (and its values, advancing *i). */
static int parse_one(int argc, char **argv, int *i, dummy_cli_t *cli, json_t *params, char *err) {
  const char *a = argv[*i], *inline_value, *v[2] = {NULL, NULL};
  const cli_opt_t *o;
  if (a[0] != '-' || a[1] == '\0' || (a[1] == '-' && a[2] == '\0'))
    return fail(2, err, "unexpected argument '%s'", a);
  if ((o = find_opt(a, &inline_value)) == NULL)
    return fail(2, err, "unknown option '%s'", a);
  if (o->n_args == 0 && inline_value != NULL)
    return fail(2, err, "option '%s' takes no value", a);
  for (int k = 0; k < o->n_args; k++) {
    if (k == 0 && inline_value != NULL)
      v[k] = inline_value;
    else if (*i + 1 < argc)
      v[k] = argv[++*i];
    else
      return fail(2, err, "option '%s' requires %s", a, o->n_args == 2 ? "KEY VALUE" : "a value");
  }
  return apply(cli, o, v, params, err);
}

int dummy_cli_parse(int argc, char **argv, dummy_cli_t *cli, char *err) {
  json_t *params = json_object();
  int rc = params != NULL ? 0 : fail(1, err, "out of memory");
  memset(cli, 0, sizeof(*cli));
  cli->level = DUMMY_LOG_INFO;
  for (int i = 1; rc == 0 && i < argc; i++)
    rc = parse_one(argc, argv, &i, cli, params, err);
  if (rc == 0 && (cli->parameter_json = json_dumps(params, JSON_COMPACT)) == NULL)
    rc = fail(1, err, "out of memory");
  cli->opts.parameter_json = cli->parameter_json;
  json_decref(params);
  return rc;
}

void dummy_cli_free(dummy_cli_t *cli) {
  free(cli->parameter_json);
  cli->parameter_json = NULL;
  cli->opts.parameter_json = NULL;
}

static void usage(FILE *out) {
  fprintf(out,
          "Usage: %s [OPTIONS]\n"
          "       %s processing-server --queue=AMQP_URL --database=PG_URL [OPTIONS]\n"
          "       %s migrate --database=PG_URL\n\n"
          "  Bare-bones processor creates PAGE-XML and optionally copies file from input group\n"
          "  to output group (OCR-D/core's ocrd-dummy, in C on mqproc).\n\n"
          "Options:\n"
          "  -I, --input-file-grp USE      File group used as input (exactly one)\n"
          "  -O, --output-file-grp USE     File group used as output (exactly one)\n"
          "  -g, --page-id ID              Physical page ID(s) to process instead of the full\n"
          "                                document: ID, ID..ID, //regex, ~negation, commas\n"
          "  --overwrite                   Replace existing output files of the pages\n"
          "  -p, --parameter JSON-PATH     Parameters, a verbatim JSON object or a JSON file\n"
          "  -P, --param-override KEY VAL  Set one parameter (VAL parsed as JSON if it can be)\n"
          "  -m, --mets PATH               The METS file [./mets.xml]\n"
          "  -w, --working-dir PATH        Workspace directory [the METS's directory]\n"
          "  -l, --log-level LEVEL         OFF, ERROR, WARN, INFO, DEBUG or TRACE [INFO]\n"
          "  -U, --mets-server-url URL     OCR-D's METS server holding the METS: a Unix\n"
          "                                socket's path, or http://HOST:PORT[/tcp_mets];\n"
          "                                the METS is read and changed through it\n"
          "  -J, --dump-json               Print the tool description (ocrd-tool.json)\n"
          "  -h, --help                    Show this message\n"
          "  -V, --version                 Show the version\n"
          "  --help-server                 Show the processing-server's options\n\n"
          "Parameters:\n"
          "   \"copy_files\" [boolean - false]\n"
          "    Whether to actually copy files (true) or just create PAGE-XML as a side\n"
          "    effect (false)\n",
          DUMMY_NAME, DUMMY_NAME, DUMMY_NAME);
}

static int dump_json(void) {
  json_t *tool = dummy_tool_json();
  char *text = tool != NULL ? json_dumps(tool, JSON_INDENT(1)) : NULL;
  json_decref(tool);
  if (text == NULL)
    return 1;
  printf("%s\n", text);
  free(text);
  return 0;
}

/* Log lines on stderr in OCR-D's format: "HH:MM:SS.mmm LEVEL name - message". */
static void cli_log(void *ud, dummy_log_level_t level, const char *msg) {
  static const char *const names[] = {"ERROR", "WARNING", "INFO", "DEBUG"};
  const int *max = ud;
  struct timespec ts;
  struct tm tm;
  char hms[16];
  if ((int)level > *max)
    return;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  strftime(hms, sizeof(hms), "%H:%M:%S", &tm);
  fprintf(stderr, "%s.%03ld %s ocrd.processor.%s - %s\n", hms, ts.tv_nsec / 1000000, names[level],
          DUMMY_NAME, msg);
}

int dummy_cli_main(int argc, char **argv) {
  char err[DUMMY_ERR_LEN];
  dummy_cli_t cli;
  int rc;
  if (argc < 2) {
    usage(stderr);
    return 1;
  }
  if ((rc = dummy_cli_parse(argc, argv, &cli, err)) != 0) {
    fprintf(stderr, "%s: error: %s%s\n", DUMMY_NAME, err, rc == 2 ? " (see --help)" : "");
  } else if (cli.action == DUMMY_CLI_HELP) {
    usage(stdout);
  } else if (cli.action == DUMMY_CLI_VERSION) {
    printf("Version %s, mqproc %s\n", DUMMY_VERSION, MQPROC_VERSION);
  } else if (cli.action == DUMMY_CLI_DUMP_JSON) {
    rc = dump_json();
  } else {
    cli.opts.log = cli_log;
    cli.opts.log_ud = &cli.level;
    if (dummy_run(&cli.opts, err) != 0) {
      fprintf(stderr, "%s: error: %s\n", DUMMY_NAME, err);
      rc = 1;
    }
  }
  dummy_cli_free(&cli);
  return rc;
}
