#!/usr/bin/env bash
# run.sh — `make run`: start telemark-relay and the demo game, print the dashboard URL, and clean
# both up on Ctrl-C.
set -euo pipefail
build=${1:-build}
bin=$build/bin
if [ ! -x "$bin/telemark-relay" ] || [ ! -x "$bin/telemark-demo" ]; then
  echo "make run: telemark-relay and telemark-demo are not built yet in this version;"
  echo "make run will start the relay with the demo game and print the dashboard URL."
  exit 0
fi
"$bin/telemark-relay" --log-level info &
relay=$!
demo=""
cleanup() { [ -n "$demo" ] && kill "$demo" 2>/dev/null; kill "$relay" 2>/dev/null; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
sleep 0.5
"$bin/telemark-demo" --relay 127.0.0.1:7720 &
demo=$!
echo "telemark: dashboard at http://127.0.0.1:7721/  (Ctrl-C stops relay and demo)"
wait "$relay"
