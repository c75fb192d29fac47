#!/usr/bin/env bash
# The cluster crash loop at length: ClusterFailoverTest.CrashLoop (CI runs
# 10 cycles) for CYCLES cycles (100 by default) of kill -9 of a world's
# writer, a NATS server, or both of one "machine", each checked: every
# node exact, no frame going back, every acknowledged frame published, an
# end_frame batch's successor in a later frame, no replica reloading over
# a digest, no honest writer cut off. Its output, with every node's log
# on a failure, is kept in DIR (default: a new one under /tmp); RUNS runs
# it that many times (a different kill sequence needs a different seed:
# XFORM_CLUSTER_SEED).
#
#   bash tools/cluster_crash_loop.sh [BUILD_DIR] [CYCLES] [RUNS] [DIR]
set -euo pipefail
build=${1:-build}
cycles=${2:-100}
runs=${3:-1}
dir=${4:-$(mktemp -d /tmp/xform-crash-loop.XXXXXX)}
mkdir -p "$dir"
# Copies of the binaries: a rebuild meanwhile does not change the run.
cp "$build/tests/xform_cluster_failover_test" "$build/server/xformd" "$dir/"
failed=0
for ((run = 1; run <= runs; run++)); do
  log="$dir/run$run.log"
  echo "run $run of $runs: $cycles cycles, output in $log"
  if XFORM_CLUSTER_CYCLES=$cycles XFORM_CLUSTER_SEED=${XFORM_CLUSTER_SEED:-$run} \
      XFORM_XFORMD="$dir/xformd" "$dir/xform_cluster_failover_test" \
      --gtest_filter='ClusterFailoverTest.CrashLoop' > "$log" 2>&1; then
    grep -E '^crash loop:' "$log" || true
  else
    echo "run $run FAILED: $log"
    failed=$((failed + 1))
  fi
done
echo "$((runs - failed)) passed, $failed failed"
((failed == 0))
