# SPDX-License-Identifier: MIT
"""The capability gateway through a real ntfsd (issue 7, docs/gateway.md).

Local servers on loopback stand in for the world:
  tests/helpers/http_server.py     plain HTTP (/ok, /big, /slow, /redirect, /chain,
                                   /echo-headers, /_count, /_log ...)
  tests/helpers/fake_anthropic.py  a scripted Messages API
  a TLS server in this process     https for the egress proxy (self-signed, openssl CLI)

One daemon (module scope) runs with a policy that allows 127.0.0.1 (private
addresses allowed for that host only), a credential for 127.0.0.1 taken from
its --env-file, the LLM base URL of the fake server and `egress = true` for
bash_run. The last test searches the journal's bytes for the secrets.
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import find_bin, lazy_unmount, mounts_under
from ctl_fixtures import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(os.path.dirname(HERE), "helpers")

API_KEY = "sk-ant-test-" + "K3Y" * 8 + "-SECRET"
TOKEN = "tok-SECRET-" + uuid.uuid4().hex


def start_helper(name, log_dir):
    log = open(os.path.join(log_dir, name + ".log"), "wb")
    p = subprocess.Popen([sys.executable, os.path.join(HELPERS, name)], stdout=subprocess.PIPE,
                         stderr=log, start_new_session=True)
    line = p.stdout.readline().decode()
    assert line.startswith("PORT "), f"{name} did not start: {line!r}"
    return p, int(line.split()[1])


def stop_helper(p):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)
    if p.stdout:
        p.stdout.close()


def get_json(port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            data += c
    finally:
        s.close()
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def post_json(port, path, obj):
    raw = json.dumps(obj).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                  f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n".encode() + raw)
        while s.recv(65536):
            pass
    finally:
        s.close()


class TLSHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits = 0

    def log_message(self, *a):
        pass

    def do_GET(self):
        TLSHandler.hits += 1
        body = b"tls ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Env:
    pass


@pytest.fixture(scope="module")
def gw():
    scratch = tempfile.mkdtemp(prefix="ntfs-gw-", dir="/tmp")
    os.chmod(scratch, 0o755)
    env = Env()
    env.scratch = scratch
    helpers = []
    tls = None
    d = None
    try:
        env.http_proc, env.http_port = start_helper("http_server.py", scratch)
        helpers.append(env.http_proc)
        env.llm_proc, env.llm_port = start_helper("fake_anthropic.py", scratch)
        helpers.append(env.llm_proc)
        # TLS server (self-signed for IP 127.0.0.1), for CONNECT through the egress proxy.
        env.ca = os.path.join(scratch, "cert.pem")
        key = os.path.join(scratch, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
                        env.ca, "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(env.ca, key)
        tls = ThreadingHTTPServer(("127.0.0.1", 0), TLSHandler)
        tls.daemon_threads = True
        tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
        env.tls_port = tls.server_address[1]
        threading.Thread(target=tls.serve_forever, daemon=True).start()

        env.env_file = os.path.join(scratch, "gw.env")
        with open(env.env_file, "w") as f:
            f.write(f"ANTHROPIC_API_KEY={API_KEY}\nANTHROPIC_BASE_URL=http://127.0.0.1:{env.llm_port}\n"
                    f"LLM_MODEL=claude-test-model\nTEST_TOKEN={TOKEN}\n")
        os.chmod(env.env_file, 0o600)
        env.policy = os.path.join(scratch, "policy.ini")
        with open(env.policy, "w") as f:
            f.write("[fetch]\n"
                    "allow_hosts = 127.0.0.1, localhost\n"
                    "allow_ports = *\n"
                    "private_hosts = 127.0.0.1\n"
                    "max_response_bytes = 64K\n"
                    "timeout = 2s\n"
                    "max_redirects = 2\n"
                    "[credential 127.0.0.1]\n"
                    "header = X-Api-Token\n"
                    "value_env = TEST_TOKEN\n"
                    "allow_insecure = true\n"
                    "[tool bash_run]\n"
                    "egress = true\n"
                    "[llm]\n"
                    "max_attempts = 3\n"
                    "retry_base = 100ms\n"
                    "max_total_time = 20s\n"
                    "timeout = 10s\n")
        # Nothing of the secrets in the daemon's own environment: only the env file has them.
        d = Daemon(scratch, extra=["--policy", env.policy, "--env-file", env.env_file])
        env.d = d
        d.ok("session", "new", "main")
        yield env
    finally:
        if d is not None:
            rc = d.stop()
            errs = d.sanitizer_errors()
        for p in helpers:
            stop_helper(p)
        if tls is not None:
            tls.shutdown()
            tls.server_close()
        lazy_unmount(scratch)
        left = mounts_under(scratch)
        if not left:
            shutil.rmtree(scratch, ignore_errors=True)
        if d is not None:
            assert not errs, "sanitizer reports in ntfsd's log:\n" + "\n".join(errs)
            assert rc == 0, f"ntfsd exited {rc}: {d.log_text()[-3000:]}"
        assert not left, f"mounts left behind: {left}"


def fetch(gw, url, **kw):
    body = {"url": url}
    body.update(kw)
    return gw.d.http("POST", "/v1/sessions/main/fetch", body, timeout=60)


def url(gw, path):
    return f"http://127.0.0.1:{gw.http_port}{path}"


def hits(gw, path):
    return get_json(gw.http_port, "/_count").get(path, 0)


# ---- fetch_url ---------------------------------------------------------------------------

def test_fetch_allowed_host(gw):
    r = fetch(gw, url(gw, "/ok"))
    assert r.status == 200, r
    j = r.json
    assert j["status"] == 200 and j["body"] == "ok\n" and j["body_encoding"] == "utf-8"
    assert j["effect"] == "irreversible" and j["replayed"] is False and j["effect_id"] > 0
    # only whitelisted response headers come back
    assert j["headers"]["etag"] == '"v1"'
    assert "set-cookie" not in j["headers"] and "x-internal-secret" not in j["headers"]


def test_fetch_cli_prints_body(gw):
    out = gw.d.ok("fetch", "main", url(gw, "/ok"))
    assert out == "ok\n"
    j = gw.d.jok("fetch", "main", url(gw, "/binary"))
    assert j["body_encoding"] == "base64"
    r = subprocess.run([gw.d.ctl_bin, "--socket", gw.d.sock, "fetch", "main", url(gw, "/binary")],
                       capture_output=True)
    assert r.stdout == bytes([0, 0xff, 0xfe, 0x80, 0x41, 0x42, 0xc3])
    r = gw.d.ctl("fetch", "main", url(gw, "/status?code=404"))
    assert r.returncode == 1 and "HTTP 404" in r.stderr


def test_fetch_refused_host(gw):
    before = hits(gw, "/ok")
    r = fetch(gw, "http://evil.test/ok")
    assert r.status == 403 and r.code == "policy_denied", r
    assert "not in fetch.allow_hosts" in r.json["error"]["message"]
    r = fetch(gw, "ftp://127.0.0.1/x")
    assert r.code == "policy_denied" and "scheme" in r.json["error"]["message"]
    r = gw.d.ctl("fetch", "main", "http://evil.test/")
    assert r.returncode == 1 and "policy_denied" in r.stderr
    assert hits(gw, "/ok") == before


def test_fetch_redirect_to_refused_host(gw):
    r = fetch(gw, url(gw, "/redirect?to=http://evil.test/steal"))
    assert r.status == 403 and r.code == "policy_denied", r
    assert "redirect refused" in r.json["error"]["message"]
    # an allowed hop is followed
    r = fetch(gw, url(gw, "/redirect?to=/ok"))
    assert r.status == 200 and r.json["body"] == "ok\n" and r.json["redirects"] == 1


def test_fetch_name_resolving_to_private_address(gw):
    # localhost is allow-listed but not in private_hosts: the address connected to decides.
    before = hits(gw, "/ok")
    r = fetch(gw, f"http://localhost:{gw.http_port}/ok")
    assert r.status == 403 and r.code == "policy_denied", r
    assert "private, loopback or link-local" in r.json["error"]["message"]
    assert hits(gw, "/ok") == before


def test_fetch_size_limit(gw):
    r = fetch(gw, url(gw, "/big?n=200000"))
    assert r.status == 200, r
    assert r.json["truncated"] is True and r.json["bytes"] == 64 * 1024


def test_fetch_time_limit(gw):
    t0 = time.monotonic()
    r = fetch(gw, url(gw, "/slow?s=6"))
    took = time.monotonic() - t0
    assert r.status == 504 and r.code == "timeout", r
    assert took < 5, took


def test_fetch_redirect_limit(gw):
    r = fetch(gw, url(gw, "/chain?n=2"))
    assert r.status == 200 and r.json["body"] == "end\n"
    r = fetch(gw, url(gw, "/chain?n=3"))
    assert r.status == 403 and "more than 2 redirects" in r.json["error"]["message"], r


def test_fetch_credentials_injected_never_returned(gw):
    r = fetch(gw, url(gw, "/echo-headers"))
    assert r.status == 200, r
    # the server saw the credential ...
    log = get_json(gw.http_port, "/_log")
    seen = [e["headers"].get("x-api-token") for e in log if e["path"] == "/echo-headers"]
    assert seen and seen[-1] == TOKEN
    # ... the caller did not (the echoed value is masked)
    assert TOKEN not in r.body.decode()
    assert "x-api-token" in r.json["body"]
    # not to another host (a redirect to localhost, which is refused anyway, carries nothing)
    assert TOKEN not in fetch(gw, url(gw, "/redirect?to=http://localhost/x")).body.decode()


def test_fetch_retry_served_from_journal(gw):
    path = "/once-" + uuid.uuid4().hex[:8]
    key = "fetch-" + uuid.uuid4().hex
    r1 = fetch(gw, url(gw, path), idempotency_key=key)
    assert r1.status == 200 and r1.json["status"] == 404 and r1.json["replayed"] is False
    r2 = fetch(gw, url(gw, path), idempotency_key=key)
    assert r2.status == 200 and r2.json["replayed"] is True
    assert r2.json["effect_id"] == r1.json["effect_id"] and r2.json["body"] == r1.json["body"]
    assert hits(gw, path) == 1
    # through the CLI with the same key: still one hit
    r = gw.d.ctl("fetch", "main", url(gw, path), "--idempotency-key", key)
    assert "replayed" in r.stderr and hits(gw, path) == 1
    # a failed fetch is not retried either
    k2 = "fetch-" + uuid.uuid4().hex
    assert fetch(gw, "http://evil.test/", idempotency_key=k2).code == "policy_denied"
    again = fetch(gw, "http://evil.test/", idempotency_key=k2)
    assert again.code == "policy_denied" and "not fetched again" in again.json["error"]["message"]
    # the effects list has the row
    effs = gw.d.jok("effects", "main")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    row = [e for e in effs if e.get("idempotency_key") == key]
    assert len(row) == 1 and row[0]["tool"] == "fetch_url" and row[0]["status"] == "done"


def test_seed_tool_execute_fetch_url(gw):
    r = gw.d.http("POST", "/tool/execute", {"session_id": "main", "tool_name": "fetch_url",
                                            "tool_input": {"url": url(gw, "/ok")}, "tool_use_id": "toolu_f1"})
    assert r.status == 200, r
    assert r.json["effect"] == "irreversible" and r.json["result"]["body"] == "ok\n"
    n = hits(gw, "/ok")
    r = gw.d.http("POST", "/tool/execute", {"session_id": "main", "tool_name": "fetch_url",
                                            "tool_input": {"url": url(gw, "/ok")}, "tool_use_id": "toolu_f1"})
    assert r.status == 200 and r.json["replayed"] is True and hits(gw, "/ok") == n


# ---- llm_generate ------------------------------------------------------------------------

def script(gw, steps):
    post_json(gw.llm_port, "/_control/script", {"steps": steps})


def llm_log(gw):
    return get_json(gw.llm_port, "/_control/log")


TOOLS = [{"name": "bash", "description": "run a command",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]


def test_llm_tool_use_round_trip(gw):
    tool_use = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test-model",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 5, "output_tokens": 7}}
    script(gw, [{"status": 200, "body": tool_use}, {"status": 200}])
    msgs = [{"role": "user", "content": "list the files"}]
    r = gw.d.http("POST", "/v1/sessions/main/llm", {"messages": msgs, "tools": TOOLS, "system": "be brief",
                                                    "max_tokens": 100}, timeout=60)
    assert r.status == 200, r
    j = r.json
    assert j["stop_reason"] == "tool_use" and j["content"][0]["type"] == "tool_use"
    assert j["content"][0]["input"] == {"command": "ls"} and "usage" in j and j["replayed"] is False
    msgs += [{"role": "assistant", "content": j["content"]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"}]}]
    r = gw.d.http("POST", "/llm/generate", {"session_id": "main", "messages": msgs, "tools": TOOLS}, timeout=60)
    assert r.status == 200, r
    assert r.json["stop_reason"] == "end_turn" and r.json["content"][0]["text"] == "hello from claude-test-model"
    log = llm_log(gw)
    assert len(log) == 2
    assert log[0]["body"]["tools"] == TOOLS and log[0]["body"]["system"] == "be brief"
    assert log[1]["body"]["messages"][2]["content"][0]["type"] == "tool_result"
    assert log[0]["headers"]["x-api-key"] == API_KEY  # the key went out ...
    assert API_KEY not in r.body.decode()             # ... and never comes back


def test_llm_429_retry_after_then_success(gw):
    script(gw, [{"status": 429, "headers": {"retry-after": "1"}}, {"status": 200}])
    t0 = time.monotonic()
    r = gw.d.http("POST", "/v1/sessions/main/llm", {"messages": [{"role": "user", "content": "429 " + uuid.uuid4().hex}]},
                  timeout=60)
    took = time.monotonic() - t0
    assert r.status == 200, r
    assert r.json["content"][0]["type"] == "text"
    assert len(llm_log(gw)) == 2 and took >= 0.9, took


def test_llm_500_storm_gives_up(gw):
    script(gw, [{"status": 500, "repeat": 100}])
    req = {"messages": [{"role": "user", "content": "storm " + uuid.uuid4().hex}]}
    r = gw.d.http("POST", "/v1/sessions/main/llm", req, timeout=60)
    assert r.status == 502 and r.code == "upstream_error", r
    msg = r.json["error"]["message"]
    assert "gave up after 3 attempts" in msg and "HTTP 500" in msg and "api_error" in msg
    assert len(llm_log(gw)) == 3
    # the failed generation does not block the same request later (it is generated anew)
    script(gw, [{"status": 200}])
    r2 = gw.d.http("POST", "/v1/sessions/main/llm", req, timeout=60)
    assert r2.status == 200 and r2.json["replayed"] is False, r2
    assert len(llm_log(gw)) == 1


def test_llm_resume_served_from_journal(gw):
    script(gw, [{"status": 200}])
    req = {"messages": [{"role": "user", "content": "resume " + uuid.uuid4().hex}], "idempotency_key": "gen-1-" + uuid.uuid4().hex}
    r1 = gw.d.http("POST", "/v1/sessions/main/llm", req, timeout=60)
    assert r1.status == 200 and r1.json["replayed"] is False
    r2 = gw.d.http("POST", "/v1/sessions/main/llm", req, timeout=60)
    assert r2.status == 200 and r2.json["replayed"] is True
    assert r2.json["content"] == r1.json["content"] and r2.json["effect_id"] == r1.json["effect_id"]
    assert len(llm_log(gw)) == 1
    # without a key, the same request in the same session is the same generation
    same = {"messages": [{"role": "user", "content": "derived " + uuid.uuid4().hex}]}
    a = gw.d.http("POST", "/llm/generate", dict(same, session_id="main"), timeout=60)
    b = gw.d.http("POST", "/llm/generate", dict(same, session_id="main"), timeout=60)
    assert a.json["replayed"] is False and b.json["replayed"] is True
    assert len(llm_log(gw)) == 2
    # and the journal holds it as a recorded effect
    effs = gw.d.jok("effects", "main")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    rows = [e for e in effs if e["tool"] == "llm_generate"]
    assert rows and all(e["effect_class"] == "recorded" for e in rows if "effect_class" in e)


def test_llm_without_key_is_a_clear_error(scratch):
    pol = os.path.join(scratch, "p.ini")
    with open(pol, "w") as f:
        f.write("[llm]\nbase_url = http://127.0.0.1:9\n")
    envf = os.path.join(scratch, "empty.env")
    with open(envf, "w") as f:
        f.write("# nothing\n")
    saved = os.environ.pop("ANTHROPIC_API_KEY", None)
    d = Daemon(scratch, extra=["--policy", pol, "--env-file", envf])
    try:
        r = d.http("POST", "/llm/generate", {"messages": [{"role": "user", "content": "hi"}]})
        assert r.status == 503 and r.code == "no_credentials", r
        assert "ANTHROPIC_API_KEY" in r.json["error"]["message"]
    finally:
        if saved is not None:
            os.environ["ANTHROPIC_API_KEY"] = saved
        assert d.stop() == 0
        assert not d.sanitizer_errors()


def start_refused(scratch, policy_text, env_text):
    """Starts ntfsd with this policy and env file; it must refuse to start."""
    pol = os.path.join(scratch, "short.ini")
    with open(pol, "w") as f:
        f.write(policy_text)
    envf = os.path.join(scratch, "short.env")
    with open(envf, "w") as f:
        f.write(env_text)
    os.chmod(envf, 0o600)
    store, sock = os.path.join(scratch, "store-short"), os.path.join(scratch, "short.sock")
    p = subprocess.Popen([find_bin("ntfsd"), "--store", store, "--socket", sock, "-f", "--policy", pol,
                          "--env-file", envf], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        pytest.fail(f"ntfsd started (and served) with a secret it cannot redact: {err[-2000:]}")
    assert not os.path.exists(sock), "the daemon served its socket"
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_short_credential_refused_at_start(scratch):
    # A 3-byte secret cannot be redacted without redacting ordinary text; the
    # journal refuses it, and the daemon must not start without redaction
    # (before, it started and redacted nothing, the API key included).
    env_text = f"ANTHROPIC_API_KEY={API_KEY}\nSHORT_TOKEN=abc\n"
    p = start_refused(scratch, "[credential 127.0.0.1]\nheader = X-Api-Token\nvalue_env = SHORT_TOKEN\n",
                      env_text)
    assert p.returncode != 0, p
    assert "127.0.0.1" in p.stderr and "redacted safely" in p.stderr, p.stderr
    assert "abc" not in p.stderr and API_KEY not in p.stderr + p.stdout
    # the same as a literal in the policy file: refused by the parser, naming the line
    p = start_refused(scratch, "[credential 127.0.0.1]\nheader = X-Api-Token\nvalue = abc\n", env_text)
    assert p.returncode != 0, p
    assert "line 3" in p.stderr and "redacted safely" in p.stderr, p.stderr
    # and a 3-byte LLM key
    p = start_refused(scratch, "[fetch]\n", "ANTHROPIC_API_KEY=k3y\n")
    assert p.returncode != 0, p
    assert "ANTHROPIC_API_KEY" in p.stderr and "redacted safely" in p.stderr, p.stderr


# ---- the jail: no credentials, and the egress proxy ----------------------------------------

def run(gw, cmd, tool="bash_run"):
    r = gw.d.http("POST", "/v1/sessions/main/exec", {"command": cmd, "tool": tool}, timeout=120)
    assert r.status == 200, r
    return r.json


def test_jail_sees_no_credentials(gw):
    j = run(gw, "env; echo ---; tr '\\0' '\\n' </proc/1/environ; echo ---; cat /proc/self/environ | tr '\\0' '\\n';"
                " grep -rs SECRET /etc /workspace /tmp /run /home; ls -la /run; true", tool="bash_run")
    out = j["stdout"] + j["stderr"]
    assert "PATH=" in out  # the command ran and printed its environment
    assert TOKEN not in out and API_KEY not in out
    assert "ANTHROPIC" not in out and "TEST_TOKEN" not in out
    # the env file itself is not reachable from the jail
    j = run(gw, f"cat {gw.env_file}; echo rc=$?", tool="bash_write")
    assert TOKEN not in j["stdout"] and "rc=1" in j["stdout"]


def test_egress_proxy_allowed_refused_and_direct(gw):
    with open(gw.ca) as f:
        ca = f.read()
    run(gw, "cat > /workspace/ca.pem <<'EOF'\n" + ca + "EOF\n", tool="bash_write")
    n0 = hits(gw, "/ok")
    tls0 = TLSHandler.hits
    j = run(gw, "echo HTTP_PROXY=$HTTP_PROXY; "
                # loopback is in NO_PROXY by design, so the tests clear it for their loopback servers
                f"env -u NO_PROXY -u no_proxy curl -sS --cacert /workspace/ca.pem https://127.0.0.1:{gw.tls_port}/x; "
                f"echo tls=$?; "
                f"env -u NO_PROXY -u no_proxy curl -sS http://127.0.0.1:{gw.http_port}/ok; echo plain=$?; "
                "curl -sS -o /dev/null -w 'refused=%{http_code}\\n' http://refused.test/; "
                "curl -sS -p https://refused.test/ 2>&1; echo connect=$?; "
                f"curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{gw.http_port}/ok; echo direct=$?; "
                f"curl -sS --noproxy '*' --max-time 5 https://1.1.1.1/ -o /dev/null; echo direct_ext=$?")
    out = j["stdout"]
    assert "HTTP_PROXY=http://127.0.0.1:3128" in out, j
    assert "tls ok\ntls=0" in out, j
    assert "ok\nplain=0" in out, j
    assert "refused=403" in out, j
    assert "403" in out.split("connect=")[0].splitlines()[-1] and "connect=56" in out, j
    assert "direct=7" in out and "direct_ext=7" in out, j
    assert hits(gw, "/ok") == n0 + 1 and TLSHandler.hits == tls0 + 1
    # each connection is journaled at the step of its bash_run, allowed or refused
    effs = gw.d.jok("effects", "main")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    parent = [e for e in effs if e["tool"] == "bash_run"][-1]
    eg = [e for e in effs if e["tool"] == "egress" and e["step"] == parent["step"]]
    hosts = sorted((json.loads(e["input"]) if isinstance(e["input"], str) else e["input"])["host"] for e in eg)
    assert hosts == ["127.0.0.1", "127.0.0.1", "refused.test", "refused.test"], eg
    assert sorted(e["status"] for e in eg) == ["done", "done", "failed", "failed"]


def test_egress_run_shows_no_host_path_in_proc(gw):
    # The forwarder (pid 2 of an egress run) and init ran with the helper's
    # argv: the store's path (the session's internal mount under it) and the
    # egress socket's. No command line or environment in the jail shows them.
    j = run(gw, "for p in /proc/[0-9]*; do echo \"== $p\"; tr '\\0' ' ' <$p/cmdline; echo; "
                "tr '\\0' ' ' <$p/environ 2>/dev/null; echo; done")
    out = j["stdout"]
    assert "== /proc/2" in out and "ntfs-jail-init" in out, j
    assert gw.d.store not in out and "egress/" not in out and ".sock" not in out, out


def test_egress_off_by_default(gw):
    # bash_write has no egress (and no network): no proxy variables, nothing listens
    j = run(gw, "echo P=$HTTP_PROXY; curl -sS --max-time 5 -x http://127.0.0.1:3128 http://127.0.0.1/ 2>&1; echo rc=$?",
            tool="bash_write")
    assert "P=\n" in j["stdout"] and "rc=0" not in j["stdout"], j


def test_egress_host_header_must_match(gw):
    j = run(gw, f"env -u NO_PROXY -u no_proxy curl -sS -o /dev/null -w 'code=%{{http_code}}\\n' "
                f"-H 'Host: evil.test' http://127.0.0.1:{gw.http_port}/ok")
    assert "code=403" in j["stdout"], j


RAW_PROXY_CLIENT = r"""
import socket, sys
def ask(head, inner=None):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(head.encode())
    got = b""
    while b"\r\n\r\n" not in got:
        c = s.recv(4096)
        if not c:
            break
        got += c
    first = got.split(b"\r\n", 1)[0].decode()
    if inner is not None and " 200 " in first:
        s.sendall(inner.encode())
        got = b""
        while True:
            c = s.recv(4096)
            if not c:
                break
            got += c
        first += " | " + got.split(b"\r\n", 1)[0].decode()
    s.close()
    return first
