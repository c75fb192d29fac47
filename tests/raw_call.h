// Copyright 2026 The xform Authors.
//
// A unary call with the request given as bytes, as a hostile client (or one
// built against another version of the proto) can send it: the tests' way to
// send what a generated stub never would.

#ifndef XFORM_TESTS_RAW_CALL_H_
#define XFORM_TESTS_RAW_CALL_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"

namespace xform::tests {

// Sends `bytes` to `method` ("/xform.v1.Xform/Apply") and returns the status.
inline grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel,
                             const std::string& method,
                             const std::string& bytes,
                             absl::Duration deadline = absl::Seconds(60)) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  absl::Notification done;
  grpc::Status status;
  generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      status = std::move(s);
                      done.Notify();
                    });
  done.WaitForNotification();
  return status;
}

}  // namespace xform::tests

#endif  // XFORM_TESTS_RAW_CALL_H_
