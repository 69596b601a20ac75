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


def test_fsx_catches_fault(daemon):  # noqa: F811
    r = run_fsx(daemon, "-N", "400", "-S", "7", "-X", "150", timeout=300)
    assert r.returncode == 1, f"an injected model fault went unnoticed:\n{r.stdout}\n{r.stderr}"
    assert "FAILED at operation 150 (seed 7)" in r.stderr
    assert "reproduce with: fsx -S 7 -N 151" in r.stderr
    assert "the injected fault was not detected" not in r.stderr
    # The failure path also cleans up.
    assert daemon.http("GET", "/v1/mounts").json["mounts"] == []
