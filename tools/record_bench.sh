#!/usr/bin/env bash
# What `xformctl record` costs: xformd, xform-load writing the 100k-entity
# scene with 1% moving at 60 Hz (docs/benchmarks.md's server workload), and
# a recorder of that world for SECONDS. Prints the recorder's CPU (from
# /proc), the file's bytes and bytes per update, and the compact stream's
# bytes per update from xform-load's own subscriber beside it. Not run in
# CI.
#
#   tools/record_bench.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
build=${1:-build}
seconds=${2:-60}
dir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

"$build/server/xformd" --listen=127.0.0.1:0 2> "$dir/xformd.log" &
pids+=($!)
until port=$(grep -oP 'xformd serving on \S+ \(port \K\d+' "$dir/xformd.log"); do sleep 0.1; done
server=127.0.0.1:$port
"$build/tools/xform-load" --server="$server" --world=bench --entities=100000 \
  --move=1000 --hz=60 --subscribers=1 --encoding=compact \
  --seconds=$((seconds + 30)) > "$dir/load.log" 2>&1 &
pids+=($!)
until "$build/tools/xformctl" --server="$server" worlds info bench 2> /dev/null |
  grep -q "100000 entities"; do sleep 0.2; done

"$build/tools/xformctl" --server="$server" --json record bench \
  --out="$dir/bench.mcap" --frames=$((seconds * 60)) > "$dir/record.log" 2>&1 &
recorder=$!
pids+=($recorder)
start=$(date +%s.%N)
ticks=0
# Its CPU, read from /proc while it runs (the last reading is at most a
# tenth of a second before it exits).
while read -r -a stat < "/proc/$recorder/stat" 2> /dev/null; do
  ticks=$((stat[13] + stat[14]))
  sleep 0.1
done
wait "$recorder" || true
end=$(date +%s.%N)
bytes=$(stat -c %s "$dir/bench.mcap")
transforms=$(grep -oP '"transforms":\K\d+' "$dir/record.log" || echo 0)
cat "$dir/record.log"
elapsed=$(echo "$end - $start" | bc)
echo "recorded $((seconds * 60)) frames in $elapsed s: $bytes bytes, $transforms transforms"
echo "recorder CPU: $(echo "scale=1; $ticks / $(getconf CLK_TCK) * 100 / $elapsed" | bc)% of a core;" \
  "$(echo "scale=2; $bytes / $transforms" | bc) bytes a transform"
echo "--- xform-load (its compact subscriber) ---"
tail -n 15 "$dir/load.log"
