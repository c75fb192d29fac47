// Copyright 2026 The xform Authors.
//
// xform::World is one world of entity transforms: the data-oriented transform
// component of the Bitsquid design. Entities (client-chosen ids) may have a
// transform in a world; each transform has a local TRS, a parent (or none),
// and a world matrix that is always exact: world = parent world * local.
//
// Storage is structure-of-arrays kept in pre-order, so every subtree is one
// contiguous range of instances. A batch of changes marks the roots of the
// affected subtrees and, when it returns, has recomputed exactly the union of
// those ranges in one forward sweep: no recursion, no per-change propagation,
// no scan of the untouched world.
//
// Every mutation is a batch (the single-call forms are batches of one). A
// batch is validated whole against the state its earlier commands leave, and
// only then applied; a failed batch changes nothing and says why:
//   NOT_FOUND            an entity or parent that does not exist (then)
//   ALREADY_EXISTS       creating an entity that exists (then)
//   INVALID_ARGUMENT     entity id 0, a non-finite number, a scale below
//                        kMinAbsScale, a rotation that is not a unit
//                        quaternion; or finite numbers whose products would
//                        make a world matrix non-finite (a parent scaled
//                        1e30 over a child at 1e10): found while propagating,
//                        after which the batch is taken back
//   FAILED_PRECONDITION  a link that would make a cycle or a self-parent
// The message names the command's index in the batch and the entity.
//
// Change tracking: the world numbers frames. EndFrame() closes the current
// frame and reports what differs between the state at the previous EndFrame()
// and now (see FrameChanges), then opens the next frame.
//
// Cost model (n = instances, k = affected instances):
//   set local / set world        O(k) for the affected subtrees, once per batch
//   create as a root             O(1) amortized
//   create under a parent,
//   destroy, link                O(instances after the change point): the
//                                arrays shift to keep pre-order. A run of
//                                creates in one batch shifts once, so a scene
//                                load is O(n).
//   a batch with many of those   O(n + commands): past kRestructureAt of
//                                them, the batch edits lists of children
//                                instead (O(1) a link, O(subtree) a destroy)
//                                and the arrays are put in pre-order once.
//                                So no batch costs more than O(n) to relink,
//                                however many links it holds or how deep.
//
// Thread safety: a World is a plain value: no locks, no threads. Concurrent
// const calls are safe; anything else needs external synchronization.

#ifndef XFORM_WORLD_H_
#define XFORM_WORLD_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "xform/internal/huge_page_allocator.h"
#include "xform/internal/id_index.h"
#include "xform/transform.h"
#include "xform/world_image.h"

namespace xform {
namespace internal {

// A position in a world's pre-ordered columns, and the one that is none (a
// root's parent; a free slot). The sweeps use them too.
using Index = uint32_t;
inline constexpr Index kNoIndex = 0xffffffffu;

// How far ahead a loop over scattered entities (a physics step's sets, a
// frame's moved ids) prefetches what it will touch, so that the cache misses
// overlap instead of following one another.
inline constexpr size_t kPrefetchAhead = 8;

// Instances [first, last) of a world's columns: one subtree, or a run of
// sibling subtrees, whose root's parent is exact already. What a sweep
// recomputes (src/sweep.h).
struct SweepRange {
  Index first;
  Index last;
};

class SiblingLists;  // src/sibling_lists.h

}  // namespace internal

// From this many commands that shift the arrays (links, destroys, runs of
// creates) on, a batch restructures the world once instead of shifting it
// for each. Restructuring a world costs about seven shifts of all of it
// (BM_RelinkBatch; docs/benchmarks.md), so no batch pays much more than
// that either way.
inline constexpr size_t kRestructureAt = 8;

enum class DestroyMode {
  kSubtree,           // The entity and all its descendants go.
  kReparentChildren,  // Its children move to its parent, keeping their world.
};

enum class LinkMode {
  kKeepLocal,  // The local transform stays; the world follows the new parent.
  kKeepWorld,  // The world stays; the local is recomputed under the new parent.
};

// The commands of a batch. Each names its entity; kNoEntity as a parent means
// "a root".
struct CreateOp {
  EntityId entity = kNoEntity;
  EntityId parent = kNoEntity;
  Transform local;
};
struct DestroyOp {
  EntityId entity = kNoEntity;
  DestroyMode mode = DestroyMode::kSubtree;
};
struct LinkOp {
  EntityId entity = kNoEntity;
  EntityId parent = kNoEntity;  // kNoEntity unlinks: the entity becomes a root.
  LinkMode mode = LinkMode::kKeepLocal;
};
struct SetLocalOp {
  EntityId entity = kNoEntity;
  Transform local;
};
// Sets the world transform by computing the local that yields it. Under a
// parent whose world has shear the yield is the nearest TRS (see Decompose).
struct SetWorldOp {
  EntityId entity = kNoEntity;
  Transform world;
};
using Command =
    std::variant<CreateOp, DestroyOp, LinkOp, SetLocalOp, SetWorldOp>;

// What changed in one frame, compared with the state at the previous frame's
// end. Structure-of-arrays so it goes on the wire without reshaping. Lists of
// (entity, parent) are in the world's current pre-order, so applying them in
// order never links a child before its parent exists. To replay a frame on a
// copy: destroy `destroyed` one by one keeping children, create `created`, then
// link `reparented`, then take `moved_world` as the world matrices.
struct FrameChanges {
  uint64_t frame = 0;  // The frame these changes close.
  // When the poses it carries were true (history.h's Stamp), on the clock
  // its writers agree on: set by whoever stamps the world's batches (a
  // server), not by World; 0 for none.
  int64_t stamp = 0;

