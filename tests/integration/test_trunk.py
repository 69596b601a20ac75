# SPDX-License-Identifier: MIT
"""Trunks and forks (docs/trunk.md): fast-forward, three-way merge, conflicts,
re-fork, the seed's /trunk/* paths, concurrency and restarts, against a real
ntfsd. Files are written through the jail (`ntfs-ctl exec`)."""
import json
import threading
import urllib.parse

import pytest

from ctl_fixtures import Daemon, daemon  # noqa: F401


def sh(d, session, script):
    r = d.ctl("exec", session, "--", script)
    assert r.returncode == 0, f"exec {session}: {script}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def ls(d, session):
    return sh(d, session, "find . -mindepth 1 | sort").split()


def cat(d, session, path):
    return sh(d, session, f"cat {path}")


def commit(d, session):
    """(returncode, json) of `trunk commit` with --json."""
    r = d.ctl("--json", "trunk", "commit", session)
    return r.returncode, json.loads(r.stdout) if r.stdout.strip() else None, r.stderr


def start(d, setup_script, trunk="main"):
    d.ok("session", "new", "setup")
    if setup_script:
        sh(d, "setup", setup_script)
    j = d.jok("trunk", "init", trunk, "--from", "setup")
    assert j["version"] == 1 and j["trunk"] == trunk
    return j


def view(d, trunk="main", name="check"):
    """A fresh fork of the trunk's head to look at its files."""
    d.ok("trunk", "fork", trunk, name)
    return name


def merge_two(d, a_script, b_script, setup="echo base > keep"):
    """Forks a and b of one trunk; a commits (fast-forward); b commits (merge)."""
    start(d, setup)
    d.ok("trunk", "fork", "main", "a")
    d.ok("trunk", "fork", "main", "b")
    sh(d, "a", a_script)
    sh(d, "b", b_script)
    rc, ja, err = commit(d, "a")
    assert rc == 0 and ja["fast_forward"] is True, err
    return commit(d, "b")


# ---- the seed's concurrent-tasks scenario ---------------------------------------------------

def test_seed_scenario_cli(daemon):
    d = daemon
    start(d, "echo 'def main(): pass' > app.py; mkdir lib; echo util > lib/u.py")
    d.ok("trunk", "fork", "main", "task-a")
    d.ok("trunk", "fork", "main", "task-b")
    sh(d, "task-a", "echo 'def main(): print(1)' > app.py; echo a > lib/a.py")
    sh(d, "task-b", "echo 'def main(): print(2)' > app.py; echo b > lib/b.py")

    out = d.ok("trunk", "commit", "task-a")
    assert "version 2" in out and "fast-forward" in out

    r = d.ctl("trunk", "commit", "task-b")
    assert r.returncode == 1
    assert "CONFLICT (content): app.py" in r.stdout          # told which path
    assert "conflicts with trunk main" in r.stderr
    j = d.jok("trunk", "status", "main")
    assert j["version"] == 2
    st = {f["session"]: f["status"] for f in j["forks"]}
    assert st == {"task-a": "committed", "task-b": "conflicted"}
    # a conflicted fork cannot be committed again as is
    r = d.ctl("trunk", "commit", "task-b")
    assert r.returncode == 1 and "conflicted" in r.stderr

    d.ok("trunk", "abort", "task-b")
    assert {f["session"]: f["status"] for f in d.jok("trunk", "status", "main")["forks"]}["task-b"] == "aborted"
    d.ok("trunk", "fork", "main", "task-b2")
    assert cat(d, "task-b2", "app.py").strip() == "def main(): print(1)"   # sees A's work
    assert cat(d, "task-b2", "lib/a.py").strip() == "a"
    sh(d, "task-b2", "echo 'def main(): print(1); print(2)' > app.py; echo b > lib/b.py")
    out = d.ok("trunk", "commit", "task-b2")
    assert "version 3" in out

    v = view(d)
    assert cat(d, v, "app.py").strip() == "def main(): print(1); print(2)"
    assert cat(d, v, "lib/a.py").strip() == "a" and cat(d, v, "lib/b.py").strip() == "b"
    assert cat(d, v, "lib/u.py").strip() == "util"
    d.healthy()


