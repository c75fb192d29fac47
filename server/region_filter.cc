// Copyright 2026 The xform Authors.
//
// The view of a region of space (MakeRegionFilter, view_filter.h).

#include <memory>
#include <utility>

#include "server/view_filter.h"

namespace xform::server {
namespace {

using Slot = ViewFilter::Slot;

// The search for a region view's members as its snapshot starts: the inner
// view's own search first (its bits must be whole before they are
// intersected), then every slot, a chunk at a time, the lock released
// between. Frames published meanwhile judge what they move or touch, as
// for any region view: right for every slot, whether the scan has passed
// it or not.
struct RegionSearch final : ViewFilter::Finding {
  std::unique_ptr<ViewFilter::Finding> inner;  // Until it is done.
  CountedSlotBits inner_found;  // The inner search's; its bits say the same.
  Slot next = 0;
};

class RegionFilter final : public ViewFilter {
 public:
  RegionFilter(const PublishedState& state, const Region& region,
               std::unique_ptr<ViewFilter> inner, size_t walk_chunk)
      : ViewFilter(state),
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
    for (size_t k = 0; k < slots.size(); ++k) {
      const Slot slot = slots[k];
      if (slot == PublishedState::kNoSlot) continue;
      const bool was = in_.test(slot);
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
    return search;
  }

  bool FindMore(Finding& finding, CountedSlotBits& stale) override {
    auto& search = static_cast<RegionSearch&>(finding);
    if (search.inner != nullptr) {
      if (!inner_->FindMore(*search.inner, search.inner_found)) return false;
      search.inner.reset();
    }
    const Slot end = state_.slot_end();
    for (size_t visited = 0; visited < walk_chunk_ && search.next < end;
         ++visited, ++search.next) {
      const Slot slot = search.next;
      if (state_.entity(slot) == kNoEntity) {
        in_.reset(slot);
      } else if (Judge(slot, inner_ == nullptr || inner_->Contains(slot))) {
        stale.set(slot);
      }
    }
    return search.next >= state_.slot_end();
  }

  void Interrupt(Finding& finding, const FrameChanges& changes) override {
    auto& search = static_cast<RegionSearch&>(finding);
    if (search.inner != nullptr) inner_->Interrupt(*search.inner, changes);
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

  const Region region_;
  const std::unique_ptr<ViewFilter> inner_;  // Null: the whole world.
  const size_t walk_chunk_;
  // The slots in the view. Bits up to the highest member's slot.
  SlotBits in_;
};

}  // namespace

std::unique_ptr<ViewFilter> MakeRegionFilter(const PublishedState& state,
                                             const Region& region,
                                             std::unique_ptr<ViewFilter> inner,
                                             size_t walk_chunk) {
  return std::make_unique<RegionFilter>(state, region, std::move(inner),
                                        walk_chunk);
}

}  // namespace xform::server
