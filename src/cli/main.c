/* The mqproc program: any command line as a processing server, and the operator
 * commands (src/cli/). */
#include <stdlib.h>
#include <unistd.h>

#include "entry/entry.h"
#include "cli/admin.h"
#include "base/util.h"

int main(int argc, char **argv) {
  int rc;
  srandom((unsigned)(getpid() ^ mqproc__wall_ms())); /* a broker list's order, per command */
  rc = argc > 1 ? mqproc__admin_main(argc, argv) : -1;
  return rc >= 0 ? rc : mqproc__cli_main(argc, argv, MQPROC__CLI_GENERIC, NULL);
}
