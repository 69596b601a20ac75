# SPDX-License-Identifier: MIT
"""What an installation adds to the programs (dist/, docs/install.md),
checked against the build under test:

- man pages: each program in bindir has one, made from its --help, that
  renders without a groff warning and names every option (and, for
  ntfs-ctl, every command with every option of its own help);
- `meson install` lays out bindir, libexecdir/ntfs, the pages, the
  completion, the units and the sysusers entry, and `systemd-analyze verify`
  accepts both units as installed (and refuses a broken one);
- the bash and zsh completion of ntfs-ctl offer a live daemon's session
  names (through --socket or $NTFS_SOCKET), its commands and a command's
  options;
- ntfsd --socket-group makes the socket 0660 and that group's, and ntfsd
  tells systemd READY=1 once it listens and STOPPING=1 on SIGTERM."""
import grp
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import time

import pytest

from conftest import BUILD, find_bin
from ctl_fixtures import Daemon, stop_and_check

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PROGRAMS = ["ntfsd", "ntfs-ctl", "ntfs-agent", "ntfs-run", "ntfs-mcp"]
OPTION = re.compile(r"(?<![\w/.$-])(--?[a-zA-Z][a-zA-Z0-9-]*)")


def run(argv, **kw):
    kw.setdefault("timeout", 120)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def help_of(*argv):
    r = run(list(argv), env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, f"{argv}: {r.stderr}"
    return r.stdout


def roff_text(path):
    """The page's words with roff's escapes and font changes taken out."""
    with open(path) as f:
        t = f.read()
    for a, b in (("\\-", "-"), ("\\fB", ""), ("\\fR", ""), ("\\fI", ""), ("\\&", ""), ("\\e", "\\")):
        t = t.replace(a, b)
    return t


def commands_of(ctl_help):
    block = ctl_help.split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    return [re.match(r"^ +(.*?)\s{2,}", l).group(1) for l in block.splitlines()]


# ---- man pages -------------------------------------------------------------------

@pytest.mark.parametrize("prog", PROGRAMS)
def test_man_page_names_every_option_of_the_help(prog):
    exe = find_bin(prog)
    assert exe, f"{prog} is not built under {BUILD}"
    page = os.path.join(BUILD, "dist", prog + ".1")
    assert os.path.isfile(page), f"no man page {page}"
    r = run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page],
            env=dict(os.environ, LC_ALL="C.UTF-8", MANROFFSEQ="", MANWIDTH="80"))
    assert r.returncode == 0 and not r.stderr.strip(), f"groff on {page}: {r.stderr}"
    text = roff_text(page)
    assert f".TH {prog.upper()} 1" in text
    helptext = help_of(exe, "--help")
    missing = sorted({o for o in OPTION.findall(helptext) if o not in text})
    assert not missing, f"{page} lacks options its --help names: {missing}"
    if prog == "ntfs-ctl":
        cmds = commands_of(helptext)
        assert len(cmds) >= 30
        for c in cmds:
            head = f".SS {c}\n"
            assert head in text, f"{page} has no section for '{c}'"
            sec = text.split(head, 1)[1].split("\n.SS ", 1)[0]
            sub = help_of(exe, "help", *c.split())
            gone = sorted({o for o in OPTION.findall(sub) if o not in sec})
            assert not gone, f"{page}, '{c}': options of 'ntfs-ctl help {c}' missing: {gone}"


# ---- meson install and the units -------------------------------------------------------

