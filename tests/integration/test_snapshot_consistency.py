# SPDX-License-Identifier: MIT
"""A fork or checkpoint of a live session holds a state the program could
have observed between two of its operations (issue 61, item 4;
docs/mount.md, "What a checkpoint of a live mount holds").

  test_forks_match_the_writers_record
        a writer process runs fsx-like random operations on one file of a
        mounted session: write(2) (some larger than the mount's 1 MiB
        max_write, so the kernel sends them as several WRITE requests),
        truncate, stores into a persistent MAP_SHARED mapping left dirty,
        msync, read and mapped read (both checked against its own model);
        it logs when each operation started and returned. Meanwhile the test
        takes a fork or a checkpoint every NTFS_SNAP_INTERVAL seconds
        (default 0.25). Afterwards every fork and checkpoint is exported and
        its file must equal the writer's model after some operation j with
        j >= the last operation that returned before the request was sent
        and j <= the last operation that started before its answer came.
        One relaxation, the only one the kernel leaves possible: when a store
        into the mapping (a memcpy, which has no boundary the kernel sees)
        ran while the request was served, the bytes of that store's range
        may each be old or new.

NTFS_SNAP_SECONDS (default 15) sets the writer's run time; NTFS_SNAP_SEED
the seed (the writer is deterministic given the seed; only its timing is
not). The writer is this file run as a script.
"""
import hashlib
import io
import json
import mmap
import os
import random
import subprocess
import sys
import tarfile
import time

FILE_MAX = 3 * 1024 * 1024
PAGE = 4096


# ---- the writer (run as a script) ------------------------------------------

