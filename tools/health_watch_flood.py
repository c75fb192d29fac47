#!/usr/bin/env python3
"""Opens health Watch streams without credentials, as anyone may, and
reports how many xformd took and its resident memory meanwhile.

  /usr/bin/python3 tools/health_watch_flood.py --server=127.0.0.1:50051 \
      --pid=$(pgrep -n xformd) --connections=8 --per_connection=1000

Each connection is a channel of its own; its streams are opened at once and
held until the end. Streams refused (RESOURCE_EXHAUSTED past
--max_health_watches_per_connection or _per_address) are counted apart.
Needs Debian's python3-grpcio (under /usr/bin/python3).
"""
import argparse
import threading
import time

import grpc


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--per_connection", type=int, default=1000)
    parser.add_argument("--hold_s", type=float, default=3)
    args = parser.parse_args()

    before = rss_mb(args.pid)
    taken, refused, lock = [0], {}, threading.Lock()
    calls = []
    for index in range(args.connections):
        channel = grpc.insecure_channel(
            args.server, options=[("grpc.channel_id", index)])
        watch = channel.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=lambda request: request,
            response_deserializer=lambda response: response)
        for _ in range(args.per_connection):
            call = watch(b"")  # An empty HealthCheckRequest: the server.

            def first(call=call):
                try:
                    next(call)
                    with lock:
                        taken[0] += 1
                except grpc.RpcError as error:
                    with lock:
                        refused[error.code().name] = (
                            refused.get(error.code().name, 0) + 1)

            thread = threading.Thread(target=first, daemon=True)
            thread.start()
            calls.append((call, thread))
    for _, thread in calls:
        thread.join(timeout=30)
    time.sleep(args.hold_s)
    print(f"streams asked for: {len(calls)}, taken: {taken[0]}, "
          f"refused: {refused}")
    print(f"xformd RSS: {before:.0f} MB before, {rss_mb(args.pid):.0f} MB "
          f"with them open")
    for call, _ in calls:
        call.cancel()


if __name__ == "__main__":
    main()
