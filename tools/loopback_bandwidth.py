#!/usr/bin/env python3
# Copyright 2026 The xform Authors.
#
# The physical limit under xformd's fan-out on this box: how fast the kernel
# moves bytes over loopback TCP, with nothing of gRPC or xform in the way.
# A sender writes messages of each size to N receivers, one after another
# (as a frame's writes go), for a few seconds; it prints the bandwidth and
# the time one message of that size costs the sender, which is the floor
# under a subscriber's share of a frame's CPU.
#
#   tools/loopback_bandwidth.py [--receivers 16] [--seconds 3]
#
# Sizes: a 5,000-entity frame raw (56 B an entity) and compact (9 B).

import argparse
import socket
import threading
import time


def receiver(sock, stop):
    buffer = bytearray(1 << 20)
    view = memoryview(buffer)
    while not stop.is_set():
        try:
            if sock.recv_into(view) == 0:
                return
        except OSError:
            return


def measure(size, receivers, seconds):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(receivers)
    stop = threading.Event()
    senders, threads = [], []
    for _ in range(receivers):
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        senders.append(accepted)
        t = threading.Thread(target=receiver, args=(client, stop), daemon=True)
        t.start()
        threads.append((t, client))
    message = b"x" * size
    sent = 0
    start_cpu = time.process_time()
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for s in senders:
            s.sendall(message)
            sent += 1
    elapsed = time.monotonic() - start
    cpu = time.process_time() - start_cpu  # Sender and receivers: one process.
    stop.set()
    for s in senders:
        s.close()
    for t, client in threads:
        client.close()
    server.close()
    return sent * size / elapsed / 1e6, elapsed / sent * 1e3, cpu / sent * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--receivers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3)
    args = parser.parse_args()
    print("| message | bytes | MB/s | wall ms a message | CPU ms a message (both ends) |")
    print("|---|---|---|---|---|")
    for name, size in (("5,000 entities raw", 5000 * 56),
                       ("5,000 entities compact", 5000 * 9)):
        mbps, wall_ms, cpu_ms = measure(size, args.receivers, args.seconds)
        print(f"| {name} | {size} | {mbps:,.0f} | {wall_ms:.3f} | {cpu_ms:.3f} |")


if __name__ == "__main__":
    main()
