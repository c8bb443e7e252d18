#!/usr/bin/env bash
# deps.sh — installs, only if missing, the Debian packages (and the web's npm modules) that telemark
# needs, so a brand-new Debian 12 with only git and make gets everything from `make run` or
# `make test`. Idempotent and silent when everything is present. Run as root on Debian 12 or newer.
#
#   scripts/deps.sh run     what `make run` needs: the relay, the demo game, the dashboard's assets
#   scripts/deps.sh         (or `test`) everything: the above plus every test's tools
#   scripts/deps.sh --list [run|test]   print the package list and exit (tests/deps checks it)
#
# Packages are installed without Recommends, so every package a step needs is named here: a
# Recommends that happens to be on this machine is not on a newcomer's (the cross compilers'
# C libraries, libc6-dev-*-cross, are only Recommends of gcc-*-linux-gnu).
set -euo pipefail

run_pkgs=(
  cmake make gcc libc6-dev pkg-config                # build (gcc only Recommends libc6-dev)
  libuv1-dev libcivetweb-dev liblz4-dev              # relay dependencies (lz4 also for agents)
  libjansson-dev                                     # relay: JSON reader (API bodies, stream)
  nodejs npm ca-certificates                         # uPlot from npm, embedded into the relay
)
test_pkgs=(
  g++                                                # header compiles as C++
  libcmocka-dev                                      # unit tests
  clang libclang-rt-14-dev                           # libFuzzer and sanitizers
  gcc-powerpc-linux-gnu libc6-dev-powerpc-cross      # big-endian 32-bit tests under qemu-user
  gcc-mipsel-linux-gnu libc6-dev-mipsel-cross        # 32-bit MIPS tests under qemu-user
  qemu-user
  gcc-mingw-w64-x86-64 wine wine64                   # the Windows port, run end to end under wine
  gcc-arm-none-eabi libnewlib-arm-none-eabi         # bare-metal Cortex-M4 image (newlib-nano)
  gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf # bare-metal RV32 image
  qemu-system-arm qemu-system-misc                   # run both images end to end
  chromium                                           # dashboard browser tests (playwright-core)
  python3                                            # relay integration test driver
  clickhouse-server                                  # history sink tests (tests/clickhouse)
)

group=test list=0
for a in "$@"; do
  case "$a" in
    run|test) group=$a ;;
    --list) list=1 ;;
    *) echo "deps.sh: unknown argument '$a' (run, test, --list)" >&2; exit 2 ;;
  esac
done
pkgs=("${run_pkgs[@]}")
[ "$group" = test ] && pkgs+=("${test_pkgs[@]}")
if [ "$list" = 1 ]; then printf '%s\n' "${pkgs[@]}"; exit 0; fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${pkgs[@]}"; do
  case "$p" in
    # A Node.js from another source (nodesource, a newer Debian) may bring its own npm.
    npm) command -v npm >/dev/null 2>&1 || installed npm || missing+=(npm) ;;
    *) installed "$p" || missing+=("$p") ;;
  esac
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages: ${missing[*]}" >&2
    echo "deps.sh: run as root (or: sudo apt-get install --no-install-recommends ${missing[*]})" >&2
    exit 1
  fi
  echo "telemark: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -qq >/tmp/telemark-apt.log 2>&1; then
    tail -20 /tmp/telemark-apt.log >&2
    echo "deps.sh: apt-get update failed (full log: /tmp/telemark-apt.log)" >&2
    exit 1
  fi
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >>/tmp/telemark-apt.log 2>&1; then
    tail -20 /tmp/telemark-apt.log >&2
    echo "deps.sh: apt-get install failed (full log: /tmp/telemark-apt.log)" >&2
    exit 1
  fi
fi

# Web modules (uPlot; playwright-core for the browser tests) from npm, pinned by
# web/package-lock.json. Reinstalled when the lock file is newer than the installed tree.
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$here/web/package-lock.json" ]; then
  if [ ! -d "$here/web/node_modules" ] || [ "$here/web/package-lock.json" -nt "$here/web/node_modules/.package-lock.json" ]; then
    echo "telemark: installing the dashboard's npm modules (npm ci)"
    if ! (cd "$here/web" && npm ci --no-audit --no-fund --loglevel=error >/tmp/telemark-npm.log 2>&1); then
      tail -20 /tmp/telemark-npm.log >&2
      echo "deps.sh: npm ci failed in web/ (full log: /tmp/telemark-npm.log)" >&2
      exit 1
    fi
  fi
fi
