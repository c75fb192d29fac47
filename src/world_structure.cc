// Copyright 2026 The xform Authors.
//
// World's structural primitives: creating, destroying and re-linking
// instances while keeping pre-order, parent links and subtree sizes.

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/sibling_lists.h"
#include "src/world_internal.h"
#include "xform/internal/math_kernels.h"
#include "xform/world.h"

namespace xform {
namespace {

using internal::Index;
using internal::kNoIndex;
using internal::kPrefetchAhead;
using world_internal::kCreatedThisFrame;

// A scene load's ids land all over the entity map, and its ops, read in
// pre-order, all over a buffer bigger than the cache: each pass over them
// fetches what it will read ahead (kPrefetchAhead lookups, kCreatesAhead
// creates), so the misses overlap. Only the entity's own map entry: a parent
// was created shortly before and is still cached (fetching it too measured
// slower).
constexpr uint32_t kCreatesAhead = 16;

}  // namespace

// ---------------------------------------------------------------------------
// Structural primitives.

template <typename F>
void World::ForEachColumn(F&& f) {
  f(parent_);
  f(subtree_size_);
  f(rotation_);
  f(scale_);
  f(local_);
  f(world_);
  f(slot_);
  f(frame_flags_);
}

World::Slot World::AllocateSlot(EntityId entity) {
  Slot slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<Slot>(slot_index_.size());
    slot_index_.push_back(kNoIndex);
    slot_entity_.push_back(kNoEntity);
    slot_flags_.push_back(0);
  }
  slot_entity_[slot] = entity;
  slot_flags_[slot] = 0;
  return slot;
}

namespace {

// The pre-order of a run of creates from each one's parent in the run
// (`group_parent`, a position, or kNoIndex for one whose parent is outside
// it): children by parent (counting sort, input order kept), then a
// depth-first walk from each run root. Sets `order` (run positions in
// pre-order), `sizes` (each one's subtree in the run) and `position` (each
// one's place in `order`). O(run).
void PreOrderOfRun(absl::Span<const uint32_t> group_parent,
                   std::vector<uint32_t>& order, std::vector<uint32_t>& sizes,
                   std::vector<uint32_t>& position) {
  const auto count = static_cast<uint32_t>(group_parent.size());
  std::vector<uint32_t> child_begin(count + 1, 0);
  for (uint32_t k = 0; k < count; ++k) {
    if (group_parent[k] != kNoIndex) ++child_begin[group_parent[k] + 1];
  }
  for (uint32_t k = 0; k < count; ++k) child_begin[k + 1] += child_begin[k];
  std::vector<uint32_t> children(child_begin[count]);
  {
    std::vector<uint32_t> fill(child_begin.begin(), child_begin.end() - 1);
    for (uint32_t k = 0; k < count; ++k) {
      if (group_parent[k] != kNoIndex) children[fill[group_parent[k]]++] = k;
    }
  }
  order.reserve(count);
  std::vector<uint32_t> stack;
  for (uint32_t root = 0; root < count; ++root) {
    if (group_parent[root] != kNoIndex) continue;
    stack.push_back(root);
    while (!stack.empty()) {
      const uint32_t k = stack.back();
      stack.pop_back();
      order.push_back(k);
      for (uint32_t c = child_begin[k + 1]; c > child_begin[k]; --c) {
        stack.push_back(children[c - 1]);
      }
    }
  }
  sizes.assign(count, 1);
  for (uint32_t t = count; t-- > 0;) {
    const uint32_t k = order[t];
    if (group_parent[k] != kNoIndex) sizes[group_parent[k]] += sizes[k];
  }
  position.resize(count);
  for (uint32_t t = 0; t < count; ++t) position[order[t]] = t;
}

}  // namespace

// A run of creates on its way in (ApplyCreates): each one's slot, its
// parent in the run or the old index of its parent outside it, and the
// run's pre-order.
struct World::CreateRun {
  uint32_t old_size = 0;
  std::vector<Slot> slots;
  std::vector<uint32_t> group_parent;  // Position in ops, or kNoIndex.
  std::vector<Index> attach;  // Old index of an outside parent, or kNoIndex.
  std::vector<uint32_t> order, sizes, position_in_order;
};

