"""A FrameUpdate's moves as arrays, in either encoding, as docs/wire.md
specifies them: raw ``moved``/``moved_world``, and ``compact_moved``
parsed with numpy rather than entry by entry.

The compact bytes are a count and entries of varints, with a flag byte
(always below 0x80, so it reads as a one-byte varint) and, for raw entries
only, 48 bytes of floats. So a message without raw entries is one run of
varints: all are decoded at once, and only the walk from entry to entry
(2 + 6 or 9 values) is a loop, over plain ints. A message with a raw entry
is walked byte by byte instead (raw entries are rare: shear, or positions
beyond 2^52 steps).
"""

import math

import numpy as np

# What a rotation's sent components were multiplied by: 16383 * sqrt(2).
ROTATION_SCALE = 16383 * math.sqrt(2)
LOG_SCALE_SCALE = 65536.0

DELTA, WHOLE, RAW = 0, 1, 2
SCALE_PRESENT = 1 << 4
ROTATION_WHOLE = 1 << 5

_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1


class BrokenMessage(Exception):
    """A message that breaks the wire's rules: the stream must be dropped
    and subscribed again (our clients report DATA_LOSS)."""


class CompactMoves:
    """One message's compact entries, parsed (not yet against held poses).

    ids: uint64 (n,), ascending. kinds: uint8 (n,) DELTA, WHOLE or RAW.
    flags: uint8 (n,). values: int64 (n, 9): P (3), Q (3), S (3) as sent
    (for a whole, P already has its origin added; for a delta without a
    scale, S is 0). raw: float32 (n, 12), rows of raw entries only.
    """

    __slots__ = ("ids", "kinds", "flags", "values", "raw")

    def __init__(self, ids, flags, values, raw):
        self.ids, self.flags, self.values, self.raw = ids, flags, values, raw
        self.kinds = (flags & 3).astype(np.uint8)


def _varints(data):
    """Every varint of `data` (which must be only varints), as uint64;
    BrokenMessage for one longer than 10 bytes or cut off."""
    b = np.frombuffer(data, dtype=np.uint8)
    if len(b) == 0:
        return np.zeros(0, dtype=np.uint64)
    if b[-1] & 0x80:
        raise BrokenMessage("compact_moved ends inside a varint")
    ends = np.flatnonzero(b < 0x80)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = ends - starts + 1
    if lengths.max() > 10:
        raise BrokenMessage("a varint longer than 10 bytes")
    values = np.zeros(len(ends), dtype=np.uint64)
    for k in range(int(lengths.max())):
        has = lengths > k
        byte = b[starts[has] + k].astype(np.uint64) & np.uint64(0x7F)
        values[has] |= byte << np.uint64(7 * k)
    return values


def _zigzag(v):
    """Zigzag-decoded int64 of uint64 `v`."""
    return (v >> np.uint64(1)).astype(np.int64) ^ -(v & np.uint64(1)).astype(np.int64)


def _walk_tokens(tokens):
    """Entry starts (token indices) in an all-varint message."""
    t = tokens.tolist()
    if not t:
        return [], 0
    count = t[0]
    if count > len(t) // 2:
        raise BrokenMessage("an entry count larger than the field allows")
    starts = []
    pos = 1
    for _ in range(count):
        if pos + 1 >= len(t):
            raise BrokenMessage("compact_moved ends inside an entry")
        starts.append(pos)
        flags = t[pos + 1]
        kind = flags & 3
        if kind == WHOLE or (kind == DELTA and flags & SCALE_PRESENT):
            pos += 11
        elif kind == DELTA:
            pos += 8
        else:
            return None, count  # Raw (or broken): walk the bytes.
    if pos != len(t):
        raise BrokenMessage("bytes after the last entry")
    return starts, count


