#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-fs-options.sh — what each FUSE option of the floor is worth: the
# metadata workloads of bench-fs.sh (creates, untar, warm find/du, rm -rf)
# on the floor only, once per option set,
# alternating the variants run by run; prints the median and the request
# counts per tar'd file (from fusefloor -o stats).
#
#   tools/bench-fs-options.sh            (BENCH_RUNS=3, FUSEFLOOR, BENCH_CACHE as bench-fs.sh)
# VARIANTS overrides the list (one -o string per word; "-" = defaults);
# BENCH_TARBALL and BENCH_CREATES shrink the work (request counts per file
# hardly depend on the size).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
NTFS_BUILD=${NTFS_BUILD:-$(cd "$HERE/.." && pwd)/build}
FUSEFLOOR=${FUSEFLOOR:-$NTFS_BUILD/tools/fusefloor}
TARBALL=${BENCH_TARBALL:-${BENCH_CACHE:-/var/tmp/bench-fs-cache}/tree-full.tar}
NCREATE=${BENCH_CREATES:-20000}
RUNS=${BENCH_RUNS:-3}
VARIANTS=${VARIANTS:-"- noxattr writeback open opendir flush nocreate nopatch default_permissions timeout=0 timeout=86400"}
[ -s "$TARBALL" ] || { echo "run tools/bench-fs.sh first (it builds $TARBALL)" >&2; exit 2; }
SCRATCH=$(mktemp -d "${BENCH_DIR:-/var/tmp}/bench-fs-opt.XXXXXX")
MNT=$SCRATCH/mnt
PID=
mkdir "$MNT"
cleanup() {
        trap - EXIT INT TERM
        mountpoint -q "$MNT" && { fusermount3 -u "$MNT" || umount -l "$MNT"; }
        [ -n "$PID" ] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null; }
        rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t() { local s=$EPOCHREALTIME; "$@" >/dev/null; awk -v a="$s" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.3f", b-a}'; }
FILES=$(tar -tvf "$TARBALL" | grep -c '^-')
read -r -a VL <<<"$VARIANTS"
for run in $(seq "$RUNS"); do
        for i in $(seq 0 $((${#VL[@]} - 1))); do
                v=${VL[$(((i + run - 1) % ${#VL[@]}))]}
                o="stats=$SCRATCH/stats"
                [ "$v" != - ] && o="$o,$v"
                "$FUSEFLOOR" "$MNT" -f -o "$o" &
                PID=$!
                for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
                mkdir "$MNT/c" "$MNT/t"
                cr=$(/usr/bin/python3 "$HERE/bench-fs-helper.py" creates "$MNT/c" "$NCREATE")
                ut=$(t tar -xf "$TARBALL" -C "$MNT/t")
                fusermount3 -u "$MNT"; wait "$PID"; PID=
                req=$(awk -v f="$FILES" -v n="$NCREATE" '$1!="FORGET"{s+=$2} END{printf "%.1f", s/(f+n)}' "$SCRATCH/stats")
                "$FUSEFLOOR" "$MNT" -f -o "$o" &
                PID=$!
                for _ in $(seq 100); do mountpoint -q "$MNT" && break; sleep 0.1; done
                mkdir "$MNT/t"
                tar -xf "$TARBALL" -C "$MNT/t"
                find "$MNT/t" >/dev/null
                fi=$(t find "$MNT/t" -name '*.zzz')
                du -s "$MNT/t" >/dev/null
                du=$(t du -s "$MNT/t")
                rm=$(t rm -rf "$MNT/t")
                fusermount3 -u "$MNT"; wait "$PID"; PID=
                echo "$v creates $cr" ; echo "$v untar $ut"; echo "$v req/file $req"
                echo "$v find $fi"; echo "$v du $du"
                echo "$v rm-rf $rm"
                echo "bench-fs-options: run $run $v done" >&2
        done
done >"$SCRATCH/raw"
/usr/bin/python3 - "$SCRATCH/raw" "$FILES" "$NCREATE" <<'PY'
import statistics, sys
vals, vs, ws = {}, [], []
for line in open(sys.argv[1]):
    v, w, x = line.split()
    vals.setdefault((v, w), []).append(float(x))
    if v not in vs: vs.append(v)
    if w not in ws: ws.append(w)
print("| floor -o | " + " | ".join(ws) + " |")
print("|---" * (len(ws) + 1) + "|")
for v in vs:
    print("| %s | " % ("(defaults)" if v == "-" else v) +
          " | ".join("%.3g" % statistics.median(vals[(v, w)]) for w in ws) + " |")
print("\nseconds (median of %d); req/file = FUSE requests (not FORGET) per file for "
      "%s creates + untar of %s files" % (len(vals[(vs[0], ws[0])]), sys.argv[3], sys.argv[2]))
PY
