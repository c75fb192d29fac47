#!/usr/bin/env bash
# A soak of one xformd under everything at once, for --seconds (default 600):
#   - churn: xform-load writing a 100k-entity scene world at 60 Hz with four
#     healthy subscribers and one that stalls, reporting their latency;
#   - stalled subscribers: three `xformctl watch` whose output nobody reads
#     (one rate-limited), four rate-limited ones that read, two at 1 Hz that
#     read, and four compact ones of a subtree each that read;
#   - deep chains, join storms, fuzzed, oversized and expanding requests, a
#     hog of connections from one address: tools/soak_hostile.py.
# Samples xformd's RSS every 10 s, and at the end prints the healthy
# subscribers' p99 (xform-load's report), the statuses the hostile client
# saw, and whether any was INTERNAL or UNKNOWN; fails on one of those, or on
# a world the hostile client left behind. Not run in CI.
#
#   bash tools/soak.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seconds=${2:-600}
port=50071
address=127.0.0.1:$port
out=$(mktemp -d)
echo "soak: ${seconds} s against xformd on $address; logs in $out"

if ! /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  sudo=""
  if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get install -y -q --no-install-recommends python3-grpcio >/dev/null
fi

# 2,000 connections at most, 1,000 from one address: soak_hostile.py's hog
# of 1,500 from 127.0.0.2 must leave room for everyone on 127.0.0.1.
"$build/server/xformd" --listen="$address" --max_connections=2000 \
  2>"$out/xformd.log" &
xformd=$!
cleanup() { kill "$xformd" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT
sleep 1

"$build/tools/xform-load" --server="$address" --server_pid="$xformd" \
  --world=soak --entities=100000 --move=1000 --subscribers=4 --stall_s=2 \
  --seconds="$seconds" >"$out/load.txt" 2>&1 &
load=$!
sleep 5  # The world exists once xform-load has built it.

stalled=()
for k in 1 2 3; do
  # The pipe fills and nobody reads it: the subscriber stops reading. The
  # third is rate-limited, so it keeps frames until due, and then more than
  # it may.
  rate=0
  if [[ $k -eq 3 ]]; then rate=10; fi
  ("$build/tools/xformctl" --server="$address" watch soak --verbose \
    --rate_hz="$rate" | sleep "$seconds") 2>/dev/null &
  stalled+=($!)
done
# Dashboards that read: rate-limited, sharing their folds.
for k in 1 2 3 4; do
  "$build/tools/xformctl" --server="$address" watch soak --rate_hz=10 \
    >/dev/null 2>&1 &
done
# Status pages at 1 Hz, raw and compact: each is owed more than its kept
# frames hold, and is sent what changed from the published state when due.
for encoding in raw compact; do
  "$build/tools/xformctl" --server="$address" watch soak --rate_hz=1 \
    --encoding="$encoding" >/dev/null 2>&1 &
done
# Tools that read one subtree each, compact: enough of them that a frame's
# moves are found by walking their bits against the moved slots.
for k in 1 2 3 4; do
  "$build/tools/xformctl" --server="$address" watch soak --subtrees=1 \
    --encoding=compact >/dev/null 2>&1 &
done

/usr/bin/python3 tools/soak_hostile.py --server="$address" --world=soak \
  --seconds="$((seconds - 10))" >"$out/hostile.txt" 2>&1 &
hostile=$!

echo "time_s rss_mb"
start=$(date +%s)
while kill -0 "$load" 2>/dev/null; do
  echo "$(( $(date +%s) - start )) $(awk '/VmRSS/ { printf "%.0f", $2 / 1024 }' \
    /proc/$xformd/status)"
  sleep 10
done
hostile_status=0
wait "$hostile" || hostile_status=$?
echo "--- xform-load (healthy subscribers' latency):"
cat "$out/load.txt" | tail -20
echo "--- hostile client:"
tail -3 "$out/hostile.txt"
echo "--- xformd warnings and errors:"
grep -E ' [WE] ' "$out/xformd.log" | cut -d' ' -f2- | sed 's/[0-9][0-9.]*/N/g' |
  sort | uniq -c | sort -rn | head -10 || true
kill -0 "$xformd" && echo "xformd: still up"
# The hostile client deletes every world it makes (the deep chains, what its
# fuzz creates): any but the load's left behind would fill --max_worlds in a
# long soak.
left=$("$build/tools/xformctl" --server="$address" worlds list |
  awk '$1 != "soak" { print $1 }')
if [[ -n "$left" ]]; then
  echo "worlds left behind:" $left
  hostile_status=1
fi
exit "$hostile_status"
