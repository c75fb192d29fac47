// Copyright 2026 The xform Authors.

#include "server/replication/view_filter.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace xform::server {

void ViewFilter::FrameMoves::Mark(SlotBits* marked,
                                  std::vector<uint32_t>* index_by_slot) {
  marked_ = marked;
  index_by_slot_ = index_by_slot;
  for (size_t k = 0; k < moved_.size(); ++k) {
    if (slots_[k] == PublishedState::kNoSlot) continue;
    marked->set(slots_[k]);
    if (index_by_slot->size() <= slots_[k]) {
      index_by_slot->resize(slots_[k] + 1);
    }
    (*index_by_slot)[slots_[k]] = static_cast<uint32_t>(k);
  }
}

size_t ViewFilter::FrameMoves::IndexOf(EntityId e) const {
  if (index_.empty()) {
    index_.reserve(moved_.size());
    for (size_t k = 0; k < moved_.size(); ++k) index_.emplace(moved_[k], k);
  }
  const auto it = index_.find(e);
  return it == index_.end() ? kNone : it->second;
}

namespace {

using Slot = ViewFilter::Slot;

// The search for a subtree view's members as its snapshot starts: its roots'
// subtrees walked `chunk` slots at a time, the lock released between, so
// that no hold is O(view). Frames published meanwhile keep the bits of what
// they touch, as for any subtree view: right for everything the walk has
// passed, and left for the walk to find in what it has not. A frame that
// destroys or re-parents an entity on the walk's path (from the root being
// walked down to `at`) breaks its way on: that root's walk starts again,
// with twice the chunk, so restarts are few and the last is at worst the
// whole walk under one hold.
struct MembershipWalk final : ViewFilter::Finding {
  std::vector<EntityId> roots;  // Shallowest first, as they were.
  size_t next_root = 0;         // The one walked, or the next.
  Slot root = PublishedState::kNoSlot;
  Slot at = PublishedState::kNoSlot;  // Last visited; none between roots.
  SlotBits path;                      // From `root` down to `at`.
  // Roots found inside a subtree walked whole: its walk covered theirs.
  absl::flat_hash_set<EntityId> covered;
  std::vector<EntityId> roots_seen;  // Inside the root being walked.
  size_t chunk = 0;
};

class EntityFilter final : public ViewFilter {
 public:
  EntityFilter(const PublishedState& state, absl::Span<const EntityId> listed,
               absl::Span<const EntityId> roots, size_t walk_chunk)
      : ViewFilter(state),
        listed_(listed.begin(), listed.end()),
        roots_(roots.begin(), roots.end()),
        root_list_(roots.begin(), roots.end()),
        walk_chunk_(walk_chunk) {}

  bool Contains(Slot slot) const override {
    return in_subtree_.test(slot) ||
           (!listed_.empty() && listed_.contains(state_.entity(slot)));
  }

  bool Follow(EntityId e, Slot slot) override {
    const bool alive = slot != PublishedState::kNoSlot;
    const bool under_root =
        alive && (roots_.contains(e) ||
                  (state_.parent(slot) != PublishedState::kNoSlot &&
                   in_subtree_.test(state_.parent(slot))));
    if (under_root) {
      in_subtree_.set(slot);
    } else if (alive) {
      in_subtree_.reset(slot);
    } else if (const Slot freed = state_.FindThisFrame(e);
               freed != PublishedState::kNoSlot) {
      in_subtree_.reset(freed);  // Before the slot is reused.
    }
    return under_root || (alive && listed_.contains(e));
  }

  // Subtree views whose bits are fewer words than the frame has moves: a
  // pass over their bits against the moved slots' saves a bit test a move.
  bool WantsMarkedMoves(size_t moves) const override {
    return !roots_.empty() && in_subtree_.words() < moves;
  }

  void ForEachMoved(const FrameMoves& moves,
                    absl::FunctionRef<void(size_t k)> in_view) const override {
    const absl::Span<const Slot> slots = moves.slots();
    if (moves.marked() != nullptr && WantsMarkedMoves(slots.size())) {
      in_subtree_.ForEachInBoth(*moves.marked(), [&](size_t slot) {
        in_view(moves.IndexOfSlot(slot));
      });
    } else if (!roots_.empty()) {
      for (size_t k = 0; k < slots.size(); ++k) {
        if (in_subtree_.test(slots[k])) in_view(k);
      }
    }
    if (listed_.empty()) return;
    // Whichever of the list and the moved is shorter is walked, the other
    // looked up in. What the subtrees held is not told twice.
    if (listed_.size() < slots.size()) {
      for (EntityId e : listed_) {
        const size_t k = moves.IndexOf(e);
        if (k != FrameMoves::kNone && !in_subtree_.test(slots[k])) in_view(k);
      }
    } else {
      for (size_t k = 0; k < slots.size(); ++k) {
        if (!in_subtree_.test(slots[k]) && listed_.contains(moves.moved()[k])) {
          in_view(k);
        }
      }
    }
  }

