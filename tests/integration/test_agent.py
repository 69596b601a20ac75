# SPDX-License-Identifier: MIT
"""The agent loop, the supervisor and /step (issue 8; docs/agent.md).

A scripted Messages-API server (tests/helpers/fake_anthropic.py) plays the
model and a loopback HTTP server (tests/helpers/http_server.py) is the
outside world reached by fetch_url. The task writes files (bash_write),
builds with cc (bash_build), fetches a loopback URL (fetch_url) and runs a
command with an outside effect (bash_run: it appends a line to effects.log,
so the line count is the number of times it ran). ntfs-run supervises
ntfsd and ntfs-agent; the tests kill the agent, the daemon (kill -9) and the
jailed command mid-task, and check each time: the final workspace, the
fetch and the outside effect each counted once, every generation requested
from the model server exactly once.
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import BUILD, SANITIZER_MARKS, find_bin, lazy_unmount, mounts_under
from ctl_fixtures import Daemon, daemon  # noqa: F401 (the fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(os.path.dirname(HERE), "helpers")
PY = sys.executable or "/usr/bin/python3"

HELLO_C = '#include <stdio.h>\nint main(void) { puts("hello ntfs"); return 0; }\n'
# Distinct commands, so that a test can find the jailed process of one step.
BUILD_SLOW = "sleep 1.7 && cc -o hello src/hello.c"
RUN_SLOW = "sleep 1.9; ./hello >> effects.log"
N_GENERATIONS = 7


def msg(n, content, stop="tool_use"):
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "fake-model", "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}


def use(uid, tool, **inp):
    return {"type": "tool_use", "id": uid, "name": tool, "input": inp}


def task_script(fetch_port):
    """The model's side of the task: one scripted reply per generation."""
    write_src = "mkdir -p src && cat > src/hello.c <<'EOF'\n" + HELLO_C + "EOF"
    steps = [
        msg(1, [{"type": "text", "text": "Writing the source."}, use("tu_1", "bash_write", command=write_src),
                use("tu_2", "bash_read", command="cat src/hello.c")]),
        msg(2, [use("tu_3", "bash_build", command=BUILD_SLOW)]),
        # the model checks the build (and builds again if it is missing)
        msg(3, [use("tu_4", "bash_build", command="test -x hello || cc -o hello src/hello.c")]),
        msg(4, [use("tu_5", "fetch_url", url=f"http://127.0.0.1:{fetch_port}/ok")]),
        msg(5, [use("tu_6", "bash_write", command="printf 'ok\\n' > fetched.txt")]),
        msg(6, [use("tu_7", "bash_run", command=RUN_SLOW)]),
        msg(7, [{"type": "text", "text": "All done: hello built, page fetched, program run."}], stop="end_turn"),
    ]
    assert len(steps) == N_GENERATIONS
    return {"steps": [{"status": 200, "body": s} for s in steps]}


