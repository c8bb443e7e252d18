#!/usr/bin/env bash
# deps.sh — installs, only if missing, the Debian packages (and web npm modules) that the build
# and the tests need. Idempotent and quiet when everything is present. Run as root on Debian 12.
set -euo pipefail

pkgs=(
  cmake make gcc g++ pkg-config            # build
  libuv1-dev libcivetweb-dev liblz4-dev    # relay dependencies (lz4 also for agents)
  libcmocka-dev                            # unit tests
  clang libclang-rt-14-dev                 # libFuzzer and sanitizers
  gcc-powerpc-linux-gnu gcc-mipsel-linux-gnu qemu-user   # big-endian / 32-bit tests
  chromium nodejs                          # dashboard browser tests
  python3                                  # relay integration test driver
  gcc-mingw-w64-x86-64 wine wine64         # Windows port, run under wine (tests/win32)
)

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# nodejs from another source may provide npm itself; only ask Debian for npm when it is absent.
if ! command -v npm >/dev/null 2>&1; then missing+=(npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages: ${missing[*]}" >&2
    echo "deps.sh: run as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Web dependencies (uPlot, playwright-core) from npm, pinned by web/package-lock.json.
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$here/web/package-lock.json" ]; then
  if [ ! -d "$here/web/node_modules" ] || [ "$here/web/package-lock.json" -nt "$here/web/node_modules/.package-lock.json" ]; then
    echo "deps.sh: installing web modules (npm ci)"
    (cd "$here/web" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
fi
