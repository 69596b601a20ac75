# SPDX-License-Identifier: MIT
"""Rollback keeps paths (issue 61, item 1; docs/mount.md, "Rollback in
place"): rolling a mounted session back, or forward again, keeps the inode
number of every path that exists in both states with the same type, so the
programs living on the mount do not notice: a shell and a Python process
whose working directory is a subfolder keep working (relative paths,
`git status`, getcwd), an fd open on a file reads the restored content, and
the kernel's caches are dropped for exactly what changed. A path the
rollback removed behaves as one removed by `rm`: an fd open on it keeps its
content, a shell sitting in it sees a deleted directory."""
import os
import subprocess
import time

import pytest

from ctl_fixtures import daemon  # noqa: F401

PY = "/usr/bin/python3"
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent")


@pytest.fixture
def mounted(daemon, scratch):
    daemon.ok("session", "new", "rb")
    mp = os.path.join(scratch, "work")
    os.mkdir(mp)
    daemon.ok("mount", "rb", mp)
    try:
        yield daemon, mp
    finally:
        daemon.ok("umount", mp)


def checkpoint(d, msg):
    return d.jok("checkpoint", "rb", "-m", msg)["commit"]


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Shell:
    """A long-lived bash whose cwd is set once, as an agent's shell is."""

    def __init__(self, cwd):
        self.p = subprocess.Popen(["bash", "--norc", "--noprofile"], cwd=cwd, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=GIT_ENV)

    def run(self, cmd):
        mark = "__done_%d__" % time.monotonic_ns()
        self.p.stdin.write(f"{cmd}; echo {mark} $?\n")
        self.p.stdin.flush()
        out = []
        for line in self.p.stdout:
            if mark in line:  # after output that did not end its line
                head, tail = line.split(mark, 1)
                return int(tail.split()[0]), "".join(out) + head
            out.append(line)
        raise AssertionError("shell ended: " + "".join(out))

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


PY_LOOP = r"""
import os, sys
for line in sys.stdin:
    try:
        names = sorted(os.listdir("."))
        with open("a.txt") as f:
            a = f.read()
        print("ok", os.getcwd(), ",".join(names), a, flush=True)
    except OSError as e:
        print("err", e, flush=True)
"""


