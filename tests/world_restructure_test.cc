// Copyright 2026 The xform Authors.
//
// A batch with many links, destroys or runs of creates restructures the world
// once (lists of children, then the columns in pre-order again) instead of
// shifting the columns for each. These tests show that it costs O(n) however
// many such commands the batch holds, and that it leaves exactly the world,
// the frame's changes and the refusals that shifting command by command does.

#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "tests/random_batches.h"
#include "tests/seeds.h"
#include "tests/world_compare.h"
#include "tests/world_peer.h"
#include "xform/world.h"

namespace xform {

namespace {

using ::xform::testing::InOrder;
using ::xform::testing::Sorted;

TEST(RestructureTest, ManyLinksRelocateTheWorldOnce) {
  // 10,000 roots; the first 2,000 go under the last, one link each. Shifting
  // moves the 8,000 after each one: 16 million instances.
  constexpr EntityId kRoots = 10'000;
  constexpr EntityId kLinks = 2'000;
  World world;
  std::vector<CreateOp> roots;
  for (EntityId e = 1; e <= kRoots; ++e) {
    Transform local;
    local.position = {static_cast<float>(e), 0, 0};
    roots.push_back({e, kNoEntity, local});
  }
  ASSERT_TRUE(world.CreateMany(roots).ok());
  FrameChanges changes;
  world.EndFrame(&changes);
  std::vector<Command> links;
  for (EntityId e = 1; e <= kLinks; ++e) links.push_back(LinkOp{e, kRoots});
  const uint64_t before = world.stats().relocated;
  ASSERT_TRUE(world.Apply(links).ok());
  EXPECT_LE(world.stats().relocated - before, kRoots);
  ASSERT_TRUE(world.CheckConsistency().ok()) << world.CheckConsistency();
  const std::vector<EntityId> children = *world.Children(kRoots);
  ASSERT_EQ(children.size(), kLinks);
  for (EntityId e = 1; e <= kLinks; ++e) {
    EXPECT_EQ(children[e - 1], e);  // In the batch's order.
    EXPECT_EQ(world.WorldMatrix(e)->translation().x,
              static_cast<float>(kRoots + e));
  }
  world.EndFrame(&changes);
  EXPECT_EQ(changes.reparented.size(), kLinks);
  EXPECT_EQ(changes.moved.size(), kLinks);
}

// One run of creates under many nodes of a chain carries their counts up in
// one pass instead of walking up from each (blocks x depth); the sizes are
// those the walk gives.
TEST(RestructureTest, ASpawnUnderAChainAddsUpAsWalkingDoes) {
  constexpr EntityId kDepth = 3'000;
  World carried;
  std::vector<CreateOp> chain;
  for (EntityId e = 1; e <= kDepth; ++e) {
    chain.push_back({e, e > 1 ? e - 1 : kNoEntity, {}});
  }
  ASSERT_TRUE(carried.CreateMany(chain).ok());
  World walked = carried;
  WorldPeer::RestructureAt(walked, std::numeric_limits<size_t>::max());
  std::vector<Command> spawn;
  for (EntityId k = 0; k < 2'000; ++k) {
    // Under every node from the deepest up, some twice, and a few roots.
    const EntityId parent = k % 7 == 0 ? kNoEntity : kDepth - (k * 3) % kDepth;
    spawn.push_back(CreateOp{kDepth + 1 + k, parent, {}});
  }
  ASSERT_TRUE(carried.Apply(spawn).ok());
  ASSERT_TRUE(walked.Apply(spawn).ok());
  ASSERT_TRUE(carried.CheckConsistency().ok()) << carried.CheckConsistency();
  EXPECT_TRUE(InOrder(carried) == InOrder(walked));
  EXPECT_EQ(carried.Subtree(1)->size(), walked.Subtree(1)->size());
}

// Random batches applied both ways to two copies: after each, the same
// status, the same world in the same order to the bit, and at each frame's
// end the same changes. One batch in four ends with a link that overflows,
// so that both take the batch back (restructuring again to do so).
TEST(RestructureTest, AgreesWithShiftingCommandByCommand) {
  for (uint64_t seed = 1; seed <= ::xform::testing::SeedsToRun(6); ++seed) {
    SCOPED_TRACE(seed);
    World shifting;
    Transform huge;
    huge.scale = {1e20f, 1e20f, 1e20f};
    Transform far;
    far.position = {1e19f, 0, 0};
    constexpr EntityId kBomb = 1, kFuse = 2;
    ASSERT_TRUE(
        shifting.CreateMany({{kBomb, kNoEntity, huge}, {kFuse, kNoEntity, far}})
            .ok());
    WorldPeer::RestructureAt(shifting, std::numeric_limits<size_t>::max());
    World restructuring = shifting;
    WorldPeer::RestructureAt(restructuring, 1);
    World model = shifting;
    ::xform::testing::RandomBatches batches(seed, 100);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    FrameChanges a, b;
    int refused = 0;
    for (int round = 0; round < 300; ++round) {
      std::vector<Command> batch = batches.Next(model, 40);
      const bool overflow = rng() % 4 == 0;
      if (overflow) batch.push_back(LinkOp{kFuse, kBomb});
      const absl::Status first = shifting.Apply(batch);
      const absl::Status second = restructuring.Apply(batch);
      ASSERT_EQ(first.code(), second.code()) << first << " / " << second;
      ASSERT_EQ(first.ok(), !overflow) << first;
      refused += !first.ok();
      ASSERT_TRUE(restructuring.CheckConsistency().ok())
          << restructuring.CheckConsistency();
      ASSERT_TRUE(InOrder(shifting) == InOrder(restructuring))
          << "round " << round;
      if (overflow) {
        // The model has the batch; the worlds do not. What the batch
        // created the writer forgets; what it destroyed it leaves alone.
        model = shifting;
      }
      if (rng() % 3 == 0) {
        shifting.EndFrame(&a);
        restructuring.EndFrame(&b);
        ASSERT_EQ(Sorted(a), Sorted(b)) << "round " << round;
      }
    }
    EXPECT_GT(refused, 0);
  }
}

}  // namespace
}  // namespace xform
