"""PoseHistory: where a Mirror's entities were at a stamp, between the
frames it received (as the C++ Interpolator, include/xform/interpolator.h).

Each frame gives the world matrices of the entities it moved, created or
re-parented, at the frame's stamp (FrameUpdate.stamp_nanos). Between two
samples of an entity its pose is interpolated: position and scale
linearly, rotation by slerp. A create or a re-parent is a jump: the pose
before holds until the frame that jumps. An entity keeps its pose until it
moves again, so a stamp after its last sample is that sample.

Each entity keeps its samples within `window` nanoseconds of the newest
frame, plus the one before them. Costs: recording O(entities in the frame),
a Python step each; a lookup O(log samples of the entity).
"""

import bisect
from typing import Optional

import numpy as np

from xform.client import XformError

import grpc


def _quaternion(r: np.ndarray) -> np.ndarray:
    """A rotation matrix's unit quaternion (x, y, z, w), w >= 0."""
    trace = r[0, 0] + r[1, 1] + r[2, 2]
    if trace > 0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s]
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = [0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s, (r[2, 1] - r[1, 2]) / s]
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = [(r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s, (r[0, 2] - r[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = [(r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s, (r[1, 0] - r[0, 1]) / s]
    q = np.array(q)
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def _rotation(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def _slerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    d = float(np.dot(a, b))
    if d < 0:
        b, d = -b, -d
    if d > 0.9995:
        q = a + t * (b - a)
        return q / np.linalg.norm(q)
    angle = np.arccos(d)
    return (np.sin((1 - t) * angle) * a + np.sin(t * angle) * b) / np.sin(angle)


def interpolate(m0: np.ndarray, m1: np.ndarray, t: float) -> np.ndarray:
    """The pose a fraction t of the way from world matrix m0 to m1 (3, 4):
    position and scale lerped, rotation slerped."""
    m0, m1 = m0.astype(np.float64), m1.astype(np.float64)
    s0, s1 = np.linalg.norm(m0[:, :3], axis=0), np.linalg.norm(m1[:, :3], axis=0)
    q = _slerp(_quaternion(m0[:, :3] / s0), _quaternion(m1[:, :3] / s1), t)
    out = np.empty((3, 4))
    out[:, :3] = _rotation(q) * (s0 + t * (s1 - s0))
    out[:, 3] = m0[:, 3] + t * (m1[:, 3] - m0[:, 3])
    return out.astype(np.float32)


class PoseHistory:
    """Samples (stamp, 12 floats, jump) per entity, in stamp order."""

    def __init__(self, window_nanos: int):
        self.window = window_nanos
        self.newest = 0
        self._stamps = {}   # entity -> [stamp, ...]
        self._samples = {}  # entity -> [(matrix as 12 floats, jump), ...]

    def record(self, stamp: int, ids, worlds: np.ndarray, jumps) -> None:
        """One frame: `worlds` (n, 3, 4) of `ids` at `stamp`; those in
        `jumps` (a set) were created or re-parented by it."""
        self.newest = max(self.newest, stamp)
        horizon = self.newest - self.window
        rows = worlds.reshape(-1, 12).tolist()
        for e, row in zip(ids, rows):
            stamps = self._stamps.get(e)
            if stamps is None:
                self._stamps[e] = [stamp]
                self._samples[e] = [(row, e in jumps)]
                continue
            samples = self._samples[e]
            if stamps and stamps[-1] >= stamp:  # A frame again at one stamp.
                stamps[-1], samples[-1] = stamp, (row, samples[-1][1] or e in jumps)
            else:
                stamps.append(stamp)
                samples.append((row, e in jumps))
            # Keep the newest sample at or before the horizon, and after.
            keep = bisect.bisect_right(stamps, horizon) - 1
            if keep > 0:
                del stamps[:keep]
                del samples[:keep]

    def forget(self, ids) -> None:
        for e in ids:
            self._stamps.pop(e, None)
            self._samples.pop(e, None)

    def world_matrix_at(self, entity: int, stamp: int,
                        current: Optional[np.ndarray]) -> np.ndarray:
        """`entity`'s world matrix at `stamp`. NOT_FOUND for one neither in
        the history nor the view (`current` None); OUT_OF_RANGE for a stamp
        before what the history holds of it."""
        stamps = self._stamps.get(entity)
        if not stamps:
            if current is None:
                raise XformError(grpc.StatusCode.NOT_FOUND, f"no entity {entity}")
            if stamp < self.newest - self.window:
                raise XformError(grpc.StatusCode.OUT_OF_RANGE,
                                 f"stamp {stamp} is before the history's window")
            return current
        samples = self._samples[entity]
        k = bisect.bisect_right(stamps, stamp) - 1
        if k < 0:
            raise XformError(grpc.StatusCode.OUT_OF_RANGE,
                             f"stamp {stamp} is before entity {entity}'s "
                             f"oldest sample ({stamps[0]})")
        before = np.array(samples[k][0], dtype=np.float32).reshape(3, 4)
        if k + 1 == len(stamps) or samples[k + 1][1] or stamps[k] == stamp:
            return before  # Held: the newest, or before a jump.
        after = np.array(samples[k + 1][0], dtype=np.float32).reshape(3, 4)
        t = (stamp - stamps[k]) / (stamps[k + 1] - stamps[k])
        return interpolate(before, after, t)
