#!/bin/bash
# SPDX-License-Identifier: MIT
# bench-fs.sh — the same filesystem workloads, in one run, on several targets;
# prints the median of each figure and its ratios (issue 3, docs/bench-fs.md).
#
#   tools/bench-fs.sh [--quick] [--order]
#
# --order prints the order the runs would visit the targets in ("RUN TARGET"
# per line) and exits.
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
#              nocreate, 86,400 s timeouts, killpriv2, noautoinval, 1 MiB
#              read-ahead, 8 workers started at mount): the floor issue 3
#              holds ntfs to ("the same FUSE options")
#   ntfs-async the same with NTFS_DATA_WRITES=thread: data file writes queued
#              to a writer thread, not made in the request (fs/wswrite.c; not
#              in the default list)
#   ntfs-base  $NTFS_BASE_BUILD/fs/ntfs-fuse: another build (the commit before a
#              change, say), run beside ntfs in the same alternating runs, so
#              that a change is measured against what it replaces on the same
#              machine in the same minutes (not in the default list)
#   ntfs       $NTFS_BUILD/fs/ntfs-fuse --store BASE/store --create --session bench
#              (fresh store per run and phase; NTFS_FUSE_STATS=PATH keeps its
#              request counts as PATH.RUN.PHASE), or "$NTFS_MOUNT_CMD MNT" / "$NTFS_UMOUNT_CMD MNT"
#              when set; skipped when neither is available
# Environment: BENCH_RUNS (3; 1 with --quick), BENCH_DIR (scratch on ext4,
# default /var/tmp), BENCH_CACHE (where the tarball and C project are built
# once, default /var/tmp/bench-fs-cache), FUSEFLOOR (the binary; default
# $NTFS_BUILD/tools/fusefloor), BENCH_RAW (keep the raw TSV there; several
# kept so are reported together by tools/bench-fs-helper.py pool RAW RAW...),
# BENCH_META_ONLY=1 (only creates, untar, find/du, git, rm -rf: no fio, no make),
# BENCH_DATA_ONLY=1 (only the four fio rows), BENCH_REQS=1 (also count the
# FUSE requests each row sends the FUSE targets, by opcode, with perf and the
# kernel's fuse:fuse_request_send tracepoint: a table after the targets),
# BENCH_FUSE_WAKE_HERE=Y or N (sets the fuse module's wake_here parameter,
# where the kernel has it, for the whole run, every target alike, and puts
# it back on exit; unset: left as it is. docs/bench-fs.md, "Waking the
# FUSE server where the request was made"; the header says which was used).
# Runs alternate: run r visits the targets in an order rotated by r and,
# with three targets or more, every second run in reverse (rotation alone
# has each target follow the same one in every run, so what a mount leaves
# behind falls on one side; two targets alternate by rotation). Each
# target's fio rows and its metadata rows (and make) run on separate fresh
# mounts, with a sync between.
# Nothing here gates on absolute times.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
HELPER="/usr/bin/python3 $HERE/bench-fs-helper.py"
QUICK=0 ORDER_ONLY=0
for a in "$@"; do
        case $a in
        --quick) QUICK=1 ;;
        --order) ORDER_ONLY=1 ;;
        -h | --help) sed -n '3,54p' "$0"; exit 0 ;;
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
read -r -a TLIST <<<"$TARGETS"
run_order() { # "RUN TARGET" lines (header: "Runs alternate")
        local n=${#TLIST[@]} run i j
        for run in $(seq "$RUNS"); do
                for i in $(seq 0 $((n - 1))); do
                        j=$i
                        if [ "$n" -gt 2 ] && [ $((run % 2)) = 0 ]; then j=$((n - 1 - i)); fi
                        echo "$run ${TLIST[$(((j + run - 1) % n))]}"
                done
        done
}
if [ $ORDER_ONLY = 1 ]; then
        run_order
        exit 0
fi
NTFS_BUILD=${NTFS_BUILD:-$(cd "$HERE/.." && pwd)/build}
FUSEFLOOR=${FUSEFLOOR:-$NTFS_BUILD/tools/fusefloor}
NTFS_FUSE=${NTFS_FUSE:-$NTFS_BUILD/fs/ntfs-fuse}
CACHE=${BENCH_CACHE:-/var/tmp/bench-fs-cache}
SCRATCH=$(mktemp -d "${BENCH_DIR:-/var/tmp}/bench-fs.XXXXXX")
RAW=$SCRATCH/raw.tsv
REQS=$SCRATCH/reqs.tsv # BENCH_REQS=1: TARGET ROW RUN OPCODE COUNT
: >"$RAW"
: >"$REQS"

WAKE_PARAM=/sys/module/fuse/parameters/wake_here
WAKE_WAS= # the parameter's value before this run, put back on exit
MOUNTS=() # mountpoints to unmount on exit
TRACEFS_MOUNTED=0
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
        reqs_stop
        if [ -n "$WAKE_WAS" ]; then echo "$WAKE_WAS" >"$WAKE_PARAM" 2>/dev/null || true; fi
        if [ "$TRACEFS_MOUNTED" = 1 ]; then umount /sys/kernel/tracing 2>/dev/null || true; fi
        if [ -n "${BENCH_RAW:-}" ] && [ -s "$RAW" ]; then cp "$RAW" "$BENCH_RAW"; fi
        if [ -n "${BENCH_RAW:-}" ] && [ -s "$REQS" ]; then cp "$REQS" "$BENCH_RAW.reqs"; fi
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
# could not refuse an open), creates with MKNOD, answers with 86,400 s entry
# and attribute timeouts, has FUSE_HANDLE_KILLPRIV_V2 and raises its read-ahead
# to 1 MiB (fs/mount.c): the floor with exactly those options is the
# like-for-like measure of FUSE's cost.
FLOORSAME_OPTS=default_permissions,nocreate,timeout=86400,killpriv2,noautoinval,max_threads=8
FLOORSAME_READAHEAD_KB=1024
mount_floorsame() {
        local maj min
        mount_floor "$1" "$2" "$FLOORSAME_OPTS"
        read -r maj min < <(stat -c '%Hd %Ld' "$1")
        # best effort, as ntfs's own mount does (fs/mount.c): without it the
        # floor reads in the kernel's default read-ahead, which the report says
        if ! echo "$FLOORSAME_READAHEAD_KB" 2>/dev/null >"/sys/class/bdi/$maj:$min/read_ahead_kb"; then
                log "floorsame: could not set read_ahead_kb on bdi $maj:$min; left at $(cat "/sys/class/bdi/$maj:$min/read_ahead_kb" 2>/dev/null || echo unknown) KiB"
        fi
}
umount_floorsame() { umount_fuse "$1"; }
# BIN MNT BASE: an ntfs-fuse with a fresh store on ext4 (BASE); the
# caller's environment (NTFS_FUSE_STATS, NTFS_DATA_WRITES) reaches it
start_ntfs_fuse() {
        "$1" --store "$3/store" --create --session bench -f "$2" &
        PIDS+=($!)
        MOUNTS+=("$2")
        wait_mounted "$2" $!
}
NTFS_MNT=
mount_ntfs() {
        if [ -z "${NTFS_MOUNT_CMD:-}" ]; then
                start_ntfs_fuse "$NTFS_FUSE" "$1" "$2"
                return
        fi
        NTFS_MNT=$1
        MNT=$1 bash -c "$NTFS_MOUNT_CMD \"\$MNT\""
        wait_mounted "$1"
}
# ntfs with its data file writes queued to a writer thread
# (NTFS_DATA_WRITES=thread, fs/wswrite.c; not the default)
mount_ntfs-async() { NTFS_DATA_WRITES=thread start_ntfs_fuse "$NTFS_FUSE" "$1" "$2"; }
umount_ntfs-async() { umount_fuse "$1"; }
mount_ntfs-base() { start_ntfs_fuse "$NTFS_BASE_BUILD/fs/ntfs-fuse" "$1" "$2"; }
umount_ntfs-base() { umount_fuse "$1"; }
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

# FUSE request counts (BENCH_REQS=1). For each row on a FUSE target a perf
# stat is started with its counters disabled, every counter filtered to the
# mounted target's connection; it is enabled just before the row and
# disabled just after, through perf's control FIFO with acknowledgement, so
# its start and its report stay off the clock and the counts cover exactly
# the row. What counting costs the row itself: each request also runs the
# tracepoint's filters. FORGETs are queued apart from requests, not traced.
REQ_OPS="ALL LOOKUP:1 GETATTR:3 SETATTR:4 READLINK:5 SYMLINK:6 MKNOD:8 MKDIR:9
UNLINK:10 RMDIR:11 RENAME:12 LINK:13 OPEN:14 READ:15 WRITE:16 STATFS:17
RELEASE:18 FSYNC:20 SETXATTR:21 GETXATTR:22 LISTXATTR:23 FLUSH:25 OPENDIR:27
READDIR:28 RELEASEDIR:29 FSYNCDIR:30 ACCESS:34 CREATE:35 FALLOCATE:43
READDIRPLUS:44 RENAME2:45 LSEEK:46 STATX:52" # linux/fuse.h
REQ_MNT= # the mounted target (main loop)
REQ_PID= REQ_CTL= REQ_ACK=

reqs_ctl() { # enable|disable, and wait for perf's acknowledgement
        local ack
        echo "$1" >&"$REQ_CTL"
        if ! read -r -t 10 -u "$REQ_ACK" ack; then
                log "perf stat did not acknowledge '$1'"
                exit 1
        fi
}

reqs_begin() { # counts REQ_MNT's requests from now on, if asked and FUSE
        [ "${BENCH_REQS:-0}" = 1 ] && [ -n "$REQ_MNT" ] || return 0
        case $(stat -f -c %T "$REQ_MNT") in fuse | fuseblk) ;; *) return 0 ;; esac
        local maj min conn op f ev=()
        read -r maj min < <(stat -c '%Hd %Ld' "$REQ_MNT")
        conn=$(((maj << 20) | min)) # the kernel's dev_t, as the tracepoint has it
        for op in $REQ_OPS; do
                f="connection == $conn"
                [ "$op" = ALL ] || f="$f && opcode == ${op#*:}"
                ev+=(-e fuse:fuse_request_send --filter "$f")
        done
        rm -f "$SCRATCH/perf.ctl" "$SCRATCH/perf.ack" "$SCRATCH/perf.csv"
        mkfifo "$SCRATCH/perf.ctl" "$SCRATCH/perf.ack"
        perf stat -a -x, -o "$SCRATCH/perf.csv" -D -1 \
                --control "fifo:$SCRATCH/perf.ctl,$SCRATCH/perf.ack" "${ev[@]}" &
        REQ_PID=$!
        # opened read-write, which does not wait for perf to open its ends: a
        # perf that failed to start is then a missing acknowledgement, not a hang
        exec {REQ_CTL}<>"$SCRATCH/perf.ctl" {REQ_ACK}<>"$SCRATCH/perf.ack"
        reqs_ctl enable
}

