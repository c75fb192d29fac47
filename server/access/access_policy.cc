// Copyright 2026 The xform Authors.

#include "server/access/access_policy.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace xform::server {
namespace {

// An auth file is written by hand and small; a bigger one is a mistake.
constexpr size_t kMaxFileBytes = 16 << 20;
constexpr size_t kMaxNameBytes = 256;

absl::Status Invalid(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("auth file: ", where, ": ", what));
}

absl::StatusOr<uint8_t> RoleOf(absl::string_view role) {
  if (role == "read") return kRead;
  if (role == "write") return kWrite;
  if (role == "admin") return kAdmin;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown role \"", absl::CEscape(role.substr(0, kMaxNameBytes)),
      "\" (read, write or admin)"));
}

absl::Status CheckQuotas(absl::string_view where, const config::Quotas& q) {
  for (const auto& [set, value, name] :
       {std::tuple{q.has_write_batches_per_second(),
                   q.write_batches_per_second(), "write_batches_per_second"},
        {q.has_write_entities_per_second(), q.write_entities_per_second(),
         "write_entities_per_second"},
        {q.has_calls_per_second(), q.calls_per_second(), "calls_per_second"},
        {q.has_bytes_out_per_second(), q.bytes_out_per_second(),
         "bytes_out_per_second"}}) {
    if (set && !(value > 0 && std::isfinite(value))) {
      return Invalid(where, absl::StrCat(name, " must be above 0"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Principal> PrincipalOf(absl::string_view where,
                                      const config::Principal& in,
                                      const config::Quotas& defaults) {
  Principal out;
  out.name = in.name();
  for (const config::Grant& grant : in.grants()) {
    Principal::Grant& g = out.grants.emplace_back();
    for (const std::string& role : grant.roles()) {
      absl::StatusOr<uint8_t> bit = RoleOf(role);
      if (!bit.ok()) return Invalid(where, bit.status().message());
      g.roles |= *bit;
    }
    if (g.roles == 0) return Invalid(where, "a grant names no roles");
    if (grant.worlds().empty())
      return Invalid(where, "a grant names no worlds");
    g.worlds.assign(grant.worlds().begin(), grant.worlds().end());
  }
  if (absl::Status s = CheckQuotas(where, in.quotas()); !s.ok()) return s;
  out.quotas = defaults;
  out.quotas.MergeFrom(in.quotas());  // Its own, where set.
  return out;
}

// A principal's credentials, checked, and told apart from the principals'
// before it (`seen_hashes`, `seen_certificates`): its token's hash (zeros
// without one), for `named` in errors.
absl::StatusOr<Sha256> CredentialsOf(
    absl::string_view named, const config::Principal& in,
    absl::flat_hash_set<std::string>& seen_hashes,
    absl::flat_hash_set<std::string>& seen_certificates) {
  Sha256 hash{};
  if (!in.token_sha256().empty()) {
    if (in.token_sha256().size() != 64 ||
        !absl::c_all_of(in.token_sha256(), absl::ascii_isxdigit)) {
      return Invalid(named,
                     "token_sha256 must be 64 hex digits (xformctl auth "
                     "hash-token)");
    }
    const std::string bytes = absl::HexStringToBytes(in.token_sha256());
    if (!seen_hashes.insert(bytes).second) {
      return Invalid(named, "token_sha256 is another principal's too");
    }
    std::copy(bytes.begin(), bytes.end(), hash.begin());
  }
  for (const std::string& certificate : in.certificate_names()) {
    if (certificate.empty() || !seen_certificates.insert(certificate).second) {
      return Invalid(named,
                     "a certificate name is empty or another principal's");
    }
  }
  if (in.token_sha256().empty() && in.certificate_names().empty()) {
    return Invalid(named,
                   "it has neither token_sha256 nor certificate_names, so "
                   "no caller can be it");
  }
  return hash;
}

}  // namespace

Sha256 Sha256Of(absl::string_view bytes) {
  Sha256 digest{};
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest.data(), &size, EVP_sha256(),
             nullptr);
  return digest;
}

std::string Sha256Hex(absl::string_view bytes) {
  const Sha256 digest = Sha256Of(bytes);
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(digest.data()), digest.size()));
}

bool MatchesPattern(absl::string_view pattern, absl::string_view name) {
  // Greedy with one backtrack point (the last '*'): O(pattern x name).
  size_t p = 0, n = 0;
  size_t star = absl::string_view::npos, resume = 0;
  while (n < name.size()) {
    // The pattern's star first: a star in the name is matched by it, not
    // taken as the same character.
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() &&
               (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool Principal::Allows(Role role, absl::string_view world) const {
  for (const Grant& grant : grants) {
    if ((grant.roles & (role | kAdmin)) == 0) continue;
    for (const std::string& pattern : grant.worlds) {
      if (MatchesPattern(pattern, world)) return true;
    }
  }
  return false;
}

std::shared_ptr<const AccessPolicy> AccessPolicy::OpenToAll() {
  auto policy = std::shared_ptr<AccessPolicy>(new AccessPolicy());
  policy->anonymous_ = std::make_unique<Principal>();
  policy->anonymous_->name = "anonymous";
  policy->anonymous_->grants.push_back({.roles = kAdmin, .worlds = {"*"}});
  return policy;
}

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Parse(
    absl::string_view json) {
  config::AuthFile file;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (auto parsed = google::protobuf::util::JsonStringToMessage(
          google::protobuf::StringPiece(json.data(), json.size()), &file,
          options);
      !parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth file: not valid JSON for xform.config.AuthFile: ",
                     std::string(parsed.message()).substr(0, 512)));
  }
  if (absl::Status s = CheckQuotas("default_quotas", file.default_quotas());
      !s.ok()) {
    return s;
  }
  auto policy = std::shared_ptr<AccessPolicy>(new AccessPolicy());
  policy->enforced_ = true;
  absl::flat_hash_set<std::string> names;
  absl::flat_hash_set<std::string> seen_hashes;
  absl::flat_hash_set<std::string> seen_certificates;
  for (int i = 0; i < file.principals_size(); ++i) {
    const config::Principal& in = file.principals(i);
    const std::string where = absl::StrCat("principals[", i, "]");
    if (in.name().empty() || in.name().size() > kMaxNameBytes) {
      return Invalid(where, "name must be 1 to 256 bytes");
    }
    if (!names.insert(in.name()).second) {
      return Invalid(where, absl::StrCat("name \"", absl::CEscape(in.name()),
                                         "\" is used twice"));
    }
    const std::string named =
        absl::StrCat(where, " (\"", absl::CEscape(in.name()), "\")");
    absl::StatusOr<Sha256> hash =
        CredentialsOf(named, in, seen_hashes, seen_certificates);
    if (!hash.ok()) return hash.status();
    absl::StatusOr<Principal> principal =
        PrincipalOf(named, in, file.default_quotas());
    if (!principal.ok()) return principal.status();
    policy->principals_.push_back(*std::move(principal));
    policy->token_hashes_.push_back(*hash);
    policy->certificate_names_.emplace_back(in.certificate_names().begin(),
                                            in.certificate_names().end());
  }
  if (file.has_anonymous()) {
    if (!file.anonymous().token_sha256().empty() ||
        !file.anonymous().certificate_names().empty()) {
      return Invalid("anonymous",
                     "takes no token_sha256 or certificate_names: it is who "
                     "has none");
    }
    absl::StatusOr<Principal> anonymous =
        PrincipalOf("anonymous", file.anonymous(), file.default_quotas());
    if (!anonymous.ok()) return anonymous.status();
    if (anonymous->name.empty()) anonymous->name = "anonymous";
    policy->anonymous_ = std::make_unique<Principal>(*std::move(anonymous));
  }
  return policy;
}

absl::StatusOr<std::shared_ptr<const AccessPolicy>> AccessPolicy::Load(
    const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("auth file ", path, ": cannot be opened"));
  }
  std::string json;
  json.resize(kMaxFileBytes + 1);
  in.read(json.data(), static_cast<std::streamsize>(json.size()));
  json.resize(static_cast<size_t>(in.gcount()));
  if (json.size() > kMaxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth file ", path, ": over 16 MiB"));
  }
  absl::StatusOr<std::shared_ptr<const AccessPolicy>> policy = Parse(json);
  if (!policy.ok()) {
    return absl::Status(policy.status().code(),
                        absl::StrCat(path, ": ", policy.status().message()));
  }
  return policy;
}

