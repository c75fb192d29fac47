#!/usr/bin/python3
"""A principal at its quotas, as hard as it can, for the fairness benchmark.

With --token naming a principal of xformd's --auth_file whose quotas are
small, --threads threads call Apply on
--world as fast as they can (one entity moved a batch: over its write-rate
quota, most are refused) and keep asking for more Subscribe streams than
its max_subscriptions allows, until --seconds have passed. Meanwhile
xform-load, as another principal, measures its own stream: the point is
that its latency does not move. Prints each status code seen and how often.

With --batch_mb, each Apply is a batch of about that many megabytes (a
set-local of as many entities), so that a principal without the write role
on --world is refused big requests as fast as it can send them: what
xformd's --max_refused_mb_per_second is for. A connection xformd cuts off
is reconnected by grpcio as it would any.

The auth file the benchmark uses (docs/benchmarks.md, "Hostile clients
beside an honest one"): principal "hog" is admin on world "hog" with quotas
write_batches_per_second 10, max_subscriptions 2, max_writers 4 and
calls_per_second 100; principal "load" is admin on world "load" alone.

Uses Debian's python3-grpcio and soak_hostile.py's hand encoding.
"""

import argparse
import threading
import time

import grpc

import soak_hostile as wire


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--token", required=True)
    parser.add_argument("--world", default="hog")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--batch_mb", type=float, default=0)
    args = parser.parse_args()

    client = wire.Client(args.server)
    metadata = (("authorization", "Bearer " + args.token),)
    unary = client.channel.unary_unary(
        wire.SERVICE + "Apply", request_serializer=lambda b: b,
        response_deserializer=lambda b: b)
    create = client.channel.unary_unary(
        wire.SERVICE + "CreateWorld", request_serializer=lambda b: b,
        response_deserializer=lambda b: b)
    subscribe = client.channel.unary_stream(
        wire.SERVICE + "Subscribe", request_serializer=lambda b: b,
        response_deserializer=lambda b: b)
    try:
        create(wire.string_field(1, args.world) + wire.field(2, 0, wire.varint(2)),
               metadata=metadata, timeout=10)
        unary(wire.apply_request(args.world, [wire.create_command([1], [0])]),
              metadata=metadata, timeout=10)
    except grpc.RpcError as error:
        print("setup:", error.code().name, error.details())
    end = time.time() + args.seconds
    streams = []

    # 10 floats and an id: 48 bytes an entity.
    big = None
    if args.batch_mb > 0:
        count = int(args.batch_mb * 1e6 / 48)
        big = wire.apply_request(args.world,
                                 [wire.set_local_command([1] * count, 1.0)])

    def write():
        x = 0.0
        while time.time() < end:
            x += 1
            body = big or wire.apply_request(
                args.world, [wire.set_local_command([1], x)])
            try:
                # A big batch waits for a connection rather than failing
                # fast while xformd keeps the address out: an attacker
                # sends as soon as it can, and spins on nothing meanwhile.
                unary(body, metadata=metadata, timeout=10,
                      wait_for_ready=big is not None)
                client.note(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                client.note(error.code())

    def subscribe_more():
        while time.time() < end:
            stream = subscribe(wire.subscribe_request(args.world),
                               metadata=metadata, timeout=args.seconds + 10)
            try:
                next(stream)
                streams.append(stream)  # Kept open: it holds a quota slot.
                client.note(grpc.StatusCode.OK)
            except grpc.RpcError as error:
                client.note(error.code())
            time.sleep(0.01)

    threads = [threading.Thread(target=write) for _ in range(args.threads)]
    threads.append(threading.Thread(target=subscribe_more))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for stream in streams:
        stream.cancel()
    for code, count in sorted(client.codes.items()):
        print("%s %d" % (code, count))


if __name__ == "__main__":
    main()