void World::TakeRunSlots(absl::Span<const CreateOp> ops, CreateRun& run) {
  // slot_index_ of a new slot temporarily holds old_size + its position in
  // `ops`, which tells parents in this run from older ones.
  const auto count = static_cast<uint32_t>(ops.size());
  run.group_parent.assign(count, kNoIndex);
  run.attach.assign(count, kNoIndex);
  run.slots.resize(count);
  for (uint32_t k = 0; k < count; ++k) {
    if (k + kPrefetchAhead < count) {
      slot_of_.Prefetch(ops[k + kPrefetchAhead].entity);
    }
    run.slots[k] = AllocateSlot(ops[k].entity);
    slot_index_[run.slots[k]] = run.old_size + k;
    slot_of_.InsertOrAssign(ops[k].entity, run.slots[k]);
    if (ops[k].parent == kNoEntity) continue;
    const Index p = slot_index_[slot_of_.Find(ops[k].parent)];
    if (p >= run.old_size) {
      run.group_parent[k] = p - run.old_size;
    } else {
      run.attach[k] = p;
    }
  }
}

std::vector<World::InsertBlock> World::AppendRun(absl::Span<const CreateOp> ops,
                                                 const CreateRun& run) {
  // Parents are stored as "old index" for outside parents and "old_size +
  // position in order" for parents in the run, both remapped by
  // InsertBlocks.
  const uint32_t old_size = run.old_size;
  const auto count = static_cast<uint32_t>(ops.size());
  ForEachColumn([&](auto& column) { column.resize(old_size + count); });
  std::vector<InsertBlock> blocks;
  for (uint32_t t = 0; t < count; ++t) {
    if (t + kCreatesAhead < count) {
      const Transform& ahead = ops[run.order[t + kCreatesAhead]].local;
      __builtin_prefetch(&ahead);
      __builtin_prefetch(reinterpret_cast<const char*>(&ahead + 1) - 1);
    }
    const uint32_t k = run.order[t];
    const Index at = old_size + t;
    SetLocalColumns(at, ops[k].local);
    subtree_size_[at] = run.sizes[k];
    slot_[at] = run.slots[k];
    frame_flags_[at] = kCreatedThisFrame;
    if (run.group_parent[k] != kNoIndex) {
      parent_[at] = old_size + run.position_in_order[run.group_parent[k]];
    } else {
      parent_[at] = run.attach[k];
      blocks.push_back(
          {run.attach[k] == kNoIndex ? old_size : end_of(run.attach[k]), t,
           run.sizes[k], run.attach[k]});
    }
  }
  return blocks;
}

void World::ApplyCreates(absl::Span<const CreateOp> ops) {
  if (restructuring_) {
    ApplyCreatesRestructuring(ops);
    return;
  }
  if (ops.empty()) return;
  CreateRun run{.old_size = static_cast<uint32_t>(size())};
  TakeRunSlots(ops, run);
  PreOrderOfRun(run.group_parent, run.order, run.sizes, run.position_in_order);
  // The run appended in pre-order, its blocks' insertion points all taken
  // from the old layout.
  std::vector<InsertBlock> blocks = AppendRun(ops, run);
  AddBlocksToAncestorSizes(blocks);
  // Parents whose ranges end at the same point are one ancestor chain; the
  // deepest (largest index) takes its blocks first, so each block lands inside
  // its parent's range. New roots go last.
  std::stable_sort(blocks.begin(), blocks.end(),
                   [](const InsertBlock& a, const InsertBlock& b) {
                     if (a.at != b.at) return a.at < b.at;
                     const auto key = [](Index parent) {
                       return parent == kNoIndex ? int64_t{-1}
                                                 : int64_t{parent};
                     };
                     return key(a.parent) > key(b.parent);
                   });
  InsertBlocks(run.old_size, blocks);

  created_slots_.insert(created_slots_.end(), run.slots.begin(),
                        run.slots.end());
  for (const InsertBlock& block : blocks) {
    MarkDirty(slot_index_[run.slots[run.order[block.first]]]);
  }
}

