// Copyright 2026 The xform Authors.
//
// The Replicator without gRPC: coalescing, bounded pending state, filtered
// views, and many threads at once (this binary also runs under
// ThreadSanitizer: the server's cross-thread logic lives here, while Debian's
// gRPC is not instrumented).

#include "server/replication/replicator.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glm/gtc/quaternion.hpp"
#include "gtest/gtest.h"
#include "tests/seeds.h"
#include "xform/region.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/frame_update.h"
#include "xform/world.h"

namespace xform::server {
namespace {

using ::xform::testing::SeedsToRun;

class CountingSink : public UpdateSink {
 public:
  void Wake() override { ++wakes; }
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override { ended = true; }
  std::atomic<int> wakes{0};
  std::atomic<bool> ended{false};
};

struct Entry {
  EntityId parent;
  Matrix3x4 world;
  bool operator==(const Entry&) const = default;
};
using State = std::map<EntityId, Entry>;

void ApplyUpdate(const v1::FrameUpdate& u, State* state) {
  // A snapshot, at the start or after falling too far behind, replaces all
  // (but one that keeps the view, which changes it).
  if (u.snapshot() && u.part() == 0 && !u.keeps_view()) state->clear();
  for (EntityId e : u.destroyed()) state->erase(e);
  for (int k = 0; k < u.created_size(); ++k)
    (*state)[u.created(k)].parent = u.created_parent(k);
  for (int k = 0; k < u.reparented_size(); ++k) {
    state->at(u.reparented(k)).parent = u.reparented_parent(k);
  }
  const v1::FrameUpdateReader read(u);
  EXPECT_EQ(read.moved_size(), u.moved_size()) << "a matrix per move";
  for (int k = 0; k < read.moved_size(); ++k) {
    state->at(u.moved(k)).world = read.moved_world(k);
  }
}

State Snapshot(const World& world) {
  State state;
  world.ForEach([&](EntityId e, EntityId p, const Matrix3x4& m) {
    state[e] = {p, m};
  });
  return state;
}

// Drains every message due now into `state`.
int Drain(Replicator& r, Replicator::SubscriptionId id, State* state,
          v1::FrameUpdate* last = nullptr) {
  int messages = 0;
  while (auto update = r.Next(id, absl::InfiniteFuture())) {
    ApplyUpdate(update->message(), state);
    if (last) *last = update->message();
    ++messages;
  }
  return messages;
}

Transform At(float x) {
  Transform t;
  t.position.x = x;
  return t;
}

class ReplicatorTest : public ::testing::Test {
 protected:
  void Publish() {
    world_.EndFrame(&changes_);
    replicator_.Publish(changes_, absl::Now());
  }
  World world_;
  FrameChanges changes_;
  Replicator replicator_;
};

// The spatial index is kept only around region views: none before the
// first; after the last leaves, 600 more frames (so that a subscriber that
// comes and goes does not cost a build, O(world), each time), then freed.
TEST_F(ReplicatorTest, TheSpatialIndexIsKeptOnlyAroundRegionViews) {
  ASSERT_TRUE(world_.CreateMany({{1, kNoEntity, At(1)}}).ok());
  Publish();
  const Replicator::SubscriptionId whole =
      replicator_.Subscribe({}, std::make_shared<CountingSink>());
  EXPECT_FALSE(replicator_.keeps_spatial_index());
  SubscriptionOptions options;
  options.region = *Region::Sphere({0, 0, 0}, 5);
  for (int round = 0; round < 3; ++round) {
    const Replicator::SubscriptionId region =
        replicator_.Subscribe(options, std::make_shared<CountingSink>());
    EXPECT_TRUE(replicator_.keeps_spatial_index());
    State state;
    Drain(replicator_, region, &state);
    EXPECT_EQ(state.size(), 1u);
    replicator_.Unsubscribe(region);
    EXPECT_TRUE(replicator_.keeps_spatial_index());
  }
  for (int frame = 1; frame < 600; ++frame) {
    ASSERT_TRUE(
        world_.SetLocals({{1, At(static_cast<float>(frame % 3))}}).ok());
    Publish();
  }
  EXPECT_TRUE(replicator_.keeps_spatial_index());
  ASSERT_TRUE(world_.SetLocals({{1, At(4)}}).ok());
  Publish();
  EXPECT_FALSE(replicator_.keeps_spatial_index());
  // Built again for the next one, and right.
  const Replicator::SubscriptionId region =
      replicator_.Subscribe(options, std::make_shared<CountingSink>());
  State state;
  Drain(replicator_, region, &state);
  EXPECT_EQ(state.size(), 1u);
  EXPECT_TRUE(replicator_.keeps_spatial_index());
  replicator_.Unsubscribe(whole);
}

// The first region view's index is built in parts, the lock released
// between them: frames that move, destroy and create entities meanwhile
// (published between the parts) leave it exact, and the view holds what
// its region does.
TEST_F(ReplicatorTest, AnIndexBuiltInPartsWhileFramesGoOnIsExact) {
  constexpr EntityId kEntities = 100'000;  // 4 parts.
  std::mt19937 random(7);
  std::uniform_real_distribution<float> x(0, 1000);
  std::vector<CreateOp> creates;
  for (EntityId e = 1; e <= kEntities; ++e) {
    creates.push_back({e, kNoEntity, At(x(random))});
  }
  ASSERT_TRUE(world_.CreateMany(creates).ok());
  Publish();
  EntityId next = kEntities + 1;
  int frames_between = 0;
  replicator_.set_unlocked_for_testing([&] {
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < 200; ++k) {
      moves.push_back({1 + random() % kEntities, At(x(random))});
    }
    std::sort(moves.begin(), moves.end(),
              [](auto& a, auto& b) { return a.entity < b.entity; });
    moves.erase(
        std::unique(moves.begin(), moves.end(),
                    [](auto& a, auto& b) { return a.entity == b.entity; }),
        moves.end());
    std::vector<Command> batch(moves.begin(), moves.end());
    for (int k = 0; k < 20; ++k) {
      const EntityId gone = 1 + random() % kEntities;
      if (world_.Has(gone) &&
          std::none_of(moves.begin(), moves.end(),
                       [&](auto& m) { return m.entity == gone; })) {
        batch.push_back(DestroyOp{gone});
      }
      batch.push_back(CreateOp{next++, kNoEntity, At(x(random))});
    }
    ASSERT_TRUE(world_.Apply(batch).ok());
    Publish();
    ++frames_between;
  });
  SubscriptionOptions options;
  options.region = *Region::Box({100, -1, -1}, {130, 1, 1});
  const Replicator::SubscriptionId region =
      replicator_.Subscribe(options, std::make_shared<CountingSink>());
  replicator_.set_unlocked_for_testing(nullptr);
  EXPECT_GE(frames_between, 3);
  const auto expected = [&] {
    State inside;
    world_.ForEach([&](EntityId e, EntityId p, const Matrix3x4& m) {
      if (options.region->Inside(m.translation())) inside[e] = {p, m};
    });
    return inside;
  };
  State state;
  Drain(replicator_, region, &state);
  EXPECT_EQ(state, expected());
  EXPECT_GT(state.size(), 1'000u);
  // Frames after go on being exact: the index holds every slot.
  for (int frame = 0; frame < 5; ++frame) {
    std::vector<SetLocalOp> moves;
    for (EntityId e = 1; e <= kEntities; e += 97) {
      if (world_.Has(e)) moves.push_back({e, At(x(random))});
    }
    ASSERT_TRUE(world_.SetLocals(moves).ok());
    Publish();
    Drain(replicator_, region, &state);
    EXPECT_EQ(state, expected()) << "frame " << frame;
  }
}

// A region moved far, in parts (a chunk of 1,000 slots), with frames that
// move, destroy and create between the parts, and the subscriber reading
// between them too; once, a second move of the same view comes between
// two parts (another call's, which finishes the first). The view ends
// exact by the last region's rule, with or without the frame's moves kept
// by cell, and stays exact after. Issue 71: a whole-world move was one
// hold of the world's lock (3.4 s on a 1M-entity world).
TEST(ReplicatorMoveTest, ARegionMovedInPartsWhileFramesGoOnIsExact) {
  for (const size_t sort_moves : {size_t{1}, size_t{8}}) {
    SCOPED_TRACE(absl::StrCat("moves by cell from ", sort_moves, " views"));
    World world;
    FrameChanges changes;
    Replicator replicator;
    replicator.set_membership_walk_chunk_for_testing(1'000);
    replicator.set_region_views_to_sort_moves(sort_moves);
    const auto publish = [&] {
      world.EndFrame(&changes);
      replicator.Publish(changes, absl::Now());
    };
    constexpr EntityId kEntities = 50'000;
    std::mt19937 random(11);
    std::uniform_real_distribution<float> x(0, 1000);
    std::vector<CreateOp> creates;
    for (EntityId e = 1; e <= kEntities; ++e) {
      creates.push_back({e, kNoEntity, At(x(random))});
    }
    ASSERT_TRUE(world.CreateMany(creates).ok());
    publish();
    SubscriptionOptions options;
    options.owner = "reader";
    // Far apart, the old region large: its cells are judged over many
    // parts, while frames move its members away from both regions.
    options.region = *Region::Box({0, -1, -1}, {400, 1, 1});
    const Replicator::SubscriptionId id =
        replicator.Subscribe(options, std::make_shared<CountingSink>());
    State state;
    Drain(replicator, id, &state);
    const auto afford = [](size_t) { return absl::OkStatus(); };
    EntityId next = kEntities + 1;
    int parts = 0;
    bool moved_again = false;
    bool in_hook = false;
    const Region last = *Region::Box({600, -1, -1}, {990, 1, 1});
    int unlocked = 0;  // Parts of both moves.
    replicator.set_unlocked_for_testing([&] {
      ++unlocked;
      if (in_hook) return;
      in_hook = true;
      ++parts;
      std::vector<Command> batch;
      for (int k = 0; k < 200; ++k) {
        const EntityId e = 1 + random() % (next - 1);
        if (world.Has(e)) batch.push_back(SetLocalOp{e, At(x(random))});
      }
      std::sort(batch.begin(), batch.end(), [](auto& a, auto& b) {
        return std::get<SetLocalOp>(a).entity < std::get<SetLocalOp>(b).entity;
      });
      batch.erase(std::unique(batch.begin(), batch.end(),
                              [](auto& a, auto& b) {
                                return std::get<SetLocalOp>(a).entity ==
                                       std::get<SetLocalOp>(b).entity;
                              }),
                  batch.end());
      std::set<EntityId> touched;
      for (const Command& c : batch) {
        touched.insert(std::get<SetLocalOp>(c).entity);
      }
      // Every other frame moves alone (FollowMoves), the others also
      // destroy and create (Follow).
      for (int k = 0; k < (parts % 2 ? 20 : 0); ++k) {
        const EntityId gone = 1 + random() % (next - 1);
        if (world.Has(gone) && touched.insert(gone).second) {
          batch.push_back(DestroyOp{gone});
        }
        batch.push_back(CreateOp{next++, kNoEntity, At(x(random))});
      }
      ASSERT_TRUE(world.Apply(batch).ok());
      publish();
      if (parts % 3 == 0) Drain(replicator, id, &state);
      if (parts == 8 && !moved_again) {
        moved_again = true;
        EXPECT_TRUE(
            replicator.MoveRegion(id, "reader", last, 0, absl::Now(), afford)
                .ok());
      }
      in_hook = false;
    });
    ASSERT_TRUE(replicator
                    .MoveRegion(id, "reader",
                                *Region::Box({500, -1, -1}, {1000, 1, 1}), 0,
                                absl::Now(), afford)
                    .ok());
    replicator.set_unlocked_for_testing(nullptr);
    EXPECT_TRUE(moved_again);
    EXPECT_GE(unlocked, 20);  // A cell a part: 32 units, about 1,600 slots.
    const auto expected = [&] {
      State inside;
      world.ForEach([&](EntityId e, EntityId p, const Matrix3x4& m) {
        if (last.Inside(m.translation())) inside[e] = {p, m};
      });
      return inside;
    };
    Drain(replicator, id, &state);
    EXPECT_EQ(state.size(), expected().size());
    EXPECT_TRUE(state == expected());
    for (int frame = 0; frame < 5; ++frame) {
      std::vector<SetLocalOp> moves;
      for (EntityId e = 1; e < next; e += 97) {
        if (world.Has(e)) moves.push_back({e, At(x(random))});
      }
      ASSERT_TRUE(world.SetLocals(moves).ok());
      publish();
      Drain(replicator, id, &state);
      EXPECT_TRUE(state == expected()) << "frame " << frame;
    }
    // A move its caller cannot afford changes nothing.
    const absl::Status refused = replicator.MoveRegion(
        id, "reader", *Region::Box({0, -1, -1}, {50, 1, 1}), 0, absl::Now(),
        [](size_t) { return absl::ResourceExhaustedError("in debt"); });
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    publish();
    Drain(replicator, id, &state);
    EXPECT_TRUE(state == expected());
  }
}

TEST_F(ReplicatorTest, ASlowSubscriberGetsOneMessageWithTheLatestState) {
  ASSERT_TRUE(world_.CreateMany({{1, 0, {}}, {2, 1, {}}, {3, 0, {}}}).ok());
  Publish();
  auto sink = std::make_shared<CountingSink>();
  const auto id = replicator_.Subscribe({}, sink);
  State mirror;
  Drain(replicator_, id, &mirror);  // The snapshot.
  for (int f = 0; f < 100; ++f) {
    ASSERT_TRUE(world_.SetLocal(1, At(static_cast<float>(f + 1))).ok());
    Publish();
  }
  EXPECT_GE(sink->wakes, 100);
  v1::FrameUpdate last;
  EXPECT_EQ(Drain(replicator_, id, &mirror, &last), 1);
  EXPECT_EQ(last.frame(), world_.frame() - 1);
  EXPECT_EQ(last.frames_skipped(), 99u);
  EXPECT_EQ(last.moved_size(), 2);  // 1 and its child, once each.
  EXPECT_EQ(mirror, Snapshot(world_));
}

TEST_F(ReplicatorTest, CaughtUpSubscribersShareOneMessagePerFrame) {
  ASSERT_TRUE(world_.CreateMany({{1, 0, {}}, {2, 1, {}}}).ok());
  Publish();
  const auto a = replicator_.Subscribe({}, std::make_shared<CountingSink>());
  const auto b = replicator_.Subscribe({}, std::make_shared<CountingSink>());
  State mirror_a, mirror_b;
  Drain(replicator_, a, &mirror_a);
  Drain(replicator_, b, &mirror_b);
  ASSERT_TRUE(world_.SetLocal(1, At(5)).ok());
  Publish();
  const auto from_a = replicator_.Next(a, absl::Now());
  const auto from_b = replicator_.Next(b, absl::Now());
  ASSERT_TRUE(from_a != nullptr);
  EXPECT_TRUE(from_a.get() == from_b.get());  // One message, built once.
  // b falls behind by a frame: the shared message folds into its pending set.
  ASSERT_TRUE(world_.SetLocal(2, At(7)).ok());
  Publish();
  ASSERT_TRUE(world_.SetLocal(1, At(6)).ok());
  Publish();
  EXPECT_EQ(from_a->encoded().data(), from_b->encoded().data());  // Once.
  ApplyUpdate(from_a->message(), &mirror_a);
  ApplyUpdate(from_b->message(), &mirror_b);
  Drain(replicator_, a, &mirror_a);
  v1::FrameUpdate last;
  EXPECT_EQ(Drain(replicator_, b, &mirror_b, &last), 1);
  EXPECT_EQ(mirror_a, Snapshot(world_));
  EXPECT_EQ(mirror_b, Snapshot(world_));
}

// What gRPC's threads may take (NextIfMade) is only what is made already: a
// frame's shared part. A snapshot part, or a lagging subscriber's pending
// changes, is work, left to the caller's build threads (Next).
TEST_F(ReplicatorTest, OnlyMadeMessagesAreTakenWithoutMaking) {
  ASSERT_TRUE(world_.CreateMany({{1, 0, {}}, {2, 1, {}}}).ok());
  Publish();
  const auto id = replicator_.Subscribe({}, std::make_shared<CountingSink>());
  bool must_make = false;
  EXPECT_EQ(replicator_.NextIfMade(id, absl::Now(), &must_make), nullptr);
  EXPECT_TRUE(must_make);  // The snapshot's part.
  State mirror;
  Drain(replicator_, id, &mirror);

  ASSERT_TRUE(world_.SetLocal(1, At(5)).ok());
  Publish();
  auto shared = replicator_.NextIfMade(id, absl::Now(), &must_make);
  ASSERT_NE(shared, nullptr);
  EXPECT_FALSE(must_make);
  ApplyUpdate(shared->message(), &mirror);
  EXPECT_EQ(replicator_.NextIfMade(id, absl::Now(), &must_make), nullptr);
  EXPECT_FALSE(must_make);  // Caught up: nothing due.

  // Two frames not taken fold into one message: made by Next, not taken.
  ASSERT_TRUE(world_.SetLocal(1, At(6)).ok());
  Publish();
  ASSERT_TRUE(world_.SetLocal(2, At(7)).ok());
  Publish();
  EXPECT_EQ(replicator_.NextIfMade(id, absl::Now(), &must_make), nullptr);
  EXPECT_TRUE(must_make);
  EXPECT_EQ(Drain(replicator_, id, &mirror), 1);
  EXPECT_EQ(mirror, Snapshot(world_));
}

TEST_F(ReplicatorTest, PendingStateIsBoundedByTheWorldNotByTheLag) {
  ASSERT_TRUE(world_.Create(1, 0, {}).ok());
  Publish();
  const auto id = replicator_.Subscribe({}, std::make_shared<CountingSink>());
  State mirror;
  Drain(replicator_, id, &mirror);
  // Churn through 10,000 ids, 10 alive at a time, while the subscriber sleeps.
  for (EntityId e = 100; e < 10'100; ++e) {
    ASSERT_TRUE(world_.Create(e, 1, At(1)).ok());
    if (e >= 110) {
      ASSERT_TRUE(world_.Destroy(e - 10).ok());
    }
    Publish();
    ASSERT_LE(replicator_.Subscribers()[0].pending, 2 * world_.size());
  }
  Drain(replicator_, id, &mirror);
  EXPECT_EQ(mirror, Snapshot(world_));
}

TEST_F(ReplicatorTest, SubtreeViewsSeeEntitiesJoinAndLeave) {
  ASSERT_TRUE(
      world_.CreateMany({{1, 0, {}}, {2, 0, {}}, {3, 2, {}}, {4, 3, {}}}).ok());
  Publish();
  SubscriptionOptions options;
  options.subtrees = {1};
  const auto id =
      replicator_.Subscribe(options, std::make_shared<CountingSink>());
  State mirror;
  Drain(replicator_, id, &mirror);
  EXPECT_EQ(mirror.size(), 1u);
  ASSERT_TRUE(world_.Link(3, 1).ok());  // 3 and 4 join the view.
  Publish();
  v1::FrameUpdate update;
  Drain(replicator_, id, &mirror, &update);
  EXPECT_EQ(update.created_size(), 2);
  EXPECT_EQ(update.created(0), 3u);  // Parents first.
  EXPECT_EQ(mirror.size(), 3u);
  ASSERT_TRUE(world_.Link(3, 2).ok());  // And leave again.
  Publish();
  Drain(replicator_, id, &mirror, &update);
  EXPECT_EQ(update.destroyed_size(), 2);
  EXPECT_EQ(mirror.size(), 1u);
}

TEST_F(ReplicatorTest, ChunkedSnapshotsCarryOneFrame) {
  std::vector<CreateOp> ops;
  for (EntityId e = 1; e <= 1000; ++e)
    ops.push_back({e, e > 1 ? e - 1 : 0, At(1)});
  ASSERT_TRUE(world_.CreateMany(ops).ok());
  Publish();
  SubscriptionOptions options;
  options.part_budget_bytes = 10'000;
  const auto id =
      replicator_.Subscribe(options, std::make_shared<CountingSink>());
  State mirror;
  int chunks = 0;
  while (auto update = replicator_.Next(id, absl::Now())) {
    ++chunks;
    EXPECT_TRUE(update->message().snapshot());
    EXPECT_EQ(update->message().frame(), 1u);
    ApplyUpdate(update->message(), &mirror);
    if (update->message().snapshot_done()) break;
  }
  EXPECT_GT(chunks, 5);
  EXPECT_EQ(mirror, Snapshot(world_));
}

// Whether `e` is in the view that `listed` and `roots` select (both empty:
// the whole world) of `state`.
bool InFilter(const State& state, EntityId e, const std::set<EntityId>& listed,
              const std::set<EntityId>& roots) {
  if (!state.contains(e)) return false;
  if ((listed.empty() && roots.empty()) || listed.contains(e)) return true;
  for (EntityId a = e; a != kNoEntity; a = state.at(a).parent) {
    if (roots.contains(a)) return true;
  }
  return false;
}

State Filtered(const State& state, const std::set<EntityId>& listed,
               const std::set<EntityId>& roots) {
  State out;
  for (const auto& [e, entry] : state) {
    if (InFilter(state, e, listed, roots)) out[e] = entry;
  }
  return out;
}

// Applies a message, checking parents-first: a created or re-parented
// entity's parent is already there, when it is in the view (`in_view`; by
// default the whole world).
void ApplyStrictly(const v1::FrameUpdate& u, State* state,
                   const std::function<bool(EntityId)>& in_view = nullptr) {
  const auto parent_there = [&](EntityId parent) {
    return parent == kNoEntity || state->contains(parent) ||
           (in_view && !in_view(parent));
  };
  if (u.snapshot() && u.part() == 0 && !u.keeps_view()) state->clear();
  for (EntityId e : u.destroyed()) {
    EXPECT_TRUE(state->contains(e)) << e << " destroyed, but not held";
    state->erase(e);
  }
  for (int k = 0; k < u.created_size(); ++k) {
    EXPECT_FALSE(state->contains(u.created(k)))
        << u.created(k) << " created, but held";
    const EntityId parent = u.created_parent(k);
    EXPECT_TRUE(parent_there(parent))
        << u.created(k) << " came before its parent " << parent;
    (*state)[u.created(k)].parent = parent;
  }
  for (int k = 0; k < u.reparented_size(); ++k) {
    const EntityId parent = u.reparented_parent(k);
    EXPECT_TRUE(parent_there(parent));
    ASSERT_TRUE(state->contains(u.reparented(k)));
    state->at(u.reparented(k)).parent = parent;
  }
  const v1::FrameUpdateReader read(u);
  ASSERT_EQ(read.moved_size(), u.moved_size()) << "a matrix per move";
  for (int k = 0; k < read.moved_size(); ++k) {
    ASSERT_TRUE(state->contains(u.moved(k)));
    state->at(u.moved(k)).world = read.moved_world(k);
  }
}

// One frame of random churn: creations (some of destroyed ids), subtree and
// keep-children destroys, links, and moves, all over the world.
// Creates 3,000 entities from `next_id` on, each a child of a random
// earlier one or, one in eight, a root; leaves `next_id` past them.
absl::Status GrowRandomForest(World& world, std::mt19937& rng,
                              EntityId& next_id) {
  std::vector<CreateOp> ops;
  for (const EntityId end = next_id + 3000; next_id < end; ++next_id) {
    const EntityId parent = next_id > 1 ? 1 + rng() % (next_id - 1) : 0;
    ops.push_back({next_id, rng() % 8 ? parent : kNoEntity, At(1)});
  }
  return world.CreateMany(ops);
}

void Churn(World& world, std::mt19937& rng, EntityId& next_id) {
  std::vector<EntityId> alive;
  world.ForEach(
      [&](EntityId e, EntityId, const Matrix3x4&) { alive.push_back(e); });
  const auto any = [&] { return alive[rng() % alive.size()]; };
  for (int k = 0; k < 20 && !alive.empty(); ++k) {
    switch (rng() % 6) {
      case 0:
        world
            .Create(rng() % 2 ? next_id++ : 1 + rng() % next_id,
                    rng() % 4 ? any() : kNoEntity, At(float(rng() % 100)))
            .IgnoreError();
        break;
      case 1:
        world
            .Destroy(any(), rng() % 2 ? DestroyMode::kSubtree
                                      : DestroyMode::kReparentChildren)
            .IgnoreError();
        break;
      case 2:
        world.Link(any(), rng() % 4 ? any() : kNoEntity).IgnoreError();
        break;
      default:
        world.SetLocal(any(), At(float(rng() % 100))).IgnoreError();
    }
  }
}

// A random forest of 3,000 (children in lower ids than their parents too:
// a parent chain must be sent ahead of a snapshot's scan), published, with
// every frame's state kept, for snapshots streamed while it changes.
struct StreamingForest {
  StreamingForest(uint32_t seed, size_t max_pending)
      : rng(seed), replicator(max_pending) {
    EXPECT_TRUE(GrowRandomForest(world, rng, next_id).ok());
    for (int k = 0; k < 200; ++k) {
      world.Link(1 + rng() % 3000, 1 + rng() % 3000).IgnoreError();
    }
    Publish();
  }
  void Publish() {
    FrameChanges changes;
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
    published[changes.frame] = Snapshot(world);
  }

  World world;
  std::mt19937 rng;
  EntityId next_id = 1;
  Replicator replicator;
  std::map<uint64_t, State> published;  // By frame.
};

// A snapshot is streamed a part at a time while the world keeps changing:
// every part is parents-first, and at snapshot_done the copy is the
// published state of that part's frame (a later one than it began at), as
// the subscription's filter selects it: the whole world, subtrees, or listed
// entities.
TEST_F(ReplicatorTest, SnapshotsStreamWhileTheWorldChanges) {
  for (uint32_t seed = 1; seed <= SeedsToRun(30); ++seed) {
    StreamingForest forest(seed, /*max_pending=*/65'536);
    auto& [world, rng, next_id, replicator, published] = forest;
    const auto publish = [&] { forest.Publish(); };
    SubscriptionOptions options;
    options.part_budget_bytes = 2000;  // About 27 entities a part.
    std::set<EntityId> listed, roots;
    if (seed % 3 == 1) {
      for (int k = 0; k < 30; ++k) roots.insert(1 + rng() % 3000);
    } else if (seed % 3 == 2) {
      for (int k = 0; k < 800; ++k) listed.insert(1 + rng() % 3000);
    }
    options.subtrees.assign(roots.begin(), roots.end());
    options.entities.assign(listed.begin(), listed.end());
    const auto id =
        replicator.Subscribe(options, std::make_shared<CountingSink>());
    State mirror;
    int parts = 0;
    for (;;) {
      auto update = replicator.Next(id, absl::Now());
      ASSERT_TRUE(update != nullptr);
      const v1::FrameUpdate& u = update->message();
      ASSERT_TRUE(u.snapshot());
      EXPECT_EQ(u.part(), static_cast<uint32_t>(parts++));
      EXPECT_LE(u.ByteSizeLong(), 2000u + 64);
      const State& then = published.at(u.frame());
      ApplyStrictly(u, &mirror, [&](EntityId e) {
        return InFilter(then, e, listed, roots);
      });
      if (u.snapshot_done()) {
        EXPECT_GT(u.frame(), 1u);  // Not the frame it began at.
        EXPECT_EQ(mirror, Filtered(then, listed, roots)) << "seed " << seed;
        break;
      }
      Churn(world, rng, next_id);
      publish();
    }
    if (listed.empty() && roots.empty()) {
      EXPECT_GT(parts, 100);
    }
    // And deltas carry on from there.
    for (int f = 0; f < 5; ++f) {
      Churn(world, rng, next_id);
      publish();
    }
    while (auto update = replicator.Next(id, absl::Now())) {
      ApplyUpdate(update->message(), &mirror);
    }
    EXPECT_EQ(mirror, Filtered(Snapshot(world), listed, roots))
        << "seed " << seed;
  }
}

// A subtree view's membership is found a few slots at a time as its
// snapshot starts, the lock released between, while another thread
// publishes frames that create, destroy, re-parent and move all over the
// view, some of them on the walk's path (a 1,000-deep chain under one of
// the roots), which start that root's walk again. At snapshot_done the
// copy is still the view of that part's frame, and deltas carry on.
TEST(ReplicatorViewsTest, SubtreeViewsStartWhileAnotherThreadChangesThem) {
  for (uint32_t seed = 1; seed <= SeedsToRun(6); ++seed) {
    StreamingForest forest(seed, /*max_pending=*/65'536);
    auto& [world, rng, next_id, replicator, published] = forest;
    replicator.set_membership_walk_chunk_for_testing(4);
    std::vector<CreateOp> chain;
    for (EntityId parent = 1 + rng() % 3000; chain.size() < 1000;
         parent = next_id++) {
      chain.push_back({next_id, parent, At(2)});
    }
    ASSERT_TRUE(world.CreateMany(chain).ok());
    forest.Publish();
    std::atomic<bool> done = false;
    std::thread publisher([&] {
      for (int f = 0; f < 400; ++f) {
        Churn(world, rng, next_id);
        forest.Publish();
      }
      done = true;
    });
    // Subscriptions one after another while the frames come; each one's
    // copy at snapshot_done, by frame, checked once the publisher is done.
    std::vector<std::tuple<std::set<EntityId>, uint64_t, State>> copies;
    std::mt19937 pick(seed);
    Replicator::SubscriptionId id = 0;
    State mirror;
    std::set<EntityId> roots;
    while (!done) {
      if (id != 0) replicator.Unsubscribe(id);
      roots = {chain.front().parent};
      for (int k = 0; k < 20; ++k) roots.insert(1 + pick() % 3000);
      SubscriptionOptions options;
      options.subtrees.assign(roots.begin(), roots.end());
      id = replicator.Subscribe(options, std::make_shared<CountingSink>());
      mirror.clear();
      for (;;) {
        auto update = replicator.Next(id, absl::InfiniteFuture());
        ASSERT_TRUE(update != nullptr);
        ApplyUpdate(update->message(), &mirror);
        if (update->message().snapshot_done()) {
          copies.emplace_back(roots, update->message().frame(), mirror);
          break;
        }
      }
    }
    publisher.join();
    while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
      ApplyUpdate(update->message(), &mirror);
    }
    EXPECT_EQ(mirror, Filtered(Snapshot(world), {}, roots)) << "seed " << seed;
    EXPECT_GT(copies.size(), 3u);
    for (const auto& [roots_then, frame, copy] : copies) {
      EXPECT_EQ(copy, Filtered(published.at(frame), {}, roots_then))
          << "seed " << seed << ", frame " << frame;
    }
  }
}

// Filtered views follow every frame exactly, whether it only moves
// entities (each view then notes what moved in it, without recording what
// it held before) or also creates, destroys and re-parents: subtrees, lists
// shorter and longer than a frame's moves, and both at once, overlapping.
TEST(ReplicatorViewsTest, FilteredViewsFollowMovesAndStructure) {
  for (uint32_t seed = 1; seed <= SeedsToRun(10); ++seed) {
    World world;
    std::mt19937 rng(seed);
    EntityId next_id = 1;
    ASSERT_TRUE(GrowRandomForest(world, rng, next_id).ok());
    Replicator replicator;
    FrameChanges changes;
    const auto publish = [&] {
      world.EndFrame(&changes);
      replicator.Publish(changes, absl::Now());
    };
    publish();
    struct View {
      std::set<EntityId> listed, roots;
      Replicator::SubscriptionId id = 0;
      State mirror;
    };
    const auto some = [&](int n) {
      std::set<EntityId> out;
      for (int k = 0; k < n; ++k) out.insert(1 + rng() % 3000);
      return out;
    };
    std::vector<View> views(6);
    views[0].roots = some(20);
    views[1].listed = some(10);    // Shorter than a frame's moves.
    views[2].listed = some(1500);  // Longer.
    views[3].roots = some(10);
    views[3].listed = some(200);
    views[4].roots = some(3);  // Four subtree views: enough to walk bits.
    views[5].roots = some(40);
    for (View& v : views) {
      SubscriptionOptions options;
      options.subtrees.assign(v.roots.begin(), v.roots.end());
      options.entities.assign(v.listed.begin(), v.listed.end());
      v.id = replicator.Subscribe(options, std::make_shared<CountingSink>());
      Drain(replicator, v.id, &v.mirror);
    }
    for (int f = 0; f < 60; ++f) {
      if (f % 3 == 0) {
        Churn(world, rng, next_id);
      } else {
        std::vector<EntityId> alive;
        world.ForEach([&](EntityId e, EntityId, const Matrix3x4&) {
          alive.push_back(e);
        });
        // Many moves (more than a view's bits have words: the views' bits
        // are walked) or few (each moved entity's bit is tested).
        const int moves = f % 3 == 1 ? 100 : 5;
        for (int k = 0; k < moves; ++k) {
          ASSERT_TRUE(world
                          .SetLocal(alive[rng() % alive.size()],
                                    At(static_cast<float>(rng() % 1000)))
                          .ok());
        }
      }
      publish();
      const State truth = Snapshot(world);
      for (size_t k = 0; k < views.size(); ++k) {
        View& v = views[k];
        while (auto update = replicator.Next(v.id, absl::Now())) {
          ApplyStrictly(update->message(), &v.mirror, [&](EntityId e) {
            return InFilter(truth, e, v.listed, v.roots);
          });
        }
        ASSERT_EQ(v.mirror, Filtered(truth, v.listed, v.roots))
            << "seed " << seed << ", frame " << f << ", view " << k;
      }
    }
  }
}

// 30 chains of 100 entities, published through a replicator frame by frame,
// each frame's published state kept to check snapshots against; every move
// moves all of them (the chains' roots). Snapshot parts of 2000 bytes (about
// 27 entities) make a pass over it about 108 parts.
class MovingChains {
 public:
  static constexpr EntityId kEntities = 3000;
  static constexpr int kPartsAPass = kEntities * 72 / 2000;

  explicit MovingChains(Replicator& replicator) : replicator_(replicator) {
    std::vector<CreateOp> ops;
    for (EntityId e = 1; e <= kEntities; ++e) {
      ops.push_back({e, e % 100 == 1 ? 0 : e - 1, At(1)});
    }
    EXPECT_TRUE(world_.CreateMany(ops).ok());
    Publish();
  }

  Replicator::SubscriptionId Subscribe() {
    SubscriptionOptions options;
    options.part_budget_bytes = 2000;
    return replicator_.Subscribe(options, std::make_shared<CountingSink>());
  }
  void MoveAllAndPublish() {
    x_ += 1;
    for (EntityId root = 1; root <= kEntities; root += 100) {
      EXPECT_TRUE(world_.SetLocal(root, At(x_)).ok());
    }
    Publish();
  }
  uint64_t frame() const { return changes_.frame; }
  const State& published(uint64_t frame) const { return published_.at(frame); }

 private:
  void Publish() {
    world_.EndFrame(&changes_);
    replicator_.Publish(changes_, absl::Now());
    published_[changes_.frame] = Snapshot(world_);
  }

  Replicator& replicator_;
  World world_;
  FrameChanges changes_;
  std::map<uint64_t, State> published_;
  float x_ = 1;
};

// Takes the subscriber's next part into `mirror`; true at snapshot_done,
// where the mirror must be the published state of the part's frame.
bool TakeSnapshotPart(Replicator& replicator, Replicator::SubscriptionId id,
                      const MovingChains& chains, State* mirror,
                      std::shared_ptr<const Outgoing>* taken = nullptr) {
  // gRPC's threads take only what is made: a burst's parts, made later
  // from its copy, go to Next() (the build pool's).
  bool must_make = false;
  auto update = replicator.NextIfMade(id, absl::Now(), &must_make);
  if (update == nullptr) {
    EXPECT_TRUE(must_make);
    update = replicator.Next(id, absl::Now());
  } else {
    EXPECT_FALSE(update->made_later());
  }
  EXPECT_TRUE(update != nullptr);
  if (update == nullptr) return true;
  EXPECT_EQ(update->encoded(), update->message().SerializeAsString());
  EXPECT_EQ(update->header().frame, update->message().frame());
  EXPECT_EQ(update->header().last_part, update->message().last_part());
  EXPECT_EQ(update->header().frames_skipped,
            update->message().frames_skipped());
  ApplyStrictly(update->message(), mirror);
  const bool done = update->message().snapshot_done();
  if (done) {
    EXPECT_EQ(*mirror, chains.published(update->message().frame()));
  }
  if (taken) *taken = std::move(update);
  return done;
}

// A world that changes everything between any two parts (faster than the
// stream carries it) still gets its snapshot finished when that is at most
// max_pending entities: what changed behind the first pass goes at once.
TEST(ReplicatorSnapshotTest, SnapshotsEndEvenWhenEverythingMovesEveryFrame) {
  Replicator replicator;
  MovingChains chains(replicator);
  const auto id = chains.Subscribe();
  State mirror;
  int parts = 1;
  for (; !TakeSnapshotPart(replicator, id, chains, &mirror); ++parts) {
    ASSERT_LT(parts, 1000) << "the snapshot does not end";
    chains.MoveAllAndPublish();
  }
  // One pass, then everything at once: about twice a still world's parts.
  EXPECT_LT(parts, 2 * MovingChains::kPartsAPass + 10);
}

// A snapshot's parts are made one at a time, each from the frame it is
// made at, however much changes behind the scan: what a pass left behind is
// sent at once only when it is max_pending entities at most. (Before, a pass
// that did not shrink was sent whole at once: with 50 subscribers joining a
// 1M world moving 5,000 entities a frame, 38 parts each, 1.9 GB.)
TEST(ReplicatorSnapshotTest, NoMoreThanMaxPendingIsMadeAhead) {
  Replicator replicator(/*max_pending=*/100);
  MovingChains chains(replicator);
  const auto id = chains.Subscribe();
  State mirror;
  // Everything moves between any two parts: passes, never all at once.
  for (int parts = 0; parts < 400; ++parts) {
    std::shared_ptr<const Outgoing> part;
    ASSERT_FALSE(TakeSnapshotPart(replicator, id, chains, &mirror, &part));
    EXPECT_EQ(part->message().frame(), chains.frame()) << "made ahead";
    chains.MoveAllAndPublish();
  }
  // Once the world stands still, it ends within two passes, at one frame.
  int parts = 1;
  for (; !TakeSnapshotPart(replicator, id, chains, &mirror); ++parts) {
    ASSERT_LT(parts, 1000) << "the snapshot does not end";
  }
  EXPECT_LE(parts, 2 * MovingChains::kPartsAPass + 2);
}

// A burst budget with room for one burst of MovingChains' whole world (65
// bytes an entity: BurstCopy).
std::shared_ptr<BurstBudget> RoomForOneBurst() {
  return std::make_shared<BurstBudget>(MovingChains::kEntities * 65 + 1000);
}

// Bursts past max_pending, which let a snapshot end while everything moves,
// take turns within the server's burst budget: one waits (making passes)
// while another's parts are held, and goes when they are sent.
TEST(ReplicatorSnapshotTest, BurstsTakeTurnsWithinTheBudget) {
  auto budget = RoomForOneBurst();
  Replicator replicator(/*max_pending=*/100, budget);
  MovingChains chains(replicator);
  const auto a = chains.Subscribe();
  const auto b = chains.Subscribe();
  State mirror_a, mirror_b;
  std::vector<std::shared_ptr<const Outgoing>> held;  // a's, unsent.
  bool a_done = false, b_done = false;
  int b_parts_while_held = 0;
  for (int round = 0; round < 2000 && !b_done; ++round) {
    if (!a_done) {
      std::shared_ptr<const Outgoing> part;
      a_done = TakeSnapshotPart(replicator, a, chains, &mirror_a, &part);
      held.push_back(std::move(part));
    } else if (!held.empty() && b_parts_while_held >= 400) {
      EXPECT_GT(budget->claimed(), 0u);
      held.clear();  // a's parts are sent: its claim goes back.
      EXPECT_EQ(budget->claimed(), 0u);
    }
    std::shared_ptr<const Outgoing> part;
    b_done = TakeSnapshotPart(replicator, b, chains, &mirror_b, &part);
    if (!held.empty() && a_done) {
      ++b_parts_while_held;
      ASSERT_FALSE(b_done) << "burst over budget";
      EXPECT_EQ(part->message().frame(), chains.frame()) << "made ahead";
    }
    chains.MoveAllAndPublish();
  }
  EXPECT_TRUE(a_done);
  EXPECT_GE(b_parts_while_held, 400);
  EXPECT_TRUE(b_done) << "b never had its turn";
  held.clear();
  EXPECT_EQ(budget->claimed(), 0u);  // b's parts are all taken and gone.
}

// A burst's copy is made with the lock released: a subscriber that goes
// meanwhile is sent nothing, and its claim on the budget goes back.
TEST(ReplicatorSnapshotTest, ASubscriberGoneWhileItsBurstIsCopied) {
  auto budget = RoomForOneBurst();
  Replicator replicator(/*max_pending=*/100, budget);
  MovingChains chains(replicator);
  const auto id = chains.Subscribe();
  bool gone = false;
  replicator.set_unlocked_for_testing([&] {
    if (gone) return;
    gone = true;
    replicator.Unsubscribe(id);
  });
  State mirror;
  // A pass a part at a time, then, everything having moved, a burst.
  for (int parts = 0; !gone; ++parts) {
    ASSERT_LT(parts, 1000) << "no burst";
    auto part = replicator.Next(id, absl::Now());
    if (gone) {
      EXPECT_TRUE(part == nullptr);
      break;
    }
    ASSERT_TRUE(part != nullptr);
    ApplyStrictly(part->message(), &mirror);
    chains.MoveAllAndPublish();
  }
  EXPECT_EQ(budget->claimed(), 0u);
  EXPECT_TRUE(replicator.Next(id, absl::Now()) == nullptr);
  EXPECT_TRUE(replicator.Subscribers(0, 10).empty());
}

// A frame over the message limit comes in parts for every kind of
// subscriber: one frame, numbered, the last marked, parents before children
// across parts, each creation with its matrix.
TEST_F(ReplicatorTest, BigFramesComeInPartsParentsFirst) {
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 50; ++e) scene.push_back({e, e > 1 ? 1u : 0u, {}});
  ASSERT_TRUE(world_.CreateMany(scene).ok());
  Publish();
  SubscriptionOptions whole, subtree, limited;
  whole.part_budget_bytes = subtree.part_budget_bytes =
      limited.part_budget_bytes = 4096;
  subtree.subtrees = {1};
  limited.max_rate_hz = 1000;
  std::vector<Replicator::SubscriptionId> ids;
  std::vector<State> mirrors(3);
  for (const SubscriptionOptions* o : {&whole, &subtree, &limited}) {
    ids.push_back(replicator_.Subscribe(*o, std::make_shared<CountingSink>()));
    Drain(replicator_, ids.back(), &mirrors[ids.size() - 1]);
  }
  // A forest of 3,000 under the scene, some re-parenting, some moves.
  std::mt19937 rng(7);
  std::vector<CreateOp> grow;
  for (EntityId e = 1000; e < 4000; ++e) {
    const EntityId parent =
        e == 1000 ? 1
                  : std::uniform_int_distribution<EntityId>(1000, e - 1)(rng);
    grow.push_back({e, parent, At(static_cast<float>(e))});
  }
  ASSERT_TRUE(world_.CreateMany(grow).ok());
  for (EntityId e = 2; e <= 20; ++e) ASSERT_TRUE(world_.Link(e, 1500 + e).ok());
  ASSERT_TRUE(world_.SetLocal(1, At(5)).ok());
  Publish();
  const uint64_t frame = world_.frame() - 1;

  for (size_t k = 0; k < ids.size(); ++k) {
    State& mirror = mirrors[k];
    std::set<EntityId> known;
    for (const auto& [e, entry] : mirror) known.insert(e);
    uint32_t expected_part = 0;
    bool last = false;
    while (auto update = replicator_.Next(ids[k], absl::InfiniteFuture())) {
      const v1::FrameUpdate& u = update->message();
      ASSERT_FALSE(last) << "a message after the last part";
      EXPECT_EQ(u.frame(), frame);
      EXPECT_EQ(u.part(), expected_part++);
      EXPECT_LE(u.ByteSizeLong(), 4096u + 64);
      std::set<EntityId> moved_here(u.moved().begin(), u.moved().end());
      for (int c = 0; c < u.created_size(); ++c) {
        EXPECT_TRUE(u.created_parent(c) == 0 ||
                    known.count(u.created_parent(c)))
            << "subscriber " << k << ": " << u.created(c)
            << " before its parent " << u.created_parent(c);
        EXPECT_TRUE(moved_here.count(u.created(c)));
        known.insert(u.created(c));
      }
      for (int r = 0; r < u.reparented_size(); ++r) {
        EXPECT_TRUE(known.count(u.reparented_parent(r)));
      }
      ApplyUpdate(u, &mirror);
      last = u.last_part();
    }
    EXPECT_TRUE(last);
    EXPECT_GT(expected_part, 10u) << "subscriber " << k;
    EXPECT_EQ(mirror, Snapshot(world_)) << "subscriber " << k;
  }
}

// Counted as they come and go, for the world's batches to read without the
// lock (they track their writers only while there are such subscribers).
TEST_F(ReplicatorTest, EchoFilteringSubscribersAreCounted) {
  SubscriptionOptions no_echo;
  no_echo.no_echo_client_id = "me";
  EXPECT_EQ(replicator_.echo_filtered_subscribers(), 0u);
  const auto a =
      replicator_.Subscribe(no_echo, std::make_shared<CountingSink>());
  const auto plain =
      replicator_.Subscribe({}, std::make_shared<CountingSink>());
  const auto b =
      replicator_.Subscribe(no_echo, std::make_shared<CountingSink>());
  EXPECT_EQ(replicator_.echo_filtered_subscribers(), 2u);
  replicator_.Unsubscribe(plain);
  replicator_.Unsubscribe(a);
  replicator_.Unsubscribe(a);  // Gone already: counted once.
  EXPECT_EQ(replicator_.echo_filtered_subscribers(), 1u);
  replicator_.Unsubscribe(b);
  EXPECT_EQ(replicator_.echo_filtered_subscribers(), 0u);
}

// A raw subscriber that filters its writer's echoes shares the frames its
// writer wrote nothing in with everyone else (O(1) a frame, where it used
// to note every move), and is sent its own message, without its echoes,
// for a frame its writer wrote in. (A compact one:
// EchoFiltersShareFramesThatMoveNothingTheyLag.)
TEST_F(ReplicatorTest, EchoFilteringSubscribersShareFramesTheirWriterSkipped) {
  ASSERT_TRUE(world_.CreateMany({{1, 0, {}}, {2, 0, {}}, {3, 1, {}}}).ok());
  Publish();
  SubscriptionOptions no_echo, compact_no_echo;
  no_echo.no_echo_client_id = compact_no_echo.no_echo_client_id = "me";
  compact_no_echo.compact_precision = 0x1p-10f;
  const auto plain =
      replicator_.Subscribe({}, std::make_shared<CountingSink>());
  const auto echo =
      replicator_.Subscribe(no_echo, std::make_shared<CountingSink>());
  const auto compact =
      replicator_.Subscribe(compact_no_echo, std::make_shared<CountingSink>());
  State a, b, c;
  Drain(replicator_, plain, &a);
  Drain(replicator_, echo, &b);
  Drain(replicator_, compact, &c);
  const auto publish = [&](EntityId e, float x, const std::string& writer) {
    ASSERT_TRUE(world_.SetLocal(e, At(x)).ok());
    world_.EndFrame(&changes_);
    replicator_.Publish(changes_, absl::Now(), {{e, writer}});
  };
  // Another writer's frame: one message for both raw subscribers.
  publish(2, 5, "other");
  auto to_plain = replicator_.Next(plain, absl::Now());
  auto to_echo = replicator_.Next(echo, absl::Now());
  auto to_compact = replicator_.Next(compact, absl::Now());
  ASSERT_NE(to_plain, nullptr);
  EXPECT_EQ(to_plain.get(), to_echo.get()) << "not shared";
  EXPECT_NE(to_compact->compact_precision(), 0);
  // Its own: 1, which it set, is not sent to it; 1's child, moved by it,
  // is.
  publish(1, 6, "me");
  to_plain = replicator_.Next(plain, absl::Now());
  to_echo = replicator_.Next(echo, absl::Now());
  ASSERT_NE(to_echo, nullptr);
  EXPECT_NE(to_plain.get(), to_echo.get());
  EXPECT_EQ(to_plain->message().moved_size(), 2);
  ASSERT_EQ(to_echo->message().moved_size(), 1);
  EXPECT_EQ(to_echo->message().moved(0), 3u);
  // Another writer's again, while the echo filterer is a frame behind:
  // shared frames kept, then folded.
  publish(2, 7, "other");
  publish(1, 8, "other");
  Drain(replicator_, plain, &a);
  Drain(replicator_, echo, &b);
  EXPECT_EQ(a, Snapshot(world_));
  EXPECT_EQ(b, Snapshot(world_));
}

// frames_skipped has one meaning on every path: frames that changed the view,
// folded into one message, less one.
TEST_F(ReplicatorTest, FramesSkippedCountsOnlyFramesThatChangedTheView) {
  ASSERT_TRUE(world_.CreateMany({{1, 0, {}}, {2, 1, {}}, {3, 0, {}}}).ok());
  Publish();
  SubscriptionOptions subtree, no_echo;
  subtree.subtrees = {1};
  no_echo.no_echo_client_id = "me";
  const auto filtered =
      replicator_.Subscribe(subtree, std::make_shared<CountingSink>());
  const auto echo =
      replicator_.Subscribe(no_echo, std::make_shared<CountingSink>());
  const auto whole =
      replicator_.Subscribe({}, std::make_shared<CountingSink>());
  State a, b, c;
  Drain(replicator_, filtered, &a);
  Drain(replicator_, echo, &b);
  Drain(replicator_, whole, &c);
  // Keeping up, while frames change only what the filter does not see.
  for (int f = 0; f < 20; ++f) {
    ASSERT_TRUE(world_.SetLocal(3, At(static_cast<float>(f))).ok());
    Publish();
    Drain(replicator_, echo, &b);
    Drain(replicator_, whole, &c);
  }
  EXPECT_EQ(Drain(replicator_, filtered, &a), 0);
  ASSERT_TRUE(world_.SetLocal(2, At(1)).ok());
  Publish();
  for (auto id : {filtered, echo, whole}) {
    auto update = replicator_.Next(id, absl::InfiniteFuture());
    ASSERT_NE(update, nullptr);
    EXPECT_EQ(update->message().frames_skipped(), 0u) << id;
  }
  // Falling behind by five frames that change the view.
  for (int f = 0; f < 5; ++f) {
    ASSERT_TRUE(world_.SetLocal(2, At(static_cast<float>(f + 2))).ok());
    Publish();
  }
  for (auto id : {filtered, echo, whole}) {
    auto update = replicator_.Next(id, absl::InfiniteFuture());
    ASSERT_NE(update, nullptr);
    EXPECT_EQ(update->message().frames_skipped(), 4u) << id;
  }
}

// A subscriber that stops reading holds at most max_pending changes; when it
// reads again owing more, it is resent its view whole, and converges exactly.
TEST(ReplicatorLagTest, ALaggardCostsBoundedMemoryAndResyncs) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 10'000; ++e) {
    scene.push_back({e, e % 100 == 1 ? 0 : e - 1, At(1)});
  }
  ASSERT_TRUE(world.CreateMany(scene).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
  SubscriptionOptions subtree;
  subtree.subtrees = {101};
  const auto whole = replicator.Subscribe({}, std::make_shared<CountingSink>());
  const auto part =
      replicator.Subscribe(subtree, std::make_shared<CountingSink>());
  State a, b;
  Drain(replicator, whole, &a);
  Drain(replicator, part, &b);
  std::mt19937 rng(3);
  for (int f = 0; f < 50; ++f) {
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < 200; ++k) {
      const EntityId e =
          std::uniform_int_distribution<EntityId>(1, 10'000)(rng);
      if (world.Has(e)) moves.push_back({e, At(static_cast<float>(f))});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    if (f == 25) {
      ASSERT_TRUE(world.Destroy(150).ok());  // In the subtree.
    }
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
    // The view notes each frame, within max_pending. The whole world's
    // subscriber notes nothing: it is owed what changed from the state,
    // entities the frames listed that it reports, at most the world's.
    for (const SubscriberInfo& stats : replicator.Subscribers()) {
      EXPECT_LE(stats.pending, stats.id == whole ? 10'000u : 1000u);
    }
  }
  v1::FrameUpdate last;
  Drain(replicator, whole, &a, &last);
  EXPECT_TRUE(last.snapshot());
  EXPECT_EQ(a, Snapshot(world));
  Drain(replicator, part, &b);
  State expected;
  for (const auto& [e, entry] : Snapshot(world)) {
    if (e >= 101 && e <= 200 && world.Has(e)) {
      bool under = false;
      for (EntityId x = e; x != 0; x = *world.Parent(x)) under |= x == 101;
      if (under) expected[e] = entry;
    }
  }
  EXPECT_EQ(b, expected);
}

// A subscriber's end of its stream: each message parsed from its bytes, its
// compact moves (if any) decoded against the poses held, as a Mirror does,
// then applied; and of its own (unshared) compact messages' entries, how
// many were deltas and how many whole.
struct CompactReceiver {
  void Take(const Outgoing& out, bool own) {
    v1::FrameUpdate u;
    ASSERT_TRUE(u.ParseFromString(std::string(out.encoded())));
    if (out.compact_precision() > 0 && own && !u.snapshot()) {
      ASSERT_TRUE(u.moved().empty()) << "moves come compact";
      v1::CompactMovesParser parser(u);
      ASSERT_TRUE(parser.Start().ok());
      v1::CompactMovesParser::Entry entry;
      for (uint64_t k = 0; k < parser.count(); ++k) {
        ASSERT_TRUE(parser.Read(entry).ok());
        ++(entry.is_delta() ? own_deltas : own_wholes);
      }
    }
    const absl::Status decoded = reader.Decode(u);
    ASSERT_TRUE(decoded.ok()) << decoded;
    ApplyUpdate(u, &state);
  }
  // Drains what is due; `own`: whether its messages are its own (folds, a
  // filtered view's), not a frame's shared ones.
  void Drain(Replicator& r, Replicator::SubscriptionId id, bool own) {
    while (auto out = r.Next(id, absl::InfiniteFuture())) {
      Take(*out, own || out->header().frames_skipped > 0);
    }
  }
  v1::CompactMovesReader reader;
  State state;
  int own_deltas = 0;
  int own_wholes = 0;
};

// Within the compact encoding's bounds (see compact_moves.h) of the world.
void ExpectCompactMatch(const State& got, const State& truth, float precision) {
  ASSERT_EQ(got.size(), truth.size());
  for (const auto& [e, entry] : truth) {
    ASSERT_TRUE(got.contains(e)) << e;
    const Entry& mine = got.at(e);
    EXPECT_EQ(mine.parent, entry.parent) << e;
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(mine.world.m[4 * i + 3], entry.world.m[4 * i + 3],
                  precision / 2 + 1e-4f)
          << e;
      for (int j = 0; j < 3; ++j) {
        EXPECT_NEAR(mine.world.m[4 * i + j], entry.world.m[4 * i + j], 2e-4f)
            << e;
      }
    }
  }
}

// Roots 1 to `roots`, root r with one child, r + roots, each at pose():
// created in `world` and published as `replicator`'s first frame at `time`.
template <typename Pose>
void PublishRootsWithAChildEach(EntityId roots, Pose pose, World& world,
                                FrameChanges& changes, Replicator& replicator,
                                absl::Time time = absl::Now()) {
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 2 * roots; ++e) {
    scene.push_back({e, e > roots ? e - roots : kNoEntity, pose()});
  }
  ASSERT_TRUE(world.CreateMany(scene).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, time);
}

// 100 roots of 99 leaves each (ids 1 to 10,000), published.
void PublishLeafScene(World& world, FrameChanges& changes,
                      Replicator& replicator) {
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 10'000; ++e) {
    scene.push_back({e, e % 100 == 1 ? 0 : (e - 1) / 100 * 100 + 1, At(1)});
  }
  ASSERT_TRUE(world.CreateMany(scene).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
}

// Frame `f` of 40 on the leaf scene, besides its moves: over them, a leaf
// destroyed (5,002), one created (20,000), one re-parented (6,003), and an
// id destroyed and created again (7,004, under another parent).
void ChangeLeafSceneStructure(World& world, int f) {
  if (f == 10) {
    ASSERT_TRUE(world.Destroy(5'002).ok());
  }
  if (f == 20) {
    ASSERT_TRUE(world.Create(20'000, 201, At(7)).ok());
  }
  if (f == 25) {
    ASSERT_TRUE(world.Link(6'003, 1).ok());
  }
  if (f == 30) {
    ASSERT_TRUE(world.Destroy(7'004).ok());
  }
  if (f == 35) {
    ASSERT_TRUE(world.Create(7'004, 9'901, At(3)).ok());
  }
}

// A full-rate subscriber that stops reading, on a world whose moves keep to a
// few entities, owes those few however long it stalls: when it reads again
// it is sent them (and what was destroyed, created and re-parented
// meanwhile), found from the published state, not its view whole. Meanwhile
// a frame costs it nothing per entity. So whether its kept frames pass
// max_pending first, or (max_pending above the world's size) the world:
// then a compact one folds them instead, and is sent deltas.
void ExpectStalledSubscribersSentWhatChanged(size_t max_pending) {
  constexpr float kPrecision = 0x1p-10f;
  World world;
  FrameChanges changes;
  Replicator replicator(max_pending);
  PublishLeafScene(world, changes, replicator);
  SubscriptionOptions compact;
  compact.compact_precision = kPrecision;
  const auto raw = replicator.Subscribe({}, std::make_shared<CountingSink>());
  const auto packed =
      replicator.Subscribe(compact, std::make_shared<CountingSink>());
  State raw_end;
  CompactReceiver packed_end;
  Drain(replicator, raw, &raw_end);
  packed_end.Drain(replicator, packed, /*own=*/false);
  // 40 frames, each moving the same 300 leaves: 12,000 entities listed, past
  // max_pending or the world, but 300 distinct. Besides: a leaf destroyed,
  // one created, one re-parented, and an id destroyed and created again.
  for (int f = 0; f < 40; ++f) {
    std::vector<SetLocalOp> moves;
    for (EntityId e = 2; e <= 304; ++e) {
      if (e % 100 != 1) moves.push_back({e, At(static_cast<float>(f) + 0.3f)});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    ChangeLeafSceneStructure(world, f);
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  }
  v1::FrameUpdate last;
  EXPECT_EQ(Drain(replicator, raw, &raw_end, &last), 1);
  EXPECT_FALSE(last.snapshot());
  EXPECT_EQ(last.frames_skipped(), 39u);
  // The 300 moved; the one created, its matrix among the moved; the
  // destroyed one; and two re-parented and moved: the one linked elsewhere,
  // and the id destroyed and created again, which to the subscriber is its
  // entity under another parent.
  EXPECT_EQ(last.created_size(), 1);
  EXPECT_EQ(last.destroyed_size(), 1);
  EXPECT_EQ(last.reparented_size(), 2);
  EXPECT_EQ(last.moved_size(), 303);
  EXPECT_EQ(raw_end, Snapshot(world));
  packed_end.Drain(replicator, packed, /*own=*/false);
  if (max_pending < world.size()) {
    // Its entries whole: what it holds of them is not known.
    EXPECT_EQ(packed_end.own_wholes, 303);
  } else {
    // Folded: the moved coded against what it holds; the three it holds
    // no pose of (created, or noted first as re-parented or destroyed)
    // whole.
    EXPECT_EQ(packed_end.own_deltas, 300);
    EXPECT_EQ(packed_end.own_wholes, 3);
  }
  ExpectCompactMatch(packed_end.state, Snapshot(world), kPrecision);
}

TEST(ReplicatorLagTest, AStalledSubscriberOwedFewEntitiesIsSentThoseAlone) {
  ExpectStalledSubscribersSentWhatChanged(/*max_pending=*/1000);
}

TEST(ReplicatorLagTest, AStalledSubscriberOfASmallerWorldIsSentWhatChanged) {
  ExpectStalledSubscribersSentWhatChanged(/*max_pending=*/1 << 20);
}

// A stalled subscriber of the whole world owed more than max_pending
// entities is resent its view whole, as a snapshot; but one that accepts a
// snapshot keeping its view is streamed only what changed that way: the
// destroyed it had, the created it lacks, the re-parented and the moved,
// each once, and nothing else.
TEST(ReplicatorLagTest, AStalledSubscriberOwedMoreThanMaxPendingKeepsItsView) {
  constexpr float kPrecision = 0x1p-10f;
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  PublishLeafScene(world, changes, replicator);
  SubscriptionOptions keeps;
  keeps.accepts_kept_view_snapshots = true;
  keeps.part_budget_bytes = 16'000;  // About 220 entities a part.
  SubscriptionOptions keeps_compact = keeps;
  keeps_compact.compact_precision = kPrecision;
  const auto whole = replicator.Subscribe({}, std::make_shared<CountingSink>());
  const auto kept =
      replicator.Subscribe(keeps, std::make_shared<CountingSink>());
  const auto packed =
      replicator.Subscribe(keeps_compact, std::make_shared<CountingSink>());
  State whole_end, kept_end;
  CompactReceiver packed_end;
  Drain(replicator, whole, &whole_end);
  Drain(replicator, kept, &kept_end);
  packed_end.Drain(replicator, packed, /*own=*/false);
  // 40 frames, each moving 50 leaves of its own root: 2,000 distinct, past
  // max_pending. Besides: a leaf destroyed, one created, one re-parented,
  // and an id destroyed and created again.
  for (int f = 0; f < 40; ++f) {
    std::vector<SetLocalOp> moves;
    const EntityId root = 100 * static_cast<EntityId>(f) + 1;
    for (EntityId e = root + 1; e <= root + 50; ++e) {
      moves.push_back({e, At(static_cast<float>(f) + 0.3f)});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    ChangeLeafSceneStructure(world, f);
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  }
  // The one that does not accept it: its view whole.
  int created = 0;
  while (auto out = replicator.Next(whole, absl::InfiniteFuture())) {
    const v1::FrameUpdate& u = out->message();
    EXPECT_TRUE(u.snapshot());
    EXPECT_FALSE(u.keeps_view());
    created += u.created_size();
    ApplyUpdate(u, &whole_end);
  }
  EXPECT_EQ(created, 10'000);
  EXPECT_EQ(whole_end, Snapshot(world));
  // The one that does: what changed, in parts.
  int parts = 0, destroyed = 0, reparented = 0, moved = 0;
  created = 0;
  v1::FrameUpdate u;
  while (auto out = replicator.Next(kept, absl::InfiniteFuture())) {
    u = out->message();
    EXPECT_TRUE(u.snapshot());
    EXPECT_TRUE(u.keeps_view());
    EXPECT_EQ(u.part(), static_cast<uint32_t>(parts++));
    destroyed += u.destroyed_size();
    created += u.created_size();
    reparented += u.reparented_size();
    moved += u.moved_size();
    ApplyStrictly(u, &kept_end);
  }
  EXPECT_TRUE(u.snapshot_done());
  EXPECT_EQ(u.frames_skipped(), 39u);
  EXPECT_GT(parts, 5);
  EXPECT_EQ(destroyed, 1);
  EXPECT_EQ(created, 1);
  // The one linked elsewhere, and the id destroyed and created again, which
  // to the subscriber is its entity under another parent.
  EXPECT_EQ(reparented, 2);
  EXPECT_EQ(moved, 2'000 + 3);  // With the created and the re-parented.
  EXPECT_EQ(kept_end, Snapshot(world));
  // The compact one: its entries whole, within the encoding's bounds.
  packed_end.Drain(replicator, packed, /*own=*/false);
  ExpectCompactMatch(packed_end.state, Snapshot(world), kPrecision);
  EXPECT_EQ(packed_end.reader.held(), world.size());
  // And each follows the frames from there.
  ASSERT_TRUE(world.SetLocal(9'999, At(5)).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
  EXPECT_EQ(Drain(replicator, kept, &kept_end, &u), 1);
  EXPECT_FALSE(u.snapshot());
  EXPECT_EQ(kept_end, Snapshot(world));
  packed_end.Drain(replicator, packed, /*own=*/false);
  ExpectCompactMatch(packed_end.state, Snapshot(world), kPrecision);
}

// One of the whole world that stops partway through a message (a frame in
// parts, its first taken) keeps its view too, at full rate or limited.
// Limited, it is owed what changed from the state at once: the frame it
// stops at must still find its destructions in the log (it was resent its
// view whole when the log reached back only to that frame, so that it noted
// each frame's changes past max_pending). At full rate it notes the frames,
// then past max_pending is owed what they changed from the state (it was
// resent its view whole then).
void ExpectStoppedMidMessageKeepsItsView(double max_rate_hz) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  PublishLeafScene(world, changes, replicator);
  absl::Time now = absl::Now();
  const auto publish = [&] {
    now += absl::Milliseconds(10);
    world.EndFrame(&changes);
    replicator.Publish(changes, now);
  };
  SubscriptionOptions keeps;
  keeps.accepts_kept_view_snapshots = true;
  keeps.part_budget_bytes = 16'000;  // About 220 entities a part.
  keeps.max_rate_hz = max_rate_hz;
  const auto id = replicator.Subscribe(keeps, std::make_shared<CountingSink>());
  State end;
  while (auto out = replicator.Next(id, now)) ApplyUpdate(out->message(), &end);
  // A frame of 1,000 moves, in parts: the first is taken, then none.
  std::vector<SetLocalOp> moves;
  for (EntityId e = 1; e <= 10'000; e += 10) moves.push_back({e, At(2)});
  ASSERT_TRUE(world.SetLocals(moves).ok());
  now += absl::Seconds(1);  // Its message due.
  publish();
  const std::shared_ptr<const Outgoing> first = replicator.Next(id, now);
  ASSERT_NE(first, nullptr);
  ASSERT_FALSE(first->message().last_part());
  ApplyUpdate(first->message(), &end);
  // 40 frames of 50 moves each (2,000 distinct, past max_pending), with the
  // leaf scene's destructions, creations and re-parenting.
  for (int f = 0; f < 40; ++f) {
    moves.clear();
    const EntityId root = 100 * static_cast<EntityId>(f) + 1;
    for (EntityId e = root + 1; e <= root + 50; ++e) {
      moves.push_back({e, At(static_cast<float>(f) + 0.3f)});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    ChangeLeafSceneStructure(world, f);
    publish();
  }
  // The rest of its message, then what changed as a snapshot keeping its
  // view.
  int kept_view_parts = 0;
  now += absl::Seconds(1);
  while (auto out = replicator.Next(id, now)) {
    const v1::FrameUpdate& u = out->message();
    EXPECT_FALSE(u.snapshot() && !u.keeps_view()) << "resent whole";
    kept_view_parts += u.keeps_view();
    ApplyStrictly(u, &end);
  }
  EXPECT_GT(kept_view_parts, 0);
  EXPECT_EQ(end, Snapshot(world));
  EXPECT_EQ(replicator.stream_stats().views_resent_whole, 0u);
}

TEST(ReplicatorLagTest, ARateLimitedSubscriberStoppedMidMessageKeepsItsView) {
  ExpectStoppedMidMessageKeepsItsView(/*max_rate_hz=*/30);
}

TEST(ReplicatorLagTest, AFullRateSubscriberStoppedMidMessageKeepsItsView) {
  ExpectStoppedMidMessageKeepsItsView(/*max_rate_hz=*/0);
}

// The world's stream counts: every message taken, the frames they fold,
// and which subscribers were sent their view again, whole or kept; not the
// joining snapshots. (Bytes and cut-off streams are counted by the server's
// streams: tests/server_test.cc.)
TEST(ReplicatorLagTest, StreamStatsCountMessagesFoldsAndViewsSentAgain) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  PublishLeafScene(world, changes, replicator);
  SubscriptionOptions keeps;
  keeps.accepts_kept_view_snapshots = true;
  const auto whole = replicator.Subscribe({}, std::make_shared<CountingSink>());
  const auto kept =
      replicator.Subscribe(keeps, std::make_shared<CountingSink>());
  EXPECT_EQ(replicator.stream_stats().subscribers_in_snapshot, 2u);
  uint64_t messages = 0, folded = 0;
  const auto take = [&](Replicator::SubscriptionId id) {
    while (auto out = replicator.Next(id, absl::InfiniteFuture())) {
      ++messages;
      folded += out->message().frames_skipped();
    }
  };
  take(whole);
  take(kept);
  StreamStats stats = replicator.stream_stats();
  EXPECT_EQ(stats.messages, messages);
  EXPECT_EQ(stats.subscribers_in_snapshot, 0u);
  EXPECT_EQ(stats.views_resent_whole, 0u);
  EXPECT_EQ(stats.kept_view_snapshots, 0u);
  // Three frames each taken: nothing folded. Then 40 untaken, moving 2,000
  // distinct entities, past max_pending.
  const auto move = [&](int f, EntityId first, EntityId count) {
    std::vector<SetLocalOp> moves;
    for (EntityId e = first; e < first + count; ++e) {
      moves.push_back({e, At(static_cast<float>(f) + 0.5f)});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  };
  for (int f = 0; f < 3; ++f) {
    move(f, 2, 10);
    take(whole);
    take(kept);
  }
  stats = replicator.stream_stats();
  EXPECT_EQ(stats.messages, messages);
  EXPECT_EQ(stats.frames_folded, 0u);
  for (int f = 0; f < 40; ++f) {
    move(f, 100 * static_cast<EntityId>(f) + 2, 50);
  }
  // Owed, not yet being sent anything.
  EXPECT_EQ(replicator.stream_stats().subscribers_in_snapshot, 0u);
  take(whole);
  take(kept);
  stats = replicator.stream_stats();
  EXPECT_EQ(stats.messages, messages);
  EXPECT_EQ(stats.frames_folded, folded);
  EXPECT_EQ(folded, 2u * 39);  // Each folded 40 frames into one view.
  EXPECT_EQ(stats.views_resent_whole, 1u);
  EXPECT_EQ(stats.kept_view_snapshots, 1u);
  EXPECT_EQ(stats.subscribers_in_snapshot, 0u);
  // A 1 Hz subscriber's folds, which it asked for, are counted apart.
  SubscriptionOptions rated;
  rated.max_rate_hz = 1;
  const absl::Time t0 = absl::Now();
  const auto dashboard =
      replicator.Subscribe(rated, std::make_shared<CountingSink>());
  while (replicator.Next(dashboard, t0) != nullptr) ++messages;
  move(9, 2, 10);  // Its first frame, due at once; the next a second on.
  ASSERT_NE(replicator.Next(dashboard, t0), nullptr);
  ++messages;
  for (int f = 10; f < 15; ++f) move(f, 2, 10);
  EXPECT_EQ(replicator.Next(dashboard, t0 + absl::Milliseconds(500)), nullptr);
  const auto due = replicator.Next(dashboard, t0 + absl::Seconds(2));
  ASSERT_NE(due, nullptr);
  EXPECT_EQ(due->message().frames_skipped(), 4u);
  stats = replicator.stream_stats();
  EXPECT_EQ(stats.messages, messages + 1);
  EXPECT_EQ(stats.frames_folded, folded);
  EXPECT_EQ(stats.frames_folded_by_rate_limit, 4u);
  // Each subscriber's counts are its part of the world's.
  const std::vector<SubscriberInfo> subs = replicator.Subscribers();
  ASSERT_EQ(subs.size(), 3u);
  // By id (random, unguessable): each found by its own.
  const auto of = [&](Replicator::SubscriptionId id) -> const SubscriberInfo& {
    return *std::find_if(subs.begin(), subs.end(),
                         [&](const SubscriberInfo& s) { return s.id == id; });
  };
  ASSERT_EQ(std::count_if(subs.begin(), subs.end(),
                          [&](const SubscriberInfo& s) {
                            return s.id == whole || s.id == kept ||
                                   s.id == dashboard;
                          }),
            3);
  EXPECT_TRUE(
      std::is_sorted(subs.begin(), subs.end(),
                     [](const SubscriberInfo& a, const SubscriberInfo& b) {
                       return a.id < b.id;
                     }));
  const SubscriberInfo& w = of(whole);
  const SubscriberInfo& k = of(kept);
  const SubscriberInfo& d = of(dashboard);
  EXPECT_EQ(w.messages + k.messages + d.messages, stats.messages);
  EXPECT_EQ(w.frames_folded, 39u);
  EXPECT_EQ(k.frames_folded, 39u);
  EXPECT_EQ(d.frames_folded, 4u);
  EXPECT_EQ(w.views_resent_whole, 1u);
  EXPECT_EQ(w.kept_view_snapshots, 0u);
  EXPECT_EQ(k.views_resent_whole, 0u);
  EXPECT_EQ(k.kept_view_snapshots, 1u);
  EXPECT_TRUE(k.accepts_kept_view_snapshots);
  EXPECT_EQ(d.max_rate_hz, 1.0);
  // Owed the six frames of 10 moves since they last took (kept frames'
  // entities counted once a frame); the dashboard took them.
  EXPECT_EQ(w.pending, 60u);
  EXPECT_EQ(k.pending, 60u);
  EXPECT_EQ(d.pending, 0u);
  for (const SubscriberInfo& s : subs) EXPECT_FALSE(s.in_snapshot);
  // A page at a time, by id.
  const std::vector<SubscriberInfo> first = replicator.Subscribers(0, 2);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[1].id, subs[1].id);
  const std::vector<SubscriberInfo> next =
      replicator.Subscribers(subs[1].id, 2);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, subs[2].id);
  EXPECT_TRUE(replicator.Subscribers(subs[2].id, 2).empty());
}

// What a snapshot that keeps the view sends is found a chunk of slots at a
// time, the lock released between chunks, so frames are published in the
// midst of it: here by another thread, churning a world of 200,000 (four
// chunks) while a subscriber owed more than max_pending reads. Applied
// strictly, its view ends the published state exactly.
TEST(ReplicatorLagTest, AKeptViewFoundWhileAnotherThreadPublishesIsExact) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  constexpr EntityId kEntities = 200'000;
  std::vector<CreateOp> roots;
  for (EntityId e = 1; e <= kEntities; ++e) {
    roots.push_back({e, e % 10 == 1 ? 0 : (e - 1) / 10 * 10 + 1, At(0)});
  }
  ASSERT_TRUE(world.CreateMany(roots).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
  SubscriptionOptions options;
  options.accepts_kept_view_snapshots = true;
  const auto id =
      replicator.Subscribe(options, std::make_shared<CountingSink>());
  State mirror;
  while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
    ApplyStrictly(update->message(), &mirror);
  }
  std::mt19937 rng(3);
  const auto frame = [&](int moves) {
    std::vector<SetLocalOp> step;
    for (int k = 0; k < moves; ++k) {
      step.push_back({1 + rng() % kEntities, At(float(rng() % 100))});
    }
    world.SetLocals(step).IgnoreError();
    const EntityId e = 1 + rng() % kEntities;
    if (rng() % 2) {
      world.Destroy(e, DestroyMode::kReparentChildren).IgnoreError();
    } else if (!world.Has(e)) {
      world.Create(e, rng() % 3 ? 1 + rng() % kEntities : 0, At(1))
          .IgnoreError();
    }
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  };
  // It stalls past max_pending: about 20,000 changed, all over the slots.
  for (int f = 0; f < 10; ++f) frame(2000);
  std::atomic<bool> done = false;
  std::thread publisher([&] {
    for (int f = 0; f < 300; ++f) frame(300);
    done = true;
  });
  bool kept = false;
  while (!done) {
    while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
      kept = kept || update->message().keeps_view();
      ApplyStrictly(update->message(), &mirror);
    }
  }
  publisher.join();
  while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
    ApplyStrictly(update->message(), &mirror);
  }
  EXPECT_TRUE(kept);
  EXPECT_EQ(mirror, Snapshot(world));
}

// A subtree view's membership walk, and a kept view's scan, run a chunk at
// a time, the lock released between chunks. Meanwhile another call for the
// same subscriber may take the work on (finish it and send the first part)
// or the subscriber may go. The call that yielded then sends nothing, and
// the stream goes on from the other call's part, exactly.
TEST(ReplicatorLagTest, AMembershipWalkTakenOnOrEndedBetweenChunks) {
  for (const bool unsubscribe : {false, true}) {
    StreamingForest forest(/*seed=*/7, /*max_pending=*/65'536);
    auto& [world, rng, next_id, replicator, published] = forest;
    replicator.set_membership_walk_chunk_for_testing(4);
    std::set<EntityId> roots;
    for (int k = 0; k < 20; ++k) roots.insert(1 + rng() % 3000);
    const auto in_view = [&](EntityId e) {
      return InFilter(Snapshot(world), e, {}, roots);
    };
    Replicator::SubscriptionId id = 0;
    State mirror;
    int chunks = 0;
    replicator.set_unlocked_for_testing([&] {
      if (++chunks != 1) return;
      if (unsubscribe) {
        replicator.Unsubscribe(id);
        return;
      }
      // Its own chunks come here too, and go on.
      auto part = replicator.Next(id, absl::InfiniteFuture());
      ASSERT_TRUE(part != nullptr);
      EXPECT_TRUE(part->message().snapshot());
      ApplyStrictly(part->message(), &mirror, in_view);
    });
    SubscriptionOptions options;
    options.subtrees.assign(roots.begin(), roots.end());
    id = replicator.Subscribe(options, std::make_shared<CountingSink>());
    EXPECT_TRUE(replicator.Next(id, absl::InfiniteFuture()) == nullptr);
    // Gone, it is walked no further.
    EXPECT_TRUE(unsubscribe ? chunks == 1 : chunks > 2) << chunks;
    while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
      ApplyStrictly(update->message(), &mirror, in_view);
    }
    if (unsubscribe) {
      EXPECT_TRUE(mirror.empty());
      EXPECT_TRUE(replicator.Subscribers(0, 10).empty());
    } else {
      EXPECT_EQ(mirror, Filtered(Snapshot(world), {}, roots));
    }
  }
}

// The same of a kept view's scan, 65,536 slots a chunk: another call takes
// it on, and the snapshot that keeps the view comes from that call.
TEST(ReplicatorLagTest, AKeptViewScanTakenOnBetweenChunks) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  constexpr EntityId kEntities = 200'000;
  std::vector<CreateOp> all;
  for (EntityId e = 1; e <= kEntities; ++e) all.push_back({e, 0, At(0)});
  ASSERT_TRUE(world.CreateMany(all).ok());
  const auto publish = [&] {
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  };
  publish();
  State mirror;
  int chunks = 0;
  bool kept = false;
  Replicator::SubscriptionId id = 0;
  const auto apply = [&](const v1::FrameUpdate& u) {
    kept = kept || u.keeps_view();
    ApplyStrictly(u, &mirror);
  };
  SubscriptionOptions options;
  options.accepts_kept_view_snapshots = true;
  id = replicator.Subscribe(options, std::make_shared<CountingSink>());
  while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
    apply(update->message());
  }
  // It stalls past max_pending: 20,000 moved, over all the slots.
  std::mt19937 rng(5);
  for (int f = 0; f < 10; ++f) {
    std::vector<SetLocalOp> step;
    for (int k = 0; k < 2000; ++k) {
      step.push_back({1 + rng() % kEntities, At(float(1 + rng() % 100))});
    }
    world.SetLocals(step).IgnoreError();
    publish();
  }
  replicator.set_unlocked_for_testing([&] {
    if (++chunks != 1) return;
    auto part = replicator.Next(id, absl::InfiniteFuture());
    ASSERT_TRUE(part != nullptr);
    apply(part->message());
  });
  EXPECT_TRUE(replicator.Next(id, absl::InfiniteFuture()) == nullptr);
  EXPECT_GT(chunks, 2);
  while (auto update = replicator.Next(id, absl::InfiniteFuture())) {
    apply(update->message());
  }
  EXPECT_TRUE(kept);
  EXPECT_EQ(mirror, Snapshot(world));
}

// A snapshot that keeps the view streams a part at a time while the world
// keeps changing, as any snapshot: applied strictly to the view the
// subscriber held (nothing created that it holds, nothing re-parented,
// moved or destroyed that it lacks; parents first), at snapshot_done it is
// the published state of that part's frame.
TEST_F(ReplicatorTest, SnapshotsThatKeepTheViewStreamWhileTheWorldChanges) {
  int kept_views = 0;
  constexpr uint32_t kSeeds = SeedsToRun(20);
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    StreamingForest forest(seed, /*max_pending=*/300);
    auto& [world, rng, next_id, replicator, published] = forest;
    const auto publish = [&] { forest.Publish(); };
    SubscriptionOptions options;
    options.accepts_kept_view_snapshots = true;
    options.part_budget_bytes = 2000;  // About 27 entities a part.
    const auto id =
        replicator.Subscribe(options, std::make_shared<CountingSink>());
    State mirror;
    while (auto update = replicator.Next(id, absl::Now())) {
      ApplyStrictly(update->message(), &mirror);
    }
    ASSERT_EQ(mirror, Snapshot(world));
    // It stalls while a few hundred roots move (each its subtree), with
    // some churn: more than max_pending entities change.
    for (int f = 0; f < 8; ++f) {
      for (int k = 0; k < 40; ++k) {
        world.SetLocal(1 + rng() % next_id, At(float(rng() % 100)))
            .IgnoreError();
      }
      Churn(world, rng, next_id);
      publish();
    }
    int parts = 0;
    bool kept = false;
    for (;;) {
      auto update = replicator.Next(id, absl::Now());
      ASSERT_TRUE(update != nullptr);
      const v1::FrameUpdate& u = update->message();
      ASSERT_TRUE(u.snapshot());
      EXPECT_EQ(u.part(), static_cast<uint32_t>(parts++));
      if (u.part() == 0) kept = u.keeps_view();
      EXPECT_EQ(u.keeps_view(), kept);
      ApplyStrictly(u, &mirror);
      if (u.snapshot_done()) {
        EXPECT_EQ(mirror, published.at(u.frame())) << "seed " << seed;
        break;
      }
      Churn(world, rng, next_id);
      publish();
    }
    kept_views += kept;
    // And deltas carry on from there.
    for (int f = 0; f < 5; ++f) {
      Churn(world, rng, next_id);
      publish();
    }
    while (auto update = replicator.Next(id, absl::Now())) {
      ApplyStrictly(update->message(), &mirror);
    }
    EXPECT_EQ(mirror, Snapshot(world)) << "seed " << seed;
  }
  // Most: others' destructions passed the log's max_pending.
  EXPECT_GE(kept_views, kSeeds * 3 / 4);
}

// A compact subscriber of a world smaller than max_pending that stops
// reading folds its kept frames once they pass the world's size (so that a
// laggard that reads is sent deltas), then notes each frame: until the
// frames noted list more than max_pending entities. Then it drops them (and
// what it held of them) and is owed what changed from the published state,
// noting nothing more, so a stall costs O(max_pending), not O(moved) every
// frame; and what it is sent then is what changed, whole, not its view.
TEST(ReplicatorLagTest, AStalledCompactSubscriberNotesAtMostMaxPending) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/3000);
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 1000; ++e) scene.push_back({e, 0, At(1)});
  ASSERT_TRUE(world.CreateMany(scene).ok());
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
  SubscriptionOptions compact;
  compact.compact_precision = 0x1p-10f;
  const auto id =
      replicator.Subscribe(compact, std::make_shared<CountingSink>());
  CompactReceiver end;
  end.Drain(replicator, id, /*own=*/false);
  // The same 300 a frame: past the world in 4 frames, then 10 more noted.
  for (int f = 0; f < 40; ++f) {
    std::vector<SetLocalOp> moves;
    for (EntityId e = 1; e <= 300; ++e) {
      moves.push_back({e, At(static_cast<float>(f) + 0.5f)});
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
    if (f == 6) {
      EXPECT_EQ(replicator.Subscribers()[0].pending, 300u);  // Folded, noting.
    }
  }
  // Owed from the state: what the frames listed, up to the world.
  EXPECT_EQ(replicator.Subscribers()[0].pending, 1000u);
  const auto first = replicator.Next(id, absl::InfiniteFuture());
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->message().snapshot());
  EXPECT_EQ(first->message().moved_size(), 300);
  end.Take(*first, /*own=*/false);
  end.Drain(replicator, id, /*own=*/false);
  ExpectCompactMatch(end.state, Snapshot(world), 0x1p-10f);
  EXPECT_EQ(replicator.stream_stats().views_resent_whole, 0u);
}

// Compact subscribers that are sent their own messages (one that falls
// behind, a filtered view) are sent deltas against what each holds, as the
// shared frames are, through moves, re-parenting, and entities destroyed and
// created again under the same id unseen; each ends within the encoding's
// bounds, so no delta was coded against a pose it did not hold. One that
// filters echoes is sent its own messages whole: its view lags where its
// writes were not echoed.
TEST(ReplicatorCompactTest, FoldsAreDeltasAgainstWhatEachSubscriberHolds) {
  World world;
  FrameChanges changes;
  Replicator replicator;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  const auto pose = [&] {
    Transform t;
    t.position = {u(rng) * 100, u(rng) * 100, u(rng) * 100};
    t.rotation = glm::normalize(glm::quat(u(rng), u(rng), u(rng), u(rng)));
    return t;
  };
  constexpr EntityId kRoots = 200;  // Roots 1-200, root r's child r + 200.
  PublishRootsWithAChildEach(kRoots, pose, world, changes, replicator);

  constexpr float kPrecision = 0x1p-10f;
  SubscriptionOptions compact;
  compact.compact_precision = kPrecision;
  SubscriptionOptions subtree = compact;
  subtree.subtrees = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  SubscriptionOptions no_echo = compact;
  no_echo.no_echo_client_id = "me";
  const auto sink = std::make_shared<CountingSink>();
  const auto ahead = replicator.Subscribe(compact, sink);
  const auto behind = replicator.Subscribe(compact, sink);
  const auto filtered = replicator.Subscribe(subtree, sink);
  const auto echoing = replicator.Subscribe(no_echo, sink);
  CompactReceiver ahead_end, behind_end, filtered_end, echoing_end;
  for (int f = 0; f < 300; ++f) {
    FrameWriters writers;
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < 60; ++k) {
      const EntityId e = 1 + rng() % (2 * kRoots);
      if (!world.Has(e)) continue;
      Transform t = *world.Local(e);
      t.position += glm::vec3(u(rng), u(rng), u(rng));
      t.rotation = glm::normalize(
          glm::angleAxis(0.1f * u(rng), glm::vec3(0, 0, 1)) * t.rotation);
      moves.push_back({e, t});
      writers[e] = k % 3 == 0 ? "me" : "";
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    // Children go and come back under the same id, perhaps elsewhere.
    const EntityId child = kRoots + 1 + rng() % kRoots;
    if (f % 5 == 0 && world.Has(child)) {
      ASSERT_TRUE(world.Destroy(child).ok());
    } else if (f % 5 == 2 && !world.Has(child)) {
      ASSERT_TRUE(world.Create(child, 1 + rng() % kRoots, pose()).ok());
    }
    if (f % 7 == 0) {
      const EntityId moved = kRoots + 1 + rng() % kRoots;
      if (world.Has(moved)) {
        ASSERT_TRUE(world.Link(moved, 1 + rng() % kRoots).ok());
      }
    }
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now(), writers);
    ahead_end.Drain(replicator, ahead, /*own=*/false);
    // Behind by more than the world at times: kept frames then fold.
    if (f % 9 == 0) behind_end.Drain(replicator, behind, /*own=*/false);
    if (f % 3 == 0) filtered_end.Drain(replicator, filtered, /*own=*/true);
    if (f % 4 == 0) echoing_end.Drain(replicator, echoing, /*own=*/false);
  }
  ahead_end.Drain(replicator, ahead, false);
  behind_end.Drain(replicator, behind, false);
  filtered_end.Drain(replicator, filtered, true);
  echoing_end.Drain(replicator, echoing, false);

  const State truth = Snapshot(world);
  ExpectCompactMatch(ahead_end.state, truth, kPrecision);
  ExpectCompactMatch(behind_end.state, truth, kPrecision);
  State in_view;
  for (const auto& [e, entry] : truth) {
    const EntityId root = entry.parent == kNoEntity ? e : entry.parent;
    if (root <= 10) in_view[e] = entry;
  }
  ExpectCompactMatch(filtered_end.state, in_view, kPrecision);
  EXPECT_GT(echoing_end.state.size(), 0u);  // Its view lags; whole, though.
  // Own messages: deltas but for the entities new to the subscriber and
  // the re-parented (whose first note is not a move).
  EXPECT_GT(behind_end.own_deltas, 9 * behind_end.own_wholes);
  EXPECT_GT(filtered_end.own_deltas, 9 * filtered_end.own_wholes);
  EXPECT_GT(echoing_end.own_wholes, 0);
  EXPECT_EQ(echoing_end.own_deltas, 0);
  RecordProperty("behind_deltas", behind_end.own_deltas);
  RecordProperty("behind_wholes", behind_end.own_wholes);
  RecordProperty("filtered_deltas", filtered_end.own_deltas);
  RecordProperty("filtered_wholes", filtered_end.own_wholes);
}

// Three subscribers, their first messages taken: compact (plain), raw
// filtering "me"'s echoes, and compact filtering them, with their ends.
struct EchoFilters {
  static constexpr float kPrecision = 0x1p-10f;

  explicit EchoFilters(Replicator& replicator) {
    SubscriptionOptions compact, raw_no_echo;
    compact.compact_precision = kPrecision;
    raw_no_echo.no_echo_client_id = "me";
    SubscriptionOptions compact_no_echo = compact;
    compact_no_echo.no_echo_client_id = "me";
    const auto sink = std::make_shared<CountingSink>();
    plain = replicator.Subscribe(compact, sink);
    raw = replicator.Subscribe(raw_no_echo, sink);
    echoing = replicator.Subscribe(compact_no_echo, sink);
    plain_end.Drain(replicator, plain, false);
    raw_end.Drain(replicator, raw, false);
    echoing_end.Drain(replicator, echoing, false);
  }

  Replicator::SubscriptionId plain, raw, echoing;
  CompactReceiver plain_end, raw_end, echoing_end;
};

// A compact subscriber that filters its writer's echoes shares a frame when
// its writer wrote nothing in it and it moves nothing whose echo the
// subscriber was not sent (what it holds of those is not what the frame's
// deltas are coded against); else it is sent its own message. Either way it
// ends where a raw one with the same filter does, within the encoding's
// bounds.
TEST(ReplicatorCompactTest, EchoFiltersShareFramesThatMoveNothingTheyLag) {
  World world;
  FrameChanges changes;
  Replicator replicator;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1, 1);
  constexpr EntityId kRoots = 200;  // Roots 1-200, root r's child r + 200.
  PublishRootsWithAChildEach(
      kRoots, [&] { return At(u(rng)); }, world, changes, replicator);

  EchoFilters subs(replicator);
  constexpr float kPrecision = EchoFilters::kPrecision;
  int shared = 0, own = 0;
  for (int f = 0; f < 400; ++f) {
    // "me" writes in one frame in four, a few entities; physics the rest.
    FrameWriters writers;
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < (f % 4 == 0 ? 3 : 8); ++k) {
      const EntityId e = 1 + rng() % (2 * kRoots);
      moves.push_back({e, At(u(rng) * 100)});
      writers[e] = f % 4 == 0 ? "me" : "physics";
    }
    ASSERT_TRUE(world.SetLocals(moves).ok());
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now(), writers);
    auto to_plain = replicator.Next(subs.plain, absl::InfiniteFuture());
    ASSERT_NE(to_plain, nullptr);
    subs.plain_end.Take(*to_plain, false);
    // The echo filters read every frame, or fall a frame behind.
    if (f % 7 == 3) continue;
    while (auto out = replicator.Next(subs.echoing, absl::InfiniteFuture())) {
      if (out.get() == to_plain.get()) {
        ++shared;
      } else {
        ++own;
      }
      subs.echoing_end.Take(*out, false);
    }
    subs.raw_end.Drain(replicator, subs.raw, false);
    ExpectCompactMatch(subs.echoing_end.state, subs.raw_end.state, kPrecision);
    ASSERT_FALSE(HasFailure()) << "frame " << f;
  }
  // The filter worked: the raw one lags the world where only "me" moved.
  EXPECT_NE(subs.raw_end.state, Snapshot(world));
  EXPECT_GT(shared, 50);
  EXPECT_GT(own, 50);
  RecordProperty("shared", shared);
  RecordProperty("own", own);
}

// What a compact echo filter lags on is bounded by max_pending: past it the
// filter stops tracking, and shares no frame (so never one coded against
// what it does not hold) until its view goes whole.
TEST(ReplicatorCompactTest, EchoFiltersLaggingOnTooMuchStopSharing) {
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/50);
  PublishRootsWithAChildEach(
      200, [] { return At(1); }, world, changes, replicator);
  EchoFilters subs(replicator);
  constexpr float kPrecision = EchoFilters::kPrecision;
  // Whether the echo filter was sent the plain one's message for the frame.
  float x = 2;
  const auto publish = [&](EntityId first, EntityId last,
                           const std::string& writer) {
    FrameWriters writers;
    x += 1;
    for (EntityId e = first; e <= last; ++e) {
      EXPECT_TRUE(world.SetLocal(e, At(x)).ok());
      writers[e] = writer;
    }
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now(), writers);
    auto to_plain = replicator.Next(subs.plain, absl::InfiniteFuture());
    EXPECT_NE(to_plain, nullptr);
    subs.plain_end.Take(*to_plain, false);
    bool shared = false;
    while (auto out = replicator.Next(subs.echoing, absl::InfiniteFuture())) {
      shared |= out.get() == to_plain.get();
      subs.echoing_end.Take(*out, false);
    }
    subs.raw_end.Drain(replicator, subs.raw, false);
    ExpectCompactMatch(subs.echoing_end.state, subs.raw_end.state, kPrecision);
    return shared;
  };
  // "me" moves children (201-400); "other" roots 100-109 (children
  // 300-309), or children.
  EXPECT_FALSE(publish(201, 240, "me"));  // Lagging on 40.
  EXPECT_TRUE(publish(100, 109, "other"));
  EXPECT_FALSE(publish(201, 210, "other"));  // Now lagging on 30.
  EXPECT_TRUE(publish(100, 109, "other"));
  EXPECT_FALSE(publish(241, 270, "me"));  // Lagging on 60: untracked.
  EXPECT_FALSE(publish(100, 109, "other"));
  EXPECT_FALSE(publish(100, 109, "other"));
  EXPECT_NE(subs.raw_end.state, Snapshot(world));
}

