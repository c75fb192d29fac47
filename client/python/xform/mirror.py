"""Mirror: a world (or a view of it) kept live from a Subscribe stream as
numpy arrays, by the rules of docs/wire.md, on a thread of its own.

    mirror = xform.Mirror(client, "city", encoding="compact")
    mirror.wait_for_sync(10)
    view = mirror.view()        # ids (n,), parents (n,), worlds (n, 3, 4)
    mirror.set_region(xform.region(sphere=(0, 0, 0, 50)))

It reconnects when the stream breaks, at docs/wire.md's retry pace and
on the next node of the client's list; a whole-world mirror resumes from
the frame it holds (resume_from_frame), so it is sent what changed rather
than a snapshot. A broken message (DATA_LOSS) drops the stream and starts
afresh. Each message costs O(its entries) in numpy, plus a Python step per
compact entry's walk and per created or destroyed entity.
"""

import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import grpc
import numpy as np

from xform import decode
from xform.history import PoseHistory
from xform.client import SUBSCRIPTION_ID_METADATA, Client, XformError, retry_wait
from xform.v1 import xform_pb2

_ENCODINGS = {"raw": xform_pb2.ENCODING_RAW, "compact": xform_pb2.ENCODING_COMPACT}


@dataclass
class View:
    """A consistent copy of a mirror: every entity's id, parent (0: a root
    or outside the view) and world matrix, in no order, at `frame`."""

    ids: np.ndarray
    parents: np.ndarray
    worlds: np.ndarray
    frame: int
    stamp_nanos: int

    def as_dict(self) -> dict:
        """{id: (parent, world)}: for small views and tests."""
        return {int(e): (int(p), w) for e, p, w in zip(self.ids, self.parents, self.worlds)}


