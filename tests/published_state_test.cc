// Copyright 2026 The xform Authors.

#include "server/replication/published_state.h"

#include <algorithm>
#include <iterator>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "server/replication/slot_bits.h"
#include "xform/world.h"

namespace xform::server {
namespace {

using Slot = PublishedState::Slot;

// The published state after each of many random frames is the world's:
// every live entity with its parent, depth and matrix, and its subtree as
// the world has it, parents first.
TEST(PublishedStateTest, FollowsTheWorldFrameByFrame) {
  std::mt19937 rng(11);
  World world;
  PublishedState state;
  FrameChanges changes;
  std::vector<EntityId> alive;
  EntityId next = 1;
  size_t deep = 0, reparented = 0, destroyed = 0;  // The history has these.
  for (int frame = 0; frame < 300; ++frame) {
    for (int op = 0; op < 20; ++op) {
      const auto pick = [&] { return alive[rng() % alive.size()]; };
      // Mostly creates and links, so the world grows deep and tangled.
      const int roll = static_cast<int>(rng() % 10);
      const int kind = alive.size() < 8 || roll < 4 ? 0
                       : roll == 4                  ? 1
                       : roll < 8                   ? 2
                                                    : 3;
      Transform local;
      local.position = {float(rng() % 7), float(rng() % 5), 0};
      if (kind == 0) {
        const EntityId parent =
            alive.empty() || rng() % 3 == 0 ? kNoEntity : pick();
        ASSERT_TRUE(world.Create(next, parent, local).ok());
        alive.push_back(next++);
      } else if (kind == 1) {
        const DestroyMode mode = rng() % 4 == 0
                                     ? DestroyMode::kSubtree
                                     : DestroyMode::kReparentChildren;
        (void)world.Destroy(pick(), mode);
      } else if (kind == 2) {
        (void)world.Link(pick(), rng() % 4 == 0 ? kNoEntity : pick());
      } else {
        (void)world.SetLocal(pick(), local);
      }
      std::erase_if(alive, [&](EntityId e) { return !world.Has(e); });
    }
    world.EndFrame(&changes);
    state.TakeIn(changes);
    reparented += changes.reparented.size();
    destroyed += changes.destroyed.size();
    ASSERT_EQ(state.size(), world.size());
    for (EntityId e : changes.destroyed) {
      EXPECT_EQ(state.Find(e), PublishedState::kNoSlot);
      EXPECT_NE(state.FindThisFrame(e), PublishedState::kNoSlot);
    }
    for (EntityId e : alive) {
      const Slot slot = state.Find(e);
      ASSERT_NE(slot, PublishedState::kNoSlot) << e;
      EXPECT_EQ(state.entity(slot), e);
      EXPECT_EQ(state.parent_entity(slot), *world.Parent(e));
      EXPECT_EQ(state.world(slot).m, world.WorldMatrix(e)->m);
      uint32_t depth = 0;
      for (EntityId p = *world.Parent(e); p != kNoEntity;
           p = *world.Parent(p)) {
        ++depth;
      }
      EXPECT_EQ(state.depth(slot), depth);
      deep += depth >= 4;
      std::vector<EntityId> subtree;
      state.ForEachInSubtree(slot, [&](Slot s) {
        if (s != slot) {
          // Its parent came before it.
          EXPECT_NE(
              std::find(subtree.begin(), subtree.end(), state.parent_entity(s)),
              subtree.end());
        }
        subtree.push_back(state.entity(s));
      });
      std::vector<EntityId> expected = *world.Subtree(e);
      std::sort(subtree.begin(), subtree.end());
      std::sort(expected.begin(), expected.end());
      EXPECT_EQ(subtree, expected);
    }
  }
  EXPECT_GT(deep, 10'000u);
  EXPECT_GT(reparented, 1000u);
  EXPECT_GT(destroyed, 500u);
}

// A slot freed by a frame is reused from the next frame on, not within it,
// so what was recorded at a destroyed entity's slot is its own meanwhile.
TEST(PublishedStateTest, FreedSlotsWaitForTheNextFrame) {
  World world;
  PublishedState state;
  FrameChanges changes;
  ASSERT_TRUE(world.Create(1, kNoEntity, {}).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);
  const Slot one = state.Find(1);

  ASSERT_TRUE(world.Destroy(1).ok());
  ASSERT_TRUE(world.Create(2, kNoEntity, {}).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);
  EXPECT_NE(state.Find(2), one);
  EXPECT_EQ(state.FindThisFrame(1), one);
  EXPECT_FALSE(state.LiveSlots().test(one));

  ASSERT_TRUE(world.Create(3, kNoEntity, {}).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);
  EXPECT_EQ(state.Find(3), one);
  EXPECT_EQ(state.FindThisFrame(1), PublishedState::kNoSlot);
  EXPECT_TRUE(state.LiveSlots().test(one));
}

// Walks that mark what they visit stop where an earlier walk marked: over
// a chain, every link's walk together costs the chain once.
TEST(PublishedStateTest, MarkingWalksVisitEachSlotOnce) {
  World world;
  PublishedState state;
  FrameChanges changes;
  constexpr EntityId kDepth = 1000;
  for (EntityId e = 1; e <= kDepth; ++e) {
    ASSERT_TRUE(world.Create(e, e - 1, {}).ok());
  }
  world.EndFrame(&changes);
  state.TakeIn(changes);
  SlotBits marked;
  size_t visits = 0;
  for (EntityId e = kDepth; e >= 1; --e) {
    state.VisitSubtree(state.Find(e), [&](Slot s) {
      ++visits;
      return marked.set(s);
    });
  }
  // Each walk visits its own root and stops at the one below it.
  EXPECT_EQ(visits, 2 * kDepth - 1);
}

// What changed after a frame, from the stamps alone: created, re-parented
// and moved entities, in blocks of 64 slots far apart; not the destroyed,
// nor what changed only at or before the frame.
TEST(PublishedStateTest, ForEachChangedSinceFindsWhatLaterFramesChanged) {
  World world;
  PublishedState state;
  FrameChanges changes;
  std::vector<CreateOp> scene;
  for (EntityId e = 1; e <= 1000; ++e) scene.push_back({e, kNoEntity, {}});
  ASSERT_TRUE(world.CreateMany(scene).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);
  const uint64_t loaded = changes.frame;
  Transform moved;
  moved.position.x = 1;
  const auto changed_since = [&](uint64_t frame) {
    std::set<EntityId> found;
    state.ForEachChangedSince(frame, [&](Slot slot) {
      found.insert(state.entity(slot));
      return true;
    });
    return found;
  };
  EXPECT_EQ(changed_since(loaded).size(), 0u);
  EXPECT_EQ(changed_since(loaded - 1).size(), 1000u);

  ASSERT_TRUE(world.SetLocal(3, moved).ok());
  ASSERT_TRUE(world.SetLocal(900, moved).ok());
  ASSERT_TRUE(world.Destroy(500).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);
  const uint64_t first = changes.frame;
  ASSERT_TRUE(world.Link(700, 3).ok());
  ASSERT_TRUE(world.Create(1001, 5, {}).ok());
  world.EndFrame(&changes);
  state.TakeIn(changes);

  EXPECT_EQ(changed_since(loaded), (std::set<EntityId>{3, 700, 900, 1001}));
  EXPECT_EQ(changed_since(first), (std::set<EntityId>{700, 1001}));
  const PublishedState::Stamps stamps = state.stamps(state.Find(700));
  EXPECT_EQ(stamps.created, loaded);
  EXPECT_GT(stamps.parented, first);
  const PublishedState::Stamps created = state.stamps(state.Find(1001));
  EXPECT_EQ(created.created, created.parented);
  EXPECT_EQ(state.stamps(state.Find(900)).moved, first);
  // A walk stops when told to.
  int calls = 0;
  state.ForEachChangedSince(loaded, [&](Slot) { return ++calls < 2; });
  EXPECT_EQ(calls, 2);
}

// ForEachInBoth finds exactly the slots set in both, walking only the
// words between the lowest and highest slot set: through resets, which
// leave the lowest as a bound, and clear(), which forgets it.
TEST(SlotBitsTest, ForEachInBothFindsTheCommonSlotsFromTheLowestSet) {
  std::mt19937 rng(3);
  for (int round = 0; round < 50; ++round) {
    SlotBits a, b;
    std::set<size_t> in_a, in_b;
    if (round % 2 == 1) {  // Something set and cleared first.
      a.set(0);
      a.clear();
      EXPECT_EQ(a.words(), 0u);
    }
    const size_t base = rng() % 5000;
    size_t lowest = ~size_t{0}, highest = 0;
    for (int k = 0; k < 200; ++k) {
      const size_t slot = base + rng() % 3000;
      a.set(slot);
      in_a.insert(slot);
      lowest = std::min(lowest, slot);
      highest = std::max(highest, slot);
    }
    for (int k = 0; k < 500; ++k) {
      const size_t slot = rng() % 10000;
      b.set(slot);
      in_b.insert(slot);
    }
    for (int k = 0; k < 100; ++k) {
      const size_t slot = base + rng() % 3000;
      a.reset(slot);
      in_a.erase(slot);
    }
    std::vector<size_t> found, expected;
    a.ForEachInBoth(b, [&](size_t slot) { found.push_back(slot); });
    std::set_intersection(in_a.begin(), in_a.end(), in_b.begin(), in_b.end(),
                          std::back_inserter(expected));
    EXPECT_EQ(found, expected) << "round " << round;
    EXPECT_EQ(a.words(), highest / 64 - lowest / 64 + 1) << "round " << round;
  }
}

}  // namespace
}  // namespace xform::server
