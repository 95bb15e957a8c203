/* ocrd-dummy: OCR-D/core's trivial processor in C, as an OCR-D CLI and an mqproc server.
 *
 *   ocrd-dummy -m mets.xml -I OCR-D-IMG -O OCR-D-DUMMY [-g PAGES] [-p JSON] [--overwrite]
 *   ocrd-dummy processing-server --queue=amqp://… --database=postgresql://…
 *
 * The first argument decides: `processing-server`, `migrate`, MQPROC_WORKER_COMMAND (a
 * worker process of --isolation=process) and --help-server go to mqproc_main(), everything
 * else is the OCR-D processor CLI (cli.c).
 */
#include <curl/curl.h>
#include <libxml/parser.h>
#include <string.h>

#include "cli.h"
#include "worker.h"

int main(int argc, char **argv) {
  int rc;
  xmlInitParser(); /* once, before any worker thread uses libxml2 or libcurl */
  curl_global_init(CURL_GLOBAL_DEFAULT);
  if (argc >= 2 && (strcmp(argv[1], "processing-server") == 0 || strcmp(argv[1], "migrate") == 0 ||
                    strcmp(argv[1], MQPROC_WORKER_COMMAND) == 0)) {
    rc = mqproc_main(argc, argv, &dummy_processor);
  } else if (argc == 2 && strcmp(argv[1], "--help-server") == 0) {
    static char server[] = "processing-server", help[] = "--help";
    char *help_argv[] = {argv[0], server, help, NULL};
    rc = mqproc_main(3, help_argv, &dummy_processor);
  } else {
    rc = dummy_cli_main(argc, argv);
  }
  curl_global_cleanup();
  xmlCleanupParser();
  return rc;
}
