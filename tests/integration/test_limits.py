# SPDX-License-Identifier: MIT
"""A session's limits, on by default (docs/policy.md, "Limits"): the store
quota a new session starts with (shown by `df` in the jail and by the
session's status, enforced by the store), the CPU quota and the memory and
pids limits counted across all concurrent calls of a session (one cgroup
group per session), the jail's /tmp size. A call that hits a limit gets a
clear answer naming it, and the daemon and the store stay healthy."""
import json
import os
import threading
import time

import pytest

from ctl_fixtures import Daemon, stop_and_check

GiB = 1 << 30


@pytest.fixture
def ldaemon(scratch):
    daemons = []

    def start(policy=None):
        extra = ()
        if policy is not None:
            path = os.path.join(scratch, "policy.ini")
            with open(path, "w") as f:
                f.write(policy)
            extra = ("--policy", path)
        d = Daemon(scratch, extra=extra)
        daemons.append(d)
        return d

    try:
        yield start
    finally:
        for d in daemons[:-1]:
            d.stop()
        if daemons:
            stop_and_check(daemons[-1], scratch)


def exec_(d, session, command, tool="bash_write", **extra):
    r = d.http("POST", f"/v1/sessions/{session}/exec", body={"command": command, "tool": tool, **extra},
               timeout=120)
    assert r.status == 200, r.body
    return json.loads(r.body)


def concurrently(fns):
    out = [None] * len(fns)

    def run(i):
        out[i] = fns[i]()

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def test_default_workspace_quota_shown_and_kept_by_forks(ldaemon):
    d = ldaemon()
    d.ok("session", "new", "q")
    s = d.http("GET", "/v1/sessions/q").json
    assert s["quota_bytes"] == 10 * GiB and s["quota_inodes"] == 1000000
    # df in the jail shows the quota as the file system's size
    b = exec_(d, "q", "df -B1 --output=size,itotal /workspace | tail -1", tool="bash_read")
    size, itotal = map(int, b["stdout"].split())
    assert size == 10 * GiB and itotal == 1000000
    # status says it too
    st = d.http("GET", "/v1/sessions/q").json
    assert st["quota_bytes"] == 10 * GiB
    # a raised quota goes with a fork of the live session; a new one starts at the default
    assert d.http("PUT", "/v1/sessions/q/quota", body={"bytes": 20 * GiB, "inodes": 5}).status == 200
    d.ok("fork", "q", "q2")
    assert d.http("GET", "/v1/sessions/q2").json["quota_bytes"] == 20 * GiB
    d.ok("session", "new", "q3")
    assert d.http("GET", "/v1/sessions/q3").json["quota_bytes"] == 10 * GiB


def test_dd_past_the_quota_is_refused_and_the_daemon_stays_healthy(ldaemon):
    d = ldaemon("[limits]\nworkspace_bytes = 8M\n")
    d.ok("session", "new", "w")
    b = exec_(d, "w", "df -B1 --output=size /workspace | tail -1; "
                      "dd if=/dev/zero of=big bs=1M count=32 2>&1; echo rc=$?")
    lines = b["stdout"].splitlines()
    assert int(lines[0]) == 8 << 20
    assert "rc=0" not in b["stdout"]
    assert "Disk quota exceeded" in b["stdout"] or "No space left on device" in b["stdout"], b["stdout"]
    # the daemon answers, the session works once the file is gone, the store is consistent
    d.healthy()
    b = exec_(d, "w", "rm -f big; echo ok > small; cat small")
    assert b["exit_code"] == 0 and b["stdout"] == "ok\n"
    d.healthy()


def test_four_spinners_share_the_default_cpu_quota(ldaemon):
    """Default cpu = 100 (one core) for the session: four concurrent
    spinners together get at most about one core, measured with the run
    cgroups' own usage counters (cpu_ms)."""
    d = ldaemon()
    d.ok("session", "new", "c")
    spin = "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do :; done"
    t0 = time.monotonic()
    res = concurrently([lambda: exec_(d, "c", spin, tool="bash_read") for _ in range(4)])
    wall = time.monotonic() - t0
    assert all(r.get("exit_code") == 0 and "cpu_ms" in r for r in res), res
    # four identical calls at once are four calls, not one served four times
    assert len({r["effect_id"] for r in res}) == 4 and not any(r["replayed"] for r in res), res
    used = sum(r["cpu_ms"] for r in res) / 1000.0
    # one core for ~3 s (each spinner's own 3 s, started within the wall time)
    assert used <= 1.0 * wall * 1.15 + 0.3, (used, wall)
    assert used > 0.5, used


