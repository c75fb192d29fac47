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

absl::StatusOr<World> World::FromImage(WorldImage image) {
  const size_t n = image.size();
  const auto broken = [](auto&&... args) {
    return absl::DataLossError(absl::StrCat("not a world: ", args...));
  };
  if (image.parent.size() != n || image.position.size() != n ||
      image.rotation.size() != n || image.scale.size() != n) {
    return broken("its columns differ in length");
  }
  if (n >= kClaimed) return broken(n, " instances");
  World world;
  world.frame_ = image.frame;
  // Slots in instance order: slot i is instance i.
  world.slot_entity_ = std::move(image.entity);
  world.parent_ = std::move(image.parent);
  world.rotation_ = std::move(image.rotation);
  world.scale_ = std::move(image.scale);
  world.local_.resize(n);
  world.world_.resize(n);
  world.subtree_size_.assign(n, 1);
  world.slot_.resize(n);
  world.frame_flags_.assign(n, 0);
  world.slot_index_.resize(n);
  world.slot_flags_.assign(n, 0);
  for (Index i = 0; i < n; ++i) {
    const Transform local{image.position[i], world.rotation_[i],
                          world.scale_[i]};
    // A stored rotation is normalized already: normalizing it again could
    // change its last bit, so it is checked, not normalized.
    if (absl::Status valid = ValidateTransform(local); !valid.ok()) {
      return broken("instance ", i, ": ", valid.message());
    }
    const EntityId entity = world.slot_entity_[i];
    if (entity == kNoEntity || world.slot_of_.Insert(entity, i) != i) {
      return broken("instance ", i, " has id ", entity, ", zero or repeated");
    }
    const Index p = world.parent_[i];
    if (p != kNoIndex && p >= i) {
      return broken("instance ", i, "'s parent ", p,
                    " does not come before it");
    }
    world.local_[i] = ToMatrix(local);
    world.slot_[i] = i;
    world.slot_index_[i] = i;
  }
  // Subtree sizes from the parents, children first; then the order is
  // pre-order when each parent's children tile its range exactly.
  for (Index i = static_cast<Index>(n); i-- > 0;) {
    if (world.parent_[i] != kNoIndex) {
      world.subtree_size_[world.parent_[i]] += world.subtree_size_[i];
    }
  }
  for (Index i = 0; i < n; ++i) {
    Index c = i + 1;
    while (c < world.end_of(i) && world.parent_[c] == i) c = world.end_of(c);
    if (c != world.end_of(i)) {
      return broken("instance ", c, " is inside instance ", i,
                    "'s range but not below it: not pre-order");
    }
  }
  const internal::SweepRange all{0, static_cast<Index>(n)};
  const internal::SweepJob sweep{
      .parent = {world.parent_.data(), n},
      .subtree_size = {world.subtree_size_.data(), n},
      .local = {world.local_.data(), n},
      .ranges = {&all, n > 0 ? 1u : 0u},
      .world = {world.world_.data(), n},
  };
  if (!sweep.Run()) return broken("a world matrix is not finite");
  return world;
}

void World::RestartFrames(uint64_t frame) {
  FrameChanges dropped;
  EndFrame(&dropped);
  frame_ = std::max(frame_, frame);
}

}  // namespace xform
