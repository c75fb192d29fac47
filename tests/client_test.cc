// Copyright 2026 The xform Authors.
//
// libxform_client against a real xformd service on loopback: typed calls and
// their statuses, the streaming writer, and Mirror (both drivers, filters,
// change lists, and resynchronisation after the server goes away and comes
// back on the same port).

#include "xform/client.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "gtest/gtest.h"
#include "tests/loopback_server.h"
#include "tests/wait_until.h"
#include "xform/mirror.h"
#include "xform/v1/wire.h"
#include "xform/world.h"

namespace xform {
namespace {

using server::HostedWorld;
using server::Limits;
using server::LoopbackServer;
using server::WorldHost;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr absl::Duration kWait = absl::Seconds(10);

Transform At(float x, float y = 0, float z = 0) {
  Transform t;
  t.position = {x, y, z};
  return t;
}

class ClientTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.Start(Limits{}));
    client_ = Connect();
  }

  std::unique_ptr<Client> Connect(std::string client_id = "") {
    ClientOptions options;
    options.address = server_.address();
    options.client_id = std::move(client_id);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // A driven world "w": root 1 with children 2 and 3, and 4 under 3.
  void MakeWorld() {
    ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
    const std::vector<Command> batch = {
        CreateOp{1, kNoEntity, At(1)}, CreateOp{2, 1, At(0, 1)},
        CreateOp{3, 1, At(0, 0, 1)}, CreateOp{4, 3, At(5)}};
    ASSERT_TRUE(client_->Apply("w", batch, {.end_frame = true}).ok());
  }

  std::unique_ptr<Mirror> StartMirror(MirrorOptions options) {
    absl::StatusOr<std::unique_ptr<Mirror>> mirror =
        Mirror::Start(*client_, std::move(options));
    EXPECT_TRUE(mirror.ok()) << mirror.status();
    return mirror.ok() ? *std::move(mirror) : nullptr;
  }

  // The mirror holds exactly what Read says the server holds, bitwise.
  void ExpectMirrorsServer(const Mirror& mirror) {
    std::vector<EntityId> ids;
    std::vector<Matrix3x4> worlds;
    mirror.CopyAll(&ids, &worlds);
    // In reads of 1,000, under any message limit a test sets.
    for (size_t first = 0; first < ids.size(); first += 1000) {
      const size_t n = std::min<size_t>(1000, ids.size() - first);
      absl::StatusOr<std::vector<EntityState>> read =
          client_->Read("w", absl::MakeConstSpan(&ids[first], n));
      ASSERT_TRUE(read.ok()) << read.status();
      ASSERT_EQ(read->size(), n);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ((*read)[i].world, worlds[first + i])
            << "entity " << ids[first + i];
        EXPECT_EQ(*mirror.Parent(ids[first + i]), (*read)[i].parent);
      }
    }
  }

  LoopbackServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ClientTest, WorldsAreCreatedListedAndDeleted) {
  absl::StatusOr<WorldInfo> made =
      client_->CreateWorld("a", {.mode = FrameMode::kTick, .tick_hz = 30});
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(made->name, "a");
  EXPECT_EQ(made->mode, FrameMode::kTick);
  EXPECT_EQ(made->tick_hz, 30);
  ASSERT_TRUE(client_->CreateWorld("b", {}).ok());

  absl::StatusOr<std::vector<WorldInfo>> worlds = client_->ListWorlds();
  ASSERT_TRUE(worlds.ok());
  std::vector<std::string> names;
  for (const WorldInfo& w : *worlds) names.push_back(w.name);
  EXPECT_THAT(names, UnorderedElementsAre("a", "b"));

  ASSERT_TRUE(client_->DeleteWorld("a").ok());
  EXPECT_EQ(client_->GetWorld("a").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(client_->GetWorld("b").ok());
}

TEST_F(ClientTest, ServerStatusesComeBackWithTheirCodeAndText) {
  ASSERT_TRUE(client_->CreateWorld("a", {}).ok());
  absl::Status again = client_->CreateWorld("a", {}).status();
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("'a'"));
  EXPECT_EQ(client_->CreateWorld("bad name!", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client_->DeleteWorld("nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Apply("nope", {CreateOp{1}}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, AppliedBatchesReadBackAsTheCoreComputesThem) {
  MakeWorld();
  Transform turned = At(2, 3, 4);
  turned.rotation = glm::angleAxis(0.5f, glm::vec3(0, 0, 1));
  turned.scale = {2, 1, 0.5f};
  const std::vector<Command> moves = {SetLocalOp{1, turned},
                                      SetLocalOp{4, At(7, 1)},
                                      LinkOp{2, 3, LinkMode::kKeepWorld}};
  ASSERT_TRUE(client_->Apply("w", moves).ok());

  // The same batches on a local World: the client speaks the core's types.
  World local;
  ASSERT_TRUE(
      local
          .Apply({CreateOp{1, kNoEntity, At(1)}, CreateOp{2, 1, At(0, 1)},
                  CreateOp{3, 1, At(0, 0, 1)}, CreateOp{4, 3, At(5)}})
          .ok());
  ASSERT_TRUE(local.Apply(moves).ok());

  absl::StatusOr<std::vector<EntityState>> read = client_->ReadSubtree("w", 1);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);
  EXPECT_EQ((*read)[0].entity, 1u);  // Parents first.
  for (const EntityState& e : *read) {
    EXPECT_EQ(e.world, *local.WorldMatrix(e.entity)) << e.entity;
    EXPECT_EQ(e.parent, *local.Parent(e.entity)) << e.entity;
    EXPECT_EQ(e.local, *local.Local(e.entity)) << e.entity;
  }
}

TEST_F(ClientTest, RefusedBatchesChangeNothing) {
  MakeWorld();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    std::vector<Command> batch;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {{SetLocalOp{1, At(9)}, SetLocalOp{2, At(nan)}},
       absl::StatusCode::kInvalidArgument},
      {{SetLocalOp{1, At(9)}, LinkOp{1, 4}},
       absl::StatusCode::kFailedPrecondition},  // A cycle.
      {{SetLocalOp{1, At(9)}, SetLocalOp{99, At(1)}},
       absl::StatusCode::kNotFound},
      {{CreateOp{5}, CreateOp{5}}, absl::StatusCode::kAlreadyExists},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(client_->Apply("w", c.batch).status().code(), c.code);
  }
  absl::StatusOr<std::vector<EntityState>> read = client_->Read("w", {1});
  ASSERT_TRUE(read.ok());
  EXPECT_EQ((*read)[0].local, At(1));
  EXPECT_EQ(client_->GetWorld("w")->entities, 4u);
  EXPECT_EQ(client_->Read("w", {1, 42}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClientTest, TheStreamingWriterAnswersEachBatchAndStopsAtTheFirstError) {
  MakeWorld();
  absl::StatusOr<std::unique_ptr<BatchWriter>> writer =
      client_->OpenWriter("w");
  ASSERT_TRUE(writer.ok());
  uint64_t last = 0;
  for (int step = 1; step <= 20; ++step) {
    absl::StatusOr<uint64_t> frame =
        (*writer)->Write({SetLocalOp{2, At(step)}, SetLocalOp{4, At(-step)}},
                         {.end_frame = true});
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_GT(*frame, last);
    last = *frame;
  }
  absl::StatusOr<uint64_t> bad = (*writer)->Write({SetLocalOp{77, At(1)}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*writer)->Write({SetLocalOp{2, At(1)}}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*client_->Read("w", {2}))[0].local, At(20));
}

TEST_F(ClientTest, ConnectingToNothingIsUnavailable) {
  ClientOptions options;
  options.address = "127.0.0.1:1";
  options.connect_timeout = absl::Milliseconds(300);
  EXPECT_EQ(Client::Connect(options).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(ClientTest, MirrorOptionsAreChecked) {
  EXPECT_EQ(Mirror::Start(*client_, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  MirrorOptions no_echo{.world = "w", .no_echo = true};
  EXPECT_EQ(Mirror::Start(*client_, no_echo).status().code(),
            absl::StatusCode::kInvalidArgument);
  MirrorOptions no_queue{.world = "w", .max_queued = 0};
  EXPECT_EQ(Mirror::Start(*client_, no_queue).status().code(),
            absl::StatusCode::kInvalidArgument);
  MirrorOptions no_room{.world = "w", .max_entities = 0};
  EXPECT_EQ(Mirror::Start(*client_, no_room).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// max_entities bounds what a mirror holds, whatever its server sends: a
// world bigger than that is refused (and retried) with a status that says
// why, and a frame that would take the copy past it leaves the copy as the
// frame before left it.
TEST_F(ClientTest, AMirrorHoldsNoMoreThanItsMaxEntities) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror =
      StartMirror({.world = "w",
                   .max_entities = 3,
                   .reconnect_min = absl::Milliseconds(20),
                   .reconnect_max = absl::Milliseconds(100)});
  auto wait_for_refusal = [&] {
    EXPECT_TRUE(WaitUntil(
        [&] {
          return mirror->status().code() ==
                 absl::StatusCode::kResourceExhausted;
        },
        kWait,
        "mirror->status().code() == absl::StatusCode::kResourceExhausted"));
    EXPECT_EQ(mirror->status().code(), absl::StatusCode::kResourceExhausted)
        << mirror->status();
    EXPECT_NE(mirror->status().message().find("max_entities"),
              absl::string_view::npos)
        << mirror->status();
  };
  wait_for_refusal();
  EXPECT_FALSE(mirror->synced());
  EXPECT_EQ(mirror->size(), 0u);

  // Down to 3: the retried stream syncs.
  ASSERT_TRUE(client_->Apply("w", {DestroyOp{4}}, {.end_frame = true}).ok());
  ASSERT_TRUE(mirror->WaitForSync(kWait)) << mirror->status();
  EXPECT_EQ(mirror->size(), 3u);
  const uint64_t frame = mirror->frame();
  const Matrix3x4 before = *mirror->WorldMatrix(2);

  // A fourth, and a move in the same frame: neither reaches the copy.
  ASSERT_TRUE(client_
                  ->Apply("w", {CreateOp{6, 1, At(2)}, SetLocalOp{2, At(7)}},
                          {.end_frame = true})
                  .ok());
  wait_for_refusal();
  EXPECT_EQ(mirror->size(), 3u);
  EXPECT_FALSE(mirror->Has(6));
  EXPECT_EQ(mirror->frame(), frame);
  EXPECT_EQ(*mirror->WorldMatrix(2), before);
}

TEST_F(ClientTest, ABackgroundMirrorFollowsEveryKindOfChange) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror = StartMirror({.world = "w"});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  EXPECT_EQ(mirror->size(), 4u);
  MirrorChanges first = mirror->TakeChanges();
  EXPECT_THAT(first.created, UnorderedElementsAre(1, 2, 3, 4));
  EXPECT_FALSE(first.resynced);
  ExpectMirrorsServer(*mirror);

  absl::StatusOr<uint64_t> frame =
      client_->Apply("w",
                     {SetLocalOp{3, At(0, 0, 9)}, CreateOp{5, 2, At(1)},
                      DestroyOp{4}, LinkOp{5, 3}},
                     {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(mirror->WaitForFrame(*frame, kWait));
  MirrorChanges changes = mirror->TakeChanges();
  EXPECT_EQ(changes.frame, *frame);
  EXPECT_THAT(changes.created, UnorderedElementsAre(5));
  EXPECT_THAT(changes.destroyed, UnorderedElementsAre(4));
  EXPECT_THAT(changes.moved, UnorderedElementsAre(3, 5));
  EXPECT_TRUE(
      changes.reparented.empty());  // 5 is new: its parent came with it.
  EXPECT_EQ(*mirror->Parent(5), 3u);
  EXPECT_FALSE(mirror->Has(4));
  EXPECT_EQ(mirror->WorldMatrix(4).status().code(),
            absl::StatusCode::kNotFound);
  ExpectMirrorsServer(*mirror);
  EXPECT_TRUE(mirror->TakeChanges().empty());
}

// TakeChangedState: the same net changes as TakeChanges, each with the
// parent and world matrix the copy holds, all from one frame.
TEST_F(ClientTest, TakeChangedStateGivesEachChangeWithItsValues) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror = StartMirror({.world = "w"});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  const auto expect_values = [&](const MirrorChangedState& state) {
    ASSERT_EQ(state.parents.size(), state.entities.size());
    ASSERT_EQ(state.worlds.size(), state.entities.size());
    absl::StatusOr<std::vector<EntityState>> read =
        client_->Read("w", state.entities);
    ASSERT_TRUE(read.ok()) << read.status();
    for (size_t i = 0; i < state.entities.size(); ++i) {
      EXPECT_EQ(state.parents[i], (*read)[i].parent) << state.entities[i];
      EXPECT_EQ(state.worlds[i], (*read)[i].world) << state.entities[i];
    }
  };
  MirrorChangedState first = mirror->TakeChangedState();
  EXPECT_THAT(first.entities, UnorderedElementsAre(1, 2, 3, 4));
  EXPECT_TRUE(first.destroyed.empty());
  expect_values(first);

  // 1 moves (and with it 2, 3, 4), 4 goes, 6 comes and goes unseen.
  absl::StatusOr<uint64_t> frame = client_->Apply(
      "w",
      {SetLocalOp{1, At(7)}, DestroyOp{4}, CreateOp{6, 1, At(2)}, DestroyOp{6}},
      {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(mirror->WaitForFrame(*frame, kWait));
  MirrorChangedState moved = mirror->TakeChangedState();
  EXPECT_EQ(moved.frame, *frame);
  EXPECT_THAT(moved.entities, UnorderedElementsAre(1, 2, 3));
  EXPECT_THAT(moved.destroyed, UnorderedElementsAre(4));
  expect_values(moved);
  EXPECT_TRUE(mirror->TakeChangedState().empty());
  EXPECT_TRUE(mirror->TakeChanges().empty());  // One drain for both.
}

// TakeWholeState: every entity in the copy with its values, the destroyed
// since the last take beside them; the takes after it are changes again.
TEST_F(ClientTest, TakeWholeStateListsTheCopyAndWhatWasDestroyed) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror = StartMirror({.world = "w"});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  EXPECT_THAT(mirror->TakeChangedState().entities,
              UnorderedElementsAre(1, 2, 3, 4));
  absl::StatusOr<uint64_t> frame = client_->Apply(
      "w", {SetLocalOp{3, At(5)}, DestroyOp{4}}, {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(mirror->WaitForFrame(*frame, kWait));
  MirrorChangedState whole =
      mirror->TakeWholeState(/*with_parent_worlds=*/true);
  EXPECT_THAT(whole.entities, UnorderedElementsAre(1, 2, 3));
  EXPECT_THAT(whole.destroyed, UnorderedElementsAre(4));
  ASSERT_EQ(whole.parent_worlds.size(), whole.entities.size());
  absl::StatusOr<std::vector<EntityState>> read =
      client_->Read("w", whole.entities);
  ASSERT_TRUE(read.ok()) << read.status();
  for (size_t i = 0; i < whole.entities.size(); ++i) {
    EXPECT_EQ(whole.worlds[i], (*read)[i].world) << whole.entities[i];
  }
  EXPECT_TRUE(mirror->TakeChangedState().empty());
  EXPECT_THAT(mirror->TakeWholeState().entities, UnorderedElementsAre(1, 2, 3));
}

// A Mirror joining a big world while a writer churns it gets a snapshot
// streamed in parts, with later parts destroying, re-parenting and moving
// what earlier ones created, and ends holding exactly what the server holds.
TEST_F(ClientTest, AMirrorJoiningAChurningWorldEndsExact) {
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  constexpr EntityId kRoots = 1000, kPerRoot = 100;  // 100k entities.
  std::vector<Command> build;
  for (EntityId e = 1; e <= kRoots * kPerRoot; ++e) {
    build.push_back(
        CreateOp{e, e % kPerRoot == 1 ? kNoEntity : e - (e - 1) % kPerRoot,
                 At(static_cast<float>(e % 7))});
  }
  ASSERT_TRUE(client_->Apply("w", build, {.end_frame = true}).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> last_frame{0};
  std::thread writer([&] {
    std::unique_ptr<Client> client = Connect();
    std::mt19937 rng(7);
    EntityId next = kRoots * kPerRoot + 1;
    const auto any = [&] { return 1 + rng() % (next - 1); };
    while (!stop) {
      // Each command on its own: one naming a destroyed entity is refused
      // alone.
      for (const Command& command :
           {Command{SetLocalOp{any(), At(static_cast<float>(rng() % 50))}},
            Command{CreateOp{next++, any(), At(1)}},
            Command{DestroyOp{any(), rng() % 2
                                         ? DestroyMode::kSubtree
                                         : DestroyMode::kReparentChildren}},
            Command{LinkOp{any(), any()}}}) {
        absl::StatusOr<uint64_t> frame =
            client->Apply("w", {command}, {.end_frame = true});
        if (frame.ok()) last_frame = *frame;
      }
    }
  });
  int parts = 0;
  bool changed_mid_snapshot = false;
  std::unique_ptr<Mirror> mirror =
      StartMirror({.world = "w", .on_update = [&](const MirrorUpdate& u) {
                     if (!u.snapshot) return;
                     ++parts;
                     changed_mid_snapshot |=
                         !u.destroyed.empty() || !u.reparented.empty();
                   }});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  stop = true;
  writer.join();
  ASSERT_TRUE(mirror->WaitForFrame(last_frame, kWait));
  absl::StatusOr<WorldInfo> info = client_->GetWorld("w");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(mirror->size(), info->entities);
  ExpectMirrorsServer(*mirror);
  EXPECT_GT(parts, 5);  // 100k entities at 1 MiB a part.
  RecordProperty("changed_mid_snapshot", changed_mid_snapshot);
}

// Within the compact encoding's bounds of the matrix Read gives: position
// to half the precision (and a float's rounding), each rotation-and-scale
// element to 2e-4 of the scale (0.01 degree is 1.75e-4 rad); bitwise where
// the matrix has shear, which goes raw.
void ExpectCompactMatch(const Matrix3x4& truth, const Matrix3x4& got,
                        float precision, EntityId e) {
  float scale = 0;
  for (int j = 0; j < 3; ++j) {
    scale = std::max(scale, glm::length(glm::vec3(truth.m[j], truth.m[4 + j],
                                                  truth.m[8 + j])));
  }
  for (int i = 0; i < 3; ++i) {
    const float t = truth.m[4 * i + 3];
    EXPECT_LE(std::abs(t - got.m[4 * i + 3]),
              precision / 2 + 1e-6f * std::abs(t) + 1e-6f)
        << "entity " << e;
    for (int j = 0; j < 3; ++j) {
      EXPECT_LE(std::abs(truth.m[4 * i + j] - got.m[4 * i + j]), 2e-4f * scale)
          << "entity " << e;
    }
  }
}

// Compact mirrors through a long run of small moves, structural changes,
// sheared matrices, skipped frames and resyncs: a mirror that keeps up, one
// whose caller falls behind (folded frames, sent whole), and one that
// stops reading until it is owed more than max_pending entities (then sent
// what changed, as a snapshot keeping its view). Each must end within the
// encoding's bounds of the server, with nothing drifted.
TEST_F(ClientTest, CompactMirrorsStayWithinBoundsThroughSkipsAndResyncs) {
  server_.Stop();
  ASSERT_TRUE(server_.Start(Limits{.max_pending = 2000}));
  client_ = Connect();
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  constexpr EntityId kEntities = 3000;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  // Roots scaled evenly, their children anyhow; every 10th root unevenly,
  // so its rotated children are sheared.
  std::vector<Transform> local(kEntities + 1);
  std::vector<Command> build;
  for (EntityId e = 1; e <= kEntities; ++e) {
    const bool root = e % 10 == 1;
    Transform t;
    t.position = {u(rng) * 100, u(rng) * 100, u(rng) * 100};
    t.rotation = glm::normalize(glm::quat(u(rng), u(rng), u(rng), u(rng)));
    const float s = 1 + 0.3f * u(rng);
    t.scale = !root || e % 100 == 1 ? glm::vec3(s, 1 + 0.3f * u(rng), s)
                                    : glm::vec3(s);
    local[e] = t;
    build.push_back(CreateOp{e, root ? kNoEntity : e - (e - 1) % 10, t});
  }
  ASSERT_TRUE(client_->Apply("w", build, {.end_frame = true}).ok());

  constexpr float kPrecision = 0.001f;
  const MirrorOptions compact = {.world = "w",
                                 .encoding = MirrorOptions::Encoding::kCompact,
                                 .position_precision = kPrecision};
  uint64_t skipped = 0;
  MirrorOptions keeping_up = compact;
  MirrorOptions behind = compact;
  behind.driver = MirrorOptions::Driver::kCaller;
  behind.max_queued = 1;
  // Rate-limited: never sent a frame's shared message, always its pending
  // changes folded (frames are published far faster than 20 a second).
  behind.max_rate_hz = 20;
  // What on_update listed last of each entity (on Update()'s thread: this).
  absl::flat_hash_map<EntityId, Matrix3x4> listed;
  behind.on_update = [&](const MirrorUpdate& m) {
    skipped += m.frames_skipped;
    for (size_t k = 0; k < m.moved.size(); ++k) {
      listed[m.moved[k]] = m.MovedWorld(k);
    }
  };
  MirrorOptions stopping = compact;
  stopping.driver = MirrorOptions::Driver::kCaller;
  stopping.max_queued = 1;
  int kept_view_parts = 0;
  stopping.on_update = [&](const MirrorUpdate& m) {
    kept_view_parts += m.snapshot && m.keeps_view;
  };
  // Rate-limited too, so that what it has not been sent piles up on the
  // server (past max_pending within a few of its 50 ms) whatever the
  // transport's window would have taken.
  stopping.max_rate_hz = 20;
  // The same, of a view (every root's subtree: all of it), which is
  // resent whole.
  MirrorOptions stopping_view = stopping;
  stopping_view.on_update = nullptr;
  for (EntityId root = 1; root <= kEntities; root += 10) {
    stopping_view.subtrees.push_back(root);
  }
  std::unique_ptr<Mirror> mirrors[] = {
      StartMirror(keeping_up), StartMirror(behind), StartMirror(stopping),
      StartMirror(stopping_view)};
  ASSERT_TRUE(mirrors[0]->WaitForSync(kWait));
  for (int k = 1; k < 4; ++k) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          mirrors[k]->Update();
          return mirrors[k]->synced();
        },
        kWait, "mirrors[k]->synced()"));
    ASSERT_TRUE(mirrors[k]->synced());
  }

  uint64_t last = 0;
  EntityId next = kEntities + 1;
  for (int frame = 0; frame < 600; ++frame) {
    std::vector<Command> batch;
    for (int k = 0; k < 150; ++k) {  // A frame's step each.
      const EntityId e = 1 + rng() % kEntities;
      local[e].position += glm::vec3(u(rng), u(rng), u(rng)) * 0.02f;
      local[e].rotation =
          glm::normalize(glm::angleAxis(0.03f * u(rng), glm::vec3(0, 1, 0)) *
                         local[e].rotation);
      batch.push_back(SetLocalOp{e, local[e]});
    }
    if (frame % 7 == 0) {  // Come and go, under a live root.
      batch.push_back(CreateOp{next++, 1 + 10 * (rng() % 300), At(u(rng))});
      if (next > kEntities + 5) batch.push_back(DestroyOp{next - 5});
    }
    if (frame % 11 == 0) {
      batch.push_back(LinkOp{2 + 10 * (rng() % 299), 1 + 10 * (rng() % 300)});
    }
    absl::StatusOr<uint64_t> applied =
        client_->Apply("w", batch, {.end_frame = true});
    ASSERT_TRUE(applied.ok()) << applied.status();
    last = *applied;
    if (frame % 9 == 0) mirrors[1]->Update();
    if (frame == 300) {
      // The stopped ones read again, long after max_pending was passed,
      // until caught up: their snapshots' parts come as the build pool
      // makes them, so an empty queue is not the end of one (and one left
      // half read while frames go on is owed past max_pending again, and
      // resent whole).
      EXPECT_TRUE(WaitUntil(
          [&] {
            while (mirrors[2]->Update() + mirrors[3]->Update() > 0) {
            }
            return mirrors[2]->frame() >= last && mirrors[3]->frame() >= last;
          },
          kWait, "the stopped mirrors caught up"));
    }
  }
  const absl::Time deadline = absl::Now() + kWait;
  for (auto& mirror : mirrors) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          mirror->Update();
          return mirror->frame() >= last;
        },
        deadline, "each mirror at the last frame"));
    ASSERT_EQ(mirror->frame(), last);
    std::vector<EntityId> ids;
    std::vector<Matrix3x4> worlds;
    mirror->CopyAll(&ids, &worlds);
    absl::StatusOr<std::vector<EntityState>> read = client_->Read("w", ids);
    ASSERT_TRUE(read.ok()) << read.status();
    absl::StatusOr<WorldInfo> info = client_->GetWorld("w");
    ASSERT_TRUE(info.ok());
    ASSERT_EQ(ids.size(), info->entities);
    for (size_t i = 0; i < ids.size(); ++i) {
      ExpectCompactMatch((*read)[i].world, worlds[i], kPrecision, ids[i]);
      EXPECT_EQ(*mirror->Parent(ids[i]), (*read)[i].parent);
    }
    EXPECT_TRUE(mirror->status().ok()) << mirror->status();
    if (mirror == mirrors[1]) {  // on_update listed each move as decoded.
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSERT_TRUE(listed.contains(ids[i])) << ids[i];
        EXPECT_EQ(listed[ids[i]], worlds[i]) << ids[i];
      }
    }
  }
  EXPECT_GT(skipped, 0u);  // The one behind was sent folded frames.
  // The stopped one was owed all 3,000 entities or so, and sent them as
  // a snapshot that kept its view: no resync.
  EXPECT_GE(kept_view_parts, 1);
  EXPECT_EQ(mirrors[2]->resyncs(), 0);
  EXPECT_GE(mirrors[3]->resyncs(), 1);  // The view was resent whole.
}

// Raw matrices are read where gRPC's buffers hold them: frames in many
// parts (held until their last) and the snapshot's parts come out exact,
// on_update lists every matrix, or none when told not to.
TEST_F(ClientTest, RawMatricesReadOffTheWireComeOutExact) {
  server_.Stop();
  // Parts of at most 128 KB: a frame of 20,000 moves comes in about nine.
  ASSERT_TRUE(server_.Start(Limits{.max_message_bytes = 256 << 10}));
  client_ = Connect();
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  constexpr EntityId kEntities = 20'000;
  // A frame's commands, in requests under the message limit.
  auto apply_frame = [&](auto command_of) -> uint64_t {
    uint64_t frame = 0;
    for (EntityId first = 1; first <= kEntities; first += 2000) {
      std::vector<Command> batch;
      for (EntityId e = first; e < first + 2000; ++e) {
        batch.push_back(command_of(e));
      }
      absl::StatusOr<uint64_t> applied =
          client_->Apply("w", batch, {.end_frame = first + 2000 > kEntities});
      EXPECT_TRUE(applied.ok()) << applied.status();
      frame = applied.value_or(0);
    }
    return frame;
  };
  apply_frame([](EntityId e) -> Command {
    return CreateOp{e, e % 100 == 1 ? kNoEntity : e - (e - 1) % 100,
                    At(static_cast<float>(e % 13))};
  });

  absl::Mutex mu;
  absl::flat_hash_map<EntityId, Matrix3x4> listed;  // Guarded by mu.
  int parts_not_last = 0;
  bool lists_agree = true;
  MirrorOptions with_matrices = {.world = "w"};
  with_matrices.on_update = [&](const MirrorUpdate& u) {
    absl::MutexLock lock(&mu);
    if (!u.last_part) ++parts_not_last;
    lists_agree &= u.moved_world.size() == 12 * u.moved.size();
    for (size_t k = 0; k < u.moved.size(); ++k) {
      listed[u.moved[k]] = u.MovedWorld(k);
    }
  };
  // Which entities were listed, not how often: how often depends on how the
  // frames came. The snapshot lists 20,000 and the frames 79,999 (one sets
  // entity 2601 to the local it was created with, which lists nothing); a
  // subscriber that falls behind gets frames folded (a CI run, with frames 3
  // and 4 folded into one message, saw 79,999 in all).
  absl::flat_hash_set<EntityId> ids_without;
  bool any_matrices_without = false;
  MirrorOptions without_matrices = {.world = "w"};
  without_matrices.on_update_matrices = false;
  without_matrices.on_update = [&](const MirrorUpdate& u) {
    absl::MutexLock lock(&mu);
    ids_without.insert(u.moved.begin(), u.moved.end());
    any_matrices_without |= !u.moved_world.empty();
  };
  std::unique_ptr<Mirror> mirrors[] = {StartMirror(with_matrices),
                                       StartMirror(without_matrices)};
  for (auto& mirror : mirrors) ASSERT_TRUE(mirror->WaitForSync(kWait));

  uint64_t last = 0;
  for (int frame = 1; frame <= 4; ++frame) {
    last = apply_frame([frame](EntityId e) -> Command {
      return SetLocalOp{
          e, At(static_cast<float>(frame), static_cast<float>(e % 17))};
    });
  }
  for (auto& mirror : mirrors) {
    ASSERT_TRUE(mirror->WaitForFrame(last, kWait));
    ExpectMirrorsServer(*mirror);
    EXPECT_TRUE(mirror->status().ok()) << mirror->status();
  }
  std::vector<EntityId> ids;
  std::vector<Matrix3x4> worlds;
  mirrors[0]->CopyAll(&ids, &worlds);
  mirrors[1].reset();  // Its callbacks end.
  mirrors[0].reset();
  absl::MutexLock lock(&mu);
  EXPECT_GT(parts_not_last, 4);
  EXPECT_TRUE(lists_agree);
  ASSERT_EQ(ids.size(), kEntities);
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(listed.contains(ids[i])) << ids[i];
    EXPECT_EQ(listed[ids[i]], worlds[i]) << ids[i];
  }
  EXPECT_EQ(ids_without.size(), kEntities);
  EXPECT_FALSE(any_matrices_without);
}

TEST_F(ClientTest, ACallerDrivenMirrorChangesOnlyInUpdate) {
  MakeWorld();
  int updates = 0;
  std::unique_ptr<Mirror> mirror =
      StartMirror({.world = "w",
                   .driver = MirrorOptions::Driver::kCaller,
                   .on_update = [&](const MirrorUpdate&) { ++updates; }});
  // What the server has sent, and finished writing to the stream.
  const auto server_sent = [&](uint64_t frame) {
    for (const SubscriberInfo& s :
         (*server_.host().Get("w"))->replicator().Subscribers()) {
      if (s.messages > 0 && !s.in_snapshot && s.last_frame_sent >= frame &&
          s.write_outstanding == absl::ZeroDuration()) {
        return true;
      }
    }
    return false;
  };
  // The snapshot waits for the caller, even once the server has sent it.
  ASSERT_TRUE(
      WaitUntil([&] { return server_sent(0); }, kWait, "the snapshot sent"));
  EXPECT_EQ(mirror->size(), 0u);
  EXPECT_EQ(updates, 0);
  ASSERT_GE(mirror->Update(), 1);
  ASSERT_TRUE(mirror->WaitForSync(absl::ZeroDuration()));
  EXPECT_EQ(mirror->size(), 4u);

  absl::StatusOr<uint64_t> frame =
      client_->Apply("w", {SetLocalOp{1, At(3)}}, {.end_frame = true});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(
      WaitUntil([&] { return server_sent(*frame); }, kWait, "the frame sent"));
  EXPECT_LT(mirror->frame(), *frame);
  EXPECT_TRUE(WaitUntil(
      [&] {
        mirror->Update();
        return mirror->frame() >= *frame;
      },
      kWait, "mirror->frame() >= *frame"));
  EXPECT_EQ(mirror->frame(), *frame);
  EXPECT_EQ(mirror->WorldMatrix(4)->translation(), glm::vec3(8, 0, 1));
  EXPECT_GE(updates, 2);
  ExpectMirrorsServer(*mirror);
}

// A renderer's push: on_frame once per whole frame, snapshot included, in
// order, with the copy already at that frame.
TEST_F(ClientTest, OnFrameIsCalledOncePerWholeFrame) {
  MakeWorld();
  absl::Mutex mu;
  std::vector<uint64_t> frames;
  std::unique_ptr<Mirror> mirror;
  MirrorOptions options = {.world = "w"};
  options.on_frame = [&](uint64_t frame) {
    absl::MutexLock lock(&mu);
    frames.push_back(frame);
  };
  mirror = StartMirror(options);
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  uint64_t last = 0;
  for (int k = 0; k < 3; ++k) {
    absl::StatusOr<uint64_t> frame = client_->Apply(
        "w", {SetLocalOp{2, At(static_cast<float>(k))}}, {.end_frame = true});
    ASSERT_TRUE(frame.ok());
    last = *frame;
    ASSERT_TRUE(mirror->WaitForFrame(last, kWait));
  }
  const absl::Time deadline = absl::Now() + kWait;
  absl::MutexLock lock(&mu);
  auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !frames.empty() && frames.back() == last;
  };
  ASSERT_TRUE(mu.AwaitWithDeadline(absl::Condition(&all), deadline));
  ASSERT_EQ(frames.size(), 4u);  // The snapshot, then each frame.
  for (size_t k = 1; k < frames.size(); ++k)
    EXPECT_LT(frames[k - 1], frames[k]);
}

TEST_F(ClientTest, AFilteredMirrorHoldsOnlyItsSubtree) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror = StartMirror({.world = "w", .subtrees = {3}});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  std::vector<EntityId> ids;
  std::vector<Matrix3x4> worlds;
  mirror->CopyAll(&ids, &worlds);
  EXPECT_THAT(ids, UnorderedElementsAre(3, 4));
  mirror->TakeChanges();

  // 2 joins the subtree, and so joins the mirror.
  absl::StatusOr<uint64_t> frame =
      client_->Apply("w", {LinkOp{2, 4}}, {.end_frame = true});
  ASSERT_TRUE(mirror->WaitForFrame(*frame, kWait));
  EXPECT_THAT(mirror->TakeChanges().created, UnorderedElementsAre(2));
  EXPECT_EQ(*mirror->Parent(2), 4u);
  ExpectMirrorsServer(*mirror);
}