  // Entities alive now whose world matrix was recomputed during the frame,
  // each once, with its matrix now: 12 floats per entity in moved_world, in
  // Matrix3x4 order. Every created entity is here too. Recomputed means the
  // entity or an ancestor got a different local matrix (bitwise: setting the
  // same local again recomputes and lists nothing) or a new parent, so every
  // entity whose matrix changed is listed. Rarely a listed matrix is bitwise
  // what it was: a change undone within the frame, or one that rounding
  // absorbed. Telling those apart would cost a comparison per instance in the
  // sweep; a consumer that keeps the previous frame can filter them itself.
  std::vector<EntityId> moved;
  std::vector<float> moved_world;

  // Absent at the previous frame end, present now; with their parent now.
  std::vector<EntityId> created;
  std::vector<EntityId> created_parent;

  // Present at the previous frame end, absent now.
  std::vector<EntityId> destroyed;

  // Present at both ends with a different parent; with their parent now.
  std::vector<EntityId> reparented;
  std::vector<EntityId> reparented_parent;

  // moved[k]'s matrix now.
  Matrix3x4 MovedWorld(size_t k) const {
    Matrix3x4 m;
    std::copy_n(moved_world.begin() + 12 * k, 12, m.m.begin());
    return m;
  }

  void Clear();
  bool empty() const {
    return moved.empty() && created.empty() && destroyed.empty() &&
           reparented.empty();
  }
};

// Counters for tests and benchmarks.
struct WorldStats {
  // Instances whose world matrix was recomputed, over the world's lifetime.
  uint64_t recomputed = 0;
  // Instances moved in memory to keep pre-order, over the world's lifetime.
  uint64_t relocated = 0;
};

class World {
 public:
  World();
  World(const World&) = default;
  World& operator=(const World&) = default;
  World(World&&) noexcept = default;
  World& operator=(World&&) noexcept = default;
  ~World();

  // Validates the whole batch, then applies it, then brings every affected
  // world matrix up to date. On error nothing changed.
  absl::Status Apply(absl::Span<const Command> batch);
  // As Apply, then asks `commit` whether the batch stands, with the world in
  // the batch's state (a server journals it then). An error from `commit`
  // takes the batch back whole, as a failed batch, and is returned.
  absl::Status Apply(absl::Span<const Command> batch,
                     absl::FunctionRef<absl::Status()> commit);

  // Set-worlds, keep-world links and children-keeping destroys each need a
  // world matrix that the batch may have made stale, computed by walking
  // from the entity up to the root; a link's cycle check walks up from the
  // new parent through what the batch re-parented. O(depth) each, so a batch
  // of them on the leaves of a deep chain, or linking a long chain together,
  // costs commands x depth. A batch whose walks pass more than `steps`
  // ancestors in all is refused (or taken back) whole with
  // ResourceExhausted, naming the command that crossed the line. Unlimited
  // unless set (a server sets it from a flag; a journal's replay must not
  // refuse what was once accepted).
  void set_max_ancestor_walk(uint64_t steps) { max_ancestor_walk_ = steps; }

