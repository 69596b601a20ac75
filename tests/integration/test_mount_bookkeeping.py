# SPDX-License-Identifier: MIT
"""Mount bookkeeping that cannot go stale (issue 61, item 3): mount,
unmount and session end are serialized per mountpoint and per session.

  - N concurrent mounts of one path: exactly one 201, the rest
    already_mounted, and one mount in /proc/self/mounts;
  - session end racing mounts of the session: no mount outlives its
    session, nothing the daemon does not list is mounted, no request hangs;
  - an unmount from outside (fusermount3 -u, umount) is noticed: the mount
    leaves the list and the directory mounts again;
  - a dead mount left by a killed daemon is detached by the next mount there;
  - SIGTERM while mounts are being made leaves nothing mounted (the fixture's
    stop_and_check)."""
import errno
import os
import subprocess
import threading
import time

import pytest

from conftest import mounts_under
from ctl_fixtures import Daemon, daemon, stop_and_check  # noqa: F401


def fuse_mounts_at(path):
    path = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        return [l for l in f if l.split()[1] == path]


def concurrently(n, fn):
    """Runs fn(i) in n threads released at once; returns their results."""
    out = [None] * n
    gate = threading.Barrier(n)

    def run(i):
        gate.wait()
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out[i] = e
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
        assert not t.is_alive(), "a request hung"
    return out


def test_sixteen_concurrent_mounts_of_one_path(daemon, scratch):
    daemon.ok("session", "new", "one")
    mp = os.path.join(scratch, "mp")
    os.mkdir(mp)
    for rnd in range(5):
        res = concurrently(16, lambda i: daemon.http("POST", "/v1/mounts", {"session": "one", "mountpoint": mp},
                                                     timeout=60))
        assert all(not isinstance(r, Exception) for r in res), res
        statuses = sorted(r.status for r in res)
        assert statuses.count(201) == 1, (rnd, statuses)
        assert all(r.code == "already_mounted" for r in res if r.status != 201), [r for r in res]
        assert len(fuse_mounts_at(mp)) == 1, fuse_mounts_at(mp)
        listed = [m["mountpoint"] for m in daemon.http("GET", "/v1/mounts").json["mounts"]]
        assert listed == [os.path.realpath(mp)], listed
        assert daemon.http("POST", "/v1/mounts/unmount", {"mountpoint": mp}).status == 200
        assert not fuse_mounts_at(mp)
    daemon.healthy()


def test_session_end_racing_mounts_leaves_no_orphan(daemon, scratch):
    rounds = 200
    for rnd in range(rounds):
        name = f"r{rnd}"
        daemon.ok("session", "new", name)
        mps = [os.path.join(scratch, f"m{rnd}-{i}") for i in range(3)]
        for p in mps:
            os.mkdir(p)

        def act(i):
            if i == 0:
                return daemon.http("DELETE", f"/v1/sessions/{name}", timeout=60)
            return daemon.http("POST", "/v1/mounts", {"session": name, "mountpoint": mps[i - 1]}, timeout=60)
        res = concurrently(4, act)
        assert all(not isinstance(r, Exception) for r in res), (rnd, res)
        assert res[0].status == 200, (rnd, res[0])
        for r in res[1:]:
            assert r.status == 201 or r.code == "session_not_found", (rnd, r)
        # whatever mounted before the end was unmounted by it; nothing after
        listed = [m for m in daemon.http("GET", "/v1/mounts").json["mounts"] if m.get("session") == name]
        assert not listed, (rnd, listed)
        left = [p for p in mps if fuse_mounts_at(p)]
        assert not left, (rnd, left)
        for p in mps:
            os.rmdir(p)
    assert not mounts_under(scratch)
    assert daemon.http("GET", "/v1/sessions").json["sessions"] == []
    daemon.healthy()


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_unmount_from_outside_is_noticed(daemon, scratch):
    daemon.ok("session", "new", "out")
    mp = os.path.join(scratch, "out")
    os.mkdir(mp)
    daemon.ok("mount", "out", mp)
    with open(os.path.join(mp, "kept.txt"), "w") as f:
        f.write("written before the unmount\n")
    subprocess.run(["fusermount3", "-u", mp], check=True)

    def listed():
        return [m["mountpoint"] for m in daemon.http("GET", "/v1/mounts").json["mounts"]]
    assert wait_for(lambda: listed() == []), listed()
    assert "out" not in daemon.ok("mounts")
    # the same directory mounts again, with the work written before
    daemon.ok("mount", "out", mp)
    with open(os.path.join(mp, "kept.txt")) as f:
        assert f.read() == "written before the unmount\n"
    assert listed() == [os.path.realpath(mp)]
    # an unmount from outside with umount(8) as well
    subprocess.run(["umount", mp], check=True)
    assert wait_for(lambda: listed() == []), listed()
    r = daemon.http("POST", "/v1/mounts/unmount", {"mountpoint": mp})
    assert r.status == 404 and r.code == "not_found", r
    daemon.ok("mount", "out", mp)
    daemon.ok("umount", mp)
    daemon.healthy()


