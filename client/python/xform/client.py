"""Client: every call of xformd's service (proto/xform/v1/xform.proto),
with TLS, a token, deadlines, and a cluster's write ids, redirects and
retry pace as docs/wire.md specifies them.

    client = xform.Client("127.0.0.1:50051")
    client.create_world("arm", mode="driven")
    client.apply("arm", [xform.create([1, 2], parents=[0, 1])], end_frame=True)
    states = client.read("arm", [1, 2])          # numpy arrays
    poses = client.lookup_transform("arm", 0, [2], stamp_nanos=0)

Errors are XformError, carrying the gRPC status code. Thread-safe: gRPC
channels are, and the client's own state is a counter under a lock.
"""

import os
import random
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import grpc
import numpy as np

from xform.v1 import xform_pb2, xform_pb2_grpc

SUBSCRIPTION_ID_METADATA = "xform-subscription-id"
_MAX_REDIRECTS = 4

_MODES = {"tick": xform_pb2.FRAME_MODE_TICK, "driven": xform_pb2.FRAME_MODE_DRIVEN,
          "default": xform_pb2.FRAME_MODE_UNSPECIFIED}
_TIME_MODELS = {"hold": xform_pb2.TIME_MODEL_HOLD, "tf2": xform_pb2.TIME_MODEL_TF2}


