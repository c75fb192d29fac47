// Copyright 2026 The xform Authors.
//
#include "server/replication/region_filter.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "glm/common.hpp"

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

// Where a box of positions stands to a region (grown by `grown`): all of
// it inside, all of it outside, or across the border.
enum class Side { kInside, kOutside, kAcross };
Side SideOf(const Region& region, float grown, glm::vec3 min, glm::vec3 max) {
  if (region.shape() == Region::Shape::kBox) {
    const glm::vec3 low = region.min() - glm::vec3(grown);
    const glm::vec3 high = region.max() + glm::vec3(grown);
    if (Within(min, low, high) && Within(max, low, high)) return Side::kInside;
    if (max.x < low.x || min.x > high.x || max.y < low.y || min.y > high.y ||
        max.z < low.z || min.z > high.z) {
      return Side::kOutside;
    }
    return Side::kAcross;
  }
  const glm::vec3 c = region.center();
  const float reach = region.radius() + grown;
  float nearest = 0, farthest = 0;
  for (int axis = 0; axis < 3; ++axis) {
    const float out = std::max({min[axis] - c[axis], c[axis] - max[axis], 0.f});
    nearest += out * out;
    const float far = std::max(std::fabs(c[axis] - min[axis]),
                               std::fabs(max[axis] - c[axis]));
    farthest += far * far;
  }
  if (farthest <= reach * reach) return Side::kInside;
  if (nearest > reach * reach) return Side::kOutside;
  return Side::kAcross;
}

// A cell's box, widened past what rounding could put in it.
void Widen(glm::vec3& min, glm::vec3& max) {
  for (int axis = 0; axis < 3; ++axis) {
    min[axis] -= (std::fabs(min[axis]) + 1) * 1e-5f;
    max[axis] += (std::fabs(max[axis]) + 1) * 1e-5f;
  }
}

