// Copyright 2026 The xform Authors.

#include "server/replication/published_state.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace xform::server {

PublishedState::Slot PublishedState::FindThisFrame(EntityId e) const {
  if (const Slot s = Find(e); s != kNoSlot) return s;
  auto it = freed_.find(e);
  return it == freed_.end() ? kNoSlot : it->second;
}

SlotBits PublishedState::LiveSlots() const {
  SlotBits live;
  live.SetAll(entity_.size());
  for (Slot s : free_slots_) live.reset(s);
  return live;
}

PublishedState::Slot PublishedState::NewSlot(EntityId e) {
  Slot s;
  if (!free_slots_.empty()) {
    s = free_slots_.back();
    free_slots_.pop_back();
    entity_[s] = e;
  } else {
    s = slot_end();
    entity_.push_back(e);
    parent_.push_back(kNoSlot);
    first_child_.push_back(kNoSlot);
    next_sibling_.push_back(kNoSlot);
    prev_sibling_.push_back(kNoSlot);
    depth_.push_back(0);
    world_.emplace_back();
    structure_stamps_.emplace_back();
    if (s % kSlotsPerBlock == 0) block_stamps_.push_back(0);
  }
  parent_[s] = first_child_[s] = next_sibling_[s] = prev_sibling_[s] = kNoSlot;
  depth_[s] = 0;
  return s;
}

void PublishedState::Link(Slot s, Slot parent) {
  parent_[s] = parent;
  prev_sibling_[s] = kNoSlot;
  next_sibling_[s] = kNoSlot;
  if (parent == kNoSlot) return;
  const Slot first = first_child_[parent];
  next_sibling_[s] = first;
  if (first != kNoSlot) prev_sibling_[first] = s;
  first_child_[parent] = s;
}

void PublishedState::Unlink(Slot s) {
  const Slot prev = prev_sibling_[s];
  const Slot next = next_sibling_[s];
  if (prev != kNoSlot) {
    next_sibling_[prev] = next;
  } else if (parent_[s] != kNoSlot) {
    first_child_[parent_[s]] = next;
  }
  if (next != kNoSlot) prev_sibling_[next] = prev;
  parent_[s] = prev_sibling_[s] = next_sibling_[s] = kNoSlot;
}

void PublishedState::Stamp(Slot s, uint64_t frame, bool created, bool parented,
                           bool moved) {
  if (created) structure_stamps_[s].created = frame;
  if (parented) structure_stamps_[s].parented = frame;
  if (moved) world_[s].moved = frame;
  block_stamps_[s / kSlotsPerBlock] = frame;
}

void PublishedState::TakeInWhole(const World& world, uint64_t frame) {
  // Into an empty state, so slot i is the world's instance i, and a
  // parent's slot is its instance index: no lookups by id.
  const size_t n = world.size();
  entity_.resize(n);
  for (auto* column :
       {&parent_, &first_child_, &next_sibling_, &prev_sibling_}) {
    column->assign(n, kNoSlot);
  }
  depth_.resize(n);
  world_.assign(n, {Matrix3x4(), frame});
  structure_stamps_.assign(n, {frame, frame});
  block_stamps_.assign((n + kSlotsPerBlock - 1) / kSlotsPerBlock, frame);
  world.ForEachInstance(
      [&](uint32_t i, EntityId e, uint32_t parent, const Matrix3x4& matrix) {
        entity_[i] = e;
        slot_of_.Insert(e, i);
        const Slot p = parent == internal::kNoIndex ? kNoSlot : parent;
        depth_[i] = p == kNoSlot ? 0 : depth_[p] + 1;
        Link(i, p);
        world_[i].world = matrix;
      });
}

void PublishedState::TakeIn(const FrameChanges& changes) {
  // In the order FrameChanges gives: destroyed, created (parents first),
  // re-parented (parents first), then the matrices.
  if (!changes.destroyed.empty() || !changes.reparented.empty()) {
    ++structure_epoch_;
  }
  TakeInDestroyed(changes.destroyed);
  TakeInCreated(changes);
  // Freed slots are taken from the next frame on (see the header).
  for (const auto& [e, s] : freed_) free_slots_.push_back(s);
  TakeInReparented(changes);
  for (size_t k = 0; k < changes.moved.size(); ++k) {
    // As scattered over the world as the writes were: overlap the misses.
    constexpr size_t kAhead = internal::kPrefetchAhead;
    if (k + kAhead < changes.moved.size()) {
      slot_of_.Prefetch(changes.moved[k + kAhead]);
    }
    if (const Slot s = slot_of_.Find(changes.moved[k]); s != kNoSlot) {
      world_[s].world = changes.MovedWorld(k);
      Stamp(s, changes.frame, /*created=*/false, /*parented=*/false,
            /*moved=*/true);
    }
  }
}

