// Copyright 2026 The xform Authors.

#include "xform/world.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/math_kernels.h"
#include "src/sweep.h"
#include "src/world_validator.h"

namespace xform {
namespace {

// slot_flags_: a subtree root to recompute in this batch.
constexpr uint8_t kDirty = 1;
// frame_flags_: already listed in moved_slots_, or created in this frame (and
// so reported through created_slots_ instead).
constexpr uint8_t kMovedThisFrame = 1;
constexpr uint8_t kCreatedThisFrame = 2;

// A scene load's ids land all over the entity map, and its ops, read in
// pre-order, all over a buffer bigger than the cache: each pass over them
// fetches what it will read ahead (kPrefetchAhead lookups, kCreatesAhead
// creates), so the misses overlap. Only the entity's own map entry: a parent
// was created shortly before and is still cached (fetching it too measured
// slower).
constexpr uint32_t kCreatesAhead = 16;

using internal::Index;
using internal::kNoIndex;
using internal::kPrefetchAhead;

absl::Status NotFinite() {
  return absl::InvalidArgumentError(
      "the batch would make a world matrix non-finite (finite numbers whose "
      "products overflow); nothing was applied");
}

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

template <typename T, typename Allocator>
size_t Bytes(const std::vector<T, Allocator>& v) {
  return v.capacity() * sizeof(T);
}

template <typename Map>
size_t MapBytes(const Map& m) {
  // flat_hash_map: one slot and one control byte per bucket.
  return m.capacity() * (sizeof(typename Map::slot_type) + 1);
}

}  // namespace

void FrameChanges::Clear() {
  frame = 0;
  moved.clear();
  moved_world.clear();
  created.clear();
  created_parent.clear();
  destroyed.clear();
  reparented.clear();
  reparented_parent.clear();
}

World::World() = default;
World::~World() = default;

// ---------------------------------------------------------------------------
// Mutations: validate whole, then apply, then propagate once.

absl::Status World::Apply(absl::Span<const Command> batch) {
  // A physics step is all set-locals: no structure to simulate, so the
  // overlay validator is not needed (same checks, same order, one lookup).
  if (!batch.empty() &&
      std::all_of(batch.begin(), batch.end(), [](const Command& c) {
        return std::holds_alternative<SetLocalOp>(c);
      })) {
    return SetLocalsOf(batch.size(), [&](size_t k) -> const SetLocalOp& {
      return std::get<SetLocalOp>(batch[k]);
    });
  }
  {
    BatchValidator validator(*this);
    for (size_t k = 0; k < batch.size(); ++k) {
      if (absl::Status s = validator.Check(k, batch[k]); !s.ok()) return s;
    }
  }
  // Runs of creates insert together, so a spawn wave shifts the arrays once.
  std::vector<CreateOp> creates;
  const auto flush_creates = [&] {
    if (creates.empty()) return;
    ApplyCreates(creates);
    creates.clear();
  };
  struct Applier {
    World& world;
    void operator()(const CreateOp&) {}  // Gathered into runs above.
    void operator()(const DestroyOp& op) { world.ApplyDestroy(op); }
    void operator()(const LinkOp& op) { world.ApplyLink(op); }
    void operator()(const SetLocalOp& op) {
      world.ApplySetLocal(world.index_of(op.entity), op.local);
    }
    void operator()(const SetWorldOp& op) {
      world.ApplySetWorld(world.index_of(op.entity), op.world);
    }
  };
  const ListsMark mark = MarkLists();
  std::vector<UndoStep> undo;
  for (const Command& command : batch) {
    if (const auto* create = std::get_if<CreateOp>(&command)) {
      RecordUndo(command, &undo);
      creates.push_back(*create);
      continue;
    }
    flush_creates();
    RecordUndo(command, &undo);
    std::visit(Applier{*this}, command);
  }
  flush_creates();
  if (!Propagate()) return TakeBack(undo, mark);
  return absl::OkStatus();
}

absl::Status World::CreateMany(absl::Span<const CreateOp> ops) {
  // Validation inserts each id into slot_of_ as it goes, which is both the
  // duplicate check and the insert ApplyCreates would do; a failure removes
  // them again.
  slot_of_.reserve(slot_of_.size() + ops.size());
  for (size_t k = 0; k < ops.size(); ++k) {
    if (k + kPrefetchAhead < ops.size()) {
      slot_of_.prefetch(ops[k + kPrefetchAhead].entity);
    }
    const CreateOp& op = ops[k];
    absl::Status status;
    if (op.entity == kNoEntity) {
      status = absl::InvalidArgumentError("entity id 0 is reserved for 'none'");
    } else if (status = ValidateTransform(op.local); !status.ok()) {
    } else if (op.parent == op.entity) {
      status =
          absl::FailedPreconditionError("an entity cannot be its own parent");
    } else if (op.parent != kNoEntity && !slot_of_.contains(op.parent)) {
      status =
          absl::NotFoundError(absl::StrCat("parent ", op.parent, " not found"));
    } else if (!slot_of_.try_emplace(op.entity, kNoIndex).second) {
      status = absl::AlreadyExistsError("already exists");
    }
    if (!status.ok()) {
      for (size_t undo = 0; undo < k; ++undo) slot_of_.erase(ops[undo].entity);
      return absl::Status(status.code(),
                          absl::StrCat("command ", k, " (create entity ",
                                       op.entity, "): ", status.message()));
    }
  }
  const ListsMark mark = MarkLists();
  ApplyCreates(ops);
  if (!Propagate()) {
    std::vector<UndoStep> undo;
    undo.reserve(ops.size());
    for (const CreateOp& op : ops) {
      undo.push_back({UndoStep::kDestroyCreated, op.entity});
    }
    return TakeBack(undo, mark);
  }
  return absl::OkStatus();
}

absl::Status World::SetLocals(absl::Span<const SetLocalOp> ops) {
  return SetLocalsOf(ops.size(),
                     [&](size_t k) -> const SetLocalOp& { return ops[k]; });
}

template <typename Get>
absl::Status World::SetLocalsOf(size_t count, Get get) {
  // A physics step sets entities scattered over the whole world, so each
  // lookup and each column write is a cache miss: fetched ahead.
  constexpr size_t kAhead = kPrefetchAhead;
  std::vector<Slot> slots(count);
  for (size_t k = 0; k < count; ++k) {
    if (k + kAhead < count) slot_of_.prefetch(get(k + kAhead).entity);
    const SetLocalOp& op = get(k);
    absl::Status status;
    if (op.entity == kNoEntity) {
      status = absl::InvalidArgumentError("entity id 0 is reserved for 'none'");
    } else if (status = ValidateTransform(op.local); !status.ok()) {
    } else if (const auto it = slot_of_.find(op.entity);
               it == slot_of_.end() || it->second == kNoIndex) {
      status = absl::NotFoundError("not found");
    } else {
      slots[k] = it->second;
    }
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("command ", k, " (set local entity ",
                                       op.entity, "): ", status.message()));
    }
  }
  std::vector<Index> targets(count);
  std::vector<SavedLocal> saved;  // Filled as the ops apply, not zeroed first.
  saved.reserve(count);
  const size_t swept_before = swept_.size();
  for (size_t k = 0; k < count; ++k) {
    if (k + kAhead < count) __builtin_prefetch(&slot_index_[slots[k + kAhead]]);
    targets[k] = slot_index_[slots[k]];
  }
  for (size_t k = 0; k < count; ++k) {
    if (k + kAhead < count) {
      const Index i = targets[k + kAhead];
      const char* local = reinterpret_cast<const char*>(&local_[i]);
      __builtin_prefetch(local);
      __builtin_prefetch(local + sizeof(Matrix3x4) - 1);  // May span 2 lines.
      __builtin_prefetch(&rotation_[i]);
      __builtin_prefetch(&scale_[i]);
      __builtin_prefetch(&slot_flags_[slots[k + kAhead]]);
      __builtin_prefetch(&slot_[i]);
    }
    saved.push_back(SaveLocal(targets[k]));  // Cached: the lines were fetched.
    ApplySetLocal(targets[k], get(k).local);
  }
  if (!Propagate()) {
    // No structure changed: restore the locals in reverse (an entity may be
    // set twice), sweep again, and forget both sweeps' ranges.
    for (size_t k = count; k-- > 0;) RestoreLocal(targets[k], saved[k]);
    Propagate();
    swept_.resize(swept_before);
    return NotFinite();
  }
  return absl::OkStatus();
}

