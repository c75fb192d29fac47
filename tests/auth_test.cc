// Copyright 2026 The xform Authors.
//
// Access control and quotas through a real server on loopback: who may call
// what on which worlds, with the exact status each refusal gets, the quotas
// per principal, and a reload that removes a principal ending its streams.

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/access/access_policy.h"
#include "server/base/log.h"
#include "server/base/token_bucket.h"
#include "server/service/gatekeeper.h"
#include "server/service/refusal_guard.h"
#include "tests/loopback_server.h"
#include "tests/manual_clock.h"
#include "tests/wait_until.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform::server {
namespace {

using grpc::StatusCode;

// Principals by token: "<name>-token" for each name below.
constexpr char kPolicy[] = R"json({
  "principals": [
    {"name": "reader", "token_sha256": "$reader",
     "grants": [{"roles": ["read"], "worlds": ["scene-*"]}]},
    {"name": "writer", "token_sha256": "$writer",
     "grants": [{"roles": ["write"], "worlds": ["scene-*"]}]},
    {"name": "admin", "token_sha256": "$admin",
     "grants": [{"roles": ["admin"], "worlds": ["scene-*"]}]},
    {"name": "limited", "token_sha256": "$limited",
     "grants": [{"roles": ["admin"], "worlds": ["lim-*"]}],
     "quotas": {"max_worlds_owned": 1, "max_entities_per_world": 10,
                "max_subscriptions": 1, "max_writers": 1,
                "write_batches_per_second": 3, "max_filter_ids": 2}},
    {"name": "trickle", "token_sha256": "$trickle",
     "grants": [{"roles": ["admin"], "worlds": ["trickle"]}],
     "quotas": {"write_entities_per_second": 100}},
    {"name": "chatty", "token_sha256": "$chatty",
     "grants": [{"roles": ["read"], "worlds": ["scene-*"]}],
     "quotas": {"calls_per_second": 4}},
    {"name": "narrow", "token_sha256": "$narrow",
     "grants": [{"roles": ["read"], "worlds": ["scene-*"]}],
     "quotas": {"bytes_out_per_second": 4000}}
    $extra
  ]
})json";

std::string PolicyJson(absl::string_view extra = "") {
  std::string json = absl::StrReplaceAll(kPolicy, {{"$extra", extra}});
  for (const char* name : {"reader", "writer", "admin", "limited", "trickle",
                           "chatty", "narrow", "temp"}) {
    json = absl::StrReplaceAll(
        json,
        {{absl::StrCat("$", name), Sha256Hex(absl::StrCat(name, "-token"))}});
  }
  return json;
}