def test_a_crashed_daemons_dead_mount_is_mounted_again(scratch):
    d = Daemon(scratch)
    try:
        d.ok("session", "new", "dead")
        mp = os.path.join(scratch, "dead")
        os.mkdir(mp)
        d.ok("mount", "dead", mp)
        with open(os.path.join(mp, "f"), "w") as f:
            f.write("x\n")
        d.ok("checkpoint", "dead")
    except BaseException:
        d.stop()
        raise
    d.kill()  # not stop(): that would detach the dead mount itself
    d.log.close()
    with pytest.raises(OSError) as e:
        os.stat(os.path.join(mp, "f"))
    assert e.value.errno == errno.ENOTCONN
    # a dead mount the next daemon has no record of (its list is remounted
    # by itself: test_the_mount_list_after_a_crash_equals_the_one_before)
    os.unlink(os.path.join(scratch, "store", "mounts.json"))
    d = Daemon(scratch)
    try:
        out = d.ok("mount", "dead", mp)  # the dead mount is detached, not "not_a_directory"
        assert out.startswith(f"mounted dead at {mp}"), out
        with open(os.path.join(mp, "f")) as f:
            assert f.read() == "x\n"
        assert len(fuse_mounts_at(mp)) == 1
        d.ok("umount", mp)
        d.healthy()
    finally:
        stop_and_check(d, scratch)


def test_the_mount_list_after_a_crash_equals_the_one_before(scratch):
    """Issue 61: after a kill -9 the restarted ntfsd listed no mounts. The
    mounts made for clients are recorded (STORE/mounts.json) and made again
    at start, each at its mountpoint (the dead mount detached); a clean stop
    leaves nothing to remount."""
    d = Daemon(scratch)
    try:
        d.ok("session", "new", "live")
        rw = os.path.join(scratch, "rw")
        ro = os.path.join(scratch, "ro")
        os.mkdir(rw)
        os.mkdir(ro)
        d.ok("mount", "live", rw, "--autocheckpoint", "5", "--relatime")
        with open(os.path.join(rw, "f"), "w") as f:
            f.write("tagged\n")
        d.ok("checkpoint", "live")
        d.ok("tag", "live", "t1")
        d.ok("mount", "live", ro, "--at", "t1")
        before = sorted(d.http("GET", "/v1/mounts").json["mounts"], key=lambda m: m["mountpoint"])
        assert len(before) == 2
        assert [m["relatime"] for m in before] == [False, True]  # ro, rw: options come back too
    except BaseException:
        d.stop()
        raise
    d.kill()
    d.log.close()
    d = Daemon(scratch)
    try:
        after = sorted(d.http("GET", "/v1/mounts").json["mounts"], key=lambda m: m["mountpoint"])
        assert after == before
        for p in (rw, ro):
            with open(os.path.join(p, "f")) as f:
                assert f.read() == "tagged\n"
            assert len(fuse_mounts_at(p)) == 1, fuse_mounts_at(p)
        with open(os.path.join(rw, "g"), "w") as f:  # the rw one is writable again
            f.write("after\n")
        d.healthy()
    finally:
        stop_and_check(d, scratch)  # SIGTERM: everything unmounted
    d = Daemon(scratch)  # a clean stop before: nothing is mounted again
    try:
        assert d.http("GET", "/v1/mounts").json["mounts"] == []
        assert not fuse_mounts_at(rw) and not fuse_mounts_at(ro)
    finally:
        stop_and_check(d, scratch)