absl::Status World::Create(EntityId entity, EntityId parent,
                           const Transform& local) {
  const CreateOp op{entity, parent, local};
  return CreateMany({&op, 1});
}

absl::Status World::Destroy(EntityId entity, DestroyMode mode) {
  const Command command = DestroyOp{entity, mode};
  return Apply({&command, 1});
}

absl::Status World::Link(EntityId entity, EntityId parent, LinkMode mode) {
  const Command command = LinkOp{entity, parent, mode};
  return Apply({&command, 1});
}

absl::Status World::Unlink(EntityId entity, LinkMode mode) {
  return Link(entity, kNoEntity, mode);
}

absl::Status World::SetLocal(EntityId entity, const Transform& local) {
  const SetLocalOp op{entity, local};
  return SetLocals({&op, 1});
}

absl::Status World::SetWorld(EntityId entity, const Transform& world) {
  const Command command = SetWorldOp{entity, world};
  return Apply({&command, 1});
}

// ---------------------------------------------------------------------------
// Reads.

World::Index World::index_of(EntityId entity) const {
  const auto it = slot_of_.find(entity);
  return it == slot_of_.end() || it->second == kNoIndex
             ? kNoIndex
             : slot_index_[it->second];
}

bool World::Has(EntityId entity) const { return index_of(entity) != kNoIndex; }