// A world of roots 1 to `roots`, root r with one child, r + roots, at At(1),
// published as its replicator's first frame on a simulated clock.
// Publish() closes and publishes the next frame 1/60 s later.
struct ClockedWorld {
  explicit ClockedWorld(EntityId roots, size_t max_pending = 65'536)
      : replicator(max_pending) {
    PublishRootsWithAChildEach(
        roots, [] { return At(1); }, world, changes, replicator, now);
  }
  void Publish() {
    now += absl::Nanoseconds(16'666'667);
    world.EndFrame(&changes);
    replicator.Publish(changes, now);
  }
  World world;
  FrameChanges changes;
  Replicator replicator;
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
};

// Rate-limited subscribers keep each frame's shared parts until their next
// message is due, and are not woken before: a frame costs them O(1) each,
// not O(moved). Those due in the same frame keep the same frames, so their
// fold is made once and shared; each still ends with the world (raw exactly,
// compact within its bounds), through moves, re-parenting, and entities
// destroyed and created again.
TEST(ReplicatorRateTest, SubscribersDueTogetherShareOneFold) {
  // Roots 1-1000, root r's child r + 1000: the frames a subscriber keeps
  // (six, of about 45 moves each) hold less than the world, which bounds them.
  constexpr EntityId kRoots = 1000;
  ClockedWorld w(kRoots);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);

