#!/usr/bin/env bash
# The main job on an embedded default: a store in ./.store, a session mounted
# at ./.store/mnt, a short demonstration of checkpoint, fork, rollback and a
# jailed command. Everything it starts it stops again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/ctl/ntfs-demo "${@}"