absl::StatusOr<Transform> World::Local(EntityId entity) const {
  const Index i = index_of(entity);
  if (i == kNoIndex)
    return absl::NotFoundError(absl::StrCat(entity, " not found"));
  return Transform{local_[i].translation(), rotation_[i], scale_[i]};
}

absl::StatusOr<Matrix3x4> World::WorldMatrix(EntityId entity) const {
  const Index i = index_of(entity);
  if (i == kNoIndex)
    return absl::NotFoundError(absl::StrCat(entity, " not found"));
  return world_[i];
}

absl::StatusOr<EntityId> World::Parent(EntityId entity) const {
  const Index i = index_of(entity);
  if (i == kNoIndex)
    return absl::NotFoundError(absl::StrCat(entity, " not found"));
  return parent_entity_of(i);
}

absl::StatusOr<std::vector<EntityId>> World::Children(EntityId entity) const {
  const Index i = index_of(entity);
  if (i == kNoIndex)
    return absl::NotFoundError(absl::StrCat(entity, " not found"));
  std::vector<EntityId> children;
  for (Index c = i + 1; c < end_of(i); c = end_of(c)) {
    children.push_back(entity_of(c));
  }
  return children;
}

absl::StatusOr<std::vector<EntityId>> World::Subtree(EntityId entity) const {
  const Index i = index_of(entity);
  if (i == kNoIndex)
    return absl::NotFoundError(absl::StrCat(entity, " not found"));
  std::vector<EntityId> out;
  out.reserve(subtree_size_[i]);
  for (Index j = i; j < end_of(i); ++j) out.push_back(entity_of(j));
  return out;
}

size_t World::MemoryBytes() const {
  return Bytes(parent_) + Bytes(subtree_size_) + Bytes(rotation_) +
         Bytes(scale_) + Bytes(local_) + Bytes(world_) + Bytes(slot_) +
         Bytes(frame_flags_) + Bytes(slot_index_) + Bytes(slot_entity_) +
         Bytes(slot_flags_) + Bytes(free_slots_) + Bytes(freed_this_frame_) +
         Bytes(dirty_roots_) + Bytes(swept_) + Bytes(moved_slots_) +
         Bytes(created_slots_) + MapBytes(slot_of_) + MapBytes(frame_start_);
}