reqs_stop() { # ends the perf stat, if one runs
        [ -n "$REQ_PID" ] || return 0
        exec {REQ_CTL}>&- {REQ_ACK}<&-
        kill -INT "$REQ_PID" 2>/dev/null || true
        wait "$REQ_PID" 2>/dev/null || true
        REQ_PID= REQ_CTL= REQ_ACK=
}

reqs_end() { # NAME: stops counting and records the row's counts
        [ -n "$REQ_PID" ] || return 0
        reqs_ctl disable
        reqs_stop
        # one CSV line per counter, in the order given: COUNT,,EVENT,...
        local ops=($REQ_OPS) counts=() i
        mapfile -t counts < <(awk -F, '$3 == "fuse:fuse_request_send" { print $1 }' "$SCRATCH/perf.csv")
        if [ "${#counts[@]}" != "${#ops[@]}" ]; then
                log "perf stat gave ${#counts[@]} counts for ${#ops[@]} counters"
                exit 1
        fi
        for i in "${!ops[@]}"; do
                [ "${counts[$i]}" = 0 ] || echo "$TARGET $1 $RUN ${ops[$i]%:*} ${counts[$i]}" >>"$REQS"
        done
}

timed() { # NAME CMD...: records the wall time of CMD
        local name=$1 t s
        shift
        reqs_begin
        t=$(now)
        "$@"
        s=$(since "$t")
        reqs_end "$name"
        record "$name" "$s"
}

