// Copyright 2026 The xform Authors.

#include "xform/world.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "src/command_checks.h"
#include "src/sibling_lists.h"
#include "src/world_internal.h"
#include "src/world_validator.h"
#include "xform/internal/math_kernels.h"

namespace xform {
namespace {

using internal::Index;
using internal::kNoIndex;
using internal::kPrefetchAhead;
using world_internal::kCreatedThisFrame;
using world_internal::kMovedThisFrame;
using world_internal::NotFinite;

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
  return Apply(batch, [] { return absl::OkStatus(); });
}

absl::Status World::Apply(absl::Span<const Command> batch,
                          absl::FunctionRef<absl::Status()> commit) {
  // A physics step is all set-locals: no structure to simulate, so the
  // overlay validator is not needed (same checks, same order, one lookup).
  if (!batch.empty() &&
      std::all_of(batch.begin(), batch.end(), [](const Command& c) {
        return std::holds_alternative<SetLocalOp>(c);
      })) {
    return SetLocalsOf(
        batch.size(),
        [&](size_t k) -> const SetLocalOp& {
          return std::get<SetLocalOp>(batch[k]);
        },
        commit);
  }
  walked_ = 0;  // The validator's walks count too.
  {
    BatchValidator validator(*this);
    for (size_t k = 0; k < batch.size(); ++k) {
      if (absl::Status s = validator.Check(k, batch[k]); !s.ok()) return s;
    }
  }
  const ListsMark mark = MarkLists();
  if (CountShifting(batch) >= restructure_at_) BeginRestructure();
  std::vector<UndoStep> undo;
  const absl::Status applied = ApplyEach(batch, &undo);
  if (restructuring_) EndRestructure();
  if (!applied.ok()) return TakeBack(undo, mark, applied);
  if (!Propagate()) return TakeBack(undo, mark, NotFinite());
  if (absl::Status committed = commit(); !committed.ok()) {
    return TakeBack(undo, mark, committed);
  }
  return absl::OkStatus();
}

absl::Status World::ApplyEach(absl::Span<const Command> batch,
                              std::vector<UndoStep>* undo) {
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
  for (size_t k = 0; k < batch.size(); ++k) {
    const Command& command = batch[k];
    if (const auto* create = std::get_if<CreateOp>(&command)) {
      RecordUndo(command, undo);
      creates.push_back(*create);
      continue;
    }
    flush_creates();
    RecordUndo(command, undo);
    std::visit(Applier{*this}, command);
    if (absl::Status walked = CheckWalked(); !walked.ok()) {
      return absl::Status(walked.code(),
                          absl::StrCat("command ", k, ": ", walked.message()));
    }
  }
  flush_creates();
  return absl::OkStatus();
}

absl::Status World::CheckWalked() const {
  if (walked_ <= max_ancestor_walk_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the batch's walks to the root (set-worlds, keep-world links, "
      "children-keeping destroys, cycle checks) passed ",
      walked_, " ancestors, more than the ", max_ancestor_walk_,
      " allowed; nothing was applied: split the batch"));
}

size_t World::CountShifting(absl::Span<const Command> batch) {
  size_t shifting = 0;
  bool in_creates = false;
  for (const Command& command : batch) {
    const bool create = std::holds_alternative<CreateOp>(command);
    if (create ? !in_creates
               : std::holds_alternative<LinkOp>(command) ||
                     std::holds_alternative<DestroyOp>(command)) {
      ++shifting;
    }
    in_creates = create;
  }
  return shifting;
}

