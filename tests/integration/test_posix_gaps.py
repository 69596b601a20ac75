# SPDX-License-Identifier: MIT
"""POSIX behaviours a wider conformance run found missing (issue 71).

POSIX ACLs (docs/mount.md, "POSIX ACLs"): setfacl/getfacl round trips,
chmod against the mask, default ACLs and their inheritance on create, and
enforcement for another user, each run on the mount and on a directory of
the host's ext4 (/tmp) in the same test and compared; ACLs carried by
checkpoint and rollback, by a fork, and by export/import (pax ACL records,
against GNU tar). security.* and trusted.* xattrs refused with EPERM, on the
mount and from the jail. fallocate: ENOSPC past the free disk, EDQUOT past a
session's quota, and a preallocated range that does not grow du when
written. Buffered reads after O_DIRECT writes (sync and AIO) see the new
bytes. relatime as on ext4, noatime by default."""
import errno
import os
import stat
import subprocess
import sys
import tarfile
import time

import pytest

from ctl_fixtures import daemon  # noqa: F401  (fixture)

HERE = os.path.dirname(os.path.abspath(__file__))

NOBODY = 65534


def getfacl(path):
    r = subprocess.run(["getfacl", "-c", "-n", "-p", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def setfacl(*args):
    """setfacl's exit code (0 or 1), stderr kept for the assertion messages."""
    r = subprocess.run(["setfacl", *args], capture_output=True, text=True)
    return r.returncode


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def as_nobody(*argv, groups=False):
    """argv run as nobody (uid and gid 65534, no supplementary groups); its exit code."""
    r = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                       capture_output=True, text=True, timeout=60)
    return r.returncode


def ext4_dir(scratch, name="ext4"):
    d = os.path.join(scratch, name)
    os.mkdir(d)
    os.chmod(d, 0o755)
    return d


def make(path, file_mode=0o666, data=b""):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode)
    os.write(fd, data)
    os.close(fd)


def acl_script(base):
    """The same setfacl/chmod/create sequence on one tree; what getfacl,
    stat and listxattr say after each step."""
    seen = []
    old = os.umask(0o022)
    try:
        f = os.path.join(base, "f")
        make(f, 0o644)
        assert setfacl("-m", "u:1000:rw,g:1000:r", f) == 0
        seen.append(("named", getfacl(f), mode(f), sorted(os.listxattr(f))))
        for m in (0o600, 0o664, 0o750):  # chmod changes the mask, not the group entry
            os.chmod(f, m)
            seen.append(("chmod", m, getfacl(f), mode(f)))
        assert setfacl("-x", "u:1000,g:1000", f) == 0
        seen.append(("removed", getfacl(f), mode(f)))
        assert setfacl("-b", f) == 0
        seen.append(("stripped", getfacl(f), mode(f), os.listxattr(f)))
        # an ACL that only says what the mode says is no ACL: a chmod
        g = os.path.join(base, "g")
        make(g, 0o644)
        assert setfacl("-m", "g::r,o::-", g) == 0
        seen.append(("equivalent", getfacl(g), mode(g), os.listxattr(g)))
        # default ACLs: inherited by what is made in the directory, with
        # the umask ignored and the creator's mode limiting the entries
        d = os.path.join(base, "d")
        os.mkdir(d, 0o755)
        assert setfacl("-d", "-m", f"u:{NOBODY}:rwx,g::rx,o::-", d) == 0
        seen.append(("default", getfacl(d), mode(d), sorted(os.listxattr(d))))
        os.umask(0o077)
        make(os.path.join(d, "file"), 0o666)
        make(os.path.join(d, "ro"), 0o444)
        os.mkdir(os.path.join(d, "sub"), 0o777)
        os.mkfifo(os.path.join(d, "fifo"), 0o660)
        os.symlink("file", os.path.join(d, "ln"))
        make(os.path.join(d, "sub", "deeper"), 0o640)
        for n in ("file", "ro", "sub", "fifo", "sub/deeper"):
            p = os.path.join(d, n)
            seen.append(("inherited", n, getfacl(p), mode(p), sorted(os.listxattr(p))))
        seen.append(("symlink", os.lstat(os.path.join(d, "ln")).st_mode))
        # no default ACL: the umask applies as before
        os.umask(0o027)
        make(os.path.join(base, "plain"), 0o666)
        os.mkdir(os.path.join(base, "plaindir"), 0o777)
        seen.append(("umask", mode(os.path.join(base, "plain")), mode(os.path.join(base, "plaindir"))))
        # a default ACL on a file is refused (EACCES), removing one works
        seen.append(("default on a file", setfacl("-d", "-m", "u:1000:r", g)))
        assert setfacl("-k", d) == 0
        seen.append(("default removed", getfacl(d), os.listxattr(d)))
    finally:
        os.umask(old)
    return seen


