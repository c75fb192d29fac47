// Copyright 2026 The xform Authors.
//
// SpatialIndex: which slots of a world (PublishedState's) are in which cell
// of a uniform grid over world space, by their positions, so that a region
// subscriber's view is found from the cells its region covers rather than
// from the whole world.
//
// A world keeps one only while it has a region subscriber: a world without
// pays nothing. It is kept from each frame's lists: Place for what was
// created or moved, Remove for what was destroyed.
//
// Cells are cubes of `cell_size`, keyed by their integer coordinates, each
// clamped to +-2^20 (so a position past 2^20 cells lands in an edge cell,
// and a query that reaches it covers that cell too: clamping keeps order).
// Only occupied cells take memory.
//
// Costs:
//   Place    O(1): a compare and the position's write when the slot stays
//            in its cell (most moves), a hash lookup when it changes cell.
//   Remove   O(1): a hash lookup.
//   ForEachCell   O(min(cells the boxes cover, occupied cells) + what `f`
//            does with the cells visited).
//   CellAt   O(1): a hash lookup.
//   PlaceMoves    O(moves log moves): Place for each, and the frame's moves
//            by cell.
//   ForEachMoveInBox  O(min(cells the box covers, cells with moves) + the
//            moves from and to the cells visited).
// Memory: 24 bytes per slot ever placed (on 2 MB pages when big: a frame's
// moves read them at scattered slots, and with 4 KB pages each read is a
// TLB miss too; docs/benchmarks.md, BM_SpatialIndexUpkeep), and 16 bytes
// per placed slot plus a node per occupied cell.
//
// Not thread-safe: the Replicator's lock guards it.

#ifndef XFORM_SERVER_REPLICATION_SPATIAL_INDEX_H_
#define XFORM_SERVER_REPLICATION_SPATIAL_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "glm/vec3.hpp"
#include "server/replication/published_state.h"
#include "xform/internal/huge_page_allocator.h"

namespace xform::server {

class SpatialIndex {
 public:
  using Slot = PublishedState::Slot;

  // `cell_size` > 0, in world units.
  explicit SpatialIndex(float cell_size);

  float cell_size() const { return cell_size_; }
  // Slots placed.
  size_t size() const { return placed_; }
  // Cells holding at least one slot.
  size_t occupied_cells() const { return cells_.size(); }

  // Puts `slot` where `position` is, whether or not it was placed before.
  void Place(Slot slot, glm::vec3 position) {
    const CellKey key = KeyOf(position);
    if (slot < where_.size() && where_[slot].key == key) {
      where_[slot].cell->positions[where_[slot].index] = position;
      return;
    }
    Move(slot, key, position);
  }
  // Takes `slot` out (nothing if it was not placed).
  void Remove(Slot slot);
  bool Placed(Slot slot) const {
    return slot < where_.size() && where_[slot].key != kNoCell;
  }

  // A frame's moves: Place(slots[k], positions[k]) for each k (a slot of
  // kNoSlot is passed over), and the moves kept by the cells they left and
  // entered until the next call, for ForEachMoveInBox: so that each of many
  // region views visits the moves near it, not all of them.
  void PlaceMoves(absl::Span<const Slot> slots,
                  absl::Span<const glm::vec3> positions);
  // Calls f(k) once for each k of the last PlaceMoves whose slot left or
  // entered a cell that the box from `min` to `max` covers: every move
  // from or to a position inside the box, and others near it (the caller
  // tests).
  void ForEachMoveInBox(glm::vec3 min, glm::vec3 max,
                        absl::FunctionRef<void(size_t k)> f) const;

  // An occupied cell: the box its positions are in (`clamped`: an edge
  // cell, which holds positions past it too), its slots, and each one's
  // position as last placed, side by side.
  struct CellView {
    glm::vec3 min, max;
    bool clamped;
    absl::Span<const Slot> slots;
    absl::Span<const glm::vec3> positions;
    uint64_t key = 0;  // What CellAt() finds it by again.
  };
  // The occupied cell keyed `key` as it is now; false (and nothing called)
  // if it holds no slot any more. O(1).
  bool CellAt(uint64_t key, absl::FunctionRef<void(const CellView&)> f) const;
  // A box of world space, from `min` to `max`.
  struct Box {
    glm::vec3 min, max;
  };
  // Calls `f` once for each occupied cell that one of `boxes` covers and
  // `wanted` wants (asked of a cell's box before it is looked up; an edge
  // cell is always wanted). The cells, not the positions: a cell holds
  // slots near a box too (the caller tests).
  void ForEachCell(absl::Span<const Box> boxes,
                   absl::FunctionRef<bool(glm::vec3 min, glm::vec3 max)> wanted,
                   absl::FunctionRef<void(const CellView&)> f) const;

