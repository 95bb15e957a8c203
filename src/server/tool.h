/* A server's ocrd-tool description in the job store (sql/009_ocrd_api.sql's
 * mqproc_ocrd_tools), for the processing API's GET /processor/info and its parameter
 * checks (docs/ocrd.md): a C processor's ocrd_tool_json, or what an --exec OCR-D
 * processor prints for `--dump-json`, read once at start on a thread of its own (the
 * program gets TOOL_DEADLINE_S to answer), never on the loop. A processor of neither kind
 * stores nothing: its parameters are not checked. A store of an older schema, or a
 * program that prints no description, is said in the log and changes nothing else. */
#ifndef MQPROC_SERVER_TOOL_H
#define MQPROC_SERVER_TOOL_H

#include "server/server.h"

#define MQPROC__TOOL_DEADLINE_S 10

/* Starts the thread (when there is something to store). */
void mqproc__server_tool_start(mqproc__server_t *srv, const mqproc_processor_t *proc);

#endif
