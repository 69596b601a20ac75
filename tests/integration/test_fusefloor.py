# SPDX-License-Identifier: MIT
"""Correctness checks of the FUSE floor (tools/fusefloor.c): a real mount,
real syscalls, and a teardown that unmounts and stops the daemon even when a
test fails."""
import contextlib
import errno
import os
import signal
import stat
import subprocess
import time

import pytest

BUILD = os.environ.get("NTFS_BUILD", "/work/main/build")
FLOOR = os.path.join(BUILD, "tools", "fusefloor")


def _mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


@pytest.fixture
def floor(tmp_path):
    with mounted_floor(tmp_path) as (mnt, _):
        yield mnt


@contextlib.contextmanager
def mounted_floor(tmp_path, opts=""):
    """Mounts the floor at tmp_path/mnt with -o stats=...,OPTS; yields the
    mountpoint and a function that returns the request counts so far
    (valid after the unmount, which happens on leaving)."""
    if not os.path.exists(FLOOR):
        pytest.skip("no fusefloor at %s" % FLOOR)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    stats = tmp_path / "stats"
    log = open(tmp_path / "log", "w+")
    proc = subprocess.Popen([FLOOR, str(mnt), "-f", "-o", "stats=%s%s" % (stats, "," + opts if opts else "")],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    counts = {}
    try:
        for _ in range(100):
            if _mounted(str(mnt)):
                break
            assert proc.poll() is None, "fusefloor exited early"
            time.sleep(0.05)
        else:
            pytest.fail("fusefloor did not mount")
        yield mnt, lambda: counts
        # a clean unmount makes the daemon exit 0 and write its stats
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        assert proc.wait(timeout=10) == 0
        # "OPCODE COUNT NS": requests and the handlers' total time
        rows = {w[0]: (int(w[1]), int(w[2])) for w in (l.split() for l in stats.read_text().splitlines())}
        assert rows["LOOKUP"][0] > 0 and rows["LOOKUP"][1] > 0
        counts.update({k: v[0] for k, v in rows.items()})
    finally:
        if _mounted(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)])
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.seek(0)
        text = log.read()
        log.close()
        assert "ERROR" not in text.upper(), text


def test_create_write_read(floor):
    p = floor / "a.txt"
    p.write_bytes(b"hello world")
    assert p.read_bytes() == b"hello world"
    with open(p, "r+b") as f:
        f.seek(6)
        f.write(b"floor")
    assert p.read_bytes() == b"hello floor"
    with open(p, "ab") as f:
        f.write(b"!")
    assert p.read_bytes() == b"hello floor!"
    assert p.stat().st_size == 12
    with pytest.raises(FileExistsError):
        os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert p.stat().st_size == 0


def test_sparse_and_large_offsets(floor):
    p = floor / "sparse"
    with open(p, "wb") as f:
        f.seek(5 << 30)
        f.write(b"end")
        f.seek(100000)
        f.write(b"mid")
    st = p.stat()
    assert st.st_size == (5 << 30) + 3
    assert st.st_blocks * 512 < 1 << 20
    with open(p, "rb") as f:
        f.seek(99998)
        assert f.read(7) == b"\0\0mid\0\0"
        f.seek((5 << 30) - 2)
        assert f.read(10) == b"\0\0end"
    os.truncate(p, 100001)
    assert p.read_bytes()[-2:] == b"\0m"
    data = os.urandom(3 << 20)
    (floor / "big").write_bytes(data)
    assert (floor / "big").read_bytes() == data


