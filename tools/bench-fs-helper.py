#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Helpers for tools/bench-fs.sh (stdlib only).

  creates DIR N              create N small files (100 bytes each) in DIR,
                             print the elapsed seconds (timed inside, so
                             python's start-up is not counted)
  gencproj DIR NFILES        write a C project of NFILES .c files + Makefile
  fio JSONFILE read|write bw|iops
                             print MB/s (bw) or IOPS from fio's JSON output
  report TSV [REQS]          print the table of medians and ratios, and with
                             ntfs in it, issue 3's targets met or missed;
                             with REQS (bench-fs.sh BENCH_REQS=1), the FUSE
                             requests each row sent each FUSE target
  pool TSV TSV...            the same report over the runs of several raw
                             files (bench-fs.sh BENCH_RAW=...), each file's
                             runs kept apart: run 2 of the second file is
                             "2.2"; targets a file lacks have fewer runs
"""
import json
import operator
import os
import random
import statistics
import sys
import time


def creates(d, n):
    data = b"x" * 100
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
    t0 = time.perf_counter()
    for i in range(n):
        fd = os.open(os.path.join(d, "f%06d" % i), flags, 0o644)
        os.write(fd, data)
        os.close(fd)
    print("%.6f" % (time.perf_counter() - t0))


def gencproj(d, nfiles):
    os.makedirs(os.path.join(d, "src"), exist_ok=True)
    with open(os.path.join(d, "src", "common.h"), "w") as f:
        f.write("#pragma once\n#include <stddef.h>\n#include <stdint.h>\n")
        for i in range(nfiles):
            f.write("uint64_t mod%d_run(uint64_t seed);\n" % i)
    for i in range(nfiles):
        with open(os.path.join(d, "src", "mod%d.c" % i), "w") as f:
            f.write('#include "common.h"\n#include <string.h>\n#include <stdio.h>\n\n')
            for j in range(20):
                f.write(
                    "static uint64_t f%d(uint64_t x) {\n"
                    "        char buf[64];\n"
                    "        for (int k = 0; k < %d; k++) {\n"
                    "                x = x * 6364136223846793005ull + %d;\n"
                    "                snprintf(buf, sizeof(buf), \"%%llu\", (unsigned long long)x);\n"
                    "                x ^= strlen(buf);\n"
                    "        }\n"
                    "        return x;\n}\n\n" % (j, 3 + j, i * 31 + j))
            f.write("uint64_t mod%d_run(uint64_t seed) {\n" % i)
            f.write("        uint64_t x = seed;\n")
            for j in range(20):
                f.write("        x = f%d(x);\n" % j)
            f.write("        return x;\n}\n")
    with open(os.path.join(d, "src", "main.c"), "w") as f:
        f.write('#include "common.h"\n#include <stdio.h>\nint main(void) {\n        uint64_t x = 1;\n')
        for i in range(nfiles):
            f.write("        x = mod%d_run(x);\n" % i)
        f.write('        printf("%llu\\n", (unsigned long long)x);\n        return 0;\n}\n')
    with open(os.path.join(d, "Makefile"), "w") as f:
        objs = " ".join("src/mod%d.o" % i for i in range(nfiles))
        f.write("CC ?= cc\nCFLAGS = -O2 -g -Wall\nOBJS = src/main.o %s\n\n" % objs)
        f.write("prog: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n")
        f.write("src/%.o: src/%.c src/common.h\n\t$(CC) $(CFLAGS) -c -o $@ $<\n\n")
        f.write("clean:\n\trm -f prog $(OBJS)\n")


def fio(path, rw, what):
    with open(path) as f:
        text = f.read()
    # fio may print warnings before the JSON object
    job = json.loads(text[text.index("{"):])["jobs"][0][rw]
    if what == "bw":
        print("%.1f" % (job["bw_bytes"] / 1e6))
    else:
        print("%.0f" % job["iops"])


# workload -> (unit, higher is better)
UNITS = {
    "seq-write-1M": ("MB/s", True), "seq-read-1M": ("MB/s", True),
    "rand-read-4k": ("IOPS", True), "rand-write-4k": ("IOPS", True),
}
TARGETS = ["native", "tmpfs", "overlayfs", "overlayfs-wt", "floor", "floorsame", "ntfs-async", "ntfs-base", "ntfs"]
# Targets not in bench-fs.sh's default list: a column (and a ratio) only when run.
OPTIONAL = ("overlayfs-wt", "ntfs-async", "ntfs-base")


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return "%.0f" % v
    if v >= 1:
        return "%.2f" % v
    return "%.3f" % v


def print_table(head, rows):
    """Prints a Markdown table, each column as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))


