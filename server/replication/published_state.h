// Copyright 2026 The xform Authors.
//
// PublishedState is one world as its subscribers were last told it: each
// live entity's parent, depth below its root, and world matrix, as of the
// last published frame.
//
// Entities are kept by *slot*: an index fixed for as long as the entity
// lives, into columns (entity, parent, depth, matrix, children links). What a
// subscriber tracks per entity of its view (a streamed snapshot's bits, a
// subtree view's members) is then a bit per slot (SlotBits), and a pass over
// the world reads the columns in slot order with no hash lookups; the one
// lookup, an entity's slot, is made once per change.
//
// A slot freed by a frame is not reused before the next frame is taken in,
// so what a subscriber recorded at a destroyed entity's slot is still that
// entity's while the frame that destroyed it is published (FindThisFrame).
//
// Each slot also records the frames that last created, re-parented and moved
// its entity (Stamps), so what changed since a given frame can be found
// from the state alone (ForEachChangedSince), however many frames came
// between: a subscriber that is sent a message a second need not follow
// every frame. A destroyed entity's stamps stay until its slot is reused.
//
// Costs (k = entities a frame lists, m = entities below the re-parented):
//   TakeIn             O(k + m)
//   Find               O(1)
//   ForEachInSubtree   O(subtree): follows the children links, no allocation
//   VisitSubtree       O(slots visited)
//   NextInSubtree      O(1) amortized over a walk
//   LiveSlots          O(slots / 64 + free slots)
//   ForEachChangedSince(f)  O(slots / 8 + 8 * blocks of 8 slots changed
//                      after f)
// Memory: about 130 bytes per slot ever used at once.
//
// Not thread-safe: the Replicator guards it.

#ifndef XFORM_SERVER_REPLICATION_PUBLISHED_STATE_H_
#define XFORM_SERVER_REPLICATION_PUBLISHED_STATE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "server/replication/slot_bits.h"
#include "xform/internal/id_index.h"
#include "xform/transform.h"
#include "xform/world.h"

namespace xform::server {

class PublishedState {
 public:
  using Slot = uint32_t;
  static constexpr Slot kNoSlot = ~Slot{0};

  // The frames that last created, re-parented and moved a slot's entity
  // (its creation counts as all three).
  struct Stamps {
    uint64_t created = 0;
    uint64_t parented = 0;
    uint64_t moved = 0;
  };

  // Takes in the frame `changes` closes (see xform::FrameChanges), stamping
  // what it changes with changes.frame. Frames come in increasing order.
  void TakeIn(const FrameChanges& changes);
  // Takes in all of `world`, into an empty state (a world recovered from
  // disk): as a frame `frame` creating everything would, without making
  // one. O(n).
  void TakeInWhole(const World& world, uint64_t frame);

  // Live entities.
  size_t size() const { return slot_of_.size(); }
  bool contains(EntityId e) const { return Find(e) != kNoSlot; }
  // The live entity's slot, or kNoSlot.
  Slot Find(EntityId e) const { return slot_of_.Find(e); }
  // Find(e), or the slot `e` held if the last frame taken in destroyed it.
  Slot FindThisFrame(EntityId e) const;

  // By slot. entity() is kNoEntity for a free slot; parent() is kNoSlot for a
  // root.
  Slot slot_end() const { return static_cast<Slot>(entity_.size()); }
  EntityId entity(Slot s) const { return entity_[s]; }
  Slot parent(Slot s) const { return parent_[s]; }
  EntityId parent_entity(Slot s) const {
    return parent_[s] == kNoSlot ? kNoEntity : entity_[parent_[s]];
  }
  uint32_t depth(Slot s) const { return depth_[s]; }
  const Matrix3x4& world(Slot s) const { return world_[s].world; }
  // Also of a slot freed by the last frame taken in (FindThisFrame).
  Stamps stamps(Slot s) const {
    return {structure_stamps_[s].created, structure_stamps_[s].parented,
            world_[s].moved};
  }

