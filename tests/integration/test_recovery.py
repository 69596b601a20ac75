# SPDX-License-Identifier: MIT
"""Crash recovery of ntfsd (docs/recovery.md): for every effect class and
every crash point, kill -9 the daemon, restart it, and check what a user
would: the workspace is the expected commit, the effect's journal status is
as specified, an irreversible effect reached the outside world at most once
(exactly once when it had reached it) whatever the agent retries, and a
repeated idempotency key runs nothing. Also: resume/revive/state, replay.

Crash points (the write order is: intent row -> run -> checkpoint -> finish):
  after_begin       NTFS_FAULT=exec.after_begin:2:crash (the intent row is durable, nothing ran)
  during            kill -9 of ntfsd while the jailed command sleeps (it has written and hit the counter)
  after_run         NTFS_FAULT=exec.after_run:2:crash (ran, no checkpoint yet)
  after_checkpoint  NTFS_FAULT=exec.after_checkpoint:2:crash (checkpoint durable, row still pending)
  after_completion  kill -9 after the answer (row finished)
(":2": the first hit is the baseline bash_write that makes the commit C0.)

The outside world is a counting HTTP server on a Unix socket that the jail can
reach (recovery_fixtures.py explains why not 127.0.0.1).

Run: NTFS_BUILD=/work/main/build /usr/bin/python3 -m pytest tests/integration/test_recovery.py
"""
import http.server
import json
import os
import re
import threading
import time

import pytest

from recovery_fixtures import Counter, Runner, find_bin

CLASSES = ["bash_read", "bash_write", "bash_build", "bash_run"]
POINTS = ["after_begin", "during", "after_run", "after_checkpoint", "after_completion"]
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


@pytest.fixture
def runner(scratch):
    if find_bin("ntfsd") is None or find_bin("ntfs-ctl") is None:
        pytest.skip("ntfsd / ntfs-ctl are not built under $NTFS_BUILD")
    r = Runner(scratch)
    try:
        yield r
    finally:
        rc = r.stop()
        r.close()
        log = r.log_tail(10**7)
        errs = [l for l in log.splitlines() if any(m in l for m in SANITIZER_MARKS)]
        assert not errs, "sanitizer reports in ntfsd's log:\n" + log[log.find(errs[0]):][:8000]
        assert rc == 0, f"ntfsd exited {rc} after SIGTERM: {log[-3000:]}"


@pytest.fixture
def counter():
    try:
        c = Counter()
    except PermissionError:
        pytest.skip("cannot create the counter socket under /usr/local/share (needs root)")
    try:
        yield c
    finally:
        c.close()


def workspace_is(r, session, commit):
    """The session's head is commit and its working state has no change."""
    assert r.head(session) == commit
    d = r.ok("GET", f"/v1/sessions/{session}/diff?from={commit}")
    assert d["changes"] == [], d