  std::unique_ptr<Finding> StartSnapshot(CountedSlotBits& stale) override {
    // Membership rebuilt: the listed entities alive at once, the subtrees'
    // as their walk finds them, shallowest roots first, so that a root
    // inside another's subtree is covered by it.
    in_subtree_.clear();
    for (EntityId e : listed_) {
      const Slot slot = state_.Find(e);
      if (slot != PublishedState::kNoSlot) stale.set(slot);
    }
    if (root_list_.empty()) return nullptr;
    auto walk = std::make_unique<MembershipWalk>();
    for (Slot root : state_.SlotsByDepth(root_list_)) {
      walk->roots.push_back(state_.entity(root));
    }
    walk->chunk = walk_chunk_;
    return walk;
  }

  bool FindMore(Finding& finding, CountedSlotBits& stale) override {
    auto& walk = static_cast<MembershipWalk&>(finding);
    for (size_t visited = 0; visited < walk.chunk; ++visited) {
      Slot slot;
      if (walk.at == PublishedState::kNoSlot) {
        if (!NextRoot(walk)) return true;
        slot = walk.root = state_.Find(walk.roots[walk.next_root]);
      } else {
        slot = state_.NextInSubtree(walk.root, walk.at, /*descend=*/true,
                                    [&](Slot left) { walk.path.reset(left); });
        if (slot == PublishedState::kNoSlot) {
          walk.covered.insert(walk.roots_seen.begin(), walk.roots_seen.end());
          walk.roots_seen.clear();
          walk.at = PublishedState::kNoSlot;
          ++walk.next_root;
          continue;
        }
      }
      walk.at = slot;
      walk.path.set(slot);
      in_subtree_.set(slot);
      stale.set(slot);
      if (walk.roots.size() > 1 && slot != walk.root &&
          roots_.contains(state_.entity(slot))) {
        walk.roots_seen.push_back(state_.entity(slot));
      }
    }
    return false;
  }

  void Interrupt(Finding& finding, const FrameChanges& changes) override {
    auto& walk = static_cast<MembershipWalk&>(finding);
    if (walk.at == PublishedState::kNoSlot) return;
    // A root re-parented keeps its subtree; one destroyed ends it.
    const auto on_path = [&](Slot slot, bool may_be_root) {
      return slot != PublishedState::kNoSlot && walk.path.test(slot) &&
             (may_be_root || slot != walk.root);
    };
    const bool broken =
        std::any_of(changes.destroyed.begin(), changes.destroyed.end(),
                    [&](EntityId e) {
                      return on_path(state_.FindThisFrame(e), true);
                    }) ||
        std::any_of(changes.reparented.begin(), changes.reparented.end(),
                    [&](EntityId e) { return on_path(state_.Find(e), false); });
    if (!broken) return;
    walk.path.clear();
    walk.roots_seen.clear();
    walk.at = PublishedState::kNoSlot;
    walk.chunk *= 2;
  }

 private:
  // Moves to the next root alive that no walk covered; false after the
  // last.
  bool NextRoot(MembershipWalk& walk) const {
    while (
        walk.next_root < walk.roots.size() &&
        (walk.covered.contains(walk.roots[walk.next_root]) ||
         state_.Find(walk.roots[walk.next_root]) == PublishedState::kNoSlot)) {
      ++walk.next_root;
    }
    return walk.next_root < walk.roots.size();
  }

  const absl::flat_hash_set<EntityId> listed_;
  const absl::flat_hash_set<EntityId> roots_;
  const std::vector<EntityId> root_list_;  // As the subscriber gave them.
  const size_t walk_chunk_;
  // The slots in the subtrees of roots_, kept as frames come in. Bits up to
  // the highest member's slot: at most the world's slots / 8 bytes.
  SlotBits in_subtree_;
};

}  // namespace

std::unique_ptr<ViewFilter> MakeEntityFilter(const PublishedState& state,
                                             absl::Span<const EntityId> listed,
                                             absl::Span<const EntityId> roots,
                                             size_t walk_chunk) {
  return std::make_unique<EntityFilter>(state, listed, roots, walk_chunk);
}

}  // namespace xform::server
