"""xform's Python client: every call of xformd's service, and a Mirror
that keeps a world live as numpy arrays (docs/python.md).

    import xform
    client = xform.Client("127.0.0.1:50051")
    mirror = xform.Mirror(client, "demo")
    mirror.wait_for_sync(10)
    view = mirror.view()   # view.ids, view.parents, view.worlds (n, 3, 4)

Needs Debian's python3-grpcio, python3-protobuf and python3-numpy. The
generated stubs (xform.v1.xform_pb2, xform_pb2_grpc) are part of the
package as the build and `cmake --install` lay it out.
"""

from xform.client import (Client, EntityStates, Poses, XformError, create,
                          destroy, link, region, rename, retry_wait, set_local,
                          set_world)
from xform.decode import BrokenMessage
from xform.mirror import Mirror, View

__all__ = ["BrokenMessage", "Client", "EntityStates", "Mirror", "Poses", "View",
           "XformError", "create", "destroy", "link", "region", "rename", "retry_wait",
           "set_local", "set_world"]
