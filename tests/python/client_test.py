#!/usr/bin/python3
"""The Python client (client/python/xform) against real servers: an xformd
with TLS and an auth file, then a three-node cluster (tools/cluster_local.sh:
three nats-servers in JetStream, three xformd nodes).

Alone: every call, and each refusal's code (UNAUTHENTICATED without a
token, PERMISSION_DENIED for a reader's write, NOT_FOUND, ALREADY_EXISTS,
INVALID_ARGUMENT, RESOURCE_EXHAUSTED past a quota); Mirrors in both
encodings equal to Read after each of many random batches; a region
mirror holding exactly the entities in its region, moved; lookups at a
stamp equal to composing Read's locals at that stamp.

Cluster: a write through a node that does not own the world follows the
redirect; a whole-world Mirror on one node survives that node's kill -9,
resuming on another and ending equal to Read.

  /usr/bin/python3 tests/python/client_test.py --xformd=build/server/xformd \\
      --xformctl=build/tools/xformctl --pythonpath=build/client/python/gen \\
      [--cluster_script=tools/cluster_local.sh --build=build]
"""

import argparse
import hashlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

WAIT_S = 30


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def ok(message):
    print("ok:", message, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            fail(f"{what}: not within {timeout} s")
        time.sleep(0.01)


def certificates(directory):
    """A CA and a server certificate for 127.0.0.1, made with openssl."""
    def run(*command):
        subprocess.run(command, check=True, capture_output=True, cwd=directory)
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=test CA", "-keyout", "ca.key", "-out", "ca.pem")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=xformd",
        "-keyout", "server.key", "-out", "server.csr")
    with open(os.path.join(directory, "san"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
        "ca.key", "-CAcreateserial", "-days", "2", "-extfile", "san", "-out",
        "server.pem")


def auth_file(directory, tokens):
    principals = [
        {"name": "admin", "token_sha256": hashlib.sha256(tokens["admin"].encode()).hexdigest(),
         "grants": [{"roles": ["admin", "read", "write"], "worlds": ["*"]}]},
        {"name": "reader", "token_sha256": hashlib.sha256(tokens["reader"].encode()).hexdigest(),
         "grants": [{"roles": ["read"], "worlds": ["*"]}],
         "quotas": {"max_subscriptions": 1}},
    ]
    path = os.path.join(directory, "auth.json")
    with open(path, "w") as f:
        json.dump({"principals": principals}, f)
    for name, token in tokens.items():
        with open(os.path.join(directory, f"{name}.token"), "w") as f:
            f.write(token + "\n")
    return path


def start_xformd(binary, flags):
    port = free_port()
    process = subprocess.Popen([binary, f"--listen=127.0.0.1:{port}", *flags],
                               stderr=subprocess.PIPE, text=True)
    process.log = []
    for line in process.stderr:
        process.log.append(line)
        if "xformd serving on" in line:
            break
    else:
        fail("xformd did not start:\n" + "".join(process.log[-20:]))
    threading.Thread(target=lambda: [process.log.append(l) for l in process.stderr],
                     daemon=True).start()
    return process, f"127.0.0.1:{port}"


def expect_code(xform, code, what, call):
    try:
        call()
    except xform.XformError as error:
        if error.code != code:
            fail(f"{what}: {error.code.name} ({error.details}), not {code.name}")
        ok(f"{what}: {code.name}")
        return
    fail(f"{what}: no error, not {code.name}")


def random_local(rng, np):
    q = np.array([rng.gauss(0, 1) for _ in range(4)])
    q /= np.linalg.norm(q)
    return [rng.uniform(-20, 20) for _ in range(3)] + list(q) + [
        rng.uniform(0.5, 2) for _ in range(3)]


def random_batch(xform, rng, np, alive, next_id):
    """A batch of creates, sets, links and destroys over `alive`."""
    commands = []
    new = list(range(next_id, next_id + rng.randint(0, 6)))
    if new:
        parents = [rng.choice(alive) if alive and rng.random() < 0.7 else 0 for _ in new]
        commands.append(xform.create(new, parents, [random_local(rng, np) for _ in new]))
        alive.extend(new)
    moved = rng.sample(alive, min(len(alive), rng.randint(1, 20))) if alive else []
    if moved:
        commands.append(xform.set_local(moved, [random_local(rng, np) for _ in moved]))
    if len(alive) > 10 and rng.random() < 0.3:
        e = rng.choice(alive)
        commands.append(xform.destroy([e], keep_children=True))
        alive.remove(e)
    return commands, next_id + len(new)


def check_equal(np, mirror, client, world, ids, what):
    """The mirror holds exactly `ids`, with Read's parents and worlds."""
    view = mirror.view()
    read = client.read(world, sorted(ids))
    if set(int(e) for e in view.ids) != set(int(e) for e in read.ids):
        fail(f"{what}: the mirror holds {len(view.ids)} entities, Read {len(read.ids)}")
    mine = view.as_dict()
    for e, p, w in zip(read.ids, read.parents, read.world):
        parent, world_matrix = mine[int(e)]
        if parent != int(p):
            fail(f"{what}: entity {e}'s parent {parent}, not {p}")
        if not np.allclose(world_matrix, w, atol=2e-3, rtol=1e-4):
            fail(f"{what}: entity {e}'s world {world_matrix} against {w}")


def alone(xform, np, args, directory):
    tokens = {"admin": os.urandom(16).hex(), "reader": os.urandom(16).hex()}
    certificates(directory)
    auth = auth_file(directory, tokens)
    process, address = start_xformd(args.xformd, [
        f"--tls_cert={directory}/server.pem", f"--tls_key={directory}/server.key",
        f"--auth_file={auth}"])
    try:
        ca = f"{directory}/ca.pem"
        admin = xform.Client(address, tls_ca=ca, token_file=f"{directory}/admin.token")
        reader = xform.Client(address, tls_ca=ca, token_file=f"{directory}/reader.token")
        nobody = xform.Client(address, tls_ca=ca, deadline=5)
        calls_and_refusals(xform, np, admin, reader, nobody)
        mirrors_follow_random_writes(xform, np, admin)
        regions_and_lookups(xform, np, admin)
    finally:
        process.kill()
        process.wait()


def calls_and_refusals(xform, np, admin, reader, nobody):
    import grpc
    info = admin.create_world("w", mode="driven")
    if info.name != "w":
        fail(f"create_world answered {info}")
    ok("create_world over TLS with a token")
    expect_code(xform, grpc.StatusCode.UNAUTHENTICATED, "a call without a token",
                lambda: nobody.list_worlds())
    expect_code(xform, grpc.StatusCode.PERMISSION_DENIED, "a reader's write",
                lambda: reader.apply("w", [xform.create([1])]))
    expect_code(xform, grpc.StatusCode.ALREADY_EXISTS, "a world created twice",
                lambda: admin.create_world("w"))
    expect_code(xform, grpc.StatusCode.NOT_FOUND, "a world that is not",
                lambda: admin.get_world("nope"))
    expect_code(xform, grpc.StatusCode.INVALID_ARGUMENT, "a bad world name",
                lambda: admin.create_world("bad name!"))
    expect_code(xform, grpc.StatusCode.INVALID_ARGUMENT, "an entity 0",
                lambda: admin.apply("w", [xform.create([0])]))
    frame = admin.apply("w", [xform.create([1, 2], [0, 1], [[1, 0, 0, 0, 0, 0, 1, 1, 1, 1]] * 2)],
                        end_frame=True)
    states = reader.read("w", [1, 2])
    if list(states.ids) != [1, 2] or list(states.parents) != [0, 1] or \
            not np.allclose(states.world[1][:, 3], [2, 0, 0]):
        fail(f"read gave {states}")
    ok(f"apply (frame {frame}) and read: entity 2's world position {states.world[1][:, 3]}")
    if not any(w.name == "w" for w in reader.list_worlds()):
        fail("list_worlds has no w")
    if admin.get_world("w").entities != 2:
        fail("get_world does not count 2 entities")
    mirror = xform.Mirror(reader, "w")
    if not mirror.wait_for_sync(WAIT_S):
        fail(f"a reader's mirror did not sync: {mirror.status}")
    second = xform.Mirror(reader, "w")
    wait_until("a second subscription past max_subscriptions=1 is refused",
               lambda: second.status is not None)
    if second.status.code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        fail(f"second subscription: {second.status}")
    ok("a subscription past the reader's quota: RESOURCE_EXHAUSTED")
    second.close()
    subscribers = admin.list_subscribers("w")
    if len(subscribers.subscribers) != 1:
        fail(f"list_subscribers: {subscribers}")
    mirror.close()
    nodes = admin.list_nodes()
    ok(f"list_subscribers, list_nodes ({len(nodes)} nodes alone)")
    admin.delete_world("w")
    expect_code(xform, grpc.StatusCode.NOT_FOUND, "a deleted world", lambda: admin.get_world("w"))


def mirrors_follow_random_writes(xform, np, admin):
    rng = random.Random(7)
    admin.create_world("r", mode="driven")
    raw = xform.Mirror(admin, "r", encoding="raw")
    compact = xform.Mirror(admin, "r", encoding="compact")
    alive, next_id, frame = [], 1, 0
    for batch in range(300):
        commands, next_id = random_batch(xform, rng, np, alive, next_id)
        frame = admin.apply("r", commands, end_frame=True)
        if batch % 50 == 49:
            for mirror, name in ((raw, "raw"), (compact, "compact")):
                if not mirror.wait_for_frame(frame, WAIT_S):
                    fail(f"{name} mirror: frame {frame} not reached ({mirror.status})")
                check_equal(np, mirror, admin, "r", alive,
                            f"{name} mirror after batch {batch}")
    ok(f"raw and compact mirrors equal Read after each 50 of 300 random batches "
       f"({len(alive)} entities)")
    raw.close()
    compact.close()


def regions_and_lookups(xform, np, admin):
    import grpc
    admin.create_world("city", mode="driven", time_model="hold")
    ids = list(range(1, 41))
    locals_ = [[float(i - 1), 0, 0, 0, 0, 0, 1, 1, 1, 1] for i in ids]
    admin.apply("city", [xform.create(ids, None, locals_)], end_frame=True, stamp_nanos=1_000_000_000)
    mirror = xform.Mirror(admin, "city", region=xform.region(sphere=(0, 0, 0, 5.5)))
    wait_until("a region mirror holds its region",
               lambda: set(int(e) for e in mirror.view().ids) == set(range(1, 7)))
    mirror.set_region(xform.region(sphere=(30, 0, 0, 2.5)))
    wait_until("the moved region's entities, and only them",
               lambda: set(int(e) for e in mirror.view().ids) == set(range(29, 34)))
    ok("a region mirror holds its region, and follows it when moved")
    mirror.close()
    # Entity 41 under 1, moved at two stamps; a lookup between them, by
    # the server and by a mirror's own history.
    timed = xform.Mirror(admin, "city", history_seconds=30)
    if not timed.wait_for_sync(WAIT_S):
        fail(f"a mirror with history: {timed.status}")
    admin.apply("city", [xform.create([41], [1], [[0, 1, 0, 0, 0, 0, 1, 1, 1, 1]])],
                end_frame=True, stamp_nanos=2_000_000_000)
    admin.apply("city", [xform.set_local([41], [[0, 3, 0, 0, 0, 0, 1, 1, 1, 1]])],
                end_frame=True, stamp_nanos=3_000_000_000)
    poses = admin.lookup_transform("city", 0, [41], stamp_nanos=2_500_000_000)
    if not np.allclose(poses.matrices[0][:, 3], [0, 2, 0], atol=1e-4):
        fail(f"lookup at 2.5 s: {poses.matrices[0]}")
    at = admin.read("city", [41], at_stamp_nanos=2_000_000_000)
    if not np.allclose(at.world[0][:, 3], [0, 1, 0], atol=1e-4):
        fail(f"read at 2 s: {at.world[0]}")
    ok(f"lookup_transform between two stamps interpolates ({poses.matrices[0][:, 3]}), "
       "read at a stamp")
    last = admin.get_world("city").frame
    if not timed.wait_for_frame(last, WAIT_S):
        fail(f"the mirror with history: {timed.status}")
    for stamp, y in ((2_000_000_000, 1), (2_250_000_000, 1.5), (2_500_000_000, 2),
                     (3_000_000_000, 3), (9_000_000_000, 3)):
        mine = timed.world_matrix_at(41, stamp)
        server = admin.lookup_transform("city", 0, [41], stamp_nanos=min(stamp, 3_000_000_000))
        if not np.allclose(mine, server.matrices[0], atol=1e-4) or not np.isclose(mine[1, 3], y):
            fail(f"the mirror at {stamp}: {mine} against the server's {server.matrices[0]}")
    relative = timed.lookup_transform(2, 41, 2_500_000_000)
    if not np.allclose(relative[:, 3], [-1, 2, 0], atol=1e-4):
        fail(f"the mirror's lookup of 41 in 2's frame: {relative}")
    expect_code(xform, grpc.StatusCode.OUT_OF_RANGE, "a mirror's lookup before its history",
                lambda: timed.world_matrix_at(41, 1_000_000_000))
    ok("a mirror's history answers lookups at a stamp as the server does")
    timed.close()


def named_frames(xform, np, args, directory):
    """Names: created, refused, renamed, freed by destroys, used by lookups,
    and kept through a snapshot and a journal across a restart."""
    import grpc
    data = os.path.join(directory, "data")
    process, address = start_xformd(args.xformd, [f"--data_dir={data}",
                                                  "--max_name_bytes=16",
                                                  "--snapshot_every=1s"])
    client = xform.Client(address)
    client.create_world("robot", mode="driven", time_model="tf2")
    t = 1_000_000_000
    client.apply("robot", [xform.create(
        [1, 2, 3, 4], [0, 1, 2, 0],
        [[0, 0, 0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 0, 0, 0, 1, 1, 1, 1],
         [1, 0, 0, 0, 0, 0, 1, 1, 1, 1], [5, 0, 0, 0, 0, 0, 1, 1, 1, 1]],
        names=["base_link", "torso", "camera", ""])], end_frame=True, stamp_nanos=t)
    states = client.read("robot", [1, 2, 3, 4])
    if states.names != ["base_link", "torso", "camera", ""]:
        fail(f"read's names: {states.names}")
    for what, code, command in (
            ("a name taken", grpc.StatusCode.ALREADY_EXISTS,
             xform.create([5], names=["torso"])),
            ("'world' as a name", grpc.StatusCode.INVALID_ARGUMENT,
             xform.create([5], names=["world"])),
            ("e<id> as a name", grpc.StatusCode.INVALID_ARGUMENT,
             xform.rename([4], ["e12"])),
            ("a name over --max_name_bytes", grpc.StatusCode.INVALID_ARGUMENT,
             xform.rename([4], ["x" * 17])),
            ("a control character", grpc.StatusCode.INVALID_ARGUMENT,
             xform.rename([4], ["a\tb"])),
            ("a rename of no entity", grpc.StatusCode.NOT_FOUND,
             xform.rename([99], ["ghost"]))):
        expect_code(xform, code, what, lambda c=command: client.apply("robot", [c]))
    if client.read("robot", [4]).names != [""] or client.get_world("robot").entities != 4:
        fail("a refused batch changed something")
    # A batch taken back whole: its name too.
    expect_code(xform, grpc.StatusCode.ALREADY_EXISTS, "a batch whose create fails",
                lambda: client.apply("robot", [xform.rename([4], ["wheel"]),
                                               xform.create([1], names=["again"])]))
    client.apply("robot", [xform.rename([4, 3], ["wheel", "eye"]),
                           xform.create([5], [4], names=["camera"])], end_frame=True,
                 stamp_nanos=t + 1)
    poses = client.lookup_transform("robot", "base_link", ["eye", "e2"], stamp_nanos=0)
    if not np.allclose(poses.matrices[0][:, 3], [1, 0, 1], atol=1e-5):
        fail(f"lookup of 'eye' in 'base_link': {poses.matrices[0]}")
    world = client.lookup_transform("robot", "world", ["camera"])
    if not np.allclose(world.matrices[0][:, 3], [5, 0, 0], atol=1e-5):
        fail(f"lookup of 'camera' (now entity 5) in 'world': {world.matrices[0]}")
    expect_code(xform, grpc.StatusCode.NOT_FOUND, "a lookup of a name no entity has",
                lambda: client.lookup_transform("robot", "world", ["nope"]))
    # A subtree destroy frees its names; the snapshot then the journal keep
    # the rest across a restart.
    def snapshots():
        return sum("'robot': snapshot of" in line for line in process.log)
    before = snapshots()
    client.apply("robot", [xform.destroy([2])], end_frame=True, stamp_nanos=t + 2)
    wait_until("a snapshot of the world after the destroy", lambda: snapshots() > before)
    client.apply("robot", [xform.create([6], names=["torso"]),
                           xform.rename([1], ["base"])], end_frame=True, stamp_nanos=t + 3)
    process.kill()
    process.wait()
    process, address = start_xformd(args.xformd, [f"--data_dir={data}"])
    try:
        client = xform.Client(address)
        states = client.read("robot", [1, 4, 5, 6])
        if states.names != ["base", "wheel", "camera", "torso"]:
            fail(f"names after kill -9 and a restart: {states.names}")
        expect_code(xform, grpc.StatusCode.NOT_FOUND, "a destroyed subtree's names are free",
                    lambda: client.lookup_transform("robot", "world", ["eye"]))
        ok("names: made, refused (taken, 'world', e<id>, too long, control, no "
           "entity), renamed, freed by a destroy, looked up, kept through kill -9")
    finally:
        process.kill()
        process.wait()


def cluster(xform, np, args):
    port, nats_port = 30000 + random.randrange(10000), 41000 + random.randrange(4000)
    script = subprocess.Popen(
        ["bash", args.cluster_script, f"--build={args.build}", f"--port={port}", "--empty",
         f"--nats_port={nats_port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    lines = []
    try:
        for line in script.stdout:
            lines.append(line)
            if "xform cluster up" in line:
                break
        else:
            fail("the cluster did not come up:\n" + "".join(lines[-20:]))
        threading.Thread(target=lambda: [None for _ in script.stdout], daemon=True).start()
        addresses = [f"127.0.0.1:{port + i}" for i in range(3)]
        cluster_redirects_and_resume(xform, np, args, addresses)
    finally:
        os.killpg(script.pid, signal.SIGTERM)
        script.wait()


def cluster_redirects_and_resume(xform, np, args, addresses):
    every = xform.Client(",".join(addresses))
    every.create_world("c", mode="driven")
    owner = every.get_world("c").placement.owner_address
    others = [a for a in addresses if a != owner]
    # A client of one node that does not own the world: the write is
    # redirected to the owner (an address ListNodes on that node lists).
    one = xform.Client(others[0])

    def known():
        try:
            return one.get_world("c") is not None
        except xform.XformError:
            return False
    wait_until("the other nodes know the new world", known)
    frame = one.apply("c", [xform.create(list(range(1, 101)))], end_frame=True)
    ok(f"a write at {others[0]} follows the redirect to the owner {owner} (frame {frame})")
    one.apply("c", [xform.rename([1, 2], ["first", "second"])], end_frame=True)
    replica = xform.Client(others[1])
    wait_until("names reach a replica", lambda: replica.read("c", [1, 2]).names ==
               ["first", "second"])
    ok("names written at the owner are read at a replica")
    # A whole-world mirror on a node that is not the owner; that node dies.
    watcher = xform.Client(",".join([others[1], others[0], owner]))
    mirror = xform.Mirror(watcher, "c")
    if not mirror.wait_for_frame(frame, WAIT_S):
        fail(f"cluster mirror: {mirror.status}")
    victim = others[1]
    pid = int(subprocess.run(["pgrep", "-f", "--", f"listen={victim} "], capture_output=True,
                             text=True).stdout.split()[0])
    os.kill(pid, signal.SIGKILL)
    rng = random.Random(3)
    alive, next_id = list(range(1, 101)), 101
    for _ in range(40):
        commands, next_id = random_batch(xform, rng, np, alive, next_id)
        frame = every.apply("c", commands, end_frame=True)
    if not mirror.wait_for_frame(frame, WAIT_S):
        fail(f"the mirror did not follow on another node: {mirror.status}")
    check_equal(np, mirror, every, "c", alive, "the mirror after its node's kill -9")
    ok(f"a mirror whose node was killed resumed elsewhere ({mirror.reconnects} "
       f"reconnects, {mirror.resumes} resumes asked, {mirror.resyncs} resyncs) "
       "and equals Read")
    mirror.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--xformd", required=True)
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--cluster_script", default="")
    parser.add_argument("--build", default="build")
    args = parser.parse_args()
    sys.path[:0] = args.pythonpath.split(":")
    try:
        import numpy as np
        import xform
    except ImportError as error:
        fail(f"{error}: needs Debian's python3-grpcio, -protobuf and -numpy, and "
             "the built package")
    with tempfile.TemporaryDirectory() as directory:
        alone(xform, np, args, directory)
    with tempfile.TemporaryDirectory() as directory:
        named_frames(xform, np, args, directory)
    if args.cluster_script:
        cluster(xform, np, args)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