def read_file(r, session, path):
    st, j = r.exec(session, "bash_read", f"cat {path} 2>/dev/null || echo MISSING")
    assert st == 200, j
    return j["stdout"]


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("tool", CLASSES)
def test_crash_matrix(runner, counter, tool, point):
    r = runner
    fault = {"after_begin": "exec.after_begin:2:crash", "after_run": "exec.after_run:2:crash",
             "after_checkpoint": "exec.after_checkpoint:2:crash"}.get(point)
    r.start(fault=fault)
    r.ok("POST", "/v1/sessions", {"name": "w"})
    st, j = r.exec("w", "bash_write", "echo base > base.txt", key="base")
    assert st == 200 and j["exit_code"] == 0, j
    c0 = r.head("w")
    tag = f"/{tool}/{point}"
    writes = tool != "bash_read"
    if point == "during":
        cmd = (("echo partial > f.txt; " if writes else "") + counter.curl(tag + "/started") +
               "; sleep 3; " + counter.curl(tag + "/after") + ("; echo done >> f.txt" if writes else ""))
    else:
        cmd = ("echo done > f.txt; " if writes else "cat base.txt; ") + counter.curl(tag + "/started")
    key = "k-" + tool

    if point == "during":
        def call():
            try:
                r.exec("w", tool, cmd, key=key)
            except OSError:
                pass  # the daemon died under the call
        t = threading.Thread(target=call, daemon=True)
        t.start()
        counter.wait(tag + "/started")
        r.kill9()
        t.join(30)
    elif point == "after_completion":
        st, res = r.exec("w", tool, cmd, key=key)
        assert st == 200 and res["exit_code"] == 0, res
        r.kill9()
    else:
        with pytest.raises(OSError):  # the daemon dies inside the call
            r.exec("w", tool, cmd, key=key)
        assert r.wait_dead() == -9, r.log_tail()

    r.start()  # recovery runs before the socket opens
    ran = point != "after_begin"
    # bash_read makes no checkpoint: its after_checkpoint crash is still "in flight"
    completed = point == "after_completion" or (point == "after_checkpoint" and writes)
    effs = r.effects("w")
    assert len(effs) == 2, effs
    e = effs[1]
    assert e["idempotency_key"] == key and e["tool"] == tool

    # --- the status, as specified ---
    if completed:
        assert e["status"] == "done", e
    elif tool == "bash_run":
        assert e["status"] == "outcome_unknown", e
        assert "never re-run" in e["reason"]
    else:
        assert e["status"] == "failed", e
        assert e["reason"] == "interrupted by daemon crash"

    # --- the workspace is the expected commit ---
    if writes and completed:
        assert e["commit_after"] and e["commit_after"] != c0
        workspace_is(r, "w", e["commit_after"])
        assert read_file(r, "w", "f.txt") == "done\n"
    else:
        workspace_is(r, "w", c0)
        assert read_file(r, "w", "f.txt") == "MISSING\n"  # a partial write was rolled back
    assert read_file(r, "w", "base.txt") == "base\n"

    # --- the outside world: reached once if it was reached, never twice ---
    assert counter.count(tag + "/started") == (1 if ran else 0)
    if point == "during":
        time.sleep(3.5)  # the jailed command would have hit /after by now had it survived
        assert counter.count(tag + "/after") == 0, "the jailed command outlived the daemon"

    # --- the agent retries with the same key: nothing runs ---
    n_before = len(r.effects("w"))
    for _ in range(2):
        st, res = r.exec("w", tool, cmd, key=key)
        assert st == 200, res
        assert res["replayed"] is True and res["effect_id"] == e["id"]
        if not completed:
            assert res["status"] == e["status"]
    assert len(r.effects("w")) == n_before
    assert counter.count(tag + "/started") == (1 if ran else 0)
    assert counter.count(tag + "/after") == 0

    # --- resume tells the agent ---
    res = r.ok("POST", "/v1/sessions/w/resume", {})
    assert res["head"] == r.head("w") and res["pending"] == 0
    assert e["id"] in [x["id"] for x in res["last_effects"]]  # (the checks' bash_reads follow it)
    assert res["outcome_unknown"] == ([e["id"]] if e["status"] == "outcome_unknown" else [])
    rc = r.ctl("fsck")
    assert rc.returncode == 0 and rc.stdout.startswith("ok"), rc.stdout + rc.stderr
    if ran and not completed:
        assert "recovery:" in r.log_tail(), "recovery did not log what it did"