  // Fast paths for the two common homogeneous batches: a scene load or spawn
  // wave, and a physics step's worth of local transforms.
  absl::Status CreateMany(absl::Span<const CreateOp> ops);
  absl::Status SetLocals(absl::Span<const SetLocalOp> ops);

  // Batches of one.
  absl::Status Create(EntityId entity, EntityId parent, const Transform& local);
  absl::Status Destroy(EntityId entity,
                       DestroyMode mode = DestroyMode::kSubtree);
  absl::Status Link(EntityId entity, EntityId parent,
                    LinkMode mode = LinkMode::kKeepLocal);
  absl::Status Unlink(EntityId entity, LinkMode mode = LinkMode::kKeepLocal);
  absl::Status SetLocal(EntityId entity, const Transform& local);
  absl::Status SetWorld(EntityId entity, const Transform& world);

  // Reads. NotFound for an entity without a transform in this world.
  bool Has(EntityId entity) const;
  size_t size() const { return parent_.size(); }
  absl::StatusOr<Transform> Local(EntityId entity) const;
  absl::StatusOr<Matrix3x4> WorldMatrix(EntityId entity) const;
  absl::StatusOr<EntityId> Parent(EntityId entity) const;  // kNoEntity: root.
  absl::StatusOr<std::vector<EntityId>> Children(EntityId entity) const;
  // The entity and all its descendants, parents before children.
  absl::StatusOr<std::vector<EntityId>> Subtree(EntityId entity) const;

  // Visits every instance in pre-order (parents before children) with its
  // entity, parent entity and world matrix: a snapshot without copying.
  template <typename Visitor>
  void ForEach(Visitor&& visit) const {
    for (uint32_t i = 0; i < parent_.size(); ++i) {
      visit(entity_of(i), parent_entity_of(i), world_[i]);
    }
  }
  // The same, with each instance's position in that order and its parent's
  // (internal::kNoIndex for a root): for a copy that indexes as the world
  // does, without looking parents up by id.
  template <typename Visitor>
  void ForEachInstance(Visitor&& visit) const {
    for (uint32_t i = 0; i < parent_.size(); ++i) {
      visit(i, entity_of(i), parent_[i], world_[i]);
    }
  }

  // A copy of the world's state (see world_image.h): O(n), a copy of about
  // 100 bytes an instance. `image` keeps its capacity, so a caller that
  // Resize()s it ahead faults nothing in here.
  void CopyImage(WorldImage* image) const;
  // Part of it: sizes `image` to the world, sets its frame, and copies
  // instances [first, last) only. Parts copied at different times make one
  // image only if the world did not change in between: a snapshot copies
  // in halves, each under the writer lock, when no batch came between.
  void CopyImage(WorldImage* image, size_t first, size_t last) const;
  // The world `image` describes, its frame open and nothing changed in it.
  // DataLoss when the image is not a world: a repeated or zero id, a parent
  // not before its child, a range that is not pre-order, a value no batch
  // could have set, or a world matrix that is not finite. O(n).
  static absl::StatusOr<World> FromImage(WorldImage image);

  // The frame being built; EndFrame() closes it and returns its changes.
  uint64_t frame() const { return frame_; }
  void EndFrame(FrameChanges* changes);
  // Closes the open frame, dropping its changes, and opens `frame` if that
  // is later than the next one: for a world rebuilt from a journal, whose
  // frames go on from the last it had.
  void RestartFrames(uint64_t frame);

  const WorldStats& stats() const { return stats_; }
  // Verifies the storage invariants (pre-order ranges, subtree sizes, the slot
  // and entity maps): Internal with the first broken one. O(n); for tests.
  absl::Status CheckConsistency() const;
  // Bytes held by this world's containers (capacity, not size).
  size_t MemoryBytes() const;

 private:
  friend class BatchValidator;
  // Benchmarks time propagation apart from the calls that trigger it.
  friend class WorldPeer;
  using Index = internal::Index;
  using Slot = uint32_t;  // Stable per-entity handle; survives relocation.

  // The entity's links at the previous frame end, kept for entities that a
  // structural command touched in this frame, to report net changes.
  struct FrameStart {
    bool existed = false;
    EntityId parent = kNoEntity;
  };

  // A run of new instances, in pre-order, to insert before old index `at`.
  struct InsertBlock {
    Index at;
    uint32_t first;  // Offset into the appended region.
    uint32_t count;
    Index parent;  // Old index of the block root's parent, or kNoIndex.
  };

