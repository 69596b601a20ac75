# SPDX-License-Identifier: MIT
"""ntfs-ctl exec and POST /v1/sessions/NAME/exec against a real ntfsd and jail:
binary-safe results (docs/protocol.md, "Command output"), and the streaming
exec (docs/protocol.md, "Streaming exec"): output as it is written, stdin,
-t on a pseudo-terminal, cancellation by a signal or by the client going
away."""
import base64
import hashlib
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


def test_output_past_the_limit_keeps_its_exact_first_bytes(daemon):
    """Random bytes over the output limit, and clean text cut inside a
    character by the limit: the first output_limit bytes come back exact,
    marked truncated, and the row is done with the exit code."""
    daemon.ok("session", "new", "big")
    limit = 1 << 20  # bash_write's default output_limit (docs/policy.md)
    res = json.loads(daemon.ctl("--json", "exec", "big", "--",
                                "head -c 1500000 /dev/urandom > r.bin; cat r.bin; cat r.bin >&2; exit 3").stdout)
    assert res["exit_code"] == 3 and res["stdout_truncated"] and res["stderr_truncated"]
    out, err = output_bytes(res, "stdout"), output_bytes(res, "stderr")
    assert len(out) == limit and out == err
    want = daemon.jok("exec", "big", "--", f"head -c {limit} r.bin | sha256sum")["stdout"].split()[0]
    assert hashlib.sha256(out).hexdigest() == want
    row = effect_row(daemon, "big", res["effect_id"])
    assert row["status"] == "done" and row["result"]["exit_code"] == 3, row
    assert output_bytes(row["result"], "stdout") == out
    # clean UTF-8 whose last character the limit cuts in two
    res = daemon.jok("exec", "big", "--", f"head -c {limit - 1} /dev/zero | tr '\\0' a; printf '\\303\\251'")
    assert res["stdout_truncated"]
    assert output_bytes(res, "stdout") == b"a" * (limit - 1) + b"\xc3"
    assert res["stdout"] == "a" * (limit - 1) + "\ufffd"
    for e in json.loads(daemon.ok("--json", "effects", "big"))["effects"]:
        assert e["status"] == "done", e


def test_a_result_the_journal_refuses_is_answered_and_recorded_without_its_output(scratch, monkeypatch):
    """The journal refusing a row's result (journal.finish fails once, as a
    result past NTFS_JOURNAL_MAX_JSON does): the caller still gets every byte
    and the exit code, and the row is done, marked output_not_recorded."""
    from ctl_fixtures import Daemon, stop_and_check
    monkeypatch.setenv("NTFS_FAULT", "journal.finish:1:error")
    d = Daemon(scratch)
    try:
        d.ok("session", "new", "j")
        cmd = f"printf '{octal(BINARY_OUT)}'; exit 9"
        h = d.http("POST", "/v1/sessions/j/exec", {"command": cmd})
        assert h.status == 200, h
        assert h.json["exit_code"] == 9 and output_bytes(h.json, "stdout") == BINARY_OUT
        row = effect_row(d, "j", h.json["effect_id"])
        assert row["status"] == "done", row
        assert row["result"]["exit_code"] == 9 and "output_not_recorded" in row["result"], row
        assert "stdout" not in row["result"] and "stdout_b64" not in row["result"]
        # the next call is recorded whole
        res = json.loads(d.ctl("--json", "exec", "j", "--", cmd).stdout)
        assert output_bytes(effect_row(d, "j", res["effect_id"])["result"], "stdout") == BINARY_OUT
    finally:
        stop_and_check(d, scratch)


# ---- the streaming exec ------------------------------------------------------

import fcntl  # noqa: E402
import pty  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import termios  # noqa: E402
import time  # noqa: E402


def ctl_popen(daemon, *args, **kw):
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen([daemon.ctl_bin, "--socket", daemon.sock, *args], **kw)


