# SPDX-License-Identifier: MIT
"""ntfsd's shutdown is leak-free under LeakSanitizer (issue 12).

Starts the sanitizer build's ntfsd with detect_leaks=1, does a little of
everything (a session, a mount with writes through it, checkpoints, a tag,
a fork, a rollback, an exec in the jail, a seed-API session, a gc), then
sends SIGTERM and asserts: exit status 0, nothing left mounted, and no
LeakSanitizer (or other sanitizer) report in the daemon's output.

Skipped, with the reason, when NTFS_BUILD is not a sanitizer build (the
normal build has no leak checker); scripts/test.sh runs the integration
suite against build-asan too, which is where this test bites.
"""
import json
import os
import signal
import subprocess

import pytest

from conftest import BUILD, find_bin, mounts_under
from ctl_fixtures import Daemon


def sanitizer_build():
    """b_sanitize of NTFS_BUILD from meson's introspection, else a look at
    the binary for ASan's runtime."""
    info = os.path.join(BUILD, "meson-info", "intro-buildoptions.json")
    try:
        with open(info) as f:
            for o in json.load(f):
                if o.get("name") == "b_sanitize":
                    return "address" in str(o.get("value"))
    except (OSError, ValueError):
        pass
    p = find_bin("ntfsd")
    if p:
        with open(p, "rb") as f:
            return b"__asan_init" in f.read()
    return False


@pytest.fixture
def asan_env(monkeypatch):
    if not sanitizer_build():
        pytest.skip(f"NTFS_BUILD={BUILD} is not a sanitizer build (-Db_sanitize=address,...): "
                    "no LeakSanitizer to ask; scripts/test.sh runs this against build-asan")
    # The daemon inherits the environment: leaks on, and a report must not
    # be swallowed by abort_on_error's core dump path.
    monkeypatch.setenv("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0:exitcode=23:"
                       "detect_stack_use_after_return=0")
    monkeypatch.setenv("LSAN_OPTIONS", "report_objects=1")
    monkeypatch.setenv("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")


def test_shutdown_is_leak_free(scratch, asan_env):
    d = Daemon(scratch)
    try:
        assert d.http("POST", "/v1/sessions", {"name": "lk"}).status == 201
        mp = os.path.join(scratch, "m")
        os.mkdir(mp)
        r = d.http("POST", "/v1/mounts", {"session": "lk", "mountpoint": mp})
        assert r.status == 201, r
        with open(os.path.join(mp, "a.txt"), "w") as f:
            f.write("hello\n" * 1000)
        os.mkdir(os.path.join(mp, "dir"))
        os.symlink("a.txt", os.path.join(mp, "dir", "ln"))
        c1 = d.http("POST", "/v1/sessions/lk/checkpoint", {"message": "one"})
        assert c1.status == 200, c1
        assert d.http("POST", "/v1/sessions/lk/tags", {"tag": "t1"}).status == 201
        with open(os.path.join(mp, "a.txt"), "a") as f:
            f.write("more\n")
        assert d.http("POST", "/v1/sessions/lk/checkpoint", {"message": "two"}).status == 200
        assert d.http("POST", "/v1/sessions/lk/fork", {"name": "lk2", "at": "t1"}).status == 201
        r = d.http("POST", "/v1/sessions/lk/exec", {"command": "cat a.txt | wc -l; echo x > b.txt"}, timeout=120)
        assert r.status == 200 and r.json["exit_code"] == 0, r
        assert d.http("POST", "/v1/sessions/lk/rollback", {"to": "t1"}).status == 200
        with open(os.path.join(mp, "a.txt")) as f:
            assert f.read() == "hello\n" * 1000
        r = d.http("POST", "/session/start", {})
        assert r.status == 200, r
        sid = r.json["session_id"]
        assert d.http("POST", "/tool/execute", {"tool_name": "bash_write", "session_id": sid,
                                                  "tool_input": {"command": "echo hi > h.txt"}},
                      timeout=120).status == 200
        assert d.http("POST", "/session/end", {"session_id": sid}).status == 200
        assert d.http("DELETE", "/v1/sessions/lk2").status == 200
        assert d.http("POST", "/v1/gc").status == 200
        assert d.http("GET", "/v1/status").status == 200
    except BaseException:
        d.stop()
        raise
    d.proc.send_signal(signal.SIGTERM)
    try:
        rc = d.proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        rc = None
    left = mounts_under(scratch)  # before the cleanup's lazy unmount
    log = d.log_text()
    d.stop()  # kills what is left of the group, lazy-unmounts, closes the log
    assert rc is not None, "ntfsd did not exit within 120 s of SIGTERM"
    assert "LeakSanitizer" not in log, "LeakSanitizer report at ntfsd's shutdown:\n" + log[-6000:]
    errs = d.sanitizer_errors()
    assert not errs, "sanitizer reports in ntfsd's log:\n" + "\n".join(errs)
    assert rc == 0, f"ntfsd exited {rc} after SIGTERM (23 = a leak report):\n{log[-3000:]}"
    assert not left, f"ntfsd left mounts behind at shutdown: {left}"
