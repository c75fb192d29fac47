// Copyright 2026 The xform Authors.
//
// WorldImage: a World's state as plain columns, in its pre-order: what a
// snapshot file holds and what a world is rebuilt from. World::CopyImage
// fills one; World::FromImage rebuilds the World from one, bit for bit: the
// same parents, the same local columns and so the same world matrices.
//
// Only what cannot be derived is kept: 52 bytes an entity. Local matrices are
// recomposed from position, rotation and scale (a World keeps them equal to
// ToMatrix of those), world matrices are swept again, subtree sizes follow
// from the parents.

#ifndef XFORM_WORLD_IMAGE_H_
#define XFORM_WORLD_IMAGE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "glm/gtc/quaternion.hpp"
#include "glm/vec3.hpp"
#include "xform/internal/huge_page_allocator.h"
#include "xform/transform.h"

namespace xform {

struct WorldImage {
  // A root's entry in `parent`.
  static constexpr uint32_t kRoot = 0xffffffffu;

  // The frame the world had open.
  uint64_t frame = 1;
  // One entry per instance, in pre-order: every subtree is one contiguous
  // range, and an instance's parent comes before it.
  // The world's own column type, so that FromImage takes them over whole
  // rather than copy them.
  template <typename T>
  using Column = internal::Column<T>;
  Column<EntityId> entity;
  Column<uint32_t> parent;  // Index into these columns, or kRoot.
  Column<glm::vec3> position;
  Column<glm::quat> rotation;  // Normalized, as the world stored it.
  Column<glm::vec3> scale;

  size_t size() const { return entity.size(); }
  // Sizes every column to `n` instances. Growing writes (so faults in) the
  // memory: done ahead, outside a world's lock, CopyImage then only copies.
  void Resize(size_t n);
};

}  // namespace xform

#endif  // XFORM_WORLD_IMAGE_H_
