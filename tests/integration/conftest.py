# SPDX-License-Identifier: MIT
"""Shared pytest fixtures for integration tests on real FUSE mounts.

Reusable by every module's tests:

  ntfs_bin(name)     path of a built program (under $NTFS_BUILD, default
                     /work/main/build); skips the test when it is not built
  scratch            a fresh directory under /tmp, mode 0755 (so that an
                     unprivileged user can reach mountpoints inside it);
                     removed at teardown, never through a live mount
  store_dir          a fresh, empty store directory (inside scratch)
  mounter            factory: mounter(store_dir, session="main", create=True,
                     ro=False, at=None, signals=True) -> Mount; every Mount
                     is stopped at teardown (SIGTERM, then kill -9 of its
                     process group, then a lazy unmount), and the test fails
                     if the daemon printed a sanitizer report
  mnt                a Mount of a new session "main" in a fresh store

A Mount has .path, .proc, .store, .session, and methods checkpoint() and
rollback() (SIGUSR1/SIGUSR2 of ntfs-fuse --checkpoint-on-signal, returning
the commit id printed), stop() (clean stop, asserts exit 0 and unmounted)
and kill9() (leaves nothing mounted).

Teardown follows libfuse's test contract: start in the foreground, poll
until mounted, unmount and require a clean exit; lazy-unmount and kill on
failure; fail on error lines in the daemon's log.
"""
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest

BUILD = os.environ.get("NTFS_BUILD", "/work/main/build")
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "ThreadSanitizer", "Assertion")


def find_bin(name):
    for sub in ("", "fs", "ctl", "exec", "journal", "policy", "agent", "tools"):
        p = os.path.join(BUILD, sub, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


@pytest.fixture(scope="session")
def ntfs_bin():
    def get(name):
        p = find_bin(name)
        if p is None:
            pytest.skip(f"{name} is not built under {BUILD}")
        return p
    return get


def mounts_under(path):
    """Mountpoints at or below path, deepest first (from /proc/self/mounts)."""
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            mp = line.split()[1].encode().decode("unicode_escape")
            if mp == path or mp.startswith(path + "/"):
                found.append(mp)
    return sorted(found, key=len, reverse=True)


def lazy_unmount(path):
    for mp in mounts_under(path):
        r = subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True)


@pytest.fixture
def scratch():
    d = tempfile.mkdtemp(prefix="ntfs-it-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    lazy_unmount(d)
    if mounts_under(d):  # never recurse into a live mount
        pytest.fail(f"mounts left under {d}: {mounts_under(d)}")
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def store_dir(scratch):
    d = os.path.join(scratch, "store")
    os.mkdir(d)
    return d


class Mount:
    def __init__(self, binary, store, path, session, create, ro, at, signals, extra, log_path):
        self.binary, self.store, self.path = binary, store, path
        self.session, self.ro, self.at = session, ro, at
        self.log_path = log_path
        self.lines = queue.Queue()
        args = [binary, "--store", store, "-f"]
        if at:
            args += ["--at", at]
        else:
            args += ["--session", session]
            if create:
                args.append("--create")
        if ro:
            args.append("--ro")
        if signals and not at and not ro:
            args.append("--checkpoint-on-signal")
        args += list(extra) + [path]
        self.args = args
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 20
        while not os.path.ismount(path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ntfs-fuse exited with {self.proc.returncode}: {self.log_text()}")
            if time.monotonic() > deadline:
                self.kill9()
                raise RuntimeError(f"ntfs-fuse did not mount {path}: {self.log_text()}")
            time.sleep(0.02)

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode().strip())

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def _signal_and_read(self, sig, timeout=30):
        self.proc.send_signal(sig)
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reply to signal {sig}: {self.log_text()}")
        assert len(line) == 64 and all(c in "0123456789abcdef" for c in line), line
        return line

    def checkpoint(self):
        """Checkpoints the session; returns the commit id."""
        return self._signal_and_read(signal.SIGUSR1)

    def rollback(self):
        """Rolls back (to the head if dirty, else one step); returns the new head."""
        return self._signal_and_read(signal.SIGUSR2)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=30):
        """Clean stop: SIGTERM, exit 0, nothing left mounted."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"ntfs-fuse did not stop: {self.log_text()}")
        self._reader.join(timeout=5)
        self.log.close()
        assert rc == 0, f"ntfs-fuse exited {rc}: {self.log_text()}"
        assert not os.path.ismount(self.path), "still mounted after a clean stop"

    def kill9(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=30)
        lazy_unmount(self.path)
        if not self.log.closed:
            self.log.close()

    def sanitizer_errors(self):
        text = self.log_text() if not self.log.closed else open(self.log_path, "rb").read().decode(errors="replace")
        return [l for l in text.splitlines() if any(m in l for m in SANITIZER_MARKS)]


@pytest.fixture
def mounter(ntfs_bin, scratch):
    binary = ntfs_bin("ntfs-fuse")
    made = []
    counter = [0]

    def mount(store, session="main", create=True, ro=False, at=None, signals=True, extra=(), path=None):
        counter[0] += 1
        if path is None:
            path = os.path.join(scratch, f"mnt{counter[0]}")
            os.makedirs(path, exist_ok=True)
            os.chmod(path, 0o755)
        log_path = os.path.join(scratch, f"ntfs-fuse-{counter[0]}.log")
        m = Mount(binary, store, path, session, create, ro, at, signals, extra, log_path)
        made.append(m)
        return m

    yield mount
    problems = []
    for m in made:
        if m.proc.poll() is None:
            m.proc.send_signal(signal.SIGTERM)
            try:
                m.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                problems.append(f"{m.path}: did not stop on SIGTERM")
        m.kill9()  # no-op when already gone; always lazy-unmounts
        errs = m.sanitizer_errors()
        if errs:
            problems.append(f"{m.path}: sanitizer: {errs[:5]}")
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
def mnt(mounter, store_dir):
    return mounter(store_dir)