def test_rename_unlink_readdir(floor):
    (floor / "d1").mkdir()
    (floor / "d2").mkdir()
    for i in range(300):
        (floor / "d1" / ("f%03d" % i)).write_text(str(i))
    assert sorted(os.listdir(floor / "d1")) == ["f%03d" % i for i in range(300)]
    os.rename(floor / "d1" / "f000", floor / "d2" / "moved")
    assert (floor / "d2" / "moved").read_text() == "0"
    os.rename(floor / "d1" / "f001", floor / "d1" / "f002")  # over an existing file
    assert (floor / "d1" / "f002").read_text() == "1"
    assert not (floor / "d1" / "f001").exists()
    os.unlink(floor / "d1" / "f003")
    names = os.listdir(floor / "d1")
    assert len(names) == 297 and "f003" not in names
    with pytest.raises(OSError) as e:
        os.rmdir(floor / "d1")
    assert e.value.errno == errno.ENOTEMPTY
    assert os.stat(floor).st_nlink == 4  # ., .., d1, d2
    os.rename(floor / "d2", floor / "d1" / "sub")
    assert os.stat(floor).st_nlink == 3
    with pytest.raises(OSError) as e:
        os.rename(floor / "d1", floor / "d1" / "sub" / "loop")
    assert e.value.errno == errno.EINVAL


def test_rename_flags(floor):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    (floor / "x").write_text("x")
    (floor / "y").write_text("y")

    def renameat2(a, b, flags):
        r = libc.renameat2(-100, str(floor / a).encode(), -100, str(floor / b).encode(), flags)
        return 0 if r == 0 else ctypes.get_errno()
    assert renameat2("x", "y", 1) == errno.EEXIST  # RENAME_NOREPLACE
    assert renameat2("x", "y", 2) == 0  # RENAME_EXCHANGE
    assert (floor / "x").read_text() == "y" and (floor / "y").read_text() == "x"


def test_links_symlinks_modes_xattrs(floor):
    p = floor / "f"
    p.write_text("data")
    os.link(p, floor / "h")
    assert p.stat().st_nlink == 2 and p.stat().st_ino == (floor / "h").stat().st_ino
    os.unlink(p)
    assert (floor / "h").stat().st_nlink == 1 and (floor / "h").read_text() == "data"
    os.symlink("h", floor / "s")
    assert os.readlink(floor / "s") == "h" and (floor / "s").read_text() == "data"
    os.chmod(floor / "h", 0o4751)
    os.chown(floor / "h", 1234, 5678)
    st = os.stat(floor / "h")
    assert (st.st_uid, st.st_gid) == (1234, 5678)
    assert stat.S_IMODE(st.st_mode) == 0o751  # chown dropped the setuid bit
    os.utime(floor / "h", ns=(1_000_000_123, 2_000_000_456))
    st = os.stat(floor / "h")
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_123, 2_000_000_456)
    with pytest.raises(OSError) as e:
        os.getxattr(floor / "h", "user.none")
    assert e.value.errno == errno.ENODATA
    os.setxattr(floor / "h", "user.k", b"v")
    assert os.getxattr(floor / "h", "user.k") == b"v"
    assert os.listxattr(floor / "h") == ["user.k"]
    with pytest.raises(FileExistsError):
        os.setxattr(floor / "h", "user.k", b"w", os.XATTR_CREATE)
    os.removexattr(floor / "h", "user.k")
    assert os.listxattr(floor / "h") == []
    os.mkfifo(floor / "fifo")
    assert stat.S_ISFIFO(os.stat(floor / "fifo").st_mode)
    sv = os.statvfs(floor)
    assert sv.f_bavail > 0 and sv.f_namemax == 255