run_fio() { # NAME RW UNIT EXTRA...
        local name=$1 rw=$2 what=$3 out=$SCRATCH/fio.json
        shift 3
        reqs_begin
        fio --name=bench --filename="$W/fio.dat" --fallocate=none --output-format=json \
                --output="$out" "$@" >/dev/null
        reqs_end "$name"
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
        local v
        reqs_begin
        v=$($HELPER creates "$W/creates" "$NCREATE")
        reqs_end creates-$NCREATE
        record creates-$NCREATE "$v"
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

for t in "${TLIST[@]}"; do
        case $t in
        native | tmpfs | overlayfs | overlayfs-wt | floor | floorsame) ;;
        ntfs | ntfs-async)
                if [ -z "${NTFS_MOUNT_CMD:-}" ] && [ ! -x "$NTFS_FUSE" ]; then
                        log "note: ntfs skipped (no $NTFS_FUSE; set NTFS_BUILD, or NTFS_MOUNT_CMD and NTFS_UMOUNT_CMD)"
                elif [ -n "${NTFS_MOUNT_CMD:-}" ] && [ -z "${NTFS_UMOUNT_CMD:-}" ]; then
                        log "NTFS_MOUNT_CMD needs NTFS_UMOUNT_CMD"; exit 2
                fi ;;
        ntfs-base)
                if [ ! -x "${NTFS_BASE_BUILD:-}/fs/ntfs-fuse" ]; then
                        log "ntfs-base needs NTFS_BASE_BUILD, a build directory with fs/ntfs-fuse"; exit 2
                fi ;;
        *) log "unknown target $t"; exit 2 ;;
        esac