  constexpr float kPrecision = 0x1p-10f;
  SubscriptionOptions raw, compact;
  raw.max_rate_hz = compact.max_rate_hz = 10;  // Every sixth frame.
  compact.compact_precision = kPrecision;
  struct Subscriber {
    Replicator::SubscriptionId id;
    std::shared_ptr<CountingSink> sink = std::make_shared<CountingSink>();
    CompactReceiver end;
    // Its messages that fold frames, kept so that no other reuses their
    // address.
    std::vector<std::shared_ptr<const Outgoing>> folds;
    int messages = 0;
  };
  // a and b raw, c and d compact, e raw and due in other frames than a's.
  std::vector<Subscriber> subs(5);
  for (size_t k = 0; k < subs.size(); ++k) {
    subs[k].id =
        w.replicator.Subscribe(k == 2 || k == 3 ? compact : raw, subs[k].sink);
  }
  const auto drain = [&](Subscriber& s) {
    while (auto out = w.replicator.Next(s.id, w.now)) {
      if (out->header().frames_skipped > 0) s.folds.push_back(out);
      s.end.Take(*out, /*own=*/false);
      ++s.messages;
    }
  };
  int woken_before = 0;
  for (int f = 0; f < 300; ++f) {
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < 30; ++k) {
      const EntityId e = 1 + rng() % (2 * kRoots);
      if (w.world.Has(e)) moves.push_back({e, At(u(rng) * 100)});
    }
    ASSERT_TRUE(w.world.SetLocals(moves).ok());
    const EntityId child = kRoots + 1 + rng() % kRoots;
    if (f % 5 == 0 && w.world.Has(child)) {
      ASSERT_TRUE(w.world.Destroy(child).ok());
    } else if (f % 5 == 2 && !w.world.Has(child)) {
      ASSERT_TRUE(w.world.Create(child, 1 + rng() % kRoots, At(2)).ok());
    } else if (f % 7 == 0 && w.world.Has(child)) {
      ASSERT_TRUE(w.world.Link(child, 1 + rng() % kRoots).ok());
    }
    w.Publish();
    if (f == 30) {
      for (const Subscriber& s : subs) woken_before += s.sink->wakes;
    }
    for (size_t k = 0; k < subs.size(); ++k) {
      if (k < 4 || f >= 3) drain(subs[k]);  // e starts three frames later.
    }
  }
  int woken = -woken_before;
  for (const Subscriber& s : subs) woken += s.sink->wakes;
  // Wakes in the last 269 frames: about one a message, not one a frame.
  EXPECT_LT(woken, 5 * 60) << "woken when not due";
  for (const Subscriber& s : subs) {
    // Snapshot, its first delta, then one every sixth frame.
    EXPECT_NEAR(s.messages, 300 / 6, 3) << s.id;
    ASSERT_GT(s.folds.size(), 40u) << s.id;
  }
  const auto same_folds = [](const Subscriber& x, const Subscriber& y) {
    if (x.folds.size() != y.folds.size()) return false;
    for (size_t k = 0; k < x.folds.size(); ++k) {
      if (x.folds[k] != y.folds[k]) return false;
    }
    return true;
  };
  EXPECT_TRUE(same_folds(subs[0], subs[1])) << "a and b folded alone";
  EXPECT_TRUE(same_folds(subs[2], subs[3])) << "c and d folded alone";
  for (const auto& fold : subs[4].folds) {
    EXPECT_EQ(std::count(subs[0].folds.begin(), subs[0].folds.end(), fold), 0)
        << "e, due in other frames, was sent a's fold";
  }
  w.now += absl::Seconds(1);
  for (Subscriber& s : subs) drain(s);
  const State truth = Snapshot(w.world);
  for (size_t k : {0, 1, 4}) EXPECT_EQ(subs[k].end.state, truth) << k;
  for (size_t k : {2, 3})
    ExpectCompactMatch(subs[k].end.state, truth, kPrecision);
}

