#!/bin/bash
# The stream over a link that is not free (docs/benchmarks.md, "Over a
# gigabit link"): the issue-14 table (xform-load, 100k scene world, 5k moves
# a frame at 60 Hz, 16 subscribers; stream raw, stream compact, Redis) with
# the loopback device shaped by a token bucket to RATE, as a server whose
# traffic all leaves through one NIC of that rate would see it. On plain
# loopback bytes cost next to nothing and the encodings compare by CPU
# alone; a shaped link shows what 56 bytes an update against 9 costs.
#
# Needs root (tc on lo); removes the shaping on exit, and refuses to run if
# lo already has a root qdisc of someone else's. Not run in CI (minutes).
#   tools/link_bench.sh [build dir, default build] [rate, default 1gbit]
#     [rounds, default 1] [modes, default stream,redis]
set -euo pipefail
build=${1:-build}
rate=${2:-1gbit}
rounds=${3:-1}
modes=${4:-stream,redis}

if ! tc qdisc show dev lo | grep -q "^qdisc noqueue"; then
  echo "lo already has a root qdisc; not touching it:" >&2
  tc qdisc show dev lo >&2
  exit 1
fi
# Burst: a few of lo's 64 KB packets, so the bucket never stalls one.
tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 20ms
trap 'tc qdisc del dev lo root' EXIT
echo "lo shaped: $(tc qdisc show dev lo)"

# The modes take turns, round after round, and xform-load adds each mode's
# medians over the rounds.
"$build/tools/xform-load" --xformd="$build/server/xformd" \
  --server=127.0.0.1:50812 --mode="$modes" --encoding=raw,compact \
  --shape=scene --entities=100000 --move=5000 --subscribers=16 \
  --seconds=10 --rounds="$rounds"