def test_checkpoint_acknowledged_during_a_command_survives_recovery(runner, counter):
    """A client checkpoints the session while a jailed bash_write runs; the
    daemon is killed before the command ends. Recovery must not roll the
    session back to the command's commit_before: that would take the
    acknowledged checkpoint out of the session's history."""
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "w"})
    st, j = r.exec("w", "bash_write", "echo base > base.txt", key="base")
    assert st == 200 and j["exit_code"] == 0, j
    c0 = r.head("w")
    tag = "/moved"
    cmd = "echo partial > p.txt; " + counter.curl(tag + "/started") + "; sleep 5; echo late >> p.txt"

    def call():
        try:
            r.exec("w", "bash_write", cmd, key="long")
        except OSError:
            pass  # the daemon died under the call
    t = threading.Thread(target=call, daemon=True)
    t.start()
    counter.wait(tag + "/started")
    ack = r.ok("POST", "/v1/sessions/w/checkpoint", {"message": "acknowledged"})["commit"]
    assert ack != c0
    r.kill9()
    t.join(30)
    r.start()
    assert r.head("w") == ack, "recovery moved the head off an acknowledged checkpoint"
    hist = r.ok("GET", "/v1/sessions/w/log")
    ids = [c["commit"] for c in hist["commits"]]
    assert ack in ids and c0 in ids
    e = [x for x in r.effects("w") if x["idempotency_key"] == "long"][0]
    assert e["status"] == "failed", e
    assert "not rolled back" in e["reason"], e
    assert read_file(r, "w", "p.txt") == "partial\n"  # the working state was kept
    rc = r.ctl("fsck")
    assert rc.returncode == 0 and rc.stdout.startswith("ok"), rc.stdout + rc.stderr


def test_repeated_key_runs_nothing(runner, counter):
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "w"})
    cmd = "echo x >> f.txt; " + counter.curl("/once")
    first = None
    for i in range(3):
        st, j = r.exec("w", "bash_run", cmd, key="tool_use_1")
        assert st == 200, j
        assert j["replayed"] is (i > 0)
        first = first or j
        assert j["effect_id"] == first["effect_id"] and j["checkpoint"] == first["checkpoint"]
    assert counter.count("/once") == 1
    assert len(r.effects("w")) == 1
    assert read_file(r, "w", "f.txt") == "x\n"
    # the same key over the seed API is the same call
    st, j = r.http("POST", "/tool/execute", {"tool_name": "bash_run", "tool_input": {"command": cmd},
                                            "tool_use_id": "tool_use_1", "session_id": "w"})
    assert st == 200 and j["replayed"] is True
    assert counter.count("/once") == 1


def test_stale_mount_is_cleaned_and_session_mountable(runner, counter):
    """After kill -9 the jail mount under the store is dead (ENOTCONN);
    recovery unmounts it so the session's next command works."""
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "w"})
    assert r.exec("w", "bash_write", "echo 1 > a")[0] == 200
    mp = os.path.join(r.store, "mnt", "w")
    assert os.path.ismount(mp)
    r.kill9()
    with pytest.raises(OSError):
        os.listdir(mp)  # the dead FUSE mount
    r.start()
    assert "stale mount" in r.log_tail()
    assert read_file(r, "w", "a") == "1\n"


def test_resume_state_and_revive(runner):
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "agent"})
    res = r.ok("POST", "/v1/sessions/agent/resume")
    assert res["messages"] == [] and res["cursor"] == 0 and res["step"] == 0 and res["last_effects"] == []
    msgs = [{"role": "user", "content": "build it"}, {"role": "assistant", "content": "ok"}]
    assert r.exec("agent", "bash_write", "echo 1 > a", key="t1")[0] == 200
    saved = r.ok("POST", "/v1/sessions/agent/state", {"messages": msgs, "cursor": 2, "step": 1})
    assert saved["commit"] == r.head("agent")
    # bad input is refused
    assert r.http("POST", "/v1/sessions/agent/state", {"messages": msgs, "cursor": -1, "step": 1})[0] == 400
    assert r.http("POST", "/v1/sessions/agent/state", {"cursor": 1, "step": 1})[0] == 400
    assert r.http("POST", "/v1/sessions/nope/state", {"messages": [], "cursor": 0, "step": 1})[0] == 404
    r.kill9()
    r.start()
    res = r.ok("POST", "/v1/sessions/agent/resume", {"effects": 5})
    assert res["messages"] == msgs and res["cursor"] == 2 and res["step"] == 1
    assert res["state_commit"] == saved["commit"] and res["head"] == saved["commit"]
    assert [e["idempotency_key"] for e in res["last_effects"]] == ["t1"]
    rv = r.ok("POST", "/session/revive", {"session_id": "agent"})
    assert rv["restored_messages"] == msgs and rv["cursor"] == 2
    assert r.http("POST", "/session/revive", {"session_id": "nope"})[0] == 404
    assert r.http("POST", "/v1/sessions/agent/resume", {"effects": "x"})[0] == 400


