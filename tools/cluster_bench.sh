#!/usr/bin/env bash
# The cluster's figures (docs/benchmarks.md, "The cluster"; docs/cluster.md)
# on this machine, in one run: three nats-server processes on loopback in
# one JetStream cluster (file storage) and three xformd nodes on them, at
# their default lease (2 s), each node's own NATS server first.
#   1. Writes, R3, one writer on node0 (the world's writer): 100 and 5,000
#      set-locals a batch at 60 Hz (the 100k scene); acknowledgement
#      p50/p99 and frames written a second, beside single-node xformd
#      (in memory) taking turns with it.
#   2. Replica lag: the same 5,000-move workload, 2 subscribers on the
#      writer node, then 2 on a replica, alternating; each frame's age when
#      it reaches the subscriber, from the writer closing it (replicas
#      publish with the writer's close time).
#   3. Fan-out: 0, 1, 16 and 64 subscribers spread over the three nodes
#      (subscriber s on node (s+1) mod 3: node1 first); bytes through NATS
#      per frame (every server's out_bytes, from its /varz) and node1's CPU
#      per frame; then single-node xformd with the same subscribers.
#   4. Owner failover: `kills` times (default 20), a writer at full rate on
#      a world of node0's, then kill -9 of node0 (or node0 and its NATS
#      server: a machine); the longest acknowledgement is the time writes
#      stopped. The node (and NATS server) start again between kills.
# Not run in CI (about 25 minutes).
#   tools/cluster_bench.sh [build dir, default build] [kills, default 20]
# XFORM_BENCH_SECTIONS="3 4" runs only those sections,
# XFORM_BENCH_KILL_KINDS=machine only those kills.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kills=${2:-20}
sections=${XFORM_BENCH_SECTIONS:-1 2 3 4}
section() { [[ " $sections " == *" $1 "* ]]; }
xformd=$build/server/xformd
load=$build/tools/xform-load
xformctl=$build/tools/xformctl
py=/usr/bin/python3
dir=$(mktemp -d)
base=$((20000 + RANDOM % 20000))
nats_pids=(0 0 0)
node_pids=(0 0 0)
single_pid=0

cleanup() {
  for p in "${node_pids[@]}" "${nats_pids[@]}" "$single_pid"; do
    [[ $p != 0 ]] && kill -9 "$p" 2> /dev/null || true
  done
  rm -rf "$dir"
}
trap cleanup EXIT

nats_port() { echo $((base + $1)); }
route_port() { echo $((base + 10 + $1)); }
http_port() { echo $((base + 20 + $1)); }
node_port() { echo $((base + 30 + $1)); }
single_port=$((base + 40))

start_nats() {  # start_nats I
  local i=$1 routes=()
  for j in 0 1 2; do
    [[ $i == "$j" ]] || routes+=("nats-route://127.0.0.1:$(route_port "$j")")
  done
  cat > "$dir/nats$i.conf" << CONF
server_name: n$i
listen: 127.0.0.1:$(nats_port "$i")
http: 127.0.0.1:$(http_port "$i")
jetstream { store_dir: "$dir/store$i" }
cluster { name: bench, listen: 127.0.0.1:$(route_port "$i"), routes: [$(IFS=,; echo "${routes[*]}")] }
CONF
  nats-server -c "$dir/nats$i.conf" >> "$dir/nats$i.log" 2>&1 &
  nats_pids[i]=$!
}
wait_nats() {
  for i in 0 1 2; do
    until curl -sf "http://127.0.0.1:$(http_port "$i")/healthz?js-enabled-only=true" > /dev/null; do
      sleep 0.1
    done
  done
}
start_node() {  # start_node I: node I, its own NATS server first
  local i=$1 urls=()
  for k in 0 1 2; do urls+=("nats://127.0.0.1:$(nats_port $(((i + k) % 3)))"); done
  "$xformd" --listen="127.0.0.1:$(node_port "$i")" --node_name="node$i" \
    --cluster="$(IFS=,; echo "${urls[*]}")" >> "$dir/node$i.log" 2>&1 &
  node_pids[i]=$!
}
serving() {  # serving ADDRESS: waits until it answers
  until "$xformctl" --server="$1" worlds list > /dev/null 2>&1; do sleep 0.05; done
}
address() { echo "127.0.0.1:$(node_port "$1")"; }
nats_out_bytes() {  # every NATS server's out_bytes, summed
  local sum=0
  for i in 0 1 2; do
    sum=$((sum + $(curl -sf "http://127.0.0.1:$(http_port "$i")/varz" |
      $py -c 'import json,sys; print(json.load(sys.stdin)["out_bytes"])')))
  done
  echo $sum
}
# field JSON EXPR: a figure of xform-load's JSON report (`m`: its first
# mode's result).
field() {
  $py -c "import json,sys; r=json.load(open('$1')); m=r['modes'][0]; print($2)"
}
workload=(--shape=scene --entities=100000 --hz=60)

for i in 0 1 2; do start_nats "$i"; done
wait_nats
for i in 0 1 2; do start_node "$i"; done
for i in 0 1 2; do serving "$(address "$i")"; done
"$xformd" --listen="127.0.0.1:$single_port" > "$dir/single.log" 2>&1 &
single_pid=$!
serving "127.0.0.1:$single_port"

echo "# $(date -u +%FT%TZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nats-server --version)"

