/* Integration: OCR-D's METS server (issue 33).
 *
 * OCR-D's Processing Server starts a METS server for the workspace of every job it
 * publishes and, once the workspace's last job has called back, has it write its
 * in-memory copy over mets.xml: a processor that wrote mets.xml itself meanwhile loses its
 * changes. OCR-D's worker passes its processors --mets-server-url; so does mqproc for a
 * message with internal_callback_url (only the Processing Server sets it): the socket
 * <--ocrd-sockets-dir>/<safe_filename(workspace dir)>.sock, or with --ocrd-mets-server=tcp
 * the Processing Server's /tcp_mets. ocrd-dummy then reads and changes the METS through
 * that server and leaves mets.xml alone.
 *
 * The METS server here is tests/support/fake_mets_server.py: the routes of core's
 * ocrd/mets_server.py that ocrd-dummy uses, and the /tcp_mets multiplexer, recording every
 * request (core itself, FastAPI and MongoDB, does not run here). The suite mets_server_url
 * needs no services.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/argv.h"
#include "codec/codec.h"
#include "harness.h"
#include "http_listener.h"
#include "ocrd_workspace.h"
#include "runner/ocrd_argv.h"
#include "runner/worker_int.h"

#define WAIT_MS 30000
#define PYTHON "/usr/bin/python3"
#define FAKE_METS_SERVER MQPROC_SOURCE_DIR "/tests/support/fake_mets_server.py"
#define OCRD_DUMMY MQPROC_BUILD_DIR "/tools/ocrd-dummy/ocrd-dummy"
#define PAGE_MIME "application/vnd.prima.page+xml"

/* Directories made under /tmp by short_dir(), removed at the end of the test however it
 * ended. */
static char *g_dirs[4];
static size_t g_n_dirs;

static void fini(void) {
  while (g_n_dirs > 0) {
    ows_rmtree(g_dirs[--g_n_dirs]);
    free(g_dirs[g_n_dirs]);
  }
  it_cleanup();
}

TestSuite(mets_server_url);
TestSuite(mets_server, .fini = fini);

/* ---- what mqproc derives ------------------------------------------------------------- */

static mqproc__msg_t *msg_of(const char *json) {
  char err[MQPROC_ERR_LEN];
  json_t *doc;
  mqproc__format_t fmt;
  mqproc__msg_t *m;
  cr_assert_eq(mqproc__codec_parse(json, strlen(json), &doc, &fmt, err), MQPROC_OK, "%s", err);
  cr_assert_eq(mqproc__msg_validate(doc, fmt, NULL, &m, err), MQPROC_OK, "%s", err);
  return m;
}

/* What Python prints for re.sub(r'[^\w]+', '_', str(Path(mets).parent)) + '.sock' (core's
 * get_uds_path), checked with python3 when these were written. */
