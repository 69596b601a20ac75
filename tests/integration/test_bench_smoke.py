# SPDX-License-Identifier: MIT
"""Smoke tests of the benchmark scripts themselves: tools/bench-fs.sh --quick on
the floor, floorsame, native and overlayfs-wt targets (the table must come out
with a number in every measured cell), and tools/bench-archive.sh on a small
tree. Times are never compared with anything."""
import os
import re
import subprocess

import pytest

BUILD = os.environ.get("NTFS_BUILD", "/work/main/build")
ROOT = os.environ.get("NTFS_SOURCE_ROOT",
                      os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WORKLOADS = ["seq-write-1M", "seq-read-1M", "rand-read-4k", "rand-write-4k", "creates-1000",
             "untar", "find-warm", "du-warm", "git-add-commit", "git-status-warm", "rm-rf",
             "make-j2"]


def table(stdout):
    """The report's table: its header cells, and each row's cells by header,
    keyed by workload."""
    lines = [l for l in stdout.splitlines() if l.startswith("|")]
    cells = lambda l: [c.strip() for c in l.strip("|").split("|")]
    head = cells(lines[0])
    return head, {r[0]: dict(zip(head, r)) for r in map(cells, lines[2:])}


def test_quick_table(tmp_path):
    floor = os.path.join(BUILD, "tools", "fusefloor")
    if not os.path.exists(floor):
        pytest.skip("no fusefloor at %s" % floor)
    env = dict(os.environ, BENCH_TARGETS="floor floorsame native overlayfs-wt", NTFS_BUILD=BUILD,
               BENCH_DIR=str(tmp_path), BENCH_CACHE=str(tmp_path / "cache"))
    env.pop("NTFS_MOUNT_CMD", None)
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-fs.sh"), "--quick"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    head, rows = table(r.stdout)
    # overlayfs-wt (fuse-overlayfs with writeback=0) has a column only when run
    assert head[:9] == ["workload", "unit", "native", "tmpfs", "overlayfs", "overlayfs-wt", "floor", "floorsame",
                        "ntfs"]
    assert "ntfs/overlayfs-wt" in head
    assert sorted(rows) == sorted(WORKLOADS)
    num = re.compile(r"^\d+(\.\d+)?$")
    for w, row in rows.items():
        for t in ("native", "overlayfs-wt", "floor", "floorsame", "floor/native"):
            assert num.match(row[t]) and float(row[t]) > 0, (w, t, row[t])
        assert row["tmpfs"] == "skipped" and row["ntfs"] == "skipped"
        assert row["ntfs/floor"] == "-" and row["ntfs/floorsame"] == "-" and row["ntfs/overlayfs-wt"] == "-"
    # nothing left mounted or running under the scratch dir
    with open("/proc/self/mounts") as f:
        assert str(tmp_path) not in f.read()
    assert os.listdir(tmp_path) == ["cache"]



def test_quick_against_a_base_build(tmp_path):
    """BENCH_TARGETS="ntfs-base ntfs": a second build of ntfs (here the same
    one) in the same alternating runs, a column of its own and ntfs's ratio
    to it; without NTFS_BASE_BUILD it is refused before anything runs; the
    help shows every option, down to its last line."""
    fuse = os.path.join(BUILD, "fs", "ntfs-fuse")
    if not os.path.exists(fuse):
        pytest.skip("no ntfs-fuse at %s" % fuse)
    script = os.path.join(ROOT, "tools", "bench-fs.sh")
    env = dict(os.environ, BENCH_TARGETS="ntfs-base ntfs", NTFS_BUILD=BUILD, NTFS_BASE_BUILD=BUILD,
               BENCH_DATA_ONLY="1", BENCH_DIR=str(tmp_path), BENCH_CACHE=str(tmp_path / "cache"))
    env.pop("NTFS_MOUNT_CMD", None)
    before = mounts(tmp_path)
    r = subprocess.run([script, "--quick"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert mounts(tmp_path) == before
    head, rows = table(r.stdout)
    assert "ntfs-base" in head and "ntfs/ntfs-base" in head, head
    assert sorted(rows) == ["rand-read-4k", "rand-write-4k", "seq-read-1M", "seq-write-1M"]
    num = re.compile(r"^\d+(\.\d+)?$")
    for w, row in rows.items():
        for c in ("ntfs-base", "ntfs", "ntfs/ntfs-base"):
            assert num.match(row[c]) and float(row[c]) > 0, (w, c, row[c])
    assert "ntfs/ntfs-base" not in r.stdout.split("targets:")[1], r.stdout  # no target of its own
    env.pop("NTFS_BASE_BUILD")
    r = subprocess.run([script, "--quick"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ntfs-base needs NTFS_BASE_BUILD" in r.stderr, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["cache"]
    r = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert "NTFS_BASE_BUILD" in r.stdout and r.stdout.rstrip().endswith("Nothing here gates on absolute times."), \
        r.stdout

def run_order(targets, runs):
    env = dict(os.environ, BENCH_TARGETS=targets, BENCH_RUNS=str(runs))
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-fs.sh"), "--order"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    order = {}
    for line in r.stdout.splitlines():
        run, target = line.split()
        order.setdefault(int(run), []).append(target)
    return order


def test_run_order_is_balanced():
    """--order: every run visits every target once; with three targets each
    one follows each other one equally often within six runs (rotation
    alone had each follow the same one in every run, so what a mount
    leaves behind fell on one side); two targets still alternate."""
    order = run_order("floorsame ntfs-base ntfs", 6)
    assert sorted(order) == [1, 2, 3, 4, 5, 6]
    follows = {}
    for targets in order.values():
        assert sorted(targets) == ["floorsame", "ntfs", "ntfs-base"], order
        for a, b in zip(targets, targets[1:]):
            follows[(a, b)] = follows.get((a, b), 0) + 1
    assert len(follows) == 6 and set(follows.values()) == {2}, follows
    assert run_order("ntfs-base ntfs", 2) == {1: ["ntfs-base", "ntfs"], 2: ["ntfs", "ntfs-base"]}
    four = run_order("native overlayfs floorsame ntfs", 4)
    assert all(sorted(t) == ["floorsame", "native", "ntfs", "overlayfs"] for t in four.values()), four
    assert four[1] != four[2] and four[2][0] == "native", four  # run 2: reversed, not just rotated


def test_bench_archive_small(tmp_path):
    """tools/bench-archive.sh on a small tree, one round: every row has a time,
    the export lists exactly as GNU tar's archive, the ratios are printed, and
    no daemon, mount or scratch directory is left behind."""
    ctl = os.path.join(BUILD, "ctl", "ntfs-ctl")
    if not os.path.exists(ctl):
        pytest.skip("no ntfs-ctl at %s" % ctl)
    env = dict(os.environ, BENCH_FILES="300", BENCH_MIB="6", BENCH_REPS="1", BENCH_DIR=str(tmp_path))
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-archive.sh"), BUILD], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# check: the export lists exactly as GNU tar's archive" in r.stdout, r.stdout
    rows = {}
    for l in r.stdout.splitlines():
        m = re.match(r"^(tar -\S+.*?|ntfs-ctl .*?)\s+(\d+\.\d+)\s+(\d+(\.\d+)?)$", l)
        if m:
            rows[m.group(1)] = float(m.group(2))
    assert len(rows) == 8, r.stdout
    assert all(v > 0 for v in rows.values()), rows
    ratios = re.findall(r"^ratio (export|import)[^:]*: (\d+\.\d+)x$", r.stdout, re.M)
    assert [k for k, _ in ratios] == ["export", "export", "import"], r.stdout
    assert all(float(v) > 0 for _, v in ratios)
    with open("/proc/self/mounts") as f:
        assert str(tmp_path) not in f.read()
    assert os.listdir(tmp_path) == []
    assert subprocess.run(["pgrep", "-f", "ntfsd --store " + str(tmp_path)]).returncode == 1


def helper_report(raw, *more):
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "bench-fs-helper.py"), "report", str(raw)] +
                       [str(m) for m in more], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def test_report_targets(tmp_path):
    """The report's targets block judges each of issue 3's targets from the
    medians and counts the runs whose own pair met it: a made-up table where
    one target misses on the medians though one run met it, and the others
    hold."""
    raw = tmp_path / "raw.tsv"
    rows = []
    for run, (nat, ovl, same, ntfs) in enumerate([(400, 300, 1800, 900), (420, 310, 1700, 200),
                                                  (410, 305, 1750, 250)], 1):
        rows += ["native seq-write-1M %d %d" % (run, nat), "overlayfs seq-write-1M %d %d" % (run, ovl),
                 "floorsame seq-write-1M %d %d" % (run, same), "ntfs seq-write-1M %d %d" % (run, ntfs)]
    for run, (ovl, same, ntfs) in enumerate([(13.0, 2.6, 2.9), (12.0, 2.7, 2.8), (14.0, 2.5, 2.6)], 1):
        rows += ["overlayfs creates-20000 %d %s" % (run, ovl), "floorsame creates-20000 %d %s" % (run, same),
                 "ntfs creates-20000 %d %s" % (run, ntfs)]
    raw.write_text("\n".join(rows) + "\n")
    r = helper_report(raw)
    got = {(m.group(1), m.group(2)): (float(m.group(3)), m.group(4), m.group(5))
           for m in re.finditer(r"^  (\S+) +ntfs/(\S+) +\S+ +\S+ +(\d+\.\d+) +(met|MISSED) +runs (\d+/\d+) +90% ",
                                r.stdout, re.M)}
    # seq write: medians 250 vs 410 native (0.61, missed; run 1 met), vs
    # overlayfs 250 vs 305 (0.82, missed); no floor check on a throughput row
    assert got[("seq-write-1M", "native")] == (0.61, "MISSED", "1/3"), r.stdout
    assert got[("seq-write-1M", "overlayfs")] == (0.82, "MISSED", "1/3"), r.stdout
    assert ("seq-write-1M", "floorsame") not in got, r.stdout
    # creates: 2.8 vs 2.6 (1.08 <= 1.1; run 1's 1.12 missed), far under overlayfs
    assert got[("creates-20000", "floorsame")] == (1.08, "met", "2/3"), r.stdout
    assert got[("creates-20000", "overlayfs")] == (0.22, "met", "3/3"), r.stdout
    assert "targets met: 2 of 4" in r.stdout, r.stdout
    assert "overlayfs-wt" not in r.stdout, r.stdout  # not run: no column
    # pairs are matched by run: with the floor's run 1 missing, ntfs's runs
    # 2 and 3 meet it against the floor's 2 and 3 (in order, they would not)
    raw.write_text("ntfs creates-20000 1 2.0\nntfs creates-20000 2 3.0\nntfs creates-20000 3 2.0\n"
                   "floorsame creates-20000 2 3.0\nfloorsame creates-20000 3 2.0\n")
    r = helper_report(raw)
    assert re.search(r"^  creates-20000 +ntfs/floorsame +<= 1\.1 +0\.80 +met +runs 2/2 +90% - +too few runs$",
                     r.stdout, re.M), r.stdout
    # fuse-overlayfs with writeback=0, when run: a column and ntfs's ratio
    # to it (median 4.0: 2.0/4.0), and no target of its own
    raw.write_text("ntfs make-j2 1 2.0\noverlayfs make-j2 1 3.0\noverlayfs-wt make-j2 1 4.0\n")
    r = helper_report(raw)
    row = table(r.stdout)[1]["make-j2"]
    assert row["overlayfs-wt"] == "4.00" and row["ntfs/overlayfs-wt"] == "0.50", r.stdout
    assert row["ntfs/overlayfs"] == "0.67", r.stdout
    assert "ntfs/overlayfs-wt" not in r.stdout.split("targets:")[1], r.stdout


def test_report_intervals_and_pool(tmp_path):
    """Each target gets the 90% interval of its ratio over resampled runs
    (a run's two figures drawn together): a row whose every run has the
    same ratio has that ratio at both ends, "clear" on either side of the
    bound; a row whose runs fall on both sides is "within noise". `pool`
    reports the runs of several raw files together, each file's runs kept
    apart; two runs alone are too few for an interval; the same input
    prints the same interval."""
    raw = tmp_path / "raw.tsv"
    rows = []
    # untar: ntfs exactly the floor's time in every run (ratio 1.00, met);
    # rm-rf: exactly 1.5x in every run (missed); git-add-commit: per-run
    # ratios 0.90, 1.00, 1.05, 1.20, 1.30 (ratio of the medians 1.05, met,
    # but runs on both sides of 1.1)
    for run, (floor, ratio) in enumerate(zip([2.0, 2.5, 3.0, 3.5, 4.0], [0.90, 1.00, 1.05, 1.20, 1.30]), 1):
        rows += ["floorsame untar %d %s" % (run, floor), "ntfs untar %d %s" % (run, floor),
                 "floorsame rm-rf %d %s" % (run, floor), "ntfs rm-rf %d %s" % (run, floor * 1.5),
                 "floorsame git-add-commit %d 10.0" % run, "ntfs git-add-commit %d %s" % (run, 10.0 * ratio)]
    raw.write_text("\n".join(rows) + "\n")
    out = helper_report(raw).stdout
    line = lambda w: re.search(r"^  %s +ntfs/floorsame +<= 1\.1 +(\S+) +(met|MISSED) +runs (\S+) +90%% (.*)$" % w,
                               out, re.M).groups()
    assert line("untar") == ("1.00", "met", "5/5", "1.00-1.00  clear"), out
    assert line("rm-rf") == ("1.50", "MISSED", "0/5", "1.50-1.50  clear"), out
    ratio, verdict, runs, band = line("git-add-commit")
    assert (ratio, verdict, runs) == ("1.05", "met", "3/5"), out
    lo, hi, word = re.match(r"(\d\.\d\d)-(\d\.\d\d)  (.*)$", band).groups()
    assert float(lo) < 1.1 < float(hi) and word == "within noise", out
    assert "targets met: 2 of 3 (clear: 1 met, 1 missed;" in out, out
    assert helper_report(raw).stdout == out  # the same seed every time
    # pool: two files of two runs each, with the same run numbers
    a, b = tmp_path / "a.tsv", tmp_path / "b.tsv"
    a.write_text("floorsame untar 1 2.0\nntfs untar 1 2.0\nfloorsame untar 2 3.0\nntfs untar 2 3.0\n")
    b.write_text("floorsame untar 1 4.0\nntfs untar 1 4.0\nfloorsame untar 2 5.0\nntfs untar 2 5.0\n")
    assert re.search(r"^  untar +ntfs/floorsame .* runs 2/2 +90% - +too few runs$", helper_report(a).stdout, re.M)
    r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "bench-fs-helper.py"), "pool", str(a), str(b)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "median of 4 run(s) from 2 raw files" in r.stdout, r.stdout
    assert table(r.stdout)[1]["untar"]["floorsame"] == "3.50", r.stdout  # median of 2, 3, 4, 5
    assert re.search(r"^  untar +ntfs/floorsame +<= 1\.1 +1\.00 +met +runs 4/4 +90% 1\.00-1\.00  clear$",
                     r.stdout, re.M), r.stdout


def mounts(tmp_path):
    """The mounts a bench run could leave: under its scratch directory, or a
    tracefs/debugfs it mounted for perf. Other mounts on the machine (other
    jobs' tests) come and go meanwhile and are not the script's."""
    with open("/proc/self/mounts") as f:
        rows = [l.split() for l in f]
    return sorted(r[1] for r in rows if r[1].startswith(str(tmp_path)) or r[2] in ("tracefs", "debugfs"))


def test_quick_request_counts(tmp_path):
    """BENCH_REQS=1 counts the FUSE requests each row sends each FUSE target
    (perf and the kernel's fuse:fuse_request_send tracepoint): on the floor
    with ntfs's options, 1,000 new 100-byte files are exactly 1,000 MKNODs
    and 1,000 WRITEs; native ext4 has no count; no perf, mount or scratch
    is left behind (a tracefs the script mounted is unmounted)."""
    floor = os.path.join(BUILD, "tools", "fusefloor")
    if not os.path.exists(floor):
        pytest.skip("no fusefloor at %s" % floor)
    env = dict(os.environ, BENCH_TARGETS="native floorsame", NTFS_BUILD=BUILD, BENCH_META_ONLY="1",
               BENCH_REQS="1", BENCH_DIR=str(tmp_path), BENCH_CACHE=str(tmp_path / "cache"),
               BENCH_RAW=str(tmp_path / "raw.tsv"))
    before = mounts(tmp_path)
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-fs.sh"), "--quick"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert mounts(tmp_path) == before
    assert subprocess.run(["pgrep", "-f", "perf stat -a -x, -o " + str(tmp_path)]).returncode == 1
    assert sorted(os.listdir(tmp_path)) == ["cache", "raw.tsv", "raw.tsv.reqs"]
    out = r.stdout.split("FUSE requests per row")[1]
    head, rows = table(out)
    assert head == ["workload", "floorsame"], out
    assert sorted(rows) == ["creates-1000", "du-warm", "find-warm", "git-add-commit", "git-status-warm",
                            "rm-rf", "untar"], out
    assert int(rows["creates-1000"]["floorsame"]) >= 2000, out  # with the negative LOOKUPs
    creates = re.search(r"^  creates-1000 +floorsame +(.*)$", out, re.M).group(1)
    ops = dict((op, int(n)) for op, n in (x.split() for x in creates.split(", ")))
    assert ops["MKNOD"] == 1000 and ops["WRITE"] == 1000, creates
    # the untar of the quick tree: a MKNOD per regular file at least
    files = int(subprocess.run("tar -tvf %s | grep -c '^-'" % (tmp_path / "cache" / "tree-quick.tar"), shell=True,
                               capture_output=True, text=True).stdout)
    untar = re.search(r"^  untar +floorsame +(.*)$", out, re.M).group(1)
    assert dict((op, int(n)) for op, n in (x.split() for x in untar.split(", ")))["MKNOD"] == files, untar
    # the raw counts: native ext4 never appears
    with open(tmp_path / "raw.tsv.reqs") as f:
        assert {l.split()[0] for l in f} == {"floorsame"}


def test_report_requests(tmp_path):
    """The requests table takes each row's median over the runs, a run with
    no request of an opcode counting as 0, and lists the opcodes that are at
    least 1% of the row's total."""
    raw, reqs = tmp_path / "raw.tsv", tmp_path / "reqs.tsv"
    raw.write_text("floorsame untar 1 5.0\nfloorsame untar 2 5.0\nfloorsame untar 3 5.0\n"
                   "ntfs untar 1 6.0\nntfs untar 2 6.0\nntfs untar 3 6.0\n")
    reqs.write_text("floorsame untar 1 ALL 1000\nfloorsame untar 2 ALL 1200\nfloorsame untar 3 ALL 1100\n"
                    "floorsame untar 1 WRITE 900\nfloorsame untar 2 WRITE 1100\nfloorsame untar 3 WRITE 1000\n"
                    "floorsame untar 1 GETATTR 100\nfloorsame untar 2 GETATTR 100\nfloorsame untar 3 GETATTR 95\n"
                    "floorsame untar 2 SETATTR 5\n"
                    "ntfs untar 1 ALL 700\nntfs untar 2 ALL 700\nntfs untar 3 ALL 701\n"
                    "ntfs untar 1 WRITE 700\nntfs untar 2 WRITE 700\nntfs untar 3 WRITE 700\n"
                    "ntfs untar 3 LOOKUP 1\n")
    out = helper_report(raw, reqs).stdout.split("FUSE requests per row")[1]
    head, rows = table(out)
    assert head == ["workload", "floorsame", "ntfs"], out
    assert rows["untar"]["floorsame"] == "1100" and rows["untar"]["ntfs"] == "700", out
    # SETATTR's median is 0 (two runs had none), LOOKUP's is under 1%
    assert re.search(r"^  untar +floorsame +WRITE 1000, GETATTR 100$", out, re.M), out
    assert re.search(r"^  untar +ntfs +WRITE 700$", out, re.M), out


WAKE_PARAM = "/sys/module/fuse/parameters/wake_here"


def test_wake_here_set_for_the_run_and_put_back(tmp_path):
    """BENCH_FUSE_WAKE_HERE=Y: the run is made with the fuse module's
    wake_here parameter set (the header says so, and what it was) and the
    parameter is put back when the script exits; a value other than Y or N,
    or a kernel without the parameter, stops the script before anything
    runs."""
    floor = os.path.join(BUILD, "tools", "fusefloor")
    if not os.path.exists(floor):
        pytest.skip("no fusefloor at %s" % floor)
    script = os.path.join(ROOT, "tools", "bench-fs.sh")
    env = dict(os.environ, BENCH_TARGETS="floor", BENCH_DATA_ONLY="1", NTFS_BUILD=BUILD,
               BENCH_DIR=str(tmp_path), BENCH_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([script, "--quick"], env=dict(env, BENCH_FUSE_WAKE_HERE="yes"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "BENCH_FUSE_WAKE_HERE must be Y or N" in r.stderr, r.stderr
    if not os.path.exists(WAKE_PARAM):  # another kernel: refused, not ignored
        r = subprocess.run([script, "--quick"], env=dict(env, BENCH_FUSE_WAKE_HERE="Y"), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2 and "no wake_here parameter" in r.stderr, r.stderr
        return
    with open(WAKE_PARAM) as f:
        was = f.read().strip()
    other = "N" if was == "Y" else "Y"
    try:
        r = subprocess.run([script, "--quick"], env=dict(env, BENCH_FUSE_WAKE_HERE=other), capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "# fuse wake_here: %s (set for this run; it was %s)" % (other, was) in r.stdout, r.stdout
        head, rows = table(r.stdout)
        assert re.match(r"^\d+(\.\d+)?$", rows["seq-write-1M"]["floor"]), rows
        with open(WAKE_PARAM) as f:
            assert f.read().strip() == was
        r = subprocess.run([script, "--quick"], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        assert "# fuse wake_here: %s\n" % was in r.stdout, r.stdout  # unset: left alone
    finally:
        with open(WAKE_PARAM, "w") as f:
            f.write(was)


def test_rollback_bench_small(tmp_path):
    """tools/bench-rollback.py on small trees: the table has both rows with a
    number per size and a ratio; every round's rollback restored the file
    and the shell sitting in the mount never failed (the script checks and
    exits 1 otherwise); nothing is left mounted."""
    r = subprocess.run([os.path.join(ROOT, "tools", "bench-rollback.py"), "--build", BUILD, "--sizes", "100,400",
                        "--rounds", "3", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = {l.split("|")[1].strip(): [c.strip() for c in l.strip().strip("|").split("|")[1:]]
            for l in r.stdout.splitlines() if l.startswith("| ") and "ms" not in l}
    assert sorted(rows) == ["git reset --hard (native disk)", "ntfs rollback (socket)"]
    num = re.compile(r"^\d+\.\d+$")
    for cells in rows.values():
        assert len(cells) == 3 and all(num.match(c) and float(c) > 0 for c in cells), cells
    with open("/proc/self/mounts") as f:
        assert str(tmp_path) not in f.read()
    assert os.listdir(tmp_path) == []