  // Calls f(slot) for each live slot that any frame after `frame` created,
  // re-parented or moved, in slot order, until f returns false.
  template <typename F>
  void ForEachChangedSince(uint64_t frame, F&& f) const;
  // The same, over the slots of blocks [first_block, end_block) alone:
  // a walk in pieces. Blocks of kSlotsPerBlock slots; blocks() of them.
  template <typename F>
  void ForEachChangedSinceIn(uint64_t frame, size_t first_block,
                             size_t end_block, F&& f) const;
  size_t blocks() const { return block_stamps_.size(); }
  static constexpr size_t kSlotsPerBlock = 8;

  // Every live slot.
  SlotBits LiveSlots() const;

  // Calls f(slot) for `root` and everything below it, parents first.
  template <typename F>
  void ForEachInSubtree(Slot root, F&& f) const {
    VisitSubtree(root, [&](Slot s) {
      f(s);
      return true;
    });
  }
  // The same, but below a slot only when visit(slot) returns true: walks
  // that mark what they visit skip what an earlier walk marked.
  template <typename F>
  void VisitSubtree(Slot root, F&& visit) const;
  // The walk of VisitSubtree a step at a time, so that it can stop and go
  // on: the slot after `at` in `root`'s subtree, parents first (below `at`
  // if `descend`), or kNoSlot after the last. Calls left(slot) for each
  // slot whose subtree the step leaves, `at` first, `root` last at the end:
  // what it does not leave is the path from `root` down to the slot it
  // returns. O(1) amortized over a walk.
  template <typename F>
  Slot NextInSubtree(Slot root, Slot at, bool descend, F&& left) const;

  // The live entities' slots, parents first (by depth, in the given order
  // among equals); the dead left out. O(n log n).
  std::vector<Slot> SlotsByDepth(absl::Span<const EntityId> entities) const;
  // The same, of slots, in place.
  void SortByDepth(std::vector<Slot>& slots) const;

  // Counts frames that destroyed or re-parented entities: a parent chain
  // read from the state stays valid while this does not change.
  uint64_t structure_epoch() const { return structure_epoch_; }

  // The destroyed log: the entities frames destroyed, each with the frame
  // that destroyed it and the one that created it, kept while someone may
  // be owed what changed since a frame (a subscriber that catches up from
  // the state), so that what it had and is gone can be told it. It holds
  // every destruction after destroyed_log_after(), and at most `max` of
  // them: one owed more than that is resent its view whole instead.
  //
  // Logs the destructions of the frame just taken in, after trimming the
  // log to what is needed after `needed_after`. Call after TakeIn.
  // O(destroyed + trimmed).
  void LogDestroyed(const FrameChanges& changes, uint64_t needed_after,
                    size_t max);
  // Nobody may need it: empties it, as of frame `frame`.
  void ClearDestroyedLog(uint64_t frame);
  uint64_t destroyed_log_after() const { return destroyed_log_after_; }
  // Of the entities destroyed after frame `after` (after >=
  // destroyed_log_after()), those that existed then: gone now (`gone`), or
  // created again since (`again`, by slot). O(log size + those).
  template <typename SlotSet>
  void DestroyedSince(uint64_t after, std::vector<EntityId>& gone,
                      SlotSet& again) const;

 private:
  // TakeIn's steps: the destroyed entities' slots freed (in freed_), the
  // created ones given slots, the re-parented linked anew with their
  // subtrees' depths.
  void TakeInDestroyed(absl::Span<const EntityId> destroyed);
  void TakeInCreated(const FrameChanges& changes);
  void TakeInReparented(const FrameChanges& changes);
  Slot NewSlot(EntityId e);
  // Puts `s` first among `parent`'s children (nowhere for a root).
  void Link(Slot s, Slot parent);
  // Takes `s` out of its parent's children.
  void Unlink(Slot s);
  // Records that frame `frame` changed `s` so.
  void Stamp(Slot s, uint64_t frame, bool created, bool parented, bool moved);

