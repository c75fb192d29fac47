// Copyright 2026 The xform Authors.
//
// AccessPolicy is who may do what to which worlds: the principals of an
// --auth_file (xform/config/auth.proto), each known by a bearer token's
// SHA-256 or a client certificate's name, with roles on world-name patterns
// and quotas. Without an auth file the policy is OpenToAll(): every caller
// is "anonymous", with every role and only the server's own limits.
//
// A policy is immutable; a reload (SIGHUP) makes a new one and swaps it in.
// Callers keep the shared_ptr they authenticated with (Principal is aliased
// to it), so a call in progress sees one policy throughout.
//
// Costs: ByToken is one SHA-256 and a constant-time comparison with every
// principal's hash, O(principals); Allows is O(grants x pattern length x
// name length) at worst, for names bounded by the server's name limit.
//
// Thread-safe (immutable).

#ifndef XFORM_SERVER_ACCESS_ACCESS_POLICY_H_
#define XFORM_SERVER_ACCESS_ACCESS_POLICY_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "xform/config/auth.pb.h"

namespace xform::server {

// Roles, as bits of a mask. Admin allows everything.
enum Role : uint8_t { kRead = 1, kWrite = 2, kAdmin = 4 };

using Sha256 = std::array<uint8_t, 32>;
Sha256 Sha256Of(absl::string_view bytes);
// 64 lowercase hex digits: what an auth file's token_sha256 holds.
std::string Sha256Hex(absl::string_view bytes);

// Whether `name` matches `pattern`, where '*' matches any run of characters
// and '?' any one. O(pattern x name) at worst.
bool MatchesPattern(absl::string_view pattern, absl::string_view name);

struct Principal {
  std::string name;
  // The roles it has on the worlds any of the patterns match.
  struct Grant {
    uint8_t roles = 0;
    std::vector<std::string> worlds;
  };
  std::vector<Grant> grants;
  // Its own quotas, each unset one taken from the file's defaults.
  config::Quotas quotas;

  bool Allows(Role role, absl::string_view world) const;
};

class AccessPolicy {
 public:
  static std::shared_ptr<const AccessPolicy> OpenToAll();
  // From an auth file's JSON. Errors name what is wrong and where (the
  // principal's index or name), never a token.
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Parse(
      absl::string_view json);
  static absl::StatusOr<std::shared_ptr<const AccessPolicy>> Load(
      const std::string& path);

  // Whether calls are checked at all (false for OpenToAll).
  bool enforced() const { return enforced_; }
  // The principal the bearer token is, or null. The token is hashed and
  // compared with every principal's hash in constant time, so the time taken
  // says nothing of how close a guess came.
  const Principal* ByToken(absl::string_view token) const;
  // The same, by the token's SHA-256 (kept for a call, to ask again after a
  // reload).
  const Principal* ByTokenHash(const Sha256& hash) const;
  // The principal one of a client certificate's names (subject, SANs) is,
  // or null.
  const Principal* ByCertificate(absl::Span<const std::string> names) const;
  // Callers without credentials, or null when they are refused.
  const Principal* anonymous() const { return anonymous_.get(); }
  bool Has(absl::string_view name) const;
  size_t size() const { return principals_.size(); }

 private:
  AccessPolicy() = default;

  bool enforced_ = false;
  std::vector<Principal> principals_;
  std::vector<Sha256> token_hashes_;  // By principal; all zero: no token.
  std::vector<std::vector<std::string>> certificate_names_;  // By principal.
  std::unique_ptr<Principal> anonymous_;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_ACCESS_ACCESS_POLICY_H_