def gen_ops(seed):
    """The writer's operations, endless and deterministic given the seed:
    (kind, offset, length, fill byte)."""
    rng = random.Random(seed)
    size = 0
    while True:
        k = rng.choice(["write", "write", "bigwrite", "truncate", "mapstore", "mapstore", "mapstore",
                        "msync", "read", "mapread"])
        if k in ("mapstore", "mapread", "read", "msync") and size == 0:
            k = "write"
        if k == "write":
            off = rng.randrange(0, FILE_MAX - 65536)
            ln = rng.randrange(1, 65536)
        elif k == "bigwrite":
            # 1-2.5 MiB: two or three WRITE requests (max_write 1 MiB)
            off = rng.randrange(0, FILE_MAX // 2)
            ln = rng.randrange(1024 * 1024, 5 * 512 * 1024)
        elif k == "truncate":
            off, ln = rng.randrange(0, FILE_MAX), 0
        elif k == "mapstore":
            off = rng.randrange(0, size)
            ln = rng.randrange(1, min(size - off, 1024 * 1024) + 1)
        else:
            off = rng.randrange(0, size)
            ln = rng.randrange(1, min(size - off, 256 * 1024) + 1)
        fill = rng.randrange(1, 256)
        if k in ("write", "bigwrite"):
            size = max(size, off + ln)
        elif k == "truncate":
            size = off
        yield k, off, ln, fill


def apply_op(model, op):
    """The writer's model after op (model: bytearray, changed in place)."""
    k, off, ln, fill = op
    if k in ("write", "bigwrite", "mapstore"):
        if off + ln > len(model):
            model.extend(bytes(off + ln - len(model)))
        model[off:off + ln] = bytes([fill]) * ln
    elif k == "truncate":
        if off < len(model):
            del model[off:]
        else:
            model.extend(bytes(off - len(model)))


def writer_main(path, seconds, seed, log_path):
    """Runs the operations on path for `seconds`, appending one JSON line
    per operation to log_path: [index, start, end] (CLOCK_MONOTONIC, which
    the test's clock shares). Exits 1 on a read that disagrees with the
    model."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    model = bytearray()
    mp = None  # the persistent shared mapping (of len(model) bytes)
    log = open(log_path, "w")
    stop = time.monotonic() + seconds
    for i, op in enumerate(gen_ops(seed)):
        if time.monotonic() > stop:
            break
        k, off, ln, fill = op
        # A size change unmaps first (munmap writes the dirty pages back
        # and waits: fuse's vma close), so stores never meet SIGBUS.
        if mp is not None and k in ("truncate", "write", "bigwrite") and \
                (k == "truncate" or off + ln > len(model)):
            mp.close()
            mp = None
        t0 = time.monotonic()
        if k in ("write", "bigwrite"):
            n = os.pwrite(fd, bytes([fill]) * ln, off)
            assert n == ln, (n, ln)
        elif k == "truncate":
            os.ftruncate(fd, off)
        elif k == "mapstore":
            if mp is None:
                mp = mmap.mmap(fd, len(model), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            mp[off:off + ln] = bytes([fill]) * ln
        elif k == "msync":
            if mp is not None:
                mp.flush()
        elif k == "read":
            got = os.pread(fd, ln, off)
        elif k == "mapread":
            if mp is None:
                mp = mmap.mmap(fd, len(model), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            got = mp[off:off + ln]
        t1 = time.monotonic()
        if k in ("read", "mapread") and got != model[off:off + ln]:
            print(f"writer: op {i} {op}: read back differs from the model", file=sys.stderr)
            sys.exit(1)
        apply_op(model, op)
        log.write(json.dumps([i, t0, t1]) + "\n")
    if mp is not None:
        mp.close()
    os.close(fd)
    log.close()


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "writer":
    writer_main(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    sys.exit(0)


# ---- the test ----------------------------------------------------------------


from ctl_fixtures import daemon  # noqa: E402,F401  (fixture)

SECONDS = float(os.environ.get("NTFS_SNAP_SECONDS", "15"))
INTERVAL = float(os.environ.get("NTFS_SNAP_INTERVAL", "0.25"))
SEED = int(os.environ.get("NTFS_SNAP_SEED", str(int(time.time()) % 100000)))


def file_of(daemon, ref):
    r = subprocess.run([daemon.ctl_bin, "--socket", daemon.sock, "export", ref, "-", "--no-sync"],
                       capture_output=True, timeout=120)
    assert r.returncode == 0, f"export {ref}: {r.stderr.decode(errors='replace')}"
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
        for m in tf.getmembers():
            if m.name.lstrip("./") == "f":
                return tf.extractfile(m).read()
    return None


def window(log, t0, t1):
    """The operations a snapshot requested at t0 and answered at t1 may
    hold: a = the last that returned before t0 (it and every one before it
    must be held), b = the last that started before t1 (none after it may
    be)."""
    a = max((i for i, s, e in log if e <= t0), default=-1)
    b = max((i for i, s, e in log if s < t1), default=-1)
    return a, b


def judge(data, states, a, b):
    """Which state data is: ('ok', j), ('torn', j) or ('none', None).
    states[j + 1] = (op j, hash of the model after it, the model or None)."""
    h = hashlib.sha256(data).digest()
    for j in range(a, b + 1):
        if states[j + 1][1] == h:
            return "ok", j
    # Stores into the mapping made while the request was served (a memcpy
    # has no boundary the kernel sees; page write-back copies what memory
    # holds then): a byte in such a store's range may hold any value it had
    # in the window. Every other byte and the size must be one state's.
    stores = [states[i + 1][0] for i in range(a + 1, b + 1) if states[i + 1][0][0] == "mapstore"]
    if not stores:
        return "none", None
    lo = a + 1  # states[lo] is the model after op a
    for j in range(a, b + 1):
        base = states[j + 1][2]
        if len(base) != len(data):
            continue
        ok = True
        for p in range(0, len(data), PAGE):
            if data[p:p + PAGE] == base[p:p + PAGE]:
                continue
            for x in range(p, min(p + PAGE, len(data))):
                if data[x] == base[x]:
                    continue
                if not any(off <= x < off + ln for _, off, ln, _ in stores) or \
                        not any(x < len(states[i][2]) and states[i][2][x] == data[x] for i in range(lo, b + 2)):
                    ok = False
                    break
            if not ok:
                break
        if ok:
            return "torn", j
    return "none", None


def explain(data, states, a, b):
    """For a failure message: against each state of the window with data's
    size, the byte ranges that differ."""
    out = []
    for j in range(a, b + 1):
        base = states[j + 1][2]
        if base is None or len(base) != len(data):
            continue
        runs, x = [], 0
        while x < len(data) and len(runs) < 4:
            if data[x] == base[x]:
                x += 1
                continue
            y = x
            while y < len(data) and data[y] != base[y]:
                y += 1
            runs.append(f"[{x},{y}) holds {data[x]}")
            x = y
        out.append(f"vs after op {j}: " + " ".join(runs))
    return "; ".join(out) or "no state of the window has its size"


def test_forks_match_the_writers_record(daemon, scratch):  # noqa: F811
    daemon.ok("session", "new", "w")
    mp = os.path.join(scratch, "mp")
    os.mkdir(mp)
    daemon.ok("mount", "w", mp)
    log_path = os.path.join(scratch, "ops.log")
    writer = subprocess.Popen([sys.executable, os.path.abspath(__file__), "writer", os.path.join(mp, "f"),
                               str(SECONDS), str(SEED), log_path], stderr=subprocess.PIPE, text=True)
    snaps = []  # (kind, ref, t0, t1)
    n = 0
    try:
        time.sleep(0.2)
        while writer.poll() is None:
            n += 1
            t0 = time.monotonic()
            if n % 2:
                r = daemon.http("POST", "/v1/sessions/w/fork", {"name": f"f{n}"})
                t1 = time.monotonic()
                assert r.status == 201, r
                snaps.append(("fork", f"f{n}", t0, t1))
            else:
                r = daemon.http("POST", "/v1/sessions/w/checkpoint", {"message": f"c{n}"})
                t1 = time.monotonic()
                assert r.status == 200, r
                snaps.append(("checkpoint", "w@" + r.json["commit"], t0, t1))
            time.sleep(INTERVAL)
        err = writer.stderr.read()
        assert writer.wait() == 0, f"writer failed (seed {SEED}): {err}"
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        daemon.ok("umount", mp)

    with open(log_path) as f:
        log = [tuple(json.loads(line)) for line in f]
    assert len(log) > 100, f"the writer ran only {len(log)} operations"
    # Replay the model; keep whole states only inside some snapshot's window.
    windows = [window(log, t0, t1) for _, _, t0, t1 in snaps]
    keep = set()
    for a, b in windows:
        keep.update(range(a, b + 1))
    ops = gen_ops(SEED)
    model = bytearray()
    states = [(("none", 0, 0, 0), hashlib.sha256(b"").digest(), b"")]
    for i, s, e in log:
        op = next(ops)
        apply_op(model, op)
        if i in keep:
            states.append((op, hashlib.sha256(model).digest(), bytes(model)))
        else:
            states.append((op, None, None))
    kinds = {}
    bad = []
    for (kind, ref, t0, t1), (a, b) in zip(snaps, windows):
        data = file_of(daemon, ref)
        if data is None:
            data = b""  # the fork came before the file was created
        verdict, j = judge(data, states, a, b)
        kinds[verdict] = kinds.get(verdict, 0) + 1
        if verdict == "none":
            bad.append(f"{kind} {ref}: {len(data)} bytes, ops {a}..{b} allowed: "
                       + ", ".join(f"{i}:{states[i + 1][0]}" for i in range(max(a - 2, 0), b + 2)
                                   if i + 1 < len(states))
                       + "; " + explain(data, states, a, b))
    print(f"seed {SEED}: {len(log)} operations, {len(snaps)} snapshots: {kinds}")
    assert not bad, f"seed {SEED}: snapshots equal to no state of the writer: {bad}"
    assert kinds.get("ok", 0) > 0
    daemon.fsck_clean()
