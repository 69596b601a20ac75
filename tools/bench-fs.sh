#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-fs.sh — the same filesystem workloads, in one run, on several targets;
# prints the median of each figure and its ratios (issue 3, docs/bench-fs.md).
#
#   tools/bench-fs.sh [--quick]
#
# Targets (BENCH_TARGETS, default "native tmpfs overlayfs floor floorsame ntfs"):
#   native     a fresh directory on the root ext4 for every run
#   tmpfs      a fresh tmpfs mount
#   overlayfs  fuse-overlayfs, lower/upper/work on ext4 (its default: the kernel's
#              writeback cache on)
#   overlayfs-wt  the same with writeback=0, write-through like ntfs and the
#              floor (not in the default list; docs/bench-fs.md, "make against
#              fuse-overlayfs")
#   floor      tools/fusefloor, the FUSE floor (FLOOR_OPTS adds -o options)
#   floorsame  the floor with the ntfs mount's FUSE options (default_permissions,
#              nocreate, 86,400 s timeouts): the floor issue 3 holds ntfs to
#              ("the same FUSE options")
#   ntfs-async the same with NTFS_ASYNC_DATA_WRITES=1: data file writes queued
#              to a writer thread, not made in the request (fs/wswrite.c; not
#              in the default list)
#   ntfs       $NTFS_BUILD/fs/ntfs-fuse --store BASE/store --create --session bench
#              (fresh store per run and phase; NTFS_FUSE_STATS=PATH keeps its
#              request counts as PATH.RUN.PHASE), or "$NTFS_MOUNT_CMD MNT" / "$NTFS_UMOUNT_CMD MNT"
#              when set; skipped when neither is available
# Environment: BENCH_RUNS (3; 1 with --quick), BENCH_DIR (scratch on ext4,
# default /var/tmp), BENCH_CACHE (where the tarball and C project are built
# once, default /var/tmp/bench-fs-cache), FUSEFLOOR (the binary; default
# $NTFS_BUILD/tools/fusefloor), BENCH_RAW (keep the raw TSV there),
# BENCH_META_ONLY=1 (only creates, untar, find/du, git, rm -rf: no fio, no make),
# BENCH_DATA_ONLY=1 (only the four fio rows).
# Runs alternate: run r visits the targets in an order rotated by r. Each
# target's fio rows and its metadata rows (and make) run on separate fresh
# mounts, with a sync between.
# Nothing here gates on absolute times.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
HELPER="/usr/bin/python3 $HERE/bench-fs-helper.py"
QUICK=0
for a in "$@"; do
        case $a in
        --quick) QUICK=1 ;;
        -h | --help) sed -n '3,31p' "$0"; exit 0 ;;
        *) echo "bench-fs: unknown argument $a" >&2; exit 2 ;;
        esac
done

if [ $QUICK = 1 ]; then
        RUNS=${BENCH_RUNS:-1} PREALLOC=128 SEQ=64M RANDSIZE=16M RANDTIME=2 NCREATE=1000 CFILES=8
        TREE_DIRS="usr/include/linux" TREE_MIN=0 TAR_NAME=tree-quick.tar
else
        RUNS=${BENCH_RUNS:-3} PREALLOC=1400 SEQ=1G RANDSIZE=1G RANDTIME=10 NCREATE=20000 CFILES=200
        TREE_DIRS="usr/include usr/share/doc usr/lib/python3.11 usr/lib/python3/dist-packages usr/share/perl usr/share/perl5"
        TREE_MIN=20000 TAR_NAME=tree-full.tar
fi
TARGETS=${BENCH_TARGETS:-native tmpfs overlayfs floor floorsame ntfs}
NTFS_BUILD=${NTFS_BUILD:-$(cd "$HERE/.." && pwd)/build}
FUSEFLOOR=${FUSEFLOOR:-$NTFS_BUILD/tools/fusefloor}
NTFS_FUSE=${NTFS_FUSE:-$NTFS_BUILD/fs/ntfs-fuse}
CACHE=${BENCH_CACHE:-/var/tmp/bench-fs-cache}
SCRATCH=$(mktemp -d "${BENCH_DIR:-/var/tmp}/bench-fs.XXXXXX")
RAW=$SCRATCH/raw.tsv
: >"$RAW"

MOUNTS=() # mountpoints to unmount on exit
PIDS=()   # daemons to stop on exit

log() { echo "bench-fs: $*" >&2; }

