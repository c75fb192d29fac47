#!/bin/bash
# The durability figures of docs/benchmarks.md ("Durability"), on this
# machine, in one run (so ratios compare like with like):
#   1. write throughput and Apply latency in memory and with each --fsync
#      policy: xform-load's writer workload (100k scene, 5k set-locals a
#      frame) at 60 Hz, then at the highest rate one writer reaches (three
#      rounds);
#   2. restart time of a 1M-entity world from a snapshot alone, and from a
#      snapshot plus 10 s of journal (5k set-locals at 60 Hz);
#   3. the stall a snapshot of that 1M world causes a writer and a 60 Hz
#      subscriber: snapshots every 3 s against none.
# Not run in CI (minutes, and GBs of disk).
#   tools/durability_bench.sh [build dir, default build] [data dir]
set -euo pipefail
build=${1:-build}
data=${2:-/tmp/xform-durability-bench}
xformd=$build/server/xformd
load=$build/tools/xform-load
probe=$build/tools/xform_health_probe
port=50791
out=$(mktemp -d)
pid=

start() {  # start LOG FLAGS...: xformd on $port, in the background
  local log=$1; shift
  $xformd --listen=127.0.0.1:$port "$@" > "$out/$log" 2>&1 &
  pid=$!
}
stop() { kill -TERM $pid; wait $pid || true; }
# Seconds from now until health says SERVING.
until_serving() {
  local t0=$(date +%s.%N)
  until $probe --addr=127.0.0.1:$port --timeout_s=1 > /dev/null 2>&1; do
    sleep 0.01
  done
  echo "$(date +%s.%N) - $t0" | bc
}
run_load() {  # run_load LABEL FLAGS...: xform-load against the server
  local label=$1; shift
  $load --server=127.0.0.1:$port --server_pid=$pid --subscribers=1 "$@" \
    > "$out/$label.out" 2> "$out/$label.err"
  echo "### $label"
  grep '^|' "$out/$label.out"
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
echo "# data dir on: $(df -h "$(dirname "$data")" | tail -1 | awk '{print $1}')"

echo; echo "## 1. Write throughput (100k scene, 5k set-locals a batch)"
writer="--entities=100000 --shape=scene --move=5000 --hz=60 --seconds=10"
start_policy() {  # start_policy POLICY: xformd in memory or with --fsync
  rm -rf "$data"
  if [ "$1" = memory ]; then start "$1.log"; else
    start "$1.log" --data_dir="$data" --fsync="$1"; fi
  until_serving > /dev/null
}
for policy in memory no everysec always; do
  start_policy $policy
  run_load "$policy, 60 Hz" $writer
  stop
done
# The most one writer reaches varies a lot from run to run here: three
# rounds, the policies alternating.
for round in 1 2 3; do
  for policy in memory no everysec always; do
    start_policy $policy
    run_load "$policy, max rate, round $round" $writer --max_rate --seconds=8
    stop
  done
done

echo; echo "## 2. Restart time, 1M entities"
rm -rf "$data"
start build.log --data_dir="$data" --snapshot_every=100GiB
until_serving > /dev/null
run_load "build 1M" --entities=1000000 --shape=scene --move=5000 --seconds=1
stop  # A clean shutdown: the world is one snapshot, its journal empty.
ls -l "$data"/worlds/w_load
start restart1.log --data_dir="$data" --snapshot_every=100GiB
echo "from a snapshot alone: SERVING after $(until_serving) s; $(grep 'recovery:.*world(s)' "$out/restart1.log")"
run_load "10 s of journal" --entities=1000000 --shape=scene --move=5000 \
  --seconds=10 --keep_world
kill -9 $pid; wait $pid || true
ls -l "$data"/worlds/w_load
start restart2.log --data_dir="$data" --snapshot_every=100GiB
echo "from a snapshot and 10 s of journal: SERVING after $(until_serving) s; $(grep 'recovery:.*world(s)' "$out/restart2.log")"
stop

echo; echo "## 3. A snapshot's stall, 1M entities, writer and subscriber at 60 Hz"
for every in 100GiB 3s; do
  start stall-$every.log --data_dir="$data" --snapshot_every=$every
  until_serving > /dev/null
  run_load "snapshot_every=$every" --entities=1000000 --shape=scene \
    --move=5000 --seconds=20 --keep_world
  stop
  grep 'snapshot of' "$out/stall-$every.log" | sed 's/^/    /' || true
done
rm -rf "$data" "$out"
