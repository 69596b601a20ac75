#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Jail start-up cost, measured in one run against bubblewrap:

  * `ntfs-jail --workspace DIR -- true`           (the helper alone; a plain
    command like this one is exec'd without bash, docs/jail.md)
  * `ntfs-jail --no-direct ... -- true`           (the same through bash, as
    any command with shell syntax runs)
  * `bwrap --unshare-all --ro-bind /usr /usr ... true` (Debian's bubblewrap)
  * the same bwrap running `bash -c true` (like-for-like with --no-direct)
  * a full `bash_read` round trip of `true` through ntfsd's socket (one
    keep-alive connection, the request and its JSON answer)
  * `ntfs-ctl exec S -- true`: the whole CLI round trip (process start,
    connect, the streamed exec route, exit code; the default tool,
    bash_write)

All rows are run interleaved (one run of each in turn), so a change in the
machine's load hits them alike.

  tools/bench-jail.py [--build DIR] [--runs N]

Prints medians, ratios to bwrap `true` and the targets (issue 5: helper <=
bwrap true; issue 63: `ntfs-ctl exec S -- true` p50 <= 15 ms, bash_read
round trip p50 <= 12 ms); never fails on a timing."""
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


def p50_p90(samples):
    return statistics.median(samples) * 1e3, sorted(samples)[max(int(len(samples) * 0.9) - 1, 0)] * 1e3


def run_one(what):
    if callable(what):
        what()
    else:
        subprocess.run(what, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)


def timeit_interleaved(cmds, runs):
    """cmds: [(name, argv or callable)]; one run of each in turn, runs times."""
    out = {name: [] for name, _ in cmds}
    for _ in range(runs):
        for name, what in cmds:
            t = time.perf_counter()
            run_one(what)
            out[name].append(time.perf_counter() - t)
    return [(name, *p50_p90(out[name])) for name, _ in cmds]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(os.path.dirname(__file__),
                                                                                  "..", "build")))
    ap.add_argument("--runs", type=int, default=50)
    a = ap.parse_args()
    jail = os.path.join(a.build, "exec", "ntfs-jail")
    ntfsd = os.path.join(a.build, "ctl", "ntfsd")
    ctl = os.path.join(a.build, "ctl", "ntfs-ctl")
    tmp = tempfile.mkdtemp(prefix="ntfs-bench-jail-")
    ws = os.path.join(tmp, "ws")
    os.mkdir(ws)
    bwrap = ["bwrap", "--unshare-all", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
             "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc",
             "--dev", "/dev"]
    have_bwrap = shutil.which("bwrap") is not None
    cmds = [("ntfs-jail -- true", [jail, "--workspace", ws, "--", "true"]),
            ("ntfs-jail --no-direct -- true", [jail, "--no-direct", "--workspace", ws, "--", "true"])]
    if have_bwrap:
        cmds += [("bwrap ... true", bwrap + ["true"]), ("bwrap ... bash -c true", bwrap + ["bash", "-c", "true"])]
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

        def bash_read():
            st, body = bench_ctl.request(s, "POST", "/v1/sessions/b/exec", {"command": "true", "tool": "bash_read"})
            assert st == 200, body

        bench_ctl.request(s, "POST", "/v1/sessions", {"name": "b"})
        cmds += [("bash_read round trip (socket)", bash_read),
                 ("ntfs-ctl exec S -- true", [ctl, "--socket", sock_path, "exec", "b", "--", "true"])]
        for _, what in cmds:  # warm the page cache
            run_one(what)
        rows = timeit_interleaved(cmds, a.runs)
        s.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        subprocess.run(["fusermount3", "-uz", os.path.join(tmp, "store", "mnt", "b")],
                       stderr=subprocess.DEVNULL)
        shutil.rmtree(tmp, ignore_errors=True)
    base = dict((r[0], r[1]) for r in rows)
    print(f"{'command':<32} {'p50 ms':>8} {'p90 ms':>8} {'vs bwrap':>9}  (vs bwrap true; bash rows vs bash -c true)")
    for name, p50, p90 in rows:
        ratio = ""
        if have_bwrap:
            # like for like: what runs bash is compared with bwrap running bash
            like_bash = "no-direct" in name or "bash -c" in name
            ref = base["bwrap ... bash -c true"] if like_bash else base["bwrap ... true"]
            ratio = f"{p50 / ref:.2f}x"
        print(f"{name:<32} {p50:>8.1f} {p90:>8.1f} {ratio:>9}")
    if have_bwrap:
        h, b = base["ntfs-jail -- true"], base["bwrap ... true"]
        print(f"target: helper <= bwrap true: {h:.1f} <= {b:.1f} ms: {'met' if h <= b else 'MISSED'}")
    ce = base["ntfs-ctl exec S -- true"]
    print(f"target: ntfs-ctl exec S -- true p50 <= 15 ms: {ce:.1f} ms: {'met' if ce <= 15 else 'MISSED'}")
    rt = base["bash_read round trip (socket)"]
    print(f"target: bash_read round trip p50 <= 12 ms: {rt:.1f} ms: {'met' if rt <= 12 else 'MISSED'}")
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps({r[0]: round(r[1], 2) for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
