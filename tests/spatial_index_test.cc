// Copyright 2026 The xform Authors.

#include "server/spatial_index.h"

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace xform::server {
namespace {

using Slot = SpatialIndex::Slot;

std::vector<Slot> InBox(const SpatialIndex& index, glm::vec3 min,
                        glm::vec3 max) {
  std::vector<Slot> found;
  index.ForEachInBox(min, max, [&](Slot s) { found.push_back(s); });
  std::sort(found.begin(), found.end());
  return found;
}

bool Within(glm::vec3 p, glm::vec3 min, glm::vec3 max) {
  return p.x >= min.x && p.x <= max.x && p.y >= min.y && p.y <= max.y &&
         p.z >= min.z && p.z <= max.z;
}

// Against a plain list of positions: after random places, moves (most
// within a cell, some across many) and removes, every box query returns
// each slot inside the box once, nothing twice, and only slots of the
// cells it covers.
TEST(SpatialIndexTest, FindsEverySlotInABoxAsAListOfPositionsSays) {
  std::mt19937 random(64);
  std::uniform_real_distribution<float> coordinate(-100, 100);
  std::uniform_real_distribution<float> step(-2, 2);
  SpatialIndex index(8);
  absl::flat_hash_map<Slot, glm::vec3> model;
  for (int round = 0; round < 2000; ++round) {
    const Slot slot = random() % 400;
    switch (random() % 4) {
      case 0:
        index.Remove(slot);
        model.erase(slot);
        break;
      case 1: {
        const glm::vec3 p(coordinate(random), coordinate(random),
                          coordinate(random));
        index.Place(slot, p);
        model[slot] = p;
        break;
      }
      default:
        if (auto it = model.find(slot); it != model.end()) {
          it->second += glm::vec3(step(random), step(random), step(random));
          index.Place(slot, it->second);
        }
    }
    ASSERT_EQ(index.size(), model.size());
    if (round % 20 != 0) continue;
    glm::vec3 a(coordinate(random), coordinate(random), coordinate(random));
    glm::vec3 b(coordinate(random), coordinate(random), coordinate(random));
    const glm::vec3 min = glm::min(a, b) * (round % 40 == 0 ? 0.1f : 1.0f);
    const glm::vec3 max = glm::max(a, b) * (round % 40 == 0 ? 0.1f : 1.0f);
    const std::vector<Slot> found = InBox(index, min, max);
    EXPECT_TRUE(std::adjacent_find(found.begin(), found.end()) == found.end());
    for (const auto& [s, p] : model) {
      const bool listed = std::binary_search(found.begin(), found.end(), s);
      if (Within(p, min, max)) {
        EXPECT_TRUE(listed) << "slot " << s;
      }
      // What is listed is in a covered cell: within a cell of the box.
      if (listed) {
        EXPECT_TRUE(Within(p, min - glm::vec3(8.001f), max + glm::vec3(8.001f)))
            << "slot " << s;
      }
    }
  }
}

TEST(SpatialIndexTest, FarAndInfinitePositionsLandInEdgeCellsAndAreFound) {
  SpatialIndex index(1);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  index.Place(1, {3e38f, 0, 0});
  index.Place(2, {-kInf, 0, 0});
  index.Place(3, {0, 0, 0});
  EXPECT_EQ(InBox(index, {1e30f, -1, -1}, {kInf, 1, 1}),
            std::vector<Slot>({1}));
  EXPECT_EQ(InBox(index, {-kInf, -1, -1}, {-1e30f, 1, 1}),
            std::vector<Slot>({2}));
  EXPECT_EQ(InBox(index, {-kInf, -1, -1}, {kInf, 1, 1}),
            std::vector<Slot>({1, 2, 3}));
  // A box covering the whole grid counts its cells without overflow, and is
  // walked by its occupied cells.
  EXPECT_EQ(index.CellsCovering({-kInf, -kInf, -kInf}, {kInf, kInf, kInf}),
            uint64_t{1} << 63);
  EXPECT_EQ(index.CellsCovering({0.5f, 0.5f, 0.5f}, {2.5f, 1.5f, 0.9f}), 6u);
  EXPECT_EQ(index.occupied_cells(), 3u);
}

TEST(SpatialIndexTest, MovesWithinACellChangeNothingAndEmptyCellsGo) {
  SpatialIndex index(10);
  index.Place(7, {1, 1, 1});
  index.Place(7, {9, 9, 9});
  EXPECT_EQ(index.occupied_cells(), 1u);
  index.Place(7, {11, 9, 9});
  EXPECT_EQ(index.occupied_cells(), 1u);
  EXPECT_EQ(InBox(index, {10, 0, 0}, {19, 9, 9}), std::vector<Slot>({7}));
  EXPECT_TRUE(InBox(index, {0, 0, 0}, {9, 9, 9}).empty());
  index.Remove(7);
  index.Remove(7);
  EXPECT_EQ(index.size(), 0u);
  EXPECT_EQ(index.occupied_cells(), 0u);
  EXPECT_FALSE(index.Placed(7));
}

}  // namespace
}  // namespace xform::server
