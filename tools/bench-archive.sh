#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-archive.sh — export and import throughput of ntfs archives against GNU
# tar on a native directory, measured in the same run (docs/archive.md).
#
#   tools/bench-archive.sh [BUILD_DIR]        default build dir: build
#   BENCH_FILES=20000 BENCH_MIB=1024 BENCH_DIR=/var/tmp tools/bench-archive.sh
#
# The workspace: BENCH_FILES files (default 20,000) of incompressible data,
# BENCH_MIB MiB in all (default 1024), in 200 directories, sizes spread from
# 1/8 to 15/8 of the mean. Baselines on the same disk, caches warm for both:
#   export  tar -cf OUT -C native .          vs  ntfs-ctl export ws OUT
#           tar -cf OUT ... && sync OUT   (fsync of OUT)
#   import  tar -xf IN -C dir && sync -f dir  vs  ntfs-ctl import ws IN
# (ntfs-ctl import returns after the durable commit, hence tar's syncfs;
# ntfs-ctl export fsyncs FILE before it renames it into place, so the
# export is compared with both a plain tar -cf and a tar -cf + fsync.)
# BENCH_REPS runs (default 3), tar and ntfs alternating, each ntfs import
# into a fresh store; the medians are printed.
# Prints each time, the MiB/s and the ratio ntfs/tar throughput (>= 1 is as
# fast as tar). Not a test: it never fails on a slow machine.
set -euo pipefail

BUILD=${1:-build}
[ -d "$BUILD" ] || { echo "no build dir $BUILD" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd)
NTFSD=$BUILD/ctl/ntfsd
CTL=$BUILD/ctl/ntfs-ctl
[ -x "$NTFSD" ] && [ -x "$CTL" ] || { echo "ntfsd/ntfs-ctl not built in $BUILD" >&2; exit 2; }
FILES=${BENCH_FILES:-20000}
MIB=${BENCH_MIB:-1024}
BASE=${BENCH_DIR:-/var/tmp}

W=$(mktemp -d "$BASE/ntfs-bench-archive-XXXXXX")
DPID=
cleanup() {
        if [ -n "$DPID" ]; then
                kill -TERM -- "-$DPID" 2>/dev/null || true
                for _ in $(seq 50); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
                kill -KILL -- "-$DPID" 2>/dev/null || true
        fi
        { grep -o " $W/[^ ]*" /proc/self/mounts 2>/dev/null || true; } | while read -r m; do fusermount3 -uz "$m" || true; done
        rm -rf "$W"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc -l; }
mibs() { echo "scale=1; $MIB / $1" | bc -l; }