// Subscribers slower than their kept frames allow (a status page at 1 Hz)
// stop following frames one by one: when due, each is sent what changed
// from the published state. Through moves, re-parenting, and children
// destroyed and created again under the same id (in the same frame, or
// later, seen or not), every message leaves each with the world as
// published at its frame: exactly (raw), or within the encoding's bounds
// (compact, sent whole). One whose stream takes a part a frame is owed
// frames while its message is still going out. A burst of destruction past
// max_pending resyncs them, as any laggard.
TEST(ReplicatorRateTest, SlowSubscribersCatchUpFromThePublishedState) {
  constexpr EntityId kRoots = 1000;
  // Kept frames hold at most 500 entities: about 24 frames of these.
  ClockedWorld w(kRoots, /*max_pending=*/500);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-1, 1);
  constexpr float kPrecision = 0x1p-10f;
  struct Subscriber {
    double hz;
    float precision;
    int first_frame;       // When it subscribes.
    bool trickle = false;  // Small parts, taken one a frame.
    Replicator::SubscriptionId id = 0;
    CompactReceiver end;
    int messages = 0;
    int snapshots = 0;
    int frames_in_parts = 0;  // Frames that ended with a message unfinished.
  };
  // Two raw ones at 1 Hz in different phases, a compact one, one at 3 Hz,
  // whose kept frames stay within the bound (as before), and a trickle.
  std::vector<Subscriber> subs = {{1, 0, 0},
                                  {1, 0, 17},
                                  {1, kPrecision, 5},
                                  {3, 0, 0},
                                  {1, 0, 9, /*trickle=*/true}};
  // The world as published at each frame lately, for a message that ends
  // frames after it was made.
  std::map<uint64_t, State> truths;
  // Moves among 200 roots and their children, so a second's distinct
  // changes stay under max_pending.
  const auto random_movable = [&] {
    const EntityId root = 1 + rng() % 200;
    return rng() % 2 == 0 ? root : root + kRoots;
  };
  const auto random_child = [&] { return kRoots + 1 + rng() % kRoots; };
  const auto random_root = [&] { return 1 + rng() % kRoots; };
  for (int f = 0; f < 900; ++f) {
    std::vector<SetLocalOp> moves;
    for (int k = 0; k < 20; ++k) {
      const EntityId e = random_movable();
      if (w.world.Has(e)) moves.push_back({e, At(u(rng) * 100)});
    }
    ASSERT_TRUE(w.world.SetLocals(moves).ok());
    const EntityId child = random_child();
    if (f >= 600 && f < 605) {
      // 750 children destroyed in five frames, back in the next five.
      for (EntityId c = kRoots + 1 + 150 * (f - 600);
           c <= kRoots + 150 * (f - 599); ++c) {
        if (w.world.Has(c)) {
          ASSERT_TRUE(w.world.Destroy(c).ok());
        }
      }
    } else if (f >= 605 && f < 610) {
      for (EntityId c = kRoots + 1 + 150 * (f - 605);
           c <= kRoots + 150 * (f - 604); ++c) {
        if (!w.world.Has(c)) {
          ASSERT_TRUE(w.world.Create(c, c - kRoots, At(3)).ok());
        }
      }
    } else if (f % 3 == 0 && w.world.Has(child)) {
      ASSERT_TRUE(w.world.Destroy(child).ok());
      if (f % 2 == 0) {  // And back at once, elsewhere.
        ASSERT_TRUE(w.world.Create(child, random_root(), At(2)).ok());
      }
    } else if (f % 3 == 1 && !w.world.Has(child)) {
      ASSERT_TRUE(w.world.Create(child, random_root(), At(2)).ok());
    } else if (w.world.Has(child)) {
      ASSERT_TRUE(w.world.Link(child, random_root()).ok());
    }
    // An id that comes and goes within a second: created, destroyed,
    // created again, destroyed.
    const EntityId passing = 2 * kRoots + 1 + (f / 10) % 100;
    if (f % 10 == 0 || f % 10 == 5) {
      ASSERT_TRUE(w.world.Create(passing, random_root(), At(4)).ok());
    } else if (f % 10 == 3 || f % 10 == 8) {
      ASSERT_TRUE(w.world.Destroy(passing).ok());
    }
    w.Publish();
    truths[w.changes.frame] = Snapshot(w.world);
    if (truths.size() > 100) truths.erase(truths.begin());
    for (Subscriber& s : subs) {
      if (f == s.first_frame) {
        SubscriptionOptions options;
        options.max_rate_hz = s.hz;
        options.compact_precision = s.precision;
        if (s.trickle) options.part_budget_bytes = 2048;
        s.id =
            w.replicator.Subscribe(options, std::make_shared<CountingSink>());
      }
      if (f < s.first_frame) continue;
      bool ended = false;
      while (auto out = w.replicator.Next(s.id, w.now)) {
        const v1::FrameUpdate& message = out->message();
        if (message.snapshot() && message.part() == 0) ++s.snapshots;
        s.end.Take(*out, /*own=*/out->header().frames_skipped > 0);
        if (!message.last_part()) {
          if (s.trickle) break;
          continue;
        }
        ended = true;
        ++s.messages;
        ASSERT_TRUE(truths.contains(message.frame())) << message.frame();
        const State& truth = truths.at(message.frame());
        if (s.precision == 0) {
          ASSERT_EQ(s.end.state, truth)
              << "subscriber " << s.id << ", frame " << f;
        } else {
          ExpectCompactMatch(s.end.state, truth, s.precision);
          if (HasFailure()) FAIL() << "frame " << f;
        }
        if (s.trickle) break;
      }
      if (s.trickle && !ended) ++s.frames_in_parts;
    }
  }
  for (const Subscriber& s : subs) {
    // One each 60 / hz frames, and after each snapshot one more at once
    // (its deltas start with the next frame).
    // (A trickle's messages take frames to go out: fewer.)
    const double expected = (900 - s.first_frame) * s.hz / 60 + s.snapshots;
    EXPECT_NEAR(s.messages, expected, s.trickle ? 5 : 2) << s.id;
    // Owed the burst (more than max_pending), each resynced: once for the
    // destroyed, perhaps again for the created.
    EXPECT_GE(s.snapshots, 2) << s.id;
    EXPECT_LE(s.snapshots, 3) << s.id;
  }
  EXPECT_GT(subs[4].frames_in_parts, 100);
}

