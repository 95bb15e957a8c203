#!/usr/bin/python3
"""Interoperability with OCR-D's Python side (run by ctest as interop/ocrd).

A Python client publishes processing messages exactly as OCR-D core's Processing Server
does (pika, ``yaml.dump`` of the message, content_type application/json, the same
exchange and properties), to mqproc processing servers:

1. ``ocrd-dummy processing-server`` (the C ocrd-dummy on libmqproc): the METS gets
   OCR-D-DUMMY files, the result message on the result queue is valid under the rules of
   OCR-D's ``message_result`` schema, and the callbacks (callback_url and
   internal_callback_url) receive the result as JSON.
2. ``mqproc processing-server --exec`` of a script that copies its stdin: a message with
   an https callback, a unicode path and a long parameter string that PyYAML folds over
   several lines decodes to exactly the dict the client sent.

Usage: test_ocrd_interop.py <mqproc binary> <ocrd-dummy binary> <work dir>
Servers: $MQPROC_SERVICES_DIR/env (scripts/services.sh).
"""
import http.server
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import threading
import time
import uuid
import zlib

import jsonschema
import pika
import yaml

MQPROC, OCRD_DUMMY, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
EXCHANGE = "ocrd-network-default"
FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def services_env():
    env = {}
    with open(os.path.join(os.environ["MQPROC_SERVICES_DIR"], "env")) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v.strip("'")
    return env


ENV = services_env()
SUFFIX = "py%d" % os.getpid()
SCHEMA = "i" + SUFFIX
# OCR-D's Processing Server deploys workers with a trailing slash: vhost "/"
AMQP = ENV["MQPROC_TEST_AMQP_URL"] + "/"
DB = "%s?options=-csearch_path%%3D%s" % (ENV["MQPROC_TEST_PG_URL"], SCHEMA)

# The rules of OCR-D core's message_result.schema.yml (v3.12).
RESULT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["job_id", "state", "path_to_mets", "workspace_id"],
    "properties": {
        "job_id": {"type": "string"},
        "state": {"type": "string",
                  "enum": ["CACHED", "CANCELLED", "QUEUED", "RUNNING", "SUCCESS", "FAILED",
                           "UNSET"]},
        "path_to_mets": {"type": "string"},
        "workspace_id": {"type": "string"},
    },
}