def test_git_and_tar_work(floor, tmp_path):
    src = floor / "src"
    src.mkdir()
    for i in range(50):
        (src / ("m%d.c" % i)).write_text("int f%d(void) { return %d; }\n" % (i, i))
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    run = lambda *a, **k: subprocess.run(a, cwd=src, env=env, check=True,
                                         capture_output=True, text=True, **k)
    run("git", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-q", "-m", "x")
    assert run("git", "status", "--porcelain").stdout == ""
    (src / "m0.c").write_text("changed\n")
    assert run("git", "status", "--porcelain").stdout.strip() == "M m0.c"
    tarball = tmp_path / "t.tar"
    subprocess.run(["tar", "-cf", str(tarball), "-C", str(floor), "src"], check=True)
    (floor / "out").mkdir()
    subprocess.run(["tar", "-xf", str(tarball), "-C", str(floor / "out")], check=True)
    r = subprocess.run(["diff", "-r", str(src), str(floor / "out" / "src")])
    assert r.returncode == 0


@pytest.mark.parametrize("killpriv2", [False, True])
def test_killpriv2(tmp_path, killpriv2):
    """-o killpriv2 gives the kernel FUSE_HANDLE_KILLPRIV_V2, as the ntfs mount
    does (tools/bench-fs.sh's floorsame): the kernel then stops asking for
    security.capability (a GETXATTR) before every write, and the floor drops
    setuid and setgid itself when someone other than root writes."""
    with mounted_floor(tmp_path, "allow_other,default_permissions,timeout=0" +
                       (",killpriv2" if killpriv2 else "")) as (mnt, counts):
        p = mnt / "f"
        with open(p, "wb") as f:
            for _ in range(32):
                f.write(b"x" * 4096)
                f.flush()
        os.chmod(p, 0o6777)
        # opened by root, written by nobody (the path is not nobody's to walk)
        code = ("import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND); os.setgroups([]); "
                "os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534); os.write(fd, b'more\\n')")
        r = subprocess.run(["/usr/bin/python3", "-c", code, str(p)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o777
        assert os.path.getsize(p) == 32 * 4096 + 5
    getxattrs = counts().get("GETXATTR", 0)
    if killpriv2:
        assert getxattrs <= 4, counts()
    else:
        assert getxattrs >= 32, counts()


@pytest.mark.parametrize("noautoinval", [False, True])
def test_noautoinval(tmp_path, noautoinval):
    """-o noautoinval turns off FUSE_AUTO_INVAL_DATA, as the ntfs mount does
    (tools/bench-fs.sh's floorsame): with it, every attribute refresh after
    a write finds a new mtime and drops the file's pages, so reading back
    what was just written costs a READ; without it the pages stay."""
    with mounted_floor(tmp_path, "timeout=0" + (",noautoinval" if noautoinval else "")) as (mnt, counts):
        fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            for i in range(32):
                block = bytes([65 + i % 26]) * 4096
                assert os.pwrite(fd, block, i * 4096) == 4096
                assert os.fstat(fd).st_size == (i + 1) * 4096  # a GETATTR (timeout 0)
                assert os.pread(fd, 4096, i * 4096) == block
        finally:
            os.close(fd)
    reads = counts().get("READ", 0)
    if noautoinval:
        assert reads <= 2, counts()
    else:
        assert reads >= 30, counts()


def _floor_workers(mnt):
    """Names of the threads of the fusefloor serving mnt."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if argv[0] != FLOOR.encode() or str(mnt).encode() not in argv:
                continue
            names = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    names.append(f.read().strip())
            return names
        except FileNotFoundError:
            continue
    pytest.fail("no fusefloor process for %s" % mnt)


@pytest.mark.parametrize("growpool", [False, True])
def test_worker_pool(tmp_path, growpool):
    """By default the floor serves on max_threads workers started at mount,
    as the ntfs mount does (fs/fusepool.h); -o growpool keeps libfuse's
    loop, which starts with one worker and adds one whenever all are busy."""
    with mounted_floor(tmp_path, "max_threads=4" + (",growpool" if growpool else "")) as (mnt, _):
        os.stat(mnt)  # INIT answered
        deadline = time.monotonic() + 5
        while (not growpool and _floor_workers(mnt).count("fusefloor-wk") < 4
               and time.monotonic() < deadline):
            time.sleep(0.01)
        names = _floor_workers(mnt)
        if growpool:
            assert "fusefloor-wk" not in names and len(names) <= 3, names
        else:
            assert names.count("fusefloor-wk") == 4, names
        (mnt / "f").write_bytes(b"x" * 1000)
        assert (mnt / "f").read_bytes() == b"x" * 1000


def test_worker_pool_bound(tmp_path):
    """More workers than the pool takes is refused before mounting."""
    if not os.path.exists(FLOOR):
        pytest.skip("no fusefloor at %s" % FLOOR)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([FLOOR, str(mnt), "-f", "-o", "max_threads=300"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "max_threads is 1..256" in r.stderr, r
    assert not _mounted(str(mnt))
