// Copyright 2026 The xform Authors.
//
// World's change tracking and propagation: dirty roots, the sweep (src/sweep.h)
// over what they cover, and the frame's net changes.

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/sweep.h"
#include "src/world_internal.h"
#include "xform/internal/math_kernels.h"
#include "xform/world.h"

namespace xform {
namespace {

using internal::Index;
using internal::kNoIndex;
using internal::kPrefetchAhead;
using world_internal::kCreatedThisFrame;
using world_internal::kDirty;
using world_internal::kMovedThisFrame;

// Sorts instance indices in O(n), 11 bits a pass, as many passes as the
// largest needs: a physics step's 10,000 scattered roots would cost std::sort
// a mispredicted branch per comparison.
void RadixSort(std::vector<uint32_t>& values) {
  if (values.size() < 256) {
    std::sort(values.begin(), values.end());
    return;
  }
  constexpr int kBits = 11;
  constexpr uint32_t kMask = (1u << kBits) - 1;
  const uint32_t largest = *std::max_element(values.begin(), values.end());
  std::vector<uint32_t> scratch(values.size());
  for (int shift = 0; shift < 32 && (largest >> shift) != 0; shift += kBits) {
    std::vector<uint32_t> start(kMask + 2, 0);
    for (uint32_t v : values) ++start[((v >> shift) & kMask) + 1];
    for (size_t d = 1; d < start.size(); ++d) start[d] += start[d - 1];
    for (uint32_t v : values) scratch[start[(v >> shift) & kMask]++] = v;
    values.swap(scratch);
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Propagation and change tracking.

void World::MarkDirty(Index i) {
  const Slot slot = slot_[i];
  if (slot_flags_[slot] & kDirty) return;
  slot_flags_[slot] |= kDirty;
  dirty_roots_.push_back(slot);
}

World::FrameStart& World::TouchStructure(EntityId entity, Index i) {
  auto [it, inserted] = frame_start_.try_emplace(entity);
  if (inserted) {
    it->second.existed = !(frame_flags_[i] & kCreatedThisFrame);
    it->second.parent = parent_entity_of(i);
  }
  return it->second;
}

Matrix3x4 World::ExactWorld(Index i) const {
  absl::InlinedVector<Index, 32> chain;
  size_t stale = 0;  // 1 + the position in `chain` of the topmost dirty node.
  for (Index a = i; a != kNoIndex; a = parent_[a]) {
    chain.push_back(a);
    if (slot_flags_[slot_[a]] & kDirty) stale = chain.size();
  }
  walked_ += chain.size();
  if (stale == 0) return world_[i];
  const Index top = chain[stale - 1];
  Matrix3x4 world =
      parent_[top] == kNoIndex ? Matrix3x4{} : world_[parent_[top]];
  for (size_t k = stale; k-- > 0;) world = Multiply(world, local_[chain[k]]);
  return world;
}

bool World::Propagate() {
  if (dirty_roots_.empty()) return true;
  std::vector<Index> roots;
  roots.reserve(dirty_roots_.size());
  for (size_t k = 0; k < dirty_roots_.size(); ++k) {
    if (k + kPrefetchAhead < dirty_roots_.size()) {  // Scattered.
      __builtin_prefetch(&slot_flags_[dirty_roots_[k + kPrefetchAhead]], 1);
      __builtin_prefetch(&slot_index_[dirty_roots_[k + kPrefetchAhead]]);
    }
    const Slot slot = dirty_roots_[k];
    slot_flags_[slot] &= ~kDirty;
    if (slot_index_[slot] != kNoIndex) roots.push_back(slot_index_[slot]);
  }
  dirty_roots_.clear();
  // Roots often come in order (a scene's roots, a sorted physics step).
  if (!std::is_sorted(roots.begin(), roots.end())) RadixSort(roots);

  // The covering ranges are independent: a range's root has its parent
  // outside every other range, so that parent is already exact.
  std::vector<Range> ranges;
  Index covered = 0;  // Instances below this are already in a range.
  size_t covered_total = 0;
  for (Index root : roots) {
    if (root < covered) continue;
    covered = end_of(root);
    ranges.push_back({root, covered});
    covered_total += covered - root;
  }
  if (ranges.empty()) return true;  // Every dirty root was destroyed.
  stats_.recomputed += covered_total;
  swept_.insert(swept_.end(), ranges.begin(), ranges.end());
  const internal::SweepJob job{
      .parent = {parent_.data(), parent_.size()},
      .subtree_size = {subtree_size_.data(), subtree_size_.size()},
      .local = {local_.data(), local_.size()},
      .ranges = ranges,
      .world = {world_.data(), world_.size()},
  };
  return job.Run();
}

void World::ListSwept() {
  for (const Range& range : swept_) {
    for (Index j = range.first; j < range.last; ++j) {
      if (frame_flags_[j] != 0) continue;
      frame_flags_[j] = kMovedThisFrame;
      moved_slots_.push_back(slot_[j]);
    }
  }
  swept_.clear();
}

void World::EmitMoved(Index i, FrameChanges* changes) const {
  changes->moved.push_back(entity_of(i));
  changes->moved_world.insert(changes->moved_world.end(), world_[i].m.begin(),
                              world_[i].m.end());
}

void World::ListFrameMoves(FrameChanges* changes) {
  // Swept since the last structural change, so still in today's indices:
  // merged, because a frame's batches may recompute nested subtrees.
  const auto by_first = [](const Range& a, const Range& b) {
    return a.first < b.first;
  };
  if (!std::is_sorted(swept_.begin(), swept_.end(), by_first)) {
    std::sort(swept_.begin(), swept_.end(), by_first);
  }
  Index listed_to = 0;  // Instances below this are already listed.
  for (size_t r = 0; r < swept_.size(); ++r) {
    // A physics step's ranges are single instances all over the world: fetch
    // a later range's slot, then its entity, so the misses overlap.
    if (r + kPrefetchAhead < swept_.size()) {
      __builtin_prefetch(&slot_[swept_[r + kPrefetchAhead].first]);
      __builtin_prefetch(&frame_flags_[swept_[r + kPrefetchAhead].first]);
    }
    if (r + 4 < swept_.size()) {
      __builtin_prefetch(&slot_entity_[slot_[swept_[r + 4].first]]);
    }
    const Range& range = swept_[r];
    for (Index j = std::max(range.first, listed_to); j < range.last; ++j) {
      if (frame_flags_[j] == 0) EmitMoved(j, changes);
    }
    listed_to = std::max(listed_to, range.last);
  }
  swept_.clear();
  for (Slot slot : moved_slots_) {
    const Index i = slot_index_[slot];
    if (i == kNoIndex) continue;  // Destroyed since.
    frame_flags_[i] = 0;
    EmitMoved(i, changes);
  }
}

void World::ListCreated(FrameChanges* changes) {
  std::vector<Index> created;
  for (Slot slot : created_slots_) {
    if (slot_index_[slot] != kNoIndex) created.push_back(slot_index_[slot]);
  }
  std::sort(created.begin(), created.end());
  for (Index i : created) {
    frame_flags_[i] = 0;
    EmitMoved(i, changes);
    const auto start = frame_start_.find(entity_of(i));
    if (start != frame_start_.end() && start->second.existed) {
      continue;  // Destroyed and created again: a survivor, not a creation.
    }
    changes->created.push_back(entity_of(i));
    changes->created_parent.push_back(parent_entity_of(i));
  }
}

void World::ListDestroyedAndReparented(FrameChanges* changes) const {
  std::vector<Index> reparented;
  for (const auto& [entity, start] : frame_start_) {
    if (!start.existed) continue;
    const Index i = index_of(entity);
    if (i == kNoIndex) {
      changes->destroyed.push_back(entity);
    } else if (parent_entity_of(i) != start.parent) {
      reparented.push_back(i);
    }
  }
  std::sort(reparented.begin(), reparented.end());
  for (Index i : reparented) {
    changes->reparented.push_back(entity_of(i));
    changes->reparented_parent.push_back(parent_entity_of(i));
  }
}

void World::EndFrame(FrameChanges* changes) {
  changes->Clear();
  changes->frame = frame_;
  ListFrameMoves(changes);
  ListCreated(changes);
  ListDestroyedAndReparented(changes);
  moved_slots_.clear();
  created_slots_.clear();
  frame_start_.clear();
  free_slots_.insert(free_slots_.end(), freed_this_frame_.begin(),
                     freed_this_frame_.end());
  freed_this_frame_.clear();
  ++frame_;
}

}  // namespace xform