class _Table:
    """Entities structure-of-arrays, rows in no order, an id's row by dict;
    with each entity's held compact pose (P Q S L) and whether it has one."""

    def __init__(self, capacity: int = 1024):
        self.n = 0
        self.row = {}
        self.ids = np.zeros(capacity, dtype=np.uint64)
        self.parents = np.zeros(capacity, dtype=np.uint64)
        self.worlds = np.zeros((capacity, 3, 4), dtype=np.float32)
        self.poses = np.zeros((capacity, 10), dtype=np.int64)
        self.posed = np.zeros(capacity, dtype=bool)

    def copy(self) -> "_Table":
        out = _Table(max(1024, self.n))
        out.n, out.row = self.n, dict(self.row)
        for name in ("ids", "parents", "worlds", "poses", "posed"):
            getattr(out, name)[: self.n] = getattr(self, name)[: self.n]
        return out

    def _grow(self, need: int):
        capacity = len(self.ids)
        if need <= capacity:
            return
        capacity = max(need, 2 * capacity)
        for name in ("ids", "parents", "worlds", "poses", "posed"):
            old = getattr(self, name)
            new = np.zeros((capacity,) + old.shape[1:], dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def rows(self, ids) -> np.ndarray:
        row = self.row
        try:
            return np.fromiter((row[e] for e in ids.tolist()), dtype=np.int64,
                               count=len(ids))
        except KeyError as missing:
            raise decode.BrokenMessage(f"entity {missing} is not in the view") from None

    def destroy(self, ids):
        for e in ids:
            r = self.row.pop(e, None)
            if r is None:
                continue
            last = self.n - 1
            if r != last:
                moved = int(self.ids[last])
                for name in ("ids", "parents", "worlds", "poses", "posed"):
                    a = getattr(self, name)
                    a[r] = a[last]
                self.row[moved] = r
            self.n = last

    def create(self, ids, parents):
        self._grow(self.n + len(ids))
        for e, p in zip(ids, parents):
            r = self.row.get(e)
            if r is None:
                r = self.n
                self.n += 1
                self.row[e] = r
                self.ids[r] = e
            self.parents[r] = p
            self.worlds[r] = 0
            self.posed[r] = False

    def reparent(self, ids, parents):
        for e, p in zip(ids, parents):
            r = self.row.get(e)
            if r is not None:
                self.parents[r] = p


class StreamView:
    """A Subscribe stream's view, kept by the rules of docs/wire.md on the
    caller's thread: `apply` each FrameUpdate in order (BrokenMessage means
    drop the stream and subscribe again). Mirror keeps one under its lock;
    a caller with a stream of its own may keep one directly."""

    def __init__(self):
        self.table = _Table()
        self._staging = None
        self._staging_keeps_view = False
        self.frame = 0
        self.stamp_nanos = 0
        self.history = 0
        self.synced = False
        self.in_frame = False  # Parts of a frame applied, its last not yet.
        self.messages = 0
        self.updates = 0  # Moves applied (entries of moved or compact_moved).
        self.frames_skipped = 0
        self.resyncs = 0  # Snapshots after the first, not keeping the view.
        self.kept_view_snapshots = 0
        # With track_changes: what the frame being applied touched (moved,
        # created, re-parented), those it created or re-parented (jumps),
        # and what it destroyed; emptied by the caller.
        self.track_changes = False
        self.touched, self.jumps, self.destroyed = set(), set(), set()

    def apply(self, update) -> bool:
        """Applies one message; True when it completed a frame (or a
        snapshot)."""
        self.messages += 1
        self.updates += len(update.moved)
        if update.snapshot:
            done = self._snapshot_part(update)
        else:
            if self._staging is not None:
                raise decode.BrokenMessage("a frame inside a snapshot")
            self.updates += _apply_part(self.table, update)
            self._track(update)
            done = update.last_part
            self.in_frame = not done
        if done:
            self.frame = update.frame
            self.stamp_nanos = update.stamp_nanos
            self.frames_skipped += update.frames_skipped
        return done

    def _snapshot_part(self, update) -> bool:
        if update.part == 0:  # Afresh: whatever was being built goes.
            self._staging = self.table.copy() if update.keeps_view else _Table()
            self._staging_keeps_view = update.keeps_view
        elif self._staging is None:
            raise decode.BrokenMessage("a snapshot part without its part 0")
        self.history = update.history
        self.updates += _apply_part(self._staging, update)
        self._track(update)
        if not update.snapshot_done:
            return False
        if self._staging_keeps_view:
            self.kept_view_snapshots += 1
        elif self.synced:
            self.resyncs += 1
        self.table, self._staging = self._staging, None
        self.synced = True
        self.in_frame = False
        return True

    def _track(self, u) -> None:
        if not self.track_changes:
            return
        self.destroyed.update(u.destroyed)
        self.jumps.update(u.created)
        self.jumps.update(u.reparented)
        self.touched.update(u.created)
        self.touched.update(u.reparented)
        self.touched.update(u.moved)
        if u.compact_moved:
            self.touched.update(decode.parse_compact(u.compact_moved).ids.tolist())

    def view(self) -> View:
        t = self.table
        return View(t.ids[: t.n].copy(), t.parents[: t.n].copy(),
                    t.worlds[: t.n].copy(), self.frame, self.stamp_nanos)


class Mirror:
    """Keeps `world` (or the view the filters give) from `client`.

    entities, subtrees, region: the view (SubscribeRequest's); max_rate_hz:
    at most that many messages a second; encoding "compact" (default) or
    "raw"; position_precision for compact (0: 0.001). on_frame(mirror,
    frame) is called on the mirror's thread after each frame is applied.
    history_seconds > 0 keeps that long of each entity's poses, for
    world_matrix_at and lookup_transform at a stamp (history.py).
    """

    def __init__(self, client: Client, world: str, *, entities: Sequence[int] = (),
                 subtrees: Sequence[int] = (), region: Optional[xform_pb2.Region] = None,
                 max_rate_hz: float = 0.0, encoding: str = "compact",
                 position_precision: float = 0.0,
                 on_frame: Optional[Callable[["Mirror", int], None]] = None,
                 history_seconds: float = 0.0):
        self._client = client
        self.world = world
        self._request = xform_pb2.SubscribeRequest(
            world=world, entity=[int(e) for e in entities],
            subtree=[int(e) for e in subtrees], max_rate_hz=max_rate_hz,
            encoding=_ENCODINGS[encoding], position_precision=position_precision,
            no_echo_client_id="")
        if region is not None:
            self._request.region.CopyFrom(region)
        # Only a whole-world view may resume (docs/wire.md).
        self._whole_world = not entities and not subtrees and region is None
        self._request.accepts_kept_view_snapshots = self._whole_world
        self._on_frame = on_frame
        self._lock = threading.Condition()
        self._view = StreamView()
        self._history = (PoseHistory(int(history_seconds * 1e9))
                         if history_seconds > 0 else None)
        self._view.track_changes = self._history is not None
        self._status: Optional[XformError] = None
        self._subscription = 0
        self._address = None
        self._call = None
        self._closing = False
        self.reconnects = 0
        self._resumes = 0
        self._thread = threading.Thread(target=self._run, name=f"mirror-{world}",
                                        daemon=True)
        self._thread.start()

    # ---- reading the copy ---------------------------------------------------

    @property
    def frame(self) -> int:
        with self._lock:
            return self._view.frame

    @property
    def synced(self) -> bool:
        with self._lock:
            return self._view.synced

    @property
    def resyncs(self) -> int:
        """Snapshots after the first that did not keep the view."""
        with self._lock:
            return self._view.resyncs

    @property
    def resumes(self) -> int:
        """Streams that asked to resume from the frame held (a whole-world
        mirror's reconnects)."""
        with self._lock:
            return self._resumes

    @property
    def messages(self) -> int:
        with self._lock:
            return self._view.messages

    @property
    def updates(self) -> int:
        """Moves applied, in either encoding."""
        with self._lock:
            return self._view.updates

    @property
    def status(self) -> Optional[XformError]:
        """Why the stream last ended (None while it is up)."""
        with self._lock:
            return self._status

    def view(self) -> View:
        """A copy of every entity, consistent with one frame. O(view)."""
        with self._lock:
            return self._view.view()

    def world_matrix(self, entity: int) -> np.ndarray:
        """One entity's world matrix (3, 4); KeyError if not in the view."""
        with self._lock:
            table = self._view.table
            return table.worlds[table.row[entity]].copy()

    def parent(self, entity: int) -> int:
        with self._lock:
            table = self._view.table
            return int(table.parents[table.row[entity]])

    def __len__(self) -> int:
        with self._lock:
            return self._view.table.n

    def wait_for_sync(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: self._view.synced, timeout)

    def wait_for_frame(self, frame: int, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(
                lambda: self._view.synced and self._view.frame >= frame, timeout)

    # ---- moving the view ----------------------------------------------------

    def set_region(self, where: xform_pb2.Region) -> None:
        """Moves the view's region (UpdateSubscription), for this stream and
        the ones after it. Its next message holds what entered and left.
        FAILED_PRECONDITION for a mirror opened without a region."""
        if not self._request.HasField("region"):
            raise XformError(grpc.StatusCode.FAILED_PRECONDITION,
                             "this mirror has no region to move")
        deadline = time.monotonic() + self._client.deadline
        with self._lock:
            self._request.region.CopyFrom(where)
            self._lock.wait_for(lambda: self._subscription != 0 or self._closing,
                                max(0.0, deadline - time.monotonic()))
            subscription, address = self._subscription, self._address
        if subscription == 0:
            return  # The next stream asks for the new region itself.
        self._client.update_subscription(self.world, subscription, where, address)

    # ---- where entities were ------------------------------------------------

    def world_matrix_at(self, entity: int, stamp: int) -> np.ndarray:
        """`entity`'s world matrix at `stamp` (ns, the frames' clock),
        interpolated between the frames that gave it (history.py). Needs
        history_seconds; OUT_OF_RANGE before what it keeps, NOT_FOUND for
        an entity it never held."""
        if self._history is None:
            raise XformError(grpc.StatusCode.FAILED_PRECONDITION,
                             "the mirror keeps no history: set history_seconds")
        with self._lock:
            table = self._view.table
            row = table.row.get(entity)
            current = table.worlds[row].copy() if row is not None else None
            return self._history.world_matrix_at(entity, stamp, current)

    def lookup_transform(self, target: int, source: int, stamp: int) -> np.ndarray:
        """`source`'s pose in `target`'s frame (0: the world's origin) at
        `stamp`, as a (3, 4) matrix, from this mirror's history."""
        def affine(m):
            out = np.eye(4)
            out[:3, :] = m
            return out
        source_world = affine(self.world_matrix_at(source, stamp))
        if target == 0:
            return source_world[:3, :].astype(np.float32)
        target_world = affine(self.world_matrix_at(target, stamp))
        return (np.linalg.inv(target_world) @ source_world)[:3, :].astype(np.float32)

    def _record_history(self) -> None:
        view = self._view
        table = view.table
        ids = [e for e in view.touched if e in table.row]
        if ids:
            rows = table.rows(np.array(ids, dtype=np.uint64))
            self._history.record(view.stamp_nanos, ids, table.worlds[rows], view.jumps)
        self._history.forget(e for e in view.destroyed if e not in table.row)
        view.touched, view.jumps, view.destroyed = set(), set(), set()

    def close(self) -> None:
        with self._lock:
            self._closing = True
            call = self._call
            self._lock.notify_all()
        if call is not None:
            call.cancel()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the stream ---------------------------------------------------------

    def _run(self):
        rng = random.Random()
        attempt, node = 0, 0
        addresses = self._client.addresses
        while True:
            with self._lock:
                if self._closing:
                    return
                request = xform_pb2.SubscribeRequest()
                request.CopyFrom(self._request)
                if self._whole_world and self._view.synced:
                    request.resume_from_frame = self._view.frame
                    request.resume_history = self._view.history
                    self._resumes += 1
                self._subscription = 0
                self._address = addresses[node % len(addresses)]
                call = self._client.subscribe(request, self._address)
                self._call = call
            progressed = self._read(call)
            with self._lock:
                if self._closing:
                    return
            self.reconnects += 1
            attempt = 1 if progressed else attempt + 1
            node += 1
            time.sleep(retry_wait(attempt, rng))

    def _read(self, call) -> bool:
        """Applies the stream's messages until it ends; whether any came."""
        progressed = False
        try:
            metadata = dict(call.initial_metadata() or ())
            with self._lock:
                self._subscription = int(metadata.get(SUBSCRIPTION_ID_METADATA, 0))
                self._lock.notify_all()
            for update in call:
                progressed = True
                self._apply(update)
        except grpc.RpcError as error:
            with self._lock:
                if not self._closing:
                    self._status = XformError(error.code(), error.details() or "")
        except decode.BrokenMessage as broken:
            call.cancel()
            with self._lock:
                self._status = XformError(grpc.StatusCode.DATA_LOSS, str(broken))
                self._view = StreamView()  # Afresh: no resume from it.
                self._view.track_changes = self._history is not None
        return progressed

    def _apply(self, update):
        with self._lock:
            self._status = None
            done = self._view.apply(update)
            if done:
                if self._history is not None:
                    self._record_history()
                self._lock.notify_all()
        if done and self._on_frame is not None:
            self._on_frame(self, update.frame)


def _apply_part(table: _Table, u) -> int:
    """One message's changes, in the wire's order: destroys, creates,
    re-parents, then moves."""
    if u.destroyed:
        table.destroy(u.destroyed)
    if u.created:
        parents = u.created_parent if u.created_parent else [0] * len(u.created)
        table.create(u.created, parents)
    if u.reparented:
        table.reparent(u.reparented, u.reparented_parent)
    if u.moved:
        if len(u.moved_world) != 12 * len(u.moved):
            raise decode.BrokenMessage("moved_world is not 12 floats a move")
        rows = table.rows(np.array(u.moved, dtype=np.uint64))
        table.worlds[rows] = np.array(u.moved_world, dtype=np.float32).reshape(-1, 3, 4)
        table.posed[rows] = False
    return _apply_compact(table, u) if u.compact_moved else 0


def _apply_compact(table: _Table, u) -> int:
    moves = decode.parse_compact(u.compact_moved)
    if len(moves.ids) == 0:
        return 0
    rows = table.rows(moves.ids)
    poses, posed = decode.resolve(moves, table.poses[rows], table.posed[rows])
    held = rows[posed]
    table.poses[held] = poses[posed]
    table.posed[rows] = posed
    table.worlds[held] = decode.matrices(poses[posed], u.position_precision)
    if not posed.all():
        table.worlds[rows[~posed]] = moves.raw[~posed].reshape(-1, 3, 4)
    return len(rows)


__all__ = ["Mirror", "StreamView", "View"]
