"""A subscriber's view of a world, kept from a Subscribe stream's
FrameUpdate messages by the rules of docs/wire.md: parts applied together,
snapshots built aside (from the view held, for one that keeps it), and,
in the compact encoding, each entity's held pose.

    view = View()
    for update in stub.Subscribe(request):
        view.apply(update)      # raises BrokenMessage: resubscribe
        if view.synced: ...     # view.entities: id -> Entity

Not thread-safe: one stream, one thread.
"""

import numpy as np

from xform_client import compact


class Entity:
    """One entity of the view: its parent (0: a root, or outside the view),
    its world matrix (12 float32, row-major 3x4), and, in the compact
    encoding, the pose the stream last carried for it (None after a raw
    entry)."""

    __slots__ = ("parent", "world", "pose")

    def __init__(self, parent, world=None, pose=None):
        self.parent, self.world, self.pose = parent, world, pose

    def copy(self):
        return Entity(self.parent, self.world, self.pose)


class View:
    def __init__(self):
        self.entities = {}
        self.frame = None  # The frame the view is at; None before a snapshot.
        self.synced = False  # A snapshot has completed.
        self.messages = 0
        self.frames_skipped = 0  # Summed over the messages.
        self.resyncs = 0  # Snapshots after the first, not keeping the view.
        self.kept_view_snapshots = 0
        self._parts = []  # The frame in progress' parts.
        self._staging = None  # The snapshot being built.
        self._staging_keeps_view = False

    def apply(self, update):
        self.messages += 1
        if update.snapshot:
            self._snapshot_part(update)
            return
        if self._staging is not None:
            raise compact.BrokenMessage("a frame inside a snapshot")
        if self._parts and update.part != len(self._parts):
            raise compact.BrokenMessage("a part out of order")
        self._parts.append(update)
        if not update.last_part:
            return
        # Together, in order: an entity is in at most one part of a frame,
        # so each part's deltas are against the poses held before it.
        for part in self._parts:
            self._apply_part(self.entities, part)
        self._parts = []
        self.frame = update.frame
        self.frames_skipped += update.frames_skipped

    def _snapshot_part(self, update):
        if update.part == 0:  # Afresh: whatever was being built goes.
            self._parts = []
            self._staging_keeps_view = update.keeps_view
            self._staging = ({e: v.copy() for e, v in self.entities.items()}
                             if update.keeps_view else {})
        elif self._staging is None:
            raise compact.BrokenMessage("a snapshot part without its part 0")
        self._apply_part(self._staging, update)
        if not update.snapshot_done:
            return
        if self._staging_keeps_view:
            self.kept_view_snapshots += 1
        elif self.synced:
            self.resyncs += 1
        self.entities, self._staging = self._staging, None
        self.synced = True
        self.frame = update.frame
        self.frames_skipped += update.frames_skipped

    @staticmethod
    def _apply_part(view, u):
        for e in u.destroyed:
            view.pop(e, None)
        for e, parent in zip(u.created, u.created_parent):
            view[e] = Entity(parent)
        for e, parent in zip(u.reparented, u.reparented_parent):
            if e in view:
                view[e].parent = parent
        if len(u.moved_world) != 12 * len(u.moved):
            raise compact.BrokenMessage("moved_world is not 12 floats a move")
        if u.moved:
            worlds = np.array(u.moved_world, dtype=np.float32).reshape(-1, 12)
            for k, e in enumerate(u.moved):
                target = view.get(e)
                if target is None:
                    raise compact.BrokenMessage(f"a move of {e}, not in view")
                target.world, target.pose = worlds[k], None
        if not u.compact_moved:
            return
        entries = compact.parse(u.compact_moved)

        def held(e):
            target = view.get(e)
            return target.pose if target is not None else None

        poses = compact.resolve(entries, held)
        posed = [k for k, pose in enumerate(poses) if pose is not None]
        worlds = compact.matrices([poses[k] for k in posed],
                                  u.position_precision)
        for k, entry in enumerate(entries):
            if view.get(entry.id) is None:
                raise compact.BrokenMessage(f"a move of {entry.id}, not in view")
        for row, k in enumerate(posed):
            target = view[entries[k].id]
            target.world, target.pose = worlds[row], poses[k]
        for k, entry in enumerate(entries):
            if poses[k] is None:
                target = view[entry.id]
                target.world, target.pose = entry.raw, None