void World::ApplyCreatesRestructuring(absl::Span<const CreateOp> ops) {
  // Appended where they are, in the order given: each its parent's last
  // child, as a run inserted into the columns would be. Each is a subtree
  // root to recompute, so that ExactWorld never takes an unswept one's
  // world matrix for exact.
  const Index first = static_cast<Index>(size());
  ForEachColumn([&](auto& column) { column.resize(first + ops.size()); });
  for (size_t k = 0; k < ops.size(); ++k) {
    const CreateOp& op = ops[k];
    const Index at = first + static_cast<Index>(k);
    const Slot slot = AllocateSlot(op.entity);
    slot_index_[slot] = at;
    slot_of_.InsertOrAssign(op.entity, slot);
    const Index parent =
        op.parent == kNoEntity ? kNoIndex : index_of(op.parent);
    SetLocalColumns(at, op.local);
    parent_[at] = parent;
    subtree_size_[at] = 1;  // Set for all when the restructuring ends.
    slot_[at] = slot;
    frame_flags_[at] = kCreatedThisFrame;
    restructuring_->Append(parent, at);
    created_slots_.push_back(slot);
    MarkDirty(at);
  }
}

void World::BeginRestructure() {
  ListSwept();  // The sweeps' ranges are positions, which will change.
  restructuring_ = std::make_shared<internal::SiblingLists>(
      absl::MakeConstSpan(parent_.data(), parent_.size()));
}

void World::EndRestructure() {
  const std::vector<Index> order = restructuring_->PreOrder(
      absl::MakeConstSpan(parent_.data(), parent_.size()));
  restructuring_.reset();
  // Instances before the first change keep their place; the rest are
  // gathered in their new order.
  Index from = 0;
  while (from < order.size() && order[from] == from) ++from;
  internal::Column<Index> position(size(), kNoIndex);
  for (Index t = from; t < order.size(); ++t) position[order[t]] = t;
  ForEachColumn([&](auto& column) {
    // A column of its own kind, for the 2 MB pages: fresh memory's page
    // faults were most of the cost with 4 KB ones.
    std::decay_t<decltype(column)> sorted;
    sorted.reserve(order.size());
    sorted.insert(sorted.end(), column.begin(), column.begin() + from);
    for (size_t t = from; t < order.size(); ++t) {
      sorted.push_back(column[order[t]]);
    }
    column.swap(sorted);
  });
  for (Index t = from; t < size(); ++t) {
    if (parent_[t] >= from && parent_[t] != kNoIndex) {
      parent_[t] = position[parent_[t]];
    }
  }
  std::fill(subtree_size_.begin(), subtree_size_.end(), 1);
  for (Index t = static_cast<Index>(size()); t-- > 0;) {
    if (parent_[t] != kNoIndex) subtree_size_[parent_[t]] += subtree_size_[t];
  }
  stats_.relocated += size() - from;
  RefreshSlots(from, static_cast<Index>(size()));
}

void World::AppendChildren(Index i, std::vector<Index>* out) const {
  if (restructuring_) {
    for (Index c = restructuring_->first_child(i); c != kNoIndex;
         c = restructuring_->next_sibling(c)) {
      out->push_back(c);
    }
    return;
  }
  for (Index c = i + 1; c < end_of(i); c = end_of(c)) out->push_back(c);
}

void World::AppendSubtree(Index i, std::vector<Index>* out) const {
  if (restructuring_) {
    restructuring_->AppendSubtree(
        i, absl::MakeConstSpan(parent_.data(), parent_.size()), out);
    return;
  }
  for (Index j = i; j < end_of(i); ++j) out->push_back(j);
}