TEST_F(ClientTest, AMirrorResynchronisesAfterTheServerComesBack) {
  MakeWorld();
  std::unique_ptr<Mirror> mirror =
      StartMirror({.world = "w",
                   .reconnect_min = absl::Milliseconds(20),
                   .reconnect_max = absl::Milliseconds(200)});
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  mirror->TakeChanges();

  // The server goes away; the mirror keeps its last copy and says why.
  const int port = server_.port();
  server_.Stop();
  EXPECT_TRUE(
      WaitUntil([&] { return !mirror->synced(); }, kWait, "!mirror->synced()"));
  EXPECT_FALSE(mirror->synced());
  EXPECT_EQ(mirror->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(mirror->size(), 4u);

  // A new server on the same port, with a world that differs: 2 moved, 4
  // gone, 6 new, 3 now under 2. It is there whole before the port opens (a
  // mirror that came back between a CreateWorld and an Apply would see an
  // empty world first). The same client (and the mirror through it)
  // reconnects by itself.
  ASSERT_TRUE(server_.Start(Limits{}, {}, port, [](WorldHost& host) {
    v1::CreateWorldRequest create;
    create.set_name("w");
    create.set_mode(v1::FRAME_MODE_DRIVEN);
    absl::StatusOr<std::shared_ptr<HostedWorld>> world = host.Create(create);
    ASSERT_TRUE(world.ok());
    v1::ApplyRequest apply;
    apply.set_world("w");
    apply.set_end_frame(true);
    v1::AppendCommands({CreateOp{1, kNoEntity, At(1)}, CreateOp{2, 1, At(0, 2)},
                        CreateOp{3, 2, At(0, 0, 1)}, CreateOp{6, 1, At(6)}},
                       &apply);
    ASSERT_TRUE((*world)->Apply(apply, host.limits()).ok());
    (*world)->Publish();
  }));
  ASSERT_TRUE(mirror->WaitForSync(kWait)) << mirror->status();
  EXPECT_EQ(mirror->resyncs(), 1);
  MirrorChanges changes = mirror->TakeChanges();
  EXPECT_TRUE(changes.resynced);
  EXPECT_THAT(changes.created, UnorderedElementsAre(6));
  EXPECT_THAT(changes.destroyed, UnorderedElementsAre(4));
  EXPECT_THAT(changes.reparented, UnorderedElementsAre(3));
  EXPECT_THAT(changes.moved, UnorderedElementsAreArray({2, 3, 6}));
  EXPECT_TRUE(mirror->status().ok());
  ExpectMirrorsServer(*mirror);
}

TEST_F(ClientTest, AMirrorOfAWorldNotYetMadeSyncsOnceItIs) {
  std::unique_ptr<Mirror> mirror =
      StartMirror({.world = "w",
                   .reconnect_min = absl::Milliseconds(20),
                   .reconnect_max = absl::Milliseconds(100)});
  EXPECT_TRUE(WaitUntil(
      [&] { return mirror->status().code() == absl::StatusCode::kNotFound; },
      kWait, "mirror->status().code() == absl::StatusCode::kNotFound"));
  EXPECT_EQ(mirror->status().code(), absl::StatusCode::kNotFound);
  MakeWorld();
  ASSERT_TRUE(mirror->WaitForSync(kWait));
  EXPECT_EQ(mirror->size(), 4u);
  EXPECT_EQ(mirror->resyncs(), 0);
}

TEST_F(ClientTest, NoEchoLeavesOutWhatThisClientSets) {
  MakeWorld();
  std::unique_ptr<Client> physics = Connect("physics");
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(*physics, {.world = "w", .no_echo = true});
  ASSERT_TRUE(mirror.ok());
  ASSERT_TRUE((*mirror)->WaitForSync(kWait));
  (*mirror)->TakeChanges();
  ASSERT_TRUE(physics->Apply("w", {SetLocalOp{2, At(4)}}).ok());
  absl::StatusOr<uint64_t> frame =
      client_->Apply("w", {SetLocalOp{4, At(8)}}, {.end_frame = true});
  ASSERT_TRUE((*mirror)->WaitForFrame(*frame, kWait));
  EXPECT_THAT((*mirror)->TakeChanges().moved, UnorderedElementsAre(4));
}

// A compact Mirror that leaves out its client's echoes holds, frame by
// frame, what a raw one with the same filter holds (within the encoding's
// bounds): the server shares frames with it only where what it holds is
// what the deltas are coded against.
TEST_F(ClientTest, CompactNoEchoMirrorHoldsWhatARawOneDoes) {
  ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  constexpr EntityId kEntities = 400;
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Command> build;
  for (EntityId e = 1; e <= kEntities; ++e) {
    build.push_back(CreateOp{e, e > 200 ? e - 200 : kNoEntity, At(u(rng))});
  }
  ASSERT_TRUE(client_->Apply("w", build, {.end_frame = true}).ok());
  std::unique_ptr<Client> editor = Connect("editor");
  constexpr float kPrecision = 0.001f;
  absl::StatusOr<std::unique_ptr<Mirror>> raw =
      Mirror::Start(*editor, {.world = "w", .no_echo = true});
  absl::StatusOr<std::unique_ptr<Mirror>> compact =
      Mirror::Start(*editor, {.world = "w",
                              .no_echo = true,
                              .encoding = MirrorOptions::Encoding::kCompact,
                              .position_precision = kPrecision});
  ASSERT_TRUE(raw.ok() && compact.ok());
  ASSERT_TRUE((*raw)->WaitForSync(kWait) && (*compact)->WaitForSync(kWait));
  const auto batch = [&](int n) {
    std::vector<Command> moves;
    for (int k = 0; k < n; ++k) {
      moves.push_back(SetLocalOp{1 + rng() % kEntities, At(u(rng) * 100)});
    }
    return moves;
  };
  for (int frame = 0; frame < 200; ++frame) {
    // The editor writes in one frame in four; the other writer in every
    // one, and closes it.
    if (frame % 4 == 0) {
      ASSERT_TRUE(editor->Apply("w", batch(3)).ok());
    }
    absl::StatusOr<uint64_t> closed =
        client_->Apply("w", batch(8), {.end_frame = true});
    ASSERT_TRUE(closed.ok()) << closed.status();
    ASSERT_TRUE((*raw)->WaitForFrame(*closed, kWait));
    ASSERT_TRUE((*compact)->WaitForFrame(*closed, kWait));
    for (EntityId e = 1; e <= kEntities; ++e) {
      ExpectCompactMatch(*(*raw)->WorldMatrix(e), *(*compact)->WorldMatrix(e),
                         kPrecision, e);
    }
    ASSERT_FALSE(HasFailure()) << "frame " << frame;
  }
  EXPECT_EQ((*compact)->resyncs(), 0);
  EXPECT_TRUE((*compact)->status().ok()) << (*compact)->status();
}

// A peer that answers every Subscribe with one message whose bytes are no
// FrameUpdate (an unterminated varint), then holds the stream open: what a
// Mirror must survive from a server it does not control.
class GarbageSubscribePeer final : public grpc::CallbackGenericService {
 public:
  std::atomic<int> calls{0};

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* /*context*/) override {
    ++calls;
    return new Reactor;
  }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor() {
      grpc::Slice slice(std::string(16, '\xff'));
      garbage_ = grpc::ByteBuffer(&slice, 1);
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      if (ok) StartWrite(&garbage_);
    }
    void OnCancel() override { Finish(grpc::Status::CANCELLED); }
    void OnDone() override { delete this; }

   private:
    grpc::ByteBuffer request_;
    grpc::ByteBuffer garbage_;
  };
};

