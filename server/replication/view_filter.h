// Copyright 2026 The xform Authors.
//
// ViewFilter: which entities a filtered subscription's view holds, kept as
// the frames come in, for the Replicator. A subscription without one sees
// the whole world. The replicator asks it, in each frame:
//   - before the frame is taken in: whether each entity the frame touches
//     (its lists, and everything below the re-parented) is in the view
//     (Contains);
//   - after: the same entities, parents first, to follow into or out of
//     the view (Follow); what entered is sent as created to the subscriber,
//     what left as destroyed, what stayed as the frame changed it;
//   - in a frame of moves alone, which entities the view holds of those
//     that moved (ForEachMoved), or, for a view whose membership moves
//     change (a region of space), which moved entities stayed in it,
//     entered it or left it (FollowMoves);
//   - when the view is sent whole (a snapshot): its members, found at once
//     or a chunk of work at a time with the lock released between
//     (StartSnapshot, FindMore), a search that a frame changing its path
//     restarts (Interrupt).
// A new kind of view is a new ViewFilter.
//
// Not thread-safe: the Replicator's lock guards it. Costs: see each kind.

#ifndef XFORM_SERVER_REPLICATION_VIEW_FILTER_H_
#define XFORM_SERVER_REPLICATION_VIEW_FILTER_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/types/span.h"
#include "server/replication/published_state.h"
#include "server/replication/slot_bits.h"
#include "server/replication/spatial_index.h"
#include "xform/region.h"
#include "xform/world.h"

namespace xform::server {

class ViewFilter {
 public:
  using Slot = PublishedState::Slot;

  // What a snapshot's search for members holds between its chunks.
  class Finding {
   public:
    virtual ~Finding() = default;
  };

  // A frame of moves alone, as every view's ForEachMoved reads it: the moved
  // entities, their slots, and, when at least four views want them (those
  // whose bits are fewer words than the frame has moves), the moved slots
  // marked, each with its index among the moved.
  class FrameMoves {
   public:
    static constexpr size_t kNone = std::numeric_limits<size_t>::max();
    FrameMoves(absl::Span<const EntityId> moved, absl::Span<const Slot> slots)
        : moved_(moved), slots_(slots) {}
    absl::Span<const EntityId> moved() const { return moved_; }
    absl::Span<const Slot> slots() const { return slots_; }
    // Each moved entity's position after the frame, where there are region
    // views (else empty): read once for them all, side by side.
    absl::Span<const glm::vec3> positions() const { return positions_; }
    void set_positions(absl::Span<const glm::vec3> positions) {
      positions_ = positions;
    }
    // Whether the world's spatial index holds these moves by cell
    // (SpatialIndex::PlaceMoves), for region views to visit the ones near
    // them (ForEachMoveInBox).
    bool by_cell() const { return by_cell_; }
    void set_by_cell(bool by_cell) { by_cell_ = by_cell; }
    // Marks set: what Marked() and IndexOfSlot() read. O(moved).
    void Mark(SlotBits* marked, std::vector<uint32_t>* index_by_slot);
    const SlotBits* marked() const { return marked_; }
    size_t IndexOfSlot(size_t slot) const { return (*index_by_slot_)[slot]; }
    // The index of `e` among the moved, or kNone: a table made at the first
    // ask (for a list shorter than the moves), then a lookup.
    size_t IndexOf(EntityId e) const;

   private:
    absl::Span<const EntityId> moved_;
    absl::Span<const Slot> slots_;
    absl::Span<const glm::vec3> positions_;
    bool by_cell_ = false;
    SlotBits* marked_ = nullptr;
    std::vector<uint32_t>* index_by_slot_ = nullptr;
    mutable absl::flat_hash_map<EntityId, size_t> index_;
  };

  virtual ~ViewFilter() = default;

