// Copyright 2026 The xform Authors.

#include "xform/net_changes.h"

#include <random>

#include "gtest/gtest.h"

namespace xform {
namespace {

uint8_t NetOf(const NetChanges& changes, EntityId e) {
  for (const auto& [entity, net] : changes) {
    if (entity == e) return net;
  }
  return 0;
}

TEST(NetChangesTest, CreatedThenDestroyedIsNothing) {
  NetChanges changes;
  changes.Note(1, kCreated);
  changes.Note(1, kMoved);
  changes.Note(1, kDestroyed);
  EXPECT_TRUE(changes.empty());
}

TEST(NetChangesTest, DestroyedThenCreatedStayedElsewhere) {
  NetChanges changes;
  changes.Note(1, kDestroyed);
  changes.Note(1, kCreated);
  EXPECT_EQ(NetOf(changes, 1), kMoved | kReparented);
}

TEST(NetChangesTest, DestroyedIsOnlyThat) {
  NetChanges changes;
  changes.Note(1, kMoved);
  changes.Note(1, kReparented);
  changes.Note(1, kDestroyed);
  EXPECT_EQ(NetOf(changes, 1), kDestroyed);
}

TEST(NetChangesTest, TakeEmptiesIt) {
  NetChanges changes;
  changes.Note(1, kMoved);
  changes.Note(2, kCreated);
  const NetChanges::Map taken = changes.Take();
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_TRUE(changes.empty());
}

// Against a model of the observer: for random histories of one entity, the
// net change is exactly what takes the observer's last view to the truth.
TEST(NetChangesTest, NetChangeTakesTheLastViewToTheTruth) {
  std::mt19937 rng(7);
  for (int run = 0; run < 20'000; ++run) {
    const bool existed = rng() % 2;
    bool exists = existed;
    bool moved = false, reparented = false, recreated = false;
    NetChanges changes;
    const int steps = static_cast<int>(rng() % 6);
    for (int k = 0; k < steps; ++k) {
      if (!exists) {
        changes.Note(1, kCreated);
        exists = true;
        // Gone and back since the observer looked: elsewhere, perhaps.
        if (existed) recreated = true;
        continue;
      }
      switch (rng() % 3) {
        case 0:
          changes.Note(1, kMoved);
          moved = true;
          break;
        case 1:
          changes.Note(1, kReparented);
          reparented = true;
          break;
        default:
          changes.Note(1, kDestroyed);
          exists = false;
          break;
      }
    }
    const uint8_t net = NetOf(changes, 1);
    SCOPED_TRACE(testing::Message() << "run " << run << ", net " << int{net});
    if (!existed && !exists) {
      EXPECT_EQ(net, 0);
    } else if (!existed && exists) {
      EXPECT_TRUE(net & kCreated);
      EXPECT_FALSE(net & kDestroyed);
    } else if (existed && !exists) {
      EXPECT_EQ(net, kDestroyed);
    } else {
      EXPECT_FALSE(net & (kCreated | kDestroyed));
      EXPECT_EQ(bool(net & kMoved), moved || recreated);
      EXPECT_EQ(bool(net & kReparented), reparented || recreated);
    }
  }
}

}  // namespace
}  // namespace xform