def report(tsvs, reqs=None):
    """tsvs: the raw files; with more than one, run r of file i is "i.r"."""
    vals = {}
    byrun = {}  # (workload, target) -> {run: value}
    order = []
    for i, tsv in enumerate(tsvs, 1):
        with open(tsv) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 4:
                    continue
                target, workload, run, value = parts
                if len(tsvs) > 1:
                    run = "%d.%s" % (i, run)
                if workload not in order:
                    order.append(workload)
                vals.setdefault((workload, target), []).append(float(value))
                byrun.setdefault((workload, target), {})[run] = float(value)
    present = [t for t in TARGETS if any(k[1] == t for k in vals)]
    med = {k: statistics.median(v) for k, v in vals.items()}
    runs = max((len(v) for v in vals.values()), default=0)
    cols = [t for t in TARGETS if t not in OPTIONAL or t in present]
    pairs = [("ntfs", "floorsame"), ("ntfs", "floor"), ("ntfs", "overlayfs")] + \
        [("ntfs", t) for t in OPTIONAL if t in present] + [("ntfs", "native"), ("floor", "native")]
    head = ["workload", "unit"] + cols + ["%s/%s" % p for p in pairs]
    rows = []
    for w in order:
        unit, higher = UNITS.get(w, ("s", False))
        row = [w, unit + (" (higher=better)" if higher else " (lower=better)")]
        for t in cols:
            row.append(fmt(med.get((w, t))) if t in present else "skipped")

        def ratio(a, b):
            x, y = med.get((w, a)), med.get((w, b))
            return "%.2f" % (x / y) if x is not None and y else "-"
        row += [ratio(a, b) for a, b in pairs]
        rows.append(row)
    print_table(head, rows)
    print("\nmedian of %d run(s)%s; ratios are value/value (for s, < 1 is faster; "
          "for MB/s and IOPS, > 1 is faster)" % (runs, " from %d raw files" % len(tsvs) if len(tsvs) > 1 else ""))
    if "ntfs" in present:
        targets(byrun, order, present)
    if reqs:
        requests(reqs, order, present)


def requests(path, order, present):
    """Prints the FUSE requests each row sent each FUSE target (bench-fs.sh
    BENCH_REQS=1; lines TARGET ROW RUN OPCODE COUNT): the median over the
    runs of the total, then of each opcode that is at least 1% of it."""
    counts = {}  # (row, target, opcode) -> {run: count}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 5:
                continue
            target, row, run, op, n = parts
            counts.setdefault((row, target, op), {})[run] = int(n)
    fuse = [t for t in present if any(k[1] == t for k in counts)]
    if not fuse:
        print("\nFUSE requests: none counted")
        return
    runs = {}  # (row, target) -> the runs counted (a run with no request of an opcode has no line)
    for (row, target, op), v in counts.items():
        runs.setdefault((row, target), set()).update(v)

    def med(row, target, op):
        v = counts.get((row, target, op), {})
        return statistics.median([v.get(r, 0) for r in runs[(row, target)]])
    print("\nFUSE requests per row (kernel tracepoint; median of the runs):")
    head = ["workload"] + fuse
    rows = [[w] + ["%d" % med(w, t, "ALL") if (w, t) in runs else "-" for t in fuse]
            for w in order if any((w, t) in runs for t in fuse)]
    print_table(head, rows)
    print("\nby opcode (at least 1% of the row's requests):")
    for w in order:
        for t in fuse:
            if (w, t) not in runs:
                continue
            total = med(w, t, "ALL")
            ops = sorted(((med(w, t, op), op) for (r, tt, op) in counts if r == w and tt == t and op != "ALL"),
                         reverse=True)
            shown = ["%s %d" % (op, n) for n, op in ops if total and n >= total / 100]
            print("  %-16s %-11s %s" % (w, t, ", ".join(shown) if shown else "-"))


