// Copyright 2026 The xform Authors.
//
// CallerBudget: how much work of one kind a caller may have the server do
// a second, for work whose cost is known only as the call is made: a
// region move's, the entities it judges (issue 71: a reader moving eight
// region views between the whole of a 1M-entity world and nowhere held
// xformd at 100% of a core, and another world's writer waited seconds).
//
// Each caller's work is charged to a token bucket of its own, into debt
// (token_bucket.h): a call is refused while its caller is in debt, and
// otherwise goes ahead and is charged whatever it costs. So one call may
// cost more than a second's worth (a view that moves onto a whole world
// must be able to move), and the caller then waits it out: over time it
// has at most `per_second` done. A caller is a principal it authenticated
// as with a credential, or else its address (an IPv4 address, an IPv6
// /64), as RefusalGuard keys them: without --auth_file everyone is
// "anonymous", and one client's work must not be another's.
//
// Cost: O(1) a call under one lock. Memory: an entry per caller seen in
// the last minute, at most kMaxCallers (past that, the idle go first).
//
// Thread-safe.

#ifndef XFORM_SERVER_SERVICE_CALLER_BUDGET_H_
#define XFORM_SERVER_SERVICE_CALLER_BUDGET_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/token_bucket.h"

namespace xform::server {

class CallerBudget {
 public:
  static constexpr size_t kMaxCallers = 16384;

  // `per_second` units of work a caller may have done a second (0: no
  // limit); `what` names them, and `flag` the flag that sets them, in the
  // refusal.
  CallerBudget(double per_second, std::string what, std::string flag)
      : per_second_(per_second),
        what_(std::move(what)),
        flag_(std::move(flag)) {}

  // Work of `amount` units for the caller `principal` (empty: none, the
  // caller known by `grpc_peer`'s address) at `now`: OK and charged, or
  // RESOURCE_EXHAUSTED while the caller is in debt.
  absl::Status Take(absl::string_view principal, absl::string_view grpc_peer,
                    double amount, absl::Time now);

 private:
  struct Caller {
    TokenBucket bucket;
    absl::Time last;
  };

  const double per_second_;
  const std::string what_;
  const std::string flag_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Caller> callers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_CALLER_BUDGET_H_
