# SPDX-License-Identifier: MIT
"""The Debian package, built and used as a user would (docs/install.md):

- `dpkg-buildpackage -us -uc -b` on a copy of the tree gives a .deb that
  lintian passes (errors and warnings; each override explained in
  debian/ntfs.lintian-overrides);
- it installs with apt into a clean Debian root made with mmdebstrap from
  the archive apt here uses (the root is cached as a tarball under
  $NTFS_PKG_CACHE, default /var/cache/ntfs-test, keyed by its package
  list; made from nothing when absent);
- there, in a private mount and PID namespace (so nothing it mounts or
  starts outlives the test): the programs are in /usr/bin and the jail in
  /usr/libexec/ntfs, `man ntfs-ctl` renders, the "ntfs" group exists,
  `systemd-analyze verify` accepts both units and ntfsd.service is enabled;
  ntfsd runs as the unit's ExecStart says, under the unit's
  CapabilityBoundingSet and NoNewPrivileges (applied with setpriv, as
  systemd cannot run here); the socket is 0660 group ntfs, a member of the
  group creates a session and a non-member is refused; status, a FUSE mount
  (/dev/fuse bound in), a command in the jail (also with loopback
  networking), a checkpoint and the installed bash completion work; SIGTERM
  stops it with exit 0.

Run once per CI run (scripts/test.sh's package stage), not per build tree:
it builds its own package."""
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CACHE = os.environ.get("NTFS_PKG_CACHE", "/var/cache/ntfs-test")
SOCK = "/run/ntfs/ntfsd.sock"
# besides the package's own dependencies: man (man ntfs-ctl), systemd
# (systemd-analyze and systemctl, run offline in the root)
EXTRA = ["man-db", "systemd"]