def test_acls_round_trip_as_on_ext4(mnt, scratch):
    ntfs = acl_script(mnt.path)
    ext4 = acl_script(ext4_dir(scratch))
    for a, b in zip(ntfs, ext4):
        assert a == b, f"mount: {a}\next4:  {b}"
    assert len(ntfs) == len(ext4)
    # and what ext4 shows is what it should be
    named = ntfs[0]
    assert "user:1000:rw-" in named[1] and "mask::rw-" in named[1] and named[2] == 0o664
    assert named[3] == ["system.posix_acl_access"]
    assert "mask::---" in ntfs[1][2] and ntfs[1][3] == 0o600
    inherited = {s[1]: s for s in ntfs if s[0] == "inherited"}
    assert f"user:{NOBODY}:rwx" in inherited["file"][2] and inherited["file"][3] == 0o660
    assert "default:user:" in inherited["sub"][2] and inherited["sub"][3] == 0o770
    assert inherited["sub/deeper"][3] == 0o640
    assert ntfs[-3] == ("umask", 0o640, 0o750)


def getfacl_tree(root):
    """getfacl -R of the tree, one block per file, in name order (not readdir's)."""
    r = subprocess.run(["getfacl", "-R", "-n", "-p", "."], capture_output=True, text=True, cwd=root)
    assert r.returncode == 0, r.stderr
    return sorted(b for b in r.stdout.split("\n\n") if b.strip())


