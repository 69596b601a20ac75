#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loopback HTTP server for the gateway tests (python3 stdlib only).

Listens on 127.0.0.1 on an ephemeral port and prints "PORT <n>" on stdout
once ready. Routes:
  /ok                  200 "ok\\n" (plus headers the gateway must not return)
  /big?n=BYTES         200 with BYTES bytes of 'x'
  /slow?s=SECONDS      waits, then 200 "slow\\n"
  /redirect?to=URL[&code=302]   redirect to URL
  /chain?n=K           redirects K times (/chain?n=K-1 ...), then 200 "end\\n"
  /echo-headers        200 with the request headers as JSON
  /echo-body           200 with the request body
  /binary              200 with bytes that are not UTF-8
  /status?code=N       answers with status N
  /_count              JSON {path: hits} of every request so far (not counted)
  /_log                JSON list of {method, path, headers} of every request (not logged)
"""
import json
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
HITS = {}
LOG = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ntfs-test/1"

    def log_message(self, fmt, *args):
        pass

    def send(self, code, body=b"", ctype="text/plain", extra=None):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        self.route()

    def do_HEAD(self):
        self.route()

    def do_POST(self):
        self.route()

    def route(self):
        u = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(u.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if u.path == "/_count":
            with LOCK:
                data = json.dumps(HITS).encode()
            return self.send(200, data, "application/json")
        if u.path == "/_log":
            with LOCK:
                data = json.dumps(LOG).encode()
            return self.send(200, data, "application/json")
        with LOCK:
            HITS[u.path] = HITS.get(u.path, 0) + 1
            LOG.append({"method": self.command, "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()}})
        if u.path == "/ok":
            return self.send(200, b"ok\n", extra={"X-Internal-Secret": "must-not-pass",
                                                  "Set-Cookie": "session=abc",
                                                  "ETag": '"v1"'})
        if u.path == "/big":
            n = int(q.get("n", ["1000000"])[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            try:
                while n > 0:
                    k = min(n, len(chunk))
                    self.wfile.write(chunk[:k])
                    n -= k
            except (BrokenPipeError, ConnectionResetError):
                pass
            return None
        if u.path == "/slow":
            time.sleep(float(q.get("s", ["5"])[0]))
            return self.send(200, b"slow\n")
        if u.path == "/redirect":
            to = q.get("to", ["/ok"])[0]
            code = int(q.get("code", ["302"])[0])
            return self.send(code, b"", extra={"Location": to})
        if u.path == "/chain":
            n = int(q.get("n", ["0"])[0])
            if n > 0:
                return self.send(302, b"", extra={"Location": "/chain?n=%d" % (n - 1)})
            return self.send(200, b"end\n")
        if u.path == "/echo-headers":
            data = json.dumps({k.lower(): v for k, v in self.headers.items()}).encode()
            return self.send(200, data, "application/json")
        if u.path == "/echo-body":
            return self.send(200, body, self.headers.get("Content-Type", "text/plain"))
        if u.path == "/binary":
            return self.send(200, bytes([0, 0xff, 0xfe, 0x80, 0x41, 0x42, 0xc3]), "application/octet-stream")
        if u.path == "/status":
            return self.send(int(q.get("code", ["500"])[0]), b"status\n")
        return self.send(404, b"not found\n")


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
