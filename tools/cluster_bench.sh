#!/bin/bash
# The cluster figures of docs/cluster.md and docs/benchmarks.md ("The
# cluster"), on this machine, in one run: three nats-server processes on
# loopback in one JetStream cluster, then
#   1. xform-load's writer workload (100k scene, 5k set-locals a batch, one
#      subscriber) at 60 Hz and at the most one writer reaches, against
#      xformd in memory, with --data_dir (--fsync=everysec) and with
#      --cluster at 3 and 1 replicas, alternating over two rounds;
#   1b. the same with batches of 100 set-locals, R3;
#   2. a 1M-entity world created in one batch (about 53 MB, split into
#      messages of the 1 MB payload limit) through the cluster, then
#      another xformd recovering it: time to SERVING.
# Not run in CI (minutes).
#   tools/cluster_bench.sh [build dir, default build]
set -euo pipefail
build=${1:-build}
xformd=$build/server/xformd
load=$build/tools/xform-load
probe=$build/tools/xform_health_probe
port=50793
dir=$(mktemp -d)
pid=
nats_pids=()

cleanup() {
  [ -n "$pid" ] && kill -9 $pid 2>/dev/null || true
  for p in "${nats_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

for i in 0 1 2; do
  routes=""
  for j in 0 1 2; do
    [ $i = $j ] || routes="$routes nats-route://127.0.0.1:$((6391 + j))"
  done
  cat > "$dir/n$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:$((4391 + i))
jetstream { store_dir: "$dir/store$i" }
cluster { name: bench, listen: 127.0.0.1:$((6391 + i)), routes: [${routes// /, }] }
CONF
  sed -i 's/routes: \[, /routes: [/' "$dir/n$i.conf"
  nats-server -c "$dir/n$i.conf" > "$dir/n$i.log" 2>&1 &
  nats_pids+=($!)
done
cluster=nats://127.0.0.1:4391,nats://127.0.0.1:4392,nats://127.0.0.1:4393

start() {  # start LOG FLAGS...: xformd on $port, in the background
  local log=$1; shift
  $xformd --listen=127.0.0.1:$port "$@" > "$dir/$log" 2>&1 &
  pid=$!
}
stop() { kill -TERM $pid; wait $pid || true; pid=; }
until_serving() {  # seconds from now until health says SERVING
  local t0=$(date +%s.%N)
  until $probe --addr=127.0.0.1:$port --timeout_s=1 > /dev/null 2>&1; do
    sleep 0.01
  done
  echo "$(date +%s.%N) - $t0" | bc
}
start_as() {  # start_as KIND: xformd in memory, on files, or on the cluster
  case $1 in
    memory) start "$1.log" ;;
    files) rm -rf "$dir/data"; start "$1.log" --data_dir="$dir/data" ;;
    r3) start "$1.log" --cluster=$cluster --node_name=bench --cluster_replicas=3 ;;
    r1) start "$1.log" --cluster=$cluster --node_name=bench --cluster_replicas=1 ;;
  esac
  until_serving > /dev/null
}
run_load() {  # run_load LABEL FLAGS...
  local label=$1; shift
  $load --server=127.0.0.1:$port --server_pid=$pid --subscribers=1 "$@" \
    > "$dir/load.out" 2> "$dir/load.err" || { cat "$dir/load.err"; return 1; }
  echo "### $label"
  grep '^|' "$dir/load.out" | tail -n +1
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nats-server --version)"
echo; echo "## 1. Writes (100k scene, 5k set-locals a batch)"
writer="--entities=100000 --shape=scene --move=5000 --hz=60 --seconds=10"
for round in 1 2; do
  for kind in memory files r3 r1; do
    start_as $kind
    run_load "$kind, 60 Hz, round $round" $writer
    # Worlds of a cluster outlive xformd: each run's goes with it.
    $build/tools/xformctl --server=127.0.0.1:$port worlds delete load > /dev/null 2>&1 || true
    stop
    start_as $kind
    run_load "$kind, max rate, round $round" $writer --max_rate --seconds=8
    $build/tools/xformctl --server=127.0.0.1:$port worlds delete load > /dev/null 2>&1 || true
    stop
  done
done

echo; echo "## 1b. Small batches (100 set-locals) at 60 Hz, R3"
for round in 1 2; do
  start_as r3
  run_load "r3, 100 set-locals, round $round" --entities=100000 --shape=scene --move=100 --hz=60 --seconds=10
  $build/tools/xformctl --server=127.0.0.1:$port worlds delete load > /dev/null 2>&1 || true
  stop
done

echo; echo "## 2. A 1M-entity world through the cluster"
start_as r3
t0=$(date +%s.%N)
run_load "create 1M (one batch), then write 1 s" --entities=1000000 --shape=scene --move=5000 --seconds=1
echo "created and written in $(echo "$(date +%s.%N) - $t0" | bc) s"
kill -9 $pid; wait $pid 2>/dev/null || true; pid=
start recover.log --cluster=$cluster --node_name=recover
echo "another xformd: SERVING after $(until_serving) s"
grep -E "recovery|snapshot at log" "$dir/recover.log" | tail -3 || true
$build/tools/xformctl --server=127.0.0.1:$port worlds list
stop