const Principal* AccessPolicy::ByToken(absl::string_view token) const {
  return ByTokenHash(Sha256Of(token));
}

const Principal* AccessPolicy::ByTokenHash(const Sha256& hash) const {
  static constexpr Sha256 kNone{};
  const Principal* found = nullptr;
  // Every hash compared in full, found or not.
  for (size_t i = 0; i < principals_.size(); ++i) {
    const bool same =
        CRYPTO_memcmp(hash.data(), token_hashes_[i].data(), hash.size()) == 0;
    const bool has_token =
        CRYPTO_memcmp(kNone.data(), token_hashes_[i].data(), hash.size()) != 0;
    if (same && has_token) found = &principals_[i];
  }
  return found;
}

const Principal* AccessPolicy::ByCertificate(
    absl::Span<const std::string> names) const {
  for (size_t i = 0; i < principals_.size(); ++i) {
    for (const std::string& mine : certificate_names_[i]) {
      for (const std::string& name : names) {
        if (name == mine) return &principals_[i];
      }
    }
  }
  return nullptr;
}

bool AccessPolicy::Has(absl::string_view name) const {
  for (const Principal& principal : principals_) {
    if (principal.name == name) return true;
  }
  return anonymous_ != nullptr && anonymous_->name == name;
}

}  // namespace xform::server