absl::Status World::CheckConsistency() const {
  const auto broken = [](auto&&... args) {
    return absl::InternalError(absl::StrCat(args...));
  };
  if (slot_of_.size() != size()) {
    return broken(slot_of_.size(), " ids for ", size(), " instances");
  }
  for (Index i = 0; i < size(); ++i) {
    const Index p = parent_[i];
    if (subtree_size_[i] == 0 || end_of(i) > size()) {
      return broken("instance ", i, " has subtree size ", subtree_size_[i]);
    }
    if (p != kNoIndex && (p >= i || end_of(i) > end_of(p))) {
      return broken("instance ", i, " is outside its parent ", p, "'s range");
    }
    if (slot_index_[slot_[i]] != i || index_of(entity_of(i)) != i) {
      return broken("instance ", i, " and its slot disagree");
    }
    // The children's ranges tile the parent's range exactly.
    Index c = i + 1;
    while (c < end_of(i)) {
      if (parent_[c] != i) {
        return broken("instance ", c, " should be a child of ", i);
      }
      c = end_of(c);
    }
    if (c != end_of(i)) return broken("children overrun instance ", i);
  }
  return absl::OkStatus();
}

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

void World::ApplyCreates(absl::Span<const CreateOp> ops) {
  const uint32_t old_size = static_cast<uint32_t>(size());
  const uint32_t count = static_cast<uint32_t>(ops.size());
  if (count == 0) return;

  // Slots first: slot_index_ of a new slot temporarily holds old_size + its
  // position in `ops`, which tells parents in this run from older ones.
  std::vector<uint32_t> group_parent(count, kNoIndex);  // Position in ops.
  std::vector<Index> attach(count,
                            kNoIndex);  // Old index of an outside parent.
  std::vector<Slot> slots(count);
  for (uint32_t k = 0; k < count; ++k) {
    if (k + kPrefetchAhead < count) {
      slot_of_.prefetch(ops[k + kPrefetchAhead].entity);
    }
    slots[k] = AllocateSlot(ops[k].entity);
    slot_index_[slots[k]] = old_size + k;
    slot_of_.insert_or_assign(ops[k].entity, slots[k]);
    if (ops[k].parent == kNoEntity) continue;
    const Index p = slot_index_[slot_of_.find(ops[k].parent)->second];
    if (p >= old_size) {
      group_parent[k] = p - old_size;
    } else {
      attach[k] = p;
    }
  }

  // Pre-order of the run: children by parent (counting sort, input order kept),
  // then a depth-first walk from each run root.
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
  std::vector<uint32_t> order;  // Run positions in pre-order.
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
  std::vector<uint32_t> sizes(count, 1);
  for (uint32_t t = count; t-- > 0;) {
    const uint32_t k = order[t];
    if (group_parent[k] != kNoIndex) sizes[group_parent[k]] += sizes[k];
  }
  std::vector<uint32_t> position_in_order(count);
  for (uint32_t t = 0; t < count; ++t) position_in_order[order[t]] = t;

  // Append the run in pre-order; parents are stored as "old index" for outside
  // parents and "old_size + position in order" for parents in the run, both
  // remapped by InsertBlocks.
  ForEachColumn([&](auto& column) { column.resize(old_size + count); });
  std::vector<InsertBlock> blocks;
  for (uint32_t t = 0; t < count; ++t) {
    if (t + kCreatesAhead < count) {
      const Transform& ahead = ops[order[t + kCreatesAhead]].local;
      __builtin_prefetch(&ahead);
      __builtin_prefetch(reinterpret_cast<const char*>(&ahead + 1) - 1);
    }
    const uint32_t k = order[t];
    const Index at = old_size + t;
    SetLocalColumns(at, ops[k].local);
    subtree_size_[at] = sizes[k];
    slot_[at] = slots[k];
    frame_flags_[at] = kCreatedThisFrame;
    if (group_parent[k] != kNoIndex) {
      parent_[at] = old_size + position_in_order[group_parent[k]];
    } else {
      parent_[at] = attach[k];
      blocks.push_back({attach[k] == kNoIndex ? old_size : end_of(attach[k]), t,
                        sizes[k], attach[k]});
    }
  }
  // Only now, with every insertion point taken from the old layout.
  for (const InsertBlock& block : blocks) {
    AddToAncestorSizes(block.parent, block.count);
  }
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
  InsertBlocks(old_size, blocks);

  created_slots_.insert(created_slots_.end(), slots.begin(), slots.end());
  for (const InsertBlock& block : blocks) {
    MarkDirty(slot_index_[slots[order[block.first]]]);
  }
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

void World::RefreshSlots(Index first, Index last) {
  for (Index j = first; j < last; ++j) slot_index_[slot_[j]] = j;
}

void World::ApplyDestroy(const DestroyOp& op) {
  const Index i = index_of(op.entity);
  const Index parent = parent_[i];
  Index last = end_of(i);
  if (op.mode == DestroyMode::kReparentChildren) {
    // Children keep their world: their new local is relative to the parent.
    const Matrix3x4 parent_world =
        parent == kNoIndex ? Matrix3x4{} : ExactWorld(parent);
    for (Index c = i + 1; c < end_of(i); c = end_of(c)) {
      const Transform local = LocalForWorld(parent_world, ExactWorld(c));
      TouchStructure(entity_of(c), c);
      ApplySetLocal(c, local);
      parent_[c] = parent;
      MarkDirty(c);  // Even if its local came out the same.
    }
    last = i + 1;
  }
  for (Index j = i; j < last; ++j) {
    TouchStructure(entity_of(j), j);
    const Slot slot = slot_[j];
    slot_of_.erase(slot_entity_[slot]);
    slot_index_[slot] = kNoIndex;
    slot_flags_[slot] = 0;
    freed_this_frame_.push_back(slot);
  }
  AddToAncestorSizes(parent, -static_cast<int64_t>(last - i));
  EraseRange(i, last);
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

// ---------------------------------------------------------------------------
// Taking a batch back.

World::SavedLocal World::SaveLocal(Index i) const {
  return {rotation_[i], scale_[i], local_[i]};
}

void World::RestoreLocal(Index i, const SavedLocal& saved) {
  // The columns themselves: normalizing the rotation again could change its
  // last bit, and so the world matrices below.
  rotation_[i] = saved.rotation;
  scale_[i] = saved.scale;
  local_[i] = saved.local;
  MarkDirty(i);
}

void World::RecordUndo(const Command& command,
                       std::vector<UndoStep>* steps) const {
  if (const auto* op = std::get_if<CreateOp>(&command)) {
    steps->push_back({UndoStep::kDestroyCreated, op->entity});
    return;
  }
  EntityId entity = kNoEntity;
  if (const auto* op = std::get_if<SetLocalOp>(&command)) entity = op->entity;
  if (const auto* op = std::get_if<SetWorldOp>(&command)) entity = op->entity;
  if (entity != kNoEntity) {
    steps->push_back({UndoStep::kRestoreLocal, entity, kNoEntity,
                      SaveLocal(index_of(entity))});
    return;
  }
  if (const auto* op = std::get_if<LinkOp>(&command)) {
    const Index i = index_of(op->entity);
    steps->push_back(
        {UndoStep::kRestoreLocal, op->entity, kNoEntity, SaveLocal(i)});
    steps->push_back({UndoStep::kLinkBack, op->entity, parent_entity_of(i)});
    return;
  }
  const auto& op = std::get<DestroyOp>(command);
  const Index i = index_of(op.entity);
  if (op.mode == DestroyMode::kReparentChildren) {
    // Undone in reverse: the entity comes back, then its children rejoin it
    // with their locals as they were.
    for (Index c = i + 1; c < end_of(i); c = end_of(c)) {
      steps->push_back(
          {UndoStep::kRestoreLocal, entity_of(c), kNoEntity, SaveLocal(c)});
      steps->push_back({UndoStep::kLinkBack, entity_of(c), op.entity});
    }
    steps->push_back({UndoStep::kRecreate, op.entity, parent_entity_of(i),
                      SaveLocal(i), frame_flags_[i]});
    return;
  }
  // The subtree in reverse pre-order, so that it comes back parents first.
  for (Index j = end_of(i); j-- > i;) {
    steps->push_back({UndoStep::kRecreate, entity_of(j), parent_entity_of(j),
                      SaveLocal(j), frame_flags_[j]});
  }
}

World::ListsMark World::MarkLists() {
  ListSwept();
  return {moved_slots_.size(), created_slots_.size()};
}

absl::Status World::TakeBack(absl::Span<const UndoStep> steps, ListsMark mark) {
  // Nothing here reads a world matrix: those the batch made are not finite.
  std::vector<size_t> recreated;  // Steps.
  for (size_t k = steps.size(); k-- > 0;) {
    const UndoStep& step = steps[k];
    switch (step.kind) {
      case UndoStep::kRestoreLocal:
        RestoreLocal(index_of(step.entity), step.local);
        break;
      case UndoStep::kDestroyCreated:
        // Gone already when an earlier creation was its ancestor.
        if (Has(step.entity))
          ApplyDestroy({step.entity, DestroyMode::kSubtree});
        break;
      case UndoStep::kLinkBack:
        ApplyLink({step.entity, step.parent, LinkMode::kKeepLocal});
        break;
      case UndoStep::kRecreate: {
        const CreateOp create{step.entity, step.parent, {}};
        ApplyCreates({&create, 1});
        RestoreLocal(index_of(step.entity), step.local);
        recreated.push_back(k);
        break;
      }
    }
  }
  Propagate();
  // The batch's and the undo's entries go from the change lists: every
  // parent, local and world is as it was.
  ListSwept();
  for (std::vector<Slot>* list : {&moved_slots_, &created_slots_}) {
    const size_t keep = list == &moved_slots_ ? mark.moved : mark.created;
    for (size_t k = keep; k < list->size(); ++k) {
      const Index i = slot_index_[(*list)[k]];
      if (i != kNoIndex) frame_flags_[i] = 0;
    }
    list->resize(keep);
  }
  // Except that a recreated entity has a new slot: what was listed of it
  // earlier in the frame, under the old one, is listed again.
  for (size_t k : recreated) {
    const Index i = index_of(steps[k].entity);
    frame_flags_[i] = steps[k].frame_flags;
    if (frame_flags_[i] & kMovedThisFrame) moved_slots_.push_back(slot_[i]);
    if (frame_flags_[i] & kCreatedThisFrame) created_slots_.push_back(slot_[i]);
  }
  return NotFinite();
}

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

void World::EndFrame(FrameChanges* changes) {
  changes->Clear();
  changes->frame = frame_;
  const auto emit_moved = [&](Index i) {
    changes->moved.push_back(entity_of(i));
    changes->moved_world.insert(changes->moved_world.end(), world_[i].m.begin(),
                                world_[i].m.end());
  };
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
      if (frame_flags_[j] == 0) emit_moved(j);
    }
    listed_to = std::max(listed_to, range.last);
  }
  swept_.clear();
  for (Slot slot : moved_slots_) {
    const Index i = slot_index_[slot];
    if (i == kNoIndex) continue;  // Destroyed since.
    frame_flags_[i] = 0;
    emit_moved(i);
  }

  std::vector<Index> created;
  for (Slot slot : created_slots_) {
    if (slot_index_[slot] != kNoIndex) created.push_back(slot_index_[slot]);
  }
  std::sort(created.begin(), created.end());
  for (Index i : created) {
    frame_flags_[i] = 0;
    emit_moved(i);
    const auto start = frame_start_.find(entity_of(i));
    if (start != frame_start_.end() && start->second.existed) {
      continue;  // Destroyed and created again: a survivor, not a creation.
    }
    changes->created.push_back(entity_of(i));
    changes->created_parent.push_back(parent_entity_of(i));
  }

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

  moved_slots_.clear();
  created_slots_.clear();
  frame_start_.clear();
  free_slots_.insert(free_slots_.end(), freed_this_frame_.begin(),
                     freed_this_frame_.end());
  freed_this_frame_.clear();
  ++frame_;
}

}  // namespace xform
