// Copyright 2026 The xform Authors.
//
// accept4(), in front of the C library's, for gRPC's TLS listener: see
// grpc_listener_admission.h. Linked into xformd alone (and that file's
// test), exporting the symbol so that gRPC's library finds it; every other
// program keeps the C library's.

#include <sys/socket.h>

#include "server/edge/grpc_listener_admission.h"

namespace {

// Tells AdmitGrpcListenerConnections that this program has it.
const bool kNoted = [] {
  xform::server::grpc_listener_internal::NoteInterposed();
  return true;
}();

}  // namespace

extern "C" __attribute__((visibility("default"))) int accept4(int fd,
                                                              sockaddr* address,
                                                              socklen_t* length,
                                                              int flags) {
  return xform::server::grpc_listener_internal::Accept4(fd, address, length,
                                                        flags);
}
