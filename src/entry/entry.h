/* The library's entry point: the command line shared by the mqproc program (cli/main.c)
 * and C processors (mqproc_main(), entry.c). */
#ifndef MQPROC_ENTRY_H
#define MQPROC_ENTRY_H

#include "base/config.h"
#include "mqproc/mqproc.h"

/* Runs the command in argv[1]; returns the exit code. proc is NULL for the generic
 * program (kind MQPROC__CLI_GENERIC). */
int mqproc__cli_main(int argc, char **argv, mqproc__cli_kind_t kind,
                     const mqproc_processor_t *proc);

#endif
