# SPDX-License-Identifier: MIT
"""A full disk under a live mount (issue 3: "a clean ENOSPC when the disk is
full; the store stays consistent"). The store lives on a small tmpfs; a
mounted session writes until the store refuses, and then: the error is
ENOSPC, the store kept its reserve, the daemon still answers, a checkpoint
(which would need as much space again) fails with no_space and loses
nothing, deleting gives the space back, writes and checkpoints work again
and fsck is clean. In the second test another program fills the disk under
the mount; what the store acknowledged must still survive a restart.

Needs root (it mounts a tmpfs), as the rest of the suite does.
"""
import contextlib
import errno
import os
import random
import subprocess
import tempfile
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


@contextlib.contextmanager
def stopped_cleanly(d):
    """Yields the daemon; stops it however the body ends, then (when the
    body passed) checks it exited 0 with no sanitizer report."""
    try:
        yield d
    finally:
        rc = d.stop()
        errs = d.sanitizer_errors()
    assert not errs, errs
    assert rc == 0, d.log_text()[-3000:]


def test_full_disk_gives_enospc_and_keeps_the_store(scratch):
    if os.geteuid() != 0:
        pytest.fail("needs root to mount a tmpfs (the suite runs as root)")
    store = os.path.join(scratch, "store")
    os.mkdir(store)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0700", "tmpfs", store], check=True)
    with stopped_cleanly(Daemon(scratch)) as d:  # its stop also lazy-unmounts the tmpfs
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
        # the store refuses while its 64 MiB reserve for LMDB's commits is
        # still held (allocated in LMDB's file past what it uses), however
        # big the writes (docs/store.md)
        held = os.stat(f"{store}/data.mdb").st_blocks * 512 - d.jok("status")["used_bytes"]
        assert held >= 56 * MIB, f"reserve eaten: {held >> 20} MiB held"

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


def test_disk_filled_by_another_program_loses_nothing_acknowledged(scratch):
    """Something else fills the disk under a live mount. Files written (not
    fsync'd), small ones inline and bigger ones through the working data
    file, then are either refused with ENOSPC or kept: the store's held
    reserve lets the background commits that carry them go through, so
    nothing a program was told it wrote is lost, and after a restart every
    such file is there. Before the reserve was held, the first background
    commit failed and dropped them silently. A jailed command meanwhile is
    either run and journaled or refused with no_space, and the journal
    holds exactly the commands that ran, each done."""
    if os.geteuid() != 0:
        pytest.fail("needs root to mount a tmpfs (the suite runs as root)")
    # the disk outside scratch: the daemon's teardown unmounts what is
    # under scratch, and the store must outlive the first daemon
    disk = tempfile.mkdtemp(prefix="ntfs-disk-", dir="/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0700", "tmpfs", disk], check=True)
    try:
        filled_by_another(scratch, disk)
    finally:
        subprocess.run(["umount", "-l", disk], capture_output=True)
        os.rmdir(disk)


def filled_by_another(scratch, disk):
    os.mkdir(f"{disk}/store")
    os.symlink(f"{disk}/store", os.path.join(scratch, "store"))
    mp = os.path.join(scratch, "m")
    os.mkdir(mp)
    kept = {}
    with stopped_cleanly(Daemon(scratch)) as d:
        d.ok("session", "new", "main")
        d.ok("mount", "main", mp)
        write_synced(f"{mp}/before", b"before\n")
        assert d.ok("exec", "main", "--", "echo", "one") == "one\n"
        # another program takes every free block
        with open(f"{disk}/filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * MIB)
                    f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC
        for i in range(200):
            data = f"file {i}\n".encode() * (i % 7 + 1)
            # and one too big to stay inline: its bytes go to the
            # working data file, whose write must get the ENOSPC itself
            big = random.Random(i).randbytes(3000 + (i * 997) % 40000)
            for name, content in ((f"f{i}", data), (f"g{i}", big)):
                try:
                    with open(f"{mp}/{name}", "wb") as f:
                        f.write(content)
                    kept[name] = content
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
        assert kept, "nothing could be written at all"
        # a jailed command: run and journaled, or refused because the
        # journal cannot record it; never a half-recorded effect
        r = d.ctl("exec", "main", "--", "echo", "two")
        assert (r.returncode, r.stdout) == (0, "two\n") or (r.returncode == 1 and "(no_space)" in r.stderr), r
        ran = ["echo one"] + (["echo two"] if r.returncode == 0 else [])
        time.sleep(1)  # several background commits
        assert "background flush failed" not in d.log_text(), d.log_text()[-2000:]
        os.unlink(f"{disk}/filler")
        assert d.ok("exec", "main", "--", "echo", "three") == "three\n"
        ran.append("echo three")
        d.ok("umount", mp)

    with stopped_cleanly(Daemon(scratch)) as d:  # a new daemon on the same store
        d.fsck_clean()
        effects = d.jok("effects", "main")["effects"]
        assert sorted((e["input"]["command"], e["status"]) for e in effects) == sorted((c, "done") for c in ran), effects
        d.ok("mount", "main", mp)
        with open(f"{mp}/before", "rb") as f:
            assert f.read() == b"before\n"
        for name, data in kept.items():
            with open(f"{mp}/{name}", "rb") as f:
                assert f.read() == data, name
        d.ok("umount", mp)
