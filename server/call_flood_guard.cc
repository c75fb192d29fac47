// Copyright 2026 The xform Authors.

#include "server/call_flood_guard.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "grpcpp/server_context.h"

namespace xform::server {

CallFloodGuard::CallFloodGuard(int max_per_second,
                               ConnectionAdmission* admission)
    : max_per_second_(std::max(max_per_second, 1)), admission_(admission) {}

grpc::experimental::Interceptor* CallFloodGuard::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string peer = info->server_context()->peer();
  if (const std::optional<ConnectionAdmission::Connection> connection =
          admission_->Find(peer);
      connection.has_value() && Count(*connection, absl::Now())) {
    admission_->CutOff(connection->fd,
                       "it started calls faster than "
                       "--max_calls_per_connection_per_second",
                       peer);
  }
  return nullptr;  // It only counts.
}

bool CallFloodGuard::Count(const ConnectionAdmission::Connection& connection,
                           absl::Time now) {
  absl::MutexLock lock(&mu_);
  Window& window = windows_[connection.fd];
  if (window.serial != connection.serial ||
      now - window.start >= absl::Seconds(1)) {
    // A new window, and a new connection on a number reused starts afresh.
    window = {.serial = connection.serial, .start = now, .calls = 0};
  }
  return ++window.calls == max_per_second_ + 1;
}

}  // namespace xform::server
