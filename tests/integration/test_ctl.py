# SPDX-License-Identifier: MIT
"""ntfs-ctl and the control protocol against a real ntfsd (docs/protocol.md,
docs/cli.md). Every endpoint is driven with ntfs-ctl and with raw HTTP over
AF_UNIX; error cases leave the daemon answering and the store clean.

Run: NTFS_BUILD=/work/main/build-ctl-full /usr/bin/python3 -m pytest tests/integration/test_ctl.py
"""
import errno
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time

import pytest

from conftest import BUILD, find_bin
from ctl_fixtures import Daemon, build_request, connect, daemon, read_response  # noqa: F401

HEX64 = re.compile(r"^[0-9a-f]{64}$")
SHORT = re.compile(r"^[0-9a-f]{4,64}$")

COMMANDS = ["status", "session new", "session ls", "session show", "session end", "mount", "mounts", "umount",
            "checkpoint", "fork", "tag", "tags", "rollback", "log", "diff", "exec", "effects", "conversation",
            "quota", "gc", "fsck", "api"]


def ctl_bin():
    p = find_bin("ntfs-ctl")
    if p is None:
        pytest.skip(f"ntfs-ctl is not built under {BUILD}")
    return p


def run_ctl(*args, env=None, cwd=None):
    e = dict(os.environ)
    for k in ("NTFS_SOCKET", "NTFS_STORE"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([ctl_bin(), *args], capture_output=True, text=True, env=e, cwd=cwd, timeout=60)


def mkdir(scratch, name):
    p = os.path.join(scratch, name)
    os.makedirs(p, exist_ok=True)
    return p


def write(path, data, mode="w"):
    with open(path, mode) as f:
        f.write(data)
        f.flush()


def read(path):
    with open(path) as f:
        return f.read()


def commits(d, name):
    return [c["commit"] for c in d.jok("log", name)["commits"]]


# ---- the command line alone (no daemon needed) ------------------------------

def test_help_is_complete():
    r = run_ctl("--help")
    assert r.returncode == 0
    for c in COMMANDS:
        assert re.search(rf"^  {c}\s", r.stdout, re.M), f"{c} missing from --help"
    for flag in ("--socket", "--json", "NTFS_SOCKET", "NTFS_STORE", "Exit status"):
        assert flag in r.stdout
    for c in COMMANDS:
        words = c.split()
        a = run_ctl("help", *words)
        b = run_ctl(*words, "--help")
        assert a.returncode == 0 and b.returncode == 0, c
        assert a.stdout == b.stdout
        assert a.stdout.startswith(f"usage: ntfs-ctl [--socket PATH] [--json] {c}")
        assert "Example" in a.stdout, f"{c} --help has no example"
    # every flag of a command is in its help
    for c, flags in {"mount": ["--ro", "--at", "--autocheckpoint", "--autocheckpoint-max"],
                     "checkpoint": ["-m", "--message"], "fork": ["--at"], "tag": ["--at", "--scope"],
                     "rollback": ["--to", "--steps"], "log": ["-n", "--max-count"],
                     "exec": ["--tool", "--timeout", "--idempotency-key"], "effects": ["--limit"],
                     "quota": ["--bytes", "--inodes"], "session new": ["--from"]}.items():
        out = run_ctl("help", *c.split()).stdout
        for f in flags:
            assert f in out, f"{f} missing from help {c}"
    g = run_ctl("session", "--help")
    assert g.returncode == 0 and "session new" in g.stdout and "session end" in g.stdout


@pytest.mark.parametrize("args", [
    [], ["bogus"], ["session"], ["session", "bogus"], ["status", "--bogus"], ["session", "new"],
    ["checkpoint"], ["checkpoint", "a", "b"], ["checkpoint", "a", "-m"], ["rollback", "a"],
    ["rollback", "a", "--to", "x", "--steps", "1"], ["rollback", "a", "--steps", "zero"],
    ["rollback", "a", "--steps", "0"], ["tag", "a", "t", "--scope", "world"], ["exec", "a"],
    ["exec", "a", "--", ], ["quota", "a", "--bytes", "1"], ["quota", "a", "--bytes", "x", "--inodes", "1"],
    ["mount", "a"], ["mount", "a", "/tmp", "--autocheckpoint", "-1"], ["log", "a", "-n", "many"],
    ["--socket"], ["--nope", "status"], ["api", "FETCH", "/x"], ["api", "GET", "x"], ["api", "POST", "/x", "{"],
    ["diff", "a"], ["--json", "fork", "a"], ["checkpoint", "a", "--ro"],
])
def test_usage_errors_exit_2(args):
    r = run_ctl("--socket", "/nonexistent/s", *args) if args[:1] != ["--socket"] else run_ctl(*args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert "usage: ntfs-ctl" in r.stderr or "Try 'ntfs-ctl" in r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("value", ["x", "0", "-1", "1000001"])
def test_a_bad_steps_value_is_one_error(value):
    """Issue 65: '--steps x' printed two errors that contradicted each other
    (a number 'from 0', then 'at least 1'). One line names the bounds."""
    r = run_ctl("--socket", "/nonexistent/s", "rollback", "a", "--steps", value)
    assert r.returncode == 2
    errors = [l for l in r.stderr.splitlines() if l.startswith("ntfs-ctl: ")]
    assert errors == [f"ntfs-ctl: --steps needs a number from 1 to 1000000, not '{value}'"], r.stderr


def test_unreachable_is_exit_1(scratch):
    for args in (["status"], ["--json", "session", "ls"], ["checkpoint", "main"]):
        r = run_ctl("--socket", os.path.join(scratch, "nobody"), *args)
        assert r.returncode == 1
        assert re.match(r"ntfs-ctl: .*nobody.* \(unreachable\)\n$", r.stderr), r.stderr
    r = run_ctl("--json", "--socket", os.path.join(scratch, "nobody"), "status")
    assert json.loads(r.stdout)["error"]["code"] == "unreachable"
    # a socket nobody listens on
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    p = os.path.join(scratch, "dead")
    s.bind(p)
    s.close()
    r = run_ctl("--socket", p, "status")
    assert r.returncode == 1 and "(unreachable)" in r.stderr


def test_socket_resolution(scratch):
    """--socket, else $NTFS_SOCKET, else $NTFS_STORE/ntfsd.sock, else ./.store/ntfsd.sock."""
    d = Daemon.__new__(Daemon)
    binary = find_bin("ntfsd")
    if binary is None:
        pytest.skip("ntfsd is not built")
    store = os.path.join(scratch, ".store")
    log = open(os.path.join(scratch, "d.log"), "ab")
    proc = subprocess.Popen([binary, "--store", store, "-f"], stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        sock = os.path.join(store, "ntfsd.sock")
        deadline = time.monotonic() + 20
        while run_ctl("--socket", sock, "status").returncode != 0:
            assert proc.poll() is None and time.monotonic() < deadline, "ntfsd did not start"
            time.sleep(0.05)
        assert run_ctl("status", env={"NTFS_SOCKET": sock}).returncode == 0
        assert run_ctl("status", env={"NTFS_STORE": store}).returncode == 0
        assert run_ctl("status", cwd=scratch).returncode == 0  # ./.store/ntfsd.sock
        # precedence: --socket over $NTFS_SOCKET over $NTFS_STORE
        assert run_ctl("--socket", sock, "status", env={"NTFS_SOCKET": "/nonexistent"}).returncode == 0
        assert run_ctl("status", env={"NTFS_SOCKET": "/nonexistent", "NTFS_STORE": store}).returncode == 1
        assert run_ctl("status", env={"NTFS_STORE": "/nonexistent"}, cwd=scratch).returncode == 1
        del d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()
    assert proc.returncode == 0


# ---- every endpoint with ntfs-ctl and with raw HTTP -------------------------

def test_status_and_health(daemon):
    out = daemon.ok("status")
    assert out.startswith("ntfsd ") and "store:" in out and daemon.store in out
    j = daemon.jok("status")
    for k in ("version", "store", "pid", "sessions", "tags", "objects", "used_bytes", "data_bytes", "data_reusable_bytes", "mounts",
              "jail"):
        assert k in j, k
    assert j["pid"] == daemon.proc.pid
    h = daemon.http("GET", "/v1/status")
    assert h.status == 200 and h.json["pid"] == daemon.proc.pid
    assert h.headers["content-type"].startswith("application/json")
    h = daemon.http("GET", "/health")
    assert h.status == 200 and h.json["status"] == "ok" and h.json["replay"] is False
    assert daemon.jok("api", "GET", "/health")["status"] == "ok"


def test_status_counts_working_data(daemon, scratch):
    # the working data files' disk space: none at first, what a write
    # takes, and (after a checkpoint turns it into objects) given back
    assert daemon.jok("status")["data_bytes"] == 0
    daemon.ok("session", "new", "wd")
    mp = mkdir(scratch, "m")
    daemon.ok("mount", "wd", mp)
    data = os.urandom(2 << 20)
    with open(f"{mp}/big", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    j = daemon.jok("status")
    assert j["data_bytes"] >= len(data), j
    out = daemon.ok("status")
    assert re.search(r"^working data:\s+\d", out, re.M), out
    assert j["data_reusable_bytes"] == 0, j
    used = j["used_bytes"]
    daemon.ok("checkpoint", "wd")
    # the checkpoint freed the written slots: kept for reuse until the
    # store has stood still for 2 s (docs/store.md 4.8), then given back
    j = daemon.jok("status")
    assert j["data_reusable_bytes"] >= len(data) - (64 << 10), j
    assert j["data_reusable_bytes"] <= j["data_bytes"], j
    out = daemon.ok("status")
    assert re.search(r"^working data:\s+\d.*of it freed, reusable\)", out, re.M), out
    deadline = time.monotonic() + 10
    while daemon.jok("status")["data_bytes"] >= 64 << 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    j = daemon.jok("status")
    assert j["data_bytes"] < 64 << 10, j
    assert j["data_reusable_bytes"] == 0, j
    assert j["used_bytes"] > used  # the content is in the database now
    with open(f"{mp}/big", "rb") as f:
        assert f.read() == data


def test_sessions_cli_and_http(daemon):
    out = daemon.ok("session", "new", "alpha")
    m = re.fullmatch(r"created session alpha at ([0-9a-f]+)\n", out)
    assert m, out
    j = daemon.jok("session", "new", "beta", "--from", "alpha")
    assert j["name"] == "beta" and HEX64.match(j["head"]) and j["head"].startswith(j["short"])
    assert j["head"].startswith(m.group(1))
    h = daemon.http("POST", "/v1/sessions", {"name": "gamma"})
    assert h.status == 201 and h.json["name"] == "gamma"
    h = daemon.http("POST", "/v1/sessions", {"name": "delta", "from": "gamma"})
    assert h.status == 201
    # ls: aligned columns with a header
    out = daemon.ok("session", "ls").splitlines()
    assert out[0].split()[:2] == ["NAME", "HEAD"]
    names = [l.split()[0] for l in out[1:]]
    assert sorted(names) == ["alpha", "beta", "delta", "gamma"]
    col = out[0].index("HEAD")
    assert all(SHORT.match(l[col:].split()[0]) for l in out[1:])
    ls = daemon.http("GET", "/v1/sessions").json["sessions"]
    assert {s["name"] for s in ls} == set(names)
    for s in ls:
        for k in ("name", "head", "short", "dirty", "bytes", "inodes", "created", "mounts"):
            assert k in s, k
    # show
    out = daemon.ok("session", "show", "alpha")
    assert re.search(r"^head:\s+[0-9a-f]{64}$", out, re.M) and "name:" in out
    j = daemon.http("GET", "/v1/sessions/alpha").json
    for k in ("name", "head", "short", "floor", "dirty", "bytes", "inodes", "quota_bytes", "quota_inodes",
              "created", "mounts"):
        assert k in j, k
    assert daemon.jok("session", "show", "alpha")["head"] == j["head"]
    # end
    assert daemon.ok("session", "end", "beta") == "ended session beta\n"
    h = daemon.http("DELETE", "/v1/sessions/delta")
    assert h.status == 200 and h.json == {"name": "delta", "ended": True}
    assert daemon.http("GET", "/v1/sessions/delta").code == "session_not_found"
    r = daemon.ctl("session", "show", "beta")
    assert r.returncode == 1 and r.stderr.endswith("(session_not_found)\n") and r.stderr.startswith("ntfs-ctl: ")
    daemon.healthy()


def test_a_named_checkpoint_is_in_the_log_even_with_nothing_changed(daemon, scratch):
    """An auto-checkpoint may take the changes a moment before the user's
    `checkpoint -m`: the message must still be in the log, on a commit of
    the same state whose parent is the head; without a message nothing is
    made."""
    daemon.ok("session", "new", "main")
    mp = mkdir(scratch, "m")
    daemon.ok("mount", "main", mp, "--autocheckpoint", "1")
    write(f"{mp}/a.txt", "one\n")
    deadline = time.monotonic() + 30
    while daemon.http("GET", "/v1/sessions/main").json["dirty"] and time.monotonic() < deadline:
        time.sleep(0.1)
    head = daemon.http("GET", "/v1/sessions/main").json["head"]
    h = daemon.http("POST", "/v1/sessions/main/checkpoint", {})
    assert h.json["commit"] == head and h.json["changed"] is False
    out = daemon.ok("checkpoint", "main", "-m", "builds").strip()
    log = daemon.http("GET", "/v1/sessions/main/log?max=2").json["commits"]
    assert log[0]["message"] == "builds" and log[0]["parents"] == [head] and log[0]["commit"].startswith(out)
    assert daemon.ok("diff", "main", head) == ""
    assert "builds" in daemon.ok("log", "main").splitlines()[0]
    daemon.ok("umount", mp)


def test_checkpoint_tag_log_diff_rollback(daemon, scratch):
    daemon.ok("session", "new", "main")
    mp = mkdir(scratch, "m")
    daemon.ok("mount", "main", mp)
    write(f"{mp}/a.txt", "one\n")
    write(f"{mp}/gone.txt", "bye\n")
    c1 = daemon.ok("checkpoint", "main", "-m", "first version").strip()
    assert SHORT.match(c1)
    out = daemon.ok("tag", "main", "v1")
    assert out == f"tagged {c1} as v1 (session)\n"
    write(f"{mp}/a.txt", "two\n")
    os.unlink(f"{mp}/gone.txt")
    os.mkdir(f"{mp}/dir")
    write(f"{mp}/dir/new.txt", "new\n")
    # working-state diff like git diff --name-status, sorted by path
    # (an added directory is one line; its contents are not listed)
    working_diff = daemon.ok("diff", "main", "v1")
    assert working_diff == "M\ta.txt\nA\tdir\nD\tgone.txt\n"
    h = daemon.http("POST", "/v1/sessions/main/checkpoint", {"message": "second"})
    assert h.status == 200 and HEX64.match(h.json["commit"]) and h.json["changed"] is True
    c2 = h.json["commit"]
    # unchanged: same head, changed false
    h2 = daemon.http("POST", "/v1/sessions/main/checkpoint", {})
    assert h2.json["commit"] == c2 and h2.json["changed"] is False
    # tag over HTTP, store scope, at a commit
    h = daemon.http("POST", "/v1/sessions/main/tags", {"tag": "v2", "scope": "store"})
    assert h.status == 201 and h.json["commit"] == c2 and h.json["scope"] == "store"
    h = daemon.http("POST", "/v1/sessions/main/tags", {"tag": "first", "at": c1})
    assert h.status == 201 and h.json["commit"].startswith(c1)
    j = daemon.jok("tag", "main", "v2b", "--at", c2[:12], "--scope", "store")
    assert j["commit"] == c2
    # log: --oneline with tags
    log = daemon.ok("log", "main").splitlines()
    assert re.fullmatch(rf"{c2[:len(log[0].split()[0])]} \((tag: [a-z0-9]+(, )?)+\) second", log[0]), log
    assert "tag: v2" in log[0] and "tag: v2b" in log[0]
    assert log[1].startswith(c1) and "tag: v1" in log[1] and "tag: first" in log[1] and log[1].endswith(
        " first version")
    assert len(daemon.ok("log", "main", "-n", "1").splitlines()) == 1
    lj = daemon.http("GET", "/v1/sessions/main/log?max=2").json["commits"]
    assert len(lj) == 2 and lj[0]["commit"] == c2 and lj[1]["commit"].startswith(c1)
    assert lj[0]["parents"] == [lj[1]["commit"]] and lj[0]["message"] == "second"
    # tags listing
    tl = daemon.ok("tags").splitlines()
    assert tl[0].split() == ["TAG", "COMMIT", "SCOPE", "SESSION", "CREATED"]
    assert {l.split()[0] for l in tl[1:]} == {"v1", "v2", "v2b", "first"}
    tj = daemon.http("GET", "/v1/tags?session=main").json["tags"]
    assert {t["tag"] for t in tj} == {"v1", "v2", "v2b", "first"}
    assert {t["tag"] for t in daemon.jok("tags", "main")["tags"]} == {t["tag"] for t in tj}
    # diff between commits, via HTTP with from/to
    dj = daemon.http("GET", f"/v1/sessions/main/diff?from=v1&to={c2}").json
    kinds = {c["path"]: c["kind"] for c in dj["changes"]}
    assert kinds == {"a.txt": "modified", "gone.txt": "deleted", "dir": "added"}
    assert [c["path"] for c in dj["changes"]] == sorted(c["path"] for c in dj["changes"])
    assert daemon.ok("diff", "main", "v1", "v2") == daemon.ok("diff", "main", "v1", c2) == working_diff
    # mode-only change is P with the modes
    os.chmod(f"{mp}/a.txt", 0o755)
    assert daemon.ok("diff", "main", "v2") == "P\ta.txt\t0644 -> 0755\n"
    # rollback --to (tag) and --steps
    out = daemon.ok("rollback", "main", "--to", "v1")
    assert out == f"main is now at {c1}\n"
    assert read(f"{mp}/a.txt") == "one\n" and read(f"{mp}/gone.txt") == "bye\n"
    assert not os.path.exists(f"{mp}/dir")
    h = daemon.http("POST", "/v1/sessions/main/rollback", {"to": c2})
    assert h.status == 200 and h.json["head"] == c2
    assert read(f"{mp}/a.txt") == "two\n"
    h = daemon.http("POST", "/v1/sessions/main/rollback", {"steps": 1})
    assert h.json["head"].startswith(c1)
    r = daemon.ctl("rollback", "main", "--steps", "5")
    assert r.returncode == 1 and "(rollback_floor)" in r.stderr
    daemon.ok("umount", mp)
    daemon.healthy()


def test_rollback_of_zero_steps_keeps_the_work(daemon, scratch):
    """{"steps": 0} would only drop the work since the last checkpoint; it is
    refused (protocol.md: N >= 1) and the file written since is still there."""
    daemon.ok("session", "new", "keep")
    mp = mkdir(scratch, "keep")
    daemon.ok("mount", "keep", mp)
    try:
        write(f"{mp}/draft.txt", "not checkpointed yet\n")
        h = daemon.http("POST", "/v1/sessions/keep/rollback", {"steps": 0})
        assert h.status == 400 and h.code == "bad_request" and "between 1 and" in h.json["error"]["message"]
        assert read(f"{mp}/draft.txt") == "not checkpointed yet\n"
        assert daemon.http("GET", "/v1/sessions/keep").json["dirty"] is True
    finally:
        daemon.ok("umount", mp)
    daemon.healthy()


def test_fork_mounts_quota_gc_fsck(daemon, scratch):
    daemon.ok("session", "new", "src")
    mp = mkdir(scratch, "src")
    out = daemon.ok("mount", "src", mp)
    assert out.startswith(f"mounted src at {mp} (rw")
    write(f"{mp}/f", "forked\n")
    c = daemon.ok("checkpoint", "src").strip()
    write(f"{mp}/f", "later\n")
    out = daemon.ok("fork", "src", "child")
    assert re.fullmatch(r"forked src to child at [0-9a-f]+\n", out)
    h = daemon.http("POST", "/v1/sessions/src/fork", {"name": "child2", "at": c})
    assert h.status == 201 and h.json["head"].startswith(c)
    j = daemon.jok("fork", "src", "child3", "--at", c)
    assert j["head"].startswith(c)
    # mounts: relative mountpoints are made absolute
    mp2 = mkdir(scratch, "child2")
    r = daemon.ctl("mount", "child2", "child2", cwd=scratch)
    assert r.returncode == 0, r.stderr
    assert read(f"{mp2}/f") == "forked\n"
    h = daemon.http("POST", "/v1/mounts", {"session": "child3", "mountpoint": mkdir(scratch, "c3"), "ro": True})
    assert h.status == 201 and h.json["ro"] is True
    ms = daemon.http("GET", "/v1/mounts").json["mounts"]
    assert {m["mountpoint"] for m in ms} == {mp, mp2, os.path.join(scratch, "c3")}
    lines = daemon.ok("mounts").splitlines()
    assert lines[0].split()[:3] == ["MOUNTPOINT", "SESSION", "MODE"] and len(lines) == 4
    assert {m["mountpoint"] for m in daemon.jok("mounts")["mounts"]} == {m["mountpoint"] for m in ms}
    with pytest.raises(OSError) as e:
        write(os.path.join(scratch, "c3", "x"), "no")
    assert e.value.errno == errno.EROFS
    # mounting on a busy mountpoint
    r = daemon.ctl("mount", "child3", mp)
    assert r.returncode == 1 and r.stderr.startswith("ntfs-ctl: ")
    # unmount over HTTP and with the CLI (relative path); the daemon resolves
    # the parent only (never stats its own mount): a symlinked parent and a
    # trailing slash name the same mount
    os.symlink(scratch, os.path.join(scratch, "via"))
    h = daemon.http("POST", "/v1/mounts/unmount", {"mountpoint": os.path.join(scratch, "via", "c3") + "/"})
    assert h.status == 200 and h.json["unmounted"] is True
    assert daemon.ctl("umount", "child2", cwd=scratch).returncode == 0
    assert not os.path.ismount(mp2)
    r = daemon.ctl("umount", mp2)
    assert r.returncode == 1 and "ntfs-ctl: " in r.stderr
    # quota
    assert daemon.ok("quota", "src", "--bytes", "64K", "--inodes", "1000") == \
        "quota of src: 65536 bytes, 1000 inodes\n"
    h = daemon.http("PUT", "/v1/sessions/src/quota", {"bytes": 32768, "inodes": 1000})
    assert h.status == 200 and h.json["quota_bytes"] == 32768
    with pytest.raises(OSError) as e:
        write(f"{mp}/big", "x" * 200000)
    assert e.value.errno in (errno.EDQUOT, errno.ENOSPC)
    h = daemon.http("PUT", "/v1/sessions/src/quota", {"bytes": 0, "inodes": 0})
    assert h.status == 200
    daemon.ok("umount", mp)
    # session end unmounts first
    daemon.ok("mount", "child", mp)
    daemon.ok("session", "end", "child")
    assert not os.path.ismount(mp)
    # gc and fsck
    out = daemon.ok("gc")
    assert re.fullmatch(r"freed \d+ of \d+ objects \(.*\)\n", out)
    j = daemon.http("POST", "/v1/gc").json
    assert {"objects_before", "objects_freed", "bytes_freed"} <= set(j)
    j = daemon.http("POST", "/v1/fsck").json
    assert j["ok"] is True and j["problems"] == [] and j["commits"] >= 1
    assert daemon.jok("fsck")["ok"] is True
    daemon.healthy()


def test_exec_effects_and_seed_api(daemon):
    daemon.ok("session", "new", "w")
    r = daemon.ctl("exec", "w", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert r.returncode == 7 and r.stdout == "out\n" and r.stderr == "err\n"
    r = daemon.ctl("exec", "w", "--", "echo hi > /workspace/f; cat /workspace/f")
    assert r.returncode == 0 and r.stdout == "hi\n"
    r = daemon.ctl("exec", "w", "--", "printf", "%s|", "a b", "it's")
    assert r.stdout == "a b|it's|"
    r = daemon.ctl("--json", "exec", "w", "--tool", "bash_read", "--", "cat /workspace/f")
    assert r.returncode == 0
    j = json.loads(r.stdout)
    assert j["stdout"] == "hi\n" and j["exit_code"] == 0 and j["tool"] == "bash_read"
    r = daemon.ctl("exec", "w", "--timeout", "1", "--", "sleep 30")
    assert r.returncode != 0 and "timed out" in r.stderr
    h = daemon.http("POST", "/v1/sessions/w/exec", {"command": "exit 3"})
    assert h.status == 200 and h.json["exit_code"] == 3
    # idempotency key: the second call is replayed, not re-run
    h1 = daemon.http("POST", "/v1/sessions/w/exec", {"command": "echo $RANDOM$RANDOM", "idempotency_key": "k1"})
    h2 = daemon.http("POST", "/v1/sessions/w/exec", {"command": "echo $RANDOM$RANDOM", "idempotency_key": "k1"})
    assert h2.json["stdout"] == h1.json["stdout"] and h2.json["replayed"] is True
    # effects
    lines = daemon.ok("effects", "w").splitlines()
    assert lines[0].split()[:3] == ["ID", "STEP", "TOOL"] and len(lines) >= 6
    ej = daemon.http("GET", "/v1/sessions/w/effects?limit=2").json["effects"]
    all_ids = [e["id"] for e in daemon.http("GET", "/v1/sessions/w/effects").json["effects"]]
    assert [e["id"] for e in ej] == all_ids[-2:]  # the latest two, in id order
    assert [e["id"] for e in daemon.jok("effects", "w", "-n", "3")["effects"]] == all_ids[-3:]
    assert daemon.ok("effects", "w", "-n", "1").splitlines()[1].split()[0] == str(all_ids[-1])
    r = daemon.ctl("exec", "nosuch", "--", "true")
    assert r.returncode == 1 and "(session_not_found)" in r.stderr
    # the seed API
    h = daemon.http("POST", "/session/start", {})
    assert h.status == 200 and h.json["replay_mode"] is False
    sid = h.json["session_id"]
    h = daemon.http("POST", "/tool/execute", {"tool_name": "bash_write", "tool_input": {"command": "echo seed"},
                                              "session_id": sid})
    assert h.status == 200 and "seed" in json.dumps(h.json["result"])
    j = daemon.jok("api", "POST", "/tool/execute", json.dumps(
        {"tool_name": "bash_read", "tool_input": {"command": "echo via-ctl"}, "session_id": sid}))
    assert "via-ctl" in json.dumps(j["result"])
    h = daemon.http("POST", "/session/end", {"session_id": sid})
    assert h.status == 200
    daemon.healthy()


# ---- error cases --------------------------------------------------------------

# MP is replaced by a fresh empty directory: a request that is wrongly
# accepted must not mount over anything that matters.
BAD_REQUESTS = [
    # (method, path, raw body, status, code)
    ("POST", "/v1/sessions", b'{"name":', 400, "bad_request"),
    ("POST", "/v1/sessions", b'[1,2]', 400, "bad_request"),
    ("POST", "/v1/sessions", b'\xff\xfe', 400, "bad_request"),
    ("POST", "/v1/sessions", b'{"name":"x","bogus":1}', 400, "bad_request"),
    ("POST", "/v1/sessions", b'{"name":5}', 400, "bad_request"),
    ("POST", "/v1/sessions", b'{}', 400, "bad_request"),
    ("POST", "/v1/sessions", b'{"name":".."}', 400, "invalid_name"),
    ("POST", "/v1/sessions", b'{"name":"a b\\n"}', 400, "invalid_name"),
    ("POST", "/v1/sessions", b'{"name":"' + b"x" * 300 + b'"}', 400, "invalid_name"),
    ("POST", "/v1/sessions", b'{"name":"main"}', 409, "session_exists"),
    ("POST", "/v1/sessions", b'{"name":"n2","from":"nope"}', 404, "ref_not_found"),
    ("GET", "/v1/sessions/nope", None, 404, "session_not_found"),
    ("GET", "/v1/sessions/a%2Fb", None, 400, "invalid_name"),
    ("POST", "/v1/sessions/nope/checkpoint", b"{}", 404, "session_not_found"),
    ("POST", "/v1/sessions/main/checkpoint", b'{"message":7}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/fork", b'{"name":"f","at":"deadbeef"}', 404, "ref_not_found"),
    ("POST", "/v1/sessions/main/fork", b'{"name":"main"}', 409, "session_exists"),
    ("POST", "/v1/sessions/main/fork", b'{"name":"t0"}', 409, "tag_exists"),
    ("POST", "/v1/sessions/main/fork", b'{"name":"a/b"}', 400, "invalid_name"),
    ("POST", "/v1/sessions/main/tags", b'{"tag":"t0"}', 409, "tag_exists"),
    ("POST", "/v1/sessions/main/tags", b'{"tag":"t1","scope":"world"}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/tags", b'{"tag":"t1","at":"0000"}', 404, "ref_not_found"),
    ("POST", "/v1/sessions/main/rollback", b'{"to":"nope"}', 404, "ref_not_found"),
    ("POST", "/v1/sessions/main/rollback", b'{"to":"t0","steps":1}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/rollback", b'{}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/rollback", b'{"steps":"1"}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/rollback", b'{"steps":99}', 409, "rollback_floor"),
    ("POST", "/v1/sessions/main/rollback", b'{"steps":0}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/rollback", b'{"steps":-1}', 400, "bad_request"),
    ("GET", "/v1/sessions/%ff", None, 400, "invalid_name"),
    ("GET", "/v1/sessions/a%c3", None, 400, "invalid_name"),
    ("POST", "/v1/sessions", b'{"name":"\\u00ff\\udc80"}', 400, None),
    ("GET", "/v1/sessions/main/diff?from=t0&to=t0%00", None, 400, "bad_request"),
    ("GET", "/v1/sessions/main/diff?from=t0%zz", None, 400, "bad_request"),
    ("GET", "/v1/sessions/main/log?max=1%4", None, 400, "bad_request"),
    ("GET", "/v1/sessions/main/diff", None, 400, "bad_request"),
    ("GET", "/v1/sessions/main/diff?from=nope", None, 404, "ref_not_found"),
    ("GET", "/v1/sessions/main/log?max=abc", None, 400, "bad_request"),
    ("PUT", "/v1/sessions/main/quota", b'{"bytes":-1,"inodes":1}', 400, "bad_request"),
    ("PUT", "/v1/sessions/main/quota", b'{"bytes":"1","inodes":1}', 400, "bad_request"),
    ("POST", "/v1/mounts", b'{"session":"main","mountpoint":"relative"}', 400, None),
    ("POST", "/v1/mounts", b'{"session":"nope","mountpoint":"MP"}', 404, "session_not_found"),
    ("POST", "/v1/mounts", b'{"session":"main","mountpoint":"MP","ro":"yes"}', 400, "bad_request"),
    ("POST", "/v1/mounts", b'{"session":"main","mountpoint":"MP","autocheckpoint":"1"}', 400, "bad_request"),
    ("POST", "/v1/mounts", b'{"session":"main","mountpoint":"MP","bogus":1}', 400, "bad_request"),
    ("POST", "/v1/mounts/unmount", b'{"mountpoint":"/not/mounted"}', 404, "not_found"),
    ("POST", "/v1/sessions/main/exec", b'{"command":["ls"]}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/exec", b'{"command":"true","tool":"nosuch"}', None, None),
    ("POST", "/v1/sessions/main/exec", b'{"command":"true","idempotency_key":""}', 400, "bad_request"),
    ("POST", "/v1/sessions/main/exec", b'{"command":"true","idempotency_key":"' + b"k" * 256 + b'"}', 400,
     "bad_request"),
    ("POST", "/v1/sessions/main/fetch", b'{"url":"http://127.0.0.1:9/","idempotency_key":""}', 400, "bad_request"),
    ("GET", "/v1/nope", None, 404, "not_found"),
    ("DELETE", "/v1/status", None, 405, "method_not_allowed"),
    ("POST", "/tool/execute", b'{"tool_input":{}}', 400, "bad_request"),
]


def test_error_responses(daemon, scratch):
    daemon.ok("session", "new", "main")
    daemon.ok("tag", "main", "t0")
    mp = mkdir(scratch, "mp")
    failures = []
    for method, path, raw, status, code in BAD_REQUESTS:
        if raw:
            raw = raw.replace(b"MP", mp.encode())
        h = daemon.http(method, path, raw=raw)
        if h.status < 400 or (status and h.status != status) or (code and h.code != code):
            failures.append((method, path, raw[:80] if raw else raw, h))
            if os.path.ismount(mp):
                daemon.ok("umount", mp)
            continue
        assert h.status >= 400, (method, path, raw, h)
        if status:
            assert h.status == status, (method, path, raw, h)
        err = h.json["error"]
        assert isinstance(err["message"], str) and err["message"], h
        if code:
            assert err["code"] == code, (method, path, raw, h)
        assert daemon.http("GET", "/health").status == 200
    assert not failures, "\n".join(map(repr, failures))
    daemon.healthy()


@pytest.mark.parametrize("args,code", [
    (["session", "show", "nope"], "session_not_found"),
    (["session", "new", "main"], "session_exists"),
    (["session", "new", "a/b"], "invalid_name"),
    (["session", "new", ".."], "invalid_name"),
    (["session", "new", "x", "--from", "nope"], "ref_not_found"),
    (["checkpoint", "nope"], "session_not_found"),
    (["fork", "main", "bad/name"], "invalid_name"),
    (["fork", "main", "f", "--at", "ffffffff"], "ref_not_found"),
    (["tag", "main", "t0"], "tag_exists"),
    (["rollback", "main", "--to", "nope"], "ref_not_found"),
    (["rollback", "main", "--steps", "3"], "rollback_floor"),
    (["log", "nope"], "session_not_found"),
    (["diff", "main", "nope"], "ref_not_found"),
    (["effects", "nope"], "session_not_found"),
    (["quota", "nope", "--bytes", "1", "--inodes", "1"], "session_not_found"),
    (["tags", "nope"], None),
    (["api", "GET", "/v1/nope"], "not_found"),
])
def test_cli_errors_exit_1(daemon, args, code):
    daemon.ok("session", "new", "main")
    daemon.ok("tag", "main", "t0")
    r = daemon.ctl(*args)
    if code is None and r.returncode == 0:
        return  # tags of an unknown session may list the store tags
    assert r.returncode == 1, (args, r.stdout, r.stderr)
    assert re.fullmatch(r"ntfs-ctl: .+ \([a-z_]+\)\n", r.stderr), r.stderr
    if code:
        assert r.stderr.endswith(f"({code})\n"), r.stderr
    assert r.stdout == ""
    r = daemon.ctl("--json", *args)
    assert r.returncode == 1
    if code:
        assert json.loads(r.stdout)["error"]["code"] == code
    daemon.healthy()


def test_oversize_body_and_headers(daemon):
    daemon.ok("session", "new", "main")
    big = b'{"message":"' + b"x" * (9 * 1024 * 1024) + b'"}'
    s = connect(daemon.sock)
    try:
        s.sendall(build_request("POST", "/v1/sessions/main/checkpoint", raw=big[:0],
                                headers={"Content-Length": str(len(big)), "Content-Type": "application/json"}))
        try:
            s.sendall(big)
        except (BrokenPipeError, ConnectionResetError):
            pass
        resp = read_response(s)
    finally:
        s.close()
    assert resp.status == 413 and resp.code == "payload_too_large"
    # a body that declares a huge length is refused before it is sent
    h = daemon.http("POST", "/v1/sessions", raw=b"",
                    headers={"Content-Length": str(1 << 40)})
    assert h.status == 413
    # headers beyond the limit
    h = daemon.http("GET", "/v1/status", headers={"X-Big": "y" * (64 * 1024)})
    assert h.status == 431 and h.code == "request_header_fields_too_large"
    h = daemon.http("GET", "/v1/status", headers={f"X-{i}": "v" for i in range(200)})
    assert h.status in (400, 431)
    # a huge exec command through the CLI is bounded on our side too
    r = daemon.ctl("checkpoint", "main", "-m", "x" * (70 * 1024))
    assert r.returncode == 2
    daemon.healthy()


def test_slowloris_is_cut_off_and_others_are_served(daemon):
    daemon.ok("session", "new", "main")
    req = build_request("GET", "/v1/status")
    slow = connect(daemon.sock, timeout=60)
    cut = threading.Event()
    sent = [0]
    started = time.monotonic()

    def drip():
        try:
            for b in req:
                slow.sendall(bytes([b]))
                sent[0] += 1
                time.sleep(1)
        except OSError:
            pass
        cut.set()

    t = threading.Thread(target=drip, daemon=True)
    t.start()
    try:
        # meanwhile other clients are served promptly
        for _ in range(5):
            t0 = time.monotonic()
            assert daemon.ctl("status").returncode == 0
            assert daemon.http("POST", "/v1/sessions/main/checkpoint", {}).status == 200
            assert time.monotonic() - t0 < 2.0
            time.sleep(0.5)
        # the slow client is cut off (408 or a close) well before it finishes
        slow.settimeout(40)
        data = b""
        try:
            while True:
                c = slow.recv(4096)
                if not c:
                    break
                data += c
        except (ConnectionResetError, socket.timeout):
            pass
        elapsed = time.monotonic() - started
        assert elapsed < 35, "slow client was not cut off"
        assert sent[0] < len(req), "the slow request completed"
        if data:
            assert data.startswith(b"HTTP/1.1 408"), data
    finally:
        slow.close()
        t.join(timeout=5)
    daemon.healthy()


def test_disconnect_mid_request(daemon, scratch):
    daemon.ok("session", "new", "main")
    mp = mkdir(scratch, "m")
    daemon.ok("mount", "main", mp)
    write(f"{mp}/f", "data\n")
    full = build_request("POST", "/v1/sessions/main/checkpoint", {"message": "cut"})
    for cut in (5, len(full) - 20, len(full) - 3):  # inside the head, the head, the body
        s = connect(daemon.sock)
        s.sendall(full[:cut])
        s.close()
    # a complete request whose client leaves before the answer
    for req in (full, build_request("GET", "/v1/sessions/main/log"),
                build_request("POST", "/v1/sessions/main/exec", {"command": "sleep 1; echo x"})):
        s = connect(daemon.sock)
        s.sendall(req)
        s.shutdown(socket.SHUT_RDWR)
        s.close()
    # a reset in the middle of a keep-alive exchange
    s = connect(daemon.sock)
    s.sendall(build_request("GET", "/v1/status", headers={"Connection": "keep-alive"}))
    read_response(s)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.sendall(b"GET /v1/sta")
    s.close()
    time.sleep(1.5)
    assert daemon.ok("checkpoint", "main").strip()
    assert read(f"{mp}/f") == "data\n"
    daemon.ok("umount", mp)
    daemon.healthy()


# ---- concurrency ----------------------------------------------------------------

def test_eight_clients_concurrently(daemon, scratch):
    """8 sessions, each with a writer hammering its mount and a client that
    checkpoints, forks and reads; every checkpoint holds what was written
    before it."""
    n, rounds = 8, 4
    mps = []
    for i in range(n):
        daemon.ok("session", "new", f"s{i}")
        mp = mkdir(scratch, f"m{i}")
        daemon.ok("mount", f"s{i}", mp)
        # the file exists before the first checkpoint (the writer only
        # ever replaces it, atomically)
        write(f"{mp}/noise", "noise start\n")
        mps.append(mp)
    stop = threading.Event()
    errors = []
    recorded = {i: [] for i in range(n)}  # (commit, marker)

    def writer(i):
        k = 0
        try:
            while not stop.is_set():
                # atomic replace: a checkpoint sees the old or the new file, whole
                write(f"{mps[i]}/.noise.tmp", f"noise {k}\n" * (k % 50 + 1))
                os.rename(f"{mps[i]}/.noise.tmp", f"{mps[i]}/noise")
                k += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"writer {i}: {e!r}")

    def client(i):
        try:
            for r in range(rounds):
                marker = f"session {i} round {r}\n"
                write(f"{mps[i]}/marker", marker)
                if (i + r) % 2:
                    res = daemon.ctl("--json", "checkpoint", f"s{i}", "-m", f"r{r}")
                    assert res.returncode == 0, res.stderr
                    commit = json.loads(res.stdout)["commit"]
                else:
                    h = daemon.http("POST", f"/v1/sessions/s{i}/checkpoint", {"message": f"r{r}"})
                    assert h.status == 200, h
                    commit = h.json["commit"]
                recorded[i].append((commit, marker))
                f = f"f{i}r{r}"
                if r % 2:
                    assert daemon.ctl("fork", f"s{i}", f, "--at", commit).returncode == 0
                else:
                    assert daemon.http("POST", f"/v1/sessions/s{i}/fork", {"name": f, "at": commit}).status == 201
                assert daemon.http("GET", f"/v1/sessions/{f}").json["head"] == commit
                log = daemon.http("GET", f"/v1/sessions/s{i}/log").json["commits"]
                assert commit in [c["commit"] for c in log]
                assert daemon.ctl("session", "show", f"s{i}").returncode == 0
                assert daemon.http("GET", "/v1/status").status == 200
        except Exception as e:  # noqa: BLE001
            errors.append(f"client {i}: {e!r}")

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(n)]
    clients = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in writers + clients:
        t.start()
    for t in clients:
        t.join(timeout=300)
    stop.set()
    for t in writers:
        t.join(timeout=60)
    assert not errors, errors
    # every checkpoint's content: its fork mounted read-only shows the marker
    ro = mkdir(scratch, "ro")
    for i in range(n):
        assert len(recorded[i]) == rounds
        for r, (commit, marker) in enumerate(recorded[i]):
            daemon.ok("mount", f"f{i}r{r}", ro, "--ro")
            try:
                assert read(f"{ro}/marker") == marker, (i, r)
                noise = read(f"{ro}/noise")
                assert noise and all(l.startswith("noise ") for l in noise.splitlines())
            finally:
                daemon.ok("umount", ro)
        # and the commit itself mounted --at
        commit, marker = recorded[i][-1]
        daemon.ok("mount", f"s{i}", ro, "--at", commit)
        try:
            assert read(f"{ro}/marker") == marker
        finally:
            daemon.ok("umount", ro)
    for mp in mps:
        daemon.ok("umount", mp)
    daemon.healthy()


# ---- auto-checkpoint --------------------------------------------------------------

def test_autocheckpoint_from_a_plain_script(daemon, scratch):
    daemon.ok("session", "new", "auto")
    mp = mkdir(scratch, "auto")
    out = daemon.ok("mount", "auto", mp, "--autocheckpoint", "1")
    assert "autocheckpoint" in out
    before = commits(daemon, "auto")
    script = os.path.join(scratch, "edit.sh")
    write(script, """#!/bin/sh
set -e
cd "$1"
echo one > a.txt
mkdir -p src
echo 'int main(void){return 0;}' > src/main.c
sleep 3
echo two > a.txt
echo more >> src/main.c
rm -f gone
sleep 3
""")
    subprocess.run(["sh", script, mp], check=True, timeout=60)
    after = commits(daemon, "auto")
    new = after[:len(after) - len(before)]
    assert len(new) >= 2, f"expected two auto-checkpoints, log: {after}"
    assert daemon.http("GET", "/v1/sessions/auto").json["dirty"] is False
    # undo the last burst
    daemon.ok("rollback", "auto", "--steps", "1")
    assert read(f"{mp}/a.txt") == "one\n"
    assert read(f"{mp}/src/main.c") == "int main(void){return 0;}\n"
    daemon.ok("umount", mp)
    daemon.healthy()


# ---- checkpoint / rollback under a live mount --------------------------------------

def test_rollback_under_live_mount_fork_and_readonly_tag(daemon, scratch):
    daemon.ok("session", "new", "live")
    mp = mkdir(scratch, "live")
    daemon.ok("mount", "live", mp)
    write(f"{mp}/file", "original\n")
    os.chmod(f"{mp}/file", 0o644)
    os.mkdir(f"{mp}/d")
    write(f"{mp}/d/inner", "inner\n")
    c1 = daemon.ok("checkpoint", "live", "-m", "good").strip()
    daemon.ok("tag", "live", "good")
    st1 = os.stat(f"{mp}/file")
    ls1 = subprocess.run(["ls", "-l", mp], capture_output=True, text=True).stdout
    # change everything
    write(f"{mp}/file", "changed and longer\n")
    os.chmod(f"{mp}/file", 0o600)
    os.unlink(f"{mp}/d/inner")
    write(f"{mp}/extra", "x\n")
    c2 = daemon.ok("checkpoint", "live", "-m", "bad").strip()
    assert c2 != c1
    write(f"{mp}/file", "dirty\n")
    # a fork of the bad state, mounted elsewhere
    daemon.ok("fork", "live", "side", "--at", c2)
    side = mkdir(scratch, "side")
    daemon.ok("mount", "side", side)
    # roll back: cat, ls -l and stat see the restored state at once
    daemon.ok("rollback", "live", "--to", "good")
    assert subprocess.run(["cat", f"{mp}/file"], capture_output=True, text=True).stdout == "original\n"
    st = os.stat(f"{mp}/file")
    assert st.st_size == st1.st_size and stat.S_IMODE(st.st_mode) == 0o644
    assert read(f"{mp}/d/inner") == "inner\n" and not os.path.exists(f"{mp}/extra")
    ls = subprocess.run(["ls", "-l", mp], capture_output=True, text=True).stdout
    assert ls == ls1
    out = subprocess.run(["stat", "-c", "%s %a", f"{mp}/file"], capture_output=True, text=True).stdout
    assert out == f"{st1.st_size} 644\n"
    # the fork shows the forked state
    assert read(f"{side}/file") == "changed and longer\n"
    assert stat.S_IMODE(os.stat(f"{side}/file").st_mode) == 0o600
    assert os.path.exists(f"{side}/extra") and not os.path.exists(f"{side}/d/inner")
    # the read-only mount of the tag refuses writes with EROFS
    ro = mkdir(scratch, "ro")
    daemon.ok("mount", "live", ro, "--at", "good")
    assert read(f"{ro}/file") == "original\n"
    for op in (lambda: write(f"{ro}/file", "no"), lambda: write(f"{ro}/new", "no"),
               lambda: os.unlink(f"{ro}/file"), lambda: os.mkdir(f"{ro}/dd"),
               lambda: os.chmod(f"{ro}/file", 0o777)):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno == errno.EROFS
    r = subprocess.run(["sh", "-c", f"echo x > {ro}/file"], capture_output=True, text=True)
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    for m in (ro, side, mp):
        daemon.ok("umount", m)
    daemon.healthy()


def test_cli_md_matches_help():
    """docs/cli.md holds every command's --help text verbatim."""
    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "cli.md")).read()
    overview = run_ctl("--help").stdout
    assert overview in doc
    listed = [re.match(r"^  (.*?)\s{2,}", l).group(1)
              for l in overview.split("Commands:\n")[1].split("\n\n")[0].splitlines()]
    assert set(COMMANDS) <= set(listed)
    for c in listed:
        out = run_ctl("help", *c.split()).stdout
        assert f"## {c}\n\n```\n{out}```" in doc, f"docs/cli.md is out of date for {c}"


def _until(pred, secs=5.0):
    """Polls pred until it is true or secs pass; returns its last value."""
    deadline = time.monotonic() + secs
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.05)


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def test_two_mounts_of_a_session_see_each_others_changes(daemon, scratch):
    # A mount alone on its session answers with 86,400 s timeouts; once a
    # second read-write mount of the session opens, the first drops what its
    # kernel cached and both answer with at most 1 s (docs/mount.md), so a
    # change through one is seen through the other within about a second.
    daemon.ok("session", "new", "two")
    a, b = mkdir(scratch, "a"), mkdir(scratch, "b")
    daemon.ok("mount", "two", a)
    write(f"{a}/f", "one\n")
    write(f"{a}/keep", "k\n")
    # the kernel of mount a caches f's entry, attributes and pages, and the
    # absence of "new"
    assert _read(f"{a}/f") == "one\n" and os.stat(f"{a}/f").st_size == 4
    assert not os.path.exists(f"{a}/new")
    daemon.ok("mount", "two", b)
    assert _read(f"{b}/f") == "one\n"
    write(f"{b}/f", "two two\n")
    write(f"{b}/new", "n\n")
    os.unlink(f"{b}/keep")
    assert _until(lambda: _read(f"{a}/f") == "two two\n"), _read(f"{a}/f")
    assert _until(lambda: os.stat(f"{a}/f").st_size == 8)
    assert _until(lambda: os.path.exists(f"{a}/new") and not os.path.exists(f"{a}/keep"))
    assert sorted(os.listdir(a)) == ["f", "new"]
    # A rewrite of the same size changes only the content and the mtime,
    # which a's kernel does not compare (no FUSE_AUTO_INVAL_DATA,
    # docs/mount.md): it holds f's pages, also for a descriptor kept open,
    # and is told to drop them when b writes.
    fd = os.open(f"{a}/f", os.O_RDONLY)
    try:
        assert os.pread(fd, 8, 0) == b"two two\n"
        with open(f"{b}/f", "r+b") as fb:
            fb.write(b"TWO TWO\n")
        assert _until(lambda: os.pread(fd, 8, 0) == b"TWO TWO\n"), os.pread(fd, 8, 0)
        assert _read(f"{a}/f") == "TWO TWO\n"
    finally:
        os.close(fd)
    # and the other way round
    write(f"{a}/back", "b\n")
    assert _until(lambda: _read(f"{b}/back") == "b\n")
    daemon.ok("umount", b)
    # alone again: still right
    write(f"{a}/after", "x\n")
    assert _read(f"{a}/after") == "x\n"
    daemon.healthy()


def test_a_second_mount_keeps_the_first_ones_open_unlinked_file(daemon, scratch):
    # An unlinked file a process of mount a still holds open is not an
    # orphan while mount a is there: opening a second handle on the session
    # must not free it (it used to: ESTALE through the open descriptor).
    daemon.ok("session", "new", "held")
    a, b = mkdir(scratch, "a"), mkdir(scratch, "b")
    daemon.ok("mount", "held", a)
    data = os.urandom(200 << 10)
    fd = os.open(f"{a}/tmp", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.write(fd, data)
        os.unlink(f"{a}/tmp")
        daemon.ok("mount", "held", b)
        assert os.pread(fd, len(data), 0) == data
        os.pwrite(fd, b"more", len(data))
        assert os.fstat(fd).st_size == len(data) + 4
    finally:
        os.close(fd)
    assert not os.path.exists(f"{b}/tmp")
    daemon.ok("umount", b)
    daemon.ok("umount", a)
    daemon.healthy()


def test_mount_without_dev_fuse_says_so(scratch):
    """Issue 65: an ntfsd that cannot open /dev/fuse (here: run as nobody,
    /dev/fuse being root's) answered 'Input/output error (io_error)', the
    cause only in its log. The answer now names /dev/fuse."""
    def as_nobody():
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    probe = subprocess.run([sys.executable, "-c", "import os; os.close(os.open('/dev/fuse', os.O_RDWR))"],
                           preexec_fn=as_nobody, capture_output=True)
    if probe.returncode == 0:
        pytest.skip("nobody can open /dev/fuse on this machine")
    home = os.path.join(scratch, "nobody")
    os.mkdir(home)
    os.mkdir(os.path.join(home, "mp"))
    os.chown(home, 65534, 65534)
    os.chown(os.path.join(home, "mp"), 65534, 65534)
    sock = os.path.join(home, "s")
    log = open(os.path.join(scratch, "ntfsd-nobody.log"), "wb")
    p = subprocess.Popen([find_bin("ntfsd"), "--store", os.path.join(home, "store"), "--socket", sock, "-f"],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, preexec_fn=as_nobody)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            assert p.poll() is None and time.monotonic() < deadline, "ntfsd as nobody did not start"
            time.sleep(0.05)

        def http(method, path, body=None):
            s = connect(sock)
            try:
                s.sendall(build_request(method, path, body))
                return read_response(s)
            finally:
                s.close()
        assert http("POST", "/v1/sessions", {"name": "n"}).status == 201
        h = http("POST", "/v1/mounts", {"session": "n", "mountpoint": os.path.join(home, "mp")})
        assert h.status == 403 and h.code == "permission_denied", h
        assert "/dev/fuse: Permission denied" in h.json["error"]["message"], h
        assert http("GET", "/v1/mounts").json["mounts"] == []
    finally:
        p.terminate()
        p.wait(timeout=30)
        log.close()


def test_client_retries_a_request_the_daemon_did_not_take(daemon):
    """Issue 70: with every connection slot taken, the daemon answers 503
    too_many_connections at accept, before reading the request. The client
    library (so ntfs-ctl) sends it again after a jittered backoff, for any
    method, since no handler saw it: the command succeeds once a slot is
    free, and fails with the daemon's code when none frees in time."""
    held = []

    def hold_until_full():
        """Takes slots with idle keep-alive connections until the daemon
        refuses one (a slot freed by a closed connection comes back a
        moment later: a refused holder is simply tried again)."""
        for _ in range(1000):
            s = connect(daemon.sock)
            s.sendall(build_request("GET", "/health").replace(b"Connection: close", b"Connection: keep-alive"))
            r = read_response(s)
            if r.status == 200:
                held.append(s)
                continue
            s.close()
            assert r.code == "too_many_connections", r
            time.sleep(0.05)
            if daemon.http("GET", "/health").status == 503:
                return
        raise AssertionError("the daemon never refused a connection")
    try:
        hold_until_full()
        # all slots taken: a command started now waits, and succeeds when they free
        p = subprocess.Popen([daemon.ctl_bin, "--socket", daemon.sock, "session", "new", "late"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.4)
        assert p.poll() is None, f"gave up at once: {p.communicate()}"
        for s in held[:4]:
            s.close()
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert daemon.http("GET", "/v1/sessions/late").status == 200  # made exactly once
        # none frees: the retries are bounded and the daemon's code is said
        hold_until_full()
        t0 = time.monotonic()
        r = daemon.ctl("status")
        took = time.monotonic() - t0
        assert r.returncode == 1 and "(too_many_connections)" in r.stderr, r.stderr
        assert 0.5 < took < 10, took
    finally:
        for s in held:
            s.close()
    daemon.healthy()


def test_conversation_shows_an_agent_sessions_messages(daemon):
    """Issue 65: after ntfs-run ended there was no documented way to look at
    its conversation. 'ntfs-ctl conversation NAME' prints the messages the
    agent saved, in order, with tool calls and results; control characters
    from the model are shown as '?'."""
    daemon.ok("session", "new", "agent1")
    assert daemon.ok("conversation", "agent1") == "no conversation saved for agent1\n"
    messages = [
        {"role": "user", "content": "List the files"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "I will look.\nOne moment."},
            {"type": "tool_use", "id": "toolu_1", "name": "bash_read", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\x1b[31m"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "There is a.txt."}]},
    ]
    h = daemon.http("POST", "/v1/sessions/agent1/state", {"messages": messages, "cursor": 4, "step": 2})
    assert h.status == 200, h
    out = daemon.ok("conversation", "agent1")
    assert out.splitlines() == [
        "[1] user: List the files",
        "[2] assistant: I will look.",
        "    One moment.",
        '[2] assistant calls bash_read (toolu_1): {"command":"ls"}',
        "[3] user result of toolu_1: a.txt?[31m",
        "[4] assistant: There is a.txt.",
    ], out
    j = daemon.jok("conversation", "agent1")
    assert j["messages"] == messages and j["step"] == 2
    r = daemon.ctl("conversation", "nosuch")
    assert r.returncode == 1 and "(session_not_found)" in r.stderr


def test_ntfs_ctl_loads_no_tls_stack_at_start():
    """ntfs-ctl starts once per command, so what it loads counts (docs/jail.md,
    "Speed"): its client speaks HTTP/1.1 over the socket itself, and it
    never hashes, so neither libcurl (34 libraries with TLS, Kerberos, LDAP)
    nor libcrypto is loaded."""
    out = subprocess.run(["ldd", ctl_bin()], capture_output=True, text=True, timeout=60, check=True).stdout
    loaded = [line.split()[0] for line in out.splitlines() if line.strip()]
    for lib in ("libcurl", "libcrypto", "libssl", "libgnutls", "libkrb5"):
        assert not any(name.startswith(lib) for name in loaded), (lib, loaded)

