# SPDX-License-Identifier: MIT
"""ntfs-mcp, the MCP server (docs/mcp.md), against a real ntfsd.

- test_sdk_*: the official MCP TypeScript SDK client (@modelcontextprotocol/sdk,
  tests/mcp/client.mjs, run by the machine's Node.js over StdioClientTransport)
  initializes, lists the tools, writes files, checkpoints, changes them, rolls
  back, reads them back, fetches a loopback URL, and meets refused calls.
- test_protocol_*: raw JSON-RPC over the pipes from Python: malformed
  messages get the right JSON-RPC error and the server keeps serving.
- test_cancel_*: notifications/cancelled ends a running jailed command.
- test_journal_*: an MCP call leaves the same journal row as the same call
  through the socket.

The Node client's packages are installed by the `node_client` fixture with
`npm ci` from tests/mcp/package-lock.json when tests/mcp/node_modules is
missing or older than the lock file.
"""
import fcntl
import http.server
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import SANITIZER_MARKS, find_bin
from ctl_fixtures import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
MCP_DIR = os.path.join(os.path.dirname(HERE), "mcp")
TOOLS = {"bash_read", "bash_write", "bash_build", "bash_run", "run_python", "fetch_url", "checkpoint", "rollback",
         "fork", "tag", "log", "diff"}

# bash_run is left out of the allow list so that a refused call can be shown;
# loopback is allowed for fetch_url (127.0.0.1 is a private address, so it
# must also be in private_hosts).
POLICY = """\
[rules default]
allow = bash_read, bash_write, bash_build, fetch_url, llm_generate

[fetch]
allow_hosts = 127.0.0.1
allow_ports = *
private_hosts = 127.0.0.1
"""


# ---- fixtures -------------------------------------------------------------------

@pytest.fixture
def mcpd(scratch):
    """ntfsd with the test policy."""
    pol = os.path.join(scratch, "policy.conf")
    with open(pol, "w") as f:
        f.write(POLICY)
    d = Daemon(scratch, extra=("--policy", pol))
    try:
        yield d
    finally:
        rc = d.stop()
        errs = d.sanitizer_errors()
        assert not errs, "sanitizer reports in ntfsd's log:\n" + "\n".join(errs)
        assert rc == 0, f"ntfsd exited {rc}: {d.log_text()[-3000:]}"


@pytest.fixture
def mcp_bin():
    b = find_bin("ntfs-mcp")
    if b is None:
        pytest.skip("ntfs-mcp is not built")
    return b