 private:
  using CellKey = uint64_t;
  static constexpr CellKey kNoCell = ~CellKey{0};
  static constexpr int kCoordinateBits = 21;
  static constexpr int64_t kCoordinateLimit = int64_t{1}
                                              << (kCoordinateBits - 1);

  struct Cell3 {
    int64_t x, y, z;
  };
  Cell3 CellOf(glm::vec3 position) const {
    return CellOf(position, inverse_cell_size_);
  }
  static Cell3 CellOf(glm::vec3 position, float inverse_cell_size);
  friend uint64_t CellsCovering(float cell_size, glm::vec3 min, glm::vec3 max);
  static CellKey KeyOfCell(Cell3 cell) {
    const auto bits = [](int64_t c) {
      return static_cast<uint64_t>(c + kCoordinateLimit);
    };
    return bits(cell.x) | bits(cell.y) << kCoordinateBits |
           bits(cell.z) << (2 * kCoordinateBits);
  }
  CellKey KeyOf(glm::vec3 position) const {
    return KeyOfCell(CellOf(position));
  }
  static Cell3 CellOfKey(CellKey key);
  // Its slots and their positions, side by side: a region's search reads
  // positions a cell at a time, not a slot's row each (a trip to memory).
  struct Cell {
    std::vector<Slot> slots;
    std::vector<glm::vec3> positions;
  };
  CellView ViewOf(Cell3 cell, const Cell* slots) const;
  void Move(Slot slot, CellKey key, glm::vec3 position);
  void TakeOut(Slot slot);

  // Where a slot is: its cell (which a node map keeps in place, so that a
  // move within it is not a lookup) and its index there; one row a slot,
  // so that a move is one trip to memory.
  struct Where {
    CellKey key = kNoCell;  // kNoCell: not placed.
    Cell* cell = nullptr;
    uint32_t index = 0;
  };

  // One of the last PlaceMoves' moves under a cell it touched: the cell it
  // entered (`other`: the one it left, or kNoCell), or the cell it left
  // (`left`; `other`: the one it entered).
  struct MoveInCell {
    CellKey key;
    CellKey other;
    uint32_t k;
    bool left;
  };
  // Widens the cells from `low` to `high` to hold `c`.
  static void Grow(const Cell3& c, Cell3& low, Cell3& high);
  // Whether cell `c` is one of those from `low` to `high`.
  static bool Within(const Cell3& c, const Cell3& low, const Cell3& high);
  // Narrows the cells from `low` to `high` to those from `bound_low` to
  // `bound_high` (seen_low_/seen_high_, say); false when none is left.
  static bool Clamp(const Cell3& bound_low, const Cell3& bound_high, Cell3& low,
                    Cell3& high);
  // The cells from `low` to `high` (0 when empty; saturating at 2^63).
  static uint64_t Count(const Cell3& low, const Cell3& high);

  const float cell_size_;
  const float inverse_cell_size_;
  absl::node_hash_map<CellKey, Cell> cells_;
  // Every cell ever occupied is between these (low > high: none yet).
  Cell3 seen_low_{kCoordinateLimit, kCoordinateLimit, kCoordinateLimit};
  Cell3 seen_high_{-kCoordinateLimit, -kCoordinateLimit, -kCoordinateLimit};
  std::vector<MoveInCell> moves_;  // By key.
  // The cells of moves_ lie between these (low > high: none): a box is
  // visited only where it meets them (a flat world's height, say).
  Cell3 moves_low_{0, 0, 0}, moves_high_{-1, -1, -1};
  // Each cell's moves: a range of moves_.
  absl::flat_hash_map<CellKey, std::pair<uint32_t, uint32_t>> moves_by_cell_;
  internal::Column<Where> where_;
  size_t placed_ = 0;
};

// The cells of `cell_size` that the box from `min` to `max` covers, as a
// SpatialIndex of that size counts them (saturating at 2^63). O(1).
uint64_t CellsCovering(float cell_size, glm::vec3 min, glm::vec3 max);

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_SPATIAL_INDEX_H_
