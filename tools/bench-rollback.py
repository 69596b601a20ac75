#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Rollback cost against tree size: the time of a rollback that undoes a
one-file change of a mounted session, with a shell whose working directory is
inside the mount, at two tree sizes (default 1,000 and 100,000 files). The
baseline, run in the same script at the same sizes, is `git reset --hard` of
the same one-file change in a git repository of the same tree on the native
disk. Prints p50 per size and the ratio between the sizes for each.

  tools/bench-rollback.py [--build DIR] [--sizes 1000,100000] [--rounds 20]
                          [--dir DIR]

Starts its own ntfsd on a temporary store under --dir (default: the system's
temporary directory) and stops it at the end. Every round checks that the
rollback restored the file and that the shell, polling `ls` and `cat` of a
relative path once every 50 ms (git: `ls` only), never failed: a broken round is an error
(exit 1), a slow one is only a figure."""
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

PER_DIR = 100


def request(sock_path, method, path, body=None):
    """One request on a fresh connection; returns (status, decoded JSON)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: ntfs\r\nConnection: close\r\nContent-Length: {len(data)}\r\n"
    if data:
        head += "Content-Type: application/json\r\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        s.sendall(head.encode() + b"\r\n" + data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    finally:
        s.close()
    hdr, _, rest = buf.partition(b"\r\n\r\n")
    status = int(hdr.split(b" ", 2)[1])
    return status, json.loads(rest) if rest else None


def must(sock_path, method, path, body, want):
    st, js = request(sock_path, method, path, body)
    if st != want:
        raise RuntimeError(f"{method} {path}: {st} {js}")
    return js


def populate(root, n):
    """n small files, PER_DIR to a directory: src/dNNNNN/fNNN."""
    for i in range(n):
        d = os.path.join(root, "src", "d%05d" % (i // PER_DIR))
        if i % PER_DIR == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "f%03d" % (i % PER_DIR)), "w") as f:
            f.write("file %d\n" % i)


SHELL = r'''
while :; do
  ls > /dev/null || { echo "ls failed" >&2; exit 3; }
  [ -n "$1" ] || cat f000 > /dev/null || { echo "cat failed" >&2; exit 4; }
  sleep 0.05
done
'''


def start_shell(cwd, ls_only=False):
    """A shell polling its working directory. git reset --hard replaces a
    file by unlink and create, so there a read may miss it between the two:
    only ls is checked (ls_only)."""
    return subprocess.Popen(["bash", "-c", SHELL, "sh"] + (["ls-only"] if ls_only else []), cwd=cwd, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def stop_shell(p, where):
    alive = p.poll() is None
    if alive:
        os.killpg(p.pid, signal.SIGKILL)
    err = p.communicate()[1]
    if not alive:
        raise RuntimeError(f"{where}: the shell in the mount died ({p.returncode}): {err.strip()}")


def bench_ntfs(sock_path, base, n, rounds):
    name = "r%d" % n
    mnt = os.path.join(base, "mnt-" + name)
    os.mkdir(mnt)
    must(sock_path, "POST", "/v1/sessions", {"name": name}, 201)
    must(sock_path, "POST", "/v1/mounts", {"session": name, "mountpoint": mnt}, 201)
    shell = None
    try:
        populate(mnt, n)
        head = must(sock_path, "POST", f"/v1/sessions/{name}/checkpoint", {"message": "base"}, 200)["commit"]
        cwd = os.path.join(mnt, "src", "d00000")
        shell = start_shell(cwd)
        target = os.path.join(cwd, "f000")
        times = []
        for r in range(rounds):
            with open(target, "w") as f:
                f.write("changed %d\n" % r)
            t = time.perf_counter()
            must(sock_path, "POST", f"/v1/sessions/{name}/rollback", {"to": head}, 200)
            times.append(time.perf_counter() - t)
            with open(target) as f:
                got = f.read()
            if got != "file 0\n":
                raise RuntimeError(f"ntfs {n}: round {r}: f000 reads {got!r} after the rollback")
            time.sleep(0.06)  # one poll of the shell at least
        stop_shell(shell, f"ntfs {n}")
        shell = None
        return times
    finally:
        if shell is not None and shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
        request(sock_path, "POST", "/v1/mounts/unmount", {"mountpoint": mnt})
        request(sock_path, "DELETE", f"/v1/sessions/{name}")


def bench_git(base, n, rounds):
    repo = os.path.join(base, "git-%d" % n)
    os.mkdir(repo)
    populate(repo, n)
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    q = dict(cwd=repo, env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["git", "init", "-q"], **q)
    subprocess.run(["git", "add", "-A"], **q)
    subprocess.run(["git", "commit", "-q", "-m", "base"], **q)
    cwd = os.path.join(repo, "src", "d00000")
    shell = start_shell(cwd, ls_only=True)
    target = os.path.join(cwd, "f000")
    times = []
    try:
        for r in range(rounds):
            with open(target, "w") as f:
                f.write("changed %d\n" % r)
            t = time.perf_counter()
            subprocess.run(["git", "reset", "-q", "--hard"], **q)
            times.append(time.perf_counter() - t)
            with open(target) as f:
                if f.read() != "file 0\n":
                    raise RuntimeError(f"git {n}: round {r}: not restored")
        stop_shell(shell, f"git {n}")
        shell = None
    finally:
        if shell is not None and shell.poll() is None:
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
        shutil.rmtree(repo, ignore_errors=True)
    return times


def wait_ready(sock_path, proc):
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"ntfsd exited with {proc.returncode}")
        if os.path.exists(sock_path):
            try:
                if request(sock_path, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError("ntfsd did not answer")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(os.path.dirname(__file__),
                                                                                  "..", "build")))
    ap.add_argument("--sizes", default="1000,100000", help="two tree sizes, in files (default 1000,100000)")
    ap.add_argument("--rounds", type=int, default=20, help="rollbacks per size (default 20)")
    ap.add_argument("--dir", default=None, help="where the store, mountpoints and git trees go")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    if len(sizes) != 2 or min(sizes) < 1 or a.rounds < 1:
        ap.error("--sizes takes two positive numbers, --rounds a positive one")
    ntfsd = os.path.join(a.build, "ctl", "ntfsd")
    tmp = tempfile.mkdtemp(prefix="ntfs-bench-rollback-", dir=a.dir)
    sock_path = os.path.join(tmp, "s")
    proc = subprocess.Popen([ntfsd, "--store", os.path.join(tmp, "store"), "--socket", sock_path, "-f",
                             "--log-level", "error"], start_new_session=True)
    try:
        wait_ready(sock_path, proc)
        res = {}
        for n in sizes:
            res[("ntfs", n)] = statistics.median(bench_ntfs(sock_path, tmp, n, a.rounds)) * 1e3
            res[("git", n)] = statistics.median(bench_git(tmp, n, a.rounds)) * 1e3
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
    small, big = sizes
    print(f"rollback of a 1-file change, shell cwd inside, p50 of {a.rounds} rounds")
    print(f"| {'undo':<34} | {'%d files ms' % small:>14} | {'%d files ms' % big:>16} | {'ratio':>6} |")
    print(f"|{'-' * 36}|{'-' * 15}:|{'-' * 17}:|{'-' * 7}:|")
    for what, label in (("ntfs", "ntfs rollback (socket)"), ("git", "git reset --hard (native disk)")):
        s, b = res[(what, small)], res[(what, big)]
        print(f"| {label:<34} | {s:>14.2f} | {b:>16.2f} | {b / s:>6.2f} |")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as e:
        print(f"bench-rollback: {e}", file=sys.stderr)
        sys.exit(1)