Test(mets_server_url, socket_names_follow_ocrds_safe_filename) {
  static const char *const cases[][2] = {
      {"/data/ws1/mets.xml", "_data_ws1.sock"},
      {"/data//ws1/./mets.xml", "_data_ws1.sock"},
      {"/data/my ws-1.2/mets.xml", "_data_my_ws_1_2.sock"},
      {"/data/ws1/../ws2/mets.xml", "_data_ws1_ws2.sock"},
      {"/data/B\xc3\xbc"
       "cher/mets.xml",
       "_data_B\xc3\xbc"
       "cher.sock"},
      {"ws/sub/mets.xml", "ws_sub.sock"},
      {"mets.xml", "_.sock"},
      {"/mets.xml", "_.sock"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *name = mqproc__ocrd_socket_name(cases[i][0]);
    cr_expect_str_eq(name, cases[i][1], "for %s", cases[i][0]);
    free(name);
  }
}

Test(mets_server_url, only_a_processing_server_job_has_a_mets_server) {
  mqproc__msg_t *plain = msg_of("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", "
                                "\"created_time\": 1, \"input_file_grps\": [\"IN\"], "
                                "\"path_to_mets\": \"/data/ws1/mets.xml\"}");
  mqproc__msg_t *ps = msg_of("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", "
                             "\"created_time\": 1, \"input_file_grps\": [\"IN\"], "
                             "\"path_to_mets\": \"/data/ws1/mets.xml\", \"internal_callback_url\": "
                             "\"http://ps.example:8000/result_callback\"}");
  mqproc__msg_t *odd =
      msg_of("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", "
             "\"created_time\": 1, \"input_file_grps\": [\"IN\"], "
             "\"path_to_mets\": \"/data/ws1/mets.xml\", \"internal_callback_url\": "
             "\"http://ps.example:8000/callback\"}");
  const char *mets = "/data/ws1/mets.xml";
  char err[MQPROC_ERR_LEN], *url = (char *)"unset";
  cr_expect_eq(mqproc__ocrd_mets_server_url(plain, mets, MQPROC__OCRD_METS_SOCKET, "/s", &url, err),
               MQPROC_OK);
  cr_expect_null(url, "a job not from a Processing Server has no METS server");
  cr_expect_eq(mqproc__ocrd_mets_server_url(ps, NULL, MQPROC__OCRD_METS_SOCKET, "/s", &url, err),
               MQPROC_OK);
  cr_expect_null(url, "a job without a METS has none");
  cr_expect_eq(mqproc__ocrd_mets_server_url(ps, mets, MQPROC__OCRD_METS_OFF, "/s", &url, err),
               MQPROC_OK);
  cr_expect_null(url);
  cr_expect_eq(mqproc__ocrd_mets_server_url(ps, mets, MQPROC__OCRD_METS_SOCKET,
                                            "/tmp/ocrd_network_sockets/", &url, err),
               MQPROC_OK);
  cr_expect_str_eq(url, "/tmp/ocrd_network_sockets/_data_ws1.sock");
  free(url);
  cr_expect_eq(mqproc__ocrd_mets_server_url(ps, mets, MQPROC__OCRD_METS_TCP, "/s", &url, err),
               MQPROC_OK);
  cr_expect_str_eq(url, "http://ps.example:8000/tcp_mets");
  free(url);
  cr_expect_eq(mqproc__ocrd_mets_server_url(odd, mets, MQPROC__OCRD_METS_TCP, "/s", &url, err),
               MQPROC_EINVAL);
  cr_expect(strstr(err, "does not end in /result_callback") != NULL, "%s", err);
  mqproc__msg_free(plain);
  mqproc__msg_free(ps);
  mqproc__msg_free(odd);
}

Test(mets_server_url, the_mets_server_is_the_last_ocrd_argument) {
  mqproc__msg_t *m = msg_of("{\"job_id\": \"j\", \"processor_name\": \"ocrd-x\", "
                            "\"created_time\": 1, \"input_file_grps\": [\"IN\"], "
                            "\"path_to_mets\": \"/w/mets.xml\"}");
  char *base[] = {"ocrd-x", NULL}, **argv, err[MQPROC_ERR_LEN];
  size_t n = 0;
  cr_assert_eq(mqproc__ocrd_argv(base, m, "/w/mets.xml", "DEBUG", "/s/_w.sock", &argv, err),
               MQPROC_OK);
  while (argv[n] != NULL)
    n++;
  cr_assert_eq(n, 13);
  cr_expect_str_eq(argv[9], "--parameter");
  cr_expect_str_eq(argv[11], "--mets-server-url");
  cr_expect_str_eq(argv[12], "/s/_w.sock");
  mqproc__argv_free(argv);
  mqproc__msg_free(m);
}

Test(mets_server_url, a_worker_process_gets_the_mets_server_url) {
  mqproc__msg_t msg = {.format = MQPROC__FMT_JSON};
  const char *urls[] = {"/tmp/ocrd_network_sockets/_data_ws1.sock", NULL};
  for (size_t i = 0; i < 2; i++) {
    mqproc__run_spec_t spec = {.msg = &msg,
                               .request_json = "{}",
                               .mets_path = "/data/ws1/mets.xml",
                               .mets_server_url = urls[i],
                               .headers_json = "{}",
                               .worker_id = "host:1"};
    mqproc__worker_req_t req;
    mqproc__worker_job_t job;
    char err[MQPROC_ERR_LEN], *payload;
    size_t len;
    cr_assert_eq(mqproc__worker_pack(&spec, &req, &payload, &len, err), MQPROC_OK, "%s", err);
    cr_assert_eq(mqproc__worker_unpack(&req, payload, len, &job, err), MQPROC_OK, "%s", err);
    cr_expect_str_eq(job.mets_path, "/data/ws1/mets.xml");
    if (urls[i] != NULL)
      cr_expect_str_eq(job.mets_server_url, urls[i]);
    else
      cr_expect_null(job.mets_server_url);
    cr_expect_str_eq(job.headers_json, "{}");
    cr_expect_str_eq(job.worker_id, "host:1");
    free(payload);
  }
}

/* ---- helpers of the integration tests ----------------------------------------------- */

/* A directory under /tmp (a socket's path must fit in 108 bytes: the build tree's may not),
 * removed when the test ends. */
static char *short_dir(void) {
  char *d = ows_mkdtemp();
  cr_assert_not_null(d);
  cr_assert_lt(g_n_dirs, sizeof(g_dirs) / sizeof(g_dirs[0]));
  return g_dirs[g_n_dirs++] = d;
}

typedef struct fake {
  it_server_t *srv;
  const char *record; /* its requests, one JSON object a line */
  int port;           /* TCP: where it listens */
} fake_t;

/* Starts the fake METS server for the workspace ws on the socket sock (NULL: TCP on
 * 127.0.0.1). */
static fake_t fake_start(const char *ws, const char *sock) {
  fake_t f = {.record = it_fmt("%s/mets-requests.jsonl", it_tmpdir())};
  const char *argv[] = {PYTHON,
                        FAKE_METS_SERVER,
                        "--workspace",
                        ws,
                        "--record",
                        f.record,
                        sock != NULL ? "--socket" : "--tcp",
                        sock,
                        NULL};
  f.srv = it_program_spawn("fake-mets", argv, NULL);
  cr_assert(it_server_wait_log(f.srv, "fake METS server listening on", WAIT_MS));
  for (size_t i = 0; sock == NULL && f.port == 0; i++) {
    char *line = it_server_line(f.srv, i), *at;
    cr_assert_not_null(line);
    if ((at = strstr(line, "127.0.0.1 port ")) != NULL)
      f.port = atoi(at + strlen("127.0.0.1 port "));
  }
  return f;
}

/* The requests the fake got, in order, as a JSON array (the caller decrefs). */
static json_t *requests(const fake_t *f) {
  char *text = it_read_file(f->record), *save = NULL;
  json_t *all = json_array();
  for (char *line = text != NULL ? strtok_r(text, "\n", &save) : NULL; line != NULL;
       line = strtok_r(NULL, "\n", &save))
    json_array_append_new(all, it_json(line));
  return all;
}

/* got equals want (decref'd here); what names it in the failure. */
static void expect_json(const json_t *got, json_t *want, const char *what) {
  if (!json_equal(got, want)) {
    char *g = json_dumps(got, JSON_ENCODE_ANY), *w = json_dumps(want, JSON_ENCODE_ANY);
    cr_expect_fail("%s: got %s, want %s", what, g, w);
    free(g);
    free(w);
  }
  json_decref(want);
}

static void expect_route(json_t *reqs, size_t i, const char *method, const char *route) {
  json_t *r = json_array_get(reqs, i);
  cr_assert_not_null(r, "no request %zu (want %s %s)", i, method, route);
  cr_expect_str_eq(json_string_value(json_object_get(r, "method")), method, "request %zu", i);
  cr_expect_str_eq(json_string_value(json_object_get(r, "route")), route, "request %zu", i);
}

/* What ocrd-dummy sends for page PHYS_0001 of OCR-D-IMG into OCR-D-DUMMY: the METS read,
 * one PAGE file added, the agent, the save; via is "tcp_mets" through the multiplexer. */
static void expect_dummy_requests(const fake_t *f, const char *via) {
  json_t *reqs = requests(f);
  expect_route(reqs, 0, "GET", "/workspace_path");
  expect_route(reqs, 1, "GET", "/physical_pages");
  expect_route(reqs, 2, "GET", "/file");
  expect_route(reqs, 3, "POST", "/file");
  expect_route(reqs, 4, "POST", "/agent");
  expect_route(reqs, 5, "PUT", "/");
  cr_expect_eq(json_array_size(reqs), 6, "%zu requests", json_array_size(reqs));
  expect_json(json_object_get(json_array_get(reqs, 3), "form"),
              json_pack("{s:s, s:s, s:s, s:s, s:s}", "file_grp", "OCR-D-DUMMY", "file_id",
                        "OCR-D-DUMMY_0001", "page_id", "PHYS_0001", "mimetype", PAGE_MIME,
                        "local_filename", "OCR-D-DUMMY/OCR-D-DUMMY_0001.xml"),
              "POST /file's form");
  expect_json(
      json_object_get(json_array_get(reqs, 4), "json"),
      json_pack("{s:s, s:s, s:s, s:s, s:s, s:[[{s:s}, s], [{s:s}, s], [{s:s}, s], [{s:s}, s]]}",
                "name", "ocrd-dummy v1.0.0", "type", "OTHER", "role", "OTHER", "otherrole",
                "preprocessing/optimization", "othertype", "SOFTWARE", "notes", "option",
                "input-file-grp", "OCR-D-IMG", "option", "output-file-grp", "OCR-D-DUMMY", "option",
                "parameter", "{\"copy_files\": false}", "option", "page-id", ""),
      "POST /agent's JSON");
  for (size_t i = 0; via != NULL && i < json_array_size(reqs); i++)
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(reqs, i), "via")), via);
  json_decref(reqs);
}

