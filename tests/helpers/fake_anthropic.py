#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Scripted server speaking the Anthropic Messages API, for the gateway tests.

Listens on 127.0.0.1 on an ephemeral port and prints "PORT <n>" once ready.

  POST /v1/messages     answers from the script; a request without x-api-key or
                        with an anthropic-version other than 2023-06-01 gets 401
  POST /_control/script loads a script and resets the call log:
        {"steps": [{"status": 429, "headers": {"retry-after": "1"},
                    "body": {...}, "repeat": 1}, ...]}
        Steps are consumed in order (each "repeat" times); the last one is
        reused when the script runs out. A step without "body" answers a
        minimal message ("text" block echoing the requested model) for 2xx,
        an API error object otherwise.
  GET  /_control/log    JSON list of {headers, body} of every /v1/messages call
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"steps": [{"status": 200}], "pos": 0, "left": None, "log": []}

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}


def next_step():
    with LOCK:
        steps = STATE["steps"]
        pos = STATE["pos"]
        if pos >= len(steps):
            return steps[-1]
        step = steps[pos]
        if STATE["left"] is None:
            STATE["left"] = int(step.get("repeat", 1))
        STATE["left"] -= 1
        if STATE["left"] <= 0:
            STATE["pos"] += 1
            STATE["left"] = None
        return step


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def reply(self, code, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_GET(self):
        if self.path == "/_control/log":
            with LOCK:
                return self.reply(200, STATE["log"])
        return self.reply(404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})

    def do_POST(self):
        raw = self.read_body()
        if self.path == "/_control/script":
            script = json.loads(raw)
            with LOCK:
                STATE["steps"] = script["steps"] or [{"status": 200}]
                STATE["pos"] = 0
                STATE["left"] = None
                STATE["log"] = []
            return self.reply(200, {"ok": True})
        if self.path != "/v1/messages":
            return self.reply(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        with LOCK:
            STATE["log"].append({"headers": headers, "body": body})
        if not headers.get("x-api-key") or headers.get("anthropic-version") != "2023-06-01":
            return self.reply(401, {"type": "error", "error": {"type": "authentication_error",
                                                               "message": "missing x-api-key"}})
        if headers.get("content-type") != "application/json" or not isinstance(body, dict):
            return self.reply(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                               "message": "bad body"}})
        step = next_step()
        status = int(step.get("status", 200))
        out = step.get("body")
        if out is None:
            if 200 <= status < 300:
                out = {"id": "msg_test", "type": "message", "role": "assistant", "model": body.get("model"),
                       "content": [{"type": "text", "text": "hello from " + str(body.get("model"))}],
                       "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 10, "output_tokens": 5}}
            else:
                out = {"type": "error", "error": {"type": ERROR_TYPES.get(status, "api_error"),
                                                  "message": "scripted %d" % status}}
        return self.reply(status, out, step.get("headers"))


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