# Issue 3's targets: every timed (metadata, make) row within 1.1x of the
# floor with ntfs's options, every row faster than fuse-overlayfs, sequential
# read and write at least 0.8x native. A check is (workload, other target,
# comparison of ntfs/other, bound).
SEQ_ROWS = ("seq-write-1M", "seq-read-1M")
COMPARE = {"<=": operator.le, "<": operator.lt, ">": operator.gt, ">=": operator.ge}


def target_checks(order, present):
    floor = "floorsame" if "floorsame" in present else "floor" if "floor" in present else None
    for w in order:
        higher = UNITS.get(w, ("s", False))[1]
        if floor and not higher:
            yield w, floor, "<=", 1.1
        if "overlayfs" in present:
            yield w, "overlayfs", ">" if higher else "<", 1.0
        if "native" in present and w in SEQ_ROWS:
            yield w, "native", ">=", 0.8


BOOT_ROUNDS = 2000


def interval(a, b):
    """The 90% bootstrap interval of median(a)/median(b) over the runs both
    have (a, b: run -> value): the runs are drawn with replacement, a run's
    two figures together, since they saw the same minutes of the machine.
    The same seed every time, so the same raw file prints the same table.
    None with fewer than three such runs."""
    runs = sorted(k for k in a if b.get(k))
    if len(runs) < 3:
        return None
    rnd = random.Random(1)
    ratios = []
    for _ in range(BOOT_ROUNDS):
        pick = [rnd.choice(runs) for _ in runs]
        ratios.append(statistics.median(a[k] for k in pick) / statistics.median(b[k] for k in pick))
    ratios.sort()
    return ratios[int(0.05 * BOOT_ROUNDS)], ratios[int(0.95 * BOOT_ROUNDS) - 1]


def targets(byrun, order, present):
    """Prints each target, the ratio of the medians, in how many runs the
    ratio of that run's two figures met it (the targets take turns within a
    run, so a run's pair saw the same moment of the machine), and the 90%
    bootstrap interval of the ratio of the medians: "clear" when all of it
    lies on the verdict's side of the bound, "within noise" when it spans
    the bound, so that these runs cannot tell met from missed."""
    print("\ntargets: the ratio of the medians; runs: how many runs' own pairs met it; "
          "90%: the interval of the ratio over resampled runs")
    met_all = checks = clear_met = clear_missed = 0
    for w, other, op, bound in target_checks(order, present):
        ra, rb = byrun.get((w, "ntfs"), {}), byrun.get((w, other), {})
        if not ra or not rb or not statistics.median(rb.values()):
            continue
        r = statistics.median(ra.values()) / statistics.median(rb.values())
        pairs = [ra[k] / rb[k] for k in ra if rb.get(k)]  # runs both have
        good = sum(1 for q in pairs if COMPARE[op](round(q, 2), bound))
        met = COMPARE[op](round(r, 2), bound)
        checks += 1
        met_all += met
        iv = interval(ra, rb)
        if iv is None:
            band = "90% -          too few runs"
        else:
            ends = [COMPARE[op](round(x, 2), bound) for x in iv]
            clear = ends[0] == ends[1] == met
            clear_met += clear and met
            clear_missed += clear and not met
            band = "90%% %.2f-%.2f  %s" % (iv[0], iv[1], "clear" if clear else "within noise")
        print("  %-16s ntfs/%-9s %-2s %.1f  %5.2f  %-6s  runs %d/%-3d %s" %
              (w, other, op, bound, r, "met" if met else "MISSED", good, len(pairs), band))
    print("targets met: %d of %d (clear: %d met, %d missed; the rest within noise or too few runs)" %
          (met_all, checks, clear_met, clear_missed))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "creates" and len(argv) == 4:
        creates(argv[2], int(argv[3]))
    elif cmd == "gencproj" and len(argv) == 4:
        gencproj(argv[2], int(argv[3]))
    elif cmd == "fio" and len(argv) == 5:
        fio(argv[2], argv[3], argv[4])
    elif cmd == "report" and len(argv) in (3, 4):
        report([argv[2]], argv[3] if len(argv) == 4 else None)
    elif cmd == "pool" and len(argv) >= 4:
        report(argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