class Helper:
    """A helper server script started on loopback; prints PORT n."""

    def __init__(self, script):
        self.proc = subprocess.Popen([PY, os.path.join(HELPERS, script)], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), f"{script} did not start: {line!r}"
        self.port = int(line.split()[1])

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def post(self, path, obj):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(obj).encode(),
                                     method="POST", headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class World:
    """The model server, the fetch target, a policy and a store directory."""

    def __init__(self, scratch):
        self.scratch = scratch
        self.model = Helper("fake_anthropic.py")
        try:
            self.web = Helper("http_server.py")
            self.model.post("/_control/script", task_script(self.web.port))
        except BaseException:
            self.model.stop()
            raise
        self.store = os.path.join(scratch, "store")
        self.sock = os.path.join(scratch, "s")
        self.policy = os.path.join(scratch, "policy.ini")
        with open(self.policy, "w") as f:
            f.write("[fetch]\nallow_hosts = 127.0.0.1\nallow_ports = *\nprivate_hosts = 127.0.0.1\n")
        self.procs = []

    def env(self):
        e = dict(os.environ)
        e.update({"NTFS_STORE": self.store, "NTFS_SOCKET": self.sock, "ANTHROPIC_API_KEY": "sk-test-secret",
                  "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.model.port}", "LLM_MODEL": "fake-model"})
        return e

    def generations(self):
        return len(self.model.get("/_control/log"))

    def fetches(self):
        return self.web.get("/_count").get("/ok", 0)

    def run(self, *args):
        """ntfs-run in its own process group, stdout and stderr to files."""
        binary = find_bin("ntfs-run")
        if binary is None:
            pytest.skip(f"ntfs-run is not built under {BUILD}")
        out = open(os.path.join(self.scratch, "run.out"), "ab")
        err = open(os.path.join(self.scratch, "run.err"), "ab")
        p = subprocess.Popen([binary, "--policy", self.policy, "-v", *args], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, env=self.env(), start_new_session=True)
        out.close()
        err.close()
        self.procs.append(p)
        return p

    def text(self, name):
        with open(os.path.join(self.scratch, name), "rb") as f:
            return f.read().decode(errors="replace")

    def session(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.text("run.out").splitlines():
                if line.startswith("session "):
                    return line.split()[1]
            time.sleep(0.05)
        raise AssertionError("ntfs-run printed no session id:\n" + self.text("run.err"))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                    p.wait(timeout=30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        # daemons restarted by ntfs-run live in the same group; jails die with them
        lazy_unmount(self.scratch)
        self.model.stop()
        self.web.stop()


@pytest.fixture
def world(scratch):
    w = World(scratch)
    try:
        yield w
    finally:
        w.stop()
        assert not mounts_under(scratch), f"mounts left behind: {mounts_under(scratch)}"


# ---- process helpers -------------------------------------------------------------------------------

def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def child_named(run, name, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in children(run.pid):
            if comm(c) == name:
                return c
        time.sleep(0.02)
    raise AssertionError(f"ntfs-run has no child {name}")


def process_running(fragment, want_comm="bash", timeout=60):
    """The pid of the process named want_comm whose command line holds fragment."""
    deadline = time.monotonic() + timeout
    frag = fragment.encode()
    while time.monotonic() < deadline:
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if frag in cmd and comm(int(d)) == want_comm:
                return int(d)
        time.sleep(0.02)
    raise AssertionError(f"no {want_comm} process running {fragment!r}")


def wait_exit(p, timeout=120):
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError("ntfs-run did not finish")


# ---- the final state -------------------------------------------------------------------------------

def check_final(world, session, fetches=1):
    """What a user checks afterwards, on a fresh daemon over the same store."""
    assert world.generations() == N_GENERATIONS, "every generation requested exactly once"
    assert world.fetches() == fetches, "the fetch reached the outside exactly once"
    d = Daemon(world.scratch)
    try:
        mp = os.path.join(world.scratch, "view")
        os.mkdir(mp)
        d.ok("mount", session, mp, "--ro")
        try:
            files = sorted(os.listdir(mp))
            assert files == ["effects.log", "fetched.txt", "hello", "src"], files
            with open(os.path.join(mp, "src", "hello.c")) as f:
                assert f.read() == HELLO_C
            with open(os.path.join(mp, "effects.log")) as f:
                assert f.read() == "hello ntfs\n", "the outside effect ran exactly once"
            with open(os.path.join(mp, "fetched.txt")) as f:
                assert f.read() == "ok\n"
            assert os.access(os.path.join(mp, "hello"), os.X_OK)
        finally:
            d.ok("umount", mp)
        effects = d.http("GET", f"/v1/sessions/{session}/effects").json["effects"]
        runs = [e for e in effects if e["tool"] == "bash_run"]
        assert len(runs) == 1 and runs[0]["status"] == "done", runs
        gens = [e for e in effects if e["tool"] == "llm_generate"]
        assert len(gens) == N_GENERATIONS and all(e["status"] == "done" for e in gens), gens
        d.fsck_clean()
    finally:
        rc = d.stop()
        errs = d.sanitizer_errors()
    assert rc == 0
    assert not errs, errs
    return effects


def run_log_clean(world):
    text = world.text("run.err")
    bad = [l for l in text.splitlines() if any(m in l for m in SANITIZER_MARKS)]
    assert not bad, "sanitizer reports:\n" + "\n".join(bad)
    assert "sk-test-secret" not in text and "sk-test-secret" not in world.text("run.out")
    return text


# ---- the crash-and-recover scenario ------------------------------------------------------------------

def test_run_completes_and_agent_holds_no_key(world):
    run = world.run("Build hello, fetch the page, run hello once.")
    session = world.session()
    agent = child_named(run, "ntfs-agent")
    with open(f"/proc/{agent}/environ", "rb") as f:
        env = f.read().split(b"\0")
    assert not [v for v in env if v.startswith((b"ANTHROPIC_", b"LLM_MODEL="))], "the agent got the model's config"
    assert wait_exit(run) == 0, world.text("run.err")
    assert "All done" in world.text("run.out")
    effects = check_final(world, session)
    assert not any(e.get("replayed") for e in effects if e["tool"] == "bash_run")
    log = run_log_clean(world)
    assert "died" not in log
    # every request the model server saw came from the daemon, with the key
    reqs = world.model.get("/_control/log")
    assert all(r["headers"].get("x-api-key") == "sk-test-secret" for r in reqs)
    assert [u["name"] for u in reqs[0]["body"]["tools"]] == ["bash_read", "bash_write", "bash_build", "bash_run",
                                                           "fetch_url"]
    assert "/workspace" in reqs[0]["body"]["system"]


def test_kill_agent_mid_task(world):
    run = world.run("Build hello, fetch the page, run hello once.")
    session = world.session()
    process_running(RUN_SLOW)  # the outside effect is running in the jail
    agent = child_named(run, "ntfs-agent")
    os.kill(agent, signal.SIGKILL)
    assert wait_exit(run) == 0, world.text("run.err")
    check_final(world, session)
    log = run_log_clean(world)
    assert "ntfs-agent exited (signal 9)" in log and f"resuming session {session}" in log


def test_kill_daemon_mid_task(world):
    run = world.run("Build hello, fetch the page, run hello once.")
    session = world.session()
    process_running(BUILD_SLOW)  # the build is running in the jail
    daemon = child_named(run, "ntfsd")
    os.kill(daemon, signal.SIGKILL)
    assert wait_exit(run) == 0, world.text("run.err")
    effects = check_final(world, session)
    log = run_log_clean(world)
    assert "ntfsd exited (signal 9)" in log and "restarting ntfsd" in log
    # the interrupted build was rolled back by recovery and ran again under a new key
    builds = [e for e in effects if e["tool"] == "bash_build"]
    assert any(e["status"] == "failed" and "daemon crash" in (e.get("reason") or "") for e in builds), builds
    assert any(e["status"] == "done" and e.get("idempotency_key", "").startswith("tu_3#retry") for e in builds), \
        builds


def test_kill_jailed_command_mid_run(world):
    run = world.run("Build hello, fetch the page, run hello once.")
    session = world.session()
    cmd = process_running(BUILD_SLOW)
    pids = (child_named(run, "ntfsd"), child_named(run, "ntfs-agent"))
    os.kill(cmd, signal.SIGKILL)
    assert wait_exit(run) == 0, world.text("run.err")
    effects = check_final(world, session)
    log = run_log_clean(world)
    # the daemon and the agent both lived on: the call failed, the session went on
    assert "died" not in log and "restarting" not in log and "ntfs-run: resuming session" not in log
    assert all(str(p) in log for p in pids) and log.count("started (pid") == 2
    killed = [e for e in effects if e["tool"] == "bash_build" and e["idempotency_key"] == "tu_3"]
    assert killed and killed[0]["status"] == "failed", killed
    # the model saw the failure; its next step built hello
    reqs = world.model.get("/_control/log")
    results = [b for m in reqs[2]["body"]["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b.get("tool_use_id") == "tu_3"]
    assert results and results[0]["is_error"] is True, results


def test_resume_finished_session_asks_nothing(world):
    run = world.run("Build hello, fetch the page, run hello once.")
    session = world.session()
    assert wait_exit(run) == 0, world.text("run.err")
    again = world.run("--resume", session)
    assert wait_exit(again) == 0, world.text("run.err")
    assert world.text("run.out").count("All done") == 2
    check_final(world, session)


# ---- /step ---------------------------------------------------------------------------------------------

def test_step_driven_by_a_python_script(world):
    d = Daemon(world.scratch, extra=("--policy", world.policy, "--env-file", envfile(world)))
    try:
        p = subprocess.run([PY, os.path.join(HELPERS, "step_driver.py"), "--socket", d.sock,
                            "Build hello, fetch the page, run hello once."], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        session = p.stdout.split()[1]
        assert "All done" in p.stdout
        # any client can ask where the session stands: done, with nothing to apply
        st = d.http("POST", "/step", {"session_id": session})
        assert st.status == 200 and st.json["next_action"]["type"] == "done" and not st.json["applied"]
    finally:
        rc = d.stop()
    assert rc == 0 and not d.sanitizer_errors(), d.sanitizer_errors()
    check_final(world, session)


def test_step_mode_of_the_agent_with_a_crash(world):
    run = world.run("--step", "Build hello, fetch the page, run hello once.")
    session = world.session()
    process_running(RUN_SLOW)
    os.kill(child_named(run, "ntfs-agent"), signal.SIGKILL)
    assert wait_exit(run) == 0, world.text("run.err")
    check_final(world, session)


def envfile(world):
    path = os.path.join(world.scratch, "llm.env")
    with open(path, "w") as f:
        f.write(f"ANTHROPIC_API_KEY=sk-test-secret\nANTHROPIC_BASE_URL=http://127.0.0.1:{world.model.port}\n"
                "LLM_MODEL=fake-model\n")
    return path


def test_step_protocol(daemon):
    s = daemon.http("POST", "/session/start", {}).json["session_id"]
    r = daemon.http("POST", "/step", {"session_id": s})
    assert r.status == 200 and r.json["next_action"] == {"type": "wait_user"} and r.json["cursor"] == 0
    r = daemon.http("POST", "/step", {"session_id": s, "cursor": 0,
                                      "event": {"type": "user_message", "content": "list the files"}})
    act = r.json["next_action"]
    assert r.json["applied"] and r.json["cursor"] == 1 and act["type"] == "call_llm"
    assert act["idempotency_key"] == f"gen:{s}:1" and act["messages"][-1]["content"] == "list the files"
    assert {t["name"] for t in act["tools"]} == {"bash_read", "bash_write", "bash_build", "bash_run", "fetch_url"}
    # an event the conversation does not expect is refused
    r = daemon.http("POST", "/step", {"session_id": s, "event": {"type": "tool_result", "tool_use_id": "x",
                                                                  "content": "?"}})
    assert r.status == 409 and r.code == "conflict"
    r = daemon.http("POST", "/step", {"session_id": s, "event": {"type": "nonsense"}})
    assert r.status == 400
    gen = {"type": "llm_result", "content": [use("a", "bash_read", command="ls"),
                                             use("b", "bash_write", command="touch f")], "stop_reason": "tool_use"}
    r = daemon.http("POST", "/step", {"session_id": s, "cursor": 1, "event": gen})
    assert r.json["cursor"] == 2 and r.json["step"] == 1
    assert r.json["next_action"] == {"type": "execute_tool", "tool_name": "bash_read", "tool_input": {"command": "ls"},
                                     "tool_use_id": "a"}
    # the same event sent again (a client that crashed before it read the answer) is not applied twice
    r2 = daemon.http("POST", "/step", {"session_id": s, "cursor": 1, "event": gen})
    assert r2.status == 200 and not r2.json["applied"] and r2.json["cursor"] == 2
    assert r2.json["next_action"] == r.json["next_action"]
    r = daemon.http("POST", "/step", {"session_id": s, "cursor": 2,
                                      "event": {"type": "tool_result", "tool_use_id": "a", "content": "(empty)"}})
    assert r.json["next_action"]["tool_use_id"] == "b"
    # without a cursor, a repeated tool_result is recognized by its id
    r = daemon.http("POST", "/step", {"session_id": s,
                                      "event": {"type": "tool_result", "tool_use_id": "a", "content": "(empty)"}})
    assert not r.json["applied"] and r.json["next_action"]["tool_use_id"] == "b"
    r = daemon.http("POST", f"/v1/sessions/{s}/step",
                    {"event": {"type": "tool_result", "tool_use_id": "b", "content": "ok", "is_error": False}})
    act = r.json["next_action"]
    assert act["type"] == "call_llm" and act["idempotency_key"] == f"gen:{s}:2"
    assert [b["tool_use_id"] for b in act["messages"][-1]["content"]] == ["a", "b"]
    r = daemon.http("POST", "/step", {"session_id": s, "max_steps": 1})
    assert r.json["next_action"] == {"type": "done", "reason": "step_limit"}
    r = daemon.http("POST", "/step", {"session_id": s, "event": {"type": "llm_result", "content": [
        {"type": "text", "text": "two files"}], "stop_reason": "end_turn"}})
    assert r.json["next_action"]["type"] == "done" and r.json["next_action"]["reason"] == "end_turn"
    # the conversation is the journaled agent state: /resume shows it
    res = daemon.http("POST", f"/v1/sessions/{s}/resume", {}).json
    assert len(res["messages"]) == 4 and res["step"] == 2 and res["cursor"] == 5
    # a follow-up from the user reopens it
    r = daemon.http("POST", "/step", {"session_id": s, "event": {"type": "user_message", "content": "thanks"}})
    assert r.json["next_action"]["type"] == "call_llm"
    assert daemon.http("POST", "/step", {"session_id": "nope"}).status == 404


# ---- an existing agent, unmodified -------------------------------------------------------------------

def plain_script(n0, edits):
    steps = []
    for i, (tool, inp) in enumerate(edits):
        steps.append({"status": 200, "body": msg(n0 + i, [use(f"p{n0 + i}", tool, **inp)])})
    steps.append({"status": 200, "body": msg(n0 + len(edits), [{"type": "text", "text": "edited"}], stop="end_turn")})
    return {"steps": steps}


def wait_commits(d, session, n, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        commits = d.http("GET", f"/v1/sessions/{session}/log").json["commits"]
        if len(commits) >= n:
            return commits
        time.sleep(0.1)
    raise AssertionError(f"no auto-checkpoint: {d.ok('log', session)}")


def test_plain_agent_in_a_mounted_workspace(daemon, scratch):
    model = Helper("fake_anthropic.py")
    try:
        daemon.ok("session", "new", "plain")
        mp = os.path.join(scratch, "ws")
        os.mkdir(mp)
        daemon.ok("mount", "plain", mp, "--autocheckpoint", "1")
        try:
            before = len(daemon.http("GET", "/v1/sessions/plain/log").json["commits"])
            env = dict(os.environ, ANTHROPIC_API_KEY="k", ANTHROPIC_BASE_URL=f"http://127.0.0.1:{model.port}",
                       LLM_MODEL="fake-model")
            agent = [PY, os.path.join(HELPERS, "plain_agent.py")]
            model.post("/_control/script", plain_script(1, [
                ("write_file", {"path": "notes.txt", "content": "first draft\n"}),
                ("write_file", {"path": "app/main.py", "content": "print('v1')\n"})]))
            p = subprocess.run(agent + ["write the first version"], cwd=mp, env=env, capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 0 and "edited" in p.stdout, p.stderr
            wait_commits(daemon, "plain", before + 1)
            model.post("/_control/script", plain_script(10, [
                ("read_file", {"path": "app/main.py"}),
                ("write_file", {"path": "app/main.py", "content": "print('v2')\n"}),
                ("delete_file", {"path": "notes.txt"})]))
            p = subprocess.run(agent + ["make it version 2"], cwd=mp, env=env, capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0, p.stderr
            commits = wait_commits(daemon, "plain", before + 2)
            log = daemon.ok("log", "plain")
            assert len(log.strip().splitlines()) >= before + 2, log
            assert len(commits) == before + 2, "two runs, two auto-checkpoints"
            with open(os.path.join(mp, "app", "main.py")) as f:
                assert f.read() == "print('v2')\n"
            daemon.ok("rollback", "plain", "--steps", "1")
            # the last run's edits are undone, in the live mount
            with open(os.path.join(mp, "app", "main.py")) as f:
                assert f.read() == "print('v1')\n"
            with open(os.path.join(mp, "notes.txt")) as f:
                assert f.read() == "first draft\n"
        finally:
            daemon.ok("umount", mp)
    finally:
        model.stop()


def test_plain_agent_in_the_jail_through_the_egress_proxy(scratch):
    policy = os.path.join(scratch, "policy.ini")
    with open(policy, "w") as f:
        f.write("[tool bash_run]\negress = true\n"
                "[fetch]\nallow_hosts = 127.0.0.1\nallow_ports = *\nprivate_hosts = 127.0.0.1\n")
    model = Helper("fake_anthropic.py")
    try:  # a Daemon that cannot start (or skips) must not leave the model server behind
        d = Daemon(scratch, extra=("--policy", policy))
    except BaseException:
        model.stop()
        raise
    try:
        d.ok("session", "new", "jailed")
        with open(os.path.join(HELPERS, "plain_agent.py")) as f:
            src = f.read()
        d.ok("exec", "jailed", "--tool", "bash_write", "--", "cat > plain_agent.py <<'PLAIN_EOF'\n" + src + "PLAIN_EOF")
        # the agent as it is; the caller points it at the model and lets the
        # jail's proxy variables apply to 127.0.0.1 too (the jail exempts loopback)
        run = ("NO_PROXY= no_proxy= ANTHROPIC_API_KEY=not-a-secret "
               f"ANTHROPIC_BASE_URL=http://127.0.0.1:{model.port} python3 plain_agent.py ")
        model.post("/_control/script", plain_script(1, [
            ("write_file", {"path": "out/notes.txt", "content": "first draft\n"})]))
        out = d.jok("exec", "jailed", "--tool", "bash_run", "--", run + "'write notes'")
        assert out["exit_code"] == 0 and "edited" in out["stdout"], out
        assert len(model.get("/_control/log")) == 2, "two generations, through the proxy"
        model.post("/_control/script", plain_script(10, [
            ("write_file", {"path": "out/notes.txt", "content": "second draft\n"})]))
        out = d.jok("exec", "jailed", "--tool", "bash_run", "--", run + "'rewrite notes'")
        assert out["exit_code"] == 0, out
        assert len(model.get("/_control/log")) == 2
        log = d.ok("log", "jailed")
        assert "rewrite notes" in log and "write notes" in log, log
        cat = d.jok("exec", "jailed", "--tool", "bash_read", "--", "cat out/notes.txt")
        assert cat["stdout"] == "second draft\n"
        d.ok("rollback", "jailed", "--steps", "1")
        cat = d.jok("exec", "jailed", "--tool", "bash_read", "--", "cat out/notes.txt")
        assert cat["stdout"] == "first draft\n", cat
        effects = d.http("GET", "/v1/sessions/jailed/effects").json["effects"]
        assert [e["tool"] for e in effects].count("egress") >= 4, [e["tool"] for e in effects]
    finally:
        rc = d.stop()
        model.stop()
    assert rc == 0 and not d.sanitizer_errors(), d.sanitizer_errors()