  EntityId entity_of(Index i) const { return slot_entity_[slot_[i]]; }
  EntityId parent_entity_of(Index i) const {
    return parent_[i] == internal::kNoIndex ? kNoEntity : entity_of(parent_[i]);
  }
  Index index_of(EntityId entity) const;  // kNoIndex when absent.
  Index end_of(Index i) const { return i + subtree_size_[i]; }

  // Structural primitives. Each keeps pre-order, parent links, subtree sizes
  // and the slot map exact.
  // SetLocals over `count` ops that get(k) returns: the one implementation
  // behind SetLocals() and all-set-local batches given to Apply().
  template <typename Get>
  absl::Status SetLocalsOf(size_t count, Get get,
                           absl::FunctionRef<absl::Status()> commit);
  void ApplyCreates(absl::Span<const CreateOp> ops);
  // ApplyCreates' parts: a run's slots and links, then the run appended to
  // the columns in its pre-order (the blocks to insert).
  struct CreateRun;
  void TakeRunSlots(absl::Span<const CreateOp> ops, CreateRun& run);
  std::vector<InsertBlock> AppendRun(absl::Span<const CreateOp> ops,
                                     const CreateRun& run);
  void ApplyDestroy(const DestroyOp& op);
  void ApplyLink(const LinkOp& op);
  void ApplySetLocal(Index i, const Transform& local);
  void SetLocalColumns(Index i, const Transform& local);
  void ApplySetWorld(Index i, const Transform& world);
  void InsertBlocks(uint32_t old_size, absl::Span<const InsertBlock> blocks);
  void EraseRange(Index first, Index last);
  void MoveRange(Index first, Index last, Index to);
  void AddToAncestorSizes(Index parent, int64_t delta);
  void AddBlocksToAncestorSizes(absl::Span<const InsertBlock> blocks);
  void RefreshSlots(Index first, Index last);
  // From Begin to End, the primitives above edit restructuring_ and the parent
  // column and move nothing: positions stay, the destroyed stay in place
  // (without a slot), the created are appended. End puts the columns in
  // pre-order again and sets subtree sizes, O(n).
  void BeginRestructure();
  void EndRestructure();
  // How many commands of `batch` shift the arrays: links, destroys and runs
  // of creates.
  static size_t CountShifting(absl::Span<const Command> batch);
  // `i`'s children in order, and `i` with its descendants in pre-order,
  // appended to `out`, whether or not the world is restructuring.
  void AppendChildren(Index i, std::vector<Index>* out) const;
  void AppendSubtree(Index i, std::vector<Index>* out) const;
  void ApplyCreatesRestructuring(absl::Span<const CreateOp> ops);
  template <typename F>
  void ForEachColumn(F&& f);

  // Change tracking.
  Slot AllocateSlot(EntityId entity);
  FrameStart& TouchStructure(EntityId entity, Index i);
  void MarkDirty(Index i);

  // The world matrix `i` will have once pending changes propagate, computed
  // from the nearest exact ancestor. O(depth), counted in walked_.
  Matrix3x4 ExactWorld(Index i) const;
  // Recomputes the union of the pending dirty subtrees; false when a result
  // was not finite.
  bool Propagate();

