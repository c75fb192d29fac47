// Copyright 2026 The xform Authors.

#include "server/service/caller_budget.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "server/edge/peer_address.h"

namespace xform::server {

absl::Status CallerBudget::Take(absl::string_view principal,
                                absl::string_view grpc_peer, double amount,
                                absl::Time now) {
  if (per_second_ <= 0) return absl::OkStatus();
  const std::string key = CallerKey(principal, grpc_peer);
  absl::MutexLock lock(&mu_);
  if (callers_.size() >= kMaxCallers && !callers_.contains(key)) {
    // The idle first: a bucket untouched for a minute is full again.
    absl::erase_if(callers_, [&](const auto& entry) {
      return now - entry.second.last > absl::Minutes(1);
    });
    if (callers_.size() >= kMaxCallers) callers_.erase(callers_.begin());
  }
  Caller& caller = callers_[key];
  caller.last = now;
  if (caller.bucket.Tokens(per_second_, now) < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a caller's ", what_, " are at most ", per_second_,
                     " a second (", flag_, "); try again in a moment"));
  }
  caller.bucket.Charge(per_second_, amount, now);
  return absl::OkStatus();
}

}  // namespace xform::server
