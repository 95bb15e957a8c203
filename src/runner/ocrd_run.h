/* OCR-D's processor command line for a C processor (ocrd_run.c): `ocrd-foo -m mets.xml -I A
 * -O B` builds one job from the options and runs the processor's process() once, here. */
#ifndef MQPROC_RUNNER_OCRD_RUN_H
#define MQPROC_RUNNER_OCRD_RUN_H

#include <stdio.h>

#include "mqproc/mqproc.h"

/* Runs argv (argv[0] the program, then OCR-D's processor options); returns the exit
 * status: 0 the job succeeded (or -h, -V, -J was given), 1 it failed or could not run, 2
 * the arguments are wrong (the reason is on stderr). */
int mqproc__ocrd_run_main(int argc, char **argv, const mqproc_processor_t *proc);

/* A C processor's --help: its OCR-D options, its parameters (from its ocrd-tool
 * description), its commands. */
void mqproc__ocrd_run_usage(FILE *out, const mqproc_processor_t *proc);

#endif