def jail_procs(marker):
    """pids of the processes whose argv is exactly marker's words (the jail's are visible from the host)."""
    want = marker.encode().split()
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")[:-1]
            except OSError:
                continue
            if argv == want:
                pids.append(int(d))
    return pids


def wait_for(cond, timeout=10, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def last_effect(daemon, session):
    return json.loads(daemon.ok("--json", "effects", session))["effects"][-1]


def test_output_arrives_as_it_is_written(daemon):
    daemon.ok("session", "new", "s")
    # each line carries the jail's clock when it was written (CLOCK_REALTIME, shared with the host)
    p = ctl_popen(daemon, "exec", "s", "--", "for i in 1 2 3; do echo $i $(date +%s.%N); sleep 0.5; done; "
                  "echo done >&2; exit 5")
    delays = []
    for line in p.stdout:
        got = time.time()
        i, written = line.split()
        delays.append(got - float(written))
    assert p.wait(timeout=30) == 5
    assert p.stderr.read() == b"done\n"
    assert len(delays) == 3
    assert max(delays) < 0.2, delays


def test_stdin_passes_through(daemon):
    daemon.ok("session", "new", "s")
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "--", "cat"], input=b"hi\n\0x\xff",
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r
    assert r.stdout == b"hi\n\0x\xff"
    big = os.urandom(3 << 20)  # more than any pipe holds: stdin and stdout flow together
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "--", "cat"], input=big,
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == big
    # -n: no stdin at all
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "-n", "--", "cat; echo end"],
                       input=b"unread\n", capture_output=True, timeout=60)
    assert r.returncode == 0 and r.stdout == b"end\n"
    assert last_effect(daemon, "s")["status"] == "done"