// Publishing, consuming, subscribing and leaving, all at once. Every consumer
// ends with the exact final state.
TEST(ReplicatorThreadsTest, ConcurrentPublishConsumeAndChurn) {
  Replicator replicator;
  World world;
  std::atomic<bool> publishing{true};
  State final_state;
  std::thread publisher([&] {
    std::mt19937 rng(3);
    FrameChanges changes;
    for (int f = 0; f < 1500; ++f) {
      const EntityId e = rng() % 200 + 1;
      if (!world.Has(e)) {
        (void)world.Create(e, world.Has(e / 2) ? e / 2 : 0, At(1));
      } else if (rng() % 4 == 0) {
        (void)world.Destroy(e, DestroyMode::kReparentChildren);
      } else {
        (void)world.SetLocal(e, At(static_cast<float>(f)));
      }
      world.EndFrame(&changes);
      replicator.Publish(changes, absl::Now());
    }
    final_state = Snapshot(world);
    publishing = false;
  });
  std::vector<std::thread> consumers;
  std::vector<State> mirrors(4);
  for (int c = 0; c < 4; ++c) {
    consumers.emplace_back([&, c] {
      // Two rate-limited, which keep frames and may share their folds.
      SubscriptionOptions options;
      if (c >= 2) options.max_rate_hz = 500;
      const auto id =
          replicator.Subscribe(options, std::make_shared<CountingSink>());
      while (publishing) {
        while (auto update = replicator.Next(id, absl::Now())) {
          ApplyUpdate(update->message(), &mirrors[c]);
        }
        replicator.Flush(absl::Now());
      }
      Drain(replicator, id, &mirrors[c]);
    });
  }
  std::thread churn([&] {
    while (publishing) {
      const auto id =
          replicator.Subscribe({}, std::make_shared<CountingSink>());
      State scratch;
      Drain(replicator, id, &scratch);
      replicator.Unsubscribe(id);
      (void)replicator.Subscribers();
    }
  });
  publisher.join();
  churn.join();
  for (auto& t : consumers) t.join();
  for (const State& mirror : mirrors) EXPECT_EQ(mirror, final_state);
}

