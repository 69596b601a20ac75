# SPDX-License-Identifier: MIT
"""HTTP/1.1 over ntfsd's Unix socket (docs/protocol.md, "Transport")."""
from __future__ import annotations

import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import time
import urllib.parse
from typing import Any, BinaryIO

from .errors import DaemonUnavailable, NtfsError, error_for

# The protocol's retry rule for a refused connect or a 503
# too_many_connections: up to 8 more tries after 10 ms doubling to 640 ms,
# each wait jittered to between half and all of it.
_RETRIES = 8


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("ntfsd", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def quote(name: str) -> str:
    """A name as one path segment."""
    return urllib.parse.quote(name, safe="")


class Transport:
    """One daemon's socket. Each request opens its own connection (so a
    Transport may be shared by threads and survives a daemon restart)."""

    def __init__(self, path: str, timeout: float | None = None) -> None:
        self.path = path
        self.timeout = timeout

    def _open(self, method: str, target: str, body: bytes | None, timeout: float | None
              ) -> tuple[_UnixConnection, http.client.HTTPResponse]:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        wait = 0.010
        for attempt in range(_RETRIES + 1):
            conn = _UnixConnection(self.path, timeout if timeout is not None else self.timeout)
            try:
                conn.request(method, target, body=body, headers=headers)
                resp = conn.getresponse()
            except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                if attempt == _RETRIES:
                    raise DaemonUnavailable("unavailable", f"ntfsd at {self.path}: {e}") from e
            except FileNotFoundError as e:
                conn.close()
                raise DaemonUnavailable("unavailable", f"no ntfsd socket at {self.path}") from e
            else:
                if resp.status != 503 or attempt == _RETRIES:
                    return conn, resp
                resp.read()
                conn.close()
            time.sleep(random.uniform(wait / 2, wait))
            wait = min(wait * 2, 0.640)
        raise AssertionError("unreachable")

    def request(self, method: str, target: str, body: dict[str, Any] | None = None,
                timeout: float | None = None) -> Any:
        """The JSON answer of one request; an error answer raises NtfsError."""
        raw = None if body is None else json.dumps(body).encode()
        conn, resp = self._open(method, target, raw, timeout)
        try:
            data = resp.read()
        finally:
            conn.close()
        try:
            doc = json.loads(data) if data else {}
        except ValueError:
            doc = None
        if resp.status >= 400:
            err = doc.get("error") if isinstance(doc, dict) else None
            if isinstance(err, dict):
                raise error_for(str(err.get("code")), str(err.get("message")), resp.status, doc)
            raise NtfsError("http_%d" % resp.status, data[:300].decode("utf-8", "replace"), resp.status)
        if doc is None:
            raise NtfsError("bad_response", "not JSON: %r" % data[:200], resp.status)
        return doc

    def download(self, target: str, out: BinaryIO, timeout: float | None = None) -> int:
        """Copies a (chunked) binary answer to out; returns its size."""
        conn, resp = self._open("GET", target, None, timeout)
        try:
            if resp.status >= 400:
                data = resp.read()
                try:
                    err = json.loads(data)["error"]
                except (ValueError, KeyError, TypeError):
                    raise NtfsError("http_%d" % resp.status, data[:300].decode("utf-8", "replace"), resp.status)
                raise error_for(err["code"], err["message"], resp.status, err)
            n = 0
            while True:
                b = resp.read(1 << 20)
                if not b:
                    return n
                out.write(b)
                n += len(b)
        finally:
            conn.close()


def find_socket(socket_path: str | None = None, store: str | None = None, start: bool | None = None) -> str:
    """The control socket: socket_path, else $NTFS_SOCKET, else
    STORE/ntfsd.sock with STORE = store or $NTFS_STORE. With a store and
    start (default: true when a store was given or found), an ntfsd is
    started for it when none answers (found as $NTFS_NTFSD, else ntfsd on
    PATH); it runs on in its own session, logging to STORE/ntfsd.log."""
    if socket_path is None and store is None:
        socket_path = os.environ.get("NTFS_SOCKET") or None
    if socket_path is not None:
        return socket_path
    store = store or os.environ.get("NTFS_STORE")
    if not store:
        raise DaemonUnavailable("unavailable", "no socket: pass socket= or store=, or set NTFS_SOCKET or NTFS_STORE")
    store = os.path.abspath(store)
    path = os.path.join(store, "ntfsd.sock")
    if start is False or _answers(path):
        return path
    binary = os.environ.get("NTFS_NTFSD") or shutil.which("ntfsd")
    if not binary:
        raise DaemonUnavailable("unavailable", f"no ntfsd answers at {path} and none was found to start "
                                "(set NTFS_NTFSD or put ntfsd on PATH)")
    os.makedirs(store, exist_ok=True)
    with open(os.path.join(store, "ntfsd.log"), "ab") as log:
        subprocess.Popen([binary, "--store", store, "--socket", path, "-f"], stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if _answers(path):
            return path
        time.sleep(0.05)
    raise DaemonUnavailable("unavailable", f"started {binary} for {store}, but it did not answer within 30 s "
                            f"(see {store}/ntfsd.log)")


def _answers(path: str) -> bool:
    try:
        conn, resp = Transport(path, 2)._open("GET", "/health", None, 2)
    except (NtfsError, OSError):
        return False
    try:
        resp.read()
        return resp.status == 200
    finally:
        conn.close()
