#!/usr/bin/python3
"""The Python client's decoding (client/python/xform's StreamView, written
from docs/wire.md) against a real xformd, beside raw subscribers of the
same views.

A driven world of a random hierarchy (some parents scaled unevenly, so that
their rotated children are sheared and go raw) is moved, grown, pruned and
re-parented a frame at a time. After each frame, every compact view must
hold the raw view's entities and parents, and each matrix within the
documented bounds of the raw one (position p / 2 an axis, rotation 0.01
degree, scale a relative 5.3e-6), raw entries bit for bit. xformd runs
with small messages (every snapshot and some frames come in parts) and a
small --max_pending, and the compact subscribers stop reading for a while,
so that they are sent folded frames, a kept-view snapshot and a resync.

  /usr/bin/python3 tests/python/compact_client_test.py --xformd=build/server/xformd \
      --pythonpath=build/client/python/gen

Prints the largest errors seen; exits 1 on the first bound broken.
"""

import argparse
import math
import random
import re
import subprocess
import sys
import threading
import time

FRAMES_LIVE = 250
FRAMES_STALLED = 200
FRAMES_AFTER = 100
ENTITIES = 1200
WAIT_S = 20


def fail(message):
    print("FAIL:", message, flush=True)
    sys.exit(1)


def start_xformd(path):
    process = subprocess.Popen(
        [path, "--listen=127.0.0.1:0", "--max_message_bytes=65536",
         "--max_pending=100"],
        stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    port = None
    for line in process.stderr:
        match = re.search(r"listening on \S+ \(port (\d+)\)", line)
        if match:
            port = int(match.group(1))
        if "xformd serving" in line:
            break
        if time.time() > deadline:
            break
    if port is None:
        fail("xformd did not start")
    # Keep its stderr drained.
    threading.Thread(target=lambda: [None for _ in process.stderr],
                     daemon=True).start()
    return process, f"127.0.0.1:{port}"


class Stream:
    """A subscription on a connection of its own, read into a View by a
    thread, which can be paused (it then stops reading, and xformd's
    writes back up)."""

    def __init__(self, grpc, rpc, address, request, name):
        from xform.mirror import StreamView
        options = [("grpc.use_local_subchannel_pool", 1),
                   ("grpc.http2.bdp_probe", 0),
                   ("grpc.max_receive_message_length", 64 << 20)]
        self.channel = grpc.insecure_channel(address, options=options)
        self.call = rpc.XformStub(self.channel).Subscribe(request)
        self.name = name
        self.view = StreamView()
        self.bytes = 0
        self.moves = 0
        self.error = None
        self.running = threading.Event()
        self.running.set()
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for update in self.call:
                self.running.wait()
                with self.changed:
                    self.view.apply(update)
                    self.bytes += update.ByteSize()
                    self.changed.notify_all()
        except Exception as error:  # The stream ends at teardown.
            with self.changed:
                self.error = error
                self.changed.notify_all()

    def wait_for(self, frame):
        with self.changed:
            done = self.changed.wait_for(
                lambda: self.error is not None or
                (self.view.synced and self.view.frame >= frame and
                 not self.view.in_frame), timeout=WAIT_S)
            if self.error is not None:
                fail(f"{self.name}: {self.error}")
            if not done:
                fail(f"{self.name}: frame {frame} not reached in {WAIT_S} s "
                     f"(at {self.view.frame})")


def random_quaternion(rng):
    u = [rng.gauss(0, 1) for _ in range(4)]
    n = math.sqrt(sum(x * x for x in u))
    return [x / n for x in u]


def random_local(rng, uneven):
    position = [rng.uniform(-40, 40) for _ in range(3)]
    rotation = random_quaternion(rng)
    if uneven:
        scale = [rng.uniform(0.3, 3) for _ in range(3)]
    else:
        s = rng.choice([1.0, 1.0, rng.uniform(0.5, 2)])
        scale = [s, s, s]
    return position + rotation + scale


class Writer:
    """The world as written: each entity's parent, to pick links that make
    no cycle, and batches of random changes."""

    def __init__(self, pb, stub, rng):
        self.pb, self.stub, self.rng = pb, stub, rng
        self.parent = {}
        self.next_id = 1

    def apply(self, commands, end_frame=True):
        request = self.pb.ApplyRequest(world="py", commands=commands,
                                       end_frame=end_frame)
        return self.stub.Apply(request, timeout=30).frame

    def create(self, count, roots=False):
        pb, rng = self.pb, self.rng
        ids, parents, local = [], [], []
        for _ in range(count):
            e = self.next_id
            self.next_id += 1
            existing = list(self.parent)
            parent = 0 if roots or not existing or rng.random() < 0.05 \
                else rng.choice(existing)
            ids.append(e)
            parents.append(parent)
            local += random_local(rng, uneven=rng.random() < 0.15)
            self.parent[e] = parent
        return pb.Command(create=pb.CreateCommand(entity=ids, parent=parents,
                                                  local=local))

    def is_above(self, a, b):  # Whether a is b or an ancestor of b.
        while b:
            if a == b:
                return True
            b = self.parent.get(b, 0)
        return False

    def frame_commands(self, index, destroys=True):
        pb, rng = self.pb, self.rng
        commands = []
        alive = list(self.parent)
        moved = rng.sample(alive, min(len(alive), 60))
        local = []
        for e in moved:
            local += random_local(rng, uneven=rng.random() < 0.05)
        commands.append(pb.Command(set_local=pb.SetLocalCommand(
            entity=moved, local=local)))
        if index % 7 == 3:
            commands.append(self.create(12))
        if destroys and index % 11 == 5:
            doomed = rng.sample(list(self.parent), 4)
            keep = rng.random() < 0.5
            for e in doomed:
                self._forget(e, keep)
            commands.append(pb.Command(destroy=pb.DestroyCommand(
                entity=doomed, keep_children=keep)))
        if index % 5 == 1:
            entities, parents = [], []
            for _ in range(6):
                e = rng.choice(list(self.parent))
                p = rng.choice([0] + list(self.parent))
                if p and self.is_above(e, p) or e in entities:
                    continue
                entities.append(e)
                parents.append(p)
                self.parent[e] = p
            commands.append(pb.Command(link=pb.LinkCommand(
                entity=entities, parent=parents, keep_world=rng.random() < 0.5)))
        return commands

    def _forget(self, e, keep_children):
        if e not in self.parent:
            return
        parent = self.parent.pop(e)
        for child in [c for c, p in self.parent.items() if p == e]:
            if keep_children:
                self.parent[child] = parent
            else:
                self._forget(child, False)


class Errors:
    def __init__(self):
        self.position_steps = 0.0
        self.rotation_degrees = 0.0
        self.scale_relative = 0.0
        self.raw_entries = 0
        self.posed_entries = 0


def compare(np, raw, compact, precision, errors, what):
    raw, compact = raw.table, compact.table
    if set(raw.row) != set(compact.row):
        missing = set(raw.row) ^ set(compact.row)
        fail(f"{what}: views differ in {len(missing)} entities, "
             f"e.g. {sorted(missing)[:5]}")
    posed_ids = []
    for e, r in raw.row.items():
        c = compact.row[e]
        if raw.parents[r] != compact.parents[c]:
            fail(f"{what}: entity {e}'s parent {compact.parents[c]}, not "
                 f"{raw.parents[r]}")
        if not compact.posed[c]:
            if not np.array_equal(raw.worlds[r].view(np.uint32),
                                  compact.worlds[c].view(np.uint32)):
                fail(f"{what}: raw entity {e}: {compact.worlds[c]} against "
                     f"{raw.worlds[r]}")
            errors.raw_entries += 1
        else:
            posed_ids.append(e)
    if not posed_ids:
        return
    errors.posed_entries += len(posed_ids)
    a = raw.worlds[[raw.row[e] for e in posed_ids]].astype(np.float64)
    b = compact.worlds[[compact.row[e] for e in posed_ids]].astype(np.float64)
    # Position: p / 2 an axis, and the float's rounding of P * p.
    allowance = precision / 2 + np.spacing(np.abs(a[:, :, 3]).astype(
        np.float32)).astype(np.float64)
    over = np.abs(a[:, :, 3] - b[:, :, 3]) - allowance
    steps = np.max(np.abs(a[:, :, 3] - b[:, :, 3])) / precision
    errors.position_steps = max(errors.position_steps, steps)
    if np.max(over) > 0:
        k = int(np.argmax(np.max(over, axis=1)))
        fail(f"{what}: entity {posed_ids[k]}'s position {b[k, :, 3]} against "
             f"{a[k, :, 3]}: over p / 2 = {precision / 2}")
    # Scale: each column's length.
    sa = np.linalg.norm(a[:, :, :3], axis=1)
    sb = np.linalg.norm(b[:, :, :3], axis=1)
    relative = np.max(np.abs(sb / sa - 1))
    errors.scale_relative = max(errors.scale_relative, relative)
    if relative > 2 ** (0.5 / 65536) - 1 + 1e-6:
        fail(f"{what}: a scale off by {relative:.3g} (relative)")
    # Rotation: the angle of Ra^T Rb.
    ra = a[:, :, :3] / sa[:, np.newaxis, :]
    rb = b[:, :, :3] / sb[:, np.newaxis, :]
    m = np.einsum("nji,njk->nik", ra, rb)
    skew = np.stack([m[:, 2, 1] - m[:, 1, 2], m[:, 0, 2] - m[:, 2, 0],
                     m[:, 1, 0] - m[:, 0, 1]], axis=1)
    angle = np.degrees(np.arctan2(np.linalg.norm(skew, axis=1) / 2,
                                  (np.trace(m, axis1=1, axis2=2) - 1) / 2))
    worst = float(np.max(angle))
    errors.rotation_degrees = max(errors.rotation_degrees, worst)
    if worst > 0.01:
        k = int(np.argmax(angle))
        fail(f"{what}: entity {posed_ids[k]}'s rotation {worst:.5f} degree "
             "off, over 0.01")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--xformd", required=True)
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--seed", type=int, default=61)
    # To show what a decoder that takes another rotation scale than the
    # documented one gets (23170: over the bound).
    parser.add_argument("--rotation_scale", type=float, default=0)
    args = parser.parse_args()
    sys.path[:0] = args.pythonpath.split(":")
    try:
        import grpc
        import numpy as np
        from xform.v1 import xform_pb2 as pb
        from xform.v1 import xform_pb2_grpc as rpc
        from xform import decode as compact
    except ImportError as error:
        fail(f"{error}: needs Debian's python3-grpcio, python3-protobuf and "
             "python3-numpy, and the generated stubs")
    if args.rotation_scale:
        compact.ROTATION_SCALE = args.rotation_scale

    process, address = start_xformd(args.xformd)
    try:
        rng = random.Random(args.seed)
        channel = grpc.insecure_channel(address)
        stub = rpc.XformStub(channel)
        stub.CreateWorld(pb.CreateWorldRequest(
            name="py", mode=pb.FRAME_MODE_DRIVEN), timeout=30)
        writer = Writer(pb, stub, rng)
        writer.apply([writer.create(40, roots=True)], end_frame=False)
        for _ in range(ENTITIES // 290):  # Under the 64 KB message limit.
            writer.apply([writer.create(290)], end_frame=False)
        frame = writer.apply([writer.create(10)])
        roots = [e for e, p in writer.parent.items() if p == 0][:8]

        fine, coarse = 2 ** -10, 2 ** -4
        whole = dict(world="py")
        subtrees = dict(world="py", subtree=roots)
        streams = {
            "raw": Stream(grpc, rpc, address, pb.SubscribeRequest(**whole),
                          "raw"),
            "compact": Stream(grpc, rpc, address, pb.SubscribeRequest(
                encoding=pb.ENCODING_COMPACT, accepts_kept_view_snapshots=True,
                **whole), "compact"),
            "raw subtrees": Stream(grpc, rpc, address,
                                   pb.SubscribeRequest(**subtrees),
                                   "raw subtrees"),
            "compact subtrees": Stream(grpc, rpc, address, pb.SubscribeRequest(
                encoding=pb.ENCODING_COMPACT, position_precision=coarse,
                **subtrees), "compact subtrees"),
        }
        pairs = [("raw", "compact", fine), ("raw subtrees", "compact subtrees",
                                             coarse)]
        errors = {pair[1]: Errors() for pair in pairs}
        compact_names = [pair[1] for pair in pairs]

        def step(index, waiting, destroys=True):
            nonlocal frame
            frame = writer.apply(writer.frame_commands(index, destroys))
            for name in waiting:
                streams[name].wait_for(frame)

        def check(tag):
            for raw, compact_name, precision in pairs:
                with streams[raw].changed, streams[compact_name].changed:
                    compare(np, streams[raw].view, streams[compact_name].view,
                            precision, errors[compact_name],
                            f"{compact_name}, {tag}")

        for name in streams:
            streams[name].wait_for(frame)
        check(f"snapshot at frame {frame}")
        index = 0
        for _ in range(FRAMES_LIVE):
            index += 1
            step(index, list(streams))
            check(f"frame {frame}")
        # The compact ones stop reading: xformd folds their frames, and
        # past --max_pending sends a kept-view snapshot (the whole-world
        # one) or a resync (the filtered one). No destroys meanwhile: more
        # than --max_pending of them would leave its log, and the
        # whole-world one would resync too.
        for name in compact_names:
            streams[name].running.clear()
        for _ in range(FRAMES_STALLED):
            index += 1
            step(index, ["raw", "raw subtrees"], destroys=False)
        for name in compact_names:
            streams[name].running.set()
        for name in streams:
            streams[name].wait_for(frame)
        check(f"frame {frame}, after the stall")
        for _ in range(FRAMES_AFTER):
            index += 1
            step(index, list(streams))
            check(f"frame {frame}")

        for raw, compact_name, precision in pairs:
            view = streams[compact_name].view
            e = errors[compact_name]
            raw_stream, compact_stream = streams[raw], streams[compact_name]
            print(f"{compact_name} (precision 2^{int(math.log2(precision))}): "
                  f"{view.messages} messages to frame {view.frame}; "
                  f"position {e.position_steps:.3f} steps, rotation "
                  f"{e.rotation_degrees:.5f} degree, scale "
                  f"{e.scale_relative:.2e} at most; {e.raw_entries} raw and "
                  f"{e.posed_entries} posed entries checked; "
                  f"{view.frames_skipped} frames skipped, "
                  f"{view.kept_view_snapshots} kept-view snapshots, "
                  f"{view.resyncs} resyncs; {compact_stream.bytes} bytes "
                  f"against raw's {raw_stream.bytes}", flush=True)
        whole_view = streams["compact"].view
        filtered_view = streams["compact subtrees"].view
        if whole_view.frames_skipped == 0 or whole_view.kept_view_snapshots == 0:
            fail("the whole-world compact view was never sent a fold and a "
                 "kept-view snapshot: the test no longer tests them")
        if filtered_view.resyncs == 0:
            fail("the filtered compact view never resynced")
        if min(e.raw_entries for e in errors.values()) == 0:
            fail("no raw entry was checked")
        print("PASS", flush=True)
    finally:
        process.kill()
        process.wait()


if __name__ == "__main__":
    main()
