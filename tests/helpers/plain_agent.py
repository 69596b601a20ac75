#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An ordinary agent that knows nothing of ntfs (python3 stdlib only).

  plain_agent.py TASK

Calls the Anthropic Messages API (ANTHROPIC_BASE_URL, default
https://api.anthropic.com; ANTHROPIC_API_KEY; LLM_MODEL) and runs the
model's tool calls on the files of its working directory: write_file
{path, content}, read_file {path}, delete_file {path}. Paths must stay
inside the working directory. Stops when the model ends its turn (prints
its text) or after 20 generations. It is the "existing agent" of
tests/integration/test_agent.py: run in a mounted ntfs workspace, its edits
become auto-checkpoints without it doing anything for it.
"""
import json
import os
import sys
import urllib.request

TOOLS = [
    {"name": "write_file", "description": "Write a text file (created or replaced).",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                      "required": ["path", "content"]}},
    {"name": "read_file", "description": "Read a text file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "delete_file", "description": "Delete a file.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
]


def inside(path):
    root = os.path.realpath(".")
    full = os.path.realpath(os.path.join(root, path))
    if full != root and not full.startswith(root + os.sep):
        raise ValueError(f"{path}: outside the working directory")
    return full


def run_tool(name, args):
    try:
        if name == "write_file":
            full = inside(args["path"])
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(args["content"])
            return f"wrote {len(args['content'])} bytes to {args['path']}", False
        if name == "read_file":
            with open(inside(args["path"])) as f:
                return f.read(), False
        if name == "delete_file":
            os.unlink(inside(args["path"]))
            return f"deleted {args['path']}", False
        return f"unknown tool {name}", True
    except (OSError, ValueError, KeyError) as e:
        return str(e), True


def generate(messages):
    base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com").rstrip("/")
    body = {"model": os.environ.get("LLM_MODEL", "claude-sonnet-4-20250514"), "max_tokens": 2048,
            "system": "You edit files in the current directory with the tools given.",
            "tools": TOOLS, "messages": messages}
    req = urllib.request.Request(base + "/v1/messages", data=json.dumps(body).encode(), method="POST", headers={
        "x-api-key": os.environ.get("ANTHROPIC_API_KEY", ""), "anthropic-version": "2023-06-01",
        "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def main():
    if len(sys.argv) != 2:
        print("usage: plain_agent.py TASK", file=sys.stderr)
        return 2
    messages = [{"role": "user", "content": sys.argv[1]}]
    for _ in range(20):
        reply = generate(messages)
        messages.append({"role": "assistant", "content": reply["content"]})
        uses = [b for b in reply["content"] if b.get("type") == "tool_use"]
        if not uses:
            for b in reply["content"]:
                if b.get("type") == "text":
                    print(b["text"])
            return 0
        results = []
        for b in uses:
            text, err = run_tool(b["name"], b.get("input") or {})
            results.append({"type": "tool_result", "tool_use_id": b["id"], "content": text, "is_error": err})
        messages.append({"role": "user", "content": results})
    print("plain_agent: step limit", file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
