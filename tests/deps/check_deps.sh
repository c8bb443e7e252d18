#!/usr/bin/env bash
# check_deps.sh — fails when a file the build or the tests use comes from a Debian package that
# scripts/deps.sh would not install on a brand-new machine. For each file below it asks dpkg which
# package owns it and checks that this package is in deps.sh's list or pulled in by it through
# Depends/Pre-Depends (never Recommends: deps.sh installs with --no-install-recommends).
#   check_deps.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: check_deps.sh SOURCE_DIR}
deps=$src/scripts/deps.sh

# what   group   how to find the file (a command printing a path)
needs=(
  "C compiler|run|echo /usr/bin/gcc"
  "C library headers|run|echo /usr/include/stdio.h"
  "C start files|run|gcc -print-file-name=Scrt1.o"
  "cmake|run|echo /usr/bin/cmake"
  "make|run|echo /usr/bin/make"
  "pkg-config|run|echo /usr/bin/pkg-config"
  "libuv headers|run|echo /usr/include/uv.h"
  "civetweb headers|run|echo /usr/include/civetweb.h"
  "jansson headers|run|echo /usr/include/jansson.h"
  "lz4 headers|run|echo /usr/include/lz4.h"
  "node|run|echo /usr/bin/node"
  "npm|run|echo /usr/bin/npm"
  "CA certificates for npm|run|echo /etc/ssl/certs/ca-certificates.crt"
  "C++ compiler|test|echo /usr/bin/g++"
  "C++ library headers|test|g++ -print-file-name=include/c++ >/dev/null; echo /usr/include/c++/\$(g++ -dumpversion)/vector"
  "cmocka|test|echo /usr/include/cmocka.h"
  "clang|test|echo /usr/bin/clang"
  "libFuzzer runtime|test|echo \$(clang -print-runtime-dir)/libclang_rt.fuzzer-x86_64.a"
  "sanitizer runtime|test|echo \$(clang -print-runtime-dir)/libclang_rt.asan-x86_64.a"
  "powerpc compiler|test|echo /usr/bin/powerpc-linux-gnu-gcc"
  "powerpc C library|test|powerpc-linux-gnu-gcc -print-file-name=Scrt1.o"
  "powerpc C headers|test|echo /usr/powerpc-linux-gnu/include/stdio.h"
  "mipsel compiler|test|echo /usr/bin/mipsel-linux-gnu-gcc"
  "mipsel C library|test|mipsel-linux-gnu-gcc -print-file-name=crti.o"
  "mipsel C headers|test|echo /usr/mipsel-linux-gnu/include/stdio.h"
  "qemu-ppc|test|echo /usr/bin/qemu-ppc"
  "qemu-mipsel|test|echo /usr/bin/qemu-mipsel"
  "MinGW-w64 compiler|test|echo /usr/bin/x86_64-w64-mingw32-gcc"
  "MinGW-w64 C library|test|x86_64-w64-mingw32-gcc -print-file-name=libws2_32.a"
  "wine64|test|echo /usr/lib/wine/wine64"
  "arm-none-eabi compiler|test|echo /usr/bin/arm-none-eabi-gcc"
  "newlib-nano for Cortex-M4|test|arm-none-eabi-gcc -mcpu=cortex-m4 -mthumb --specs=nano.specs -print-file-name=libc_nano.a"
  "riscv64-unknown-elf compiler|test|echo /usr/bin/riscv64-unknown-elf-gcc"
  "picolibc for rv32imac|test|echo /usr/lib/picolibc/riscv64-unknown-elf/lib/rv32imac/ilp32/libc.a"
  "qemu-system-arm|test|echo /usr/bin/qemu-system-arm"
  "qemu-system-riscv32|test|echo /usr/bin/qemu-system-riscv32"
  "chromium|test|echo /usr/bin/chromium"
  "python3|test|echo /usr/bin/python3"
  "clickhouse-server|test|echo /usr/sbin/clickhouse-server"
)

closure() { # the packages deps.sh installs for group $1, with everything they depend on
  # shellcheck disable=SC2046
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $(bash "$deps" --list "$1") 2>/dev/null |
    sed -n 's/^\([^ <][^ :]*\).*$/\1/p; s/^ *\(Pre\)\{0,1\}Depends: \([^ <:][^ :]*\).*$/\2/p' | sort -u
}
run_set=$(closure run)
test_set=$(closure test)

fail=0
for n in "${needs[@]}"; do
  IFS='|' read -r what group how <<<"$n"
  f=$(eval "$how" 2>/dev/null || true)
  if [ -z "$f" ] || [ ! -e "$f" ]; then
    echo "FAIL $what: '${f:-?}' is not on this machine (is its package in scripts/deps.sh?)"
    fail=1; continue
  fi
  # dpkg knows the path a package shipped: try the path as given, then with symlinks resolved.
  owner=$(dpkg -S "$f" 2>/dev/null | head -1 || true)
  [ -n "$owner" ] || owner=$(dpkg -S "$(realpath "$f")" 2>/dev/null | head -1 || true)
  if [ -z "$owner" ]; then
    # Files made at install time (alternatives, update-ca-certificates) belong to no package;
    # the link's target or the generating package is named instead.
    case "$f" in
      /etc/ssl/certs/ca-certificates.crt) owner="ca-certificates: $f" ;;
      *) echo "FAIL $what: no Debian package owns $f (installed by hand?)"; fail=1; continue ;;
    esac
  fi
  pkg=${owner%%:*}; pkg=${pkg%%,*}
  set_=$run_set; [ "$group" = test ] && set_=$test_set
  if grep -qx "$pkg" <<<"$set_"; then
    echo "ok   $what: $f from $pkg"
  else
    cmd="scripts/deps.sh"; [ "$group" = run ] && cmd="scripts/deps.sh run"
    echo "FAIL $what: $f comes from package '$pkg', which '$cmd' does not install (add it to ${group}_pkgs)"
    fail=1
  fi
done
if [ "$fail" = 0 ]; then echo "check_deps: every file comes from a package deps.sh installs"; fi
exit $fail