/* A one-page workspace in a new directory under /tmp: its directory. */
static char *workspace(void) {
  static const ows_page_t page = {2, 2};
  char *ws = short_dir();
  cr_assert_eq(ows_create(ws, &page, 1), 0);
  return ws;
}

/* A job for OCR-D-IMG -> OCR-D-DUMMY of mets, results to results, from a Processing Server
 * when icb (its internal callback URL) is not NULL. */
static char *job(const char *proc, const char *id, const char *mets, const char *results,
                 const char *icb) {
  return it_job_json(proc, id,
                     it_fmt("{\"path_to_mets\": \"%s\", \"output_file_grps\": [\"OCR-D-DUMMY\"], "
                            "\"result_queue_name\": \"%s\"%s%s%s}",
                            mets, results, icb != NULL ? ", \"internal_callback_url\": \"" : "",
                            icb != NULL ? icb : "", icb != NULL ? "\"" : ""));
}

/* Waits for the job's result and checks its state. */
static void expect_result(const char *results, const char *id, const char *state) {
  it_msg_t m;
  cr_assert(it_get(results, WAIT_MS, &m), "no result for %s", id);
  cr_expect(strstr(m.body, id) != NULL && strstr(m.body, state) != NULL, "want %s: %s", state,
            m.body);
  it_msg_free(&m);
}

