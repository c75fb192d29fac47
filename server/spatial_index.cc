// Copyright 2026 The xform Authors.

#include "server/spatial_index.h"

#include <algorithm>
#include <cmath>

namespace xform::server {

SpatialIndex::SpatialIndex(float cell_size)
    : cell_size_(cell_size), inverse_cell_size_(1.0f / cell_size) {}

SpatialIndex::Cell3 SpatialIndex::CellOf(glm::vec3 position) const {
  // In double, so that a float position far past the limits (or infinite)
  // clamps rather than overflowing the conversion.
  const auto coordinate = [this](float v) {
    const double cell = std::floor(static_cast<double>(v) * inverse_cell_size_);
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

void SpatialIndex::Move(Slot slot, CellKey key) {
  if (slot >= key_of_slot_.size()) {
    key_of_slot_.resize(slot + 1, kNoCell);
    index_in_cell_.resize(slot + 1);
  }
  if (key_of_slot_[slot] == kNoCell) {
    ++placed_;
  } else {
    TakeOut(slot, key_of_slot_[slot]);
  }
  std::vector<Slot>& cell = cells_[key];
  index_in_cell_[slot] = static_cast<uint32_t>(cell.size());
  cell.push_back(slot);
  key_of_slot_[slot] = key;
}

void SpatialIndex::Remove(Slot slot) {
  if (!Placed(slot)) return;
  TakeOut(slot, key_of_slot_[slot]);
  key_of_slot_[slot] = kNoCell;
  --placed_;
}

void SpatialIndex::TakeOut(Slot slot, CellKey key) {
  auto it = cells_.find(key);
  std::vector<Slot>& cell = it->second;
  const uint32_t index = index_in_cell_[slot];
  const Slot last = cell.back();
  cell[index] = last;
  index_in_cell_[last] = index;
  cell.pop_back();
  if (cell.empty()) cells_.erase(it);
}

uint64_t SpatialIndex::CellsCovering(glm::vec3 min, glm::vec3 max) const {
  const Cell3 low = CellOf(min);
  const Cell3 high = CellOf(max);
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

void SpatialIndex::ForEachInBox(glm::vec3 min, glm::vec3 max,
                                absl::FunctionRef<void(Slot)> f) const {
  const Cell3 low = CellOf(min);
  const Cell3 high = CellOf(max);
  if (CellsCovering(min, max) > cells_.size()) {
    // Fewer cells are occupied than covered: walk those.
    for (const auto& [key, slots] : cells_) {
      const Cell3 c = CellOfKey(key);
      if (c.x < low.x || c.x > high.x || c.y < low.y || c.y > high.y ||
          c.z < low.z || c.z > high.z) {
        continue;
      }
      for (Slot slot : slots) f(slot);
    }
    return;
  }
  for (int64_t z = low.z; z <= high.z; ++z) {
    for (int64_t y = low.y; y <= high.y; ++y) {
      for (int64_t x = low.x; x <= high.x; ++x) {
        auto it = cells_.find(KeyOfCell({x, y, z}));
        if (it == cells_.end()) continue;
        for (Slot slot : it->second) f(slot);
      }
    }
  }
}

}  // namespace xform::server