@pytest.fixture(scope="session")
def node_client():
    """Path of node and of the client script, after `npm ci` if needed."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the MCP SDK client test")
    lock = os.path.join(MCP_DIR, "package-lock.json")
    mods = os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk", "package.json")
    # One installer at a time (the normal and the ASan run may overlap).
    with open("/tmp/ntfs-mcp-npm.lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        stamp = os.path.join(MCP_DIR, "node_modules", ".package-lock.json")
        if not os.path.exists(mods) or not os.path.exists(stamp) or os.path.getmtime(stamp) < os.path.getmtime(lock):
            r = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=MCP_DIR,
                               capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"npm ci failed:\n{r.stdout}\n{r.stderr}"
    return node, os.path.join(MCP_DIR, "client.mjs")


class LoopbackHTTP:
    """A tiny HTTP server on 127.0.0.1 answering every GET with a fixed page."""
    BODY = b"hello from the loopback page\n"

    def __init__(self):
        body = self.BODY

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        self.t = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.t.start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.fixture
def loopback():
    s = LoopbackHTTP()
    try:
        yield s
    finally:
        s.close()


def run_sdk(node_client, mcp_bin, daemon, session, steps, scratch, create=True):
    node, script = node_client
    sc = os.path.join(scratch, "scenario.json")
    args = ["--session", session, "--socket", daemon.sock] + (["--create"] if create else [])
    with open(sc, "w") as f:
        json.dump({"command": mcp_bin, "args": args, "steps": steps}, f)
    p = subprocess.Popen([node, script, sc], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 0, f"node client failed ({p.returncode}):\n{out}\n{err}"
    assert not [l for l in err.splitlines() if any(m in l for m in SANITIZER_MARKS)], err
    return json.loads(out)


def text(result):
    return "".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")


# ---- a raw stdio peer ---------------------------------------------------------------

class McpPipe:
    """ntfs-mcp with pipes, for hand-made JSON-RPC lines."""

    def __init__(self, binary, daemon, session, extra=()):
        self.p = subprocess.Popen([binary, "--session", session, "--create", "--socket", daemon.sock, *extra],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        self.buf = b""

    def send_raw(self, data):
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, obj):
        self.send_raw(json.dumps(obj).encode() + b"\n")

    def recv(self, timeout=30):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "no message from ntfs-mcp in time"
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 1 << 20)
                assert chunk, f"ntfs-mcp closed stdout: {self.p.stderr.read().decode(errors='replace')}"
                self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, id, method, params=None):
        msg = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self.recv()

    def ping_ok(self, id):
        """The server still serves."""
        r = self.request(id, "ping")
        assert r == {"jsonrpc": "2.0", "id": id, "result": {}}, r

    def close(self):
        if self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(timeout=30)
            except (subprocess.TimeoutExpired, BrokenPipeError):
                pass
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
        err = self.p.stderr.read().decode(errors="replace")
        self.p.stdout.close()
        self.p.stderr.close()
        return self.p.returncode, err


@pytest.fixture
def pipe(mcp_bin, mcpd):
    peers = []

    def start(session="p", extra=()):
        m = McpPipe(mcp_bin, mcpd, session, extra)
        peers.append(m)
        return m

    yield start
    for m in peers:
        rc, err = m.close()
        assert rc == 0, f"ntfs-mcp exited {rc}: {err}"
        assert not [l for l in err.splitlines() if any(k in l for k in SANITIZER_MARKS)], err


INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pytest", "version": "1"}}


# ---- the SDK client -------------------------------------------------------------------

def test_sdk_session(node_client, mcp_bin, mcpd, loopback, scratch):
    url = f"http://127.0.0.1:{loopback.port}/page.txt"
    steps = [
        {"list": True},
        {"tool": "bash_write", "arguments": {"command": "mkdir -p src && echo one > src/a.txt && echo two > b.txt"}},
        {"tool": "checkpoint", "arguments": {"message": "v1"}},
        {"tool": "tag", "arguments": {"tag": "v1"}},
        {"tool": "bash_write", "arguments": {"command": "echo changed > src/a.txt && rm b.txt && echo new > c.txt"}},
        {"tool": "diff", "arguments": {"from": "v1"}},
        {"tool": "rollback", "arguments": {"to": "v1"}},
        {"tool": "bash_read", "arguments": {"command": "cat src/a.txt b.txt; ls"}},
        {"tool": "fetch_url", "arguments": {"url": url}},
        {"tool": "bash_run", "arguments": {"command": "echo should not run > run.txt"}},
        {"tool": "fetch_url", "arguments": {"url": "http://127.0.0.2:1/elsewhere"}},
        {"tool": "bash_read", "arguments": {"command": "echo x > ro.txt"}},
        {"tool": "rollback", "arguments": {"to": "v1", "steps": 1}},
        {"tool": "no_such_tool", "arguments": {}},
        {"tool": "log", "arguments": {"max": 5}},
    ]
    out = run_sdk(node_client, mcp_bin, mcpd, "agent", steps, scratch)
    r = out["results"]
    assert out["protocolVersion"] == "2025-11-25"
    assert out["serverInfo"]["name"] == "ntfs-mcp"
    assert "tools" in out["capabilities"]
    assert "agent" in out["instructions"]

    tools = {t["name"]: t for t in r[0]["tools"]}
    assert set(tools) == TOOLS
    for t in tools.values():
        assert t["inputSchema"]["type"] == "object" and len(t["description"]) > 40, t
    assert tools["bash_write"]["inputSchema"]["required"] == ["command"]
    assert tools["bash_read"]["annotations"]["readOnlyHint"] is True

    w1 = r[1]
    assert not w1.get("isError"), w1
    assert w1["structuredContent"]["exit_code"] == 0 and w1["structuredContent"]["tool"] == "bash_write"
    assert len(w1["structuredContent"]["checkpoint"]) == 64  # checkpointed after the call
    assert "exit code 0" in text(w1)
    assert not r[2].get("isError") and len(r[2]["structuredContent"]["commit"]) == 64
    assert not r[3].get("isError") and r[3]["structuredContent"]["tag"] == "v1"
    assert not r[4].get("isError") and r[4]["structuredContent"]["exit_code"] == 0
    changes = {c["path"].lstrip("/"): c["kind"] for c in r[5]["structuredContent"]["changes"]}
    assert changes == {"src/a.txt": "modified", "b.txt": "deleted", "c.txt": "added"}, changes
    assert not r[6].get("isError"), r[6]
    assert r[6]["structuredContent"]["head"] == r[2]["structuredContent"]["commit"]

    # Read back after the rollback: the checkpointed contents, c.txt gone.
    rd = r[7]
    assert not rd.get("isError"), rd
    assert rd["structuredContent"]["stdout"].splitlines() == ["one", "two", "b.txt", "src"]
    assert "one\ntwo\n" in text(rd)

    # fetch_url through the gateway to the loopback page.
    f = r[8]
    assert not f.get("isError"), f
    assert f["structuredContent"]["status"] == 200
    assert LoopbackHTTP.BODY.decode() in text(f)

    # Refused calls: the daemon's message comes back as a tool error.
    run = r[9]
    assert run["isError"] is True
    assert "bash_run" in text(run) and "not allowed" in text(run) and "policy_denied" in text(run), text(run)
    assert run["structuredContent"]["error"]["code"] == "policy_denied"
    assert r[10]["isError"] is True and "policy_denied" in text(r[10]), text(r[10])
    ro = r[11]  # bash_read: the workspace is read-only
    assert ro["structuredContent"]["exit_code"] != 0 and "Read-only" in ro["structuredContent"]["stderr"], ro
    assert r[12]["isError"] is True and "exactly one" in text(r[12])
    assert r[13]["protocolError"]["code"] == -32602 and "no_such_tool" in r[13]["protocolError"]["message"]
    log = r[14]
    assert not log.get("isError") and "v1" in text(log)

    # The daemon agrees: the workspace holds the rolled-back files.
    res = mcpd.http("POST", "/v1/sessions/agent/exec", {"command": "cat src/a.txt; test -e run.txt || echo absent",
                                                      "tool": "bash_read"})
    assert res.status == 200 and res.json["stdout"] == "one\nabsent\n", res


def test_sdk_cancel(node_client, mcp_bin, mcpd, scratch):
    """The SDK's AbortSignal sends notifications/cancelled; the jailed command ends at once."""
    steps = [
        {"tool": "bash_write", "arguments": {"command": "sleep 30; echo late > late.txt", "timeout": 120},
         "cancelAfterMs": 1500},
        {"tool": "bash_read", "arguments": {"command": "ls"}},
    ]
    t0 = time.monotonic()
    out = run_sdk(node_client, mcp_bin, mcpd, "c", steps, scratch)
    r = out["results"]
    assert r[0].get("cancelled") is True, r[0]
    assert not r[1].get("isError"), r[1]
    assert time.monotonic() - t0 < 25
    eff = wait_effect_done(mcpd, "c", "bash_write")
    assert eff["status"] == "failed" and eff["reason"] == "cancelled", eff
    assert eff["duration_ns"] < 20e9
    res = mcpd.http("POST", "/v1/sessions/c/exec", {"command": "ls", "tool": "bash_read"})
    assert "late.txt" not in res.json["stdout"]