def test_tty_gives_a_terminal_and_its_size(daemon):
    daemon.ok("session", "new", "s")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
    before = termios.tcgetattr(slave)
    p = subprocess.Popen([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "-t", "--",
                          "test -t 0 && test -t 1 && echo TTY-YES; stty size; "
                          "python3 -c 'import os; print(os.get_terminal_size())' 2>/dev/null || true; exit 4"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    out = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                out += os.read(master, 65536)
            except OSError:
                break
        if p.poll() is not None and not r:
            break
    assert p.wait(timeout=30) == 4, out
    after = termios.tcgetattr(slave)
    os.close(master)
    os.close(slave)
    assert b"TTY-YES" in out, out
    assert b"33 101" in out, out
    assert after == before, "the client left the terminal in raw mode"
    row = last_effect(daemon, "s")
    assert row["status"] == "done" and "TTY-YES" in row["result"]["stdout"], row


def check_cancelled(daemon, session, marker, row=None):
    assert jail_procs(marker) == [], "a process of the cancelled command survived"
    row = row or last_effect(daemon, session)
    assert row["status"] == "failed" and row["reason"] == "cancelled", row
    assert row["result"]["cancelled"] is True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_cancels_every_process_of_the_command(daemon, sig):
    daemon.ok("session", "new", "s")
    marker = "sleep 31.25"
    p = ctl_popen(daemon, "exec", "s", "--", f"{marker} & {marker}; wait")
    wait_for(lambda: len(jail_procs(marker)) == 2, what="the command to start")
    t0 = time.monotonic()
    p.send_signal(sig)
    rc = p.wait(timeout=10)
    took = time.monotonic() - t0
    assert rc == 128 + sig, (rc, p.stderr.read())
    assert took < 1.0, took
    assert b"cancelled" in p.stderr.read()
    check_cancelled(daemon, "s", marker)


def test_a_client_that_goes_away_cancels_the_command(daemon):
    daemon.ok("session", "new", "s")
    marker = "sleep 31.5"
    p = ctl_popen(daemon, "exec", "s", "--", marker)
    wait_for(lambda: jail_procs(marker), what="the command to start")
    p.kill()
    p.wait()
    wait_for(lambda: not jail_procs(marker), timeout=2, what="the command to end")
    wait_for(lambda: last_effect(daemon, "s")["status"] != "pending", timeout=5, what="the journal row")
    check_cancelled(daemon, "s", marker)


def test_no_checkpoint_records_a_cancelled_commands_later_effects(daemon, scratch):
    daemon.ok("session", "new", "s")
    head = json.loads(daemon.ok("--json", "session", "show", "s"))["head"]
    p = ctl_popen(daemon, "exec", "s", "--", "echo early > e; sleep 2; echo late > f")
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 130
    time.sleep(2.5)  # past when the command would have written f
    daemon.ok("checkpoint", "s", "-m", "after the cancel")
    diff = daemon.ok("diff", "s", head)
    assert "e" in diff.split() and "f" not in diff.split(), diff
    r = daemon.ctl("exec", "s", "-n", "--", "test -e f")
    assert r.returncode == 1, r
    log = daemon.ok("--json", "log", "s")
    for c in json.loads(log)["commits"]:
        ls = daemon.ctl("diff", "s", head, c["commit"])
        assert "\tf" not in ls.stdout, (c, ls.stdout)
    rows = json.loads(daemon.ok("--json", "effects", "s"))["effects"]
    check_cancelled(daemon, "s", "sleep 2", next(e for e in rows if "late" in e["input"]["command"]))


def test_the_stream_route_refuses_what_it_cannot_do(daemon):
    daemon.ok("session", "new", "s")
    # without the upgrade: 426, and the plain JSON route is untouched
    h = daemon.http("POST", "/v1/sessions/s/exec/stream", {"command": "true"})
    assert h.status == 426 and h.code == "upgrade_required", h
    h = daemon.http("POST", "/v1/sessions/nosuch/exec/stream", {"command": "true"},
                    headers={"Connection": "Upgrade", "Upgrade": "ntfs-exec/1"})
    assert h.status == 404 and h.code == "session_not_found", h
    h = daemon.http("POST", "/v1/sessions/s/exec/stream", {"command": "true", "tty": {"rows": 0, "cols": 5}},
                    headers={"Connection": "Upgrade", "Upgrade": "ntfs-exec/1"})
    assert h.status == 400, h
    # an upgrade asked of a route that makes none: answered, then the connection ends
    h = daemon.http("GET", "/health", headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    assert h.status == 200
    assert daemon.http("POST", "/v1/sessions/s/exec", {"command": "echo ok"}).json["stdout"] == "ok\n"


def test_tty_with_piped_stdin_ends_at_its_end(daemon):
    daemon.ok("session", "new", "s")
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "-t", "--", "cat; echo END"],
                       input=b"hi\n", capture_output=True, timeout=60)
    assert r.returncode == 0, r
    assert r.stdout.replace(b"\r\n", b"\n").endswith(b"hi\nEND\n"), r.stdout


def test_a_replayed_call_streams_its_recorded_output(daemon):
    daemon.ok("session", "new", "s")
    cmd = f"echo $RANDOM$RANDOM; printf '{octal(BINARY_ERR)}' >&2; exit 6"
    argv = [daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "--idempotency-key", "k1", "--", cmd]
    first = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    again = subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert first.returncode == again.returncode == 6
    assert first.stdout == again.stdout and first.stderr == again.stderr == BINARY_ERR
    assert len(json.loads(daemon.ok("--json", "effects", "s"))["effects"]) == 1


def test_a_window_change_reaches_the_command(daemon):
    daemon.ok("session", "new", "s")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 20, 70, 0, 0))
    p = subprocess.Popen([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "-t", "--",
                          "stty size; read x; stty size"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    out = b""

    def read_until(want):
        nonlocal out
        deadline = time.monotonic() + 20
        while want not in out and time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.1)
            if r:
                out += os.read(master, 65536)
        assert want in out, out

    read_until(b"20 70")
    # the client put its terminal in raw mode: keys go to the command's terminal as typed
    lflag = termios.tcgetattr(slave)[3]
    assert not lflag & (termios.ICANON | termios.ECHO | termios.ISIG), lflag
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p.send_signal(signal.SIGWINCH)  # what the kernel sends a terminal's foreground
    time.sleep(0.3)
    os.write(master, b"go\r")
    read_until(b"40 120")
    assert p.wait(timeout=20) == 0
    os.close(master)
    os.close(slave)


def test_the_json_exec_stops_when_its_client_hangs_up(daemon):
    from ctl_fixtures import build_request, connect, read_response
    daemon.ok("session", "new", "s")
    marker = "sleep 31.75"
    s = connect(daemon.sock)
    s.sendall(build_request("POST", "/v1/sessions/s/exec", {"command": marker}))
    wait_for(lambda: jail_procs(marker), what="the command to start")
    s.close()
    t0 = time.monotonic()
    wait_for(lambda: not jail_procs(marker), timeout=5, what="the command to end")
    assert time.monotonic() - t0 < 1.0
    wait_for(lambda: last_effect(daemon, "s")["status"] != "pending", timeout=5, what="the journal row")
    check_cancelled(daemon, "s", marker)
    # a client that only shuts down its sending side still gets its answer
    s = connect(daemon.sock)
    s.sendall(build_request("POST", "/v1/sessions/s/exec", {"command": "sleep 0.3; echo fine"}))
    s.shutdown(socket.SHUT_WR)
    r = read_response(s)
    s.close()
    assert r.status == 200 and r.json["stdout"] == "fine\n" and "cancelled" not in r.json


def test_a_typed_ctrl_c_with_tty_interrupts_the_command_on_its_terminal(daemon):
    """With -t the client's terminal is raw: Ctrl-C is a byte typed to the
    command's terminal, whose line discipline interrupts the command (as
    ssh -t does); the call then ends with the command's own exit."""
    daemon.ok("session", "new", "s")
    marker = "sleep 32.25"
    master, slave = pty.openpty()
    p = subprocess.Popen([daemon.ctl_bin, "--socket", daemon.sock, "exec", "s", "-t", "--",
                          f"trap 'echo GOT-INT; exit 3' INT; echo READY; {marker} & wait"],
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    out = b""
    deadline = time.monotonic() + 20
    while b"READY" not in out and time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            out += os.read(master, 65536)
    assert b"READY" in out, out
    wait_for(lambda: jail_procs(marker), what="the command to start")
    os.write(master, b"\x03")
    rc = p.wait(timeout=10)
    while True:
        r, _, _ = select.select([master], [], [], 0.2)
        if not r:
            break
        try:
            out += os.read(master, 65536)
        except OSError:
            break
    os.close(master)
    os.close(slave)
    assert rc == 3, (rc, out)
    assert b"GOT-INT" in out, out
    row = last_effect(daemon, "s")
    assert row["status"] == "done" and row["result"]["exit_code"] == 3, row
    wait_for(lambda: not jail_procs(marker), timeout=5, what="the jail to end")


def test_ntfsd_stopping_cancels_a_running_exec_instead_of_waiting(scratch):
    from ctl_fixtures import Daemon, build_request, connect, stop_and_check
    d = Daemon(scratch)
    try:
        d.ok("session", "new", "s")
        marker = "sleep 33.5"
        s = connect(d.sock)
        s.sendall(build_request("POST", "/v1/sessions/s/exec", {"command": marker}))
        wait_for(lambda: jail_procs(marker), what="the command to start")
        t0 = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - t0 < 10
        s.close()
        assert jail_procs(marker) == []
        d = Daemon(scratch)
        row = last_effect(d, "s")
        assert row["status"] == "failed" and row["reason"] == "cancelled", row
    finally:
        stop_and_check(d, scratch)