echo "# making $FILES files, $MIB MiB, in $W/native"
python3 - "$W/native" "$FILES" "$MIB" <<'EOF'
import os, random, sys
root, files, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(42)
mean = mib * 1024 * 1024 // files
sizes = [rnd.randint(mean // 8, mean * 15 // 8) for _ in range(files)]
scale = mib * 1024 * 1024 / sum(sizes)
sizes = [max(0, int(s * scale)) for s in sizes]
blob = os.urandom(4 << 20)
for i, s in enumerate(sizes):
    d = os.path.join(root, f"d{i % 200:03d}")
    os.makedirs(d, exist_ok=True)
    off = rnd.randrange(0, len(blob) - s) if s < len(blob) else 0
    with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
        # distinct content per file (a counter in front of a window of random bytes)
        f.write(i.to_bytes(8, "little") + blob[off:off + max(0, s - 8)])
EOF
sync

REPS=${BENCH_REPS:-3}
start_ntfsd() { # STORE: a fresh ntfsd on a fresh store (imports must not dedup against a previous run's)
        mkdir "$1"
        setsid "$NTFSD" --store "$1" --socket "$1/s" -f >"$1.log" 2>&1 &
        DPID=$!
        for _ in $(seq 100); do "$CTL" --socket "$1/s" status >/dev/null 2>&1 && return 0; sleep 0.1; done
        echo "ntfsd did not start (see $1.log)" >&2
        exit 1
}
stop_ntfsd() {
        kill -TERM -- "-$DPID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
        DPID=
}
declare -A T
timeit() { # KEY CMD...: appends the wall time of CMD to T[KEY]
        local key=$1 t0 t1
        shift
        t0=$(now)
        "$@"
        t1=$(now)
        T[$key]+="$(elapsed "$t0" "$t1") "
}
tar_sync() { tar -cf "$1" -C "$W/native" . && sync "$1"; } # fsync of that one file
untar_sync() { mkdir "$1" && tar -xf "$W/base.tar" -C "$1" && sync -f "$1"; }

echo "# baseline: GNU tar on the native directory; ntfs: ntfsd on a fresh store in $W per run"
echo "# $REPS runs, tar and ntfs alternating (this kind of machine's disk is noisy); medians below"
tar -cf "$W/base.tar" -C "$W/native" . # also warms the native tree's cache
for r in $(seq "$REPS"); do
        rm -f "$W/b.tar" "$W/out.tar" "$W/out.tar.zst"
        timeit tar_export tar -cf "$W/b.tar" -C "$W/native" .
        rm -f "$W/b.tar"
        timeit tar_export_sync tar_sync "$W/b.tar"
        rm -f "$W/b.tar"
        timeit tar_import untar_sync "$W/x$r"
        rm -rf "$W/x$r"
        mkdir "$W/y$r"
        timeit tar_import_nosync tar -xf "$W/base.tar" -C "$W/y$r"
        rm -rf "$W/y$r"
        start_ntfsd "$W/store$r"
        timeit ntfs_import "$CTL" --socket "$W/store$r/s" import ws "$W/base.tar" -q
        timeit ntfs_export "$CTL" --socket "$W/store$r/s" export ws "$W/out.tar" -q
        rm -f "$W/out.tar"
        timeit ntfs_export_nosync "$CTL" --socket "$W/store$r/s" export ws "$W/out.tar" --no-sync -q
        timeit ntfs_export_zst "$CTL" --socket "$W/store$r/s" export ws "$W/out.tar.zst" -q
        stop_ntfsd
        [ "$r" = "$REPS" ] || rm -rf "$W/store$r"
done >/dev/null
median() { printf '%s\n' ${T[$1]} | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
TAR_EXPORT=$(median tar_export)
TAR_EXPORT_SYNC=$(median tar_export_sync)
NTFS_EXPORT=$(median ntfs_export)
NTFS_EXPORT_NOSYNC=$(median ntfs_export_nosync)
NTFS_EXPORT_ZST=$(median ntfs_export_zst)
TAR_IMPORT=$(median tar_import)
TAR_IMPORT_NOSYNC=$(median tar_import_nosync)
NTFS_IMPORT=$(median ntfs_import)

# the round trip is exact: same listing and content as GNU tar's view
if cmp -s <(tar --numeric-owner --full-time -tvf "$W/base.tar" | sort -k6) <(tar --numeric-owner --full-time -tvf "$W/out.tar" | sort -k6); then
        echo "# check: the export lists exactly as GNU tar's archive (names, modes, owners, sizes, times)"
else
        echo "# check: LISTINGS DIFFER"
fi

printf '\n%-34s %8s %9s\n' "operation ($FILES files, $MIB MiB)" "median s" "MiB/s"
printf '%-34s %8.2f %9s\n' "tar -cf (native dir)" "$TAR_EXPORT" "$(mibs "$TAR_EXPORT")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl export --no-sync (tar)" "$NTFS_EXPORT_NOSYNC" "$(mibs "$NTFS_EXPORT_NOSYNC")"
printf '%-34s %8.2f %9s\n' "tar -cf + fsync (native dir)" "$TAR_EXPORT_SYNC" "$(mibs "$TAR_EXPORT_SYNC")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl export (tar, fsync'd)" "$NTFS_EXPORT" "$(mibs "$NTFS_EXPORT")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl export (tar.zst)" "$NTFS_EXPORT_ZST" "$(mibs "$NTFS_EXPORT_ZST")"
printf '%-34s %8.2f %9s\n' "tar -xf, no sync (native dir)" "$TAR_IMPORT_NOSYNC" "$(mibs "$TAR_IMPORT_NOSYNC")"
printf '%-34s %8.2f %9s\n' "tar -xf + syncfs (native dir)" "$TAR_IMPORT" "$(mibs "$TAR_IMPORT")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl import (durable)" "$NTFS_IMPORT" "$(mibs "$NTFS_IMPORT")"
printf '\nratio export, both without fsync (ntfs --no-sync / tar -cf): %.2fx\n' \
        "$(echo "$TAR_EXPORT / $NTFS_EXPORT_NOSYNC" | bc -l)"
printf 'ratio export, both fsync the archive (ntfs / tar -cf + fsync): %.2fx\n' \
        "$(echo "$TAR_EXPORT_SYNC / $NTFS_EXPORT" | bc -l)"
printf 'ratio import, both durable (ntfs / tar -xf + syncfs): %.2fx\n' "$(echo "$TAR_IMPORT / $NTFS_IMPORT" | bc -l)"
printf '(import against tar -xf without any sync, which is not durable: %.2fx)\n' "$(echo "$TAR_IMPORT_NOSYNC / $NTFS_IMPORT" | bc -l)"
printf '(throughput ratios: >= 1 is as fast as tar)\n'
