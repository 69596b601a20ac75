# SPDX-License-Identifier: MIT
"""One path on both sides (issue 61, item 5; docs/jail.md, "One path"): in the
jail the session's mount is at its host path and /workspace is a symlink to
it, so what a program writes with absolute paths on one side works on the
other: a venv made on the host runs in the jail and one made in the jail runs
on the host; a meson build directory configured on the host is tested in the
jail. The shell's cwd, pwd and the saved state stay under /workspace."""
import os
import subprocess
import textwrap

import pytest

from ctl_fixtures import daemon  # noqa: F401

PY = "/usr/bin/python3"


@pytest.fixture
def mounted(daemon, scratch):
    daemon.ok("session", "new", "op")
    mp = os.path.join(scratch, "work")
    os.mkdir(mp)
    daemon.ok("mount", "op", mp)
    try:
        yield daemon, os.path.realpath(mp)
    finally:
        daemon.ok("umount", mp)


def jexec(d, cmd, tool="bash_write"):
    j = d.jok("exec", "op", "--tool", tool, "--", cmd)
    assert j["exit_code"] == 0, j
    return j["stdout"]


def test_the_jail_sees_the_workspace_at_its_host_path(mounted):
    d, mp = mounted
    out = jexec(d, "pwd; pwd -P; readlink /workspace; grep -c ' /workspace ' /proc/self/mountinfo || true")
    assert out.splitlines() == ["/workspace", mp, mp, "0"]
    jexec(d, "mkdir -p a/b && cd a/b")
    out = jexec(d, f"pwd; {PY} -c 'import os; print(os.getcwd())'")
    assert out.splitlines() == ["/workspace/a/b", f"{mp}/a/b"]  # the cd stuck; getcwd is the host path
    # bash_read: the same mount, read-only
    r = d.ctl("exec", "op", "--tool", "bash_read", "--", "touch x")
    assert r.returncode != 0 and "Read-only file system" in r.stderr


def test_a_venv_made_on_either_side_runs_on_the_other(mounted):
    d, mp = mounted
    subprocess.run([PY, "-m", "venv", os.path.join(mp, "hostvenv")], check=True, timeout=300)
    with open(os.path.join(mp, "hostvenv", "bin", "pip")) as f:
        assert f.readline() == f"#!{mp}/hostvenv/bin/python3\n"
    out = jexec(d, "hostvenv/bin/pip --version && hostvenv/bin/python -c 'import sys; print(sys.prefix)'")
    assert out.startswith("pip ") and out.splitlines()[-1] == f"{mp}/hostvenv"
    jexec(d, f"cd /workspace && {PY} -m venv jailvenv")
    r = subprocess.run([os.path.join(mp, "jailvenv", "bin", "pip"), "--version"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("pip "), r.stderr
    r = subprocess.run([os.path.join(mp, "jailvenv", "bin", "python"), "-c", "import sys; print(sys.prefix)"],
                       capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == f"{mp}/jailvenv"


def test_a_meson_build_configured_on_the_host_is_tested_in_the_jail(mounted):
    d, mp = mounted
    proj = os.path.join(mp, "proj")
    os.mkdir(proj)
    with open(os.path.join(proj, "meson.build"), "w") as f:
        f.write(textwrap.dedent("""\
            project('p', 'c')
            t = executable('t', 't.c')
            test('t', t)
            """))
    with open(os.path.join(proj, "t.c"), "w") as f:
        f.write("int main(void) { return 0; }\n")
    subprocess.run(["meson", "setup", "build"], cwd=proj, check=True, capture_output=True, timeout=300)
    subprocess.run(["ninja", "-C", "build"], cwd=proj, check=True, capture_output=True, timeout=300)
    out = jexec(d, "cd proj && meson test -C build 2>&1", tool="bash_build")
    assert "Ok:                 1" in out, out