std::shared_ptr<const AccessPolicy> Policy(absl::string_view extra = "") {
  auto policy = AccessPolicy::Parse(PolicyJson(extra));
  EXPECT_TRUE(policy.ok()) << policy.status();
  return *policy;
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gatekeeper_ = std::make_shared<Gatekeeper>(
        Policy(R"(, {"name": "temp", "token_sha256": "$temp",
             "grants": [{"roles": ["read"], "worlds": ["scene-*"]}]})"),
        clock_);
    ASSERT_TRUE(server_.Start({}, {.gatekeeper = gatekeeper_}));
    for (const char* name : {"scene-1", "private-1", "trickle"}) {
      v1::CreateWorldRequest create;
      create.set_name(name);
      create.set_mode(v1::FRAME_MODE_DRIVEN);
      ASSERT_TRUE(server_.host().Create(create).ok());
    }
    stub_ = v1::Xform::NewStub(grpc::CreateChannel(
        server_.address(), grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> As(absl::string_view token) {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(10));
    if (!token.empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    }
    return context;
  }

  grpc::Status CreateWorld(absl::string_view token, const std::string& name) {
    v1::CreateWorldRequest create;
    create.set_name(name);
    create.set_mode(v1::FRAME_MODE_DRIVEN);
    v1::WorldInfo info;
    return stub_->CreateWorld(As(token).get(), create, &info);
  }

  grpc::Status Apply(absl::string_view token, const std::string& world,
                     std::vector<EntityId> create = {7}) {
    v1::ApplyRequest request;
    request.set_world(world);
    request.set_end_frame(true);
    auto* ops = request.add_commands()->mutable_create();
    for (EntityId e : create) ops->add_entity(e);
    v1::ApplyResponse response;
    return stub_->Apply(As(token).get(), request, &response);
  }

  // The first message's status: OK when the stream started.
  struct OpenStream {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<v1::FrameUpdate>> reader;
    grpc::Status status;  // The refusal, when it did not start.
  };
  OpenStream Subscribe(absl::string_view token, const std::string& world,
                       std::vector<EntityId> entities = {}) {
    OpenStream stream;
    stream.context = As(token);
    v1::SubscribeRequest request;
    request.set_world(world);
    for (EntityId e : entities) request.add_entity(e);
    stream.reader = stub_->Subscribe(stream.context.get(), request);
    v1::FrameUpdate update;
    if (!stream.reader->Read(&update)) stream.status = stream.reader->Finish();
    return stream;
  }

  grpc::Status Call(absl::string_view method, absl::string_view token,
                    const std::string& world) {
    if (method == "GetWorld") {
      v1::GetWorldRequest request;
      request.set_name(world);
      v1::WorldInfo info;
      return stub_->GetWorld(As(token).get(), request, &info);
    }
    if (method == "Read") {
      if (auto hosted = server_.host().Get(world); hosted.ok()) {
        v1::ApplyRequest create;  // Entity 1, to read (if it is not there).
        create.set_world(world);
        create.set_end_frame(true);
        create.add_commands()->mutable_create()->add_entity(1);
        (*hosted)->Apply(create, server_.host().limits()).IgnoreError();
      }
      v1::ReadRequest request;
      request.set_world(world);
      request.add_entity(1);
      v1::ReadResponse response;
      return stub_->Read(As(token).get(), request, &response);
    }
    if (method == "ListSubscribers") {
      v1::ListSubscribersRequest request;
      request.set_world(world);
      v1::ListSubscribersResponse response;
      return stub_->ListSubscribers(As(token).get(), request, &response);
    }
    if (method == "Apply") return Apply(token, world);
    if (method == "Subscribe") {
      OpenStream stream = Subscribe(token, world);
      if (stream.status.ok()) stream.context->TryCancel();
      return stream.status;
    }
    if (method == "CreateWorld") {
      grpc::Status status = CreateWorld(token, world);
      server_.host().Delete(world).IgnoreError();  // For the next case.
      return status;
    }
    if (method == "DeleteWorld") {
      v1::DeleteWorldRequest request;
      request.set_name(world);
      v1::DeleteWorldResponse response;
      grpc::Status status =
          stub_->DeleteWorld(As(token).get(), request, &response);
      if (status.ok()) {  // Back, for the next case.
        v1::CreateWorldRequest create;
        create.set_name(world);
        create.set_mode(v1::FRAME_MODE_DRIVEN);
        EXPECT_TRUE(server_.host().Create(create).ok());
      }
      return status;
    }
    ADD_FAILURE() << "no method " << method;
    return grpc::Status::OK;
  }

  // The quotas' time: stepped, never slept through.
  ManualClock clock_;
  std::shared_ptr<Gatekeeper> gatekeeper_;
  LoopbackServer server_;
  std::unique_ptr<v1::Xform::Stub> stub_;
};

// Role x method x world, each with its exact status. A world the caller may
// not touch is refused the same way whether or not it exists.
TEST_F(AuthTest, RolesByMethodAndWorld) {
  constexpr StatusCode OK = StatusCode::OK;
  constexpr StatusCode DENIED = StatusCode::PERMISSION_DENIED;
  constexpr StatusCode NOAUTH = StatusCode::UNAUTHENTICATED;
  constexpr StatusCode MISSING = StatusCode::NOT_FOUND;
  struct Case {
    const char* token;
    const char* method;
    const char* world;
    StatusCode code;
  } cases[] = {
      // No credentials, or unknown ones: nothing, not even whether a world
      // exists.
      {"", "GetWorld", "scene-1", NOAUTH},
      {"", "Apply", "scene-1", NOAUTH},
      {"", "Subscribe", "scene-1", NOAUTH},
      {"", "CreateWorld", "scene-2", NOAUTH},
      {"wrong-token", "GetWorld", "scene-1", NOAUTH},
      {"wrong-token", "Subscribe", "scene-1", NOAUTH},
      // read
      {"reader-token", "GetWorld", "scene-1", OK},
      {"reader-token", "Read", "scene-1", OK},
      {"reader-token", "Subscribe", "scene-1", OK},
      {"reader-token", "GetWorld", "scene-missing", MISSING},
      {"reader-token", "Apply", "scene-1", DENIED},
      {"reader-token", "CreateWorld", "scene-2", DENIED},
      {"reader-token", "DeleteWorld", "scene-1", DENIED},
      {"reader-token", "GetWorld", "private-1", DENIED},
      {"reader-token", "GetWorld", "private-missing", DENIED},
      {"reader-token", "Subscribe", "private-1", DENIED},
      // Other callers' peers and principals are the admin's to see.
      {"reader-token", "ListSubscribers", "scene-1", DENIED},
      {"", "ListSubscribers", "scene-1", NOAUTH},
      // write
      {"writer-token", "Apply", "scene-1", OK},
      {"writer-token", "Apply", "private-1", DENIED},
      {"writer-token", "Apply", "scene-missing", MISSING},
      {"writer-token", "GetWorld", "scene-1", DENIED},
      {"writer-token", "Read", "scene-1", DENIED},
      {"writer-token", "Subscribe", "scene-1", DENIED},
      {"writer-token", "CreateWorld", "scene-2", DENIED},
      {"writer-token", "DeleteWorld", "scene-1", DENIED},
      // admin: everything, on its worlds only
      {"admin-token", "CreateWorld", "scene-2", OK},
      {"admin-token", "DeleteWorld", "scene-1", OK},
      {"admin-token", "GetWorld", "scene-1", OK},
      {"admin-token", "ListSubscribers", "scene-1", OK},
      {"admin-token", "ListSubscribers", "scene-missing", MISSING},
      {"admin-token", "ListSubscribers", "private-1", DENIED},
      {"admin-token", "Read", "scene-1", OK},
      {"admin-token", "Subscribe", "scene-1", OK},
      {"admin-token", "Apply", "scene-1", OK},
      {"admin-token", "CreateWorld", "private-2", DENIED},
      {"admin-token", "DeleteWorld", "private-1", DENIED},
      {"admin-token", "Apply", "private-1", DENIED},
  };
  for (const Case& c : cases) {
    const grpc::Status status = Call(c.method, c.token, c.world);
    EXPECT_EQ(status.error_code(), c.code)
        << c.method << " by '" << c.token << "' on " << c.world << ": "
        << status.error_message();
    // Nothing says whether an unreadable world exists, and no token shows.
    EXPECT_EQ(status.error_message().find("exist"), std::string::npos)
        << status.error_message();
    if (*c.token != '\0') {
      EXPECT_EQ(status.error_message().find(c.token), std::string::npos);
    }
  }
}