  // A live entity's slot: an array for dense ids (internal/id_index.h).
  internal::IdIndex slot_of_;
  static_assert(kNoSlot == internal::IdIndex::kAbsent);
  // The slots the last TakeIn freed, by entity; free from the next one on.
  absl::flat_hash_map<EntityId, Slot> freed_;
  std::vector<Slot> free_slots_;
  // The columns, by slot. Children are a doubly linked list per parent, so
  // a link or destroy is O(1) however many siblings there are. On 2 MB
  // pages when big, as the world's are: a frame reads them at scattered
  // places, and a million-entity load or recovery faults in 4 KB pages at
  // a cost (about 2 ms a MB on a VM) that 2 MB ones do not pay.
  internal::Column<EntityId> entity_;
  internal::Column<Slot> parent_;
  internal::Column<Slot> first_child_;
  internal::Column<Slot> next_sibling_;
  internal::Column<Slot> prev_sibling_;
  internal::Column<uint32_t> depth_;
  // A matrix and the frame that last moved it, in one cache line: a frame
  // writes both for each entity it moves.
  struct alignas(64) WorldRow {
    Matrix3x4 world;
    uint64_t moved = 0;
  };
  internal::Column<WorldRow> world_;
  struct StructureStamps {
    uint64_t created = 0;
    uint64_t parented = 0;
  };
  internal::Column<StructureStamps> structure_stamps_;
  struct DestroyedEntity {
    uint64_t frame;
    uint64_t created;
    EntityId entity;
  };
  std::deque<DestroyedEntity> destroyed_log_;
  uint64_t destroyed_log_after_ = 0;

  // By block of kSlotsPerBlock slots, the latest frame that stamped any of
  // them: a search for what changed skips a block unchanged since, a
  // word's read. Small blocks, so that a few changes scattered over a big
  // world do not make it read many rows that did not change (each slot's
  // moved stamp is in its 64-byte row): with blocks of 64, a walk over 10k
  // changes among 1M slots took 3.2 ms; with 8, see
  // BM_PublishedStateChangedSince.
  std::vector<uint64_t> block_stamps_;
  uint64_t structure_epoch_ = 0;
};

template <typename F>
void PublishedState::ForEachChangedSince(uint64_t frame, F&& f) const {
  ForEachChangedSinceIn(frame, 0, blocks(), f);
}

template <typename F>
void PublishedState::ForEachChangedSinceIn(uint64_t frame, size_t first_block,
                                           size_t end_block, F&& f) const {
  end_block = std::min(end_block, block_stamps_.size());
  for (size_t block = first_block; block < end_block; ++block) {
    if (block_stamps_[block] <= frame) continue;
    const Slot end = std::min<Slot>(
        slot_end(), static_cast<Slot>(kSlotsPerBlock * (block + 1)));
    for (Slot s = static_cast<Slot>(kSlotsPerBlock * block); s < end; ++s) {
      if (entity_[s] == kNoEntity) continue;
      const StructureStamps& structure = structure_stamps_[s];
      if (std::max({structure.created, structure.parented, world_[s].moved}) <=
          frame) {
        continue;
      }
      if (!f(s)) return;
    }
  }
}

template <typename F>
void PublishedState::VisitSubtree(Slot root, F&& visit) const {
  for (Slot s = root; s != kNoSlot;
       s = NextInSubtree(root, s, visit(s), [](Slot) {})) {
  }
}

template <typename F>
PublishedState::Slot PublishedState::NextInSubtree(Slot root, Slot at,
                                                   bool descend,
                                                   F&& left) const {
  if (descend && first_child_[at] != kNoSlot) return first_child_[at];
  // Up to the nearest ancestor (within the subtree) with a next sibling.
  Slot s = at;
  while (s != root && next_sibling_[s] == kNoSlot) {
    left(s);
    s = parent_[s];
  }
  left(s);
  return s == root ? kNoSlot : next_sibling_[s];
}

template <typename SlotSet>
void PublishedState::DestroyedSince(uint64_t after, std::vector<EntityId>& gone,
                                    SlotSet& again) const {
  const auto first = std::partition_point(
      destroyed_log_.begin(), destroyed_log_.end(),
      [after](const DestroyedEntity& d) { return d.frame <= after; });
  for (auto it = first; it != destroyed_log_.end(); ++it) {
    if (it->created > after) continue;  // New since: it never had it.
    const Slot slot = Find(it->entity);
    if (slot == kNoSlot) {
      gone.push_back(it->entity);
    } else {
      again.insert(slot);
    }
  }
}

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_PUBLISHED_STATE_H_
