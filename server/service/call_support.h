// Copyright 2026 The xform Authors.
//
// What the service's calls share (service.cc, apply_stream.cc,
// subscribe_stream.cc): who is calling, the world a caller names, how a
// call ends (redirects said in trailing metadata, refusals counted), the
// shape of a unary call, and one write batch. For the service's own files.

#ifndef XFORM_SERVER_SERVICE_CALL_SUPPORT_H_
#define XFORM_SERVER_SERVICE_CALL_SUPPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "server/host/world_host.h"
#include "server/service/gatekeeper.h"
#include "server/service/refusal_guard.h"
#include "server/service/request_reader.h"
#include "xform/v1/xform.pb.h"

namespace xform::server {

// Counts a call in progress for as long as it lives, so that shutdown can
// tell when calls have drained.
class CallHold {
 public:
  explicit CallHold(std::atomic<int>& count) : count_(&count) {
    count_->fetch_add(1);
  }
  CallHold(const CallHold&) = delete;
  CallHold& operator=(const CallHold&) = delete;
  ~CallHold() { count_->fetch_sub(1); }

 private:
  std::atomic<int>* count_;
};

// Who is calling, once the server is ready: UNAVAILABLE while --data_dir's
// worlds are being recovered (health says NOT_SERVING then too).
absl::StatusOr<Caller> Admit(const WorldHost& host, Gatekeeper& gatekeeper,
                             const grpc::CallbackServerContext& context,
                             absl::string_view method);

// The world `name` for a caller with `role` on it: PERMISSION_DENIED before
// the look-up, so that a refusal says nothing of whether the world exists;
// then NOT_FOUND.
absl::StatusOr<std::shared_ptr<HostedWorld>> WorldFor(const WorldHost& host,
                                                      const Caller& caller,
                                                      Role role,
                                                      absl::string_view name,
                                                      absl::string_view method);

// A refusal that names where to go instead, or says to wait (redirect.h):
// said in the trailing metadata too, for clients to follow without parsing
// text.
void AddRedirect(grpc::CallbackServerContext& context,
                 const absl::Status& status);

// What a caller is told of a world: its info, and in a cluster where it is
// written and served.
v1::WorldInfo InfoOf(const WorldHost& host, const HostedWorld& world);

// Ends a unary call with `status` (and its redirect).
grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context,
                               const absl::Status& status);

// Counts a call that ended with `status` against its caller (`caller`, or
// null before it was known) when it was refused (see refusal_guard.h).
void NoteRefusal(RefusalGuard* refusals,
                 const grpc::CallbackServerContext& context,
                 const absl::Status& status, const Caller* caller,
                 size_t request_bytes);

// Done, once the refusal (if it is one) is counted.
grpc::ServerUnaryReactor* Done(RefusalGuard* refusals,
                               grpc::CallbackServerContext* context,
                               const absl::Status& status, const Caller* caller,
                               size_t request_bytes);

// A unary call: parse (or refuse) the request, handle it, answer.
// The handler runs inline, so the call is counted until it has answered.
// The caller is authenticated first; the handler checks its role.
template <typename Request, typename Response, typename Handler>
grpc::ServerUnaryReactor* Serve(std::atomic<int>& calls, const WorldHost& host,
                                Gatekeeper& gatekeeper, RefusalGuard* refusals,
                                absl::string_view method,
                                grpc::CallbackServerContext* context,
                                const grpc::ByteBuffer* bytes,
                                grpc::ByteBuffer* response_bytes,
                                Handler&& handle) {
  const CallHold hold(calls);
  const size_t request_bytes = bytes->Length();
  absl::StatusOr<Caller> caller = Admit(host, gatekeeper, *context, method);
  if (!caller.ok()) {
    return Done(refusals, context, caller.status(), nullptr, request_bytes);
  }
  Request request;
  if (absl::Status parsed = ParseRequest(*bytes, &request); !parsed.ok()) {
    return Done(refusals, context, parsed, &*caller, request_bytes);
  }
  Response response;
  const absl::Status status = handle(*caller, request, &response);
  if (status.ok()) SerializeResponse(response, response_bytes);
  return Done(refusals, context, status, &*caller, request_bytes);
}

// One write batch, Apply's or ApplyStream's, by `caller`: the frame it
// lands in. Refused before anything applies when the caller lacks the write
// role on its world or is over a write quota.
// The world's name goes to `world`, once the request parses.
absl::StatusOr<uint64_t> ApplyBatch(WorldHost& host, const Caller& caller,
                                    const grpc::ByteBuffer& bytes,
                                    std::string* world_name = nullptr);

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_CALL_SUPPORT_H_
