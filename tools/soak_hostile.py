#!/usr/bin/python3
"""Hostile and unlucky clients against one xformd, for tools/soak.sh.

Loops until --seconds have passed, each round doing, against --server:
  - deep chains: a world with a --depth-deep chain, a subtree subscriber of
    its root that reads the snapshot, the root moved, the world deleted;
  - join storms: --storm subscribers of the soak world at once, each reading
    its snapshot and a few frames, then leaving;
  - fuzzed requests: random bytes, and random mutations of valid requests, to
    every unary method but DeleteWorld;
  - oversized and expanding requests: 15 MB of empty commands, a 20 MB
    message, a subscription listing 2M entities;
  - a connection hog: --hog silent connections from 127.0.0.2, held while a
    new client from 127.0.0.1 connects and lists the worlds (xformd keeps
    the hog to --max_connections_per_address; the round says how many).
Prints one line per round and, at the end, every status code seen and how
often; exits 1 if INTERNAL or UNKNOWN was ever seen.

Against a TLS xformd with access control, give --tls_ca, --tls_server_name
and --token_file (a principal that may create and delete worlds).

Uses Debian's python3-grpcio; requests are encoded by hand (no generated
code), which is also how a hostile client would.
"""

import argparse
import collections
import random
import socket
import struct
import sys
import threading
import time

import grpc

SERVICE = "/xform.v1.Xform/"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(number, wire_type, payload):
    key = varint((number << 3) | wire_type)
    if wire_type == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def string_field(number, text):
    return field(number, 2, text.encode())


def packed_fixed64(number, values):
    return field(number, 2, struct.pack("<%dQ" % len(values), *values))


def packed_floats(number, values):
    return field(number, 2, struct.pack("<%df" % len(values), *values))


def apply_request(world, commands, end_frame=True):
    body = string_field(1, world)
    for command in commands:
        body += field(2, 2, command)
    if end_frame:
        body += field(3, 0, varint(1))
    return body


def create_command(entities, parents):
    return field(1, 2, packed_fixed64(1, entities) + packed_fixed64(2, parents))


def set_local_command(entities, x):
    local = []
    for _ in entities:
        local += [x, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    return field(4, 2, packed_fixed64(1, entities) + packed_floats(2, local))


def subscribe_request(world, entities=(), subtrees=()):
    body = string_field(1, world)
    if entities:
        body += packed_fixed64(2, list(entities))
    if subtrees:
        body += packed_fixed64(3, list(subtrees))
    return body


class Client:
    # For a TLS xformd (--tls_ca): its CA's PEM, the name its certificate
    # gives, and the token every call carries (may be empty).
    tls_ca = None
    tls_server_name = ""
    token = ""

    def __init__(self, address):
        options = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.use_local_subchannel_pool", 1)]
        if Client.tls_ca is None:
            self.channel = grpc.insecure_channel(address, options=options)
        else:
            credentials = grpc.ssl_channel_credentials(Client.tls_ca)
            if Client.token:
                credentials = grpc.composite_channel_credentials(
                    credentials,
                    grpc.access_token_call_credentials(Client.token))
            if Client.tls_server_name:
                options.append(("grpc.ssl_target_name_override",
                                Client.tls_server_name))
            self.channel = grpc.secure_channel(address, credentials,
                                               options=options)
        self.codes = collections.Counter()
        self.lock = threading.Lock()

    def note(self, code):
        with self.lock:
            self.codes[code.name] += 1

    def unary(self, method, body, timeout=60):
        """Counts the call's status; returns whether it was OK."""
        call = self.channel.unary_unary(SERVICE + method,
                                        request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        try:
            call(body, timeout=timeout)
            self.note(grpc.StatusCode.OK)
            return True
        except grpc.RpcError as error:
            self.note(error.code())
            return False

    def subscribe(self, body, messages, timeout=120, idle_s=None):
        """Reads up to `messages` messages (a part each), then cancels; with
        `idle_s`, also once none has come for that long."""
        call = self.channel.unary_stream(SERVICE + "Subscribe",
                                         request_serializer=lambda b: b,
                                         response_deserializer=lambda b: b)
        stream = call(body, timeout=timeout)
        read = 0
        last = [time.time()]
        done = threading.Event()

        def cancel_when_idle():
            while not done.wait(0.1):
                if time.time() - last[0] > idle_s:
                    stream.cancel()
                    return

        if idle_s is not None:
            threading.Thread(target=cancel_when_idle, daemon=True).start()
        try:
            for _ in stream:
                read += 1
                last[0] = time.time()
                if read >= messages:
                    stream.cancel()
                    break
            self.note(grpc.StatusCode.OK)
        except grpc.RpcError as error:
            code = error.code()
            self.note(grpc.StatusCode.OK if code == grpc.StatusCode.CANCELLED
                      else code)
        finally:
            done.set()
        return read


def deep_chain(client, depth, round_number):
    world = "deep%d" % (round_number % 4)
    client.unary("DeleteWorld", string_field(1, world))
    client.unary("CreateWorld", string_field(1, world) + field(2, 0, varint(2)))
    entities = list(range(1, depth + 1))
    parents = [0] + entities[:-1]
    client.unary("Apply", apply_request(world, [create_command(entities,
                                                               parents)]))
    # The snapshot's parts, then the frame that moves all of it: then quiet.
    reader = threading.Thread(
        target=client.subscribe,
        args=(subscribe_request(world, subtrees=[1]), 1000),
        kwargs={"idle_s": 5})
    reader.start()
    client.unary("Apply", apply_request(world, [set_local_command([1], 1.0)]))
    reader.join()
    client.unary("DeleteWorld", string_field(1, world))


def join_storm(client, world, count):
    threads = [threading.Thread(target=client.subscribe,
                                args=(subscribe_request(world), 40))
               for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def fuzz(client, world, rng, count):
    valid = {
        "Apply": apply_request(world, [set_local_command([1, 2], 0.5)]),
        "Read": string_field(1, world) + packed_fixed64(2, [1, 2]),
        "GetWorld": string_field(1, world),
        "ListWorlds": b"",
        "CreateWorld": string_field(1, "fuzz") + field(2, 0, varint(2)),
        "ListSubscribers": string_field(1, world) + field(2, 0, varint(2)),
    }
    for _ in range(count):
        method = rng.choice(list(valid))
        if rng.random() < 0.5:
            body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200)))
        else:
            body = bytearray(valid[method])
            for _ in range(rng.randint(1, 4)):
                if body:
                    body[rng.randrange(len(body))] = rng.getrandbits(8)
            body = bytes(body)
        if client.unary(method, body, timeout=10) and method == "CreateWorld":
            # A world it made (under a mutated name, or "fuzz"): gone again,
            # so that a long soak does not fill --max_worlds.
            # DeleteWorldRequest's name is field 1, as CreateWorldRequest's
            # is; the other fields it ignores.
            client.unary("DeleteWorld", body)