cleanup() {
        local m p
        trap - EXIT INT TERM
        if [ -n "$NTFS_MNT" ] && mountpoint -q "$NTFS_MNT"; then
                MNT=$NTFS_MNT bash -c "$NTFS_UMOUNT_CMD \"\$MNT\"" || true
        fi
        MOUNTS+=(${NTFS_MNT:+"$NTFS_MNT"})
        for m in "${MOUNTS[@]}"; do
                if mountpoint -q "$m" 2>/dev/null; then
                        fusermount3 -u "$m" 2>/dev/null || umount "$m" 2>/dev/null ||
                                umount -l "$m" 2>/dev/null || true
                fi
        done
        for p in "${PIDS[@]}"; do
                kill "$p" 2>/dev/null || true
                wait "$p" 2>/dev/null || true
        done
        if [ -n "${BENCH_RAW:-}" ] && [ -s "$RAW" ]; then cp "$RAW" "$BENCH_RAW"; fi
        rm -rf "$SCRATCH"
}
trap cleanup EXIT
trap 'log interrupted; exit 130' INT TERM

# ---- inputs, built once -----------------------------------------------------

mkdir -p "$CACHE"
TARBALL=$CACHE/$TAR_NAME
if [ ! -s "$TARBALL" ]; then
        log "building $TARBALL from /$TREE_DIRS"
        dirs=()
        for d in $TREE_DIRS; do [ -d "/$d" ] && dirs+=("$d"); done
        tar -C / -cf "$TARBALL.tmp" --exclude=__pycache__ "${dirs[@]}"
        n=$(tar -tvf "$TARBALL.tmp" | grep -c '^-') # regular files
        if [ "$n" -lt "$TREE_MIN" ]; then # top up with generated files
                pad=$SCRATCH/pad/usr/pad
                mkdir -p "$pad"
                i=0
                while [ $((n + i)) -lt "$TREE_MIN" ]; do
                        [ $((i % 100)) = 0 ] && mkdir -p "$pad/d$((i / 100))"
                        head -c $((512 + (i * 7919) % 16384)) /usr/include/stdio.h >"$pad/d$((i / 100))/f$i.h"
                        i=$((i + 1))
                done
                tar -C "$SCRATCH/pad" -rf "$TARBALL.tmp" usr/pad
                rm -rf "$SCRATCH/pad"
        fi
        mv "$TARBALL.tmp" "$TARBALL"
fi
CPROJ=$CACHE/cproj-$CFILES
if [ ! -f "$CPROJ/Makefile" ]; then
        rm -rf "$CPROJ"
        $HELPER gencproj "$CPROJ" "$CFILES"
fi
TREE_ENTRIES=$(tar -tf "$TARBALL" | wc -l)
TREE_FILES=$(tar -tvf "$TARBALL" | grep -c '^-')
TREE_BYTES=$(du -sb "$TARBALL" | cut -f1)
log "tree: $TREE_ENTRIES entries ($TREE_FILES files), $TREE_BYTES bytes of tar; C project: $CFILES files; runs: $RUNS"

# ---- targets ----------------------------------------------------------------

wait_mounted() { # MNT PID
        local i
        for i in $(seq 100); do
                mountpoint -q "$1" && return 0
                if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then break; fi
                sleep 0.1
        done
        log "mount at $1 did not come up"
        return 1
}

