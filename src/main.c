/* The mqproc program: any command line as a processing server. */
#include "cli.h"

int main(int argc, char **argv) {
  return mqproc__cli_main(argc, argv, MQPROC__CLI_GENERIC, NULL);
}