def oversized(client, world):
    client.unary("Apply", string_field(1, world) + b"\x12\x00" * 7_500_000)
    client.unary("Apply", string_field(1, world) + b"\x00" * (20 << 20))
    client.subscribe(subscribe_request(world, entities=range(1, 2_000_001)), 1)


def connection_hog(client, address, count):
    """Holds `count` silent connections from 127.0.0.2 while a new client
    from 127.0.0.1 calls ListWorlds; returns how many xformd kept."""
    host, port = address.rsplit(":", 1)
    hog = []
    for _ in range(count):
        s = socket.socket()
        try:
            s.bind(("127.0.0.2", 0))
            s.connect((host, int(port)))
            hog.append(s)
        except OSError:
            s.close()
    time.sleep(1)
    fresh = Client(address)  # A connection of its own.
    fresh.codes, fresh.lock = client.codes, client.lock
    fresh.unary("ListWorlds", b"", timeout=10)
    fresh.channel.close()
    kept = 0
    for s in hog:
        try:
            kept += len(s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)) > 0
        except BlockingIOError:
            kept += 1  # Open, and silent.
        except OSError:
            pass  # Reset: refused.
        s.close()
    return kept


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", default="127.0.0.1:50071")
    parser.add_argument("--world", default="soak")
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--depth", type=int, default=100_000)
    parser.add_argument("--storm", type=int, default=20)
    parser.add_argument("--hog", type=int, default=1500)
    parser.add_argument("--tls_ca", default="",
                        help="PEM CA of a TLS xformd: speak TLS")
    parser.add_argument("--tls_server_name", default="")
    parser.add_argument("--token_file", default="",
                        help="a file whose first line is the token to send")
    args = parser.parse_args()
    if args.tls_ca:
        with open(args.tls_ca, "rb") as pem:
            Client.tls_ca = pem.read()
        Client.tls_server_name = args.tls_server_name
    if args.token_file:
        with open(args.token_file) as token:
            Client.token = token.readline().strip()
    client = Client(args.server)
    rng = random.Random(1)
    end = time.time() + args.seconds
    round_number = 0
    last_round = 0.0
    # A round starts only if one as long as the last still ends in time: a
    # storm begun after the load stops would wait for frames that never come.
    while time.time() + last_round < end:
        start = time.time()
        deep_chain(client, args.depth, round_number)
        # Its subscribers each wait for 40 frames: only while the load writes
        # (a first round may outlast a short soak).
        if time.time() + 5 < end:
            join_storm(client, args.world, args.storm)
        fuzz(client, args.world, rng, 200)
        oversized(client, args.world)
        kept = connection_hog(client, args.server, args.hog)
        round_number += 1
        last_round = time.time() - start
        print("round %d: %.1f s, hog kept %d of %d, statuses %s" %
              (round_number, time.time() - start, kept, args.hog,
               dict(client.codes)),
              flush=True)
    bad = client.codes["INTERNAL"] + client.codes["UNKNOWN"]
    print("statuses: %s; INTERNAL/UNKNOWN: %d" % (dict(client.codes), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
