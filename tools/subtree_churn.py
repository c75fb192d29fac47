#!/usr/bin/python3
"""Subscribes to subtree views of a world over and over, for
docs/benchmarks.md ("Hostile clients beside an honest one").

Each of --threads threads subscribes to the subtrees of --roots (default:
the 1,000 roots of xform-load's 1M `wide` world, ids 1, 1001, ...), reads
one message and cancels, until --seconds have passed; then prints how many
subscriptions it made and the status codes seen. A subtree view's start
rebuilds its membership, a walk of the view: run beside xform-load to see
what that costs the world's other subscribers.

Uses Debian's python3-grpcio (/usr/bin/python3), through soak_hostile's
hand-encoded requests.
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_hostile  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--world", default="load")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--roots", default="",
                        help="comma-separated root ids (default: 1, 1001, "
                             "... 999001)")
    parser.add_argument("--whole_world", action="store_true",
                        help="subscribe to the whole world instead")
    args = parser.parse_args()
    roots = ([int(r) for r in args.roots.split(",")] if args.roots
             else list(range(1, 1_000_001, 1000)))
    body = soak_hostile.subscribe_request(
        args.world, subtrees=() if args.whole_world else roots)
    client = soak_hostile.Client(args.server)
    made = [0]
    lock = threading.Lock()
    end = time.time() + args.seconds

    def churn():
        while time.time() < end:
            client.subscribe(body, 1, timeout=30)
            with lock:
                made[0] += 1

    threads = [threading.Thread(target=churn) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("subscriptions %d, codes %s" % (made[0], dict(client.codes)))


if __name__ == "__main__":
    main()