// --- Resuming a subscriber whose stream broke (resume_from_frame), and a
// replicator reset to a reloaded world.

// A world of 100 entities under 10 roots, published, and a replicator that
// logs destructions for `resume_frames` frames.
struct ResumeFixture {
  explicit ResumeFixture(uint64_t resume_frames = 50)
      : replicator(65'536, nullptr, nullptr, resume_frames) {
    replicator.set_history(7);
    for (EntityId e = 1; e <= 100; ++e) {
      EXPECT_TRUE(world
                      .Create(e, e <= 10 ? kNoEntity : (e % 10) + 1,
                              At(static_cast<float>(e)))
                      .ok());
    }
    Publish();
  }
  void Publish() {
    world.EndFrame(&changes);
    replicator.Publish(changes, absl::Now());
  }
  // Changes a few entities: moves 3, destroys one, creates one.
  void Change(int step) {
    for (EntityId e : {EntityId{12}, EntityId{25}, EntityId{3}}) {
      EXPECT_TRUE(world.SetLocal(e, At(1000.0f + step)).ok());
    }
    EXPECT_TRUE(world.Destroy(40 + step).ok());
    EXPECT_TRUE(world.Create(1000 + step, 2, At(5)).ok());
    Publish();
  }
  SubscriptionOptions Resuming(uint64_t frame, uint64_t history = 7) const {
    SubscriptionOptions options;
    options.accepts_kept_view_snapshots = true;
    options.resume_from_frame = frame;
    options.resume_history = history;
    return options;
  }
  World world;
  FrameChanges changes;
  Replicator replicator;
};