/* The arguments the recorder got for job id, one a line. */
static char *recorded_argv(const char *id) {
  char *text = it_read_file(it_fmt("%s/%s.argv", it_tmpdir(), id));
  cr_assert_not_null(text, "%s recorded no argv", id);
  return text;
}

/* ---- (a) --exec OCR-D processors get --mets-server-url as OCR-D's worker passes it ---- */

Test(mets_server, an_ocrd_processor_gets_the_socket_of_a_processing_server_job) {
  char *proc = it_name("uds"), *results = it_name("uds-result");
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback");
  /* the sockets' directory as the Processing Server has it: OCR-D's own variable */
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()),
                        "OCRD_NETWORK_SOCKETS_ROOT_DIR=/run/ocrd-sockets/", NO_CHECK, NULL};
  const char *extra[] = {"--workspace-root=/srv/ws", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  it_publish(proc, job(proc, "uds-ps", "/data/ws1/mets.xml", results, icb));
  expect_result(results, "uds-ps", "SUCCESS");
  cr_expect(strstr(recorded_argv("uds-ps"),
                   "--parameter\n{}\n--mets-server-url\n/run/ocrd-sockets/_data_ws1.sock\n") !=
            NULL);
  it_publish(proc, job(proc, "uds-plain", "/data/ws1/mets.xml", results, NULL));
  expect_result(results, "uds-plain", "SUCCESS");
  cr_expect(strstr(recorded_argv("uds-plain"), "--mets-server-url") == NULL,
            "not a Processing Server's job, no METS server: %s", recorded_argv("uds-plain"));
  it_publish(proc, it_fmt("{\"job_id\": \"uds-ws\", \"processor_name\": \"%s\", \"created_time\": "
                          "1, \"input_file_grps\": [\"IN\"], \"workspace_id\": \"ws-7\", "
                          "\"result_queue_name\": \"%s\", \"internal_callback_url\": \"%s\"}",
                          proc, results, icb));
  expect_result(results, "uds-ws", "SUCCESS");
  cr_expect(strstr(recorded_argv("uds-ws"),
                   "--mets-server-url\n/run/ocrd-sockets/_srv_ws_ws_7.sock\n") != NULL);
  it_server_stop(srv);
  test_http_stop(ps);
  free(icb);
}

