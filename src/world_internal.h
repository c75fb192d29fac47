// Copyright 2026 The xform Authors.
//
// What World's implementation files (world*.cc) share and nothing else sees.

#ifndef XFORM_SRC_WORLD_INTERNAL_H_
#define XFORM_SRC_WORLD_INTERNAL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "xform/world.h"

namespace xform::world_internal {

// slot_flags_: a subtree root to recompute in this batch.
constexpr uint8_t kDirty = 1;
// frame_flags_: already listed in moved_slots_, or created in this frame (and
// so reported through created_slots_ instead).
constexpr uint8_t kMovedThisFrame = 1;
constexpr uint8_t kCreatedThisFrame = 2;

inline absl::Status NotFinite() {
  return absl::InvalidArgumentError(
      "the batch would make a world matrix non-finite (finite numbers whose "
      "products overflow); nothing was applied");
}

}  // namespace xform::world_internal

#endif  // XFORM_SRC_WORLD_INTERNAL_H_
