# SPDX-License-Identifier: MIT
"""ntfsd's logs (issue 65, item 2): --log-file gets every line, with one
line per API request (method, path, status, duration, session), and is
reopened on SIGHUP; --log-target journald sends the systemd journal's
native protocol, with the fields SESSION, REQUEST_ID and EFFECT_ID, to the
socket $NTFS_JOURNAL_SOCKET names (here the test's own datagram socket)."""
import os
import re
import signal
import socket
import time

import pytest

from ctl_fixtures import Daemon, stop_and_check

REQ = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} ntfs info: http (\S+) (\S+) (\d{3}) (\d+\.\d+)ms"
                 r"(?: \{request=(\d+)(?: session=(\S+))?\})?$")


def wait_for(pred, what, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def request_lines(path):
    with open(path) as f:
        return [m.groups() for m in (REQ.match(l.rstrip("\n")) for l in f) if m]


def test_log_file_has_request_lines_and_reopens_on_sighup(scratch):
    logf = os.path.join(scratch, "ntfsd-file.log")
    d = Daemon(scratch, extra=["--log-file", logf])
    try:
        d.ok("session", "new", "alpha")
        d.ok("checkpoint", "alpha", "-m", "first")
        r = d.http("GET", "/v1/sessions/nosuch")
        assert r.status == 404
        lines = wait_for(lambda: [l for l in request_lines(logf) if l[1] == "/v1/sessions/nosuch"] and
                         request_lines(logf), "the request lines")
        by_path = {(l[0], l[1]): l for l in lines}
        # method, path, status, a duration and the session where there is one
        ck = by_path[("POST", "/v1/sessions/alpha/checkpoint")]
        assert ck[2] == "200" and float(ck[3]) >= 0 and ck[5] == "alpha"
        assert by_path[("GET", "/v1/sessions/nosuch")][2] == "404"
        assert by_path[("GET", "/v1/sessions/nosuch")][5] == "nosuch"
        new = [l for l in lines if l[0] == "POST" and l[1] == "/v1/sessions"]
        assert new and new[0][2] in ("200", "201")
        ids = [int(l[4]) for l in lines]
        assert len(set(ids)) == len(ids), "request ids are distinct"
        # the startup line is there too: the file has every line, not only requests
        with open(logf) as f:
            assert "ntfs info: ntfsd " in f.read()
        # logrotate: move the file away, SIGHUP, the next lines are in a new file
        os.rename(logf, logf + ".1")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: os.path.exists(logf), "the reopened log file")
        assert d.http("GET", "/v1/status").status == 200  # still running
        wait_for(lambda: any(l[1] == "/v1/status" for l in request_lines(logf)), "a request in the new file")
        assert not any(l[1] == "/v1/status" for l in request_lines(logf + ".1"))
    finally:
        stop_and_check(d, scratch)


def journal_fields(datagram):
    """Parses one native-protocol datagram into a dict."""
    out, i = {}, 0
    while i < len(datagram):
        nl = datagram.index(b"\n", i)
        line = datagram[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            out[k.decode()] = v.decode()
            i = nl + 1
        else:  # KEY\n, le64 length, bytes, \n
            n = int.from_bytes(datagram[nl + 1:nl + 9], "little")
            out[line.decode()] = datagram[nl + 9:nl + 9 + n].decode()
            assert datagram[nl + 9 + n:nl + 10 + n] == b"\n"
            i = nl + 10 + n
    return out


def test_journald_fields(scratch, monkeypatch):
    path = os.path.join(scratch, "journal.sock")
    js = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    js.bind(path)
    js.settimeout(0.2)
    got = []

    def drain():
        while True:
            try:
                got.append(journal_fields(js.recv(1 << 20)))
            except socket.timeout:
                return

    monkeypatch.setenv("NTFS_JOURNAL_SOCKET", path)
    d = Daemon(scratch, extra=["--log-target", "journald"])
    try:
        d.ok("session", "new", "beta")
        d.ok("checkpoint", "beta", "-m", "x")
        r = d.http("POST", "/v1/sessions/beta/exec", body={"command": "true"}, timeout=120)

        def have():
            drain()
            return [g for g in got if "http POST /v1/sessions/beta/checkpoint" in g.get("MESSAGE", "")]

        ck = wait_for(have, "the checkpoint's request in the journal")[0]
        assert ck["PRIORITY"] == "6" and ck["SYSLOG_IDENTIFIER"] == "ntfsd"
        assert ck["SESSION"] == "beta"
        assert int(ck["REQUEST_ID"]) > 0
        assert re.search(r" 200 \d+\.\d+ms", ck["MESSAGE"])
        start = [g for g in got if g.get("MESSAGE", "").startswith("ntfsd ")]
        assert start and "SESSION" not in start[0] and "REQUEST_ID" not in start[0]
        ids = [g["REQUEST_ID"] for g in got if "REQUEST_ID" in g and g["MESSAGE"].startswith("http ")]
        assert len(set(ids)) == len(ids)
        assert r.status == 200, r.body
        ex = wait_for(lambda: (drain(), [g for g in got if "http POST /v1/sessions/beta/exec 200" in
                                         g.get("MESSAGE", "")])[1], "the exec's request")[0]
        # the effect the request began is named by the request's line
        assert ex["SESSION"] == "beta" and ex.get("EFFECT_ID") == str(r.json["effect_id"]), ex
        # nothing went to stderr but what the journal could not take
        assert "http POST /v1/sessions/beta/checkpoint" not in d.log_text()
    finally:
        stop_and_check(d, scratch)
        js.close()


def test_journald_unreachable_refuses_to_start(scratch, monkeypatch):
    monkeypatch.setenv("NTFS_JOURNAL_SOCKET", os.path.join(scratch, "none.sock"))
    with pytest.raises(RuntimeError, match="cannot reach the journal"):
        Daemon(scratch, extra=["--log-target", "journald"])


def test_journal_stream_chooses_journald(scratch, monkeypatch):
    """Under systemd stderr is the journal ($JOURNAL_STREAM names it):
    ntfsd then speaks the native protocol by itself, without the option."""
    path = os.path.join(scratch, "journal.sock")
    js = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    js.bind(path)
    js.settimeout(5)
    log = os.path.join(scratch, "ntfsd.log")  # the Daemon's stderr
    open(log, "ab").close()
    st = os.stat(log)
    monkeypatch.setenv("NTFS_JOURNAL_SOCKET", path)
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    d = Daemon(scratch)
    try:
        msgs = []
        while not any(m.get("MESSAGE", "").startswith("ntfsd ") for m in msgs):
            msgs.append(journal_fields(js.recv(1 << 20)))
        assert "ntfs info: ntfsd " not in d.log_text()
    finally:
        stop_and_check(d, scratch)
        js.close()
    # another file on stderr: JOURNAL_STREAM is not about it, stderr is used
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino + 1}")
    d = Daemon(scratch)
    try:
        wait_for(lambda: "http GET /health 200" in d.log_text(), "the request line on stderr")
    finally:
        stop_and_check(d, scratch)
