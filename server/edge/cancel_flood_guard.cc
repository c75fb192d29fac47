// Copyright 2026 The xform Authors.

#include "server/edge/cancel_flood_guard.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/interceptor.h"

namespace xform::server {

using grpc::experimental::InterceptionHookPoints;

// One call's: tells the guard when the call ends cancelled.
class CancelFloodGuard::Probe final : public grpc::experimental::Interceptor {
 public:
  Probe(CancelFloodGuard& guard, grpc::experimental::ServerRpcInfo* info,
        ConnectionAdmission::Connection connection)
      : guard_(guard), info_(info), connection_(connection) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    // The call is over: the server context says whether it was cancelled
    // (its completion is recorded before interceptors run).
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_CLOSE) &&
        info_->server_context()->IsCancelled()) {
      guard_.CountCancelled(connection_, absl::Now());
    }
    methods->Proceed();
  }

 private:
  CancelFloodGuard& guard_;
  grpc::experimental::ServerRpcInfo* const info_;
  const ConnectionAdmission::Connection connection_;
};

CancelFloodGuard::CancelFloodGuard(int max_per_second,
                                   ConnectionAdmission* admission)
    : max_per_second_(std::max(max_per_second, 1)), admission_(admission) {}

grpc::experimental::Interceptor* CancelFloodGuard::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::optional<ConnectionAdmission::Connection> connection =
      admission_->Find(info->server_context()->peer());
  if (!connection.has_value()) return nullptr;  // Not one we admitted.
  return new Probe(*this, info, *connection);
}

bool CancelFloodGuard::CountCancelled(
    const ConnectionAdmission::Connection& connection, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    Cancels& cancels = cancels_[connection.fd];
    if (cancels.serial != connection.serial) {
      // A new connection on a number reused starts afresh.
      cancels = {.serial = connection.serial};
    }
    if (cancels.bucket.TryTake(max_per_second_, 1, now)) return false;
    // Over: it is cut off once; the bucket starts full again should the
    // number be admitted anew.
    cancels.serial = 0;
  }
  admission_->CutOff(connection,
                     "its client cancelled calls faster than "
                     "--max_cancels_per_connection_per_second");
  return true;
}

}  // namespace xform::server
