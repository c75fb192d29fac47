// Copyright 2026 The xform Authors.
//
// Gatekeeper is the server's access control at the gRPC edge: who a call is
// (Authenticate: a bearer token, else a client certificate's names, else
// anonymous), whether it may do what it asks (Caller::Require), and what its
// principal may still use (quotas: streams open, write rates). The rules are
// an AccessPolicy, swapped whole by Reload (SIGHUP); a principal the new
// policy lacks loses its open streams at once.
//
// Usage (streams open, token buckets) is kept per principal name, so a
// reload that keeps a principal keeps its count. Refusals are logged with
// the principal's name (or the peer, unauthenticated) at most once a second
// per principal, each line counting those it stands for.
//
// Costs: Authenticate is one SHA-256 and O(principals) comparisons, plus
// the call-rate bucket; Require is Principal::Allows; a quota check is O(1)
// under the principal's lock, and no lock at all when the quota is unset.
//
// Thread-safe.

#ifndef XFORM_SERVER_GATEKEEPER_H_
#define XFORM_SERVER_GATEKEEPER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "server/access_policy.h"
#include "server/log.h"
#include "server/token_bucket.h"

namespace xform::server {

// One principal's use of the server, across calls and reloads.
class Usage : public std::enable_shared_from_this<Usage> {
 public:
  enum class Stream { kSubscription, kWriter };
  // Counts a stream (or Apply call) against its quota while it lives, and
  // ends it (`end`) should its principal be removed.
  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    friend class Usage;
    Ticket(std::shared_ptr<Usage> usage, Stream kind, uint64_t id)
        : usage_(std::move(usage)), kind_(kind), id_(id) {}
    const std::shared_ptr<Usage> usage_;
    const Stream kind_;
    const uint64_t id_;
  };

  explicit Usage(std::string name) : name_(std::move(name)) {}

  // RESOURCE_EXHAUSTED naming the quota when `quotas` allows no more.
  absl::StatusOr<std::unique_ptr<Ticket>> Open(
      Stream kind, const config::Quotas& quotas,
      const std::function<void(const absl::Status&)>& end);
  // Takes a batch of `entities` from the write-rate buckets, or refuses it
  // (RESOURCE_EXHAUSTED) taking nothing: when the buckets lack the room
  // now, or when the batch names more entities than the entity bucket can
  // ever hold (one second's worth), which the status says, so that the
  // client splits it rather than retries.
  absl::Status TakeWrite(const config::Quotas& quotas, size_t entities,
                         absl::Time now);
  // Takes a call to `method` from the calls_per_second bucket, or refuses
  // it.
  absl::Status TakeCall(const config::Quotas& quotas, absl::string_view method,
                        absl::Time now);
  // Whether bytes_out_per_second has room to send now. A message is
  // charged (ChargeSent) once chosen, so the bucket may go into debt by a
  // message per stream; sending waits until the debt is paid.
  bool MaySend(const config::Quotas& quotas, absl::Time now);
  // MaySend as a status for a unary call: RESOURCE_EXHAUSTED when not.
  absl::Status CheckSend(const config::Quotas& quotas, absl::Time now);
  void ChargeSent(const config::Quotas& quotas, size_t bytes, absl::Time now);
  // Ends every open stream with `status`.
  void EndStreams(const absl::Status& status);
  // Logs a refusal (its status names the principal), throttled.
  absl::Status Refused(absl::string_view method, absl::Status status);

 private:
  const std::string name_;
  LogThrottle refusals_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t subscriptions_ ABSL_GUARDED_BY(mu_) = 0;
  size_t writers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, std::function<void(const absl::Status&)>>
      streams_ ABSL_GUARDED_BY(mu_);
  TokenBucket batches_ ABSL_GUARDED_BY(mu_);
  TokenBucket entities_ ABSL_GUARDED_BY(mu_);
  TokenBucket calls_ ABSL_GUARDED_BY(mu_);
  TokenBucket bytes_out_ ABSL_GUARDED_BY(mu_);
};

// Who a call is, as of the policy it was authenticated under.
struct Caller {
  std::shared_ptr<const Principal> principal;  // Aliases its policy.
  std::shared_ptr<Usage> usage;
  bool enforced = false;  // An auth file is in force.

  const std::string& name() const { return principal->name; }
  const config::Quotas& quotas() const { return principal->quotas; }
  // PERMISSION_DENIED (logged with the principal's name) unless it has
  // `role` on `world`. Checked before the world is looked up, so the answer
  // says nothing of whether it exists.
  absl::Status Require(Role role, absl::string_view world,
                       absl::string_view method) const;
};

class Gatekeeper {
 public:
  explicit Gatekeeper(std::shared_ptr<const AccessPolicy> policy);

  // UNAUTHENTICATED (logged, never with the token) when the call carries no
  // credentials and anonymous callers are refused, or credentials no
  // principal has; RESOURCE_EXHAUSTED when the principal is over its
  // calls_per_second.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context,
                                      absl::string_view method);
  // Swaps in `policy`; principals it lacks lose their open streams.
  void Reload(std::shared_ptr<const AccessPolicy> policy);
  std::shared_ptr<const AccessPolicy> policy() const;

 private:
  std::shared_ptr<Usage> UsageOf(const std::string& name);

  LogThrottle unauthenticated_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessPolicy> policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Usage>> usage_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_GATEKEEPER_H_
