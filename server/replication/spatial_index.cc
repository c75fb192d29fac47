// Copyright 2026 The xform Authors.

#include "server/replication/spatial_index.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace xform::server {

SpatialIndex::SpatialIndex(float cell_size)
    : cell_size_(cell_size), inverse_cell_size_(1.0f / cell_size) {}

SpatialIndex::Cell3 SpatialIndex::CellOf(glm::vec3 position,
                                         float inverse_cell_size) {
  // In double, so that a float position far past the limits (or infinite)
  // clamps rather than overflowing the conversion.
  const auto coordinate = [inverse_cell_size](float v) {
    const double cell = std::floor(static_cast<double>(v) * inverse_cell_size);
    return static_cast<int64_t>(
        std::clamp(cell, static_cast<double>(-kCoordinateLimit),
                   static_cast<double>(kCoordinateLimit - 1)));
  };
  return {coordinate(position.x), coordinate(position.y),
          coordinate(position.z)};
}

SpatialIndex::Cell3 SpatialIndex::CellOfKey(CellKey key) {
  constexpr uint64_t kMask = (uint64_t{1} << kCoordinateBits) - 1;
  const auto coordinate = [](uint64_t bits) {
    return static_cast<int64_t>(bits) - kCoordinateLimit;
  };
  return {coordinate(key & kMask), coordinate((key >> kCoordinateBits) & kMask),
          coordinate((key >> (2 * kCoordinateBits)) & kMask)};
}

void SpatialIndex::Move(Slot slot, CellKey key, glm::vec3 position) {
  if (slot >= where_.size()) where_.resize(slot + 1);
  if (where_[slot].key == kNoCell) {
    ++placed_;
  } else {
    TakeOut(slot);
  }
  const auto [it, added] = cells_.try_emplace(key);
  Cell& cell = it->second;
  if (added) Grow(CellOfKey(key), seen_low_, seen_high_);
  where_[slot] = {key, &cell, static_cast<uint32_t>(cell.slots.size())};
  cell.slots.push_back(slot);
  cell.positions.push_back(position);
}

void SpatialIndex::Remove(Slot slot) {
  if (!Placed(slot)) return;
  TakeOut(slot);
  where_[slot] = Where{};
  --placed_;
}

void SpatialIndex::TakeOut(Slot slot) {
  const Where where = where_[slot];
  Cell& cell = *where.cell;
  const Slot last = cell.slots.back();
  cell.slots[where.index] = last;
  cell.positions[where.index] = cell.positions.back();
  where_[last].index = where.index;
  cell.slots.pop_back();
  cell.positions.pop_back();
  if (cell.slots.empty()) cells_.erase(where.key);
}

void SpatialIndex::PlaceMoves(absl::Span<const Slot> slots,
                              absl::Span<const glm::vec3> positions) {
  moves_.clear();
  moves_by_cell_.clear();
  moves_low_ = {kCoordinateLimit, kCoordinateLimit, kCoordinateLimit};
  moves_high_ = {-kCoordinateLimit, -kCoordinateLimit, -kCoordinateLimit};
  for (size_t k = 0; k < slots.size(); ++k) {
    const Slot slot = slots[k];
    if (slot == PublishedState::kNoSlot) continue;
    const CellKey from = Placed(slot) ? where_[slot].key : kNoCell;
    const CellKey to = KeyOf(positions[k]);
    Place(slot, positions[k]);
    const auto index = static_cast<uint32_t>(k);
    moves_.push_back({to, from, index, false});
    if (from != kNoCell && from != to)
      moves_.push_back({from, to, index, true});
  }
  std::sort(
      moves_.begin(), moves_.end(),
      [](const MoveInCell& a, const MoveInCell& b) { return a.key < b.key; });
  for (uint32_t begin = 0, end = 0; begin < moves_.size(); begin = end) {
    while (end < moves_.size() && moves_[end].key == moves_[begin].key) ++end;
    moves_by_cell_.emplace(moves_[begin].key, std::pair{begin, end});
    Grow(CellOfKey(moves_[begin].key), moves_low_, moves_high_);
  }
}

void SpatialIndex::Grow(const Cell3& c, Cell3& low, Cell3& high) {
  low = {std::min(low.x, c.x), std::min(low.y, c.y), std::min(low.z, c.z)};
  high = {std::max(high.x, c.x), std::max(high.y, c.y), std::max(high.z, c.z)};
}

bool SpatialIndex::Within(const Cell3& c, const Cell3& low, const Cell3& high) {
  return c.x >= low.x && c.x <= high.x && c.y >= low.y && c.y <= high.y &&
         c.z >= low.z && c.z <= high.z;
}

void SpatialIndex::ForEachMoveInBox(glm::vec3 min, glm::vec3 max,
                                    absl::FunctionRef<void(size_t k)> f) const {
  const Cell3 low = CellOf(min);
  const Cell3 high = CellOf(max);
  // A move from a cell of the box to another of it is called for the cell
  // it entered only. Cells are looked up only where moves are.
  const auto visit = [&](std::pair<uint32_t, uint32_t> range) {
    for (uint32_t i = range.first; i < range.second; ++i) {
      const MoveInCell& move = moves_[i];
      if (move.left && Within(CellOfKey(move.other), low, high)) continue;
      f(move.k);
    }
  };
  Cell3 from = low, to = high;
  if (!Clamp(moves_low_, moves_high_, from, to)) return;
  if (Count(from, to) > moves_by_cell_.size()) {
    for (const auto& [key, range] : moves_by_cell_) {
      if (Within(CellOfKey(key), low, high)) visit(range);
    }
    return;
  }
  for (int64_t z = from.z; z <= to.z; ++z) {
    for (int64_t y = from.y; y <= to.y; ++y) {
      for (int64_t x = from.x; x <= to.x; ++x) {
        auto it = moves_by_cell_.find(KeyOfCell({x, y, z}));
        if (it != moves_by_cell_.end()) visit(it->second);
      }
    }
  }
}

