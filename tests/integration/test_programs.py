# SPDX-License-Identifier: MIT
"""Real programs on the mount (issue 3): git, tar, make, sqlite3, python venv,
cp -a and rsync -a. Each runs unmodified on a real mount of ntfs-fuse."""
import filecmp
import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
    pytest.skip("needs root and /dev/fuse", allow_module_level=True)

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run(args, cwd=None, env=None, timeout=600):
    r = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}: {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    return r.stdout


def need(prog):
    if shutil.which(prog) is None:
        pytest.skip(f"{prog} is not installed")


def tree_digest(root):
    """(relative path, type, mode, size, content or link target digest) for every entry."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out.append((rel, "l", os.readlink(p)))
            elif os.path.isdir(p):
                out.append((rel, "d", st.st_mode & 0o7777))
            else:
                with open(p, "rb") as f:
                    h = hashlib.sha256(f.read()).hexdigest()
                out.append((rel, "f", st.st_mode & 0o7777, st.st_size, h, st.st_mtime_ns // 10**9))
    return out


def make_source_tree(root, n_dirs=20, n_files=30):
    os.makedirs(root)
    for d in range(n_dirs):
        dd = os.path.join(root, f"dir{d:02d}", "sub")
        os.makedirs(dd)
        for f in range(n_files):
            p = os.path.join(dd if f % 2 else os.path.dirname(dd), f"file{f:03d}.c")
            with open(p, "w") as fh:
                fh.write(f"/* {d} {f} */\nint f_{d}_{f}(void) {{ return {d * f}; }}\n" * (f + 1))
            if f % 5 == 0:
                os.chmod(p, 0o755)
        os.symlink("sub/file001.c", os.path.join(root, f"dir{d:02d}", "link.c"))
    with open(os.path.join(root, "empty"), "w"):
        pass
    with open(os.path.join(root, "big.bin"), "wb") as fh:
        fh.write(os.urandom(3 * 1024 * 1024))


GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.org",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.org",
               GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent")


def test_git(mnt):
    need("git")
    repo = os.path.join(mnt.path, "repo")
    os.mkdir(repo)
    g = lambda *a: run(["git", "-c", "init.defaultBranch=main", "-c", "gc.auto=0", *a], cwd=repo, env=GIT_ENV)
    g("init", "-q")
    make_source_tree(os.path.join(repo, "src"), n_dirs=5, n_files=10)
    g("add", "-A")
    g("commit", "-q", "-m", "first")
    assert g("status", "--porcelain") == ""
    g("branch", "feature")
    g("checkout", "-q", "feature")
    with open(os.path.join(repo, "src", "dir00", "file000.c"), "a") as f:
        f.write("/* feature */\n")
    os.unlink(os.path.join(repo, "src", "dir01", "file000.c"))
    assert sorted(l[:2] for l in g("status", "--porcelain").splitlines()) == [" D", " M"]
    g("commit", "-q", "-am", "feature work")
    g("checkout", "-q", "main")
    with open(os.path.join(repo, "src", "dir00", "file000.c")) as f:
        assert "/* feature */" not in f.read()
    assert os.path.exists(os.path.join(repo, "src", "dir01", "file000.c"))
    g("checkout", "-q", "feature")
    assert not os.path.exists(os.path.join(repo, "src", "dir01", "file000.c"))
    assert g("branch", "--list").split() == ["*", "feature", "main"]
    g("gc", "-q", "--aggressive", "--prune=now")
    assert os.listdir(os.path.join(repo, ".git", "objects", "pack"))
    g("fsck", "--full", "--strict")
    assert g("log", "--format=%s").splitlines() == ["feature work", "first"]
    assert g("status", "--porcelain") == ""


def test_tar_roundtrip(mnt, scratch):
    need("tar")
    orig = os.path.join(scratch, "orig")
    make_source_tree(orig)
    tarball = os.path.join(scratch, "src.tar")
    run(["tar", "-C", orig, "-cf", tarball, "."])
    dest = os.path.join(mnt.path, "x")
    os.mkdir(dest)
    run(["tar", "-C", dest, "-xpf", tarball])
    assert tree_digest(dest) == tree_digest(orig)
    # re-create from the mount, extract natively, compare again
    tarball2 = os.path.join(scratch, "again.tar")
    run(["tar", "-C", dest, "-cf", tarball2, "."])
    back = os.path.join(scratch, "back")
    os.mkdir(back)
    run(["tar", "-C", back, "-xpf", tarball2])
    assert tree_digest(back) == tree_digest(orig)


def test_tar_of_usr_include(mnt, scratch):
    need("tar")
    src = "/usr/include"
    tarball = os.path.join(scratch, "inc.tar")
    run(["tar", "-C", "/usr", "-cf", tarball, "include"])
    run(["tar", "-C", mnt.path, "-xf", tarball])
    cmp = filecmp.dircmp(src, os.path.join(mnt.path, "include"))

    def check(c):
        assert not c.left_only and not c.right_only and not c.diff_files and not c.funny_files, c.report()
        for sub in c.subdirs.values():
            check(sub)
    check(cmp)


MAKEFILE = """\
CFLAGS = -O1 -Wall
OBJS = $(patsubst %.c,%.o,$(wildcard part*.c)) main.o
prog: $(OBJS)
\t$(CC) -o $@ $^
%.o: %.c parts.h
\t$(CC) $(CFLAGS) -c -o $@ $<
clean:
\trm -f prog *.o
"""


def test_make_j2(mnt):
    need("make")
    need("cc")
    d = os.path.join(mnt.path, "proj")
    os.mkdir(d)
    n = 12
    with open(os.path.join(d, "parts.h"), "w") as f:
        f.write("".join(f"int part{i}(int);\n" for i in range(n)))
    for i in range(n):
        with open(os.path.join(d, f"part{i}.c"), "w") as f:
            f.write(f'#include "parts.h"\nint part{i}(int x) {{ return x + {i}; }}\n')
    with open(os.path.join(d, "main.c"), "w") as f:
        f.write('#include <stdio.h>\n#include "parts.h"\nint main(void) { int s = 0;\n'
                + "".join(f"s = part{i}(s);\n" for i in range(n)) + 'printf("%d\\n", s); return 0; }\n')
    with open(os.path.join(d, "Makefile"), "w") as f:
        f.write(MAKEFILE)
    run(["make", "-j2", "-s"], cwd=d)
    assert run([os.path.join(d, "prog")]).strip() == str(sum(range(n)))
    # nothing to do the second time: mtimes are right
    assert "Nothing to be done" in run(["make", "-j2"], cwd=d) or \
        run(["make", "-j2", "-q"], cwd=d) == ""
    time.sleep(0.01)
    with open(os.path.join(d, "part3.c"), "a") as f:
        f.write("/* touched */\n")
    out = run(["make", "-j2"], cwd=d)
    assert "-o part3.o" in out and "-o part4.o" not in out and "-o prog" in out


def test_sqlite_wal_concurrent(mnt):
    db = os.path.join(mnt.path, "db.sqlite")
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    con.commit()
    con.close()
    stop = threading.Event()
    errors = []
    seen = []

    def reader():
        try:
            rc = sqlite3.connect(db, timeout=30)
            while not stop.is_set():
                n, = rc.execute("SELECT count(*) FROM t").fetchone()
                if seen and n < seen[-1]:
                    errors.append(f"count went back {seen[-1]} -> {n}")
                seen.append(n)
            rc.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    t = threading.Thread(target=reader)
    t.start()
    wc = sqlite3.connect(db, timeout=30)
    for i in range(200):
        wc.execute("INSERT INTO t (v) VALUES (?)", (f"row {i}" * 10,))
        wc.commit()
    stop.set()
    t.join(60)
    wc.close()
    assert not errors, errors
    assert len(seen) > 1
    # a second process sees everything, and the database is intact
    out = run(["sqlite3", db, "PRAGMA integrity_check; SELECT count(*) FROM t;"]) if shutil.which("sqlite3") \
        else None
    if out is not None:
        assert out.split() == ["ok", "200"]
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 200
    con.close()


def test_python_venv(mnt):
    venv = os.path.join(mnt.path, "venv")
    r = subprocess.run([PY, "-m", "venv", "--without-pip", venv], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "ensurepip" in r.stderr:
        pytest.skip("python3-venv is not installed")
    assert r.returncode == 0, r.stderr
    script = os.path.join(mnt.path, "hello.py")
    with open(script, "w") as f:
        f.write("import sys, json\nprint(json.dumps({'prefix': sys.prefix, 'venv': sys.prefix != sys.base_prefix}))\n")
    out = run([os.path.join(venv, "bin", "python"), script])
    import json
    res = json.loads(out)
    assert res["venv"] and res["prefix"] == venv
    # a module inside the venv imports (and compiles its .pyc on the mount)
    site = run([os.path.join(venv, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    assert site.startswith(venv)
    with open(os.path.join(site, "ntfsmod.py"), "w") as f:
        f.write("VALUE = 42\n")
    assert run([os.path.join(venv, "bin", "python"), "-c", "import ntfsmod; print(ntfsmod.VALUE)"]).strip() == "42"


def test_cp_a_roundtrip(mnt, scratch):
    orig = os.path.join(scratch, "orig")
    make_source_tree(orig, n_dirs=8, n_files=12)
    os.link(os.path.join(orig, "empty"), os.path.join(orig, "empty-hardlink"))
    run(["cp", "-a", orig, os.path.join(mnt.path, "copy")])
    assert tree_digest(os.path.join(mnt.path, "copy")) == tree_digest(orig)
    a, b = os.stat(os.path.join(mnt.path, "copy", "empty")), os.stat(os.path.join(mnt.path, "copy", "empty-hardlink"))
    assert a.st_ino == b.st_ino and a.st_nlink == 2
    back = os.path.join(scratch, "back")
    run(["cp", "-a", os.path.join(mnt.path, "copy"), back])
    assert tree_digest(back) == tree_digest(orig)


def test_rsync_a_roundtrip(mnt, scratch):
    need("rsync")
    orig = os.path.join(scratch, "orig")
    make_source_tree(orig, n_dirs=8, n_files=12)
    run(["rsync", "-a", orig + "/", os.path.join(mnt.path, "r") + "/"])
    assert tree_digest(os.path.join(mnt.path, "r")) == tree_digest(orig)
    # an incremental run after a change copies only the change
    with open(os.path.join(orig, "dir00", "file000.c"), "a") as f:
        f.write("changed\n")
    out = run(["rsync", "-a", "-i", orig + "/", os.path.join(mnt.path, "r") + "/"])
    assert [l.split()[-1] for l in out.splitlines() if l.startswith(">f")] == ["dir00/file000.c"]
    back = os.path.join(scratch, "back")
    run(["rsync", "-a", os.path.join(mnt.path, "r") + "/", back + "/"])
    assert tree_digest(back) == tree_digest(orig)
