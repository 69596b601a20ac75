#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How fast `ntfs-ctl web` draws a long history: a session of N checkpoints
(default 10,000), its history page opened in headless chromium (Debian's,
driven by the puppeteer-core that scripts/setup.sh installs), timed from
the navigation to the first checkpoint row drawn (the page shows the newest
200 and polls those), over --rounds fresh pages; then the time until the whole
history is listed (pressing "show older") and its oldest row drawn (scrolled
to; the page draws only the rows in view).

  tools/bench-web.py [--build DIR] [--checkpoints 10000] [--rounds 5]
                     [--dir DIR]

Starts its own ntfsd and `ntfs-ctl web` on a temporary store under --dir
(default: the system's temporary directory) and stops both at the end.
Prints figures; fails (exit 1) only when a page does not draw at all."""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_DIR = os.environ.get("NTFS_WEB_NODE", "/usr/local/lib/ntfs-web-test")

NODE_SCRIPT = r"""
const puppeteer = require('puppeteer-core');
const [url, rounds, total] = [process.argv[1], +process.argv[2], +process.argv[3]];
(async () => {
  const browser = await puppeteer.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true, args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
  const out = { first_row_ms: [] };
  try {
    for (let i = 0; i < rounds; i++) {
      const page = await browser.newPage();
      const t0 = Date.now();
      await page.goto(url, { waitUntil: 'domcontentloaded' });
      await page.waitForFunction(() => document.querySelector('#history tr.commit'), { timeout: 30000, polling: 10 });
      out.first_row_ms.push(Date.now() - t0);
      if (i === rounds - 1) {
        const t1 = Date.now();
        for (;;) {
          const n = await page.$eval('#history', (t) => +t.dataset.rows);
          if (n >= total) break;
          await page.evaluate(() => document.getElementById('older-btn').click());
          await page.waitForFunction((m) => +document.getElementById('history').dataset.rows > m,
                                     { timeout: 60000, polling: 20 }, n);
        }
        // the oldest row, drawn once scrolled to
        await page.evaluate(() => window.scrollTo(0, document.body.scrollHeight));
        await page.waitForFunction((m) => document.querySelector(`#history tr.commit[data-index="${m - 1}"]`),
                                   { timeout: 60000, polling: 20 }, total);
        out.all_rows_ms = Date.now() - t1;
        out.rows = await page.$eval('#history', (t) => +t.dataset.rows);
      }
      await page.close();
    }
  } finally { await browser.close(); }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def request(sock, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: ntfs\r\nContent-Length: {len(data)}\r\n"
    if data:
        head += "Content-Type: application/json\r\n"
    sock.sendall(head.encode() + b"\r\n" + data)
    f = sock.makefile("rb")
    status = int(f.readline().split(b" ", 2)[1])
    n = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":", 1)[1])
    body = f.read(n)
    f.close()
    return status, body


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("NTFS_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--checkpoints", type=int, default=10000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-web-", dir=a.dir)
    sock_path = os.path.join(tmp, "s")
    daemon = web = None
    try:
        log = open(os.path.join(tmp, "ntfsd.log"), "wb")
        daemon = subprocess.Popen([os.path.join(a.build, "ctl", "ntfsd"), "--store", os.path.join(tmp, "store"),
                                   "--socket", sock_path, "-f"], stdout=log, stderr=log, start_new_session=True)
        s = socket.socket(socket.AF_UNIX)
        for _ in range(600):  # until ntfsd listens
            try:
                s.connect(sock_path)
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("ntfsd did not start")
        st, body = request(s, "POST", "/v1/sessions", {"name": "big"})
        assert st == 201, body
        t = time.monotonic()
        for i in range(a.checkpoints - 1):  # plus the session's first commit
            st, body = request(s, "POST", "/v1/sessions/big/checkpoint", {"message": f"checkpoint {i}"})
            assert st == 200, body
        s.close()
        print(f"made {a.checkpoints} checkpoints in {time.monotonic() - t:.1f} s")
        web = subprocess.Popen([os.path.join(a.build, "ctl", "ntfs-ctl"), "--socket", sock_path, "web"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
        url = web.stdout.readline().strip()
        if not re.match(r"http://127\.0\.0\.1:\d+/\?token=", url):
            sys.exit(f"ntfs-ctl web printed {url!r}")
        env = dict(os.environ, NODE_PATH=os.path.join(NODE_DIR, "node_modules"))
        r = subprocess.run(["node", "-e", NODE_SCRIPT, url + "#/s/big", str(a.rounds), str(a.checkpoints)],
                           capture_output=True, text=True, env=env, timeout=600)
        if r.returncode != 0:
            sys.exit(f"the browser failed: {r.stderr[-2000:]}")
        res = json.loads(r.stdout.strip().splitlines()[-1])
        ms = sorted(res["first_row_ms"])
        print(f"history of {a.checkpoints} checkpoints, first rows drawn: "
              f"median {ms[len(ms) // 2]} ms, max {ms[-1]} ms over {len(ms)} fresh pages")
        print(f"all {res['rows']} rows listed and the oldest drawn {res['all_rows_ms']} ms after the first page")
    finally:
        for p in (web, daemon):
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