void World::InsertBlocks(uint32_t old_size,
                         absl::Span<const InsertBlock> blocks) {
  uint32_t count = 0;
  for (const InsertBlock& b : blocks) count += b.count;
  const Index first_moved = blocks.front().at;

  // Where each appended instance lands, and how far each old one shifts.
  std::vector<Index> landed(count);
  std::vector<Index> block_at(blocks.size());
  std::vector<uint32_t> inserted_through(blocks.size());
  uint32_t inserted = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    for (uint32_t t = 0; t < blocks[b].count; ++t) {
      landed[blocks[b].first + t] = blocks[b].at + inserted + t;
    }
    inserted += blocks[b].count;
    block_at[b] = blocks[b].at;
    inserted_through[b] = inserted;
  }
  const auto remap = [&](Index q) -> Index {
    if (q >= old_size) return landed[q - old_size];
    if (q < first_moved) return q;
    // Blocks inserted at q land before the old instance at q.
    const size_t b = std::upper_bound(block_at.begin(), block_at.end(), q) -
                     block_at.begin();
    return b == 0 ? q : q + inserted_through[b - 1];
  };

  // When every block lands at the end they may still need reordering: blocks
  // under the last tree go before new roots.
  if (first_moved < old_size || !std::is_sorted(landed.begin(), landed.end())) {
    ListSwept();
    ForEachColumn([&](auto& column) {
      using T = typename std::decay_t<decltype(column)>::value_type;
      std::vector<T> appended(column.begin() + old_size, column.end());
      size_t dst = old_size + count;
      size_t src = old_size;
      for (size_t b = blocks.size(); b-- > 0;) {
        const InsertBlock& block = blocks[b];
        std::move_backward(column.begin() + block.at, column.begin() + src,
                           column.begin() + dst);
        dst -= src - block.at;
        std::copy(appended.begin() + block.first,
                  appended.begin() + block.first + block.count,
                  column.begin() + (dst - block.count));
        dst -= block.count;
        src = block.at;
      }
    });
    stats_.relocated += old_size - first_moved;
  }
  for (Index j = first_moved; j < size(); ++j) {
    if (parent_[j] != kNoIndex) parent_[j] = remap(parent_[j]);
  }
  RefreshSlots(first_moved, static_cast<Index>(size()));
}

void World::EraseRange(Index first, Index last) {
  ListSwept();
  const uint32_t count = last - first;
  ForEachColumn([&](auto& column) {
    column.erase(column.begin() + first, column.begin() + last);
  });
  for (Index j = first; j < size(); ++j) {
    if (parent_[j] != kNoIndex && parent_[j] >= last) parent_[j] -= count;
  }
  stats_.relocated += size() - first;
  RefreshSlots(first, static_cast<Index>(size()));
}

void World::MoveRange(Index first, Index last, Index to) {
  if (to == first || to == last) return;  // Already in place.
  ListSwept();
  // One rotation of [lo, hi) that brings [mid, hi) to the front.
  const Index lo = std::min(first, to);
  const Index mid = to < first ? first : last;
  const Index hi = std::max(last, to);
  ForEachColumn([&](auto& column) {
    std::rotate(column.begin() + lo, column.begin() + mid, column.begin() + hi);
  });
  // Links into [lo, hi) come from inside it or from later instances.
  for (Index j = lo; j < size(); ++j) {
    const Index q = parent_[j];
    if (q == kNoIndex || q < lo || q >= hi) continue;
    parent_[j] = q < mid ? q + (hi - mid) : q - (mid - lo);
  }
  stats_.relocated += hi - lo;
  RefreshSlots(lo, hi);
}

void World::AddToAncestorSizes(Index parent, int64_t delta) {
  for (Index a = parent; a != kNoIndex; a = parent_[a]) {
    subtree_size_[a] = static_cast<uint32_t>(subtree_size_[a] + delta);
  }
}

void World::AddBlocksToAncestorSizes(absl::Span<const InsertBlock> blocks) {
  if (blocks.size() < restructure_at_) {
    for (const InsertBlock& block : blocks) {
      AddToAncestorSizes(block.parent, block.count);
    }
    return;
  }
  // Walking up from each block's parent costs blocks x depth: a spawn wave
  // under the nodes of a long chain. Instead each parent's count is carried
  // up in one pass over the positions below the deepest parent (ancestors
  // come first in pre-order): O(n), as the insertion itself is.
  Index top = 0;
  for (const InsertBlock& block : blocks) {
    if (block.parent != kNoIndex) top = std::max(top, block.parent + 1);
  }
  std::vector<uint32_t> carry(top, 0);
  for (const InsertBlock& block : blocks) {
    if (block.parent != kNoIndex) carry[block.parent] += block.count;
  }
  for (Index i = top; i-- > 0;) {
    if (carry[i] == 0) continue;
    subtree_size_[i] += carry[i];
    if (parent_[i] != kNoIndex) carry[parent_[i]] += carry[i];
  }
}

