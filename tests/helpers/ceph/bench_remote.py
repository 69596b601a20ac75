#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Benchmark of remotes (docs/remote.md): push and clone of FILES files totalling
MIB MiB, then a second push after a one-file change. Needs a running gateway:
  tests/helpers/ceph/start.sh DIR && . DIR/env && NTFS_BUILD=build \
      tests/helpers/ceph/bench_remote.py [FILES] [MIB]
"""
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "integration"))
from ctl_fixtures import Daemon  # noqa: E402
from conftest import lazy_unmount  # noqa: E402


def main():
    files = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    bucket = f"bench-{int(time.time())}"
    ds = []
    try:
        for _ in range(2):
            sc = tempfile.mkdtemp(prefix="ntfs-bench-", dir="/tmp")
            d = Daemon(sc)
            ds.append(d)
            d.ok("remote", "add", "origin", f"{os.environ['S3_ENDPOINT']}/{bucket}", "--access-key",
                 os.environ["S3_ACCESS_KEY"], env={"NTFS_S3_SECRET_KEY": os.environ["S3_SECRET_KEY"]})
        a, b = ds
        a.ok("session", "new", "main")
        mp = os.path.join(a.scratch, "ws")
        os.mkdir(mp)
        a.ok("mount", "main", mp)
        per = mib * 1024 * 1024 // files
        for i in range(files):
            dd = os.path.join(mp, f"d{i // 500}")
            os.makedirs(dd, exist_ok=True)
            with open(os.path.join(dd, f"f{i}"), "wb") as f:
                f.write(os.urandom(per))
        a.ok("checkpoint", "main")

        def run(d, *args):
            t = time.monotonic()
            j = d.jok(*args, timeout=3600)
            return time.monotonic() - t, j["transfer"]
        for label, (dt, t) in (("push", run(a, "push", "main", "origin")),
                               ("clone", run(b, "clone", "origin/main", "main"))):
            print(f"{label}: {dt:.1f} s, {t['requests']} requests, {t['bytes_sent']} B sent, "
                  f"{t['bytes_received']} B received, {t['objects']} objects, {t['packs']} packs")
        with open(os.path.join(mp, "d0", "f0"), "wb") as f:
            f.write(b"changed\n")
        dt, t = run(a, "push", "main", "origin")
        print(f"push after a one-file change: {dt:.2f} s, {t['requests']} requests, {t['bytes_sent']} B sent, "
              f"{t['objects']} objects, {t['packs']} packs")
    finally:
        for d in ds:
            d.stop()
            lazy_unmount(d.scratch)
            shutil.rmtree(d.scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
