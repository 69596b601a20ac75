# SPDX-License-Identifier: MIT
"""Helpers for the crash tests (test_recovery.py, test_crash_loop.py, tools/crash-loop.py).

  Counter      an HTTP server on a Unix socket that counts hits per path: the
               "outside world" of a jailed bash_run (see below)
(stdlib only, no pytest: tools/crash-loop.py imports it too.)

  Runner       starts/kill -9s/restarts one ntfsd on one store, with an optional
               NTFS_FAULT in its environment; cleans everything up in close()

Why a Unix socket, not 127.0.0.1: bash_run's jail has loopback networking in
its OWN network namespace, so the host's 127.0.0.1 is not reachable from it
(and must not be). A path-named Unix socket is reached through the file
system, not the network namespace. The jail binds the host's /usr read-only,
so a socket created under /usr/local/share/ntfs-test-XXXX/ is visible inside
it, and connect(2) works on a read-only mount (sockets are exempt from the
read-only check). The counter lives in the test process, outside the store,
so neither a rollback nor a crash of ntfsd can undo a hit: each hit is a real,
irreversible effect on the outside world, counted once per request.
"""
import http.server
import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import tempfile
import threading
import time

BUILD = os.environ.get("NTFS_BUILD", "/work/main/build")


def find_bin(name):
    for sub in ("", "ctl", "exec", "fs"):
        p = os.path.join(BUILD, sub, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def mounts_under(path):
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path + "/"):
                found.append(mp)
    return sorted(found, key=len, reverse=True)


def lazy_unmount(path):
    for mp in mounts_under(path):
        if subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True)


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class Counter:
    """Counts GET /<path> hits; .count(path) -> int; .url(path) for curl."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ntfs-test-", dir="/usr/local/share")
        os.chmod(self.dir, 0o755)
        self.sock = os.path.join(self.dir, "counter.sock")
        self.hits = {}
        self.lock = threading.Lock()
        counter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with counter.lock:
                    counter.hits[self.path] = counter.hits.get(self.path, 0) + 1
                    n = counter.hits[self.path]
                body = f"{n}\n".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

            def address_string(self):
                return "unix"

        self.srv = _UnixHTTPServer(self.sock, Handler)
        os.chmod(self.sock, 0o777)
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def count(self, path):
        with self.lock:
            return self.hits.get(path, 0)

    def total(self):
        with self.lock:
            return dict(self.hits)

    def wait(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while self.count(path) == 0:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no hit on {path}")
            time.sleep(0.02)

    def curl(self, path):
        """The shell command a jailed tool runs to hit path."""
        return f"curl -sf --max-time 10 --unix-socket {self.sock} http://counter{path} >/dev/null"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()
        shutil.rmtree(self.dir, ignore_errors=True)


class Runner:
    """One store, one ntfsd at a time. kill9() leaves the store (and the
    dead FUSE mounts under it) as a crash does; start() brings it back."""

    def __init__(self, scratch):
        self.binary = find_bin("ntfsd")
        self.ctl_bin = find_bin("ntfs-ctl")
        self.scratch = scratch
        self.store = os.path.join(scratch, "store")
        self.sock = os.path.join(scratch, "s")
        self.log_path = os.path.join(scratch, "ntfsd.log")
        self.proc = None
        self.pgids = []

    def start(self, fault=None, timeout=30, args=()):
        env = dict(os.environ)
        env.pop("NTFS_FAULT", None)
        if fault:
            env["NTFS_FAULT"] = fault
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "--store", self.store, "--socket", self.sock, "-f",
                                          *args],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                         start_new_session=True)
        self.pgids.append(self.proc.pid)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ntfsd exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                if self.http("GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"ntfsd did not answer: {self.log_tail()}")
            time.sleep(0.05)

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")[-n:]
        except OSError:
            return ""

    def http(self, method, path, body=None, timeout=60):
        """-> (status, json or None). Raises OSError if the daemon dies."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        s.settimeout(timeout)
        try:
            s.connect(self.sock)
            raw = json.dumps(body).encode() if body is not None else b""
            head = f"{method} {path} HTTP/1.1\r\nHost: ntfsd\r\nConnection: close\r\n"
            if body is not None:
                head += f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
            s.sendall(head.encode() + b"\r\n" + raw)
            buf = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                buf += c
        finally:
            s.close()
        if b"\r\n\r\n" not in buf:
            raise ConnectionError("no response (daemon died?)")
        head, rest = buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        lines = head.decode("latin-1").split("\r\n")
        hdrs = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            body_b = b""
            while rest:
                size_s, rest = rest.split(b"\r\n", 1)
                size = int(size_s.split(b";")[0], 16)
                if size == 0:
                    break
                body_b += rest[:size]
                rest = rest[size + 2:]
        else:
            body_b = rest[:int(hdrs.get("content-length", len(rest)))]
        try:
            return status, json.loads(body_b) if body_b else None
        except ValueError:
            return status, None

    def ok(self, method, path, body=None, timeout=120):
        st, j = self.http(method, path, body, timeout)
        assert 200 <= st < 300, f"{method} {path} -> {st} {j}"
        return j

    def ctl(self, *args, timeout=120):
        return subprocess.run([self.ctl_bin, "--socket", self.sock, *map(str, args)], capture_output=True,
                              text=True, timeout=timeout)

    def exec(self, session, tool, command, key=None, timeout=120):
        body = {"command": command, "tool": tool}
        if key:
            body["idempotency_key"] = key
        return self.http("POST", f"/v1/sessions/{session}/exec", body, timeout)

    def effects(self, session):
        return self.ok("GET", f"/v1/sessions/{session}/effects")["effects"]

    def head(self, session):
        return self.ok("GET", f"/v1/sessions/{session}")["head"]

    def kill9(self):
        """kill -9 of ntfsd alone (not its process group: the jail must die with it)."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait(timeout=30)

    def wait_dead(self, timeout=30):
        """Waits for a crash the daemon raised itself (NTFS_FAULT ...:crash)."""
        self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def stop(self):
        """SIGTERM; returns the exit code."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()
        return self.proc.returncode if self.proc else 0

    def close(self):
        """Kills whatever is left (daemons, jails) and unmounts everything."""
        if self.proc and self.proc.poll() is None:
            self.stop()
        for pg in self.pgids:
            try:
                os.killpg(pg, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        lazy_unmount(self.scratch)
