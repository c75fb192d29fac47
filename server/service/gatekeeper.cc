// Copyright 2026 The xform Authors.

#include "server/service/gatekeeper.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"
#include "server/base/log.h"
#include "server/edge/peer_address.h"

namespace xform::server {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

const char* RoleName(Role role) {
  switch (role) {
    case kRead:
      return "read";
    case kWrite:
      return "write";
    case kAdmin:
      return "admin";
  }
  return "?";
}

}  // namespace

Usage::Ticket::~Ticket() {
  absl::MutexLock lock(&usage_->mu_);
  usage_->streams_.erase(id_);
  --(kind_ == Stream::kSubscription ? usage_->subscriptions_
                                    : usage_->writers_);
}

absl::StatusOr<std::unique_ptr<Usage::Ticket>> Usage::Open(Stream kind,
                                                           const Caller& caller,
                                                           Recheck recheck) {
  const config::Quotas& quotas = caller.quotas();
  absl::MutexLock lock(&mu_);
  const bool subscription = kind == Stream::kSubscription;
  size_t& open = subscription ? subscriptions_ : writers_;
  const bool limited =
      subscription ? quotas.has_max_subscriptions() : quotas.has_max_writers();
  const uint64_t limit =
      subscription ? quotas.max_subscriptions() : quotas.max_writers();
  if (limited && open >= limit) {
    return Refused(subscription ? "Subscribe" : "a write",
                   absl::ResourceExhaustedError(absl::StrCat(
                       "principal '", name_, "' has its quota of ", limit,
                       subscription ? " subscriptions (max_subscriptions)"
                                    : " writers (max_writers)")));
  }
  ++open;
  const uint64_t id = next_id_++;
  if (recheck != nullptr) {
    streams_.emplace(id, OpenStream{caller.credential, std::move(recheck)});
  }
  return std::unique_ptr<Ticket>(new Ticket(shared_from_this(), kind, id));
}

absl::Status Usage::TakeWrite(const config::Quotas& quotas, size_t entities,
                              absl::Time now) {
  // No buckets, no lock: without an auth file every writer is "anonymous",
  // and its batches should not meet on one mutex for nothing.
  if (!quotas.has_write_batches_per_second() &&
      !quotas.has_write_entities_per_second()) {
    return absl::OkStatus();
  }
  const double entity_rate = quotas.write_entities_per_second();
  if (quotas.has_write_entities_per_second() &&
      !TokenBucket::Fits(entity_rate, static_cast<double>(entities))) {
    return Refused(
        "a write",
        absl::ResourceExhaustedError(absl::StrCat(
            "a batch naming ", entities, " entities can never fit principal '",
            name_, "''s write rate of ", entity_rate,
            " entities/s (write_entities_per_second), which holds a second's "
            "worth: split it")));
  }
  absl::MutexLock lock(&mu_);
  // Both buckets or neither: test and take on copies first.
  TokenBucket batches = batches_, named = entities_;
  if (quotas.has_write_batches_per_second() &&
      !batches.TryTake(quotas.write_batches_per_second(), 1, now)) {
    return Refused("a write",
                   absl::ResourceExhaustedError(absl::StrCat(
                       "principal '", name_, "' is over its write rate of ",
                       quotas.write_batches_per_second(),
                       " batches/s (write_batches_per_second)")));
  }
  if (quotas.has_write_entities_per_second() &&
      !named.TryTake(entity_rate, static_cast<double>(entities), now)) {
    return Refused("a write", absl::ResourceExhaustedError(absl::StrCat(
                                  "principal '", name_,
                                  "' is over its write rate of ", entity_rate,
                                  " entities/s (write_entities_per_second)")));
  }
  batches_ = batches;
  entities_ = named;
  return absl::OkStatus();
}

absl::Status Usage::TakeCall(const config::Quotas& quotas,
                             absl::string_view method, absl::Time now) {
  if (!quotas.has_calls_per_second()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (calls_.TryTake(quotas.calls_per_second(), 1, now)) {
    return absl::OkStatus();
  }
  return Refused(
      method, absl::ResourceExhaustedError(absl::StrCat(
                  "principal '", name_, "' is over its call rate of ",
                  quotas.calls_per_second(), " calls/s (calls_per_second)")));
}

bool Usage::MaySend(const config::Quotas& quotas, absl::Time now) {
  if (!quotas.has_bytes_out_per_second()) return true;
  absl::MutexLock lock(&mu_);
  return bytes_out_.Tokens(quotas.bytes_out_per_second(), now) > 0;
}

absl::Status Usage::CheckSend(const config::Quotas& quotas, absl::Time now) {
  if (MaySend(quotas, now)) return absl::OkStatus();
  return Refused("Read", absl::ResourceExhaustedError(absl::StrCat(
                             "principal '", name_, "' is over its rate of ",
                             quotas.bytes_out_per_second(),
                             " bytes/s sent (bytes_out_per_second)")));
}

void Usage::ChargeSent(const config::Quotas& quotas, size_t bytes,
                       absl::Time now) {
  if (!quotas.has_bytes_out_per_second()) return;
  absl::MutexLock lock(&mu_);
  bytes_out_.Charge(quotas.bytes_out_per_second(), static_cast<double>(bytes),
                    now);
}

absl::Status Usage::Refused(absl::string_view method, absl::Status status) {
  refusals_.Log('W', "refused: ", method, ": ", status.message());
  return status;
}

void Usage::RecheckStreams(const std::shared_ptr<const AccessPolicy>& policy) {
  std::vector<OpenStream> open;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, stream] : streams_) open.push_back(stream);
  }
  // No lock: a stream told to end may finish, and its ticket go, inline.
  for (const OpenStream& stream : open) {
    const Principal* principal = stream.credential->PrincipalIn(*policy);
    if (principal == nullptr || principal->name != name_) {
      stream.recheck(absl::UnauthenticatedError(absl::StrCat(
          "the auth file was reloaded and no longer takes the credentials "
          "this call was made with",
          principal == nullptr
              ? ""
              : " as principal '" + name_ + "' (they name another now)")));
      continue;
    }
    Caller caller;
    caller.principal = std::shared_ptr<const Principal>(policy, principal);
    caller.usage = shared_from_this();
    caller.credential = stream.credential;
    caller.enforced = policy->enforced();
    stream.recheck(std::move(caller));
  }
}