def psql(sql):
    out = subprocess.run(["psql", "-qAtX", ENV["MQPROC_TEST_PG_URL"], "-c", sql], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip()


def sql(query):
    out = subprocess.run(["psql", "-qAtX", DB, "-c", query], check=True, capture_output=True,
                         text=True)
    return out.stdout.strip()


# ---- a workspace: a METS with two pages of small PNG images -----------------------------

def png(width, height):
    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\xff" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


METS_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<mets:mets xmlns:mets="http://www.loc.gov/METS/" xmlns:xlink="http://www.w3.org/1999/xlink">
  <mets:metsHdr/>
  <mets:fileSec>
    <mets:fileGrp USE="OCR-D-IMG">
{files}
    </mets:fileGrp>
  </mets:fileSec>
  <mets:structMap TYPE="PHYSICAL">
    <mets:div TYPE="physSequence">
{divs}
    </mets:div>
  </mets:structMap>
</mets:mets>
"""


def make_workspace(path, pages=2):
    os.makedirs(os.path.join(path, "OCR-D-IMG"), exist_ok=True)
    files, divs = [], []
    for i in range(1, pages + 1):
        with open(os.path.join(path, "OCR-D-IMG", "%04d.png" % i), "wb") as f:
            f.write(png(10 * i, 7 * i))
        files.append('      <mets:file ID="OCR-D-IMG_%04d" MIMETYPE="image/png"><mets:FLocat '
                     'LOCTYPE="OTHER" OTHERLOCTYPE="FILE" xlink:href="OCR-D-IMG/%04d.png"/>'
                     '</mets:file>' % (i, i))
        divs.append('      <mets:div TYPE="page" ID="PHYS_%04d" ORDER="%d"><mets:fptr '
                    'FILEID="OCR-D-IMG_%04d"/></mets:div>' % (i, i, i))
    mets = os.path.join(path, "mets.xml")
    with open(mets, "w") as f:
        f.write(METS_TEMPLATE.format(files="\n".join(files), divs="\n".join(divs)))
    return mets


# ---- the OCR-D side: how core's Processing Server publishes -------------------------------

def processing_message(processor, mets, **extra):
    """As OcrdProcessingMessage: None/empty keys omitted, parameters always present."""
    msg = {"job_id": str(uuid.uuid4()), "processor_name": processor,
           "created_time": int(time.time()), "input_file_grps": ["OCR-D-IMG"],
           "output_file_grps": ["OCR-D-DUMMY"], "path_to_mets": mets, "parameters": {}}
    msg.update(extra)
    return msg


def connect():
    return pika.BlockingConnection(pika.URLParameters(AMQP))


def declare_like_ocrd(channel, queue):
    channel.exchange_declare(exchange=EXCHANGE, exchange_type="direct", durable=False)
    channel.queue_declare(queue=queue, durable=True)
    channel.queue_bind(queue=queue, exchange=EXCHANGE, routing_key=queue)


def publish_like_ocrd(channel, processor, msg):
    props = pika.BasicProperties(app_id="ocrd_network default app id",
                                 content_type="application/json",
                                 headers={"ocrd_network default header":
                                          "ocrd_network default header value"})
    channel.confirm_delivery()
    channel.basic_publish(exchange=EXCHANGE, routing_key=processor,
                          body=yaml.dump(msg, indent=2).encode("utf8"), properties=props)


def get_result(channel, queue, timeout=60):
    deadline = time.time() + timeout
    for method, _props, body in channel.consume(queue, inactivity_timeout=1):
        if method is not None:
            channel.basic_ack(method.delivery_tag)
            channel.cancel()
            return body
        if time.time() > deadline:
            channel.cancel()
            return None


class Callbacks(http.server.BaseHTTPRequestHandler):
    received = []
    event = threading.Condition()

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with Callbacks.event:
            Callbacks.received.append((self.path, self.headers.get("Content-Type"), body))
            Callbacks.event.notify_all()
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def wait_callbacks(n, timeout=60):
    with Callbacks.event:
        Callbacks.event.wait_for(lambda: len(Callbacks.received) >= n, timeout)
        return list(Callbacks.received)


def start_server(argv, log, env=None):
    """Starts a server, copies its output to log, returns once it consumes (an event:
    the line arrives on its stdout)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    ready = threading.Event()

    def pump():
        for line in proc.stdout:
            log.write(line.decode("utf8", "replace"))
            log.flush()
            if b"consuming from queue" in line:
                ready.set()
    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(60):
        proc.kill()
        raise SystemExit("server did not start: see " + log.name)
    return proc


def stop_server(proc, log):
    proc.terminate()
    check(proc.wait(60) == 0, "server exits 0 on SIGTERM")
    log.flush()
    with open(log.name) as f:
        text = f.read()
    check(not re.search(r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:", text),
          "no sanitizer report in " + log.name)


# ---- 1: ocrd-dummy behind OCR-D's wire protocol -------------------------------------------

def test_ocrd_dummy(channel, http_port):
    processor = "ocrd-dummy"  # the queue OCR-D's Processing Server publishes to
    results = "ocrd-dummy-result-" + SUFFIX
    ws = os.path.join(WORK, "ws-" + SUFFIX)
    mets = make_workspace(ws)
    declare_like_ocrd(channel, results)
    log = open(os.path.join(WORK, "server-dummy-%s.log" % SUFFIX), "w")
    # no METS server runs here (tests/integration/test_mets_server.c has one): without
    # --ocrd-mets-server=off a message with internal_callback_url goes through the one
    # OCR-D's Processing Server would have started
    server = start_server([OCRD_DUMMY, "processing-server", "--queue", AMQP, "--database", DB,
                           "--migrate", "--log-dir", os.path.join(WORK, "logs"),
                           "--ocrd-mets-server=off"], log)
    try:
        msg = processing_message(
            processor, mets, page_id="PHYS_0001..PHYS_0002", result_queue_name=results,
            callback_url="http://127.0.0.1:%d/cb" % http_port,
            internal_callback_url="http://127.0.0.1:%d/result_callback" % http_port)
        publish_like_ocrd(channel, processor, msg)
        body = get_result(channel, results)
        check(body is not None, "ocrd-dummy: a result message arrives on " + results)
        result = yaml.safe_load(body)
        try:
            jsonschema.validate(result, RESULT_SCHEMA)
            valid = True
        except jsonschema.ValidationError as e:
            print(e)
            valid = False
        check(valid, "ocrd-dummy: the result is valid under message_result's rules")
        check(result == {"job_id": msg["job_id"], "state": "SUCCESS", "path_to_mets": mets,
                         "workspace_id": ""}, "ocrd-dummy: result content %r" % result)
        check(body == yaml.dump(result).encode(), "ocrd-dummy: the result is PyYAML's bytes")
        cbs = wait_callbacks(2)
        paths = sorted(p for p, _, _ in cbs)
        check(paths == ["/cb", "/result_callback"], "ocrd-dummy: both callbacks received")
        check(all(ct == "application/json" for _, ct, _ in cbs), "callbacks are application/json")
        check(all(json.loads(b) == result for _, _, b in cbs), "callback bodies = the result")
        with open(mets) as f:
            text = f.read()
        check('USE="OCR-D-DUMMY"' in text and "OCR-D-DUMMY_0001" in text
              and "OCR-D-DUMMY_0002" in text, "ocrd-dummy: the METS has the new files")
        for i in (1, 2):
            check(os.path.exists(os.path.join(ws, "OCR-D-DUMMY", "OCR-D-DUMMY_%04d.xml" % i)),
                  "ocrd-dummy: PAGE-XML written for page %d" % i)
        check(sql("SELECT state FROM mqproc_jobs WHERE job_id = '%s'" % msg["job_id"])
              == "SUCCESS", "ocrd-dummy: job row SUCCESS")
    finally:
        stop_server(server, log)
        log.close()


# ---- 3: any OCR-D processor through mqproc --exec (OCR-D's command line) ----------------

def test_exec_ocrd_processor(channel):
    processor = "ocrd-dummy"
    results = "ocrd-dummy-exec-result-" + SUFFIX
    ws = os.path.join(WORK, "ws-exec-" + SUFFIX)
    mets = make_workspace(ws, pages=3)
    declare_like_ocrd(channel, results)
    log = open(os.path.join(WORK, "server-exec-%s.log" % SUFFIX), "w")
    server = start_server([MQPROC, "processing-server", "--processor", processor, "--exec",
                           shlex.quote(OCRD_DUMMY), "--queue", AMQP, "--database", DB,
                           "--migrate", "--retries=0", "--max-requeues=0",
                           "--log-dir", os.path.join(WORK, "logs")], log)
    try:
        msg = processing_message(processor, mets, page_id="PHYS_0002..PHYS_0003",
                                 parameters={"copy_files": True}, result_queue_name=results)
        publish_like_ocrd(channel, processor, msg)
        body = get_result(channel, results)
        result = yaml.safe_load(body) if body else {}
        check(result.get("state") == "SUCCESS", "exec ocrd-dummy: SUCCESS (%r)" % result)
        with open(mets) as f:
            text = f.read()
        check("OCR-D-DUMMY_0002" in text and "OCR-D-DUMMY_0003" in text
              and "OCR-D-DUMMY_0001" not in text, "exec ocrd-dummy: only pages 2 and 3")
        # the job's output: in the row when the try succeeded small (log_text), else a file
        log_text = sql("SELECT log_text FROM mqproc_jobs WHERE job_id = '%s'" % msg["job_id"])
        log_path = sql("SELECT log_path FROM mqproc_jobs WHERE job_id = '%s'" % msg["job_id"])
        check("ocrd-dummy" in log_text or (log_path and os.path.exists(log_path)),
              "exec ocrd-dummy: the job's output kept (%r, %r)" % (log_text[:60], log_path))
        # the same message again: a job that succeeded is not run again (no second output)
        publish_like_ocrd(channel, processor, msg)
        again = processing_message(processor, mets, page_id="PHYS_0001",
                                   result_queue_name=results)
        publish_like_ocrd(channel, processor, again)
        body = get_result(channel, results)
        check(body is not None and yaml.safe_load(body)["job_id"] == again["job_id"],
              "exec ocrd-dummy: the repeated job was acked, the next one ran")
        check(sql("SELECT tries FROM mqproc_jobs WHERE job_id = '%s'" % msg["job_id"]) == "1",
              "exec ocrd-dummy: the repeated job ran once")
    finally:
        stop_server(server, log)
        log.close()


# ---- 2: what PyYAML writes decodes to what the client meant --------------------------------

COPY_SCRIPT = """#!/bin/sh
cat > "$COPY_DIR/$MQPROC_JOB_ID.json"
"""


def test_decoding(channel):
    processor = "ocrd-interop-" + SUFFIX
    results = processor + "-result"
    script = os.path.join(WORK, "copy-%s.sh" % SUFFIX)
    with open(script, "w") as f:
        f.write(COPY_SCRIPT)
    os.chmod(script, 0o755)
    unicode_dir = os.path.join(WORK, "wörkspäce-ß-" + SUFFIX)
    mets = make_workspace(unicode_dir, pages=1)
    declare_like_ocrd(channel, results)
    log = open(os.path.join(WORK, "server-copy-%s.log" % SUFFIX), "w")
    env = dict(os.environ, COPY_DIR=WORK)
    server = start_server([MQPROC, "processing-server", "--processor", processor, "--exec",
                           shlex.quote(script), "--queue", AMQP, "--database", DB, "--migrate",
                           "--callback-retries=0", "--callback-timeout-ms=500",
                           "--pass-env=COPY_DIR",
                           "--log-dir", os.path.join(WORK, "logs")], log, env)
    try:
        long_text = ("a long parameter value with many words that PyYAML folds onto several "
                     "continuation lines because it is wider than eighty columns, yes: 1")
        msg = processing_message(processor, mets, result_queue_name=results,
                                 callback_url="https://127.0.0.1:9/secure-cb",
                                 parameters={"note": long_text, "level": "yes", "n": "007",
                                             "nested": {"on": True, "list": ["a", "b c"]}})
        wire = yaml.dump(msg, indent=2)
        check(re.search(r"  note: '[^\n]*\n    \S", wire) is not None,
              "the long parameter is folded over lines on the wire")
        check("\\xF6" in wire, "the unicode path is escaped (\\xF6) on the wire")
        publish_like_ocrd(channel, processor, msg)
        body = get_result(channel, results)
        check(body is not None and yaml.safe_load(body)["state"] == "SUCCESS",
              "decoding: the job succeeds")
        with open(os.path.join(WORK, msg["job_id"] + ".json")) as f:
            decoded = json.load(f)
        headers = decoded.pop("headers", None)
        check(decoded == msg, "decoding: stdin JSON == the dict the client sent")
        check(headers == {"ocrd_network default header": "ocrd_network default header value"},
              "decoding: the AMQP headers under 'headers' on stdin")
        check(decoded["path_to_mets"] == mets, "decoding: unicode path intact")
        check(decoded["parameters"]["note"] == long_text, "decoding: folded string joined")
        check(decoded["callback_url"].startswith("https://"), "decoding: https callback accepted")
    finally:
        stop_server(server, log)
        log.close()
    check(sql("SELECT callback_state FROM mqproc_jobs WHERE job_id = '%s'" % msg["job_id"])
          == "FAILED", "an unreachable https callback is recorded, the job still SUCCESS")


def main():
    os.makedirs(WORK, exist_ok=True)
    psql("DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s" % (SCHEMA, SCHEMA))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Callbacks)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    conn = connect()
    channel = conn.channel()
    try:
        test_ocrd_dummy(channel, httpd.server_address[1])
        test_decoding(channel)
        test_exec_ocrd_processor(channel)
    finally:
        conn.close()
        httpd.shutdown()
        psql("DROP SCHEMA IF EXISTS %s CASCADE" % SCHEMA)
    print("%d failure(s)" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