TEST(ReplicatorResumeTest, ASubscriberResumesWithWhatChangedSinceItsFrame) {
  ResumeFixture f;
  // A subscriber holds the world as of this frame, then its stream breaks.
  State held = Snapshot(f.world);
  const uint64_t held_frame = f.replicator.frame();
  for (int step = 0; step < 5; ++step) f.Change(step);
  const auto id = f.replicator.Subscribe(f.Resuming(held_frame),
                                         std::make_shared<CountingSink>());
  int entries = 0;
  int messages = 0;
  while (auto update = f.replicator.Next(id, absl::InfiniteFuture())) {
    const v1::FrameUpdate& u = update->message();
    EXPECT_FALSE(u.snapshot() && !u.keeps_view()) << "sent its view whole";
    entries += u.created_size() + u.destroyed_size() + u.moved_size();
    ApplyUpdate(u, &held);
    ++messages;
  }
  EXPECT_EQ(held, Snapshot(f.world));
  EXPECT_GE(messages, 1);
  EXPECT_LT(entries, 60) << "what changed, not the world's 100";
}

TEST(ReplicatorResumeTest, AnotherHistoryOrAFrameOutsideTheWindowIsSentWhole) {
  ResumeFixture f(/*resume_frames=*/3);
  const uint64_t old_frame = f.replicator.frame();
  for (int step = 0; step < 6; ++step) f.Change(step);
  for (const SubscriptionOptions& options :
       {f.Resuming(old_frame), f.Resuming(f.replicator.frame(), 8)}) {
    const auto id =
        f.replicator.Subscribe(options, std::make_shared<CountingSink>());
    auto first = f.replicator.Next(id, absl::InfiniteFuture());
    ASSERT_NE(first, nullptr);
    EXPECT_TRUE(first->message().snapshot());
    EXPECT_FALSE(first->message().keeps_view());
    EXPECT_EQ(first->message().history(), 7u);
    State mirror;
    ApplyUpdate(first->message(), &mirror);
    Drain(f.replicator, id, &mirror);
    EXPECT_EQ(mirror, Snapshot(f.world));
  }
  // Within the window it resumes.
  State held = Snapshot(f.world);
  const uint64_t recent = f.replicator.frame();
  f.Change(10);
  const auto id = f.replicator.Subscribe(f.Resuming(recent),
                                         std::make_shared<CountingSink>());
  auto first = f.replicator.Next(id, absl::InfiniteFuture());
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->message().snapshot() && !first->message().keeps_view());
  ApplyUpdate(first->message(), &held);
  Drain(f.replicator, id, &held);
  EXPECT_EQ(held, Snapshot(f.world));
}

