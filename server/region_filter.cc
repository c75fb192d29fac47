// Copyright 2026 The xform Authors.
//
// The view of a region of space (MakeRegionFilter, view_filter.h).

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "server/view_filter.h"

namespace xform::server {
namespace {

using Slot = ViewFilter::Slot;

// The box around `region` grown by its margin, widened by a little more
// than rounding could move a border (a sphere's test and its box round
// apart): every position the view may hold is inside it.
void CullBounds(const Region& region, glm::vec3* min, glm::vec3* max) {
  region.GrownBounds(min, max);
  const auto widen = [](float v) { return (std::fabs(v) + 1) * 1e-5f; };
  for (int axis = 0; axis < 3; ++axis) {
    (*min)[axis] -= widen((*min)[axis]);
    (*max)[axis] += widen((*max)[axis]);
  }
}

bool Within(glm::vec3 p, glm::vec3 min, glm::vec3 max) {
  return p.x >= min.x && p.x <= max.x && p.y >= min.y && p.y <= max.y &&
         p.z >= min.z && p.z <= max.z;
}

// The search for a region view's members as its snapshot starts: the inner
// view's own search first (its bits must be whole before they are
// intersected), then the slots in the cells the region grown by its margin
// covers (found from the index at once), judged a chunk at a time, the
// lock released between. Frames published meanwhile judge what they move
// or touch, as for any region view: right for every slot, whether the
// search has passed it or not.
struct RegionSearch final : ViewFilter::Finding {
  std::unique_ptr<ViewFilter::Finding> inner;  // Until it is done.
  CountedSlotBits inner_found;  // The inner search's; its bits say the same.
  std::vector<Slot> candidates;
  size_t next = 0;
};

class RegionFilter final : public ViewFilter {
 public:
  RegionFilter(const PublishedState& state, const SpatialIndex& index,
               const Region& region, std::unique_ptr<ViewFilter> inner,
               size_t walk_chunk)
      : ViewFilter(state),
        index_(index),
        region_(region),
        inner_(std::move(inner)),
        walk_chunk_(walk_chunk) {}

  bool Contains(Slot slot) const override { return in_.test(slot); }

  bool Follow(EntityId e, Slot slot) override {
    const bool in_inner = inner_ == nullptr || inner_->Follow(e, slot);
    if (slot != PublishedState::kNoSlot) return Judge(slot, in_inner);
    if (const Slot freed = state_.FindThisFrame(e);
        freed != PublishedState::kNoSlot) {
      in_.reset(freed);  // Before the slot is reused.
    }
    return false;
  }

  bool WantsMarkedMoves(size_t) const override { return false; }

  void ForEachMoved(const FrameMoves& moves,
                    absl::FunctionRef<void(size_t k)> in_view) const override {
    const absl::Span<const Slot> slots = moves.slots();
    for (size_t k = 0; k < slots.size(); ++k) {
      if (in_.test(slots[k])) in_view(k);
    }
  }

  bool MovesChangeMembership() const override { return true; }

  void FollowMoves(const FrameMoves& moves,
                   absl::FunctionRef<void(size_t k, Moved how)> f) override {
    const absl::Span<const Slot> slots = moves.slots();
    const absl::Span<const glm::vec3> positions = moves.positions();
    glm::vec3 min, max;
    CullBounds(region_, &min, &max);
    for (size_t k = 0; k < slots.size(); ++k) {
      const Slot slot = slots[k];
      if (slot == PublishedState::kNoSlot) continue;
      const bool was = in_.test(slot);
      // One outside the bounds of the region grown was not in the view and
      // does not enter it: most of the world, told by one bit and a read of
      // positions side by side.
      if (!was && !positions.empty() && !Within(positions[k], min, max)) {
        continue;
      }
      const bool is = Judge(slot, inner_ == nullptr || inner_->Contains(slot));
      if (was && is) {
        f(k, Moved::kStayed);
      } else if (is) {
        f(k, Moved::kEntered);
      } else if (was) {
        f(k, Moved::kLeft);
      }
    }
  }

  // The bits are kept, not cleared: a view sent whole again holds what the
  // rule says it holds, whether or not it was resent.
  std::unique_ptr<Finding> StartSnapshot(CountedSlotBits&) override {
    auto search = std::make_unique<RegionSearch>();
    if (inner_ != nullptr) {
      search->inner = inner_->StartSnapshot(search->inner_found);
    }
    glm::vec3 min, max;
    CullBounds(region_, &min, &max);
    index_.ForEachInBox(min, max,
                        [&](Slot slot) { search->candidates.push_back(slot); });
    return search;
  }

  bool FindMore(Finding& finding, CountedSlotBits& stale) override {
    auto& search = static_cast<RegionSearch&>(finding);
    if (search.inner != nullptr) {
      if (!inner_->FindMore(*search.inner, search.inner_found)) return false;
      search.inner.reset();
    }
    const size_t end =
        std::min(search.candidates.size(), search.next + walk_chunk_);
    for (; search.next < end; ++search.next) {
      const Slot slot = search.candidates[search.next];
      if (state_.entity(slot) == kNoEntity) {
        in_.reset(slot);  // Freed since it was found.
      } else if (Judge(slot, inner_ == nullptr || inner_->Contains(slot))) {
        stale.set(slot);
      }
    }
    return search.next == search.candidates.size();
  }

  void Interrupt(Finding& finding, const FrameChanges& changes) override {
    auto& search = static_cast<RegionSearch&>(finding);
    if (search.inner != nullptr) inner_->Interrupt(*search.inner, changes);
  }

  const Region* region() const override { return &region_; }

  void SetRegion(const Region& region,
                 absl::FunctionRef<void(Slot, Moved)> f) override {
    // What it holds is inside the old region grown; what may enter is
    // inside the new one: the slots of the cells of both, each judged once
    // by the new region.
    const Region old = region_;
    region_ = region;
    absl::flat_hash_set<Slot> judged;
    const auto judge = [&](Slot slot) {
      if (!judged.insert(slot).second) return;
      const bool was = in_.test(slot);
      const bool is = Judge(slot, inner_ == nullptr || inner_->Contains(slot));
      if (was != is) f(slot, is ? Moved::kEntered : Moved::kLeft);
    };
    glm::vec3 min, max;
    CullBounds(old, &min, &max);
    index_.ForEachInBox(min, max, judge);
    CullBounds(region_, &min, &max);
    index_.ForEachInBox(min, max, judge);
  }

 private:
  // The rule, for the live `slot` as the state holds it now; sets its bit.
  bool Judge(Slot slot, bool in_inner) {
    const bool is = in_inner && region_.Holds(in_.test(slot),
                                              state_.world(slot).translation());
    if (is) {
      in_.set(slot);
    } else {
      in_.reset(slot);
    }
    return is;
  }

  const SpatialIndex& index_;
  Region region_;
  const std::unique_ptr<ViewFilter> inner_;  // Null: the whole world.
  const size_t walk_chunk_;
  // The slots in the view. Bits up to the highest member's slot.
  SlotBits in_;
};

}  // namespace

uint64_t CellsOfRegion(const Region& region, float cell_size) {
  glm::vec3 min, max;
  CullBounds(region, &min, &max);
  return SpatialIndex(cell_size).CellsCovering(min, max);
}

std::unique_ptr<ViewFilter> MakeRegionFilter(const PublishedState& state,
                                             const SpatialIndex& index,
                                             const Region& region,
                                             std::unique_ptr<ViewFilter> inner,
                                             size_t walk_chunk) {
  return std::make_unique<RegionFilter>(state, index, region, std::move(inner),
                                        walk_chunk);
}

}  // namespace xform::server
