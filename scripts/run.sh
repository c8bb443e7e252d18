#!/usr/bin/env bash
# run.sh — `make run`: builds only what it runs (telemark-relay with the dashboard embedded, and the
# demo game) in its own build tree, starts both, prints the dashboard URL once, and runs until
# Ctrl-C, then stops both. One line per step; the build's own output goes to a log, shown only
# when something fails.
#   TMK_LISTEN  relay's UDP+TCP address (default 127.0.0.1:7720; port 0 = any free port)
#   TMK_HTTP    dashboard address       (default 127.0.0.1:7721; port 0 = any free port)
set -euo pipefail
build=${1:-build/run}
src=$(cd "$(dirname "$0")/.." && pwd)
listen=${TMK_LISTEN:-127.0.0.1:7720}
http=${TMK_HTTP:-127.0.0.1:7721}
jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p "$build"
blog=$build/build.log

step() { printf 'telemark: %s\n' "$*"; }
fail_with_log() { tail -40 "$blog" >&2; echo "make run: $1 failed (full log: $blog)" >&2; exit 1; }

# Only the relay and the demo: no tests, benchmarks, fuzzers or cross sub-builds.
if [ ! -f "$build/CMakeCache.txt" ]; then
  step "configuring $build (relay + demo only)"
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTMK_BUILD_TESTS=OFF \
    -DTMK_BUILD_BENCH=OFF -DTMK_FUZZ=OFF -DTMK_CROSS_TESTS=OFF >"$blog" 2>&1 || fail_with_log "configure"
fi
step "building telemark-relay and telemark-demo"
cmake --build "$build" -j"$jobs" --target telemark-relay telemark-demo >"$blog" 2>&1 || fail_with_log "build"
bin=$build/bin

relay="" demo="" tailer=""
cleanup() {
  trap - EXIT INT TERM
  for p in $tailer $demo $relay; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "telemark: relay and demo stopped."
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log=$build/relay.log
step "starting the relay (UDP+TCP $listen, dashboard $http)"
"$bin/telemark-relay" --listen "$listen" --http "$http" --log-level info >"$log" 2>&1 &
relay=$!
# Wait until the relay has bound its ports (it prints the real ones, so port 0 works) or died.
url="" agent_addr=""
for _ in $(seq 1 100); do
  if ! kill -0 "$relay" 2>/dev/null; then
    cat "$log" >&2
    relay=""
    echo "make run: telemark-relay exited (see above); set TMK_LISTEN / TMK_HTTP, e.g. TMK_HTTP=127.0.0.1:0 for any free port." >&2
    exit 1
  fi
  url=$(sed -n 's/^telemark-relay: dashboard at \(http[^ ]*\).*$/\1/p' "$log" | head -1)
  agent_addr=$(sed -n 's/^.*listening on \([^ ]*\) (udp+tcp).*$/\1/p' "$log" | head -1)
  [ -n "$url" ] && [ -n "$agent_addr" ] && break
  sleep 0.1
done
if [ -z "$url" ] || [ -z "$agent_addr" ]; then
  cat "$log" >&2; echo "make run: the relay did not report its addresses within 10 s" >&2; exit 1
fi
case "$agent_addr" in 0.0.0.0:*|\[::\]:*|:::*) agent_addr=127.0.0.1:${agent_addr##*:} ;; esac

step "starting the demo game (sending to $agent_addr)"
"$bin/telemark-demo" --relay "$agent_addr" >"$build/demo.log" 2>&1 &
demo=$!
echo
echo "  dashboard: $url"
echo
echo "telemark: relay log follows ($log); Ctrl-C stops the relay and the demo."
# Everything the relay logs from here on, but not the banner already shown above.
tail -n +1 -f "$log" --pid="$relay" | grep --line-buffered -v -e 'dashboard at' -e 'listening on' &
tailer=$!
wait "$relay" || true