const Principal* Credential::PrincipalIn(const AccessPolicy& policy) const {
  if (!policy.enforced()) return policy.anonymous();
  switch (kind) {
    case Kind::kToken:
      return policy.ByTokenHash(token_hash);
    case Kind::kCertificate:
      return policy.ByCertificate(certificate_names);
    case Kind::kNone:
      return policy.anonymous();
  }
  return nullptr;
}

absl::Status Caller::Require(Role role, absl::string_view world,
                             absl::string_view method) const {
  if (principal->Allows(role, world)) return absl::OkStatus();
  return usage->Refused(
      method, absl::PermissionDeniedError(absl::StrCat(
                  "principal '", name(), "' lacks the ", RoleName(role),
                  " role on world '", world.substr(0, 128), "'")));
}

Gatekeeper::Gatekeeper(std::shared_ptr<const AccessPolicy> policy,
                       const Clock& clock)
    : clock_(clock), unauthenticated_(clock), policy_(std::move(policy)) {}

std::shared_ptr<const AccessPolicy> Gatekeeper::policy() const {
  absl::MutexLock lock(&mu_);
  return policy_;
}

std::shared_ptr<Usage> Gatekeeper::UsageOf(const std::string& name) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Usage>& usage = usage_[name];
  if (usage == nullptr) usage = std::make_shared<Usage>(name, clock_);
  return usage;
}

absl::StatusOr<Caller> Gatekeeper::Authenticate(
    const grpc::ServerContextBase& context, absl::string_view method) {
  const std::shared_ptr<const AccessPolicy> policy = this->policy();
  const auto refuse = [&](absl::string_view why) {
    unauthenticated_.Log('W', "refused: ", method, " from ",
                         PeerAddress(context.peer()), ": ", why);
    return absl::UnauthenticatedError(why);
  };
  auto credential = std::make_shared<Credential>();
  absl::string_view unknown = "credentials required";
  if (!policy->enforced()) {
    // Everyone is the open policy's anonymous principal.
  } else if (auto it = context.client_metadata().find("authorization");
             it != context.client_metadata().end()) {
    const absl::string_view value(it->second.data(), it->second.size());
    if (!absl::StartsWith(value, kBearer)) {
      return refuse("the authorization metadata is not \"Bearer <token>\"");
    }
    credential->kind = Credential::Kind::kToken;
    credential->token_hash = Sha256Of(value.substr(kBearer.size()));
    unknown = "unknown credentials";
  } else if (const std::shared_ptr<const grpc::AuthContext> auth =
                 context.auth_context();
             auth != nullptr && auth->IsPeerAuthenticated()) {
    credential->kind = Credential::Kind::kCertificate;
    for (const char* property :
         {GRPC_X509_SUBJECT_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
      for (const grpc::string_ref& name : auth->FindPropertyValues(property)) {
        credential->certificate_names.emplace_back(name.data(), name.size());
      }
    }
    unknown = "the client certificate is no principal's (certificate_names)";
  }
  const Principal* principal = credential->PrincipalIn(*policy);
  if (principal == nullptr) return refuse(unknown);
  Caller caller;
  caller.principal = std::shared_ptr<const Principal>(policy, principal);
  caller.usage = UsageOf(principal->name);
  caller.credential = std::move(credential);
  caller.enforced = policy->enforced();
  if (absl::Status rate =
          caller.usage->TakeCall(caller.quotas(), method, clock_.Now());
      !rate.ok()) {
    return rate;
  }
  return caller;
}

void Gatekeeper::Reload(const std::shared_ptr<const AccessPolicy>& policy) {
  std::vector<std::shared_ptr<Usage>> usages;
  {
    absl::MutexLock lock(&mu_);
    policy_ = policy;
    for (auto it = usage_.begin(); it != usage_.end();) {
      usages.push_back(it->second);
      if (!policy_->Has(it->first)) {
        usage_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& usage : usages) usage->RecheckStreams(policy);
}

}  // namespace xform::server