Test(mets_server, with_use_tcp_mets_the_processor_gets_the_processing_servers_tcp_mets) {
  char *proc = it_name("tcp"), *results = it_name("tcp-result");
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback"), *want = test_http_url(ps, "/tcp_mets");
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  const char *extra[] = {"--ocrd-mets-server=tcp", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  it_publish(proc, job(proc, "tcp-ps", "/data/ws1/mets.xml", results, icb));
  expect_result(results, "tcp-ps", "SUCCESS");
  cr_expect(strstr(recorded_argv("tcp-ps"), it_fmt("--mets-server-url\n%s\n", want)) != NULL, "%s",
            recorded_argv("tcp-ps"));
  /* OCR-D builds it as <base>/result_callback: without that there is no /tcp_mets to name */
  it_publish(proc, job(proc, "tcp-odd", "/data/ws1/mets.xml", results,
                       it_fmt("http://127.0.0.1:%d/cb", test_http_port(ps))));
  it_expect_dead(proc, "does not end in /result_callback");
  it_server_stop(srv);
  test_http_stop(ps);
  free(icb);
  free(want);
}

Test(mets_server, with_off_no_processor_gets_a_mets_server) {
  char *proc = it_name("off"), *results = it_name("off-result");
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback");
  const char *envp[] = {it_fmt("PROC_ARGV_DIR=%s", it_tmpdir()), NO_CHECK, NULL};
  const char *extra[] = {"--ocrd-mets-server=off", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, it_proc("ocrd-argv-recorder"), extra, envp);
  it_publish(proc, job(proc, "off-ps", "/data/ws1/mets.xml", results, icb));
  expect_result(results, "off-ps", "SUCCESS");
  cr_expect(strstr(recorded_argv("off-ps"), "--mets-server-url") == NULL);
  it_server_stop(srv);
  test_http_stop(ps);
  free(icb);
}

/* ---- (b) ocrd-dummy changes the METS only through the METS server ---------------------- */

/* The socket mqproc derives for the workspace ws under the sockets directory socks. */
static char *socket_of(const char *socks, const char *ws) {
  char *name = mqproc__ocrd_socket_name(it_fmt("%s/mets.xml", ws));
  char *path = it_fmt("%s/%s", socks, name);
  free(name);
  return path;
}

Test(mets_server, ocrd_dummy_changes_the_mets_only_through_the_mets_server) {
  char *proc = it_name("dummy"), *results = it_name("dummy-result");
  char *ws = workspace(), *socks = short_dir(), *mets = it_fmt("%s/mets.xml", ws);
  char *before = it_read_file(mets);
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback");
  const char *envp[] = {it_fmt("OCRD_NETWORK_SOCKETS_ROOT_DIR=%s", socks), NO_CHECK, NULL};
  fake_t fake = fake_start(ws, socket_of(socks, ws));
  it_server_t *srv;
  struct stat st;
  it_declare(results);
  srv = it_server_start(proc, OCRD_DUMMY, NULL, envp);
  it_publish(proc, job(proc, "dummy-1", mets, results, icb));
  expect_result(results, "dummy-1", "SUCCESS");
  cr_expect_str_eq(it_read_file(mets), before, "ocrd-dummy wrote mets.xml itself");
  cr_expect_eq(stat(it_fmt("%s/OCR-D-DUMMY/OCR-D-DUMMY_0001.xml", ws), &st), 0,
               "the PAGE file is written to the workspace");
  expect_dummy_requests(&fake, NULL);
  it_server_stop(srv);
  it_server_stop(fake.srv);
  test_http_stop(ps);
  free(icb);
}

/* The C server (mqproc_job_mets_server_url()), in a worker process: the URL crosses to it. */
Test(mets_server, ocrd_dummys_own_server_goes_through_the_mets_server) {
  char *proc = it_name("dummy-c"), *results = it_name("dummy-c-result");
  char *ws = workspace(), *socks = short_dir(), *mets = it_fmt("%s/mets.xml", ws);
  char *before = it_read_file(mets);
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback");
  const char *argv[] = {OCRD_DUMMY,
                        "processing-server",
                        "--processor",
                        proc,
                        "--queue",
                        it_amqp_url(),
                        "--database",
                        it_db_url(),
                        "--log-dir",
                        it_fmt("%s/joblogs", it_tmpdir()),
                        it_fmt("--ocrd-sockets-dir=%s", socks),
                        "--isolation=process",
                        "--pass-env=ASAN_OPTIONS",
                        "--pass-env=UBSAN_OPTIONS",
                        "--pass-env=LSAN_OPTIONS",
                        NULL};
  fake_t fake = fake_start(ws, socket_of(socks, ws));
  it_server_t *srv;
  it_declare(results);
  srv = it_program_spawn(proc, argv, NULL);
  cr_assert(it_server_wait_log(srv, "consuming from queue", WAIT_MS));
  it_publish(proc, job(proc, "dummy-c-1", mets, results, icb));
  expect_result(results, "dummy-c-1", "SUCCESS");
  cr_expect_str_eq(it_read_file(mets), before, "ocrd-dummy wrote mets.xml itself");
  expect_dummy_requests(&fake, NULL);
  it_server_stop(srv);
  it_server_stop(fake.srv);
  test_http_stop(ps);
  free(icb);
}

/* A Processing Server with use_tcp_mets: every request goes to its /tcp_mets, which finds
 * the workspace's socket by the workspace path ocrd-dummy sends. */
Test(mets_server, ocrd_dummy_goes_through_the_tcp_mets_multiplexer) {
  char *ws = workspace(), *mets = it_fmt("%s/mets.xml", ws), *before = it_read_file(mets);
  fake_t fake = fake_start(ws, NULL);
  const char *argv[] = {OCRD_DUMMY,
                        "-m",
                        mets,
                        "-I",
                        "OCR-D-IMG",
                        "-O",
                        "OCR-D-DUMMY",
                        "--mets-server-url",
                        it_fmt("http://127.0.0.1:%d/tcp_mets", fake.port),
                        NULL};
  json_t *reqs;
  cr_expect_eq(it_run(argv, NULL, NULL, NULL), 0);
  cr_expect_str_eq(it_read_file(mets), before);
  expect_dummy_requests(&fake, "tcp_mets");
  /* the output is in the server's copy now: a second run sees it there, not in mets.xml */
  cr_expect_eq(it_run(argv, NULL, NULL, NULL), 1, "existing output must fail the run");
  reqs = requests(&fake);
  cr_expect_eq(json_array_size(reqs), 9, "the second run only reads");
  json_decref(reqs);
  it_server_stop(fake.srv);
}

/* ---- (c) a METS server that is gone ------------------------------------------------- */

Test(mets_server, a_mets_server_that_is_gone_fails_the_job_with_a_clear_error) {
  char *proc = it_name("gone"), *results = it_name("gone-result");
  char *ws = workspace(), *socks = short_dir(), *mets = it_fmt("%s/mets.xml", ws);
  char *before = it_read_file(mets), *err;
  test_http_t *ps = test_http_start(200);
  char *icb = test_http_url(ps, "/result_callback");
  const char *envp[] = {it_fmt("OCRD_NETWORK_SOCKETS_ROOT_DIR=%s", socks), NULL};
  const char *extra[] = {"--retries=0", "--max-requeues=0", NULL};
  it_server_t *srv;
  it_declare(results);
  srv = it_server_start(proc, OCRD_DUMMY, extra, envp);
  it_publish(proc, job(proc, "gone-1", mets, results, icb));
  expect_result(results, "gone-1", "FAILED");
  err = it_sql("SELECT last_error FROM mqproc_jobs WHERE job_id = 'gone-1'", 0);
  cr_assert_not_null(err);
  cr_expect(strstr(err, "cannot reach the METS server") != NULL &&
                strstr(err, socket_of(socks, ws)) != NULL && strstr(err, "No such file") != NULL,
            "%s", err);
  cr_expect_str_eq(it_read_file(mets), before);
  /* the server lives on: the next job, not from a Processing Server, writes mets.xml */
  it_publish(proc, job(proc, "gone-2", mets, results, NULL));
  expect_result(results, "gone-2", "SUCCESS");
  cr_expect(strstr(it_read_file(mets), "OCR-D-DUMMY_0001") != NULL);
  it_server_stop(srv);
  test_http_stop(ps);
  free(icb);
}
