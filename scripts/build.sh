#!/usr/bin/env bash
# Configures and builds the normal tree (build/) and, with --asan, the
# ASan+UBSan tree (build-asan/); --release-only and --debug-only build
# build-release/ or build-debug/ alone (compiled only, to keep every build
# type warning-free). Reconfigures when meson files changed.
set -euo pipefail
cd "$(dirname "$0")/.."

setup() {
  local dir=$1; shift
  local log
  log=$(mktemp)
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; exit 1; }
  fi
  ninja -C "$dir" >"$log" 2>&1 || { cat "$log"; rm -f "$log"; exit 1; }
  rm -f "$log"
}

if [ "${1:-}" = "--release-only" ]; then
  # compiled only, never tested or installed from: -O3's own warnings
  # (maybe-uninitialized) are errors as in every build type
  setup build-release -Dbuildtype=release
  exit 0
fi
if [ "${1:-}" = "--debug-only" ]; then
  # compiled only: -O0 warns differently again (maybe-uninitialized on a
  # buffer passed before it is written)
  setup build-debug -Dbuildtype=debug
  exit 0
fi
setup build
if [ "${1:-}" = "--asan" ]; then
  setup build-asan -Db_sanitize=address,undefined -Db_lundef=false
fi