// Whether a cell's slots may change membership as the region moves from
// `old` to `now`: not when the cell is wholly inside both (members before
// and after), nor when it is wholly outside the old one grown and the new
// one (no members before, none entering). Most of a region moved a little.
bool MayChange(const Region& old, const Region& now, glm::vec3 min,
               glm::vec3 max) {
  Widen(min, max);
  const Side new_side = SideOf(now, 0, min, max);
  if (new_side == Side::kInside && SideOf(old, 0, min, max) == Side::kInside) {
    return false;
  }
  return !(new_side == Side::kOutside &&
           SideOf(old, old.margin(), min, max) == Side::kOutside);
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
    Bounds(&min, &max);
    const auto follow = [&](size_t k) {
      const Slot slot = slots[k];
      if (slot == PublishedState::kNoSlot) return;
      const bool was = in_.test(slot);
      // One outside the bounds of the region grown was not in the view and
      // does not enter it: most of the world, told by one bit and a read of
      // positions side by side.
      if (!was && !positions.empty() && !Within(positions[k], min, max)) {
        return;
      }
      const bool is = Judge(slot, inner_ == nullptr || inner_->Contains(slot));
      if (was && is) {
        f(k, Moved::kStayed);
      } else if (is) {
        f(k, Moved::kEntered);
      } else if (was) {
        f(k, Moved::kLeft);
      }
    };
    if (moves.by_cell()) {
      // What the view held was inside the bounds before the frame, and what
      // enters is inside them after: moves from or to their cells are all
      // that can change it.
      index_.ForEachMoveInBox(min, max, follow);
      return;
    }
    for (size_t k = 0; k < slots.size(); ++k) follow(k);
  }

  // The bits are kept, not cleared: a view sent whole again holds what the
  // rule says it holds, whether or not it was resent.
  std::unique_ptr<Finding> StartSnapshot(CountedSlotBits&) override {
    auto search = std::make_unique<RegionSearch>();
    if (inner_ != nullptr) {
      search->inner = inner_->StartSnapshot(search->inner_found);
    }
    glm::vec3 min, max;
    Bounds(&min, &max);
    const SpatialIndex::Box box[] = {{min, max}};
    index_.ForEachCell(
        box, [](glm::vec3, glm::vec3) { return true; },
        [&](const SpatialIndex::CellView& cell) {
          search->candidates.insert(search->candidates.end(),
                                    cell.slots.begin(), cell.slots.end());
        });
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

  size_t StartRegionMove(const Region& region) override {
    // What it holds is inside the old region grown; what may enter is
    // inside the new one: the cells of both whose slots may change.
    glm::vec3 new_min, new_max;
    move_ = RegionMove{.from = region_};
    CullBounds(region_, &move_->from_min, &move_->from_max);
    region_ = region;
    CullBounds(region_, &new_min, &new_max);
    size_t slots = 0;
    const SpatialIndex::Box boxes[] = {{move_->from_min, move_->from_max},
                                       {new_min, new_max}};
    index_.ForEachCell(
        boxes,
        [&](glm::vec3 min, glm::vec3 max) {
          return MayChange(move_->from, region_, min, max);
        },
        [&](const SpatialIndex::CellView& cell) {
          move_->cells.push_back(cell.key);
          slots += cell.slots.size();
        });
    return slots;
  }

  void AbandonRegionMove() override {
    if (!move_) return;
    region_ = move_->from;
    move_.reset();
  }

  bool MoveRegionMore(size_t slots,
                      absl::FunctionRef<void(Slot, Moved)> f) override {
    if (!move_) return true;
    size_t judged = 0;
    while (move_->next < move_->cells.size() &&
           (judged == 0 || judged < slots)) {
      index_.CellAt(move_->cells[move_->next++],
                    [&](const SpatialIndex::CellView& cell) {
                      JudgeCell(cell, f);
                      judged += std::max<size_t>(cell.slots.size(), 1);
                    });
    }
    if (move_->next < move_->cells.size()) return false;
    move_.reset();
    return true;
  }

  bool RegionMoveUnderWay() const override { return move_.has_value(); }

 private:
  // After a move of the region, the slots of `cell`: one wholly inside the
  // region holds members only, one wholly outside it grown none, and one
  // wholly in its margin band changes nothing; only a cell across a border
  // has its positions read.
  void JudgeCell(const SpatialIndex::CellView& cell,
                 absl::FunctionRef<void(Slot, Moved)> f) {
    glm::vec3 min = cell.min, max = cell.max;
    Widen(min, max);
    const Side inside =
        cell.clamped ? Side::kAcross : SideOf(region_, 0, min, max);
    const Side grown = cell.clamped || inside == Side::kInside
                           ? inside
                           : SideOf(region_, region_.margin(), min, max);
    if (inside == Side::kInside) {
      for (Slot slot : cell.slots) {
        if (!in_.test(slot) && InInner(slot)) {
          in_.set(slot);
          f(slot, Moved::kEntered);
        }
      }
    } else if (grown == Side::kOutside) {
      for (Slot slot : cell.slots) {
        if (in_.reset(slot)) f(slot, Moved::kLeft);
      }
    } else if (!(inside == Side::kOutside && grown == Side::kInside)) {
      for (size_t k = 0; k < cell.slots.size(); ++k) {
        const Slot slot = cell.slots[k];
        const bool was = in_.test(slot);
        const bool is = JudgeAt(slot, InInner(slot), cell.positions[k]);
        if (was != is) f(slot, is ? Moved::kEntered : Moved::kLeft);
      }
    }
  }

  // Every position the view may hold: inside the region grown, or, while
  // a move is under way, inside the old one's too (its cells not yet
  // judged still hold members of the old region).
  void Bounds(glm::vec3* min, glm::vec3* max) const {
    CullBounds(region_, min, max);
    if (move_) {
      *min = glm::min(*min, move_->from_min);
      *max = glm::max(*max, move_->from_max);
    }
  }

  bool InInner(Slot slot) const {
    return inner_ == nullptr || inner_->Contains(slot);
  }

  // The rule, for the live `slot` as the state holds it now; sets its bit.
  bool Judge(Slot slot, bool in_inner) {
    return JudgeAt(slot, in_inner, state_.world(slot).translation());
  }
  // The same, at its `position` as the index placed it (the state's).
  bool JudgeAt(Slot slot, bool in_inner, glm::vec3 position) {
    const bool is = in_inner && region_.Holds(in_.test(slot), position);
    if (is) {
      in_.set(slot);
    } else {
      in_.reset(slot);
    }
    return is;
  }

  // A move of the region under way: where it came from, and the cells
  // still to judge (by key: a cell may empty, or fill, between parts).
  struct RegionMove {
    Region from;
    glm::vec3 from_min, from_max;
    std::vector<uint64_t> cells;
    size_t next = 0;
  };

  const SpatialIndex& index_;
  Region region_;
  std::optional<RegionMove> move_;
  const std::unique_ptr<ViewFilter> inner_;  // Null: the whole world.
  const size_t walk_chunk_;
  // The slots in the view. Bits up to the highest member's slot.
  SlotBits in_;
};

}  // namespace

uint64_t CellsOfRegion(const Region& region, float cell_size) {
  glm::vec3 min, max;
  CullBounds(region, &min, &max);
  return CellsCovering(cell_size, min, max);
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
