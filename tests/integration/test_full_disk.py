# SPDX-License-Identifier: MIT
"""A full disk under a live mount (issue 3: "a clean ENOSPC when the disk is
full; the store stays consistent"). The store lives on a small tmpfs; a
mounted session writes until the store refuses, and then: the error is
ENOSPC, the store kept its reserve, the daemon still answers, a checkpoint
(which would need as much space again) fails with no_space and loses
nothing, deleting gives the space back, writes and checkpoints work again
and fsck is clean.

Needs root (it mounts a tmpfs), as the rest of the suite does.
"""
import errno
import os
import random
import subprocess
import time

import pytest

from ctl_fixtures import Daemon

MIB = 1 << 20


def block(i):
    """The i-th MiB of the big file: incompressible and all different, so
    that a checkpoint cannot store it in less than it takes."""
    return random.Random(i).randbytes(MIB)


def fill(path, limit):
    """Writes 1 MiB blocks (fsync every 4) until an OSError; returns (bytes
    written and synced, errno)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done = 0
    try:
        while done < limit:
            for i in range(4):
                os.write(fd, block(done // MIB + i))
            os.fsync(fd)
            done += 4 * MIB
    except OSError as e:
        try:
            os.close(fd)
        except OSError:
            pass
        return done, e.errno
    os.close(fd)
    return done, None


def write_synced(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def test_full_disk_gives_enospc_and_keeps_the_store(scratch):
    if os.geteuid() != 0:
        pytest.fail("needs root to mount a tmpfs (the suite runs as root)")
    store = os.path.join(scratch, "store")
    os.mkdir(store)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0700", "tmpfs", store], check=True)
    d = Daemon(scratch)
    try:
        d.ok("session", "new", "main")
        mp = os.path.join(scratch, "m")
        os.mkdir(mp)
        d.ok("mount", "main", mp)
        keep = os.urandom(3 * MIB + 123)
        write_synced(f"{mp}/keep", keep)
        d.ok("checkpoint", "main", "-m", "before the disk filled")

        done, err = fill(f"{mp}/big", 400 * MIB)
        assert err == errno.ENOSPC, (done, err and errno.errorcode.get(err))
        assert done >= 16 * MIB  # it refused when the disk was near full, not at once
        sv = os.statvfs(store)
        # the store refuses while its 64 MiB reserve (for LMDB's commits) is
        # still free, however big the writes (docs/store.md)
        assert sv.f_bavail * sv.f_frsize >= 56 * MIB, f"reserve eaten: {sv.f_bavail * sv.f_frsize >> 20} MiB free"

        # the daemon answers; a checkpoint, which would need as much again
        # for the big file's objects, fails with no_space and changes
        # nothing: the store is clean and every fsync'd byte reads back
        assert d.jok("status")["sessions"] == 1
        r = d.ctl("checkpoint", "main", "-m", "on a full disk")
        assert r.returncode == 1 and "no_space" in r.stderr, (r.returncode, r.stdout, r.stderr)
        d.fsck_clean()
        with open(f"{mp}/keep", "rb") as f:
            assert f.read() == keep
        assert os.stat(f"{mp}/big").st_size >= done
        with open(f"{mp}/big", "rb") as f:
            for i in range(done // MIB):
                assert f.read(MIB) == block(i), f"MiB {i} of the big file changed"

        # deleting gives the space back (the slots are freed at the next
        # commit and punched out by the flusher): writes work again
        os.unlink(f"{mp}/big")
        after = os.urandom(8 * MIB)
        deadline = time.monotonic() + 20
        while True:
            try:
                write_synced(f"{mp}/after", after)
                break
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                assert time.monotonic() < deadline, "space never came back after the delete"
                time.sleep(0.2)
        d.ok("checkpoint", "main", "-m", "after")
        with open(f"{mp}/after", "rb") as f:
            assert f.read() == after
        with open(f"{mp}/keep", "rb") as f:
            assert f.read() == keep
        d.ok("umount", mp)
        d.fsck_clean()
        assert d.jok("status")["data_bytes"] < 8 * MIB
    finally:
        rc = d.stop()  # also lazy-unmounts the tmpfs under scratch
        errs = d.sanitizer_errors()
    assert not errs, errs
    assert rc == 0, d.log_text()[-3000:]