class XformError(Exception):
    """A call xformd (or the network) refused: `code` is the
    grpc.StatusCode, `details` its message."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


@dataclass
class EntityStates:
    """What Read gives, structure-of-arrays: ids (n,) uint64, parents (n,)
    uint64 (0: a root), local (n, 10) float32 (position, rotation x y z w,
    scale), world (n, 3, 4) float32, stamps (n,) int64 (ns; 0 when the
    world keeps no stamps), names (n strings, "" for none)."""

    ids: np.ndarray
    parents: np.ndarray
    local: np.ndarray
    world: np.ndarray
    stamps: np.ndarray
    names: list


@dataclass
class Poses:
    """LookupTransform's answer, one per source: matrices (n, 3, 4), the
    stamps looked up at, and the oldest and newest samples used."""

    sources: np.ndarray
    matrices: np.ndarray
    stamps: np.ndarray
    oldest_used: np.ndarray
    newest_used: np.ndarray


# ---- commands ---------------------------------------------------------------

def _ids(values) -> list:
    return [int(v) for v in np.asarray(values, dtype=np.uint64).reshape(-1)]


def _transforms(values, n: int) -> list:
    """n local transforms as 10 floats each: an (n, 10) array, or one
    transform for all."""
    t = np.asarray(values, dtype=np.float32)
    if t.ndim == 1:
        t = np.broadcast_to(t, (n, 10))
    if t.shape != (n, 10):
        raise ValueError(f"want {n} transforms of 10 floats, got {t.shape}")
    return t.reshape(-1).tolist()


def create(entities, parents=None, local=None, names=None) -> xform_pb2.Command:
    """Creates `entities` (ids, non-zero), under `parents` (0: a root;
    default all roots), with `local` transforms (default identity) and
    `names` (one per entity, "" for none; unique in the world)."""
    c = xform_pb2.CreateCommand(entity=_ids(entities))
    if parents is not None:
        c.parent.extend(_ids(parents))
    if local is not None:
        c.local.extend(_transforms(local, len(c.entity)))
    if names is not None:
        c.name.extend(names)
    return xform_pb2.Command(create=c)


def rename(entities, names) -> xform_pb2.Command:
    """Names `entities` ("" takes a name away)."""
    return xform_pb2.Command(rename=xform_pb2.RenameCommand(
        entity=_ids(entities), name=list(names)))


def destroy(entities, keep_children: bool = False) -> xform_pb2.Command:
    """Destroys `entities` and their subtrees (or only them, their children
    going to their parent keeping their world transform)."""
    return xform_pb2.Command(destroy=xform_pb2.DestroyCommand(
        entity=_ids(entities), keep_children=keep_children))


def link(entities, parents, keep_world: bool = False) -> xform_pb2.Command:
    """Re-parents `entities` under `parents` (0: a root)."""
    return xform_pb2.Command(link=xform_pb2.LinkCommand(
        entity=_ids(entities), parent=_ids(parents), keep_world=keep_world))


def set_local(entities, local) -> xform_pb2.Command:
    """Sets local transforms: an (n, 10) array (or one for all)."""
    ids = _ids(entities)
    return xform_pb2.Command(set_local=xform_pb2.SetLocalCommand(
        entity=ids, local=_transforms(local, len(ids))))


def set_world(entities, world) -> xform_pb2.Command:
    """Sets world transforms (as TRS, 10 floats each)."""
    ids = _ids(entities)
    return xform_pb2.Command(set_world=xform_pb2.SetWorldCommand(
        entity=ids, world=_transforms(world, len(ids))))


def region(sphere=None, box=None, margin: float = 0.0) -> xform_pb2.Region:
    """A region view: sphere=(x, y, z, r) or box=(x0, y0, z0, x1, y1, z1)."""
    r = xform_pb2.Region(margin=margin)
    if sphere is not None:
        r.sphere.extend([float(v) for v in sphere])
    if box is not None:
        r.box.extend([float(v) for v in box])
    return r


# ---- the client -------------------------------------------------------------

def retry_wait(attempt: int, rng: random.Random) -> float:
    """docs/wire.md's retry pace: the n-th wait (n from 1), in seconds,
    uniform in [b/2, b], b = min(25 ms * 2^(n-1), 500 ms)."""
    b = min(0.025 * 2 ** (attempt - 1), 0.5)
    return rng.uniform(b / 2, b)


class Client:
    """A connection to xformd, or to a cluster's nodes.

    address: "host:port", or several comma-separated (a cluster's nodes:
    calls go to the first that answers, writes follow redirects to nodes
    these name or list). tls_ca: a PEM file of the CA to trust (TLS then;
    tls_cert/tls_key for a client certificate, tls_server_name to check
    another name). token or token_file: sent as "authorization: Bearer".
    deadline: seconds for each call.
    """

    def __init__(self, address: str = "127.0.0.1:50051", *,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None,
                 token: Optional[str] = None, token_file: Optional[str] = None,
                 deadline: float = 10.0, client_id: str = ""):
        self.addresses = [a.strip() for a in address.split(",") if a.strip()]
        if not self.addresses:
            raise ValueError("no address")
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._credentials = None
        if tls_ca is not None:
            def read(path):
                if path is None:
                    return None
                with open(path, "rb") as f:
                    return f.read()
            self._credentials = grpc.ssl_channel_credentials(
                read(tls_ca), read(tls_key), read(tls_cert))
        self._options = [("grpc.max_receive_message_length", 64 << 20)]
        if tls_server_name:
            self._options.append(("grpc.ssl_target_name_override", tls_server_name))
        self.deadline = deadline
        self.client_id = client_id
        self._lock = threading.Lock()
        self._stubs = {}
        self._preferred = 0  # The node that answered last.
        self._write_prefix = os.urandom(8).hex()
        self._writes = 0
        self._rng = random.Random()

    def close(self):
        with self._lock:
            for channel, _ in self._stubs.values():
                channel.close()
            self._stubs.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stub(self, address: Optional[str] = None) -> xform_pb2_grpc.XformStub:
        """The generated stub for `address` (default: the preferred node),
        for what this class does not wrap."""
        address = address or self.addresses[self._preferred]
        with self._lock:
            if address not in self._stubs:
                channel = (grpc.secure_channel(address, self._credentials, self._options)
                           if self._credentials else
                           grpc.insecure_channel(address, self._options))
                self._stubs[address] = (channel, xform_pb2_grpc.XformStub(channel))
            return self._stubs[address][1]

    @property
    def metadata(self):
        return self._metadata

    # ---- calling, with the retry pace --------------------------------------

    def _call(self, method: str, request, *, timeout: Optional[float] = None,
              redirects: bool = False):
        """`method` on a node: the preferred first; on UNAVAILABLE or
        DEADLINE_EXCEEDED the next, at the retry pace, until the deadline;
        with `redirects`, a FAILED_PRECONDITION naming an owner is followed
        (docs/wire.md)."""
        timeout = self.deadline if timeout is None else timeout
        give_up = time.monotonic() + timeout
        node, address, attempt, redirected = self._preferred, None, 0, 0
        while True:
            target = address or self.addresses[node % len(self.addresses)]
            left = max(0.001, give_up - time.monotonic())
            try:
                call = getattr(self.stub(target), method)
                answer = call(request, timeout=left, metadata=self._metadata)
                if address is None:
                    self._preferred = node % len(self.addresses)
                return answer
            except grpc.RpcError as error:
                code = error.code()
                owner = _trailer(error, "xform-owner-address")
                if (redirects and code == grpc.StatusCode.FAILED_PRECONDITION
                        and owner and redirected < _MAX_REDIRECTS
                        and self._trusts(owner, target)):
                    address, redirected = owner, redirected + 1
                    continue
                retry = code in (grpc.StatusCode.UNAVAILABLE,
                                 grpc.StatusCode.DEADLINE_EXCEEDED) or (
                    redirects and owner and redirected >= _MAX_REDIRECTS)
                if not retry or time.monotonic() >= give_up:
                    raise XformError(code, error.details() or "") from None
            attempt += 1
            address, redirected = None, 0
            node += 1
            time.sleep(min(retry_wait(attempt, self._rng),
                           max(0.0, give_up - time.monotonic())))

    def _trusts(self, owner: str, asked: str) -> bool:
        """Whether a redirect's address may be sent our token: one we were
        given, or one the redirecting node lists."""
        if owner in self.addresses:
            return True
        try:
            nodes = self.stub(asked).ListNodes(
                xform_pb2.ListNodesRequest(), timeout=self.deadline,
                metadata=self._metadata)
        except grpc.RpcError:
            return False
        return any(n.address == owner for n in nodes.nodes)

    def next_write_id(self) -> str:
        with self._lock:
            self._writes += 1
            return f"{self._write_prefix}-{self._writes}"

    # ---- worlds -------------------------------------------------------------

    def create_world(self, name: str, mode: str = "default", tick_hz: float = 0.0,
                     time_model: str = "hold") -> xform_pb2.WorldInfo:
        return self._call("CreateWorld", xform_pb2.CreateWorldRequest(
            name=name, mode=_MODES[mode], tick_hz=tick_hz,
            time_model=_TIME_MODELS[time_model]))

    def list_worlds(self) -> list:
        return list(self._call("ListWorlds", xform_pb2.ListWorldsRequest()).worlds)

    def get_world(self, name: str) -> xform_pb2.WorldInfo:
        return self._call("GetWorld", xform_pb2.GetWorldRequest(name=name))

    def delete_world(self, name: str) -> None:
        self._call("DeleteWorld", xform_pb2.DeleteWorldRequest(name=name))

    def list_subscribers(self, world: str, page_size: int = 0,
                         after_id: int = 0) -> xform_pb2.ListSubscribersResponse:
        return self._call("ListSubscribers", xform_pb2.ListSubscribersRequest(
            world=world, page_size=page_size, after_id=after_id))

    # ---- writing and reading ------------------------------------------------

    def apply(self, world: str, commands: Iterable[xform_pb2.Command], *,
              end_frame: bool = False, stamp_nanos: int = 0,
              write_id: Optional[str] = None,
              history_only: Iterable[xform_pb2.Command] = ()) -> int:
        """Applies a batch, all or nothing; returns the frame its changes are
        published in. A write id (one is made when none is given) lets the
        batch be sent again safely after a lost answer or a failover."""
        request = xform_pb2.ApplyRequest(
            world=world, commands=list(commands), end_frame=end_frame,
            client_id=self.client_id, write_id=write_id or self.next_write_id(),
            stamp_nanos=stamp_nanos, history_only=list(history_only))
        return self._call("Apply", request, redirects=True).frame

    def read(self, world: str, entities: Optional[Sequence[int]] = None, *,
             subtree: int = 0, at_stamp_nanos: int = 0) -> EntityStates:
        """Entities' state now (or, with at_stamp_nanos, at that stamp): the
        listed ones, or with `subtree` that entity and all below it."""
        answer = self._call("Read", xform_pb2.ReadRequest(
            world=world, entity=_ids(entities if entities is not None else []),
            subtree=subtree, at_stamp_nanos=at_stamp_nanos))
        n = len(answer.entity)
        return EntityStates(
            ids=np.array(answer.entity, dtype=np.uint64),
            parents=np.array(answer.parent, dtype=np.uint64),
            local=np.array(answer.local, dtype=np.float32).reshape(n, 10),
            world=np.array(answer.world, dtype=np.float32).reshape(n, 3, 4),
            stamps=np.array(answer.stamp_nanos, dtype=np.int64),
            names=list(answer.name))

    def lookup_transform(self, world: str, target, sources: Sequence,
                         stamp_nanos: int = 0, *, fixed_frame=None,
                         target_stamp_nanos: int = 0,
                         wait: float = 0.0) -> Poses:
        """Each source's pose in `target`'s frame at `stamp_nanos` (0: the
        latest all links know), as tf2's lookupTransform; with
        `fixed_frame`, the target at target_stamp_nanos through that frame
        (tf2's advanced form). Frames are ids (0: the world's origin) or
        names (an entity's name, "e<id>", "world"). `wait`: seconds the
        server may wait for newer data."""
        request = xform_pb2.LookupTransformRequest(
            world=world, stamp_nanos=stamp_nanos,
            target_stamp_nanos=target_stamp_nanos, timeout_ms=int(wait * 1000))
        if isinstance(target, str):
            request.target_name = target
        else:
            request.target = int(target)
        if any(isinstance(s, str) for s in sources):
            request.source_name.extend(str(s) if isinstance(s, str) else f"e{int(s)}"
                                       for s in sources)
        else:
            request.source.extend(_ids(sources))
        if isinstance(fixed_frame, str):
            request.fixed_frame_name = fixed_frame
        elif fixed_frame is not None:
            request.fixed_frame, request.use_fixed_frame = fixed_frame, True
        answer = self._call("LookupTransform", request,
                            timeout=self.deadline + wait)
        n = len(answer.poses)
        return Poses(
            sources=np.array([p.source for p in answer.poses], dtype=np.uint64),
            matrices=np.array([list(p.pose) for p in answer.poses],
                              dtype=np.float32).reshape(n, 3, 4),
            stamps=np.array([p.stamp_nanos for p in answer.poses], dtype=np.int64),
            oldest_used=np.array([p.oldest_used_nanos for p in answer.poses], dtype=np.int64),
            newest_used=np.array([p.newest_used_nanos for p in answer.poses], dtype=np.int64))

    # ---- streams ------------------------------------------------------------

    def subscribe(self, request: xform_pb2.SubscribeRequest,
                  address: Optional[str] = None):
        """The raw Subscribe stream (no deadline): an iterator of
        FrameUpdate that is also the call (cancel(), initial_metadata()).
        Mirror keeps a world from it."""
        return self.stub(address).Subscribe(request, metadata=self._metadata)

    def update_subscription(self, world: str, subscription_id: int,
                            where: xform_pb2.Region,
                            address: Optional[str] = None) -> None:
        """Moves a subscription's region (its id is the stream's
        xform-subscription-id metadata), at the node that serves it."""
        request = xform_pb2.UpdateSubscriptionRequest(
            world=world, subscription_id=subscription_id, region=where)
        try:
            self.stub(address).UpdateSubscription(
                request, timeout=self.deadline, metadata=self._metadata)
        except grpc.RpcError as error:
            raise XformError(error.code(), error.details() or "") from None

    # ---- the cluster --------------------------------------------------------

    def list_nodes(self) -> list:
        return list(self._call("ListNodes", xform_pb2.ListNodesRequest()).nodes)

    def drain_node(self, node: str, undrain: bool = False) -> int:
        return self._call("DrainNode", xform_pb2.DrainNodeRequest(
            node=node, undrain=undrain)).worlds_moved

    def skip_record(self, world: str, record: int) -> None:
        self._call("SkipRecord", xform_pb2.SkipRecordRequest(world=world, record=record))


def _trailer(error: grpc.RpcError, key: str) -> str:
    try:
        for k, v in error.trailing_metadata() or ():
            if k == key:
                return v
    except AttributeError:
        pass
    return ""


__all__ = ["Client", "XformError", "EntityStates", "Poses", "create", "destroy",
           "link", "rename", "set_local", "set_world", "region", "retry_wait",
           "SUBSCRIPTION_ID_METADATA"]
