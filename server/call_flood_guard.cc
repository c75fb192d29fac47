// Copyright 2026 The xform Authors.

#include "server/call_flood_guard.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "grpcpp/server_context.h"

namespace xform::server {

CallFloodGuard::CallFloodGuard(int max_per_second,
                               std::function<void(int fd)> cut_off)
    : max_per_second_(std::max(max_per_second, 1)),
      cut_off_(std::move(cut_off)) {}

grpc::experimental::Interceptor* CallFloodGuard::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const std::string peer = info->server_context()->peer();
  absl::string_view name = peer;
  int fd = -1;
  if (absl::ConsumePrefix(&name, "fd:") && absl::SimpleAtoi(name, &fd) &&
      fd >= 0 && Count(fd, absl::Now())) {
    cut_off_(fd);
  }
  return nullptr;  // It only counts.
}

bool CallFloodGuard::Count(int fd, absl::Time now) {
  absl::MutexLock lock(&mu_);
  Window& window = windows_[fd];
  if (now - window.start >= absl::Seconds(1)) {
    // A new window; a number reused by a new connection starts here too.
    window = {.start = now, .calls = 0};
  }
  return ++window.calls == max_per_second_ + 1;
}

}  // namespace xform::server