  // Taking back a batch whose result would not be finite. Before each
  // command applies, the steps that undo it are recorded; undone in reverse,
  // they leave every instance's parent and local bitwise as before (sibling
  // order aside), and one propagation restores the world matrices. Recording
  // costs O(1) per command, O(subtree) for a destroy (its data is kept).
  struct SavedLocal {
    glm::quat rotation;
    glm::vec3 scale;
    Matrix3x4 local;
  };
  struct UndoStep {
    enum Kind : uint8_t {
      kRestoreLocal,    // entity's local columns back to `local`.
      kDestroyCreated,  // entity was created: destroy it and its subtree.
      kLinkBack,        // entity back under `parent`, keeping its local.
      kRecreate,        // entity was destroyed: create it under `parent`.
    } kind;
    EntityId entity;
    EntityId parent = kNoEntity;
    SavedLocal local;
    uint8_t frame_flags = 0;  // kRecreate: listed as moved/created before.
  };
  // Where the frame's change lists stood before a batch, so that taking the
  // batch back leaves no trace in them. Lists what was swept so far first.
  struct ListsMark {
    size_t moved;
    size_t created;
  };
  ListsMark MarkLists();
  SavedLocal SaveLocal(Index i) const;
  void RestoreLocal(Index i, const SavedLocal& saved);
  void RecordUndo(const Command& command, std::vector<UndoStep>* steps) const;
  // Undoes `steps` (recorded for a batch already applied), propagates, puts
  // the change lists back to `mark`, and returns `refusal`.
  absl::Status TakeBack(absl::Span<const UndoStep> steps, ListsMark mark,
                        absl::Status refusal);
  using Range = internal::SweepRange;
  // Lists what swept_ recomputed in moved_slots_, which survive relocation;
  // called by the primitives above just before they relocate instances.
  void ListSwept();
  // Apply's commands in order, each recorded in `undo` first (creates in
  // runs); the first walk over --max_ancestor_walk refuses the rest.
  absl::Status ApplyEach(absl::Span<const Command> batch,
                         std::vector<UndoStep>* undo);
  // FromImage's parts: the image's columns taken and each row checked;
  // then subtree sizes from the parents, and the order checked pre-order.
  absl::Status AdoptImageRows(WorldImage& image);
  absl::Status SizeSubtreesOfPreOrder();
  // EndFrame's parts: what moved (swept, and moved_slots_), what was
  // created, what was destroyed or re-parented, into `changes`.
  void EmitMoved(Index i, FrameChanges* changes) const;
  void ListFrameMoves(FrameChanges* changes);
  void ListCreated(FrameChanges* changes);
  void ListDestroyedAndReparented(FrameChanges* changes) const;

  // Per-instance columns, in pre-order.
  internal::Column<Index> parent_;           // kNoIndex for roots.
  internal::Column<uint32_t> subtree_size_;  // Including the instance itself.
  // The local TRS: rotation and scale as given (normalized), and the composed
  // matrix, whose translation is the position. Propagation reads only the
  // matrix, so a parent's move costs its descendants one product each.
  internal::Column<glm::quat> rotation_;
  internal::Column<glm::vec3> scale_;
  internal::Column<Matrix3x4> local_;
  internal::Column<Matrix3x4> world_;
  internal::Column<Slot> slot_;
  // kMovedThisFrame, kCreatedThisFrame.
  internal::Column<uint8_t> frame_flags_;

  // Per-slot columns.
  internal::Column<Index> slot_index_;  // kNoIndex for a free slot.
  internal::Column<EntityId> slot_entity_;
  // kDirty: a subtree root to recompute.
  internal::Column<uint8_t> slot_flags_;
  std::vector<Slot> free_slots_;
  // Freed this frame; reusable after EndFrame so moved_slots_ stays unique.
  std::vector<Slot> freed_this_frame_;

  // Each id's slot: an array for dense ids (one load, no hash), see
  // internal/id_index.h. An id claimed by a batch being validated maps to
  // kClaimed until the batch applies.
  static constexpr Slot kClaimed = internal::IdIndex::kAbsent - 1;
  static_assert(internal::kNoIndex == internal::IdIndex::kAbsent);
  internal::IdIndex slot_of_;

  // This batch's subtree roots to recompute.
  std::vector<Slot> dirty_roots_;

  // Set between BeginRestructure and EndRestructure, inside one batch (so a
  // copy of the world never shares it).
  std::shared_ptr<internal::SiblingLists> restructuring_;
  // kRestructureAt; tests set it to compare the two ways of applying.
  size_t restructure_at_ = kRestructureAt;

  // Ancestors this batch's walks to the root passed (ExactWorld's, and the
  // validator's cycle checks), and how many they may.
  mutable uint64_t walked_ = 0;
  uint64_t max_ancestor_walk_ = UINT64_MAX;
  // ResourceExhausted when walked_ is past the limit, else OK.
  absl::Status CheckWalked() const;

  // This frame's changes so far. A sweep does no bookkeeping per instance:
  // it records its ranges in swept_, which stay valid until a structural
  // change relocates instances, so only then are they listed by slot.
  uint64_t frame_ = 1;
  std::vector<Range> swept_;
  std::vector<Slot> moved_slots_;    // Excluding created ones.
  std::vector<Slot> created_slots_;  // Created in this frame.
  absl::flat_hash_map<EntityId, FrameStart> frame_start_;

  WorldStats stats_;
};

}  // namespace xform

#endif  // XFORM_WORLD_H_
