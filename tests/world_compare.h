// Copyright 2026 The xform Authors.
//
// Two worlds that applied the same batches in different ways (restructuring
// or shifting) must agree to the bit: the same instances in the same
// pre-order, and at a frame's end the same changes. These put both in forms
// that compare with ==.

#ifndef XFORM_TESTS_WORLD_COMPARE_H_
#define XFORM_TESTS_WORLD_COMPARE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "xform/world.h"

namespace xform::testing {

// An instance as entity, parent and its world matrix's bits (so that NaNs
// and signed zeros compare too).
using InstanceBits = std::tuple<EntityId, EntityId, std::array<uint32_t, 12>>;

// The world in its pre-order.
inline std::vector<InstanceBits> InOrder(const World& world) {
  std::vector<InstanceBits> out;
  world.ForEach([&](EntityId e, EntityId parent, const Matrix3x4& m) {
    std::array<uint32_t, 12> bits;
    static_assert(sizeof(bits) == sizeof(Matrix3x4));
    std::memcpy(bits.data(), &m, sizeof(bits));
    out.emplace_back(e, parent, bits);
  });
  return out;
}

// A frame's changes, each list sorted: the order within a list is the
// world's storage order, which the two ways need not share mid-frame.
struct SortedChanges {
  std::vector<std::pair<EntityId, std::array<uint32_t, 12>>> moved;
  std::vector<std::pair<EntityId, EntityId>> created;
  std::vector<EntityId> destroyed;
  std::vector<std::pair<EntityId, EntityId>> reparented;
  bool operator==(const SortedChanges&) const = default;
};

inline SortedChanges Sorted(const FrameChanges& changes) {
  SortedChanges out;
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    std::array<uint32_t, 12> bits;
    std::memcpy(bits.data(), changes.moved_world.data() + 12 * k, sizeof(bits));
    out.moved.emplace_back(changes.moved[k], bits);
  }
  for (size_t k = 0; k < changes.created.size(); ++k) {
    out.created.emplace_back(changes.created[k], changes.created_parent[k]);
  }
  out.destroyed = changes.destroyed;
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    out.reparented.emplace_back(changes.reparented[k],
                                changes.reparented_parent[k]);
  }
  std::sort(out.moved.begin(), out.moved.end());
  std::sort(out.created.begin(), out.created.end());
  std::sort(out.destroyed.begin(), out.destroyed.end());
  std::sort(out.reparented.begin(), out.reparented.end());
  return out;
}

}  // namespace xform::testing

#endif  // XFORM_TESTS_WORLD_COMPARE_H_