port = int(sys.argv[1])
t = "127.0.0.1:%d" % port
cases = [
    ("dup_host", "GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nHost: %s\r\n\r\n" % (t, t, t), None),
    ("dup_host_spaced", "GET http://%s/ok HTTP/1.1\r\nHost: %s\r\nHost : evil.test\r\n\r\n" % (t, t), None),
    ("connect_host_mismatch", "CONNECT %s HTTP/1.1\r\nHost: evil.test\r\n\r\n" % t, ""),
    ("connect_dup_host", "CONNECT %s HTTP/1.1\r\nHost: %s\r\nHost: %s\r\n\r\n" % (t, t, t), ""),
    ("inner_host_mismatch", "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t),
     "GET /ok HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
    ("inner_dup_host", "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t),
     "GET /ok HTTP/1.1\r\nHost: %s\r\nHost: evil.test\r\n\r\n" % t),
    ("inner_absolute_url", "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t),
     "GET http://evil.test/ok HTTP/1.1\r\nHost: %s\r\n\r\n" % t),
    ("inner_ok", "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (t, t),
     "GET /ok HTTP/1.1\r\nHost: %s\r\n\r\n" % t),
]
for name, head, inner in cases:
    print(name, "=", ask(head, inner), flush=True)
"""


def test_egress_one_host_header_matching_the_target(gw):
    # Two Host headers (the upstream saw both before), a CONNECT whose Host
    # names another host, and a plain-HTTP request inside a tunnel to an
    # allowed host that names another one: each is a 400 and reaches nothing.
    run(gw, "cat > /workspace/rawproxy.py <<'EOF'\n" + RAW_PROXY_CLIENT + "EOF\n", tool="bash_write")
    n0 = hits(gw, "/ok")
    j = run(gw, f"python3 /workspace/rawproxy.py {gw.http_port}")
    got = dict(line.split(" = ", 1) for line in j["stdout"].splitlines() if " = " in line)
    assert len(got) == 8, j
    for name in ("dup_host", "dup_host_spaced", "connect_host_mismatch", "connect_dup_host"):
        assert got[name].startswith("HTTP/1.1 400"), (name, got)
    for name in ("inner_host_mismatch", "inner_dup_host", "inner_absolute_url"):
        assert got[name] == "HTTP/1.1 200 Connection Established | HTTP/1.1 400 Bad Request", (name, got)
    assert got["inner_ok"].startswith("HTTP/1.1 200 Connection Established | HTTP/1.") and \
        got["inner_ok"].endswith(" 200 OK"), got
    assert hits(gw, "/ok") == n0 + 1  # only the good one reached the server
    # every refusal is journaled with its reason
    effs = gw.d.jok("effects", "main")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    parent = [e for e in effs if e["tool"] == "bash_run"][-1]
    eg = [e for e in effs if e["tool"] == "egress" and e["step"] == parent["step"]]
    assert sorted(e["status"] for e in eg) == ["done"] + ["failed"] * 7, eg
    assert any("Host" in json.dumps(e) for e in eg if e["status"] == "failed")


# ---- last: the secrets never reached the journal or the log --------------------------------

def test_zz_secrets_absent_from_journal_and_log(gw):
    # make sure there is something to search: a credentialed fetch and a generation were journaled
    fetch(gw, url(gw, "/echo-headers"), idempotency_key="last-" + uuid.uuid4().hex)
    # and the secrets reach the journal by paths the gateway's masking does not
    # cover: in a command (the effect's input) and its output (the result), and
    # in an LLM request's text; only the journal's redaction stands between
    # them and the file
    j = run(gw, f"echo {API_KEY}; echo {TOKEN} >&2", tool="bash_read")
    assert API_KEY in j["stdout"] and TOKEN in j["stderr"], j
    post_json(gw.llm_port, "/_control/script", {"steps": [{"status": 200}]})
    r = gw.d.http("POST", "/v1/sessions/main/llm",
                  {"messages": [{"role": "user", "content": f"remember {API_KEY} and {TOKEN}"}],
                   "idempotency_key": "zz-" + uuid.uuid4().hex}, timeout=60)
    assert r.status == 200, r
    found = []
    for name in os.listdir(gw.d.store):
        if name.startswith("journal.db"):
            with open(os.path.join(gw.d.store, name), "rb") as f:
                data = f.read()
            for s in (TOKEN, API_KEY):
                if s.encode() in data:
                    found.append((name, s))
    assert not found, found
    log = gw.d.log_text()
    assert TOKEN not in log and API_KEY not in log
    # the journal did record the credentialed call (so the search above was meaningful)
    effs = gw.d.jok("effects", "main")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    assert any(e["tool"] == "fetch_url" and "echo-headers" in json.dumps(e) for e in effs)
