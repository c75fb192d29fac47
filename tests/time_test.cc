// Copyright 2026 The xform Authors.
//
// Time through a real server on loopback (docs/time.md): stamped batches,
// frames that carry their stamp, lookups at a stamp (plain, advanced, many
// sources), lookups that wait for the batch bringing their data, late
// samples that fill history without moving live subscribers, and the
// refusals: stamps too far ahead, too many waiting lookups, no history.

#include "absl/time/time.h"

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/loopback_server.h"
#include "tests/wait_until.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/v1/xform.grpc.pb.h"

namespace xform {
namespace {

using server::Limits;
using server::LoopbackServer;
using ::testing::HasSubstr;

constexpr Stamp kMs = 1'000'000;
constexpr Stamp kT0 = 1'700'000'000'000'000'000;  // A Unix time, in ns.

Transform At(float x) {
  Transform t;
  t.position = {x, 0, 0};
  return t;
}

class TimeTest : public testing::Test {
 protected:
  void SetUp() override { Start(Limits{}); }

  void Start(const Limits& limits) {
    ASSERT_TRUE(server_.Start(limits));
    ClientOptions options;
    options.address = server_.address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  }

  // Root 1 at x=0 and its child 2 at x=1, created at kT0; then 1 moves to
  // x = 10 * k at kT0 + 100 ms * k, for k in 1..n.
  void MoveRoot(int n) {
    ASSERT_TRUE(
        client_
            ->Apply("w", {CreateOp{1, kNoEntity, At(0)}, CreateOp{2, 1, At(1)}},
                    {.end_frame = true, .stamp = kT0})
            .ok());
    for (int k = 1; k <= n; ++k) {
      ASSERT_TRUE(client_
                      ->Apply("w", {SetLocalOp{1, At(10.0f * k)}},
                              {.end_frame = true, .stamp = kT0 + 100 * kMs * k})
                      .ok());
    }
  }

  uint32_t Waiting() {
    return server_.host().Get("w").value()->Info().history().waiting_lookups();
  }

  float XAt(EntityId target, EntityId source, Stamp stamp) {
    absl::StatusOr<TimedPose> pose =
        client_->LookupTransform("w", target, source, {.stamp = stamp});
    EXPECT_TRUE(pose.ok()) << pose.status();
    return pose.ok() ? pose->pose.translation().x : -1e9f;
  }

  LoopbackServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(TimeTest, LookupInterpolatesBetweenStampedBatches) {
  MoveRoot(3);
  EXPECT_FLOAT_EQ(XAt(kNoEntity, 2, kT0 + 150 * kMs), 16);  // 15 + 1.
  EXPECT_FLOAT_EQ(XAt(1, 2, kT0 + 150 * kMs), 1);
  // Stamp 0: the latest at which every link is known.
  absl::StatusOr<TimedPose> latest = client_->LookupTransform("w", 0, 2);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->stamp, kT0 + 300 * kMs);
  EXPECT_FLOAT_EQ(latest->pose.translation().x, 31);
  // Read at a stamp, and each entity's newest stamp.
  absl::StatusOr<std::vector<EntityState>> then =
      client_->ReadAt("w", {2}, kT0 + 50 * kMs);
  ASSERT_TRUE(then.ok()) << then.status();
  EXPECT_FLOAT_EQ((*then)[0].world.translation().x, 6);
}

TEST_F(TimeTest, ManySourcesAndTheAdvancedFormInOneCall) {
  MoveRoot(2);
  absl::StatusOr<std::vector<TimedPose>> poses = client_->LookupTransforms(
      "w", kNoEntity, std::vector<EntityId>{1, 2}, {.stamp = kT0 + 100 * kMs});
  ASSERT_TRUE(poses.ok()) << poses.status();
  ASSERT_EQ(poses->size(), 2u);
  EXPECT_FLOAT_EQ((*poses)[0].pose.translation().x, 10);
  EXPECT_FLOAT_EQ((*poses)[1].pose.translation().x, 11);
  // Where 2 was at 100 ms, in 1's frame at 200 ms (1 moved 10 since).
  absl::StatusOr<TimedPose> advanced =
      client_->LookupTransform("w", 1, 2,
                               {.stamp = kT0 + 100 * kMs,
                                .fixed = kNoEntity,
                                .target_stamp = kT0 + 200 * kMs});
  ASSERT_TRUE(advanced.ok()) << advanced.status();
  EXPECT_FLOAT_EQ(advanced->pose.translation().x, -9);
}

TEST_F(TimeTest, ErrorsSayHowFarTheDataReaches) {
  MoveRoot(2);
  absl::Status past =
      client_->LookupTransform("w", 0, 2, {.stamp = kT0 - kMs}).status();
  EXPECT_EQ(past.code(), absl::StatusCode::kOutOfRange) << past;
  EXPECT_THAT(past.message(), HasSubstr(absl::StrCat("known from ", kT0)));
  absl::Status future =
      client_->LookupTransform("w", 0, 2, {.stamp = kT0 + 900 * kMs}).status();
  EXPECT_EQ(future.code(), absl::StatusCode::kDeadlineExceeded) << future;
  EXPECT_THAT(future.message(),
              HasSubstr(absl::StrCat("known until ", kT0 + 200 * kMs)));
  EXPECT_EQ(client_->LookupTransform("w", 0, 77).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(
      client_->Apply("w", {DestroyOp{2}}, {.stamp = kT0 + 250 * kMs}).ok());
  EXPECT_EQ(client_->LookupTransform("w", 0, 2, {.stamp = kT0 + 260 * kMs})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FLOAT_EQ(XAt(kNoEntity, 2, kT0 + 200 * kMs), 21);
}

TEST_F(TimeTest, WaitingLookupIsAnsweredByTheBatchThatBringsItsData) {
  MoveRoot(1);
  const Stamp wanted = kT0 + 150 * kMs;
  const absl::Time asked = absl::Now();
  auto answer = std::async(std::launch::async, [&] {
    return client_->LookupTransform(
        "w", 0, 2, {.stamp = wanted, .timeout = absl::Seconds(20)});
  });
  // Nothing answers it until the batch comes: the server holds the call.
  ASSERT_TRUE(WaitUntil([&] { return Waiting() == 1; }, absl::Seconds(10),
                        "the lookup waits at the server"));
  EXPECT_EQ(answer.wait_for(std::chrono::milliseconds(0)),
            std::future_status::timeout);
  ASSERT_TRUE(client_
                  ->Apply("w", {SetLocalOp{1, At(30)}},
                          {.end_frame = true, .stamp = kT0 + 200 * kMs})
                  .ok());
  absl::StatusOr<TimedPose> pose = answer.get();
  ASSERT_TRUE(pose.ok()) << pose.status();
  EXPECT_FLOAT_EQ(pose->pose.translation().x, 21);  // Halfway 10 to 30, + 1.
  EXPECT_LT(absl::Now() - asked, absl::Seconds(15));
}

TEST_F(TimeTest, WaitingLookupPastItsTimeoutNamesTheNewestStamp) {
  MoveRoot(1);
  const absl::Time asked = absl::Now();
  absl::Status late =
      client_
          ->LookupTransform(
              "w", 0, 2,
              {.stamp = kT0 + 500 * kMs, .timeout = absl::Milliseconds(200)})
          .status();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
  EXPECT_THAT(late.message(),
              HasSubstr(absl::StrCat("known until ", kT0 + 100 * kMs)));
  EXPECT_GE(absl::Now() - asked, absl::Milliseconds(200));
}

TEST_F(TimeTest, AnEntityThatStoppedIsKnownUntilTheWorldsNewestStamp) {
  // "w" holds (the default): a writer sends only what moved.
  ASSERT_TRUE(client_
                  ->CreateWorld("tf2", {.mode = FrameMode::kDriven,
                                        .time_model = TimeModel::kTf2})
                  .ok());
  for (const char* world : {"w", "tf2"}) {
    ASSERT_TRUE(client_
                    ->Apply(world,
                            {CreateOp{1, kNoEntity, At(0)},
                             CreateOp{3, kNoEntity, At(0)}},
                            {.stamp = kT0})
                    .ok());
    ASSERT_TRUE(
        client_
            ->Apply(world, {SetLocalOp{1, At(10)}}, {.stamp = kT0 + 100 * kMs})
            .ok());
    ASSERT_TRUE(
        client_
            ->Apply(world, {SetLocalOp{3, At(5)}}, {.stamp = kT0 + 500 * kMs})
            .ok());
  }
  absl::StatusOr<TimedPose> held =
      client_->LookupTransform("w", 0, 1, {.stamp = kT0 + 400 * kMs});
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_FLOAT_EQ(held->pose.translation().x, 10);
  absl::Status unknown =
      client_->LookupTransform("tf2", 0, 1, {.stamp = kT0 + 400 * kMs})
          .status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kDeadlineExceeded) << unknown;
  EXPECT_THAT(unknown.message(),
              HasSubstr(absl::StrCat("known until ", kT0 + 100 * kMs)));
  // Past the world's newest stamp, neither knows yet.
  EXPECT_EQ(client_->LookupTransform("w", 0, 1, {.stamp = kT0 + 600 * kMs})
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  absl::StatusOr<WorldInfo> info = client_->GetWorld("tf2");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->history.time_model, TimeModel::kTf2);
}

TEST_F(TimeTest, LateSampleFillsHistoryAndMovesNoLiveView) {
  MoveRoot(2);  // 1 at x=20 now (stamp 200 ms).
  // A sample from 150 ms arrives late.
  ASSERT_TRUE(client_
                  ->Apply("w", {SetLocalOp{1, At(100)}},
                          {.end_frame = true, .stamp = kT0 + 150 * kMs})
                  .ok());
  absl::StatusOr<std::vector<EntityState>> now = client_->Read("w", {1});
  ASSERT_TRUE(now.ok());
  EXPECT_FLOAT_EQ((*now)[0].world.translation().x, 20);
  EXPECT_FLOAT_EQ(XAt(kNoEntity, 1, kT0 + 150 * kMs), 100);
  EXPECT_FLOAT_EQ(XAt(kNoEntity, 1, kT0 + 125 * kMs), 55);
}

TEST_F(TimeTest, FramesCarryTheirStamp) {
  auto channel = grpc::CreateChannel(server_.address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Xform::NewStub(channel);
  grpc::ClientContext context;
  v1::SubscribeRequest request;
  request.set_world("w");
  auto reader = stub->Subscribe(&context, request);
  v1::FrameUpdate update;
  ASSERT_TRUE(reader->Read(&update));  // The (empty) snapshot.
  MoveRoot(1);
  Stamp last = 0;
  while (last < kT0 + 100 * kMs && reader->Read(&update)) {
    last = update.stamp_nanos();
  }
  EXPECT_EQ(last, kT0 + 100 * kMs);
  context.TryCancel();
}

TEST_F(TimeTest, AMirrorInterpolatesBetweenTheFramesItReceived) {
  MirrorOptions options;
  options.world = "w";
  options.interpolation = InterpolationOptions{};
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(*client_, options);
  ASSERT_TRUE(mirror.ok()) << mirror.status();
  ASSERT_TRUE((*mirror)->WaitForSync(absl::Seconds(10)));
  // Each a frame of its own (driven, end_frame), each taken in before the
  // next: a mirror that fell behind would be sent them folded, as one.
  ASSERT_TRUE(
      client_
          ->Apply("w", {CreateOp{1, kNoEntity, At(0)}, CreateOp{2, 1, At(1)}},
                  {.end_frame = true, .stamp = kT0})
          .ok());
  ASSERT_TRUE((*mirror)->WaitForFrame(1, absl::Seconds(10)));
  for (int k = 1; k <= 3; ++k) {
    absl::StatusOr<uint64_t> frame =
        client_->Apply("w", {SetLocalOp{1, At(10.0f * k)}},
                       {.end_frame = true, .stamp = kT0 + 100 * kMs * k});
    ASSERT_TRUE(frame.ok()) << frame.status();
    ASSERT_TRUE((*mirror)->WaitForFrame(*frame, absl::Seconds(10)));
  }
  absl::StatusOr<Matrix3x4> between =
      (*mirror)->WorldMatrixAt(2, kT0 + 250 * kMs);
  ASSERT_TRUE(between.ok()) << between.status();
  EXPECT_FLOAT_EQ(between->translation().x, 26);  // 25 + 1.
  absl::StatusOr<TimedPose> relative =
      (*mirror)->LookupTransform(1, 2, kT0 + 250 * kMs);
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_NEAR(relative->pose.translation().x, 1, 1e-5);
  EXPECT_TRUE((*mirror)->RenderStamp().ok());
}

TEST_F(TimeTest, StampFarAheadIsRefusedAndChangesNothing) {
  MoveRoot(1);
  absl::Status ahead = client_
                           ->Apply("w", {SetLocalOp{1, At(5)}},
                                   {.stamp = kT0 + 3600 * 1'000 * kMs})
                           .status();
  EXPECT_EQ(ahead.code(), absl::StatusCode::kOutOfRange) << ahead;
  EXPECT_THAT(ahead.message(), HasSubstr("--max_stamp_ahead_seconds"));
  EXPECT_FLOAT_EQ(client_->Read("w", {1})->front().world.translation().x, 10);
}

TEST_F(TimeTest, WaitingLookupsPastTheLimitAreRefusedAtOnce) {
  server_.Stop();
  Limits limits;
  limits.max_waiting_lookups = 2;
  Start(limits);
  MoveRoot(1);
  std::vector<std::future<absl::StatusOr<TimedPose>>> waiting;
  for (int i = 0; i < 2; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] {
      return client_->LookupTransform(
          "w", 0, 2, {.stamp = kT0 + 150 * kMs, .timeout = absl::Seconds(20)});
    }));
  }
  // The third is refused, not queued; the two are answered by the batch.
  ASSERT_TRUE(WaitUntil([&] { return Waiting() == 2; }, absl::Seconds(10),
                        "two lookups wait at the server"));
  const absl::Status third =
      client_
          ->LookupTransform(
              "w", 0, 2,
              {.stamp = kT0 + 150 * kMs, .timeout = absl::Seconds(20)})
          .status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << third;
  EXPECT_THAT(third.message(), HasSubstr("--max_waiting_lookups"));
  ASSERT_TRUE(
      client_->Apply("w", {SetLocalOp{1, At(30)}}, {.stamp = kT0 + 200 * kMs})
          .ok());
  for (auto& lookup : waiting) EXPECT_TRUE(lookup.get().ok());
}

TEST_F(TimeTest, BadInputIsRefusedAndChangesNothing) {
  MoveRoot(1);
  // A negative stamp.
  EXPECT_EQ(client_->Apply("w", {SetLocalOp{1, At(5)}}, {.stamp = -1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // The server's own field, from a client.
  auto channel = grpc::CreateChannel(server_.address(),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Xform::NewStub(channel);
  v1::ApplyRequest apply;
  apply.set_world("w");
  v1::SetLocalCommand& late = *apply.add_history_only()->mutable_set_local();
  late.add_entity(1);
  for (float f : {5.f, 0.f, 0.f, 0.f, 0.f, 0.f, 1.f, 1.f, 1.f, 1.f}) {
    late.add_local(f);
  }
  v1::ApplyResponse applied;
  grpc::ClientContext context;
  EXPECT_EQ(stub->Apply(&context, apply, &applied).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // No source; too many.
  EXPECT_EQ(client_->LookupTransforms("w", 0, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<EntityId> many(Limits{}.max_lookup_sources + 1, 2);
  EXPECT_EQ(client_->LookupTransforms("w", 0, many).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FLOAT_EQ(client_->Read("w", {1})->front().world.translation().x, 10);
}

TEST_F(TimeTest, ALookupUpAChainPastTheLimitIsRefused) {
  server_.Stop();
  Limits limits;
  limits.history.max_links = 100;
  Start(limits);
  std::vector<Command> chain;
  for (EntityId e = 1; e <= 150; ++e) {
    chain.push_back(CreateOp{e, e - 1, At(1)});
  }
  ASSERT_TRUE(client_->Apply("w", chain, {.stamp = kT0}).ok());
  absl::StatusOr<TimedPose> shallow =
      client_->LookupTransform("w", 0, 90, {.stamp = kT0});
  ASSERT_TRUE(shallow.ok()) << shallow.status();
  EXPECT_FLOAT_EQ(shallow->pose.translation().x, 90);
  absl::Status deep =
      client_->LookupTransform("w", 0, 150, {.stamp = kT0}).status();
  EXPECT_EQ(deep.code(), absl::StatusCode::kResourceExhausted) << deep;
  EXPECT_THAT(deep.message(), HasSubstr("longer than 100 links"));
}

TEST_F(TimeTest, WorldWithoutHistoryRefusesLookups) {
  server_.Stop();
  Limits limits;
  limits.history.window_nanos = 0;
  Start(limits);
  MoveRoot(1);
  EXPECT_EQ(client_->LookupTransform("w", 0, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<WorldInfo> info = client_->GetWorld("w");
  ASSERT_TRUE(info.ok());
}

}  // namespace
}  // namespace xform