done
if [ "${BENCH_REQS:-0}" = 1 ]; then
        # perf reads tracepoints through tracefs
        if [ ! -d /sys/kernel/tracing/events ] && mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null; then
                TRACEFS_MOUNTED=1 # unmounted on exit
        fi
        if ! command -v perf >/dev/null || [ ! -d /sys/kernel/tracing/events/fuse ]; then
                log "BENCH_REQS=1 needs perf (scripts/setup.sh installs linux-perf) and the kernel's fuse tracepoints"
                exit 2
        fi
fi
if [[ " $TARGETS " == *" floor"* ]] && [ ! -x "$FUSEFLOOR" ]; then
        log "no fusefloor at $FUSEFLOOR (set FUSEFLOOR or NTFS_BUILD)"
        exit 2
fi

case ${BENCH_FUSE_WAKE_HERE:-} in
'') ;;
Y | N)
        if [ ! -w "$WAKE_PARAM" ]; then
                log "BENCH_FUSE_WAKE_HERE needs $WAKE_PARAM (this kernel's fuse has no wake_here parameter, or not as root)"
                exit 2
        fi
        WAKE_WAS=$(cat "$WAKE_PARAM")
        echo "$BENCH_FUSE_WAKE_HERE" >"$WAKE_PARAM" ;;
*) log "BENCH_FUSE_WAKE_HERE must be Y or N, not $BENCH_FUSE_WAKE_HERE"; exit 2 ;;
esac

mapfile -t ORDER < <(run_order)
for entry in "${ORDER[@]}"; do
        RUN=${entry%% *} TARGET=${entry#* }
        if [ "$TARGET" = ntfs ] && [ -z "${NTFS_MOUNT_CMD:-}" ] && [ ! -x "$NTFS_FUSE" ]; then
                continue
        fi
        for PHASE in $(phases); do
                log "run $RUN: $TARGET, $PHASE"
                base=$SCRATCH/$TARGET-$RUN-$PHASE
                mkdir -p "$base/mnt"
                "mount_$TARGET" "$base/mnt" "$base"
                W=$base/mnt/work
                REQ_MNT=$base/mnt
                mkdir "$W"
                "phase_$PHASE"
                rm -rf "$W"
                REQ_MNT=
                "umount_$TARGET" "$base/mnt"
                rm -rf "$base"
                sync
        done
done

echo "# bench-fs: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, kernel $(uname -r)," \
        "tree $TREE_ENTRIES entries ($TREE_FILES files), runs $RUNS$([ $QUICK = 1 ] && echo ', QUICK')"
echo "# fuse wake_here: $(cat "$WAKE_PARAM" 2>/dev/null || echo 'not in this kernel')$([ -n "$WAKE_WAS" ] && echo " (set for this run; it was $WAKE_WAS)")"
echo "# floor: $FUSEFLOOR -o prealloc=$PREALLOC${FLOOR_OPTS:+,$FLOOR_OPTS}; floorsame: -o prealloc=$PREALLOC,$FLOORSAME_OPTS, read_ahead_kb $FLOORSAME_READAHEAD_KB"
report_args=("$RAW")
if [ "${BENCH_REQS:-0}" = 1 ]; then report_args+=("$REQS"); fi
$HELPER report "${report_args[@]}"