TEST_F(AuthTest, ListWorldsShowsOnlyWhatTheCallerMayRead) {
  v1::ListWorldsResponse list;
  ASSERT_TRUE(stub_->ListWorlds(As("reader-token").get(), {}, &list).ok());
  ASSERT_EQ(list.worlds_size(), 1);
  EXPECT_EQ(list.worlds(0).name(), "scene-1");
  list.Clear();
  ASSERT_TRUE(stub_->ListWorlds(As("writer-token").get(), {}, &list).ok());
  EXPECT_EQ(list.worlds_size(), 0);
  EXPECT_EQ(stub_->ListWorlds(As("").get(), {}, &list).error_code(),
            StatusCode::UNAUTHENTICATED);
}

void ExpectQuota(const grpc::Status& status, const std::string& quota) {
  EXPECT_EQ(status.error_code(), StatusCode::RESOURCE_EXHAUSTED)
      << status.error_message();
  EXPECT_NE(status.error_message().find(quota), std::string::npos)
      << status.error_message() << " should name " << quota;
}

TEST_F(AuthTest, WorldsOwnedAndEntitiesPerWorld) {
  ASSERT_TRUE(Call("CreateWorld", "limited-token", "lim-x").ok());  // Gone.
  ASSERT_TRUE(CreateWorld("limited-token", "lim-1").ok());
  ExpectQuota(CreateWorld("limited-token", "lim-2"), "max_worlds_owned");
  // Entities: 10 at most in its worlds, by its writes; a refused batch
  // applies nothing.
  std::vector<EntityId> eleven;
  for (EntityId e = 1; e <= 11; ++e) eleven.push_back(e);
  ExpectQuota(Apply("limited-token", "lim-1", eleven), "10 entities");
  EXPECT_EQ(server_.host().Get("lim-1").value()->Info().entities(), 0u);
  EXPECT_TRUE(Apply("limited-token", "lim-1", {1, 2, 3}).ok());
}

TEST_F(AuthTest, SubscriptionsAndFilterSize) {
  ASSERT_TRUE(CreateWorld("limited-token", "lim-1").ok());
  ExpectQuota(Subscribe("limited-token", "lim-1", {1, 2, 3}).status,
              "max_filter_ids");
  OpenStream first = Subscribe("limited-token", "lim-1", {1, 2});
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ExpectQuota(Subscribe("limited-token", "lim-1").status, "max_subscriptions");
  // Another principal is not held to this one's quota.
  OpenStream other = Subscribe("admin-token", "scene-1");
  EXPECT_TRUE(other.status.ok()) << other.status.error_message();
  other.context->TryCancel();
  // Once the first ends, there is room again.
  first.context->TryCancel();
  first.reader->Finish();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  grpc::Status again;
  do {
    OpenStream next = Subscribe("limited-token", "lim-1");
    again = next.status;
    if (again.ok()) next.context->TryCancel();
  } while (!again.ok() && absl::Now() < deadline);
  EXPECT_TRUE(again.ok()) << again.error_message();
}