def test_seed_scenario_http_paths(daemon):
    d = daemon
    s = d.http("POST", "/session/start", {}).json["session_id"]
    d.http("POST", "/tool/execute", {"session_id": s, "tool_name": "bash_write",
                                     "tool_input": {"command": "echo v0 > f.txt"}})
    t = d.http("POST", "/trunk/init", {"session_id": s})
    assert t.status == 200, t
    assert t.json["trunk_id"] == "trunk@1" and t.json["parent_id"] is None
    fa = d.http("POST", "/trunk/fork", {"trunk_id": "trunk"}).json
    fb = d.http("POST", "/trunk/fork", {}).json
    assert fa["status"] == "active" and fa["trunk_id"] == "trunk@1" and fa["fork_id"] != fb["fork_id"]
    for f, text in ((fa, "va"), (fb, "vb")):
        r = d.http("POST", "/tool/execute", {"session_id": f["session_id"], "tool_name": "bash_write",
                                             "tool_input": {"command": f"echo {text} > f.txt"}})
        assert r.status == 200, r
    ca = d.http("POST", "/trunk/commit", {"session_id": fa["session_id"]})
    assert ca.status == 200 and ca.json["ok"] is True and ca.json["new_trunk_id"] == "trunk@2", ca
    cb = d.http("POST", "/trunk/commit", {"session_id": fb["session_id"]})
    assert cb.status == 200 and cb.json["conflict"] is True and cb.json["current_trunk_id"] == "trunk@2"
    assert [c["path"] for c in cb.json["conflicts"]] == ["f.txt"]
    c0 = cb.json["conflicts"][0]
    assert c0["fork"]["size"] == 3 and c0["trunk"]["size"] == 3
    assert c0["fork"]["sha256"] != c0["trunk"]["sha256"] and c0["fork"]["commit"] != c0["trunk"]["commit"]
    assert d.http("POST", "/trunk/abort", {"session_id": fb["session_id"]}).json == {}
    st = d.http("GET", "/trunk/status").json
    assert st["trunk_id"] == "trunk@2" and st["active_forks"] == 0 and "effect_cursor" in st
    fc = d.http("POST", "/trunk/fork", {}).json
    assert fc["trunk_id"] == "trunk@2"
    r = d.http("POST", "/tool/execute", {"session_id": fc["session_id"], "tool_name": "bash_read",
                                         "tool_input": {"command": "cat f.txt"}})
    assert r.json["result"]["stdout"] == "va\n"


# ---- merges ---------------------------------------------------------------------------------

def test_disjoint_files_merge_with_two_parents(daemon):
    d = daemon
    rc, j, err = merge_two(d, "echo a > a.txt", "echo b > b.txt; rm keep")
    assert rc == 0 and j["merged"] is True and j["version"] == 3, err
    v = view(d)
    assert ls(d, v) == ["./a.txt", "./b.txt"]
    log = d.jok("log", v)["commits"]
    assert len(log[0]["parents"]) == 2          # the merge commit: trunk head + fork
    st = d.jok("trunk", "status", "main")
    assert [x["merged_from"] for x in st["versions"]] == [None, "a", "b"]


def test_same_directory_different_files(daemon):
    d = daemon
    rc, j, err = merge_two(d, "echo 1 > src/one.c; rm src/old.c", "echo 2 > src/two.c; echo x >> src/keep.c",
                           setup="mkdir src; echo old > src/old.c; echo k > src/keep.c")
    assert rc == 0 and j["merged"], err
    v = view(d)
    assert ls(d, v) == ["./src", "./src/keep.c", "./src/one.c", "./src/two.c"]
    assert cat(d, v, "src/keep.c") == "k\nx\n"


def test_both_create_same_new_directory(daemon):
    d = daemon
    rc, j, err = merge_two(d, "mkdir -p new/a; echo 1 > new/a/x; echo s > new/same",
                           "mkdir new; echo 2 > new/y; echo s > new/same")
    assert rc == 0, err
    assert ls(d, view(d)) == ["./keep", "./new", "./new/a", "./new/a/x", "./new/same", "./new/y"]


def test_delete_vs_modify_conflicts(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "rm keep", "echo changed > keep")
    assert rc == 1 and j["conflict"] is True
    assert [(c["path"], c["reason"]) for c in j["conflicts"]] == [("keep", "delete/modify")]
    c = j["conflicts"][0]
    assert c["trunk"]["present"] is False and c["fork"]["present"] is True and c["fork"]["size"] == 8
    assert d.jok("trunk", "status", "main")["version"] == 2      # nothing committed


def test_directory_removed_vs_file_added_inside(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "echo new > dir/new", "rm -r dir", setup="mkdir dir; echo x > dir/x")
    assert rc == 1
    assert [(c["path"], c["reason"]) for c in j["conflicts"]] == [("dir/new", "delete/modify")]


