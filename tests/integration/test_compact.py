# SPDX-License-Identifier: MIT
"""ntfs-ctl compact (issue 65, item 3): the pages gc frees stay in data.mdb
(`status` shows them as free in the file and reclaimable); compact gives
them back, so that after ending sessions and gc the store takes, by `du`,
within 10% of a fresh store holding the same live data. The daemon refuses
it (409 busy) while a session is mounted."""
import io
import json
import os
import random
import subprocess
import tarfile

import pytest

from ctl_fixtures import Daemon, daemon, stop_and_check  # noqa: F401

MIB = 1 << 20


def make_tar(path, seed, mib):
    """mib MiB of incompressible files, 1 MiB each."""
    rnd = random.Random(seed)
    with tarfile.open(path, "w") as t:
        for i in range(mib):
            data = rnd.randbytes(MIB)
            ti = tarfile.TarInfo(f"d{seed}/f{i:04d}")
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))


def du(path):
    """Bytes on disk under path (st_blocks, as du counts them)."""
    total = 0
    for root, dirs, files in os.walk(path):
        for f in files:
            try:
                st = os.lstat(os.path.join(root, f))
            except FileNotFoundError:
                continue
            total += st.st_blocks * 512
    return total


def test_compact_shrinks_to_a_fresh_store(scratch):
    keep = os.path.join(scratch, "keep.tar")
    make_tar(keep, 1, 24)
    junk = []
    for k in range(3):
        p = os.path.join(scratch, f"junk{k}.tar")
        make_tar(p, 10 + k, 40)
        junk.append(p)

    a = os.path.join(scratch, "a")
    os.mkdir(a)
    d = Daemon(a)
    try:
        d.ok("import", "keep", keep, "-q")
        for k, p in enumerate(junk):
            d.ok("import", f"junk{k}", p, "-q")
        for k in range(len(junk)):
            d.ok("session", "end", f"junk{k}")
        d.ok("gc")
        st = d.jok("status")["space"]
        # gc's pages are free inside the file, not given back
        assert st["free_in_file_bytes"] >= 100 * MIB, st
        assert st["reclaimable_bytes"] >= 100 * MIB, st
        assert st["live_bytes"] < 40 * MIB, st
        assert "reclaimable by compact" in d.ok("status")
        before = du(d.store)
        out = d.ok("compact")
        assert out.startswith("compacted data.mdb: "), out
        after = du(d.store)
        st2 = d.jok("status")["space"]
        assert st2["reclaimable_bytes"] < 4 * MIB, st2
        assert st2["free_in_file_bytes"] < 4 * MIB, st2
        # the live data is all there, and the store is clean
        d.fsck_clean()
        exp = os.path.join(scratch, "back.tar")
        d.ok("export", "keep", exp, "-q")
        with tarfile.open(exp) as t, tarfile.open(keep) as k:
            names = sorted(m.name.removeprefix("./") for m in t.getmembers() if m.isfile())
            assert names == sorted(m.name for m in k.getmembers() if m.isfile())
            assert t.extractfile("./d1/f0007").read() == k.extractfile("d1/f0007").read()
        # still writable after the reopen
        d.ok("session", "new", "after")
        d.ok("checkpoint", "after", "-m", "works")
        d.ok("session", "end", "after")
    finally:
        stop_and_check(d, a)
    # the store opens again after a restart
    d = Daemon(a)
    try:
        d.fsck_clean()
        assert "keep" in d.ok("session", "ls")
    finally:
        stop_and_check(d, a)

    b = os.path.join(scratch, "b")
    os.mkdir(b)
    f = Daemon(b)
    try:
        f.ok("import", "keep", keep, "-q")
        f.ok("checkpoint", "keep", "-m", "x")
        fresh = du(f.store)
    finally:
        stop_and_check(f, b)
    assert before > 1.5 * fresh, (before, fresh)
    print(f"du: before compact {before}, after {after}, fresh {fresh}")
    assert after <= 1.10 * fresh, f"compacted {after} vs fresh {fresh} (before {before})"


def test_compact_refused_while_mounted(daemon, scratch):
    daemon.ok("session", "new", "m")
    mp = os.path.join(scratch, "mnt")
    os.mkdir(mp)
    daemon.ok("mount", "m", mp)
    try:
        r = daemon.http("POST", "/v1/compact")
        assert r.status == 409 and r.json["error"]["code"] == "busy", r.body
        c = daemon.ctl("compact")
        assert c.returncode != 0 and "unmount" in c.stderr, c.stderr
    finally:
        daemon.ok("umount", mp)
    out = daemon.ok("compact")
    assert out.startswith("compacted data.mdb: ")


def test_compact_progress_route(daemon):
    r = daemon.http("GET", "/v1/compact/progress/nosuch")
    assert r.status == 404
    r = daemon.http("POST", "/v1/compact", body={"progress": "bad id!"})
    assert r.status == 400
    r = daemon.http("POST", "/v1/compact", body={"progress": "p1"})
    assert r.status == 200, r.body
    j = r.json
    assert j["disk_bytes_after"] > 0 and j["file_bytes_after"] > 0


def test_compact_remount(daemon, scratch):
    """--remount: the daemon unmounts the mounts, compacts and mounts them
    again with their options."""
    daemon.ok("session", "new", "r")
    mp = os.path.join(scratch, "rmnt")
    os.mkdir(mp)
    daemon.ok("mount", "r", mp)
    try:
        with open(os.path.join(mp, "f"), "w") as f:
            f.write("kept")
        daemon.ok("checkpoint", "r", "-m", "one")
        out = daemon.ok("compact", "--remount")
        assert out.startswith("compacted data.mdb: ") and "mounted again: 1" in out, out
        mounts = daemon.jok("mounts")
        mounts = mounts["mounts"] if isinstance(mounts, dict) else mounts
        assert [m["mountpoint"] for m in mounts if m.get("session") == "r"] == [os.path.realpath(mp)], mounts
        with open(os.path.join(mp, "f")) as f:
            assert f.read() == "kept"
        with open(os.path.join(mp, "g"), "w") as f:
            f.write("new")
        daemon.ok("checkpoint", "r", "-m", "two")
    finally:
        daemon.ok("umount", mp)
    daemon.fsck_clean()