uint64_t CellsCovering(float cell_size, glm::vec3 min, glm::vec3 max) {
  const float inverse = 1.0f / cell_size;
  return SpatialIndex::Count(SpatialIndex::CellOf(min, inverse),
                             SpatialIndex::CellOf(max, inverse));
}

bool SpatialIndex::Clamp(const Cell3& bound_low, const Cell3& bound_high,
                         Cell3& low, Cell3& high) {
  low = {std::max(low.x, bound_low.x), std::max(low.y, bound_low.y),
         std::max(low.z, bound_low.z)};
  high = {std::min(high.x, bound_high.x), std::min(high.y, bound_high.y),
          std::min(high.z, bound_high.z)};
  return low.x <= high.x && low.y <= high.y && low.z <= high.z;
}

uint64_t SpatialIndex::Count(const Cell3& low, const Cell3& high) {
  uint64_t cells = 1;
  for (int64_t extent :
       {high.x - low.x + 1, high.y - low.y + 1, high.z - low.z + 1}) {
    const auto each = static_cast<uint64_t>(std::max<int64_t>(extent, 0));
    if (each != 0 && cells > (uint64_t{1} << 63) / each) {
      return uint64_t{1} << 63;
    }
    cells *= each;
  }
  return cells;
}

SpatialIndex::CellView SpatialIndex::ViewOf(Cell3 cell,
                                            const Cell* slots) const {
  const auto edge = [](int64_t c) {
    return c == -kCoordinateLimit || c == kCoordinateLimit - 1;
  };
  return {
      .min = glm::vec3(static_cast<float>(cell.x), static_cast<float>(cell.y),
                       static_cast<float>(cell.z)) *
             cell_size_,
      .max = glm::vec3(static_cast<float>(cell.x + 1),
                       static_cast<float>(cell.y + 1),
                       static_cast<float>(cell.z + 1)) *
             cell_size_,
      .clamped = edge(cell.x) || edge(cell.y) || edge(cell.z),
      .slots = slots != nullptr ? absl::MakeConstSpan(slots->slots)
                                : absl::Span<const Slot>(),
      .positions = slots != nullptr ? absl::MakeConstSpan(slots->positions)
                                    : absl::Span<const glm::vec3>(),
      .key = KeyOfCell(cell)};
}

bool SpatialIndex::CellAt(uint64_t key,
                          absl::FunctionRef<void(const CellView&)> f) const {
  const auto it = cells_.find(key);
  if (it == cells_.end()) return false;
  f(ViewOf(CellOfKey(key), &it->second));
  return true;
}

void SpatialIndex::ForEachCell(
    absl::Span<const Box> boxes,
    absl::FunctionRef<bool(glm::vec3 min, glm::vec3 max)> wanted,
    absl::FunctionRef<void(const CellView&)> f) const {
  const auto visit_if_wanted = [&](const CellView& cell) {
    if (cell.clamped || wanted(cell.min, cell.max)) f(cell);
  };
  // Only where cells have been: a box's empty reaches (a flat world's
  // height, say) are not looked up. An empty box ends with low > high.
  absl::InlinedVector<std::pair<Cell3, Cell3>, 2> ranges;
  uint64_t covered = 0;
  for (const Box& box : boxes) {
    Cell3 low = CellOf(box.min), high = CellOf(box.max);
    Clamp(seen_low_, seen_high_, low, high);
    covered = std::min(covered + Count(low, high), uint64_t{1} << 63);
    ranges.emplace_back(low, high);
  }
  const auto in_range_before = [&](const Cell3& c, size_t end) {
    for (size_t i = 0; i < end; ++i) {
      if (Within(c, ranges[i].first, ranges[i].second)) return true;
    }
    return false;
  };
  if (covered > cells_.size()) {
    // Fewer cells are occupied than covered: walk those.
    for (const auto& [key, cell] : cells_) {
      const Cell3 c = CellOfKey(key);
      if (in_range_before(c, ranges.size())) visit_if_wanted(ViewOf(c, &cell));
    }
    return;
  }
  for (size_t i = 0; i < ranges.size(); ++i) {
    const auto& [low, high] = ranges[i];
    for (int64_t z = low.z; z <= high.z; ++z) {
      for (int64_t y = low.y; y <= high.y; ++y) {
        for (int64_t x = low.x; x <= high.x; ++x) {
          const Cell3 c{x, y, z};
          if (in_range_before(c, i)) continue;  // Visited already.
          const CellView box = ViewOf(c, nullptr);
          if (!box.clamped && !wanted(box.min, box.max)) continue;
          auto it = cells_.find(KeyOfCell(c));
          if (it != cells_.end()) f(ViewOf(c, &it->second));
        }
      }
    }
  }
}

}  // namespace xform::server
