#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""crash-loop-fs: kill -9 of ntfsd under a file write workload on several
mounted sessions with checkpoints going on (issue 12; docs/reliability.md).

ntfsd runs with SESSIONS sessions (default 3), each mounted through the
control plane (POST /v1/mounts). On each mount a writer thread creates
write-once files with unique names, overwrites files in place, appends to
them, replaces them atomically (write a temporary, fsync, rename over),
renames and unlinks files, creates directories, and fsyncs some of it; a
checkpointer thread per session checkpoints through the API. Then ntfsd is
killed with SIGKILL at a random moment (some kills wait for a checkpoint to
be in flight), the dead mounts are lazily unmounted (fusermount3 -uz),
ntfsd is restarted, the sessions are mounted again and everything is checked.

An append-only log OUTSIDE the store (scratch/claims.log, one JSON object a
line, fsync'd by the harness after every claim) records:

  {"t":"begin","s":S,"p":[paths]}   a change of these paths starts (written
                                    BEFORE the first syscall that changes them)
  {"t":"fsync","s":S,"p":P,"h":H}   fsync of P returned; P's content has hash H
  {"t":"gone","s":S,"p":P}          P was unlinked/renamed away and an fsync
                                    of its directory returned
  {"t":"ckpt","s":S,"c":C,"files":{P:H}}  checkpoint C was acknowledged; the
                                    files that were complete (closed) before the
                                    request and untouched until the answer
  {"t":"state","s":S,"p":P,"h":H}   after a restart: the content found (the
                                    store's file is on disk, so it is durable)
  {"t":"kill","n":N}

The checker (verify(), which reads the log FILE, not the harness's memory)
replays it per session: a path's last record decides what it must be after
a kill: `fsync`/`state` -> present with exactly that content; `gone` ->
absent; `begin` -> anything (a change was in flight); a `ckpt` makes its
files durable too (the design promises the working state holds everything
checkpointed). Writers log `begin` and checkpointers log `ckpt` under one
lock, so the log's order is the order of the events. Every `ckpt` is
checked once in full: the commit is in the session's history (GET .../log)
and a read-only mount of it (POST /v1/mounts with "at") has exactly the
recorded content for every recorded file; every earlier one must still be
in the history after every restart. After every restart: `ntfs-ctl fsck`
is clean, no journal effect is pending, every done effect's commit_after is
in the history (the journal agrees with the store; with --exec the loop
also runs a jailed command on session 0 now and then).

The seed is printed; the writers' and checkpointers' choices come from it
(the kill moments depend on timing, so a run repeats the same operations,
not the same interleaving). --inject ckpt|fsync appends a false claim to the
log before the final check (a checkpoint that does not exist / a wrong hash
for an fsync'd file): the check must then report a loss (exit 1).

Usage: NTFS_BUILD=build tools/crash-loop-fs.py [--kills N] [--sessions N] [--seed S]
         [--max-delay SECS] [--exec|--exec-shared] [--inject ckpt|fsync] [--progress N]
         [--dir DIR] [--keep]
Exit 0: every check held; 1: a loss or a failed check; 2: setup.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from recovery_fixtures import Runner, find_bin, lazy_unmount, mounts_under  # noqa: E402

SIZES = [0, 1, 17, 511, 4096, 5000, 12000, 65536, 65537, 70000, 150000]
SIZE_W = [2, 3, 6, 6, 6, 6, 6, 1, 1, 1, 1]
MAX_FILES = 60          # write-once files kept per session (older ones are unlinked)
OVERWRITE = ["o0.dat", "o1.dat", "d/o2.dat"]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def thread_states(pid):
    """'tid state wchan' of every thread of pid that is not a zombie."""
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/task/{t}/wchan") as f:
                wchan = f.read().strip()
            if st != "Z":
                try:
                    with open(f"/proc/{pid}/task/{t}/stack") as f:
                        stack = " < ".join(l.split()[1].split("+")[0] for l in f.read().splitlines()[:8])
                except (OSError, IndexError):
                    stack = ""
                out.append(f"thread {t} {st} {wchan} [{stack}]")
    except OSError:
        pass
    return out


class Log:
    """The append-only claim log: one line per record, fsync'd for claims."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.lock = threading.RLock()

    def put(self, rec, sync=True):
        line = (json.dumps(rec, sort_keys=True, separators=(",", ":")) + "\n").encode()
        with self.lock:
            n = os.write(self.fd, line)
            assert n == len(line)
            if sync:
                os.fsync(self.fd)

    def close(self):
        os.close(self.fd)


class Session:
    """Harness state of one session (stable and windows under the log's lock;
    the rest belongs to the session's writer thread)."""

    def __init__(self, name, mnt, rnd):
        self.name, self.mnt, self.rnd = name, mnt, rnd
        self.stable = {}        # path -> bytes: complete (closed), content known
        self.once = []          # write-once files (paths), oldest first
        self.windows = []       # touched-path sets of checkpoints in flight
        self.seq = 0
        self.dirs = ["f"]
        self.ops = 0


class Loop:
    def __init__(self, a, seed, scratch):
        self.a, self.seed, self.scratch = a, seed, scratch
        self.r = Runner(scratch)
        self.log = Log(os.path.join(scratch, "claims.log"))
        self.lock = self.log.lock
        self.sessions = []
        self.killing = threading.Event()
        self.stop = threading.Event()
        self.problems = []
        self.seen = set()
        self.ckpt_inflight = 0
        self.n_ckpt = 0
        self.n_exec = 0
        self.verified_ckpts = set()
        self.claims_verified = set()
        self.counts = {"kills": 0, "kills_in_ckpt": 0, "ckpt_verified": 0, "fsync_files_verified": 0, "absent_verified": 0,
                       "fsyncs": 0, "ops": 0, "ckpt_acked": 0, "ckpt_files_verified": 0}

    # ---- the workload ----------------------------------------------------

    def problem(self, msg):
        """Records a loss once (a lost file is found again after every later kill)."""
        key = msg.split(": ", 1)[1] if msg.startswith(("after kill", "final check")) else msg
        with self.lock:
            if key in self.seen:
                return
            self.seen.add(key)
            self.problems.append(msg)
        print(f"crash-loop-fs: PROBLEM: {msg}", file=sys.stderr, flush=True)

    def begin(self, s, paths):
        """Marks paths as changing (log first, then the syscalls)."""
        with self.lock:
            for p in paths:
                s.stable.pop(p, None)
                for w in s.windows:
                    w.add(p)
            self.log.put({"t": "begin", "s": s.name, "p": list(paths)}, sync=False)

    def done(self, s, p, data, synced):
        with self.lock:
            s.stable[p] = data
            if synced:
                self.counts["fsyncs"] += 1
                self.log.put({"t": "fsync", "s": s.name, "p": p, "h": sha(data)})

    def gone(self, s, p):
        with self.lock:
            self.log.put({"t": "gone", "s": s.name, "p": p})

    def fsync_path(self, path, directory=False):
        fd = os.open(path, (os.O_RDONLY | os.O_DIRECTORY if directory else os.O_RDONLY) | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_file(self, path, data, flags, pieces):
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | flags, 0o644)
        try:
            off = 0
            step = max(1, len(data) // pieces + 1)
            while off < len(data):
                n = os.write(fd, data[off:off + step])
                off += n
            return fd
        except BaseException:
            os.close(fd)
            raise

    def one_op(self, s):
        rnd = s.rnd
        m = s.mnt
        x = rnd.random()
        s.ops += 1
        if x < 0.45 or not s.once:
            # a new write-once file with a unique name
            s.seq += 1
            d = rnd.choice(s.dirs)
            p = f"{d}/w{s.seq}.dat"
            data = rnd.randbytes(rnd.choices(SIZES, SIZE_W)[0])
            sync = rnd.random() < 0.6
            self.begin(s, [p])
            fd = self.write_file(os.path.join(m, p), data, os.O_CREAT | os.O_EXCL, rnd.randint(1, 3))
            try:
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            s.once.append(p)
            self.done(s, p, data, sync)
            if len(s.once) > MAX_FILES:
                old = s.once.pop(0)
                self.begin(s, [old])
                os.unlink(os.path.join(m, old))
                self.fsync_path(os.path.join(m, os.path.dirname(old)), directory=True)
                self.gone(s, old)
        elif x < 0.60:
            # overwrite in place (O_TRUNC), sometimes fsync'd
            p = rnd.choice(OVERWRITE)
            data = rnd.randbytes(rnd.choices(SIZES, SIZE_W)[0])
            sync = rnd.random() < 0.5
            self.begin(s, [p])
            fd = self.write_file(os.path.join(m, p), data, os.O_CREAT | os.O_TRUNC, rnd.randint(1, 3))
            try:
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self.done(s, p, data, sync)
        elif x < 0.72:
            # append to an overwrite file whose content is known
            p = rnd.choice(OVERWRITE)
            with self.lock:
                old = s.stable.get(p)
            if old is None:
                return
            add = rnd.randbytes(rnd.randint(1, 9000))
            sync = rnd.random() < 0.5
            self.begin(s, [p])
            fd = self.write_file(os.path.join(m, p), add, os.O_APPEND, 1)
            try:
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self.done(s, p, old + add, sync)
        elif x < 0.80:
            # atomic replace: temporary, fsync, rename over, fsync
            p = rnd.choice(OVERWRITE)
            tmp = p + ".tmp"
            data = rnd.randbytes(rnd.choices(SIZES, SIZE_W)[0])
            self.begin(s, [p, tmp])
            fd = self.write_file(os.path.join(m, tmp), data, os.O_CREAT | os.O_TRUNC, 1)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(os.path.join(m, tmp), os.path.join(m, p))
            self.fsync_path(os.path.join(m, p))
            self.gone(s, tmp)
            self.done(s, p, data, True)
        elif x < 0.90:
            # rename a write-once file (to a new unique name, maybe another dir)
            with self.lock:
                cand = [q for q in s.once if q in s.stable]
            if not cand:
                return
            a = rnd.choice(cand)
            s.seq += 1
            b = f"{rnd.choice(s.dirs)}/r{s.seq}.dat"
            with self.lock:
                data = s.stable[a]
            self.begin(s, [a, b])
            os.rename(os.path.join(m, a), os.path.join(m, b))
            s.once[s.once.index(a)] = b
            if rnd.random() < 0.6:
                self.fsync_path(os.path.join(m, b))
                self.gone(s, a)
                self.done(s, b, data, True)
            else:
                self.done(s, b, data, False)
        elif x < 0.95:
            # unlink a write-once file
            a = rnd.choice(s.once)
            self.begin(s, [a])
            os.unlink(os.path.join(m, a))
            s.once.remove(a)
            if rnd.random() < 0.5:
                self.fsync_path(os.path.join(m, os.path.dirname(a)), directory=True)
                self.gone(s, a)
        elif len(s.dirs) < 6:
            s.seq += 1
            d = f"f/d{s.seq}"
            os.mkdir(os.path.join(m, d))
            self.fsync_path(os.path.join(m, "f"), directory=True)
            s.dirs.append(d)
        with self.lock:
            self.counts["ops"] += 1

    def writer(self, s):
        try:
            while not self.stop.is_set():
                self.one_op(s)
                if self.a.pace:
                    time.sleep(self.a.pace)
        except OSError as e:
            if not self.killing.is_set():
                self.problem(f"{s.name}: writer failed while ntfsd was alive: {e}")
        except Exception as e:  # noqa: BLE001  (a harness bug must not pass for a clean run)
            self.problem(f"{s.name}: writer: {type(e).__name__}: {e}")

    def checkpointer(self, s):
        rnd = random.Random(s.rnd.random())
        try:
            while not self.stop.is_set():
                time.sleep(rnd.uniform(0.02, 0.4))
                with self.lock:
                    before = {p: d for p, d in s.stable.items()}
                    touched = set()
                    s.windows.append(touched)
                    self.ckpt_inflight += 1
                st, j = 0, None
                try:
                    st, j = self.r.http("POST", f"/v1/sessions/{s.name}/checkpoint", {"message": "crash-loop-fs"},
                                        timeout=120)
                finally:
                    # The window closes and the claim is logged in one hold
                    # of the lock: a writer's `begin` in between (a rename
                    # of a listed file) was logged before the `ckpt` and so
                    # overruled by it, and the checker wanted the renamed
                    # file at its old name ("missing in the working state").
                    with self.lock:
                        s.windows.remove(touched)
                        self.ckpt_inflight -= 1
                        if st == 200:
                            files = {p: sha(d) for p, d in before.items() if p not in touched}
                            self.counts["ckpt_acked"] += 1
                            self.log.put({"t": "ckpt", "s": s.name, "c": j["commit"], "files": files})
                if st != 200:
                    if not self.killing.is_set():
                        self.problem(f"{s.name}: checkpoint -> {st} {j}")
                    return
        except (OSError, ValueError) as e:
            if not self.killing.is_set():
                self.problem(f"{s.name}: checkpoint call failed while ntfsd was alive: {e}")
        except Exception as e:  # noqa: BLE001
            self.problem(f"{s.name}: checkpointer: {type(e).__name__}: {e}")

    def exec_some(self, rnd):
        """Jailed commands (the journal's side of the check) on a session of
        their own ("clx"), or with --exec-shared on session 0, where the
        writer writes and fsyncs too (docs/reliability.md: recovery must
        not roll session 0 back over what its mount fsync'd or checkpointed
        while a command ran)."""
        name = self.sessions[0].name if self.a.exec_shared else "clx"
        try:
            while not self.stop.is_set():
                time.sleep(rnd.uniform(0.1, 0.8))
                self.n_exec += 1
                st, j = self.r.exec(name, "bash_write", f"echo {self.n_exec} > e_{self.n_exec}.txt",
                                    key=f"e{self.seed}-{self.n_exec}", timeout=60)
                if st != 200 and not self.killing.is_set():
                    self.problem(f"{name}: exec -> {st} {j}")
                    return
        except (OSError, ValueError):
            pass

    # ---- the daemon ------------------------------------------------------

    def mount_all(self, restarted=False):
        """Mounts every session; after a restart the daemon has mounted them
        again itself (its mount list survives a crash): checked, not redone."""
        listed = {}
        if restarted:
            st, j = self.r.http("GET", "/v1/mounts")
            if st == 200:
                listed = {m["mountpoint"]: m.get("session") for m in j["mounts"]}
        for s in self.sessions:
            os.makedirs(s.mnt, exist_ok=True)
            if restarted:
                if listed.get(os.path.realpath(s.mnt)) == s.name:
                    continue
                self.problem(f"{s.name}: not mounted again by the restarted daemon")
            st, j = self.r.http("POST", "/v1/mounts", {"session": s.name, "mountpoint": s.mnt})
            if st != 201:
                raise RuntimeError(f"mount {s.name}: {st} {j}")

    def adopt_state(self):
        """After a restart: what the mounts hold becomes the harness's state
        (logged as durable `state` records; a `begin` in flight is settled)."""
        for s in self.sessions:
            found = {}
            for root, dirs, files in os.walk(os.path.join(s.mnt, "f")):
                for fn in files:
                    p = os.path.relpath(os.path.join(root, fn), s.mnt)
                    with open(os.path.join(root, fn), "rb") as f:
                        found[p] = f.read()
            for p in OVERWRITE:
                try:
                    with open(os.path.join(s.mnt, p), "rb") as f:
                        found[p] = f.read()
                except FileNotFoundError:
                    pass
                try:
                    os.unlink(os.path.join(s.mnt, p + ".tmp"))
                except FileNotFoundError:
                    pass
            s.dirs = ["f"] + sorted(os.path.relpath(os.path.join(r, d), s.mnt)
                                    for r, ds, _ in os.walk(os.path.join(s.mnt, "f")) for d in ds)
            with self.lock:
                s.stable = dict(found)
                s.once = sorted((p for p in found if p.startswith("f/")),
                                key=lambda q: int(os.path.basename(q)[1:].split(".")[0]))
                for p, d in sorted(found.items()):
                    self.log.put({"t": "state", "s": s.name, "p": p, "h": sha(d)}, sync=False)
                self.log.put({"t": "state-end", "s": s.name})

    def start_workload(self, it):
        self.stop.clear()
        self.killing.clear()
        ths = []
        for i, s in enumerate(self.sessions):
            s.rnd = random.Random(f"{self.seed}-{it}-{i}")
            ths.append(threading.Thread(target=self.writer, args=(s,), daemon=True))
            ths.append(threading.Thread(target=self.checkpointer, args=(s,), daemon=True))
        if self.a.exec or self.a.exec_shared:
            ths.append(threading.Thread(target=self.exec_some, args=(random.Random(f"{self.seed}-{it}-x"),),
                                        daemon=True))
        for t in ths:
            t.start()
        return ths

    def kill(self, rnd, it):
        time.sleep(rnd.uniform(0.1, self.a.max_delay))
        if rnd.random() < 0.35:
            # a kill while a checkpoint is in flight
            deadline = time.monotonic() + 3
            while self.ckpt_inflight == 0 and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rnd.uniform(0, 0.005))
        self.killing.set()
        inflight = self.ckpt_inflight
        self.kill9(it)
        self.counts["kills"] += 1
        if inflight:
            self.counts["kills_in_ckpt"] += 1
        self.log.put({"t": "kill", "n": it})

    def kill9(self, it):
        """kill -9 of ntfsd; it must be gone within 10 s. If it is not (a
        thread stuck in a request to its own mount), that is a problem, and
        `umount -f` of its mounts aborts their FUSE connections so that it
        can finish dying."""
        p = self.r.proc
        os.kill(p.pid, signal.SIGKILL)
        try:
            p.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            pass
        self.problem(f"kill {it}: ntfsd (pid {p.pid}) still not dead 10 s after SIGKILL: " +
                     "; ".join(thread_states(p.pid)))
        for mp in mounts_under(self.scratch):
            subprocess.run(["umount", "-f", mp], capture_output=True)
        p.wait(timeout=30)

    def cleanup_mounts(self):
        for mp in mounts_under(os.path.join(self.scratch, "m")):
            subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
        lazy_unmount(os.path.join(self.scratch, "m"))

    # ---- the checks ------------------------------------------------------

    def history(self, name):
        j = self.r.ok("GET", f"/v1/sessions/{name}/log?max=1000000")
        return {x["commit"] for x in j["commits"]}

    def read_tree(self, root, paths):
        out = {}
        for p in paths:
            try:
                with open(os.path.join(root, p), "rb") as f:
                    out[p] = sha(f.read())
            except FileNotFoundError:
                out[p] = None
        return out

    def verify(self, final=False):
        """Replays the claim log (from the file) against the store. Returns
        the list of losses found."""
        losses = []
        rc = self.r.ctl("fsck")
        if rc.returncode != 0 or not rc.stdout.startswith("ok"):
            losses.append(f"fsck: {rc.stdout.strip()} {rc.stderr.strip()}")
        expect = {s.name: {} for s in self.sessions}
        ckpts = []
        with open(self.log.path) as f:
            for line in f:
                rec = json.loads(line)
                t, sn = rec["t"], rec.get("s")
                if t == "begin":
                    for p in rec["p"]:
                        expect[sn][p] = ("any",)
                elif t in ("fsync", "state"):
                    expect[sn][rec["p"]] = ("is", rec["h"])
                elif t == "gone":
                    expect[sn][rec["p"]] = ("absent",)
                elif t == "ckpt":
                    ckpts.append(rec)
                    for p, h in rec["files"].items():
                        expect[sn][p] = ("is", h)
        hist = {}
        for s in self.sessions:
            hist[s.name] = self.history(s.name)
            # the working state after the crash
            want = {p: e for p, e in expect[s.name].items() if e[0] != "any"}
            got = self.read_tree(s.mnt, want)
            for p, e in sorted(want.items()):
                if e[0] == "is" and got[p] != e[1]:
                    losses.append(f"{s.name}: {p}: " + ("missing" if got[p] is None else "wrong content") +
                                  f" in the working state (fsync'd/checkpointed {e[1][:12]})")
                elif e[0] == "is":
                    self.counts["fsync_files_verified"] += 1
                    self.claims_verified.add((s.name, p, e[1]))
                elif e[0] == "absent" and got[p] is not None:
                    losses.append(f"{s.name}: {p}: present after its unlink/rename was fsync'd")
                elif e[0] == "absent":
                    self.counts["absent_verified"] += 1
        ro = os.path.join(self.scratch, "ro")
        os.makedirs(ro, exist_ok=True)
        for c in ckpts:
            sn, commit = c["s"], c["c"]
            if commit not in hist[sn]:
                losses.append(f"{sn}: acknowledged checkpoint {commit[:12]} is not in the session's history")
                continue
            # each acknowledged claim is read once (an unchanged checkpoint
            # answers the same commit again, maybe with another claim)
            key = (commit, sha(json.dumps(c["files"], sort_keys=True).encode()))
            if key in self.verified_ckpts:
                continue
            st, j = self.r.http("POST", "/v1/mounts", {"session": sn, "mountpoint": ro, "at": commit, "ro": True})
            if st != 201:
                losses.append(f"{sn}: cannot mount checkpoint {commit[:12]}: {st} {j}")
                continue
            try:
                got = self.read_tree(ro, c["files"])
            finally:
                self.r.ok("POST", "/v1/mounts/unmount", {"mountpoint": ro})
            bad = [p for p, h in c["files"].items() if got[p] != h]
            for p in sorted(bad)[:5]:
                losses.append(f"{sn}: checkpoint {commit[:12]}: {p} " +
                              ("missing" if got[p] is None else "has the wrong content"))
            if not bad:
                self.counts["ckpt_verified"] += 1
                self.counts["ckpt_files_verified"] += len(c["files"])
                self.verified_ckpts.add(key)
        # the journal agrees with the store
        if self.a.exec:
            hist["clx"] = self.history("clx")
        for name in hist:
            effs = self.r.effects(name)
            self.counts["effects_checked"] = self.counts.get("effects_checked", 0) + len(effs)
            for e in effs:
                if e["status"] == "pending":
                    losses.append(f"{name}: effect {e['id']} still pending after recovery")
                if e["status"] == "done" and e.get("commit_after") and e["commit_after"] not in hist[name]:
                    losses.append(f"{name}: done effect {e['id']}: commit_after {e['commit_after'][:12]} "
                                  "not in the history")
        return losses

    # ---- the loop --------------------------------------------------------

    def run(self):
        rnd = random.Random(self.seed)
        self.r.start()
        os.makedirs(os.path.join(self.scratch, "m"), exist_ok=True)
        for i in range(self.a.sessions):
            name = f"cl{i}"
            self.r.ok("POST", "/v1/sessions", {"name": name})
            self.sessions.append(Session(name, os.path.join(self.scratch, "m", name), None))
        if self.a.exec:
            self.r.ok("POST", "/v1/sessions", {"name": "clx"})
        self.mount_all()
        for s in self.sessions:
            os.makedirs(os.path.join(s.mnt, "f"))
            os.makedirs(os.path.join(s.mnt, "d"))
        self.adopt_state()
        for it in range(1, self.a.kills + 1):
            ths = self.start_workload(it)
            self.kill(rnd, it)
            self.stop.set()
            for t in ths:
                t.join(60)
                if t.is_alive():
                    self.problem(f"kill {it}: a workload thread hung on the dead mount")
                    return
            self.cleanup_mounts()
            self.r.start()
            self.mount_all(restarted=True)
            for l in self.verify():
                self.problem(f"after kill {it}: {l}")
            self.adopt_state()
            if self.a.progress and it % self.a.progress == 0:
                print(f"crash-loop-fs: {it} kills, {self.counts['ops']} ops, "
                      f"{self.counts['ckpt_verified']} checkpoints verified, {len(self.problems)} problems",
                      flush=True)
            if len(self.problems) > 20:
                break
        # a quiet stretch, one last checkpoint per session, then the full check
        ths = self.start_workload(self.a.kills + 1)
        time.sleep(0.5)
        self.stop.set()
        for t in ths:
            t.join(60)
        for s in self.sessions:
            j = self.r.ok("POST", f"/v1/sessions/{s.name}/checkpoint", {"message": "final"})
            with self.lock:
                files = {p: sha(d) for p, d in s.stable.items()}
                self.counts["ckpt_acked"] += 1
                self.log.put({"t": "ckpt", "s": s.name, "c": j["commit"], "files": files})
        if self.a.inject:
            self.inject(self.a.inject)
        for l in self.verify(final=True):
            self.problem(f"final check: {l}")
        for s in self.sessions:
            self.r.ok("POST", "/v1/mounts/unmount", {"mountpoint": s.mnt})
        rc = self.r.stop()
        if rc != 0:
            self.problem(f"ntfsd exited {rc} after SIGTERM")
        if "runtime error:" in self.r.log_tail(10**8) or "Sanitizer" in self.r.log_tail(10**8):
            self.problem("a sanitizer report in ntfsd's log")

    def inject(self, kind):
        """A false claim, so that the checker has something to catch."""
        s = self.sessions[0]
        if kind == "ckpt":
            fake = sha(f"no such commit {self.seed}".encode())
            self.log.put({"t": "ckpt", "s": s.name, "c": fake, "files": {}})
        else:
            with self.lock:
                p = sorted(s.stable)[0]
            self.log.put({"t": "fsync", "s": s.name, "p": p, "h": sha(b"not what was written")})
        print(f"crash-loop-fs: injected a false {kind} claim", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", "-n", type=int, default=20)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--max-delay", type=float, default=1.5, help="longest run between kills (s)")
    ap.add_argument("--pace", type=float, default=0.0, help="pause between a writer's operations (s)")
    ap.add_argument("--exec", action="store_true", help="also run jailed commands on a session of their own")
    ap.add_argument("--exec-shared", action="store_true",
                    help="run the jailed commands on session 0, beside its writer and checkpointer")
    ap.add_argument("--inject", choices=["ckpt", "fsync"], help="self-test: append a false claim")
    ap.add_argument("--progress", type=int, default=0, help="print a line every N kills")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--dir", default=None, help="where to make the scratch directory (default: /tmp)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    if find_bin("ntfsd") is None or find_bin("ntfs-ctl") is None:
        print(f"crash-loop-fs: ntfsd/ntfs-ctl are not built under {os.environ.get('NTFS_BUILD', '/work/main/build')}",
              file=sys.stderr)
        return 2
    print(f"crash-loop-fs: seed {seed}, {a.kills} kills, {a.sessions} sessions", flush=True)
    scratch = tempfile.mkdtemp(prefix="ntfs-crashloop-fs-", dir=a.dir)
    os.chmod(scratch, 0o755)
    loop = Loop(a, seed, scratch)
    t0 = time.monotonic()
    try:
        try:
            loop.run()
        except Exception as e:  # noqa: BLE001  (reported as a failed check)
            loop.problem(f"harness: {type(e).__name__}: {e}")
        c = loop.counts
        print(f"crash-loop-fs: seed {seed}, {c['kills']} kill -9, {time.monotonic() - t0:.1f} s "
              f"({c['kills_in_ckpt']} with a checkpoint request in flight)")
        print(f"  ops {c['ops']}, fsyncs {c['fsyncs']}, checkpoints acknowledged {c['ckpt_acked']}, "
              f"execs {loop.n_exec}, journal effects checked {c.get('effects_checked', 0)}")
        print(f"  verified: checkpoints {c['ckpt_verified']} ({c['ckpt_files_verified']} files), "
              f"fsync'd files {len(loop.claims_verified)} (in {c['fsync_files_verified']} checks after restarts), "
              f"fsync'd removals checked {c['absent_verified']}")
        if loop.problems:
            print(f"  LOSSES/PROBLEMS ({len(loop.problems)}):")
            for p in loop.problems[:20]:
                print(f"    {p}")
        else:
            print("  ok: nothing lost")
        return 1 if loop.problems else 0
    finally:
        loop.stop.set()
        loop.killing.set()
        loop.r.close()
        lazy_unmount(scratch)
        loop.log.close()
        if a.keep:
            print(f"  scratch kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
