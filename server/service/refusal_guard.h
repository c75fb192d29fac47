// Copyright 2026 The xform Authors.
//
// RefusalGuard: holds a caller whose calls keep being refused to a share of
// the server, by cutting off its connections.
//
// A refused call still costs the server everything gRPC did to receive it:
// 9.6 MB Apply batches refused 240 times a second kept xformd at 90% of a
// core and took another principal's p99 from 0.80 to 10.70 ms, and a quota
// refusing them at authentication (calls_per_second) could not help, since
// the request has arrived by then. Nothing above the transport can refuse
// bytes before they arrive; what can be done is to stop the connection
// they come on, and keep its address out for a while, as the call flood
// guard does (edge/cancel_flood_guard.h).
//
// So each caller's refusals are charged to a token bucket of its own, in
// bytes: the request's size plus kCallBytes for the call itself (a refused
// call's fixed cost, about 290 us, is what receiving some 64 KB costs). A
// caller is a principal it authenticated as with a credential (a token or
// a certificate), or else its address (an IPv4 address, an IPv6 /64):
// without --auth_file everyone is "anonymous", and one client's refusals
// must not be another's. Over `refused_bytes_per_second` (its bucket holds
// a second's worth), the connection the refusal came on is cut off and its
// address refused for a penalty that starts at `first_penalty` and doubles
// each time the caller trips again within `forgive_after` of the last,
// up to `max_penalty`. While it is penalized, each further refusal of that
// caller (on another connection it held) cuts that one off too.
//
// An honest client is not caught: it is refused now and then (a quota, a
// missing role, a mistyped world), not megabytes a second. The default,
// 64 MiB of refusals a second, is 1,000 small refused calls a second, or a
// few refused batches of the largest size, in one second; a 60 Hz poller
// refused every time costs 4 MB a second.
//
// Cost: O(1) a refusal under one lock; nothing for calls that succeed.
// Memory: an entry per caller refused in the last `forgive_after`, at most
// kMaxCallers (past that, the idle are dropped first, then the oldest).
//
// Thread-safe.

#ifndef XFORM_SERVER_SERVICE_REFUSAL_GUARD_H_
#define XFORM_SERVER_SERVICE_REFUSAL_GUARD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/base/token_bucket.h"

namespace xform::server {

struct RefusalGuardOptions {
  // Bytes of refused calls a caller may cost a second
  // (--max_refused_mb_per_second); 0: no guard.
  double refused_bytes_per_second = 64 << 20;
  absl::Duration first_penalty = absl::Seconds(1);
  absl::Duration max_penalty = absl::Seconds(64);
  absl::Duration forgive_after = absl::Minutes(2);
};

class RefusalGuard {
 public:
  // What a refused call counts as beside its request's bytes.
  static constexpr size_t kCallBytes = 64 << 10;
  static constexpr size_t kMaxCallers = 100'000;

  // Cuts off the connection gRPC calls `grpc_peer`, refusing its address
  // for `penalty`, and logs `why`.
  using CutOff =
      std::function<void(absl::string_view grpc_peer, absl::Duration penalty,
                         absl::string_view why)>;

  RefusalGuard(RefusalGuardOptions options, CutOff cut_off);

  // Whether a call that ended with `code` was refused for what its caller
  // did (its credentials, roles, quotas or request), as opposed to the
  // server's own state (UNAVAILABLE while recovering or stopping, say).
  static bool IsRefusal(absl::StatusCode code);

  // A call from `grpc_peer` refused at `now` after `request_bytes`;
  // `principal` is the principal it authenticated as with a credential,
  // or "" (then its address is the caller).
  void Refused(absl::string_view principal, absl::string_view grpc_peer,
               size_t request_bytes, absl::Time now);

  // Times a caller has been cut off, all callers.
  uint64_t cut_offs() const;

 private:
  struct Caller {
    TokenBucket bucket;
    int trips = 0;  // In a row, each within forgive_after of the last.
    absl::Time last_trip = absl::InfinitePast();
    absl::Time penalized_until = absl::InfinitePast();
    absl::Time last_refused;
  };
  void MakeRoomLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RefusalGuardOptions options_;
  const CutOff cut_off_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Caller> callers_ ABSL_GUARDED_BY(mu_);
  uint64_t cut_offs_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_REFUSAL_GUARD_H_
