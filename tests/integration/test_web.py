# SPDX-License-Identifier: MIT
"""`ntfs-ctl web` (issue 66, item 1; docs/web.md): a web view of one store
on 127.0.0.1, behind a random token, answering from ntfsd over the control
socket. The browser test drives headless chromium (Debian's `chromium`,
`puppeteer-core` pinned by scripts/setup.sh): it opens the printed URL,
sees the sessions, clicks through the history, opens a checkpoint's files
and a diff, watches a checkpoint made by this test appear, tags with the
button and is refused without the token. Screenshots are kept under the
test's pytest tmp_path (pytest keeps the last runs' directories)."""
import json
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.request
import urllib.error
import zlib

import pytest

from ctl_fixtures import Daemon, stop_and_check

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NODE_DIR = os.environ.get("NTFS_WEB_NODE", "/usr/local/lib/ntfs-web-test")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

def png(width, height):
    """A valid RGB PNG of width x height red pixels."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + b"\xff\0\0" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


PNG = png(120, 40)


class Web:
    """A running `ntfs-ctl web`: its URL, port and token."""

    def __init__(self, daemon, *args):
        self.proc = subprocess.Popen(
            [daemon.ctl_bin, "--socket", daemon.sock, "web", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        r, _, _ = select.select([self.proc.stdout], [], [], 30)
        assert r, "ntfs-ctl web printed no URL in 30 s"
        self.url = self.proc.stdout.readline().strip()
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{32})", self.url)
        assert m, f"unexpected URL line {self.url!r}; stderr: {self.proc.stderr.read() if self.proc.poll() is not None else ''}"
        self.port = int(m.group(1))
        self.token = m.group(2)
        self.origin = f"http://127.0.0.1:{self.port}"

    def get(self, path, headers=None, method="GET", data=None):
        req = urllib.request.Request(self.origin + path, headers=headers or {}, method=method, data=data)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def stop(self):
        """SIGTERM; the exit code (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        self.proc.stdout.close()
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return self.proc.returncode, err


@pytest.fixture
def daemon(scratch):
    d = Daemon(scratch)
    try:
        yield d
    finally:
        stop_and_check(d, scratch)


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


@pytest.fixture
def web(daemon):
    w = Web(daemon)
    try:
        yield w
    finally:
        rc, err = w.stop()
    # it stops cleanly on SIGTERM, with no sanitizer report (build-asan)
    assert rc == 0 and not any(m in err for m in SANITIZER_MARKS), f"ntfs-ctl web exited {rc}: {err[-3000:]}"


def cookie(w):
    return {"Cookie": f"ntfs_web_token={w.token}"}


def test_token_required_and_cookie_set(daemon, web):
    daemon.ok("session", "new", "main")
    # no token, a wrong one, a wrong cookie: 403 on pages and on the API
    for path in ("/", "/app.js", "/api/sessions", "/api/status", "/?token=" + "0" * 32, "/?token="):
        st, _, body = web.get(path)
        assert st == 403, (path, st, body)
    st, _, _ = web.get("/api/sessions", {"Cookie": "ntfs_web_token=" + "0" * 32})
    assert st == 403
    st, _, _ = web.get("/api/sessions", {"Cookie": "ntfs_web_token=" + web.token[:-1]})
    assert st == 403
    # the token in the query: the page, and a cookie for the rest
    st, hdrs, body = web.get("/?token=" + web.token)
    assert st == 200 and b"<title>ntfs</title>" in body
    assert f"ntfs_web_token={web.token}" in hdrs["Set-Cookie"]
    assert "HttpOnly" in hdrs["Set-Cookie"] and "SameSite=Strict" in hdrs["Set-Cookie"]
    assert "default-src 'none'" in hdrs["Content-Security-Policy"]
    st, _, body = web.get("/api/sessions", cookie(web))
    assert st == 200
    # the daemon's own answer, passed through
    assert [s["name"] for s in json.loads(body)["sessions"]] == \
        [s["name"] for s in daemon.jok("session", "ls")["sessions"]] == ["main"]
    # another site's name for 127.0.0.1 (DNS rebinding) is refused even with the token
    st, _, _ = web.get("/api/sessions", {**cookie(web), "Host": "evil.example:%d" % web.port})
    assert st == 403


def test_only_listed_routes_are_forwarded(daemon, web):
    daemon.ok("session", "new", "main")
    c = cookie(web)
    j = {**c, "Content-Type": "application/json"}
    # read-only GETs pass
    for path in ("/api/status", "/api/mounts", "/api/tags", "/api/sessions/main",
                 "/api/sessions/main/log", "/api/sessions/main/effects"):
        st, _, body = web.get(path, c)
        assert st == 200, (path, st, body)
    # writes other than tag/fork/rollback do not, whatever the method
    for method, path in (("POST", "/api/sessions/main/checkpoint"), ("POST", "/api/sessions/main/exec"),
                         ("DELETE", "/api/sessions/main"), ("POST", "/api/sessions"), ("POST", "/api/gc"),
                         ("GET", "/api/sessions/main/../../gc"), ("POST", "/api/mounts/unmount")):
        st, _, body = web.get(path, j, method=method, data=b"{}")
        assert st == 403 and b"does not forward" in body, (method, path, st, body)
    assert "main" in [s["name"] for s in daemon.jok("session", "ls")["sessions"]]
    # a POST must be JSON (a cross-site form cannot send that without a preflight)
    st, _, _ = web.get("/api/sessions/main/fork", {**c, "Content-Type": "text/plain"}, "POST",
                       json.dumps({"name": "f"}).encode())
    assert st == 415
    st, _, body = web.get("/api/sessions/main/fork", j, "POST", json.dumps({"name": "f"}).encode())
    assert st == 201, body
    assert "f" in [s["name"] for s in daemon.jok("session", "ls")["sessions"]]
    # a daemon error comes back as the daemon's
    st, _, body = web.get("/api/sessions/nope", c)
    assert st == 404 and json.loads(body)["error"]["code"] == "session_not_found"


def test_port_flag_and_clean_stop(daemon):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    w = Web(daemon, "--port", str(port))
    try:
        assert w.port == port
        # 127.0.0.1 only
        with socket.socket() as t:
            t.settimeout(5)
            assert t.connect_ex(("127.0.0.1", port)) == 0
    finally:
        rc, err = w.stop()
    assert rc == 0 and not any(m in err for m in SANITIZER_MARKS), err
    with socket.socket() as t:
        assert t.connect_ex(("127.0.0.1", port)) != 0  # nothing listens after the stop
    r = daemon.ctl("web", "--port", "70000")
    assert r.returncode == 2


def test_refuses_without_daemon(scratch):
    from conftest import find_bin
    r = subprocess.run([find_bin("ntfs-ctl"), "--socket", os.path.join(scratch, "none"), "web"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_browser(daemon, web, scratch, tmp_path):
    assert os.path.exists(CHROMIUM), "chromium is missing: run scripts/setup.sh"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "puppeteer-core")), \
        "puppeteer-core is missing: run scripts/setup.sh"
    mp = os.path.join(scratch, "mnt")
    os.mkdir(mp)
    daemon.ok("session", "new", "main")
    daemon.ok("mount", "main", mp)
    try:
        with open(os.path.join(mp, "notes.txt"), "w") as f:
            f.write("line one\nline two\n")
        daemon.ok("checkpoint", "main", "-m", "first notes")
        with open(os.path.join(mp, "pic.png"), "wb") as f:
            f.write(PNG)
        daemon.ok("checkpoint", "main", "-m", "a picture")
        daemon.ok("exec", "main", "--", "sh", "-c", "echo from-the-jail")
        shots = tmp_path / "screenshots"
        shots.mkdir()
        env = dict(os.environ, NODE_PATH=os.path.join(NODE_DIR, "node_modules"), CHROMIUM=CHROMIUM)
        node = subprocess.Popen(["node", os.path.join(HERE, "web_browser.js"), web.url, str(shots), "main"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env, start_new_session=True)
        try:
            r, _, _ = select.select([node.stdout], [], [], 120)
            assert r, "the browser script did not get to the history in 120 s"
            line = node.stdout.readline().strip()
            if line != "READY_FOR_CHECKPOINT":
                node.wait(timeout=60)
                pytest.fail(f"browser: {line}\n{node.stderr.read()}")
            # while the page is open: write to the mount and checkpoint
            with open(os.path.join(mp, "notes.txt"), "w") as f:
                f.write("line one\nline 2\nline three\n")
            short = daemon.jok("checkpoint", "main", "-m", "edited notes")["short"]
            node.stdin.write(f"CHECKPOINT {short}\n")
            node.stdin.flush()
            stdout, stderr = node.communicate(timeout=180)
        finally:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=30)
        res = json.loads(stdout.strip().splitlines()[-1])
        assert node.returncode == 0, f"{res.get('failure')}\n{stderr[-3000:]}"
        # the rollback button reset the mounted working state
        with open(os.path.join(mp, "notes.txt")) as f:
            notes_after_rollback = f.read()
    finally:
        daemon.ok("umount", mp)

    print(f"the new checkpoint was drawn {res['new_checkpoint_ms']} ms after the checkpoint returned")
    assert res["first_status"] == 200
    assert res["sessions"] == ["main"]
    assert "token=" not in res["address_bar"]  # taken out of the address bar
    assert len(res["history"]) == 3  # the empty start, two checkpoints
    assert "a picture" in res["history_text"] and "first notes" in res["history_text"]
    # the new checkpoint showed up by polling, within a few polls
    assert res["history_after"][0] == short and res["new_checkpoint_ms"] < 10000
    assert res["files"] == ["notes.txt", "pic.png"]
    assert res["file_text"] == "line one\nline 2\nline three\n"
    assert res["image_width"] == 120
    assert sorted(res["diff"]) == [["notes.txt", "added"], ["pic.png", "added"]]
    assert "+ line 2" in res["diff_added_lines"] and "+ line three" in res["diff_added_lines"]
    assert any("bash" in e or "exec" in e for e in res["effects"]), res["effects"]
    assert "from-the-jail" in res["effect_detail"]
    assert any(d.startswith("prompt") for d in res["dialogs"]) and any(d.startswith("confirm") for d in res["dialogs"])
    tags = daemon.jok("tags")["tags"]
    assert any(t["tag"] == "from-web" and t["short"] == short for t in tags), tags
    sessions = {s["name"]: s for s in daemon.jok("session", "ls")["sessions"]}
    assert sessions["forked-web"]["short"] == short  # the fork button
    assert sessions["main"]["short"] == res["rolled_back_to"]  # the rollback button
    assert notes_after_rollback == "line one\nline two\n"
    assert res["no_token_status"] == 403 and res["no_token_api_status"] == 403 and res["wrong_token_status"] == 403
    assert res["page_errors"] == []
    for name in ("sessions.png", "history.png", "tree.png", "diff.png", "effects.png"):
        assert (shots / name).stat().st_size > 5000, name
    keep = os.environ.get("NTFS_WEB_SCREENSHOT")  # docs/web.png is refreshed with this
    if keep:
        shutil.copy(shots / "history.png", keep)


def test_bench_web_smoke(tmp_path):
    """tools/bench-web.py on a short history: both figures printed, every
    row drawn, nothing left behind."""
    from conftest import BUILD
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-web.py"), "--build", BUILD, "--checkpoints", "250",
                        "--rounds", "1", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"history of 250 checkpoints, first rows drawn: median \d+ ms", r.stdout), r.stdout
    assert re.search(r"all 250 rows listed and the oldest drawn \d+ ms", r.stdout), r.stdout
    assert os.listdir(tmp_path) == []