def wait_effect_done(daemon, session, tool, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        effs = [e for e in daemon.http("GET", f"/v1/sessions/{session}/effects").json["effects"] if e["tool"] == tool]
        if effs and effs[-1]["status"] != "pending":
            return effs[-1]
        assert time.monotonic() < deadline, f"effect still pending: {effs}"
        time.sleep(0.1)


# ---- raw JSON-RPC ------------------------------------------------------------------------

def test_protocol_initialize_negotiates(pipe):
    m = pipe()
    r = m.request(1, "initialize", dict(INIT, protocolVersion="2025-03-26"))
    assert r["result"]["protocolVersion"] == "2025-03-26"
    assert r["result"]["capabilities"] == {"tools": {"listChanged": False}}
    r = m.request(2, "initialize", dict(INIT, protocolVersion="1999-01-01"))
    assert r["result"]["protocolVersion"] == "2025-11-25"  # the latest this server supports
    m.send({"jsonrpc": "2.0", "method": "notifications/initialized"})  # never answered
    r = m.request("s-3", "tools/list", {})
    assert r["id"] == "s-3" and {t["name"] for t in r["result"]["tools"]} == TOOLS


def test_protocol_errors_and_keeps_serving(pipe):
    m = pipe()
    m.request(1, "initialize", INIT)

    m.send_raw(b'{"jsonrpc": "2.0", "id": 2, "method": \n')  # cut JSON
    e = m.recv()
    assert e["id"] is None and e["error"]["code"] == -32700, e
    m.ping_ok(3)
    m.send_raw(b"not json at all\n")
    assert m.recv()["error"]["code"] == -32700
    m.ping_ok(4)

    # Invalid requests.
    for bad in ({"id": 5, "method": "ping"},                       # no jsonrpc
                {"jsonrpc": "1.0", "id": 5, "method": "ping"},     # wrong version
                {"jsonrpc": "2.0", "id": 5},                       # no method
                {"jsonrpc": "2.0", "id": 5, "method": 17}):        # method not a string
        m.send(bad)
        e = m.recv()
        assert e["error"]["code"] == -32600 and e["id"] == 5, (bad, e)
    m.send({"jsonrpc": "2.0", "id": {"x": 1}, "method": "ping"})   # id of a wrong type
    e = m.recv()
    assert e["error"]["code"] == -32600 and e["id"] is None, e
    m.send_raw(b'[{"jsonrpc": "2.0", "id": 6, "method": "ping"}]\n')  # batches: gone since 2025-06-18
    assert m.recv()["error"]["code"] == -32600
    m.send_raw(b'"a string"\n')
    assert m.recv()["error"]["code"] == -32600
    m.ping_ok(7)

    # Unknown method; an unknown notification gets no answer at all.
    m.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})
    e = m.request(8, "resources/list", {})
    assert e["id"] == 8 and e["error"]["code"] == -32601, e

    # Wrong params.
    for i, (method, params) in enumerate([("tools/call", {"arguments": {}}),
                                          ("tools/call", {"name": 3}),
                                          ("tools/call", {"name": "nope"}),
                                          ("tools/call", {"name": "log", "arguments": [1]}),
                                          ("initialize", {"capabilities": {}}),
                                          ("tools/list", [1, 2])]):
        e = m.request(100 + i, method, params)
        assert e["id"] == 100 + i and e["error"]["code"] == -32602, (method, params, e)
    m.ping_ok(9)

    # A tool's own argument errors are tool errors (SEP-1303): the model sees them.
    r = m.request(10, "tools/call", {"name": "bash_write", "arguments": {"commmand": "ls"}})
    assert r["result"]["isError"] is True and "commmand" in r["result"]["content"][0]["text"], r

    # A huge line (over the 4 MiB default) is refused once, then skipped.
    m.send_raw(b'{"jsonrpc": "2.0", "id": 11, "method": "ping", "params": {"pad": "' + b"x" * (5 << 20) + b'"}}\n')
    e = m.recv()
    assert e["id"] is None and e["error"]["code"] == -32600 and "longer than" in e["error"]["message"], e
    m.ping_ok(12)
    # CRLF line ends and blank lines are fine.
    m.send_raw(b'\r\n\n{"jsonrpc": "2.0", "id": 13, "method": "ping"}\r\n')
    assert m.recv() == {"jsonrpc": "2.0", "id": 13, "result": {}}


