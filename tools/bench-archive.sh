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
#           tar -cf OUT ... && sync -f OUT
#   import  tar -xf IN -C dir && sync -f dir  vs  ntfs-ctl import ws2 IN
# (ntfs-ctl import returns after the durable commit, hence tar's sync;
# ntfs-ctl export fsyncs FILE before it renames it into place, so the
# export is compared with both a plain tar -cf and a tar -cf + sync.)
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

echo "# baseline: GNU tar on the native directory"
tar -cf "$W/warm.tar" -C "$W/native" . && rm -f "$W/warm.tar"
t0=$(now); tar -cf "$W/base.tar" -C "$W/native" .; t1=$(now)
TAR_EXPORT=$(elapsed "$t0" "$t1")
rm -f "$W/base2.tar"
t0=$(now); tar -cf "$W/base2.tar" -C "$W/native" .; sync -f "$W/base2.tar"; t1=$(now)
TAR_EXPORT_SYNC=$(elapsed "$t0" "$t1")
rm -f "$W/base2.tar"
mkdir "$W/x1"
t0=$(now); tar -xf "$W/base.tar" -C "$W/x1"; sync -f "$W/x1"; t1=$(now)
TAR_IMPORT=$(elapsed "$t0" "$t1")
rm -rf "$W/x1"

echo "# ntfs: ntfsd on a store in $W/store"
mkdir "$W/store"
setsid "$NTFSD" --store "$W/store" --socket "$W/s" -f >"$W/ntfsd.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do "$CTL" --socket "$W/s" status >/dev/null 2>&1 && break; sleep 0.1; done
t0=$(now); "$CTL" --socket "$W/s" import ws "$W/base.tar" -q >/dev/null; t1=$(now)
NTFS_IMPORT=$(elapsed "$t0" "$t1")
"$CTL" --socket "$W/s" export ws "$W/warm.tar" -q >/dev/null && rm -f "$W/warm.tar"
t0=$(now); "$CTL" --socket "$W/s" export ws "$W/out.tar" -q >/dev/null; t1=$(now)
NTFS_EXPORT=$(elapsed "$t0" "$t1")
t0=$(now); "$CTL" --socket "$W/s" export ws "$W/out.tar.zst" -q >/dev/null; t1=$(now)
NTFS_EXPORT_ZST=$(elapsed "$t0" "$t1")

# the round trip is exact: same listing and content as GNU tar's view
if cmp -s <(tar --numeric-owner --full-time -tvf "$W/base.tar" | sort -k6) <(tar --numeric-owner --full-time -tvf "$W/out.tar" | sort -k6); then
        echo "# check: the export lists exactly as GNU tar's archive (names, modes, owners, sizes, times)"
else
        echo "# check: LISTINGS DIFFER"
fi

printf '\n%-34s %8s %9s\n' "operation ($FILES files, $MIB MiB)" "seconds" "MiB/s"
printf '%-34s %8.2f %9s\n' "tar -cf (native dir)" "$TAR_EXPORT" "$(mibs "$TAR_EXPORT")"
printf '%-34s %8.2f %9s\n' "tar -cf + sync (native dir)" "$TAR_EXPORT_SYNC" "$(mibs "$TAR_EXPORT_SYNC")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl export (tar, fsync'd)" "$NTFS_EXPORT" "$(mibs "$NTFS_EXPORT")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl export (tar.zst)" "$NTFS_EXPORT_ZST" "$(mibs "$NTFS_EXPORT_ZST")"
printf '%-34s %8.2f %9s\n' "tar -xf + sync (native dir)" "$TAR_IMPORT" "$(mibs "$TAR_IMPORT")"
printf '%-34s %8.2f %9s\n' "ntfs-ctl import (durable)" "$NTFS_IMPORT" "$(mibs "$NTFS_IMPORT")"
printf '\nratio export (ntfs/tar throughput): %.2fx (vs tar -cf + sync: %.2fx)\n' \
        "$(echo "$TAR_EXPORT / $NTFS_EXPORT" | bc -l)" "$(echo "$TAR_EXPORT_SYNC / $NTFS_EXPORT" | bc -l)"
printf 'ratio import (ntfs/tar throughput): %.2fx\n' "$(echo "$TAR_IMPORT / $NTFS_IMPORT" | bc -l)"
