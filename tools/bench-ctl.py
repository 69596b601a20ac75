#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Control-plane load figure: requests per second and p50/p99 latency of a
`status` request and of a checkpoint of an unchanged session, over
keep-alive connections on the Unix socket, with 1 and 8 concurrent clients.

  tools/bench-ctl.py [--build DIR] [--requests N]

Starts its own ntfsd on a temporary store and stops it at the end. Prints a
table; never fails on a timing (machines are noisy)."""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def request(sock, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: ntfs\r\nContent-Length: {len(data)}\r\n"
    if data:
        head += "Content-Type: application/json\r\n"
    sock.sendall(head.encode() + b"\r\n" + data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    hdr, rest = buf.split(b"\r\n\r\n", 1)
    status = int(hdr.split(b" ", 2)[1])
    length = 0
    for line in hdr.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    while len(rest) < length:
        rest += sock.recv(65536)
    return status, rest[:length]


def run(sock_path, method, path, body, n, clients):
    lat = []
    lock = threading.Lock()
    errors = []

    def worker(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        mine = []
        try:
            for _ in range(count):
                t = time.perf_counter()
                st, _ = request(s, method, path, body)
                mine.append(time.perf_counter() - t)
                if st != 200:
                    errors.append(st)
        finally:
            s.close()
        with lock:
            lat.extend(mine)

    per = n // clients
    threads = [threading.Thread(target=worker, args=(per,)) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} requests failed: {errors[:5]}")
    lat.sort()
    return len(lat) / wall, statistics.median(lat) * 1e3, lat[int(len(lat) * 0.99) - 1] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(os.path.dirname(__file__),
                                                                                  "..", "build")))
    ap.add_argument("--requests", type=int, default=4000)
    a = ap.parse_args()
    ntfsd = os.path.join(a.build, "ctl", "ntfsd")
    tmp = tempfile.mkdtemp(prefix="ntfs-bench-ctl-")
    sock_path = os.path.join(tmp, "s")
    proc = subprocess.Popen([ntfsd, "--store", os.path.join(tmp, "store"), "--socket", sock_path, "-f",
                             "--log-level", "error"], start_new_session=True)
    try:
        for _ in range(300):
            if os.path.exists(sock_path):
                try:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(sock_path)
                    request(s, "GET", "/health")
                    s.close()
                    break
                except OSError:
                    pass
            time.sleep(0.05)
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock_path)
        request(s, "POST", "/v1/sessions", {"name": "b"})
        s.close()
        print(f"{'request':<34} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
        for label, method, path, body in [
            ("GET /v1/status", "GET", "/v1/status", None),
            ("checkpoint (unchanged session)", "POST", "/v1/sessions/b/checkpoint", {}),
        ]:
            for clients in (1, 8):
                n = a.requests if method == "GET" else a.requests // 4
                rps, p50, p99 = run(sock_path, method, path, body, n, clients)
                print(f"{label:<34} {clients:>7} {rps:>9.0f} {p50:>8.3f} {p99:>8.3f}")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
