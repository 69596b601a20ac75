# SPDX-License-Identifier: MIT
"""The policy engine through a real ntfsd: each effect class's enforcement,
each quota, counters that survive a restart, shell state carried between
calls, and clear errors for refused calls."""
import json
import os

import pytest

from ctl_fixtures import Daemon

POLICY = """
[rules default]
allow = bash_read, bash_write, bash_run
quota.calls.bash_run = 2
quota.output_bytes = 200K
"""


@pytest.fixture
def pdaemon(scratch):
    path = os.path.join(scratch, "policy.ini")
    with open(path, "w") as f:
        f.write(POLICY)
    daemons = []

    def start():
        d = Daemon(scratch, extra=("--policy", path))
        daemons.append(d)
        return d

    try:
        yield start
    finally:
        for d in daemons:
            d.stop()


def exec_(d, session, command, tool="bash_write", **extra):
    body = {"command": command, "tool": tool, **extra}
    return d.http("POST", f"/v1/sessions/{session}/exec", body=body)


def body(r):
    return json.loads(r.body)


def test_classes_are_enforced(pdaemon):
    d = pdaemon()
    d.ok("session", "new", "p")
    r = exec_(d, "p", "echo hello > a.txt && cat a.txt")
    assert r.status == 200, r.body
    b = body(r)
    assert b["exit_code"] == 0 and b["stdout"] == "hello\n"
    assert b["effect"] == "replayable_fast" and "checkpoint" in b
    # bash_read: the workspace is mounted read-only for the call
    r = exec_(d, "p", "cat a.txt; echo x > b.txt", tool="bash_read")
    b = body(r)
    assert b["stdout"] == "hello\n"
    assert "Read-only file system" in b["stderr"]
    assert b["effect"] == "no_side_effects" and "checkpoint" not in b
    # the refused write left nothing behind
    r = exec_(d, "p", "ls", tool="bash_read")
    assert body(r)["stdout"].split() == ["a.txt"]
    # bash_write has no network at all; bash_run only loopback
    b = body(exec_(d, "p", "cat /sys/class/net/*/operstate 2>/dev/null; ls /proc/net >/dev/null; "
                         "python3 -c 'import socket; s=socket.socket(); s.settimeout(1); "
                         "s.connect((\"1.1.1.1\", 80))' 2>&1 | tail -1"))
    assert "unreachable" in b["stdout"].lower() or "unreachable" in b["stderr"].lower()
    b = body(exec_(d, "p", "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\", 0)); "
                         "s.listen(); c=socket.create_connection(s.getsockname()); print(\"loopback ok\")'",
                   tool="bash_run"))
    assert b["stdout"] == "loopback ok\n", b
    assert b["effect"] == "irreversible"
    d.healthy()


def test_l1_refusal_names_the_rule(pdaemon):
    d = pdaemon()
    d.ok("session", "new", "p")
    r = exec_(d, "p", "make", tool="bash_build")
    assert r.status == 403
    err = body(r)["error"]
    assert err["code"] == "policy_denied"
    assert "bash_build" in err["message"] and "default" in err["message"]
    r = exec_(d, "p", "true", tool="no_such_tool")
    assert r.status == 404 and body(r)["error"]["code"] == "not_found"
    d.healthy()


def test_call_quota_persists_across_restart(pdaemon, scratch):
    d = pdaemon()
    d.ok("session", "new", "p")
    for _ in range(2):
        r = exec_(d, "p", "echo run", tool="bash_run")
        assert r.status == 200, r.body
    r = exec_(d, "p", "echo run", tool="bash_run")
    assert r.status == 429
    err = body(r)["error"]
    assert err["code"] == "quota_exceeded" and "calls.bash_run" in err["message"]
    # other tools are not affected
    assert exec_(d, "p", "true").status == 200
    assert d.stop() == 0
    d2 = pdaemon()
    r = exec_(d2, "p", "echo run", tool="bash_run")
    assert r.status == 429, "a restart must not reset the counters"
    assert body(r)["error"]["code"] == "quota_exceeded"
    d2.healthy()


def test_output_quota(pdaemon):
    d = pdaemon()
    d.ok("session", "new", "p")
    r = exec_(d, "p", "head -c 150000 /dev/zero | tr '\\0' x")
    assert r.status == 200
    assert len(body(r)["stdout"]) <= 150000
    r = exec_(d, "p", "head -c 150000 /dev/zero | tr '\\0' y")
    # the remaining budget lowers the output limit, then the quota refuses
    b = body(r)
    if r.status == 200:
        assert b["stdout_truncated"] and len(b["stdout"]) <= 200 * 1024 - 150000
        r = exec_(d, "p", "echo more")
    assert r.status == 429 and body(r)["error"]["code"] == "quota_exceeded"
    assert "output_bytes" in body(r)["error"]["message"]
    d.healthy()