def test_mode_only_changes(daemon):
    d = daemon
    rc, j, err = merge_two(d, "chmod 755 x", "chmod 600 y; echo more >> x",
                           setup="echo x > x; echo y > y; chmod 644 x y")
    assert rc == 0, err                        # mode (a) and content (b) of x merge
    v = view(d)
    assert sh(d, v, "stat -c '%n %a' x y").split("\n")[:2] == ["x 755", "y 600"]
    assert cat(d, v, "x") == "x\nmore\n"


def test_same_file_different_modes_conflict(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "chmod 700 x", "chmod 755 x", setup="echo x > x; chmod 644 x")
    assert rc == 1
    c = j["conflicts"][0]
    assert (c["path"], c["reason"], c["fork"]["mode"], c["trunk"]["mode"]) == ("x", "mode", "755", "700")


def test_type_changes(daemon):
    d = daemon
    # file -> symlink on one side, content change on the other: conflict
    rc, j, _ = merge_two(d, "rm t; ln -s keep t", "echo more >> t",
                         setup="echo t > t; echo k > keep; mkdir dd; echo i > dd/i; echo f > ff")
    assert rc == 1
    c = j["conflicts"][0]
    assert (c["path"], c["reason"], c["trunk"]["type"], c["fork"]["type"]) == ("t", "type", "symlink", "file")
    assert c["trunk"]["target"] == "keep"


def test_type_changes_disjoint_merge(daemon):
    d = daemon
    # a: directory -> file, file -> directory; b: file -> symlink elsewhere
    rc, j, err = merge_two(d, "rm -r dd; echo now-a-file > dd; rm ff; mkdir ff; echo in > ff/in",
                           "rm t; ln -s keep t",
                           setup="echo t > t; echo k > keep; mkdir dd; echo i > dd/i; echo f > ff")
    assert rc == 0, err
    v = view(d)
    assert sh(d, v, "stat -c '%n %F' dd ff t ff/in").splitlines() == [
        "dd regular file", "ff directory", "t symbolic link", "ff/in regular file"]
    assert sh(d, v, "readlink t").strip() == "keep" and cat(d, v, "dd") == "now-a-file\n"


def test_directory_to_file_vs_change_inside(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "echo 2 > dd/i", "rm -r dd; echo f > dd", setup="mkdir dd; echo i > dd/i")
    assert rc == 1
    assert [(c["path"], c["reason"]) for c in j["conflicts"]] == [("dd/i", "delete/modify")]


def test_renames(daemon):
    d = daemon
    # a renames x -> y; b renames w -> z and edits v: all merge
    rc, j, err = merge_two(d, "mv x y", "mv w z; echo v2 > v", setup="echo x > x; echo w > w; echo v > v")
    assert rc == 0, err
    v = view(d)
    assert ls(d, v) == ["./v", "./y", "./z"] and cat(d, v, "y") == "x\n" and cat(d, v, "v") == "v2\n"


def test_rename_into_same_name_conflicts(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "mv x n", "mv w n", setup="echo x > x; echo w > w")
    assert rc == 1
    assert [(c["path"], c["reason"]) for c in j["conflicts"]] == [("n", "add/add")]


def test_rename_vs_modify_conflicts(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "mv x y", "echo x2 > x", setup="echo x > x")
    assert rc == 1
    assert [(c["path"], c["reason"]) for c in j["conflicts"]] == [("x", "delete/modify")]


def test_line_level_merge_of_text(daemon):
    d = daemon
    setup = "printf 'l1\\nl2\\nl3\\nl4\\nl5\\nl6\\n' > t.txt"
    rc, j, err = merge_two(d, "sed -i s/l1/L1/ t.txt", "sed -i s/l6/L6/ t.txt", setup=setup)
    assert rc == 0 and j["line_merged"] == 1, err
    assert cat(d, view(d), "t.txt") == "L1\nl2\nl3\nl4\nl5\nL6\n"
    # the command's help says so (issue 65: it said any path changed on both
    # sides commits nothing)
    helptext = " ".join(d.ok("help", "trunk", "commit").split())
    assert "merged line by line" in helptext and "cannot be merged" in helptext


def test_conflicted_fork_is_reforked_under_its_name(daemon):
    d = daemon
    rc, j, _ = merge_two(d, "echo a > keep", "echo b > keep; echo extra > other")
    assert rc == 1
    out = d.ok("trunk", "fork", "main", "b")      # re-fork: back to the head, active again
    assert "version 2" in out
    assert ls(d, "b") == ["./keep"] and cat(d, "b", "keep") == "a\n"
    sh(d, "b", "echo ab > keep")
    rc, j2, err = commit(d, "b")
    assert rc == 0 and j2["fast_forward"] and j2["version"] == 3, err
    # a committed fork is final
    r = d.ctl("trunk", "fork", "main", "b")
    assert r.returncode == 1 and "already a fork" in r.stderr


