"""The compact encoding of a FrameUpdate's moves (ENCODING_COMPACT), as
docs/wire.md specifies it: parsing compact_moved, and poses to matrices.

Written from docs/wire.md alone, as a client author in another language
would write one; tests/python/compact_client_test.py holds it to a real
xformd's raw stream.
"""

import math

import numpy as np

# What a rotation's sent components were multiplied by: 16383 * sqrt(2).
ROTATION_SCALE = 16383 * math.sqrt(2)
# What a log2 scale was multiplied by.
LOG_SCALE_SCALE = 65536

DELTA, WHOLE, RAW = 0, 1, 2
SCALE_PRESENT = 1 << 4
ROTATION_WHOLE = 1 << 5

INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)


class BrokenMessage(Exception):
    """A message that breaks the wire's rules: drop the stream, resubscribe."""


class Pose:
    """A world matrix as the compact encoding carries it: integer position
    P, rotation Q (the three sent components), log scale S, and L, the
    left-out component (0 x, 1 y, 2 z, 3 w)."""

    __slots__ = ("P", "Q", "S", "L")

    def __init__(self, P, Q, S, L):
        self.P, self.Q, self.S, self.L = P, Q, S, L

    def __eq__(self, other):
        return (self.P, self.Q, self.S, self.L) == (other.P, other.Q, other.S,
                                                    other.L)

    def __repr__(self):
        return f"Pose(P={self.P}, Q={self.Q}, S={self.S}, L={self.L})"


class Entry:
    """One entry of compact_moved, as read (not yet against a held pose)."""

    __slots__ = ("id", "flags", "values", "raw")

    def __init__(self, entity, flags, values=None, raw=None):
        self.id, self.flags, self.values, self.raw = entity, flags, values, raw

    @property
    def kind(self):
        return self.flags & 3

    @property
    def largest(self):
        return (self.flags >> 2) & 3


def _varint(data, at):
    result, shift = 0, 0
    while True:
        if at >= len(data) or shift >= 70:
            raise BrokenMessage("cut short")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result & ((1 << 64) - 1), at
        shift += 7


def _zigzag(data, at):
    n, at = _varint(data, at)
    return (n >> 1) ^ -(n & 1), at


def parse(data):
    """The entries of one message's compact_moved, in order."""
    if not data:
        return []
    count, at = _varint(data, 0)
    if count > len(data) // 2:
        raise BrokenMessage("a count larger than the bytes allow")
    entries, entity = [], 0
    for index in range(count):
        delta, at = _varint(data, at)
        if delta == 0 and index > 0:
            raise BrokenMessage("an id not above the one before")
        entity += delta
        if at >= len(data):
            raise BrokenMessage("cut short")
        flags = data[at]
        at += 1
        kind = flags & 3
        if kind == RAW:
            if len(data) - at < 48:
                raise BrokenMessage("cut short")
            raw = np.frombuffer(data, dtype="<f4", count=12, offset=at).copy()
            at += 48
            entries.append(Entry(entity, flags, raw=raw))
            continue
        if kind not in (WHOLE, DELTA):
            raise BrokenMessage("an unknown entry kind")
        n = 9 if kind == WHOLE or flags & SCALE_PRESENT else 6
        values = []
        for _ in range(n):
            value, at = _zigzag(data, at)
            values.append(value)
        entries.append(Entry(entity, flags, values=values))
    if at != len(data):
        raise BrokenMessage("bytes after the last entry")
    return entries


def _checked(values, bounds):
    low, high = bounds
    for v in values:
        if not low <= v <= high:
            raise BrokenMessage("a value out of its range")
    return tuple(values)


def resolve(entries, held):
    """Each entry's pose, or None for a raw one: wholes against the origin
    the message's wholes carry along, deltas against held(id), the pose the
    receiver holds for the entity (None when it holds none: broken)."""
    origin = (0, 0, 0)
    poses = []
    for e in entries:
        if e.kind == RAW:
            poses.append(None)
            continue
        v = e.values
        if e.kind == WHOLE:
            P = _checked([origin[i] + v[i] for i in range(3)], INT64)
            Q = _checked(v[3:6], INT32)
            S = _checked(v[6:9], INT32)
            origin = P
        else:
            h = held(e.id)
            if h is None:
                raise BrokenMessage(f"a delta for entity {e.id}, not held")
            P = _checked([h.P[i] + v[i] for i in range(3)], INT64)
            if e.flags & ROTATION_WHOLE:
                Q = _checked(v[3:6], INT32)
            else:
                Q = _checked([h.Q[i] + v[3 + i] for i in range(3)], INT32)
            if e.flags & SCALE_PRESENT:
                S = _checked([h.S[i] + v[6 + i] for i in range(3)], INT32)
            else:
                S = h.S
        poses.append(Pose(P, Q, S, e.largest))
    return poses


# Where the three sent components go, by the left-out one (x y z w order).
_SENT = {0: (1, 2, 3), 1: (0, 2, 3), 2: (0, 1, 3), 3: (0, 1, 2)}


def matrices(poses, precision):
    """The world matrices (n x 12 float32) of n poses at `precision`."""
    n = len(poses)
    if n == 0:
        return np.zeros((0, 12), dtype=np.float32)
    P = np.array([p.P for p in poses], dtype=np.float64)
    Q = np.array([p.Q for p in poses], dtype=np.float64) / ROTATION_SCALE
    S = np.array([p.S for p in poses], dtype=np.float64) / LOG_SCALE_SCALE
    L = np.array([p.L for p in poses])
    quat = np.zeros((n, 4))  # x y z w
    for largest, sent in _SENT.items():
        rows = L == largest
        quat[np.ix_(rows, sent)] = Q[rows]
    rebuilt = np.sqrt(np.maximum(0.0, 1.0 - np.sum(Q * Q, axis=1)))
    quat[np.arange(n), L] = rebuilt
    x, y, z, w = quat.T
    R = np.empty((n, 3, 3))
    R[:, 0, 0] = 1 - 2 * (y * y + z * z)
    R[:, 0, 1] = 2 * (x * y - w * z)
    R[:, 0, 2] = 2 * (x * z + w * y)
    R[:, 1, 0] = 2 * (x * y + w * z)
    R[:, 1, 1] = 1 - 2 * (x * x + z * z)
    R[:, 1, 2] = 2 * (y * z - w * x)
    R[:, 2, 0] = 2 * (x * z - w * y)
    R[:, 2, 1] = 2 * (y * z + w * x)
    R[:, 2, 2] = 1 - 2 * (x * x + y * y)
    scale = np.exp2(S)
    out = np.empty((n, 3, 4))
    out[:, :, :3] = R * scale[:, np.newaxis, :]  # Columns times their scale.
    out[:, :, 3] = (P * float(precision)).astype(np.float32)
    return out.reshape(n, 12).astype(np.float32)
