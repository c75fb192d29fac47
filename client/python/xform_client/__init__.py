"""xform's Python client: a subscriber's view of a world, in either
encoding, kept by the rules of docs/wire.md.

The gRPC stubs are generated from proto/xform/v1/xform.proto (the build
puts them in build/client/python/gen: `xform.v1.xform_pb2` and
`xform_pb2_grpc`); this package needs them, grpcio, protobuf and numpy
(Debian: python3-grpcio, python3-protobuf, python3-numpy).
"""

from xform_client.compact import BrokenMessage, Pose
from xform_client.view import Entity, View

__all__ = ["BrokenMessage", "Entity", "Pose", "View"]
