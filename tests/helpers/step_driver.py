#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Drives an ntfs session through POST /step, keeping no state of its own
(python3 stdlib only; docs/agent.md, "The /step protocol").

  step_driver.py --socket SOCK TASK          start a session, give it TASK, run it
  step_driver.py --socket SOCK --session S   pick up session S where it stands

Every turn asks the daemon what to do next and does exactly that: call_llm
-> POST /llm/generate (the action's messages, system, tools and
idempotency key), execute_tool -> POST /tool/execute (the action's
tool_use_id as the key), then posts the result as the next event with the
cursor it was given, so a retry of the same event is never applied twice.
Prints "session NAME" first and the model's final text last; exits 0 on
done, 1 on an error, 3 on the step limit.
"""
import argparse
import json
import socket
import sys


def request(sock_path, method, path, body=None, timeout=600):
    raw = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: ntfsd\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(sock_path)
        s.sendall(head.encode() + raw)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        out = b""
        while body:
            size_line, _, body = body.partition(b"\r\n")
            n = int(size_line.split(b";")[0], 16)
            if n == 0:
                break
            out += body[:n]
            body = body[n + 2:]
        body = out
    return status, (json.loads(body) if body else None)


def call(sock_path, method, path, body=None):
    status, obj = request(sock_path, method, path, body)
    if status >= 400:
        err = (obj or {}).get("error", {})
        raise RuntimeError(f"{method} {path}: {status} {err.get('code')}: {err.get('message')}")
    return obj


def result_text(res):
    """The tool result as the model sees it (only what the call produced)."""
    if "exit_code" in res:
        text = f"exit code: {res['exit_code']}\n{res.get('stdout', '')}"
        if res.get("stderr"):
            text += "\n[stderr]\n" + res["stderr"]
        return text, res["exit_code"] != 0
    if "body" in res and isinstance(res.get("status"), int):
        return f"HTTP {res['status']}\n{res['body']}", res["status"] >= 400
    return json.dumps(res, sort_keys=True), True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--session")
    ap.add_argument("--max-steps", type=int, default=50)
    ap.add_argument("task", nargs="?")
    a = ap.parse_args()
    if bool(a.session) == bool(a.task):
        ap.error("give a TASK or --session, not both")
    session = a.session
    event = None
    if not session:
        session = call(a.socket, "POST", "/session/start", {})["session_id"]
        event = {"type": "user_message", "content": a.task}
    print(f"session {session}", flush=True)
    cursor = None
    for _ in range(10000):
        body = {"session_id": session, "max_steps": a.max_steps}
        if event is not None:
            body["event"] = event
        if cursor is not None:
            body["cursor"] = cursor
        out = call(a.socket, "POST", "/step", body)
        cursor, action = out["cursor"], out["next_action"]
        kind = action["type"]
        if kind in ("done", "wait_user"):
            for block in (action.get("message") or {}).get("content", []):
                if block.get("type") == "text":
                    print(block["text"], flush=True)
            return 3 if action.get("reason") == "step_limit" else 0
        if kind == "call_llm":
            gen = call(a.socket, "POST", "/llm/generate", {
                "session_id": session, "idempotency_key": action["idempotency_key"],
                "messages": action["messages"], "system": action["system"], "tools": action["tools"]})
            event = {"type": "llm_result", "content": gen["content"], "stop_reason": gen.get("stop_reason")}
        elif kind == "execute_tool":
            status, res = request(a.socket, "POST", "/tool/execute", {
                "session_id": session, "tool_name": action["tool_name"],
                "tool_input": action["tool_input"], "tool_use_id": action["tool_use_id"]})
            if status >= 400:
                text, is_error = res["error"]["message"], True
            else:
                text, is_error = result_text(res["result"])
            event = {"type": "tool_result", "tool_use_id": action["tool_use_id"], "content": text,
                     "is_error": is_error}
        else:
            print(f"step_driver: unknown action {kind}", file=sys.stderr)
            return 1
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, OSError) as e:
        print(f"step_driver: {e}", file=sys.stderr)
        sys.exit(1)
