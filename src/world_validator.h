// Copyright 2026 The xform Authors.
//
// BatchValidator checks a batch command by command against the state the
// earlier commands would leave, without changing the world: an overlay holds
// only the entities the batch touches structurally, and everything else is
// read from the world. So a batch is refused whole, before any of it applies.

#ifndef XFORM_SRC_WORLD_VALIDATOR_H_
#define XFORM_SRC_WORLD_VALIDATOR_H_

#include <cstddef>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "xform/world.h"

namespace xform {

class BatchValidator {
 public:
  explicit BatchValidator(const World& world) : world_(world) {}

  // Checks command `index` of the batch and, when it is valid, records its
  // effect for the commands after it.
  absl::Status Check(size_t index, const Command& command);

 private:
  struct Node {
    bool alive = true;
    // Created in this batch: the world's children of an entity with the same
    // id (destroyed earlier in the batch) are not its children.
    bool fresh = false;
    EntityId parent = kNoEntity;
  };

  absl::Status CheckCreate(const CreateOp& op);
  absl::Status CheckDestroy(const DestroyOp& op);
  absl::Status CheckLink(const LinkOp& op);
  absl::Status CheckTransformTarget(EntityId entity, const Transform& t);

  bool Exists(EntityId entity) const;
  EntityId ParentOf(EntityId entity) const;  // Requires Exists(entity).
  std::vector<EntityId> ChildrenOf(EntityId entity) const;
  Node& Touch(EntityId entity);  // The overlay node, made from the world's.
  void SetParent(EntityId entity, EntityId parent);
  // Whether `ancestor` is `entity` or above it, as the batch so far leaves
  // them. Walks up only through what the batch touched: an untouched entity
  // whose world ancestors are untouched too is answered from the world's
  // pre-order ranges in O(log touched), whatever its depth.
  bool IsAncestorOrSelf(EntityId ancestor, EntityId entity) const;
  // Whether world index `i` is in the world subtree of a touched entity.
  bool InTouchedSubtree(World::Index i) const;

  const World& world_;
  absl::flat_hash_map<EntityId, Node> nodes_;
  // Entities given a new parent in this batch, by that parent. May hold stale
  // entries; ChildrenOf() checks each against nodes_.
  absl::flat_hash_map<EntityId, std::vector<EntityId>> adopted_;
  // The world index ranges (first -> end) of the touched entities' world
  // subtrees, merged: ranges of one pre-order nest or are disjoint.
  std::map<World::Index, World::Index> touched_ranges_;
};

}  // namespace xform

#endif  // XFORM_SRC_WORLD_VALIDATOR_H_