void World::RefreshSlots(Index first, Index last) {
  for (Index j = first; j < last; ++j) slot_index_[slot_[j]] = j;
}

void World::ApplyDestroy(const DestroyOp& op) {
  const Index i = index_of(op.entity);
  const Index parent = parent_[i];
  std::vector<Index> gone;
  if (op.mode == DestroyMode::kReparentChildren) {
    // Children keep their world: their new local is relative to the parent.
    const Matrix3x4 parent_world =
        parent == kNoIndex ? Matrix3x4{} : ExactWorld(parent);
    std::vector<Index> children;
    AppendChildren(i, &children);
    for (Index c : children) {
      const Transform local = LocalForWorld(parent_world, ExactWorld(c));
      TouchStructure(entity_of(c), c);
      ApplySetLocal(c, local);
      parent_[c] = parent;
      MarkDirty(c);  // Even if its local came out the same.
    }
    if (restructuring_) restructuring_->Dissolve(parent, i);
    gone.push_back(i);
  } else {
    AppendSubtree(i, &gone);
    if (restructuring_) restructuring_->Detach(parent, i);
  }
  for (Index j : gone) {
    TouchStructure(entity_of(j), j);
    const Slot slot = slot_[j];
    slot_of_.Erase(slot_entity_[slot]);
    slot_index_[slot] = kNoIndex;
    slot_flags_[slot] = 0;
    freed_this_frame_.push_back(slot);
  }
  // Restructuring, the instances stay where they are until it ends.
  if (restructuring_) return;
  AddToAncestorSizes(parent, -static_cast<int64_t>(gone.size()));
  EraseRange(i, i + static_cast<Index>(gone.size()));
}

void World::ApplyLink(const LinkOp& op) {
  const Index i = index_of(op.entity);
  const Index new_parent =
      op.parent == kNoEntity ? kNoIndex : index_of(op.parent);
  if (op.mode == LinkMode::kKeepWorld) {
    const Matrix3x4 parent_world =
        new_parent == kNoIndex ? Matrix3x4{} : ExactWorld(new_parent);
    ApplySetLocal(i, LocalForWorld(parent_world, ExactWorld(i)));
  }
  if (parent_[i] == new_parent) return;
  TouchStructure(op.entity, i);
  if (restructuring_) {
    restructuring_->Detach(parent_[i], i);
    restructuring_->Append(new_parent, i);
    parent_[i] = new_parent;
    MarkDirty(i);
    return;
  }
  const Index last = end_of(i);
  const uint32_t count = last - i;
  // Computed before the sizes change: when the new parent is an old ancestor
  // its range does not move.
  const Index to =
      new_parent == kNoIndex ? static_cast<Index>(size()) : end_of(new_parent);
  AddToAncestorSizes(parent_[i], -static_cast<int64_t>(count));
  AddToAncestorSizes(new_parent, count);
  parent_[i] = new_parent;
  MoveRange(i, last, to);
  MarkDirty(index_of(op.entity));
}

void World::SetLocalColumns(Index i, const Transform& local) {
  const Transform normalized = Normalized(local);
  rotation_[i] = normalized.rotation;
  scale_[i] = normalized.scale;
  local_[i] = ToMatrix(normalized);
}

void World::ApplySetLocal(Index i, const Transform& local) {
  const Matrix3x4 before = local_[i];
  SetLocalColumns(i, local);
  // A physics step resends bodies at rest: the same matrix moves nothing.
  // Bitwise on purpose: a NaN-free float compare would call -0 and 0 equal,
  // and the bits are what subscribers are sent.
  // NOLINTNEXTLINE(bugprone-suspicious-memory-comparison)
  if (std::memcmp(&before, &local_[i], sizeof(before)) != 0) MarkDirty(i);
}

void World::ApplySetWorld(Index i, const Transform& world) {
  if (parent_[i] == kNoIndex) {
    ApplySetLocal(i, world);
    return;
  }
  ApplySetLocal(
      i, LocalForWorld(ExactWorld(parent_[i]), ToMatrix(Normalized(world))));
}

}  // namespace xform
