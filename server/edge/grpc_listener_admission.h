// Copyright 2026 The xform Authors.
//
// AdmitGrpcListenerConnections: the connections gRPC's own listener accepts
// kept or refused by a ConnectionAdmission, as the Acceptor's are. That
// listener is xformd's TLS port: gRPC 1.51 cannot take a TLS connection from
// a descriptor, so the Acceptor cannot take those.
//
// Why: gRPC 1.51's listener closes for good at the first accept() that fails
// for want of a descriptor, and the server is deaf from then on, health
// checks included, until restarted. Before this, 400 connections from one
// host, opened and closed again, did that to a TLS xformd with a descriptor
// limit of 256 (XformdProcessTest.TlsServesAgainAfterAFloodOfConnections...).
//
// How: gRPC's listener accepts with accept4(), which it calls through the
// dynamic linker, and a program's own definition of a C library function
// comes before the library's. So the file that defines this also defines
// accept4(): once installed, it accepts as the C library would, asks the
// admission, closes a refused connection and accepts the next, and returns
// the first it admits. Where accept4() fails for want of descriptors
// (EMFILE, ENFILE) it refuses the waiting connection through a descriptor
// kept spare for that, and where for want of memory (ENOBUFS, ENOMEM) it
// leaves it; either way it tells gRPC to wait for the next (EAGAIN) rather
// than give up its listener.
//
// The accept4() itself is in accept4_interposer.cc, which only xformd (and
// this code's own test) links, exporting accept4 (--export-dynamic-symbol)
// so that gRPC's library finds it; without it, installing fails. Once
// installed, every accept4() in the
// process is admitted this way, which is right only where gRPC's listener is
// the process's one: xformd with --tls_cert, which has no Acceptor. Should
// gRPC stop accepting through accept4(), the TLS tests of
// XformdProcessTest fail.
//
// Cost: what the admission costs (connection_admission.h), per connection.

#ifndef XFORM_SERVER_EDGE_GRPC_LISTENER_ADMISSION_H_
#define XFORM_SERVER_EDGE_GRPC_LISTENER_ADMISSION_H_

#include <sys/socket.h>

#include "absl/status/statusor.h"
#include "server/edge/connection_admission.h"

namespace xform::server {

// Installs an admission made from `options` for every accept4() of the
// process from now on, before gRPC's server starts; it lives as long as the
// process. Once only.
absl::StatusOr<ConnectionAdmission*> AdmitGrpcListenerConnections(
    const AdmissionOptions& options);

namespace grpc_listener_internal {
// For accept4_interposer.cc: it is linked (from its static initializer),
// and what its accept4() does.
void NoteInterposed();
int Accept4(int fd, sockaddr* address, socklen_t* length, int flags);
}  // namespace grpc_listener_internal

}  // namespace xform::server

#endif  // XFORM_SERVER_EDGE_GRPC_LISTENER_ADMISSION_H_