TEST_F(AuthTest, WritersAndWriteRates) {
  ASSERT_TRUE(CreateWorld("limited-token", "lim-1").ok());
  {
    // An open ApplyStream is its one writer: an Apply meanwhile is refused.
    auto context = As("limited-token");
    auto stream = stub_->ApplyStream(context.get());
    v1::ApplyRequest request;
    request.set_world("lim-1");
    request.set_end_frame(true);
    request.add_commands()->mutable_create()->add_entity(1);
    v1::ApplyResponse response;
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(stream->Read(&response));  // It is open and counted.
    ExpectQuota(Apply("limited-token", "lim-1", {2}), "max_writers");
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
  // 3 batches a second: the bucket (one second's worth) holds 2 more after
  // the stream's, then refuses, naming the quota, applying nothing.
  clock_.Advance(absl::Seconds(1));  // Full again.
  // The stream's writer is counted until the server has ended it, which
  // may be a moment after its client has (a writer refused takes no batch).
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  grpc::Status first;
  do {
    first = Apply("limited-token", "lim-1", {10});
  } while (absl::StrContains(first.error_message(), "max_writers") &&
           absl::Now() < deadline);
  EXPECT_TRUE(first.ok()) << first.error_message();
  EXPECT_TRUE(Apply("limited-token", "lim-1", {11}).ok());
  EXPECT_TRUE(Apply("limited-token", "lim-1", {12}).ok());
  ExpectQuota(Apply("limited-token", "lim-1", {13}),
              "write_batches_per_second");
  clock_.Advance(absl::Milliseconds(400));  // Room for one more.
  EXPECT_TRUE(Apply("limited-token", "lim-1", {14}).ok());
  // 100 entities a second.
  std::vector<EntityId> sixty, next_sixty;
  for (EntityId e = 1; e <= 60; ++e) {
    sixty.push_back(e);
    next_sixty.push_back(100 + e);
  }
  EXPECT_TRUE(Apply("trickle-token", "trickle", sixty).ok());
  ExpectQuota(Apply("trickle-token", "trickle", next_sixty),
              "write_entities_per_second");
  EXPECT_EQ(server_.host().Get("trickle").value()->Info().entities(), 60u);
  // A batch bigger than the bucket can never go, and the status says so.
  std::vector<EntityId> many;
  for (EntityId e = 1000; e < 1101; ++e) many.push_back(e);
  const grpc::Status too_big = Apply("trickle-token", "trickle", many);
  ExpectQuota(too_big, "write_entities_per_second");
  EXPECT_TRUE(absl::StrContains(too_big.error_message(), "can never fit"))
      << too_big.error_message();
  EXPECT_EQ(server_.host().Get("trickle").value()->Info().entities(), 60u);
}

// Over 4 s at 1,000 entities a second, at most the quota plus one bucket
// (4,000 + 1,000) is written, whatever the batch size; and a batch that
// fits is not starved. Before, a batch bigger than the bucket went through
// whenever the bucket was full, emptying it: 100,000-entity batches wrote
// 500,000 in the 4 s.
TEST(UsageTest, WriteEntitiesHoldAtAnyBatchSize) {
  config::Quotas quotas;
  quotas.set_write_entities_per_second(1000);
  const absl::Time start = absl::UnixEpoch() + absl::Hours(1);
  for (const size_t batch : {1, 10, 999, 1000, 1001, 5000, 100'000}) {
    auto usage = std::make_shared<Usage>("p");
    size_t written = 0;
    for (absl::Duration t; t <= absl::Seconds(4); t += absl::Milliseconds(1)) {
      if (usage->TakeWrite(quotas, batch, start + t).ok()) written += batch;
    }
    EXPECT_LE(written, 5000u) << batch;
    if (batch <= 1000) {
      EXPECT_GE(written, 4000u) << batch;
    } else {
      EXPECT_EQ(written, 0u) << batch;
    }
  }
}

// The RefusalGuard's cut-offs, with a stepped clock: what it cut off, with
// what penalty.
class RefusalGuardTest : public ::testing::Test {
 protected:
  struct Cut {
    std::string peer;
    absl::Duration penalty;
  };
  RefusalGuard guard_{{},
                      [this](absl::string_view peer, absl::Duration penalty,
                             absl::string_view) {
                        cuts_.push_back({std::string(peer), penalty});
                      }};
  std::vector<Cut> cuts_;
  const absl::Time start_ = absl::UnixEpoch() + absl::Hours(1);
};

// An honest client is refused now and then, or small calls often: a 60 Hz
// poller refused every time for ten minutes, and a 16 MB batch refused
// every two seconds, are never cut off.
TEST_F(RefusalGuardTest, HonestRefusalsAreNeverCutOff) {
  for (int k = 0; k < 60 * 600; ++k) {
    guard_.Refused("poller", "ipv4:10.0.0.1:1000", 100,
                   start_ + absl::Seconds(k) / 60);
  }
  for (int k = 0; k < 300; ++k) {
    guard_.Refused("big", "ipv4:10.0.0.2:1000", 16 << 20,
                   start_ + absl::Seconds(2 * k));
  }
  EXPECT_TRUE(cuts_.empty());
}

// 9.6 MB batches refused 240 times a second: cut off within the second,
// 1 s at first; again at once on another of its connections while
// penalized; doubling as it goes on, up to 64 s; forgiven after a quiet
// spell. Another principal, and another address, are not held to it.
TEST_F(RefusalGuardTest, ACallerRefusedByTheMegabyteIsCutOffLongerEachTime) {
  const size_t batch = 9'600'000;
  absl::Time now = start_;
  const auto refuse_until_cut = [&](absl::string_view who,
                                    absl::string_view peer) {
    const size_t before = cuts_.size();
    int refused = 0;
    while (cuts_.size() == before && refused < 10'000) {
      guard_.Refused(who, peer, batch, now);
      now += absl::Seconds(1) / 240;
      ++refused;
    }
    return refused;
  };
  EXPECT_LE(refuse_until_cut("hog", "ipv4:10.0.0.9:1"), 8);
  ASSERT_EQ(cuts_.size(), 1u);
  EXPECT_EQ(cuts_[0].penalty, absl::Seconds(1));
  guard_.Refused("hog", "ipv4:10.0.0.9:2", batch, now);  // Its other one.
  ASSERT_EQ(cuts_.size(), 2u);
  EXPECT_EQ(cuts_[1].peer, "ipv4:10.0.0.9:2");
  EXPECT_LE(cuts_[1].penalty, absl::Seconds(1));
  for (absl::Duration expected :
       {absl::Seconds(2), absl::Seconds(4), absl::Seconds(8), absl::Seconds(16),
        absl::Seconds(32), absl::Seconds(64), absl::Seconds(64)}) {
    // Past the last penalty, within forgive_after (2 min) of the trip.
    now += cuts_.back().penalty + absl::Seconds(1);
    const size_t before = cuts_.size();
    refuse_until_cut("hog", "ipv4:10.0.0.9:3");
    ASSERT_EQ(cuts_.size(), before + 1);
    EXPECT_EQ(cuts_.back().penalty, expected);
  }
  // Another principal from the same address, and the unauthenticated from
  // another address, each start with a bucket of their own.
  const size_t before = cuts_.size();
  guard_.Refused("other", "ipv4:10.0.0.9:4", batch, now);
  guard_.Refused("", "ipv4:10.0.0.10:4", batch, now);
  EXPECT_EQ(cuts_.size(), before);
  // Quiet for longer than forgive_after: back to a second.
  now += absl::Minutes(10);
  refuse_until_cut("hog", "ipv4:10.0.0.9:5");
  EXPECT_EQ(cuts_.back().penalty, absl::Seconds(1));
  EXPECT_EQ(guard_.cut_offs(), cuts_.size() - 1);  // Less the other link's.
}

// Callers with no credential are told apart by address, an IPv6 one by its
// /64: a flood of unknown tokens from one host trips its own bucket only.
TEST_F(RefusalGuardTest, TheUnauthenticatedAreCountedByAddress) {
  for (int k = 0; k < 200; ++k) {
    guard_.Refused("", absl::StrCat("ipv6:[2001:db8::", k, "]:80"), 1 << 20,
                   start_);
  }
  ASSERT_FALSE(cuts_.empty());
  for (int k = 0; k < 20; ++k) {
    guard_.Refused("", absl::StrCat("ipv4:192.0.2.", k, ":80"), 1 << 20,
                   start_);
  }
  for (const Cut& cut : cuts_) {
    EXPECT_TRUE(absl::StartsWith(cut.peer, "ipv6:")) << cut.peer;
  }
}

TEST(TokenBucketTest, TakesWholeAmountsAndChargesIntoDebt) {
  const absl::Time t0 = absl::UnixEpoch();
  TokenBucket bucket;
  EXPECT_TRUE(bucket.TryTake(10, 10, t0));  // Full when new: 10.
  EXPECT_FALSE(bucket.TryTake(10, 1, t0));
  EXPECT_FALSE(bucket.TryTake(10, 6, t0 + absl::Milliseconds(500)));
  EXPECT_TRUE(bucket.TryTake(10, 5, t0 + absl::Milliseconds(500)));
  bucket.Charge(10, 25, t0 + absl::Seconds(10));  // From full: 10 - 25.
  EXPECT_DOUBLE_EQ(bucket.Tokens(10, t0 + absl::Seconds(10)), -15);
  EXPECT_DOUBLE_EQ(bucket.Tokens(10, t0 + absl::Seconds(12)), 5);
  // A rate lowered under a full bucket caps it at the new second's worth.
  EXPECT_DOUBLE_EQ(bucket.Tokens(2, t0 + absl::Seconds(60)), 2);
  // At least one token, whatever the rate.
  EXPECT_TRUE(TokenBucket::Fits(0.1, 1));
  EXPECT_FALSE(TokenBucket::Fits(1000, 1001));
}

// A caller refused at its call rate costs the log a line a second, and
// that line counts the refusals it stands for.
TEST_F(AuthTest, RefusalsAreLoggedAtMostOnceASecondEach) {
  auto refused_lines = [](const std::string& log) {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(log, '\n')) {
      if (absl::StrContains(line, "refused: Apply: principal 'reader'")) {
        lines.emplace_back(line);
      }
    }
    return lines;
  };
  testing::internal::CaptureStderr();
  for (int k = 0; k < 200; ++k) {
    EXPECT_EQ(Apply("reader-token", "scene-1").error_code(),
              StatusCode::PERMISSION_DENIED);
  }
  std::vector<std::string> lines =
      refused_lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(absl::StrContains(lines[0], "more since")) << lines[0];
  clock_.Advance(absl::Seconds(1));
  testing::internal::CaptureStderr();
  EXPECT_EQ(Apply("reader-token", "scene-1").error_code(),
            StatusCode::PERMISSION_DENIED);
  lines = refused_lines(testing::internal::GetCapturedStderr());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(absl::StrContains(lines[0], "(and 199 more since the last"))
      << lines[0];
  EXPECT_FALSE(absl::StrContains(lines[0], "reader-token")) << lines[0];
}

// A world name is the client's: one holding a newline must not write a log
// line of its own. Before, an anonymous Read of such a name wrote
// "... I world 'secret' deleted by principal 'ops'" as a line.
TEST_F(AuthTest, ClientStringsCannotForgeLogLines) {
  gatekeeper_->Reload(
      Policy(R"(, {"name": "forger", "token_sha256": "$temp"})"));
  const std::string forged =
      "2026-12-01T00:00:00.000Z I world 'secret' deleted by principal 'ops'";
  const std::string name = absl::StrCat("x'\n", forged, "\r\x1b[2J\\");
  testing::internal::CaptureStderr();
  EXPECT_EQ(Call("Read", "temp-token", name).error_code(),
            StatusCode::PERMISSION_DENIED);
  const std::string log = testing::internal::GetCapturedStderr();
  bool refused = false;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, forged)) << log;
    EXPECT_FALSE(absl::StrContains(line, "\x1b")) << log;
    refused |=
        absl::StrContains(line, "principal 'forger' lacks the read role");
  }
  EXPECT_TRUE(refused) << log;
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("x'\\x0a", forged, "\\x0d\\x1b[2J\\\\")))
      << log;
}