// The Mirror parses what its stream brings itself (not gRPC): bytes that do
// not parse drop the stream with DATA_LOSS, and it subscribes again.
TEST(MirrorPeerTest, BytesThatDoNotParseDropTheStreamWithDataLoss) {
  GarbageSubscribePeer peer;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterCallbackGenericService(&peer);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.address = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<std::unique_ptr<Mirror>> mirror =
      Mirror::Start(**client, {.world = "w",
                               .reconnect_min = absl::Milliseconds(20),
                               .reconnect_max = absl::Milliseconds(100)});
  ASSERT_TRUE(mirror.ok()) << mirror.status();

  EXPECT_TRUE(WaitUntil(
      [&] {
        return (*mirror)->status().code() == absl::StatusCode::kDataLoss &&
               peer.calls >= 3;
      },
      kWait, "DATA_LOSS after three calls"));
  EXPECT_EQ((*mirror)->status().code(), absl::StatusCode::kDataLoss)
      << (*mirror)->status();
  EXPECT_THAT((*mirror)->status().message(), HasSubstr("does not parse"));
  EXPECT_GE(peer.calls, 3);
  EXPECT_FALSE((*mirror)->synced());
  EXPECT_EQ((*mirror)->size(), 0u);
  mirror->reset();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

// A node that redirects every write to `owner`, and lists `listed` as its
// cluster's nodes; and counts what reached it, and with which token.
class RedirectingPeer final : public v1::Xform::CallbackService {
 public:
  std::string owner;
  std::vector<std::string> listed;
  std::atomic<int> applies{0};
  absl::Mutex mu;
  std::vector<std::string> tokens ABSL_GUARDED_BY(mu);

  grpc::ServerUnaryReactor* Apply(grpc::CallbackServerContext* context,
                                  const v1::ApplyRequest*,
                                  v1::ApplyResponse* response) override {
    ++applies;
    {
      absl::MutexLock lock(&mu);
      const auto& metadata = context->client_metadata();
      const auto it = metadata.find("authorization");
      tokens.emplace_back(
          it == metadata.end()
              ? ""
              : std::string(it->second.data(), it->second.size()));
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (owner.empty()) {
      response->set_frame(7);
      reactor->Finish(grpc::Status::OK);
    } else {
      context->AddTrailingMetadata("xform-owner-node", "owner");
      context->AddTrailingMetadata("xform-owner-address", owner);
      reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                   "taken at node owner, not here"));
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ListNodes(
      grpc::CallbackServerContext* context, const v1::ListNodesRequest*,
      v1::ListNodesResponse* response) override {
    for (const std::string& address : listed) {
      v1::NodeInfo* node = response->add_nodes();
      node->set_name(address);
      node->set_address(address);
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};

struct PeerServer {
  explicit PeerServer(RedirectingPeer& peer) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&peer);
    server = builder.BuildAndStart();
  }
  ~PeerServer() {
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// A redirect is followed only to a node the client trusts: an address it
// was given, or one a node it trusts lists (issue 71: xformctl sent its
// token to whatever address a redirect named).
TEST(ClientPeerTest, ARedirectIsFollowedOnlyToANodeTheClientTrusts) {
  RedirectingPeer elsewhere;  // Answers writes, and records tokens.
  PeerServer elsewhere_server(elsewhere);
  RedirectingPeer node;
  node.owner = elsewhere_server.address();
  PeerServer node_server(node);
  ASSERT_NE(node_server.server, nullptr);
  node.listed = {node_server.address()};
  ClientOptions options;
  options.address = node_server.address();
  options.token = "secret";
  options.own_connection = true;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<uint64_t> refused =
      (*client)->Apply("w", {CreateOp{1, kNoEntity, {}}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition)
      << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("not followed"));
  EXPECT_EQ(elsewhere.applies, 0) << "the token went to an address a "
                                     "redirect alone named";
  // Listed by the node it trusts: followed, token and all.
  node.listed.push_back(elsewhere_server.address());
  absl::StatusOr<uint64_t> applied =
      (*client)->Apply("w", {CreateOp{1, kNoEntity, {}}});
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ(*applied, 7u);
  absl::MutexLock lock(&elsewhere.mu);
  EXPECT_EQ(elsewhere.tokens, std::vector<std::string>{"Bearer secret"});
}

}  // namespace
}  // namespace xform
