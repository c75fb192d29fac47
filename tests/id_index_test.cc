// Copyright 2026 The xform Authors.
//
// IdIndex against a plain hash map, with ids of every kind: dense from 1,
// scattered, huge, and ids that the array comes to cover after they were
// put in the hash map.

#include "xform/internal/id_index.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

// A false positive: inlined into a test that inserts into a fresh index,
// GCC 12 sees abseil's empty hash map's null slots read, which they are not.
#pragma GCC diagnostic ignored "-Wnull-dereference"

namespace xform::internal {
namespace {

void ExpectSame(const IdIndex& index,
                const absl::flat_hash_map<EntityId, uint32_t>& want,
                const std::vector<EntityId>& probes) {
  ASSERT_EQ(index.size(), want.size());
  for (EntityId e : probes) {
    auto it = want.find(e);
    ASSERT_EQ(index.Find(e), it == want.end() ? IdIndex::kAbsent : it->second)
        << "id " << e;
  }
}

TEST(IdIndexTest, MatchesAHashMapUnderRandomChanges) {
  std::mt19937_64 rng(7);
  // Dense ids, ids just past what the array covers, and huge ones.
  auto pick = [&rng]() -> EntityId {
    switch (rng() % 4) {
      case 0:
        return rng() % 2000;
      case 1:
        return 4000 + rng() % 20000;
      case 2:
        return std::numeric_limits<EntityId>::max() - rng() % 100;
      default:
        return rng();
    }
  };
  IdIndex index;
  absl::flat_hash_map<EntityId, uint32_t> want;
  std::vector<EntityId> probes;
  for (int step = 0; step < 50'000; ++step) {
    const EntityId e = pick();
    probes.push_back(e);
    const uint32_t row = static_cast<uint32_t>(rng() % 1'000'000);
    switch (rng() % 4) {
      case 0: {
        auto [it, inserted] = want.try_emplace(e, row);
        ASSERT_EQ(index.Insert(e, row), it->second) << "id " << e;
        break;
      }
      case 1:
        want.erase(e);
        index.Erase(e);
        break;
      case 2:
        want.insert_or_assign(e, row);
        index.InsertOrAssign(e, row);
        break;
      default:
        if (auto it = want.find(e); it != want.end()) {
          it->second = row;
          index.Set(e, row);
        }
    }
    if (step % 5'000 == 0) ExpectSame(index, want, probes);
  }
  ExpectSame(index, want, probes);
  index.Clear();
  want.clear();
  ExpectSame(index, want, probes);
}

TEST(IdIndexTest, IdsTheArrayGrowsOverAreStillFound) {
  IdIndex index;
  // Past the array's reach when put in: it holds nothing yet.
  ASSERT_EQ(index.Insert(100'000, 7), 7u);
  for (uint32_t e = 1; e <= 60'000; ++e) ASSERT_EQ(index.Insert(e, e), e);
  EXPECT_EQ(index.Find(100'000), 7u);
  EXPECT_EQ(index.Insert(100'000, 9), 7u);  // Mapped already: kept.
  EXPECT_EQ(index.size(), 60'001u);
  index.Erase(100'000);
  EXPECT_EQ(index.Find(100'000), IdIndex::kAbsent);
  EXPECT_EQ(index.size(), 60'000u);
}

// The world claims ids being created with one shared value: a second claim
// of the same id must fail, dense or not.
TEST(IdIndexTest, TryInsertSaysWhetherItInserted) {
  IdIndex index;
  constexpr uint32_t kClaim = 7;
  for (EntityId e : {EntityId{3}, EntityId{1} << 60}) {
    EXPECT_TRUE(index.TryInsert(e, kClaim));
    EXPECT_FALSE(index.TryInsert(e, kClaim));
    EXPECT_FALSE(index.TryInsert(e, 8));
    EXPECT_EQ(index.Find(e), kClaim);
  }
  EXPECT_EQ(index.size(), 2u);
}

TEST(IdIndexTest, ArrayIsBoundedByTheIdsHeld) {
  // A hostile peer's ids: each as far past the array as it may reach.
  IdIndex index;
  constexpr uint32_t kHeld = 100'000;
  EntityId e = 0;
  for (uint32_t k = 0; k < kHeld; ++k) {
    e = 2 * (k + 1) + 4095;
    index.Insert(e, k);
  }
  EXPECT_LE(index.array_bytes(), 16 * kHeld + (32 << 10));
  EXPECT_EQ(index.Find(e), kHeld - 1);
  // And ids out of its reach take none of it.
  IdIndex sparse;
  for (uint32_t k = 0; k < kHeld; ++k) sparse.Insert(EntityId{1} << 40 | k, k);
  EXPECT_EQ(sparse.array_bytes(), 0u);
  EXPECT_EQ(sparse.Find(EntityId{1} << 40 | 5), 5u);
}

}  // namespace
}  // namespace xform::internal
