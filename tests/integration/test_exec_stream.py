# SPDX-License-Identifier: MIT
"""ntfs-ctl exec and POST /v1/sessions/NAME/exec against a real ntfsd and jail:
binary-safe results (docs/protocol.md, "Command output"), and the streaming
exec (docs/protocol.md, "Streaming exec"): output as it is written, stdin,
-t on a pseudo-terminal, cancellation by a signal or by the client going
away."""
import base64
import json
import os
import subprocess

import pytest

from ctl_fixtures import daemon  # noqa: F401  (fixture)

if os.geteuid() != 0:
    pytest.skip("the jail needs root", allow_module_level=True)

BINARY_OUT = b"a\0b\xff\xfe\xc3(z\n"
BINARY_ERR = b"\0\x80err"


def octal(data):
    """data as a printf format that writes exactly those bytes."""
    return "".join(f"\\{b:03o}" for b in data)


def output_bytes(res, key):
    if key + "_b64" in res:
        return base64.b64decode(res[key + "_b64"], validate=True)
    return res[key].encode()


def effect_row(daemon, session, effect_id):
    rows = json.loads(daemon.ok("--json", "effects", session))["effects"]
    return next(e for e in rows if e["id"] == effect_id)


def test_nul_and_invalid_utf8_round_trip(daemon):
    daemon.ok("session", "new", "bin")
    cmd = f"printf '{octal(BINARY_OUT)}'; printf '{octal(BINARY_ERR)}' >&2; exit 7"
    # the JSON API: lossy text plus the exact bytes in base64, the exit code
    h = daemon.http("POST", "/v1/sessions/bin/exec", {"command": cmd, "idempotency_key": "b1"})
    assert h.status == 200, h
    res = h.json
    assert res["exit_code"] == 7
    assert output_bytes(res, "stdout") == BINARY_OUT
    assert output_bytes(res, "stderr") == BINARY_ERR
    assert "\0" not in res["stdout"] and res["stdout"].startswith("a\ufffdb\ufffd\ufffd")
    row = effect_row(daemon, "bin", res["effect_id"])
    assert row["status"] == "done", row
    assert output_bytes(row["result"], "stdout") == BINARY_OUT
    # a retry with the key is served from the journal, bytes intact
    again = daemon.http("POST", "/v1/sessions/bin/exec", {"command": cmd, "idempotency_key": "b1"}).json
    assert again["replayed"] is True and again["exit_code"] == 7
    assert output_bytes(again, "stdout") == BINARY_OUT
    # the CLI writes the raw bytes and exits with the command's code
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "exec", "bin", "--", cmd],
                       capture_output=True, timeout=60)
    assert r.returncode == 7, r
    assert r.stdout == BINARY_OUT and r.stderr == BINARY_ERR
    r = daemon.ctl("--json", "exec", "bin", "--", cmd)
    j = json.loads(r.stdout)
    assert r.returncode == 7 and j["exit_code"] == 7 and output_bytes(j, "stdout") == BINARY_OUT
    # clean text stays a plain string, without a _b64 twin
    j = daemon.jok("exec", "bin", "--", "printf 'caf\\303\\251\\n'")
    assert j["stdout"] == "caf\u00e9\n" and "stdout_b64" not in j
    for e in json.loads(daemon.ok("--json", "effects", "bin"))["effects"]:
        assert e["status"] == "done", e
    assert "bad request" not in daemon.log_text()


def test_a_secret_in_binary_output_is_redacted_in_the_journal(scratch):
    from ctl_fixtures import Daemon, stop_and_check
    secret = "sk-test-0123456789abcdef"
    policy = os.path.join(scratch, "policy.ini")
    with open(policy, "w") as f:
        f.write(f"[credential api.example.com]\nheader = Authorization\nvalue = {secret}\n")
    d = Daemon(scratch, extra=("--policy", policy))
    try:
        d.ok("session", "new", "sec")
        cmd = f"printf '\\000{secret}\\377'"
        res = d.jok("exec", "sec", "--", cmd)
        assert output_bytes(res, "stdout") == b"\0" + secret.encode() + b"\xff"
        row = effect_row(d, "sec", res["effect_id"])
        assert output_bytes(row["result"], "stdout") == b"\0[REDACTED]\xff"
        assert secret not in json.dumps(row)
    finally:
        stop_and_check(d, scratch)
