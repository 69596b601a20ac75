# SPDX-License-Identifier: MIT
"""Fixtures for the control-plane tests: a real ntfsd, ntfs-ctl and raw HTTP.

  daemon      a started ntfsd (--store SCRATCH/store --socket SCRATCH/s -f) in
              its own process group; waits until GET /health answers; at
              teardown SIGTERM (then SIGKILL of the group), lazy-unmounts
              anything left under the scratch directory, and fails the test
              when the daemon's log holds a sanitizer report
  Daemon.ctl(*args, env=None, timeout=60) -> CompletedProcess (text)
  Daemon.ok(*args) -> stdout, asserting exit 0
  Daemon.http(method, path, body=None, raw=None, headers=None) -> Resp
              one HTTP/1.1 request over AF_UNIX with Python's socket module
  Daemon.fsck_clean()  asserts `ntfs-ctl fsck` exits 0 and says ok
"""
import json
import os
import signal
import socket
import subprocess
import time

import pytest

from conftest import BUILD, SANITIZER_MARKS, find_bin, lazy_unmount, mounts_under


class Resp:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def json(self):
        return json.loads(self.body)

    @property
    def code(self):
        try:
            return self.json["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return None

    def __repr__(self):
        return f"Resp({self.status}, {self.body[:300]!r})"


def read_response(sock, timeout=30):
    """Reads one HTTP/1.1 response (Content-Length or chunked) from sock."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            if not buf:
                raise ConnectionError("closed before a response")
            raise ConnectionError(f"closed inside the head: {buf!r}")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                c = sock.recv(65536)
                if not c:
                    raise ConnectionError("closed inside a chunk")
                rest += c
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                c = sock.recv(65536)
                if not c:
                    raise ConnectionError("closed inside a chunk")
                rest += c
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                break
        return Resp(status, headers, body)
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        c = sock.recv(65536)
        if not c:
            raise ConnectionError("closed inside the body")
        rest += c
    return Resp(status, headers, rest[:n])


def connect(path, timeout=30):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    s.settimeout(timeout)
    s.connect(path)
    return s


def build_request(method, path, body=None, raw=None, headers=None):
    if raw is None and body is not None:
        raw = json.dumps(body).encode()
    hdrs = {"Host": "ntfsd", "Connection": "close"}
    if raw is not None:
        hdrs["Content-Type"] = "application/json"
        hdrs["Content-Length"] = str(len(raw))
    hdrs.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n"
    return head.encode() + (raw or b"")


class Daemon:
    def __init__(self, scratch, extra=()):
        self.binary = find_bin("ntfsd")
        self.ctl_bin = find_bin("ntfs-ctl")
        if self.binary is None or self.ctl_bin is None:
            pytest.skip(f"ntfsd / ntfs-ctl are not built under {BUILD}")
        self.scratch = scratch
        self.store = os.path.join(scratch, "store")
        self.sock = os.path.join(scratch, "s")
        self.log_path = os.path.join(scratch, "ntfsd.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--store", self.store, "--socket", self.sock, "-f", *extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ntfsd exited with {self.proc.returncode}: {self.log_text()}")
            try:
                if self.http("GET", "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ntfsd did not answer: {self.log_text()}")
            time.sleep(0.05)

    # -- clients ---------------------------------------------------------
    def ctl(self, *args, env=None, timeout=120, cwd=None, socket_flag=True, input=None):
        e = dict(os.environ)
        e.update(env or {})
        argv = [self.ctl_bin] + (["--socket", self.sock] if socket_flag else []) + [str(a) for a in args]
        return subprocess.run(argv, capture_output=True, text=True, env=e, timeout=timeout, cwd=cwd,
                              input=input)

    def ok(self, *args, **kw):
        r = self.ctl(*args, **kw)
        assert r.returncode == 0, f"ntfs-ctl {args} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    def jok(self, *args, **kw):
        return json.loads(self.ok("--json", *args, **kw))

    def http(self, method, path, body=None, raw=None, headers=None, timeout=30):
        s = connect(self.sock, timeout)
        try:
            s.sendall(build_request(method, path, body, raw, headers))
            return read_response(s, timeout)
        finally:
            s.close()

    def alive(self):
        return self.proc.poll() is None and self.http("GET", "/v1/status").status == 200

    def fsck_clean(self):
        r = self.ctl("fsck")
        assert r.returncode == 0 and r.stdout.startswith("ok"), f"fsck: {r.stdout}\n{r.stderr}"

    def healthy(self):
        """The daemon answers and its store is clean."""
        assert self.proc.poll() is None, f"ntfsd died: {self.log_text()}"
        assert self.http("GET", "/health").status == 200
        self.fsck_clean()

    # -- teardown ----------------------------------------------------------
    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM; returns the exit code (kills the group on a hang)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        try:  # children (jails) left in the group
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        lazy_unmount(self.scratch)
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode

    def sanitizer_errors(self):
        with open(self.log_path, "rb") as f:
            text = f.read().decode(errors="replace")
        return [l for l in text.splitlines() if any(m in l for m in SANITIZER_MARKS)]


def stop_and_check(d, scratch):
    """Stops the daemon; then it must have exited 0 with no sanitizer
    report and no mount left under scratch."""
    rc = d.stop()
    errs = d.sanitizer_errors()
    left = mounts_under(scratch)
    assert not errs, "sanitizer reports in ntfsd's log:\n" + "\n".join(errs)
    assert not left, f"mounts left behind: {left}"
    assert rc == 0, f"ntfsd exited {rc} after SIGTERM: {d.log_text()[-3000:]}"


@pytest.fixture
def daemon(scratch):
    d = Daemon(scratch)
    try:
        yield d
    finally:
        stop_and_check(d, scratch)