if section 1; then
echo
echo "## 1. Writes: acknowledgement, one writer, 60 Hz (100k scene)"
echo "| batch | where | ack p50 | ack p99 | frames/s written |"
echo "|---|---|---|---|---|"
for round in 1 2; do
  for move in 100 5000; do
    for where in cluster single; do
      if [[ $where == cluster ]]; then server=$(address 0); else server=127.0.0.1:$single_port; fi
      "$load" --server="$server" "${workload[@]}" --move=$move --subscribers=1 \
        --seconds=10 --json > "$dir/w.json" 2> "$dir/w.err" || { tail "$dir/w.err"; exit 1; }
      echo "| $move (round $round) | $where | $(field "$dir/w.json" "'%.2f ms' % m['apply_p50_ms']") | $(field "$dir/w.json" "'%.2f ms' % m['apply_p99_ms']") | $(field "$dir/w.json" "'%.1f' % m['frames_per_s']") |"
    done
  done
done

fi

if section 2; then
echo
echo "## 2. Replica lag: a frame's age at its subscriber, writer on node0 (5,000 moves a frame)"
echo "| subscribers on | latency p50 | p99 | max |"
echo "|---|---|---|---|"
for round in 1 2 3; do
  for on in 0 1; do
    "$load" --server="$(address 0)" --subscriber_server="$(address $on)" "${workload[@]}" \
      --move=5000 --subscribers=2 --seconds=10 --json > "$dir/l.json" 2> "$dir/l.err" || { tail "$dir/l.err"; exit 1; }
    label=$([[ $on == 0 ]] && echo "node0 (writer)" || echo "node1 (replica)")
    echo "| $label, round $round | $(field "$dir/l.json" "'%.2f ms' % r['medians'][0]['latency_p50_ms']") | $(field "$dir/l.json" "'%.2f ms' % r['medians'][0]['latency_p99_ms']") | $(field "$dir/l.json" "'%.2f ms' % max(s['latency_max_ms'] for s in m['subscribers'])") |"
  done
done

fi

if section 3; then
echo
echo "## 3. Fan-out over three nodes (5,000 moves a frame, 60 Hz, writer on node0)"
echo "| subscribers | where | on the measured node | NATS bytes/frame | measured node's CPU/frame | latency p99 |"
echo "|---|---|---|---|---|---|"
spread="$(address 1),$(address 2),$(address 0)"
for subs in 1 16 64; do
  on_node1=$(((subs + 2) / 3))
  before=$(nats_out_bytes)
  "$load" --server="$(address 0)" --subscriber_server="$spread" --server_pid="${node_pids[1]}" \
    "${workload[@]}" --move=5000 --subscribers=$subs --subscriber_processes=$(((subs + 15) / 16 > 0 ? (subs + 15) / 16 : 1)) \
    --seconds=10 --json > "$dir/f.json" 2> "$dir/f.err" || { tail "$dir/f.err"; exit 1; }
  after=$(nats_out_bytes)
  frames=$(field "$dir/f.json" "m['frames_per_s'] * r['seconds']")
  echo "| $subs | cluster | node1: $on_node1 | $($py -c "print('%.0f' % (($after - $before) / $frames))") | $(field "$dir/f.json" "'%.3f ms' % m['server_cpu_ms_per_frame']") | $(field "$dir/f.json" "'%.2f ms' % r['medians'][0]['latency_p99_ms'] if m['subscribers'] else '-'") |"
  "$load" --server=127.0.0.1:$single_port --server_pid=$single_pid \
    "${workload[@]}" --move=5000 --subscribers=$subs --subscriber_processes=$(((subs + 15) / 16 > 0 ? (subs + 15) / 16 : 1)) \
    --seconds=10 --json > "$dir/f.json" 2> "$dir/f.err" || { tail "$dir/f.err"; exit 1; }
  echo "| $subs | single | xformd: $subs | - | $(field "$dir/f.json" "'%.3f ms' % m['server_cpu_ms_per_frame']") | $(field "$dir/f.json" "'%.2f ms' % r['medians'][0]['latency_p99_ms'] if m['subscribers'] else '-'") |"
done
fi
kill -TERM $single_pid; wait $single_pid 2> /dev/null || true; single_pid=0

if section 4; then
echo
echo "## 4. Owner failover: the longest acknowledgement over a kill -9 (writer at full rate, 10,000 entities, 100 a batch)"
all="$(address 0),$(address 1),$(address 2)"
for what in ${XFORM_BENCH_KILL_KINDS:-xformd machine}; do
  stalls=()
  for k in $(seq 1 "$kills"); do
    # A fresh world written at node0 (its first address), read on node1.
    "$load" --server="$all" --subscriber_server="$(address 1)" --world="$what$k" --shape=scene --entities=10000 \
      --move=100 --hz=60 --max_rate --subscribers=1 --seconds=9 --json > "$dir/k.json" 2> "$dir/k.err" &
    load_pid=$!
    # Killed 4 s into the measured seconds (after the world is built).
    until grep -q '\[stream' "$dir/k.err" 2> /dev/null; do sleep 0.05; done
    sleep 4
    kill -9 "${node_pids[0]}"; wait "${node_pids[0]}" 2> /dev/null || true
    if [[ $what == machine ]]; then kill -9 "${nats_pids[0]}"; wait "${nats_pids[0]}" 2> /dev/null || true; fi
    wait $load_pid || { tail "$dir/k.err"; exit 1; }
    stalls+=("$(field "$dir/k.json" "m['apply_max_ms']")")
    if [[ $what == machine ]]; then start_nats 0; wait_nats; fi
    start_node 0
    serving "$(address 0)"
  done
  $py - "$what" "${stalls[@]}" << 'PY'
import statistics, sys
what, stalls = sys.argv[1], [float(s) / 1000 for s in sys.argv[2:]]
print(f"kill -9 of {what}: {len(stalls)} kills, writes stopped median "
      f"{statistics.median(stalls):.2f} s, worst {max(stalls):.2f} s "
      f"(each: {' '.join(f'{s:.2f}' for s in stalls)})")
PY
done
fi