def build_option(name):
    r = run(["meson", "introspect", "--buildoptions", BUILD])
    assert r.returncode == 0, r.stderr
    return next(o["value"] for o in json.loads(r.stdout) if o["name"] == name)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    dest = str(tmp_path_factory.mktemp("destdir"))
    r = run(["meson", "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"], timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    prefix = build_option("prefix")
    yield dest, dest + prefix
    shutil.rmtree(dest, ignore_errors=True)


def test_meson_install_lays_out_programs_helpers_pages_completion_and_units(installed):
    dest, pre = installed
    libexec = build_option("libexecdir")
    for p in PROGRAMS:
        assert os.access(f"{pre}/bin/{p}", os.X_OK), f"bin/{p} not installed"
        assert os.path.isfile(f"{pre}/share/man/man1/{p}.1"), f"man1/{p}.1 not installed"
    for h in ("ntfs-jail", "ntfs-fuse"):
        assert os.access(f"{pre}/{libexec}/ntfs/{h}", os.X_OK), f"{libexec}/ntfs/{h} not installed"
        assert not os.path.exists(f"{pre}/bin/{h}"), f"{h} is ntfsd's helper, not a command"
    assert os.path.isfile(f"{pre}/share/bash-completion/completions/ntfs-ctl")
    assert os.path.isfile(f"{pre}/share/zsh/site-functions/_ntfs-ctl")
    unit = open(f"{pre}/lib/systemd/system/ntfsd.service").read()
    assert re.search(r"^ExecStart=%s/bin/ntfsd .*--socket %%t/ntfs/ntfsd\.sock --socket-group ntfs$"
                     % re.escape(pre[len(dest):]), unit, re.M), unit
    assert "StateDirectory=ntfs" in unit and "RuntimeDirectory=ntfs" in unit
    assert os.path.isfile(f"{pre}/lib/systemd/user/ntfsd.service")
    assert "g ntfs -" in open(f"{pre}/lib/sysusers.d/ntfs.conf").read()


def verify(unit, dest, prefix):
    """systemd-analyze verify of unit with its programs looked up under
    dest (the units name PREFIX/bin/ntfsd, which is installed there); the
    rest of the unit is checked as it is."""
    with open(unit) as f:
        text = f.read()
    copy = os.path.join(dest, "verify", os.path.basename(unit))
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    with open(copy, "w") as f:
        f.write(text.replace(f"ExecStart={prefix}/", f"ExecStart={dest}{prefix}/"))
    return run(["systemd-analyze", "verify", "--man=no", "--generators=no", copy])


def test_systemd_analyze_verifies_both_units(installed):
    dest, pre = installed
    prefix = pre[len(dest):]
    for unit in (f"{pre}/lib/systemd/system/ntfsd.service", f"{pre}/lib/systemd/user/ntfsd.service"):
        r = verify(unit, dest, prefix)
        assert r.returncode == 0 and not r.stderr.strip(), f"{unit}:\n{r.stderr}"
    # the check sees a broken unit: a misspelt directive, a missing program
    bad = os.path.join(dest, "bad", "ntfsd.service")
    os.makedirs(os.path.dirname(bad), exist_ok=True)
    text = open(f"{pre}/lib/systemd/system/ntfsd.service").read()
    with open(bad, "w") as f:
        f.write(text.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes"))
    r = verify(bad, dest, prefix)
    assert "Unknown key" in r.stderr and "NoNewPrivilege" in r.stderr, r.stderr
    with open(bad, "w") as f:
        f.write(text.replace("/bin/ntfsd ", "/bin/ntfsd-gone "))
    assert verify(bad, dest, prefix).returncode != 0


# ---- completion ------------------------------------------------------------------------

@pytest.fixture
def two_daemons(scratch):
    os.makedirs(os.path.join(scratch, "b"))
    a = Daemon(scratch)
    try:
        b = Daemon(os.path.join(scratch, "b"))
    except Exception:
        stop_and_check(a, scratch)
        raise
    try:
        yield a, b
    finally:
        stop_and_check(b, os.path.join(scratch, "b"))
        stop_and_check(a, scratch)


def bash_complete(words, env):
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _ntfs_ctl; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    r = run(["bash", "--norc", "--noprofile", "-c", script, "bash",
             os.path.join(ROOT, "dist", "completion", "ntfs-ctl.bash"), *words], env=env)
    assert r.returncode == 0, r.stderr
    return [l for l in r.stdout.splitlines() if l]


def comp_env(d, sock=None):
    e = dict(os.environ, PATH=os.path.dirname(d.ctl_bin) + ":" + os.environ["PATH"],
             ASAN_OPTIONS="detect_leaks=0")
    e.pop("NTFS_SOCKET", None)
    if sock:
        e["NTFS_SOCKET"] = sock
    return e


def test_bash_completion_offers_a_live_daemons_sessions(two_daemons):
    a, b = two_daemons
    a.ok("session", "new", "alpha-1")
    a.ok("session", "new", "beta")
    b.ok("session", "new", "other")
    env = comp_env(a, a.sock)
    assert sorted(bash_complete(["ntfs-ctl", "session", "show", ""], env)) == ["alpha-1", "beta"]
    assert bash_complete(["ntfs-ctl", "log", "al"], env) == ["alpha-1"]
    assert bash_complete(["ntfs-ctl", "mount", "beta", "--autocheckpoint-"], env) == ["--autocheckpoint-max"]
    # --socket on the line wins over $NTFS_SOCKET
    assert bash_complete(["ntfs-ctl", "--socket", b.sock, "checkpoint", ""], env) == ["other"]
    # a session made a moment ago is offered: nothing is cached
    a.ok("session", "new", "gamma")
    assert "gamma" in bash_complete(["ntfs-ctl", "exec", ""], env)
    # commands and groups come from --help
    firsts = {c.split()[0] for c in commands_of(help_of(a.ctl_bin, "--help"))}
    assert set(bash_complete(["ntfs-ctl", ""], env)) == firsts | {"help"}
    assert bash_complete(["ntfs-ctl", "trunk", "c"], env) == ["commit"]
    # a new session's name is not completed, a mount point is a directory
    assert bash_complete(["ntfs-ctl", "session", "new", ""], env) == []
    dirs = bash_complete(["ntfs-ctl", "mount", "beta", a.scratch + "/"], env)
    assert a.scratch + "/b" in dirs and a.scratch + "/ntfsd.log" not in dirs, dirs


def test_zsh_completion_offers_a_live_daemons_sessions(two_daemons):
    a, b = two_daemons
    a.ok("session", "new", "alpha-1")
    b.ok("session", "new", "other")
    # compsys's builtins and helpers stand in as printers: what the function
    # would offer is what it hands them
    script = r'''
compadd() { print -r -- "compadd ${(j: :)@}"; }
_describe() { local -a arr; arr=("${(@P)4}"); print -r -- "describe ${(j:,:)arr}"; }
_files() { print -r -- "files $*"; }
source "$1"; shift
words=("$@"); CURRENT=$#; PREFIX=${words[CURRENT]}; _ntfs-ctl
'''
    def z(*words, env):
        r = run(["zsh", "-f", "-c", script, "zsh", os.path.join(ROOT, "dist", "completion", "_ntfs-ctl"),
                 *words], env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()[-1]
    env = comp_env(a, a.sock)
    # compinit finds it in fpath and binds it to ntfs-ctl (#compdef)
    r = run(["zsh", "-f", "-c", 'fpath=("$1" $fpath); autoload -Uz compinit; compinit -u -D; '
             'print -r -- "${_comps[ntfs-ctl]}"', "zsh", os.path.join(ROOT, "dist", "completion")])
    assert r.stdout.strip() == "_ntfs-ctl", r.stdout + r.stderr
    assert z("ntfs-ctl", "session", "show", "", env=env) == "compadd -- alpha-1"
    assert z("ntfs-ctl", "--socket", b.sock, "log", "", env=env) == "compadd -- other"
    assert z("ntfs-ctl", "mount", "alpha-1", "", env=env) == "files -/"
    top = z("ntfs-ctl", "", env=env)
    assert top.startswith("describe ") and "session:session commands" in top and "checkpoint:record" in top


# ---- the socket's group and systemd's notification --------------------------------

def test_socket_group_makes_the_socket_0660_and_that_groups(scratch):
    gid = next((g.gr_gid for g in grp.getgrall() if g.gr_gid != os.getgid()), 4242)
    d = Daemon(scratch, extra=("--socket-group", str(gid)))
    try:
        st = os.stat(d.sock)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid, (oct(st.st_mode), st.st_gid)
        d.ok("status")
    finally:
        stop_and_check(d, scratch)
    os.makedirs(os.path.join(scratch, "plain"))
    d = Daemon(os.path.join(scratch, "plain"))
    try:
        assert stat.S_IMODE(os.stat(d.sock).st_mode) == 0o600
    finally:
        stop_and_check(d, os.path.join(scratch, "plain"))
    r = run([find_bin("ntfsd"), "--store", os.path.join(scratch, "x"), "--socket-group", "no-such-group-ntfs"])
    assert r.returncode == 2 and "no group 'no-such-group-ntfs'" in r.stderr
    assert not os.path.exists(os.path.join(scratch, "x", "ntfsd.sock"))


def test_ntfsd_tells_systemd_ready_once_it_listens(scratch):
    path = os.path.join(scratch, "notify")
    ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    ns.bind(path)
    ns.settimeout(60)
    sock = os.path.join(scratch, "s")
    log = open(os.path.join(scratch, "ntfsd.log"), "ab")
    p = subprocess.Popen([find_bin("ntfsd"), "--store", os.path.join(scratch, "store"), "--socket", sock],
                         env=dict(os.environ, NOTIFY_SOCKET=path), stdout=log, stderr=log,
                         start_new_session=True)
    try:
        assert ns.recv(256) == b"READY=1"
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(sock)  # listening by then
        c.close()
        p.terminate()
        assert ns.recv(256) == b"STOPPING=1"
        assert p.wait(timeout=60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        ns.close()
        log.close()