TEST(EscapeForLogTest, EscapesWhatEndsOrRewritesALine) {
  EXPECT_EQ(EscapeForLog("plain 'name' - ok"), "plain 'name' - ok");
  EXPECT_EQ(EscapeForLog("a\nb\tc\x7f\\"), "a\\x0ab\\x09c\\x7f\\\\");
  EXPECT_EQ(EscapeForLog(std::string("nul\0", 4)), "nul\\x00");
  // C1 controls (NEL), the line separator; other UTF-8 untouched.
  EXPECT_EQ(EscapeForLog("\xc2\x85|\xe2\x80\xa8|\xc3\xa9\xe4\xb8\x96"),
            "\\u{85}|\\u{2028}|\xc3\xa9\xe4\xb8\x96");
  EXPECT_EQ(EscapeForLog("\xc2"), "\xc2");  // Cut short: left as it is.
}

// Every call takes a token, refused before any work of its own; another
// principal is not held to it.
TEST_F(AuthTest, CallRate) {
  for (int k = 0; k < 4; ++k) {  // The bucket holds a second's worth.
    EXPECT_TRUE(Call("GetWorld", "chatty-token", "scene-1").ok()) << k;
  }
  ExpectQuota(Call("GetWorld", "chatty-token", "scene-1"), "calls_per_second");
  ExpectQuota(Call("Subscribe", "chatty-token", "scene-1"), "calls_per_second");
  EXPECT_TRUE(Call("GetWorld", "reader-token", "scene-1").ok());
  clock_.Advance(absl::Milliseconds(300));  // 1.2 calls' worth.
  EXPECT_TRUE(Call("GetWorld", "chatty-token", "scene-1").ok());
  ExpectQuota(Call("GetWorld", "chatty-token", "scene-1"), "calls_per_second");
}

