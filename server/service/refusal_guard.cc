// Copyright 2026 The xform Authors.

#include "server/service/refusal_guard.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/edge/peer_address.h"

namespace xform::server {

RefusalGuard::RefusalGuard(RefusalGuardOptions options, CutOff cut_off)
    : options_(options), cut_off_(std::move(cut_off)) {}

bool RefusalGuard::IsRefusal(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return true;
    default:
      return false;
  }
}

void RefusalGuard::Refused(absl::string_view principal,
                           absl::string_view grpc_peer, size_t request_bytes,
                           absl::Time now) {
  if (options_.refused_bytes_per_second <= 0 || cut_off_ == nullptr) return;
  const std::string key = CallerKey(principal, grpc_peer);
  absl::Duration penalty;
  {
    absl::MutexLock lock(&mu_);
    if (callers_.size() >= kMaxCallers && !callers_.contains(key)) {
      MakeRoomLocked(now);
    }
    Caller& caller = callers_[key];
    caller.last_refused = now;
    caller.bucket.Charge(options_.refused_bytes_per_second,
                         static_cast<double>(request_bytes + kCallBytes), now);
    if (now < caller.penalized_until) {
      penalty = caller.penalized_until - now;  // Another of its connections.
    } else if (caller.bucket.Tokens(options_.refused_bytes_per_second, now) <
               0) {
      caller.trips = now - caller.last_trip <= options_.forgive_after
                         ? caller.trips + 1
                         : 1;
      caller.last_trip = now;
      penalty = std::min(options_.max_penalty,
                         options_.first_penalty *
                             static_cast<double>(uint64_t{1} << std::min(
                                                     caller.trips - 1, 20)));
      caller.penalized_until = now + penalty;
      ++cut_offs_;
    } else {
      return;
    }
  }
  const std::string whose = principal.empty()
                                ? std::string("its")
                                : absl::StrCat("principal '", principal, "''s");
  cut_off_(grpc_peer, penalty,
           absl::StrCat(whose,
                        " calls were refused faster than "
                        "--max_refused_mb_per_second allows"));
}

void RefusalGuard::MakeRoomLocked(absl::Time now) {
  absl::erase_if(callers_, [&](const auto& entry) {
    return now - entry.second.last_refused > options_.forgive_after;
  });
  if (callers_.size() < kMaxCallers) return;
  // Still full: the half refused longest ago go.
  std::vector<absl::Time> times;
  times.reserve(callers_.size());
  for (const auto& [key, caller] : callers_)
    times.push_back(caller.last_refused);
  std::nth_element(times.begin(), times.begin() + times.size() / 2,
                   times.end());
  const absl::Time median = times[times.size() / 2];
  absl::erase_if(callers_, [&](const auto& entry) {
    return entry.second.last_refused < median;
  });
}

uint64_t RefusalGuard::cut_offs() const {
  absl::MutexLock lock(&mu_);
  return cut_offs_;
}

}  // namespace xform::server
