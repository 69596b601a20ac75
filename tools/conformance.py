#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""conformance: the errno of each syscall in each situation, on a native
directory and on an ntfs mount, in the same run (issue 12,
docs/reliability.md "POSIX conformance").

Every case builds the same small tree in a fresh directory under each root,
makes one call (as root, or as `nobody` in a forked child that drops to
uid/gid 65534), and records "OK" or the errno's name. The situations:
ENOENT, EEXIST, ENOTDIR, EISDIR, ENOTEMPTY, EACCES/EPERM by mode and owner,
ENAMETOOLONG, ELOOP, EXDEV, EINVAL, and calls that must succeed.

Usage:
  tools/conformance.py [--build DIR] [--native DIR] [--ntfs MOUNTPOINT]
                       [--known FILE] [-v]
Without --ntfs it starts ntfsd from --build (default $NTFS_BUILD, else
build/) on a temporary store, mounts a new session and cleans everything up
afterwards. --known FILE (docs/reliability.md) lists the accepted
differences: table rows "| `case` | native | ntfs | reason |". Prints every
difference, then "conformance: N cases, D differences (K known, U unknown)".
Exit 0 when every difference is known, 1 otherwise, 2 on a setup error.
"""
import argparse
import errno
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

NOBODY = 65534
LONG = "n" * 256          # one byte over NAME_MAX
MAXNAME = "m" * 255       # exactly NAME_MAX


# ---- the calls ---------------------------------------------------------------------

def w(path, data=b"x", mode=0o644):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def base(c):
    """The tree every case starts from."""
    os.mkdir(f"{c}/dir")
    w(f"{c}/dir/inner")
    os.mkdir(f"{c}/empty")
    w(f"{c}/file", b"hello")
    os.symlink("file", f"{c}/sym")
    os.symlink("loop2", f"{c}/loop1")
    os.symlink("loop1", f"{c}/loop2")
    os.symlink("missing", f"{c}/dangling")


def perm_tree(c):
    """Owned by root, with the modes the nobody cases need."""
    os.chmod(c, 0o755)
    os.mkdir(f"{c}/ro", 0o555)
    os.chmod(f"{c}/ro", 0o555)
    w(f"{c}/ro/f")
    os.mkdir(f"{c}/private")
    os.chmod(f"{c}/private", 0o700)
    w(f"{c}/private/f")
    os.mkdir(f"{c}/noread")
    w(f"{c}/noread/f")
    os.chmod(f"{c}/noread", 0o711)
    os.mkdir(f"{c}/sticky")
    w(f"{c}/sticky/rootfile", mode=0o666)
    os.chmod(f"{c}/sticky", 0o1777)
    os.mkdir(f"{c}/open")
    os.chmod(f"{c}/open", 0o777)
    w(f"{c}/open/rootfile", mode=0o644)
    w(f"{c}/secret", mode=0o600)
    w(f"{c}/readonly", mode=0o444)
    w(f"{c}/public", mode=0o666)


def op_open(path, flags, mode=0o644):
    def f(c):
        fd = os.open(path.format(c=c), flags, mode)
        os.close(fd)
    return f


def op_read_dir_fd(c):
    fd = os.open(f"{c}/dir", os.O_RDONLY)
    try:
        os.read(fd, 10)
    finally:
        os.close(fd)


def op_utime_now(path):
    return lambda c: os.utime(path.format(c=c))


def op_nobody_create_then_chown(c):
    w(f"{c}/open/mine")
    os.chown(f"{c}/open/mine", 0, 0)


def op_trunc_neg(c):
    fd = os.open(f"{c}/file", os.O_RDWR)
    try:
        os.ftruncate(fd, -1)
    finally:
        os.close(fd)


def op_lseek_data_past_end(c):
    fd = os.open(f"{c}/file", os.O_RDONLY)
    try:
        os.lseek(fd, 100, os.SEEK_DATA)
    finally:
        os.close(fd)


def op_write_readonly_fd(c):
    fd = os.open(f"{c}/file", os.O_RDONLY)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


def op_rename_noreplace(c):
    # renameat2(RENAME_NOREPLACE) through libc's syscall
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD = -100
    r = libc.syscall(316, AT_FDCWD, f"{c}/file".encode(), AT_FDCWD, f"{c}/dir/inner".encode(), 1)
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def op_tmpfile(c):
    fd = os.open(f"{c}/dir", os.O_TMPFILE | os.O_RDWR, 0o600)
    os.close(fd)


def op_punch_hole(c):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"{c}/file", os.O_RDWR)
    try:
        # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
        if libc.fallocate(fd, 0x02 | 0x01, ctypes.c_long(0), ctypes.c_long(2)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)


def op_fallocate_grow(c):
    fd = os.open(f"{c}/file", os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
    finally:
        os.close(fd)


def op_rename_exchange(c):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    r = libc.syscall(316, -100, f"{c}/file".encode(), -100, f"{c}/dir".encode(), 2)  # RENAME_EXCHANGE
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def op_xdev(kind):
    def f(c, other):
        if kind == "rename":
            os.rename(f"{c}/file", f"{other}/xdev-target")
        else:
            os.link(f"{c}/file", f"{other}/xdev-target")
    f.needs_other = True
    return f


# (id, call, as_nobody). Every case starts from base(); the nobody cases
# from perm_tree() too. {c} is the case directory.
CASES = [
    # ENOENT
    ("open-missing", op_open("{c}/missing", os.O_RDONLY), False),
    ("creat-missing-parent", op_open("{c}/missing/f", os.O_CREAT | os.O_WRONLY), False),
    ("stat-missing", lambda c: os.stat(f"{c}/missing"), False),
    ("stat-dangling", lambda c: os.stat(f"{c}/dangling"), False),
    ("lstat-dangling", lambda c: os.lstat(f"{c}/dangling"), False),
    ("unlink-missing", lambda c: os.unlink(f"{c}/missing"), False),
    ("rmdir-missing", lambda c: os.rmdir(f"{c}/missing"), False),
    ("rename-missing", lambda c: os.rename(f"{c}/missing", f"{c}/x"), False),
    ("link-missing", lambda c: os.link(f"{c}/missing", f"{c}/x"), False),
    ("readlink-missing", lambda c: os.readlink(f"{c}/missing"), False),
    ("chmod-missing", lambda c: os.chmod(f"{c}/missing", 0o600), False),
    ("truncate-missing", lambda c: os.truncate(f"{c}/missing", 0), False),
    ("mkdir-missing-parent", lambda c: os.mkdir(f"{c}/missing/d"), False),
    ("symlink-missing-parent", lambda c: os.symlink("x", f"{c}/missing/l"), False),
    ("utime-missing", lambda c: os.utime(f"{c}/missing"), False),
    ("listdir-missing", lambda c: os.listdir(f"{c}/missing"), False),
    ("open-dangling-nocreat", op_open("{c}/dangling", os.O_RDONLY), False),
    ("getxattr-missing-attr", lambda c: os.getxattr(f"{c}/file", "user.none"), False),
    # EEXIST
    ("mkdir-exists-dir", lambda c: os.mkdir(f"{c}/dir"), False),
    ("mkdir-exists-file", lambda c: os.mkdir(f"{c}/file"), False),
    ("mkdir-exists-symlink", lambda c: os.mkdir(f"{c}/dangling"), False),
    ("creat-excl-exists", op_open("{c}/file", os.O_CREAT | os.O_EXCL | os.O_WRONLY), False),
    ("creat-excl-dangling", op_open("{c}/dangling", os.O_CREAT | os.O_EXCL | os.O_WRONLY), False),
    ("link-exists", lambda c: os.link(f"{c}/file", f"{c}/dir/inner"), False),
    ("symlink-exists", lambda c: os.symlink("x", f"{c}/file"), False),
    ("mkfifo-exists", lambda c: os.mkfifo(f"{c}/file"), False),
    ("rename-noreplace-exists", op_rename_noreplace, False),
    ("setxattr-create-exists", lambda c: (os.setxattr(f"{c}/file", "user.a", b"1"),
                                          os.setxattr(f"{c}/file", "user.a", b"2", os.XATTR_CREATE)), False),
    # ENOTDIR
    ("open-file-as-dir", op_open("{c}/file/x", os.O_RDONLY), False),
    ("open-o-directory-file", op_open("{c}/file", os.O_RDONLY | os.O_DIRECTORY), False),
    ("mkdir-under-file", lambda c: os.mkdir(f"{c}/file/d"), False),
    ("stat-under-file", lambda c: os.stat(f"{c}/file/x"), False),
    ("rmdir-file", lambda c: os.rmdir(f"{c}/file"), False),
    ("listdir-file", lambda c: os.listdir(f"{c}/file"), False),
    ("rename-dir-onto-file", lambda c: os.rename(f"{c}/dir", f"{c}/file"), False),
    ("unlink-under-file", lambda c: os.unlink(f"{c}/file/x"), False),
    ("rmdir-symlink-to-dir", lambda c: (os.symlink("dir", f"{c}/dl"), os.rmdir(f"{c}/dl")), False),
    # EISDIR
    ("open-dir-wronly", op_open("{c}/dir", os.O_WRONLY), False),
    ("open-dir-rdwr", op_open("{c}/dir", os.O_RDWR), False),
    ("creat-dir", op_open("{c}/dir", os.O_CREAT | os.O_WRONLY), False),
    ("unlink-dir", lambda c: os.unlink(f"{c}/dir"), False),
    ("rename-file-onto-dir", lambda c: os.rename(f"{c}/file", f"{c}/empty"), False),
    ("truncate-dir", lambda c: os.truncate(f"{c}/dir", 0), False),
    ("read-dir-fd", op_read_dir_fd, False),
    # ENOTEMPTY
    ("rmdir-nonempty", lambda c: os.rmdir(f"{c}/dir"), False),
    ("rename-dir-onto-nonempty", lambda c: os.rename(f"{c}/empty", f"{c}/dir"), False),
    # EINVAL
    ("rename-dir-into-itself", lambda c: os.rename(f"{c}/dir", f"{c}/dir/sub"), False),
    ("rmdir-dot", lambda c: os.rmdir(f"{c}/dir/."), False),
    ("readlink-file", lambda c: os.readlink(f"{c}/file"), False),
    ("ftruncate-negative", op_trunc_neg, False),
    ("lseek-data-past-end", op_lseek_data_past_end, False),
    ("rename-dot-dot", lambda c: os.rename(f"{c}/dir/..", f"{c}/x"), False),
    ("setxattr-replace-missing", lambda c: os.setxattr(f"{c}/file", "user.none", b"1", os.XATTR_REPLACE),
     False),
    # EBADF (a write on a read-only descriptor)
    ("write-rdonly-fd", op_write_readonly_fd, False),
    # ENAMETOOLONG
    ("creat-name-too-long", op_open("{c}/" + LONG, os.O_CREAT | os.O_WRONLY), False),
    ("mkdir-name-too-long", lambda c: os.mkdir(f"{c}/{LONG}"), False),
    ("stat-name-too-long", lambda c: os.stat(f"{c}/{LONG}"), False),
    ("rename-to-name-too-long", lambda c: os.rename(f"{c}/file", f"{c}/{LONG}"), False),
    ("symlink-name-too-long", lambda c: os.symlink("x", f"{c}/{LONG}"), False),
    ("symlink-target-4096", lambda c: os.symlink("t" * 4096, f"{c}/longtarget"), False),
    ("creat-name-255", op_open("{c}/" + MAXNAME, os.O_CREAT | os.O_WRONLY), False),
    # ELOOP
    ("open-loop", op_open("{c}/loop1", os.O_RDONLY), False),
    ("stat-loop", lambda c: os.stat(f"{c}/loop1"), False),
    ("mkdir-under-loop", lambda c: os.mkdir(f"{c}/loop1/d"), False),
    ("open-nofollow-symlink", op_open("{c}/sym", os.O_RDONLY | os.O_NOFOLLOW), False),
    ("creat-loop", op_open("{c}/loop1", os.O_CREAT | os.O_WRONLY), False),
    # EXDEV (to the other root: native <-> ntfs)
    ("rename-cross-device", op_xdev("rename"), False),
    ("link-cross-device", op_xdev("link"), False),
    # EPERM as root
    ("link-dir", lambda c: os.link(f"{c}/dir", f"{c}/dirlink"), False),
    # less common calls
    ("open-o-tmpfile", op_tmpfile, False),
    ("fallocate-punch-hole", op_punch_hole, False),
    ("posix-fallocate-grow", op_fallocate_grow, False),
    ("rename-exchange", op_rename_exchange, False),
    ("setxattr-value-too-big", lambda c: os.setxattr(f"{c}/file", "user.big", b"v" * 65537), False),
    ("setxattr-name-too-long", lambda c: os.setxattr(f"{c}/file", "user." + "a" * 256, b"1"), False),
    ("mknod-char-device", lambda c: os.mknod(f"{c}/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)), False),
    ("link-to-symlink", lambda c: os.link(f"{c}/sym", f"{c}/symlink2", follow_symlinks=False), False),
    ("mkdir-name-255", lambda c: os.mkdir(f"{c}/{MAXNAME}"), False),
    # must succeed as root
    ("root-open-0000", lambda c: (w(f"{c}/z", mode=0), op_open("{c}/z", os.O_RDWR)(c)), False),
    ("root-access-x-0644", lambda c: (None if os.access(f"{c}/file", os.X_OK)
                                      else (_ for _ in ()).throw(PermissionError(errno.EACCES, "no x"))), False),
    ("rename-file-over-file", lambda c: os.rename(f"{c}/file", f"{c}/dir/inner"), False),
    ("rename-dir-over-empty", lambda c: os.rename(f"{c}/dir", f"{c}/empty"), False),
    ("rename-same-inode-links", lambda c: (os.link(f"{c}/file", f"{c}/h"), os.rename(f"{c}/file", f"{c}/h"),
                                           os.stat(f"{c}/file")), False),
    ("chown-root", lambda c: os.chown(f"{c}/file", NOBODY, NOBODY), False),
    ("mknod-fifo", lambda c: os.mkfifo(f"{c}/fifo"), False),
    # as nobody: EACCES / EPERM by mode and owner
    ("nobody-creat-in-root-dir", op_open("{c}/new", os.O_CREAT | os.O_WRONLY), True),
    ("nobody-open-0600-read", op_open("{c}/secret", os.O_RDONLY), True),
    ("nobody-open-0644-write", op_open("{c}/file", os.O_WRONLY), True),
    ("nobody-open-0444-trunc", op_open("{c}/readonly", os.O_WRONLY | os.O_TRUNC), True),
    ("nobody-traverse-0700", lambda c: os.stat(f"{c}/private/f"), True),
    ("nobody-listdir-0711", lambda c: os.listdir(f"{c}/noread"), True),
    ("nobody-open-through-0711", op_open("{c}/noread/f", os.O_RDONLY), True),
    ("nobody-mkdir-in-0555", lambda c: os.mkdir(f"{c}/ro/d"), True),
    ("nobody-unlink-in-0555", lambda c: os.unlink(f"{c}/ro/f"), True),
    ("nobody-rename-in-0555", lambda c: os.rename(f"{c}/ro/f", f"{c}/ro/g"), True),
    ("nobody-unlink-sticky-other", lambda c: os.unlink(f"{c}/sticky/rootfile"), True),
    ("nobody-rename-sticky-other", lambda c: os.rename(f"{c}/sticky/rootfile", f"{c}/sticky/x"), True),
    ("nobody-chmod-root-file", lambda c: os.chmod(f"{c}/public", 0o777), True),
    ("nobody-chown-root-file", lambda c: os.chown(f"{c}/public", NOBODY, NOBODY), True),
    ("nobody-chown-own-file-to-root", op_nobody_create_then_chown, True),
    ("nobody-utime-set-root-file", lambda c: os.utime(f"{c}/public", (1, 1)), True),
    ("nobody-utime-now-0644", op_utime_now("{c}/file"), True),
    ("nobody-utime-now-0666", op_utime_now("{c}/public"), True),
    ("nobody-creat-in-0777", op_open("{c}/open/mine", os.O_CREAT | os.O_WRONLY), True),
    ("nobody-unlink-root-file-in-0777", lambda c: os.unlink(f"{c}/open/rootfile"), True),
    ("nobody-write-0666", op_open("{c}/public", os.O_WRONLY), True),
    ("nobody-access-w-0644", lambda c: (None if os.access(f"{c}/file", os.W_OK)
                                        else (_ for _ in ()).throw(PermissionError(errno.EACCES, "no w"))), True),
    ("nobody-setxattr-user-root-file", lambda c: os.setxattr(f"{c}/public", "user.x", b"1"), True),
    ("nobody-setxattr-trusted", lambda c: os.setxattr(f"{c}/open", "trusted.x", b"1"), True),
]


def result_of(fn, c, other, nobody):
    def call():
        if getattr(fn, "needs_other", False):
            fn(c, other)
        else:
            fn(c)

    if not nobody:
        try:
            call()
            return "OK"
        except OSError as e:
            return errno.errorcode.get(e.errno, str(e.errno))
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        res = "OK"
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            call()
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
        except BaseException as e:  # noqa: BLE001
            res = f"exception:{type(e).__name__}"
        os.write(wfd, res.encode())
        os._exit(0)
    os.close(wfd)
    out = b""
    while True:
        chunk = os.read(r, 256)
        if not chunk:
            break
        out += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return out.decode() or "child-died"


def run_case(root, other, cid, fn, nobody):
    c = os.path.join(root, cid)
    os.mkdir(c)
    os.chmod(c, 0o755)
    base(c)
    if nobody:
        perm_tree(c)
    return result_of(fn, c, other, nobody)


# ---- known differences (docs/reliability.md) -----------------------------------

def load_known(path):
    """`case` -> (native, ntfs) from table rows "| `case` | native | ntfs | reason |"."""
    known = {}
    if not path:
        return known
    with open(path) as f:
        for line in f:
            m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|\s*([A-Z_0-9]+)\s*\|\s*([A-Z_0-9]+)\s*\|\s*(.+?)\s*\|\s*$", line)
            if m and m.group(4).strip():
                known[m.group(1)] = (m.group(2), m.group(3))
    return known


# ---- an ntfsd of our own --------------------------------------------------------------

def http(sock, method, path, body=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(60)
    s.connect(sock)
    raw = json.dumps(body).encode() if body is not None else b""
    s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(raw)}\r\n\r\n".encode() + raw)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def find_bin(build, name):
    for sub in ("", "ctl", "fs", "tools"):
        p = os.path.join(build, sub, name)
        if os.access(p, os.X_OK) and os.path.isfile(p):
            return p
    return None


class OwnDaemon:
    def __init__(self, build, tmp):
        ntfsd = find_bin(build, "ntfsd")
        if not ntfsd:
            raise SystemExit(f"conformance: no ntfsd under {build}")
        self.tmp = tmp
        self.sock = os.path.join(tmp, "s")
        self.mnt = os.path.join(tmp, "ntfs")
        os.mkdir(self.mnt)
        self.log = open(os.path.join(tmp, "ntfsd.log"), "wb")
        self.proc = subprocess.Popen([ntfsd, "--store", os.path.join(tmp, "store"), "--socket", self.sock, "-f"],
                                     stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                if http(self.sock, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit("conformance: ntfsd did not start")
            time.sleep(0.05)
        st, body = http(self.sock, "POST", "/v1/sessions", {"name": "conf"})
        st2, body2 = http(self.sock, "POST", "/v1/mounts", {"session": "conf", "mountpoint": self.mnt})
        if st != 201 or st2 != 201:
            self.stop()
            raise SystemExit(f"conformance: cannot mount: {body} {body2}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        self.log.close()
        return self.proc.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", "build"))
    ap.add_argument("--native")
    ap.add_argument("--ntfs")
    ap.add_argument("--known")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("conformance: needs root (the nobody cases drop privileges)", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="ntfs-conf-")
    os.chmod(tmp, 0o755)
    own = None
    try:
        if a.ntfs:
            ntfs_root = tempfile.mkdtemp(prefix="conf-", dir=a.ntfs)
        else:
            own = OwnDaemon(os.path.abspath(a.build), tmp)
            ntfs_root = os.path.join(own.mnt, "conf")
            os.mkdir(ntfs_root)
        native_root = tempfile.mkdtemp(prefix="conf-", dir=a.native) if a.native else os.path.join(tmp, "native")
        if not a.native:
            os.mkdir(native_root)
        for r in (ntfs_root, native_root):
            os.chmod(r, 0o755)
        known = load_known(a.known)
        diffs = unknown = 0
        for cid, fn, nobody in CASES:
            n = run_case(native_root, ntfs_root, cid, fn, nobody)
            f = run_case(ntfs_root, native_root, cid, fn, nobody)
            if a.verbose:
                print(f"{cid:36} native={n:14} ntfs={f}")
            if n != f:
                diffs += 1
                k = known.get(cid)
                if k == (n, f):
                    print(f"DIFF {cid}: native={n} ntfs={f} (known, docs/reliability.md)")
                else:
                    unknown += 1
                    print(f"DIFF {cid}: native={n} ntfs={f} (UNKNOWN)")
        print(f"conformance: {len(CASES)} cases, {diffs} differences ({diffs - unknown} known, {unknown} unknown)")
        return 1 if unknown else 0
    finally:
        if own:
            rc = own.stop()
            if rc not in (0, None):
                print(f"conformance: ntfsd exited {rc}", file=sys.stderr)
        if own and os.path.ismount(own.mnt):  # never recurse into a live mount
            print(f"conformance: {own.mnt} is still mounted; left {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