def test_protocol_small_max_line(pipe):
    m = pipe(extra=("--max-line", "4096"))
    m.send_raw(b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"p": "' + b"y" * 5000 + b'"}}\n')
    assert m.recv()["error"]["code"] == -32600
    m.ping_ok(2)


def test_protocol_startup_errors(mcp_bin, mcpd, scratch):
    r = subprocess.run([mcp_bin, "--session", "missing", "--socket", mcpd.sock], capture_output=True, text=True,
                       timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "missing" in r.stderr and r.stdout == "", r
    r = subprocess.run([mcp_bin, "--session", "x", "--socket", os.path.join(scratch, "nope.sock")],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "ntfsd" in r.stderr, r
    r = subprocess.run([mcp_bin], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--session" in r.stderr


# ---- cancellation -----------------------------------------------------------------------------

def test_cancel_ends_the_jail(pipe, mcpd):
    m = pipe("k")
    m.request(1, "initialize", INIT)
    t0 = time.monotonic()
    m.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "bash_build", "arguments": {"command": "echo started; sleep 60; echo late > late.txt"}}})
    # Wait until the command runs in the jail (its effect row is pending).
    deadline = time.monotonic() + 20
    while not [e for e in mcpd.http("GET", "/v1/sessions/k/effects").json["effects"] if e["status"] == "pending"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    m.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "user"}})
    eff = wait_effect_done(mcpd, "k", "bash_build")
    assert time.monotonic() - t0 < 20
    assert eff["status"] == "failed" and eff["reason"] == "cancelled", eff
    # A command cancelled while its jail was still being set up has no result.
    assert eff["result"] is None or eff["result"]["cancelled"] is True, eff
    # The cancelled request is never answered; the next one is.
    m.ping_ok(3)
    time.sleep(0.3)
    m.ping_ok(4)
    # The cancel of an unknown or finished request is ignored.
    m.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}})
    m.ping_ok(5)
    res = mcpd.http("POST", "/v1/sessions/k/exec", {"command": "ls", "tool": "bash_read"})
    assert "late.txt" not in res.json["stdout"]


