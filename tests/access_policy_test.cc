// Copyright 2026 The xform Authors.

#include "server/access/access_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace xform::server {
namespace {

TEST(Sha256Test, KnownDigest) {
  // FIPS 180-2's "abc".
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(MatchesPatternTest, Globs) {
  struct Case {
    const char* pattern;
    const char* name;
    bool matches;
  } cases[] = {
      {"*", "", true},
      {"*", "anything", true},
      {"sim", "sim", true},
      {"sim", "sim2", false},
      {"sim-*", "sim-1", true},
      {"sim-*", "sim-", true},
      {"sim-*", "sim", false},
      {"?im", "sim", true},
      {"?im", "im", false},
      {"*-arm-*", "a-arm-b", true},
      {"*-arm-*", "a-arm", false},
      {"a*b*c", "aXbYbZc", true},
      {"a*b*c", "aXbYbZ", false},
      {"**", "x", true},
      // A star in the name is a character like any other: the pattern's
      // star matches it (it was once taken as a literal match, and the rest
      // of the name then refused).
      {"*", "*ooE", true},
      {"sim-*", "sim-*x", true},
      {"a*b", "a*xb", true},
      {"a?c", "a*c", true},
      {"a*", "*a", false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MatchesPattern(c.pattern, c.name), c.matches)
        << c.pattern << " vs " << c.name;
  }
  // Hostile shapes stay polynomial: many stars against a long name.
  EXPECT_FALSE(
      MatchesPattern(std::string(50, '*') + "b", std::string(4096, 'a')));
}

constexpr char kFile[] = R"json({
  "principals": [
    {"name": "editor", "token_sha256": "%EDITOR%",
     "grants": [{"roles": ["read", "write"], "worlds": ["scene-*"]}],
     "quotas": {"max_subscriptions": 3}},
    {"name": "ops", "token_sha256": "%OPS%",
     "grants": [{"roles": ["admin"], "worlds": ["*"]}]},
    {"name": "renderer", "certificate_names": ["CN=renderer,O=studio"],
     "grants": [{"roles": ["read"], "worlds": ["scene-main"]}]}
  ],
  "default_quotas": {"max_subscriptions": 10, "max_writers": 2}
})json";

std::string FileWithTokens() {
  std::string json = kFile;
  json.replace(json.find("%EDITOR%"), 8, Sha256Hex("editor-token"));
  json.replace(json.find("%OPS%"), 5, Sha256Hex("ops-token"));
  return json;
}

TEST(AccessPolicyTest, FindsPrincipalsByTokenAndCertificate) {
  auto policy = AccessPolicy::Parse(FileWithTokens());
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_TRUE((*policy)->enforced());
  ASSERT_NE((*policy)->ByToken("editor-token"), nullptr);
  EXPECT_EQ((*policy)->ByToken("editor-token")->name, "editor");
  EXPECT_EQ((*policy)->ByToken("ops-token")->name, "ops");
  EXPECT_EQ((*policy)->ByToken("editor-token "), nullptr);
  EXPECT_EQ((*policy)->ByToken(""), nullptr);  // No principal lacks a hash.
  EXPECT_EQ(
      (*policy)->ByCertificate({"CN=other", "CN=renderer,O=studio"})->name,
      "renderer");
  EXPECT_EQ((*policy)->ByCertificate({"CN=renderer"}), nullptr);
  EXPECT_EQ((*policy)->anonymous(), nullptr);
}

TEST(AccessPolicyTest, RolesOnPatterns) {
  auto policy = AccessPolicy::Parse(FileWithTokens());
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Principal& editor = *(*policy)->ByToken("editor-token");
  const Principal& ops = *(*policy)->ByToken("ops-token");
  EXPECT_TRUE(editor.Allows(kRead, "scene-1"));
  EXPECT_TRUE(editor.Allows(kWrite, "scene-1"));
  EXPECT_FALSE(editor.Allows(kAdmin, "scene-1"));
  EXPECT_FALSE(editor.Allows(kRead, "other"));
  EXPECT_TRUE(ops.Allows(kRead, "other"));  // Admin allows everything.
  EXPECT_TRUE(ops.Allows(kWrite, "other"));
  EXPECT_TRUE(ops.Allows(kAdmin, "other"));
}

TEST(AccessPolicyTest, QuotasFallBackToDefaults) {
  auto policy = AccessPolicy::Parse(FileWithTokens());
  ASSERT_TRUE(policy.ok()) << policy.status();
  const Principal& editor = *(*policy)->ByToken("editor-token");
  EXPECT_EQ(editor.quotas.max_subscriptions(), 3u);
  EXPECT_EQ(editor.quotas.max_writers(), 2u);
  EXPECT_FALSE(editor.quotas.has_max_worlds_owned());
}

TEST(AccessPolicyTest, OpenToAllLetsAnonymousDoAnything) {
  auto policy = AccessPolicy::OpenToAll();
  EXPECT_FALSE(policy->enforced());
  ASSERT_NE(policy->anonymous(), nullptr);
  EXPECT_TRUE(policy->anonymous()->Allows(kAdmin, "any"));
}

TEST(AccessPolicyTest, RefusesBadFilesSayingWhere) {
  const std::string hash = Sha256Hex("t");
  struct Case {
    std::string json;
    std::string says;
  } cases[] = {
      {"{", "not valid JSON"},
      {R"({"principal": []})", "not valid JSON"},  // A typo'd field.
      {R"({"principals": [{"token_sha256": ")" + hash + R"("}]})",
       "principals[0]: name"},
      {R"({"principals": [{"name": "a", "token_sha256": "abc"}]})",
       "64 hex digits"},
      {R"({"principals": [{"name": "a"}]})", "neither token_sha256"},
      {R"({"principals": [{"name": "a", "token_sha256": ")" + hash +
           R"("}, {"name": "a", "certificate_names": ["CN=x"]}]})",
       "used twice"},
      {R"({"principals": [{"name": "a", "token_sha256": ")" + hash +
           R"("}, {"name": "b", "token_sha256": ")" + hash + R"("}]})",
       "another principal's too"},
      {R"({"principals": [{"name": "a", "token_sha256": ")" + hash +
           R"(", "grants": [{"roles": ["root"], "worlds": ["*"]}]}]})",
       "unknown role"},
      {R"({"principals": [{"name": "a", "token_sha256": ")" + hash +
           R"(", "grants": [{"roles": ["read"]}]}]})",
       "names no worlds"},
      {R"({"default_quotas": {"write_batches_per_second": 0}})",
       "must be above 0"},
      {R"({"default_quotas": {"calls_per_second": -1}})",
       "calls_per_second must be above 0"},
      {R"({"default_quotas": {"bytes_out_per_second": 0}})",
       "bytes_out_per_second must be above 0"},
      {R"({"anonymous": {"token_sha256": ")" + hash + R"("}})",
       "takes no token_sha256"},
  };
  for (const Case& c : cases) {
    auto policy = AccessPolicy::Parse(c.json);
    ASSERT_FALSE(policy.ok()) << c.json;
    EXPECT_EQ(policy.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(policy.status().message().find(c.says), std::string::npos)
        << policy.status() << " should say " << c.says;
    // An error never echoes a hash (or anything token-like).
    EXPECT_EQ(policy.status().message().find(hash), std::string::npos);
  }
}

}  // namespace
}  // namespace xform::server
