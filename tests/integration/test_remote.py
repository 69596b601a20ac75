# SPDX-License-Identifier: MIT
"""Remotes on S3 (docs/remote.md) against a real single-node Ceph RADOS Gateway
started once for this module (tests/helpers/ceph/start.sh, memstore), stopped
in teardown. Two ntfsd daemons with separate stores stand for two machines.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading

import pytest

from conftest import lazy_unmount, mounts_under
from ctl_fixtures import Daemon

HERE = os.path.dirname(os.path.abspath(__file__))
CEPH = os.path.join(HERE, "..", "helpers", "ceph")
RGW_PORT = int(os.environ.get("NTFS_TEST_RGW_PORT", "27480"))
MON_PORT = int(os.environ.get("NTFS_TEST_MON_PORT", "23300"))


@pytest.fixture(scope="module")
def s3():
    for b in ("ceph-mon", "ceph-osd", "radosgw"):
        if shutil.which(b) is None:
            pytest.skip(f"{b} is not installed (scripts/setup.sh installs ceph-mon ceph-osd radosgw)")
    d = tempfile.mkdtemp(prefix="ntfs-ceph-", dir="/tmp")
    env = dict(os.environ, RGW_PORT=str(RGW_PORT), MON_PORT=str(MON_PORT))
    try:
        p = subprocess.run([os.path.join(CEPH, "start.sh"), d], env=env, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, f"ceph did not start:\n{p.stdout}\n{p.stderr}"
        vals = {}
        with open(os.path.join(d, "env")) as f:
            for line in f:
                k, _, v = line.replace("export ", "").strip().partition("=")
                vals[k] = v
        vals["DIR"] = d
        yield vals
    finally:
        subprocess.run([os.path.join(CEPH, "stop.sh"), d], env=dict(env, FAST="1"), timeout=120)
        shutil.rmtree(d, ignore_errors=True)


class Machine:
    """One ntfsd with its own store, a remote 'origin' and a mount of 'main'."""

    def __init__(self, s3, bucket, secret=None):
        self.scratch = tempfile.mkdtemp(prefix="ntfs-remote-", dir="/tmp")
        os.chmod(self.scratch, 0o755)
        self.d = Daemon(self.scratch)
        # the CLI, with the secret in the environment (not on the command line)
        self.d.ok("remote", "add", "origin", f"{s3['S3_ENDPOINT']}/{bucket}", "--access-key", s3["S3_ACCESS_KEY"],
                  "--region", s3["S3_REGION"], env={"NTFS_S3_SECRET_KEY": secret or s3["S3_SECRET_KEY"]})
        self.mp = os.path.join(self.scratch, "ws")
        os.mkdir(self.mp)

    def mount(self, session="main"):
        self.d.ok("mount", session, self.mp)

    def write(self, rel, data):
        p = os.path.join(self.mp, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)

    def read(self, rel):
        with open(os.path.join(self.mp, rel), "rb") as f:
            return f.read()

    def tree_digest(self):
        h = hashlib.sha256()
        for root, dirs, files in os.walk(self.mp):
            dirs.sort()
            for n in sorted(files):
                p = os.path.join(root, n)
                with open(p, "rb") as f:
                    h.update(os.path.relpath(p, self.mp).encode() + b"\0" + hashlib.sha256(f.read()).digest())
        return h.hexdigest()

    def head(self, session="main"):
        r = self.d.http("GET", f"/v1/sessions/{session}")
        assert r.status == 200, r
        return r.json["head"]

    def push(self, session="main"):
        return self.d.http("POST", f"/v1/sessions/{session}/push", {"remote": "origin"}, timeout=120)

    def pull(self, session="main", merge=False):
        return self.d.http("POST", f"/v1/sessions/{session}/pull", {"remote": "origin", "merge": merge},
                           timeout=120)

    def close(self):
        try:
            self.d.stop()
            errs = self.d.sanitizer_errors()
            assert not errs, "sanitizer reports in ntfsd's log:\n" + "\n".join(errs)
        finally:
            lazy_unmount(self.scratch)
            if not mounts_under(self.scratch):
                shutil.rmtree(self.scratch, ignore_errors=True)


@pytest.fixture
def machines(s3, request):
    made = []

    def make(bucket, secret=None):
        m = Machine(s3, bucket, secret)
        made.append(m)
        return m
    yield make
    for m in made:
        m.close()


def s3_secret_absent(text):
    return "testsecret" not in text


def test_push_clone_change_push_pull(machines):
    a = machines("rt-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    a.write("README", b"hello\n")
    a.write("src/big.bin", os.urandom(300 * 1024))  # several chunks
    for i in range(50):
        a.write(f"many/f{i}", f"file {i}\n".encode())
    r = a.push()
    assert r.status == 200, r
    t = r.json["transfer"]
    assert t["objects"] > 50 and t["packs"] == 1, t  # packed: one pack for ~60 objects
    assert t["requests"] < 12, t

    # the remote never returns the secret
    ls = a.d.http("GET", "/v1/remotes")
    assert ls.status == 200 and a.d.http("GET", "/v1/remotes").body.find(b"testsecret") < 0
    assert ls.json["remotes"][0]["credentials"] is True

    assert "origin" in a.d.ok("remote", "ls") and s3_secret_absent(a.d.ok("remote", "ls"))

    b = machines("rt-bucket")
    j = b.d.jok("clone", "origin/main", "main")
    assert j["head"] == a.head()
    b.mount()
    assert b.tree_digest() == a.tree_digest()
    b.write("README", b"hello from b\n")
    b.write("new.txt", b"new\n")
    r = b.push()
    assert r.status == 200, r

    # a second push of nothing new: up to date, a request or two
    r2 = b.push()
    assert r2.status == 200 and r2.json["up_to_date"] is True, r2

    out = a.d.ok("pull", "main", "origin")
    assert "fast_forward" in out, out
    assert a.head() == b.head()
    assert a.read("README") == b"hello from b\n"
    assert a.tree_digest() == b.tree_digest()
    a.d.fsck_clean()
    b.d.fsck_clean()


def test_concurrent_pushes_one_wins_loser_pulls(machines):
    a = machines("race-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    a.write("base.txt", b"base\n")
    assert a.push().status == 200
    b = machines("race-bucket")
    assert b.d.http("POST", "/v1/clone", {"remote": "origin", "session": "main", "name": "main"}).status == 201
    b.mount()
    a.write("a.txt", b"from a\n")
    b.write("b.txt", b"from b\n")
    a.d.ok("checkpoint", "main", "-m", "a")
    b.d.ok("checkpoint", "main", "-m", "b")
    res = {}

    def go(name, m):
        res[name] = m.push()
    ts = [threading.Thread(target=go, args=(n, m)) for n, m in (("a", a), ("b", b))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    statuses = sorted(r.status for r in res.values())
    assert statuses == [200, 409], res
    loser = a if res["a"].status == 409 else b
    winner = b if loser is a else a
    assert "pull" in res["a" if loser is a else "b"].json["error"]["message"]
    r = loser.pull()
    assert r.status == 409, r  # diverged: needs --merge
    r = loser.pull(merge=True)
    assert r.status == 200 and r.json["result"] == "merged", r
    r = loser.push()
    assert r.status == 200, r
    r = winner.pull()
    assert r.status == 200 and r.json["result"] == "fast_forward", r
    assert winner.head() == loser.head()
    for m in (a, b):
        assert m.read("a.txt") == b"from a\n" and m.read("b.txt") == b"from b\n"
    assert a.tree_digest() == b.tree_digest()


def test_wrong_secret_is_an_authentication_error(machines):
    m = machines("auth-bucket", secret="not-the-right-secret-000000000000000000")
    m.d.ok("session", "new", "main")
    r = m.push()
    assert r.status != 200, r
    assert "authentication failed" in r.json["error"]["message"], r
    assert "not-the-right-secret" not in r.body.decode(errors="replace")


def test_corrupt_object_in_bucket_is_named_and_nothing_applied(machines, s3):
    a = machines("corrupt-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    a.write("data.txt", b"precious\n" * 100)
    assert a.push().status == 200
    # flip one byte near the end of the pack (inside the last object) with curl's SigV4
    url = f"{s3['S3_ENDPOINT']}/corrupt-bucket"
    auth = ["--aws-sigv4", f"aws:amz:{s3['S3_REGION']}:s3", "--user", f"{s3['S3_ACCESS_KEY']}:{s3['S3_SECRET_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    ls = subprocess.run(["curl", "-sf", *auth, f"{url}?list-type=2&prefix=packs%2F"], capture_output=True, text=True)
    assert ls.returncode == 0, ls.stderr
    key = ls.stdout.split("<Key>")[1].split("</Key>")[0]
    pack = subprocess.run(["curl", "-sf", *auth, f"{url}/{key}"], capture_output=True).stdout
    bad = bytearray(pack)
    bad[-3] ^= 0xFF
    p = os.path.join(a.scratch, "bad.pack")
    with open(p, "wb") as f:
        f.write(bytes(bad))
    up = subprocess.run(["curl", "-sf", *auth, "-T", p, f"{url}/{key}"], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr

    b = machines("corrupt-bucket")
    r = b.d.http("POST", "/v1/clone", {"remote": "origin", "session": "main", "name": "main"})
    assert r.status != 201, r
    msg = r.json["error"]["message"]
    assert "corrupt" in msg and "object " in msg, msg
    # the message names the object by its full hash
    assert any(len(w) == 64 and all(c in "0123456789abcdef" for c in w) for w in msg.split()), msg
    assert b.d.http("GET", "/v1/sessions/main").status == 404
    b.d.fsck_clean()


def _rgw_pid(s3):
    with open(os.path.join(s3["DIR"], "run", "client.rgw.a.pid")) as f:
        return int(f.read().strip())


def _rgw_restart(s3):
    conf = os.path.join(s3["DIR"], "ceph.conf")
    subprocess.run(["radosgw", "-c", conf, "-n", "client.rgw.a"], check=True, timeout=60)
    import time
    import urllib.request
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(s3["S3_ENDPOINT"] + "/", timeout=2)
            return
        except Exception as e:  # 403 etc. still means it answers
            if getattr(e, "code", None):
                return
            time.sleep(0.1)
    raise AssertionError("radosgw did not come back")


def test_interrupted_push_resumes_and_gateway_down_is_clean(machines, s3):
    a = machines("fault-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    for i in range(3):  # ~3 packs of 8 MiB
        a.write(f"blob{i}", os.urandom(8 * 1024 * 1024))
    a.d.ok("checkpoint", "main")

    # the gateway is down: a clear upstream error, nothing at the remote
    import signal
    os.kill(_rgw_pid(s3), signal.SIGKILL)
    try:
        r = a.push()
        assert r.status != 200 and "origin" in r.json["error"]["message"], r
    finally:
        _rgw_restart(s3)

    # the pusher dies after its 1st pack is stored: no head at the remote
    a.d.ok("umount", a.mp)
    a.d.stop()
    env_old = os.environ.get("NTFS_FAULT")
    os.environ["NTFS_FAULT"] = "remote.pack:1:crash"
    try:
        a.d = Daemon(a.scratch)
    finally:
        if env_old is None:
            del os.environ["NTFS_FAULT"]
        else:
            os.environ["NTFS_FAULT"] = env_old
    try:
        a.push()
    except OSError:
        pass  # the daemon died mid-request
    a.d.proc.wait(timeout=30)
    b = machines("fault-bucket")
    r = b.d.http("POST", "/v1/clone", {"remote": "origin", "session": "main", "name": "main"})
    assert r.status == 404 and r.json["error"]["code"] == "ref_not_found", r

    # restarted (the remote's config survived), the push resumes: stored packs are not sent again
    a.d.stop()
    a.d = Daemon(a.scratch)
    r = a.push()
    assert r.status == 200, r
    assert r.json["transfer"]["bytes_sent"] < 24 * 1024 * 1024 - 7 * 1024 * 1024, r.json
    r = b.d.http("POST", "/v1/clone", {"remote": "origin", "session": "main", "name": "main"}, timeout=120)
    assert r.status == 201 and r.json["head"] == a.head(), r
    b.d.fsck_clean()


# ---- tags (push --tags; pull and clone bring them) ------------------------------------------

def _tags(m, session=None):
    r = m.d.http("GET", "/v1/tags" + (f"?session={session}" if session else ""))
    assert r.status == 200, r
    return {t["tag"]: (t["commit"], t["scope"]) for t in r.json["tags"]}


def _tag(m, session, tag, at=None, scope=None):
    body = {"tag": tag}
    if at:
        body["at"] = at
    if scope:
        body["scope"] = scope
    r = m.d.http("POST", f"/v1/sessions/{session}/tags", body)
    assert r.status == 201, r
    return r.json["commit"]


def test_push_tags_clone_pull_and_conflicts(machines):
    a = machines("tags-bucket")
    a.d.ok("session", "new", "main")
    a.d.ok("session", "new", "other")
    a.mount()
    a.write("v.txt", b"one\n")
    a.d.ok("checkpoint", "main", "-m", "one")
    c1 = _tag(a, "main", "v1")
    _tag(a, "main", "rel1", scope="store")            # store tag in main's history: pushed
    _tag(a, "other", "elsewhere")                     # another session's tag: not pushed
    a.write("v.txt", b"two, abandoned\n")
    a.write("only-in-old.bin", os.urandom(100 * 1024))
    a.d.ok("checkpoint", "main", "-m", "two")
    c2 = _tag(a, "main", "old")                       # session tag off the history after the rollback
    a.d.ok("rollback", "main", "--to", "v1")
    a.write("v.txt", b"three\n")
    a.d.ok("checkpoint", "main", "-m", "three")

    # without --tags no tag goes
    r = a.push()
    assert r.status == 200 and "tags" not in r.json, r
    assert a.d.jok("remote", "tags", "origin", "main")["tags"] == []

    out = a.d.ok("push", "main", "origin", "--tags")
    assert "up to date" in out and "tags at the remote: old rel1 v1" in out, out
    listed = {t["name"]: (t["commit"], t["scope"]) for t in a.d.jok("remote", "tags", "origin", "main")["tags"]}
    assert listed == {"v1": (c1, "session"), "rel1": (c1, "store"), "old": (c2, "session")}, listed
    assert "elsewhere" not in a.d.ok("remote", "tags", "origin", "main")

    # idempotent: the same tags again are fine and send nothing
    r = a.d.http("POST", "/v1/sessions/main/push", {"remote": "origin", "tags": True})
    assert r.status == 200 and r.json["up_to_date"] is True and r.json["transfer"]["bytes_sent"] == 0, r

    # clone brings the tags and the objects they reach (the abandoned commit too)
    b = machines("tags-bucket")
    j = b.d.jok("clone", "origin/main", "work")
    assert sorted(t["name"] for t in j["tags"]) == ["old", "rel1", "v1"], j
    bt = _tags(b)
    assert bt["v1"] == (c1, "session") and bt["rel1"] == (c1, "store") and bt["old"] == (c2, "session"), bt
    assert _tags(b, "work")["old"][0] == c2
    ro = os.path.join(b.scratch, "old-view")
    os.mkdir(ro)
    b.d.ok("mount", "work", ro, "--ro", "--at", "old")
    try:
        with open(os.path.join(ro, "v.txt"), "rb") as f:
            assert f.read() == b"two, abandoned\n"
        assert os.path.getsize(os.path.join(ro, "only-in-old.bin")) == 100 * 1024
    finally:
        b.d.ok("umount", ro)
    b.d.fsck_clean()

    # a tag on another commit at the remote: push --tags refuses it before uploading, naming it,
    # and the head does not move
    c = machines("tags-bucket")
    c.d.ok("clone", "origin/main", "main")
    _tag(c, "main", "v3", at=c1)                       # only a tag: the head stays
    assert c.d.http("POST", "/v1/sessions/main/push", {"remote": "origin", "tags": True}).status == 200
    remote_head = c.head()
    assert a.head() == remote_head
    a.write("a.txt", b"from a\n")
    a.d.ok("checkpoint", "main", "-m", "a")
    _tag(a, "main", "v3")                              # a's v3: its new head, not c1
    r = a.d.http("POST", "/v1/sessions/main/push", {"remote": "origin", "tags": True})
    assert r.status == 409 and r.json["error"]["code"] == "tag_exists", r
    assert "'v3'" in r.json["error"]["message"], r
    assert c.pull().json["result"] == "up_to_date"     # the remote head did not move
    cli = a.d.ctl("push", "main", "origin", "--tags")
    assert cli.returncode == 1 and "v3" in cli.stderr, cli

    # pull into a: the remote's v3 differs from a's -> tag_exists naming it; nothing changes in a
    c.mount()
    c.write("c.txt", b"from c\n")
    assert c.push().status == 200
    a_head = a.head()
    r = a.pull(merge=True)
    assert r.status == 409 and r.json["error"]["code"] == "tag_exists", r
    assert "'v3'" in r.json["error"]["message"], r
    assert a.head() == a_head and not os.path.exists(os.path.join(a.mp, "c.txt"))
    assert _tags(a)["v3"][0] == a_head


# ---- the progress bar (stderr on a terminal only) -------------------------------------------

def _ctl_pty(m, *args):
    """Runs ntfs-ctl with stderr on a pseudo-terminal; returns (rc, stdout, what the terminal got)."""
    import pty
    master, slave = pty.openpty()
    try:
        p = subprocess.Popen([m.d.ctl_bin, "--socket", m.d.sock, *args], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=slave, start_new_session=True)
    finally:
        os.close(slave)
    got = bytearray()
    out = []
    t = threading.Thread(target=lambda: out.append(p.stdout.read()))
    t.start()
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            got += chunk
        rc = p.wait(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
        os.close(master)
        t.join()
    return rc, out[0].decode(), got.decode(errors="replace")


def test_progress_bar_on_a_terminal_only(machines):
    a = machines("progress-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    # 160 MiB: several packs, and a push and a clone that last well past the
    # bar's first poll (0.25 s) even on a fast machine (48 MiB took < 0.25 s)
    for i in range(20):
        a.write(f"blob{i}", os.urandom(8 * 1024 * 1024))
    a.d.ok("checkpoint", "main")

    rc, out, term = _ctl_pty(a, "push", "main", "origin")
    assert rc == 0, (out, term)
    assert "pushed main to origin" in out and "pushing" not in out
    # the bar: bytes done of total, objects and packs done of total, rate, ETA
    assert "pushing [" in term and "%" in term and "/s" in term and "ETA" in term, term
    assert " objects" in term and " packs" in term and "MiB/" in term, term
    assert term.endswith("\r\033[K"), repr(term[-40:])  # erased at the end

    b = machines("progress-bucket")
    rc, out, term = _ctl_pty(b, "clone", "origin/main", "main")
    assert rc == 0 and "cloned origin/main to main" in out, (out, term)
    assert "cloning [" in term and "ETA" in term, term

    # not a terminal, --quiet or --json: no bar at all
    a.write("blob0", os.urandom(8 * 1024 * 1024))
    a.d.ok("checkpoint", "main")
    r = a.d.ctl("push", "main", "origin")
    assert r.returncode == 0 and r.stderr == "", r
    assert "pushing" not in r.stdout and "\r" not in r.stdout
    a.write("blob1", os.urandom(8 * 1024 * 1024))
    rc, out, term = _ctl_pty(a, "push", "main", "origin", "--quiet")
    assert rc == 0 and term == "", term
    rc, out, term = _ctl_pty(b, "--json", "pull", "main", "origin")
    assert rc == 0 and term == "" and json.loads(out)["result"] == "fast_forward", (out, term)


# ---- remote prune: packs no index names -----------------------------------------------------

def test_prune_deletes_only_old_unindexed_packs(machines, s3):
    a = machines("prune-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    a.write("keep.txt", b"indexed\n" * 1000)
    assert a.push().status == 200
    url = f"{s3['S3_ENDPOINT']}/prune-bucket"
    auth = ["--aws-sigv4", f"aws:amz:{s3['S3_REGION']}:s3", "--user", f"{s3['S3_ACCESS_KEY']}:{s3['S3_SECRET_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]

    def packs():
        ls = subprocess.run(["curl", "-sf", *auth, f"{url}?list-type=2&prefix=packs%2F"], capture_output=True,
                            text=True)
        assert ls.returncode == 0, ls.stderr
        return sorted(k.split("</Key>")[0] for k in ls.stdout.split("<Key>")[1:])
    indexed = packs()
    assert len(indexed) == 1, indexed
    # what a push that died before its index leaves: a pack no index names
    stray = b"NTFSPAK1" + os.urandom(100)
    key = f"packs/{hashlib.sha256(stray).hexdigest()}.pack"
    p = os.path.join(a.scratch, "stray.pack")
    with open(p, "wb") as f:
        f.write(stray)
    assert subprocess.run(["curl", "-sf", *auth, "-T", p, f"{url}/{key}"]).returncode == 0
    assert packs() == sorted(indexed + [key])

    out = a.d.ok("remote", "prune", "origin", "-n", "--grace", "0")
    assert "would delete 1 unindexed packs" in out, out
    assert packs() == sorted(indexed + [key])
    j = a.d.jok("remote", "prune", "origin")  # default grace 1 h: the stray is too young
    assert j["deleted"] == 0 and j["young"] == 1, j
    j = a.d.jok("remote", "prune", "origin", "--grace", "0")
    assert j["deleted"] == 1 and j["young"] == 0, j
    assert packs() == indexed
    b = machines("prune-bucket")
    assert b.d.jok("clone", "origin/main", "main")["head"] == a.head()
    assert a.d.ctl("remote", "prune", "nosuch").returncode == 1


def test_acls_travel_with_push_clone_and_pull(machines):
    """POSIX ACLs are xattrs of the tree (docs/mount.md): a clone shows and
    enforces them, and a pull brings a changed one."""
    def getfacl(m, rel):
        r = subprocess.run(["getfacl", "-c", "-n", "-p", os.path.join(m.mp, rel)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    def setfacl(m, *args):
        r = subprocess.run(["setfacl", *args[:-1], os.path.join(m.mp, args[-1])], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr

    def nobody_reads(m, rel):
        return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "cat",
                               os.path.join(m.mp, rel)], capture_output=True).returncode == 0

    a = machines("acl-bucket")
    a.d.ok("session", "new", "main")
    a.mount()
    os.chmod(a.mp, 0o755)
    a.write("f", b"secret\n")
    os.chmod(os.path.join(a.mp, "f"), 0o600)
    setfacl(a, "-m", "u:65534:r", "f")
    os.mkdir(os.path.join(a.mp, "d"), 0o755)
    setfacl(a, "-d", "-m", "u:65534:rwx", "d")
    want = {n: getfacl(a, n) for n in ("f", "d")}
    assert a.push().status == 200
    b = machines("acl-bucket")
    b.d.ok("clone", "origin/main", "main")
    b.mount()
    os.chmod(b.mp, 0o755)
    assert {n: getfacl(b, n) for n in ("f", "d")} == want
    assert nobody_reads(b, "f")
    # a changed ACL comes with a pull
    setfacl(a, "-b", "f")
    assert a.push().status == 200
    b.d.ok("pull", "main", "origin")
    assert getfacl(b, "f") == getfacl(a, "f") and not nobody_reads(b, "f")