// A stream over bytes_out_per_second waits, its frames folding meanwhile, and
// ends exact; a Read is refused while the bucket is in debt. A principal
// without the quota gets every frame at once.
TEST_F(AuthTest, BytesOutRate) {
  constexpr int kEntities = 100;  // A frame moving all: about 5.7 KB.
  constexpr int kFrames = 10;
  std::vector<EntityId> all;
  for (EntityId e = 1; e <= kEntities; ++e) all.push_back(e);
  ASSERT_TRUE(Apply("admin-token", "scene-1", all).ok());
  struct Received {
    absl::Mutex mu;
    std::vector<v1::FrameUpdate> updates ABSL_GUARDED_BY(mu);
    size_t size() {
      absl::MutexLock lock(&mu);
      return updates.size();
    }
    uint64_t last_frame() {
      absl::MutexLock lock(&mu);
      return updates.empty() ? 0 : updates.back().frame();
    }
  };
  auto read_all = [](grpc::ClientReader<v1::FrameUpdate>* reader,
                     Received* received) {
    v1::FrameUpdate update;
    while (reader->Read(&update)) {
      absl::MutexLock lock(&received->mu);
      received->updates.push_back(update);
    }
  };
  OpenStream narrow = Subscribe("narrow-token", "scene-1");  // Its snapshot.
  ASSERT_TRUE(narrow.status.ok()) << narrow.status.error_message();
  OpenStream free = Subscribe("reader-token", "scene-1");
  ASSERT_TRUE(free.status.ok()) << free.status.error_message();
  ExpectQuota(Call("Read", "narrow-token", "scene-1"), "bytes_out_per_second");
  Received narrow_got, free_got;
  std::thread narrow_reader(read_all, narrow.reader.get(), &narrow_got);
  std::thread free_reader(read_all, free.reader.get(), &free_got);

  float last_x = 0;
  for (int frame = 1; frame <= kFrames; ++frame) {
    v1::ApplyRequest move;
    move.set_world("scene-1");
    move.set_end_frame(true);
    auto* set = move.add_commands()->mutable_set_local();
    last_x = static_cast<float>(frame);
    for (EntityId e : all) {
      set->add_entity(e);
      for (float f : {last_x, static_cast<float>(e), 0.0f, 0.0f, 0.0f, 0.0f,
                      1.0f, 1.0f, 1.0f, 1.0f}) {
        set->add_local(f);  // Position, rotation (x y z w), scale.
      }
    }
    v1::ApplyResponse response;
    ASSERT_TRUE(stub_->Apply(As("admin-token").get(), move, &response).ok());
    // The unquoted one gets every frame promptly; the next waits for it.
    EXPECT_TRUE(WaitUntil(
        [&] { return free_got.last_frame() >= response.frame(); },
        absl::Seconds(5), "free_got.last_frame() >= response.frame()"));
    ASSERT_EQ(free_got.last_frame(), response.frame());
  }
  // Quoted at 4 KB/s: its snapshot's debt is still being paid (its clock
  // has not moved), so it has its snapshot alone (Subscribe read it) ...
  EXPECT_EQ(narrow_got.size(), 0u);
  // ... and once three seconds (12 KB of room) pass, the ten frames (about
  // 57 KB), folded, exact.
  clock_.Advance(absl::Seconds(3));
  auto narrow_exact = [&] {
    absl::MutexLock lock(&narrow_got.mu);
    for (const v1::FrameUpdate& update : narrow_got.updates) {
      for (int k = 0; k < update.moved_size(); ++k) {
        if (update.moved_world(12 * k + 3) != last_x) continue;
        if (update.moved(k) == kEntities) return true;  // The last moved.
      }
    }
    return false;
  };
  EXPECT_TRUE(WaitUntil([&] { return narrow_exact(); }, absl::Seconds(3),
                        "narrow_exact()"));
  EXPECT_TRUE(narrow_exact());
  {
    absl::MutexLock lock(&narrow_got.mu);
    EXPECT_LE(narrow_got.updates.size(), 3u);
    uint64_t skipped = 0;
    for (const auto& update : narrow_got.updates) {
      skipped += update.frames_skipped();
    }
    EXPECT_GE(skipped, 1u);
  }
  narrow.context->TryCancel();
  free.context->TryCancel();
  narrow_reader.join();
  free_reader.join();
}