def test_cancel_endpoint(mcpd):
    mcpd.http("POST", "/v1/sessions", {"name": "e"})
    r = mcpd.http("POST", "/v1/sessions/e/exec/cancel", {"cancel_token": "nothing-runs"})
    assert r.status == 404 and r.code == "not_found"
    r = mcpd.http("POST", "/v1/sessions/e/exec", {"command": "true", "cancel_token": ""})
    assert r.status == 400 and r.code == "bad_request"


# ---- the journal --------------------------------------------------------------------------------

def test_journal_same_effects_as_socket(node_client, mcp_bin, mcpd, scratch):
    cmd = "echo same > f.txt && cat f.txt"
    run_sdk(node_client, mcp_bin, mcpd, "viamcp", [{"tool": "bash_write", "arguments": {"command": cmd}},
                                                   {"tool": "bash_read", "arguments": {"command": "cat f.txt"}}],
            scratch)
    mcpd.http("POST", "/v1/sessions", {"name": "viasock"})
    for tool, c in (("bash_write", cmd), ("bash_read", "cat f.txt")):
        r = mcpd.http("POST", "/v1/sessions/viasock/exec", {"command": c, "tool": tool})
        assert r.status == 200, r
    a = mcpd.http("GET", "/v1/sessions/viamcp/effects").json["effects"]
    b = mcpd.http("GET", "/v1/sessions/viasock/effects").json["effects"]
    assert len(a) == len(b) == 2, (a, b)

    def shape(e):
        res = e["result"]
        return {"step": e["step"], "tool": e["tool"], "class": e["effect_class"], "input": e["input"],
                "status": e["status"], "reason": e["reason"], "stdout": res["stdout"], "exit": res["exit_code"],
                "checkpointed": e["commit_after"] is not None, "changed": res.get("changed")}

    assert [shape(e) for e in a] == [shape(e) for e in b]
    assert a[0]["effect_class"] == "replayable_fast" and a[1]["effect_class"] == "no_side_effects"
    # The same bytes give the same tree: both checkpoints name equal trees.
    da = mcpd.http("GET", f"/v1/sessions/viamcp/diff?from={a[0]['commit_after']}&to={b[0]['commit_after']}")
    assert da.status == 200 and da.json["changes"] == [], da
