# SPDX-License-Identifier: MIT
"""POSIX conformance (issue 12): tools/conformance.py compares the errno of
each syscall in each situation on a native directory and on an ntfs mount
of NTFS_BUILD's ntfsd in the same run. The test fails on any difference
that docs/reliability.md does not list with its reason, and on a listed
difference that no longer happens (so the list stays true).
"""
import os
import re
import subprocess
import sys

import pytest

from conftest import BUILD, find_bin

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOL = os.path.join(ROOT, "tools", "conformance.py")
DOC = os.path.join(ROOT, "docs", "reliability.md")


def test_conformance_matches_native():
    if find_bin("ntfsd") is None:
        pytest.skip(f"ntfsd is not built under {BUILD}")
    if os.geteuid() != 0:
        pytest.skip("needs root (mounts, and the nobody cases drop privileges)")
    r = subprocess.run([sys.executable, TOOL, "--build", BUILD, "--known", DOC, "-v"],
                       capture_output=True, text=True, timeout=900)
    print(r.stdout)
    m = re.search(r"conformance: (\d+) cases, (\d+) differences \((\d+) known, (\d+) unknown\)", r.stdout)
    assert m, f"no summary line:\n{r.stdout}\n{r.stderr}"
    cases, diffs, known, unknown = map(int, m.groups())
    assert cases >= 100
    unknown_lines = [l for l in r.stdout.splitlines() if l.startswith("DIFF") and "UNKNOWN" in l]
    assert unknown == 0 and r.returncode == 0, \
        "differences from the native filesystem not listed in docs/reliability.md:\n" + "\n".join(unknown_lines)
    # Every difference the doc lists still happens (else the doc is stale).
    listed = set(re.findall(r"^\|\s*`([a-z0-9-]+)`\s*\|\s*[A-Z_0-9]+\s*\|\s*[A-Z_0-9]+\s*\|", open(DOC).read(), re.M))
    seen = set(re.findall(r"^DIFF ([a-z0-9-]+):", r.stdout, re.M))
    assert listed <= seen, f"docs/reliability.md lists differences that no longer occur: {sorted(listed - seen)}"
    # The run compared real results: every case printed both sides.
    assert len(re.findall(r" native=\S+ +ntfs=\S+", r.stdout)) >= cases