absl::Status World::CreateMany(absl::Span<const CreateOp> ops) {
  // Validation claims each id in slot_of_ as it goes, which is both the
  // duplicate check and the insert ApplyCreates would do; a failure removes
  // them again.
  for (size_t k = 0; k < ops.size(); ++k) {
    if (k + kPrefetchAhead < ops.size()) {
      slot_of_.Prefetch(ops[k + kPrefetchAhead].entity);
    }
    const CreateOp& op = ops[k];
    // The id is claimed (inserted) in the same lookup as it is checked.
    const absl::Status status = command_checks::CheckCreate(
        op,
        [&](EntityId e) {
          return slot_of_.Find(e) != internal::IdIndex::kAbsent;
        },
        [&](EntityId e) { return slot_of_.TryInsert(e, kClaimed); });
    if (!status.ok()) {
      for (size_t undo = 0; undo < k; ++undo) slot_of_.Erase(ops[undo].entity);
      return command_checks::Annotate(status, k, "create", op.entity);
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
    return TakeBack(undo, mark, NotFinite());
  }
  return absl::OkStatus();
}

absl::Status World::SetLocals(absl::Span<const SetLocalOp> ops) {
  return SetLocalsOf(
      ops.size(), [&](size_t k) -> const SetLocalOp& { return ops[k]; },
      [] { return absl::OkStatus(); });
}

template <typename Get>
absl::Status World::SetLocalsOf(size_t count, Get get,
                                absl::FunctionRef<absl::Status()> commit) {
  // A physics step sets entities scattered over the whole world, so each
  // lookup and each column write is a cache miss: fetched ahead.
  constexpr size_t kAhead = kPrefetchAhead;
  std::vector<Slot> slots(count);
  for (size_t k = 0; k < count; ++k) {
    if (k + kAhead < count) slot_of_.Prefetch(get(k + kAhead).entity);
    const SetLocalOp& op = get(k);
    const absl::Status status =
        command_checks::CheckSetTransform(op.entity, op.local, [&](EntityId e) {
          const Slot slot = slot_of_.Find(e);
          if (slot >= kClaimed) return false;  // Absent, or being created.
          slots[k] = slot;
          return true;
        });
    if (!status.ok()) {
      return command_checks::Annotate(status, k, "set local", op.entity);
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
  absl::Status status = Propagate() ? commit() : NotFinite();
  if (!status.ok()) {
    // No structure changed: restore the locals in reverse (an entity may be
    // set twice), sweep again, and forget both sweeps' ranges.
    for (size_t k = count; k-- > 0;) RestoreLocal(targets[k], saved[k]);
    Propagate();
    swept_.resize(swept_before);
  }
  return status;
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
  std::vector<Index> instances;
  if (op.mode == DestroyMode::kReparentChildren) {
    // Undone in reverse: the entity comes back, then its children rejoin it
    // with their locals as they were.
    AppendChildren(i, &instances);
    for (Index c : instances) {
      steps->push_back(
          {UndoStep::kRestoreLocal, entity_of(c), kNoEntity, SaveLocal(c)});
      steps->push_back({UndoStep::kLinkBack, entity_of(c), op.entity});
    }
    steps->push_back({UndoStep::kRecreate, op.entity, parent_entity_of(i),
                      SaveLocal(i), frame_flags_[i]});
    return;
  }
  // The subtree in reverse pre-order, so that it comes back parents first.
  AppendSubtree(i, &instances);
  for (auto j = instances.rbegin(); j != instances.rend(); ++j) {
    steps->push_back({UndoStep::kRecreate, entity_of(*j), parent_entity_of(*j),
                      SaveLocal(*j), frame_flags_[*j]});
  }
}

World::ListsMark World::MarkLists() {
  ListSwept();
  return {moved_slots_.size(), created_slots_.size()};
}

absl::Status World::TakeBack(absl::Span<const UndoStep> steps, ListsMark mark,
                             absl::Status refusal) {
  // Nothing here reads a world matrix: those the batch made may not be
  // finite. Undoing a batch that restructured may restructure too.
  const size_t shifting =
      std::count_if(steps.begin(), steps.end(), [](const UndoStep& step) {
        return step.kind != UndoStep::kRestoreLocal;
      });
  if (shifting >= restructure_at_) BeginRestructure();
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
  if (restructuring_) EndRestructure();
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
  // earlier in the frame, under the old one, is listed again. (Unless it was
  // created in the batch too, and so is gone again.)
  for (size_t k : recreated) {
    const Index i = index_of(steps[k].entity);
    if (i == kNoIndex) continue;
    frame_flags_[i] = steps[k].frame_flags;
    if (frame_flags_[i] & kMovedThisFrame) moved_slots_.push_back(slot_[i]);
    if (frame_flags_[i] & kCreatedThisFrame) created_slots_.push_back(slot_[i]);
  }
  return refusal;
}

// ---------------------------------------------------------------------------
// Reads.

World::Index World::index_of(EntityId entity) const {
  const Slot slot = slot_of_.Find(entity);
  return slot >= kClaimed ? kNoIndex : slot_index_[slot];
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
  std::vector<Index> instances;
  AppendChildren(i, &instances);
  std::vector<EntityId> children;
  children.reserve(instances.size());
  for (Index c : instances) children.push_back(entity_of(c));
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
         Bytes(created_slots_) + slot_of_.bytes() + MapBytes(frame_start_);
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

}  // namespace xform
