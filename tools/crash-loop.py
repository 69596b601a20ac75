#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""crash-loop: N random kill -9 of ntfsd during a scripted agent session of
mixed effects (docs/recovery.md). After each restart it checks:

  - `ntfs-ctl fsck` is clean;
  - no effect is left pending (recovery closed them all);
  - the journal and the store agree: every `done` effect's commit_after is a
    commit of the session's history (GET /v1/sessions/NAME/log), and the
    session's working state is its head (no uncheckpointed leftovers);
  - no irreversible effect ran twice: every bash_run hits a counting HTTP
    server (Unix socket, outside the store) with its own path; every path
    has at most one hit, and exactly one when the effect is `done`.

The scripted agent behaves like ntfs-agent: each logical step has a key
(its tool_use_id); after a crash it re-sends the step with the SAME key; a
step that comes back `failed` ("interrupted by daemon crash") is re-run
under a new key, an `outcome_unknown` one is never re-run.

Usage: NTFS_BUILD=build tools/crash-loop.py [--iterations N] [--quick] [--seed S] [--keep]
Exit 0 when every check held, 1 otherwise. Needs root (the counter socket
lives under /usr/local/share so that the jail can reach it).
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from recovery_fixtures import Counter, Runner, find_bin  # noqa: E402

SESSION = "loop"


class Agent:
    """Runs the scripted session until the daemon dies under it."""

    def __init__(self, runner, counter):
        self.r, self.c = runner, counter
        self.step = 1
        self.retry = 0
        self.runs_sent = 0

    def command(self, i):
        kind = ["bash_write", "bash_read", "bash_build", "bash_run"][i % 4]
        if kind == "bash_write":
            return kind, f"echo {i} >> log.txt; echo {i} > w_{i}.txt"
        if kind == "bash_read":
            return kind, "wc -l < log.txt 2>/dev/null || echo 0"
        if kind == "bash_build":
            return kind, f"sleep 0.2; seq {i} > b_{i}.txt; sleep 0.1"
        return kind, f"{self.c.curl(f'/run/{i}')}; echo {i} > r_{i}.txt"

    def run(self):
        while True:
            tool, cmd = self.command(self.step)
            key = f"s{self.step}" + (f":r{self.retry}" if self.retry else "")
            try:
                st, j = self.r.exec(SESSION, tool, cmd, key=key, timeout=60)
            except OSError:
                return  # the daemon died: the same key is sent again after the restart
            if st != 200:
                raise RuntimeError(f"step {self.step} ({tool}): {st} {j}")
            status = j.get("status")
            if status == "failed" and "interrupted" in (j.get("reason") or ""):
                self.retry += 1  # replayable: the agent may run it again
                continue
            if status == "pending":
                raise RuntimeError(f"step {self.step}: still pending after recovery: {j}")
            self.step += 1
            self.retry = 0


def check(r, c, problems):
    rc = r.ctl("fsck")
    if rc.returncode != 0 or not rc.stdout.startswith("ok"):
        problems.append(f"fsck: {rc.stdout.strip()} {rc.stderr.strip()}")
    effs = r.effects(SESSION)
    log = r.ok("GET", f"/v1/sessions/{SESSION}/log")["commits"]
    history = {x["commit"] for x in log}
    head = r.head(SESSION)
    diff = r.ok("GET", f"/v1/sessions/{SESSION}/diff?from={head}")["changes"]
    if diff:
        problems.append(f"working state differs from the head after recovery: {diff[:3]}")
    counts = {}
    for e in effs:
        counts[e["status"]] = counts.get(e["status"], 0) + 1
        if e["status"] == "pending":
            problems.append(f"effect {e['id']} still pending")
        if e["status"] == "done" and e["commit_after"] and e["commit_after"] not in history:
            problems.append(f"done effect {e['id']}: commit_after {e['commit_after'][:12]} not in the history")
    hits = c.total()
    twice = [p for p, n in hits.items() if n > 1]
    if twice:
        problems.append(f"irreversible effects ran twice: {twice}")
    for e in effs:
        if e["tool"] == "bash_run" and e["status"] == "done":
            step = e["idempotency_key"].split(":")[0][1:]
            if hits.get(f"/run/{step}", 0) != 1:
                problems.append(f"done bash_run {e['id']} (step {step}) has {hits.get(f'/run/{step}', 0)} hits")
    return counts, effs, hits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", "-n", type=int, default=50)
    ap.add_argument("--quick", action="store_true", help="10 iterations (CI)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--max-delay", type=float, default=1.5, help="longest run between kills (s)")
    a = ap.parse_args()
    n = 10 if a.quick else a.iterations
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    rnd = random.Random(seed)
    if find_bin("ntfsd") is None:
        print(f"crash-loop: ntfsd is not built under {os.environ.get('NTFS_BUILD', '/work/main/build')}",
              file=sys.stderr)
        return 2
    scratch = tempfile.mkdtemp(prefix="ntfs-crashloop-")
    os.chmod(scratch, 0o755)
    c = Counter()
    r = Runner(scratch)
    problems = []
    t0 = time.monotonic()
    try:
        r.start()
        r.ok("POST", "/v1/sessions", {"name": SESSION})
        agent = Agent(r, c)
        for it in range(1, n + 1):
            th = threading.Thread(target=agent.run, daemon=True)
            th.start()
            time.sleep(rnd.uniform(0.05, a.max_delay))
            r.kill9()
            th.join(60)
            if th.is_alive():
                problems.append(f"iteration {it}: the agent hung")
                break
            r.start()
            before = len(problems)
            counts, effs, hits = check(r, c, problems)
            for p in problems[before:]:
                print(f"iteration {it}: {p}", file=sys.stderr)
        # A last quiet stretch: the session still works after all that.
        st, j = r.exec(SESSION, "bash_read", "cat log.txt | wc -l")
        if st != 200 or j.get("exit_code") != 0:
            problems.append(f"final command failed: {st} {j}")
        counts, effs, hits = check(r, c, problems)
        rc = r.stop()
        if rc != 0:
            problems.append(f"ntfsd exited {rc} after SIGTERM")
        runs = [e for e in effs if e["tool"] == "bash_run"]
        print(f"crash-loop: seed {seed}, {n} kill -9, {time.monotonic() - t0:.1f} s")
        print(f"  effects: {len(effs)} ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}); "
              f"{agent.step - 1} logical steps completed")
        print(f"  bash_run: {len(runs)} effects, {sum(hits.values())} outside hits, "
              f"{sum(1 for v in hits.values() if v > 1)} ran twice")
        print(f"  recovery actions logged: {r.log_tail(10**8).count('recovery: effect')}; "
              f"fsck clean after every restart: {'yes' if not any('fsck' in p for p in problems) else 'NO'}")
        if problems:
            print(f"  PROBLEMS ({len(problems)}):")
            for p in problems[:20]:
                print(f"    {p}")
            print(f"  log: {r.log_path}" if a.keep else "")
        else:
            print("  ok: every check held")
        return 1 if problems else 0
    finally:
        r.close()
        c.close()
        if not a.keep:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"  scratch kept: {scratch}")


if __name__ == "__main__":
    sys.exit(main())