  // Whether the live slot's entity is in the view, as of its last update.
  virtual bool Contains(Slot slot) const = 0;
  // The same by entity; false for one not alive. A lookup, then Contains.
  bool Contains(EntityId e) const {
    const Slot slot = state_.Find(e);
    return slot != PublishedState::kNoSlot && Contains(slot);
  }
  // After a frame that creates, destroys or re-parents: `e`, touched by the
  // frame, at `slot` (kNoSlot: destroyed), in depth order, parents first.
  // Updates its membership; whether it is in the view now.
  virtual bool Follow(EntityId e, Slot slot) = 0;
  // Whether this view would have the frame's moved slots marked.
  virtual bool WantsMarkedMoves(size_t moves) const = 0;
  // Calls in_view(k) for each moved entity k of a frame of moves alone that
  // the view holds, each once.
  virtual void ForEachMoved(
      const FrameMoves& moves,
      absl::FunctionRef<void(size_t k)> in_view) const = 0;

  // Whether moves alone may change what the view holds: then a frame of
  // moves alone calls FollowMoves, not ForEachMoved.
  virtual bool MovesChangeMembership() const { return false; }
  enum class Moved { kStayed, kEntered, kLeft };
  // After a frame of moves alone (the state holds its matrices): updates
  // the membership of the moved entities, and calls f(k, how) for each
  // moved entity k that the view held before or holds now, each once.
  virtual void FollowMoves(const FrameMoves& /*moves*/,
                           absl::FunctionRef<void(size_t k, Moved how)> /*f*/) {
  }

  // Moves a region view, in parts (others: never asked). StartRegionMove
  // takes `region` as the view's rule from now on (a frame judges what it
  // moves or touches by it) and lists the occupied cells whose slots may
  // enter or leave; returns the slots in them, the move's work. Called
  // only with no move under way. AbandonRegionMove undoes a move no part
  // of which was made. MoveRegionMore judges the next listed cells, about
  // `slots` slots of them (a cell at least), calling f(slot, how) for each
  // live slot that entered or left the view (kEntered, kLeft); true once
  // none is left. Between parts frames may come: judging a cell is
  // idempotent, and until the move is done frames judge the moves from the
  // old region's bounds too, so the view is right for every slot once it
  // ends.
  virtual size_t StartRegionMove(const Region& /*region*/) { return 0; }
  virtual void AbandonRegionMove() {}
  virtual bool MoveRegionMore(size_t /*slots*/,
                              absl::FunctionRef<void(Slot, Moved)> /*f*/) {
    return true;
  }
  virtual bool RegionMoveUnderWay() const { return false; }

  // The view is being sent whole. Sets in `stale` what it holds that is
  // found at once, and returns what finding the rest needs (null: nothing
  // more).
  virtual std::unique_ptr<Finding> StartSnapshot(CountedSlotBits& stale) = 0;
  // The next chunk of the search, setting what it finds in `stale`:
  // O(chunk). True once it is done.
  virtual bool FindMore(Finding& finding, CountedSlotBits& stale) = 0;
  // A frame destroyed or re-parented entities: a search whose path it broke
  // starts its root again (with a bigger chunk).
  virtual void Interrupt(Finding& finding, const FrameChanges& changes) = 0;

 protected:
  explicit ViewFilter(const PublishedState& state) : state_(state) {}
  const PublishedState& state_;
};

// The listed entities and the subtrees below the listed roots, including
// entities that join them later (SubscriptionOptions::entities, subtrees).
// Membership of a subtree is a bit per slot, kept as frames come in, so it
// is a bit test and never a walk to the root. Costs: Contains O(1); Follow
// O(1); ForEachMoved O(min(moved, bits / 64)) for the subtrees and
// O(min(listed, moved)) for the list; the snapshot's search O(members),
// `walk_chunk` slots at a time (doubling at each restart, so restarts are
// few: log2(view / chunk)).
std::unique_ptr<ViewFilter> MakeEntityFilter(const PublishedState& state,
                                             absl::Span<const EntityId> listed,
                                             absl::Span<const EntityId> roots,
                                             size_t walk_chunk);

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_VIEW_FILTER_H_