// A reload that drops a principal ends its open streams at once, and its
// token is refused from then on; others' streams go on.
TEST_F(AuthTest, ReloadEndsARemovedPrincipalsStreams) {
  OpenStream temp = Subscribe("temp-token", "scene-1");
  ASSERT_TRUE(temp.status.ok()) << temp.status.error_message();
  OpenStream kept = Subscribe("reader-token", "scene-1");
  ASSERT_TRUE(kept.status.ok()) << kept.status.error_message();
  const absl::Time reloaded = absl::Now();
  gatekeeper_->Reload(Policy());
  v1::FrameUpdate update;
  while (temp.reader->Read(&update)) {
  }
  const grpc::Status ended = temp.reader->Finish();
  EXPECT_LT(absl::Now() - reloaded, absl::Seconds(1));
  EXPECT_EQ(ended.error_code(), StatusCode::UNAUTHENTICATED)
      << ended.error_message();
  EXPECT_EQ(Call("GetWorld", "temp-token", "scene-1").error_code(),
            StatusCode::UNAUTHENTICATED);
  // The other stream still gets frames.
  ASSERT_TRUE(Apply("admin-token", "scene-1", {42}).ok());
  EXPECT_TRUE(kept.reader->Read(&update));
  kept.context->TryCancel();
}

