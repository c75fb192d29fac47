// Copyright 2026 The xform Authors.
//
// Region views against a model, as world_model_test does for the core: a
// real server on loopback, a random world with hierarchies (moves of roots
// too, so whole subtrees cross borders, and creates, destroys and
// re-parents), and Mirrors whose views are regions of space. After every
// frame each Mirror holds exactly the entities whose positions satisfy the
// documented rule (xform/region.h: in when inside, out when outside the
// region grown by its margin, judged after each frame), intersected with
// its subtrees, each with the model's parent and world matrix bit for bit:
// keeping up, rate-limited, and stalled until resent whole.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/loopback_server.h"
#include "tests/random_batches.h"
#include "xform/client.h"
#include "xform/mirror.h"
#include "xform/region.h"
#include "xform/v1/wire.h"
#include "xform/world.h"

namespace xform {
namespace {

using server::Limits;
using server::LoopbackServer;

constexpr absl::Duration kWait = absl::Seconds(20);

// A view's expected membership, judged after each frame as the server
// judges it.
struct ModelView {
  Region region;
  std::vector<EntityId> subtrees;  // Empty: the whole world.
  absl::flat_hash_set<EntityId> in;

  bool UnderARoot(const World& world, EntityId e) const {
    if (subtrees.empty()) return true;
    for (EntityId at = e; at != kNoEntity; at = *world.Parent(at)) {
      if (std::find(subtrees.begin(), subtrees.end(), at) != subtrees.end()) {
        return true;
      }
    }
    return false;
  }

  void Judge(const World& world) {
    absl::flat_hash_set<EntityId> now;
    world.ForEach([&](EntityId e, EntityId, const Matrix3x4& m) {
      if (UnderARoot(world, e) &&
          region.Holds(in.contains(e), m.translation())) {
        now.insert(e);
      }
    });
    in = std::move(now);
  }
};

// What `mirror` holds that the model's view does not, or "".
std::string Differs(const Mirror& mirror, const World& world,
                    const ModelView& view) {
  std::vector<EntityId> ids;
  std::vector<Matrix3x4> worlds;
  mirror.CopyAll(&ids, &worlds);
  if (ids.size() != view.in.size()) {
    return absl::StrCat("holds ", ids.size(), " entities, the rule says ",
                        view.in.size());
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    if (!view.in.contains(ids[k])) {
      return absl::StrCat("holds ", ids[k], ", outside the view");
    }
    const Matrix3x4 expected = *world.WorldMatrix(ids[k]);
    if (std::memcmp(&worlds[k], &expected, sizeof expected) != 0) {
      return absl::StrCat("entity ", ids[k], "'s world matrix differs");
    }
    if (*mirror.Parent(ids[k]) != *world.Parent(ids[k])) {
      return absl::StrCat("entity ", ids[k], "'s parent differs");
    }
  }
  return "";
}

class RegionViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Limits limits;
    limits.max_pending = 48;  // A stalled mirror is soon resent whole.
    ASSERT_TRUE(server_.Start(limits));
    ClientOptions options;
    options.address = server_.address();
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_TRUE(client_->CreateWorld("w", {.mode = FrameMode::kDriven}).ok());
  }

  std::unique_ptr<Mirror> StartMirror(MirrorOptions options) {
    options.world = "w";
    absl::StatusOr<std::unique_ptr<Mirror>> mirror =
        Mirror::Start(*client_, std::move(options));
    EXPECT_TRUE(mirror.ok()) << mirror.status();
    return mirror.ok() ? *std::move(mirror) : nullptr;
  }

  LoopbackServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(RegionViewTest, RegionMirrorsHoldWhatTheRuleSaysAfterEveryFrame) {
  // Positions of RandomBatches' entities spread over about +-20.
  std::vector<ModelView> views = {
      {.region = *Region::Sphere({0, 0, 0}, 8, 2)},
      {.region = *Region::Box({-4, -12, -6}, {12, 5, 9})},
      {.region = *Region::Sphere({3, -2, 1}, 11, 1.5f), .subtrees = {1, 4}},
  };
  struct Watched {
    size_t view;
    std::unique_ptr<Mirror> mirror;
    int check_every;  // Frames.
    bool stalls;      // kCaller, updated only when checked.
  };
  std::vector<Watched> watched;
  for (size_t v = 0; v < views.size(); ++v) {
    watched.push_back({v,
                       StartMirror({.subtrees = views[v].subtrees,
                                    .region = views[v].region}),
                       1, false});
  }
  // Rate-limited, and stalled (so far behind that its view is resent).
  watched.push_back(
      {0, StartMirror({.region = views[0].region, .max_rate_hz = 25}), 10,
       false});
  watched.push_back({1,
                     StartMirror({.region = views[1].region,
                                  .driver = MirrorOptions::Driver::kCaller}),
                     50, true});
  for (Watched& w : watched) ASSERT_NE(w.mirror, nullptr);

  World model;
  // A crowd to move each frame (400 roots with 4 children each, ids from
  // 1,000,000), beside the random writer's hierarchies: messages big
  // enough that a mirror that does not read falls behind.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> spread(-20, 20), step(-1.5f, 1.5f);
  std::vector<Command> crowd;
  std::vector<Transform> crowd_local;
  for (EntityId root = 1'000'000; root < 1'002'000; root += 5) {
    for (EntityId e = root; e < root + 5; ++e) {
      Transform local;
      local.position = e == root
                           ? glm::vec3(spread(rng), spread(rng), spread(rng))
                           : glm::vec3(step(rng), step(rng), step(rng)) * 2.f;
      crowd_local.push_back(local);
      crowd.push_back(CreateOp{e, e == root ? kNoEntity : root, local});
    }
  }
  ASSERT_TRUE(model.Apply(crowd).ok());
  ASSERT_TRUE(client_->Apply("w", crowd, {.end_frame = true}).ok());
  for (ModelView& view : views) view.Judge(model);
  testing::RandomBatches random(64, 1);
  size_t entered = 0, left = 0;
  for (int frame = 1; frame <= 300; ++frame) {
    std::vector<Command> batch = random.Next(model, 12);
    std::vector<Command> moves;
    for (int k = 0; k < 200; ++k) {
      const size_t at = rng() % crowd_local.size();
      crowd_local[at].position += glm::vec3(step(rng), step(rng), step(rng));
      moves.push_back(SetLocalOp{1'000'000 + at, crowd_local[at]});
    }
    ASSERT_TRUE(model.Apply(moves).ok());
    batch.insert(batch.end(), moves.begin(), moves.end());
    absl::StatusOr<uint64_t> published =
        client_->Apply("w", batch, {.end_frame = true});
    ASSERT_TRUE(published.ok()) << published.status();
    for (ModelView& view : views) {
      const absl::flat_hash_set<EntityId> before = view.in;
      view.Judge(model);
      for (EntityId e : view.in) entered += !before.contains(e);
      for (EntityId e : before) left += !view.in.contains(e);
    }
    for (Watched& w : watched) {
      if (frame % w.check_every != 0) continue;
      // A frame that changes nothing in a view sends it nothing: the
      // mirror is waited on until it holds the view, or the deadline.
      std::string differs;
      for (const absl::Time deadline = absl::Now() + kWait;;) {
        if (w.stalls) w.mirror->Update();
        differs = Differs(*w.mirror, model, views[w.view]);
        if (differs.empty() || absl::Now() >= deadline) break;
        absl::SleepFor(absl::Milliseconds(1));
      }
      ASSERT_EQ(differs, "")
          << "view " << w.view << " (" << views[w.view].region.ToString()
          << ") after frame " << frame << " (" << *published
          << "), the mirror at " << w.mirror->frame();
    }
  }
  // The run crossed borders both ways, and the stalled one was resent.
  EXPECT_GT(entered, 100u);
  EXPECT_GT(left, 100u);
  EXPECT_GT(watched.back().mirror->resyncs(), 0);
  std::printf("%zu entered and %zu left over 3 views and 300 frames\n", entered,
              left);
}

TEST_F(RegionViewTest, BadRegionsAreRefusedNamingWhatIsWrong) {
  const auto refused = [&](v1::Region region) {
    v1::SubscribeRequest request;
    request.set_world("w");
    *request.mutable_region() = std::move(region);
    return v1::CheckSubscribeRequest(request, 100);
  };
  v1::Region none;
  EXPECT_EQ(refused(none).code(), absl::StatusCode::kInvalidArgument);
  v1::Region both;
  for (int k = 0; k < 6; ++k) both.add_box(k);
  for (int k = 0; k < 4; ++k) both.add_sphere(k);
  EXPECT_EQ(refused(both).code(), absl::StatusCode::kInvalidArgument);
  v1::Region short_box;
  for (int k = 0; k < 5; ++k) short_box.add_box(k);
  EXPECT_EQ(refused(short_box).code(), absl::StatusCode::kInvalidArgument);
  v1::Region inverted;
  for (float v : {1.f, 0.f, 0.f, 0.f, 1.f, 1.f}) inverted.add_box(v);
  EXPECT_EQ(refused(inverted).code(), absl::StatusCode::kInvalidArgument);
  v1::Region negative;
  for (float v : {0.f, 0.f, 0.f, -1.f}) negative.add_sphere(v);
  EXPECT_EQ(refused(negative).code(), absl::StatusCode::kInvalidArgument);
  v1::Region nan_margin;
  for (float v : {0.f, 0.f, 0.f, 1.f}) nan_margin.add_sphere(v);
  nan_margin.set_margin(std::nanf(""));
  EXPECT_EQ(refused(nan_margin).code(), absl::StatusCode::kInvalidArgument);
  v1::Region fine;
  for (float v : {0.f, 0.f, 0.f, 1.f}) fine.add_sphere(v);
  EXPECT_TRUE(refused(fine).ok());
}

}  // namespace
}  // namespace xform
