# SPDX-License-Identifier: MIT
"""The integrity exerciser (tools/fsx.c, issue 12) against a real ntfsd.

  test_fsx_short_run     a fixed-seed run (NTFS_FSX_OPS, default 5,000 ops;
                         2,500 in a sanitizer build)
                         of random reads, writes, holes, truncates, mmap
                         writes, renames, links, checkpoints, rollbacks and
                         forks on ntfsd mounts; every check must hold, every
                         kind of operation must have run, the store must be
                         clean afterwards and fsx must leave no session or
                         mount behind
  test_fsx_short_run_with_queued_writes
                         the same (another seed) with the data file writes
                         queued to the writer thread (fs/wswrite.c)
  test_fsx_live_forks_every_second
                         fsx (NTFS_FSX_LIVE_SECS, default 40 s) while a
                         second thread of it forks the main session's live
                         state every second: every fork, mounted, must
                         equal fsx's model after an operation between the
                         last that completed before the request and the
                         last that started before the answer (issue 61
                         item 4); half of the mapped writes stay mapped
                         and dirty for later operations
  test_fsx_catches_fault the self-test: a fault injected into fsx's model
                         (-X) must make it fail with the seed and a
                         reproduction line, so the checks are live

Runs against NTFS_BUILD (normal or ASan build; the daemon fixture fails the
test on any sanitizer report in ntfsd's log). NTFS_FSX_SEED overrides the
seed (docs/reliability.md has the long runs).
"""
import json
import os
import re
import subprocess

import pytest

from conftest import BUILD, find_bin
from ctl_fixtures import Daemon, daemon, stop_and_check  # noqa: F401  (fixture)

def sanitizer_build():
    info = os.path.join(BUILD, "meson-info", "intro-buildoptions.json")
    try:
        with open(info) as f:
            return any(o.get("name") == "b_sanitize" and "address" in str(o.get("value")) for o in json.load(f))
    except (OSError, ValueError):
        return False


# Half as many operations under ASan (its ntfsd is about twice as slow), to
# keep both runs near a minute on an idle 2-core machine.
# CI keeps this short (the long runs are in docs/reliability.md).
OPS = int(os.environ.get("NTFS_FSX_OPS", "1000" if sanitizer_build() else "2000"))
SEED = int(os.environ.get("NTFS_FSX_SEED", "1212"))


def fsx_bin():
    p = find_bin("fsx")
    if p is None:
        pytest.skip("tools/fsx is not built under NTFS_BUILD")
    return p


def run_fsx(daemon, *args, timeout=900):
    return subprocess.run([fsx_bin(), "-s", daemon.sock, "-d", daemon.scratch, *args],
                          capture_output=True, text=True, timeout=timeout)


def test_fsx_short_run(daemon):  # noqa: F811
    short_run(daemon)


@pytest.mark.parametrize("mode", ["thread", "sync"])
def test_fsx_short_run_other_write_modes(scratch, monkeypatch, mode):
    """The same run with the data file writes made the store's other ways
    (NTFS_DATA_WRITES, fs/wswrite.c; the default merges a file's small
    writes in the next request): queued to a writer thread, or each made in
    its own request. Reads after writes, mmap, truncates, checkpoints and
    rollbacks over each."""
    monkeypatch.setenv("NTFS_DATA_WRITES", mode)
    d = Daemon(scratch)
    try:
        short_run(d, seed=SEED + (1 if mode == "thread" else 2))
    finally:
        stop_and_check(d, scratch)


def short_run(daemon, seed=SEED):  # noqa: F811
    r = run_fsx(daemon, "-N", str(OPS), "-S", str(seed))
    print(r.stdout)
    assert r.returncode == 0, f"fsx failed (seed {seed}):\n{r.stdout}\n{r.stderr}"
    assert f"fsx: {OPS} operations in" in r.stdout and "no mismatch" in r.stdout
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", r.stdout.split("\n")[2]))
    for kind in ("reads", "writes", "holewrites", "truncates", "mmapwrites", "renames", "links", "unlinks",
                 "checkpoints", "rollbacks", "forks"):
        assert counts.get(kind, 0) > 0, f"fsx ran no {kind}: {r.stdout}"
    # fsx cleaned up after itself: no session, no mount.
    assert daemon.http("GET", "/v1/sessions").json["sessions"] == []
    assert daemon.http("GET", "/v1/mounts").json["mounts"] == []
    daemon.fsck_clean()


LIVE_SECS = int(os.environ.get("NTFS_FSX_LIVE_SECS", "40"))


def test_fsx_live_forks_every_second(scratch, monkeypatch):
    """A fork of a session with a program running on its mount holds a
    state the program could have observed between two of its operations:
    every write(2) that returned whole, every byte stored through a shared
    mapping before the request, no half of a write(2) the kernel split.
    The daemon takes 40 ms over each page write-back (a slow store): a fork
    that did not wait for the write-back syncfs(2) starts would miss
    stores made before it was asked for."""
    monkeypatch.setenv("NTFS_FAULT", "mount.writepage:1+:sleep40")
    d = Daemon(scratch)
    try:
        live_forks(d)
    finally:
        stop_and_check(d, scratch)


def live_forks(daemon):  # noqa: F811
    seed = SEED + 3
    r = run_fsx(daemon, "-N", "1000000", "-T", str(LIVE_SECS), "-F", "1000", "-S", str(seed))
    print(r.stdout)
    assert r.returncode == 0, f"fsx with live forks failed (seed {seed}):\n{r.stdout}\n{r.stderr}"
    assert "no mismatch" in r.stdout
    m = re.search(r"live forks (\d+) \(.*; (\d+) with mapped stores made meanwhile", r.stdout)
    assert m, r.stdout
    forks, mixed = int(m.group(1)), int(m.group(2))
    # about one a second once the first is due; generous for a loaded machine
    assert forks >= LIVE_SECS // 4, f"only {forks} live forks in {LIVE_SECS} s:\n{r.stdout}"
    # nearly every fork is exactly a state of the model; the others held part
    # of stores into a mapping made while the fork was served
    assert mixed <= forks // 2, r.stdout
    line = next(ln for ln in r.stdout.split("\n") if ln.startswith("fsx: reads "))
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+) (\d+)", line))
    assert counts.get("mmapwrites", 0) > 0 and counts.get("writes", 0) > 0, r.stdout
    assert daemon.http("GET", "/v1/sessions").json["sessions"] == []
    assert daemon.http("GET", "/v1/mounts").json["mounts"] == []
    daemon.fsck_clean()


def test_fsx_catches_fault(daemon):  # noqa: F811
    r = run_fsx(daemon, "-N", "400", "-S", "7", "-X", "150", timeout=300)
    assert r.returncode == 1, f"an injected model fault went unnoticed:\n{r.stdout}\n{r.stderr}"
    assert "FAILED at operation 150 (seed 7)" in r.stderr
    assert "reproduce with: fsx -S 7 -N 151" in r.stderr
    assert "the injected fault was not detected" not in r.stderr
    # The failure path also cleans up.
    assert daemon.http("GET", "/v1/mounts").json["mounts"] == []