// A reload rechecks every open stream: a rotated token (same principal,
// new hash) ends its streams UNAUTHENTICATED, a withdrawn grant ends the
// streams on that world PERMISSION_DENIED, each within a second and without
// another batch sent; a principal the new file still allows goes on.
// Before, only removing a principal's name ended anything: a rotated or
// narrowed one's ApplyStream went on applying and its Subscribe receiving.
TEST_F(AuthTest, ReloadRechecksEveryOpenStream) {
  const auto policy = [](const std::string& temp_token,
                         const std::string& narrowed_worlds) {
    return Policy(absl::StrCat(
        R"(, {"name": "temp", "token_sha256": ")", Sha256Hex(temp_token),
        R"(", "grants": [{"roles": ["read", "write"], "worlds": ["scene-*"]}]},
           {"name": "narrowed", "token_sha256": ")",
        Sha256Hex("narrowed-token"),
        R"(", "grants": [{"roles": ["read", "write"], "worlds": [")",
        narrowed_worlds, R"("]}]})"));
  };
  gatekeeper_->Reload(policy("temp-token", "scene-*"));

  struct Writer {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::ApplyRequest, v1::ApplyResponse>>
        stream;
  };
  const auto open_writer = [&](absl::string_view token, EntityId entity) {
    Writer writer;
    writer.context = As(token);
    writer.stream = stub_->ApplyStream(writer.context.get());
    v1::ApplyRequest request;
    request.set_world("scene-1");
    request.set_end_frame(true);
    request.add_commands()->mutable_create()->add_entity(entity);
    v1::ApplyResponse response;
    EXPECT_TRUE(writer.stream->Write(request));
    EXPECT_TRUE(writer.stream->Read(&response)) << token;
    return writer;
  };
  Writer rotated_writer = open_writer("temp-token", 100);
  Writer narrowed_writer = open_writer("narrowed-token", 101);
  OpenStream rotated = Subscribe("temp-token", "scene-1");
  OpenStream narrowed = Subscribe("narrowed-token", "scene-1");
  OpenStream kept = Subscribe("reader-token", "scene-1");
  for (const OpenStream* open : {&rotated, &narrowed, &kept}) {
    ASSERT_TRUE(open->status.ok()) << open->status.error_message();
  }

  const absl::Time reloaded = absl::Now();
  gatekeeper_->Reload(policy("temp-token-2", "other-*"));
  const auto ended = [](OpenStream& open) {
    v1::FrameUpdate update;
    while (open.reader->Read(&update)) {
    }
    return open.reader->Finish();
  };
  const auto writer_ended = [](Writer& writer) {
    v1::ApplyResponse response;
    while (writer.stream->Read(&response)) {
    }
    return writer.stream->Finish();
  };
  const grpc::Status rotated_status = ended(rotated);
  const grpc::Status narrowed_status = ended(narrowed);
  const grpc::Status rotated_writer_status = writer_ended(rotated_writer);
  const grpc::Status narrowed_writer_status = writer_ended(narrowed_writer);
  EXPECT_LT(absl::Now() - reloaded, absl::Seconds(1));
  EXPECT_EQ(rotated_status.error_code(), StatusCode::UNAUTHENTICATED)
      << rotated_status.error_message();
  EXPECT_EQ(rotated_writer_status.error_code(), StatusCode::UNAUTHENTICATED)
      << rotated_writer_status.error_message();
  EXPECT_TRUE(absl::StrContains(rotated_writer_status.error_message(),
                                "1 batches applied, none after"))
      << rotated_writer_status.error_message();
  EXPECT_EQ(narrowed_status.error_code(), StatusCode::PERMISSION_DENIED)
      << narrowed_status.error_message();
  EXPECT_EQ(narrowed_writer_status.error_code(), StatusCode::PERMISSION_DENIED)
      << narrowed_writer_status.error_message();

  // New calls: the old token is refused, the new one taken.
  EXPECT_EQ(Call("GetWorld", "temp-token", "scene-1").error_code(),
            StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Call("GetWorld", "temp-token-2", "scene-1").ok());
  EXPECT_EQ(Apply("narrowed-token", "scene-1", {102}).error_code(),
            StatusCode::PERMISSION_DENIED);
  // The stream the new file still allows gets frames.
  ASSERT_TRUE(Apply("admin-token", "scene-1", {42}).ok());
  v1::FrameUpdate update;
  EXPECT_TRUE(kept.reader->Read(&update));
  kept.context->TryCancel();
}

}  // namespace
}  // namespace xform::server
