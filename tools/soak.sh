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
# `secure` runs xformd as one exposed to a network would run: TLS (test
# certificates), --auth_file (the load an admin with room to write, the
# watchers readers, the hostile client an admin on default quotas) and
# --data_dir. At the end it also kills xformd with SIGKILL, starts it again
# on the same directory, and fails unless the soak world comes back with
# the same entities and the same matrix for entity 1.
#
#   bash tools/soak.sh [BUILD_DIR] [SECONDS] [plain|secure]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seconds=${2:-600}
mode=${3:-plain}
port=50071
address=127.0.0.1:$port
out=$(mktemp -d)
echo "soak: ${seconds} s against xformd on $address ($mode); logs in $out"

server_flags=()
load_flags=()    # xform-load's, and xformctl's where it needs to write.
watch_flags=()   # The watchers'.
hostile_flags=()
if [[ $mode == secure ]]; then
  bash tests/make_test_certs.sh "$out/certs" >/dev/null
  tls=(--tls_ca="$out/certs/ca.pem" --tls_server_name=xformd.test)
  hash() { "$build/tools/xformctl" auth hash-token <<<"$1"; }
  for name in load viewer hostile; do
    echo "soak-$name-token" >"$out/$name.token"
  done
  cat >"$out/auth.json" <<JSON
{"principals": [
  {"name": "load", "tokenSha256": "$(hash soak-load-token)",
   "grants": [{"roles": ["admin"], "worlds": ["*"]}],
   "quotas": {"maxSubscriptions": 1000, "writeBatchesPerSecond": 100000,
              "writeEntitiesPerSecond": 10000000, "callsPerSecond": 100000}},
  {"name": "viewer", "tokenSha256": "$(hash soak-viewer-token)",
   "grants": [{"roles": ["read"], "worlds": ["*"]}]},
  {"name": "hostile", "tokenSha256": "$(hash soak-hostile-token)",
   "grants": [{"roles": ["admin"], "worlds": ["*"]}]}]}
JSON
  server_flags=(--tls_cert="$out/certs/server.pem"
    --tls_key="$out/certs/server.key" --auth_file="$out/auth.json"
    --data_dir="$out/data")
  load_flags=("${tls[@]}" --token_file="$out/load.token")
  watch_flags=("${tls[@]}" --token_file="$out/viewer.token")
  hostile_flags=(--tls_ca="$out/certs/ca.pem" --tls_server_name=xformd.test
    --token_file="$out/hostile.token")
elif [[ $mode != plain ]]; then
  echo "mode: plain or secure, not $mode" >&2
  exit 2
fi

if ! /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
  sudo=""
  if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get install -y -q --no-install-recommends python3-grpcio >/dev/null
fi

# 2,000 connections at most, 1,000 from one address: soak_hostile.py's hog
# of 1,500 from 127.0.0.2 must leave room for everyone on 127.0.0.1.
start_xformd() {  # start_xformd LOG: in the background, until it serves
  "$build/server/xformd" --listen="$address" --max_connections=2000 \
    "${server_flags[@]}" 2>"$1" &
  xformd=$!
  for _ in $(seq 600); do  # 60 s: a restart recovers the soak world first
    grep -q "xformd serving" "$1" && return
    kill -0 "$xformd" 2>/dev/null || break
    sleep 0.1
  done
  echo "xformd did not start:" >&2
  tail "$1" >&2
  exit 1
}
start_xformd "$out/xformd.log"
cleanup() { kill "$xformd" 2>/dev/null || true; kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT

"$build/tools/xform-load" --server="$address" --server_pid="$xformd" \
  "${load_flags[@]}" \
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
  ("$build/tools/xformctl" --server="$address" "${watch_flags[@]}" \
    watch soak --verbose \
    --rate_hz="$rate" | sleep "$seconds") 2>/dev/null &
  stalled+=($!)
done
# Dashboards that read: rate-limited, sharing their folds.
for k in 1 2 3 4; do
  "$build/tools/xformctl" --server="$address" "${watch_flags[@]}" \
    watch soak --rate_hz=10 >/dev/null 2>&1 &
done
# Status pages at 1 Hz, raw and compact: each is owed more than its kept
# frames hold, and is sent what changed from the published state when due.
for encoding in raw compact; do
  "$build/tools/xformctl" --server="$address" "${watch_flags[@]}" \
    watch soak --rate_hz=1 --encoding="$encoding" >/dev/null 2>&1 &
done
# Tools that read one subtree each, compact: enough of them that a frame's
# moves are found by walking their bits against the moved slots.
for k in 1 2 3 4; do
  "$build/tools/xformctl" --server="$address" "${watch_flags[@]}" \
    watch soak --subtrees=1 --encoding=compact >/dev/null 2>&1 &
done

/usr/bin/python3 tools/soak_hostile.py --server="$address" --world=soak \
  "${hostile_flags[@]}" --seconds="$((seconds - 10))" \
  >"$out/hostile.txt" 2>&1 &
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
xformctl() { "$build/tools/xformctl" --server="$address" "${load_flags[@]}" "$@"; }
left=$(xformctl worlds list | awk '$1 != "soak" { print $1 }')
if [[ -n "$left" ]]; then
  echo "worlds left behind:" $left
  hostile_status=1
fi
if [[ $mode == secure ]]; then
  # What an acknowledged write promises: it survives SIGKILL.
  before_info=$(xformctl worlds info soak --json | grep -o '"entities": *[0-9]*')
  before_one=$(xformctl entities get soak 1 --json)
  kill -9 "$xformd"
  wait "$xformd" 2>/dev/null || true
  started=$(date +%s.%N)
  start_xformd "$out/xformd-restarted.log"
  echo "--- after kill -9: serving again in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $started }") s"
  after_info=$(xformctl worlds info soak --json | grep -o '"entities": *[0-9]*')
  after_one=$(xformctl entities get soak 1 --json)
  echo "soak world before: $before_info; after: $after_info"
  if [[ "$before_info" != "$after_info" || "$before_one" != "$after_one" ]]; then
    echo "the soak world did not come back as it was:"
    echo "$before_one"
    echo "$after_one"
    hostile_status=1
  fi
fi
exit "$hostile_status"
