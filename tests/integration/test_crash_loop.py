# SPDX-License-Identifier: MIT
"""The quick crash loop (tools/crash-loop.py --quick): 10 random kill -9 of
ntfsd during a scripted session of mixed effects; after each restart fsck is
clean, no effect is pending, every done effect's commit is in the session's
history, and no irreversible effect reached the outside world twice.

Run: NTFS_BUILD=/work/main/build /usr/bin/python3 -m pytest tests/integration/test_crash_loop.py
"""
import os
import subprocess
import sys

import pytest

from conftest import BUILD, find_bin

TOOL = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "crash-loop.py")


def test_crash_loop_quick():
    if find_bin("ntfsd") is None:
        pytest.skip(f"ntfsd is not built under {BUILD}")
    if os.geteuid() != 0:
        pytest.skip("the counter socket under /usr/local/share needs root")
    r = subprocess.run([sys.executable, TOOL, "--quick"], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, NTFS_BUILD=BUILD))
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok: every check held" in r.stdout
    assert "10 kill -9" in r.stdout and ", 0 ran twice" in r.stdout
