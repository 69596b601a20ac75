#!/usr/bin/env bash
# The main job on the embedded default: a store in ./.store, the session
# "demo" mounted at ./.store/mnt, and a short demonstration of checkpoint,
# fork, rollback and a jailed command. Everything it starts it stops again,
# even when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh

export NTFS_STORE="$PWD/.store"
export NTFS_SOCKET="$NTFS_STORE/ntfsd.sock"
CTL=build/ctl/ntfs-ctl
MNT="$NTFS_STORE/mnt"
FORK_MNT="$NTFS_STORE/mnt-fork"
mkdir -p "$NTFS_STORE" "$MNT" "$FORK_MNT"

build/ctl/ntfsd --store "$NTFS_STORE" --socket "$NTFS_SOCKET" -f --log-level warn &
DAEMON=$!
cleanup() {
  "$CTL" umount "$FORK_MNT" >/dev/null 2>&1 || true
  "$CTL" umount "$MNT" >/dev/null 2>&1 || true
  kill -TERM "$DAEMON" 2>/dev/null || true
  wait "$DAEMON" 2>/dev/null || true
  fusermount3 -uz "$MNT" 2>/dev/null || true
  fusermount3 -uz "$FORK_MNT" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do "$CTL" status >/dev/null 2>&1 && break; sleep 0.1; done

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

step "a session, mounted as a real filesystem (auto-checkpoint after 1 s idle)"
"$CTL" session end demo >/dev/null 2>&1 || true
"$CTL" session end demo-fork >/dev/null 2>&1 || true
run "$CTL" session new demo
run "$CTL" mount demo "$MNT" --autocheckpoint 1

step "write a small project with ordinary tools, then checkpoint"
mkdir -p "$MNT/src"
printf 'int main(void) { return 0; }\n' > "$MNT/src/main.c"
echo "version 1" > "$MNT/README"
run "$CTL" checkpoint demo -m "first version"
run "$CTL" tag demo v1

step "fork it (constant time) and change the fork"
run "$CTL" fork demo demo-fork
run "$CTL" mount demo-fork "$FORK_MNT"
echo "fork's version" > "$FORK_MNT/README"
run cat "$FORK_MNT/README" "$MNT/README"

step "wreck the original ... and roll it back"
rm -rf "$MNT/src"
echo "oops" > "$MNT/README"
run ls "$MNT"
run "$CTL" diff demo v1
run "$CTL" rollback demo --to v1
run ls "$MNT"
run cat "$MNT/README"

step "run commands in the jail: /workspace is the session, no network, no credentials"
run "$CTL" exec demo -- 'cd /workspace && ls && cc -o hello src/main.c 2>/dev/null; echo built; id -u; ip -o link 2>/dev/null | wc -l'
run "$CTL" exec demo --tool bash_read -- 'touch /workspace/nope || echo "bash_read: the workspace is read-only"'

step "history"
run "$CTL" log demo
run "$CTL" fsck
echo
echo "demo done: store in $NTFS_STORE (delete it to start over)"
