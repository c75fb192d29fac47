// Copyright 2026 The xform Authors.
//
// What the Client shares with the Mirror inside the library: the channel, the
// stub, and how every call is dressed (deadline, token, status mapping).

#ifndef XFORM_CLIENT_CLIENT_INTERNAL_H_
#define XFORM_CLIENT_CLIENT_INTERNAL_H_

#include <memory>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"
#include "xform/client.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform {

struct Client::Channel {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Xform::Stub> stub;
};

namespace client_internal {

// The gRPC status as absl::Status: the two share code numbering.
absl::Status FromGrpc(const grpc::Status& status);

// Puts the token (if any) on `context`, and the unary deadline when
// `with_deadline`.
void Prepare(const ClientOptions& options, bool with_deadline,
             grpc::ClientContext* context);

}  // namespace client_internal
}  // namespace xform

#endif  // XFORM_CLIENT_CLIENT_INTERNAL_H_