# mount_T MNT BASE: mounts target T at MNT (BASE is scratch space on ext4)
mount_native() { :; }
umount_native() { :; }
mount_tmpfs() { mount -t tmpfs -o size=16g bench-tmpfs "$1"; MOUNTS+=("$1"); }
umount_tmpfs() { umount "$1"; }
mount_overlayfs() { # MNT BASE [EXTRA_OPTS]
        mkdir -p "$2/lower" "$2/upper" "$2/work"
        fuse-overlayfs -f -o "lowerdir=$2/lower,upperdir=$2/upper,workdir=$2/work${3:+,$3}" "$1" &
        PIDS+=($!)
        MOUNTS+=("$1")
        wait_mounted "$1" $!
}
umount_fuse() { # the target's daemon is the last one started
        fusermount3 -u "$1"
        wait "${PIDS[-1]}" || true
        unset 'PIDS[-1]'
}
umount_overlayfs() { umount_fuse "$1"; }
mount_overlayfs-wt() { mount_overlayfs "$1" "$2" writeback=0; }
umount_overlayfs-wt() { umount_fuse "$1"; }
mount_floor() { # MNT BASE [EXTRA_OPTS]
        # prealloc: fault the data memory in before the clock starts (fusefloor.c)
        local extra=${3:-${FLOOR_OPTS:-}}
        local o=(-o "prealloc=$PREALLOC${extra:+,$extra}")
        "$FUSEFLOOR" "$1" -f "${o[@]}" &
        PIDS+=($!)
        MOUNTS+=("$1")
        wait_mounted "$1" $!
}
umount_floor() { umount_fuse "$1"; }
# The ntfs mount checks modes with default_permissions (no OPEN, so the daemon
# could not refuse an open), creates with MKNOD and answers with 86,400 s entry
# and attribute timeouts (fs/mount.c): the floor with exactly those options is
# the like-for-like measure of FUSE's cost.
FLOORSAME_OPTS=default_permissions,nocreate,timeout=86400
mount_floorsame() { mount_floor "$1" "$2" "$FLOORSAME_OPTS"; }
umount_floorsame() { umount_fuse "$1"; }
NTFS_MNT=
mount_ntfs() {
        if [ -z "${NTFS_MOUNT_CMD:-}" ]; then
                # built-in: ntfs-fuse with a fresh store on ext4 (BASE);
                # NTFS_FUSE_STATS (request counts) reaches it through the env
                "$NTFS_FUSE" --store "$2/store" --create --session bench -f "$1" &
                PIDS+=($!)
                MOUNTS+=("$1")
                wait_mounted "$1" $!
                return
        fi
        NTFS_MNT=$1
        MNT=$1 bash -c "$NTFS_MOUNT_CMD \"\$MNT\""
        wait_mounted "$1"
}
# ntfs with its data file writes queued to a writer thread
# (NTFS_ASYNC_DATA_WRITES=1, fs/wswrite.c; off by default)
mount_ntfs-async() {
        NTFS_ASYNC_DATA_WRITES=1 "$NTFS_FUSE" --store "$2/store" --create --session bench -f "$1" &
        PIDS+=($!)
        MOUNTS+=("$1")
        wait_mounted "$1" $!
}
umount_ntfs-async() { umount_fuse "$1"; }
umount_ntfs() {
        if [ -z "${NTFS_MOUNT_CMD:-}" ]; then
                umount_fuse "$1"
                if [ -n "${NTFS_FUSE_STATS:-}" ] && [ -f "$NTFS_FUSE_STATS" ]; then
                        cp "$NTFS_FUSE_STATS" "$NTFS_FUSE_STATS.$RUN.$PHASE"
                fi
                return
        fi
        MNT=$1 bash -c "$NTFS_UMOUNT_CMD \"\$MNT\""
        NTFS_MNT=
}

# ---- workloads --------------------------------------------------------------

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.4f", b - a }'; }
record() { echo "$TARGET $1 $RUN $2" >>"$RAW"; log "  $TARGET run $RUN: $1 = $2"; }

timed() { # NAME CMD...: records the wall time of CMD
        local name=$1 t
        shift
        t=$(now)
        "$@"
        record "$name" "$(since "$t")"
}

run_fio() { # NAME RW UNIT EXTRA...
        local name=$1 rw=$2 what=$3 out=$SCRATCH/fio.json
        shift 3
        fio --name=bench --filename="$W/fio.dat" --fallocate=none --output-format=json \
                --output="$out" "$@" >/dev/null
        record "$name" "$($HELPER fio "$out" "$rw" "$what")"
}

git_q() { git -c user.name=bench -c user.email=bench@localhost -c gc.auto=0 "$@"; }

# The workloads run in two phases, each in a fresh directory on a fresh
# mount, after a sync: "data" (the fio rows) and "meta" (the metadata rows,
# then make unless BENCH_META_ONLY=1). What the data phase leaves for the
# disk to do (write-back of 1 GiB files, discards of their freed blocks: on
# ntfs the data file's punched slots) is done before the metadata rows start,
# for every target alike.
phases() {
        if [ "${BENCH_META_ONLY:-0}" != 1 ]; then echo data; fi
        if [ "${BENCH_DATA_ONLY:-0}" != 1 ]; then echo meta; fi
}

phase_meta() { # W: the fresh directory to work in
        meta_workloads
        if [ "${BENCH_META_ONLY:-0}" = 1 ]; then return; fi
        cp -a "$CPROJ" "$W/cproj"
        timed make-j2 make -s -j2 -C "$W/cproj" >/dev/null
        rm -rf "$W/cproj"
}

