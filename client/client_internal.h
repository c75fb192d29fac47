// Copyright 2026 The xform Authors.
//
// What the Client shares with the Mirror inside the library: the channel, the
// stub, and how every call is dressed (deadline, token, status mapping).

#ifndef XFORM_CLIENT_CLIENT_INTERNAL_H_
#define XFORM_CLIENT_CLIENT_INTERNAL_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "xform/client.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform {

struct Client::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Xform::Stub> stub;
  // Subscribe, with each message handed over as gRPC read it, unparsed:
  // a Mirror parses on its taker's thread, not on gRPC's (see mirror.cc).
  // Called as a bidi stream that writes its one request and closes, which
  // is a server stream on the wire; the generic stub has no other
  // callback stream for bytes.
  std::unique_ptr<
      grpc::TemplatedGenericStub<v1::SubscribeRequest, grpc::ByteBuffer>>
      subscribe_bytes;
};

namespace client_internal {

// The path of Xform.Subscribe, for subscribe_bytes.
std::string SubscribeMethod();

// The gRPC status as absl::Status: the two share code numbering.
absl::Status FromGrpc(const grpc::Status& status);

// Puts the token (if any) on `context`, and the unary deadline when
// `with_deadline`.
void Prepare(const ClientOptions& options, bool with_deadline,
             grpc::ClientContext* context);

}  // namespace client_internal
}  // namespace xform

#endif  // XFORM_CLIENT_CLIENT_INTERNAL_H_
