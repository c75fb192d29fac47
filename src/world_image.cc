// Copyright 2026 The xform Authors.
//
// A World to and from its WorldImage (world_image.h).

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "src/sweep.h"
#include "xform/world.h"

namespace xform {
namespace {

using internal::Index;
using internal::kNoIndex;

}  // namespace

void WorldImage::Resize(size_t n) {
  entity.resize(n);
  parent.resize(n);
  position.resize(n);
  rotation.resize(n);
  scale.resize(n);
}

void World::CopyImage(WorldImage* image) const { CopyImage(image, 0, size()); }

void World::CopyImage(WorldImage* image, size_t first, size_t last) const {
  image->Resize(size());
  image->frame = frame_;
  last = std::min(last, size());
  if (first >= last) return;
  const size_t n = last - first;
  // The contiguous columns are copied whole; the rest gathered.
  static_assert(sizeof(Index) == sizeof(uint32_t) &&
                kNoIndex == WorldImage::kRoot);
  std::memcpy(&image->parent[first], &parent_[first], n * sizeof(Index));
  std::memcpy(&image->rotation[first], &rotation_[first],
              n * sizeof(glm::quat));
  std::memcpy(&image->scale[first], &scale_[first], n * sizeof(glm::vec3));
  for (size_t i = first; i < last; ++i) {
    image->entity[i] = slot_entity_[slot_[i]];
    image->position[i] = local_[i].translation();
  }
}

namespace {

template <typename... Args>
absl::Status NotAWorld(const Args&... args) {
  return absl::DataLossError(absl::StrCat("not a world: ", args...));
}

}  // namespace

absl::Status World::AdoptImageRows(WorldImage& image) {
  const size_t n = image.size();
  // Slots in instance order: slot i is instance i.
  slot_entity_ = std::move(image.entity);
  parent_ = std::move(image.parent);
  rotation_ = std::move(image.rotation);
  scale_ = std::move(image.scale);
  local_.resize(n);
  world_.resize(n);
  subtree_size_.assign(n, 1);
  slot_.resize(n);
  frame_flags_.assign(n, 0);
  slot_index_.resize(n);
  slot_flags_.assign(n, 0);
  for (Index i = 0; i < n; ++i) {
    const Transform local{image.position[i], rotation_[i], scale_[i]};
    // A stored rotation is normalized already: normalizing it again could
    // change its last bit, so it is checked, not normalized.
    if (absl::Status valid = ValidateTransform(local); !valid.ok()) {
      return NotAWorld("instance ", i, ": ", valid.message());
    }
    const EntityId entity = slot_entity_[i];
    if (entity == kNoEntity || slot_of_.Insert(entity, i) != i) {
      return NotAWorld("instance ", i, " has id ", entity,
                       ", zero or repeated");
    }
    const Index p = parent_[i];
    if (p != kNoIndex && p >= i) {
      return NotAWorld("instance ", i, "'s parent ", p,
                       " does not come before it");
    }
    local_[i] = ToMatrix(local);
    slot_[i] = i;
    slot_index_[i] = i;
  }
  return absl::OkStatus();
}

absl::Status World::SizeSubtreesOfPreOrder() {
  // Subtree sizes from the parents, children first; then the order is
  // pre-order when each parent's children tile its range exactly.
  const auto n = static_cast<Index>(size());
  for (Index i = n; i-- > 0;) {
    if (parent_[i] != kNoIndex) subtree_size_[parent_[i]] += subtree_size_[i];
  }
  for (Index i = 0; i < n; ++i) {
    Index c = i + 1;
    while (c < end_of(i) && parent_[c] == i) c = end_of(c);
    if (c != end_of(i)) {
      return NotAWorld("instance ", c, " is inside instance ", i,
                       "'s range but not below it: not pre-order");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<World> World::FromImage(WorldImage image) {
  const size_t n = image.size();
  if (image.parent.size() != n || image.position.size() != n ||
      image.rotation.size() != n || image.scale.size() != n) {
    return NotAWorld("its columns differ in length");
  }
  if (n >= kClaimed) return NotAWorld(n, " instances");
  World world;
  world.frame_ = image.frame;
  if (absl::Status rows = world.AdoptImageRows(image); !rows.ok()) return rows;
  if (absl::Status order = world.SizeSubtreesOfPreOrder(); !order.ok()) {
    return order;
  }
  const internal::SweepRange all{0, static_cast<Index>(n)};
  const internal::SweepJob sweep{
      .parent = {world.parent_.data(), n},
      .subtree_size = {world.subtree_size_.data(), n},
      .local = {world.local_.data(), n},
      .ranges = {&all, n > 0 ? 1u : 0u},
      .world = {world.world_.data(), n},
  };
  if (!sweep.Run()) return NotAWorld("a world matrix is not finite");
  return world;
}

void World::RestartFrames(uint64_t frame) {
  FrameChanges dropped;
  EndFrame(&dropped);
  frame_ = std::max(frame_, frame);
}

}  // namespace xform