phase_data() { # the fio rows
        run_fio seq-write-1M write bw --rw=write --bs=1M --size=$SEQ --end_fsync=1
        run_fio seq-read-1M read bw --rw=read --bs=1M --size=$SEQ
        rm -f "$W/fio.dat"
        run_fio rand-read-4k read iops --rw=randread --bs=4k --size=$RANDSIZE \
                --time_based --runtime=$RANDTIME
        run_fio rand-write-4k write iops --rw=randwrite --bs=4k --size=$RANDSIZE \
                --time_based --runtime=$RANDTIME --end_fsync=1
        rm -f "$W/fio.dat"
}

meta_workloads() { # the metadata rows only (BENCH_META_ONLY=1: no fio, no make)
        mkdir "$W/creates"
        record creates-$NCREATE "$($HELPER creates "$W/creates" "$NCREATE")"
        rm -rf "$W/creates"

        mkdir "$W/tree"
        timed untar tar -xf "$TARBALL" -C "$W/tree"
        find "$W/tree" >/dev/null
        timed find-warm find "$W/tree" -name '*.zzz'
        du -s "$W/tree" >/dev/null
        timed du-warm du -s "$W/tree" >/dev/null
        git_q -C "$W/tree" init -q
        timed git-add-commit sh -c 'git -c user.name=bench -c user.email=bench@localhost \
                -c gc.auto=0 -C "$1" add -A && git -c user.name=bench \
                -c user.email=bench@localhost -c gc.auto=0 -C "$1" commit -q -m bench' sh "$W/tree"
        git_q -C "$W/tree" status --porcelain >/dev/null
        timed git-status-warm git_q -C "$W/tree" status --porcelain >/dev/null
        timed rm-rf rm -rf "$W/tree"
}

# ---- main -------------------------------------------------------------------

read -r -a TLIST <<<"$TARGETS"
for t in "${TLIST[@]}"; do
        case $t in
        native | tmpfs | overlayfs | overlayfs-wt | floor | floorsame) ;;
        ntfs | ntfs-async)
                if [ -z "${NTFS_MOUNT_CMD:-}" ] && [ ! -x "$NTFS_FUSE" ]; then
                        log "note: ntfs skipped (no $NTFS_FUSE; set NTFS_BUILD, or NTFS_MOUNT_CMD and NTFS_UMOUNT_CMD)"
                elif [ -n "${NTFS_MOUNT_CMD:-}" ] && [ -z "${NTFS_UMOUNT_CMD:-}" ]; then
                        log "NTFS_MOUNT_CMD needs NTFS_UMOUNT_CMD"; exit 2
                fi ;;
        *) log "unknown target $t"; exit 2 ;;
        esac
done
if [[ " $TARGETS " == *" floor"* ]] && [ ! -x "$FUSEFLOOR" ]; then
        log "no fusefloor at $FUSEFLOOR (set FUSEFLOOR or NTFS_BUILD)"
        exit 2
fi

n=${#TLIST[@]}
for RUN in $(seq "$RUNS"); do
        for i in $(seq 0 $((n - 1))); do
                TARGET=${TLIST[$(((i + RUN - 1) % n))]}
                if [ "$TARGET" = ntfs ] && [ -z "${NTFS_MOUNT_CMD:-}" ] && [ ! -x "$NTFS_FUSE" ]; then
                        continue
                fi
                for PHASE in $(phases); do
                        log "run $RUN: $TARGET, $PHASE"
                        base=$SCRATCH/$TARGET-$RUN-$PHASE
                        mkdir -p "$base/mnt"
                        "mount_$TARGET" "$base/mnt" "$base"
                        W=$base/mnt/work
                        mkdir "$W"
                        "phase_$PHASE"
                        rm -rf "$W"
                        "umount_$TARGET" "$base/mnt"
                        rm -rf "$base"
                        sync
                done
        done
done

echo "# bench-fs: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r)," \
        "tree $TREE_ENTRIES entries ($TREE_FILES files), runs $RUNS$([ $QUICK = 1 ] && echo ', QUICK')"
echo "# floor: $FUSEFLOOR -o prealloc=$PREALLOC${FLOOR_OPTS:+,$FLOOR_OPTS}; floorsame: -o prealloc=$PREALLOC,$FLOORSAME_OPTS"
$HELPER report "$RAW"