def test_cp_a_and_rsync_a_carry_acls_onto_the_mount(mnt, scratch):
    src = ext4_dir(scratch, "src")
    old = os.umask(0o022)
    try:
        make(os.path.join(src, "f"), 0o640, b"f\n")
        assert setfacl("-m", f"u:{NOBODY}:rw,g:1000:r", os.path.join(src, "f")) == 0
        os.mkdir(os.path.join(src, "d"), 0o750)
        assert setfacl("-m", f"u:{NOBODY}:rx", "-d", "-m", f"g:1000:rwx", os.path.join(src, "d")) == 0
        make(os.path.join(src, "d", "in"), 0o666, b"in\n")
        make(os.path.join(src, "plain"), 0o604, b"p\n")
    finally:
        os.umask(old)
    want = getfacl_tree(src)
    text = "\n".join(want)
    assert len(want) == 5 and f"user:{NOBODY}:rw-" in text and "default:group:1000:rwx" in text
    r = subprocess.run(["cp", "-a", src, os.path.join(mnt.path, "cp")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert getfacl_tree(os.path.join(mnt.path, "cp")) == want
    r = subprocess.run(["rsync", "-aA", src + "/", os.path.join(mnt.path, "rs") + "/"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert getfacl_tree(os.path.join(mnt.path, "rs")) == want
    # and back out onto ext4
    back = os.path.join(scratch, "back")
    r = subprocess.run(["cp", "-a", os.path.join(mnt.path, "cp"), back], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert getfacl_tree(back) == want


def enforcement_script(base):
    """What nobody may do, step by step, as root changes ACLs."""
    seen = []
    old = os.umask(0o022)
    try:
        s = os.path.join(base, "secret")
        make(s, 0o600, b"secret\n")
        seen.append(("read, mode 0600", as_nobody("cat", s)))
        setfacl("-m", f"u:{NOBODY}:r", s)
        seen.append(("read, u:nobody:r", as_nobody("cat", s)))
        seen.append(("write, u:nobody:r", as_nobody("sh", "-c", f"echo x >> {s}")))
        setfacl("-m", "m::-", s)
        seen.append(("read, mask ---", as_nobody("cat", s)))
        os.chmod(s, 0o640)  # the mask again r--
        seen.append(("read after chmod 0640", as_nobody("cat", s)))
        seen.append(("setfacl by nobody", as_nobody("setfacl", "-m", f"u:{NOBODY}:rw", s)))
        # directories: search and write through a named entry
        p = os.path.join(base, "private")
        os.mkdir(p, 0o700)
        make(os.path.join(p, "inside"), 0o644, b"in\n")
        seen.append(("ls, mode 0700", as_nobody("ls", p)))
        setfacl("-m", f"u:{NOBODY}:rx", p)
        seen.append(("ls, u:nobody:rx", as_nobody("ls", p)))
        seen.append(("cat inside", as_nobody("cat", os.path.join(p, "inside"))))
        seen.append(("create, u:nobody:rx", as_nobody("touch", os.path.join(p, "new"))))
        setfacl("-m", f"u:{NOBODY}:rwx", p)
        seen.append(("create, u:nobody:rwx", as_nobody("touch", os.path.join(p, "new"))))
        seen.append(("owner of new", os.stat(os.path.join(p, "new")).st_uid))
        # inherited entries are enforced: root's new file is nobody's to write
        q = os.path.join(base, "shared")
        os.mkdir(q, 0o755)
        setfacl("-d", "-m", f"u:{NOBODY}:rw", q)
        make(os.path.join(q, "doc"), 0o666)
        make(os.path.join(q, "narrow"), 0o644)
        seen.append(("write inherited rw", as_nobody("sh", "-c", f"echo ok >> {q}/doc")))
        seen.append(("write inherited, mode 0644", as_nobody("sh", "-c", f"echo ok >> {q}/narrow")))
    finally:
        os.umask(old)
    return seen


def test_acls_enforced_for_another_user_as_on_ext4(mnt, scratch):
    ntfs = enforcement_script(mnt.path)
    ext4 = enforcement_script(ext4_dir(scratch))
    assert ntfs == ext4
    want = {"read, mode 0600": 1, "read, u:nobody:r": 0, "write, u:nobody:r": 2, "read, mask ---": 1,
            "read after chmod 0640": 0, "setfacl by nobody": 1, "ls, mode 0700": 2, "ls, u:nobody:rx": 0,
            "cat inside": 0, "create, u:nobody:rx": 1, "create, u:nobody:rwx": 0, "owner of new": NOBODY,
            "write inherited rw": 0, "write inherited, mode 0644": 2}
    assert dict(ntfs) == want


def test_acls_carried_by_checkpoint_and_rollback(mnt):
    f = os.path.join(mnt.path, "f")
    make(f, 0o600, b"data\n")
    os.chmod(mnt.path, 0o755)
    assert setfacl("-m", f"u:{NOBODY}:r", f) == 0
    with_acl = getfacl(f)
    mnt.checkpoint()
    assert as_nobody("cat", f) == 0
    assert setfacl("-b", f) == 0
    assert as_nobody("cat", f) == 1
    mnt.rollback()  # to the checkpoint: the ACL is back, and enforced at once
    assert getfacl(f) == with_acl
    assert as_nobody("cat", f) == 0
    # and the other way: an ACL added after the checkpoint goes with a rollback
    g = os.path.join(mnt.path, "g")
    make(g, 0o600, b"g\n")
    mnt.checkpoint()
    assert setfacl("-m", f"u:{NOBODY}:r", g) == 0
    assert as_nobody("cat", g) == 0
    mnt.rollback()
    assert as_nobody("cat", g) == 1 and os.listxattr(g) == []
    assert getfacl(f) == with_acl


def test_acls_carried_by_fork_export_and_import(daemon, scratch):
    daemon.ok("session", "new", "a")
    mp = os.path.join(scratch, "a")
    os.mkdir(mp)
    daemon.ok("mount", "a", mp)
    os.chmod(mp, 0o755)
    old = os.umask(0o022)
    try:
        make(os.path.join(mp, "f"), 0o640, b"f\n")
        assert setfacl("-m", f"u:{NOBODY}:r,g:1000:rw", os.path.join(mp, "f")) == 0
        os.mkdir(os.path.join(mp, "d"), 0o755)
        assert setfacl("-d", "-m", f"u:{NOBODY}:rwx,g::rx,o::-", os.path.join(mp, "d")) == 0
        make(os.path.join(mp, "d", "inherited"), 0o666, b"i\n")
    finally:
        os.umask(old)
    names = ["f", "d", "d/inherited"]
    want = {n: getfacl(os.path.join(mp, n)) for n in names}
    modes = {n: mode(os.path.join(mp, n)) for n in names}
    assert f"user:{NOBODY}:rwx\t#effective:rw-" in want["d/inherited"]
    daemon.ok("checkpoint", "a")
    # a fork has them, and they are enforced there
    daemon.ok("fork", "a", "b")
    mb = os.path.join(scratch, "b")
    os.mkdir(mb)
    daemon.ok("mount", "b", mb)
    os.chmod(mb, 0o755)
    assert {n: getfacl(os.path.join(mb, n)) for n in names} == want
    assert as_nobody("cat", os.path.join(mb, "f")) == 0
    assert as_nobody("sh", "-c", f"echo more >> {mb}/d/inherited") == 0
    # export: pax ACL records (SCHILY.acl.*), not xattrs
    arc = os.path.join(scratch, "a.tar")
    daemon.ok("export", "a", arc)
    with tarfile.open(arc) as t:
        hdr = {m.name: m.pax_headers for m in t.getmembers()}
    assert f"user:{NOBODY}:r--" in hdr["./f"]["SCHILY.acl.access"]
    assert f"user:{NOBODY}:rwx" in hdr["./d"]["SCHILY.acl.default"]
    assert not any(k.startswith("SCHILY.xattr.system.posix_acl") for h in hdr.values() for k in h)
    # GNU tar extracts them onto ext4 as they were on the mount
    ext = ext4_dir(scratch, "extracted")
    r = subprocess.run(["tar", "--acls", "--numeric-owner", "-xpf", arc, "-C", ext], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert {n: getfacl(os.path.join(ext, n)) for n in names} == want
    assert {n: mode(os.path.join(ext, n)) for n in names} == modes
    # import of our export, and of GNU tar's archive of the ext4 copy (names, not ids)
    gnu = os.path.join(scratch, "gnu.tar")
    r = subprocess.run(["tar", "--acls", "--format=pax", "-cf", gnu, "-C", ext, "."], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    for name, path in (("c", arc), ("g", gnu)):
        daemon.ok("import", name, path)
        mc = os.path.join(scratch, name)
        os.mkdir(mc)
        daemon.ok("mount", name, mc)
        os.chmod(mc, 0o755)
        assert {n: getfacl(os.path.join(mc, n)) for n in names} == want, name
        assert {n: mode(os.path.join(mc, n)) for n in names} == modes, name
        assert as_nobody("cat", os.path.join(mc, "f")) == 0
        daemon.ok("umount", mc)
    for m in (mp, mb):
        daemon.ok("umount", m)


def poll(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_an_acl_change_through_one_mount_is_enforced_through_the_other(daemon, scratch):
    """Each kernel caches an inode's ACL; a change through one mount of a
    session reaches the other's checks with its attributes (at most 1 s
    while shared: docs/mount.md)."""
    daemon.ok("session", "new", "two")
    a, b = os.path.join(scratch, "ma"), os.path.join(scratch, "mb")
    for m in (a, b):
        os.mkdir(m)
        daemon.ok("mount", "two", m)
        os.chmod(m, 0o755)
    make(os.path.join(a, "f"), 0o600, b"f\n")
    assert setfacl("-m", f"u:{NOBODY}:r", os.path.join(a, "f")) == 0
    fb = os.path.join(b, "f")
    assert poll(lambda: os.path.exists(fb))
    assert poll(lambda: as_nobody("cat", fb) == 0)  # b's kernel now holds the ACL
    assert setfacl("-b", os.path.join(a, "f")) == 0
    assert poll(lambda: as_nobody("cat", fb) != 0), "b still enforces the removed ACL"
    assert setfacl("-m", f"u:{NOBODY}:r", os.path.join(a, "f")) == 0
    assert poll(lambda: as_nobody("cat", fb) == 0), "b does not see the new ACL"
    os.chmod(os.path.join(a, "f"), 0o600)  # the mask follows the mode
    assert poll(lambda: as_nobody("cat", fb) != 0), "b still enforces the old mask"
    for m in (a, b):
        daemon.ok("umount", m)


def test_import_refuses_invalid_or_unknown_acls(daemon, scratch):
    cases = {
        "invalid": ("user::rw-\ngroup::r--\nuser:65534:rw-\nother::---\n", "invalid access ACL"),
        "unknown": ("user::rw-\nuser:no-such-user-here:rw-\ngroup::r--\nmask::rw-\nother::---\n",
                    "no-such-user-here"),
    }
    for name, (acl, why) in cases.items():
        path = os.path.join(scratch, name + ".tar")
        with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as t:
            ti = tarfile.TarInfo("./f")
            ti.mode = 0o640
            ti.pax_headers = {"SCHILY.acl.access": acl}
            t.addfile(ti)
        r = daemon.ctl("import", name, path)
        assert r.returncode == 1 and why in r.stderr, (name, r.stdout, r.stderr)
        assert name not in daemon.ok("session", "ls")


PRIVILEGED = ["security.selinux", "security.ima", "trusted.overlay.opaque", "trusted.x"]


def test_security_and_trusted_xattrs_are_refused(mnt, scratch):
    f = os.path.join(mnt.path, "f")
    make(f, 0o644)
    host = os.path.join(ext4_dir(scratch), "f")
    make(host, 0o644)
    for name in PRIVILEGED:
        with pytest.raises(OSError) as e:
            os.setxattr(f, name, b"y")
        assert e.value.errno == errno.EPERM, name
        with pytest.raises(OSError) as e:
            os.removexattr(f, name)
        assert e.value.errno == errno.EPERM, name
    assert os.listxattr(f) == []
    # root on ext4 may set trusted.*: the mount differs on purpose
    os.setxattr(host, "trusted.x", b"y")
    assert os.getxattr(host, "trusted.x") == b"y"
    # user.* and ACLs still work
    os.setxattr(f, "user.ok", b"1")
    assert os.getxattr(f, "user.ok") == b"1"


def test_acls_work_in_the_jail(daemon):
    """setfacl/getfacl and inheritance through ntfs-ctl exec (the jail's
    /workspace is the session's mount); ids as the jail sees them."""
    daemon.ok("session", "new", "ja")
    r = daemon.ctl("exec", "ja", "--",
                   "cd /workspace && umask 077 && u=$(id -u) && touch f && mkdir d && "
                   "setfacl -m u:$u:rw,m::rw f && setfacl -d -m u:$u:rwx,g::rx,o::r d && touch d/in && "
                   "getfacl -c -n f d/in | grep -v '^$' && stat -c '%a %n' f d/in")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("user::rw-") and any(l.startswith("user:") and l.count(":") == 2
                                                   and l.split(":")[1] for l in out), out
    # the inherited file: umask 077 ignored, the default ACL applied
    assert "other::r--" in out and out[-1] == "664 d/in", out  # mask rw- from the mode 0666


def test_security_xattrs_are_refused_in_the_jail(daemon):
    daemon.ok("session", "new", "j")
    code = ("import os, errno\n"
            "open('/workspace/f', 'w').close()\n"
            "for n in ('security.selinux', 'security.capability', 'trusted.x'):\n"
            "    try:\n"
            "        os.setxattr('/workspace/f', n, b'\\x01\\x00\\x00\\x02' + bytes(16))\n"
            "        print(n, 'set')\n"
            "    except OSError as e:\n"
            "        print(n, errno.errorcode[e.errno])\n"
            "os.setxattr('/workspace/f', 'user.ok', b'1')\n"
            "print('user.ok', os.getxattr('/workspace/f', 'user.ok'))\n")
    r = daemon.ctl("exec", "j", "--", "python3", "-c", code)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "security.selinux EPERM", lines
    assert lines[1].startswith("security.capability E") and "set" not in lines[1], lines
    assert lines[2] == "trusted.x EPERM", lines
    assert lines[3] == "user.ok b'1'"


def test_fallocate_past_the_free_disk_is_enospc(mnt):
    # Not compared with ext4: ext4 allocates block after block before it
    # gives up, which would fill the disk this machine shares.
    p = os.path.join(mnt.path, "big")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        sv = os.statvfs(mnt.path)
        free = sv.f_bavail * sv.f_frsize
        with pytest.raises(OSError) as e:
            os.posix_fallocate(fd, 0, free + (1 << 30))
        assert e.value.errno == errno.ENOSPC
        assert os.fstat(fd).st_size == 0
        with pytest.raises(OSError) as e:  # inside the file too
            os.posix_fallocate(fd, 4096, free + (1 << 30))
        assert e.value.errno == errno.ENOSPC
        os.posix_fallocate(fd, 0, 1 << 20)  # what fits is taken
        assert os.fstat(fd).st_size == 1 << 20
    finally:
        os.close(fd)


def du_bytes(path):
    r = subprocess.run(["du", "-B1", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[0])


def test_a_preallocated_range_does_not_grow_when_written_as_on_ext4(mnt, scratch):
    seen = {}
    for name, base in (("ntfs", mnt.path), ("ext4", ext4_dir(scratch))):
        p = os.path.join(base, "pre")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.posix_fallocate(fd, 0, 1 << 20)
            after = du_bytes(p)
            # (few pieces: more would make ext4 split its extents into a
            # tree block of its own, 4 KiB more in du)
            os.pwrite(fd, b"x" * 512, 0)
            os.pwrite(fd, b"y" * 65536, 128 << 10)
            os.fsync(fd)
            written = du_bytes(p)
        finally:
            os.close(fd)
        seen[name] = (after >= 1 << 20, written == after, after, written)
    assert seen["ntfs"][:2] == seen["ext4"][:2] == (True, True), seen


def test_fallocate_past_a_session_quota_is_edquot(daemon, scratch):
    daemon.ok("session", "new", "q")
    mp = os.path.join(scratch, "q")
    os.mkdir(mp)
    daemon.ok("mount", "q", mp)
    daemon.ok("quota", "q", "--bytes", "1M", "--inodes", "1000")
    sv = os.statvfs(mp)
    assert sv.f_bavail * sv.f_frsize <= 1 << 20  # what statfs offers
    fd = os.open(os.path.join(mp, "f"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        with pytest.raises(OSError) as e:
            os.posix_fallocate(fd, 0, 4 << 20)
        assert e.value.errno == errno.EDQUOT
        assert os.fstat(fd).st_size == 0
        os.posix_fallocate(fd, 0, 256 << 10)
        assert os.fstat(fd).st_size == 256 << 10
    finally:
        os.close(fd)
    daemon.ok("umount", mp)


@pytest.fixture(scope="module")
def dio_prog(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("dio") / "dio_coherence")
    r = subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-o", out,
                        os.path.join(HERE, "posix_gaps", "dio_coherence.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_buffered_reads_after_o_direct_writes_see_the_new_bytes(mnt, scratch, dio_prog):
    for base in (mnt.path, ext4_dir(scratch)):
        r = subprocess.run([dio_prog, os.path.join(base, "f")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{base}: {r.stdout}{r.stderr}"
        lines = r.stdout.splitlines()
        assert len(lines) == 14 and all(l.endswith("ok") for l in lines), lines


def atime_script(base):
    """Reads under relatime, step by step: did atime move?"""
    p = os.path.join(base, "f")
    with open(p, "wb") as f:
        f.write(b"x" * 100000)

    def read():
        with open(p, "rb") as f:
            f.read()

    def atime():
        return os.stat(p).st_atime_ns

    seen = []
    st = os.stat(p)
    os.utime(p, ns=(st.st_mtime_ns - 10 * 10**9, st.st_mtime_ns))  # atime older than mtime
    a = atime()
    read()
    seen.append(("atime older than mtime", atime() > a))
    a = atime()
    time.sleep(0.05)
    read()
    seen.append(("read again", atime() == a))
    # a write through the same mount (its pages stay cached): the next read moves it
    with open(p, "r+b") as f:
        f.write(b"y")
    a = atime()
    time.sleep(0.05)
    read()
    seen.append(("after a write", atime() > a))
    a = atime()
    read()
    seen.append(("and not again", atime() == a))
    # 25 hours old, newer than mtime; utime set ctime to now, so it moves
    now = time.time_ns()
    os.utime(p, ns=(now - 25 * 3600 * 10**9, now - 26 * 3600 * 10**9))
    a = atime()
    read()
    seen.append(("a day old", atime() > a))
    return seen


def test_relatime_behaves_as_on_ext4(mounter, store_dir, scratch):
    m = mounter(store_dir, extra=("--relatime",))
    opts = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == m.path][0].split(",")
    assert "relatime" in opts and "noatime" not in opts, opts
    ext = ext4_dir(scratch)
    ext_opts = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == "/"][0].split(",")
    assert "relatime" in ext_opts  # the reference: / (and /tmp on it) is relatime
    ntfs = atime_script(m.path)
    assert ntfs == atime_script(ext)
    assert all(ok for _, ok in ntfs), ntfs
    # reads are no change: a checkpoint after them makes no commit
    c1 = m.checkpoint()
    with open(os.path.join(m.path, "f"), "rb") as f:
        f.read()
    assert m.checkpoint() == c1


def test_ntfs_ctl_mount_relatime(daemon, scratch):
    daemon.ok("session", "new", "ra")
    mp = os.path.join(scratch, "ra")
    os.mkdir(mp)
    out = daemon.ok("mount", "ra", mp, "--relatime")
    assert out.strip().endswith(", relatime)"), out
    assert [m["relatime"] for m in daemon.jok("mounts")["mounts"] if m["mountpoint"] == mp] == [True]
    opts = [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == mp][0].split(",")
    assert "relatime" in opts and "noatime" not in opts, opts
    seen = atime_script(mp)
    assert all(ok for _, ok in seen), seen
    daemon.ok("umount", mp)
    # without the flag: noatime, and the listing says so
    daemon.ok("mount", "ra", mp)
    assert [m["relatime"] for m in daemon.jok("mounts")["mounts"] if m["mountpoint"] == mp] == [False]
    daemon.ok("umount", mp)


def test_noatime_is_the_default(mnt):
    p = os.path.join(mnt.path, "f")
    make(p, 0o644, b"x" * 1000)
    st = os.stat(p)
    os.utime(p, ns=(st.st_mtime_ns - 10 * 10**9, st.st_mtime_ns))
    a = os.stat(p).st_atime_ns
    with open(p, "rb") as f:
        f.read()
    assert os.stat(p).st_atime_ns == a
    assert "noatime" in [l.split()[3] for l in open("/proc/mounts") if l.split()[1] == mnt.path][0].split(",")
