#!/bin/bash
# The cost of TLS and access control (docs/benchmarks.md, "TLS and access
# control"): xform-load's stream mode on the 100k scene world,
# 5k moves a frame at 60 Hz, 16 subscribers, with each encoding, against an
# xformd started plain and with TLS and --auth_file, alternating in one run
# so the ratios compare like with like. Not run in CI (minutes).
#   tools/security_bench.sh [build dir, default build] [rounds, default 3]
#     [encodings, default raw,compact]
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
encodings=${3:-raw,compact}
here=$(cd "$(dirname "$0")" && pwd)
xformd=$build/server/xformd
load=$build/tools/xform-load
port=50811
out=$(mktemp -d)
pid=

bash "$here/../tests/make_test_certs.sh" "$out/certs" >/dev/null
token=bench-token
echo "$token" >"$out/load.token"
cat >"$out/auth.json" <<JSON
{"principals": [{"name": "load",
  "tokenSha256": "$($build/tools/xformctl auth hash-token <<<"$token")",
  "grants": [{"roles": ["admin"], "worlds": ["*"]}],
  "quotas": {"maxSubscriptions": 1000, "writeBatchesPerSecond": 100000}}]}
JSON

start() {  # start LOG FLAGS...: xformd on $port, in the background
  local log=$1; shift
  $xformd --listen=127.0.0.1:$port --max_message_bytes=268435456 \
    --max_entities=100000 --write_timeout_ms=60000 "$@" >"$out/$log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do  # 10 s
    grep -q "xformd serving" "$out/$log" && return
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  echo "xformd did not start:" >&2; cat "$out/$log" >&2; exit 1
}
stop() { kill -TERM $pid; wait $pid || true; }
run() {  # run LABEL CLIENT-FLAGS...
  local label=$1; shift
  $load --server=127.0.0.1:$port --server_pid=$pid --mode=stream \
    --encoding="$encodings" --entities=100000 --move=5000 --subscribers=16 \
    --seconds=20 "$@" >"$out/$label.out" 2>"$out/$label.err"
  echo "### $label"
  grep '^|' "$out/$label.out"
}

echo "# $(date -u +%FT%TZ) $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for round in $(seq "$rounds"); do
  start plain.log
  run "round $round: plain"
  stop
  start secure.log --auth_file="$out/auth.json" \
    --tls_cert="$out/certs/server.pem" --tls_key="$out/certs/server.key"
  run "round $round: TLS + auth" --token_file="$out/load.token" \
    --tls_ca="$out/certs/ca.pem" --tls_server_name=xformd.test
  stop
done
rm -rf "$out"