def test_replay_deterministic_and_diverging(runner):
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "det"})
    steps = [("bash_write", "mkdir -p src && echo 'int main(){return 0;}' > src/m.c"),
             ("bash_read", "ls src"),
             ("bash_build", "cd src && cc -o m m.c && ./m && echo built > ../status"),
             ("bash_write", "cd /workspace && sort -r src/m.c > rev.txt")]
    for tool, cmd in steps:
        st, j = r.exec("det", tool, cmd)
        assert st == 200 and j["exit_code"] == 0, j
    rc = r.ctl("replay", "det", "--into", "det2")
    assert rc.returncode == 0, rc.stderr
    assert rc.stdout.strip().endswith("no divergence"), rc.stdout
    j = r.ok("POST", "/v1/sessions/det/replay", {"into": "det3"})
    assert [s["status"] for s in j["steps"]] == ["same", "served", "same", "same"]
    assert j["first_divergence"] is None
    # the fork ends with the same content as the original
    assert r.ok("GET", f"/v1/sessions/det3/diff?from={r.head('det')}")["changes"] == []

    r.ok("POST", "/v1/sessions", {"name": "rnd"})
    for cmd in ["echo a > a", "echo b > b", "head -c 16 /dev/urandom | od -x > noise", "echo c > c"]:
        assert r.exec("rnd", "bash_write", cmd)[0] == 200
    rc = r.ctl("replay", "rnd", "--into", "rnd2")
    assert rc.returncode == 0, rc.stderr
    assert re.search(r"^first divergence: step 3$", rc.stdout, re.M), rc.stdout
    j = r.ok("POST", "/v1/sessions/rnd/replay", {"into": "rnd3", "from_step": 2})
    assert j["first_divergence"] == 3
    assert j["steps"][0]["step"] == 2 and j["steps"][0]["status"] == "same"
    assert j["steps"][1]["status"] == "diverged" and j["steps"][1]["paths"] == ["M\tnoise"]
    # a replay never re-runs an irreversible effect
    r.ok("POST", "/v1/sessions", {"name": "irr"})
    assert r.exec("irr", "bash_run", "date +%s%N > t")[0] == 200
    j = r.ok("POST", "/v1/sessions/irr/replay", {"into": "irr2"})
    assert [s["status"] for s in j["steps"]] == ["served"]
    assert r.ok("GET", f"/v1/sessions/irr2/diff?from={r.head('irr')}")["changes"] == []
    assert len(r.effects("irr2")) == 0
    # errors
    assert r.http("POST", "/v1/sessions/rnd/replay", {"into": "rnd2"})[0] == 409
    assert r.http("POST", "/v1/sessions/rnd/replay", {"into": "x", "from_step": 99})[0] == 404
    assert r.http("POST", "/v1/sessions/nope/replay", {"into": "y"})[0] == 404
    assert r.http("POST", "/v1/sessions/rnd/replay", {})[0] == 400


