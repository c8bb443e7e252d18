#!/usr/bin/env bash
# run.sh — `make run` (after deps and build): starts telemark-relay and the demo game, prints the
# dashboard URL, and runs until Ctrl-C, then stops both. TMK_LISTEN / TMK_HTTP override the
# relay's addresses (default 127.0.0.1:7720 and 127.0.0.1:7721).
set -euo pipefail
build=${1:-build}
bin=$build/bin
listen=${TMK_LISTEN:-127.0.0.1:7720}
http=${TMK_HTTP:-127.0.0.1:7721}
for b in telemark-relay telemark-demo; do
  if [ ! -x "$bin/$b" ]; then echo "make run: $bin/$b is missing (the build did not produce it)" >&2; exit 1; fi
done

relay="" demo=""
cleanup() {
  trap - EXIT INT TERM
  [ -n "$demo" ] && kill "$demo" 2>/dev/null || true
  [ -n "$relay" ] && kill "$relay" 2>/dev/null || true
  wait 2>/dev/null || true
  echo "telemark: relay and demo stopped."
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log=$(mktemp -t telemark-relay.XXXXXX.log)
"$bin/telemark-relay" --listen "$listen" --http "$http" --log-level info >"$log" 2>&1 &
relay=$!
# wait until the relay answers (or died: ports in use, bad flags)
url=""
for _ in $(seq 1 100); do
  if ! kill -0 "$relay" 2>/dev/null; then
    cat "$log" >&2
    echo "make run: telemark-relay exited (see above); set TMK_LISTEN / TMK_HTTP for other ports." >&2
    relay=""
    exit 1
  fi
  url=$(grep -o 'dashboard at http://[^ ]*' "$log" | head -1 | sed 's/^dashboard at //' || true)
  if [ -n "$url" ]; then break; fi
  sleep 0.1
done
[ -n "$url" ] || url="http://$http/"
"$bin/telemark-demo" --relay "$listen" >/dev/null 2>&1 &
demo=$!
echo "telemark: relay on $listen (log: $log), demo game running."
echo "telemark: dashboard at $url"
echo "telemark: Ctrl-C stops both."
tail -n +1 -f "$log" --pid="$relay" &
wait "$relay" || true
