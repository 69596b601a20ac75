#!/usr/bin/env bash
# Installs every Debian package ntfs needs to build, test and benchmark.
# Idempotent: does nothing when everything is present. Needs root (or sudo).
set -euo pipefail

PKGS=(
  # build
  build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
  # libraries (docs/dependencies.md says why each)
  libfuse3-dev fuse3 liblmdb-dev lmdb-utils libsqlite3-dev sqlite3
  libarchive-dev libcurl4-openssl-dev libseccomp-dev libssl-dev
  libjansson-dev libhttp-parser-dev
  # tests: real programs on the mount, and the test runner
  python3 python3-pytest python3-venv git rsync tar gzip zstd xz-utils curl
  attr acl make iproute2 procps psmisc util-linux
  # benchmarks' baselines
  fio fuse-overlayfs bubblewrap
  linux-perf  # tools/bench-fs.sh BENCH_REQS=1: FUSE requests per row (tracepoints)
  ceph-mon ceph-osd radosgw  # remotes: a real S3 gateway for tests/integration/test_remote.py
  # run_python's ui artifacts, inside the jail (docs/python.md)
  python3-pandas python3-matplotlib python3-pil python3-plotly
  # the Debian package (debian/, docs/install.md): its build, lintian, a clean
  # root from the archive to install it in (tests/integration/test_package.py);
  # man pages, unit checks and zsh for tests/integration/test_dist.py
  debhelper dpkg-dev fakeroot lintian mmdebstrap man-db systemd zsh
  # ntfs-ctl web's browser tests (tests/integration/test_web.py): a real
  # headless browser, driven by puppeteer-core from npm (below)
  chromium nodejs
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# FUSE needs its device; load the module where it is not built in.
if [ ! -e /dev/fuse ]; then
  modprobe fuse 2>/dev/null || true
fi

# puppeteer-core for the browser tests, at a pinned version, in a directory
# of its own (the test reads $NTFS_WEB_NODE, default this one); only the
# library: it drives Debian's chromium, it downloads no browser.
PUPPETEER_VERSION=25.19.0
WEB_NODE=${NTFS_WEB_NODE:-/usr/local/lib/ntfs-web-test}
if [ "$(cat "$WEB_NODE/node_modules/puppeteer-core/package.json" 2>/dev/null |
        sed -n 's/^  "version": "\(.*\)",$/\1/p')" != "$PUPPETEER_VERSION" ]; then
  echo "setup: installing puppeteer-core@$PUPPETEER_VERSION into $WEB_NODE"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || [ -w "$(dirname "$WEB_NODE")" ] || SUDO=sudo
  # Debian's nodejs comes without npm; NodeSource's (which conflicts with
  # Debian's npm package) brings its own
  command -v npm > /dev/null || $SUDO apt-get install -y -qq --no-install-recommends npm
  $SUDO mkdir -p "$WEB_NODE"
  $SUDO npm install --prefix "$WEB_NODE" --save-exact --no-audit --no-fund \
    "puppeteer-core@$PUPPETEER_VERSION"
fi
