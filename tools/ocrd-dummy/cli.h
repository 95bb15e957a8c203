/* ocrd-dummy command line: OCR-D's processor CLI (-m -I -O -g -p -P -w -l --overwrite ...). */
#ifndef OCRD_DUMMY_CLI_H
#define OCRD_DUMMY_CLI_H

#include <stdio.h>

#include "dummy.h"

typedef enum dummy_cli_action {
  DUMMY_CLI_RUN,
  DUMMY_CLI_HELP,
  DUMMY_CLI_VERSION,
  DUMMY_CLI_DUMP_JSON,
} dummy_cli_action_t;

typedef struct dummy_cli {
  dummy_cli_action_t action;
  dummy_opts_t opts;    /* strings borrowed from argv, except parameter_json */
  char *parameter_json; /* owned: every -p and -P merged (opts.parameter_json) */
  int level;            /* --log-level: the last dummy_log_level_t shown; -1: OFF */
} dummy_cli_t;

/* Parses argv (argv[0] is the program). Returns 0; 2 for a usage error (unknown option,
 * missing value, stray argument) or 1 for a bad value (parameter JSON, log level, an
 * empty --mets-server-url), with err set. dummy_cli_free() in every case. */
int dummy_cli_parse(int argc, char **argv, dummy_cli_t *cli, char *err);
void dummy_cli_free(dummy_cli_t *cli);

/* The OCR-D CLI: parses argv, then runs, or prints help, version or the tool JSON.
 * Returns the exit code (0 success, 1 processing error, 2 usage error). */
int dummy_cli_main(int argc, char **argv);

#endif
