#!/usr/bin/python3
"""A stand-in for OCR-D's METS server (ocrd/mets_server.py, core v3.12.1) for the tests of
tests/integration/test_mets_server.c: the routes a processor uses, over a Unix socket or
TCP, and the Processing Server's /tcp_mets multiplexer; every request it gets is recorded.

    fake_mets_server.py --workspace DIR --record FILE (--socket PATH | --tcp)

It loads DIR/mets.xml once, as the real server does, and keeps its changes in memory:
like the real one it writes nothing to mets.xml until told to (PUT /, DELETE /), and this
one never does (it records the request instead), so a test sees that a processor left
mets.xml alone. Each request becomes one JSON line in FILE: {"method", "route", "query",
"form" | "json", "via"} ("via": "tcp_mets" when it came through the multiplexer). Once it
listens it says so on stdout ("… listening on PATH" or "… on 127.0.0.1 port N"); SIGTERM
ends it with status 0. Python's standard library only.
"""
import argparse
import json
import os
import signal
import socketserver
import sys
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from http.server import BaseHTTPRequestHandler

NS = {"mets": "http://www.loc.gov/METS/", "xlink": "http://www.w3.org/1999/xlink"}
HREF = "{%s}href" % NS["xlink"]


class Workspace:
    """What the real server's OcrdMets answers from: pages in order, files with their page."""

    def __init__(self, directory):
        self.directory = directory
        self.lock = threading.Lock()
        root = ET.parse(os.path.join(directory, "mets.xml")).getroot()
        self.pages, page_of = [], {}
        for div in root.iterfind(".//mets:structMap[@TYPE='PHYSICAL']//mets:div[@TYPE='page']", NS):
            self.pages.append(div.get("ID"))
            for fptr in div.iterfind("mets:fptr", NS):
                page_of[fptr.get("FILEID")] = div.get("ID")
        self.files = []
        for grp in root.iterfind("mets:fileSec/mets:fileGrp", NS):
            for f in grp.iterfind("mets:file", NS):
                local = url = None
                for loc in f.iterfind("mets:FLocat", NS):
                    if loc.get("LOCTYPE") == "OTHER" and loc.get("OTHERLOCTYPE") == "FILE":
                        local = loc.get(HREF)
                    elif loc.get("LOCTYPE") == "URL":
                        url = loc.get(HREF)
                self.files.append({"file_grp": grp.get("USE"), "file_id": f.get("ID"),
                                   "mimetype": f.get("MIMETYPE"), "page_id": page_of.get(f.get("ID")),
                                   "url": url, "local_filename": local})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn

    def log_message(self, *args):  # a Unix socket's client has no address to log
        pass

    def answer(self, status, body, ctype):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        return self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()

    def record(self, method, route, query, kind, data, via=None):
        entry = {"method": method, "route": route, "query": query}
        if kind:
            entry[kind] = data
        if via:
            entry["via"] = via
        with self.server.record_lock, open(self.server.record, "a") as out:
            out.write(json.dumps(entry) + "\n")

    def route(self, method, route, query, kind, data):
        """A route's (status, body, content type), as OcrdMetsServer answers."""
        ws = self.server.ws
        if method == "GET" and route == "/workspace_path":
            return 200, ws.directory, "text/plain"
        if method == "GET" and route == "/physical_pages":
            return 200, json.dumps({"physical_pages": ws.pages}), "application/json"
        if method == "GET" and route == "/file":
            with ws.lock:
                files = [f for f in ws.files if all(f.get(k) == v for k, v in query.items())]
            return 200, json.dumps({"files": files}), "application/json"
        if method == "POST" and route == "/file":
            f = {k: data.get(k) for k in ("file_grp", "file_id", "mimetype", "page_id", "url",
                                          "local_filename")}
            with ws.lock:
                old = [g for g in ws.files if g["file_id"] == f["file_id"]]
                if old and str(data.get("force")).lower() not in ("true", "1"):
                    return 400, json.dumps("A file with ID==%s already exists" % f["file_id"]), \
                        "application/json"
                ws.files = [g for g in ws.files if g not in old] + [f]
            return 200, json.dumps(f), "application/json"
        if method == "POST" and route == "/agent":
            return 200, json.dumps(data), "application/json"
        if method == "PUT" and route == "/":
            return 200, "The Mets Server is writing changes to disk.", "text/plain"
        return 404, json.dumps({"detail": "Not Found"}), "application/json"

    def handle_any(self, method):
        parts = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        text = self.body()
        kind, data = None, None
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == "application/x-www-form-urlencoded":
            kind, data = "form", dict(urllib.parse.parse_qsl(text, keep_blank_values=True))
        elif ctype == "application/json":
            kind, data = "json", json.loads(text)
        if method == "POST" and parts.path == "/tcp_mets":
            return self.multiplexed(data)
        self.record(method, parts.path, query, kind, data)
        self.answer(*self.route(method, parts.path, query, kind, data))

    def multiplexed(self, req):
        """The Processing Server's /tcp_mets (MetsServerProxy.forward_tcp_request)."""
        route = "/" + req["request_url"]
        rd = req["request_data"] or {}
        kind = "form" if "form" in rd else "json" if "class" in rd else None
        data = rd.get("form", rd.get("class"))
        query = {k: v for k, v in rd.get("params", {}).items() if v is not None}
        self.record(req["method_type"], route, query, kind, data, via="tcp_mets")
        if req["workspace_path"] != self.server.ws.directory:  # another workspace's socket
            return self.answer(200, json.dumps({"error": "no METS server for %s" %
                                                req["workspace_path"]}), "application/json")
        status, body, _ = self.route(req["method_type"], route, query, kind, data)
        if status != 200:
            out = {"error": body}
        elif req["response_type"] == "text":
            out = {"text": body}
        else:
            out = json.loads(body)
        self.answer(200, json.dumps(out), "application/json")

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_PUT(self):
        self.handle_any("PUT")


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class TcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--socket")
    ap.add_argument("--tcp", action="store_true")
    args = ap.parse_args()
    # the harness stops a server with SIGTERM and wants exit status 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if args.tcp:
        server = TcpServer(("127.0.0.1", 0), Handler)
        where = "127.0.0.1 port %d" % server.server_address[1]
    else:
        server = UnixServer(args.socket, Handler)
        where = args.socket
    server.ws = Workspace(os.path.realpath(args.workspace))
    server.record, server.record_lock = args.record, threading.Lock()
    print("fake METS server listening on %s" % where, flush=True)
    try:
        server.serve_forever()
    finally:
        if not args.tcp:
            os.unlink(args.socket)  # as the real one removes its socket at exit


if __name__ == "__main__":
    main()