def test_replay_serves_a_cancelled_call_instead_of_running_it_to_its_end(runner):
    """A cancelled call was stopped part way: a replay applies what it had
    done when it was stopped (its recorded commit) and does not run it again
    to completion (which never happened, and would be called divergence)."""
    r = runner
    r.start()
    r.ok("POST", "/v1/sessions", {"name": "c"})
    assert r.exec("c", "bash_write", "echo one > one")[0] == 200
    done = {}

    def slow():
        done["res"] = r.http("POST", "/v1/sessions/c/exec", {"command": "echo began > began; sleep 30; echo end > end",
                                                             "tool": "bash_write", "cancel_token": "tok-1"})

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(2)  # past its first line (a call cancelled while its jail starts never ran)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st, _ = r.http("POST", "/v1/sessions/c/exec/cancel", {"cancel_token": "tok-1"})
        if st == 200:
            break
        time.sleep(0.1)
    t.join(60)
    st, j = done["res"]
    assert st == 200 and j.get("cancelled") is True, j
    rows = r.effects("c")
    assert rows[-1]["status"] == "failed" and rows[-1]["reason"] == "cancelled"
    j = r.ok("POST", "/v1/sessions/c/replay", {"into": "c2"})
    assert [s["status"] for s in j["steps"]] == ["same", "served"], j
    assert j["steps"][1]["recorded_reason"] == "cancelled" and j["first_divergence"] is None
    # the fork holds what the cancelled call had done, and only that
    files = r.ok("POST", "/v1/sessions/c2/exec", {"command": "ls", "tool": "bash_read"})["stdout"].split()
    assert "one" in files and "began" in files and "end" not in files
    assert r.ok("GET", f"/v1/sessions/c2/diff?from={r.head('c')}")["changes"] == []


class _Hits(http.server.BaseHTTPRequestHandler):
    hits = {}
    lock = threading.Lock()

    def do_GET(self):
        with self.lock:
            _Hits.hits[self.path] = _Hits.hits.get(self.path, 0) + 1
        body = b"fetched " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def hit_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hits)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("point", ["after_begin", "after_fetch", "after_completion"])
def test_fetch_url_crash(runner, hit_server, scratch, point):
    """A fetch_url reaches the outside world at most once whatever crashes:
    a crash before the fetch or after it (before the journal row is
    finished) leaves outcome_unknown and is never fetched again; a finished
    one is served from the journal."""
    r = runner
    policy = os.path.join(scratch, "policy.ini")
    with open(policy, "w") as f:
        f.write("[fetch]\nallow_hosts = 127.0.0.1\nallow_ports = *\nprivate_hosts = 127.0.0.1\n")
    args = ("--policy", policy)
    fault = {"after_begin": "fetch.after_begin:1:crash", "after_fetch": "fetch.after_fetch:1:crash"}.get(point)
    r.start(fault=fault, args=args)
    r.ok("POST", "/v1/sessions", {"name": "w"})
    path = f"/{point}"
    url = f"http://127.0.0.1:{hit_server}{path}"
    body = {"url": url, "idempotency_key": "f1"}
    if fault:
        with pytest.raises(OSError):  # the daemon dies inside the call
            r.http("POST", "/v1/sessions/w/fetch", body)
        assert r.wait_dead() == -9, r.log_tail()
    else:
        st, j = r.http("POST", "/v1/sessions/w/fetch", body)
        assert st == 200 and "fetched" in json.dumps(j), j
        r.kill9()
    r.start(args=args)
    hits = _Hits.hits.get(path, 0)
    assert hits == (0 if point == "after_begin" else 1)
    effs = r.effects("w")
    assert len(effs) == 1 and effs[0]["tool"] == "fetch_url", effs
    assert effs[0]["status"] == ("done" if point == "after_completion" else "outcome_unknown"), effs[0]
    # the agent retries, twice, with the same key: nothing reaches the server again
    for _ in range(2):
        st, j = r.http("POST", "/v1/sessions/w/fetch", body)
        assert st in (200, 409, 502), (st, j)
    assert _Hits.hits.get(path, 0) == hits
    assert len(r.effects("w")) == 1