def run(argv, timeout=600, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def codename():
    with open("/etc/os-release") as f:
        m = re.search(r"^VERSION_CODENAME=(\S+)", f.read(), re.M)
    return m.group(1) if m else "bookworm"


def mirror(suite):
    """The Debian archive apt here uses for suite (one-line or deb822
    sources), else deb.debian.org."""
    files = ["/etc/apt/sources.list"]
    d = "/etc/apt/sources.list.d"
    if os.path.isdir(d):
        files += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    for path in files:
        try:
            text = open(path).read()
        except OSError:
            continue
        for m in re.finditer(r"^deb(?:\s+\[[^]]*\])?\s+(\S+)\s+(\S+)", text, re.M):
            if m.group(2) == suite and m.group(1).rstrip("/").endswith("/debian"):
                return m.group(1)
        for stanza in text.split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            suites = re.search(r"^Suites:\s*(.+)$", stanza, re.M)
            if uris and suites and suite in suites.group(1).split() and \
                    uris.group(1).rstrip("/").endswith("/debian"):
                return uris.group(1)
    return "http://deb.debian.org/debian"


@pytest.fixture(scope="module")
def work():
    d = tempfile.mkdtemp(prefix="ntfs-pkg-", dir="/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def deb(work):
    """Builds the package from a copy of the tree (the build writes into
    the tree and its parent)."""
    src = os.path.join(work, "src")
    os.makedirs(src)
    r = run(["git", "-C", ROOT, "ls-files", "-z", "-co", "--exclude-standard"])
    if r.returncode == 0:
        files = [f for f in r.stdout.split("\0") if f and os.path.lexists(os.path.join(ROOT, f))]
    else:  # not a git checkout: the tree without build directories
        files = []
        for dirpath, dirnames, names in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in (".git", "node_modules", "__pycache__")
                           and not os.path.exists(os.path.join(dirpath, d, "build.ninja"))]
            files += [os.path.relpath(os.path.join(dirpath, n), ROOT) for n in names]
    tar = subprocess.Popen(["tar", "-C", ROOT, "--null", "-T", "-", "-cf", "-"], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)
    untar = subprocess.Popen(["tar", "-C", src, "-xf", "-"], stdin=tar.stdout)
    tar.stdout.close()
    tar.stdin.write("\0".join(files).encode())
    tar.stdin.close()
    assert tar.wait() == 0 and untar.wait() == 0
    t0 = time.monotonic()
    r = run(["dpkg-buildpackage", "-us", "-uc", "-b", "-jauto"], cwd=src, timeout=1800)
    with open(os.path.join(work, "build.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    assert r.returncode == 0, f"dpkg-buildpackage failed:\n{(r.stdout + r.stderr)[-5000:]}"
    print(f"dpkg-buildpackage: {time.monotonic() - t0:.0f} s")
    debs = [f for f in os.listdir(work) if re.fullmatch(r"ntfs_[^_]+_[^_]+\.deb", f)]
    assert len(debs) == 1, os.listdir(work)
    return os.path.join(work, debs[0])


def test_lintian_finds_no_error_or_warning(deb):
    r = run(["lintian", "--fail-on", "error,warning", "--no-tag-display-limit", deb])
    tags = [l for l in r.stdout.splitlines() if re.match(r"^[EW]: ", l)]
    assert r.returncode == 0 and not tags, r.stdout + r.stderr


def base_root(deb):
    """A tarball of a clean Debian root holding the package's dependencies:
    from the cache, else made with mmdebstrap (and cached)."""
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    names = sorted({re.split(r"[\s(|]", d.strip())[0] for d in depends.split(",") if d.strip()} | set(EXTRA))
    suite = codename()
    url = mirror(suite)
    key = hashlib.sha256(f"{suite} {url} {' '.join(names)}".encode()).hexdigest()[:16]
    path = os.path.join(CACHE, f"{suite}-{key}.tar")
    if os.path.exists(path):
        return path
    os.makedirs(CACHE, exist_ok=True)
    tmp = path + f".tmp{os.getpid()}"
    t0 = time.monotonic()
    r = run(["mmdebstrap", "--variant=apt", "--format=tar", "--include=" + ",".join(names), suite, tmp, url], timeout=1800)
    assert r.returncode == 0, f"mmdebstrap failed:\n{r.stderr[-5000:]}"
    os.rename(tmp, path)
    print(f"mmdebstrap {suite} from {url}: {time.monotonic() - t0:.0f} s")
    return path


# One shell script run as PID 1 of new mount and PID namespaces: its mounts
# (proc, /dev with /dev/fuse, /sys for the jail's cgroups, the FUSE mount)
# and every process it starts are gone when it ends, whatever happens.
# Each step runs in the root; its stdout, stderr and status go to /out.
SCRIPT = r'''
R=$1; shift
# the root is a mount point, as / is on a real system (the jail makes it private)
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --rbind /sys "$R/sys"
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
while [ $# -gt 0 ]; do
    name=$1; cmd=$2; shift 2
    chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 HOME=/root \
        NTFS_SOCKET=/run/ntfs/ntfsd.sock /bin/bash -c "$cmd" >"$R/out/$name.out" 2>"$R/out/$name.err" </dev/null
    echo $? >"$R/out/$name.rc"
done
'''


def in_root(root, steps, timeout=600):
    """Runs steps [(name, bash command)] in root; {name: (rc, out, err)}."""
    out = os.path.join(root, "out")
    os.makedirs(out, exist_ok=True)
    argv = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
            "/bin/sh", "-c", SCRIPT, "sh", root]
    for name, cmd in steps:
        argv += [name, cmd]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        log = p.communicate(timeout=timeout)[0].decode(errors="replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)  # PID 1 of the namespace: its processes and mounts go with it
        p.communicate()
        raise
    assert p.returncode == 0, log
    res = {}
    for name, _ in steps:
        def rd(ext):
            try:
                with open(os.path.join(out, f"{name}.{ext}"), errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""
        res[name] = (int(rd("rc") or -1), rd("out"), rd("err"))
    return res


def unit_command(root):
    """ntfsd's command line as systemd would run it from the installed unit,
    wrapped in setpriv with the unit's bounding set and no_new_privs."""
    unit = open(os.path.join(root, "lib/systemd/system/ntfsd.service")).read()
    directive = lambda k: re.search(r"^%s=(.*)$" % k, unit, re.M)
    cmd = directive("ExecStart").group(1).replace("%S", "/var/lib").replace("%t", "/run")
    caps = directive("CapabilityBoundingSet").group(1).split()
    assert caps and all(c.startswith("CAP_") for c in caps), caps
    wrap = "setpriv --inh-caps=-all --bounding-set=-all," + ",".join("+" + c[4:].lower() for c in caps)
    if directive("NoNewPrivileges").group(1) == "yes":
        wrap += " --no-new-privs"
    assert directive("StateDirectory").group(1) == "ntfs" and directive("RuntimeDirectory").group(1) == "ntfs"
    return f"{wrap} {cmd}"


def test_the_package_installs_into_a_clean_root_and_runs_end_to_end(deb, work):
    assert os.path.exists("/dev/fuse"), "no /dev/fuse on this machine: the FUSE mount cannot be tested"
    t0 = time.monotonic()
    base = base_root(deb)
    t_base = time.monotonic() - t0
    root = os.path.join(work, "root")
    os.makedirs(root)
    try:
        r = run(["tar", "-C", root, "--numeric-owner", "-xf", base])
        assert r.returncode == 0, r.stderr
        os.makedirs(os.path.join(root, "pkg"))
        shutil.copy(deb, os.path.join(root, "pkg", "ntfs.deb"))
        res = in_root(root, [("install", "apt-get install -y /pkg/ntfs.deb")])
        rc, out, err = res["install"]
        assert rc == 0, f"apt-get install:\n{out}\n{err}"
        start = unit_command(root)
        ctl = "ntfs-ctl"
        steps = [
            ("layout", "ls -l /usr/bin/ntfsd /usr/bin/ntfs-ctl /usr/bin/ntfs-agent /usr/bin/ntfs-run "
                       "/usr/bin/ntfs-mcp /usr/libexec/ntfs/ntfs-jail && ! ls /usr/bin/ntfs-jail"),
            ("programs", "for p in ntfsd ntfs-ctl ntfs-agent ntfs-run ntfs-mcp /usr/libexec/ntfs/ntfs-fuse; do "
                         "$p --help >/dev/null || exit 1; done; /usr/libexec/ntfs/ntfs-jail --probe"),
            ("man", "MANWIDTH=80 man ntfs-ctl"),
            ("group", "getent group ntfs"),
            ("verify", "systemd-analyze verify /lib/systemd/system/ntfsd.service "
                       "/usr/lib/systemd/user/ntfsd.service"),
            ("enabled", "systemctl is-enabled ntfsd.service"),
            ("start", "mkdir -p -m 0700 /var/lib/ntfs && mkdir -p -m 0755 /run/ntfs && "
                      f"( {start} & echo $! >/run/ntfsd.pid; wait $!; echo $? >/out/ntfsd.exit ) "
                      ">/out/ntfsd.log 2>&1 & "
                      f"for i in $(seq 600); do [ -S {SOCK} ] && exit 0; sleep 0.1; done; exit 1"),
            ("socket", f"stat -c '%a %G' {SOCK}"),
            ("users", "useradd -m -G ntfs alice && useradd -m bob"),
            ("member", f"runuser -u alice -- {ctl} session new main"),
            ("stranger", f"runuser -u bob -- {ctl} status"),
            ("status", f"{ctl} status"),
            ("mount", f"mkdir -p /srv/ws && {ctl} mount main /srv/ws && echo hello >/srv/ws/greeting && "
                      "cat /srv/ws/greeting && grep ' /srv/ws ' /proc/self/mountinfo"),
            ("exec", f"{ctl} exec main -- 'cat greeting; echo from-jail >made' && cat /srv/ws/made"),
            ("loopback", f"{ctl} exec main --tool bash_run -- 'echo up'"),
            ("checkpoint", f"echo more >/srv/ws/later && {ctl} checkpoint main -m packaged && {ctl} log main"),
            ("completion", "source /usr/share/bash-completion/completions/ntfs-ctl && "
                           "COMP_WORDS=(ntfs-ctl session show ''); COMP_CWORD=3; _ntfs_ctl; "
                           "echo \"${COMPREPLY[*]}\""),
            ("umount", f"{ctl} umount /srv/ws && ! grep -q ' /srv/ws ' /proc/self/mountinfo"),
            ("stop", "kill -TERM $(cat /run/ntfsd.pid) && "
                     "for i in $(seq 600); do [ -s /out/ntfsd.exit ] && exit 0; sleep 0.1; done; exit 1"),
        ]
        t1 = time.monotonic()
        res = in_root(root, steps)
        t_run = time.monotonic() - t1

        def ok(name):
            rc, out, err = res[name]
            log = open(os.path.join(root, "out", "ntfsd.log"), errors="replace").read() \
                if os.path.exists(os.path.join(root, "out", "ntfsd.log")) else ""
            assert rc == 0, f"step {name}: exit {rc}\n{out}\n{err}\nntfsd's log:\n{log[-3000:]}"
            return out

        ok("layout")
        ok("programs")  # every program starts: its libraries are there
        assert re.search(r"ntfs-ctl - drive ntfsd", ok("man").replace("\u2010", "-"))
        assert "session new" in res["man"][1]
        assert ok("group").startswith("ntfs:")
        assert not res["verify"][2].strip(), res["verify"][2]
        ok("verify")
        assert ok("enabled").strip() == "enabled"
        ok("start")
        assert ok("socket").strip() == "660 ntfs"
        ok("users")
        assert "created session main" in ok("member")
        rc, out, err = res["stranger"]
        assert rc != 0 and "ermission denied" in err, (rc, out, err)
        assert "/var/lib/ntfs" in ok("status")
        out = ok("mount")
        assert "\nhello\n" in out and " - fuse.ntfs " in out, out
        out = ok("exec")
        assert out == "hello\nfrom-jail\n", out
        out = ok("loopback")
        assert out == "up\n", out
        out = ok("checkpoint")
        assert "packaged" in out, out
        assert ok("completion").split() == ["main"]
        ok("umount")
        ok("stop")
        assert open(os.path.join(root, "out", "ntfsd.exit")).read().strip() == "0"
        print(f"root: {t_base:.0f} s (cached: {base}), steps: {t_run:.0f} s")
    finally:
        # the mounts were made in the namespace that is gone; never recurse
        # into the host's /dev or /sys should one be seen here
        with open("/proc/self/mountinfo") as f:
            left = [l.split()[4] for l in f if l.split()[4].startswith(root + "/")]
        assert not left, f"mounts left under {root}: {left}"
        shutil.rmtree(root, ignore_errors=True)