def test_shell_state_carries_between_calls(pdaemon):
    d = pdaemon()
    d.ok("session", "new", "p")
    b = body(exec_(d, "p", "mkdir -p sub/dir && cd sub/dir && export GREETING='hello world' && pwd"))
    assert b["stdout"] == "/workspace/sub/dir\n"
    b = body(exec_(d, "p", "pwd; echo \"$GREETING\"", tool="bash_read"))
    assert b["stdout"] == "/workspace/sub/dir\nhello world\n"
    b = body(exec_(d, "p", "cd /workspace && unset GREETING"))
    b = body(exec_(d, "p", "pwd; echo \"[${GREETING:-}]\"", tool="bash_read"))
    assert b["stdout"] == "/workspace\n[]\n"
    d.healthy()


def test_shell_state_carries_across_direct_and_shell_calls(pdaemon):
    # Plain commands run without bash (docs/jail.md, "Direct exec"); the
    # daemon's saved state must carry through them unchanged.
    d = pdaemon()
    d.ok("session", "new", "p")
    b = body(exec_(d, "p", "mkdir -p sub && cd sub && export A=1"))
    assert b["exit_code"] == 0, b
    b = body(exec_(d, "p", "printenv A PWD", tool="bash_read"))             # direct
    assert b["stdout"] == "1\n/workspace/sub\n", b
    b = body(exec_(d, "p", "touch made-directly"))                          # direct, read-write
    assert b["exit_code"] == 0 and b.get("changed") is True, b
    b = body(exec_(d, "p", "ls", tool="bash_read"))                          # direct: still in sub
    assert b["stdout"] == "made-directly\n", b
    b = body(exec_(d, "p", "touch nope", tool="bash_read"))                  # direct, read-only
    assert b["exit_code"] == 1 and "Read-only file system" in b["stderr"], b
    b = body(exec_(d, "p", "echo $A; pwd", tool="bash_read"))                # bash again
    assert b["stdout"] == "1\n/workspace/sub\n", b
    d.healthy()


def test_timeout_and_exit_codes(pdaemon):
    d = pdaemon()
    d.ok("session", "new", "p")
    b = body(exec_(d, "p", "exit 7"))
    assert b["exit_code"] == 7
    b = body(exec_(d, "p", "sleep 30", timeout=1))
    assert b["timed_out"] and b["exit_code"] == 124
    assert b["duration_ms"] < 10000
    # ntfs-ctl exec exits with the command's code
    r = d.ctl("exec", "p", "--", "exit 3")
    assert r.returncode == 3
    d.healthy()


def test_refused_calls_are_clear(pdaemon):
    d = pdaemon()
    r = exec_(d, "nosuch", "true")
    assert r.status == 404 and body(r)["error"]["code"] == "session_not_found"
    d.ok("session", "new", "p")
    r = d.http("POST", "/v1/sessions/p/exec", body={"command": 5})
    assert r.status == 400 and body(r)["error"]["code"] == "bad_request"
    r = d.http("POST", "/v1/sessions/p/exec", body={"command": "true", "bogus": 1})
    assert r.status == 400 and "bogus" in body(r)["error"]["message"]
    r = d.http("POST", "/v1/sessions/p/exec", body={"command": "true", "timeout": -1})
    assert r.status == 400
    d.healthy()


def test_seccomp_kill_named_in_log_and_effect(pdaemon):
    # A syscall through a foreign ABI (x32 getpid) is stopped by the jail's
    # filter; ntfsd's log names the syscall and the effect's result records
    # it (a line on its stderr), and the row is failed ("killed").
    d = pdaemon()
    d.ok("session", "new", "p")
    b = body(exec_(d, "p", "python3 -c 'import ctypes; ctypes.CDLL(None).syscall(0x40000000 | 39)'; "
                           "echo rc=$?"))
    assert "rc=137" in b["stdout"], b
    assert "seccomp killed pid" in b["stderr"] and "x32 getpid" in b["stderr"], b
    log = d.log_text()
    assert "seccomp filter killed 1 process" in log and "x32 getpid" in log, log[-2000:]
    effs = d.jok("effects", "p")
    effs = effs["effects"] if isinstance(effs, dict) else effs
    rows = [e for e in effs if e["tool"] == "bash_write"]
    assert rows and "x32 getpid" in json.dumps(rows[-1]), rows
    d.healthy()
