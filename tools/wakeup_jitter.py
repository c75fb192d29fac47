#!/usr/bin/env python3
# Copyright 2026 The xform Authors.
#
# The floor under a latency tail on this box: how late a thread that sleeps
# 1 ms wakes up, with nothing of gRPC or xform in the way. A stream's
# message passes several such wake-ups (xformd's frame thread, its fan-out
# pool, the subscriber's gRPC thread, the Mirror's thread), so a p99 of a
# few ms here shows up in every mode's p99. Run it alone, and again beside
# an xform-load run, to see what the load adds.
#
#   tools/wakeup_jitter.py [--samples 5000] [--sleep_ms 1]

import argparse
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=5000)
    parser.add_argument("--sleep_ms", type=float, default=1.0)
    args = parser.parse_args()
    late = []
    for _ in range(args.samples):
        start = time.perf_counter()
        time.sleep(args.sleep_ms / 1000)
        late.append((time.perf_counter() - start) * 1000 - args.sleep_ms)
    late.sort()

    def at(q):
        return late[min(len(late) - 1, int(q * len(late)))]

    print(
        f"{args.samples} sleeps of {args.sleep_ms} ms, woken late by: "
        f"p50 {at(0.5):.3f} ms, p90 {at(0.9):.3f} ms, p99 {at(0.99):.3f} ms, "
        f"p99.9 {at(0.999):.3f} ms, max {late[-1]:.3f} ms"
    )


if __name__ == "__main__":
    main()