def test_a_shell_and_python_in_a_subfolder_survive_rollbacks_and_restores(mounted):
    d, mp = mounted
    src = os.path.join(mp, "src")
    os.mkdir(src)
    write(os.path.join(src, "a.txt"), "v0")
    write(os.path.join(mp, "top.txt"), "top")
    subprocess.run(["git", "init", "-q"], cwd=mp, check=True, env=GIT_ENV)
    subprocess.run(["git", "add", "-A"], cwd=mp, check=True, env=GIT_ENV)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=mp, check=True, env=GIT_ENV)
    ids = [checkpoint(d, "v0")]
    for i in range(1, 4):  # v1..v3: a.txt changes, a file comes and goes
        write(os.path.join(src, "a.txt"), f"v{i}")
        if i == 2:
            write(os.path.join(src, "new.txt"), "new")
        if i == 3:
            os.unlink(os.path.join(src, "new.txt"))
        ids.append(checkpoint(d, f"v{i}"))
    ino_src, ino_a = os.stat(src).st_ino, os.stat(os.path.join(src, "a.txt")).st_ino

    sh = Shell(src)
    py = subprocess.Popen([PY, "-c", PY_LOOP], cwd=src, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    fd = os.open(os.path.join(src, "a.txt"), os.O_RDONLY)
    try:
        for rnd in range(20):
            v = (rnd * 7 + 1) % 4  # back and forth over v0..v3
            d.ok("rollback", "rb", "--to", ids[v])
            want_names = ["a.txt", "new.txt"] if v == 2 else ["a.txt"]
            rc, out = sh.run("ls; cat a.txt; echo; pwd")
            assert rc == 0, out
            assert out.split() == want_names + [f"v{v}", src], (rnd, out)
            rc, out = sh.run("git status --porcelain -- .")
            assert rc == 0, out  # 'Unable to read current working directory' before
            want_git = "" if v == 0 else " M src/a.txt\n" + ("?? src/new.txt\n" if v == 2 else "")
            assert out == want_git, (rnd, v, out)
            py.stdin.write("go\n")
            py.stdin.flush()
            assert py.stdout.readline().split() == ["ok", src, ",".join(want_names), f"v{v}"], rnd
            assert os.pread(fd, 100, 0) == f"v{v}".encode(), rnd  # the open fd sees the restored content
            assert os.stat(src).st_ino == ino_src and os.stat(os.path.join(src, "a.txt")).st_ino == ino_a
    finally:
        os.close(fd)
        sh.close()
        py.stdin.close()
        py.wait(timeout=10)


def test_uncheckpointed_work_dropped_under_a_sitting_shell(mounted):
    """A rollback to the current head (dropping uncheckpointed work) keeps the
    shell's directory; what was created goes, what was changed comes back."""
    d, mp = mounted
    os.makedirs(os.path.join(mp, "d", "e"))
    write(os.path.join(mp, "d", "e", "f"), "kept")
    checkpoint(d, "base")
    sh = Shell(os.path.join(mp, "d", "e"))
    try:
        for i in range(5):
            rc, out = sh.run(f"echo changed{i} > f; mkdir -p junk/deep; echo x > junk/deep/g; touch h")
            assert rc == 0, out
            d.ok("rollback", "rb", "--to", "rb")
            rc, out = sh.run("ls -a; cat f; echo; pwd -P")
            assert rc == 0, out
            assert out.split() == [".", "..", "f", "kept", os.path.realpath(os.path.join(mp, "d", "e"))], out
    finally:
        sh.close()


def test_a_removed_path_behaves_as_removed(mounted):
    d, mp = mounted
    write(os.path.join(mp, "keep.txt"), "k")
    base = checkpoint(d, "base")
    os.makedirs(os.path.join(mp, "gone", "sub"))
    write(os.path.join(mp, "gone", "sub", "data"), "old content")
    checkpoint(d, "with gone")
    fd = os.open(os.path.join(mp, "gone", "sub", "data"), os.O_RDONLY)
    sh = Shell(os.path.join(mp, "gone", "sub"))
    try:
        d.ok("rollback", "rb", "--to", base)
        assert sorted(os.listdir(mp)) == ["keep.txt"]
        assert os.pread(fd, 100, 0) == b"old content"  # as an fd on an rm'd file
        assert os.fstat(fd).st_nlink == 0
        rc, out = sh.run("cat data")
        assert rc != 0, out  # the directory is deleted under the shell
        rc, out = sh.run("cd " + mp + " && cat keep.txt")
        assert rc == 0 and out == "k", out
        # the name can be made again: a new directory, not the removed one
        os.makedirs(os.path.join(mp, "gone", "sub"))
        assert os.listdir(os.path.join(mp, "gone", "sub")) == []
    finally:
        os.close(fd)
        sh.close()


def test_a_type_change_gives_a_new_inode(mounted):
    d, mp = mounted
    write(os.path.join(mp, "x"), "file")
    base = checkpoint(d, "file")
    os.unlink(os.path.join(mp, "x"))
    os.mkdir(os.path.join(mp, "x"))
    write(os.path.join(mp, "x", "inside"), "i")
    checkpoint(d, "dir")
    ino_dir = os.stat(os.path.join(mp, "x")).st_ino
    d.ok("rollback", "rb", "--to", base)
    st = os.stat(os.path.join(mp, "x"))
    assert not os.path.isdir(os.path.join(mp, "x")) and st.st_ino != ino_dir
    with open(os.path.join(mp, "x")) as f:
        assert f.read() == "file"


def test_names_missing_before_a_rollback_appear_after_it(mounted):
    """The kernel's negative entries under a changed directory are dropped."""
    d, mp = mounted
    os.mkdir(os.path.join(mp, "d"))
    write(os.path.join(mp, "d", "later"), "L")
    withfile = checkpoint(d, "with")
    os.unlink(os.path.join(mp, "d", "later"))
    checkpoint(d, "without")
    for _ in range(3):
        assert not os.path.exists(os.path.join(mp, "d", "later"))
    d.ok("rollback", "rb", "--to", withfile)
    with open(os.path.join(mp, "d", "later")) as f:
        assert f.read() == "L"
    assert os.listdir(os.path.join(mp, "d")) == ["later"]
