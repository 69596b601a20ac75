# SPDX-License-Identifier: MIT
"""Setuid and setgid bits (issue 63, item 1): written from the jail they are
refused (EPERM, by the seccomp filter), so a file an agent makes is never
setuid on the host mount; the host mount itself is nosuid; and an export
extracted by root never makes a file setuid root or setgid root unless
asked with --keep-setid (docs/jail.md, docs/archive.md)."""
import json
import os
import stat
import subprocess
import tarfile

from ctl_fixtures import daemon  # noqa: F401  (fixture)


def exec_(d, session, command, tool="bash_write"):
    r = d.http("POST", f"/v1/sessions/{session}/exec", body={"command": command, "tool": tool}, timeout=120)
    assert r.status == 200, r.body
    return json.loads(r.body)


def mounted(d, scratch, name):
    d.ok("session", "new", name)
    mp = os.path.join(scratch, "m-" + name)
    os.mkdir(mp)
    d.ok("mount", name, mp)
    return mp


def test_setid_bits_from_the_jail_are_refused(daemon, scratch):
    mp = mounted(daemon, scratch, "j")
    b = exec_(daemon, "j", r"""
cp /bin/true t; chmod 4755 t; echo chmod=$?
chmod g+s t; echo chmodg=$?
install -m 6755 /bin/true i; echo install=$?
python3 -c 'import os; os.open("o", os.O_CREAT | os.O_WRONLY, 0o4755)' 2>/dev/null; echo open=$?
python3 -c 'import os; os.mknod("p", 0o2644 | 0o10000)' 2>/dev/null; echo mknod=$?
touch plain; chmod 755 plain; echo plain=$?
""")
    out = dict(l.split("=") for l in b["stdout"].split())
    assert out["plain"] == "0"
    for k in ("chmod", "chmodg", "install", "open", "mknod"):
        assert out[k] != "0", (k, b)
    for f in ("t", "i", "o", "plain"):
        p = os.path.join(mp, f)
        if os.path.exists(p):
            assert not os.stat(p).st_mode & (stat.S_ISUID | stat.S_ISGID), f
    assert "Operation not permitted" in b["stderr"]


def test_the_host_mount_is_nosuid(daemon, scratch):
    mp = mounted(daemon, scratch, "n")
    with open("/proc/self/mounts") as f:
        opts = [l.split()[3] for l in f if l.split()[1] == mp]
    assert opts and "nosuid" in opts[0].split(","), opts


def test_export_leaves_out_setuid_root_unless_asked(daemon, scratch):
    mp = mounted(daemon, scratch, "e")
    for name, mode in (("suid", 0o4755), ("sgid", 0o2755), ("both", 0o6755), ("plain", 0o755)):
        p = os.path.join(mp, name)
        with open(p, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(p, mode)  # root on the host may (it is the host's own file)
    os.mkdir(os.path.join(mp, "shared"))
    os.chmod(os.path.join(mp, "shared"), 0o2775)  # a setgid directory only groups its files
    # a file setuid for another user is no escalation to root: kept
    p = os.path.join(mp, "user")
    with open(p, "w") as f:
        f.write("x")
    os.chown(p, 1000, 1000)
    os.chmod(p, 0o6755)
    assert os.stat(os.path.join(mp, "suid")).st_mode & 0o7777 == 0o4755
    daemon.ok("checkpoint", "e", "-m", "setid")

    def modes(archive):
        with tarfile.open(archive) as t:
            return {m.name.lstrip("./"): m.mode for m in t.getmembers() if m.name != "./"}

    plain = os.path.join(scratch, "e.tar")
    daemon.ok("export", "e", plain, "-q")
    m = modes(plain)
    assert m["suid"] == 0o755 and m["sgid"] == 0o755 and m["both"] == 0o755 and m["plain"] == 0o755
    assert m["shared"] == 0o2775 and m["user"] == 0o6755
    # extracted by root with permissions kept: nothing setuid root comes out
    out = os.path.join(scratch, "x")
    os.mkdir(out)
    subprocess.run(["tar", "-xpf", plain, "-C", out], check=True)
    assert os.stat(os.path.join(out, "both")).st_mode & 0o7777 == 0o755
    kept = os.path.join(scratch, "k.tar")
    daemon.ok("export", "e", kept, "-q", "--keep-setid")
    m = modes(kept)
    assert m["suid"] == 0o4755 and m["sgid"] == 0o2755 and m["both"] == 0o6755
    # over HTTP the flag is checked
    r = daemon.http("GET", "/v1/sessions/e/export?keep_setid=maybe")
    assert r.status == 400 and r.json["error"]["code"] == "bad_request"