TEST(ReplicatorResumeTest, AFrameNotPublishedYetIsWaitedFor) {
  // Another node published frames this one has not yet: the subscriber
  // holds them, and is sent nothing until a later frame comes.
  ResumeFixture ahead;
  ResumeFixture behind;
  for (int step = 0; step < 3; ++step) ahead.Change(step);
  State held = Snapshot(ahead.world);
  const uint64_t held_frame = ahead.replicator.frame();
  const auto id = behind.replicator.Subscribe(behind.Resuming(held_frame),
                                              std::make_shared<CountingSink>());
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(behind.replicator.Next(id, absl::InfiniteFuture()), nullptr);
    behind.Change(step);
  }
  ASSERT_EQ(behind.replicator.frame(), held_frame);
  EXPECT_EQ(behind.replicator.Next(id, absl::InfiniteFuture()), nullptr);
  behind.Change(3);
  int messages = 0;
  while (auto update = behind.replicator.Next(id, absl::InfiniteFuture())) {
    EXPECT_FALSE(update->message().snapshot());
    EXPECT_EQ(update->message().frame(), held_frame + 1);
    ApplyUpdate(update->message(), &held);
    ++messages;
  }
  EXPECT_EQ(messages, 1);
  EXPECT_EQ(held, Snapshot(behind.world));
}

TEST(ReplicatorResumeTest, AResetResendsEverySubscriberItsView) {
  ResumeFixture f;
  SubscriptionOptions subtree;
  subtree.subtrees = {2};
  const auto whole =
      f.replicator.Subscribe({}, std::make_shared<CountingSink>());
  const auto sink = std::make_shared<CountingSink>();
  const auto filtered = f.replicator.Subscribe(subtree, sink);
  State whole_mirror, filtered_mirror;
  Drain(f.replicator, whole, &whole_mirror);
  Drain(f.replicator, filtered, &filtered_mirror);
  // The world as a reload gives it: a different one, at a later frame.
  World reloaded = f.world;
  ASSERT_TRUE(reloaded.Destroy(2).ok());
  ASSERT_TRUE(reloaded.Create(2, kNoEntity, At(-1)).ok());
  ASSERT_TRUE(reloaded.Create(5000, 2, At(3)).ok());
  FrameChanges ignored;
  reloaded.EndFrame(&ignored);
  const int wakes = sink->wakes;
  f.replicator.Reset(reloaded, f.replicator.frame() + 5, absl::Now(),
                     f.replicator.frame() + 5);
  EXPECT_GT(sink->wakes, wakes);
  v1::FrameUpdate last;
  Drain(f.replicator, whole, &whole_mirror, &last);
  EXPECT_TRUE(last.snapshot_done());
  EXPECT_EQ(whole_mirror, Snapshot(reloaded));
  Drain(f.replicator, filtered, &filtered_mirror);
  EXPECT_EQ(filtered_mirror, (State{{2, {kNoEntity, *reloaded.WorldMatrix(2)}},
                                    {5000, {2, *reloaded.WorldMatrix(5000)}}}));
  // Frames after it go on from there.
  ASSERT_TRUE(reloaded.SetLocal(5000, At(9)).ok());
  reloaded.RestartFrames(f.replicator.frame() + 1);
  ASSERT_TRUE(reloaded.SetLocal(5000, At(10)).ok());
  FrameChanges next;
  reloaded.EndFrame(&next);
  f.replicator.Publish(next, absl::Now());
  Drain(f.replicator, whole, &whole_mirror);
  EXPECT_EQ(whole_mirror, Snapshot(reloaded));
}

}  // namespace
}  // namespace xform::server
