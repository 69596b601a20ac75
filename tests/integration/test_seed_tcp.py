# SPDX-License-Identifier: MIT
"""The seed's clients unmodified (issue 65, item 5): `ntfsd --listen
127.0.0.1:7878` serves the same API on loopback TCP, and the seed's two
`curl` commands, run exactly as the seed prints them, work: the second one
names no session and is served by the daemon-wide current one (the last
/session/start). Who may use the listener: the users who may open the
daemon's socket, found through the kernel's socket table; anybody else gets
403. A non-loopback address is refused at start."""
import json
import os
import socket
import subprocess

import pytest

from ctl_fixtures import Daemon, stop_and_check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEED = os.path.join(ROOT, "..", "shared", "seeds", "000_21919d84fe8d25fe.txt")

# The seed's "Sidecar HTTP API (for manual testing)" block, as printed.
CURLS = """curl -X POST http://127.0.0.1:7878/session/start -H 'Content-Type: application/json' -d '{}'
curl -X POST http://127.0.0.1:7878/tool/execute \\
  -H 'Content-Type: application/json' \\
  -d '{"tool_name": "bash_read", "tool_input": {"command": "uname -a"}}'"""


def port_free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


@pytest.fixture
def tcp_daemon(scratch):
    if not port_free(7878):
        pytest.fail("127.0.0.1:7878 is taken: the seed's example needs that port")
    d = Daemon(scratch, extra=("--listen", "127.0.0.1:7878"))
    try:
        yield d
    finally:
        stop_and_check(d, scratch)


def test_the_seeds_two_curls_as_printed(tcp_daemon):
    if os.path.exists(SEED):  # the block above is the seed's, word for word
        with open(SEED) as f:
            assert CURLS in f.read()
    lines = CURLS.replace("\\\n", "").splitlines()
    r1 = subprocess.run(["bash", "-c", lines[0]], capture_output=True, text=True, timeout=60)
    assert r1.returncode == 0, r1.stderr
    started = json.loads(r1.stdout)
    assert started["session_id"] and started["replay_mode"] is False
    r2 = subprocess.run(["bash", "-c", lines[1]], capture_output=True, text=True, timeout=60)
    assert r2.returncode == 0, r2.stderr
    out = json.loads(r2.stdout)
    assert out["effect"] == "no_side_effects" and out["replayed"] is False
    assert out["result"]["exit_code"] == 0 and out["result"]["stdout"].startswith("Linux ")
    # the call was made in the session the first curl started, and journaled there
    effects = tcp_daemon.http("GET", f"/v1/sessions/{started['session_id']}/effects").json
    rows = effects["effects"] if isinstance(effects, dict) else effects
    assert [e["tool"] for e in rows] == ["bash_read"]


def test_current_session_follows_the_last_start_and_naming_one_still_works(tcp_daemon):
    def curl(path, body):
        r = subprocess.run(["curl", "-s", "-X", "POST", "http://127.0.0.1:7878" + path, "-H",
                            "Content-Type: application/json", "-d", json.dumps(body)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    a = curl("/session/start", {})["session_id"]
    b = curl("/session/start", {})["session_id"]
    assert a != b
    w = curl("/tool/execute", {"tool_name": "bash_write", "tool_input": {"command": "echo b > who"}})
    assert w["result"]["exit_code"] == 0
    # a call naming a session is served there, whatever the current one
    w = curl("/tool/execute", {"session_id": a, "tool_name": "bash_write",
                               "tool_input": {"command": "echo a > who"}})
    assert w["result"]["exit_code"] == 0
    assert curl("/tool/execute", {"tool_name": "bash_read", "tool_input": {"command": "cat who"}})[
        "result"]["stdout"] == "b\n"
    assert curl("/tool/execute", {"session_id": a, "tool_name": "bash_read",
                                  "tool_input": {"command": "cat who"}})["result"]["stdout"] == "a\n"
    # ending the current session leaves none current: a clear error, not another session
    assert curl("/session/end", {}) == {}
    e = curl("/tool/execute", {"tool_name": "bash_read", "tool_input": {"command": "true"}})
    assert e["error"]["code"] == "session_not_found", e


def test_another_user_is_refused(tcp_daemon):
    # nobody may not open the daemon's socket (0600 root), so not the listener either
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "curl", "-s", "-i",
                        "http://127.0.0.1:7878/health"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("HTTP/1.1 403"), r.stdout
    assert '"forbidden"' in r.stdout
    # root is served on the same listener
    r = subprocess.run(["curl", "-s", "http://127.0.0.1:7878/health"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "ok", r.stdout


@pytest.mark.parametrize("addr,why", [("0.0.0.0:7878", "not a loopback address"),
                                      ("192.168.1.1:7878", "not a loopback address"),
                                      ("localhost:7878", "expected ADDRESS:PORT"),
                                      ("127.0.0.1:0", "expected ADDRESS:PORT"),
                                      ("127.0.0.1", "expected ADDRESS:PORT")])
def test_bad_listen_addresses_are_refused_at_start(scratch, addr, why):
    with pytest.raises(RuntimeError) as e:
        Daemon(scratch, extra=("--listen", addr))
    assert why in str(e.value)
    assert not os.path.exists(os.path.join(scratch, "s"))