def _read_varint(b, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(b) or shift > 63:
            raise BrokenMessage("a varint cut off or too long")
        byte = b[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _parse_bytes(data):
    """The slow path: entry by entry over the bytes, for a message with raw
    entries. Returns (ids, flags, values, raw)."""
    b = bytes(data)
    count, pos = _read_varint(b, 0)
    if count > len(b) // 2:
        raise BrokenMessage("an entry count larger than the field allows")
    ids, flags, values = [], [], np.zeros((count, 9), dtype=np.int64)
    raw = np.zeros((count, 12), dtype=np.float32)
    entity = 0
    for i in range(count):
        delta, pos = _read_varint(b, pos)
        if i > 0 and delta == 0:
            raise BrokenMessage("an id delta of 0")
        entity += delta
        if pos >= len(b):
            raise BrokenMessage("compact_moved ends inside an entry")
        flag = b[pos]
        pos += 1
        kind = flag & 3
        ids.append(entity)
        flags.append(flag)
        if kind == RAW:
            if pos + 48 > len(b):
                raise BrokenMessage("a raw entry cut off")
            raw[i] = np.frombuffer(b, dtype="<f4", count=12, offset=pos)
            pos += 48
            continue
        if kind == 3:
            raise BrokenMessage("entry kind 3")
        n = 9 if kind == WHOLE or flag & SCALE_PRESENT else 6
        for k in range(n):
            v, pos = _read_varint(b, pos)
            values[i, k] = (v >> 1) ^ -(v & 1)
    if pos != len(b):
        raise BrokenMessage("bytes after the last entry")
    return (np.array(ids, dtype=np.uint64), np.array(flags, dtype=np.uint8),
            values, raw)


def parse_compact(data):
    """`compact_moved` as CompactMoves, whole entries' positions made
    absolute (each whole's origin is the previous whole's position)."""
    if len(data) == 0:
        empty = np.zeros(0, dtype=np.uint64)
        return CompactMoves(empty, np.zeros(0, np.uint8),
                            np.zeros((0, 9), np.int64), np.zeros((0, 12), np.float32))
    starts = None
    try:
        # Raw entries' floats need not read as varints: then the bytes.
        tokens = _varints(data)
        starts, _ = _walk_tokens(tokens)
    except BrokenMessage:
        starts = None
    if starts is None:
        ids, flags, values, raw = _parse_bytes(data)
    else:
        s = np.array(starts, dtype=np.int64)
        deltas = tokens[s]
        if len(s) > 1 and (deltas[1:] == 0).any():
            raise BrokenMessage("an id delta of 0")
        ids = np.cumsum(deltas, dtype=np.uint64)
        flags = tokens[s + 1].astype(np.uint8)
        if ((flags & 3) == 3).any() or (tokens[s + 1] > 0x7F).any():
            raise BrokenMessage("an unknown entry kind")
        n = np.where(((flags & 3) == WHOLE) | ((flags & SCALE_PRESENT) != 0), 9, 6)
        index = s[:, None] + 2 + np.arange(9)[None, :]
        index = np.minimum(index, len(tokens) - 1)
        values = _zigzag(tokens[index])
        values[n == 6, 6:] = 0
        raw = np.zeros((len(s), 12), dtype=np.float32)
    _check_ranges(values, flags)
    _absolute_wholes(values, flags)
    return CompactMoves(ids, flags, values, raw)


def _check_ranges(values, flags):
    q = np.abs(values[:, 3:9])
    if (q > _INT32_MAX).any():
        raise BrokenMessage("a rotation or scale value out of int32 range")


def _absolute_wholes(values, flags):
    wholes = np.flatnonzero((flags & 3) == WHOLE)
    if len(wholes):
        # Each whole's P is against the previous whole's: a running sum.
        values[wholes, 0:3] = np.cumsum(values[wholes, 0:3], axis=0)


def resolve(moves, held_pose, held_ok):
    """The poses of `moves`' entries against the held ones.

    held_pose: int64 (n, 10) P Q S L of each entry's entity as held;
    held_ok: bool (n,) whether one is held. Returns (pose (n, 10) int64,
    posed: bool (n,), False for raw entries). BrokenMessage for a delta
    against no held pose.
    """
    kinds, flags, v = moves.kinds, moves.flags, moves.values
    pose = np.zeros((len(kinds), 10), dtype=np.int64)
    whole = kinds == WHOLE
    delta = kinds == DELTA
    if (delta & ~held_ok).any():
        raise BrokenMessage("a delta for a pose not held")
    pose[:, 9] = (flags >> 2) & 3
    pose[whole, 0:9] = v[whole]
    rotation_whole = (flags & ROTATION_WHOLE) != 0
    scale_present = (flags & SCALE_PRESENT) != 0
    pose[delta, 0:3] = held_pose[delta, 0:3] + v[delta, 0:3]
    dq = delta & ~rotation_whole
    pose[dq, 3:6] = held_pose[dq, 3:6] + v[dq, 3:6]
    wq = delta & rotation_whole
    pose[wq, 3:6] = v[wq, 3:6]
    ds = delta & scale_present
    pose[ds, 6:9] = held_pose[ds, 6:9] + v[ds, 6:9]
    ns = delta & ~scale_present
    pose[ns, 6:9] = held_pose[ns, 6:9]
    if (np.abs(pose[:, 3:9]) > _INT32_MAX).any():
        raise BrokenMessage("a rotation or scale out of int32 range")
    return pose, kinds != RAW


def matrices(pose, precision):
    """World matrices (n, 3, 4) float32 of poses (n, 10): P Q S L."""
    n = len(pose)
    t = (pose[:, 0:3].astype(np.float64) * float(precision)).astype(np.float32)
    c = pose[:, 3:6].astype(np.float32) / np.float32(ROTATION_SCALE)
    left = np.sqrt(np.maximum(np.float32(0), np.float32(1) - (c * c).sum(axis=1)))
    q = np.empty((n, 4), dtype=np.float32)
    order = ((1, 2, 3), (0, 2, 3), (0, 1, 3), (0, 1, 2))
    L = pose[:, 9]
    for l, sent in enumerate(order):
        rows = L == l
        if rows.any():
            q[rows, l] = left[rows]
            q[np.ix_(rows, sent)] = c[rows]
    x, y, z, w = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    s = np.exp2(pose[:, 6:9].astype(np.float32) / np.float32(LOG_SCALE_SCALE))
    m = np.empty((n, 3, 4), dtype=np.float32)
    m[:, 0, 0] = 1 - 2 * (y * y + z * z)
    m[:, 0, 1] = 2 * (x * y - w * z)
    m[:, 0, 2] = 2 * (x * z + w * y)
    m[:, 1, 0] = 2 * (x * y + w * z)
    m[:, 1, 1] = 1 - 2 * (x * x + z * z)
    m[:, 1, 2] = 2 * (y * z - w * x)
    m[:, 2, 0] = 2 * (x * z - w * y)
    m[:, 2, 1] = 2 * (y * z + w * x)
    m[:, 2, 2] = 1 - 2 * (x * x + y * y)
    m[:, :, 0:3] *= s[:, None, :]
    m[:, :, 3] = t
    return m
