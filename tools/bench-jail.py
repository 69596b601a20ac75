#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Jail start-up cost, measured in one run against bubblewrap:

  * `ntfs-jail --workspace DIR -- true`           (the helper alone)
  * `bwrap --unshare-all --ro-bind /usr /usr ... true` (Debian's bubblewrap)
  * the same bwrap running `bash -c true` (ntfs-jail always runs bash, to
    carry the shell state, so this is the like-for-like figure)
  * a full `bash_read` round trip through ntfsd's socket

  tools/bench-jail.py [--build DIR] [--runs N]

Prints medians and ratios; never fails on a timing."""
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
import time

sys.path.insert(0, os.path.dirname(__file__))
from importlib import import_module  # noqa: E402

bench_ctl = import_module("bench-ctl")


def timeit(argv, runs):
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3, sorted(out)[int(len(out) * 0.9) - 1] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(os.path.dirname(__file__),
                                                                                  "..", "build")))
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    jail = os.path.join(a.build, "exec", "ntfs-jail")
    ntfsd = os.path.join(a.build, "ctl", "ntfsd")
    tmp = tempfile.mkdtemp(prefix="ntfs-bench-jail-")
    ws = os.path.join(tmp, "ws")
    os.mkdir(ws)
    rows = []
    rows.append(("ntfs-jail -- true", *timeit([jail, "--workspace", ws, "--", "true"], a.runs)))
    bwrap = ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
             "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
             "--dev", "/dev"]
    have_bwrap = shutil.which("bwrap") is not None
    if have_bwrap:
        rows.append(("bwrap ... true", *timeit(bwrap + ["true"], a.runs)))
        rows.append(("bwrap ... bash -c true", *timeit(bwrap + ["bash", "-c", "true"], a.runs)))
    # bash_read through the daemon
    sock_path = os.path.join(tmp, "s")
    proc = subprocess.Popen([ntfsd, "--store", os.path.join(tmp, "store"), "--socket", sock_path, "-f",
                             "--log-level", "error"], start_new_session=True)
    try:
        for _ in range(300):
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(sock_path)
                break
            except OSError:
                time.sleep(0.05)
        bench_ctl.request(s, "POST", "/v1/sessions", {"name": "b"})
        bench_ctl.request(s, "POST", "/v1/sessions/b/exec", {"command": "true", "tool": "bash_read"})  # warm
        lat = []
        for _ in range(a.runs):
            t = time.perf_counter()
            st, body = bench_ctl.request(s, "POST", "/v1/sessions/b/exec",
                                         {"command": "true", "tool": "bash_read"})
            lat.append(time.perf_counter() - t)
            assert st == 200, body
        s.close()
        rows.append(("bash_read round trip (socket)", statistics.median(lat) * 1e3,
                     sorted(lat)[int(len(lat) * 0.9) - 1] * 1e3))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        subprocess.run(["fusermount3", "-uz", os.path.join(tmp, "store", "mnt", "b")],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    base = dict((r[0], r[1]) for r in rows)
    print(f"{'command':<32} {'p50 ms':>8} {'p90 ms':>8} {'vs bwrap':>9}  (ntfs rows vs bwrap bash -c true)")
    for name, p50, p90 in rows:
        ratio = ""
        if have_bwrap:
            # ntfs-jail always starts bash (to carry the shell state): compare
            # it, and the round trip, with bwrap starting bash too
            like_bash = "bwrap" not in name or "bash" in name
            ref = base["bwrap ... bash -c true"] if like_bash else base["bwrap ... true"]
            ratio = f"{p50 / ref:.2f}x"
        print(f"{name:<32} {p50:>8.1f} {p90:>8.1f} {ratio:>9}")
    print(json.dumps({r[0]: round(r[1], 2) for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
