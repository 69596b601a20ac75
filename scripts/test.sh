#!/usr/bin/env bash
# The test command: sets up a fresh Debian 12 machine, builds the normal and
# the sanitizer trees, runs the C unit tests in both, then the integration
# suite (real ntfsd, real FUSE mounts) against the normal and the sanitizer
# builds, then builds the Debian package and runs it in a clean root. Exits
# non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh --asan

echo "== release build (-O3, warnings are errors there too)"
scripts/build.sh --release-only
echo "== debug build (-O0, the same)"
scripts/build.sh --debug-only

echo "== unit tests (normal build)"
meson test -C build --print-errorlogs --suite unit
echo "== unit tests (ASan+UBSan build)"
meson test -C build-asan --print-errorlogs --suite unit

for b in build build-asan; do
  echo "== integration tests ($b)"
  NTFS_BUILD="$PWD/$b" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration \
    --ignore=tests/integration/test_package.py
done

# Builds its own package (not from build/), so once: the .deb installed
# into a clean Debian root and run there (docs/install.md).
echo "== Debian package"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration/test_package.py