def test_hundred_forks_commit_concurrently(daemon):
    d = daemon
    start(d, "mkdir out; echo 0 > shared")
    n = 100
    names = [f"w{i:03d}" for i in range(n)]
    for s in names:
        d.ok("trunk", "fork", "main", s)

    def work(chunk):
        for i in chunk:
            s = names[i]
            # every tenth fork also edits the shared file: those conflict, except the first to commit
            extra = f"; echo {s} > shared" if i % 10 == 0 else ""
            sh(d, s, f"echo {s} > out/{s}{extra}")

    ths = [threading.Thread(target=work, args=(range(k, n, 4),)) for k in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()

    results = {}
    lock = threading.Lock()
    todo = list(reversed(names))

    def committer():
        # 40 connections at once (ntfsd serves 64): all race on the one trunk
        while True:
            with lock:
                if not todo:
                    return
                s = todo.pop()
            results[s] = d.http("POST", "/v1/forks/" + urllib.parse.quote(s) + "/commit", timeout=300)

    ths = [threading.Thread(target=committer) for _ in range(40)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    ok = [s for s, r in results.items() if r.status == 200]
    conflicted = [s for s, r in results.items() if r.status == 409]
    assert len(ok) + len(conflicted) == n, {s: r for s, r in results.items() if r.status not in (200, 409)}
    editors = [s for i, s in enumerate(names) if i % 10 == 0]
    assert len(conflicted) == len(editors) - 1 and set(conflicted) < set(editors)
    for s in conflicted:
        assert [c["path"] for c in results[s].json["conflicts"]] == ["shared"]
    st = d.jok("trunk", "status", "main")
    assert st["version"] == 1 + len(ok)          # serialized: one version per commit, none lost
    v = view(d)
    files = set(sh(d, v, "ls out").split())
    assert files == {s for s in names if s not in conflicted}
    winner = [s for s in editors if s not in conflicted]
    assert cat(d, v, "shared").strip() == winner[0]
    d.healthy()


def test_state_survives_restart(scratch):
    d = Daemon(scratch)
    try:
        start(d, "echo 1 > f")
        d.ok("trunk", "fork", "main", "a")
        d.ok("trunk", "fork", "main", "b")
        d.ok("trunk", "fork", "main", "c")
        sh(d, "a", "echo a > f")
        sh(d, "b", "echo b > f")
        d.ok("trunk", "commit", "a")
        assert d.ctl("trunk", "commit", "b").returncode == 1
        before = d.jok("trunk", "status", "main")
        assert d.stop() == 0
        d2 = Daemon(scratch)
        try:
            after = d2.jok("trunk", "status", "main")
            assert after["versions"] == before["versions"] and after["forks"] == before["forks"]
            assert {f["session"]: f["status"] for f in after["forks"]} == {
                "a": "committed", "b": "conflicted", "c": "active"}
            sh(d2, "c", "echo c > g")
            rc, j, err = commit(d2, "c")
            assert rc == 0 and j["merged"] and j["version"] == 3, err
            d2.ok("gc")
            d2.healthy()
            v = view(d2)
            assert cat(d2, v, "f") == "a\n" and cat(d2, v, "g") == "c\n"
        finally:
            d2.stop()
    finally:
        d.stop()


def test_errors(daemon):
    d = daemon
    start(d, "")
    assert d.ctl("trunk", "init", "main", "--from", "setup").returncode == 1      # exists
    assert d.ctl("trunk", "init", "x").returncode == 2                            # --from missing
    assert d.ctl("trunk", "fork", "nope", "s").returncode == 1
    assert d.ctl("trunk", "commit", "setup").returncode == 1                      # not a fork
    r = d.http("POST", "/v1/trunks", {"name": "bad/name", "from": "setup"})
    assert r.status == 400 and r.code == "invalid_name"
    r = d.http("POST", "/v1/trunks/main/forks", {"session": "s", "bogus": 1})
    assert r.status == 400
    assert d.http("GET", "/v1/trunks/none").status == 404
    d.ok("trunk", "fork", "main", "f")
    d.ok("trunk", "abort", "f")
    assert d.ctl("trunk", "abort", "f").returncode == 1
    assert d.ctl("trunk", "commit", "f").returncode == 1