def test_the_quota_is_what_holds_the_spinners(scratch):
    """The same four spinners under cpu = 20 (a fifth of a core) and under
    cpu = 0 (no quota), one daemon after the other on the same store: the
    first get at most their fifth, the second clearly more. Compared with
    each other, not with the machine's free cores (other jobs share them)."""
    path = os.path.join(scratch, "policy.ini")
    spin = "end=$((SECONDS+3)); while [ $SECONDS -lt $end ]; do :; done"
    used = {}
    for cpu in (20, 0):
        with open(path, "w") as f:
            f.write("[limits]\ncpu = %d\n" % cpu)
        d = Daemon(scratch, extra=("--policy", path))
        try:
            name = "c%d" % cpu
            d.ok("session", "new", name)
            t0 = time.monotonic()
            res = concurrently([lambda: exec_(d, name, spin, tool="bash_read") for _ in range(4)])
            wall = time.monotonic() - t0
            assert all(r.get("exit_code") == 0 and "cpu_ms" in r for r in res), res
            used[cpu] = (sum(r["cpu_ms"] for r in res) / 1000.0, wall)
        finally:
            d.stop()
    held, wall = used[20]
    assert held <= 0.2 * wall * 1.25 + 0.3, used
    assert used[0][0] > 1.5 * held, used


HOG = "python3 -c 'import time; b = bytearray(%d << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(2)'; echo rc=$?"


def test_three_memory_hogs_share_one_session_limit(ldaemon):
    d = ldaemon("[limits]\nmemory = 256M\n")
    d.ok("session", "new", "m")
    # three of 60 MiB fit together under 256 MiB
    res = concurrently([lambda: exec_(d, "m", HOG % 60, tool="bash_read") for _ in range(3)])
    assert all("rc=0" in r["stdout"] for r in res), [r["stdout"] + r["stderr"] for r in res]
    # three of 120 MiB (each under the call's own 2 GiB) do not: one at least is killed
    res = concurrently([lambda: exec_(d, "m", HOG % 120, tool="bash_read") for _ in range(3)])
    killed = [r for r in res if "rc=0" not in r["stdout"]]
    assert killed, [r["stdout"] for r in res]
    assert any(r["oom"] and r.get("limit") == "memory" for r in killed), killed
    # a session of its own has its own 256 MiB
    d.ok("session", "new", "m2")
    b = exec_(d, "m2", HOG % 120, tool="bash_read")
    assert "rc=0" in b["stdout"], b
    d.healthy()


def test_pids_limit_counts_every_call_of_the_session(ldaemon):
    d = ldaemon("[limits]\npids = 40\n")
    d.ok("session", "new", "p")
    hold = "for i in $(seq 15); do sleep 3 & done; sleep 0.5; " \
           "for i in $(seq 15); do sleep 3 & done 2>&1 | tail -1; wait; echo done"
    res = concurrently([lambda: exec_(d, "p", hold, tool="bash_read") for _ in range(2)])
    out = "".join(r["stdout"] + r["stderr"] for r in res)
    # 2 x 30 sleeps + the shells cannot fit under 40: forks fail in one of them
    assert "Resource temporarily unavailable" in out or "retry" in out, out


def test_tmp_size_from_the_policy(ldaemon):
    d = ldaemon("[limits]\ntmp_size = 16M\n")
    d.ok("session", "new", "t")
    b = exec_(d, "t", "df -k --output=size /tmp | tail -1; head -c 32M /dev/zero > /tmp/f; echo rc=$?",
              tool="bash_read")
    lines = b["stdout"].split()
    assert int(lines[0]) == 16384
    assert lines[1] != "rc=0"
    d.healthy()


def test_bad_limits_are_refused_at_start(scratch):
    path = os.path.join(scratch, "policy.ini")
    for text, why in (("[limits]\ncpu = lots\n", "cpu"), ("[limits]\ntmp_size = 1K\n", "tmp_size"),
                      ("[limits]\nswap = 1G\n", "unknown key 'swap'")):
        with open(path, "w") as f:
            f.write(text)
        with pytest.raises(RuntimeError) as e:
            Daemon(scratch, extra=("--policy", path))
        assert why in str(e.value), str(e.value)
