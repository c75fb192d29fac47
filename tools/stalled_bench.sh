#!/usr/bin/env bash
# What subscribers that stop reading cost xformd and the subscribers that
# read: xform-load writes a scene world of ENTITIES at 60 Hz (5,000 moves a
# frame) to four subscribers for 15 s; 5 s into those (once the world is
# built and xform-load measures), WATCHERS `xformctl watch`
# join whose output nobody reads (so they stop reading the stream, until
# xformd cancels them after --write_timeout_ms). Prints xform-load's stream
# row: the readers' latency, and xformd's CPU a frame. Not run in CI.
#
#   bash tools/stalled_bench.sh XFORMD [WATCHERS] [ENTITIES] [BUILD_DIR]
#
# From the environment: MOVE (moves a frame, 5000), READERS (4), and
# WATCH_RATE_HZ: if set, the watchers read (their output is thrown away)
# at most that many messages a second (xformctl watch --rate_hz), rather
# than stop: what low-rate watchers of a busy world cost.
set -euo pipefail
cd "$(dirname "$0")/.."
xformd_binary=$1
watchers=${2:-32}
entities=${3:-50000}
build=${4:-build}
address=127.0.0.1:50077

"$xformd_binary" --listen="$address" 2>/dev/null &
xformd=$!
cleanup() { kill "$xformd" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT
sleep 1

report=$(mktemp)
"$build/tools/xform-load" --server="$address" --server_pid="$xformd" \
  --world=stalled --shape=scene --entities="$entities" --move="${MOVE:-5000}" \
  --subscribers="${READERS:-4}" --seconds=15 >"$report" 2>&1 &
load=$!
for ((k = 0; k < 600; ++k)); do
  grep -q '^\[stream' "$report" && break
  sleep 0.1
done
sleep 4
for ((k = 0; k < watchers; ++k)); do
  if [[ -n "${WATCH_RATE_HZ:-}" ]]; then
    ("$build/tools/xformctl" --server="$address" watch stalled \
      --rate_hz="$WATCH_RATE_HZ" >/dev/null) 2>/dev/null &
  else
    # The pipe fills and nobody reads it: the watcher stops reading.
    ("$build/tools/xformctl" --server="$address" watch stalled --verbose |
      sleep 40) 2>/dev/null &
  fi
done
wait "$load"
grep -E '^\| (mode|stream) ' "$report" | head -2
rm -f "$report"
