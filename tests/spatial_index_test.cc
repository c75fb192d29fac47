// Copyright 2026 The xform Authors.

#include "server/replication/spatial_index.h"

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
  const SpatialIndex::Box box[] = {{min, max}};
  index.ForEachCell(
      box, [](glm::vec3, glm::vec3) { return true; },
      [&](const SpatialIndex::CellView& cell) {
        found.insert(found.end(), cell.slots.begin(), cell.slots.end());
      });
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

// A frame's moves by cell, against the moves themselves: for random boxes,
// every move from or to a position in the box is called, each once, and
// no move that stayed far from it; the index ends where Place would leave
// it.
TEST(SpatialIndexTest, AFramesMovesAreFoundByTheCellsTheyLeftAndEntered) {
  std::mt19937 random(65);
  std::uniform_real_distribution<float> coordinate(-100, 100);
  std::uniform_real_distribution<float> step(-6, 6);
  SpatialIndex index(8), placed_one_by_one(8);
  std::vector<glm::vec3> position(500);
  for (Slot slot = 0; slot < position.size(); ++slot) {
    position[slot] = {coordinate(random), coordinate(random),
                      coordinate(random)};
    index.Place(slot, position[slot]);
    placed_one_by_one.Place(slot, position[slot]);
  }
  for (int frame = 0; frame < 50; ++frame) {
    std::vector<Slot> slots;
    std::vector<glm::vec3> to;
    std::vector<glm::vec3> from;
    for (int k = 0; k < 120; ++k) {
      // Some not placed (a slot past the world's), one jumping far.
      const Slot slot = k == 7 ? PublishedState::kNoSlot : random() % 500;
      slots.push_back(slot);
      if (slot == PublishedState::kNoSlot) {
        from.emplace_back(0);
        to.emplace_back(0);
        continue;
      }
      from.push_back(position[slot]);
      position[slot] +=
          k == 3 ? glm::vec3(150, 0, 0)
                 : glm::vec3(step(random), step(random), step(random));
      to.push_back(position[slot]);
    }
    // A slot moved twice in a frame is listed once, as frames list it.
    for (size_t k = 0; k < slots.size(); ++k) {
      for (size_t j = 0; j < k; ++j) {
        if (slots[j] == slots[k]) slots[k] = PublishedState::kNoSlot;
      }
    }
    index.PlaceMoves(slots, to);
    for (size_t k = 0; k < slots.size(); ++k) {
      if (slots[k] != PublishedState::kNoSlot) {
        placed_one_by_one.Place(slots[k], to[k]);
      }
    }
    for (int query = 0; query < 10; ++query) {
      glm::vec3 a(coordinate(random), coordinate(random), coordinate(random));
      glm::vec3 b =
          a + glm::vec3(step(random), step(random), step(random)) * 5.0f;
      const glm::vec3 min = glm::min(a, b), max = glm::max(a, b);
      std::vector<size_t> called;
      index.ForEachMoveInBox(min, max, [&](size_t k) { called.push_back(k); });
      std::sort(called.begin(), called.end());
      EXPECT_TRUE(std::adjacent_find(called.begin(), called.end()) ==
                  called.end());
      for (size_t k = 0; k < slots.size(); ++k) {
        if (slots[k] == PublishedState::kNoSlot) continue;
        const bool listed = std::binary_search(called.begin(), called.end(), k);
        if (Within(from[k], min, max) || Within(to[k], min, max)) {
          EXPECT_TRUE(listed) << "move " << k;
        }
        const glm::vec3 cell(8.001f);
        if (listed) {
          EXPECT_TRUE(Within(from[k], min - cell, max + cell) ||
                      Within(to[k], min - cell, max + cell))
              << "move " << k;
        }
      }
    }
  }
  const glm::vec3 everywhere(1e6f);
  EXPECT_EQ(InBox(index, -everywhere, everywhere),
            InBox(placed_one_by_one, -everywhere, everywhere));
  for (const glm::vec3 at : {glm::vec3(0), glm::vec3(40, -30, 10)}) {
    EXPECT_EQ(InBox(index, at - glm::vec3(20), at + glm::vec3(20)),
              InBox(placed_one_by_one, at - glm::vec3(20), at + glm::vec3(20)));
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
  EXPECT_EQ(CellsCovering(1, {-kInf, -kInf, -kInf}, {kInf, kInf, kInf}),
            uint64_t{1} << 63);
  EXPECT_EQ(CellsCovering(1, {0.5f, 0.5f, 0.5f}, {2.5f, 1.5f, 0.9f}), 6u);
  EXPECT_EQ(index.occupied_cells(), 3u);
}

// Cells that two boxes share are visited once, whichever way the walk
// goes (by the boxes' cells, or by the occupied cells when fewer), and a
// cell the caller does not want is not visited.
TEST(SpatialIndexTest, OverlappingBoxesVisitEachCellOnce) {
  // With 7 cells covered: fewer occupied cells than that (walked by
  // them), then more (walked by the boxes' cells).
  for (const Slot others : {0, 20}) {
    SpatialIndex index(1);
    for (Slot s = 0; s < 5 + others; ++s) {
      index.Place(s,
                  {static_cast<float>(s < 5 ? s : s + 10) + 0.5f, 0.5f, 0.5f});
    }
    const SpatialIndex::Box boxes[] = {{{0, 0, 0}, {3.5f, 0.5f, 0.5f}},
                                       {{2, 0, 0}, {4.5f, 0.5f, 0.5f}}};
    std::vector<Slot> found;
    index.ForEachCell(
        boxes, [](glm::vec3 min, glm::vec3) { return min.x != 1; },
        [&](const SpatialIndex::CellView& cell) {
          found.insert(found.end(), cell.slots.begin(), cell.slots.end());
        });
    std::sort(found.begin(), found.end());
    EXPECT_EQ(found, std::vector<Slot>({0, 2, 3, 4})) << others << " others";
  }
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
