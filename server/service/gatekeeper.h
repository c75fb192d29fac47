// Copyright 2026 The xform Authors.
//
// Gatekeeper is the server's access control at the gRPC edge: who a call is
// (Authenticate: a bearer token, else a client certificate's names, else
// anonymous), whether it may do what it asks (Caller::Require), and what its
// principal may still use (quotas: streams open, write rates). The rules are
// an AccessPolicy, swapped whole by Reload (SIGHUP).
//
// A stream outlives the policy it was authenticated under, so each keeps
// how it proved who it is (its Credential), and Reload asks again for every
// open stream: credentials the new policy no longer takes, or takes as
// another principal (a rotated token, a removed principal), end it
// UNAUTHENTICATED; otherwise the stream is handed the new Caller, to check
// its roles again (ending PERMISSION_DENIED when it lost them) and to take
// its quotas from. All of it before Reload returns.
//
// Usage (streams open, token buckets) is kept per principal name, so a
// reload that keeps a principal keeps its count. Refusals are logged with
// the principal's name (or the peer, unauthenticated) at most once a second
// per principal, each line counting those it stands for.
//
// Costs: Authenticate is one SHA-256 and O(principals) comparisons, plus
// the call-rate bucket; Require is Principal::Allows; a quota check is O(1)
// under the principal's lock, and no lock at all when the quota is unset.
// Reload is O(open streams x principals).
//
// Thread-safe.

#ifndef XFORM_SERVER_SERVICE_GATEKEEPER_H_
#define XFORM_SERVER_SERVICE_GATEKEEPER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"
#include "server/access/access_policy.h"
#include "server/base/clock.h"
#include "server/base/log.h"
#include "server/base/token_bucket.h"

namespace xform::server {

// How a call proved who it is, kept so that a reload can ask again.
struct Credential {
  enum class Kind {
    kNone,         // No credentials: the policy's anonymous principal.
    kToken,        // A bearer token, kept as its SHA-256.
    kCertificate,  // A client certificate's subject and SANs.
  };
  Kind kind = Kind::kNone;
  Sha256 token_hash{};
  std::vector<std::string> certificate_names;

  // The principal these credentials are under `policy`, or null.
  const Principal* PrincipalIn(const AccessPolicy& policy) const;
};

class Usage;

// Who a call is, as of the policy it was authenticated under.
struct Caller {
  std::shared_ptr<const Principal> principal;  // Aliases its policy.
  std::shared_ptr<Usage> usage;
  std::shared_ptr<const Credential> credential;
  bool enforced = false;  // An auth file is in force.

  const std::string& name() const { return principal->name; }
  const config::Quotas& quotas() const { return principal->quotas; }
  // PERMISSION_DENIED (logged with the principal's name) unless it has
  // `role` on `world`. Checked before the world is looked up, so the answer
  // says nothing of whether it exists.
  absl::Status Require(Role role, absl::string_view world,
                       absl::string_view method) const;
};

// What a stream is told when the policy is reloaded: who its credentials
// now are (a Caller of the new policy, the same principal), or why they are
// no longer taken (UNAUTHENTICATED), to end with. Called on the reloading
// thread, with no lock of the gatekeeper's held.
using Recheck = std::function<void(absl::StatusOr<Caller>)>;

// One principal's use of the server, across calls and reloads.
class Usage : public std::enable_shared_from_this<Usage> {
 public:
  enum class Stream { kSubscription, kWriter };
  // Counts a stream (or Apply call) against its quota while it lives, and
  // rechecks it at each reload.
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

  // Its buckets are read at the times its callers pass, from `clock` (as
  // its refusals' log lines are paced).
  explicit Usage(std::string name, const Clock& clock = Clock::Real())
      : name_(std::move(name)), clock_(clock), refusals_(clock) {}
  const Clock& clock() const { return clock_; }

  // RESOURCE_EXHAUSTED naming the quota when `caller`'s quotas allow no
  // more. `recheck` (null for a unary call) is called at each reload while
  // the ticket lives.
  absl::StatusOr<std::unique_ptr<Ticket>> Open(Stream kind,
                                               const Caller& caller,
                                               Recheck recheck);
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
  // Rechecks every open stream against `policy` (see Gatekeeper).
  void RecheckStreams(const std::shared_ptr<const AccessPolicy>& policy);
  // Logs a refusal (its status names the principal), throttled.
  absl::Status Refused(absl::string_view method, absl::Status status);

 private:
  struct OpenStream {
    std::shared_ptr<const Credential> credential;
    Recheck recheck;
  };
  const std::string name_;
  const Clock& clock_;
  LogThrottle refusals_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  size_t subscriptions_ ABSL_GUARDED_BY(mu_) = 0;
  size_t writers_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, OpenStream> streams_ ABSL_GUARDED_BY(mu_);
  TokenBucket batches_ ABSL_GUARDED_BY(mu_);
  TokenBucket entities_ ABSL_GUARDED_BY(mu_);
  TokenBucket calls_ ABSL_GUARDED_BY(mu_);
  TokenBucket bytes_out_ ABSL_GUARDED_BY(mu_);
};

class Gatekeeper {
 public:
  // The quotas' buckets and the log's pacing read `clock`.
  explicit Gatekeeper(std::shared_ptr<const AccessPolicy> policy,
                      const Clock& clock = Clock::Real());

  // UNAUTHENTICATED (logged, never with the token) when the call carries no
  // credentials and anonymous callers are refused, or credentials no
  // principal has; RESOURCE_EXHAUSTED when the principal is over its
  // calls_per_second.
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context,
                                      absl::string_view method);
  // Swaps in `policy`, then rechecks every open stream against it.
  void Reload(const std::shared_ptr<const AccessPolicy>& policy);
  std::shared_ptr<const AccessPolicy> policy() const;

 private:
  std::shared_ptr<Usage> UsageOf(const std::string& name);

  const Clock& clock_;
  LogThrottle unauthenticated_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const AccessPolicy> policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<Usage>> usage_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace xform::server

#endif  // XFORM_SERVER_SERVICE_GATEKEEPER_H_