void PublishedState::TakeInDestroyed(absl::Span<const EntityId> destroyed) {
  freed_.clear();
  for (EntityId e : destroyed) {
    const Slot s = slot_of_.Find(e);
    if (s == kNoSlot) continue;
    freed_[e] = s;
    // Its children are destroyed or re-parented by this frame too, each
    // unlinked from it then.
    Unlink(s);
    entity_[s] = kNoEntity;
    slot_of_.Erase(e);
  }
}

void PublishedState::TakeInCreated(const FrameChanges& changes) {
  if (const size_t slots = entity_.size() + changes.created.size();
      slots > entity_.capacity()) {
    // A scene load grows the columns once, not by doubling as it goes
    // (each doubling copies them and faults in fresh memory); later loads
    // at least double them, so growth stays amortized O(1) a slot.
    const size_t grown = std::max(slots, 2 * entity_.capacity());
    for (auto* column :
         {&parent_, &first_child_, &next_sibling_, &prev_sibling_}) {
      column->reserve(grown);
    }
    entity_.reserve(grown);
    depth_.reserve(grown);
    world_.reserve(grown);
    structure_stamps_.reserve(grown);
  }
  for (size_t k = 0; k < changes.created.size(); ++k) {
    const EntityId parent = changes.created_parent[k];
    const Slot p = parent == kNoEntity ? kNoSlot : slot_of_.Find(parent);
    const Slot s = NewSlot(changes.created[k]);
    slot_of_.InsertOrAssign(changes.created[k], s);
    depth_[s] = p == kNoSlot ? 0 : depth_[p] + 1;
    Link(s, p);
    Stamp(s, changes.frame, /*created=*/true, /*parented=*/true,
          /*moved=*/true);
  }
}

void PublishedState::TakeInReparented(const FrameChanges& changes) {
  for (size_t k = 0; k < changes.reparented.size(); ++k) {
    const Slot s = slot_of_.Find(changes.reparented[k]);
    const EntityId parent = changes.reparented_parent[k];
    Unlink(s);
    Link(s, parent == kNoEntity ? kNoSlot : slot_of_.Find(parent));
    Stamp(s, changes.frame, /*created=*/false, /*parented=*/true,
          /*moved=*/false);
  }
  // A re-parented subtree's depths follow its root's. Parents first, and a
  // subtree inside one renumbered already is not walked again: O(entities
  // below).
  absl::flat_hash_set<Slot> unwalked;
  for (EntityId root : changes.reparented) unwalked.insert(slot_of_.Find(root));
  for (EntityId root : changes.reparented) {
    const Slot r = slot_of_.Find(root);
    if (!unwalked.contains(r)) continue;
    ForEachInSubtree(r, [&](Slot s) {
      depth_[s] = parent_[s] == kNoSlot ? 0 : depth_[parent_[s]] + 1;
      unwalked.erase(s);
    });
  }
}

void PublishedState::ClearDestroyedLog(uint64_t frame) {
  destroyed_log_.clear();
  destroyed_log_after_ = frame;
}

void PublishedState::LogDestroyed(const FrameChanges& changes,
                                  uint64_t needed_after, size_t max) {
  while (!destroyed_log_.empty() &&
         destroyed_log_.front().frame <= needed_after) {
    destroyed_log_.pop_front();
  }
  destroyed_log_after_ = std::max(destroyed_log_after_, needed_after);
  for (EntityId e : changes.destroyed) {
    const Slot slot = FindThisFrame(e);
    if (slot == kNoSlot) continue;
    destroyed_log_.push_back({changes.frame, stamps(slot).created, e});
  }
  while (destroyed_log_.size() > max) {
    destroyed_log_after_ =
        std::max(destroyed_log_after_, destroyed_log_.front().frame);
    destroyed_log_.pop_front();
  }
}

std::vector<PublishedState::Slot> PublishedState::SlotsByDepth(
    absl::Span<const EntityId> entities) const {
  std::vector<Slot> slots;
  slots.reserve(entities.size());
  for (EntityId e : entities) {
    const Slot slot = Find(e);
    if (slot != kNoSlot) slots.push_back(slot);
  }
  SortByDepth(slots);
  return slots;
}

void PublishedState::SortByDepth(std::vector<Slot>& slots) const {
  // Depths looked up once each, not once per comparison.
  std::vector<std::pair<uint32_t, Slot>> by_depth;
  by_depth.reserve(slots.size());
  for (Slot slot : slots) by_depth.emplace_back(depth(slot), slot);
  std::stable_sort(
      by_depth.begin(), by_depth.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t k = 0; k < slots.size(); ++k) slots[k] = by_depth[k].second;
}

}  // namespace xform::server
